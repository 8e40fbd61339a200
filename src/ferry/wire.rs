// SPDX-License-Identifier: GPL-2.0

//! ferry's wire protocol, version 1.2: the CM private data of a connection and
//! the messages of a channel. Documentation/session.md draws the exchange.
//!
//! Everything is little-endian with fixed offsets, encoded and decoded by hand
//! (no casts of peer bytes to structs), and every field a peer sends is checked
//! here before any other code sees it. A decoder's error is the [`Reason`] the
//! peer is refused with.
//!
//! - [`ConnectData`] (56 bytes, 32 before 1.2) rides in the CM connect
//!   request: magic, version, session id, reconnect generation, channel index
//!   and count, and (1.2) the proof that the client knows the session's
//!   secret. RoCE leaves 56 bytes for it.
//! - [`AcceptData`] (16 bytes) rides in the CM accept, [`RejectData`] (8 bytes)
//!   in a reject: the [`Reason`] the peer gets.
//! - Once a channel is up, every SEND starts with a [`Header`] (16 bytes): the
//!   message kind, the receive credits it grants, the payload length and a
//!   cookie. The client's first message is a [`Hello`] (service name, queue
//!   depth, largest message, heartbeat interval, inline data size, room for
//!   authentication), the server answers with a [`HelloReply`], as NVMe-oF
//!   answers its Connect.
//!
//! Version 1.1 added inline data: both hellos announce how much of a
//! request's data to the announcer may travel in the request message itself
//! (in bytes 1.0 keeps reserved and zero, so a 1.0 peer announces and is sent
//! none), and a request says so in its flags (see [`request`]).
//!
//! Version 1.2 made a session id useless without the session's secret: the
//! server hands the client a [`Secret`] in channel 0's hello reply, and every
//! later connection request of that session carries a [`JoinProof`], a MAC
//! of the request under the secret (see [`ConnectData::prove`]). It also
//! added authentication with a pre-shared key: the server's nonce rides in
//! the CM accept, the client's nonce and its MAC in the hello, the server's
//! MAC in the hello reply (see [`Auth`]).

use kernel::prelude::*;

pub(crate) mod request;

/// "FRRY", the first four bytes of all of ferry's CM private data.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"FRRY");
/// The protocol's major version: a peer with another major is refused.
pub(crate) const MAJOR: u8 = 1;
/// The protocol's minor version: additions a 1.0 peer may ignore.
pub(crate) const MINOR: u8 = 2;

/// Most channels one session may have.
pub(crate) const MAX_CHANNELS: u16 = 64;

/// Whether connect attempt (generation) `a` is newer than `b`: generations
/// wrap, so the sign of their difference says which is.
pub(crate) fn newer(a: u32, b: u32) -> bool {
    // CAST: the difference's sign, as serial number arithmetic reads it.
    (a.wrapping_sub(b) as i32) > 0
}
/// Most receive buffers per channel.
pub(crate) const MAX_QUEUE_DEPTH: u32 = 1024;
/// Fewest receive buffers per channel: room for a message and a credit update.
pub(crate) const MIN_QUEUE_DEPTH: u32 = 2;
/// Smallest "largest message" a peer may announce.
pub(crate) const MIN_MSG_SIZE: u32 = 256;
/// Largest message size a peer may announce (inline messages; bulk data goes
/// by RDMA READ and WRITE).
pub(crate) const MAX_MSG_SIZE: u32 = 65536;
/// Most data a peer may announce it takes inline (in the request message);
/// beyond a few pages, registering them costs less than copying.
pub(crate) const MAX_INLINE: u32 = 16384;
/// Heartbeat interval bounds, in milliseconds.
pub(crate) const HEARTBEAT_MS: core::ops::RangeInclusive<u32> = 100..=60_000;
/// Room for a service name, including its NUL.
pub(crate) const SERVICE_LEN: usize = 32;

/// Why a connection is refused or a session fails. The values travel on the
/// wire (reject data, hello reply) and in netlink (`enum ferry_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum Reason {
    /// No failure.
    None = 0,
    /// Private data or a message that does not parse.
    Malformed = 1,
    /// An unsupported major version.
    Version = 2,
    /// No such service on the server.
    UnknownService = 3,
    /// The server could not allocate what the session needs.
    NoResources = 4,
    /// A channel index or count out of range, or not the session's.
    BadChannel = 5,
    /// A channel index the session has already.
    DuplicateChannel = 6,
    /// A queue depth, message size or heartbeat out of range.
    BadParams = 7,
    /// The peer is unloading or deleting its listener.
    ShuttingDown = 8,
    /// Nobody listens on the address and port.
    NoListener = 9,
    /// The peer's address or route could not be resolved.
    Unreachable = 10,
    /// The peer did not answer in time (connect or heartbeat).
    Timeout = 11,
    /// The peer disconnected.
    PeerClosed = 12,
    /// The RDMA device under the session went away.
    DeviceRemoved = 13,
    /// A work request failed.
    TransportError = 14,
    /// The peer broke the protocol (credits, message kinds, lengths).
    ProtocolError = 15,
    /// Closed on this side.
    LocalClose = 16,
    /// Reconnecting failed for longer than the give-up time.
    GaveUp = 17,
    /// The peer's CM refused for a reason of its own.
    CmRejected = 18,
    /// The service refused the session.
    Refused = 19,
    /// The consumer reset a channel (`ferry_reset_channel()`).
    Reset = 20,
    /// The peer could not prove a session's secret or a key.
    AuthFailed = 21,
    /// The listener holds as many sessions, or sessions waiting for their
    /// hello, as its limits allow.
    Busy = 22,
}

impl Reason {
    /// The reason with wire value `v`; unknown values (a newer peer's) read as
    /// [`Reason::CmRejected`], a refusal whose cause we cannot name.
    pub(crate) fn from_wire(v: u16) -> Self {
        match v {
            0 => Self::None,
            1 => Self::Malformed,
            2 => Self::Version,
            3 => Self::UnknownService,
            4 => Self::NoResources,
            5 => Self::BadChannel,
            6 => Self::DuplicateChannel,
            7 => Self::BadParams,
            8 => Self::ShuttingDown,
            9 => Self::NoListener,
            10 => Self::Unreachable,
            11 => Self::Timeout,
            12 => Self::PeerClosed,
            13 => Self::DeviceRemoved,
            14 => Self::TransportError,
            15 => Self::ProtocolError,
            16 => Self::LocalClose,
            17 => Self::GaveUp,
            19 => Self::Refused,
            20 => Self::Reset,
            21 => Self::AuthFailed,
            22 => Self::Busy,
            _ => Self::CmRejected,
        }
    }

