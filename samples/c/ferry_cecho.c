// SPDX-License-Identifier: GPL-2.0
/*
 * ferry_cecho: an echo service and client over ferry, in C.
 *
 * Loaded, it offers the service "cecho": every message that arrives goes
 * back to its sender unchanged. Given peer=, it also runs a client once at
 * load: it opens a session to service= (default "echo", the Rust sample's)
 * at peer=ADDR port=PORT, sends count= messages of every size class the
 * session allows, and checks every echo byte for byte; the load fails if one
 * is missing or wrong. Messages carry the check samples/README.md describes.
 *
 * With requests=N, the client then sends N requests that move data with
 * zero-copy RDMA: writes (the service reads the client's pages and checks
 * them) and reads (the service writes a pattern into the client's pages,
 * which the client checks), of 4 KiB to 4 MiB, rq_window at a time.
 *
 * With atomic=1 the client sends and submits as a driver's atomic path
 * would: under a spinlock with interrupts off, with FERRY_NOWAIT; refused
 * (a full queue), it waits outside the lock for @writable or a completion
 * and tries again. tagged=1 adds FERRY_TAGGED with the slot's index as the
 * tag; with rq_reset the reset runs on a work item, racing the submits.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/highmem.h>
#include <linux/inet.h>
#include <linux/scatterlist.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/unaligned.h>
#include <linux/workqueue.h>
#include <linux/wait.h>
#include <ferry/ferry.h>

static char *peer;
module_param(peer, charp, 0444);
MODULE_PARM_DESC(peer, "Run the client against this IPv4 or IPv6 address");
static ushort port = 4791;
module_param(port, ushort, 0444);
MODULE_PARM_DESC(port, "The peer's ferry listener port");
static char *service = "echo";
module_param(service, charp, 0444);
MODULE_PARM_DESC(service, "The service the client talks to");
static uint count = 1000;
module_param(count, uint, 0444);
MODULE_PARM_DESC(count, "Messages the client sends");
static uint max_msg;
module_param(max_msg, uint, 0444);
MODULE_PARM_DESC(max_msg, "The client session's largest message (0: ferry's default)");
static uint inline_size;
module_param(inline_size, uint, 0444);
MODULE_PARM_DESC(inline_size, "The client session's inline data size (0: ferry's default, 4294967295: none)");
static uint depth;
module_param(depth, uint, 0444);
MODULE_PARM_DESC(depth, "The client session's queue depth (0: ferry's default)");
static uint window = 8;
module_param(window, uint, 0444);
MODULE_PARM_DESC(window, "Echoes the client keeps in flight");
static bool hold;
module_param(hold, bool, 0444);
MODULE_PARM_DESC(hold, "Keep the client's session open until the module unloads");
static uint requests;
module_param(requests, uint, 0444);
MODULE_PARM_DESC(requests, "Requests with data the client sends after its messages");
static uint rq_window = 8;
module_param(rq_window, uint, 0444);
MODULE_PARM_DESC(rq_window, "Requests the client keeps in flight (at most 64)");
static uint rq_min = 4096;
module_param(rq_min, uint, 0444);
MODULE_PARM_DESC(rq_min, "The smallest request data, in bytes (4 KiB to rq_max)");
static uint rq_max = 4 << 20;
module_param(rq_max, uint, 0444);
MODULE_PARM_DESC(rq_max, "The largest request data, in bytes (4 KiB to the session's max_data)");
static uint wait_ms = 20000;
module_param(wait_ms, uint, 0444);
MODULE_PARM_DESC(wait_ms, "How long the client waits for an echo or a request's end, in ms");
static uint rq_chunk = 1;
module_param(rq_chunk, uint, 0444);
MODULE_PARM_DESC(rq_chunk, "Pages per scatterlist entry of request data, 1 to 4 (an entry of several pages may straddle two registrations)");
static uint rq_dir;
module_param(rq_dir, uint, 0444);
MODULE_PARM_DESC(rq_dir, "0: writes and reads by turns, 1: writes only, 2: reads only");
static bool nowait;
module_param(nowait, bool, 0444);
MODULE_PARM_DESC(nowait, "The client sends with FERRY_NOWAIT and, refused, waits for @writable");
static uint rq_reset;
module_param(rq_reset, uint, 0444);
MODULE_PARM_DESC(rq_reset, "Reset the client's channel (ferry_reset_channel()) after this many requests, with a window in flight; 0: never");
static bool refuse;
module_param(refuse, bool, 0444);
MODULE_PARM_DESC(refuse, "The service refuses every session (to see the client's error)");
static bool poll;
module_param(poll, bool, 0444);
MODULE_PARM_DESC(poll, "The client sends on a polled channel and waits by polling it (ferry_poll_channel()), not asleep");
static bool atomic;
module_param(atomic, bool, 0444);
MODULE_PARM_DESC(atomic, "The client sends and submits under a spinlock with interrupts off (FERRY_NOWAIT)");
static bool tagged;
module_param(tagged, bool, 0444);
MODULE_PARM_DESC(tagged, "With atomic=1: requests carry their slot as tag (FERRY_TAGGED, on one channel)");
static bool preregister;
module_param(preregister, bool, 0444);
MODULE_PARM_DESC(preregister, "The client's channels register their whole region pool when built (FERRY_PREREGISTER)");

#define CHECK_LEN	16	/* seq, length, FNV-1a hash */

