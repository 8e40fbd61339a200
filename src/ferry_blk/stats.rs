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

/// The counters of an export (target) or a disk (client).
#[derive(Default)]
pub(crate) struct IoStats {
    /// Operations done, by [`Op`].
    ops: [AtomicU64; 5],
    /// Bytes read and written.
    pub(crate) bytes_read: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    /// Writes with forced unit access.
    pub(crate) fua: AtomicU64,
    /// Operations that failed, by cause: refused as invalid, the backing
    /// disk's error, the transport's.
    pub(crate) refused: AtomicU64,
    pub(crate) backing_errors: AtomicU64,
    pub(crate) failed: AtomicU64,
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
            _ => {}
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

    /// Operations of kind `op` done.
    pub(crate) fn ops(&self, op: Op) -> u64 {
        self.ops[op as usize].load(Relaxed)
    }
}
