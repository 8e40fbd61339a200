// SPDX-License-Identifier: GPL-2.0
//! A small generic netlink client: resolves a family and its multicast groups,
//! sends a request, collects the replies of a `do` or a dump, decodes kernel
//! errors with their extended ack (message, offending attribute, missing
//! attribute), and receives the notifications of a subscribed group.

use std::{
    fmt, io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

use crate::attr::{self, Attrs};

const NLMSG_HDRLEN: usize = 16;
const GENL_HDRLEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x01;
const NLM_F_ACK: u16 = 0x04;
/// Root and match: a dump.
pub const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_ADD_MEMBERSHIP: libc::c_int = 1;
const NETLINK_CAP_ACK: libc::c_int = 10;
const NETLINK_EXT_ACK: libc::c_int = 11;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;
const NLMSGERR_ATTR_MSG: u16 = 1;
const NLMSGERR_ATTR_OFFS: u16 = 2;
const NLMSGERR_ATTR_MISS_TYPE: u16 = 5;

/// What can go wrong talking to the kernel.
#[derive(Debug)]
pub enum Error {
    /// A socket call failed.
    Io(io::Error),
    /// The kernel refused the request.
    Kernel(KernelError),
    /// No generic netlink family of this name: its module is not loaded.
    NoFamily(String),
    /// The family (first) has no multicast group of this name (second).
    NoGroup(String, String),
    /// The kernel's answer was not what the protocol says.
    Protocol(String),
}

/// A refusal from the kernel, with its extended ack.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KernelError {
    /// The positive errno.
    pub errno: i32,
    /// The extack message, if the kernel gave one.
    pub msg: Option<String>,
    /// The type of the attribute the kernel pointed at, if any.
    pub bad_attr: Option<u16>,
    /// The type of an attribute the kernel said is missing, if any.
    pub missing_attr: Option<u16>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "netlink: {e}"),
            Error::Kernel(k) => {
                let strerror = io::Error::from_raw_os_error(k.errno);
                match &k.msg {
                    Some(m) => write!(f, "{m} ({})", strerror_text(&strerror)),
                    None => write!(f, "{}", strerror_text(&strerror)),
                }
            }
            Error::NoFamily(name) => write!(
                f,
                "the {name} module is not loaded (no generic netlink family \"{name}\"); \
                 load it with: modprobe {name}"
            ),
            Error::NoGroup(family, group) => write!(
                f,
                "the loaded {family} module has no multicast group \"{group}\" \
                 (is it older than this ferryctl?)"
            ),
            Error::Protocol(m) => write!(f, "unexpected reply from the kernel: {m}"),
        }
    }
}

fn strerror_text(e: &io::Error) -> String {
    // "No such device (os error 19)" -> "No such device"
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

/// Builds the attributes of a request.
#[derive(Default)]
pub struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    /// An empty attribute list.
    pub fn new() -> Self {
        Self::default()
    }

    fn put(&mut self, ty: u16, payload: &[u8]) {
        let len = 4 + payload.len();
        self.buf.extend_from_slice(&(len as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(self.buf.len().next_multiple_of(4), 0);
    }

    /// Adds a `u32` attribute.
    pub fn u32(mut self, ty: u32, v: u32) -> Self {
        self.put(ty as u16, &v.to_ne_bytes());
        self
    }

    /// Adds a `u64` attribute.
    #[cfg(test)]
    pub fn u64(mut self, ty: u32, v: u64) -> Self {
        self.put(ty as u16, &v.to_ne_bytes());
        self
    }

    /// Adds a `u16` attribute.
    pub fn u16(mut self, ty: u32, v: u16) -> Self {
        self.put(ty as u16, &v.to_ne_bytes());
        self
    }

    /// Adds a binary attribute.
    pub fn binary(mut self, ty: u32, v: &[u8]) -> Self {
        self.put(ty as u16, v);
        self
    }

    /// Adds a flag attribute (no payload).
    pub fn flag(mut self, ty: u32) -> Self {
        self.put(ty as u16, &[]);
        self
    }

    /// Adds a NUL-terminated string attribute.
    pub fn str(mut self, ty: u32, s: &str) -> Self {
        let mut p = s.as_bytes().to_vec();
        p.push(0);
        self.put(ty as u16, &p);
        self
    }

    /// The encoded attributes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// A generic netlink family as the controller describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Family {
    /// The family id: the `nlmsg_type` of its messages.
    pub id: u16,
    /// Its multicast groups: (name, id).
    pub groups: Vec<(String, u32)>,
}

impl Family {
    /// Decodes a `CTRL_CMD_GETFAMILY` reply.
    fn decode(reply: &[u8]) -> Result<Self, Error> {
        let id = Attrs::new(reply)
            .get(CTRL_ATTR_FAMILY_ID)
            .and_then(attr::u16)
            .ok_or_else(|| Error::Protocol("family reply without an id".into()))?;
        let mut groups = Vec::new();
        if let Some(list) = Attrs::new(reply).get(CTRL_ATTR_MCAST_GROUPS) {
            // A nest of nests, each indexed 1, 2, ... and holding a name and an id.
            for (_, g) in Attrs::new(list) {
                let name = Attrs::new(g)
                    .get(CTRL_ATTR_MCAST_GRP_NAME)
                    .and_then(attr::string);
                let id = Attrs::new(g)
                    .get(CTRL_ATTR_MCAST_GRP_ID)
                    .and_then(attr::u32);
                if let (Some(name), Some(id)) = (name, id) {
                    groups.push((name, id));
                }
            }
        }
        Ok(Family { id, groups })
    }

    /// The id of the multicast group `name`.
    pub fn group(&self, name: &str) -> Option<u32> {
        self.groups
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| *id)
    }
}

/// A notification: the generic netlink command and the attributes after the
/// genetlink header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The family that sent it.
    pub family: u16,
    pub cmd: u8,
    pub payload: Vec<u8>,
}

