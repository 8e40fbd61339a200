// SPDX-License-Identifier: GPL-2.0

//! What a session tells: netlink and the consumer hear its state in order
//! (`up`, `down`, `gone`, from one place), and its messages and requests.

use super::*;

impl Session {
    /// Tells netlink listeners (`session-ntf`), the consumer and waiting
    /// senders about the session's current state.
    pub(crate) fn notify(self: &Arc<Self>) {
        self.host.session_changed(self);
        self.sync_events();
        self.wake_senders();
    }

    /// Brings the consumer up to date: `up` when connected, `down` when the
    /// connection it was told of is lost, `gone` once closed.
    ///
    /// One thread at a time tells, and it holds no lock of ferry's while the
    /// consumer's callback runs: it notes what it tells under `events`,
    /// lets go, calls, then looks again, until the consumer knows the
    /// current state. A thread that finds another telling leaves it to that
    /// one, which sees the new state when its callback returns; so a
    /// callback may send, wait for a reconnect, or take the consumer's own
    /// locks without holding up the session.
    pub(super) fn sync_events(self: &Arc<Self>) {
        let mut ev = self.events.lock();
        if ev.delivering {
            return;
        }
        loop {
            if ev.gone || ev.mute {
                break;
            }
            let inner = self.inner.lock();
            let (state, reason, conn) = (inner.state, inner.reason, inner.reconnects);
            drop(inner);
            let consumer = if state == SessionState::Closed {
                // Nothing reaches the consumer after `gone`: deliveries
                // come from the channels' completions and growth work,
                // which their teardown ends before the session is closed.
                // (The grace period only lets the cell's reference go.)
                self.consumer.replace(None).map(|c| (*c).clone())
            } else {
                self.consumer()
            };
            let Some(c) = consumer else { break };
            let call = match state {
                // Lost and regained since the consumer last looked: `down`
                // first, `up` on the next turn.
                SessionState::Connected if ev.up && ev.conn != conn => {
                    ev.up = false;
                    Tell::Down(Reason::PeerClosed)
                }
                SessionState::Connected if !ev.up => {
                    ev.up = true;
                    ev.conn = conn;
                    Tell::Up
                }
                SessionState::Connecting | SessionState::Reconnecting if ev.up => {
                    ev.up = false;
                    Tell::Down(reason)
                }
                SessionState::Closed => {
                    ev.gone = true;
                    Tell::Gone(reason)
                }
                _ => break,
            };
            ev.delivering = true;
            ev.deliverer = current_task();
            drop(ev);
            match call {
                Tell::Up => c.up(self),
                Tell::Down(r) => c.down(self, r),
                Tell::Gone(r) => c.gone(self, r),
            }
            drop(c);
            ev = self.events.lock();
            ev.delivering = false;
        }
        drop(ev);
        self.told.notify_all();
    }

    /// Waits until the consumer was told the current state (by this thread
    /// or the one telling it); at once when called from the consumer's own
    /// `up`, `down` or `gone`, which could not end otherwise.
    pub(super) fn settle_events(self: &Arc<Self>) {
        self.sync_events();
        let mut ev = self.events.lock();
        while ev.delivering && ev.deliverer != current_task() {
            self.told.wait(&mut ev);
        }
    }

    /// Hands a received message to the consumer. Takes no lock of the
    /// session's (as [`Session::deliver_request`]).
    pub(crate) fn deliver(self: &Arc<Self>, data: &[u8]) {
        match self.consumer() {
            Some(c) => c.message(self, data),
            None => {
                self.rx_dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Hands a received request to the consumer; without one, refuses it.
    pub(crate) fn deliver_request(self: &Arc<Self>, inc: Incoming) {
        match self.consumer() {
            Some(c) => c.request(self, inc),
            None => {
                self.rx_dropped.fetch_add(1, Relaxed);
                let _ = channel::respond(inc, EOPNOTSUPP.to_errno(), &[]);
            }
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
}

/// One of the consumer's state callbacks, chosen under `events`.
enum Tell {
    Up,
    Down(Reason),
    Gone(Reason),
}

/// The current task, as a number to compare.
fn current_task() -> usize {
    kernel::task::Task::current_raw().addr()
}
