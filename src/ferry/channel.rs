// SPDX-License-Identifier: GPL-2.0

//! One channel of a session: an RC connection, its QP, credits and heartbeats.
//!
//! A channel is driven from three contexts: rdma_cm events (its [`Handler`]),
//! completions (its [`Completion`], never two at once: on `ib_comp_wq`, in
//! softirq for a client's `FERRY_SOFTIRQ` channel, or for a polled channel
//! in a consumer's thread or the channel's idle-poll work) and the session's
//! tick.
//! All of them take the channel's lock briefly; none of them tears anything
//! down. A failure only marks the channel failed, moves its QP to the error
//! state (from the channel's deferred work when its completions run in
//! softirq) and tells the session, whose work item later calls
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
    new_condvar, new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    sync::{Arc, ArcBorrow, CondVar, Mutex, SpinLockIrq, SpinLockIrqGuard},
    time::{Instant, Monotonic},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    cm::{self, CmId, ConnParams, ConnectRequest, Event, EventKind, Handler, Locked, SockAddr},
    credits::Credits,
    ferry_abi::{CRequest, RdmaCallback},
    hostile::Hostile,
    netns::Net,
    params::Params,
    pool::{Lent, Pool, Recycle},
    rdma::{
        cq::PollCtx,
        device::{Caps, DeviceName},
        mr::{DmaDir, Mr, Remote, SgList},
        pd::Pd,
        qp::{Completion, Posted, Qp, QpConfig, QpState, SendRing, TagOp, Wc},
    },
    state::{ChanState, Role},
    stats::{Counter, Counters, Stats},
    wire::{
        self,
        request::{Dir, RequestHead, ResponseHead},
        AcceptData, Auth, AuthContext, ConnectData, Header, Hello, HelloReply, Kind, Nonce, Reason,
        Refusal, RejectData, Secret, ServiceName,
    },
    xfer::{self, RdmaDone, RdmaOp, Refused, Request, Response, Xfer},
};

mod connect;
mod receive;
mod responder;
mod send;
mod timers;

use responder::Responder;
pub(crate) use responder::{respond, Incoming};

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
    /// Client: the session's secret, which a connection request proves it
    /// knows; none before the first channel came up.
    fn join_secret(&self) -> Option<Secret>;
    /// Client: the server handed the session's secret (channel 0's hello
    /// reply). Called under the channel's lock: takes a spinlock at most.
    fn learn_secret(&self, secret: Secret);
    /// Server: the secret channel `index`'s hello reply hands the client,
    /// if it is channel 0 of a client that takes one.
    fn reply_secret(&self, index: u16) -> Option<Secret>;
    /// Server: the client spoke on channel 0 after its hello reply, so it
    /// has the session's secret. Lock-free.
    fn peer_confirmed(&self);
    /// The pre-shared key the session authenticates with: a client's that
    /// it named, a server's that its listener requires.
    fn psk(&self) -> Option<&[u8]>;
    /// A consumer's message arrived.
    fn deliver(this: &Arc<Self>, data: &[u8]);
    /// A request arrived.
    fn deliver_request(this: &Arc<Self>, inc: Incoming<Self>);
}

/// A channel's work items, which run on the module's work queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChannelWork {
    /// Polls a polled channel its consumer left alone (work item 0).
    IdlePoll,
    /// Grows the region pool (work item 1).
    Grow,
    /// Does what a softirq channel's completions may not, as they sleep
    /// (work item 2): tells the session the channel came up, moves a failed
    /// QP to the error state (see [`Channel::fail_in_handler`]).
    Deferred,
}

/// The requests channels carry: consumers' `struct ferry_request`s.
pub(crate) type Req = CRequest;

/// What a responder's transfer tells when it is over: a consumer's
/// `ferry_rdma_done_t`.
pub(crate) type Done = RdmaCallback;

/// Most pages one registration maps (2 MiB of 4 KiB pages), or fewer if the
/// device says so.
const MAX_REG_PAGES: u32 = 512;

