// SPDX-License-Identifier: GPL-2.0

//! One channel of a session: an RC connection, its QP, credits and heartbeats.
//!
//! A channel is driven from three contexts: rdma_cm events (its [`Handler`]),
//! completions (its [`Completion`], never two at once: on `ib_comp_wq`, or for
//! a polled channel in a consumer's thread or the channel's idle-poll work)
//! and the session's tick.
//! All of them take the channel's lock briefly; none of them tears anything
//! down. A failure only marks the channel failed, moves its QP to the error
//! state and tells the session, whose work item later calls
//! [`Channel::shutdown`]. That is the only place the QP and the CM id are
//! destroyed, always without the lock held: destroying them waits for the
//! handlers, which take the lock.
//!
//! The lock (`inner`) is a spinlock that keeps interrupts off: sends and
//! requests go out under it from any context, and nothing under it sleeps or
//! allocates. What may sleep happens outside it: rdma_cm calls (under `cm`,
//! a mutex the data path never takes), moving the QP between states, and a
//! responder's RDMA, which rdma_rw prepares with allocations. For those the
//! QP is lent out (`Arc<Qp>`), counted in `Inner::lent`, and
//! [`Channel::shutdown`] waits for every loan to end before it destroys the
//! QP.
//!
//! Lock order: a session's locks, then a channel's `cm`, then its `inner`.

use core::sync::atomic::{
    AtomicUsize,
    Ordering::{Acquire, Release},
};
use kernel::{
    new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex, SpinLockIrq},
    time::{delay::fsleep, Delta, Instant, Monotonic},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    cm::{self, CmId, ConnParams, ConnectRequest, Event, EventKind, Handler, Locked, SockAddr},
    credits::Credits,
    ferry_abi::CRequest,
    hostile::Hostile,
    netns::Net,
    params::Params,
    rdma::{
        cq::PollCtx,
        device::{Caps, DeviceName},
        mr::{DmaDir, Mr, Remote, SgList},
        pd::Pd,
        qp::{Completion, Qp, QpConfig, QpState, SendRing, TagOp, Wc},
    },
    state::{ChanState, Role},
    stats::{Counter, Counters, Stats},
    wire::{
        self,
        request::{Dir, RequestHead, ResponseHead},
        AcceptData, ConnectData, Header, Hello, HelloReply, Kind, Reason, Refusal, RejectData,
        ServiceName,
    },
    xfer::{self, PendingResponse, RdmaDone, RdmaOp, Refused, Request, Response, Xfer},
};

/// The name ferry's RDMA resources are attributed to (`rdma res show`).
pub(crate) const OWNER: &CStr = c"ferry";

/// What a channel needs of the session that owns it, given when it is
/// made: the channel never names the session's type. The functions that
/// take `this: &Arc<Self>` pass the session on to its consumer's callbacks.
pub(crate) trait Owner: Send + Sync + Sized + 'static {
    /// The session's local handle, for logs.
    fn id(&self) -> u32;
    /// The session's id in the handshake.
    fn session_id(&self) -> u64;
    /// Which side the session is.
    fn role(&self) -> Role;
    /// The session's sizes and timers.
    fn params(&self) -> &Params;
    /// The namespace its CM ids live in.
    fn net(&self) -> &Net;
    /// The peer's address (a client's: the listener's).
    fn peer(&self) -> &SockAddr;
    /// The service the session is for (a client's hello names it).
    fn service(&self) -> ServiceName;
    /// The session's armed faults (test builds).
    fn hostile(&self) -> &Hostile;
    /// The PD of RDMA device `index`, while ferry uses the device.
    fn pd_of(&self, index: u32) -> Option<Arc<Pd>>;
    /// Queues channel `c`'s work `w` on the module's work queue.
    fn queue_channel(&self, c: Arc<Channel<Self>>, w: ChannelWork);
    /// A server channel joins the session before its accept goes out.
    fn add_channel(this: &Arc<Self>, c: Arc<Channel<Self>>) -> Result<(), Reason>;
    /// Server: the first hello of a channel; the reason to refuse it, or
    /// [`Reason::None`].
    fn check_hello(this: &Arc<Self>, hello: &Hello) -> Reason;
    /// Channel `index` of attempt `generation` completed its handshake.
    fn channel_up(this: &Arc<Self>, index: u16, generation: u32);
    /// Channel `index` of attempt `generation` failed for `reason`.
    fn channel_failed(this: &Arc<Self>, index: u16, generation: u32, reason: Reason);
    /// Channel `qid` got credits, tags or regions back.
    fn credits_returned(this: &Arc<Self>, qid: u16);
    /// A consumer's message arrived.
    fn deliver(this: &Arc<Self>, data: &[u8]);
    /// A request arrived.
    fn deliver_request(this: &Arc<Self>, inc: KBox<Incoming<Self>>);
}

/// A channel's work items, which run on the module's work queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChannelWork {
    /// Polls a polled channel its consumer left alone (work item 0).
    IdlePoll,
    /// Grows the region pool (work item 1).
    Grow,
}

/// The requests channels carry: consumers' `struct ferry_request`s.
pub(crate) type Req = CRequest;

/// Most pages one registration maps (2 MiB of 4 KiB pages), or fewer if the
/// device says so.
const MAX_REG_PAGES: u32 = 512;

/// How long address and route resolution may take, in milliseconds.
const RESOLVE_TIMEOUT_MS: u32 = 2000;
/// Local ACK timeout exponent: 4.096 µs * 2^14 = 67 ms per transport retry.
const ACK_TIMEOUT: u8 = 14;
/// Transport retries before a send to a silent peer fails.
const RETRY_COUNT: u8 = 7;

/// How many timeouts a busy peer's adapter may stand in for the peer: its
/// acknowledgements keep a channel alive at most this long without a
/// message from the peer (a wedged peer whose adapter still acknowledges is
/// found then, at the latest).
const BUSY_TIMEOUTS: i64 = 4;

/// Whether the peer counts as dead: no message from it for `timeout_ms`,
/// and, while requests are at work (`busy`), no acknowledgement of its
/// adapter either (see `Inner::last_ack`), for at most [`BUSY_TIMEOUTS`]
/// timeouts. Times in milliseconds ago.
fn peer_silent(rx_ms: i64, ack_ms: i64, busy: bool, timeout_ms: u32) -> bool {
    let timeout = i64::from(timeout_ms);
    rx_ms > timeout && (!busy || ack_ms > timeout || rx_ms > BUSY_TIMEOUTS * timeout)
}

/// Completions the tick processes on a polled channel nobody polls, per run.
const TICK_POLL_BUDGET: u32 = 256;

/// RDMA READs a channel has in flight each way, at most.
const RDMA_READS: u32 = 16;

fn conn_params<'a>(private_data: &'a [u8], caps: &Caps) -> ConnParams<'a> {
    ConnParams {
        private_data,
        // CAST: at most `RDMA_READS`.
        responder_resources: caps.max_qp_rd_atom.min(RDMA_READS) as u8,
        // CAST: as above.
        initiator_depth: caps.max_qp_init_rd_atom.min(RDMA_READS) as u8,
        retry_count: RETRY_COUNT,
        // Credits make receiver-not-ready impossible: one would be a bug, and
        // must fail loudly instead of being retried.
        rnr_retry_count: 0,
    }
}

