// SPDX-License-Identifier: GPL-2.0

//! What the transport's tick does for a channel (heartbeats, a silent
//! peer, connect timeouts, a polled channel nobody polls, the region pool's
//! growth), and the channel's two work items.

use super::*;

impl<O: Owner> Channel<O> {
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
        if inner.broken && inner.state == ChanState::Up {
            // A submit's chain was posted only in part (it could not fail
            // the channel itself: it may be atomic).
            drop(inner);
            self.fail(Reason::TransportError);
            return;
        }
        let timed_out = match inner.state {
            ChanState::Resolving
            | ChanState::Connecting
            | ChanState::Handshake
            | ChanState::Refusing(_) => inner
                .since
                .is_some_and(|t| t.elapsed().as_millis() > i64::from(connect_timeout_ms)),
            ChanState::Up => peer_silent(
                inner.last_rx.elapsed().as_millis(),
                inner.last_ack.elapsed().as_millis(),
                inner.xfer.as_ref().is_some_and(Xfer::busy),
                timeout_ms,
            ),
            ChanState::Failed | ChanState::Closed => false,
        };
        if timed_out {
            if inner.state == ChanState::Up {
                // What the channel was doing, for whoever reads why it failed.
                let (waiting, rdma) = inner.xfer.as_ref().map_or((0, 0), Xfer::load);
                let held = inner.responder.as_ref().map_or(0, Responder::held);
                let dev = inner.device.map_or(DeviceName::NONE, |(_, n)| n);
                crate::ratelimit::pr_warn_limited!(
                    "{}: session {} channel {}: nothing from the peer for {} ms, its adapter's last ack {} ms ago; {} requests waiting for answers, {} of the peer's held here ({} in RDMA), {} credits\n",
                    dev.as_cstr(),
                    self.session.id(),
                    self.index,
                    inner.last_rx.elapsed().as_millis(),
                    inner.last_ack.elapsed().as_millis(),
                    waiting,
                    held,
                    rdma,
                    inner.credits.available()
                );
            }
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
            } else if inner.xfer.as_ref().is_some_and(Xfer::busy) {
                // Requests at work, and every credit spent on them: this side
                // waits while the peer moves their data by RDMA, which it
                // does not see. A zero-length RDMA WRITE needs no credit, and
                // its completion is the sign of life (`Inner::last_ack`).
                let inner = &mut *inner;
                if let (Some(qp), Some(ring)) = (inner.qp.as_deref(), inner.ring.as_mut()) {
                    if qp.probe(ring).is_ok() {
                        self.stats.add(Counter::Probes, 1);
                    }
                }
            }
        }
    }

    /// Queues the growth of the region pool, which a request found empty
    /// or running low: from a completion, so that the pool grows while the
    /// requests that need it come back, not a tick later. Process context.
    pub(super) fn grow_regions(this: Arc<Self>) {
        let owner = this.session.clone();
        owner.queue_channel(this, ChannelWork::Grow);
    }
}

/// How many timeouts a busy peer's adapter may stand in for the peer: its
/// acknowledgements keep a channel alive at most this long without a
/// message from the peer (a wedged peer whose adapter still acknowledges is
/// found then, at the latest).
pub(super) const BUSY_TIMEOUTS: i64 = 4;

/// Whether the peer counts as dead: no message from it for `timeout_ms`,
/// and, while requests are at work (`busy`), no acknowledgement of its
/// adapter either (see `Inner::last_ack`), for at most [`BUSY_TIMEOUTS`]
/// timeouts. Times in milliseconds ago.
pub(super) fn peer_silent(rx_ms: i64, ack_ms: i64, busy: bool, timeout_ms: u32) -> bool {
    let timeout = i64::from(timeout_ms);
    rx_ms > timeout && (!busy || ack_ms > timeout || rx_ms > BUSY_TIMEOUTS * timeout)
}

/// Completions the tick processes on a polled channel nobody polls, per run.
pub(super) const TICK_POLL_BUDGET: u32 = 256;

impl<O: Owner> WorkItem<1> for Channel<O> {
    type Pointer = Arc<Channel<O>>;

    fn run(this: Arc<Self>) {
        // Counted in `growing` while it holds the PD: the teardown waits for
        // it, so no region outlives the channel's device.
        let (n, pd, pages) = {
            let mut inner = this.inner.lock();
            if inner.state == ChanState::Closed {
                return;
            }
            let n = inner.xfer.as_ref().map_or(0, Xfer::wants_regions);
            let pages = inner
                .caps
                .map_or(0, |c| c.max_fast_reg_page_list_len.min(MAX_REG_PAGES));
            let pd = inner.pd.clone().filter(|_| n > 0 && pages > 0);
            if pd.is_some() {
                inner.growing += 1;
            }
            (n, pd, pages)
        };
        let Some(pd) = pd else {
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
        if !mrs.is_empty() {
            let mut inner = this.inner.lock();
            if inner.state != ChanState::Closed {
                if let Some(x) = inner.xfer.as_mut() {
                    x.add_regions(&mut mrs);
                }
            }
        }
        // What found no room (the channel closed) is deregistered here; the
        // growth is over even if the device registered nothing.
        drop(mrs);
        drop(pd);
        // Requests that waited for regions may go: told while the growth
        // still counts, so that the teardown (which waits for it) does not
        // end first, and the session close and tell `gone`, before this
        // `writable` is over; and not once the channel is closing.
        if this.inner.lock().state != ChanState::Closed {
            O::credits_returned(&this.session, this.index);
        }
        let mut inner = this.inner.lock();
        inner.growing -= 1;
        if inner.growing == 0 {
            this.idle.notify_all();
        }
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
