// SPDX-License-Identifier: GPL-2.0

//! What ferry_blk counts of the block operations on an export or a disk:
//! operations and bytes by kind, forced-unit-access writes, and errors by
//! cause. Lock-free: counted from any context.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::wire::Refusal;

/// A block operation's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    Flush,
    Discard,
    WriteZeroes,
}

/// The counters of an export (target) or of one hardware queue of a disk
/// (client: each queue counts its own requests, on cache lines no other
/// queue writes).
#[derive(Default)]
#[repr(align(64))]
pub(crate) struct IoStats {
    /// Operations done, by [`Op`].
    ops: [AtomicU64; 5],
    /// Bytes read, written, discarded and zeroed.
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    bytes_discarded: AtomicU64,
    bytes_zeroed: AtomicU64,
    /// Writes with forced unit access.
    fua: AtomicU64,
    /// Operations that failed, by cause: refused as invalid, the backing
    /// disk's error, the transport's.
    refused: AtomicU64,
    backing_errors: AtomicU64,
    failed: AtomicU64,
    /// An export's operations submitted on the target's queue, not where
    /// they arrived (see [`IoStats::deferred`]).
    deferred: AtomicU64,
}

impl IoStats {
    /// Counts an operation that ended (`ok`: successfully), of `len` bytes.
    pub(crate) fn done(&self, op: Op, fua: bool, len: u32, ok: bool) {
        if !ok {
            self.failed.fetch_add(1, Relaxed);
            return;
        }
        self.ops[op as usize].fetch_add(1, Relaxed);
        match op {
            Op::Read => {
                self.bytes_read.fetch_add(u64::from(len), Relaxed);
            }
            Op::Write => {
                self.bytes_written.fetch_add(u64::from(len), Relaxed);
                if fua {
                    self.fua.fetch_add(1, Relaxed);
                }
            }
            Op::Discard => {
                self.bytes_discarded.fetch_add(u64::from(len), Relaxed);
            }
            Op::WriteZeroes => {
                self.bytes_zeroed.fetch_add(u64::from(len), Relaxed);
            }
            Op::Flush => {}
        }
    }

    /// Counts an operation that failed before it was sent.
    pub(crate) fn failed_unsent(&self) {
        self.failed.fetch_add(1, Relaxed);
    }

    /// Counts an operation refused as invalid.
    pub(crate) fn refused(&self, _why: Refusal) {
        self.refused.fetch_add(1, Relaxed);
    }

    /// Counts a failure of the backing disk.
    pub(crate) fn backing_error(&self) {
        self.backing_errors.fetch_add(1, Relaxed);
    }

    /// Counts an operation submitted on the target's queue, not in the
    /// completion's context where it arrived: it would have waited, or its
    /// device or kind cannot be submitted there.
    pub(crate) fn deferred(&self) {
        self.deferred.fetch_add(1, Relaxed);
    }

    /// What it counted so far.
    pub(crate) fn counts(&self) -> IoCounts {
        IoCounts {
            ops: self.ops.each_ref().map(|a| a.load(Relaxed)),
            bytes_read: self.bytes_read.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
            bytes_discarded: self.bytes_discarded.load(Relaxed),
            bytes_zeroed: self.bytes_zeroed.load(Relaxed),
            fua: self.fua.load(Relaxed),
            refused: self.refused.load(Relaxed),
            backing_errors: self.backing_errors.load(Relaxed),
            failed: self.failed.load(Relaxed),
            deferred: self.deferred.load(Relaxed),
        }
    }
}

/// What a mapping counts of its connection: each on the failure path only,
/// never per request that goes well.
#[derive(Default)]
pub(crate) struct MapCounters {
    /// Times the connection was lost (and then reconnected, or not).
    pub(crate) reconnects: AtomicU64,
    /// Requests requeued because their connection failed under them.
    pub(crate) requeues: AtomicU64,
    /// Requests failed at once while failing fast.
    pub(crate) fast_failed: AtomicU64,
    /// Requests that timed out (and reset their channel).
    pub(crate) timeouts: AtomicU64,
    /// Reopens the target refused for now: the earlier connection's
    /// operations were still at work.
    pub(crate) fenced: AtomicU64,
    /// Milliseconds spent disconnected, in all (to the last tick while
    /// it is).
    disconnected_ms: AtomicU64,
    /// Of the disconnection under way: the milliseconds counted so far.
    down_counted_ms: AtomicU64,
}

