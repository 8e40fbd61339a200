// SPDX-License-Identifier: GPL-2.0

//! Sessions: all traffic between this host and one peer for one service.
//!
//! A client session is opened by `session-connect`: it sets up its channels
//! (see [`crate::channel`]) and, once all are up, is `connected`. When a
//! channel fails later, the client tears every channel down and reconnects
//! after a backoff (see [`crate::backoff`]), with a new generation, until it
//! succeeds or the give-up time has passed. A first connect that fails is not
//! retried: its reason goes back to the caller.
//!
//! A server session is created by the first connection request of a session id
//! and grows a channel per request. It never reconnects: on any failure it
//! closes, and a request from the same session id with a newer generation
//! replaces a server session that has not noticed its client went away, so a
//! half-open session never blocks a client's reconnect.
//!
//! State changes happen under the session's lock and follow
//! [`SessionState::check`]; channels are torn down outside it, on the
//! transport's work queue or in the caller's context (netlink, device removal,
//! module unload), never from a CM or completion handler.
//!
//! **The data path** takes none of the session's locks. While the session is
//! connected, each channel is published in its queue's [`RcuCell`]; a send
//! or request finds its channel there under RCU and takes only that
//! channel's spinlock, and the session's state for senders is one atomic
//! word (`sendable`). A failure unpublishes the channels (and waits for an
//! RCU grace period) before it tears them down. What arrives reaches the
//! consumer the same way: it is found in an [`RcuCell`] too, emptied as it
//! is told `gone`.

use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use kernel::{
    new_condvar, new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    sync::{aref::ARef, rcu, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLockIrq},
    time::{msecs_to_jiffies, Instant, Monotonic},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    backoff::Backoff,
    channel::{self, ChannelInfo, ChannelWork, Owner, Req},
    cm::SockAddr,
    hostile::Hostile,
    keys::Psk,
    netns::Net,
    params::{Params, RECONNECT_DELAY_RANGE_S},
    rdma::{mr::SgList, Pd},
    slot::RcuCell,
    state::{Role, SessionState},
    stats::{Counter, Counters, Stats},
    wire::{self, Header, Hello, Reason, ServiceName},
    work,
    xfer::{DataLimits, Refused},
};

mod data;
mod events;
mod lifecycle;

/// How long one connect attempt may take before it counts as failed.
pub(crate) const CONNECT_TIMEOUT_MS: u32 = 10_000;

/// How long a failed `session-connect` waits for its session's teardown
/// before it answers (ferry's work queue finishes the teardown).
pub(crate) const CLOSE_WAIT_MS: u32 = 5_000;

/// How long a server channel waits for its client's hello once accepted: a
/// silent connection holds a QP and its buffers, and goes after this.
pub(crate) const HELLO_DEADLINE_MS: u32 = 4000;

/// What the user of a session is told; see `struct ferry_ops`.
///
/// The callbacks and their contexts are those the C header states:
/// [`Consumer::up`], [`Consumer::message`] and [`Consumer::writable`] run on
/// the completion work of a channel (`message` and `writable` in softirq for
/// a client opened with `FERRY_SOFTIRQ`, `up` then on ferry's work queue);
/// [`Consumer::down`] and
/// [`Consumer::gone`] on ferry's work queue or in the thread that closes the
/// session.
pub(crate) trait Consumer: Send + Sync {
    /// The session is connected (again).
    fn up(&self, s: &Arc<Session>);
    /// The session lost its connection and reconnects.
    fn down(&self, s: &Arc<Session>, reason: Reason);
    /// A message arrived; `data` is only valid during the call.
    fn message(&self, s: &Arc<Session>, data: &[u8]);
    /// Channel `qid` has room again after a refused send or submit.
    fn writable(&self, s: &Arc<Session>, qid: u16);
    /// A request arrived; the consumer answers it with [`channel::respond`].
    fn request(&self, s: &Arc<Session>, inc: Incoming);
    /// The session is closed; the last call.
    fn gone(&self, s: &Arc<Session>, reason: Reason);
}

/// A session's channel.
pub(crate) type Channel = channel::Channel<Session>;
/// A request that arrived on one of a session's channels.
pub(crate) type Incoming = channel::Incoming<Session>;

