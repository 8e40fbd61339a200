// SPDX-License-Identifier: GPL-2.0

//! What a session is asked for (a client) or runs with (a server): channel
//! count, queue depth, message and inline sizes, timers.

use core::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use kernel::{page::PAGE_SIZE, prelude::*};

use crate::{
    cm::SockAddr,
    mem,
    rdma::qp::buf_stride,
    wire::{self, ConnectData},
};

/// Whether message buffers are one allocation each even where the device
/// could scatter them over their pages: the module's `whole_buffers`
/// parameter, set once at load.
static WHOLE_BUFFERS: AtomicBool = AtomicBool::new(false);

/// Sets [`whole_buffers`] (at module load).
pub(crate) fn set_whole_buffers(on: bool) {
    WHOLE_BUFFERS.store(on, Relaxed);
}

/// Whether message buffers are one allocation each (see `qp::Area`).
pub(crate) fn whole_buffers() -> bool {
    WHOLE_BUFFERS.load(Relaxed)
}

/// The local ACK timeout of a client channel's QP, as rdma_cm takes it:
/// 4.096 µs * 2^n before a transport retry. 14 is 67 ms.
pub(crate) const DEFAULT_ACK_TIMEOUT: u8 = 14;

/// The ACK timeouts the module's `ack_timeout` parameter may give: 0 would
/// mean none (a lost packet would hang the QP), and rdma_cm scales its own
/// connection timeouts by it too (20 is 4.3 s per transport retry; at 31 a
/// lost connect request would be sent again after hours).
pub(crate) const ACK_TIMEOUTS: core::ops::RangeInclusive<u8> = 1..=20;

/// The module's `ack_timeout` parameter, set once at load.
static ACK_TIMEOUT: AtomicU8 = AtomicU8::new(DEFAULT_ACK_TIMEOUT);

/// Sets [`ack_timeout`] (at module load): `EINVAL` outside
/// [`ACK_TIMEOUTS`].
pub(crate) fn set_ack_timeout(n: u8) -> Result {
    if !ACK_TIMEOUTS.contains(&n) {
        return Err(EINVAL);
    }
    ACK_TIMEOUT.store(n, Relaxed);
    Ok(())
}

/// The local ACK timeout a client channel asks rdma_cm for (see
/// [`DEFAULT_ACK_TIMEOUT`]).
pub(crate) fn ack_timeout() -> u8 {
    ACK_TIMEOUT.load(Relaxed)
}

/// Most bytes of receive buffers a server gives one channel (its send
/// buffers and the responder's entries take as much again each: see
/// [`Params::channel_bytes`]).
pub(crate) const SERVER_RX_BUDGET: u32 = 4 << 20;

/// [`Params::checked`]'s `inline_size` for none (`FERRY_NO_INLINE`).
pub(crate) const NO_INLINE: u32 = u32::MAX;

/// [`Params::checked`]'s flag for [`Params::preregister`]
/// (`FERRY_PREREGISTER`).
pub(crate) const PREREGISTER: u32 = crate::bindings::FERRY_PREREGISTER;

/// [`Params::checked`]'s flag for a client that takes no requests
/// (`FERRY_NO_REQUESTS`): see [`Params::takes_requests`].
pub(crate) const NO_REQUESTS: u32 = crate::bindings::FERRY_NO_REQUESTS;

/// [`Params::checked`]'s flag for a client whose channels process their
/// completions in softirq (`FERRY_SOFTIRQ`): see [`Params::softirq`].
pub(crate) const SOFTIRQ: u32 = crate::bindings::FERRY_SOFTIRQ;

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
    /// The longest wait between two reconnect attempts, in seconds (the
    /// session's own copy changes live).
    pub(crate) reconnect_delay_s: u32,
    /// Client: each channel registers its whole region pool when it is
    /// built (`FERRY_PREREGISTER`), not as its requests need them.
    pub(crate) preregister: bool,
    /// The peer may send this side requests: its channels hold responder
    /// entries and room in their receive buffers for inline data. Not for
    /// a client that said it takes none (`FERRY_NO_REQUESTS`, in its
    /// connect request).
    pub(crate) takes_requests: bool,
    /// This side may send the peer requests: its send buffers have room
    /// for inline data. Not for the server of a client that takes none.
    pub(crate) sends_requests: bool,
    /// Client: the channels that are not polled process their completions
    /// in softirq (`FERRY_SOFTIRQ`): ferry defers to its work queue what
    /// may sleep, and the consumer's callbacks that run there never sleep.
    pub(crate) softirq: bool,
}

