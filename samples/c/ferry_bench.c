// SPDX-License-Identifier: GPL-2.0
/*
 * ferry_bench: ferry's benchmark, as a consumer of ferry.h.
 *
 * Loaded, it offers the service "bench". Writing a mode to the "run"
 * parameter runs one benchmark against peer=ADDR port=PORT (which may be this
 * host, over a loopback RDMA device) in the writer's context and leaves its
 * figures in "run" to be read back:
 *
 *   lat    ping-pong of size-byte messages, one in flight: the median and the
 *          99th percentile of half the round trip, as ib_send_lat reports.
 *          Like ib_send_lat, it polls for the answer (ferry_poll()), or
 *          with poll=0 sleeps until it comes (as ib_send_lat -e does).
 *   send   a stream of size-byte messages (each ferry_send() waits for a
 *          credit), then one the service answers: bytes per second.
 *   write  requests whose size bytes the service RDMA-WRITEs into the
 *          requester's registered pages (FERRY_FROM_PEER), window at a time.
 *   read   the same, but the service RDMA-READs them (FERRY_TO_PEER).
 *
 * A warm-up of a tenth of the iterations (at least one) runs first and is
 * not counted. The data is not checked: ferry_cecho does that.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/inet.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/wait.h>
#include <ferry/ferry.h>

/*
 * `make bench BENCH_BASELINE=REV` builds this file against an older ferry
 * too: one from before per-channel submit spreads the requests itself.
 */
#ifndef FERRY_TAGGED
#define ferry_submit_on(s, qid, req, flags)	ferry_submit(s, req, flags)
#define ferry_send_on(s, qid, buf, len, flags)	ferry_send(s, buf, len, flags)
#endif

static char *peer;
module_param(peer, charp, 0644);
MODULE_PARM_DESC(peer, "The IPv4 or IPv6 address of the peer running ferry_bench");
static ushort port = 4791;
module_param(port, ushort, 0644);
MODULE_PARM_DESC(port, "The peer's ferry listener port");
static uint size = 64;
module_param(size, uint, 0644);
MODULE_PARM_DESC(size, "Message or request data size in bytes");
static uint iters = 1000;
module_param(iters, uint, 0644);
MODULE_PARM_DESC(iters, "Messages or requests measured (1 to 1000000)");
static uint window = 16;
module_param(window, uint, 0644);
MODULE_PARM_DESC(window, "Requests in flight for write and read (1 to 64)");
static uint channels = 1;
module_param(channels, uint, 0644);
MODULE_PARM_DESC(channels, "Channels of the benchmark's session (1 to 64)");
static uint depth = 128;
module_param(depth, uint, 0644);
MODULE_PARM_DESC(depth, "Queue depth of the benchmark's session");
static bool poll = true;
module_param(poll, bool, 0644);
MODULE_PARM_DESC(poll, "lat: poll for each answer (1) or sleep until it comes (0)");
static bool inline_data = true;
module_param(inline_data, bool, 0644);
MODULE_PARM_DESC(inline_data, "Receive buffers with room for inline request data (1) or none (0)");

#define MAX_DATA	(4U << 20)	/* largest request data */
#define WAIT_MS		30000		/* longest wait for one answer */

/* First byte of a message: what the service does with it. */
enum { MSG_PING = 'P', MSG_STREAM = 'S', MSG_LAST = 'L', MSG_DONE = 'D' };

/* --- the service ------------------------------------------------------- */

static struct ferry_service *bench_service;
/* The service's side of every transfer: MAX_DATA bytes of pages, never read. */
static struct page **sink;
static unsigned int sink_pages;

