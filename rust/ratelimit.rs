// SPDX-License-Identifier: GPL-2.0

//! Rate-limited logging for what a peer can make ferry say: a connect
//! request refused, a message that breaks the protocol, a failed work
//! request. The kernel crate has no `pr_*_ratelimited!`; this is the C
//! macros' rule (`DEFAULT_RATELIMIT_INTERVAL` of 5 s, a burst of 10), one
//! limit per call site, and lock-free: a log line may come from any context.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
#[cfg(all(CONFIG_FERRY_KUNIT_TEST, not(CONFIG_FERRY_BLK_MODULE)))]
use kernel::prelude::*;

/// The window, in milliseconds.
pub(crate) const INTERVAL_MS: u32 = 5000;
/// Lines let through per window.
pub(crate) const BURST: u32 = 10;

/// One call site's limit: at most [`BURST`] lines per [`INTERVAL_MS`]; the
/// first line of a new window says how many the last one suppressed.
pub(crate) struct RateLimit {
    /// When the window began (jiffies; 0: never).
    start: AtomicU64,
    printed: AtomicU32,
    missed: AtomicU32,
}

impl RateLimit {
    /// A limit whose first window begins with its first line.
    pub(crate) const fn new() -> Self {
        Self {
            start: AtomicU64::new(0),
            printed: AtomicU32::new(0),
            missed: AtomicU32::new(0),
        }
    }

    /// Whether a line may go out now, and how many lines the window that
    /// just ended suppressed (0 but at the first line of a window).
    pub(crate) fn allow(&self) -> (bool, u32) {
        // CAST: a few hundred ticks.
        let window = kernel::time::msecs_to_jiffies(INTERVAL_MS) as u64;
        self.allow_at(crate::work::jiffies_64(), window)
    }

    /// [`RateLimit::allow`] at time `now` with a window of `window` ticks.
    fn allow_at(&self, now: u64, window: u64) -> (bool, u32) {
        let start = self.start.load(Relaxed);
        if start == 0 || now.wrapping_sub(start) >= window {
            // One caller opens the new window; the others count in it.
            let opened = self
                .start
                .compare_exchange(start, now.max(1), Relaxed, Relaxed)
                .is_ok();
            if opened {
                self.printed.store(1, Relaxed);
                return (true, self.missed.swap(0, Relaxed));
            }
        }
        if self.printed.fetch_add(1, Relaxed) < BURST {
            (true, 0)
        } else {
            self.missed.fetch_add(1, Relaxed);
            (false, 0)
        }
    }
}

/// `$pr!($args)` (a `kernel::pr_*` macro) at most [`BURST`] times per
/// [`INTERVAL_MS`] from this call site; a line says how many were
/// suppressed before.
macro_rules! pr_limited {
    ($pr:ident, $($arg:tt)*) => {{
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        let (ok, missed) = LIMIT.allow();
        if missed > 0 {
            kernel::$pr!("{} similar messages suppressed\n", missed);
        }
        if ok {
            kernel::$pr!($($arg)*);
        }
    }};
}

/// `pr_warn!`, rate limited (see [`pr_limited!`]).
macro_rules! pr_warn_limited {
    ($($arg:tt)*) => { $crate::ratelimit::pr_limited!(pr_warn, $($arg)*) };
}

/// `pr_info!`, rate limited (see [`pr_limited!`]).
macro_rules! pr_info_limited {
    ($($arg:tt)*) => { $crate::ratelimit::pr_limited!(pr_info, $($arg)*) };
}

pub(crate) use {pr_info_limited, pr_limited, pr_warn_limited};

// ferry's module runs these; ferry_blk, which builds this file too, not.
#[cfg(all(CONFIG_FERRY_KUNIT_TEST, not(CONFIG_FERRY_BLK_MODULE)))]
#[kunit_tests(ferry_ratelimit)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_count() {
        let l = RateLimit::new();
        let t0 = 1000;
        for _ in 0..BURST {
            assert_eq!(l.allow_at(t0, 100), (true, 0));
        }
        for i in 0..7 {
            assert_eq!(l.allow_at(t0 + i, 100), (false, 0));
        }
        // Still the same window just before it ends.
        assert_eq!(l.allow_at(t0 + 99, 100), (false, 0));
        // The next one says how many it missed (8), once.
        assert_eq!(l.allow_at(t0 + 100, 100), (true, 8));
        assert_eq!(l.allow_at(t0 + 101, 100), (true, 0));
    }

    #[test]
    fn a_quiet_site_prints_everything() {
        let l = RateLimit::new();
        for i in 0..50u64 {
            assert_eq!(l.allow_at(1 + i * 100, 100), (true, 0));
        }
    }
}