    /// A sentence for logs and extack messages.
    pub(crate) fn describe(self) -> &'static CStr {
        match self {
            Self::None => c"no error",
            Self::Malformed => c"malformed handshake",
            Self::Version => c"unsupported protocol version",
            Self::UnknownService => c"no such service on the peer",
            Self::NoResources => c"the peer is out of resources",
            Self::BadChannel => c"bad channel index or count",
            Self::DuplicateChannel => c"channel already connected",
            Self::BadParams => c"queue depth, message size or heartbeat out of range",
            Self::ShuttingDown => c"the peer is shutting down",
            Self::NoListener => c"nobody listens on that address and port",
            Self::Unreachable => c"peer address or route unreachable",
            Self::Timeout => c"the peer did not answer in time",
            Self::PeerClosed => c"the peer closed the connection",
            Self::DeviceRemoved => c"the RDMA device was removed",
            Self::TransportError => c"an RDMA work request failed",
            Self::ProtocolError => c"the peer broke the protocol",
            Self::LocalClose => c"closed locally",
            Self::GaveUp => c"gave up reconnecting",
            Self::CmRejected => c"the peer's connection manager refused",
            Self::Refused => c"the service refused the session",
            Self::Reset => c"reset by its consumer",
            Self::AuthFailed => c"authentication failed",
            Self::Busy => c"the peer's listener is at its session limits",
        }
    }

    /// The errno a caller gets for a connect that failed for this reason.
    pub(crate) fn errno(self) -> Error {
        match self {
            Self::None => EIO,
            Self::NoListener
            | Self::UnknownService
            | Self::CmRejected
            | Self::ShuttingDown
            | Self::DuplicateChannel
            | Self::Refused => ECONNREFUSED,
            Self::Malformed | Self::ProtocolError | Self::BadChannel => EPROTO,
            Self::Version => EPROTONOSUPPORT,
            Self::NoResources => ENOMEM,
            Self::BadParams => EINVAL,
            Self::Unreachable => EHOSTUNREACH,
            Self::Timeout | Self::GaveUp => ETIMEDOUT,
            Self::PeerClosed | Self::TransportError | Self::Reset => ECONNABORTED,
            Self::DeviceRemoved => ENODEV,
            Self::LocalClose => EINTR,
            Self::AuthFailed => EACCES,
            Self::Busy => EBUSY,
        }
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Checks magic and version at the start of CM private data.
fn check_preamble(b: &[u8]) -> Result<(), Reason> {
    if b.len() < 8 || le32(b, 0) != MAGIC {
        return Err(Reason::Malformed);
    }
    if b[4] != MAJOR {
        return Err(Reason::Version);
    }
    Ok(())
}

fn put_preamble(b: &mut [u8]) {
    put32(b, 0, MAGIC);
    b[4] = MAJOR;
    b[5] = MINOR;
}

/// A session's secret: the server draws it when the session is new and
/// hands it to the client in channel 0's hello reply; neither side shows it.
pub(crate) type Secret = [u8; SECRET_LEN];
/// Bytes of a [`Secret`].
pub(crate) const SECRET_LEN: usize = 16;
/// Bytes of a [`JoinProof`]'s MAC: HMAC-SHA256 cut to 128 bits.
pub(crate) const JOIN_MAC_LEN: usize = 16;
/// What the join MAC is computed over, before the request's bytes 0..40.
const JOIN_LABEL: &[u8] = b"ferry 1.2 join\0";

/// A client's proof, in a connection request, that it knows the session's
/// [`Secret`]: a fresh random nonce, and the MAC under the secret of the
/// request's first 40 bytes (nonce included) as they travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JoinProof {
    /// Random, drawn for this request.
    pub(crate) nonce: u64,
    /// `HMAC-SHA256(secret, label || request[0..40])[0..16]`.
    pub(crate) mac: [u8; JOIN_MAC_LEN],
}

/// The CM connect request's private data.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `FRRY` |
/// | 4, 5 | major, minor |
/// | 6..8 | flags: bit 0, a [`JoinProof`] follows (1.2); bit 1, [`ConnectData::no_inline`]; bit 2, [`ConnectData::no_requests`]; others ignored |
/// | 8..16 | session id, random, not 0 |
/// | 16..20 | generation: the client's connect attempt |
/// | 20..22, 22..24 | channel index, channel count |
/// | 24..28 | largest message the client will send, 0: the server's default |
/// | 28..30 | the client's queue depth, 0: the server's default |
/// | 30..32 | reserved, zero (ignored) |
/// | 32..40 | 1.2, with flag bit 0: the proof's nonce |
/// | 40..56 | 1.2, with flag bit 0: the proof's MAC |
///
/// The server sizes its receive buffers from the two limits before the first
/// message can arrive; the hello repeats them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnectData {
    /// The client's minor version (decoded; encoding writes [`MINOR`]).
    pub(crate) minor: u8,
    /// The session's id, chosen by the client.
    pub(crate) session_id: u64,
    /// The client's connect attempt: a higher one replaces a server session.
    pub(crate) generation: u32,
    /// This channel's index.
    pub(crate) channel: u16,
    /// The session's channel count.
    pub(crate) channels: u16,
    /// The largest message the client sends (0: unspecified).
    pub(crate) max_msg: u32,
    /// The client's queue depth (0: unspecified).
    pub(crate) queue_depth: u16,
    /// The client sends and takes no request data inline
    /// (`FERRY_NO_INLINE`): the server's buffers need no room for it.
    pub(crate) no_inline: bool,
    /// The client takes no requests (`FERRY_NO_REQUESTS`): the server
    /// sends it none.
    pub(crate) no_requests: bool,
    /// 1.2: the proof that the client knows the session's secret; none on
    /// a session's first connection.
    pub(crate) proof: Option<JoinProof>,
}

/// [`ConnectData`]'s flag: a [`JoinProof`] follows.
const FLAG_PROOF: u16 = 1;
/// [`ConnectData`]'s flag: [`ConnectData::no_inline`]. (A server that
/// does not know it ignores it, and keeps room the client never uses.)
const FLAG_NO_INLINE: u16 = 2;
/// [`ConnectData`]'s flag: [`ConnectData::no_requests`]. (A server that
/// does not know it may send requests, which the client takes for a
/// breach of the protocol: only a consumer that knows its servers asks.)
const FLAG_NO_REQUESTS: u16 = 4;

