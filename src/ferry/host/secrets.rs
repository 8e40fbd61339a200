// SPDX-License-Identifier: GPL-2.0

//! The secrets of server sessions, by session id and client address: what a
//! connection request for a known session must prove (see
//! [`crate::wire::JoinProof`]).
//!
//! A record lives as long as a server session uses it, and past the last
//! one for [`IDLE_TTL_MS`] if the client showed it has the secret (it proved
//! it, or spoke after the hello reply that handed it): a server session
//! closes on any failure while its client reconnects with a newer
//! generation, and whoever learns the id must not take it in the meantime.
//! A record whose client never had the secret goes with its last session,
//! so a lost hello reply does not lock the client out.
//!
//! A record of an address is never dropped to make room for that address:
//! whoever floods the store with sessions of their own (an unprivileged
//! user on a client's host shares its address) could otherwise push out a
//! reconnecting client's record and then claim its id. A new record is
//! refused instead beyond [`MAX_PER_PEER`] for one address (in one
//! namespace), and the request that needed it gets "busy". When the store
//! holds [`MAX_RECORDS`] in all (a flood from many addresses), the oldest
//! idle record of the address that holds the most goes, if that address
//! holds at least [`MIN_EVICTABLE`]; else the new one is refused.

use kernel::{
    prelude::*,
    time::{Instant, Monotonic},
};

use crate::{cm::SockAddr, wire::Secret};

/// How long a secret outlives its last session, in milliseconds: longer
/// than a client's default give-up time (600 s).
pub(crate) const IDLE_TTL_MS: i64 = 15 * 60 * 1000;

/// Most records of one client address (live and idle) in one namespace.
pub(crate) const MAX_PER_PEER: usize = 1024;
/// Most records in all (about 100 bytes each).
pub(crate) const MAX_RECORDS: usize = 16384;
/// An address holding fewer records never loses one to another's.
pub(crate) const MIN_EVICTABLE: usize = 16;

struct Record {
    /// The namespace, by address, as listeners and sessions compare theirs.
    net: usize,
    session_id: u64,
    peer: SockAddr,
    secret: Secret,
    /// The newest generation a session of the record was made for: a
    /// request must be newer to start another (a replay is not).
    generation: u32,
    /// Server sessions that use it.
    live: u32,
    /// The client had the secret.
    confirmed: bool,
    /// When the last session went (with `live` 0).
    idle_since: Option<Instant<Monotonic>>,
}

impl Record {
    /// Its address: namespace and IP.
    fn key(&self) -> (usize, &[u8]) {
        (self.net, self.peer.ip())
    }

    fn is(&self, net: usize, session_id: u64, peer: &SockAddr) -> bool {
        self.net == net && self.session_id == session_id && self.peer.ip() == peer.ip()
    }

    fn expired(&self, ttl_ms: i64) -> bool {
        self.idle_since
            .is_some_and(|t| t.elapsed().as_millis() >= ttl_ms)
    }
}

/// The records; the transport keeps them under a mutex.
#[derive(Default)]
pub(crate) struct Secrets {
    records: KVec<Record>,
    ttl_ms: i64,
    /// Most records of one address, and in all ([`MAX_PER_PEER`],
    /// [`MAX_RECORDS`] but in tests).
    max: (usize, usize),
}

impl Secrets {
    /// No records; idle ones are kept `ttl_ms`; at most `max.0` of one
    /// address, `max.1` in all.
    pub(crate) fn new(ttl_ms: i64, max: (usize, usize)) -> Self {
        Self {
            records: KVec::new(),
            ttl_ms,
            max,
        }
    }

    /// The secret of session `session_id` from `peer`'s address in namespace
    /// `net`, and the newest generation a session was made for, if the
    /// host knows the session.
    pub(crate) fn find(
        &self,
        net: usize,
        session_id: u64,
        peer: &SockAddr,
    ) -> Option<(Secret, u32)> {
        self.records
            .iter()
            .find(|r| r.is(net, session_id, peer) && !r.expired(self.ttl_ms))
            .map(|r| (r.secret, r.generation))
    }