/// What the channel's lock protects.
struct Inner<O: Owner> {
    /// Changed only through [`Inner::enter`].
    state: ChanState,
    /// The session's role, which the state table depends on.
    role: Role,
    /// Shared only with a thread it is lent to (see the module docs).
    qp: Option<Arc<Qp<Channel<O>>>>,
    /// The head of the QP's send ring.
    ring: Option<SendRing>,
    /// Loans of the QP that have not ended (see the module docs).
    lent: u32,
    credits: Credits,
    /// Largest message the peer accepts.
    peer_max_msg: u32,
    /// Data to the peer a request may carry inline: the smaller of what the
    /// peer announced and this side's own limit.
    peer_inline: u32,
    peer_depth: u32,
    /// When the current state began (for timeouts).
    since: Instant<Monotonic>,
    /// The last message from the peer: the sign of life that counts while
    /// no request is at work.
    last_rx: Instant<Monotonic>,
    /// The last completed send or RDMA, which the peer's adapter
    /// acknowledged: a sign of life too while requests are at work. A peer
    /// that moves megabytes for this side's requests may answer a heartbeat
    /// only after them (its answer waits behind its RDMA on its send queue),
    /// so heartbeats are always signaled: an idle send queue still completes
    /// one per interval. That stands in for the peer's messages for
    /// [`BUSY_TIMEOUTS`] timeouts at most; whether the peer's ferry still
    /// answers a request is the request's own timeout to tell sooner (the
    /// consumer's).
    last_ack: Instant<Monotonic>,
    last_heartbeat: Instant<Monotonic>,
    heartbeat_seq: u64,
    /// The heartbeat in flight and when it left.
    heartbeat_out: Option<(u64, Instant<Monotonic>)>,
    rtt_us: u32,
    device: Option<(u32, DeviceName)>,
    /// The device's limits and the PD the channel's regions live in.
    caps: Option<Caps>,
    pd: Option<Arc<Pd>>,
    /// Requests both ways; see [`crate::xfer`].
    xfer: Option<Xfer<Req>>,
}

impl<O: Owner> Inner<O> {
    /// Moves to `to` if the table allows it ([`ChanState::allows`]). A
    /// refused move is a bug: it is warned about and the state stays.
    fn enter(&mut self, to: ChanState) -> bool {
        if self.state.allows(self.role, to) {
            self.state = to;
            return true;
        }
        pr_warn!(
            "channel: refused state change {:?} -> {:?}\n",
            self.state,
            to
        );
        false
    }

    /// Lends the QP to the calling thread for work that may sleep, unless
    /// the channel is closed; end the loan with [`Channel::end_loan`].
    fn lend_qp(&mut self) -> Option<Arc<Qp<Channel<O>>>> {
        if self.state == ChanState::Closed {
            return None;
        }
        let qp = self.qp.clone()?;
        self.lent += 1;
        Some(qp)
    }

    /// Ends a loan [`Inner::lend_qp`] made. The clone goes under the lock:
    /// the teardown that sees no loan holds the last reference.
    fn end_loan(&mut self, qp: Arc<Qp<Channel<O>>>) {
        drop(qp);
        self.lent -= 1;
    }
}

/// One RC connection of a session.
#[pin_data]
pub(crate) struct Channel<O: Owner> {
    session: Arc<O>,
    index: u16,
    generation: u32,
    /// The CM id, which only the control path touches (rdma_cm calls sleep).
    #[pin]
    cm: Mutex<Option<CmId<Channel<O>>>>,
    #[pin]
    inner: SpinLockIrq<Inner<O>>,
    pub(crate) stats: Stats,
    /// The task handling a completion of the channel (0 when none), so that a
    /// consumer's callback cannot wait for a credit only this task can return.
    cb_task: AtomicUsize,
    /// Polls a polled channel that its consumer left alone (queued by the
    /// tick on ferry's work queue, so that the callbacks it runs delay no
    /// other session's tick).
    #[pin]
    idle_poll: Work<Channel<O>>,
    /// Grows the region pool (see `Xfer::wants_regions`), queued by the
    /// tick and by completions: registering sleeps, so the data path never
    /// does it.
    #[pin]
    grow: Work<Channel<O>, 1>,
}

impl_has_work! {
    impl{O: Owner} HasWork<Self> for Channel<O> { self.idle_poll }
    impl{O: Owner} HasWork<Self, 1> for Channel<O> { self.grow }
}

impl<O: Owner> Channel<O> {
    /// Queues the growth of the region pool, which a request found empty
    /// or running low: from a completion, so that the pool grows while the
    /// requests that need it come back, not a tick later. Process context.
    fn grow_regions(this: Arc<Self>) {
        let owner = this.session.clone();
        owner.queue_channel(this, ChannelWork::Grow);
    }
}

impl<O: Owner> WorkItem<1> for Channel<O> {
    type Pointer = Arc<Channel<O>>;

    fn run(this: Arc<Self>) {
        let (n, pd, pages) = {
            let inner = this.inner.lock();
            let n = inner.xfer.as_ref().map_or(0, Xfer::wants_regions);
            let pages = inner
                .caps
                .map_or(0, |c| c.max_fast_reg_page_list_len.min(MAX_REG_PAGES));
            (n, inner.pd.clone(), pages)
        };
        let Some(pd) = pd.filter(|_| n > 0 && pages > 0) else {
            return;
        };
        let mut mrs = KVec::with_capacity(n as usize, GFP_KERNEL).unwrap_or_default();
        while mrs.len() < mrs.capacity() {
            match Mr::new(&pd, pages) {
                Ok(mr) => {
                    let _ = mrs.push_within_capacity(mr);
                }
                Err(_) => break,
            }
        }
        if mrs.is_empty() {
            return;
        }
        {
            let mut inner = this.inner.lock();
            if inner.state != ChanState::Closed {
                if let Some(x) = inner.xfer.as_mut() {
                    x.add_regions(&mut mrs);
                }
            }
        }
        // What found no room (the channel closed) is deregistered here.
        drop(mrs);
        // Requests that waited for regions may go.
        O::credits_returned(&this.session, this.index);
    }
}

impl<O: Owner> WorkItem for Channel<O> {
    type Pointer = Arc<Channel<O>>;

    fn run(this: Arc<Self>) {
        let poller = this.inner.lock().qp.as_deref().and_then(Qp::poller);
        if let Some(p) = poller {
            p.poll_if_idle(TICK_POLL_BUDGET);
        }
    }
}

/// A snapshot for netlink.
pub(crate) struct ChannelInfo {
    pub(crate) index: u32,
    pub(crate) qp_num: Option<u32>,
    pub(crate) comp_vector: Option<u32>,
    /// The CQ's id, entries and poll context (`enum ib_poll_context`).
    pub(crate) cq: Option<(u32, u32, u32)>,
    pub(crate) polled: bool,
    pub(crate) device: Option<DeviceName>,
    pub(crate) credits: u32,
    pub(crate) rtt_us: u32,
    pub(crate) up: bool,
    pub(crate) counters: Counters,
}

impl<O: Owner> Channel<O> {
    fn new(session: &Arc<O>, index: u16, generation: u32, state: ChanState) -> Result<Arc<Self>> {
        let now = Instant::now();
        Arc::pin_init(
            pin_init!(Self {
                session: session.clone(),
                index,
                generation,
                cm <- new_mutex!(None),
                inner <- new_spinlock_irq!(Inner {
                    state,
                    role: session.role(),
                    qp: None,
                    ring: None,
                    lent: 0,
                    credits: Credits::new(session.params().queue_depth),
                    peer_max_msg: wire::MIN_MSG_SIZE,
                    peer_inline: 0,
                    peer_depth: 0,
                    since: now,
                    last_rx: now,
                    last_ack: now,
                    last_heartbeat: now,
                    heartbeat_seq: 0,
                    heartbeat_out: None,
                    rtt_us: 0,
                    device: None,
                    caps: None,
                    pd: None,
                    xfer: None,
                }),
                stats: Stats::default(),
                cb_task: AtomicUsize::new(0),
                idle_poll <- new_work!("ferry::Channel::idle_poll"),
                grow <- new_work!("ferry::Channel::grow"),
            }),
            GFP_KERNEL,
        )
    }