impl ConnectData {
    /// The shortest request a server takes (1.0 and 1.1 sent no more).
    pub(crate) const LEN: usize = 32;
    /// Encoded size (1.2).
    pub(crate) const ENCODED_LEN: usize = 56;
    /// The bytes the proof's MAC covers.
    const MAC_COVERS: usize = 40;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        put_preamble(&mut b);
        put64(&mut b, 8, self.session_id);
        put32(&mut b, 16, self.generation);
        put16(&mut b, 20, self.channel);
        put16(&mut b, 22, self.channels);
        put32(&mut b, 24, self.max_msg);
        put16(&mut b, 28, self.queue_depth);
        let mut flags = 0;
        if self.no_inline {
            flags |= FLAG_NO_INLINE;
        }
        if self.no_requests {
            flags |= FLAG_NO_REQUESTS;
        }
        if let Some(p) = &self.proof {
            flags |= FLAG_PROOF;
            put64(&mut b, 32, p.nonce);
            b[Self::MAC_COVERS..].copy_from_slice(&p.mac);
        }
        put16(&mut b, 6, flags);
        b
    }

    /// The join MAC under `secret` of a request's bytes `b` (the first
    /// [`Self::MAC_COVERS`] of them, exactly as they travel).
    fn join_mac(b: &[u8], secret: &Secret) -> Option<[u8; JOIN_MAC_LEN]> {
        let covered = b.get(..Self::MAC_COVERS)?;
        let full = crate::crypto::hmac_sha256(secret, &[JOIN_LABEL, covered]);
        let mut mac = [0u8; JOIN_MAC_LEN];
        mac.copy_from_slice(&full[..JOIN_MAC_LEN]);
        Some(mac)
    }

    /// Adds the proof that the client knows `secret`, with a fresh nonce.
    pub(crate) fn prove(&mut self, secret: &Secret) {
        self.proof = Some(JoinProof {
            nonce: crate::work::random_u64(),
            mac: [0; JOIN_MAC_LEN],
        });
        let mac = Self::join_mac(&self.encode(), secret);
        if let (Some(p), Some(mac)) = (self.proof.as_mut(), mac) {
            p.mac = mac;
        }
    }

    /// Whether the request, which arrived as `raw` (its CM private data),
    /// proves knowledge of `secret`: the MAC over the bytes as they came,
    /// compared in constant time. Without a proof, it does not.
    pub(crate) fn proves(&self, raw: &[u8], secret: &Secret) -> bool {
        match (&self.proof, Self::join_mac(raw, secret)) {
            (Some(p), Some(mac)) => crate::crypto::equal_secret(&mac, &p.mac),
            _ => false,
        }
    }

    /// Decodes and validates; rdma_cm may append zero padding.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        check_preamble(b)?;
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        let flags = le16(b, 6);
        let proof = if flags & FLAG_PROOF != 0 {
            if b.len() < Self::ENCODED_LEN {
                return Err(Reason::Malformed);
            }
            let mut mac = [0u8; JOIN_MAC_LEN];
            mac.copy_from_slice(&b[Self::MAC_COVERS..Self::ENCODED_LEN]);
            Some(JoinProof {
                nonce: le64(b, 32),
                mac,
            })
        } else {
            None
        };
        let d = Self {
            minor: b[5],
            proof,
            session_id: le64(b, 8),
            generation: le32(b, 16),
            channel: le16(b, 20),
            channels: le16(b, 22),
            max_msg: le32(b, 24),
            queue_depth: le16(b, 28),
            no_inline: flags & FLAG_NO_INLINE != 0,
            no_requests: flags & FLAG_NO_REQUESTS != 0,
        };
        if d.session_id == 0 {
            return Err(Reason::Malformed);
        }
        if d.channels == 0 || d.channels > MAX_CHANNELS || d.channel >= d.channels {
            return Err(Reason::BadChannel);
        }
        let bad_msg = d.max_msg != 0 && !(MIN_MSG_SIZE..=MAX_MSG_SIZE).contains(&d.max_msg);
        let depth = u32::from(d.queue_depth);
        let bad_depth = depth != 0 && !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&depth);
        if bad_msg || bad_depth {
            return Err(Reason::BadParams);
        }
        Ok(d)
    }
}

/// Bytes of a handshake nonce.
pub(crate) const NONCE_LEN: usize = 16;
/// A handshake nonce: random, drawn for one connection.
pub(crate) type Nonce = [u8; NONCE_LEN];

/// The CM accept's private data.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `FRRY` |
/// | 4, 5 | major, minor |
/// | 6..8 | reserved |
/// | 8..16 | the session id of the request, echoed |
/// | 16..32 | 1.2: the server's nonce for this connection (see [`Auth`]) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AcceptData {
    /// The session id of the request.
    pub(crate) session_id: u64,
    /// 1.2: the server's nonce.
    pub(crate) nonce: Option<Nonce>,
}

impl AcceptData {
    /// The shortest accept (1.0 and 1.1).
    pub(crate) const LEN: usize = 16;
    /// Encoded size (1.2).
    pub(crate) const ENCODED_LEN: usize = Self::LEN + NONCE_LEN;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        put_preamble(&mut b);
        put64(&mut b, 8, self.session_id);
        if let Some(n) = &self.nonce {
            b[Self::LEN..].copy_from_slice(n);
        }
        b
    }

    /// Decodes and validates; rdma_cm may append zero padding, so whether a
    /// nonce is there goes by the minor version.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        check_preamble(b)?;
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        let nonce = if b[5] >= 2 {
            let mut n = [0u8; NONCE_LEN];
            n.copy_from_slice(
                b.get(Self::LEN..Self::ENCODED_LEN)
                    .ok_or(Reason::Malformed)?,
            );
            Some(n)
        } else {
            None
        };
        Ok(Self {
            session_id: le64(b, 8),
            nonce,
        })
    }
}

/// Authentication with a pre-shared key (1.2), mutual, by challenge and
/// response: the server's nonce `ns` rides in the CM accept; the client
/// answers in its hello with its own nonce `nc` and
/// `HMAC-SHA256(key, "ferry 1.2 client\0" || ns || nc || ids)`; the server
/// answers in its hello reply with the same over `"ferry 1.2 server\0"`.
/// `ids` are the session id, generation and channel index, little-endian,
/// so a response is good for one connection alone. Channel 0's secret then
/// travels masked with `HMAC-SHA256(key, "ferry 1.2 secret\0" || ns || nc)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Auth {
    /// The client's nonce.
    pub(crate) nonce: Nonce,
    /// The client's MAC.
    pub(crate) mac: [u8; crate::crypto::HMAC_SHA256_LEN],
}

/// What a handshake MAC is bound to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AuthContext {
    /// The server's nonce, from the CM accept.
    pub(crate) server_nonce: Nonce,
    /// The client's nonce, from the hello.
    pub(crate) client_nonce: Nonce,
    /// The session's handshake id.
    pub(crate) session_id: u64,
    /// The client's attempt.
    pub(crate) generation: u32,
    /// The channel.
    pub(crate) channel: u16,
}

/// Authentication type in the hello: none.
const AUTH_NONE: u16 = 0;
/// Authentication type in the hello: a pre-shared key, HMAC-SHA256.
const AUTH_PSK_HMAC_SHA256: u16 = 1;

impl AuthContext {
    fn mac(&self, key: &[u8], label: &[u8]) -> [u8; crate::crypto::HMAC_SHA256_LEN] {
        let mut ids = [0u8; 14];
        put64(&mut ids, 0, self.session_id);
        put32(&mut ids, 8, self.generation);
        put16(&mut ids, 12, self.channel);
        crate::crypto::hmac_sha256(key, &[label, &self.server_nonce, &self.client_nonce, &ids])
    }

    /// The client's response.
    pub(crate) fn client_mac(&self, key: &[u8]) -> [u8; crate::crypto::HMAC_SHA256_LEN] {
        self.mac(key, b"ferry 1.2 client\0")
    }