    /// A server session with `secret` starts for `generation`: its record
    /// is created or taken up again. `EBUSY` if the record has another
    /// secret (two requests raced for an id nobody had): the loser is
    /// refused, the winner's secret stays. `EDQUOT` if a new record would
    /// pass the limit of its address, `ENOSPC` the limit in all when no
    /// address holds enough to give one up (see the module's docs).
    pub(crate) fn claim(
        &mut self,
        net: usize,
        session_id: u64,
        peer: &SockAddr,
        secret: Secret,
        generation: u32,
    ) -> Result {
        self.prune();
        if let Some(r) = self
            .records
            .iter_mut()
            .find(|r| r.is(net, session_id, peer) && !r.expired(self.ttl_ms))
        {
            if !crate::crypto::equal_secret(&r.secret, &secret) {
                return Err(EBUSY);
            }
            r.live += 1;
            r.idle_since = None;
            if crate::wire::newer(generation, r.generation) {
                r.generation = generation;
            }
            return Ok(());
        }
        if self.of_address(net, peer) >= self.max.0 {
            return Err(EDQUOT);
        }
        if self.records.len() >= self.max.1 {
            self.evict_for(net, peer)?;
        }
        // Room for a few more at once: a vector that grows copies the
        // secrets and frees the old buffer unwiped, so it grows seldom.
        if self.records.len() == self.records.capacity() {
            self.records
                .reserve(self.records.len().max(16), GFP_KERNEL)?;
        }
        self.records.push(
            Record {
                net,
                session_id,
                peer: *peer,
                secret,
                generation,
                live: 1,
                confirmed: false,
                idle_since: None,
            },
            GFP_KERNEL,
        )?;
        Ok(())
    }

    /// A server session of the record ended; `confirmed`: its client had
    /// the secret.
    pub(crate) fn release(
        &mut self,
        net: usize,
        session_id: u64,
        peer: &SockAddr,
        confirmed: bool,
    ) {
        let Some(pos) = self
            .records
            .iter()
            .position(|r| r.is(net, session_id, peer))
        else {
            return;
        };
        let r = &mut self.records[pos];
        r.confirmed |= confirmed;
        r.live = r.live.saturating_sub(1);
        if r.live > 0 {
            return;
        }
        if r.confirmed {
            r.idle_since = Some(Instant::now());
        } else {
            self.forget(pos);
        }
    }

    /// Forgets every record of namespace `net` (which is going); returns
    /// how many there were.
    pub(crate) fn forget_net(&mut self, net: usize) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.records.len() {
            if self.records[i].net == net {
                self.forget(i);
                n += 1;
            } else {
                i += 1;
            }
        }
        n
    }

    /// Records without a session (for the tests).
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    fn idle(&self) -> usize {
        self.records.iter().filter(|r| r.live == 0).count()
    }

    /// Removes record `pos`, its secret wiped where it was and where the
    /// records behind it were (the last one's bytes stay past the end).
    fn forget(&mut self, pos: usize) {
        if let Some(r) = self.records.get_mut(pos) {
            crate::crypto::wipe(&mut r.secret);
        }
        // What comes out is zeroed already.
        let _ = self.records.remove(pos);
        let spare = self.records.spare_capacity_mut();
        let n = spare.len().min(1);
        crate::crypto::wipe_spare(&mut spare[..n]);
    }

    /// Records of `peer`'s address in namespace `net`.
    fn of_address(&self, net: usize, peer: &SockAddr) -> usize {
        self.records
            .iter()
            .filter(|r| r.net == net && r.peer.ip() == peer.ip())
            .count()
    }

    /// The store is full: drops the oldest idle record of the address that
    /// holds the most, unless that is `peer`'s own or holds fewer than
    /// [`MIN_EVICTABLE`]; `ENOSPC` if none goes. (The records are sorted
    /// by address to count them: only when the store is full. The index
    /// list is 128 KiB when it is, so it may come from vmalloc.)
    fn evict_for(&mut self, net: usize, peer: &SockAddr) -> Result {
        let mut order = KVVec::with_capacity(self.records.len(), GFP_KERNEL)?;
        for i in 0..self.records.len() {
            order.push(i, GFP_KERNEL)?;
        }
        let records = &self.records;
        order.sort_unstable_by(|&a, &b| records[a].key().cmp(&records[b].key()));
        // The longest run of one address: its first index in `order`, and
        // its length.
        let (mut best, mut run_start) = ((0, 0), 0);
        for j in 1..=order.len() {
            if j == order.len() || records[order[j]].key() != records[order[run_start]].key() {
                if j - run_start > best.1 {
                    best = (run_start, j - run_start);
                }
                run_start = j;
            }
        }
        let (first, n) = best;
        if n < MIN_EVICTABLE.min(self.max.0) {
            return Err(ENOSPC);
        }
        let holder = &records[order[first]];
        if holder.net == net && holder.peer.ip() == peer.ip() {
            return Err(ENOSPC);
        }
        let now = Instant::<Monotonic>::now();
        let oldest = order[first..first + n]
            .iter()
            .filter_map(|&i| records[i].idle_since.map(|t| (i, (now - t).as_nanos())))
            // Of equal ages (a coarse clock), the first listed: the oldest.
            .max_by_key(|&(i, age)| (age, core::cmp::Reverse(i)));
        match oldest {
            Some((i, _)) => {
                self.forget(i);
                Ok(())
            }
            None => Err(ENOSPC),
        }
    }

    /// Drops expired records, in one pass: their secrets are wiped, the
    /// others move down, and the slots left past the end are wiped too.
    fn prune(&mut self) {
        let ttl = self.ttl_ms;
        let before = self.records.len();
        for r in self.records.iter_mut().filter(|r| r.expired(ttl)) {
            crate::crypto::wipe(&mut r.secret);
        }
        self.records.retain(|r| !r.expired(ttl));
        let gone = before - self.records.len();
        let spare = self.records.spare_capacity_mut();
        let n = spare.len().min(gone);
        crate::crypto::wipe_spare(&mut spare[..n]);
    }
}