/* With poll=1: completions the client's polling calls processed. */
static u64 polled;
/* With poll=1: the polled channel the client sends on. */
static u16 poll_qid;
/* With poll=1: poll_qid is known, and polled alone (ferry_poll_channel()). */
static bool poll_qid_known;

/* With atomic=1: what the client holds, interrupts off, as it sends. */
static DEFINE_SPINLOCK(atomic_lock);

/* The client's sends: on its polled channel with poll=1. */
static int client_send(struct ferry_session *s, const void *data, size_t len,
		       unsigned int flags)
{
	unsigned long irq;
	int ret;

	if (!atomic)
		return poll ? ferry_send_on(s, poll_qid, data, len, flags) :
			      ferry_send(s, data, len, flags);
	spin_lock_irqsave(&atomic_lock, irq);
	ret = poll ? ferry_send_on(s, poll_qid, data, len, flags | FERRY_NOWAIT) :
		     ferry_send(s, data, len, flags | FERRY_NOWAIT);
	spin_unlock_irqrestore(&atomic_lock, irq);
	return ret;
}

static int client_submit(struct ferry_session *s, struct ferry_request *rq,
			 unsigned int flags)
{
	unsigned long irq;
	int ret;

	if (!atomic)
		return poll ? ferry_submit_on(s, poll_qid, rq, flags) :
			      ferry_submit(s, rq, flags);
	flags |= FERRY_NOWAIT;
	spin_lock_irqsave(&atomic_lock, irq);
	if (tagged || poll)
		ret = ferry_submit_on(s, poll ? poll_qid : 0, rq,
				      flags | (tagged ? FERRY_TAGGED : 0));
	else
		ret = ferry_submit(s, rq, flags);
	spin_unlock_irqrestore(&atomic_lock, irq);
	return ret;
}

/*
 * Waits up to @ms for @cond: asleep on @wq until a callback wakes it, or with
 * poll=1 spinning on ferry_poll_channel(@s, poll_qid) (ferry_poll(@s) until
 * the session is open), which runs the session's callbacks in this thread. True if @cond came true. The sleep is TASK_IDLE: a transfer
 * of many megabytes on a slow (debug) kernel may take longer than the hung
 * task detector's 30 s without anything being stuck.
 */
#define client_wait(s, wq, cond, ms)					\
({									\
	unsigned long __end = jiffies + msecs_to_jiffies(ms);		\
	bool __ok;							\
									\
	if (!poll) {							\
		__ok = wait_event_idle_timeout(wq, cond, msecs_to_jiffies(ms)); \
	} else {							\
		while (!(__ok = (cond)) && time_before(jiffies, __end)) { \
			int __n = poll_qid_known ?			\
				ferry_poll_channel(s, poll_qid, 64) :	\
				ferry_poll(s);				\
									\
			polled += __n;					\
			if (!__n)					\
				cond_resched();				\
		}							\
	}								\
	__ok;								\
})

