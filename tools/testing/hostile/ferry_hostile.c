// SPDX-License-Identifier: GPL-2.0
/*
 * ferry_hostile: a peer that breaks ferry's protocol on purpose, for the
 * hostile-peer test case (test builds of ferry only: ferry_test_misbehave()).
 *
 * As a client (peer=ADDR port=PORT service=NAME fault=1..5 or 9) it opens a
 * session of one channel, commits the fault (see include/ferry/ferry_test.h)
 * and waits for the peer to close the connection; the load fails if it does
 * not within 10 s. It logs "ferry_hostile: fault N: closed by the peer after
 * M ms". With fault=11 its own side plays a driver that takes a request's
 * registrations and refuses its send: the connection must fail here, and the
 * request end once with an error. With fault=13 (and key=NAME) or 14 it
 * resets its channel 0 and waits for the reconnect to come up (within 60 s):
 * fault 13's first attempt replays its last hello's proof of the key, fault
 * 14's opens two channels that each take 6 s before they build their QPs
 * and 6 s more before they connect. It logs
 * "ferry_hostile: fault N: up K time(s) in M ms".
 *
 * As a service (serve=1 fault=6, 7 or 8) it offers "hostile" and serves
 * requests with data, but RDMAs with a forged key (6) or beyond the region
 * it was given (8) on the first one, or with the previous request's key (7)
 * on the second one; with fault=12 the first transfer's work requests are
 * posted as a driver that refuses the last one would. With fault=10 it
 * forges the server's proof of the pre-shared key in the hello reply of
 * each session it accepts.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/highmem.h>
#include <linux/delay.h>
#include <linux/inet.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include <ferry/ferry_test.h>

static char *peer;
module_param(peer, charp, 0444);
MODULE_PARM_DESC(peer, "The victim's IPv4 or IPv6 address (client mode)");
static ushort port = 4791;
module_param(port, ushort, 0444);
MODULE_PARM_DESC(port, "The victim's ferry listener port");
static char *service = "echo";
module_param(service, charp, 0444);
MODULE_PARM_DESC(service, "The victim's service");
static uint fault;
module_param(fault, uint, 0444);
MODULE_PARM_DESC(fault, "The breach to commit (enum ferry_fault)");
static char *key;
module_param(key, charp, 0444);
MODULE_PARM_DESC(key, "The pre-shared key to prove (client mode)");
static bool serve;
module_param(serve, bool, 0444);
MODULE_PARM_DESC(serve, "Offer the service \"hostile\" and commit the fault while serving");

#define WAIT_MS	10000

/* --- client mode --------------------------------------------------------- */

struct victim {
	wait_queue_head_t wq;
	atomic_t up, down, done;
	int err;
};

static void victim_up(struct ferry_session *s, void *priv)
{
	struct victim *v = priv;

	atomic_inc(&v->up);
	wake_up(&v->wq);
}

static void victim_message(struct ferry_session *s, void *priv, const void *data,
			   size_t len)
{
}

static void victim_down(struct ferry_session *s, void *priv, int err)
{
	struct victim *v = priv;

	v->err = err;
	atomic_set(&v->down, 1);
	wake_up(&v->wq);
}

static const struct ferry_ops victim_ops = {
	.up = victim_up,
	.message = victim_message,
	.down = victim_down,
};

static void rq_done(struct ferry_request *rq)
{
	struct victim *v = rq->priv;

	atomic_inc(&v->done);
	wake_up(&v->wq);
}

/* Fault 11's request data: beyond the inline size, so it is registered. */
#define CUT_PAGES 4

static void free_pages_of(struct scatterlist *sgl)
{
	int i;

	for (i = 0; i < CUT_PAGES; i++)
		if (sg_page(&sgl[i]))
			__free_page(sg_page(&sgl[i]));
}

