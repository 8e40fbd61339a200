// SPDX-License-Identifier: GPL-2.0

//! A session that breaks the protocol on purpose, in test builds only, so the
//! tests can watch its peer cope (`ferry_test_misbehave()`, used by
//! tools/testing/hostile/ferry_hostile.c).
//!
//! Each session carries a [`Hostile`], which its channels consult: in a
//! production build it is empty and its hooks do nothing. In a test build a
//! `Fault` armed on it is committed once, on the next occasion that fits it
//! on any of the session's channels, and then disarmed.

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
use crate::wire::NONCE_LEN;
use crate::{
    rdma::{
        mr::Remote,
        qp::{Completion, Qp},
    },
    wire::Auth,
};

/// A hello's proof of the key (nonce, then MAC), in 64-bit words.
#[cfg(CONFIG_FERRY_KUNIT_TEST)]
const PROOF_WORDS: usize = (NONCE_LEN + crate::crypto::HMAC_SHA256_LEN) / 8;

/// A breach of the protocol to commit once (or a driver's or host's
/// misfortune to play once).
#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Fault {
    /// The next message is of a kind that does not exist.
    UnknownKind = 1,
    /// The next message's header claims 64 bytes more than follow it.
    LyingLength = 2,
    /// The next message grants more credits than the receiver has buffers.
    OverGrant = 3,
    /// Right away: a response to a request the peer never sent.
    StrayResponse = 4,
    /// The next request's head claims 4 KiB more data than its regions hold.
    LyingRequest = 5,
    /// The next RDMA transfer uses a key the peer never gave.
    ForgedKey = 6,
    /// The next RDMA transfer uses the key of the transfer before it, which
    /// the peer has invalidated since.
    StaleKey = 7,
    /// The next RDMA transfer uses the right key on the bytes right after
    /// the region it was given.
    BeyondRegion = 8,
    /// The next message fills the whole send buffer: the peer's receive
    /// buffer has room for it (its inline room), but it is larger than the
    /// largest message agreed.
    Oversized = 9,
    /// The next hello reply's proof of the pre-shared key is wrong (a
    /// server that does not hold the key the client named).
    ForgedServerProof = 10,
    /// Not a breach but a driver's failure, played here: the next request
    /// with registrations is posted as a driver that takes its
    /// registrations and refuses its send would leave it
    /// ([`crate::rdma::qp::Posted::Part`]).
    PartialPost = 11,
    /// As `PartialPost`, for the next RDMA transfer of several work
    /// requests: all but its last are posted.
    PartialRdma = 12,
    /// The next hello's proof of the pre-shared key is the one the
    /// session's last hello carried (its nonce and MAC), replayed into a
    /// new connection.
    ReplayedClientProof = 13,
    /// Not a breach but a slow host, played here: in the next connect
    /// attempt, channels 0 and 1 each take [`SLOW_STEP_MS`] (asleep in
    /// rdma_cm's handler) before they build their QPs and again before they
    /// send their connect requests. Each step ends within the connect
    /// timeout; channel 0 alone, and channel 1 after it, take longer.
    SlowChannels = 14,
}

/// How long [`Fault::SlowChannels`] holds up each of its four steps: more
/// than half the connect timeout, which each step of a channel's connect
/// counts alone.
#[cfg(CONFIG_FERRY_KUNIT_TEST)]
const SLOW_STEP_MS: i64 = 6_000;

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
impl Fault {
    /// The fault numbered `n` (as above).
    pub(crate) fn from_u32(n: u32) -> Option<Self> {
        Some(match n {
            1 => Self::UnknownKind,
            2 => Self::LyingLength,
            3 => Self::OverGrant,
            4 => Self::StrayResponse,
            5 => Self::LyingRequest,
            6 => Self::ForgedKey,
            7 => Self::StaleKey,
            8 => Self::BeyondRegion,
            9 => Self::Oversized,
            10 => Self::ForgedServerProof,
            11 => Self::PartialPost,
            12 => Self::PartialRdma,
            13 => Self::ReplayedClientProof,
            14 => Self::SlowChannels,
            _ => return None,
        })
    }
}

/// A session's armed fault (test builds), or nothing.
#[derive(Default)]
pub(crate) struct Hostile {
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    armed: AtomicU32,
    /// The remote key of the session's last transfer, for [`Fault::StaleKey`].
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    last_rkey: AtomicU32,
    /// The proof of the key the session's last hello carried, for
    /// [`Fault::ReplayedClientProof`].
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    last_proof: [AtomicU64; PROOF_WORDS],
    /// The attempt whose channels 0 and 1 are held up, plus one (0: none;
    /// [`Fault::SlowChannels`]).
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    slow_attempt: AtomicU32,
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
impl Hostile {
    /// Arms `f` for the next occasion.
    pub(crate) fn arm(&self, f: Fault) {
        self.armed.store(f as u32, Relaxed);
    }

    /// Disarms and returns `f` if it is the armed fault.
    fn take(&self, f: Fault) -> bool {
        self.armed
            .compare_exchange(f as u32, 0, Relaxed, Relaxed)
            .is_ok()
    }

