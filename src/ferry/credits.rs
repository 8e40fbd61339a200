// SPDX-License-Identifier: GPL-2.0

//! Credit-based flow control of one channel.
//!
//! A credit is a receive buffer the peer has posted for us: nothing is sent
//! without one, so the peer never sees a send it has no buffer for and
//! receiver-not-ready retries cannot happen (ferry's QPs have none).
//!
//! Each side has `depth` receive buffers posted by the time its first
//! message goes (a server's connection posts one for the hello, the rest
//! once the hello is accepted, before the reply). The protocol
//! grants the first credit implicitly, so either side may send exactly one
//! message (the client's hello, the server's reply) before it has heard from
//! the peer; that message grants the other `depth - 1`. From then on every
//! receive buffer that is posted again is one more credit owed to the peer, and
//! every message carries the credits owed so far in its header. When nothing
//! else is sent, an explicit credit message carries them once half the queue is
//! owed.
//!
//! The last credit is kept for a message that grants credits: if both sides
//! spent their last one on a message that grants none, neither could ever send
//! again.

use crate::wire::Refusal;

/// Credit state of one channel. Not synchronized: the channel's lock guards it.
#[derive(Debug)]
pub(crate) struct Credits {
    /// Sends we may still make.
    available: u32,
    /// The most the peer may grant in total: its queue depth.
    peer_depth: u32,
    /// Our receive buffers.
    depth: u32,
    /// Receive buffers posted that the peer has not been told about.
    owed: u32,
    /// Sends that found no credit.
    stalls: u64,
}

impl Credits {
    /// The state after posting `depth` receive buffers, before any message.
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            available: 1,
            // Until the peer's hello tells, it is trusted with one buffer only.
            peer_depth: 1,
            depth,
            owed: depth.saturating_sub(1),
            stalls: 0,
        }
    }

    /// Records the peer's queue depth from its hello.
    pub(crate) fn set_peer_depth(&mut self, depth: u32) {
        self.peer_depth = depth;
    }

    /// Adds `n` credits granted by the peer. Fails if that would exceed the
    /// peer's queue depth: a peer that grants buffers it does not have breaks
    /// the protocol.
    pub(crate) fn grant(&mut self, n: u16) -> Result<(), Refusal> {
        let total = self.available + u32::from(n);
        if total > self.peer_depth {
            return Err(Refusal::breach("credits beyond the buffers it has"));
        }
        self.available = total;
        Ok(())
    }

    /// Takes a credit for a message, and the credits it grants: `Some(grant)`
    /// if it may be sent. `only_if_owed` is for explicit credit messages,
    /// which are pointless without something to grant.
    pub(crate) fn take(&mut self, only_if_owed: bool) -> Option<u16> {
        let owed = self.owed.min(u32::from(u16::MAX));
        let allowed = match self.available {
            0 => false,
            1 => owed > 0,
            _ => !only_if_owed || owed > 0,
        };
        if !allowed {
            self.stalls += 1;
            return None;
        }
        self.available -= 1;
        self.owed -= owed;
        // CAST: `owed` is at most `u16::MAX`.
        Some(owed as u16)
    }

    /// Gives back a credit taken by [`Credits::take`] whose message could not
    /// be posted, with the grant it carried.
    pub(crate) fn untake(&mut self, grant: u16) {
        self.available += 1;
        self.owed += u32::from(grant);
    }

    /// One of our receive buffers was posted again. Returns whether enough is
    /// owed that an explicit credit message should go out.
    pub(crate) fn reposted(&mut self) -> bool {
        self.owed = (self.owed + 1).min(self.depth);
        self.owed >= (self.depth / 2).max(1)
    }

    /// Sends we may still make.
    pub(crate) fn available(&self) -> u32 {
        self.available
    }

    /// Sends that found no credit.
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_credits)]
mod tests {
    use super::*;

    /// Two channel ends joined by a perfect wire, to check the invariant that
    /// matters: a side never has more credits than the other has buffers
    /// posted for it.
    struct End {
        c: Credits,
        posted: u32,
    }