static int attack(void)
{
	static const char msg[64] = "hostile";
	struct ferry_session_params p = {
		.service = service,
		.channels = fault == FERRY_FAULT_SLOW_CHANNELS ? 2 : 1,
		.key = key,
	};
	struct ferry_request rq = { .hdr = msg, .hdr_len = 16, .done = rq_done };
	struct scatterlist sgl[CUT_PAGES];
	struct ferry_session *s;
	struct victim *v;
	char port_str[8];
	unsigned long t0;
	int ret, i;

	snprintf(port_str, sizeof(port_str), "%u", port);
	ret = inet_pton_with_scope(&init_net, AF_UNSPEC, peer, port_str, &p.peer);
	if (ret)
		return ret;
	v = kzalloc(sizeof(*v), GFP_KERNEL);
	if (!v)
		return -ENOMEM;
	init_waitqueue_head(&v->wq);
	rq.priv = v;
	sg_init_table(sgl, CUT_PAGES);
	if (fault == FERRY_FAULT_PARTIAL_POST) {
		for (i = 0; i < CUT_PAGES; i++) {
			struct page *pg = alloc_page(GFP_KERNEL | __GFP_ZERO);

			if (!pg) {
				free_pages_of(sgl);
				kfree(v);
				return -ENOMEM;
			}
			sg_set_page(&sgl[i], pg, PAGE_SIZE, 0);
		}
		rq.dir = FERRY_TO_PEER;
		rq.sgl = sgl;
		rq.nents = CUT_PAGES;
	}
	s = ferry_session_open(&p, &victim_ops, v);
	if (IS_ERR(s)) {
		free_pages_of(sgl);
		kfree(v);
		return PTR_ERR(s);
	}
	t0 = jiffies;
	ret = ferry_test_misbehave(s, fault);
	if (!ret && (fault == FERRY_FAULT_REPLAYED_CLIENT_PROOF ||
		     fault == FERRY_FAULT_SLOW_CHANNELS)) {
		/*
		 * Fault 13: the reconnect's first hello carries the proof of the
		 * key that the last one did: refused. The next attempt proves it
		 * afresh and is let in (up once more).
		 * Fault 14: the reconnect's channels 0 and 1 each take 6 s before
		 * they build their QPs and 6 s more before they connect; channel
		 * 1, made with channel 0, starts once it is up, and the attempt
		 * still succeeds, in about 25 s. (The wait is interruptible: a
		 * hung-task check may fire after 30 s.)
		 */
		long left;

		ret = ferry_reset_channel(s, 0);
		if (!ret) {
			left = wait_event_interruptible_timeout(v->wq, atomic_read(&v->up) >= 2,
								msecs_to_jiffies(6 * WAIT_MS));
			if (!left)
				ret = -ETIMEDOUT;
			else if (left < 0)
				ret = left;
		}
		pr_info("fault %u: up %d time(s) in %u ms (%d)\n", fault, atomic_read(&v->up),
			jiffies_to_msecs(jiffies - t0), ret);
		ferry_session_close(s);
		kfree(v);
		return ret;
	}
	if (!ret) {
		switch (fault) {
		case FERRY_FAULT_UNKNOWN_KIND:
		case FERRY_FAULT_LYING_LENGTH:
		case FERRY_FAULT_OVER_GRANT:
		case FERRY_FAULT_OVERSIZED:
			ret = ferry_send(s, msg, sizeof(msg), 0);
			break;
		case FERRY_FAULT_PARTIAL_POST:
			/* Until the region pool has grown: -EAGAIN. */
			for (i = 0; i < 500; i++) {
				ret = ferry_submit(s, &rq, 0);
				if (ret != -EAGAIN)
					break;
				msleep(10);
			}
			if (ret)
				atomic_set(&v->done, 1);
			break;
		case FERRY_FAULT_LYING_REQUEST:
			ret = ferry_submit(s, &rq, 0);
			if (ret)
				atomic_set(&v->done, 1);
			break;
		default:
			atomic_set(&v->done, 1);
		}
	}
	if (!ret && !wait_event_timeout(v->wq, atomic_read(&v->down),
					msecs_to_jiffies(WAIT_MS)))
		ret = -ETIMEDOUT;
	if (!ret)
		pr_info("fault %u: closed by the peer after %u ms (%d)\n", fault,
			jiffies_to_msecs(jiffies - t0), v->err);
	else
		pr_err("fault %u: the peer did not close the connection: %d\n", fault, ret);
	/* No callback runs once this returns: @v and @rq may go. */
	ferry_session_close(s);
	if (fault == FERRY_FAULT_LYING_REQUEST && !atomic_read(&v->done))
		ret = ret ?: -EIO;
	/*
	 * Fault 11 fails the connection on this side: its request, whose send
	 * never left, must have ended once, with an error, and only after its
	 * registrations were gone (the pages go back below).
	 */
	if (fault == FERRY_FAULT_PARTIAL_POST) {
		pr_info("fault %u: the request ended %d time(s), status %d\n", fault,
			atomic_read(&v->done), rq.status);
		if (atomic_read(&v->done) != 1 || rq.status >= 0)
			ret = ret ?: -EIO;
	}
	free_pages_of(sgl);
	kfree(v);
	return ret;
}

