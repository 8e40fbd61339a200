// SPDX-License-Identifier: GPL-2.0

//! The session's data path: a channel picked (or named) by RCU, a send or
//! submit on it without any session lock, the waits of callers that may
//! sleep, and `writable` for those that may not. Limits and polling too.

use super::*;

impl Session {
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
        if !self.params.sends_requests {
            // The client said it takes none.
            return Err((EOPNOTSUPP, req, data));
        }
        if nowait {
            return self.try_request(on, own, req, data);
        }
        self.wait_for_room((req, data), |(req, data)| {
            self.try_request(on, own, req, data)
                .map_err(|(e, req, data)| (e, (req, data)))
        })
        .map_err(|(e, (req, data))| (e, req, data))
    }

    /// Makes `attempt` (a send or submit of `item`) until it succeeds or
    /// fails for another reason than `EAGAIN`, sleeping up to the session's
    /// timeout for room: credits, tags, regions, a reconnect. `EDEADLK` in a
    /// completion of the session (only it could make room), `ETIMEDOUT`,
    /// `EINTR`; the item comes back with the error. The one wait of the
    /// session's senders.
    fn wait_for_room<T>(
        &self,
        mut item: T,
        mut attempt: impl FnMut(T) -> Result<(), (Error, T)>,
    ) -> Result<(), (Error, T)> {
        let start = Instant::<Monotonic>::now();
        let mut guard = None;
        loop {
            item = match attempt(item) {
                Err((e, t)) if e == EAGAIN => t,
                r => return r,
            };
            // Once, before `wait` is held (`in_callback` takes `inner`): the
            // thread stays what it is.
            if guard.is_none() && self.in_callback() {
                return Err((EDEADLK, item));
            }
            let left = i64::from(self.params.timeout_ms) - start.elapsed().as_millis();
            if left <= 0 {
                return Err((ETIMEDOUT, item));
            }
            let g = guard.get_or_insert_with(|| self.wait.lock());
            self.waiters.fetch_add(1, SeqCst);
            // Room that came back meanwhile woke nobody: try again under
            // the lock before sleeping.
            item = match attempt(item) {
                Err((e, t)) if e == EAGAIN => t,
                r => {
                    self.waiters.fetch_sub(1, SeqCst);
                    return r;
                }
            };
            // CAST: `0 < left <= timeout_ms`, a `u32`.
            let r = self
                .credit_cv
                .wait_interruptible_timeout(g, msecs_to_jiffies(left as u32));
            self.waiters.fetch_sub(1, SeqCst);
            if let CondVarTimeoutResult::Signal { .. } = r {
                return Err((EINTR, item));
            }
        }
    }

    pub(super) fn try_request(
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
    pub(super) fn place_request(
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
        for i in 0..self.candidates(on) {
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
    pub(super) fn refused(&self, on: Option<u16>) {
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
        // Reads first, so that a completion writes the shared words only
        // when a refusal is waiting (the refusal's later look sees the room
        // this completion made: it takes the channel's lock after it).
        let bit = 1u64.checked_shl(u32::from(qid)).unwrap_or(0);
        let mine = self.want_writable.load(SeqCst) & bit != 0
            && self.want_writable.fetch_and(!bit, SeqCst) & bit != 0;
        // (`|` not `||`: an "any" waiter is served too, by a channel the
        // session's own pick uses: not a polled one.)
        let any = !self.params.polled(qid)
            && self.want_any.load(SeqCst)
            && self.want_any.swap(false, SeqCst);
        if mine | any {
            if let Some(c) = self.consumer() {
                c.writable(self, qid);
            }
        }
    }

    pub(super) fn wake_senders(&self) {
        if self.waiters.load(SeqCst) != 0 {
            let _guard = self.wait.lock();
            self.credit_cv.notify_all();
        }
    }

    /// The longest wait between reconnect attempts, in seconds.
    pub(crate) fn reconnect_delay_s(&self) -> u32 {
        self.reconnect_delay_s.load(Relaxed)
    }

    /// Changes the longest wait between reconnect attempts (from the next
    /// wait on, and the one under way if it is longer): `EINVAL` out of
    /// [`RECONNECT_DELAY_RANGE_S`], `EOPNOTSUPP` on a server (which never
    /// reconnects).
    pub(crate) fn set_reconnect_delay(&self, secs: u32) -> Result {
        if self.role != Role::Client {
            return Err(EOPNOTSUPP);
        }
        if !RECONNECT_DELAY_RANGE_S.contains(&secs) {
            return Err(EINVAL);
        }
        self.reconnect_delay_s.store(secs, Relaxed);
        Ok(())
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
            incoming_depth: if self.params.takes_requests {
                crate::xfer::responder_tags(self.params.queue_depth)
            } else {
                0
            },
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
        if nowait {
            return self.try_send(on, data);
        }
        self.wait_for_room((), |()| self.try_send(on, data).map_err(|e| (e, ())))
            .map_err(|(e, ())| e)
    }

    pub(super) fn try_send(&self, on: Option<u16>, data: &[u8]) -> Result {
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
    pub(super) fn place_message(&self, on: Option<u16>, data: &[u8]) -> Result {
        let guard = rcu::read_lock();
        let n = self.queues.len();
        let start = self.first_pick(&guard, on);
        for i in 0..self.candidates(on) {
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
    pub(super) fn check_sendable(&self) -> Result {
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
    pub(super) fn update_sendable(&self, inner: &Inner) {
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
    pub(super) fn unpublish(&self) {
        RcuCell::clear_all(&self.queues);
    }

    /// How many queues a send for channel `on` looks at, from
    /// [`Session::first_pick`] on: the named one alone, or all.
    pub(super) fn candidates(&self, on: Option<u16>) -> usize {
        if on.is_some() {
            1
        } else {
            self.queues.len()
        }
    }

    /// Whether a send for channel `on` may go out on `c`: `on` itself, or
    /// with no channel named, any ordinary (not polled) channel, and from a
    /// callback the callback's own channel.
    pub(super) fn picks(&self, on: Option<u16>, c: &Channel) -> bool {
        match on {
            Some(q) => c.index() == q,
            None => !self.params.polled(c.index()) || c.in_callback(),
        }
    }

    /// Where in `inner.channels` a send with no channel named starts
    /// looking: from a callback, at the callback's own channel, so an answer
    /// goes back the way its question came (to a consumer that polls that
    /// channel); else at the calling CPU's.
    pub(super) fn first_pick(&self, guard: &rcu::Guard, on: Option<u16>) -> usize {
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
        // A channel is up before its session is: a service's first channels
        // may already carry requests while its last ones still connect, and
        // are only in the session's own list then. A service's session has
        // one connection only; a client's list may hold its next attempt,
        // which a late timeout of the last connection must not fail.
        let c = match self.channel(qid) {
            Some(c) => c,
            None if self.role == Role::Server => self.connecting_channel(qid).ok_or(ENOTCONN)?,
            None => return Err(ENOTCONN),
        };
        c.reset()
    }

    /// Channel `qid` of a session that is still connecting (under the
    /// session's lock: process context).
    fn connecting_channel(&self, qid: u16) -> Option<Arc<Channel>> {
        let inner = self.inner.lock();
        if inner.state != SessionState::Connecting {
            return None;
        }
        inner.channels.iter().find(|c| c.index() == qid).cloned()
    }

    /// Channel `qid` while the session is connected (none of the session's
    /// locks: from a consumer's timeout or poll).
    pub(super) fn channel(&self, qid: u16) -> Option<Arc<Channel>> {
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

    /// Whether the current thread runs a callback of one of the channels,
    /// published or being torn down. Not on the data path: only before a
    /// wait.
    pub(super) fn in_callback(&self) -> bool {
        let published = {
            let guard = rcu::read_lock();
            self.queues
                .iter()
                .any(|q| q.get(&guard).is_some_and(|c| c.in_callback()))
        };
        published || self.inner.lock().retiring.iter().any(|c| c.in_callback())
    }
}
