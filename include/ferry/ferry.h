/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ferry: RDMA message transport for kernel modules.
 *
 * A module offers a named *service* (ferry_service_register()) or opens a
 * *session* to a peer's service (ferry_session_open()). A session carries
 * messages both ways over one or more RDMA reliable connections (channels),
 * reconnects by itself when the peer or the fabric goes away, and reports what
 * happens through the callbacks of a &struct ferry_ops.
 *
 * Symbols live in the "FERRY" namespace: consumers say MODULE_IMPORT_NS("FERRY").
 * Documentation/api.md is the guide, with examples in C and Rust.
 *
 * Calling contexts. Every function here may sleep unless it says otherwise,
 * and none may be called in atomic context. Callbacks run in process context
 * (but for a client session opened with %FERRY_SOFTIRQ, whose @message,
 * @writable and requests' @done run in softirq):
 *
 * - @accept, @up, @message and @writable run on the completion work of the
 *   channel that caused them: ib_core's ``ib_comp_wq`` (per CPU, high
 *   priority), or for a polled channel the thread of a consumer in
 *   ferry_poll_channel() or ferry_poll(), or an idle-poll work item of
 *   ferry's work queue, or the thread that tears the channel down (its
 *   drain processes what is left). While one runs, that channel processes no
 *   other completion, so they should be short; they must not wait for a
 *   credit (ferry_send() without %FERRY_NOWAIT fails with -EDEADLK there) and
 *   must not call ferry_session_close(). A request's @done runs there too,
 *   or in the thread tearing its channel down, under the same rules.
 *   @writable also comes from ferry's work queue once a channel's pool of
 *   regions grew, and @up from whichever thread tells the session's state
 *   (below): a wait there is allowed, as nothing of the channel waits for
 *   it.
 * - @down and @gone run on ferry's own work queue, or in the thread that
 *   closes the session (ferry_session_close(), ferry_service_unregister()).
 *   No callback may call ferry_session_close() on its own session.
 * - @up, @down and @gone run with no lock of ferry's held, one thread at a
 *   time: the thread telling one also tells what the session reached
 *   meanwhile, so @up may come from the thread that told @down.
 *
 * For one session, @up, @down and @gone are serialized and alternate: @up,
 * then @down, then @up again after a reconnect, and @gone exactly once, last.
 * @message may run concurrently on different channels of a session; messages
 * of one channel arrive in order. No callback of a session runs once @gone
 * has returned.
 */
#ifndef _FERRY_FERRY_H
#define _FERRY_FERRY_H

#include <linux/socket.h>
#include <linux/types.h>

struct net;

/**
 * struct ferry_service - a registered service (opaque)
 */
struct ferry_service;

/**
 * struct ferry_session - a session with a peer (opaque, reference counted)
 *
 * A session handle stays valid while its holder has a reference: the one
 * ferry_session_open() returns (dropped by ferry_session_close()), the one a
 * service's session lends to its callbacks until @gone returns, and any taken
 * with ferry_session_get().
 */
struct ferry_session;

/**
 * struct ferry_incoming - a request a peer sent (opaque)
 *
 * The consumer owns it from its @request callback until it passes it to
 * ferry_respond().
 */
struct ferry_incoming;

/**
 * struct ferry_ops - what a consumer is told
 * @accept: (services only) a client opened a session to the service. Return 0
 *	to take it, or a negative errno to refuse it: the client's
 *	ferry_session_open() then fails with -ECONNREFUSED. @service_priv is
 *	what the service was registered with; set *@priv to what the session's
 *	other callbacks get (it starts as @service_priv). Runs with no lock of
 *	ferry's held, once per session (calls for different sessions may run
 *	at the same time); the session's other channels wait for its answer.
 *	Must not unregister its own service, which waits for the calls in
 *	progress. May be NULL: every session is taken.
 * @up: the session is connected, after opening or after a reconnect. May be
 *	NULL.
 * @down: the session lost its connection: @err says why (-ETIMEDOUT for a
 *	silent peer, -ECONNABORTED for a failed link, -ENODEV when the RDMA
 *	device went away). A client session reconnects by itself and calls @up
 *	again; a service's session is closed next (@gone). May be NULL.
 * @message: a message arrived. @data holds @len bytes, valid only until the
 *	callback returns: copy what must be kept.
 * @writable: a send or submit with %FERRY_NOWAIT was refused with -EAGAIN
 *	on channel @qid (ferry_send_on(), ferry_submit_on()) or on the session
 *	(ferry_send(), ferry_submit(), or while it reconnected), and channel
 *	@qid has room again since: the peer granted credits, or tags, regions
 *	or send buffers came free. Sending on @qid may succeed again: a blk-mq
 *	driver restarts hardware queue @qid. Never missed (ferry notes a
 *	refusal, then looks once more), though it may come once with nothing
 *	left to restart. Also runs on ferry's work queue, when a channel's
 *	pool of registrations has grown.
 *	May be NULL.
 * @request: the peer sent a request (see ferry_submit()). The consumer owns
 *	@in until it answers with ferry_respond(), from any context that may
 *	sleep, now or later; it moves the request's data with ferry_rdma_read()
 *	or ferry_rdma_write() first. May be NULL: requests are then answered
 *	with -EOPNOTSUPP.
 * @gone: the session is closed for good, with @err as the reason (0 when
 *	closed by ferry_session_close() or ferry_service_unregister()). The last
 *	callback of the session. May be NULL.
 */