/* --- service mode -------------------------------------------------------- */

static struct ferry_service *hostile_service;
static atomic_t served;

struct serving {
	struct sg_table data;
};

static void serving_free(struct serving *sv)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_sg(&sv->data, sg, i)
		if (sg_page(sg))
			__free_page(sg_page(sg));
	sg_free_table(&sv->data);
	kfree(sv);
}

static void serve_done(struct ferry_incoming *in, void *ctx, int status)
{
	serving_free(ctx);
	pr_info("transfer done: %d\n", status);
	ferry_respond(in, status, NULL, 0);
}

static void hostile_request(struct ferry_session *s, void *priv,
			    struct ferry_incoming *in)
{
	u32 len = ferry_incoming_data_len(in), n = DIV_ROUND_UP(len, PAGE_SIZE), i;
	int nth = atomic_inc_return(&served), ret = -ENOMEM;
	struct scatterlist *sg;
	struct serving *sv;

	if (!len || len > (4 << 20)) {
		ferry_respond(in, -EINVAL, NULL, 0);
		return;
	}
	sv = kzalloc(sizeof(*sv), GFP_KERNEL);
	if (!sv || sg_alloc_table(&sv->data, n, GFP_KERNEL)) {
		kfree(sv);
		goto fail;
	}
	for_each_sg(sv->data.sgl, sg, n, i) {
		struct page *pg = alloc_page(GFP_KERNEL | __GFP_ZERO);

		if (!pg) {
			serving_free(sv);
			goto fail;
		}
		sg_set_page(sg, pg, min_t(u32, PAGE_SIZE, len - i * PAGE_SIZE), 0);
	}
	if ((fault == FERRY_FAULT_STALE_KEY && nth == 2) ||
	    (fault != FERRY_FAULT_STALE_KEY && nth == 1)) {
		pr_info("request %d: committing fault %u\n", nth, fault);
		ferry_test_misbehave(s, fault);
	}
	if (ferry_incoming_dir(in) == FERRY_FROM_PEER)
		ret = ferry_rdma_write(in, sv->data.sgl, n, serve_done, sv);
	else
		ret = ferry_rdma_read(in, sv->data.sgl, n, serve_done, sv);
	if (!ret)
		return;
	serving_free(sv);
fail:
	ferry_respond(in, ret, NULL, 0);
}

static void hostile_message(struct ferry_session *s, void *priv, const void *data,
			    size_t len)
{
}

/* Fault 10: a listener that requires a key, answering as if it held another. */
static int hostile_accept(struct ferry_session *s, void *service_priv, void **priv)
{
	*priv = NULL;
	if (fault == FERRY_FAULT_FORGED_SERVER_PROOF)
		return ferry_test_misbehave(s, fault);
	return 0;
}

static const struct ferry_ops hostile_ops = {
	.accept = hostile_accept,
	.message = hostile_message,
	.request = hostile_request,
};

static int __init hostile_init(void)
{
	if (serve) {
		hostile_service = ferry_service_register("hostile", &hostile_ops, NULL);
		return PTR_ERR_OR_ZERO(hostile_service);
	}
	if (!peer)
		return -EINVAL;
	return attack();
}

static void __exit hostile_exit(void)
{
	if (hostile_service)
		ferry_service_unregister(hostile_service);
}

module_init(hostile_init);
module_exit(hostile_exit);
MODULE_DESCRIPTION("ferry test: a peer that breaks the protocol on purpose");
MODULE_AUTHOR("The ferry authors");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS("FERRY");