static const size_t size_classes[] = { 64, 256, 1024, 4096, 16384, 65536 };
static const u32 data_classes[] = { 4096, 65536, 1 << 20, 4 << 20 };

/* A request's header: what to do with how much data, and the pattern's seed. */
struct data_hdr {
	__le32 op;		/* DATA_WRITE or DATA_READ */
	__le32 len;
	__le64 seed;
};
#define DATA_WRITE	1	/* the service reads the client's pages */
#define DATA_READ	2	/* the service writes into them */

/* The data pattern of @seed: 64-bit xorshift words. */
static void pattern(struct sg_table *t, u32 len, u64 seed, bool check, bool *ok)
{
	u64 x = seed * 0x9e3779b97f4a7c15ULL | 1;
	struct scatterlist *sg;
	u32 done = 0;
	int i;

	for_each_sgtable_sg(t, sg, i) {
		u64 *p = kmap_local_page(sg_page(sg));
		u32 n = min(sg->length, len - done) / 8, j;

		for (j = 0; j < n; j++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			if (!check)
				p[j] = x;
			else if (p[j] != x)
				*ok = false;
		}
		kunmap_local(p);
		done += n * 8;
		if (done >= len)
			break;
	}
}

/* Pages per entry of request data, and the order of their allocation. */
static u32 chunk_pages(void)
{
	return clamp(rq_chunk, 1U, 4U);
}

static unsigned int chunk_order(void)
{
	return chunk_pages() > 1 ? 2 : 0;
}

/*
 * @len bytes of fresh pages in an sg_table, rq_chunk pages per entry;
 * freed with free_data().
 */
static int alloc_data(struct sg_table *t, u32 len)
{
	u32 chunk = chunk_pages() * PAGE_SIZE;
	u32 n = DIV_ROUND_UP(len, chunk), i;
	struct scatterlist *sg;
	int ret;

	ret = sg_alloc_table(t, n, GFP_KERNEL);
	if (ret)
		return ret;
	for_each_sg(t->sgl, sg, n, i) {
		struct page *pg = alloc_pages(GFP_KERNEL, chunk_order());

		if (!pg) {
			t->orig_nents = t->nents = i;
			return -ENOMEM;
		}
		sg_set_page(sg, pg, min_t(u32, chunk, len - i * chunk), 0);
	}
	return 0;
}

static void free_data(struct sg_table *t)
{
	struct scatterlist *sg;
	int i;

	for_each_sgtable_sg(t, sg, i)
		if (sg_page(sg))
			__free_pages(sg_page(sg), chunk_order());
	sg_free_table(t);
}

static u64 fnv1a(const u8 *p, size_t len)
{
	u64 h = 0xcbf29ce484222325ULL;

	while (len--)
		h = (h ^ *p++) * 0x100000001b3ULL;
	return h;
}

/* Message @seq of @len bytes: the check, then a pattern from @seq. */
static void fill(u8 *msg, size_t len, u32 seq)
{
	u64 x = ((u64)seq * 0x9e3779b97f4a7c15ULL) | 1;
	size_t i;

	for (i = CHECK_LEN; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		msg[i] = (u8)x;
	}
	put_unaligned_le32(seq, msg);
	put_unaligned_le32(len, msg + 4);
	put_unaligned_le64(fnv1a(msg + CHECK_LEN, len - CHECK_LEN), msg + 8);
}

/* Whether a message's length and hash agree with its check; sets *@seq. */
static bool verify(const u8 *msg, size_t len, u32 *seq)
{
	if (len < CHECK_LEN || get_unaligned_le32(msg + 4) != len)
		return false;
	*seq = get_unaligned_le32(msg);
	return get_unaligned_le64(msg + 8) == fnv1a(msg + CHECK_LEN, len - CHECK_LEN);
}

/* --- the service ------------------------------------------------------- */