struct ferry_ops {
	int (*accept)(struct ferry_session *s, void *service_priv, void **priv);
	void (*up)(struct ferry_session *s, void *priv);
	void (*down)(struct ferry_session *s, void *priv, int err);
	void (*message)(struct ferry_session *s, void *priv, const void *data,
			size_t len);
	void (*writable)(struct ferry_session *s, void *priv, u16 qid);
	void (*gone)(struct ferry_session *s, void *priv, int err);
	void (*request)(struct ferry_session *s, void *priv,
			struct ferry_incoming *in);
};

/**
 * enum ferry_dir - which way a request's data goes
 * @FERRY_DIR_NONE: the request has no data.
 * @FERRY_TO_PEER: the requester's pages go to the peer, which reads them
 *	(a write to a remote disk).
 * @FERRY_FROM_PEER: the peer's data comes into the requester's pages, which
 *	it writes (a read from a remote disk).
 */
enum ferry_dir {
	FERRY_DIR_NONE = 0,
	FERRY_TO_PEER = 1,
	FERRY_FROM_PEER = 2,
};

/**
 * struct ferry_request - a request and, when it is over, its outcome
 * @hdr: the request's header, sent inline; copied by ferry_submit().
 * @hdr_len: its length: at most &ferry_limits.max_payload less 144 bytes.
 * @dir: which way the data goes.
 * @sgl: the data's pages (NULL for %FERRY_DIR_NONE). ferry maps them for DMA
 *	and registers them for the peer alone, for this request alone; the
 *	caller must not touch them until @done runs.
 * @nents: entries of @sgl.
 * @tag: with %FERRY_TAGGED, the caller's tag for the request on its channel
 *	(as a blk-mq driver uses its request's tag): below the queue depth,
 *	and not in flight on that channel. Otherwise ferry picks one.
 * @resp: where the peer's response header goes (may be NULL).
 * @resp_size: room at @resp.
 * @done: called once the request is over, exactly once for each request
 *	ferry_submit() accepted. By then every key the peer had for the pages
 *	is invalid and the pages are unmapped: the caller owns them again. Runs
 *	in process context (softirq with %FERRY_SOFTIRQ), on the channel's
 *	completion work, or on ferry's
 *	work queue or the closing thread when the session fails (the
 *	channel's teardown): both are ferry callbacks, where a wait for room
 *	fails with -EDEADLK.
 * @priv: the caller's.
 * @status: set before @done: 0 or the peer's status (a negative errno), or
 *	ferry's error: -ECONNABORTED if the connection failed before the
 *	response came (the peer may or may not have acted on the request:
 *	ferry never resends one).
 * @resp_len: set before @done: bytes of the response header at @resp.
 * @moved: set before @done: bytes of data the peer says it moved.
 */
struct ferry_request {
	const void *hdr;
	u32 hdr_len;
	enum ferry_dir dir;
	struct scatterlist *sgl;
	unsigned int nents;
	u32 tag;
	void *resp;
	u32 resp_size;
	void (*done)(struct ferry_request *rq);
	void *priv;
	int status;
	u32 resp_len;
	u32 moved;
};

