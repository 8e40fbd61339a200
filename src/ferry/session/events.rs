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
    pub(super) fn sync_events(self: &Arc<Self>) {
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
    pub(crate) fn deliver_request(self: &Arc<Self>, inc: Incoming) {
        let consumer = self.inner.lock().consumer.clone();
        match consumer {
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