    /// The server's response.
    pub(crate) fn server_mac(&self, key: &[u8]) -> [u8; crate::crypto::HMAC_SHA256_LEN] {
        self.mac(key, b"ferry 1.2 server\0")
    }

    /// Masks (or unmasks) channel 0's secret in the hello reply.
    pub(crate) fn mask_secret(&self, key: &[u8], secret: &Secret) -> Secret {
        let pad = crate::crypto::hmac_sha256(
            key,
            &[
                b"ferry 1.2 secret\0",
                &self.server_nonce,
                &self.client_nonce,
            ],
        );
        let mut out = *secret;
        for (o, p) in out.iter_mut().zip(pad.iter()) {
            *o ^= p;
        }
        out
    }
}

/// The CM reject's private data: magic, version and the [`Reason`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RejectData {
    /// Why the peer refused.
    pub(crate) reason: Reason,
}

impl RejectData {
    /// Encoded size.
    pub(crate) const LEN: usize = 8;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_preamble(&mut b);
        put16(&mut b, 6, self.reason as u16);
        b
    }

    /// Decodes a peer's reject data; `None` if it is not ferry's (another ULP
    /// or an old peer on the port), whose reason cannot be trusted.
    pub(crate) fn decode(b: &[u8]) -> Option<Self> {
        if b.len() < Self::LEN || le32(b, 0) != MAGIC {
            return None;
        }
        Some(Self {
            reason: Reason::from_wire(le16(b, 6)),
        })
    }
}

/// Message kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Client to server, first message of a channel: a [`Hello`].
    Hello = 1,
    /// Server to client, the answer to a hello: a [`HelloReply`].
    HelloReply = 2,
    /// A heartbeat; the cookie comes back in the ack.
    Heartbeat = 3,
    /// The answer to a heartbeat, same cookie.
    HeartbeatAck = 4,
    /// Nothing but credits.
    Credits = 5,
    /// A consumer's message: the payload is the consumer's bytes.
    Message = 6,
    /// A request: see [`request`]; the cookie is its tag.
    Request = 7,
    /// The response to a request: see [`request`]; the cookie is its tag.
    Response = 8,
}

/// The header of every message.
///
/// | bytes | field |
/// |---|---|
/// | 0 | kind |
/// | 1 | flags, zero in 1.0 |
/// | 2..4 | credits granted: receive buffers posted since the last grant |
/// | 4..8 | payload length |
/// | 8..16 | cookie (heartbeat sequence) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// What the message is.
    pub(crate) kind: Kind,
    /// Receive credits granted to the receiver of the message.
    pub(crate) credits: u16,
    /// Payload bytes after the header.
    pub(crate) len: u32,
    /// Kind-specific; echoed by acks.
    pub(crate) cookie: u64,
}

impl Header {
    /// Encoded size.
    pub(crate) const LEN: usize = 16;

    /// Writes the header and `payload` to the front of `buf`; returns the bytes
    /// used, or `EMSGSIZE` if they do not fit.
    pub(crate) fn write(
        kind: Kind,
        credits: u16,
        cookie: u64,
        payload: &[u8],
        buf: &mut [u8],
    ) -> Result<usize> {
        let total = Self::LEN + payload.len();
        if buf.len() < total {
            return Err(EMSGSIZE);
        }
        buf[0] = kind as u8;
        buf[1] = 0;
        put16(buf, 2, credits);
        put32(buf, 4, u32::try_from(payload.len()).map_err(|_| EMSGSIZE)?);
        put64(buf, 8, cookie);
        buf[Self::LEN..total].copy_from_slice(payload);
        Ok(total)
    }

    /// Writes the header to the front of `buf` and lets `payload` write the
    /// rest (returning its length); returns the bytes used.
    pub(crate) fn write_with(
        kind: Kind,
        credits: u16,
        cookie: u64,
        buf: &mut [u8],
        payload: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        if buf.len() < Self::LEN {
            return Err(EMSGSIZE);
        }
        let (head, rest) = buf.split_at_mut(Self::LEN);
        let n = payload(rest)?;
        head[0] = kind as u8;
        head[1] = 0;
        put16(head, 2, credits);
        put32(head, 4, u32::try_from(n).map_err(|_| EMSGSIZE)?);
        put64(head, 8, cookie);
        Ok(Self::LEN + n)
    }

    /// Parses a received message into its header and payload. The payload
    /// length must match what arrived exactly; the kind must be known.
    pub(crate) fn parse(msg: &[u8]) -> Result<(Self, &[u8]), Refusal> {
        if msg.len() < Self::LEN {
            return Err(Refusal::breach("a message shorter than its header"));
        }
        let kind = match msg[0] {
            1 => Kind::Hello,
            2 => Kind::HelloReply,
            3 => Kind::Heartbeat,
            4 => Kind::HeartbeatAck,
            5 => Kind::Credits,
            6 => Kind::Message,
            7 => Kind::Request,
            8 => Kind::Response,
            _ => return Err(Refusal::breach("a message of unknown kind")),
        };
        let len = le32(msg, 4);
        let payload = &msg[Self::LEN..];
        if payload.len() != len as usize {
            return Err(Refusal::breach("a header whose length is not what arrived"));
        }
        let h = Self {
            kind,
            credits: le16(msg, 2),
            len,
            cookie: le64(msg, 8),
        };
        Ok((h, payload))
    }
}

/// Why a message from the peer is refused: the reason the channel fails
/// with and, when the peer broke the protocol, what it got wrong (for the
/// log; empty otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// What the channel fails with.
    pub(crate) reason: Reason,
    /// What the peer did wrong, or "".
    pub(crate) what: &'static str,
}

impl Refusal {
    /// A decoder's error: a malformed message is a breach (`what`), limits
    /// out of range are a refusal for that reason, not a breach.
    pub(crate) fn of_decode(reason: Reason, what: &'static str) -> Self {
        Self {
            reason,
            what: if reason == Reason::Malformed {
                what
            } else {
                ""
            },
        }
    }

    /// A breach of the protocol: fails the channel with
    /// [`Reason::ProtocolError`].
    pub(crate) const fn breach(what: &'static str) -> Self {
        Self {
            reason: Reason::ProtocolError,
            what,
        }
    }
}

impl From<Reason> for Refusal {
    fn from(reason: Reason) -> Self {
        Self { reason, what: "" }
    }
}

/// A service name: 1 to 31 bytes of `[a-z0-9._-]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServiceName([u8; SERVICE_LEN]);

impl ServiceName {
    /// No name (a server session before its first hello).
    pub(crate) const EMPTY: Self = Self([0; SERVICE_LEN]);