/**
 * struct ferry_session_params - what ferry_session_open() opens
 * @net: the network namespace to connect in, of which the caller holds a
 *	reference across the call (the session takes its own); NULL for
 *	&init_net.
 * @peer: the peer's address and port (AF_INET or AF_INET6).
 * @service: the peer's service name: 1 to 31 bytes of [a-z0-9._-].
 * @channels: channels (RDMA connections) to open, 1 to 64; 0: one per
 *	online CPU, at most 64. Channels share the device's completion vectors
 *	round robin. Their completions run on ib_core's ``ib_comp_wq`` (in
 *	softirq with %FERRY_SOFTIRQ).
 * @poll_channels: polled channels to open after them (0 to 63; channels and
 *	polled channels together at most 64): channels @channels to
 *	@channels + @poll_channels - 1, whose completions nobody processes but
 *	the caller, through ferry_poll_channel(), as nvme-rdma's poll queues.
 *	ferry_send() and ferry_submit() pick them only from a callback of that
 *	very channel (an answer goes back the way its question came);
 *	ferry_send_on() and ferry_submit_on() name them. The peer does not know
 *	which channels are polled: what it sends on one of them on its own
 *	waits for the next poll.
 * @queue_depth: receive buffers per channel, 2 to 1024; 0: 128.
 * @max_msg: largest message this side accepts, in bytes including ferry's
 *	16-byte header, 256 to 65536; 0: 4096. The session's limit is the
 *	smaller of both sides' (see ferry_session_limits()).
 * @inline_size: data to the peer a request may carry in its own message,
 *	beyond @max_msg, with no registration and no RDMA READ: at most 16384
 *	bytes; 0: 4096; %FERRY_NO_INLINE: none. Each side's receive buffers
 *	grow by it (@queue_depth times @inline_size more memory per channel;
 *	not a client's with %FERRY_NO_REQUESTS, nor its server's send
 *	buffers), and the session's limit is the smaller of both sides'.
 * @heartbeat_ms: heartbeat interval, 100 to 60000; 0: 1000.
 * @timeout_ms: silence after which the peer counts as dead; 0: 5000. Also the
 *	longest a send waits for a credit.
 * @give_up_s: seconds of failed reconnecting before the session closes
 *	(@gone with -ETIMEDOUT); 0: 600; at most a week (604800).
 * @reconnect_delay_s: the longest wait between two reconnect attempts, 1 to
 *	3600 seconds; 0: 30. Unlike nvme-cli's reconnect_delay, which every
 *	attempt waits, it caps a backoff: the first wait is about a second
 *	and each one doubles, up to this; each is drawn from its upper half,
 *	so clients that lost one server spread out.
 *	ferry_session_set_reconnect_delay() changes it live.
 * @key: NULL, or the name of a pre-shared key of @net's (``ferryctl key
 *	add``): the peer's listener must prove it holds the same key, and this
 *	side proves it to the peer (a mismatch fails with -EACCES).
 * @flags: %FERRY_PREREGISTER, %FERRY_NO_REQUESTS, %FERRY_SOFTIRQ, or 0.
 *	Unknown flags: -EINVAL.
 */
struct ferry_session_params {
	struct net *net;
	struct sockaddr_storage peer;
	const char *service;
	u16 channels;
	u16 poll_channels;
	u32 queue_depth;
	u32 max_msg;
	u32 inline_size;
	u32 heartbeat_ms;
	u32 timeout_ms;
	u32 give_up_s;
	u32 reconnect_delay_s;
	const char *key;
	u32 flags;
};

/*
 * %FERRY_PREREGISTER: each channel registers, when it is built, its whole
 * pool of FRWR regions (one per tag of @queue_depth, and 7 more for a
 * request of 8 regions), as nvme-rdma does, so that no request waits for
 * the pool to grow (a request of several regions may still find them all
 * in use: -EAGAIN, then @writable). It costs each connect that many
 * registrations, in rdma_cm's handler as nvme-rdma's, one channel after
 * another (about a millisecond each on a software device under emulation).
 * Without it a channel starts with 8 and registers more in process context
 * as its requests need them. ``ferryctl session connect`` does not set it:
 * a session without a consumer sends no requests.
 */
#define FERRY_PREREGISTER	(1U << 0)

/*
 * %FERRY_NO_REQUESTS: this client takes no requests from its peer (it
 * sends them, and messages both ways). Its channels keep no responder
 * entries and no room for inline data in their receive buffers, and the
 * connect request says so: the server's ferry_submit() to it fails with
 * -EOPNOTSUPP, and its send buffers keep no inline room either. At the
 * default depth and sizes a client channel then takes 1.5 MiB, not 3. For
 * a consumer whose servers never ask (a block device's client). A server
 * that predates the flag may still send a request, which the client then
 * takes for a breach of the protocol (the channel fails).
 */
#define FERRY_NO_REQUESTS	(1U << 1)

/*
 * %FERRY_SOFTIRQ: this client's channels (all but the polled ones) process
 * their completions in softirq, as nvme-rdma's host queues
 * (``IB_POLL_SOFTIRQ``): an answer ends its request without waking a
 * thread. The consumer promises that @message, @writable and its requests'
 * @done never sleep, take no mutex and call no ferry function that may
 * sleep (ferry_send() and ferry_submit() with %FERRY_NOWAIT are allowed),
 * wherever they run: they run in softirq then, with bottom halves off.
 * @up, @down and @gone keep process context (@up comes from ferry's work
 * queue then, or the opener's thread). Only with %FERRY_NO_REQUESTS (a
 * client that takes requests would run @request and the RDMA's @done
 * there): -EINVAL without it. Where a callback runs in softirq, a wait for
 * room is not allowed at all (not merely -EDEADLK).
 */