impl Drop for Secrets {
    fn drop(&mut self) {
        for r in self.records.iter_mut() {
            crate::crypto::wipe(&mut r.secret);
        }
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_secrets)]
mod tests {
    use super::*;

    fn peer(last: u8) -> SockAddr {
        SockAddr::v4([192, 0, 2, last], 4791)
    }

    #[test]
    fn a_secret_lives_with_its_sessions() -> Result {
        let mut s = Secrets::new(IDLE_TTL_MS, (MAX_PER_PEER, MAX_RECORDS));
        assert_eq!(s.find(0, 1, &peer(1)), None);
        s.claim(0, 1, &peer(1), [1; 16], 1)?;
        assert_eq!(s.find(0, 1, &peer(1)), Some(([1; 16], 1)));
        // Another address, id or namespace: not the same session.
        assert_eq!(s.find(0, 1, &peer(2)), None);
        assert_eq!(s.find(0, 2, &peer(1)), None);
        assert_eq!(s.find(9, 1, &peer(1)), None);
        // A replacing session (a newer generation), then the old one goes:
        // still live, and the generation is the newest.
        s.claim(0, 1, &peer(1), [1; 16], 2)?;
        s.release(0, 1, &peer(1), false);
        assert_eq!(s.find(0, 1, &peer(1)), Some(([1; 16], 2)));
        assert_eq!(s.idle(), 0);
        // The last goes, its client confirmed: kept, idle.
        s.release(0, 1, &peer(1), true);
        assert_eq!(s.find(0, 1, &peer(1)), Some(([1; 16], 2)));
        assert_eq!(s.idle(), 1);
        // Taken up again by the client's reconnect.
        s.claim(0, 1, &peer(1), [1; 16], 3)?;
        assert_eq!(s.idle(), 0);
        Ok(())
    }

    #[test]
    fn a_claim_never_replaces_a_secret() -> Result {
        let mut s = Secrets::new(IDLE_TTL_MS, (MAX_PER_PEER, MAX_RECORDS));
        s.claim(0, 5, &peer(1), [5; 16], 1)?;
        assert_eq!(s.claim(0, 5, &peer(1), [6; 16], 1), Err(EBUSY));
        assert_eq!(s.find(0, 5, &peer(1)), Some(([5; 16], 1)));
        Ok(())
    }

