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
    /// Completions a consumer's thread processed (`ferry_poll()`).
    Polled,
    /// Requests sent with their data inline.
    Inline,
    /// Zero-length RDMA WRITEs that checked the peer's adapter.
    Probes,
    /// Answers sent right behind their data (`Channel::write_respond`).
    EarlyAnswers,
}

/// How many counters there are.
pub(crate) const COUNTERS: usize = Counter::EarlyAnswers as usize + 1;

/// Failed work completions are also counted by status: `enum ib_wc_status`
/// runs from 0 (success, never counted) to `IB_WC_GENERAL_ERR` (21), where
/// any status beyond it is counted too.
pub(crate) const WC_STATUSES: usize = 22;

/// A channel's live counters (or, for a session, those of its channels that
/// are gone).
#[derive(Default)]
pub(crate) struct Stats {
    counters: [AtomicU64; COUNTERS],
    wc: [AtomicU64; WC_STATUSES],
}

impl Stats {
    /// Adds `n` to `c`; returns the value before.
    pub(crate) fn add(&self, c: Counter, n: u64) -> u64 {
        self.counters[c as usize].fetch_add(n, Relaxed)
    }

    /// Counts a failed work completion of `status`.
    pub(crate) fn add_wc(&self, status: u32) {
        let i = (status as usize).min(WC_STATUSES - 1);
        self.wc[i].fetch_add(1, Relaxed);
    }

    /// Adds every counter of `c`.
    pub(crate) fn absorb(&self, c: &Counters) {
        for (a, v) in self.counters.iter().zip(c.counters.iter()) {
            a.fetch_add(*v, Relaxed);
        }
        for (a, v) in self.wc.iter().zip(c.wc.iter()) {
            a.fetch_add(*v, Relaxed);
        }
    }

    /// A copy of every counter.
    pub(crate) fn snapshot(&self) -> Counters {
        let mut c = Counters::default();
        for (v, a) in c.counters.iter_mut().zip(self.counters.iter()) {
            *v = a.load(Relaxed);
        }
        for (v, a) in c.wc.iter_mut().zip(self.wc.iter()) {
            *v = a.load(Relaxed);
        }
        c
    }
}

/// A copy of the counters.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    counters: [u64; COUNTERS],
    /// Failed work completions by status (see [`WC_STATUSES`]).
    pub(crate) wc: [u64; WC_STATUSES],
}

impl Counters {
    /// Adds `other` counter by counter.
    pub(crate) fn add(&mut self, other: &Counters) {
        for (a, b) in self.counters.iter_mut().zip(other.counters.iter()) {
            *a += b;
        }
        for (a, b) in self.wc.iter_mut().zip(other.wc.iter()) {
            *a += b;
        }
    }

    /// The value of `c`.
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.counters[c as usize]
    }

    /// Sets `c`.
    pub(crate) fn set(&mut self, c: Counter, v: u64) {
        self.counters[c as usize] = v;
    }
}
