// SPDX-License-Identifier: GPL-2.0

//! The payloads of requests and responses (message kinds 7 and 8).
//!
//! A request carries the requester's header and, when it moves data, the
//! regions the requester registered for the peer: each an address, a key and
//! a length. The peer moves the data with RDMA READ or WRITE against exactly
//! those regions, then answers with a response that carries a status, the
//! bytes it moved and the peer's own header. The header's cookie is the
//! request's tag in both.
//!
//! Since 1.1 a request's data to the peer may instead travel in the request
//! itself (flag [`INLINE`]), when it is at most what the peer announced in
//! its hello: no region, no RDMA READ, no invalidation.
//!
//! Request payload:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | direction: 0 no data, 1 to the peer (it reads), 2 from the peer (it writes) |
//! | 1 | region count, 0 to [`MAX_DESCS`]; 0 with [`INLINE`] |
//! | 2..4 | flags: bit 0 [`INLINE`] (1.1); the others zero |
//! | 4..8 | data length: the regions' lengths added up, or the inline bytes |
//! | 8..12 | header length |
//! | 12..16 | reserved, zero |
//! | 16.. | regions, 16 bytes each: address (u64), key (u32), length (u32) |
//! | then | with [`INLINE`]: the data |
//! | then | the header |
//!
//! Response payload:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | status: 0, or a negative errno (-4095 to -1) |
//! | 4..8 | bytes moved (at most the request's data length) |
//! | 8..16 | reserved, zero |
//! | 16.. | the response header |

use kernel::prelude::*;

use super::{le16, le32, le64, put16, put32, put64, Reason};

/// Most regions one request names.
pub(crate) const MAX_DESCS: usize = 8;
/// Most data one request moves.
pub(crate) const MAX_DATA: u32 = 64 << 20;
/// Request flag: the data (to the peer) follows the regions, which are none.
pub(crate) const INLINE: u16 = 1;

/// Which way a request's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Dir {
    /// No data.
    #[default]
    None = 0,
    /// The requester's data goes to the peer, which reads it.
    ToPeer = 1,
    /// The peer's data comes to the requester: the peer writes it.
    FromPeer = 2,
}

/// A region the requester registered for the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Desc {
    /// The region's address, as the requester's device knows it.
    pub(crate) addr: u64,
    /// The key that opens it.
    pub(crate) rkey: u32,
    /// Its length.
    pub(crate) len: u32,
}

/// A request's fixed part and regions; the header follows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct RequestHead {
    /// Which way the data goes.
    pub(crate) dir: Dir,
    /// The regions; `ndesc` of them are used.
    pub(crate) descs: [Desc; MAX_DESCS],
    /// How many regions.
    pub(crate) ndesc: usize,
    /// Their lengths added up, or the inline data's.
    pub(crate) data_len: u32,
    /// The data travels in the request (no regions).
    pub(crate) inline: bool,
}

impl RequestHead {
    /// Fixed bytes before the regions.
    pub(crate) const FIXED: usize = 16;
    /// Bytes per region.
    pub(crate) const DESC: usize = 16;

    /// Bytes of inline data.
    fn inline_len(&self) -> usize {
        if self.inline {
            self.data_len as usize
        } else {
            0
        }
    }

    /// Bytes the request's payload needs for this head and `hdr_len` bytes
    /// of header.
    pub(crate) fn len(&self, hdr_len: usize) -> usize {
        Self::FIXED + Self::DESC * self.ndesc + self.inline_len() + hdr_len
    }

    /// Writes the head and `hdr` into `b`, and lets `data` write the inline
    /// data (it gets exactly `data_len` bytes of `b` if the head is inline,
    /// and is not called otherwise); returns the bytes used, or `EMSGSIZE`
    /// if they do not fit.
    pub(crate) fn write(
        &self,
        hdr: &[u8],
        b: &mut [u8],
        data: impl FnOnce(&mut [u8]) -> Result,
    ) -> Result<usize> {
        let total = self.len(hdr.len());
        if b.len() < total || self.ndesc > MAX_DESCS || (self.inline && self.ndesc != 0) {
            return Err(EMSGSIZE);
        }
        b[..Self::FIXED].fill(0);
        b[0] = self.dir as u8;
        // CAST: at most `MAX_DESCS`.
        b[1] = self.ndesc as u8;
        if self.inline {
            put16(b, 2, INLINE);
            data(&mut b[Self::FIXED..Self::FIXED + self.inline_len()])?;
        }
        put32(b, 4, self.data_len);
        put32(b, 8, u32::try_from(hdr.len()).map_err(|_| EMSGSIZE)?);
        for (i, d) in self.descs[..self.ndesc].iter().enumerate() {
            let at = Self::FIXED + Self::DESC * i;
            put64(b, at, d.addr);
            put32(b, at + 8, d.rkey);
            put32(b, at + 12, d.len);
        }
        b[total - hdr.len()..total].copy_from_slice(hdr);
        Ok(total)
    }

