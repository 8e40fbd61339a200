// SPDX-License-Identifier: GPL-2.0

//! ferry's wire protocol, version 1.1: the CM private data of a connection and
//! the messages of a channel. Documentation/session.md draws the exchange.
//!
//! Everything is little-endian with fixed offsets, encoded and decoded by hand
//! (no casts of peer bytes to structs), and every field a peer sends is checked
//! here before any other code sees it. A decoder's error is the [`Reason`] the
//! peer is refused with.
//!
//! - [`ConnectData`] (32 bytes) rides in the CM connect request: magic, version,
//!   session id, reconnect generation, channel index and count. RoCE leaves
//!   56 bytes for it.
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

use kernel::prelude::*;

pub(crate) mod request;

/// "FRRY", the first four bytes of all of ferry's CM private data.
pub(crate) const MAGIC: u32 = u32::from_le_bytes(*b"FRRY");
/// The protocol's major version: a peer with another major is refused.
pub(crate) const MAJOR: u8 = 1;
/// The protocol's minor version: additions a 1.0 peer may ignore.
pub(crate) const MINOR: u8 = 1;

/// Most channels one session may have.
pub(crate) const MAX_CHANNELS: u16 = 64;
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

/// The CM connect request's private data.
///
/// | bytes | field |
/// |---|---|
/// | 0..4 | magic `FRRY` |
/// | 4, 5 | major, minor |
/// | 6..8 | flags, zero in 1.0 (ignored) |
/// | 8..16 | session id, random, not 0 |
/// | 16..20 | generation: the client's connect attempt |
/// | 20..22, 22..24 | channel index, channel count |
/// | 24..28 | largest message the client will send, 0: the server's default |
/// | 28..30 | the client's queue depth, 0: the server's default |
/// | 30..32 | reserved, zero (ignored) |
///
/// The server sizes its receive buffers from the two limits before the first
/// message can arrive; the hello repeats them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnectData {
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
}

impl ConnectData {
    /// Encoded size.
    pub(crate) const LEN: usize = 32;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_preamble(&mut b);
        put64(&mut b, 8, self.session_id);
        put32(&mut b, 16, self.generation);
        put16(&mut b, 20, self.channel);
        put16(&mut b, 22, self.channels);
        put32(&mut b, 24, self.max_msg);
        put16(&mut b, 28, self.queue_depth);
        b
    }

    /// Decodes and validates; rdma_cm may append zero padding.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        check_preamble(b)?;
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        let d = Self {
            session_id: le64(b, 8),
            generation: le32(b, 16),
            channel: le16(b, 20),
            channels: le16(b, 22),
            max_msg: le32(b, 24),
            queue_depth: le16(b, 28),
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

/// The CM accept's private data: magic, version and the session id echoed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AcceptData {
    /// The session id of the request.
    pub(crate) session_id: u64,
}

impl AcceptData {
    /// Encoded size.
    pub(crate) const LEN: usize = 16;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put_preamble(&mut b);
        put64(&mut b, 8, self.session_id);
        b
    }

    /// Decodes and validates.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        check_preamble(b)?;
        if b.len() < Self::LEN {
            return Err(Reason::Malformed);
        }
        Ok(Self {
            session_id: le64(b, 8),
        })
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
/// | 44..46 | authentication type: 0 (none) in 1.0 |
/// | 46..48 | authentication data length: 0 in 1.0 |
/// | 48..52 | inline data the client takes in a request, bytes (1.1; 0: none) |
/// | 52..64 | reserved, zero |
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
    /// Encoded size.
    pub(crate) const LEN: usize = 64;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..SERVICE_LEN].copy_from_slice(&self.service.0);
        put32(&mut b, 32, self.queue_depth);
        put32(&mut b, 36, self.max_msg);
        put32(&mut b, 40, self.heartbeat_ms);
        put32(&mut b, 48, self.inline_size);
        b
    }

    /// Decodes and validates a hello payload.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        if b.len() != Self::LEN {
            return Err(Reason::Malformed);
        }
        let service = ServiceName::from_field(&b[..SERVICE_LEN]).ok_or(Reason::Malformed)?;
        // Authentication is not defined in 1.0: a peer asking for it is refused
        // rather than let in unauthenticated.
        if le16(b, 44) != 0 || le16(b, 46) != 0 {
            return Err(Reason::BadParams);
        }
        let h = Self {
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
/// | 2..4 | reserved, zero |
/// | 4..8 | queue depth: receive buffers the server posted |
/// | 8..12 | largest message the server accepts |
/// | 12..16 | the server's heartbeat interval, ms |
/// | 16..20 | inline data the server takes in a request, bytes (1.1; 0: none) |
/// | 20..32 | reserved, zero |
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
}