/// What a session needs of the module around it, handed to it when it is
/// made: the module's state implements it, and a session never looks that
/// state up. Its channels reach it through their session.
pub(crate) trait Host: Send + Sync {
    /// A number for a new session, unique while the module is loaded.
    fn next_session_id(&self) -> u32;
    /// Lists a new session; `ESHUTDOWN` while the module unloads.
    fn add_session(&self, s: Arc<Session>) -> Result;
    /// Takes a closed session off the list.
    fn remove_session(&self, s: &Session);
    /// Session `s` changed state (netlink hears of it).
    fn session_changed(&self, s: &Session);
    /// Asks the service called `name` to take server session `s`.
    fn attach(&self, s: &Arc<Session>, name: &ServiceName) -> Result<(), Reason>;
    /// Whether the module is unloading.
    fn shutting_down(&self) -> bool;
    /// Queues session `s`'s work item on the module's work queue.
    fn queue_session(&self, s: Arc<Session>);
    /// Queues channel `c`'s work `w` on the module's work queue.
    fn queue_channel(&self, c: Arc<Channel>, w: ChannelWork);
    /// The PD of RDMA device `index`, while ferry uses the device.
    fn pd_of(&self, index: u32) -> Option<Arc<Pd>>;
}

/// What a session knows the service that accepted it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServiceKey(pub(crate) u64);

/// What a connected session can carry (see `ferry_session_limits()`).
pub(crate) struct Limits {
    /// Channels, polled ones included.
    pub(crate) channels: u16,
    /// How many of them, the last ones, are polled.
    pub(crate) poll_channels: u16,
    /// The peer's receive buffers per channel.
    pub(crate) queue_depth: u32,
    /// The largest message.
    pub(crate) max_payload: u32,
    /// What one request's data may be.
    pub(crate) data: DataLimits,
    /// The most data to the peer a request carries inline.
    pub(crate) inline_size: u32,
    /// Requests from the peer a channel holds at most: this side's depth.
    pub(crate) incoming_depth: u32,
}

/// The consumer's view of the session so far: what it was told last.
#[derive(Default)]
struct Events {
    /// `up` was delivered and no `down` since.
    up: bool,
    /// The connection `up` was delivered for (`Inner::reconnects`).
    conn: u32,
    /// `gone` was delivered: nothing follows.
    gone: bool,
    /// A client session not yet handed to its opener: nothing is delivered
    /// (a failed open tells the caller alone).
    mute: bool,
    /// A thread is in one of the consumer's `up`, `down` or `gone`, which
    /// run without this lock; it looks again when the callback returns.
    delivering: bool,
    /// That thread (`Task::current_raw`), so that it does not wait for
    /// itself.
    deliverer: usize,
}

/// What the session's lock protects.
struct Inner {
    state: SessionState,
    /// Channels being torn down outside [`Session::close`] (a failure, a
    /// device removal): their requests may still complete, so a close
    /// waits for these before the session counts as closed.
    tearing_down: u32,
    /// The connect attempt the channels belong to.
    generation: u32,
    channels: KVec<Arc<Channel>>,
    /// Channels out of the session whose teardown is at work: their
    /// completions (the drain's) and the teardown's own `done` callbacks
    /// still count as callbacks of the session (see
    /// [`Session::in_callback`]). Room for three lists of channels is made
    /// with the session, so tearing down never allocates.
    retiring: KVec<Arc<Channel>>,
    /// Server: the service, once the first hello named it.
    service: Option<ServiceName>,
    reason: Reason,
    reconnects: u32,
    backoff: Backoff,
    /// When the backoff of the next attempt began (Reconnecting).
    next_attempt: Option<Instant<Monotonic>>,
    /// The backoff delay, from `next_attempt`.
    next_delay_ms: u32,
    /// When the session last lost its connection (for the give-up time).
    failed_since: Option<Instant<Monotonic>>,
    connected_once: bool,
    /// When the current connect attempt began (server: when a channel last
    /// arrived or said hello; a server session whose next channel does not
    /// come within twice the connect timeout closes).
    attempt_started: Instant<Monotonic>,
    /// Server: the service that accepted the session.
    svc: Option<ServiceKey>,
    /// Server: the service's answer once it gave one ([`Reason::None`]: it
    /// took the session); `None` while the first hello's channel asks it.
    answer: Option<Reason>,
}

/// What a session's work item has to do (see [`Session::channel_failed`]
/// and [`Session::close_later`]).
#[derive(Default)]
struct Pending {
    /// A channel failure not handled yet: (channel, generation, reason).
    failure: Option<(u16, u32, Reason)>,
    /// A close asked for where closing may not sleep (a CM handler).
    close: Option<Reason>,
}