    /// Parses and validates a request payload into its head, header and
    /// inline data (empty unless inline). The direction, region count and
    /// lengths must agree: no data without regions, no regions without data,
    /// no empty region, the lengths adding up to the data length, at most
    /// [`MAX_DATA`], and the payload exactly as long as the head says. Inline
    /// data goes to this side, without regions, and is at most
    /// `max_inline` bytes (what this side announced); no unknown flag.
    pub(crate) fn parse(b: &[u8], max_inline: u32) -> Result<(Self, &[u8], &[u8]), Reason> {
        if b.len() < Self::FIXED {
            return Err(Reason::ProtocolError);
        }
        let flags = le16(b, 2);
        if flags & !INLINE != 0 {
            return Err(Reason::ProtocolError);
        }
        let inline = flags & INLINE != 0;
        let dir = match b[0] {
            0 => Dir::None,
            1 => Dir::ToPeer,
            2 => Dir::FromPeer,
            _ => return Err(Reason::ProtocolError),
        };
        let ndesc = usize::from(b[1]);
        let data_len = le32(b, 4);
        let hdr_len = le32(b, 8) as usize;
        if ndesc > MAX_DESCS || data_len > MAX_DATA {
            return Err(Reason::ProtocolError);
        }
        if inline {
            if dir != Dir::ToPeer || ndesc != 0 || data_len == 0 || data_len > max_inline {
                return Err(Reason::ProtocolError);
            }
        } else if (dir == Dir::None) != (ndesc == 0) || (ndesc == 0) != (data_len == 0) {
            return Err(Reason::ProtocolError);
        }
        let mut head = Self {
            dir,
            descs: [Desc::default(); MAX_DESCS],
            ndesc,
            data_len,
            inline,
        };
        if hdr_len > b.len() || b.len() != head.len(hdr_len) {
            return Err(Reason::ProtocolError);
        }
        let mut sum = 0u64;
        for i in 0..ndesc {
            let at = Self::FIXED + Self::DESC * i;
            let d = Desc {
                addr: le64(b, at),
                rkey: le32(b, at + 8),
                len: le32(b, at + 12),
            };
            if d.len == 0 || d.addr.checked_add(u64::from(d.len)).is_none() {
                return Err(Reason::ProtocolError);
            }
            sum += u64::from(d.len);
            head.descs[i] = d;
        }
        if !inline && sum != u64::from(data_len) {
            return Err(Reason::ProtocolError);
        }
        let data = &b[Self::FIXED..Self::FIXED + head.inline_len()];
        Ok((head, &b[b.len() - hdr_len..], data))
    }
}

/// A response's fixed part; the header follows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    /// 0 or a negative errno.
    pub(crate) status: i32,
    /// Bytes the peer moved.
    pub(crate) moved: u32,
}

impl ResponseHead {
    /// Fixed bytes before the header.
    pub(crate) const FIXED: usize = 16;

    /// Writes the head and `hdr` into `b`; returns the bytes used.
    pub(crate) fn write(&self, hdr: &[u8], b: &mut [u8]) -> Result<usize> {
        let total = Self::FIXED + hdr.len();
        if b.len() < total {
            return Err(EMSGSIZE);
        }
        b[..Self::FIXED].fill(0);
        // CAST: the bits of the two's complement value.
        put32(b, 0, self.status as u32);
        put32(b, 4, self.moved);
        b[Self::FIXED..total].copy_from_slice(hdr);
        Ok(total)
    }

    /// Parses a response to a request that moved at most `data_len` bytes.
    pub(crate) fn parse(b: &[u8], data_len: u32) -> Result<(Self, &[u8]), Reason> {
        if b.len() < Self::FIXED {
            return Err(Reason::ProtocolError);
        }
        // CAST: the bits of the two's complement value.
        let status = le32(b, 0) as i32;
        let moved = le32(b, 4);
        if !(-4095..=0).contains(&status) || moved > data_len {
            return Err(Reason::ProtocolError);
        }
        Ok((Self { status, moved }, &b[Self::FIXED..]))
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_wire_request)]
mod tests {
    use super::*;

    fn head(dir: Dir, lens: &[u32]) -> RequestHead {
        let mut h = RequestHead {
            dir,
            descs: [Desc::default(); MAX_DESCS],
            ndesc: lens.len(),
            data_len: lens.iter().sum(),
            inline: false,
        };
        for (i, &len) in lens.iter().enumerate() {
            h.descs[i] = Desc {
                addr: 0x1000 * (i as u64 + 1),
                rkey: 0x100 + i as u32,
                len,
            };
        }
        h
    }

    #[test]
    fn requests_round_trip() {
        let mut b = [0u8; 256];
        for (dir, lens) in [
            (Dir::None, &[][..]),
            (Dir::ToPeer, &[4096][..]),
            (Dir::FromPeer, &[2 << 20, 2 << 20][..]),
        ] {
            let h = head(dir, lens);
            let n = h.write(b"hdr!", &mut b, |_| Err(EINVAL)).unwrap();
            assert_eq!(n, h.len(4));
            let (p, hdr, data) = RequestHead::parse(&b[..n], 0).unwrap();
            assert_eq!(p, h);
            assert_eq!(hdr, b"hdr!");
            assert!(data.is_empty());
        }
        // Too small a buffer.
        assert!(head(Dir::ToPeer, &[1])
            .write(&[0; 64], &mut b[..60], |_| Ok(()))
            .is_err());
    }