    /// Validates `name` (without NUL).
    pub(crate) fn new(name: &[u8]) -> Option<Self> {
        if name.is_empty() || name.len() >= SERVICE_LEN {
            return None;
        }
        let ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c);
        if !name.iter().all(ok) {
            return None;
        }
        let mut b = [0u8; SERVICE_LEN];
        b[..name.len()].copy_from_slice(name);
        Some(Self(b))
    }

    /// The name as a C string.
    pub(crate) fn as_cstr(&self) -> &CStr {
        // The array always holds a NUL: names are shorter than it.
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }

    fn from_field(b: &[u8]) -> Option<Self> {
        let end = b.iter().position(|&c| c == 0)?;
        // Bytes after the NUL must be zero: no stale data across versions.
        if b[end..].iter().any(|&c| c != 0) {
            return None;
        }
        Self::new(&b[..end])
    }
}

impl core::fmt::Debug for ServiceName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.as_cstr())
    }
}

/// The client's first message on each channel.
///
/// | bytes | field |
/// |---|---|
/// | 0..32 | service name, NUL-padded |
/// | 32..36 | queue depth: receive buffers the client posted |
/// | 36..40 | largest message the client accepts |
/// | 40..44 | heartbeat interval, ms |
/// | 44..46 | authentication type: 0 none, 1 (1.2) a pre-shared key |
/// | 46..48 | authentication data length: 0, or 48 for type 1 |
/// | 48..52 | inline data the client takes in a request, bytes (1.1; 0: none) |
/// | 52..64 | reserved, zero |
/// | 64..112 | type 1: the client's nonce (16) and MAC (32), see [`Auth`] |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// The service asked for.
    pub(crate) service: ServiceName,
    /// Receive buffers the client posted per channel.
    pub(crate) queue_depth: u32,
    /// Largest message the client accepts.
    pub(crate) max_msg: u32,
    /// The client's heartbeat interval.
    pub(crate) heartbeat_ms: u32,
    /// Data to the client a request may carry inline (0: none).
    pub(crate) inline_size: u32,
    /// The client's response to the server's challenge (1.2).
    pub(crate) auth: Option<Auth>,
}

/// Validates the limits both hello messages carry.
fn check_limits(
    queue_depth: u32,
    max_msg: u32,
    heartbeat_ms: u32,
    inline_size: u32,
) -> Result<(), Reason> {
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&queue_depth)
        || !(MIN_MSG_SIZE..=MAX_MSG_SIZE).contains(&max_msg)
        || !HEARTBEAT_MS.contains(&heartbeat_ms)
        || inline_size > MAX_INLINE
    {
        return Err(Reason::BadParams);
    }
    Ok(())
}

impl Hello {
    /// Encoded size without authentication.
    pub(crate) const LEN: usize = 64;
    /// Bytes of type 1's authentication data.
    const AUTH_LEN: usize = NONCE_LEN + crate::crypto::HMAC_SHA256_LEN;
    /// Encoded size with it.
    pub(crate) const MAX_LEN: usize = Self::LEN + Self::AUTH_LEN;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> Encoded<{ Self::MAX_LEN }> {
        let mut b = [0u8; Self::MAX_LEN];
        b[..SERVICE_LEN].copy_from_slice(&self.service.0);
        put32(&mut b, 32, self.queue_depth);
        put32(&mut b, 36, self.max_msg);
        put32(&mut b, 40, self.heartbeat_ms);
        put32(&mut b, 48, self.inline_size);
        let len = match &self.auth {
            Some(a) => {
                put16(&mut b, 44, AUTH_PSK_HMAC_SHA256);
                // CAST: 48.
                put16(&mut b, 46, Self::AUTH_LEN as u16);
                b[Self::LEN..Self::LEN + NONCE_LEN].copy_from_slice(&a.nonce);
                b[Self::LEN + NONCE_LEN..].copy_from_slice(&a.mac);
                Self::MAX_LEN
            }
            None => Self::LEN,
        };
        Encoded { buf: b, len }
    }

    /// Decodes and validates a hello payload.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        let service = ServiceName::from_field(&b[..SERVICE_LEN]).ok_or(Reason::Malformed)?;
        let auth_len = usize::from(le16(b, 46));
        if b.len() != Self::LEN + auth_len {
            return Err(Reason::Malformed);
        }
        let auth = match (le16(b, 44), auth_len) {
            (AUTH_NONE, 0) => None,
            (AUTH_PSK_HMAC_SHA256, Self::AUTH_LEN) => {
                let mut a = Auth {
                    nonce: [0; NONCE_LEN],
                    mac: [0; crate::crypto::HMAC_SHA256_LEN],
                };
                a.nonce
                    .copy_from_slice(&b[Self::LEN..Self::LEN + NONCE_LEN]);
                a.mac.copy_from_slice(&b[Self::LEN + NONCE_LEN..]);
                Some(a)
            }
            // A method this side does not know: refused rather than let in
            // unauthenticated.
            _ => return Err(Reason::AuthFailed),
        };
        let h = Self {
            auth,
            service,
            queue_depth: le32(b, 32),
            max_msg: le32(b, 36),
            heartbeat_ms: le32(b, 40),
            inline_size: le32(b, 48),
        };
        check_limits(h.queue_depth, h.max_msg, h.heartbeat_ms, h.inline_size)?;
        Ok(h)
    }
}

/// The server's answer to a [`Hello`].
///
/// | bytes | field |
/// |---|---|
/// | 0..2 | status: a [`Reason`], 0 if accepted |
/// | 2..4 | flags (1.2): bit 0 a secret follows, bit 1 the server's MAC; bit 2, [`HelloReply::no_requests`] (only to a client that set [`ConnectData::no_requests`]) |
/// | 4..8 | queue depth: receive buffers the server posted |
/// | 8..12 | largest message the server accepts |
/// | 12..16 | the server's heartbeat interval, ms |
/// | 16..20 | inline data the server takes in a request, bytes (1.1; 0: none) |
/// | 20..32 | reserved, zero |
/// | then 16 | with flag bit 0 (channel 0 of a 1.2 client): the session's [`Secret`], masked if authenticated |
/// | then 32 | with flag bit 1: the server's MAC (see [`Auth`]) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HelloReply {
    /// [`Reason::None`] if the session is accepted.
    pub(crate) status: Reason,
    /// Receive buffers the server posted per channel.
    pub(crate) queue_depth: u32,
    /// Largest message the server accepts.
    pub(crate) max_msg: u32,
    /// The server's heartbeat interval.
    pub(crate) heartbeat_ms: u32,
    /// Data to the server a request may carry inline (0: none).
    pub(crate) inline_size: u32,
    /// The session's secret, on channel 0 (1.2).
    pub(crate) secret: Option<Secret>,
    /// The server's response to the client's challenge (1.2).
    pub(crate) mac: Option<[u8; crate::crypto::HMAC_SHA256_LEN]>,
    /// The server sends no requests: it knew the client's
    /// [`ConnectData::no_requests`]. (Sent only to a client that set it,
    /// which knows the bit: older clients refuse unknown ones.)
    pub(crate) no_requests: bool,
}

const REPLY_SECRET: u16 = 1;
const REPLY_MAC: u16 = 2;
const REPLY_NO_REQUESTS: u16 = 4;