/// A session; see the module docs.
#[pin_data]
pub(crate) struct Session {
    /// The module around the session.
    pub(crate) host: Arc<dyn Host>,
    /// Local handle (netlink `id`).
    pub(crate) id: u32,
    /// The id in the handshake, chosen by the client.
    pub(crate) session_id: u64,
    /// Which side this is.
    pub(crate) role: Role,
    /// The namespace the session's CM ids live in.
    pub(crate) net: ARef<Net>,
    /// The peer's address; on a client, the listener's.
    pub(crate) peer: SockAddr,
    /// Sizes and timers.
    pub(crate) params: Params,
    /// The longest wait between reconnect attempts, in seconds: the
    /// consumer may change it live.
    reconnect_delay_s: AtomicU32,
    /// Server: the listener that accepted it.
    pub(crate) listener: Option<u32>,
    client_service: Option<ServiceName>,
    #[pin]
    inner: Mutex<Inner>,
    /// Signalled on every state change, and on a server when the service
    /// answered.
    #[pin]
    changed: CondVar,
    /// What the session's work item has to do; a leaf lock, with interrupts
    /// off (a softirq channel's failure is told from its completion).
    #[pin]
    pending: SpinLockIrq<Pending>,
    /// Handles `pending` on ferry's work queue: embedded, so that nothing
    /// asked of it is lost for want of memory.
    #[pin]
    work: Work<Session>,
    /// [`Session::close_later`] was called: the session counts as closing
    /// at once (lookups skip it), though its work item may be busy.
    close_asked: AtomicBool,
    /// The channels of a connected session, by index, for the data path.
    queues: KVec<RcuCell<Channel>>,
    /// What the data path answers (see [`Session::check_sendable`]): 0, or
    /// `-EAGAIN` or `-ENOTCONN`. Written under `inner`'s lock.
    sendable: AtomicI32,
    /// Serializes the consumer's `up`, `down` and `gone` (see
    /// `Session::sync_events`), which run without it.
    #[pin]
    events: Mutex<Events>,
    /// Signalled when a thread has told the consumer all there was to tell.
    #[pin]
    told: CondVar,
    /// The lock senders waiting for a credit sleep under (taken by the
    /// completions that wake them, which may run in softirq).
    #[pin]
    wait: SpinLockIrq<()>,
    /// Signalled when credits return or the state changes.
    #[pin]
    credit_cv: CondVar,
    /// Senders waiting on `credit_cv`.
    waiters: AtomicU32,
    /// `NOWAIT` sends or submits were refused on these channels (bit `qid`):
    /// tell the consumer when one of them has room again.
    want_writable: AtomicU64,
    /// One was refused on no channel in particular (the session's pick, or
    /// while reconnecting): the next channel with room tells.
    want_any: AtomicBool,
    /// Who gets the session's messages and events: read under RCU on the
    /// data path, so that no delivery takes a lock of the session's (the
    /// inner lock's walks, `session show`'s and the tick's, never stall
    /// one). Emptied as the consumer is told `gone`.
    consumer: RcuCell<Arc<dyn Consumer>>,
    /// Received messages nobody consumed (a session without a consumer).
    pub(crate) rx_dropped: AtomicU64,
    /// What the session's channels counted before they were replaced.
    retired: Stats,
    /// Test builds: a breach of the protocol to commit.
    pub(crate) hostile: Hostile,
    /// The session's secret (see [`wire::Secret`]): a server's from its
    /// creation, a client's once channel 0's hello reply handed it. A leaf
    /// lock (a client's channel 0 learns it in its completion, which may
    /// run in softirq); never shown.
    #[pin]
    secret: SpinLockIrq<Option<wire::Secret>>,
    /// Server: the client's minor version (1.2 takes the secret).
    peer_minor: u8,
    /// Server: the client showed it has the secret (it proved it, or spoke
    /// after channel 0's hello reply), so it is kept once the session closes.
    pub(crate) confirmed: AtomicBool,
    /// The pre-shared key the handshake proves: the one a client named, or
    /// the one its listener requires of a server session.
    pub(crate) psk: Option<Arc<Psk>>,
}

impl_has_work! {
    impl HasWork<Self> for Session { self.work }
}