#define FERRY_SOFTIRQ		(1U << 2)

/**
 * struct ferry_limits - what a session negotiated
 * @channels: channels of the session, polled ones included: a channel
 *	number (qid) is below this.
 * @poll_channels: how many of them, the last ones, are polled.
 * @queue_depth: the peer's receive buffers per channel: at most this many
 *	messages per channel are in flight.
 * @max_payload: largest message ferry_send() takes, in bytes.
 * @max_data: most bytes of data one request carries.
 * @max_segments: most scatterlist entries one request's data has.
 * @virt_boundary_mask: the data of a request may have no gap at this mask
 *	(a page less one): every scatterlist entry but the first starts, and
 *	every entry but the last ends, on a multiple of @virt_boundary_mask + 1,
 *	so its pages go into the registrations' page lists as they are (blk-mq's
 *	virt_boundary_mask, as nvme-rdma sets it).
 * @dma_alignment: the alignment mask the data's address and length need:
 *	0, as registrations map any byte offset.
 * @inline_size: the most bytes of data to the peer that travel in the
 *	request message itself, with no registration (counted as "inline" in
 *	the session's statistics); 0 if the peer takes none (a version 1.0
 *	peer) or the session asked for none.
 * @incoming_depth: the most requests from the peer a channel holds at once:
 *	this side's own queue depth, and an eighth of it more (1 to 16) for
 *	the answers that go before their data's completion
 *	(ferry_rdma_write_respond()); 0 with %FERRY_NO_REQUESTS.
 *	ferry_incoming_tag() is below it.
 *
 * A request within @max_data, @max_segments and @virt_boundary_mask always
 * fits the session's registrations: a block driver sizes its queue limits
 * by them (max_hw_sectors, max_segments, virt_boundary_mask, dma_alignment),
 * its hardware queues by @channels and their depth by @queue_depth.
 */
struct ferry_limits {
	u16 channels;
	u16 poll_channels;
	u32 queue_depth;
	u32 max_payload;
	u32 max_data;
	u32 max_segments;
	u32 virt_boundary_mask;
	u32 dma_alignment;
	u32 inline_size;
	u32 incoming_depth;
};

/* &ferry_session_params.inline_size: no inline data either way. */
#define FERRY_NO_INLINE	0xffffffffU

/* ferry_send() and ferry_submit() flags */
/* Fail with -EAGAIN instead of waiting for a credit: never sleeps. */
#define FERRY_NOWAIT	0x1
/* ferry_submit_on(): the request carries its own tag (&ferry_request.tag). */
#define FERRY_TAGGED	0x2

/* ferry_poll(): the most completions it processes per channel and call. */
#define FERRY_POLL_BUDGET	16

/**
 * ferry_service_register() - offer a service to peers
 * @name: the service's name: 1 to 31 bytes of [a-z0-9._-].
 * @ops: the callbacks of the service's sessions; must stay valid until
 *	ferry_service_unregister() returns. @message is required.
 * @priv: passed to @ops->accept.
 *
 * Clients reach the service through any of ferry's listeners (see
 * ``ferryctl listener add``).
 *
 * Return: the service, or an ERR_PTR(): -EINVAL for a bad name or missing
 * @message, -EEXIST if the name is taken, -ENOMEM, -ESHUTDOWN while ferry
 * unloads.
 */
struct ferry_service *ferry_service_register(const char *name,
					     const struct ferry_ops *ops,
					     void *priv);

/**
 * ferry_service_unregister() - stop offering a service
 * @svc: from ferry_service_register().
 *
 * Refuses new sessions for the service, waits for the @accept calls in
 * progress, closes the sessions it has (each gets @gone with 0) and waits
 * for their callbacks. After it returns, no callback
 * of @svc's ops runs; handles of its sessions that were taken with
 * ferry_session_get() stay valid, but the sessions are closed.
 */
void ferry_service_unregister(struct ferry_service *svc);