    /// A change made to a copy of a request.
    type Spoil<'a> = &'a dyn Fn(&mut [u8]);

    /// Checks that the `n`-byte request in `b` is refused truncated at every
    /// length and padded, and returns a check that it is refused once a
    /// change has spoiled a copy of it.
    fn spoiler(b: [u8; 256], n: usize) -> impl Fn(Spoil<'_>) -> bool {
        for len in 0..n {
            assert!(RequestHead::parse(&b[..len], 4096).is_err());
        }
        assert!(RequestHead::parse(&b[..n + 1], 4096).is_err());
        move |f: Spoil<'_>| {
            let mut c = b;
            f(&mut c[..n]);
            RequestHead::parse(&c[..n], 4096).is_err()
        }
    }

    fn inline(len: u32) -> RequestHead {
        RequestHead {
            dir: Dir::ToPeer,
            descs: [Desc::default(); MAX_DESCS],
            ndesc: 0,
            data_len: len,
            inline: true,
        }
    }

    #[test]
    fn inline_requests_round_trip_and_are_checked() {
        let mut b = [0u8; 256];
        let h = inline(100);
        let n = h
            .write(b"hdr", &mut b, |d| {
                assert_eq!(d.len(), 100);
                d.fill(0x5a);
                Ok(())
            })
            .unwrap();
        assert_eq!(n, RequestHead::FIXED + 100 + 3);
        let (p, hdr, data) = RequestHead::parse(&b[..n], 100).unwrap();
        assert_eq!((p, hdr), (h, &b"hdr"[..]));
        assert!(data.len() == 100 && data.iter().all(|&c| c == 0x5a));
        // More than this side announced, or none announced (a 1.0 side).
        assert!(RequestHead::parse(&b[..n], 99).is_err());
        assert!(RequestHead::parse(&b[..n], 0).is_err());
        // The writer's failure is the write's.
        assert_eq!(h.write(b"hdr", &mut b, |_| Err(EIO)), Err(EIO));
        let bad = spoiler(b, n);
        // Data that claims to be longer or shorter.
        assert!(bad(&|c| put32(c, 4, 101)));
        assert!(bad(&|c| put32(c, 4, 99)));
        assert!(bad(&|c| put32(c, 4, 0)));
        // Inline data from the peer, without direction, or beside regions.
        assert!(bad(&|c| c[0] = Dir::FromPeer as u8));
        assert!(bad(&|c| c[0] = Dir::None as u8));
        assert!(bad(&|c| c[1] = 1));
        // Unknown flags.
        assert!(bad(&|c| put16(c, 2, INLINE | 2)));
        assert!(bad(&|c| put16(c, 2, 0x8000)));
        // A head that claims regions and inline data is never written.
        let mut both = inline(10);
        both.ndesc = 1;
        assert!(both.write(b"", &mut b, |_| Ok(())).is_err());
    }

    #[test]
    fn requests_that_lie_are_refused() {
        let mut b = [0u8; 256];
        let h = head(Dir::FromPeer, &[4096, 8192]);
        let n = h.write(b"x", &mut b, |_| Ok(())).unwrap();
        let bad = spoiler(b, n);
        // Regions that claim to be inline.
        assert!(bad(&|c| put16(c, 2, INLINE)));
        // Unknown direction.
        assert!(bad(&|c| c[0] = 3));
        // Data without regions, regions without data, too many regions.
        assert!(bad(&|c| c[0] = 0));
        assert!(bad(&|c| c[1] = 0));
        assert!(bad(&|c| c[1] = MAX_DESCS as u8 + 1));
        // Lengths that do not add up, one empty region, too much data.
        assert!(bad(&|c| put32(c, 4, 4096 + 8192 + 1)));
        assert!(bad(&|c| put32(c, 16 + 12, 0)));
        assert!(bad(&|c| put32(c, 4, MAX_DATA + 1)));
        // A region that wraps around the address space.
        assert!(bad(&|c| put64(c, 16, u64::MAX - 10)));
        // A header length that lies.
        assert!(bad(&|c| put32(c, 8, 2)));
        assert!(bad(&|c| put32(c, 8, u32::MAX)));
    }

    #[test]
    fn responses_round_trip_and_are_checked() {
        let mut b = [0u8; 64];
        let r = ResponseHead {
            status: -5,
            moved: 4096,
        };
        let n = r.write(b"ok", &mut b).unwrap();
        assert_eq!(ResponseHead::parse(&b[..n], 4096), Ok((r, &b"ok"[..])));
        // More moved than asked for, a status that is no errno, truncation.
        assert!(ResponseHead::parse(&b[..n], 4095).is_err());
        put32(&mut b, 0, 1);
        assert!(ResponseHead::parse(&b[..n], 4096).is_err());
        put32(&mut b, 0, (-4096i32) as u32);
        assert!(ResponseHead::parse(&b[..n], 4096).is_err());
        assert!(ResponseHead::parse(&b[..15], 4096).is_err());
    }
}