/// An encoding of up to `N` bytes.
pub(crate) struct Encoded<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> core::ops::Deref for Encoded<N> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl<const N: usize> core::ops::DerefMut for Encoded<N> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl HelloReply {
    /// Encoded size without what 1.2 may add.
    pub(crate) const LEN: usize = 32;
    /// Encoded size with everything.
    pub(crate) const MAX_LEN: usize = Self::LEN + SECRET_LEN + crate::crypto::HMAC_SHA256_LEN;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> Encoded<{ Self::MAX_LEN }> {
        let mut b = [0u8; Self::MAX_LEN];
        put16(&mut b, 0, self.status as u16);
        put32(&mut b, 4, self.queue_depth);
        put32(&mut b, 8, self.max_msg);
        put32(&mut b, 12, self.heartbeat_ms);
        put32(&mut b, 16, self.inline_size);
        let mut len = Self::LEN;
        let mut flags = 0;
        if let Some(s) = &self.secret {
            b[len..len + SECRET_LEN].copy_from_slice(s);
            len += SECRET_LEN;
            flags |= REPLY_SECRET;
        }
        if let Some(m) = &self.mac {
            b[len..len + m.len()].copy_from_slice(m);
            len += m.len();
            flags |= REPLY_MAC;
        }
        if self.no_requests {
            flags |= REPLY_NO_REQUESTS;
        }
        put16(&mut b, 2, flags);
        Encoded { buf: b, len }
    }

    /// Decodes a reply; a refusal decodes fine (its limits are not checked),
    /// an acceptance must carry valid limits.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        let flags = le16(b, 2);
        let mut at = Self::LEN;
        let mut take = |n: usize, set: bool| -> Result<Option<&[u8]>, Reason> {
            if !set {
                return Ok(None);
            }
            let s = b.get(at..at + n).ok_or(Reason::Malformed)?;
            at += n;
            Ok(Some(s))
        };
        let secret = take(SECRET_LEN, flags & REPLY_SECRET != 0)?.map(|s| {
            let mut v = [0u8; SECRET_LEN];
            v.copy_from_slice(s);
            v
        });
        let mac = take(crate::crypto::HMAC_SHA256_LEN, flags & REPLY_MAC != 0)?.map(|s| {
            let mut v = [0u8; crate::crypto::HMAC_SHA256_LEN];
            v.copy_from_slice(s);
            v
        });
        if at != b.len() || flags & !(REPLY_SECRET | REPLY_MAC | REPLY_NO_REQUESTS) != 0 {
            return Err(Reason::Malformed);
        }
        let r = Self {
            secret,
            mac,
            status: Reason::from_wire(le16(b, 0)),
            queue_depth: le32(b, 4),
            max_msg: le32(b, 8),
            heartbeat_ms: le32(b, 12),
            inline_size: le32(b, 16),
            no_requests: flags & REPLY_NO_REQUESTS != 0,
        };
        if r.status == Reason::None {
            check_limits(r.queue_depth, r.max_msg, r.heartbeat_ms, r.inline_size)?;
        }
        Ok(r)
    }
}

// The encodings fit where they travel.
const _: () = assert!(ConnectData::ENCODED_LEN <= crate::cm::REQ_PRIVATE_DATA_MAX);
const _: () = assert!(AcceptData::ENCODED_LEN <= crate::cm::REP_PRIVATE_DATA_MAX);
const _: () = assert!(RejectData::LEN <= crate::cm::REJ_PRIVATE_DATA_MAX);
const _: () = assert!(Header::LEN + Hello::MAX_LEN <= MIN_MSG_SIZE as usize);
const _: () = assert!(Header::LEN + HelloReply::MAX_LEN <= MIN_MSG_SIZE as usize);
// A queue depth travels in 16 bits of the connect data.
const _: () = assert!(MAX_QUEUE_DEPTH <= u16::MAX as u32);

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_wire)]
mod tests {
    use super::*;

    fn connect() -> ConnectData {
        ConnectData {
            minor: MINOR,
            proof: None,
            session_id: 0x1122_3344_5566_7788,
            generation: 3,
            channel: 1,
            channels: 4,
            max_msg: 65536,
            queue_depth: 32,
            no_inline: false,
            no_requests: false,
        }
    }

