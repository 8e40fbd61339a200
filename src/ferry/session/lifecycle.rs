// SPDX-License-Identifier: GPL-2.0

//! A session's life: connecting (a client's attempts, a server's channels
//! joining), failures and reconnects with backoff, the tick's timers,
//! device removal and the close.

use super::*;

impl Session {
    /// Creates a server session for the connection request `data` from
    /// `peer`, with the session's `secret` (drawn for a new session, kept
    /// from the one it replaces) and the key its listener requires.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn server(
        host: Arc<dyn Host>,
        net: &Net,
        peer: SockAddr,
        data: &crate::wire::ConnectData,
        listener: u32,
        secret: wire::Secret,
        proved: bool,
        psk: Option<Arc<Psk>>,
    ) -> Result<Arc<Self>> {
        let params = Params::server(data);
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
            Some(secret),
            data.minor,
            psk,
        )?;
        // A client that proved the secret has it.
        s.confirmed.store(proved, Relaxed);
        s.inner.lock().generation = data.generation;
        host.add_session(s.clone())?;
        s.notify();
        Ok(s)
    }

    /// Opens a client session and waits until it is connected or has failed.
    /// On failure the session is gone, `consumer` was told nothing, and the
    /// reason is returned; without a consumer (a netlink request), the
    /// session may still be closing (this waits [`CLOSE_WAIT_MS`] for it at
    /// most). With `psk`, the server must prove that key and is proven it
    /// (see [`wire::Auth`]).
    pub(crate) fn connect(
        host: Arc<dyn Host>,
        net: &Net,
        peer: SockAddr,
        service: ServiceName,
        params: Params,
        consumer: Option<Arc<dyn Consumer>>,
        psk: Option<Arc<Psk>>,
    ) -> Result<Arc<Self>, Reason> {
        // What a caller may not ask for on this host: refused before
        // anything is allocated.
        if params.check_memory(&peer).is_err() {
            return Err(Reason::NoResources);
        }
        // No consumer: a netlink request, whose answer is bounded.
        let bounded = consumer.is_none();
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
            None,
            wire::MINOR,
            psk,
        )
        .map_err(|_| Reason::NoResources)?;
        host.add_session(s.clone())
            .map_err(|_| Reason::NoResources)?;
        s.notify();
        s.start_attempt();
        // Channel 0 connects first, the others once it is up, each step of
        // each within `CONNECT_TIMEOUT_MS` (the tick fails the channel
        // otherwise, which ends the wait sooner). The wait bounds the whole
        // attempt: two channels' worth, and then it times out.
        let (state, reason) = s.wait_while(2 * CONNECT_TIMEOUT_MS + 2000, |st| {
            st == SessionState::Connecting
        });
        if state == SessionState::Connected {
            // The consumer hears `up` before the caller hears of success.
            s.events.lock().mute = false;
            s.settle_events();
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
        if bounded {
            // A teardown has no bound (a drain; rdma_cm destroys an id only
            // after its queued work, other sessions' QP builds included):
            // ferry's work queue closes the session, and the answer waits
            // for that a while only.
            s.close_later(reason);
            s.wait_while(CLOSE_WAIT_MS, |st| st != SessionState::Closed);
        } else {
            s.close(reason);
        }
        Err(reason)
    }

    /// Waits while `waiting` holds of its state, at most `ms` milliseconds
    /// (or until a signal): the state and reason it ended with.
    fn wait_while(
        &self,
        ms: u32,
        waiting: impl Fn(SessionState) -> bool,
    ) -> (SessionState, Reason) {
        let start = Instant::<Monotonic>::now();
        let mut inner = self.inner.lock();
        while waiting(inner.state) {
            let left = i64::from(ms) - start.elapsed().as_millis();
            if left <= 0 {
                break;
            }
            // CAST: `left` is positive and below `ms`.
            if let CondVarTimeoutResult::Signal { .. } = self
                .changed
                .wait_interruptible_timeout(&mut inner, msecs_to_jiffies(left as u32))
            {
                break;
            }
        }
        (inner.state, inner.reason)
    }

    /// Client: starts a connect attempt with a new generation.
    pub(super) fn start_attempt(self: &Arc<Self>) {
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
        // Channel 0 first: its hello reply hands the session's secret
        // (which the others' requests prove) when the server has none for
        // the session id yet; see `channel_up`.
        if let Some(c) = list.first() {
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

    /// Server: checks a channel's hello. The first one asks the service to
    /// accept the session; all channels must name the same service.
    pub(crate) fn check_hello(self: &Arc<Self>, hello: &Hello) -> Reason {
        if self.host.shutting_down() {
            return Reason::ShuttingDown;
        }
        let mut inner = self.inner.lock();
        loop {
            match inner.service {
                Some(s) if s != hello.service => return Reason::BadParams,
                Some(_) => match inner.answer {
                    Some(r) => return r,
                    // Another channel's hello asks the service: its answer
                    // is this one's too.
                    None => self.changed.wait(&mut inner),
                },
                None => break,
            }
        }
        inner.service = Some(hello.service);
        drop(inner);
        // The consumer's `accept` runs without the session's lock.
        let answer = self
            .host
            .attach(self, &hello.service)
            .err()
            .unwrap_or(Reason::None);
        self.inner.lock().answer = Some(answer);
        self.changed.notify_all();
        answer
    }

    /// A channel completed its handshake.
    pub(crate) fn channel_up(self: &Arc<Self>, index: u16, generation: u32) {
        let mut inner = self.inner.lock();
        if inner.generation != generation || inner.state != SessionState::Connecting {
            return;
        }
        if self.role == Role::Server {
            // A client starts its channels after the first once that one is
            // up, each with a connect timeout of its own: the session waits
            // as long for the next one from each arrival and each hello.
            inner.attempt_started = Instant::now();
        }
        if self.role == Role::Client && index == 0 && inner.channels.len() > 1 {
            // The others start now, with the secret channel 0 brought.
            let Ok(rest) = clone_all(&inner.channels[1..]) else {
                drop(inner);
                return self.channel_failed(0, generation, Reason::NoResources);
            };
            drop(inner);
            for c in rest.iter() {
                c.start();
            }
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
    /// for want of memory). Callable from CM and completion handlers, in
    /// softirq too: takes two spinlocks that disable interrupts (`pending`,
    /// ferry's work queue). A failure of a newer
    /// generation replaces one not yet handled, never one of an older; of
    /// one generation, the first counts (the rest would find the session
    /// changed already).
    pub(crate) fn channel_failed(self: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
        {
            let f = &mut self.pending.lock().failure;
            if f.is_none_or(|(_, g, _)| wire::newer(generation, g)) {
                *f = Some((index, generation, reason));
            }
        }
        self.host.queue_session(self.clone());
    }

    /// Closes the session on ferry's work queue, for `reason` (the first
    /// asked for counts). Callable where [`Session::channel_failed`] is,
    /// and allocates nothing.
    pub(crate) fn close_later(self: &Arc<Self>, reason: Reason) {
        self.close_asked.store(true, Release);
        self.pending.lock().close.get_or_insert(reason);
        self.host.queue_session(self.clone());
    }

    pub(super) fn handle_failure(self: &Arc<Self>, index: u16, generation: u32, reason: Reason) {
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
        // A client's disconnect is how a server session ends: not a failure.
        let normal_end = self.role == Role::Server && reason == Reason::PeerClosed;
        if inner.state == SessionState::Connected && !normal_end {
            crate::ratelimit::pr_info_limited!(
                "session {}: channel {} to {} failed: {}\n",
                self.id,
                index,
                self.peer,
                reason.describe()
            );
        }
        inner.reason = reason;
        let channels = core::mem::take(&mut inner.channels);
        retire(&mut inner, &channels);
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
        let delay = inner.backoff.next_delay_ms(
            work::random_u32(),
            self.reconnect_delay_s().saturating_mul(1000),
        );
        if inner.connected_once && inner.state == SessionState::Reconnecting {
            // Bounded by the backoff per session, not across sessions.
            crate::ratelimit::pr_info_limited!(
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
            self.settle_events();
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
        retire(&mut inner, &channels);
        self.sendable.store(ENOTCONN.to_errno(), Release);
        self.unpublish();
        drop(inner);
        self.shut_down(&channels);
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
        // `gone` is told before the close returns, by this thread or the
        // one telling the consumer something else now.
        self.settle_events();
    }

    /// Tears down the channels on RDMA device `index` before the device goes,
    /// and lets the session recover (client) or close (server) afterwards.
    pub(crate) fn device_removed(&self, index: u32) {
        let mut inner = self.inner.lock();
        let mut hit = KVec::new();
        let mut unrecorded = false;
        for c in inner.channels.iter() {
            if c.on_device(index) && hit.push(c.clone(), GFP_KERNEL).is_err() {
                unrecorded = true;
            }
        }
        inner.tearing_down += 1;
        retire(&mut inner, &hit);
        // A channel that cannot be recorded is torn down by its failure
        // (failing takes the work queue's lock: not under `inner`).
        let rest = match unrecorded.then(|| clone_all(&inner.channels)) {
            Some(Ok(all)) => Some(all),
            Some(Err(_)) => {
                // Out of memory twice: under the lock, as a last resort.
                for c in inner.channels.iter().filter(|c| c.on_device(index)) {
                    c.fail(Reason::NoResources);
                }
                None
            }
            None => None,
        };
        drop(inner);
        for c in rest.iter().flatten().filter(|c| c.on_device(index)) {
            c.fail(Reason::NoResources);
        }
        for c in hit.iter() {
            c.fail(Reason::DeviceRemoved);
        }
        // (The failure takes them out of the session and keeps their counts.)
        self.shut_down(&hit);
        self.torn_down();
    }

    /// Shuts `channels`, taken out of the session, down (their requests
    /// complete), keeps their counts, and ends a teardown counted in
    /// `tearing_down`.
    pub(super) fn tear_down(&self, channels: &[Arc<Channel>]) {
        self.shut_down(channels);
        // Drained: their counts are final, and stay the session's.
        for c in channels.iter() {
            self.retired.absorb(&c.stats.snapshot());
        }
        self.torn_down();
    }

    /// Tears down `channels`, each waiting for its QP and CM id, which
    /// [`retire`] listed under the lock that took them out of the session,
    /// and takes them off that list (once each: a channel two teardowns
    /// share is listed twice).
    fn shut_down(&self, channels: &[Arc<Channel>]) {
        for c in channels {
            c.shutdown();
        }
        let mut inner = self.inner.lock();
        for c in channels {
            if let Some(i) = inner.retiring.iter().position(|r| Arc::ptr_eq(c, r)) {
                let _ = inner.retiring.remove(i);
            }
        }
    }

    /// A teardown counted in `tearing_down` is over.
    pub(super) fn torn_down(&self) {
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
        // The next attempt waits for the last connection's teardown too: a
        // request of the old connection (completing with ECONNABORTED) must
        // not outlive the new one's start (as nvme-rdma tears down before it
        // reconnects), or its consumer, seeing it still at work, could act
        // on the new connection for it (a blk-mq timeout resets it).
        // (A reconnect delay lowered meanwhile shortens the wait.)
        let wait_ms = inner
            .next_delay_ms
            .min(self.reconnect_delay_s().saturating_mul(1000));
        let due = inner.tearing_down == 0
            && inner
                .next_attempt
                .is_some_and(|t| t.elapsed().as_millis() >= i64::from(wait_ms));
        // (Server.) A client's next channel resolves its route and builds
        // its QP, then connects, each step within the connect timeout.
        let stuck =
            inner.attempt_started.elapsed().as_millis() > 2 * i64::from(CONNECT_TIMEOUT_MS) + 1000;
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
                // A client's attempt resolves, connects and says hello; a
                // server's channel only waits for the hello.
                let connect_timeout = match self.role {
                    Role::Client => CONNECT_TIMEOUT_MS,
                    Role::Server => HELLO_DEADLINE_MS,
                };
                for c in channels.iter() {
                    c.tick(
                        self.params.heartbeat_ms,
                        self.params.timeout_ms,
                        connect_timeout,
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
}

impl WorkItem for Session {
    type Pointer = Arc<Session>;

    fn run(this: Arc<Session>) {
        let p = core::mem::take(&mut *this.pending.lock());
        if let Some(reason) = p.close {
            // A failure does not matter any more.
            this.close(reason);
        } else if let Some((index, generation, reason)) = p.failure {
            this.handle_failure(index, generation, reason);
        }
    }
}

/// Lists `channels`, taken out of the session (or about to be torn down), as
/// retiring: their callbacks still count as the session's
/// ([`Session::in_callback`]) until [`Session::shut_down`] is over. Never
/// beyond the room made with the session (three lists of channels), so it
/// never allocates.
fn retire(inner: &mut Inner, channels: &[Arc<Channel>]) {
    for c in channels {
        // Beyond the room, a done callback of this channel would wait for
        // its timeout instead of hearing -EDEADLK: a bug, said once.
        let full = inner.retiring.push_within_capacity(c.clone()).is_err();
        kernel::warn_on!(full);
    }
}

/// A copy of `channels`, to work on without the session's lock.
pub(super) fn clone_all(channels: &[Arc<Channel>]) -> Result<KVec<Arc<Channel>>> {
    let mut v = KVec::with_capacity(channels.len(), GFP_KERNEL)?;
    for c in channels {
        v.push(c.clone(), GFP_KERNEL)?;
    }
    Ok(v)
}