    impl End {
        fn new(depth: u32) -> Self {
            Self {
                c: Credits::new(depth),
                posted: depth,
            }
        }
    }

    /// Sends one message from `a` to `b`; `b` consumes a buffer, processes it
    /// and posts it again. Returns false if `a` had no credit.
    fn send(a: &mut End, b: &mut End, explicit: bool) -> bool {
        let Some(grant) = a.c.take(explicit) else {
            return false;
        };
        assert!(b.posted > 0);
        b.posted -= 1;
        b.c.grant(grant).unwrap();
        b.posted += 1;
        b.c.reposted();
        true
    }

    #[test]
    fn handshake_grants_the_rest_of_the_queue() {
        let (mut cl, mut sv) = (End::new(16), End::new(8));
        // Before the hellos only the implicit credit exists.
        assert_eq!(cl.c.available(), 1);
        cl.c.set_peer_depth(8);
        sv.c.set_peer_depth(16);
        assert!(send(&mut cl, &mut sv, false)); // hello
        assert_eq!(sv.c.available(), 16);
        assert!(send(&mut sv, &mut cl, false)); // reply
        assert_eq!(cl.c.available(), 8);
    }

    #[test]
    fn never_more_credits_than_posted_buffers() {
        let (mut a, mut b) = (End::new(4), End::new(4));
        a.c.set_peer_depth(4);
        b.c.set_peer_depth(4);
        // An uneven exchange: a sends three times as often as b.
        for i in 0..1000 {
            let _ = send(&mut a, &mut b, false);
            if i % 3 == 0 {
                let _ = send(&mut b, &mut a, false);
            }
            assert!(a.c.available() <= b.posted);
            assert!(b.c.available() <= a.posted);
        }
    }

    #[test]
    fn one_sided_traffic_never_deadlocks() {
        let (mut a, mut b) = (End::new(4), End::new(4));
        a.c.set_peer_depth(4);
        b.c.set_peer_depth(4);
        let mut sent = 0;
        for _ in 0..100 {
            if send(&mut a, &mut b, false) {
                sent += 1;
            } else {
                // a is out of credits: b's explicit update must be possible.
                assert!(send(&mut b, &mut a, true));
            }
        }
        assert!(sent > 50);
    }

    #[test]
    fn last_credit_is_kept_for_grants() {
        let mut c = Credits::new(4);
        c.set_peer_depth(4);
        // Nothing owed, one credit: not even a data message may take it.
        c.owed = 0;
        assert_eq!(c.take(false), None);
        assert_eq!(c.stalls(), 1);
        c.reposted();
        assert_eq!(c.take(false), Some(1));
        assert_eq!(c.available(), 0);
        assert_eq!(c.take(false), None);
    }

    #[test]
    fn explicit_update_needs_something_owed() {
        let mut c = Credits::new(8);
        c.set_peer_depth(8);
        c.grant(7).unwrap();
        c.owed = 0;
        assert_eq!(c.take(true), None);
        assert!(!c.reposted());
        assert!(!c.reposted());
        assert!(!c.reposted());
        assert!(c.reposted()); // half of 8 owed
        assert_eq!(c.take(true), Some(4));
    }

    #[test]
    fn hostile_grants_are_refused() {
        let mut c = Credits::new(8);
        // Before the peer's depth is known it may grant nothing beyond the first.
        assert!(c.grant(1).is_err());
        c.set_peer_depth(8);
        assert_eq!(c.grant(7), Ok(()));
        assert!(c.grant(1).is_err());
        assert!(c.grant(u16::MAX).is_err());
        assert_eq!(c.available(), 8);
    }

    #[test]
    fn untake_restores() {
        let mut c = Credits::new(8);
        c.set_peer_depth(8);
        let g = c.take(false).unwrap();
        assert_eq!(g, 7);
        c.untake(g);
        assert_eq!(c.available(), 1);
        assert_eq!(c.take(false), Some(7));
    }
}