static void bench_message(struct ferry_session *s, void *priv, const void *data,
			  size_t len)
{
	const u8 *p = data;
	u8 done = MSG_DONE;
	int ret = 0;

	if (p[0] == MSG_PING)
		ret = ferry_send(s, data, len, FERRY_NOWAIT);
	else if (p[0] == MSG_LAST)
		ret = ferry_send(s, &done, 1, FERRY_NOWAIT);
	/* A client waits for one answer at a time: a credit is always there. */
	if (ret)
		pr_warn("session %u: answer failed: %d\n", ferry_session_id(s), ret);
}

struct serving {
	u32 nents;
	struct scatterlist sgl[];
};

static void serve_done(struct ferry_incoming *in, void *ctx, int status)
{
	kfree(ctx);
	ferry_respond(in, status, NULL, 0);
}

static void bench_request(struct ferry_session *s, void *priv,
			  struct ferry_incoming *in)
{
	u32 len = ferry_incoming_data_len(in), n, i;
	enum ferry_dir dir = ferry_incoming_dir(in);
	struct serving *sv;
	int ret;

	if (dir == FERRY_DIR_NONE || len > MAX_DATA) {
		ferry_respond(in, len ? -EINVAL : 0, NULL, 0);
		return;
	}
	n = DIV_ROUND_UP(len, PAGE_SIZE);
	sv = kmalloc(struct_size(sv, sgl, n), GFP_KERNEL);
	if (!sv) {
		ferry_respond(in, -ENOMEM, NULL, 0);
		return;
	}
	sg_init_table(sv->sgl, n);
	for (i = 0; i < n; i++)
		sg_set_page(&sv->sgl[i], sink[i], min_t(u32, PAGE_SIZE, len - i * PAGE_SIZE), 0);
	if (dir == FERRY_FROM_PEER)
		ret = ferry_rdma_write(in, sv->sgl, n, serve_done, sv);
	else
		ret = ferry_rdma_read(in, sv->sgl, n, serve_done, sv);
	if (ret) {
		kfree(sv);
		ferry_respond(in, ret, NULL, 0);
	}
}

static const struct ferry_ops bench_ops = {
	.message = bench_message,
	.request = bench_request,
};

/* --- the client -------------------------------------------------------- */

struct client {
	wait_queue_head_t wq;
	atomic_t answers;	/* messages received */
	atomic_t done;		/* requests completed */
	atomic_t failed;	/* of which failed */
};

static void client_message(struct ferry_session *s, void *priv, const void *data,
			   size_t len)
{
	struct client *c = priv;

	atomic_inc(&c->answers);
	wake_up(&c->wq);
}

static const struct ferry_ops client_ops = {
	.message = client_message,
};

static int wait_answers(struct client *c, int n)
{
	if (!wait_event_timeout(c->wq, atomic_read(&c->answers) >= n,
				msecs_to_jiffies(WAIT_MS)))
		return -ETIMEDOUT;
	return 0;
}

/*
 * Spins until @n answers are in, as ib_send_lat polls its completion queue:
 * ferry_poll() processes the polled channel's completions in this thread, so the
 * answer's callback runs here, with no worker to wake and no wakeup of this
 * thread. Whenever nothing came it calls cond_resched(), which yields only
 * where the kernel has voluntary preemption points (not in a preemptible
 * kernel without PREEMPT_DYNAMIC: there a task woken onto this CPU waits
 * for the next tick or interrupt).
 */