/// A snapshot for netlink.
pub(crate) struct SessionInfo {
    pub(crate) state: SessionState,
    pub(crate) service: Option<ServiceName>,
    pub(crate) reason: Reason,
    pub(crate) reconnects: u32,
    pub(crate) peer_depth: u32,
    pub(crate) max_msg: u32,
    pub(crate) channels: KVec<ChannelInfo>,
    /// The channels' counters added up.
    pub(crate) totals: Counters,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    fn create(
        host: Arc<dyn Host>,
        id: u32,
        session_id: u64,
        role: Role,
        net: &Net,
        peer: SockAddr,
        params: Params,
        listener: Option<u32>,
        client_service: Option<ServiceName>,
        consumer: Option<Arc<dyn Consumer>>,
        secret: Option<wire::Secret>,
        peer_minor: u8,
        psk: Option<Arc<Psk>>,
    ) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(usize::from(params.channels), GFP_KERNEL)?;
        // A failure's teardown, a device removal's and a close's may overlap.
        let retiring = KVec::with_capacity(3 * usize::from(params.channels), GFP_KERNEL)?;
        for _ in 0..params.channels {
            queues.push(RcuCell::new(), GFP_KERNEL)?;
        }
        let consumer = consumer_cell(consumer)?;
        Arc::pin_init(
            pin_init!(Self {
                host,
                id,
                session_id,
                role,
                net: net.into(),
                peer,
                reconnect_delay_s: AtomicU32::new(params.reconnect_delay_s),
                params,
                listener,
                client_service,
                inner <- new_mutex!(Inner {
                    state: SessionState::Connecting,
                    tearing_down: 0,
                    generation: 0,
                    channels: KVec::new(),
                    retiring,
                    service: None,
                    reason: Reason::None,
                    reconnects: 0,
                    backoff: Backoff::default(),
                    next_attempt: None,
                    next_delay_ms: 0,
                    failed_since: None,
                    connected_once: false,
                    attempt_started: Instant::now(),
                    svc: None,
                    answer: None,
                }),
                changed <- new_condvar!(),
                pending <- new_spinlock_irq!(Pending::default()),
                work <- new_work!("ferry::Session::work"),
                close_asked: AtomicBool::new(false),
                queues,
                sendable: AtomicI32::new(ENOTCONN.to_errno()),
                events <- new_mutex!(Events {
                    mute: *role == Role::Client,
                    ..Events::default()
                }),
                told <- new_condvar!(),
                wait <- new_spinlock_irq!(()),
                credit_cv <- new_condvar!(),
                waiters: AtomicU32::new(0),
                want_writable: AtomicU64::new(0),
                want_any: AtomicBool::new(false),
                consumer,
                rx_dropped: AtomicU64::new(0),
                retired: Stats::default(),
                hostile: Hostile::default(),
                secret <- new_spinlock_irq!(secret),
                peer_minor,
                confirmed: AtomicBool::new(false),
                psk,
            }),
            GFP_KERNEL,
        )
    }

    /// The service, as the client asked for it or the first hello named it.
    pub(crate) fn service(&self) -> ServiceName {
        self.client_service
            .or_else(|| self.inner.lock().service)
            .unwrap_or(ServiceName::EMPTY)
    }

    /// The handshake id as netlink shows it: a client's only once the
    /// server handed the session's secret, so nobody who reads it can
    /// claim the id first (the server would then refuse the session's
    /// channel 0).
    pub(crate) fn shown_id(&self) -> Option<u64> {
        match self.role {
            Role::Server => Some(self.session_id),
            Role::Client => self.secret.lock().map(|_| self.session_id),
        }
    }

    /// Server: the session's secret.
    pub(crate) fn server_secret(&self) -> Option<wire::Secret> {
        match self.role {
            Role::Server => *self.secret.lock(),
            Role::Client => None,
        }
    }

    /// The generation of the channels (server: of the client's attempt).
    pub(crate) fn generation(&self) -> u32 {
        self.inner.lock().generation
    }

    /// Server: service `svc` accepted the session with `consumer`, before
    /// the service's `shut` may return (see [`crate::service::Service::attach`]).
    /// `consumer` comes in the place made for it, so that nothing fails
    /// once the service took the session.
    pub(crate) fn set_consumer(&self, svc: ServiceKey, consumer: Arc<Arc<dyn Consumer>>) {
        let mut inner = self.inner.lock();
        inner.svc = Some(svc);
        // Set once, before any delivery: there was none (nothing waits).
        self.consumer.set(Some(consumer));
    }

    /// The consumer, to call without any lock of the session's. Never
    /// sleeps.
    pub(crate) fn consumer(&self) -> Option<Arc<dyn Consumer>> {
        let guard = rcu::read_lock();
        let c = self.consumer.get(&guard).cloned();
        drop(guard);
        c
    }

    /// Whether service `svc` accepted this session.
    pub(crate) fn belongs_to(&self, svc: ServiceKey) -> bool {
        self.inner.lock().svc == Some(svc)
    }

    fn set_state(&self, inner: &mut Inner, to: SessionState) -> Result {
        match inner.state.check(self.role, to) {
            Ok(s) => {
                inner.state = s;
                self.update_sendable(inner);
                self.changed.notify_all();
                Ok(())
            }
            Err(e) => {
                pr_warn!(
                    "session {}: refused transition {} -> {}\n",
                    self.id,
                    inner.state.name(),
                    to.name()
                );
                Err(e)
            }
        }
    }

    /// Whether the session is closing or closed.
    pub(crate) fn is_closing(&self) -> bool {
        self.close_asked.load(Acquire)
            || matches!(
                self.inner.lock().state,
                SessionState::Closing | SessionState::Closed
            )
    }

    /// Server: whether the session still waits for its first hello (a
    /// connection request made it, and no hello has named a service yet).
    pub(crate) fn awaits_first_hello(&self) -> bool {
        let inner = self.inner.lock();
        inner.state == SessionState::Connecting && inner.service.is_none()
    }

    /// A snapshot for netlink.
    pub(crate) fn info(&self) -> Result<SessionInfo> {
        let inner = self.inner.lock();
        let mut info = SessionInfo {
            state: inner.state,
            service: self.client_service.or(inner.service),
            reason: inner.reason,
            reconnects: inner.reconnects,
            peer_depth: 0,
            max_msg: self.params.max_msg,
            channels: KVec::with_capacity(inner.channels.len(), GFP_KERNEL)?,
            totals: self.retired.snapshot(),
        };
        info.totals
            .set(Counter::RxUnclaimed, self.rx_dropped.load(Relaxed));
        for c in inner.channels.iter() {
            let ci = c.info();
            let (depth, max_msg, _) = c.peer_limits();
            if depth != 0 {
                info.peer_depth = depth;
                info.max_msg = max_msg;
            }
            info.totals.add(&ci.counters);
            info.channels.push(ci, GFP_KERNEL)?;
        }
        Ok(info)
    }
}