/* One session of the service: echoes wait here when credits run out. */
struct cecho_session {
	struct mutex lock;	/* ferry_send() may sleep: not a spinlock */
	struct list_head pending;
	u64 echoed, bad, deferred;
};

struct pending_echo {
	struct list_head node;
	size_t len;
	u8 data[];
};

static struct ferry_service *cecho_service;
/* With hold=1: the client's session and its context, closed at unload. */
static struct ferry_session *held;
static void *held_client;

static int cecho_accept(struct ferry_session *s, void *service_priv, void **priv)
{
	struct cecho_session *cs;

	if (refuse)
		return -EPERM;
	cs = kzalloc(sizeof(*cs), GFP_KERNEL);
	if (!cs)
		return -ENOMEM;
	mutex_init(&cs->lock);
	INIT_LIST_HEAD(&cs->pending);
	*priv = cs;
	pr_info("session %u: accepted\n", ferry_session_id(s));
	return 0;
}

/* Sends waiting echoes in order while credits last. Caller holds cs->lock. */
static void cecho_flush(struct ferry_session *s, struct cecho_session *cs)
{
	struct pending_echo *p, *tmp;

	list_for_each_entry_safe(p, tmp, &cs->pending, node) {
		int ret = ferry_send(s, p->data, p->len, FERRY_NOWAIT);

		if (ret == -EAGAIN)
			return;		/* ->writable comes when credits do */
		if (ret)
			pr_warn("session %u: echo failed: %d\n", ferry_session_id(s), ret);
		else
			cs->echoed++;
		list_del(&p->node);
		kfree(p);
	}
}

static void cecho_message(struct ferry_session *s, void *priv, const void *data,
			  size_t len)
{
	struct cecho_session *cs = priv;
	struct pending_echo *p;
	u32 seq;
	int ret;

	if (!verify(data, len, &seq)) {
		cs->bad++;
		pr_warn("session %u: a message failed its check\n", ferry_session_id(s));
	}
	mutex_lock(&cs->lock);
	if (list_empty(&cs->pending)) {
		ret = ferry_send(s, data, len, FERRY_NOWAIT);
		if (!ret) {
			cs->echoed++;
			goto out;
		}
		if (ret != -EAGAIN) {
			pr_warn("session %u: echo failed: %d\n", ferry_session_id(s), ret);
			goto out;
		}
	}
	/* Echoes leave in arrival order: behind any that wait. */
	p = kmalloc(struct_size(p, data, len), GFP_KERNEL);
	if (!p) {
		pr_warn("session %u: out of memory, an echo is lost\n", ferry_session_id(s));
		goto out;
	}
	p->len = len;
	memcpy(p->data, data, len);
	list_add_tail(&p->node, &cs->pending);
	cs->deferred++;
out:
	mutex_unlock(&cs->lock);
}

static void cecho_writable(struct ferry_session *s, void *priv, u16 qid)
{
	struct cecho_session *cs = priv;

	mutex_lock(&cs->lock);
	cecho_flush(s, cs);
	mutex_unlock(&cs->lock);
}

static void cecho_gone(struct ferry_session *s, void *priv, int err)
{
	struct cecho_session *cs = priv;
	struct pending_echo *p, *tmp;

	pr_info("session %u gone (%d): %llu echoed, %llu failed their check, %llu waited for credits\n",
		ferry_session_id(s), err, cs->echoed, cs->bad, cs->deferred);
	list_for_each_entry_safe(p, tmp, &cs->pending, node)
		kfree(p);
	mutex_destroy(&cs->lock);
	kfree(cs);
}

/* A request the service is serving. */
struct serving {
	struct sg_table data;
	struct data_hdr hdr;
	u32 len;
};

static void serve_done(struct ferry_incoming *in, void *ctx, int status)
{
	struct serving *sv = ctx;
	bool ok = true;

	if (!status && le32_to_cpu(sv->hdr.op) == DATA_WRITE) {
		pattern(&sv->data, sv->len, le64_to_cpu(sv->hdr.seed), true, &ok);
		if (!ok) {
			pr_warn("a write's data failed its check\n");
			status = -EIO;
		}
	}
	free_data(&sv->data);
	kfree(sv);
	/* A read's answer went with its data (ferry_rdma_write_respond()). */
	if (in)
		ferry_respond(in, status, NULL, 0);
}