/// An open generic netlink socket.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    /// Opens and binds a socket with extended acks enabled.
    pub fn open() -> Result<Self, Error> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: zeroed sockaddr_nl is a valid "any" address.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `sa` is a valid sockaddr_nl of the given size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error().into());
        }
        for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
            let one: libc::c_int = 1;
            // SAFETY: `one` is a valid c_int option value. Older kernels may refuse;
            // errors then simply come without extack.
            unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    SOL_NETLINK,
                    opt,
                    &one as *const _ as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
        }
        Ok(Self {
            fd,
            seq: std::process::id().wrapping_mul(1000),
            buf: vec![0; 1 << 20],
        })
    }

    /// The generic netlink family `name`: its id and multicast groups.
    pub fn family(&mut self, name: &str) -> Result<Family, Error> {
        let req = Builder::new().str(CTRL_ATTR_FAMILY_NAME as u32, name);
        let replies = match self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, 0, req.bytes()) {
            Err(Error::Kernel(k)) if k.errno == libc::ENOENT => {
                return Err(Error::NoFamily(name.to_string()))
            }
            r => r?,
        };
        let reply = replies
            .first()
            .ok_or_else(|| Error::Protocol("no reply to CTRL_CMD_GETFAMILY".into()))?;
        Family::decode(reply)
    }

    /// Joins the multicast group `group`: its notifications then arrive through
    /// [`Socket::events`].
    pub fn subscribe(&mut self, group: u32) -> Result<(), Error> {
        // Notifications come in bursts (every session of a failed device at
        // once); a larger receive buffer makes overruns rarer. The kernel caps
        // it at net.core.rmem_max, and a failure only leaves the default.
        let size: libc::c_int = 1 << 20;
        // SAFETY: `size` is a valid c_int option value of the given size.
        unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        // SAFETY: `group` is a valid u32 option value of the given size.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                SOL_NETLINK,
                NETLINK_ADD_MEMBERSHIP,
                &group as *const _ as *const libc::c_void,
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(())
    }

    /// Waits for the next datagram and returns the notifications of the
    /// `families` in it. An overrun (the kernel dropped notifications because the receive
    /// buffer was full) is `Error::Io` with `ENOBUFS`; the socket stays usable.
    pub fn events(&mut self, families: &[u16]) -> Result<Vec<Event>, Error> {
        let n = self.recv()?;
        parse_events(&self.buf[..n], families)
    }

    /// Receives one datagram into `buf`, retrying on `EINTR`; returns its length.
    fn recv(&mut self) -> Result<usize, Error> {
        loop {
            // SAFETY: `buf` is a valid writable buffer of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }

    /// Sends one request and returns the payloads (after the genetlink header) of
    /// every reply message: one for a `do`, any number for a dump.
    pub fn request(
        &mut self,
        family: u16,
        cmd: u8,
        version: u8,
        flags: u16,
        attrs: &[u8],
    ) -> Result<Vec<Vec<u8>>, Error> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let len = NLMSG_HDRLEN + GENL_HDRLEN + attrs.len();
        let mut msg = Vec::with_capacity(len);
        msg.extend_from_slice(&(len as u32).to_ne_bytes());
        msg.extend_from_slice(&family.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&[cmd, version, 0, 0]);
        msg.extend_from_slice(attrs);
        // SAFETY: `msg` is a valid buffer of `msg.len()` bytes.
        let sent = unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
        if sent < 0 {
            return Err(io::Error::last_os_error().into());
        }
        let mut replies = Vec::new();
        loop {
            let n = self.recv()?;
            let data = &self.buf[..n];
            match parse_datagram(data, seq, &msg, &mut replies)? {
                Status::More => continue,
                Status::Done => return Ok(replies),
            }
        }
    }
}