impl MapCounters {
    /// Counts one more of `c`.
    pub(crate) fn count(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    /// Disconnected for `ms` milliseconds so far (the tick, under the
    /// mapping's connection lock, as `reconnected`): counts what is new.
    pub(crate) fn disconnected(&self, ms: u64) {
        let before = self.down_counted_ms.swap(ms, Relaxed);
        self.disconnected_ms
            .fetch_add(ms.saturating_sub(before), Relaxed);
    }

    /// The connection is back after `ms` milliseconds: counts the rest.
    pub(crate) fn reconnected(&self, ms: u64) {
        self.disconnected(ms);
        self.down_counted_ms.store(0, Relaxed);
    }

    /// What it counted so far: reconnects, requeues, fast-failed,
    /// timeouts, fenced reopens, seconds disconnected.
    pub(crate) fn counts(&self) -> [u64; 6] {
        let down = self.disconnected_ms.load(Relaxed);
        [
            self.reconnects.load(Relaxed),
            self.requeues.load(Relaxed),
            self.fast_failed.load(Relaxed),
            self.timeouts.load(Relaxed),
            self.fenced.load(Relaxed),
            down / 1000,
        ]
    }
}

/// Counters as read at one time, or summed over a disk's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IoCounts {
    /// Operations done, by [`Op`].
    pub(crate) ops: [u64; 5],
    /// Bytes read.
    pub(crate) bytes_read: u64,
    /// Bytes written.
    pub(crate) bytes_written: u64,
    /// Bytes discarded.
    pub(crate) bytes_discarded: u64,
    /// Bytes zeroed (WRITE_ZEROES).
    pub(crate) bytes_zeroed: u64,
    /// Writes with forced unit access.
    pub(crate) fua: u64,
    /// Operations refused as invalid.
    pub(crate) refused: u64,
    /// Operations the backing disk failed.
    pub(crate) backing_errors: u64,
    /// Operations that failed otherwise (the transport, or before they
    /// were sent).
    pub(crate) failed: u64,
    /// An export's operations submitted on the target's queue.
    pub(crate) deferred: u64,
}

impl IoCounts {
    /// The sum of `stats`' counts.
    pub(crate) fn sum<'a>(stats: impl IntoIterator<Item = &'a IoStats>) -> Self {
        stats.into_iter().fold(Self::default(), |mut t, s| {
            let c = s.counts();
            for (a, b) in t.ops.iter_mut().zip(c.ops) {
                *a += b;
            }
            t.bytes_read += c.bytes_read;
            t.bytes_written += c.bytes_written;
            t.bytes_discarded += c.bytes_discarded;
            t.bytes_zeroed += c.bytes_zeroed;
            t.fua += c.fua;
            t.refused += c.refused;
            t.backing_errors += c.backing_errors;
            t.failed += c.failed;
            t.deferred += c.deferred;
            t
        })
    }

    /// Operations of kind `op` done.
    pub(crate) fn ops(&self, op: Op) -> u64 {
        self.ops[op as usize]
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_blk_stats)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_counted_by_kind_and_failures_apart() {
        let s = IoStats::default();
        s.done(Op::Write, true, 4096, true);
        s.done(Op::Write, false, 512, true);
        s.done(Op::Read, false, 8192, true);
        s.done(Op::Flush, false, 0, true);
        s.done(Op::Discard, false, 1 << 20, true);
        s.done(Op::WriteZeroes, false, 65536, true);
        s.done(Op::Read, false, 8192, false);
        s.failed_unsent();
        s.backing_error();
        s.refused(Refusal::BadLength);
        s.deferred();
        let c = s.counts();
        assert_eq!(
            (c.ops(Op::Write), c.ops(Op::Read), c.ops(Op::Flush)),
            (2, 1, 1)
        );
        assert_eq!((c.bytes_written, c.bytes_read, c.fua), (4608, 8192, 1));
        assert_eq!((c.bytes_discarded, c.bytes_zeroed), (1 << 20, 65536));
        assert_eq!((c.failed, c.backing_errors, c.refused), (2, 1, 1));
        assert_eq!(c.deferred, 1);
    }

    #[test]
    fn a_disks_queues_sum_up() {
        let q = [IoStats::default(), IoStats::default(), IoStats::default()];
        q[0].done(Op::Write, false, 4096, true);
        q[2].done(Op::Write, true, 4096, true);
        q[2].done(Op::Discard, false, 4096, true);
        q[0].done(Op::Discard, false, 512, true);
        q[1].failed_unsent();
        let t = IoCounts::sum(&q);
        assert_eq!((t.ops(Op::Write), t.ops(Op::Discard), t.fua), (2, 2, 1));
        assert_eq!(t.bytes_discarded, 4608);
        assert_eq!((t.bytes_written, t.failed), (8192, 1));
        assert_eq!(IoCounts::sum(&q[..0]), IoCounts::default());
    }

    #[test]
    fn time_disconnected_only_grows() {
        let m = MapCounters::default();
        // Ticks at 1.2 s and 2.5 s of a disconnection, back at 2.9 s.
        m.disconnected(1200);
        assert_eq!(m.counts()[5], 1);
        m.disconnected(2500);
        m.reconnected(2900);
        assert_eq!(m.counts()[5], 2);
        // The next one, 1.3 s, with no tick: 4.2 s in all.
        m.reconnected(1300);
        assert_eq!(m.counts()[5], 4);
        assert_eq!(m.disconnected_ms.load(Relaxed), 4200);
    }
}