static void cecho_request(struct ferry_session *s, void *priv,
			  struct ferry_incoming *in)
{
	const struct data_hdr *h;
	struct serving *sv;
	u32 hlen;
	int ret;

	h = ferry_incoming_header(in, &hlen);
	if (hlen != sizeof(*h) || le32_to_cpu(h->len) != ferry_incoming_data_len(in)) {
		ferry_respond(in, -EINVAL, NULL, 0);
		return;
	}
	sv = kzalloc(sizeof(*sv), GFP_KERNEL);
	if (!sv) {
		ferry_respond(in, -ENOMEM, NULL, 0);
		return;
	}
	sv->hdr = *h;
	sv->len = le32_to_cpu(h->len);
	ret = alloc_data(&sv->data, sv->len);
	if (ret)
		goto fail;
	if (le32_to_cpu(h->op) == DATA_READ) {
		pattern(&sv->data, sv->len, le64_to_cpu(h->seed), false, NULL);
		/* The answer goes right behind the data. */
		ret = ferry_rdma_write_respond(in, sv->data.sgl, sv->data.nents, 0, NULL, 0,
					       serve_done, sv);
	} else {
		ret = ferry_rdma_read(in, sv->data.sgl, sv->data.nents, serve_done, sv);
	}
	if (!ret)
		return;
fail:
	free_data(&sv->data);
	kfree(sv);
	ferry_respond(in, ret, NULL, 0);
}

static const struct ferry_ops cecho_ops = {
	.accept = cecho_accept,
	.message = cecho_message,
	.writable = cecho_writable,
	.gone = cecho_gone,
	.request = cecho_request,
};

/* --- the client -------------------------------------------------------- */

struct client {
	wait_queue_head_t wq;
	atomic_t received, wrong;
	atomic_t writable;	/* @writable calls (nowait=1) */
	u32 missed;		/* refusals no @writable followed within 2 s */
	size_t max;		/* the session's largest payload */
};

static size_t size_of(const struct client *c, u32 seq)
{
	return min(size_classes[seq % ARRAY_SIZE(size_classes)], c->max);
}

static void client_message(struct ferry_session *s, void *priv, const void *data,
			   size_t len)
{
	struct client *c = priv;
	bool ok = false;
	u8 *want;
	u32 seq;

	if (verify(data, len, &seq) && len == size_of(c, seq)) {
		/* Regenerate what was sent and compare every byte. */
		want = kmalloc(len, GFP_KERNEL);
		if (want) {
			fill(want, len, seq);
			ok = !memcmp(want, data, len);
			kfree(want);
		}
	}
	if (!ok)
		atomic_inc(&c->wrong);
	atomic_inc(&c->received);
	wake_up(&c->wq);
}

/* @up, @down and @gone are logged, so a case can check their order. */
static void client_up(struct ferry_session *s, void *priv)
{
	pr_info("client session %u: up\n", ferry_session_id(s));
}

static void client_down(struct ferry_session *s, void *priv, int err)
{
	pr_info("client session %u: down (%d)\n", ferry_session_id(s), err);
}

static void client_gone(struct ferry_session *s, void *priv, int err)
{
	pr_info("client session %u: gone (%d)\n", ferry_session_id(s), err);
}

static void client_writable(struct ferry_session *s, void *priv, u16 qid)
{
	struct client *c = priv;

	atomic_inc(&c->writable);
	wake_up(&c->wq);
}

static const struct ferry_ops client_ops = {
	.message = client_message,
	.up = client_up,
	.down = client_down,
	.gone = client_gone,
	.writable = client_writable,
};

/*
 * nowait=1: sends with FERRY_NOWAIT; refused for want of a credit, waits for
 * the @writable that must follow and tries again. Counts the refusals in
 * @refused, and in @c->missed those no @writable followed within 2 s.
 */
