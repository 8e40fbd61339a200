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

use core::sync::atomic::Ordering::Relaxed;
use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{aref::ARef, Arc, CondVar, CondVarTimeoutResult, Mutex},
    time::{msecs_to_jiffies, Instant, Monotonic},
};

use crate::{
    backoff::Backoff,
    channel::{Channel, ChannelInfo},
    cm::SockAddr,
    device::Ferry,
    netns::Net,
    state::{Role, SessionState},
    wire::{Hello, Reason, ServiceName},
    work,
};

/// How long one connect attempt may take before it counts as failed.
pub(crate) const CONNECT_TIMEOUT_MS: u32 = 10_000;

/// What a session was asked for (client) or runs with (server).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Channel count.
    pub(crate) channels: u16,
    /// Receive buffers per channel on this side.
    pub(crate) queue_depth: u32,
    /// Largest message this side accepts.
    pub(crate) max_msg: u32,
    /// Heartbeat interval.
    pub(crate) heartbeat_ms: u32,
    /// Silence after which the peer counts as dead.
    pub(crate) timeout_ms: u32,
    /// Seconds of failed reconnecting before giving up; 0: never.
    pub(crate) give_up_s: u32,
}

impl Params {
    /// Server defaults, and the client's where the caller says nothing.
    pub(crate) const DEFAULT: Self = Self {
        channels: 1,
        queue_depth: 128,
        max_msg: 4096,
        heartbeat_ms: 1000,
        timeout_ms: 5000,
        give_up_s: 600,
    };
}

/// What the session's lock protects.
struct Inner {
    state: SessionState,
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
}

/// A session; see the module docs.
#[pin_data]
pub(crate) struct Session {
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
}

/// Summed counters of a session's channels.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) tx_msgs: u64,
    pub(crate) rx_msgs: u64,
    pub(crate) tx_bytes: u64,
    pub(crate) rx_bytes: u64,
    pub(crate) heartbeats_tx: u64,
    pub(crate) heartbeats_rx: u64,
    pub(crate) credit_updates: u64,
    pub(crate) credit_stalls: u64,
    pub(crate) wc_errors: u64,
    pub(crate) flush_errors: u64,
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
    pub(crate) totals: Totals,
}