impl HelloReply {
    /// Encoded size.
    pub(crate) const LEN: usize = 32;

    /// Encodes into a fresh buffer.
    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        put16(&mut b, 0, self.status as u16);
        put32(&mut b, 4, self.queue_depth);
        put32(&mut b, 8, self.max_msg);
        put32(&mut b, 12, self.heartbeat_ms);
        put32(&mut b, 16, self.inline_size);
        b
    }

    /// Decodes a reply; a refusal decodes fine (its limits are not checked),
    /// an acceptance must carry valid limits.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Reason> {
        if b.len() != Self::LEN {
            return Err(Reason::Malformed);
        }
        let r = Self {
            status: Reason::from_wire(le16(b, 0)),
            queue_depth: le32(b, 4),
            max_msg: le32(b, 8),
            heartbeat_ms: le32(b, 12),
            inline_size: le32(b, 16),
        };
        if r.status == Reason::None {
            check_limits(r.queue_depth, r.max_msg, r.heartbeat_ms, r.inline_size)?;
        }
        Ok(r)
    }
}

// The encodings fit where they travel.
const _: () = assert!(ConnectData::LEN <= crate::cm::REQ_PRIVATE_DATA_MAX);
const _: () = assert!(AcceptData::LEN <= crate::cm::REP_PRIVATE_DATA_MAX);
const _: () = assert!(RejectData::LEN <= crate::cm::REJ_PRIVATE_DATA_MAX);
const _: () = assert!(Header::LEN + Hello::LEN <= MIN_MSG_SIZE as usize);
// A queue depth travels in 16 bits of the connect data.
const _: () = assert!(MAX_QUEUE_DEPTH <= u16::MAX as u32);

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_wire)]
mod tests {
    use super::*;

    fn connect() -> ConnectData {
        ConnectData {
            session_id: 0x1122_3344_5566_7788,
            generation: 3,
            channel: 1,
            channels: 4,
            max_msg: 65536,
            queue_depth: 32,
        }
    }

    #[test]
    fn connect_data_round_trips_with_cm_padding() {
        let enc = connect().encode();
        // rdma_cm delivers the request's full 56 bytes, zero-padded.
        let mut padded = [0u8; crate::cm::REQ_PRIVATE_DATA_MAX];
        padded[..ConnectData::LEN].copy_from_slice(&enc);
        assert_eq!(ConnectData::decode(&padded), Ok(connect()));
        assert_eq!(&enc[..4], b"FRRY");
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
        assert_eq!(ConnectData::decode(&enc), Ok(connect()));
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
            session_id: u64::MAX,
            generation: u32::MAX,
            channel: MAX_CHANNELS - 1,
            channels: MAX_CHANNELS,
            max_msg: MAX_MSG_SIZE,
            queue_depth: 1024,
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
        let a = AcceptData { session_id: 42 };
        assert_eq!(AcceptData::decode(&a.encode()), Ok(a));
        assert_eq!(
            AcceptData::decode(&a.encode()[..15]),
            Err(Reason::Malformed)
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
        }
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
        // Authentication asked for, which 1.0 cannot do.
        let mut b = hello().encode();
        b[44] = 1;
        assert_eq!(Hello::decode(&b), Err(Reason::BadParams));
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
        };
        assert_eq!(HelloReply::decode(&r.encode()), Ok(r));
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