/**
 * ferry_session_open() - open a session to a peer's service
 * @p: where to and how; copied, need not outlive the call.
 * @ops: the session's callbacks (@accept is not used); must stay valid until
 *	ferry_session_close() returns. @message is required.
 * @priv: passed to every callback.
 *
 * Connects every channel and waits until the session is up or has failed, at
 * most 22 seconds, then for a failed session's teardown (each step of a
 * channel's connect has 10 s; see Documentation/session.md). A failed open
 * calls none of @ops. A successful one
 * has called @ops->up before it returns (unless the connection was lost again
 * at once: then @up follows the reconnect). After that, a lost connection is
 * re-established by ferry in the background (@down, then @up) until
 * @p->give_up_s passes.
 *
 * Return: the session, holding one reference for the caller; or an ERR_PTR():
 * -EINVAL for bad parameters (a peer address that is not unicast among them),
 * -ECONNREFUSED if nobody listens there or the peer has no such service or
 * refused it, -EACCES if authentication failed (@p->key, or the peer knows
 * the session's id and it could not prove the session's secret), -ENOKEY if
 * @net has no key @p->key, -ETIMEDOUT if the peer did not
 * answer, -EHOSTUNREACH without a route, -EPROTO or -EPROTONOSUPPORT for a
 * peer that does not speak ferry 1.x, -ENOMEM, -ESHUTDOWN while ferry unloads,
 * -EINTR if a signal interrupted the wait.
 */
struct ferry_session *ferry_session_open(const struct ferry_session_params *p,
					 const struct ferry_ops *ops,
					 void *priv);

/**
 * ferry_session_close() - close a session and drop the opener's reference
 * @s: from ferry_session_open().
 *
 * Disconnects every channel, drains them, calls @gone (with 0) unless the
 * session had closed already, and returns once no callback of the session
 * runs any more. Sends after this fail with -ENOTCONN.
 */
void ferry_session_close(struct ferry_session *s);

/**
 * ferry_session_get() - take a reference to a session handle
 * @s: a handle the caller holds a reference to, or got in a callback.
 *
 * Context: any context.
 */
void ferry_session_get(struct ferry_session *s);

/**
 * ferry_session_put() - drop a reference from ferry_session_get()
 * @s: the session.
 *
 * Context: any context.
 */
void ferry_session_put(struct ferry_session *s);

/**
 * ferry_session_set_reconnect_delay() - change the longest reconnect wait
 * @s: a session the caller holds a reference to (client side).
 * @secs: 1 to 3600, as @reconnect_delay_s of struct ferry_session_params.
 *
 * Takes effect at once: a wait under way that is longer ends at @secs.
 * Context: any context.
 * Return: 0, -EINVAL for @secs out of range, or -EOPNOTSUPP for a
 * server-side session (which never reconnects).
 */
int ferry_session_set_reconnect_delay(struct ferry_session *s, u32 secs);

/**
 * ferry_session_id() - the session's local id
 * @s: the session.
 *
 * Context: any context.
 * Return: the id ``ferryctl session show`` lists the session under.
 */
u32 ferry_session_id(const struct ferry_session *s);

/**
 * ferry_session_peer() - the peer's address
 * @s: the session.
 * @out: filled in with the peer's address and port (AF_INET or AF_INET6):
 *	for a client session, the address it was opened with; for a server
 *	session, the client's, from its first channel's connection.
 *
 * Context: any context.
 */
void ferry_session_peer(const struct ferry_session *s,
			struct sockaddr_storage *out);

/**
 * ferry_session_limits() - what the session negotiated
 * @s: the session.
 * @out: filled in on success.
 *
 * Context: process context; does not sleep for long.
 * Return: 0, or -ENOTCONN if the session is not connected.
 */
int ferry_session_limits(struct ferry_session *s, struct ferry_limits *out);

/**
 * ferry_send() - send a message
 * @s: the session.
 * @data: the message.
 * @len: its length, 1 to &ferry_limits.max_payload bytes.
 * @flags: 0 or %FERRY_NOWAIT.
 *
 * Copies the message into one of the channel's registered send buffers and
 * posts it on the calling CPU's channel (another one if that channel has no
 * credit). The caller owns @data again when this returns. A message is
 * delivered once, whole, or not at all: one sent when the connection fails
 * may be lost; ferry does not resend messages.
 *
 * Flow control: each message takes a credit, one receive buffer the peer has
 * posted, and one of the channel's send buffers. Without either,
 * %FERRY_NOWAIT makes this fail with -EAGAIN and @writable is called once
 * credits return or buffers come free; without it, the call waits (also for
 * a reconnect) for up to the session's @timeout_ms.
 *
 * Context: with %FERRY_NOWAIT any context, atomic ones included (under a
 * spinlock, interrupts off): it takes only the channel's spinlock, never
 * sleeps and allocates nothing. Without it, process context.
 *
 * Return: 0 when the message is posted; -EMSGSIZE if @len is 0 or above the
 * limit; -EAGAIN (with %FERRY_NOWAIT) without a credit or a send buffer, and
 * while the session reconnects (@writable or @up follows);
 * -ETIMEDOUT after waiting @timeout_ms; -EINTR if a fatal signal interrupted
 * the wait; -EDEADLK when asked to wait from a ferry callback; -ENOTCONN if
 * the session is closed.
 */
int ferry_send(struct ferry_session *s, const void *data, size_t len,
	       unsigned int flags);