    /// A consumer's message of `n` bytes about to be sent, in `buf` (header
    /// first, as large as the send buffer); returns the bytes to send.
    pub(crate) fn message(&self, buf: &mut [u8], n: usize) -> usize {
        if buf.len() < 8 {
            return n;
        }
        if self.take(Fault::Oversized) {
            // The header says so too: only the size is wrong.
            let len = u32::try_from(buf.len() - 16).unwrap_or(u32::MAX);
            buf[4..8].copy_from_slice(&len.to_le_bytes());
            return buf.len();
        }
        if self.take(Fault::UnknownKind) {
            buf[0] = 0x7f;
        } else if self.take(Fault::LyingLength) {
            let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) + 64;
            buf[4..8].copy_from_slice(&len.to_le_bytes());
        } else if self.take(Fault::OverGrant) {
            buf[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        }
        n
    }

    /// The server's proof of the key about to go in a hello reply.
    pub(crate) fn server_proof(&self, mac: &mut [u8]) {
        if let Some(b) = mac
            .first_mut()
            .filter(|_| self.take(Fault::ForgedServerProof))
        {
            *b ^= 1;
        }
    }

    /// The proof of the key about to go in a hello (`None` without a key):
    /// kept, or replaced by the one the session's last hello carried.
    pub(crate) fn client_proof(&self, auth: &mut Option<Auth>) {
        let Some(a) = auth.as_mut() else {
            return;
        };
        let mut bytes = [0u8; PROOF_WORDS * 8];
        if self.take(Fault::ReplayedClientProof) {
            for (i, w) in self.last_proof.iter().enumerate() {
                bytes[i * 8..i * 8 + 8].copy_from_slice(&w.load(Relaxed).to_le_bytes());
            }
            a.nonce.copy_from_slice(&bytes[..NONCE_LEN]);
            a.mac.copy_from_slice(&bytes[NONCE_LEN..]);
            return;
        }
        bytes[..NONCE_LEN].copy_from_slice(&a.nonce);
        bytes[NONCE_LEN..].copy_from_slice(&a.mac);
        for (i, w) in self.last_proof.iter().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            w.store(u64::from_le_bytes(word), Relaxed);
        }
    }

    /// Client: channel `index` of attempt `generation` is about to build
    /// its QP, or to send its connect request. This runs in rdma_cm's
    /// handler, which may sleep: on RoCE and iWARP rdma_cm's own ordered
    /// worker, which a sleep holds up for the whole host (on InfiniBand,
    /// the path query's completion).
    pub(crate) fn connect_step(&self, index: u16, generation: u32) {
        let mark = generation.wrapping_add(1).max(1);
        if index == 0 && self.slow_attempt.load(Relaxed) != mark && self.take(Fault::SlowChannels) {
            self.slow_attempt.store(mark, Relaxed);
        }
        if index <= 1 && self.slow_attempt.load(Relaxed) == mark {
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(SLOW_STEP_MS));
        }
    }

    /// A request about to be sent, as `buf` (header first, then its head).
    pub(crate) fn request(&self, buf: &mut [u8]) {
        // The head's data length: bytes 4..8 after the 16-byte header.
        if buf.len() >= 24 && self.take(Fault::LyingRequest) {
            let len = u32::from_le_bytes([buf[20], buf[21], buf[22], buf[23]]) + 4096;
            buf[20..24].copy_from_slice(&len.to_le_bytes());
        }
    }

    /// Whether the next chain of work requests `qp` posts is to be cut
    /// short, for a request with registrations (`rdma` false) or an RDMA
    /// transfer: if so, `qp` is told ([`Qp::cut_next_chain`]).
    pub(crate) fn cut<H: Completion>(&self, qp: &Qp<H>, rdma: bool) {
        let f = if rdma {
            Fault::PartialRdma
        } else {
            Fault::PartialPost
        };
        if self.take(f) {
            qp.cut_next_chain();
        }
    }

    /// Where an RDMA transfer goes instead of the peer's region `r`.
    pub(crate) fn remote(&self, r: &mut Remote) {
        let last = self.last_rkey.swap(r.rkey, Relaxed);
        if self.take(Fault::ForgedKey) {
            // Another region's index, same key byte.
            r.rkey ^= 0x0005_a500;
        } else if last != 0 && self.take(Fault::StaleKey) {
            r.rkey = last;
        } else if self.take(Fault::BeyondRegion) {
            r.addr += u64::from(r.len);
        }
    }
}

#[cfg(not(CONFIG_FERRY_KUNIT_TEST))]
impl Hostile {
    /// Production build: sends the message as it is.
    #[inline(always)]
    pub(crate) fn message(&self, _buf: &mut [u8], n: usize) -> usize {
        n
    }

    /// Production build: sends the request as it is.
    #[inline(always)]
    pub(crate) fn request(&self, _buf: &mut [u8]) {}

    /// Production build: the server's proof as it is.
    #[inline(always)]
    pub(crate) fn server_proof(&self, _mac: &mut [u8]) {}

    /// Production build: the client's proof as it is.
    #[inline(always)]
    pub(crate) fn client_proof(&self, _auth: &mut Option<Auth>) {}

    /// Production build: the connect goes on at once.
    #[inline(always)]
    pub(crate) fn connect_step(&self, _index: u16, _generation: u32) {}

    /// Production build: the peer's region.
    #[inline(always)]
    pub(crate) fn remote(&self, _r: &mut Remote) {}

    /// Production build: every chain is posted whole.
    #[inline(always)]
    pub(crate) fn cut<H: Completion>(&self, _qp: &Qp<H>, _rdma: bool) {}
}