#[derive(Debug)]
enum Status {
    More,
    Done,
}

fn rd_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn rd_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn parse_datagram(
    mut data: &[u8],
    seq: u32,
    request: &[u8],
    replies: &mut Vec<Vec<u8>>,
) -> Result<Status, Error> {
    let short = || Error::Protocol("truncated netlink message".into());
    while !data.is_empty() {
        let len = rd_u32(data, 0).ok_or_else(short)? as usize;
        let ty = rd_u16(data, 4).ok_or_else(short)?;
        let flags = rd_u16(data, 6).ok_or_else(short)?;
        let mseq = rd_u32(data, 8).ok_or_else(short)?;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(short());
        }
        let msg = &data[..len];
        data = &data[len.next_multiple_of(4).min(data.len())..];
        if mseq != seq {
            continue; // a stale answer to an earlier request
        }
        match ty {
            NLMSG_ERROR => {
                let err = decode_error(msg, request)?;
                return if err.errno == 0 {
                    Ok(Status::Done)
                } else {
                    Err(Error::Kernel(err))
                };
            }
            NLMSG_DONE => {
                // A dump's end: an int status, then extack TLVs.
                let status = rd_u32(msg, NLMSG_HDRLEN).unwrap_or(0) as i32;
                if status < 0 {
                    let mut err = KernelError {
                        errno: -status,
                        ..Default::default()
                    };
                    if flags & NLM_F_ACK_TLVS != 0 {
                        decode_extack(&msg[(NLMSG_HDRLEN + 4).min(msg.len())..], request, &mut err);
                    }
                    return Err(Error::Kernel(err));
                }
                return Ok(Status::Done);
            }
            _ => {
                let payload = msg
                    .get(NLMSG_HDRLEN + GENL_HDRLEN..)
                    .ok_or_else(|| Error::Protocol("message shorter than its headers".into()))?;
                // A `do` reply or one dump entry; an ACK or NLMSG_DONE ends the list.
                replies.push(payload.to_vec());
            }
        }
    }
    Ok(Status::More)
}

/// The messages of `family` in a datagram of notifications; others are skipped.
fn parse_events(mut data: &[u8], families: &[u16]) -> Result<Vec<Event>, Error> {
    let short = || Error::Protocol("truncated netlink message".into());
    let mut events = Vec::new();
    while !data.is_empty() {
        let len = rd_u32(data, 0).ok_or_else(short)? as usize;
        let ty = rd_u16(data, 4).ok_or_else(short)?;
        if len < NLMSG_HDRLEN || len > data.len() {
            return Err(short());
        }
        let msg = &data[..len];
        data = &data[len.next_multiple_of(4).min(data.len())..];
        if !families.contains(&ty) {
            continue;
        }
        let cmd = *msg.get(NLMSG_HDRLEN).ok_or_else(short)?;
        let payload = msg.get(NLMSG_HDRLEN + GENL_HDRLEN..).ok_or_else(short)?;
        events.push(Event {
            family: ty,
            cmd,
            payload: payload.to_vec(),
        });
    }
    Ok(events)
}