/**
 * ferry_send_on() - send a message on a given channel
 * @s: the session.
 * @qid: the channel: below &ferry_limits.channels; a polled one too.
 * @data: the message.
 * @len: its length, 1 to &ferry_limits.max_payload bytes.
 * @flags: 0 or %FERRY_NOWAIT.
 *
 * As ferry_send(), on channel @qid only: it never spills over to another
 * channel, so the messages of one caller's channel keep their order and a
 * consumer can bind a queue of its own to one connection.
 *
 * Return: as ferry_send(); -EINVAL if @qid is not a channel of @s.
 */
int ferry_send_on(struct ferry_session *s, u16 qid, const void *data,
		  size_t len, unsigned int flags);

/**
 * ferry_submit() - send a request
 * @s: the session.
 * @rq: the request; it must stay valid until @rq->done has run.
 * @flags: 0 or %FERRY_NOWAIT.
 *
 * Maps and registers the data's pages (FRWR, one registration per up to 512
 * pages, at most 8, from the channel's pool of regions, which ferry grows in
 * the background up to one per request of its queue depth and 7 more;
 * send-with-invalidate or
 * LOCAL_INV ends each before
 * @rq->done), and sends the header and the registrations' keys on the calling
 * CPU's channel (another one if it has no credit). The peer moves the data
 * and answers; then @rq->done runs.
 *
 * Context: as ferry_send(): with %FERRY_NOWAIT any context; it allocates
 * nothing.
 *
 * Return: 0 if the request is on its way: @rq->done will run exactly once.
 * Otherwise @rq->done will not run: -EINVAL for a bad @rq, -EMSGSIZE if the
 * header does not fit or the data needs more than 8 registrations, -EAGAIN
 * (with %FERRY_NOWAIT) without a credit, a free tag or free registrations,
 * and while the session reconnects, -ETIMEDOUT,
 * -EINTR, -EDEADLK and -ENOTCONN as for ferry_send(); -EOPNOTSUPP on a
 * server whose client takes no requests (%FERRY_NO_REQUESTS).
 */
int ferry_submit(struct ferry_session *s, struct ferry_request *rq,
		 unsigned int flags);

/**
 * ferry_submit_on() - send a request on a given channel
 * @s: the session.
 * @qid: the channel: below &ferry_limits.channels; a polled one too.
 * @rq: the request; it must stay valid until @rq->done has run.
 * @flags: 0, %FERRY_NOWAIT, %FERRY_TAGGED or both.
 *
 * As ferry_submit(), on channel @qid only (a blk-mq hardware queue maps to
 * one channel this way). Its answer completes on that channel: on a polled
 * one, in ferry_poll_channel(). With %FERRY_TAGGED the request goes under
 * @rq->tag.
 *
 * Return: as ferry_submit(); -EINVAL if @qid is not a channel of @s or
 * @rq->tag is not below the queue depth; -EBUSY if @rq->tag is in flight.
 */
int ferry_submit_on(struct ferry_session *s, u16 qid, struct ferry_request *rq,
		    unsigned int flags);

/**
 * ferry_poll_channel() - process a polled channel's completions
 * @s: the session.
 * @qid: a polled channel of @s (see &ferry_session_params.poll_channels).
 * @budget: the most completions to process.
 *
 * Takes up to @budget completions waiting on channel @qid and runs the
 * callbacks they lead to (@message, @writable, requests' @done, ...) in the
 * calling thread before it returns, as blk-mq's ``.poll`` and nvme-rdma's
 * poll queues do. A polled channel gets no completion interrupts: its
 * completions wait for this call. Heartbeats and credits still flow when the
 * caller does not poll for a while: ferry's tick (every 100 ms) queues a
 * work item that polls a polled channel nobody polled since its last run,
 * so a silent consumer
 * slows its channel down but never loses it.
 *
 * A channel's completions are processed by one thread at a time, so
 * callbacks keep the rules of the calling-context section above; while
 * another thread processes them (another poller, the idle poll, or a callback
 * further up the caller's own stack) this returns 0 at once. Callbacks run
 * in the caller's thread: it must hold no lock they take, and they see it as
 * a ferry callback (-EDEADLK for a wait). ``ferryctl -s session show``
 * counts the completions as ``polled``.
 *
 * Context: process context, not atomic (the callbacks may sleep).
 * Return: the number of completions processed, 0 if none was waiting or the
 * channel is reconnecting; -EINVAL if @qid is not a polled channel of @s.
 */
int ferry_poll_channel(struct ferry_session *s, u16 qid, unsigned int budget);