    /// A client channel, not started yet.
    pub(crate) fn client(session: &Arc<O>, index: u16, generation: u32) -> Result<Arc<Self>> {
        Self::new(session, index, generation, ChanState::Resolving)
    }

    /// Starts a client channel: creates its CM id and resolves the peer. A
    /// failure fails the channel.
    pub(crate) fn start(self: &Arc<Self>) {
        let id = match CmId::new(self.session.net(), self.clone(), OWNER) {
            Ok(id) => id,
            Err(_) => return self.fail(Reason::NoResources),
        };
        let _ = id.set_ack_timeout(ACK_TIMEOUT);
        // Stored before its first event can fail the channel: the teardown
        // that follows a failure takes it under the same lock. A channel
        // closed already stores none (it would never be destroyed).
        let mut cm = self.cm.lock();
        if self.inner.lock().state == ChanState::Closed {
            drop(cm);
            return;
        }
        let res = id.resolve_addr(None, self.session.peer(), RESOLVE_TIMEOUT_MS);
        *cm = Some(id);
        drop(cm);
        if res.is_err() {
            // No device has a route to the peer.
            self.fail(Reason::Unreachable);
        }
    }

    /// Accepts a server channel from a connection request: creates the QP on
    /// the request's device, posts the receive buffers and accepts.
    pub(crate) fn accept(
        session: &Arc<O>,
        data: &ConnectData,
        req: ConnectRequest<'_>,
    ) -> Result<Arc<Self>, Reason> {
        let chan = Self::new(
            session,
            data.channel,
            data.generation,
            ChanState::Connecting,
        )
        .map_err(|_| Reason::NoResources)?;
        let (qp, ring) = match chan.create_qp(req.id()) {
            Ok(qp) => qp,
            Err(r) => {
                let _ = req.reject(&RejectData { reason: r }.encode());
                return Err(r);
            }
        };
        let ready = req
            .id()
            .modify_qp(&qp, QpState::Rtr)
            .and_then(|()| req.id().modify_qp(&qp, QpState::Rts));
        let accept = AcceptData {
            session_id: data.session_id,
        }
        .encode();
        // In the session before its hello can come: the hello of its last
        // channel makes the session connected, which needs them all listed.
        if let Err(r) = O::add_channel(session, chan.clone()) {
            let _ = req.reject(&RejectData { reason: r }.encode());
            chan.inner.lock().enter(ChanState::Closed);
            drop(qp);
            drop(chan.take_qp());
            return Err(r);
        }
        // Completions may arrive as soon as the accept is out: the QP is in
        // place before, and the id is stored before any event can fail the
        // channel (the teardown takes it under the same lock).
        let mut cm = chan.cm.lock();
        let caps = {
            let mut inner = chan.inner.lock();
            inner.qp = Some(qp.clone());
            inner.ring = Some(ring);
            inner.caps.unwrap_or_default()
        };
        let res = ready.and_then(|()| req.accept(chan.clone(), &qp, &conn_params(&accept, &caps)));
        match res {
            Ok(id) => {
                *cm = Some(id);
                // Before the id's lock goes: a teardown, which takes the id
                // first, then holds the QP's last reference.
                drop(qp);
                drop(cm);
                chan.inner.lock().since = Instant::now();
                Ok(chan)
            }
            Err(_) => {
                drop(cm);
                chan.inner.lock().enter(ChanState::Closed);
                drop(qp);
                // Outside the lock: the drain runs completion handlers.
                drop(chan.take_qp());
                Err(Reason::NoResources)
            }
        }
    }

    /// Creates the QP on the device `id` is bound to, moves it to INIT and
    /// posts every receive buffer; the channel's request state (with its
    /// registered regions) comes with it.
    fn create_qp(self: &Arc<Self>, id: &Locked<'_>) -> Result<(Arc<Qp<Self>>, SendRing), Reason> {
        let device = id.device().ok_or(Reason::DeviceRemoved)?;
        let pd = self
            .session
            .pd_of(device.index())
            .ok_or(Reason::DeviceRemoved)?;
        let p = &self.session.params();
        let vectors = device.num_comp_vectors().max(1);
        let cfg = QpConfig {
            recv_slots: p.queue_depth,
            send_slots: p.queue_depth,
            // A message, and the inline data a request may add to it.
            buf_size: p.max_msg + p.inline_size,
            comp_vector: u32::from(self.index) % vectors,
            tags: p.queue_depth,
            port: id.port_num(),
        };
        let caps = device.caps();
        if xfer::pool_regions(p.queue_depth) > caps.max_mr {
            return Err(Reason::NoResources);
        }
        let first = match self.session.role() {
            Role::Client => xfer::FIRST_REGIONS,
            Role::Server => 0,
        };
        let xfer = Xfer::new(
            Some(&pd),
            p.queue_depth,
            caps.max_fast_reg_page_list_len.min(MAX_REG_PAGES),
            first,
        )
        .map_err(|_| Reason::NoResources)?;
        let ctx = if p.polled(self.index) {
            PollCtx::Direct
        } else {
            PollCtx::Workqueue
        };
        let (qp, ring) =
            Qp::new(&pd, cfg, self.clone(), OWNER, ctx).map_err(|_| Reason::NoResources)?;
        let qp = Arc::new(qp, GFP_KERNEL).map_err(|_| Reason::NoResources)?;
        id.modify_qp(&qp, QpState::Init)
            .map_err(|_| Reason::TransportError)?;
        for slot in 0..qp.recv_slots() {
            qp.post_recv(slot).map_err(|_| Reason::NoResources)?;
        }
        let mut inner = self.inner.lock();
        if inner.state == ChanState::Closed {
            // Torn down meanwhile: what was made goes, outside the lock.
            drop(inner);
            drop(xfer);
            return Err(Reason::LocalClose);
        }
        inner.device = Some((device.index(), device.name()));
        inner.caps = Some(caps);
        inner.pd = Some(pd);
        inner.xfer = Some(xfer);
        drop(inner);
        Ok((qp, ring))
    }

    /// The channel index.
    pub(crate) fn index(&self) -> u16 {
        self.index
    }

    /// The session attempt the channel belongs to.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Whether the channel runs on device `index`.
    pub(crate) fn on_device(&self, index: u32) -> bool {
        self.inner
            .lock()
            .device
            .as_ref()
            .is_some_and(|d| d.0 == index)
    }

    /// A snapshot for netlink.
    pub(crate) fn info(&self) -> ChannelInfo {
        let inner = self.inner.lock();
        ChannelInfo {
            index: u32::from(self.index),
            qp_num: inner.qp.as_deref().map(Qp::qp_num),
            comp_vector: inner.qp.as_deref().map(Qp::comp_vector),
            cq: inner
                .qp
                .as_deref()
                .and_then(Qp::cq)
                .map(|cq| (cq.id(), cq.entries(), cq.poll_ctx())),
            polled: self.session.params().polled(self.index),
            device: inner.device.as_ref().map(|d| d.1),
            credits: inner.credits.available(),
            rtt_us: inner.rtt_us,
            up: inner.state == ChanState::Up,
            counters: {
                let mut c = self.stats.snapshot();
                c.set(Counter::CreditStalls, inner.credits.stalls());
                c
            },
        }
    }

    /// The peer's limits learnt in the handshake: (queue depth, largest
    /// message, inline data).
    pub(crate) fn peer_limits(&self) -> (u32, u32, u32) {
        let inner = self.inner.lock();
        (inner.peer_depth, inner.peer_max_msg, inner.peer_inline)
    }

    /// The most pages one of the channel's registrations maps (0 before
    /// the channel has a device).
    pub(crate) fn reg_pages(&self) -> u32 {
        let inner = self.inner.lock();
        inner
            .caps
            .map_or(0, |c| c.max_fast_reg_page_list_len.min(MAX_REG_PAGES))
    }