/// Decodes an `NLMSG_ERROR` message (an error, or an ACK when `errno` is 0).
fn decode_error(msg: &[u8], request: &[u8]) -> Result<KernelError, Error> {
    let error = rd_u32(msg, NLMSG_HDRLEN)
        .ok_or_else(|| Error::Protocol("short NLMSG_ERROR".into()))? as i32;
    let flags = rd_u16(msg, 6).unwrap_or(0);
    let mut err = KernelError {
        errno: -error,
        ..Default::default()
    };
    if flags & NLM_F_ACK_TLVS != 0 {
        // struct nlmsgerr: error, then the request's header (and its payload unless
        // capped), then the TLVs.
        let orig = NLMSG_HDRLEN + 4;
        let skip = if flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            rd_u32(msg, orig).unwrap_or(0) as usize
        };
        if let Some(tlvs) = msg.get(orig + skip..) {
            decode_extack(tlvs, request, &mut err);
        }
    }
    Ok(err)
}

fn decode_extack(tlvs: &[u8], request: &[u8], err: &mut KernelError) {
    for (ty, payload) in Attrs::new(tlvs) {
        match ty {
            NLMSGERR_ATTR_MSG => {
                let s = payload.split(|&b| b == 0).next().unwrap_or_default();
                err.msg = Some(String::from_utf8_lossy(s).into_owned());
            }
            NLMSGERR_ATTR_OFFS => {
                // Offset of the offending attribute from the start of our request.
                err.bad_attr = attr::u32(payload)
                    .and_then(|off| rd_u16(request, off as usize + 2))
                    .map(|t| t & attr::TYPE_MASK);
            }
            NLMSGERR_ATTR_MISS_TYPE => err.missing_attr = attr::u32(payload).map(|t| t as u16),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NLM_F_MULTI: u16 = 0x02;

    fn nlmsg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(m.len().next_multiple_of(4), 0);
        m
    }

    fn request() -> Vec<u8> {
        // header + genl header + attribute type 2 ("name") at offset 20
        let attrs = Builder::new().str(2, "nope");
        let mut p = vec![3, 1, 0, 0];
        p.extend_from_slice(attrs.bytes());
        nlmsg(0x20, NLM_F_REQUEST, 7, &p)
    }

    fn error_reply(errno: i32, tlvs: &[u8], seq: u32) -> Vec<u8> {
        let mut p = (-errno).to_ne_bytes().to_vec();
        p.extend_from_slice(&request()[..NLMSG_HDRLEN]);
        p.extend_from_slice(tlvs);
        nlmsg(NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, seq, &p)
    }

    #[test]
    fn extack_message_and_offending_attribute() {
        let mut tlvs =
            Builder::new().str(NLMSGERR_ATTR_MSG as u32, "no RDMA device with this name");
        tlvs = tlvs.u32(NLMSGERR_ATTR_OFFS as u32, 20);
        let dgram = error_reply(libc::ENODEV, tlvs.bytes(), 7);
        let mut replies = Vec::new();
        match parse_datagram(&dgram, 7, &request(), &mut replies) {
            Err(Error::Kernel(k)) => {
                assert_eq!(k.errno, libc::ENODEV);
                assert_eq!(k.msg.as_deref(), Some("no RDMA device with this name"));
                assert_eq!(k.bad_attr, Some(2));
                assert_eq!(k.missing_attr, None);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_attribute() {
        let tlvs = Builder::new()
            .str(NLMSGERR_ATTR_MSG as u32, "Missing attribute")
            .u32(NLMSGERR_ATTR_MISS_TYPE as u32, 2);
        let dgram = error_reply(libc::EINVAL, tlvs.bytes(), 7);
        match parse_datagram(&dgram, 7, &request(), &mut Vec::new()) {
            Err(Error::Kernel(k)) => assert_eq!((k.errno, k.missing_attr), (libc::EINVAL, Some(2))),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn ack_ends_a_do_and_stale_sequence_is_skipped() {
        let mut dgram = nlmsg(0x20, 0, 6, &[1, 1, 0, 0, 8, 0, 1, 0, 5, 0, 0, 0]);
        dgram.extend(nlmsg(0x20, 0, 7, &[1, 1, 0, 0, 8, 0, 1, 0, 9, 0, 0, 0]));
        dgram.extend(error_reply(0, &[], 7));
        let mut replies = Vec::new();
        assert!(matches!(
            parse_datagram(&dgram, 7, &request(), &mut replies),
            Ok(Status::Done)
        ));
        assert_eq!(replies, vec![vec![8, 0, 1, 0, 9, 0, 0, 0]]);
    }

    #[test]
    fn dump_error_in_done() {
        let mut p = (-libc::EMSGSIZE).to_ne_bytes().to_vec();
        p.extend(
            Builder::new()
                .str(NLMSGERR_ATTR_MSG as u32, "too big")
                .bytes(),
        );
        let dgram = nlmsg(NLMSG_DONE, NLM_F_MULTI | NLM_F_ACK_TLVS, 7, &p);
        match parse_datagram(&dgram, 7, &request(), &mut Vec::new()) {
            Err(Error::Kernel(k)) => {
                assert_eq!(k.errno, libc::EMSGSIZE);
                assert_eq!(k.msg.as_deref(), Some("too big"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn family_with_multicast_groups() {
        let group = |idx: u16, name: &str, id: u32| {
            let inner = Builder::new()
                .str(CTRL_ATTR_MCAST_GRP_NAME as u32, name)
                .u32(CTRL_ATTR_MCAST_GRP_ID as u32, id);
            let mut v = ((inner.bytes().len() + 4) as u16).to_ne_bytes().to_vec();
            v.extend_from_slice(&(idx | 0x8000).to_ne_bytes());
            v.extend_from_slice(inner.bytes());
            v
        };
        let mut groups = group(1, "events", 42);
        groups.extend(group(2, "other", 43));
        let list = Builder::new().binary(CTRL_ATTR_MCAST_GROUPS as u32, &groups);
        let mut reply = Builder::new()
            .u16(CTRL_ATTR_FAMILY_ID as u32, 0x1f)
            .str(CTRL_ATTR_FAMILY_NAME as u32, "ferry")
            .bytes()
            .to_vec();
        reply.extend_from_slice(list.bytes());
        let f = Family::decode(&reply).unwrap();
        assert_eq!(f.id, 0x1f);
        assert_eq!(f.group("events"), Some(42));
        assert_eq!(f.group("other"), Some(43));
        assert_eq!(f.group("nope"), None);
        // An older kernel's family without groups still resolves.
        let f = Family::decode(Builder::new().u16(CTRL_ATTR_FAMILY_ID as u32, 3).bytes());
        assert_eq!(f.unwrap().groups, vec![]);
    }

    #[test]
    fn builder_pads_u16_and_binary() {
        let b = Builder::new().u16(3, 4791).binary(2, &[192, 0, 2, 1, 9]);
        let mut want = vec![6, 0, 3, 0];
        want.extend_from_slice(&4791u16.to_ne_bytes());
        want.extend_from_slice(&[0, 0, 9, 0, 2, 0, 192, 0, 2, 1, 9, 0, 0, 0]);
        assert_eq!(b.bytes(), &want[..]);
    }

    #[test]
    fn events_of_the_families_only() {
        let mut dgram = nlmsg(0x20, 0, 0, &[7, 1, 0, 0, 8, 0, 1, 0, 3, 0, 0, 0]);
        dgram.extend(nlmsg(0x21, 0, 0, &[1, 1, 0, 0]));
        dgram.extend(nlmsg(0x22, 0, 0, &[2, 1, 0, 0]));
        dgram.extend(nlmsg(0x20, 0, 0, &[8, 1, 0, 0]));
        let ev = parse_events(&dgram, &[0x20, 0x22]).unwrap();
        assert_eq!(
            ev,
            vec![
                Event {
                    family: 0x20,
                    cmd: 7,
                    payload: vec![8, 0, 1, 0, 3, 0, 0, 0]
                },
                Event {
                    family: 0x22,
                    cmd: 2,
                    payload: vec![]
                },
                Event {
                    family: 0x20,
                    cmd: 8,
                    payload: vec![]
                },
            ]
        );
        let mut bad = nlmsg(0x20, 0, 0, &[7, 1, 0, 0]);
        bad.truncate(18);
        assert!(parse_events(&bad, &[0x20]).is_err());
    }

    #[test]
    fn truncated_message_is_a_protocol_error() {
        let mut dgram = nlmsg(0x20, 0, 7, &[0; 8]);
        dgram.truncate(10);
        assert!(matches!(
            parse_datagram(&dgram, 7, &request(), &mut Vec::new()),
            Err(Error::Protocol(_))
        ));
    }
}