static int spin_answers(struct ferry_session *s, struct client *c, int n)
{
	unsigned long end = jiffies + msecs_to_jiffies(WAIT_MS);

	while (atomic_read(&c->answers) < n) {
		if (time_after(jiffies, end))
			return -ETIMEDOUT;
		if (!ferry_poll(s)) {
			cond_resched();
			cpu_relax();
		}
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	u64 x = *(const u64 *)a, y = *(const u64 *)b;

	return x < y ? -1 : x > y;
}

/* Ping-pong: writes the one-way latency's median and 99th percentile. */
static int bench_lat(struct ferry_session *s, u16 qid, struct client *c, u8 *buf,
		     u32 warm, char *out, size_t room)
{
	u64 *rtt, t0;
	u32 i;
	int ret = 0;

	rtt = kvmalloc_array(iters, sizeof(*rtt), GFP_KERNEL);
	if (!rtt)
		return -ENOMEM;
	buf[0] = MSG_PING;
	for (i = 0; i < warm + iters; i++) {
		t0 = ktime_get_ns();
		/* With poll=1 the last channel is polled: ping on it. */
		ret = poll ? ferry_send_on(s, qid, buf, size, 0) : ferry_send(s, buf, size, 0);
		if (!ret)
			ret = poll ? spin_answers(s, c, i + 1) : wait_answers(c, i + 1);
		if (ret)
			break;
		if (i >= warm)
			rtt[i - warm] = ktime_get_ns() - t0;
	}
	if (!ret) {
		sort(rtt, iters, sizeof(*rtt), cmp_u64, NULL);
		scnprintf(out, room, "mode=lat size=%u iters=%u lat_ns=%llu p99_ns=%llu\n",
			  size, iters, rtt[iters / 2] / 2, rtt[(u64)iters * 99 / 100] / 2);
	}
	kvfree(rtt);
	return ret;
}

/* Streams messages; the service answers the last one. */
static int bench_send(struct ferry_session *s, struct client *c, u8 *buf, u32 warm,
		      char *out, size_t room)
{
	u64 t0 = 0, ns;
	u32 i;
	int ret;

	for (i = 0; i < warm + iters; i++) {
		if (i == warm) {
			/* The warm-up ends when its last message is answered. */
			buf[0] = MSG_LAST;
			ret = ferry_send(s, buf, size, 0) ?: wait_answers(c, 1);
			if (ret)
				return ret;
			t0 = ktime_get_ns();
		}
		buf[0] = i == warm + iters - 1 ? MSG_LAST : MSG_STREAM;
		ret = ferry_send(s, buf, size, 0);
		if (ret)
			return ret;
	}
	ret = wait_answers(c, 2);
	if (ret)
		return ret;
	ns = ktime_get_ns() - t0;
	scnprintf(out, room, "mode=send size=%u iters=%u ns=%llu bytes_per_s=%llu\n",
		  size, iters, ns, div64_u64((u64)size * iters * NSEC_PER_SEC, ns));
	return 0;
}

struct slot {
	struct ferry_request rq;
	struct sg_table data;
	bool busy;
};

static void rq_done(struct ferry_request *rq)
{
	struct slot *sl = container_of(rq, struct slot, rq);
	struct client *c = rq->priv;

	if (rq->status)
		atomic_inc(&c->failed);
	WRITE_ONCE(sl->busy, false);
	smp_mb__before_atomic();	/* a counted completion has freed its slot */
	atomic_inc(&c->done);
	wake_up(&c->wq);
}

static void free_slots(struct slot *slots, u32 n)
{
	struct scatterlist *sg;
	u32 k;
	int i;

	for (k = 0; k < n; k++) {
		for_each_sgtable_sg(&slots[k].data, sg, i)
			if (sg_page(sg))
				__free_page(sg_page(sg));
		sg_free_table(&slots[k].data);
	}
	kfree(slots);
}

static struct slot *alloc_slots(u32 n, struct client *c, enum ferry_dir dir)
{
	u32 pages = DIV_ROUND_UP(size, PAGE_SIZE), k, i;
	struct scatterlist *sg;
	struct slot *slots;

	slots = kcalloc(n, sizeof(*slots), GFP_KERNEL);
	if (!slots)
		return NULL;
	for (k = 0; k < n; k++) {
		if (sg_alloc_table(&slots[k].data, pages, GFP_KERNEL))
			goto fail;
		for_each_sg(slots[k].data.sgl, sg, pages, i) {
			/* Zeroed: the peer reads them. */
			struct page *pg = alloc_page(GFP_KERNEL | __GFP_ZERO);

			if (!pg)
				goto fail;
			sg_set_page(sg, pg, min_t(u32, PAGE_SIZE, size - i * PAGE_SIZE), 0);
		}
		slots[k].rq = (struct ferry_request){
			.dir = dir,
			.sgl = slots[k].data.sgl,
			.nents = pages,
			.done = rq_done,
			.priv = c,
		};
	}
	return slots;
fail:
	free_slots(slots, n);
	return NULL;
}

/*
 * Requests with data, @window in flight: bytes per second. The slots are
 * left in *@slotsp: the caller frees them once the session is closed, when
 * every request ferry took has completed.
 */
static int bench_rdma(struct ferry_session *s, struct client *c, enum ferry_dir dir,
		      u32 warm, struct slot **slotsp, char *out, size_t room)
{
	u32 w = clamp_t(u32, window, 1, 64), i, k, sent = 0;
	struct slot *slots;
	u64 t0 = 0, ns;
	int ret = 0;

	if (size > MAX_DATA)
		return -EINVAL;
	slots = alloc_slots(w, c, dir);
	if (!slots)
		return -ENOMEM;
	*slotsp = slots;
	for (i = 0; i < warm + iters; i++) {
		if (i == warm) {
			/* Measure from a drained pipe. */
			if (!wait_event_timeout(c->wq, atomic_read(&c->done) == sent,
						msecs_to_jiffies(WAIT_MS))) {
				ret = -ETIMEDOUT;
				break;
			}
			t0 = ktime_get_ns();
		}
		if (!wait_event_timeout(c->wq, sent - atomic_read(&c->done) < w,
					msecs_to_jiffies(WAIT_MS))) {
			ret = -ETIMEDOUT;
			break;
		}
		smp_rmb();	/* pairs with rq_done()'s barrier */
		for (k = 0; k < w && READ_ONCE(slots[k].busy); k++)
			;
		if (WARN_ON_ONCE(k == w)) {
			ret = -EIO;
			break;
		}
		slots[k].busy = true;
		/* With several channels, slot k is channel k's: window/channels each. */
		ret = channels > 1 ?
		      ferry_submit_on(s, k % channels, &slots[k].rq, 0) :
		      ferry_submit(s, &slots[k].rq, 0);
		if (ret) {
			slots[k].busy = false;
			break;
		}
		sent++;
	}
	/* Every request ferry took completes, error or not (closing ends them). */
	if (!ret && !wait_event_timeout(c->wq, atomic_read(&c->done) == sent,
					msecs_to_jiffies(WAIT_MS)))
		ret = -ETIMEDOUT;
	ns = ktime_get_ns() - t0;
	if (!ret && atomic_read(&c->failed))
		ret = -EIO;
	if (!ret)
		scnprintf(out, room, "mode=%s size=%u iters=%u window=%u ns=%llu bytes_per_s=%llu\n",
			  dir == FERRY_FROM_PEER ? "write" : "read", size, iters, w, ns,
			  div64_u64((u64)size * iters * NSEC_PER_SEC, ns));
	return ret;
}

static char result[160];

static int bench_run(const char *mode)
{
	struct ferry_session_params p = {
		.service = "bench",
		.channels = clamp_t(uint, channels, 1, 64),
		.queue_depth = depth,
	};
	u32 warm = max(iters / 10, 1U);
	struct slot *slots = NULL;
	struct ferry_limits limits;
	struct ferry_session *s;
	char port_str[8];
	struct client *c;
	u8 *buf = NULL;
	int ret;

	if (!peer || !iters || iters > 1000000 || !size)
		return -EINVAL;
	snprintf(port_str, sizeof(port_str), "%u", port);
	ret = inet_pton_with_scope(&init_net, AF_UNSPEC, peer, port_str, &p.peer);
	if (ret)
		return ret;
	/* Messages up to ferry's largest; the header rides in front. */
	if (sysfs_streq(mode, "lat") || sysfs_streq(mode, "send"))
		p.max_msg = clamp_t(u32, size + 16, 256, 65536);
	/* Without inline room, a message's buffers are just its size. */
	if (!inline_data)
		p.inline_size = FERRY_NO_INLINE;
	/* A polled channel for the ping-pong, after the others. */
#ifdef FERRY_TAGGED
	if (sysfs_streq(mode, "lat") && poll)
		p.poll_channels = 1;
#endif
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	init_waitqueue_head(&c->wq);
	s = ferry_session_open(&p, &client_ops, c);
	if (IS_ERR(s)) {
		kfree(c);
		return PTR_ERR(s);
	}
	ret = ferry_session_limits(s, &limits);
	if (ret)
		goto close;
	if (sysfs_streq(mode, "write") || sysfs_streq(mode, "read")) {
		ret = bench_rdma(s, c, sysfs_streq(mode, "write") ? FERRY_FROM_PEER : FERRY_TO_PEER,
				 warm, &slots, result, sizeof(result));
		goto close;
	}
	if (size > limits.max_payload) {
		ret = -EMSGSIZE;
		goto close;
	}
	buf = kzalloc(size, GFP_KERNEL);
	if (!buf) {
		ret = -ENOMEM;
		goto close;
	}
	if (sysfs_streq(mode, "lat"))
		ret = bench_lat(s, limits.channels - 1, c, buf, warm, result, sizeof(result));
	else if (sysfs_streq(mode, "send"))
		ret = bench_send(s, c, buf, warm, result, sizeof(result));
	else
		ret = -EINVAL;
close:
	/* Every request is over and no callback runs once this returns. */
	ferry_session_close(s);
	if (slots)
		free_slots(slots, clamp_t(u32, window, 1, 64));
	kfree(buf);
	kfree(c);
	return ret;
}

/* Writing a mode runs it; reading gives the last run's figures. */
static int run_set(const char *val, const struct kernel_param *kp)
{
	int ret;

	if (!val)
		return -EINVAL;
	/* Not at load (the service is not up yet): write it afterwards. */
	if (!bench_service)
		return -EAGAIN;
	/* Unloading waits for the run: its session needs this module's code. */
	if (!try_module_get(THIS_MODULE))
		return -ENODEV;
	result[0] = '\0';
	ret = bench_run(val);
	module_put(THIS_MODULE);
	if (ret)
		scnprintf(result, sizeof(result), "error=%d\n", ret);
	return ret;
}

static int run_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s", result);
}