    #[test]
    fn an_unconfirmed_secret_goes_with_its_session() -> Result {
        let mut s = Secrets::new(IDLE_TTL_MS, (MAX_PER_PEER, MAX_RECORDS));
        s.claim(0, 7, &peer(1), [7; 16], 1)?;
        s.release(0, 7, &peer(1), false);
        assert_eq!(s.find(0, 7, &peer(1)), None);
        // Releasing what is not there is harmless.
        s.release(0, 7, &peer(1), true);
        assert_eq!(s.idle(), 0);
        Ok(())
    }

    #[test]
    fn idle_secrets_expire_and_are_bounded() -> Result {
        // Expired at once: found no more, pruned at the next claim.
        let mut s = Secrets::new(0, (MAX_PER_PEER, MAX_RECORDS));
        s.claim(0, 1, &peer(1), [1; 16], 1)?;
        s.release(0, 1, &peer(1), true);
        assert_eq!(s.find(0, 1, &peer(1)), None);
        s.claim(0, 2, &peer(1), [2; 16], 1)?;
        assert_eq!(s.idle(), 0);
        Ok(())
    }

    #[test]
    fn a_full_store_drops_only_a_big_holders_oldest_idle_record() -> Result {
        // (The module keeps MAX_PER_PEER and MAX_RECORDS; a few show the
        // rule, and thousands of claims, each pruning, take long on a KASAN
        // kernel under emulation.)
        const PER_PEER: usize = 4;
        let mut s = Secrets::new(IDLE_TTL_MS, (PER_PEER, 64));
        // The victim's session, closed, its client reconnecting.
        s.claim(0, 1, &peer(1), [1; 16], 1)?;
        s.release(0, 1, &peer(1), true);
        // Someone at the same address opens and closes sessions.
        for id in 2..=PER_PEER as u64 {
            s.claim(0, id, &peer(1), [2; 16], 1)?;
            s.release(0, id, &peer(1), true);
        }
        assert_eq!(s.claim(0, 99, &peer(1), [2; 16], 1), Err(EDQUOT));
        // Another namespace's same address is another host.
        s.claim(7, 99, &peer(1), [2; 16], 1)?;
        // The victim's record stayed, and its reconnect takes it up.
        assert_eq!(s.find(0, 1, &peer(1)), Some(([1; 16], 1)));
        s.claim(0, 1, &peer(1), [1; 16], 2)?;
        // A store full of addresses that hold a few each: none gives one up.
        let mut s = Secrets::new(IDLE_TTL_MS, (PER_PEER, 3));
        for last in 1..=3 {
            s.claim(0, u64::from(last), &peer(last), [3; 16], 1)?;
            s.release(0, u64::from(last), &peer(last), true);
        }
        assert_eq!(s.claim(0, 12, &peer(4), [3; 16], 1), Err(ENOSPC));
        assert_eq!(s.find(0, 1, &peer(1)), Some(([3; 16], 1)));
        // A flood from many addresses fills the store: the biggest holder
        // gives up its oldest idle record, the others keep theirs.
        let mut s = Secrets::new(IDLE_TTL_MS, (64, 20));
        s.claim(0, 1, &peer(1), [1; 16], 1)?;
        s.release(0, 1, &peer(1), true);
        for id in 100..119 {
            s.claim(0, id, &peer(9), [9; 16], 1)?;
            s.release(0, id, &peer(9), true);
        }
        s.claim(0, 200, &peer(3), [3; 16], 1)?;
        assert_eq!(s.find(0, 1, &peer(1)), Some(([1; 16], 1)));
        assert_eq!(s.find(0, 100, &peer(9)), None);
        assert_eq!(s.find(0, 101, &peer(9)), Some(([9; 16], 1)));
        // But never its own.
        assert_eq!(s.claim(0, 300, &peer(9), [9; 16], 1), Err(ENOSPC));
        // Expired records make room again.
        let mut s = Secrets::new(0, (1, 1));
        s.claim(0, 1, &peer(1), [1; 16], 1)?;
        s.release(0, 1, &peer(1), true);
        s.claim(0, 2, &peer(1), [2; 16], 1)?;
        Ok(())
    }
}