/// What a session's longest wait between reconnect attempts may be, in
/// seconds.
pub(crate) const RECONNECT_DELAY_RANGE_S: core::ops::RangeInclusive<u32> = 1..=3600;

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
        reconnect_delay_s: crate::backoff::MAX_MS / 1000,
        preregister: false,
        takes_requests: true,
        sends_requests: true,
        softirq: false,
    };

    /// Client parameters from a kernel caller: 0 picks the default (for
    /// `channels`, `default_channels`); `poll_channels` polled channels come
    /// after the others; an `inline_size` of [`NO_INLINE`] is none; `flags`
    /// holds [`PREREGISTER`], [`NO_REQUESTS`] and [`SOFTIRQ`] (only with
    /// [`NO_REQUESTS`]); anything out of range, or an unknown flag, is
    /// `EINVAL`.
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
        reconnect_delay_s: u32,
        flags: u32,
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
            reconnect_delay_s: or(reconnect_delay_s, d.reconnect_delay_s),
            preregister: flags & PREREGISTER != 0,
            takes_requests: flags & NO_REQUESTS == 0,
            sends_requests: true,
            softirq: flags & SOFTIRQ != 0,
        };
        let ok = (1..=wire::MAX_CHANNELS).contains(&p.channels)
            && p.poll_channels < p.channels
            && (wire::MIN_QUEUE_DEPTH..=wire::MAX_QUEUE_DEPTH).contains(&p.queue_depth)
            && (wire::MIN_MSG_SIZE..=wire::MAX_MSG_SIZE).contains(&p.max_msg)
            && p.inline_size <= wire::MAX_INLINE
            && wire::HEARTBEAT_MS.contains(&p.heartbeat_ms)
            && (p.heartbeat_ms.saturating_mul(2)..=600_000).contains(&p.timeout_ms)
            && p.give_up_s <= 7 * 86_400
            && RECONNECT_DELAY_RANGE_S.contains(&p.reconnect_delay_s)
            && flags & !(PREREGISTER | NO_REQUESTS | SOFTIRQ) == 0
            // (A client that takes requests would run its consumer's
            // `request`, and the responder's RDMA, in softirq.)
            && !(p.softirq && p.takes_requests);
        if ok {
            Ok(p)
        } else {
            Err(EINVAL)
        }
    }
}

/// Work requests a channel's queues hold per slot of its depth, about: a
/// receive, a send, 8 registrations, 8 invalidations and an RDMA transfer
/// (rdma_rw may take more for a large one).
const WRS_PER_SLOT: u64 = 19;

/// Bytes an adapter's driver keeps per work request, as an estimate:
/// soft-RoCE's send queue entry with its scatter list takes about 700,
/// hardware adapters 64 to 512.
const WR_BYTES: u64 = 512;

/// The least memory a new channel must leave the host: a sixteenth of its
/// RAM, but at least this and at most [`RESERVE_MAX`] (RAM counts pages
/// set aside for huge pages, which `MemAvailable` does not).
const RESERVE_MIN: u64 = 64 << 20;
/// See [`RESERVE_MIN`].
const RESERVE_MAX: u64 = 1 << 30;

impl Params {
    /// A server's parameters for the connection request `data`: the
    /// client's limits (checked by the decoder), or the defaults; no
    /// inline room if the client uses none, and no requests to a client
    /// that takes none; the receive buffers of a
    /// channel stay within [`SERVER_RX_BUDGET`], so a client cannot make
    /// the server pin much memory. The hello reply tells the client the
    /// depth it got.
    pub(crate) fn server(data: &ConnectData) -> Self {
        let d = Self::DEFAULT;
        let or = |v: u32, d: u32| if v == 0 { d } else { v };
        let max_msg = or(data.max_msg, d.max_msg);
        let inline_size = if data.no_inline { 0 } else { d.inline_size };
        let queue_depth = or(u32::from(data.queue_depth), d.queue_depth)
            .min(SERVER_RX_BUDGET / (max_msg + inline_size))
            .max(wire::MIN_QUEUE_DEPTH);
        Self {
            channels: data.channels,
            max_msg,
            inline_size,
            queue_depth,
            sends_requests: !data.no_requests,
            ..d
        }
    }

    /// Bytes of a receive buffer: the largest message, and the inline data
    /// a request to this side may add.
    pub(crate) fn recv_buf(&self) -> u32 {
        self.max_msg + self.inline_taken()
    }