static const struct kernel_param_ops run_ops = {
	.set = run_set,
	.get = run_get,
};
module_param_cb(run, &run_ops, NULL, 0644);
MODULE_PARM_DESC(run, "Write lat, send, write or read to run it; read the figures back");

static void free_sink(void)
{
	unsigned int i;

	for (i = 0; i < sink_pages; i++)
		__free_page(sink[i]);
	kfree(sink);
}

static int __init bench_init(void)
{
	unsigned int n = MAX_DATA / PAGE_SIZE;

	sink = kcalloc(n, sizeof(*sink), GFP_KERNEL);
	if (!sink)
		return -ENOMEM;
	for (sink_pages = 0; sink_pages < n; sink_pages++) {
		sink[sink_pages] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!sink[sink_pages]) {
			free_sink();
			return -ENOMEM;
		}
	}
	bench_service = ferry_service_register("bench", &bench_ops, NULL);
	if (IS_ERR(bench_service)) {
		free_sink();
		return PTR_ERR(bench_service);
	}
	return 0;
}

static void __exit bench_exit(void)
{
	ferry_service_unregister(bench_service);
	free_sink();
}

module_init(bench_init);
module_exit(bench_exit);
MODULE_DESCRIPTION("ferry sample: latency and throughput benchmark");
MODULE_AUTHOR("The ferry authors");
MODULE_LICENSE("GPL");
MODULE_IMPORT_NS("FERRY");
