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
//! RCU grace period) before it tears them down.

use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use kernel::{
    new_condvar, new_mutex, new_spinlock, new_work,
    prelude::*,
    sync::{aref::ARef, rcu, Arc, CondVar, CondVarTimeoutResult, Mutex, SpinLock},
    time::{msecs_to_jiffies, Instant, Monotonic},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    backoff::Backoff,
    channel::{self, ChannelInfo, ChannelWork, Owner, Req},
    cm::SockAddr,
    hostile::Hostile,
    netns::Net,
    params::Params,
    rdma::{mr::SgList, Pd},
    slot::RcuCell,
    state::{Role, SessionState},
    stats::{Counter, Counters, Stats},
    wire::{self, Header, Hello, Reason, ServiceName},
    work,
    xfer::{DataLimits, Refused},
};

/// How long one connect attempt may take before it counts as failed.
pub(crate) const CONNECT_TIMEOUT_MS: u32 = 10_000;

/// Most bytes of receive buffers a server gives one channel.
const SERVER_RX_BUDGET: u32 = 4 << 20;

/// What the user of a session is told; see `struct ferry_ops`.
///
/// The callbacks and their contexts are those the C header states:
/// [`Consumer::up`], [`Consumer::message`] and [`Consumer::writable`] run on
/// the completion work of a channel; [`Consumer::down`] and
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
    /// A request arrived; the consumer answers it with `Incoming::respond`.
    fn request(&self, s: &Arc<Session>, inc: KBox<Incoming>);
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
    /// Queues session `s`'s failure work on the module's work queue.
    fn queue_failure(&self, s: Arc<Session>);
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
    /// When the current connect attempt began.
    attempt_started: Instant<Monotonic>,
    /// Who gets the session's messages and events.
    consumer: Option<Arc<dyn Consumer>>,
    /// Server: the service that accepted the session.
    svc: Option<ServiceKey>,
    /// Server: the service refused the session for this reason.
    refused: Option<Reason>,
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
    /// Server: the listener that accepted it.
    pub(crate) listener: Option<u32>,
    client_service: Option<ServiceName>,
    #[pin]
    inner: Mutex<Inner>,
    /// Signalled on every state change.
    #[pin]
    changed: CondVar,
    /// A channel failure not handled yet: (channel, generation, reason).
    #[pin]
    failure: SpinLock<Option<(u16, u32, Reason)>>,
    /// Handles `failure` on ferry's work queue.
    #[pin]
    failure_work: Work<Session>,
    /// The channels of a connected session, by index, for the data path.
    queues: KVec<RcuCell<Channel>>,
    /// What the data path answers (see [`Session::check_sendable`]): 0, or
    /// `-EAGAIN` or `-ENOTCONN`. Written under `inner`'s lock.
    sendable: AtomicI32,
    /// Serializes the consumer's `up`, `down` and `gone`.
    #[pin]
    events: Mutex<Events>,
    /// Serializes a server session's first hellos while the service decides.
    #[pin]
    accepting: Mutex<()>,
    /// The lock senders waiting for a credit sleep under.
    #[pin]
    wait: Mutex<()>,
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
    /// Received messages nobody consumed (a session without a consumer).
    pub(crate) rx_dropped: AtomicU64,
    /// What the session's channels counted before they were replaced.
    retired: Stats,
    /// Test builds: a breach of the protocol to commit.
    pub(crate) hostile: Hostile,
}

impl_has_work! {
    impl HasWork<Self> for Session { self.failure_work }
}

impl WorkItem for Session {
    type Pointer = Arc<Session>;