/// What a session's channels need of it.
impl Owner for Session {
    fn id(&self) -> u32 {
        self.id
    }

    fn session_id(&self) -> u64 {
        self.session_id
    }

    fn role(&self) -> Role {
        self.role
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn net(&self) -> &Net {
        &self.net
    }

    fn peer(&self) -> &SockAddr {
        &self.peer
    }

    fn service(&self) -> ServiceName {
        Session::service(self)
    }

    fn hostile(&self) -> &Hostile {
        &self.hostile
    }

    fn pd_of(&self, index: u32) -> Option<Arc<Pd>> {
        self.host.pd_of(index)
    }

    fn queue_channel(&self, c: Arc<Channel>, w: ChannelWork) {
        self.host.queue_channel(c, w);
    }

    fn add_channel(this: &Arc<Self>, c: Arc<Channel>) -> Result<(), Reason> {
        Session::add_channel(this, c)
    }

    fn check_hello(this: &Arc<Self>, hello: &Hello) -> Reason {
        Session::check_hello(this, hello)
    }

    fn channel_up(this: &Arc<Self>, index: u16, generation: u32) {
        Session::channel_up(this, index, generation)
    }

    fn channel_failed(this: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
        Session::channel_failed(this, index, generation, reason)
    }

    fn credits_returned(this: &Arc<Self>, qid: u16) {
        Session::credits_returned(this, qid)
    }

    fn join_secret(&self) -> Option<wire::Secret> {
        match self.role {
            Role::Client => *self.secret.lock(),
            Role::Server => None,
        }
    }

    fn learn_secret(&self, secret: wire::Secret) {
        if self.role == Role::Client {
            *self.secret.lock() = Some(secret);
        }
    }

    fn reply_secret(&self, index: u16) -> Option<wire::Secret> {
        if self.role == Role::Server && index == 0 && self.peer_minor >= 2 {
            *self.secret.lock()
        } else {
            None
        }
    }

    fn peer_confirmed(&self) {
        if !self.confirmed.load(Relaxed) {
            self.confirmed.store(true, Relaxed);
        }
    }

    fn psk(&self) -> Option<&[u8]> {
        self.psk.as_deref().map(Psk::bytes)
    }

    fn deliver(this: &Arc<Self>, data: &[u8]) {
        Session::deliver(this, data)
    }

    fn deliver_request(this: &Arc<Self>, inc: Incoming) {
        Session::deliver_request(this, inc)
    }
}

/// A cell holding `consumer`, if there is one. May sleep.
fn consumer_cell(consumer: Option<Arc<dyn Consumer>>) -> Result<RcuCell<Arc<dyn Consumer>>> {
    let cell = RcuCell::new();
    if let Some(c) = consumer {
        // Empty before: nothing to wait for.
        cell.set(Some(Arc::new(c, GFP_KERNEL)?));
    }
    Ok(cell)
}