static int client_send_nowait(struct ferry_session *s, struct client *c,
			      const void *data, size_t len, u32 *refused)
{
	unsigned long end = jiffies + msecs_to_jiffies(wait_ms);
	int seen, ret;

	for (;;) {
		/* Read before the send: a @writable may come before it returns. */
		seen = atomic_read(&c->writable);
		ret = client_send(s, data, len, FERRY_NOWAIT);
		if (ret != -EAGAIN)
			return ret;
		(*refused)++;
		if (time_after(jiffies, end))
			return -ETIMEDOUT;
		if (!client_wait(s, c->wq, atomic_read(&c->writable) != seen, 2000))
			c->missed++;
	}
}

static int parse_peer(struct sockaddr_storage *ss)
{
	char port_str[8];

	snprintf(port_str, sizeof(port_str), "%u", port);
	return inet_pton_with_scope(&init_net, AF_UNSPEC, peer, port_str, ss);
}

/* One of the client's requests in flight. */
struct rq_slot {
	struct ferry_request rq;
	struct data_hdr hdr;
	struct sg_table data;
	struct client *c;
	u64 seed;
	bool busy;
};

struct rq_client {
	wait_queue_head_t wq;
	atomic_t done, wrong, failed;
	struct ferry_session *s;
	struct work_struct reset;	/* atomic=1: the reset that races */
	int reset_ret;
	atomic_t waited;		/* a @done tried a waiting send */
	struct rq_slot slots[64];
};

static void rq_reset_work(struct work_struct *w)
{
	struct rq_client *rc = container_of(w, struct rq_client, reset);

	rc->reset_ret = ferry_reset_channel(rc->s, poll ? poll_qid : 0);
}

static void rq_done(struct ferry_request *rq)
{
	struct rq_slot *sl = container_of(rq, struct rq_slot, rq);
	struct rq_client *rc = rq->priv;
	bool ok = true;

	if (!READ_ONCE(sl->busy)) {
		/* ferry promises one @done per request: a second is a bug. */
		pr_err("client: a request completed twice\n");
		atomic_inc(&rc->wrong);
		return;
	}
	if (rq->status) {
		pr_warn("client: request failed: %d\n", rq->status);
		atomic_inc(&rc->failed);
		/*
		 * The first failed request asks for a send that would wait
		 * (the session reconnects): a @done is a ferry callback, so
		 * -EDEADLK at once, not a wait for a reconnect that waits for
		 * this very teardown.
		 */
		if (!atomic && atomic_inc_return(&rc->waited) == 1) {
			u64 start = ktime_get_ns();
			u8 byte = 0;
			int ret = ferry_send(rc->s, &byte, 1, 0);

			pr_info("client: a waiting send from a failed request's @done: %d after %llu ms\n",
				ret, div_u64(ktime_get_ns() - start, NSEC_PER_MSEC));
		}
	} else if (le32_to_cpu(sl->hdr.op) == DATA_READ) {
		pattern(&sl->data, le32_to_cpu(sl->hdr.len), sl->seed, true, &ok);
		if (!ok || rq->moved != le32_to_cpu(sl->hdr.len))
			atomic_inc(&rc->wrong);
	}
	free_data(&sl->data);
	WRITE_ONCE(sl->busy, false);
	atomic_inc(&rc->done);
	wake_up(&rc->wq);
}