impl Session {
    #[allow(clippy::too_many_arguments)]
    fn create(
        id: u32,
        session_id: u64,
        role: Role,
        net: &Net,
        peer: SockAddr,
        params: Params,
        listener: Option<u32>,
        client_service: Option<ServiceName>,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
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
                }),
                changed <- new_condvar!(),
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
        ferry: &Ferry,
        net: &Net,
        peer: SockAddr,
        data: &crate::wire::ConnectData,
        listener: u32,
    ) -> Result<Arc<Self>> {
        let params = Params {
            channels: data.channels,
            ..Params::DEFAULT
        };
        let id = ferry.next_session_id();
        let s = Self::create(
            id,
            data.session_id,
            Role::Server,
            net,
            peer,
            params,
            Some(listener),
            None,
        )?;
        s.inner.lock().generation = data.generation;
        ferry.add_session(s.clone())?;
        s.notify();
        Ok(s)
    }

    /// Opens a client session and waits until it is connected or has failed.
    /// On failure the session is gone and the reason is returned.
    pub(crate) fn connect(
        ferry: &Ferry,
        net: &Net,
        peer: SockAddr,
        service: ServiceName,
        params: Params,
    ) -> Result<Arc<Self>, Reason> {
        let id = ferry.next_session_id();
        let session_id = loop {
            let v = work::random_u64();
            if v != 0 {
                break v;
            }
        };
        let s = Self::create(
            id,
            session_id,
            Role::Client,
            net,
            peer,
            params,
            None,
            Some(service),
        )
        .map_err(|_| Reason::NoResources)?;
        ferry
            .add_session(s.clone())
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
            return Ok(s);
        }
        // Still connecting when the wait ended: the attempt timed out.
        let reason = if reason == Reason::None {
            Reason::Timeout
        } else {
            reason
        };
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
    pub(crate) fn add_channel(&self, chan: Arc<Channel>) -> Result<(), Reason> {
        let mut inner = self.inner.lock();
        if inner.state != SessionState::Connecting {
            return Err(Reason::BadChannel);
        }
        inner
            .channels
            .push(chan, GFP_KERNEL)
            .map_err(|_| Reason::NoResources)
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

    /// Server: checks a channel's hello; all channels must name the same service.
    pub(crate) fn check_hello(&self, hello: &Hello) -> Reason {
        let Some(ferry) = Ferry::get() else {
            return Reason::ShuttingDown;
        };
        if !ferry.has_service(&hello.service) {
            return Reason::UnknownService;
        }
        let mut inner = self.inner.lock();
        match inner.service {
            Some(s) if s != hello.service => Reason::BadParams,
            Some(_) => Reason::None,
            None => {
                inner.service = Some(hello.service);
                Reason::None
            }
        }
    }

    /// A channel completed its handshake.
    pub(crate) fn channel_up(&self, _index: u16, generation: u32) {
        let mut inner = self.inner.lock();
        if inner.generation != generation || inner.state != SessionState::Connecting {
            return;
        }
        let all = inner.channels.len() == usize::from(self.params.channels)
            && inner.channels.iter().all(|c| c.info().up);
        if !all {
            return;
        }
        if self.set_state(&mut inner, SessionState::Connected).is_err() {
            return;
        }
        if inner.connected_once {
            inner.reconnects += 1;
            pr_info!("session {}: reconnected to {}\n", self.id, self.peer);
        }
        inner.connected_once = true;
        inner.reason = Reason::None;
        inner.backoff.reset();
        inner.failed_since = None;
        drop(inner);
        self.notify();
    }

    /// A channel failed: handled on the transport's work queue. Callable from
    /// CM and completion handlers: takes no lock.
    pub(crate) fn channel_failed(self: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
        let Some(ferry) = Ferry::get() else { return };
        let this = self.clone();
        let _ = ferry.spawn(move || this.handle_failure(index, generation, reason));
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
        if next == SessionState::Closing {
            drop(inner);
            shutdown_all(&channels);
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
        drop(inner);
        shutdown_all(&channels);
        self.notify();
    }

    /// Closes the session for good: tears its channels down, waits for them,
    /// and removes it. Idempotent. May sleep; not from a CM or completion handler.
    pub(crate) fn close(self: &Arc<Self>, reason: Reason) {
        let mut inner = self.inner.lock();
        if inner.state == SessionState::Closed {
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
        drop(inner);
        shutdown_all(&channels);
        let mut inner = self.inner.lock();
        // A concurrent close (a failure and the connect waiter) may have won.
        if inner.state == SessionState::Closed {
            return;
        }
        let _ = self.set_state(&mut inner, SessionState::Closed);
        drop(inner);
        if let Some(ferry) = Ferry::get() {
            ferry.remove_session(self);
        }
        self.notify();
    }

    /// Tears down the channels on RDMA device `index` before the device goes,
    /// and lets the session recover (client) or close (server) afterwards.
    pub(crate) fn device_removed(&self, index: u32) {
        let inner = self.inner.lock();
        let mut hit = KVec::new();
        for c in inner.channels.iter() {
            // A channel that cannot be recorded is torn down by its failure.
            if c.on_device(index) && hit.push(c.clone(), GFP_KERNEL).is_err() {
                c.fail(Reason::NoResources);
            }
        }
        drop(inner);
        for c in hit.iter() {
            c.fail(Reason::DeviceRemoved);
            c.shutdown();
        }
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
            totals: Totals::default(),
        };
        for c in inner.channels.iter() {
            let ci = c.info();
            let (depth, max_msg) = c.peer_limits();
            if depth != 0 {
                info.peer_depth = depth;
                info.max_msg = max_msg;
            }
            let t = &mut info.totals;
            let s = &c.stats;
            t.tx_msgs += s.tx_msgs.load(Relaxed);
            t.rx_msgs += s.rx_msgs.load(Relaxed);
            t.tx_bytes += s.tx_bytes.load(Relaxed);
            t.rx_bytes += s.rx_bytes.load(Relaxed);
            t.heartbeats_tx += s.heartbeats_tx.load(Relaxed);
            t.heartbeats_rx += s.heartbeats_rx.load(Relaxed);
            t.credit_updates += s.credit_updates.load(Relaxed);
            t.wc_errors += s.wc_errors.load(Relaxed);
            t.flush_errors += s.flush_errors.load(Relaxed);
            t.credit_stalls += ci.stalls;
            info.channels.push(ci, GFP_KERNEL)?;
        }
        Ok(info)
    }

    /// Sends a `session-ntf` with the session's current attributes.
    pub(crate) fn notify(&self) {
        crate::netlink::notify_session(self);
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