    /// Marks the channel failed for `reason` (the first reason wins), makes its
    /// QP flush and tells the session. Callable from any of the channel's
    /// contexts; tears nothing down itself.
    pub(crate) fn fail(&self, reason: Reason) {
        let mut inner = self.inner.lock();
        if matches!(inner.state, ChanState::Failed | ChanState::Closed) {
            return;
        }
        inner.enter(ChanState::Failed);
        let qp = inner.lend_qp();
        drop(inner);
        if let Some(qp) = qp {
            // Sleeps on some devices: outside the lock.
            let _ = qp.set_error();
            self.end_loan(qp);
        }
        O::channel_failed(&self.session, self.index, self.generation, reason);
    }

    /// Ends a loan of the QP (see the module docs).
    fn end_loan(&self, qp: Arc<Qp<Channel<O>>>) {
        self.inner.lock().end_loan(qp);
    }

    /// Fails the channel at its consumer's request (a request that timed
    /// out): as [`Channel::fail`]. `ENOTCONN` unless it is up.
    pub(crate) fn reset(&self) -> Result {
        if self.inner.lock().state != ChanState::Up {
            return Err(ENOTCONN);
        }
        self.fail(Reason::Reset);
        Ok(())
    }

    /// Tears the channel down: disconnects, drains and destroys the QP, then
    /// the CM id. Must not be called from the channel's own handlers. May sleep.
    pub(crate) fn shutdown(&self) {
        // Closed first: a client's `start` that comes later stores no id.
        self.inner.lock().enter(ChanState::Closed);
        let cm = self.cm.lock().take();
        if let Some(cm) = cm.as_ref() {
            // Tells a live peer at once instead of leaving it to its heartbeat.
            let _ = cm.disconnect();
        }
        // The last reference: the drain and destruction happen here.
        drop(self.take_qp());
        drop(cm);
        // The QP is drained and gone; deregistering the regions ends every
        // key the peer had. Only then do the requests' pages go back.
        let pool = self.inner.lock().xfer.as_mut().map(|x| {
            x.pending.clear();
            x.take_pool()
        });
        drop(pool);
        loop {
            let f = self.inner.lock().xfer.as_mut().and_then(Xfer::abort_one);
            let Some((f, regs)) = f else { break };
            drop(regs);
            f.complete();
        }
        loop {
            let cb = self
                .inner
                .lock()
                .xfer
                .as_mut()
                .and_then(Xfer::take_one_rdma);
            let Some(cb) = cb else { break };
            cb.done(ECONNABORTED.to_errno());
        }
        // Nothing of the device stays: its PD's registration reference would
        // hold up the device's removal.
        let (xfer, pd) = {
            let mut inner = self.inner.lock();
            (inner.xfer.take(), inner.pd.take())
        };
        drop(xfer);
        drop(pd);
    }

    /// Takes the QP out once no loan of it is out: the caller holds the last
    /// reference. The channel must be closed or never have run (no new loan
    /// then); the loans out never wait for anything the caller holds.
    fn take_qp(&self) -> Option<Arc<Qp<Channel<O>>>> {
        loop {
            let mut inner = self.inner.lock();
            if inner.lent == 0 {
                inner.ring = None;
                return inner.qp.take();
            }
            drop(inner);
            fsleep(Delta::from_millis(1));
        }
    }

    /// Periodic work: connect and heartbeat timeouts, heartbeats. Called from
    /// the session's tick with the session's lock not held.
    pub(crate) fn tick(
        self: &Arc<Self>,
        heartbeat_ms: u32,
        timeout_ms: u32,
        connect_timeout_ms: u32,
    ) {
        // A polled channel its consumer may have left alone since the last
        // tick: its heartbeats, credits and answers must still flow.
        if self.session.params().polled(self.index) {
            self.session
                .queue_channel(self.clone(), ChannelWork::IdlePoll);
        }
        let mut inner = self.inner.lock();
        let timed_out = match inner.state {
            ChanState::Resolving
            | ChanState::Connecting
            | ChanState::Handshake
            | ChanState::Refusing(_) => {
                inner.since.elapsed().as_millis() > i64::from(connect_timeout_ms)
            }
            ChanState::Up => peer_silent(
                inner.last_rx.elapsed().as_millis(),
                inner.last_ack.elapsed().as_millis(),
                inner.xfer.as_ref().is_some_and(Xfer::busy),
                timeout_ms,
            ),
            ChanState::Failed | ChanState::Closed => false,
        };
        if timed_out {
            drop(inner);
            self.fail(Reason::Timeout);
            return;
        }
        if inner.state == ChanState::Up
            && inner.xfer.as_ref().is_some_and(|x| x.wants_regions() > 0)
        {
            // (A mutex: not under the spinlock.)
            drop(inner);
            self.session.queue_channel(self.clone(), ChannelWork::Grow);
            inner = self.inner.lock();
        }
        if inner.state == ChanState::Up
            && inner.last_heartbeat.elapsed().as_millis() >= i64::from(heartbeat_ms)
        {
            inner.heartbeat_seq += 1;
            let seq = inner.heartbeat_seq;
            let now = Instant::now();
            inner.last_heartbeat = now;
            // Without a credit the heartbeat waits: the peer's silence is then
            // what the timeout measures.
            if self
                .send_locked(&mut inner, Kind::Heartbeat, seq, &[])
                .is_ok()
            {
                inner.heartbeat_out = Some((seq, now));
                self.stats.add(Counter::HeartbeatsTx, 1);
            }
        }
    }