/* Sends @n requests with data, @window at a time; checks every byte. */
static int run_requests(struct ferry_session *s, u32 n, u32 window, u32 max_data)
{
	struct rq_client *rc;
	u32 i, sent = 0, max = clamp_t(u32, rq_max, 4096, max_data);
	u32 smallest = clamp_t(u32, rq_min, 4096, max);
	u64 bytes = 0;
	int ret = 0;

	unsigned long end;
	u32 full = 0;

	window = clamp_t(u32, window, 1, ARRAY_SIZE(rc->slots));
	rc = kzalloc(sizeof(*rc), GFP_KERNEL);
	if (!rc)
		return -ENOMEM;
	init_waitqueue_head(&rc->wq);
	rc->s = s;
	INIT_WORK(&rc->reset, rq_reset_work);
	for (i = 0; i < n; i++) {
		struct rq_slot *sl = NULL;
		u32 len = clamp(data_classes[(i / 2) % ARRAY_SIZE(data_classes)],
				 smallest, max);
		bool write = rq_dir ? rq_dir == 1 : !(i % 2);
		u32 k;

		if (!client_wait(s, rc->wq, i - atomic_read(&rc->done) < window, wait_ms)) {
			ret = -ETIMEDOUT;
			break;
		}
		for (k = 0; k < window; k++) {
			if (!READ_ONCE(rc->slots[k].busy)) {
				sl = &rc->slots[k];
				break;
			}
		}
		if (!sl) {
			ret = -EIO;
			break;
		}
		ret = alloc_data(&sl->data, len);
		if (ret)
			break;
		sl->seed = 0x5eed0000ULL + i;
		sl->hdr.op = cpu_to_le32(write ? DATA_WRITE : DATA_READ);
		sl->hdr.len = cpu_to_le32(len);
		sl->hdr.seed = cpu_to_le64(sl->seed);
		if (write)
			pattern(&sl->data, len, sl->seed, false, NULL);
		sl->rq = (struct ferry_request){
			.hdr = &sl->hdr,
			.hdr_len = sizeof(sl->hdr),
			.dir = write ? FERRY_TO_PEER : FERRY_FROM_PEER,
			.sgl = sl->data.sgl,
			.nents = sl->data.nents,
			.tag = k,
			.done = rq_done,
			.priv = rc,
		};
		sl->busy = true;
		/*
		 * atomic=1: refused (a full queue, or a reconnect after the
		 * reset), wait for a completion or @writable, outside the lock.
		 */
		end = jiffies + msecs_to_jiffies(wait_ms);
		while ((ret = client_submit(s, &sl->rq, 0)) == -EAGAIN && atomic &&
		       time_before(jiffies, end)) {
			u32 done = atomic_read(&rc->done);

			full++;
			client_wait(s, rc->wq, atomic_read(&rc->done) != done, 100);
		}
		if (ret) {
			pr_err("client: submit %u failed: %d\n", i, ret);
			free_data(&sl->data);
			sl->busy = false;
			break;
		}
		sent++;
		bytes += len;
		if (rq_reset && sent == rq_reset && atomic) {
			/* It races the submits that follow. */
			queue_work(system_unbound_wq, &rc->reset);
		} else if (rq_reset && sent == rq_reset) {
			/* As a blk-mq .timeout would: the requests in flight fail. */
			ret = ferry_reset_channel(s, poll ? poll_qid : 0);
			pr_info("client: reset after %u requests: %d\n", sent, ret);
			if (ret)
				break;
		}
	}
	if (rq_reset && atomic) {
		flush_work(&rc->reset);
		pr_info("client: reset after %u requests: %d\n", rq_reset, rc->reset_ret);
		if (!ret && rc->reset_ret)
			ret = rc->reset_ret;
	}
	if (atomic)
		pr_info("client: %u submits refused, the queue full or reconnecting\n", full);
	/* Every request ferry took completes, error or not. */
	client_wait(s, rc->wq, atomic_read(&rc->done) == sent, wait_ms);
	wait_event_idle(rc->wq, atomic_read(&rc->done) >= sent);
	pr_info("client: %u requests, %d done, %d wrong, %d failed, %llu bytes\n",
		sent, atomic_read(&rc->done), atomic_read(&rc->wrong),
		atomic_read(&rc->failed), bytes);
	/* A reset fails what was in flight then, and nothing else. */
	if (!ret && (sent != n || atomic_read(&rc->wrong) ||
		     atomic_read(&rc->failed) > (rq_reset ? window : 0U)))
		ret = -EIO;
	kfree(rc);
	return ret;
}