    /// Bytes of a send buffer: the largest message, and the inline data a
    /// request from this side may add.
    pub(crate) fn send_buf(&self) -> u32 {
        self.max_msg + self.inline_sent()
    }

    /// The inline data this side announces it takes, in its hello or its
    /// reply: none if it takes no requests.
    pub(crate) fn inline_taken(&self) -> u32 {
        if self.takes_requests {
            self.inline_size
        } else {
            0
        }
    }

    /// The most inline data this side sends in a request: none if it sends
    /// no requests (its send buffers have no room for it).
    pub(crate) fn inline_sent(&self) -> u32 {
        if self.sends_requests {
            self.inline_size
        } else {
            0
        }
    }

    /// Whether channel `index` is one the consumer polls.
    pub(crate) fn polled(&self, index: u16) -> bool {
        index >= self.channels - self.poll_channels
    }

    /// Estimated bytes one channel takes: a receive and a send buffer per
    /// slot ([`Params::recv_buf`], [`Params::send_buf`], each as much as
    /// the buffer area gives it, see `qp::buf_stride`), the responder's
    /// entry per tag (`xfer::responder_tags`) that holds a request's header
    /// and inline data (vmalloc: whole pages) if this side takes requests,
    /// and the driver's share of the work requests.
    pub(crate) fn channel_bytes(&self) -> u64 {
        let depth = u64::from(self.queue_depth);
        // CAST: a buffer's size is a `u32`; `usize` fits in `u64`.
        let stride = |len: u32| buf_stride(len as usize) as u64;
        let rx = u64::from(self.recv_buf());
        let entries = if self.takes_requests {
            u64::from(crate::xfer::responder_tags(self.queue_depth))
                * (rx.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64)
        } else {
            0
        };
        depth * (stride(self.recv_buf()) + stride(self.send_buf()))
            + entries
            + depth * WRS_PER_SLOT * WR_BYTES
    }

    /// [`Params::channel_bytes`] for every channel.
    pub(crate) fn session_bytes(&self) -> u64 {
        self.channel_bytes() * u64::from(self.channels)
    }

    /// Checks that the host can spare a client session of these parameters
    /// to `peer` now; if not, logs what it needs and what the host has, and
    /// fails with `ENOMEM`.
    pub(crate) fn check_memory(&self, peer: &SockAddr) -> Result {
        affordable(self.session_bytes()).map_err(|(e, available)| {
            crate::ratelimit::pr_warn_limited!(
                "session to {}: not started: {} channels of depth {} with {} byte messages need about {} MiB, and the host has {} MiB available\n",
                peer,
                self.channels,
                self.queue_depth,
                self.max_msg,
                self.session_bytes() >> 20,
                available >> 20
            );
            e
        })
    }
}

/// Whether `need` more bytes leave a host with `available` of `total` at
/// least its reserve (see [`RESERVE_MIN`]).
fn fits(need: u64, available: u64, total: u64) -> bool {
    need.checked_add((total / 16).clamp(RESERVE_MIN, RESERVE_MAX))
        .is_some_and(|n| n <= available)
}

/// Checks that the host can spare `need` bytes now; if not, `ENOMEM` and
/// the host's available bytes. A best effort: the figure is read, not
/// reserved, so channels built at the same time may all pass.
pub(crate) fn affordable(need: u64) -> Result<(), (Error, u64)> {
    let available = mem::available_bytes();
    if fits(need, available, mem::total_bytes()) {
        Ok(())
    } else {
        Err((ENOMEM, available))
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_params)]
mod tests {
    use super::*;

    #[test]
    fn the_reconnect_delay_defaults_and_is_bounded() {
        let with = |r| Params::checked(1, 0, 1, 0, 0, 0, 0, 0, 0, r, 0);
        assert_eq!(with(0).map(|p| p.reconnect_delay_s), Ok(30));
        assert_eq!(with(1).map(|p| p.reconnect_delay_s), Ok(1));
        assert_eq!(with(3600).map(|p| p.reconnect_delay_s), Ok(3600));
        assert!(with(3601).is_err());
    }

    #[test]
    fn channel_bytes_count_buffers_and_work_requests() {
        let p = Params::DEFAULT;
        // 128 slots of two 8 KiB buffers, 144 entries of 8 KiB, and 19
        // work requests of 512 bytes a slot: 4.3 MiB.
        assert_eq!(p.channel_bytes(), 4_521_984);
        // 64 channels of depth 1024 and 64 KiB messages: 13.4 GiB.
        let big = Params {
            channels: 64,
            queue_depth: 1024,
            max_msg: 65536,
            ..p
        };
        assert_eq!(big.session_bytes(), 14_399_045_632);
        // A buffer of a page or less costs a power of two: 2100 bytes, 4096.
        let odd = Params {
            queue_depth: 2,
            max_msg: 2100,
            inline_size: 0,
            ..p
        };
        assert_eq!(odd.channel_bytes(), 2 * 2 * 4096 + 3 * 4096 + 2 * 19 * 512);
    }