/**
 * ferry_reset_channel() - fail a channel, so its session reconnects
 * @s: the session.
 * @qid: the channel: below &ferry_limits.channels.
 *
 * For a consumer whose request went unanswered too long (blk-mq's
 * ``.timeout``): fails channel @qid as a failed work request would. A
 * client session then reconnects, all of its channels (as nvme-rdma's error
 * recovery resets every queue of a controller), with @down (-ECONNABORTED)
 * and later @up; a service's session closes (the client reconnects into a
 * new one). Every request in flight on the failed connections completes
 * exactly once, with -ECONNABORTED, and only once the peer can no longer
 * reach its pages. A response or completion of the old connection can never
 * complete a request of the new one: each connection has its own QP and its
 * own request tags. Requests whose @done runs were all posted (the peer may
 * have seen them); one that ferry_submit() refused was never posted.
 *
 * A service's channel that is up while others of its session still connect
 * (it may carry requests before the session counts as connected) is failed
 * all the same; a client's session only sends once connected.
 *
 * Context: process context (a service's session that is still connecting
 * takes its lock); does not wait for the reconnect.
 * Return: 0; -EINVAL if @qid is not a channel of @s; -ENOTCONN if that
 * channel is not up (the session is reconnecting or closed).
 */
int ferry_reset_channel(struct ferry_session *s, u16 qid);

/**
 * ferry_poll() - process every polled channel's completions
 * @s: the session.
 *
 * ferry_poll_channel() with %FERRY_POLL_BUDGET on each polled channel of @s,
 * for a consumer that waits for an answer on any of them. Channels that are
 * not polled are ib_core's (``ib_comp_wq``): this does nothing for them.
 *
 * Context: process context, not atomic (the callbacks may sleep).
 * Return: the number of completions processed, 0 if none was waiting.
 */
int ferry_poll(struct ferry_session *s);

/**
 * ferry_incoming_header() - the header of a request that arrived
 * @in: the request.
 * @len: set to the header's length.
 *
 * Context: any context.
 * Return: the header, valid until ferry_respond().
 */
const void *ferry_incoming_header(const struct ferry_incoming *in, u32 *len);

/**
 * ferry_incoming_dir() - which way a request's data goes
 * @in: the request.
 *
 * Context: any context.
 */
enum ferry_dir ferry_incoming_dir(const struct ferry_incoming *in);

/**
 * ferry_incoming_data_len() - how much data a request has
 * @in: the request.
 *
 * Context: any context.
 */
u32 ferry_incoming_data_len(const struct ferry_incoming *in);

/**
 * ferry_incoming_tag() - where a request is held
 * @in: the request.
 * @qid: if not NULL, set to the channel it came on.
 *
 * Lets a consumer keep one context per request it may hold, made in
 * advance, as a block driver keeps one per blk-mq tag: the tag is below
 * &ferry_limits.incoming_depth, and no two requests of one connection of a
 * channel share it while the consumer holds them. The tag is free again
 * inside ferry_respond(), before it returns (after a
 * ferry_rdma_write_respond(), just before its @done): a request with the same tag
 * may arrive on another CPU meanwhile, so give the context back before
 * answering (and take it again if the answer fails with -EBUSY or
 * -EINVAL, which leave the request the caller's). A request still held
 * from a connection the channel had before a reconnect may share the tag
 * with one of the new connection (only a client's channels reconnect).
 *
 * Context: any context.
 * Return: the request's tag on its channel.
 */
u32 ferry_incoming_tag(const struct ferry_incoming *in, u16 *qid);

/**
 * ferry_rdma_read() - fetch a request's data from the requester
 * @in: a %FERRY_TO_PEER request.
 * @sgl: where the data goes: exactly ferry_incoming_data_len() bytes.
 * @nents: entries of @sgl.
 * @done: called when the data is in @sgl (@status 0) or could not be read;
 *	in process context, on the channel's completion work or its teardown,
 *	or before this returns 0 when the data came inline (see below). The
 *	caller owns @sgl's pages again then.
 * @ctx: passed to @done.
 *
 * Uses the kernel's rdma_rw API against the registration the requester made
 * for this request; nothing else of the requester's memory is reachable.
 *
 * Data in several registrations (more than 512 pages) is moved one
 * registration after the other, each against its part of @sgl.
 *
 * A channel has at most 1 MiB of transfers posted at once (a larger one goes
 * alone), so that its responses and heartbeats wait behind little data: a
 * transfer beyond waits, admitted in the order of the calls, and is posted
 * when earlier ones end; if it cannot be posted then, @done gets the error.
 * The @done of such a waiting transfer may run inside a call whose own post
 * fails: never call this holding a lock that a @done takes.
 *
 * Data that came inline, in the request message (&ferry_limits.inline_size),
 * is copied into @sgl at once, and @done runs before ferry_rdma_read()
 * returns: call it without a lock that @done takes.
 *
 * Return: 0 if @done will run; -EINVAL for the wrong direction or a length
 * that differs from the request's, -EBUSY if a transfer of @in is in flight,
 * -ENOMEM, or -ENOTCONN if the connection is gone.
 */