/// What the channel's lock protects.
struct Inner<O: Owner> {
    /// Changed only through [`Inner::enter`].
    state: ChanState,
    /// The session's role, which the state table depends on.
    role: Role,
    /// The session's local id and the channel's index, for the log.
    names: (u32, u16),
    /// Where [`Channel::shutdown`] is: one thread tears the channel down,
    /// another that asks meanwhile waits (on `idle`) until it is done.
    teardown: Teardown,
    /// Shared only with a thread it is lent to (see the module docs).
    qp: Option<Arc<Qp<Channel<O>>>>,
    /// The head of the QP's send ring.
    ring: Option<SendRing>,
    /// Loans of the QP that have not ended (see the module docs).
    lent: u32,
    /// Growths of the region pool at work (they hold the PD; see
    /// [`Channel::shutdown`]).
    growing: u32,
    credits: Credits,
    /// Largest message the peer accepts.
    peer_max_msg: u32,
    /// Data to the peer a request may carry inline: the smaller of what the
    /// peer announced and this side's own limit.
    peer_inline: u32,
    peer_depth: u32,
    /// When the current step of the connect began: its timeout counts from
    /// then. `None` for a client channel not started yet (the channels
    /// after the first wait for it to be up), which has no deadline.
    since: Option<Instant<Monotonic>>,
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
    /// A request's chain was posted only in part ([`Posted::Part`]) where
    /// the channel could not fail (a submit may be atomic): the tick fails it.
    broken: bool,
    rtt_us: u32,
    device: Option<(u32, DeviceName)>,
    /// The device's limits and the PD the channel's regions live in.
    caps: Option<Caps>,
    pd: Option<Arc<Pd>>,
    /// Requests both ways; see [`crate::xfer`].
    xfer: Option<Xfer<Req, Done>>,
    /// The peer's requests held here; see [`responder`].
    responder: Option<Responder<O>>,
    /// The handshake's nonces (see [`wire::Auth`]): the server's, from the
    /// CM accept, and the client's, from its hello.
    nonces: (Option<Nonce>, Nonce),
    /// A softirq channel's deferred work: tell the session it came up;
    /// move the failed QP to the error state.
    deferred: (bool, bool),
}

impl<O: Owner> Inner<O> {
    /// What the peer's hello (or reply) says, bounded by this side's
    /// `params`: its depth bounds its grants from here on.
    fn learn_peer(&mut self, params: &Params, depth: u32, max_msg: u32, inline: u32) {
        self.credits.set_peer_depth(depth);
        self.peer_depth = depth;
        self.peer_max_msg = max_msg.min(params.max_msg);
        self.peer_inline = inline.min(params.inline_sent());
    }