    fn run(this: Arc<Session>) {
        let f = this.failure.lock().take();
        if let Some((index, generation, reason)) = f {
            this.handle_failure(index, generation, reason);
        }
    }
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
    ) -> Result<Arc<Self>> {
        let mut queues = KVec::with_capacity(usize::from(params.channels), GFP_KERNEL)?;
        for _ in 0..params.channels {
            queues.push(RcuCell::new(), GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(Self {
                host,
                id,
                session_id,
                role,
                net: net.into(),
                peer,
                params,
                listener,
                client_service,
                inner <- new_mutex!(Inner {
                    state: SessionState::Connecting,
                    tearing_down: 0,
                    generation: 0,
                    channels: KVec::new(),
                    service: None,
                    reason: Reason::None,
                    reconnects: 0,
                    backoff: Backoff::default(),
                    next_attempt: None,
                    next_delay_ms: 0,
                    failed_since: None,
                    connected_once: false,
                    attempt_started: Instant::now(),
                    consumer,
                    svc: None,
                    refused: None,
                }),
                changed <- new_condvar!(),
                failure <- new_spinlock!(None),
                failure_work <- new_work!("ferry::Session::failure_work"),
                queues,
                sendable: AtomicI32::new(ENOTCONN.to_errno()),
                events <- new_mutex!(Events {
                    mute: *role == Role::Client,
                    ..Events::default()
                }),
                accepting <- new_mutex!(()),
                wait <- new_mutex!(()),
                credit_cv <- new_condvar!(),
                waiters: AtomicU32::new(0),
                want_writable: AtomicU64::new(0),
                want_any: AtomicBool::new(false),
                rx_dropped: AtomicU64::new(0),
                retired: Stats::default(),
                hostile: Hostile::default(),
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

    /// Creates a server session for the connection request `data` from `peer`.
    pub(crate) fn server(
        host: Arc<dyn Host>,
        net: &Net,
        peer: SockAddr,
        data: &crate::wire::ConnectData,
        listener: u32,
    ) -> Result<Arc<Self>> {
        // The client's limits (checked by the decoder), or the defaults; the
        // receive buffers of a channel stay within `SERVER_RX_BUDGET`, so a
        // client cannot make the server pin much memory. The hello reply
        // tells the client the depth it got.
        let d = Params::DEFAULT;
        let or = |v: u32, d: u32| if v == 0 { d } else { v };
        let max_msg = or(data.max_msg, d.max_msg);
        let queue_depth = or(u32::from(data.queue_depth), d.queue_depth)
            .min(SERVER_RX_BUDGET / (max_msg + d.inline_size))
            .max(wire::MIN_QUEUE_DEPTH);
        let params = Params {
            channels: data.channels,
            max_msg,
            queue_depth,
            ..d
        };
        let id = host.next_session_id();
        let s = Self::create(
            host.clone(),
            id,
            data.session_id,
            Role::Server,
            net,
            peer,
            params,
            Some(listener),
            None,
            None,
        )?;
        s.inner.lock().generation = data.generation;
        host.add_session(s.clone())?;
        s.notify();
        Ok(s)
    }

    /// Opens a client session and waits until it is connected or has failed.
    /// On failure the session is gone, `consumer` was told nothing, and the
    /// reason is returned.
    pub(crate) fn connect(
        host: Arc<dyn Host>,
        net: &Net,
        peer: SockAddr,
        service: ServiceName,
        params: Params,
        consumer: Option<Arc<dyn Consumer>>,
    ) -> Result<Arc<Self>, Reason> {
        let id = host.next_session_id();
        let session_id = loop {
            let v = work::random_u64();
            if v != 0 {
                break v;
            }
        };
        let s = Self::create(
            host.clone(),
            id,
            session_id,
            Role::Client,
            net,
            peer,
            params,
            None,
            Some(service),
            consumer,
        )
        .map_err(|_| Reason::NoResources)?;
        host.add_session(s.clone())
            .map_err(|_| Reason::NoResources)?;
        s.notify();
        s.start_attempt();
        let mut inner = s.inner.lock();
        let deadline = Instant::<Monotonic>::now();
        while inner.state == SessionState::Connecting {
            let left = i64::from(CONNECT_TIMEOUT_MS) + 2000 - deadline.elapsed().as_millis();
            if left <= 0 {
                break;
            }
            // CAST: `left` is positive and below 2^31.
            if let CondVarTimeoutResult::Signal { .. } = s
                .changed
                .wait_interruptible_timeout(&mut inner, msecs_to_jiffies(left as u32))
            {
                break;
            }
        }
        let (state, reason) = (inner.state, inner.reason);
        drop(inner);
        if state == SessionState::Connected {
            // The consumer hears `up` before the caller hears of success.
            s.events.lock().mute = false;
            s.sync_events();
            return Ok(s);
        }
        // Still connecting when the wait ended: the attempt timed out, or a
        // signal came.
        let reason = if reason == Reason::None {
            Reason::Timeout
        } else {
            reason
        };
        // The caller learns of the failure from the return value alone: the
        // events stay muted.
        s.close(reason);
        Err(reason)
    }

    /// Client: starts a connect attempt with a new generation.
    fn start_attempt(self: &Arc<Self>) {
        let mut inner = self.inner.lock();
        if inner.state != SessionState::Connecting {
            return;
        }
        inner.generation = inner.generation.wrapping_add(1);
        inner.attempt_started = Instant::now();
        let generation = inner.generation;
        let mut channels = KVec::new();
        for i in 0..self.params.channels {
            match Channel::client(self, i, generation) {
                Ok(c) if channels.push(c.clone(), GFP_KERNEL).is_ok() => {}
                _ => {
                    drop(inner);
                    return self.channel_failed(i, generation, Reason::NoResources);
                }
            }
        }
        let list = match clone_all(&channels) {
            Ok(l) => l,
            Err(_) => {
                drop(inner);
                return self.channel_failed(0, generation, Reason::NoResources);
            }
        };
        inner.channels = channels;
        drop(inner);
        for c in list.iter() {
            c.start();
        }
    }

    /// Server: adds the channel of a connection request, or refuses it.
    /// The channel may have finished its handshake already (its hello can
    /// come while it is being accepted): if it was the last, the session is
    /// connected now.
    pub(crate) fn add_channel(self: &Arc<Self>, chan: Arc<Channel>) -> Result<(), Reason> {
        let (index, generation) = (chan.index(), chan.generation());
        {
            let mut inner = self.inner.lock();
            if inner.state != SessionState::Connecting {
                return Err(Reason::BadChannel);
            }
            inner
                .channels
                .push(chan, GFP_KERNEL)
                .map_err(|_| Reason::NoResources)?;
        }
        self.channel_up(index, generation);
        Ok(())
    }

    /// Server: whether a request for channel `index` of `generation` fits.
    pub(crate) fn check_request(
        &self,
        generation: u32,
        index: u16,
        count: u16,
    ) -> Result<(), Reason> {
        let inner = self.inner.lock();
        if count != self.params.channels || generation != inner.generation {
            return Err(Reason::BadChannel);
        }
        if inner.state != SessionState::Connecting {
            return Err(Reason::DuplicateChannel);
        }
        if inner.channels.iter().any(|c| c.index() == index) {
            return Err(Reason::DuplicateChannel);
        }
        Ok(())
    }

    /// The generation of the channels (server: of the client's attempt).
    pub(crate) fn generation(&self) -> u32 {
        self.inner.lock().generation
    }

    /// Server: checks a channel's hello. The first one asks the service to
    /// accept the session; all channels must name the same service.
    pub(crate) fn check_hello(self: &Arc<Self>, hello: &Hello) -> Reason {
        if self.host.shutting_down() {
            return Reason::ShuttingDown;
        }
        // The other channels' hellos wait here for the service's answer.
        let _accepting = self.accepting.lock();
        {
            let inner = self.inner.lock();
            match inner.service {
                Some(s) if s != hello.service => return Reason::BadParams,
                Some(_) => return inner.refused.unwrap_or(Reason::None),
                None => {}
            }
        }
        let res = self.host.attach(self, &hello.service);
        let mut inner = self.inner.lock();
        inner.service = Some(hello.service);
        match res {
            Ok(()) => Reason::None,
            Err(r) => {
                inner.refused = Some(r);
                r
            }
        }
    }

    /// Server: service `svc` accepted the session with `consumer`. Called by
    /// the service under its lock.
    pub(crate) fn set_consumer(&self, svc: ServiceKey, consumer: Arc<dyn Consumer>) {
        let mut inner = self.inner.lock();
        inner.svc = Some(svc);
        inner.consumer = Some(consumer);
    }

    /// Whether service `svc` accepted this session.
    pub(crate) fn belongs_to(&self, svc: ServiceKey) -> bool {
        self.inner.lock().svc == Some(svc)
    }

    /// A channel completed its handshake.
    pub(crate) fn channel_up(self: &Arc<Self>, _index: u16, generation: u32) {
        let mut inner = self.inner.lock();
        if inner.generation != generation || inner.state != SessionState::Connecting {
            return;
        }
        let all = inner.channels.len() == usize::from(self.params.channels)
            && inner.channels.iter().all(|c| c.info().up);
        if !all {
            return;
        }
        // Published before the state says so: a sender that sees the
        // session connected finds its channels.
        for c in inner.channels.iter() {
            if let Some(q) = self.queues.get(usize::from(c.index())) {
                q.set(Some(c.clone()));
            }
        }
        if self.set_state(&mut inner, SessionState::Connected).is_err() {
            self.unpublish();
            return;
        }
        if inner.connected_once {
            inner.reconnects += 1;
            pr_info!("session {}: reconnected to {}\n", self.id, self.peer);
        }
        inner.connected_once = true;
        self.update_sendable(&inner);
        inner.reason = Reason::None;
        inner.backoff.reset();
        inner.failed_since = None;
        drop(inner);
        self.notify();
    }

    /// A channel failed: handled on the transport's work queue, by the
    /// session's own work item (nothing to allocate, so no failure is lost
    /// for want of memory). Callable from CM and completion handlers: takes
    /// a spinlock and ferry's work-queue mutex. A failure of a newer
    /// generation replaces one not yet handled, never one of an older; of
    /// one generation, the first counts (the rest would find the session
    /// changed already).
    pub(crate) fn channel_failed(self: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
        {
            let mut f = self.failure.lock();
            // CAST: generations wrap; the difference's sign says which is
            // newer.
            let newer = f.is_none_or(|(_, g, _)| generation.wrapping_sub(g) as i32 > 0);
            if newer {
                *f = Some((index, generation, reason));
            }
        }
        self.host.queue_failure(self.clone());
    }

    fn handle_failure(self: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
        let mut inner = self.inner.lock();
        if inner.generation != generation {
            return;
        }
        let next = match (self.role, inner.state) {
            (Role::Client, SessionState::Connected) => SessionState::Reconnecting,
            (Role::Client, SessionState::Connecting) if inner.connected_once => {
                SessionState::Reconnecting
            }
            (_, SessionState::Connecting) | (Role::Server, SessionState::Connected) => {
                SessionState::Closing
            }
            _ => return,
        };
        if inner.state == SessionState::Connected {
            pr_info!(
                "session {}: channel {} to {} failed: {}\n",
                self.id,
                index,
                self.peer,
                reason.describe()
            );
        }
        inner.reason = reason;
        let channels = core::mem::take(&mut inner.channels);
        // Senders hear what comes before the channels go.
        let sendable = if next == SessionState::Closing {
            ENOTCONN
        } else {
            EAGAIN
        };
        self.sendable.store(sendable.to_errno(), Release);
        self.unpublish();
        if next == SessionState::Closing {
            inner.tearing_down += 1;
            drop(inner);
            self.tear_down(&channels);
            self.close(reason);
            return;
        }
        if self.set_state(&mut inner, next).is_err() {
            return;
        }
        let now = Instant::now();
        if inner.failed_since.is_none() {
            inner.failed_since = Some(now);
        }
        let delay = inner.backoff.next_delay_ms(work::random_u32());
        if inner.connected_once && inner.state == SessionState::Reconnecting {
            pr_info!(
                "session {}: attempt {} to {} failed ({}), next in {} ms\n",
                self.id,
                inner.backoff.attempts(),
                self.peer,
                reason.describe(),
                delay
            );
        }
        inner.next_attempt = Some(now);
        inner.next_delay_ms = delay;
        inner.tearing_down += 1;
        drop(inner);
        self.tear_down(&channels);
        self.notify();
    }

    /// Closes the session for good: tears its channels down, waits for them,
    /// removes it and tells the consumer. Idempotent: a second caller returns
    /// once the first one is done. May sleep; not from a CM or completion
    /// handler.
    pub(crate) fn close(self: &Arc<Self>, reason: Reason) {
        let mut inner = self.inner.lock();
        if inner.state == SessionState::Closing {
            // Another thread closes it: wait until it has.
            while inner.state != SessionState::Closed {
                self.changed.wait(&mut inner);
            }
        }
        if inner.state == SessionState::Closed {
            drop(inner);
            // `gone` may still be on its way in the closing thread.
            self.sync_events();
            return;
        }
        if inner.state != SessionState::Closing
            && self.set_state(&mut inner, SessionState::Closing).is_err()
        {
            return;
        }
        if inner.reason == Reason::None {
            inner.reason = reason;
        }
        let channels = core::mem::take(&mut inner.channels);
        self.sendable.store(ENOTCONN.to_errno(), Release);
        self.unpublish();
        drop(inner);
        shutdown_all(&channels);
        let mut inner = self.inner.lock();
        // Channels a failure or a device removal tears down may still be
        // completing requests: the session is not closed before they are.
        while inner.tearing_down > 0 {
            self.changed.wait(&mut inner);
        }
        // A concurrent close (a failure and the connect waiter) may have won.
        if inner.state == SessionState::Closed {
            return;
        }
        let _ = self.set_state(&mut inner, SessionState::Closed);
        drop(inner);
        self.host.remove_session(self);
        self.notify();
    }

    /// Tears down the channels on RDMA device `index` before the device goes,
    /// and lets the session recover (client) or close (server) afterwards.
    pub(crate) fn device_removed(&self, index: u32) {
        let mut inner = self.inner.lock();
        let mut hit = KVec::new();
        for c in inner.channels.iter() {
            // A channel that cannot be recorded is torn down by its failure.
            if c.on_device(index) && hit.push(c.clone(), GFP_KERNEL).is_err() {
                c.fail(Reason::NoResources);
            }
        }
        inner.tearing_down += 1;
        drop(inner);
        for c in hit.iter() {
            c.fail(Reason::DeviceRemoved);
        }
        // (The failure takes them out of the session and keeps their counts.)
        shutdown_all(&hit);
        self.torn_down();
    }

    /// Shuts `channels`, taken out of the session, down (their requests
    /// complete), keeps their counts, and ends a teardown counted in
    /// `tearing_down`.
    fn tear_down(&self, channels: &[Arc<Channel>]) {
        shutdown_all(channels);
        // Drained: their counts are final, and stay the session's.
        for c in channels.iter() {
            self.retired.absorb(&c.stats.snapshot());
        }
        self.torn_down();
    }

    /// A teardown counted in `tearing_down` is over.
    fn torn_down(&self) {
        let mut inner = self.inner.lock();
        inner.tearing_down -= 1;
        self.changed.notify_all();
    }

    /// Periodic work, from the transport's tick.
    pub(crate) fn tick(self: &Arc<Self>) {
        let inner = self.inner.lock();
        let state = inner.state;
        let Ok(channels) = clone_all(&inner.channels) else {
            return;
        };
        let due = inner
            .next_attempt
            .is_some_and(|t| t.elapsed().as_millis() >= i64::from(inner.next_delay_ms));
        let stuck =
            inner.attempt_started.elapsed().as_millis() > i64::from(CONNECT_TIMEOUT_MS) + 1000;
        let gave_up = self.params.give_up_s != 0
            && inner.failed_since.is_some_and(|t| {
                t.elapsed().as_millis() >= i64::from(self.params.give_up_s) * 1000
            });
        drop(inner);
        match state {
            // A server session whose client stopped opening channels.
            SessionState::Connecting if self.role == Role::Server && stuck => {
                self.close(Reason::Timeout);
            }
            SessionState::Connecting | SessionState::Connected => {
                for c in channels.iter() {
                    c.tick(
                        self.params.heartbeat_ms,
                        self.params.timeout_ms,
                        CONNECT_TIMEOUT_MS,
                    );
                }
            }
            SessionState::Reconnecting if gave_up => {
                pr_info!(
                    "session {}: gave up reconnecting to {}\n",
                    self.id,
                    self.peer
                );
                self.close(Reason::GaveUp);
            }
            SessionState::Reconnecting if due => {
                let mut inner = self.inner.lock();
                inner.next_attempt = None;
                if self.set_state(&mut inner, SessionState::Connecting).is_ok() {
                    drop(inner);
                    self.notify();
                    self.start_attempt();
                }
            }
            _ => {}
        }
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

    /// Tells netlink listeners (`session-ntf`), the consumer and waiting
    /// senders about the session's current state.
    pub(crate) fn notify(self: &Arc<Self>) {
        self.host.session_changed(self);
        self.sync_events();
        self.wake_senders();
    }

    /// Brings the consumer up to date: `up` when connected, `down` when the
    /// connection it was told of is lost, `gone` once closed.
    fn sync_events(self: &Arc<Self>) {
        let mut ev = self.events.lock();
        if ev.gone || ev.mute {
            return;
        }
        let mut inner = self.inner.lock();
        let (state, reason, conn) = (inner.state, inner.reason, inner.reconnects);
        let consumer = if state == SessionState::Closed {
            // Nothing reaches the consumer after `gone`.
            inner.consumer.take()
        } else {
            inner.consumer.clone()
        };
        drop(inner);
        let Some(c) = consumer else { return };
        match state {
            SessionState::Connected => {
                if ev.up && ev.conn != conn {
                    // Lost and regained since the consumer last looked.
                    c.down(self, Reason::PeerClosed);
                }
                if !ev.up || ev.conn != conn {
                    ev.up = true;
                    ev.conn = conn;
                    c.up(self);
                }
            }
            SessionState::Connecting | SessionState::Reconnecting if ev.up => {
                ev.up = false;
                c.down(self, reason);
            }
            SessionState::Closed => {
                ev.gone = true;
                c.gone(self, reason);
            }
            _ => {}
        }
    }

    /// Hands a received message to the consumer.
    pub(crate) fn deliver(self: &Arc<Self>, data: &[u8]) {
        let consumer = self.inner.lock().consumer.clone();
        match consumer {
            Some(c) => c.message(self, data),
            None => {
                self.rx_dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Hands a received request to the consumer; without one, refuses it.
    pub(crate) fn deliver_request(self: &Arc<Self>, inc: KBox<Incoming>) {
        let consumer = self.inner.lock().consumer.clone();
        match consumer {
            Some(c) => c.request(self, inc),
            None => {
                self.rx_dropped.fetch_add(1, Relaxed);
                let _ = inc.respond(EOPNOTSUPP.to_errno(), &[]);
            }
        }
    }

    /// Sends request `req` (with `data`) on channel `on`, or if `None` on
    /// the calling CPU's channel or another ordinary one with a credit and a
    /// free tag, under the caller's tag `own` if it chose one (with a
    /// channel named); waits like [`Session::send`] unless `nowait`. On
    /// failure, the request and its data come back. With `nowait`, never
    /// sleeps and allocates nothing.
    pub(crate) fn request(
        &self,
        on: Option<u16>,
        own: Option<u32>,
        req: Req,
        data: Option<SgList>,
        nowait: bool,
    ) -> Result<(), Refused<Req>> {
        let mut item = (req, data);
        let mut guard: Option<kernel::sync::MutexGuard<'_, ()>> = None;
        let start = Instant::<Monotonic>::now();
        loop {
            let (req, data) = item;
            match self.try_request(on, own, req, data) {
                Ok(()) => return Ok(()),
                Err((e, req, data)) if e == EAGAIN && !nowait => {
                    if self.in_callback() {
                        return Err((EDEADLK, req, data));
                    }
                    let left = i64::from(self.params.timeout_ms) - start.elapsed().as_millis();
                    if left <= 0 {
                        return Err((ETIMEDOUT, req, data));
                    }
                    let g = guard.get_or_insert_with(|| self.wait.lock());
                    self.waiters.fetch_add(1, SeqCst);
                    // A credit that came back meanwhile woke nobody: try
                    // again under the lock before sleeping.
                    let again = self.try_request(on, own, req, data);
                    let (req, data) = match again {
                        Ok(()) => {
                            self.waiters.fetch_sub(1, SeqCst);
                            return Ok(());
                        }
                        Err((e, req, data)) if e == EAGAIN => (req, data),
                        Err(e) => {
                            self.waiters.fetch_sub(1, SeqCst);
                            return Err(e);
                        }
                    };
                    // CAST: `0 < left <= timeout_ms`, a `u32`.
                    let r = self
                        .credit_cv
                        .wait_interruptible_timeout(g, msecs_to_jiffies(left as u32));
                    self.waiters.fetch_sub(1, SeqCst);
                    if let CondVarTimeoutResult::Signal { .. } = r {
                        return Err((EINTR, req, data));
                    }
                    item = (req, data);
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn try_request(
        &self,
        on: Option<u16>,
        own: Option<u32>,
        req: Req,
        data: Option<SgList>,
    ) -> Result<(), Refused<Req>> {
        if on.is_some_and(|q| q >= self.params.channels) || (own.is_some() && on.is_none()) {
            return Err((EINVAL, req, data));
        }
        if let Err(e) = self.check_sendable() {
            return Err((e, req, data));
        }
        match self.place_request(on, own, req, data) {
            // Asks to hear of room first, then looks once more: room that
            // came back meanwhile is not missed.
            Err((e, req, data)) if e == EAGAIN => {
                self.refused(on);
                self.place_request(on, own, req, data)
            }
            r => r,
        }
    }

    /// Submits on channel `on` or the first that takes it; `EAGAIN` if none
    /// does.
    fn place_request(
        &self,
        on: Option<u16>,
        own: Option<u32>,
        req: Req,
        data: Option<SgList>,
    ) -> Result<(), Refused<Req>> {
        let guard = rcu::read_lock();
        let n = self.queues.len();
        let start = self.first_pick(&guard, on);
        let mut item = (req, data);
        for i in 0..n {
            let (req, data) = item;
            let Some(c) = self.queues[(start + i) % n].get(&guard) else {
                item = (req, data);
                continue;
            };
            if !self.picks(on, c) {
                item = (req, data);
                continue;
            }
            match c.submit(own, req, data) {
                Ok(()) => return Ok(()),
                Err((e, req, data)) if e == EAGAIN || e == ENOTCONN => item = (req, data),
                Err(e) => return Err(e),
            }
        }
        Err((EAGAIN, item.0, item.1))
    }

    /// A `NOWAIT` send or submit on channel `on` (or any) found no room:
    /// [`Session::credits_returned`] tells the consumer. Never sleeps.
    fn refused(&self, on: Option<u16>) {
        match on {
            Some(q) if q < 64 => {
                self.want_writable.fetch_or(1 << q, SeqCst);
            }
            _ => self.want_any.store(true, SeqCst),
        }
    }

    /// Channel `qid` got credits, tags or regions back: wakes waiting
    /// senders, and tells the consumer (`writable` with `qid`) if a send or
    /// submit of its was refused on that channel or on the session.
    pub(crate) fn credits_returned(self: &Arc<Self>, qid: u16) {
        self.wake_senders();
        let bit = 1u64.checked_shl(u32::from(qid)).unwrap_or(0);
        let mine = bit != 0 && self.want_writable.fetch_and(!bit, SeqCst) & bit != 0;
        // (`|` not `||`: an "any" waiter is served too.)
        if mine | self.want_any.swap(false, SeqCst) {
            let consumer = self.inner.lock().consumer.clone();
            if let Some(c) = consumer {
                c.writable(self, qid);
            }
        }
    }

    fn wake_senders(&self) {
        if self.waiters.load(SeqCst) != 0 {
            let _guard = self.wait.lock();
            self.credit_cv.notify_all();
        }
    }

    /// Test builds: arms fault `f` (see [`crate::hostile`]) for the
    /// session's next occasion; a stray response leaves at once, on the
    /// first channel up.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub(crate) fn misbehave(&self, f: crate::hostile::Fault) -> Result {
        if f != crate::hostile::Fault::StrayResponse {
            self.hostile.arm(f);
            return Ok(());
        }
        self.inner
            .lock()
            .channels
            .iter()
            .find_map(|c| c.send_stray_response().ok())
            .ok_or(ENOTCONN)
    }

    /// The negotiated limits: (channels, the peer's queue depth, largest
    /// payload). `ENOTCONN` unless connected.
    pub(crate) fn limits(&self) -> Result<Limits> {
        let inner = self.inner.lock();
        if inner.state != SessionState::Connected {
            return Err(ENOTCONN);
        }
        let (mut depth, mut max, mut pages) = (u32::MAX, u32::MAX, u32::MAX);
        let mut inline = u32::MAX;
        for c in inner.channels.iter() {
            let (d, m, i) = c.peer_limits();
            depth = depth.min(d);
            max = max.min(m);
            inline = inline.min(i);
            pages = pages.min(c.reg_pages());
        }
        Ok(Limits {
            channels: self.params.channels,
            poll_channels: self.params.poll_channels,
            queue_depth: depth,
            // CAST: `Header::LEN` is 16; `max` is at least `MIN_MSG_SIZE`.
            max_payload: max - Header::LEN as u32,
            // CAST: a page is a few KiB.
            data: DataLimits::new(pages, kernel::page::PAGE_SIZE as u32),
            inline_size: inline,
        })
    }

    /// Sends `data` as one message on channel `on`, or if `None` on the
    /// calling CPU's channel or another ordinary one with a credit. Without
    /// `nowait`, waits up to the session's timeout for a credit or a
    /// reconnect; see `ferry_send()`.
    pub(crate) fn send(&self, on: Option<u16>, data: &[u8], nowait: bool) -> Result {
        if on.is_some_and(|q| q >= self.params.channels) {
            return Err(EINVAL);
        }
        let first = self.try_send(on, data);
        if nowait || first != Err(EAGAIN) {
            return first;
        }
        if self.in_callback() {
            return Err(EDEADLK);
        }
        let start = Instant::<Monotonic>::now();
        let mut guard = self.wait.lock();
        loop {
            self.waiters.fetch_add(1, SeqCst);
            let res = self.try_send(on, data);
            let left = i64::from(self.params.timeout_ms) - start.elapsed().as_millis();
            let res = match res {
                Err(e) if e == EAGAIN && left <= 0 => Err(ETIMEDOUT),
                // CAST: `0 < left <= timeout_ms`, a `u32`.
                Err(e) if e == EAGAIN => match self
                    .credit_cv
                    .wait_interruptible_timeout(&mut guard, msecs_to_jiffies(left as u32))
                {
                    CondVarTimeoutResult::Signal { .. } => Err(EINTR),
                    _ => Err(EAGAIN),
                },
                r => r,
            };
            self.waiters.fetch_sub(1, SeqCst);
            if res != Err(EAGAIN) {
                return res;
            }
        }
    }

    fn try_send(&self, on: Option<u16>, data: &[u8]) -> Result {
        self.check_sendable()?;
        match self.place_message(on, data) {
            // As in `try_request`.
            Err(e) if e == EAGAIN => {
                self.refused(on);
                self.place_message(on, data)
            }
            r => r,
        }
    }

    /// Sends on channel `on` or the first with room; `EAGAIN` if none has.
    fn place_message(&self, on: Option<u16>, data: &[u8]) -> Result {
        let guard = rcu::read_lock();
        let n = self.queues.len();
        let start = self.first_pick(&guard, on);
        for i in 0..n {
            let Some(c) = self.queues[(start + i) % n].get(&guard) else {
                continue;
            };
            if !self.picks(on, c) {
                continue;
            }
            match c.send_message(data) {
                Ok(()) => return Ok(()),
                Err(e) if e == EMSGSIZE => return Err(e),
                Err(_) => {}
            }
        }
        Err(EAGAIN)
    }

    /// Whether the session can take traffic: `EAGAIN` while it reconnects
    /// (the consumer hears `writable` or `up` later), `ENOTCONN` if it never
    /// connected or is closing.
    fn check_sendable(&self) -> Result {
        match self.sendable.load(Acquire) {
            0 => Ok(()),
            e if e == EAGAIN.to_errno() => {
                // `up` follows, and `writable` with the first channel that
                // has room.
                self.want_any.store(true, SeqCst);
                Err(EAGAIN)
            }
            _ => Err(ENOTCONN),
        }
    }

    /// Records what senders get in the state `inner` says.
    fn update_sendable(&self, inner: &Inner) {
        let v = match inner.state {
            SessionState::Connected => 0,
            SessionState::Connecting | SessionState::Reconnecting if inner.connected_once => {
                EAGAIN.to_errno()
            }
            _ => ENOTCONN.to_errno(),
        };
        self.sendable.store(v, Release);
    }

    /// Takes the channels out of the data path; once this returns, no sender
    /// uses them. May sleep (an RCU grace period).
    fn unpublish(&self) {
        RcuCell::clear_all(&self.queues);
    }

    /// Whether a send for channel `on` may go out on `c`: `on` itself, or
    /// with no channel named, any ordinary (not polled) channel, and from a
    /// callback the callback's own channel.
    fn picks(&self, on: Option<u16>, c: &Channel) -> bool {
        match on {
            Some(q) => c.index() == q,
            None => !self.params.polled(c.index()) || c.in_callback(),
        }
    }

    /// Where in `inner.channels` a send with no channel named starts
    /// looking: from a callback, at the callback's own channel, so an answer
    /// goes back the way its question came (to a consumer that polls that
    /// channel); else at the calling CPU's.
    fn first_pick(&self, guard: &rcu::Guard, on: Option<u16>) -> usize {
        if let Some(q) = on {
            return usize::from(q);
        }
        let own = self
            .queues
            .iter()
            .position(|q| q.get(guard).is_some_and(|c| c.in_callback()));
        // The ordinary channels come first: a CPU picks one of them.
        let ordinary = usize::from(self.params.channels - self.params.poll_channels).max(1);
        // CAST: a CPU number fits a `usize`.
        own.unwrap_or(kernel::cpu::CpuId::current().as_u32() as usize % ordinary)
    }

    /// Fails channel `qid` for its consumer, so the session reconnects (a
    /// service's closes); see `ferry_reset_channel()`. `EINVAL` for a `qid`
    /// that is not a channel of the session, `ENOTCONN` if that channel is
    /// not up.
    pub(crate) fn reset_channel(&self, qid: u16) -> Result {
        if qid >= self.params.channels {
            return Err(EINVAL);
        }
        self.channel(qid).ok_or(ENOTCONN)?.reset()
    }

    /// Channel `qid` while the session is connected (none of the session's
    /// locks: from a consumer's timeout or poll).
    fn channel(&self, qid: u16) -> Option<Arc<Channel>> {
        self.queues.get(usize::from(qid))?.get_arc()
    }

    /// Processes up to `budget` completions of polled channel `qid` in the
    /// calling thread; returns how many. `EINVAL` if `qid` is not a polled
    /// channel of the session. See `ferry_poll_channel()`.
    pub(crate) fn poll_channel(&self, qid: u16, budget: u32) -> Result<u32> {
        if qid >= self.params.channels || !self.params.polled(qid) {
            return Err(EINVAL);
        }
        Ok(self.channel(qid).map_or(0, |c| c.poll(budget)))
    }

    /// Processes up to `budget` completions of each polled channel in the
    /// calling thread; returns how many. See `ferry_poll()`.
    pub(crate) fn poll(&self, budget: u32) -> u32 {
        (0..self.params.channels)
            .filter(|&q| self.params.polled(q))
            .filter_map(|q| self.channel(q))
            .map(|c| c.poll(budget))
            .sum()
    }

    /// Whether the current thread runs a callback of one of the channels.
    fn in_callback(&self) -> bool {
        let guard = rcu::read_lock();
        self.queues
            .iter()
            .any(|q| q.get(&guard).is_some_and(|c| c.in_callback()))
    }
}

/// Tears down `channels`, each waiting for its QP and CM id.
fn shutdown_all(channels: &[Arc<Channel>]) {
    for c in channels {
        c.shutdown();
    }
}

/// A copy of `channels`, to work on without the session's lock.
fn clone_all(channels: &[Arc<Channel>]) -> Result<KVec<Arc<Channel>>> {
    let mut v = KVec::with_capacity(channels.len(), GFP_KERNEL)?;
    for c in channels {
        v.push(c.clone(), GFP_KERNEL)?;
    }
    Ok(v)
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

    fn deliver(this: &Arc<Self>, data: &[u8]) {
        Session::deliver(this, data)
    }

    fn deliver_request(this: &Arc<Self>, inc: KBox<Incoming>) {
        Session::deliver_request(this, inc)
    }
}
