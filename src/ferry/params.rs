// SPDX-License-Identifier: GPL-2.0

//! What a session is asked for (a client) or runs with (a server): channel
//! count, queue depth, message and inline sizes, timers.

use kernel::prelude::*;

use crate::wire;

/// [`Params::checked`]'s `inline_size` for none (`FERRY_NO_INLINE`).
pub(crate) const NO_INLINE: u32 = u32::MAX;

/// What a session was asked for (client) or runs with (server).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Channel count, polled channels included.
    pub(crate) channels: u16,
    /// Channels the consumer polls: the last `poll_channels` of them.
    pub(crate) poll_channels: u16,
    /// Receive buffers per channel on this side.
    pub(crate) queue_depth: u32,
    /// Largest message this side accepts.
    pub(crate) max_msg: u32,
    /// Data to this side a request may carry inline, beyond `max_msg`
    /// (0: none); also the most this side sends inline.
    pub(crate) inline_size: u32,
    /// Heartbeat interval.
    pub(crate) heartbeat_ms: u32,
    /// Silence after which the peer counts as dead.
    pub(crate) timeout_ms: u32,
    /// Seconds of failed reconnecting before giving up; 0: never.
    pub(crate) give_up_s: u32,
}

impl Params {
    /// Server defaults, and the client's where the caller says nothing.
    pub(crate) const DEFAULT: Self = Self {
        channels: 1,
        poll_channels: 0,
        queue_depth: 128,
        max_msg: 4096,
        inline_size: 4096,
        heartbeat_ms: 1000,
        timeout_ms: 5000,
        give_up_s: 600,
    };

    /// Client parameters from a kernel caller: 0 picks the default (for
    /// `channels`, `default_channels`); `poll_channels` polled channels come
    /// after the others; an `inline_size` of [`NO_INLINE`] is none; anything
    /// out of range is `EINVAL`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn checked(
        channels: u16,
        poll_channels: u16,
        default_channels: u16,
        queue_depth: u32,
        max_msg: u32,
        inline_size: u32,
        heartbeat_ms: u32,
        timeout_ms: u32,
        give_up_s: u32,
    ) -> Result<Self> {
        let d = Self::DEFAULT;
        let or = |v: u32, d: u32| if v == 0 { d } else { v };
        let p = Self {
            // By default one per CPU, less room for the polled ones.
            channels: if channels == 0 {
                default_channels.min(wire::MAX_CHANNELS.saturating_sub(poll_channels))
            } else {
                channels
            }
            .saturating_add(poll_channels),
            poll_channels,
            queue_depth: or(queue_depth, d.queue_depth),
            max_msg: or(max_msg, d.max_msg),
            inline_size: match inline_size {
                NO_INLINE => 0,
                v => or(v, d.inline_size),
            },
            heartbeat_ms: or(heartbeat_ms, d.heartbeat_ms),
            timeout_ms: or(timeout_ms, d.timeout_ms.max(heartbeat_ms.saturating_mul(2))),
            give_up_s: or(give_up_s, d.give_up_s),
        };
        let ok = (1..=wire::MAX_CHANNELS).contains(&p.channels)
            && p.poll_channels < p.channels
            && (wire::MIN_QUEUE_DEPTH..=wire::MAX_QUEUE_DEPTH).contains(&p.queue_depth)
            && (wire::MIN_MSG_SIZE..=wire::MAX_MSG_SIZE).contains(&p.max_msg)
            && p.inline_size <= wire::MAX_INLINE
            && wire::HEARTBEAT_MS.contains(&p.heartbeat_ms)
            && (p.heartbeat_ms.saturating_mul(2)..=600_000).contains(&p.timeout_ms)
            && p.give_up_s <= 7 * 86_400;
        if ok {
            Ok(p)
        } else {
            Err(EINVAL)
        }
    }
}

impl Params {
    /// Whether channel `index` is one the consumer polls.
    pub(crate) fn polled(&self, index: u16) -> bool {
        index >= self.channels - self.poll_channels
    }
}