int ferry_rdma_read(struct ferry_incoming *in, struct scatterlist *sgl,
		    unsigned int nents,
		    void (*done)(struct ferry_incoming *in, void *ctx, int status),
		    void *ctx);

/**
 * ferry_rdma_write() - deliver a request's data to the requester
 * @in: a %FERRY_FROM_PEER request.
 * @sgl: the data: exactly ferry_incoming_data_len() bytes.
 * @nents: entries of @sgl.
 * @done: as for ferry_rdma_read().
 * @ctx: passed to @done.
 *
 * Return: as for ferry_rdma_read().
 */
int ferry_rdma_write(struct ferry_incoming *in, struct scatterlist *sgl,
		     unsigned int nents,
		     void (*done)(struct ferry_incoming *in, void *ctx, int status),
		     void *ctx);

/**
 * ferry_rdma_write_respond() - deliver a request's data and answer it
 * @in: a %FERRY_FROM_PEER request whose data is not inline; ferry takes it
 *	unless this fails.
 * @sgl: the data: exactly ferry_incoming_data_len() bytes.
 * @nents: entries of @sgl.
 * @status: the answer's status, as for ferry_respond().
 * @hdr: the answer's header, as for ferry_respond() (not in @in's own
 *	bytes); copied before this returns.
 * @len: its length.
 * @done: called with @in NULL (the request is answered) once the data went
 *	(@status 0) or could not: the caller owns @sgl's pages again then. In
 *	process context, on the channel's completion work or its teardown.
 * @ctx: passed to @done.
 *
 * As ferry_rdma_write() followed by ferry_respond() from its @done, but
 * the answer goes right behind the data, as nvmet-rdma chains its RDMA
 * WRITE and response: reliable connections deliver it after the data, so
 * the requester's answer does not wait for this side to see the write
 * complete. ferry posts it so when the transfer is posted whole at once
 * (one registration, within the channel's transfer budget), a credit is
 * there and fewer than an eighth of the queue depth (at most 16) answers
 * wait for their data's completion; otherwise it answers once the data
 * went, with the transfer's error if it could not go (a failed completion
 * also fails the connection: the requester then sees -ECONNABORTED). The
 * request's tag stays taken until just before @done
 * (&ferry_limits.incoming_depth has room for it). Counted as
 * ``early_answers`` in ``ferryctl -s session show``. A connection's
 * teardown tells @done -ECONNABORTED for a transfer whose completion it did
 * not see, answered or not.
 *
 * Return: 0 if @done will run (the request is ferry's); -EINVAL for the
 * wrong direction, inline data, a length that differs from the request's
 * or @hdr in @in's own bytes, -EMSGSIZE if @hdr does not fit the peer's
 * messages, -EBUSY if a transfer of @in is in flight, -ENOMEM, or
 * -ENOTCONN if the connection is gone: then nothing was sent, @done will
 * not run and @in stays the caller's, to answer with ferry_respond() (its
 * header, ferry_incoming_header(), may be gone).
 */
int ferry_rdma_write_respond(struct ferry_incoming *in, struct scatterlist *sgl,
			     unsigned int nents, int status, const void *hdr,
			     u32 len,
			     void (*done)(struct ferry_incoming *in, void *ctx,
					  int status),
			     void *ctx);

/**
 * ferry_respond() - answer a request
 * @in: the request; ferry takes it back unless this fails with -EBUSY.
 * @status: 0 or a negative errno, for the requester's &ferry_request.status.
 * @hdr: the response header (may be NULL if @len is 0); not in @in's own
 *	header or inline data (ferry_incoming_header()): copy it first.
 * @len: its length: at most &ferry_limits.max_payload less 16 bytes.
 *
 * Sends the response (as a SEND_WITH_INV that ends the requester's first
 * registration), now or, without a credit, as soon as one returns; it then
 * waits in the request's own entry, preallocated with the channel, so
 * nothing is allocated.
 *
 * Return: 0; -EBUSY if a transfer of @in is still in flight, or -EINVAL if
 * @hdr lies in @in's own bytes (@in stays the caller's for both: respond
 * after its @done, or with a copy); -EMSGSIZE, -ENOMEM, or -ENOTCONN if the
 * connection is gone (the requester then sees -ECONNABORTED). Except for
 * -EBUSY and -EINVAL, @in is gone when this returns.
 */
int ferry_respond(struct ferry_incoming *in, int status, const void *hdr,
		  u32 len);

#endif /* _FERRY_FERRY_H */
