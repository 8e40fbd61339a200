// SPDX-License-Identifier: GPL-2.0

//! Reconnect backoff: exponential, capped, with jitter of seconds.
//!
//! The n-th delay is drawn uniformly from `[d/2, d]` with
//! `d = min(base * 2^n, max)`, where `max` is the session's reconnect delay
//! (30 s by default). Half of each delay is random, so clients that
//! lost the same server at the same moment spread their reconnects over
//! seconds instead of arriving together.

/// First delay, before jitter.
pub(crate) const BASE_MS: u32 = 1000;
/// Largest delay by default, before jitter (the default of a session's
/// reconnect delay).
pub(crate) const MAX_MS: u32 = 30_000;

/// Backoff state of one session.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The delay before the next attempt, in milliseconds, at most `max_ms`
    /// (at least 1), jittered by `random`.
    pub(crate) fn next_delay_ms(&mut self, random: u32, max_ms: u32) -> u32 {
        let max_ms = max_ms.max(1);
        // Past 2^20 s every cap applies; the guard keeps the shift from overflowing.
        let d = if self.attempt < 20 {
            (BASE_MS << self.attempt).min(max_ms)
        } else {
            max_ms
        };
        self.attempt = self.attempt.saturating_add(1);
        let half = d / 2;
        (half + random % (d - half + 1)).max(1)
    }

    /// Attempts made since the last success.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Starts over after a success.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_backoff)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_within_jitter_bounds() {
        for random in [0, 1, 499, 500, 12345, u32::MAX / 2, u32::MAX] {
            let mut b = Backoff::default();
            let mut d = BASE_MS;
            for _ in 0..40 {
                let got = b.next_delay_ms(random, MAX_MS);
                assert!(got >= d / 2 && got <= d);
                d = (d * 2).min(MAX_MS);
            }
        }
    }

    #[test]
    fn jitter_spans_seconds() {
        // At the cap, the spread between the extremes is 15 s, not milliseconds.
        let mut lo = Backoff { attempt: 10 };
        let mut hi = Backoff { attempt: 10 };
        let spread = hi.next_delay_ms(MAX_MS / 2, MAX_MS) - lo.next_delay_ms(0, MAX_MS);
        assert_eq!(spread, MAX_MS / 2);
        // Even the first delay spreads by half a second.
        let (mut a, mut b) = (Backoff::default(), Backoff::default());
        assert!(b.next_delay_ms(BASE_MS / 2, MAX_MS) - a.next_delay_ms(0, MAX_MS) >= 500);
    }

    #[test]
    fn huge_attempt_counts_stay_capped() {
        let mut b = Backoff {
            attempt: u32::MAX - 1,
        };
        for _ in 0..3 {
            let d = b.next_delay_ms(u32::MAX, MAX_MS);
            assert!((MAX_MS / 2..=MAX_MS).contains(&d));
        }
        assert_eq!(b.attempts(), u32::MAX);
        b.reset();
        assert!(b.next_delay_ms(0, MAX_MS) <= BASE_MS);
    }

    #[test]
    fn the_reconnect_delay_caps_every_wait() {
        // A 2 s reconnect delay: 0.5 to 1 s, then 1 to 2 s for ever.
        let mut b = Backoff::default();
        assert!((500..=1000).contains(&b.next_delay_ms(u32::MAX / 3, 2000)));
        for _ in 0..30 {
            assert!((1000..=2000).contains(&b.next_delay_ms(u32::MAX / 3, 2000)));
        }
        // An hour: the doubling goes on up to it, from 2^12 s on.
        let mut b = Backoff::default();
        let mut d = BASE_MS;
        for _ in 0..25 {
            let got = b.next_delay_ms(u32::MAX, 3_600_000);
            assert!(got >= d / 2 && got <= d);
            d = d.saturating_mul(2).min(3_600_000);
        }
        assert_eq!(d, 3_600_000);
        // Nothing below a millisecond.
        for random in [0, 1, 7] {
            assert_eq!(Backoff::default().next_delay_ms(random, 0), 1);
            assert_eq!(Backoff::default().next_delay_ms(random, 1), 1);
        }
    }
}