    /// Sends a message, taking a credit. `EAGAIN` if there is no credit or send
    /// slot. The handshake's sends are signaled (a refusal fails the channel
    /// once it has left, in `send_done`); the rest only now and then.
    fn send_locked(&self, inner: &mut Inner<O>, kind: Kind, cookie: u64, payload: &[u8]) -> Result {
        let (Some(qp), Some(ring)) = (inner.qp.as_deref(), inner.ring.as_mut()) else {
            return Err(ENOTCONN);
        };
        let grant = inner.credits.take(kind == Kind::Credits).ok_or(EAGAIN)?;
        let fill = |buf: &mut [u8]| {
            let n = Header::write(kind, grant, cookie, payload, buf)?;
            if kind == Kind::Message {
                self.session.hostile().message(buf);
            }
            Ok(n)
        };
        // A heartbeat's completion is a sign of life even when its answer
        // waits behind the peer's own RDMA on the peer's send queue: the
        // peer's adapter acknowledged it (see `Inner::last_ack`).
        let res = if matches!(kind, Kind::Hello | Kind::HelloReply | Kind::Heartbeat) {
            qp.send_signaled(ring, fill)
        } else {
            qp.send(ring, fill)
        };
        match res {
            Ok(_) => {
                self.stats.add(Counter::TxMsgs, 1);
                self.stats
                    .add(Counter::TxBytes, (Header::LEN + payload.len()) as u64);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Sends a consumer's message. `ENOTCONN` unless the channel is up,
    /// `EMSGSIZE` if it exceeds the peer's limit, `EAGAIN` without a credit.
    pub(crate) fn send_message(&self, data: &[u8]) -> Result {
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if data.is_empty() || data.len() > (inner.peer_max_msg as usize).saturating_sub(Header::LEN)
        {
            return Err(EMSGSIZE);
        }
        self.send_locked(&mut inner, Kind::Message, 0, data)?;
        self.stats.add(Counter::DataTx, 1);
        Ok(())
    }

    /// Sends request `req` with its `data` (see [`crate::xfer`]). On failure
    /// both come back: `ENOTCONN` unless the channel is up, `EAGAIN` without
    /// a credit, a free tag or free regions, `EBUSY` if `own` (the caller's
    /// tag) is in flight, `EINVAL` if it is beyond the queue depth,
    /// `EMSGSIZE` if the header does not fit the peer's limit or the data
    /// needs more than 8 registrations. Allocates nothing and never sleeps.
    pub(crate) fn submit(
        &self,
        own: Option<u32>,
        req: Req,
        data: Option<SgList>,
    ) -> Result<(), Refused<Req>> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if inner.state != ChanState::Up {
            return Err((ENOTCONN, req, data));
        }
        let (Some(qp), Some(ring), Some(pd), Some(xfer)) = (
            inner.qp.as_deref(),
            inner.ring.as_mut(),
            inner.pd.as_ref(),
            inner.xfer.as_mut(),
        ) else {
            return Err((ENOTCONN, req, data));
        };
        // The largest head: every region used.
        let worst = RequestHead::FIXED + RequestHead::DESC * wire::request::MAX_DESCS;
        if Header::LEN + worst + Request::header(&req).len() > inner.peer_max_msg as usize {
            return Err((EMSGSIZE, req, data));
        }
        let Some(grant) = inner.credits.take(false) else {
            return Err((EAGAIN, req, data));
        };
        let write = Request::dir(&req) == Dir::FromPeer;
        let limit = inner.peer_depth.min(self.session.params().queue_depth);
        let res = xfer.submit(
            Some(pd),
            limit,
            inner.peer_inline,
            own,
            req,
            data,
            |tag, regs, cookie, head, hdr, inline| {
                let mrs = regs.as_slice();
                qp.send_registered(ring, tag, mrs, write, |buf| {
                    let n = Header::write_with(Kind::Request, grant, cookie, buf, |p| {
                        head.write(hdr, p, |d| match inline {
                            Some(sg) => sg.copy_to(d),
                            None => Err(EINVAL),
                        })
                    })?;
                    self.session.hostile().request(buf);
                    self.stats.add(Counter::TxBytes, n as u64);
                    Ok(n)
                })?;
                self.stats.add(Counter::Registrations, mrs.len() as u64);
                if inline.is_some() {
                    self.stats.add(Counter::Inline, 1);
                }
                Ok(())
            },
        );
        match res {
            Ok(()) => {
                self.stats.add(Counter::RequestsTx, 1);
                self.stats.add(Counter::TxMsgs, 1);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Responder: moves the data of `inc` between its requester and `sg` (an
    /// RDMA READ for a request whose data goes to this side, a WRITE for one
    /// whose data comes from it), region after region; `done` is told when
    /// it is over. `sg` must hold the request's whole data. Process context:
    /// rdma_rw allocates as it prepares a transfer.
    ///
    /// Data that came inline is copied into `sg` at once, and `done` comes
    /// back for the caller to call once it no longer borrows `inc` (whose
    /// answer `done` may send): `Ok(Some(done))`.
    pub(crate) fn incoming_rdma(
        &self,
        inc: &mut Incoming<O>,
        sg: SgList,
        done: KBox<dyn RdmaDone>,
    ) -> Result<Option<KBox<dyn RdmaDone>>> {
        let dir = match inc.head.dir {
            // RDMA READ: the device writes the local pages.
            Dir::ToPeer => DmaDir::FromDevice,
            Dir::FromPeer => DmaDir::ToDevice,
            Dir::None => return Err(EINVAL),
        };
        if sg.len() != u64::from(inc.head.data_len) {
            return Err(EINVAL);
        }
        if inc.head.inline {
            sg.copy_from(inc.inline_data())?;
            inc.moved = inc.head.data_len;
            return Ok(Some(done));
        }
        let mut op = RdmaOp {
            done,
            list: Arc::new(sg, GFP_KERNEL)?,
            head: inc.head,
            dir,
            next: 0,
            offset: 0,
        };
        let (first, mut remote) = op.next_region().ok_or(EINVAL)??;
        self.session.hostile().remote(&mut remote);
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if inner.xfer.as_ref().is_some_and(|x| x.rdma_pending(inc.tag)) {
            return Err(EBUSY);
        }
        let Some(qp) = inner.lend_qp() else {
            return Err(ENOTCONN);
        };
        let (tag, len) = (inc.tag, inc.head.data_len);
        // Recorded before it is posted: it may complete, and its `done`
        // answer and free `inc`, at once. Nothing touches `inc` after.
        if let Some(x) = inner.xfer.as_mut() {
            x.set_rdma(tag, op);
        }
        inc.moved = len;
        drop(inner);
        let res = qp.rdma(tag, first, remote, dir);
        let mut inner = self.inner.lock();
        if res.is_err() {
            // Never posted: `done` is not called; the caller hears the error.
            drop(inner.xfer.as_mut().and_then(|x| x.take_rdma(tag)));
            inc.moved = 0;
        }
        inner.end_loan(qp);
        drop(inner);
        res.map_err(|(e, _)| e)?;
        self.stats.add(Counter::RdmaBytes, u64::from(len));
        Ok(None)
    }

    /// Responder: the transfer of tag `tag` completed (`ok`): posts its next
    /// region, if it has one and the channel lives, or tells its consumer.
    fn rdma_completed(&self, tag: u32, ok: bool) {
        let mut inner = self.inner.lock();
        if ok {
            inner.last_ack = Instant::now();
        }
        // While the channel shuts down its QP is being drained: the teardown
        // completes the transfer once the QP is gone.
        let Some(qp) = inner.qp.as_deref() else {
            return;
        };
        let _ = qp.rdma_done(tag);
        let mut status = if ok { 0 } else { EIO.to_errno() };
        let next = match inner.xfer.as_mut().and_then(|x| x.rdma_op(tag)) {
            Some(op) if ok => op.next_desc(),
            _ => None,
        };
        if let Some((list, offset, d, dir)) = next {
            // A channel closing: the teardown completes the transfer, which
            // is not over.
            let Some(qp) = inner.lend_qp() else { return };
            drop(inner);
            // Slicing allocates and rdma_rw may: without the lock.
            let res = SgList::slice(&list, offset, d.len).and_then(|sg| {
                let remote = Remote {
                    addr: d.addr,
                    len: d.len,
                    rkey: d.rkey,
                };
                qp.rdma(tag, sg, remote, dir).map_err(|(e, _)| e)
            });
            inner = self.inner.lock();
            inner.end_loan(qp);
            match res {
                Ok(()) => return,
                Err(e) => status = e.to_errno(),
            }
        }
        let cb = inner.xfer.as_mut().and_then(|x| x.take_rdma(tag));
        drop(inner);
        if let Some(cb) = cb {
            cb.done(status);
        }
    }

    /// Responder: answers `inc` with `status` and `hdr`, invalidating the
    /// requester's first key if the request had data. A response that finds
    /// no credit waits for one (a copy of `hdr`, made then). `EBUSY` while a
    /// transfer of `inc` is in flight, `ENOTCONN` if the channel is gone,
    /// `EMSGSIZE` if `hdr` does not fit.
    pub(crate) fn respond(&self, inc: &Incoming<O>, status: i32, hdr: &[u8]) -> Result {
        let head = ResponseHead {
            status: status.clamp(-4095, 0),
            moved: inc.moved,
        };
        let invalidate = (inc.head.ndesc > 0).then_some(inc.head.descs[0].rkey);
        {
            let mut inner = self.inner.lock();
            if inner.xfer.as_ref().is_some_and(|x| x.rdma_pending(inc.tag)) {
                return Err(EBUSY);
            }
            if inner.state != ChanState::Up {
                return Err(ENOTCONN);
            }
            if Header::LEN + ResponseHead::FIXED + hdr.len() > inner.peer_max_msg as usize {
                return Err(EMSGSIZE);
            }
            let queued = inner.xfer.as_ref().is_some_and(|x| !x.pending.is_empty());
            if !queued {
                match self.send_response(&mut inner, inc.cookie, &head, hdr, invalidate) {
                    Err(e) if e == EAGAIN => {}
                    r => return r,
                }
            }
        }
        // Behind the others, in order.
        let mut copy = KVec::new();
        copy.extend_from_slice(hdr, GFP_KERNEL)?;
        let r = PendingResponse {
            cookie: inc.cookie,
            head,
            hdr: copy,
            invalidate,
        };
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if let Some(x) = inner.xfer.as_mut() {
            // One per responder tag, which `inc` holds: there is room.
            x.pending.push_within_capacity(r).map_err(|_| ENOMEM)?;
        }
        drop(inner);
        // A credit may have come back meanwhile.
        self.flush_responses();
        Ok(())
    }

    fn send_response(
        &self,
        inner: &mut Inner<O>,
        cookie: u64,
        head: &ResponseHead,
        hdr: &[u8],
        invalidate: Option<u32>,
    ) -> Result {
        let (Some(qp), Some(ring)) = (inner.qp.as_deref(), inner.ring.as_mut()) else {
            return Err(ENOTCONN);
        };
        let grant = inner.credits.take(false).ok_or(EAGAIN)?;
        let fill = |buf: &mut [u8]| {
            let n = Header::write_with(Kind::Response, grant, cookie, buf, |p| head.write(hdr, p))?;
            self.stats.add(Counter::TxBytes, n as u64);
            Ok(n)
        };
        let res = match invalidate {
            Some(rkey) => qp.send_with_invalidate(ring, rkey, fill),
            None => qp.send(ring, fill),
        };
        match res {
            Ok(_) => {
                self.stats.add(Counter::TxMsgs, 1);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Credits or send slots came back: sends the responses that wait for
    /// them, then lets the session's blocked senders go on.
    fn unblocked(&self) {
        self.flush_responses();
        O::credits_returned(&self.session, self.index);
    }

    /// Sends the responses that wait for credits, while credits last.
    fn flush_responses(&self) {
        let mut inner = self.inner.lock();
        loop {
            let Some(r) = inner.xfer.as_mut().and_then(|x| {
                (!x.pending.is_empty())
                    .then(|| x.pending.remove(0).ok())
                    .flatten()
            }) else {
                return;
            };
            if self
                .send_response(&mut inner, r.cookie, &r.head, &r.hdr, r.invalidate)
                .is_err()
            {
                if let Some(x) = inner.xfer.as_mut() {
                    let _ = x.pending.insert_within_capacity(0, r);
                }
                return;
            }
        }
    }

    /// Test builds: sends a response to a request the peer never made.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub(crate) fn send_stray_response(&self) -> Result {
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        // Tag 0xfff0 of generation 0xffff: beyond any tag count.
        self.send_locked(&mut inner, Kind::Response, 0xffff_fff0, &[0u8; 16])
    }

    /// An [`Incoming`] is gone: its responder tag is free.
    pub(crate) fn incoming_dropped(&self, tag: u32) {
        if let Some(x) = self.inner.lock().xfer.as_mut() {
            x.put_incoming(tag);
        }
    }

    /// Processes up to `budget` of the channel's completions in the calling
    /// thread, unless another thread is processing them; counts and returns
    /// how many. The handlers take the channel's lock: the caller holds none
    /// of ferry's.
    pub(crate) fn poll(&self, budget: u32) -> u32 {
        let Some(poller) = self.inner.lock().qp.as_deref().and_then(Qp::poller) else {
            return 0;
        };
        let n = poller.poll(budget);
        if n != 0 {
            self.stats.add(Counter::Polled, n.into());
        }
        n
    }

    /// Whether the current task is handling one of the channel's completions.
    pub(crate) fn in_callback(&self) -> bool {
        self.cb_task.load(Acquire) == current_task()
    }

    /// Client, connection up: sends the hello.
    fn send_hello(&self, inner: &mut Inner<O>) -> Result {
        let p = &self.session.params();
        let hello = Hello {
            service: self.session.service(),
            queue_depth: p.queue_depth,
            max_msg: p.max_msg,
            heartbeat_ms: p.heartbeat_ms,
            inline_size: p.inline_size,
        };
        self.send_locked(inner, Kind::Hello, 0, &hello.encode())
    }

    /// Handles one received message (`invalidated`: the key a
    /// send-with-invalidate ended); `Err` fails the channel. Returns whether
    /// the message granted credits.
    fn receive(self: &Arc<Self>, msg: &[u8], invalidated: Option<u32>) -> Result<bool, Refusal> {
        let (h, payload) = Header::parse(msg)?;
        let granted = h.credits != 0;
        let role = self.session.role();
        // The session's lock comes before the channel's: ask it first.
        let hello = match (h.kind, role) {
            (Kind::Hello, Role::Server) => {
                let hello = Hello::decode(payload).map_err(|reason| Refusal {
                    reason,
                    // Limits out of range are a refusal, not a breach.
                    what: if reason == Reason::Malformed {
                        "a malformed hello"
                    } else {
                        ""
                    },
                })?;
                Some((hello, O::check_hello(&self.session, &hello)))
            }
            _ => None,
        };
        let mut inner = self.inner.lock();
        inner.last_rx = Instant::now();
        self.stats.add(Counter::RxMsgs, 1);
        self.stats.add(Counter::RxBytes, msg.len() as u64);
        match (h.kind, inner.state, hello) {
            (Kind::Hello, ChanState::Connecting | ChanState::Handshake, Some((hello, status))) => {
                // The peer's depth bounds its grants from here on.
                inner.credits.set_peer_depth(hello.queue_depth);
                inner.credits.grant(h.credits)?;
                inner.peer_depth = hello.queue_depth;
                let p = &self.session.params();
                inner.peer_max_msg = hello.max_msg.min(p.max_msg);
                inner.peer_inline = hello.inline_size.min(p.inline_size);
                let reply = HelloReply {
                    status,
                    queue_depth: p.queue_depth,
                    max_msg: p.max_msg,
                    heartbeat_ms: p.heartbeat_ms,
                    inline_size: p.inline_size,
                };
                self.send_locked(&mut inner, Kind::HelloReply, 0, &reply.encode())
                    .map_err(|_| Reason::NoResources)?;
                if status != Reason::None {
                    // Fail once the refusal has left (see `send_done`).
                    inner.enter(ChanState::Refusing(status));
                    return Ok(false);
                }
                if !inner.enter(ChanState::Up) {
                    return Ok(false);
                }
                inner.last_heartbeat = Instant::now();
                drop(inner);
                O::channel_up(&self.session, self.index, self.generation);
                Ok(false)
            }
            (Kind::HelloReply, ChanState::Handshake, None) if role == Role::Client => {
                let reply = HelloReply::decode(payload).map_err(|reason| Refusal {
                    reason,
                    what: if reason == Reason::Malformed {
                        "a malformed hello reply"
                    } else {
                        ""
                    },
                })?;
                if reply.status != Reason::None {
                    return Err(reply.status.into());
                }
                inner.credits.set_peer_depth(reply.queue_depth);
                inner.credits.grant(h.credits)?;
                inner.peer_depth = reply.queue_depth;
                inner.peer_max_msg = reply.max_msg.min(self.session.params().max_msg);
                inner.peer_inline = reply.inline_size.min(self.session.params().inline_size);
                if !inner.enter(ChanState::Up) {
                    return Ok(false);
                }
                inner.last_heartbeat = Instant::now();
                drop(inner);
                O::channel_up(&self.session, self.index, self.generation);
                Ok(false)
            }
            (Kind::Heartbeat, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                self.stats.add(Counter::HeartbeatsRx, 1);
                // No credit for the ack: the peer's heartbeat times out only if
                // this goes on, which is what it should measure.
                let _ = self.send_locked(&mut inner, Kind::HeartbeatAck, h.cookie, &[]);
                Ok(granted)
            }
            (Kind::Message, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                drop(inner);
                self.stats.add(Counter::DataRx, 1);
                O::deliver(&self.session, payload);
                Ok(granted)
            }
            (Kind::Request, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                let (head, hdr, data) =
                    RequestHead::parse(payload, self.session.params().inline_size)
                        .map_err(|_| Refusal::breach("a malformed request"))?;
                // The requester may have its queue depth in flight: this
                // side's depth, which is also the tag count.
                let tag = inner
                    .xfer
                    .as_mut()
                    .and_then(Xfer::take_incoming)
                    .ok_or(Refusal::breach("more requests than its queue depth"))?;
                drop(inner);
                self.stats.add(Counter::RequestsRx, 1);
                // The header and inline data, kept until the consumer
                // responds; the receive buffer goes back to the peer now.
                let mut bytes = KVec::new();
                let inc = bytes
                    .reserve(hdr.len() + data.len(), GFP_KERNEL)
                    .map_err(Error::from)
                    .and_then(|()| {
                        bytes.extend_from_slice(hdr, GFP_KERNEL)?;
                        bytes.extend_from_slice(data, GFP_KERNEL)?;
                        KBox::new(
                            Incoming {
                                chan: self.clone(),
                                tag,
                                cookie: h.cookie,
                                head,
                                bytes,
                                moved: 0,
                            },
                            GFP_KERNEL,
                        )
                        .map_err(Error::from)
                    });
                match inc {
                    Ok(inc) => O::deliver_request(&self.session, inc),
                    Err(_) => {
                        self.incoming_dropped(tag);
                        return Err(Reason::NoResources.into());
                    }
                }
                Ok(granted)
            }
            (Kind::Response, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                if invalidated.is_some() {
                    self.stats.add(Counter::InvRemote, 1);
                }
                let x = inner
                    .xfer
                    .as_mut()
                    .ok_or(Refusal::breach("a response on a channel without requests"))?;
                match x.response(h.cookie, invalidated, payload)? {
                    Response::Finished(f) => {
                        let grow = x.wants_regions() > 0;
                        drop(inner);
                        f.complete();
                        if grow {
                            Self::grow_regions(self.clone());
                        }
                        // Its tag and regions are free.
                        O::credits_returned(&self.session, self.index);
                    }
                    Response::Invalidate(tag, keys) => {
                        let qp = inner.qp.as_ref().ok_or(Reason::LocalClose)?;
                        if let Err(e) = qp.local_invalidate(tag, keys.as_slice()) {
                            // Once per channel: the failure closes it.
                            pr_warn!(
                                "session {} channel {}: posting {} invalidations failed: {:?}\n",
                                self.session.id(),
                                self.index,
                                keys.as_slice().len(),
                                e
                            );
                            return Err(Reason::TransportError.into());
                        }
                        self.stats
                            .add(Counter::InvLocal, keys.as_slice().len() as u64);
                    }
                }
                Ok(granted)
            }
            (Kind::HeartbeatAck, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                if let Some((seq, at)) = inner.heartbeat_out {
                    if seq == h.cookie {
                        let us = at.elapsed().as_micros_ceil();
                        inner.rtt_us = u32::try_from(us).unwrap_or(u32::MAX);
                        inner.heartbeat_out = None;
                    }
                }
                Ok(granted)
            }
            (Kind::Credits, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                Ok(granted)
            }
            // Completions still coming in after the channel failed: nothing
            // to act on, and no fault of the peer's.
            (_, ChanState::Failed | ChanState::Closed, _) => Ok(false),
            // A message out of place: a hello twice, a reply to a server, data
            // before the handshake.
            _ => Err(Refusal::breach("a message out of place")),
        }
    }

    /// A failed work completion: the first one that is not a flush is logged
    /// and fails the channel; flushes are only counted.
    fn wc_failed(&self, wc: &Wc) {
        self.stats.add_wc(wc.status());
        if wc.flushed() {
            // A flush is the echo of a failure that came first, unless the
            // channel is still up: then nothing else said why.
            if self.stats.add(Counter::FlushErrors, 1) == 0
                && self.inner.lock().state == ChanState::Up
            {
                pr_warn!(
                    "session {} channel {}: work flushed on a channel still up\n",
                    self.session.id(),
                    self.index
                );
            }
        } else {
            let first = self.stats.add(Counter::WcErrors, 1) == 0;
            if first {
                pr_warn!(
                    "session {} channel {}: {} (status {}, vendor error {:#x})\n",
                    self.session.id(),
                    self.index,
                    wc.status_msg(),
                    wc.status(),
                    wc.vendor_err()
                );
            }
        }
        self.fail(Reason::TransportError);
    }
}

impl<O: Owner> Completion for Channel<O> {
    fn recv_done(this: ArcBorrow<'_, Self>, _slot: u32, wc: &Wc, data: &[u8]) -> bool {
        let this: Arc<Self> = this.into();
        this.recv_done(wc, data)
    }

    fn tag_done(this: ArcBorrow<'_, Self>, tag: u32, op: TagOp, wc: &Wc) {
        match op {
            // Registrations are unsignaled: this is a failure.
            // Both complete only on failure: the transfer's own completion
            // follows, flushed.
            TagOp::Reg | TagOp::RdmaStep => this.wc_failed(wc),
            TagOp::Inv if !wc.ok() => this.wc_failed(wc),
            TagOp::Inv => {
                let (f, grow) = {
                    let mut inner = this.inner.lock();
                    let x = inner.xfer.as_mut();
                    x.map_or((None, false), |x| {
                        (x.invalidated(tag), x.wants_regions() > 0)
                    })
                };
                if let Some(f) = f {
                    f.complete();
                    if grow {
                        Self::grow_regions(this.into());
                    }
                    // Its tag and regions are free: what waits for them may go on.
                    O::credits_returned(&this.session, this.index);
                }
            }
            TagOp::Rdma => {
                this.rdma_completed(tag, wc.ok());
                if !wc.ok() {
                    this.wc_failed(wc);
                }
            }
        }
    }

    fn handling(this: ArcBorrow<'_, Self>, on: bool) {
        // Completions of one CQ never run concurrently: this is the only task
        // that stores here.
        this.cb_task
            .store(if on { current_task() } else { 0 }, Release);
    }

    fn recv_reposted(this: ArcBorrow<'_, Self>, _slot: u32) {
        let mut inner = this.inner.lock();
        if inner.credits.reposted() && inner.state == ChanState::Up {
            // Nothing else went out to carry the grant: send it alone.
            if this.send_locked(&mut inner, Kind::Credits, 0, &[]).is_ok() {
                this.stats.add(Counter::CreditUpdates, 1);
            }
        }
    }

    fn send_done(this: ArcBorrow<'_, Self>, _slot: u32, wc: &Wc) {
        if !wc.ok() {
            this.wc_failed(wc);
            return;
        }
        let mut inner = this.inner.lock();
        inner.last_ack = Instant::now();
        let state = inner.state;
        drop(inner);
        if let ChanState::Refusing(reason) = state {
            this.fail(reason);
            return;
        }
        // Send slots came free: what found none may go on.
        this.unblocked();
    }
}

impl<O: Owner> Channel<O> {
    fn recv_done(self: &Arc<Self>, wc: &Wc, data: &[u8]) -> bool {
        if !wc.ok() {
            self.wc_failed(wc);
            return false;
        }
        let res = self.receive(data, wc.invalidated());
        if res == Ok(true) {
            self.unblocked();
        }
        match res {
            Ok(_) => true,
            Err(r) => {
                if !r.what.is_empty() {
                    pr_warn!(
                        "session {} channel {}: the peer broke the protocol ({}, {} bytes): closing the connection\n",
                        self.session.id(),
                        self.index,
                        r.what,
                        data.len()
                    );
                }
                self.fail(r.reason);
                false
            }
        }
    }
}

impl<O: Owner> Handler for Channel<O> {
    fn event(this: ArcBorrow<'_, Self>, id: &Locked<'_>, ev: &Event<'_>) {
        let this: Arc<Self> = this.into();
        this.cm_event(id, ev);
    }
}

impl<O: Owner> Channel<O> {
    fn cm_event(self: &Arc<Self>, id: &Locked<'_>, ev: &Event<'_>) {
        match ev.kind() {
            EventKind::AddrResolved => {
                if id.resolve_route(RESOLVE_TIMEOUT_MS).is_err() {
                    self.fail(Reason::Unreachable);
                }
            }
            EventKind::AddrError | EventKind::RouteError => self.fail(Reason::Unreachable),
            EventKind::RouteResolved => {
                if let Err(r) = self.route_resolved(id) {
                    self.fail(r);
                }
            }
            EventKind::ConnectResponse => {
                if let Err(r) = self.connect_response(id, ev) {
                    self.fail(r);
                }
            }
            EventKind::Established => {
                // Server side: the client's hello may already be in.
                let mut inner = self.inner.lock();
                if inner.state == ChanState::Connecting {
                    inner.enter(ChanState::Handshake);
                }
            }
            EventKind::Rejected => {
                let reason = match ev.consumer_reject_data().and_then(RejectData::decode) {
                    Some(r) => r.reason,
                    None if ev.status() == cm::REJ_INVALID_SERVICE_ID => Reason::NoListener,
                    None => {
                        pr_info!(
                            "session {}: connect rejected: {}\n",
                            self.session.id(),
                            id.reject_msg(ev.status())
                        );
                        Reason::CmRejected
                    }
                };
                self.fail(reason);
            }
            EventKind::Unreachable | EventKind::ConnectError => {
                self.fail(if ev.status() == ETIMEDOUT.to_errno() {
                    Reason::Timeout
                } else {
                    Reason::Unreachable
                })
            }
            EventKind::Disconnected => self.fail(Reason::PeerClosed),
            // The session's work destroys the id, which rdma_cm waits for.
            EventKind::DeviceRemoval => self.fail(Reason::DeviceRemoved),
            EventKind::AddrChange => self.fail(Reason::Unreachable),
            EventKind::TimewaitExit | EventKind::Other(_) => {}
        }
    }

    /// Client: route known; create the QP and send the connect request.
    fn route_resolved(self: &Arc<Self>, id: &Locked<'_>) -> Result<(), Reason> {
        let (qp, ring) = self.create_qp(id)?;
        let data = ConnectData {
            session_id: self.session.session_id(),
            generation: self.generation,
            channel: self.index,
            channels: self.session.params().channels,
            max_msg: self.session.params().max_msg,
            // CAST: at most `MAX_QUEUE_DEPTH`, which fits.
            queue_depth: self.session.params().queue_depth as u16,
        }
        .encode();
        // Held until the connect is out: the teardown, which takes the QP,
        // takes the id under it first.
        let cm = self.cm.lock();
        let caps = {
            let mut inner = self.inner.lock();
            if cm.is_none() || inner.state != ChanState::Resolving {
                drop(inner);
                drop(cm);
                drop(qp);
                return Err(Reason::LocalClose);
            }
            inner.qp = Some(qp.clone());
            inner.ring = Some(ring);
            inner.enter(ChanState::Connecting);
            inner.caps.unwrap_or_default()
        };
        let res = id.connect(&qp, &conn_params(&data, &caps));
        drop(qp);
        drop(cm);
        // A QP that never connected goes with the channel's teardown.
        res.map_err(|_| Reason::NoResources)
    }

    /// Client: the server accepted; check its data, bring the QP up, complete
    /// the connection and say hello.
    fn connect_response(&self, id: &Locked<'_>, ev: &Event<'_>) -> Result<(), Reason> {
        let acc = AcceptData::decode(ev.private_data())?;
        if acc.session_id != self.session.session_id() {
            return Err(Reason::ProtocolError);
        }
        // As in `route_resolved`: no teardown takes the QP meanwhile.
        let cm = self.cm.lock();
        let qp = match cm.as_ref() {
            Some(_) => self.inner.lock().qp.clone(),
            None => None,
        };
        let qp = qp.ok_or(Reason::LocalClose)?;
        let res = id
            .modify_qp(&qp, QpState::Rtr)
            .and_then(|()| id.modify_qp(&qp, QpState::Rts))
            .and_then(|()| id.establish());
        drop(qp);
        drop(cm);
        res.map_err(|_| Reason::TransportError)?;
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Connecting {
            return Err(Reason::LocalClose);
        }
        inner.enter(ChanState::Handshake);
        inner.since = Instant::now();
        self.send_hello(&mut inner).map_err(|_| Reason::NoResources)
    }
}

/// The current task, as a number to compare.
fn current_task() -> usize {
    kernel::task::Task::current_raw().addr()
}

/// A request that arrived, until the consumer responds.
pub(crate) struct Incoming<O: Owner> {
    pub(crate) chan: Arc<Channel<O>>,
    /// This side's responder tag.
    pub(crate) tag: u32,
    /// The requester's tag.
    pub(crate) cookie: u64,
    pub(crate) head: RequestHead,
    /// The requester's header, then its inline data if the request has any.
    pub(crate) bytes: KVec<u8>,
    /// Bytes moved so far.
    pub(crate) moved: u32,
}

impl<O: Owner> Incoming<O> {
    /// Which way its data goes.
    pub(crate) fn dir(&self) -> Dir {
        self.head.dir
    }

    /// Bytes of data.
    pub(crate) fn data_len(&self) -> u32 {
        self.head.data_len
    }

    /// The requester's header.
    pub(crate) fn header(&self) -> &[u8] {
        let inline = if self.head.inline {
            self.head.data_len as usize
        } else {
            0
        };
        &self.bytes[..self.bytes.len() - inline]
    }

    /// The data that came in the request (empty unless it came inline).
    pub(crate) fn inline_data(&self) -> &[u8] {
        &self.bytes[self.header().len()..]
    }

    /// Answers the request: see [`Channel::respond`].
    pub(crate) fn respond(self: KBox<Self>, status: i32, hdr: &[u8]) -> Result {
        let chan = self.chan.clone();
        chan.respond(&self, status, hdr)
    }
}

impl<O: Owner> Drop for Incoming<O> {
    fn drop(&mut self) {
        self.chan.incoming_dropped(self.tag);
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_channel_liveness)]
mod tests {
    use super::peer_silent;

    #[test]
    fn idle_needs_a_message() {
        // Acknowledged sends alone do not keep an idle peer alive.
        assert!(peer_silent(5001, 10, false, 5000));
        assert!(!peer_silent(4999, 9000, false, 5000));
    }

    #[test]
    fn busy_lives_on_acknowledgements() {
        // A long transfer: the peer's answers wait behind its RDMA, but its
        // adapter acknowledged a heartbeat a second ago.
        assert!(!peer_silent(19_000, 1000, true, 5000));
        // Neither for the whole timeout: dead, busy or not.
        assert!(peer_silent(5001, 5001, true, 5000));
        assert!(!peer_silent(100, 9000, true, 5000));
    }

    #[test]
    fn acknowledgements_stand_in_for_four_timeouts_at_most() {
        // A wedged peer whose adapter still acknowledges is dead all the same.
        assert!(!peer_silent(20_000, 10, true, 5000));
        assert!(peer_silent(20_001, 10, true, 5000));
    }
}