    #[test]
    fn a_server_keeps_its_buffers_within_its_budget() {
        let mut data = ConnectData {
            minor: wire::MINOR,
            session_id: 1,
            generation: 1,
            channel: 0,
            channels: 2,
            max_msg: 65536,
            queue_depth: 1024,
            no_inline: false,
            no_requests: false,
            proof: None,
        };
        // 4 MiB of 68 KiB receive buffers: 60 of them.
        let p = Params::server(&data);
        assert_eq!((p.channels, p.max_msg, p.queue_depth), (2, 65536, 60));
        data.max_msg = 0;
        data.queue_depth = 0;
        let p = Params::server(&data);
        assert_eq!((p.max_msg, p.queue_depth), (4096, 128));
        assert_eq!(p.inline_size, Params::DEFAULT.inline_size);
        // A client without inline data: none, and more room for buffers.
        data.max_msg = 65536;
        data.no_inline = true;
        let p = Params::server(&data);
        assert_eq!((p.inline_size, p.queue_depth), (0, 64));
    }

    #[test]
    fn a_client_that_takes_no_requests_needs_no_room_for_them() {
        let flags = |f| Params::checked(1, 0, 1, 128, 4096, 0, 0, 0, 0, 0, f);
        let all = flags(0).unwrap();
        let none = flags(NO_REQUESTS).unwrap();
        assert!(all.takes_requests && all.sends_requests);
        assert!(!none.takes_requests && none.sends_requests);
        assert_eq!(flags(SOFTIRQ << 1).err(), Some(EINVAL));
        // Its receive buffers hold a message alone, its send buffers the
        // inline data too, and it keeps no responder's entries: 1.5 MiB of
        // buffers at depth 128 where it took 3 and 144 entries.
        assert_eq!((none.recv_buf(), none.send_buf()), (4096, 8192));
        assert_eq!((none.inline_taken(), all.inline_taken()), (0, 4096));
        let wrs = 128 * WRS_PER_SLOT * WR_BYTES;
        assert_eq!(all.channel_bytes() - wrs, (3 << 20) + 16 * 8192);
        assert_eq!(none.channel_bytes() - wrs, 3 << 19);
        // Its server sends it none: send buffers of a message alone.
        let data = ConnectData {
            minor: wire::MINOR,
            session_id: 1,
            generation: 1,
            channel: 0,
            channels: 1,
            max_msg: 4096,
            queue_depth: 128,
            no_inline: false,
            no_requests: true,
            proof: None,
        };
        let s = Params::server(&data);
        assert!(s.takes_requests && !s.sends_requests);
        assert_eq!((s.recv_buf(), s.send_buf()), (8192, 4096));
        assert_eq!(s.channel_bytes() - wrs, (5 << 19) + 16 * 8192);
    }

    #[test]
    fn softirq_completions_only_for_a_client_that_takes_no_requests() {
        let flags = |f| Params::checked(1, 0, 1, 128, 4096, 0, 0, 0, 0, 0, f);
        assert!(!flags(NO_REQUESTS).unwrap().softirq);
        let p = flags(NO_REQUESTS | SOFTIRQ).unwrap();
        assert!(p.softirq && !p.takes_requests);
        // `request` would run in softirq.
        assert_eq!(flags(SOFTIRQ).err(), Some(EINVAL));
        assert!(!Params::DEFAULT.softirq);
    }

    #[test]
    fn a_channel_must_leave_the_reserve() {
        let gib = 1u64 << 30;
        // A 1 GiB host keeps 64 MiB; a 16 GiB host 1 GiB, and so does a
        // 256 GiB one (most of which may be huge pages).
        assert!(fits(800 << 20, 900 << 20, gib));
        assert!(!fits(837 << 20, 900 << 20, gib));
        assert!(fits(gib, 2 * gib, 16 * gib));
        assert!(!fits(gib + 1, 2 * gib, 16 * gib));
        assert!(fits(gib, 2 * gib, 256 * gib));
        assert!(!fits(u64::MAX, u64::MAX, gib));
    }
}