    /// Moves to `to` if the table allows it ([`ChanState::allows`]). A
    /// refused move is a bug: it is warned about and the state stays.
    fn enter(&mut self, to: ChanState) -> bool {
        if self.state.allows(self.role, to) {
            self.state = to;
            return true;
        }
        pr_warn!(
            "session {} channel {}: refused state change {:?} -> {:?}\n",
            self.names.0,
            self.names.1,
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

    /// Ends a loan [`Inner::lend_qp`] made; whether it was the last. The
    /// clone goes under the lock: the teardown that sees no loan holds the
    /// last reference. Through [`Channel::end_loan_locked`], which wakes
    /// the teardown.
    fn end_loan(&mut self, qp: Arc<Qp<Channel<O>>>) -> bool {
        drop(qp);
        self.lent -= 1;
        self.lent == 0
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
    /// The teardown waits here for the QP's loans and the region pool's
    /// growths to end (`lent`, `growing`).
    #[pin]
    idle: CondVar,
    pub(crate) stats: Stats,
    /// The task handling a completion of the channel, or running its
    /// teardown's `done` callbacks (0 when none), so that a consumer's
    /// callback cannot wait for room only this task can make.
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
    /// The channel's completions run in softirq (`FERRY_SOFTIRQ`): what
    /// they would do that sleeps goes to `deferred`.
    softirq: bool,
    /// Does what `Inner::deferred` holds, for a softirq channel.
    #[pin]
    deferred: Work<Channel<O>, 2>,
}

impl_has_work! {
    impl{O: Owner} HasWork<Self> for Channel<O> { self.idle_poll }
    impl{O: Owner} HasWork<Self, 1> for Channel<O> { self.grow }
    impl{O: Owner} HasWork<Self, 2> for Channel<O> { self.deferred }
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
    /// Bytes its message buffers and responder entries hold.
    pub(crate) mem_bytes: u32,
    pub(crate) counters: Counters,
}

impl<O: Owner> Channel<O> {
    /// What this connection's handshake MACs are bound to.
    fn auth_context(&self, nonces: (Option<Nonce>, Nonce)) -> Option<AuthContext> {
        Some(AuthContext {
            server_nonce: nonces.0?,
            client_nonce: nonces.1,
            session_id: self.session.session_id(),
            generation: self.generation,
            channel: self.index,
        })
    }

    fn new(session: &Arc<O>, index: u16, generation: u32, state: ChanState) -> Result<Arc<Self>> {
        let now = Instant::now();
        let names = (O::id(session), index);
        let softirq = session.role() == Role::Client
            && session.params().softirq
            && !session.params().polled(index);
        Arc::pin_init(
            pin_init!(Self {
                session: session.clone(),
                index,
                generation,
                cm <- new_mutex!(None),
                inner <- new_spinlock_irq!(Inner {
                    state,
                    role: session.role(),
                    names,
                    teardown: Teardown::No,
                    qp: None,
                    ring: None,
                    lent: 0,
                    growing: 0,
                    credits: Credits::new(session.params().queue_depth),
                    peer_max_msg: wire::MIN_MSG_SIZE,
                    peer_inline: 0,
                    peer_depth: 0,
                    since: (session.role() == Role::Server).then_some(now),
                    last_rx: now,
                    last_ack: now,
                    last_heartbeat: now,
                    heartbeat_seq: 0,
                    heartbeat_out: None,
                    broken: false,
                    rtt_us: 0,
                    device: None,
                    caps: None,
                    pd: None,
                    xfer: None,
                    responder: None,
                    nonces: (None, [0; wire::NONCE_LEN]),
                    deferred: (false, false),
                }),
                idle <- new_condvar!("ferry::Channel::idle"),
                stats: Stats::default(),
                cb_task: AtomicUsize::new(0),
                idle_poll <- new_work!("ferry::Channel::idle_poll"),
                grow <- new_work!("ferry::Channel::grow"),
                softirq,
                deferred <- new_work!("ferry::Channel::deferred"),
            }),
            GFP_KERNEL,
        )
    }

    /// A client channel, not started yet.
    pub(crate) fn client(session: &Arc<O>, index: u16, generation: u32) -> Result<Arc<Self>> {
        Self::new(session, index, generation, ChanState::Resolving)
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
            mem_bytes: {
                let qp = inner.qp.as_deref().map_or(0, Qp::buffer_bytes);
                let entries = inner.responder.as_ref().map_or(0, Responder::bytes);
                u32::try_from(qp + entries).unwrap_or(u32::MAX)
            },
            counters: {
                let mut c = self.stats.snapshot();
                c.set(Counter::CreditStalls, inner.credits.stalls());
                c
            },
        }
    }

    /// The name of the channel's RDMA device, for logs ("" before it has
    /// one).
    pub(crate) fn device_name(&self) -> DeviceName {
        self.inner
            .lock()
            .device
            .map_or(DeviceName::NONE, |(_, n)| n)
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
    /// contexts but softirq (may sleep: [`Channel::fail_in_handler`] there);
    /// tears nothing down itself.
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

    /// As [`Channel::fail`], from the channel's completion handlers: on a
    /// softirq channel the QP's move to the error state, which may sleep,
    /// goes to the channel's deferred work; the session hears at once (it
    /// takes spinlocks only), so the first failure's reason is the one it
    /// keeps.
    pub(super) fn fail_in_handler(self: &Arc<Self>, reason: Reason) {
        if !self.softirq {
            return self.fail(reason);
        }
        let mut inner = self.inner.lock();
        if matches!(inner.state, ChanState::Failed | ChanState::Closed) {
            return;
        }
        inner.enter(ChanState::Failed);
        inner.deferred.1 = true;
        drop(inner);
        self.session
            .queue_channel(self.clone(), ChannelWork::Deferred);
        O::channel_failed(&self.session, self.index, self.generation, reason);
    }

    /// Whether the channel's completions run in softirq.
    pub(super) fn softirq(&self) -> bool {
        self.softirq
    }

    /// Ends a loan of the QP (see the module docs).
    fn end_loan(&self, qp: Arc<Qp<Channel<O>>>) {
        self.end_loan_locked(&mut self.inner.lock(), qp);
    }

    /// Ends a loan of the QP under the lock, and wakes the teardown when
    /// it was the last.
    fn end_loan_locked(&self, inner: &mut Inner<O>, qp: Arc<Qp<Channel<O>>>) {
        if inner.end_loan(qp) {
            self.idle.notify_all();
        }
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
    /// Once: a second caller (a failure's teardown beside a device
    /// removal's) returns when the first is done, so no request's `done`
    /// runs before the drain has ended.
    pub(crate) fn shutdown(&self) {
        {
            let mut inner = self.inner.lock();
            while inner.teardown == Teardown::Running {
                self.idle.wait(&mut inner);
            }
            if inner.teardown == Teardown::Done {
                return;
            }
            inner.teardown = Teardown::Running;
            // Closed first: a client's `start` that comes later stores no id.
            inner.enter(ChanState::Closed);
        }
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
        // The responder's entries go with the last request a consumer still
        // holds (its answer finds the channel closed); the responses that
        // wait for credits go now, without the lock.
        let (pool, responder) = {
            let mut inner = self.inner.lock();
            (
                inner.xfer.as_mut().map(Xfer::take_pool),
                inner.responder.take(),
            )
        };
        drop(pool);
        drop(responder);
        // The `done` callbacks below are the channel's callbacks, as its
        // completions' are (a wait for room there fails with EDEADLK: the
        // reconnect that would make room waits for this teardown). No
        // completion runs any more: the QP and its CQ are gone.
        self.cb_task.store(current_task(), Release);
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
        self.cb_task.store(0, Release);
        // Nothing of the device stays: its PD's registration reference would
        // hold up the device's removal, and a region registered after it
        // would outlive the device. A growth of the pool that started
        // before the close ends soon (it registers a few regions).
        let (xfer, pd) = {
            let mut inner = self.inner.lock();
            while inner.growing != 0 {
                self.idle.wait(&mut inner);
            }
            (inner.xfer.take(), inner.pd.take())
        };
        drop(xfer);
        drop(pd);
        let mut inner = self.inner.lock();
        inner.teardown = Teardown::Done;
        self.idle.notify_all();
    }

    /// Takes the QP out once no loan of it is out: the caller holds the last
    /// reference. The channel must be closed or never have run (no new loan
    /// then); the loans out never wait for anything the caller holds.
    fn take_qp(&self) -> Option<Arc<Qp<Channel<O>>>> {
        let mut inner = self.inner.lock();
        while inner.lent != 0 {
            self.idle.wait(&mut inner);
        }
        inner.ring = None;
        inner.qp.take()
    }

    /// Whether the current task is handling one of the channel's completions.
    pub(crate) fn in_callback(&self) -> bool {
        self.cb_task.load(Acquire) == current_task()
    }
}

impl<O: Owner> WorkItem<2> for Channel<O> {
    type Pointer = Arc<Channel<O>>;

    fn run(this: Arc<Self>) {
        let (up, qp) = {
            let mut inner = this.inner.lock();
            let (up, failed) = core::mem::take(&mut inner.deferred);
            // Closed meanwhile: its teardown flushes the QP.
            let qp = if failed { inner.lend_qp() } else { None };
            // Failed since it came up (the session heard): no `up`, which
            // would start the next channels of a doomed attempt.
            (up && inner.state == ChanState::Up, qp)
        };
        if let Some(qp) = qp {
            let _ = qp.set_error();
            this.end_loan(qp);
        }
        if up {
            O::channel_up(&this.session, this.index, this.generation);
        }
    }
}

/// Where a channel's teardown is ([`Channel::shutdown`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Teardown {
    /// Not asked for.
    No,
    /// At work in one thread.
    Running,
    /// Over: the QP, the CM id and the requests are gone.
    Done,
}

/// The current task, as a number to compare.
fn current_task() -> usize {
    kernel::task::Task::current_raw().addr()
}