static int run_client(void)
{
	struct ferry_session_params p = {
		.service = service,
		.max_msg = max_msg,
		.inline_size = inline_size,
		.queue_depth = depth,
		.poll_channels = poll ? 1 : 0,
		.flags = preregister ? FERRY_PREREGISTER : 0,
	};
	struct ferry_limits limits;
	struct ferry_session *s;
	struct client *c;
	u8 *buf = NULL;
	u32 seq, refused = 0;
	int ret;

	ret = parse_peer(&p.peer);
	if (ret) {
		pr_err("client: bad address '%s'\n", peer);
		return ret;
	}
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	init_waitqueue_head(&c->wq);
	c->max = CHECK_LEN;	/* no echo is expected before the first send */

	s = ferry_session_open(&p, &client_ops, c);
	if (IS_ERR(s)) {
		ret = PTR_ERR(s);
		pr_err("client: open failed: %d\n", ret);
		goto free_client;
	}
	ret = ferry_session_limits(s, &limits);
	if (ret)
		goto close;
	c->max = limits.max_payload;
	poll_qid = limits.channels - limits.poll_channels;
	if (poll && limits.poll_channels) {
		/* Channel 0 is not polled: the call is refused. */
		if (poll_qid)
			pr_info("client: ferry_poll_channel() of an unpolled channel: %d\n",
				ferry_poll_channel(s, 0, 1));
		poll_qid_known = true;
	}
	pr_info("client: limits: channels %u poll_channels %u queue_depth %u max_payload %u max_data %u max_segments %u virt_boundary_mask %#x dma_alignment %u inline_size %u\n",
		limits.channels, limits.poll_channels, limits.queue_depth,
		limits.max_payload, limits.max_data, limits.max_segments,
		limits.virt_boundary_mask, limits.dma_alignment, limits.inline_size);
	buf = kmalloc(c->max, GFP_KERNEL);
	if (!buf) {
		ret = -ENOMEM;
		goto close;
	}
	for (seq = 0; seq < count; seq++) {
		size_t len = size_of(c, seq);

		if (!client_wait(s, c->wq, seq - atomic_read(&c->received) < window,
				 wait_ms)) {
			pr_err("client: no echo for %u ms\n", wait_ms);
			ret = -ETIMEDOUT;
			goto close;
		}
		fill(buf, len, seq);
		ret = nowait || atomic ? client_send_nowait(s, c, buf, len, &refused) :
			       client_send(s, buf, len, 0);
		if (ret) {
			pr_err("client: send %u failed: %d\n", seq, ret);
			goto close;
		}
	}
	client_wait(s, c->wq, atomic_read(&c->received) >= count, wait_ms);
	/* (Before the summary, which the tests read as the last line.) */
	if (nowait || atomic)
		pr_info("client: %u sends refused for want of a credit, %d writable, %u missed\n",
			refused, atomic_read(&c->writable), c->missed);
	pr_info("client: %u sent, %d echoed, %d wrong, sizes 64..%zu bytes, %u channels\n",
		count, atomic_read(&c->received), atomic_read(&c->wrong),
		min_t(size_t, c->max, 65536), limits.channels);
	if (atomic_read(&c->received) != count || atomic_read(&c->wrong))
		ret = -EIO;
	if (!ret && requests)
		ret = run_requests(s, requests, rq_window, limits.max_data);
	if (poll)
		pr_info("client: %llu completions polled\n", polled);
	if (!ret && hold) {
		held = s;
		held_client = c;
		kfree(buf);
		return 0;
	}
close:
	/* No callback runs once this returns: @c may go. */
	ferry_session_close(s);
	kfree(buf);
free_client:
	kfree(c);
	return ret;
}

static int __init cecho_init(void)
{
	int ret;

	cecho_service = ferry_service_register("cecho", &cecho_ops, NULL);
	if (IS_ERR(cecho_service))
		return PTR_ERR(cecho_service);
	if (peer) {
		ret = run_client();
		if (ret) {
			ferry_service_unregister(cecho_service);
			return ret;
		}
	}
	return 0;
}

static void __exit cecho_exit(void)
{
	if (held) {
		ferry_session_close(held);
		kfree(held_client);
	}
	ferry_service_unregister(cecho_service);
}

module_init(cecho_init);
module_exit(cecho_exit);
MODULE_DESCRIPTION("ferry sample: echo service and client in C");
MODULE_AUTHOR("The ferry authors");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS("FERRY");
