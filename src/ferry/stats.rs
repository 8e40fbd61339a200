// SPDX-License-Identifier: GPL-2.0

//! What channels count, and sums of it for sessions.
//!
//! Each channel keeps one atomic counter per [`Counter`], bumped wherever the
//! event happens without any lock; [`Stats::snapshot`] copies them for
//! netlink, and a session adds its channels' snapshots up. The netlink
//! attribute of each counter is in `netlink.rs`, in the spec's order.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The counters, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Messages sent, of every kind.
    TxMsgs,
    /// Messages received, of every kind.
    RxMsgs,
    /// Their bytes, headers included.
    TxBytes,
    RxBytes,
    /// Heartbeats.
    HeartbeatsTx,
    HeartbeatsRx,
    /// Credit updates sent on their own.
    CreditUpdates,
    /// Sends that found no credit (from the credit accounting).
    CreditStalls,
    /// Failed work completions, and flushed ones.
    WcErrors,
    FlushErrors,
    /// Consumers' messages.
    DataTx,
    DataRx,
    /// Consumers' messages nobody took (a session's own count).
    RxUnclaimed,
    /// Requests sent and received.
    RequestsTx,
    RequestsRx,
    /// FRWR registrations made for requests.
    Registrations,
    /// Registrations the peer invalidated (send-with-invalidate), and those
    /// invalidated here (`LOCAL_INV`).
    InvRemote,
    InvLocal,
    /// Bytes this side moved by RDMA READ and WRITE.
    RdmaBytes,
}

/// How many counters there are.
pub(crate) const COUNTERS: usize = Counter::RdmaBytes as usize + 1;

/// A channel's live counters.
#[derive(Default)]
pub(crate) struct Stats([AtomicU64; COUNTERS]);

impl Stats {
    /// Adds `n` to `c`; returns the value before.
    pub(crate) fn add(&self, c: Counter, n: u64) -> u64 {
        self.0[c as usize].fetch_add(n, Relaxed)
    }

    /// A copy of every counter.
    pub(crate) fn snapshot(&self) -> Counters {
        let mut c = Counters::default();
        for (v, a) in c.0.iter_mut().zip(self.0.iter()) {
            *v = a.load(Relaxed);
        }
        c
    }
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters(pub(crate) [u64; COUNTERS]);

impl Counters {
    /// Adds `other` counter by counter.
    pub(crate) fn add(&mut self, other: &Counters) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    /// The value of `c`.
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }

    /// Sets `c`.
    pub(crate) fn set(&mut self, c: Counter, v: u64) {
        self.0[c as usize] = v;
    }
}