    #[test]
    fn connect_data_round_trips_with_cm_padding() {
        let enc = connect().encode();
        // rdma_cm delivers the request's full 56 bytes, zero-padded.
        let mut padded = [0u8; crate::cm::REQ_PRIVATE_DATA_MAX];
        padded[..ConnectData::ENCODED_LEN].copy_from_slice(&enc);
        assert_eq!(ConnectData::decode(&padded), Ok(connect()));
        assert_eq!(&enc[..4], b"FRRY");
        // A 1.1 client's 32 bytes.
        let mut old = enc;
        old[5] = 1;
        let want = ConnectData {
            minor: 1,
            ..connect()
        };
        assert_eq!(ConnectData::decode(&old[..ConnectData::LEN]), Ok(want));
        // Without inline data, without requests, and with a proof too:
        // each flag.
        let mut d = ConnectData {
            no_inline: true,
            ..connect()
        };
        assert_eq!(le16(&d.encode(), 6), FLAG_NO_INLINE);
        assert_eq!(ConnectData::decode(&d.encode()), Ok(d));
        d.no_requests = true;
        d.prove(&[3u8; SECRET_LEN]);
        assert_eq!(
            le16(&d.encode(), 6),
            FLAG_NO_INLINE | FLAG_NO_REQUESTS | FLAG_PROOF
        );
        assert_eq!(ConnectData::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn join_proofs_need_the_secret() {
        let secret = [7u8; SECRET_LEN];
        let mut d = connect();
        assert!(!d.proves(&d.encode(), &secret));
        d.prove(&secret);
        let enc = d.encode();
        let got = ConnectData::decode(&enc).unwrap();
        assert_eq!(got, d);
        assert!(got.proves(&enc, &secret));
        // Another secret, or any byte changed after the proof (reserved
        // ones and the version included): refused.
        let mut other = secret;
        other[15] ^= 1;
        assert!(!got.proves(&enc, &other));
        for at in 0..ConnectData::ENCODED_LEN {
            let mut b = enc;
            b[at] ^= 0x10;
            if let Ok(f) = ConnectData::decode(&b) {
                assert!(!f.proves(&b, &secret));
            }
        }
        // Two proofs of one request differ in their nonce and MAC.
        let mut again = connect();
        again.prove(&secret);
        assert!(again.proves(&again.encode(), &secret));
        assert_ne!(again.proof, d.proof);
        // The flag without the proof's bytes.
        assert_eq!(
            ConnectData::decode(&enc[..ConnectData::ENCODED_LEN - 1]),
            Err(Reason::Malformed)
        );
    }

    #[test]
    fn connect_data_rejects_truncated_and_foreign() {
        let enc = connect().encode();
        for len in 0..ConnectData::LEN {
            assert!(ConnectData::decode(&enc[..len]).is_err());
        }
        let mut bad = enc;
        bad[0] ^= 0xff;
        assert_eq!(ConnectData::decode(&bad), Err(Reason::Malformed));
        assert_eq!(ConnectData::decode(&[0u8; 56]), Err(Reason::Malformed));
    }

    #[test]
    fn connect_data_checks_version() {
        let mut enc = connect().encode();
        enc[4] = MAJOR + 1;
        assert_eq!(ConnectData::decode(&enc), Err(Reason::Version));
        enc[4] = 0;
        assert_eq!(ConnectData::decode(&enc), Err(Reason::Version));
        // A newer minor is compatible.
        let mut enc = connect().encode();
        enc[5] = 200;
        let want = ConnectData {
            minor: 200,
            ..connect()
        };
        assert_eq!(ConnectData::decode(&enc), Ok(want));
    }

    #[test]
    fn connect_data_checks_hostile_fields() {
        let cases = [
            (0, 0, 1, Reason::Malformed),
            (1, 0, 0, Reason::BadChannel),
            (1, 1, 1, Reason::BadChannel),
            (1, 5, 4, Reason::BadChannel),
            (1, 0, MAX_CHANNELS + 1, Reason::BadChannel),
            (1, u16::MAX, u16::MAX, Reason::BadChannel),
        ];
        for (sid, ch, n, want) in cases {
            let d = ConnectData {
                session_id: sid,
                channel: ch,
                channels: n,
                ..connect()
            };
            assert_eq!(ConnectData::decode(&d.encode()), Err(want));
        }
        // Limits out of range; 0 is "the server's default".
        for (max_msg, queue_depth) in [
            (MIN_MSG_SIZE - 1, 0),
            (MAX_MSG_SIZE + 1, 0),
            (u32::MAX, 0),
            (0, 1),
            (0, 1025),
            (0, u16::MAX),
        ] {
            let d = ConnectData {
                max_msg,
                queue_depth,
                ..connect()
            };
            assert_eq!(ConnectData::decode(&d.encode()), Err(Reason::BadParams));
        }
        let last = ConnectData {
            minor: MINOR,
            proof: None,
            session_id: u64::MAX,
            generation: u32::MAX,
            channel: MAX_CHANNELS - 1,
            channels: MAX_CHANNELS,
            max_msg: MAX_MSG_SIZE,
            queue_depth: 1024,
            no_inline: true,
            no_requests: true,
        };
        assert_eq!(ConnectData::decode(&last.encode()), Ok(last));
        let unspecified = ConnectData {
            max_msg: 0,
            queue_depth: 0,
            ..last
        };
        assert_eq!(ConnectData::decode(&unspecified.encode()), Ok(unspecified));
    }

    #[test]
    fn reject_and_accept_data() {
        for r in [
            Reason::UnknownService,
            Reason::Version,
            Reason::ShuttingDown,
        ] {
            let enc = RejectData { reason: r }.encode();
            assert_eq!(RejectData::decode(&enc), Some(RejectData { reason: r }));
        }
        // Not ours, or too short: no reason is trusted.
        assert_eq!(RejectData::decode(&[0u8; 8]), None);
        assert_eq!(RejectData::decode(b"FRRY"), None);
        // A reason from a newer peer reads as a generic refusal.
        let mut enc = RejectData {
            reason: Reason::None,
        }
        .encode();
        enc[6] = 0xff;
        assert_eq!(
            RejectData::decode(&enc).map(|r| r.reason),
            Some(Reason::CmRejected)
        );
        let a = AcceptData {
            session_id: 42,
            nonce: Some([9; NONCE_LEN]),
        };
        assert_eq!(AcceptData::decode(&a.encode()), Ok(a));
        assert_eq!(
            AcceptData::decode(&a.encode()[..15]),
            Err(Reason::Malformed)
        );
        // 1.2 has a nonce; 1.1 had none.
        assert_eq!(
            AcceptData::decode(&a.encode()[..AcceptData::LEN]),
            Err(Reason::Malformed)
        );
        let mut old = a.encode();
        old[5] = 1;
        assert_eq!(
            AcceptData::decode(&old[..AcceptData::LEN]),
            Ok(AcceptData {
                session_id: 42,
                nonce: None
            })
        );
    }

    #[test]
    fn header_round_trip_and_length_checks() {
        let mut buf = [0u8; 64];
        let n = Header::write(Kind::Heartbeat, 7, 99, b"abc", &mut buf).unwrap();
        assert_eq!(n, Header::LEN + 3);
        let (h, p) = Header::parse(&buf[..n]).unwrap();
        assert_eq!(
            (h.kind, h.credits, h.len, h.cookie),
            (Kind::Heartbeat, 7, 3, 99)
        );
        assert_eq!(p, b"abc");
        // Truncated, padded, or with a length that lies.
        assert!(Header::parse(&buf[..n - 1]).is_err());
        assert!(Header::parse(&buf[..n + 1]).is_err());
        assert!(Header::parse(&buf[..Header::LEN - 1]).is_err());
        let mut lie = buf;
        lie[4] = 0xff;
        assert!(Header::parse(&lie[..n]).is_err());
        let mut unknown = buf;
        unknown[0] = 0;
        assert!(Header::parse(&unknown[..n]).is_err());
        for kind in [9, 0x80, 0xff] {
            unknown[0] = kind;
            assert!(Header::parse(&unknown[..n]).is_err());
        }
        // A consumer's message: any bytes, the length exact.
        let n = Header::write(Kind::Message, 0, 0, &[0xa5; 40], &mut buf).unwrap();
        let (h, p) = Header::parse(&buf[..n]).unwrap();
        assert_eq!((h.kind, h.len, p.len()), (Kind::Message, 40, 40));
        // Too small a buffer to write into.
        assert!(Header::write(Kind::Credits, 0, 0, &[0u8; 60], &mut buf).is_err());
    }

    fn hello() -> Hello {
        Hello {
            service: ServiceName::new(b"echo").unwrap(),
            queue_depth: 128,
            max_msg: 4096,
            heartbeat_ms: 1000,
            inline_size: 4096,
            auth: None,
        }
    }

    fn ctx() -> AuthContext {
        AuthContext {
            server_nonce: [1; NONCE_LEN],
            client_nonce: [2; NONCE_LEN],
            session_id: 0x1122_3344_5566_7788,
            generation: 3,
            channel: 1,
        }
    }

    #[test]
    fn hello_with_auth_round_trips() {
        let key = b"a key of the test, 32 bytes long";
        let h = Hello {
            auth: Some(Auth {
                nonce: [2; NONCE_LEN],
                mac: ctx().client_mac(key),
            }),
            ..hello()
        };
        let enc = h.encode();
        assert_eq!(enc.len(), Hello::MAX_LEN);
        assert_eq!(Hello::decode(&enc), Ok(h));
        // The length must match the type's.
        assert_eq!(
            Hello::decode(&enc[..Hello::MAX_LEN - 1]),
            Err(Reason::Malformed)
        );
        let mut short = hello().encode();
        short[44] = 1;
        assert_eq!(Hello::decode(&short), Err(Reason::AuthFailed));
        // A method this side does not know.
        let mut other = h.encode();
        other[44] = 2;
        assert_eq!(Hello::decode(&other), Err(Reason::AuthFailed));
    }

    #[test]
    fn handshake_macs_bind_key_nonces_and_connection() {
        let key = b"a key of the test, 32 bytes long";
        let c = ctx();
        let m = c.client_mac(key);
        assert_eq!(m, ctx().client_mac(key));
        // The server's answer is not the client's, so neither can be
        // reflected back.
        assert_ne!(m, c.server_mac(key));
        // Another key, or a replay under another server nonce, client
        // nonce, session, generation or channel: another MAC.
        assert_ne!(m, c.client_mac(b"another key of the test, 32 byte"));
        let variants = [
            AuthContext {
                server_nonce: [9; NONCE_LEN],
                ..c
            },
            AuthContext {
                client_nonce: [9; NONCE_LEN],
                ..c
            },
            AuthContext { session_id: 1, ..c },
            AuthContext { generation: 4, ..c },
            AuthContext { channel: 0, ..c },
        ];
        for v in variants {
            assert_ne!(v.client_mac(key), m);
            assert_ne!(v.server_mac(key), c.server_mac(key));
        }
        // The secret's mask: undone by itself, and not the secret.
        let s = [0x5a; SECRET_LEN];
        let masked = c.mask_secret(key, &s);
        assert_ne!(masked, s);
        assert_eq!(c.mask_secret(key, &masked), s);
        assert_ne!(
            AuthContext {
                client_nonce: [9; NONCE_LEN],
                ..c
            }
            .mask_secret(key, &s),
            masked
        );
    }

    #[test]
    fn hello_round_trip_and_limits() {
        assert_eq!(Hello::decode(&hello().encode()), Ok(hello()));
        for (qd, mm, hb, il) in [
            (0, 4096, 1000, 0),
            (MAX_QUEUE_DEPTH + 1, 4096, 1000, 0),
            (128, MIN_MSG_SIZE - 1, 1000, 0),
            (128, MAX_MSG_SIZE + 1, 1000, 0),
            (128, 4096, 0, 0),
            (128, 4096, u32::MAX, 0),
            (128, 4096, 1000, MAX_INLINE + 1),
            (128, 4096, 1000, u32::MAX),
        ] {
            let h = Hello {
                queue_depth: qd,
                max_msg: mm,
                heartbeat_ms: hb,
                inline_size: il,
                ..hello()
            };
            assert_eq!(Hello::decode(&h.encode()), Err(Reason::BadParams));
        }
        // A 1.0 client leaves the inline size zero: it takes none.
        let mut old = hello().encode();
        old[48..52].fill(0);
        assert_eq!(
            Hello::decode(&old),
            Ok(Hello {
                inline_size: 0,
                ..hello()
            })
        );
        assert_eq!(
            Hello::decode(&hello().encode()[..63]),
            Err(Reason::Malformed)
        );
    }

    #[test]
    fn hello_rejects_hostile_service_names_and_auth() {
        let mut b = hello().encode();
        // No NUL in the name field.
        b[..SERVICE_LEN].fill(b'a');
        assert_eq!(Hello::decode(&b), Err(Reason::Malformed));
        // Stale bytes after the NUL.
        let mut b = hello().encode();
        b[10] = b'x';
        assert_eq!(Hello::decode(&b), Err(Reason::Malformed));
        // Empty, upper case, control characters, path separators.
        for name in [&b""[..], b"Echo", b"ec\nho", b"../blk", b"a b"] {
            let mut b = hello().encode();
            b[..SERVICE_LEN].fill(0);
            b[..name.len()].copy_from_slice(name);
            assert_eq!(Hello::decode(&b), Err(Reason::Malformed));
        }
        // Authentication data without a type.
        let mut b = hello().encode();
        b[46] = 1;
        assert_eq!(Hello::decode(&b), Err(Reason::Malformed));
        assert!(ServiceName::new(&[b'a'; SERVICE_LEN]).is_none());
        assert!(ServiceName::new(&[b'a'; SERVICE_LEN - 1]).is_some());
    }

    #[test]
    fn hello_reply_round_trip() {
        let r = HelloReply {
            status: Reason::None,
            queue_depth: 64,
            max_msg: 8192,
            heartbeat_ms: 500,
            inline_size: MAX_INLINE,
            secret: None,
            mac: None,
            no_requests: false,
        };
        assert_eq!(HelloReply::decode(&r.encode()), Ok(r));
        // To a client that takes no requests.
        let nr = HelloReply {
            no_requests: true,
            ..r
        };
        assert_eq!(le16(&nr.encode(), 2), REPLY_NO_REQUESTS);
        assert_eq!(HelloReply::decode(&nr.encode()), Ok(nr));
        assert_eq!(r.encode().len(), HelloReply::LEN);
        // Channel 0's, with the session's secret.
        let with = HelloReply {
            secret: Some([0x5a; SECRET_LEN]),
            ..r
        };
        assert_eq!(with.encode().len(), HelloReply::LEN + SECRET_LEN);
        assert_eq!(HelloReply::decode(&with.encode()), Ok(with));
        assert_eq!(
            HelloReply::decode(&with.encode()[..HelloReply::LEN + SECRET_LEN - 1]),
            Err(Reason::Malformed)
        );
        // With the server's MAC too, or alone.
        let both = HelloReply {
            mac: Some([0xa5; 32]),
            ..with
        };
        assert_eq!(both.encode().len(), HelloReply::MAX_LEN);
        assert_eq!(HelloReply::decode(&both.encode()), Ok(both));
        let mac = HelloReply {
            secret: None,
            ..both
        };
        assert_eq!(HelloReply::decode(&mac.encode()), Ok(mac));
        // Bytes no flag accounts for, or a flag this side does not know.
        let mut long = [0u8; HelloReply::LEN + 1];
        long[..HelloReply::LEN].copy_from_slice(&r.encode());
        assert_eq!(HelloReply::decode(&long), Err(Reason::Malformed));
        let mut unknown = r.encode();
        unknown[2] = 8;
        assert_eq!(HelloReply::decode(&unknown), Err(Reason::Malformed));
        let big = HelloReply {
            inline_size: MAX_INLINE + 1,
            ..r
        };
        assert_eq!(HelloReply::decode(&big.encode()), Err(Reason::BadParams));
        // A refusal needs no valid limits.
        let no = HelloReply {
            status: Reason::UnknownService,
            queue_depth: 0,
            max_msg: 0,
            heartbeat_ms: 0,
            inline_size: 0,
            secret: None,
            mac: None,
            no_requests: false,
        };
        assert_eq!(HelloReply::decode(&no.encode()), Ok(no));
        // An acceptance does.
        let bad = HelloReply {
            queue_depth: 0,
            ..r
        };
        assert_eq!(HelloReply::decode(&bad.encode()), Err(Reason::BadParams));
        assert_eq!(
            HelloReply::decode(&r.encode()[..31]),
            Err(Reason::Malformed)
        );
    }
}
