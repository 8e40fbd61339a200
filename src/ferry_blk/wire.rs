// SPDX-License-Identifier: GPL-2.0

//! ferry_blk's protocol, version 1: the headers of its requests and
//! messages over a ferry session, and the checks a target makes before it
//! touches a disk (Documentation/blk.md, "Protocol").
//!
//! Everything is little-endian. A client opens the session to service
//! [`SERVICE`] and names an export in an [`Open`] request; the target's
//! answer ([`Opened`]) describes the disk. Each block operation is then one
//! ferry request whose header is an [`Io`]: a read's data comes into the
//! client's pages (the target writes them by RDMA), a write's goes to the
//! target (which reads them, or finds them inline), and the status is
//! ferry's response status (0 or a negative errno). The target tells the
//! client of a new capacity, or of the export's removal, in a [`Notice`]
//! message.

use kernel::prelude::*;

use crate::block::mq::{Flags, Op};

/// The service a target offers.
pub(crate) const SERVICE: &CStr = c"ferry_blk";

/// This protocol's version.
pub(crate) const VERSION: u8 = 2;

/// "FBLK", the first bytes of an [`Open`].
const MAGIC: u32 = u32::from_le_bytes(*b"FBLK");

/// The longest export name, in bytes: `[a-z0-9._-]`.
pub(crate) const NAME_MAX: usize = 31;

/// Why a request was refused: each maps to the errno the client's I/O
/// fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a header of this protocol, or a version the side does not speak.
    Malformed,
    /// An operation or flag this version does not have.
    UnknownOp,
    /// No export of that name, or no open handle of that number.
    UnknownExport,
    /// A sector range beyond the capacity, or not in whole logical blocks.
    OutOfRange,
    /// The data does not match the length, or the operation takes none.
    BadLength,
    /// A write to a read-only export or mapping.
    ReadOnly,
    /// The export is mapped read-write by another client already.
    Busy,
    /// An open of a mapping whose earlier session still has operations at
    /// work on the export: the client tries again (a write of the old
    /// connection must land before any newer one can be sent).
    Fenced,
    /// A request of a session whose mapping a newer session has opened
    /// again, or that ended: it must not reach the disk any more; or an
    /// open older than the one its mapping's newer session made.
    Replaced,
}

impl Refusal {
    /// The errno a client's I/O fails with.
    pub(crate) fn errno(self) -> Error {
        match self {
            Self::Malformed | Self::UnknownOp => EOPNOTSUPP,
            Self::UnknownExport => ENODEV,
            Self::OutOfRange | Self::BadLength => EINVAL,
            Self::ReadOnly => EROFS,
            Self::Busy => EBUSY,
            Self::Fenced => EAGAIN,
            Self::Replaced => ESTALE,
        }
    }

    /// What the log says.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Malformed => "a malformed header",
            Self::UnknownOp => "an unknown operation or flag",
            Self::UnknownExport => "an unknown export or handle",
            Self::OutOfRange => "sectors beyond the capacity or not in whole blocks",
            Self::BadLength => "data that does not match its length",
            Self::ReadOnly => "a write to a read-only export",
            Self::Busy => "an export mapped read-write elsewhere",
            Self::Fenced => {
                "an open while the mapping's earlier session still has operations at work"
            }
            Self::Replaced => "a request of a session replaced by a newer one of its mapping",
        }
    }
}

/// An export's name: 1 to [`NAME_MAX`] bytes of `[a-z0-9._-]`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExportName {
    bytes: [u8; NAME_MAX],
    len: u8,
}

impl ExportName {
    /// `name`, if it is one.
    pub(crate) fn new(name: &[u8]) -> Option<Self> {
        let ok = !name.is_empty()
            && name.len() <= NAME_MAX
            && name
                .iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(&c));
        if !ok {
            return None;
        }
        let mut bytes = [0; NAME_MAX];
        bytes[..name.len()].copy_from_slice(name);
        // CAST: at most `NAME_MAX`.
        Some(Self {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name's bytes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl kernel::fmt::Display for ExportName {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        // Only `[a-z0-9._-]`: ASCII.
        f.write_str(core::str::from_utf8(self.as_bytes()).unwrap_or("?"))
    }
}

/// A client's request to use an export (the first request of a session,
/// and again after each reconnect).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Open {
    pub(crate) name: ExportName,
    /// The client maps it read-only.
    pub(crate) read_only: bool,
    /// The mapping's own random id: a reconnected mapping's new session
    /// takes the place of its old one (never another client's).
    pub(crate) mapping: u64,
    /// The open's number within its mapping (the map's own is 0, each
    /// reopen after a reconnect the next): an older open never takes the
    /// place of a newer one.
    pub(crate) attempt: u32,
}

/// [`Open`]'s encoded size: magic, version, flags, 2 reserved, the
/// mapping's id, the name padded with zeroes, the attempt.
pub(crate) const OPEN_LEN: usize = 16 + NAME_MAX + 1 + 4;

impl Open {
    /// The header.
    pub(crate) fn encode(&self) -> [u8; OPEN_LEN] {
        let mut b = [0; OPEN_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = u8::from(self.read_only);
        b[8..16].copy_from_slice(&self.mapping.to_le_bytes());
        b[16..16 + self.name.as_bytes().len()].copy_from_slice(self.name.as_bytes());
        b[48..52].copy_from_slice(&self.attempt.to_le_bytes());
        b
    }

    /// Parses a header, as the target does.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Refusal> {
        if b.len() != OPEN_LEN || u32::from_le_bytes([b[0], b[1], b[2], b[3]]) != MAGIC {
            return Err(Refusal::Malformed);
        }
        if b[4] != VERSION || b[5] > 1 || b[6] != 0 || b[7] != 0 {
            return Err(Refusal::Malformed);
        }
        let name = &b[16..48];
        let len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        // The padding is zeroes, all of it.
        if name[len..].iter().any(|&c| c != 0) {
            return Err(Refusal::Malformed);
        }
        let mut mapping = [0; 8];
        mapping.copy_from_slice(&b[8..16]);
        Ok(Self {
            name: ExportName::new(&name[..len]).ok_or(Refusal::UnknownExport)?,
            read_only: b[5] == 1,
            mapping: u64::from_le_bytes(mapping),
            attempt: u32::from_le_bytes([b[48], b[49], b[50], b[51]]),
        })
    }
}

/// What a target tells of an export it opened for a client: the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Opened {
    /// What the client's I/O names the export by.
    pub(crate) handle: u32,
    /// Capacity, in 512-byte sectors.
    pub(crate) sectors: u64,
    pub(crate) logical_block_size: u32,
    pub(crate) physical_block_size: u32,
    /// The most sectors of one discard (0: no discard).
    pub(crate) max_discard_sectors: u32,
    pub(crate) discard_granularity: u32,
    /// The most sectors of one write of zeroes (always offered).
    pub(crate) max_write_zeroes_sectors: u32,
    pub(crate) read_only: bool,
    pub(crate) write_cache: bool,
    pub(crate) fua: bool,
    pub(crate) rotational: bool,
    /// The export's identity (a UUID, never all zeroes): a reconnect that
    /// finds another has reached another disk.
    pub(crate) id: [u8; 16],
}

/// [`Opened`]'s encoded size.
pub(crate) const OPENED_LEN: usize = 56;

const F_READ_ONLY: u32 = 1 << 0;
const F_WRITE_CACHE: u32 = 1 << 1;
const F_FUA: u32 = 1 << 2;
const F_ROTATIONAL: u32 = 1 << 3;
const F_ALL: u32 = F_READ_ONLY | F_WRITE_CACHE | F_FUA | F_ROTATIONAL;

impl Opened {
    /// The response header.
    pub(crate) fn encode(&self) -> [u8; OPENED_LEN] {
        let mut b = [0; OPENED_LEN];
        b[40..56].copy_from_slice(&self.id);
        let flags = [
            (self.read_only, F_READ_ONLY),
            (self.write_cache, F_WRITE_CACHE),
            (self.fua, F_FUA),
            (self.rotational, F_ROTATIONAL),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, f)| acc | f);
        b[0] = VERSION;
        b[4..8].copy_from_slice(&self.handle.to_le_bytes());
        b[8..16].copy_from_slice(&self.sectors.to_le_bytes());
        b[16..20].copy_from_slice(&self.logical_block_size.to_le_bytes());
        b[20..24].copy_from_slice(&self.physical_block_size.to_le_bytes());
        b[24..28].copy_from_slice(&self.max_discard_sectors.to_le_bytes());
        b[28..32].copy_from_slice(&self.discard_granularity.to_le_bytes());
        b[32..36].copy_from_slice(&self.max_write_zeroes_sectors.to_le_bytes());
        b[36..40].copy_from_slice(&flags.to_le_bytes());
        b
    }

    /// Parses a target's answer, as the client does: what a block layer
    /// would refuse (a block size that is not a power of two from 512 to a
    /// page, a physical one smaller than it) is malformed.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Refusal> {
        if b.len() != OPENED_LEN || b[0] != VERSION || b[1..4] != [0; 3] {
            return Err(Refusal::Malformed);
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let flags = u32_at(36);
        let mut id = [0; 16];
        id.copy_from_slice(&b[40..56]);
        let o = Self {
            handle: u32_at(4),
            sectors: u64::from(u32_at(8)) | u64::from(u32_at(12)) << 32,
            logical_block_size: u32_at(16),
            physical_block_size: u32_at(20),
            max_discard_sectors: u32_at(24),
            discard_granularity: u32_at(28),
            max_write_zeroes_sectors: u32_at(32),
            read_only: flags & F_READ_ONLY != 0,
            write_cache: flags & F_WRITE_CACHE != 0,
            fua: flags & F_FUA != 0,
            rotational: flags & F_ROTATIONAL != 0,
            id,
        };
        let lbs = o.logical_block_size;
        let good = flags & !F_ALL == 0
            && o.id != [0; 16]
            && lbs.is_power_of_two()
            && (512..=4096).contains(&lbs)
            && o.physical_block_size.is_power_of_two()
            && o.physical_block_size >= lbs
            && o.sectors <= MAX_SECTORS
            && o.sectors % u64::from(lbs / 512) == 0;
        if good {
            Ok(o)
        } else {
            Err(Refusal::Malformed)
        }
    }
}

/// A block operation on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoOp {
    Read = 1,
    Write = 2,
    Flush = 3,
    Discard = 4,
    WriteZeroes = 5,
}

impl IoOp {
    fn from_raw(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Read,
            2 => Self::Write,
            3 => Self::Flush,
            4 => Self::Discard,
            5 => Self::WriteZeroes,
            _ => return None,
        })
    }

    /// Whether the operation changes the disk.
    pub(crate) fn writes(self) -> bool {
        !matches!(self, Self::Read | Self::Flush)
    }
}

/// Forced unit access (a write).
pub(crate) const IO_FUA: u16 = 1 << 0;
/// Keep the blocks allocated (a write of zeroes).
pub(crate) const IO_NOUNMAP: u16 = 1 << 1;

/// One block operation: a request's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Io {
    pub(crate) op: IoOp,
    /// [`IO_FUA`], [`IO_NOUNMAP`].
    pub(crate) flags: u16,
    /// The export, as [`Opened::handle`] named it.
    pub(crate) handle: u32,
    /// First 512-byte sector.
    pub(crate) sector: u64,
    /// Bytes covered (a read's or write's data; a discard's or write of
    /// zeroes' range; 0 for a flush).
    pub(crate) len: u32,
}

/// [`Io`]'s encoded size.
pub(crate) const IO_LEN: usize = 24;

impl Io {
    /// What a client sends for a block request of `op` with `flags`,
    /// covering `len` bytes from `sector`: `None` for an operation ferry_blk
    /// does not carry. PREFLUSH never becomes FUA (the block layer sends a
    /// flush of its own before a write that asks for one), and NOUNMAP is
    /// kept.
    pub(crate) fn from_block(
        op: Op,
        flags: Flags,
        handle: u32,
        sector: u64,
        len: u32,
    ) -> Option<Self> {
        let (op, flags) = match op {
            Op::Read => (IoOp::Read, 0),
            Op::Write => (IoOp::Write, if flags.fua { IO_FUA } else { 0 }),
            Op::Flush => (IoOp::Flush, 0),
            Op::Discard => (IoOp::Discard, 0),
            Op::WriteZeroes => (
                IoOp::WriteZeroes,
                if flags.nounmap { IO_NOUNMAP } else { 0 },
            ),
            Op::Other(_) => return None,
        };
        // A flush covers nothing: blk-mq's flush request has no sector (it
        // reads as all ones).
        let (sector, len) = if op == IoOp::Flush {
            (0, 0)
        } else {
            (sector, len)
        };
        Some(Self {
            op,
            flags,
            handle,
            sector,
            len,
        })
    }

    /// The header.
    pub(crate) fn encode(&self) -> [u8; IO_LEN] {
        let mut b = [0; IO_LEN];
        b[0] = VERSION;
        b[1] = self.op as u8;
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.handle.to_le_bytes());
        b[8..16].copy_from_slice(&self.sector.to_le_bytes());
        b[16..20].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses a header, as the target does: the version, the operation and
    /// its flags (FUA only on a write, NOUNMAP only on a write of zeroes).
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Refusal> {
        if b.len() != IO_LEN || b[0] != VERSION || b[20..24] != [0; 4] {
            return Err(Refusal::Malformed);
        }
        let op = IoOp::from_raw(b[1]).ok_or(Refusal::UnknownOp)?;
        let flags = u16::from_le_bytes([b[2], b[3]]);
        let allowed = match op {
            IoOp::Write => IO_FUA,
            IoOp::WriteZeroes => IO_NOUNMAP,
            _ => 0,
        };
        if flags & !allowed != 0 {
            return Err(Refusal::UnknownOp);
        }
        let mut sector = [0; 8];
        sector.copy_from_slice(&b[8..16]);
        Ok(Self {
            op,
            flags,
            handle: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            sector: u64::from_le_bytes(sector),
            len: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
        })
    }

    /// Checks the operation against its export (`sectors` of capacity,
    /// `lbs` a logical block, opened `read_only` or not) and the data the
    /// request carries (`data` bytes; a read's room, a write's data).
    pub(crate) fn check(
        &self,
        sectors: u64,
        lbs: u32,
        read_only: bool,
        data: u32,
    ) -> Result<(), Refusal> {
        if read_only && self.op.writes() {
            return Err(Refusal::ReadOnly);
        }
        let want = match self.op {
            IoOp::Read | IoOp::Write => self.len,
            IoOp::Flush | IoOp::Discard | IoOp::WriteZeroes => 0,
        };
        if data != want || (self.op == IoOp::Flush && (self.len != 0 || self.sector != 0)) {
            return Err(Refusal::BadLength);
        }
        if self.op == IoOp::Flush {
            return Ok(());
        }
        if lbs < 512 {
            return Err(Refusal::OutOfRange);
        }
        let lbs_sectors = u64::from(lbs / 512).max(1);
        let len_sectors = u64::from(self.len / 512);
        let whole = self.len != 0
            && self.len % lbs == 0
            && self.sector % lbs_sectors == 0
            && self
                .sector
                .checked_add(len_sectors)
                .is_some_and(|end| end <= sectors);
        if whole {
            Ok(())
        } else {
            Err(Refusal::OutOfRange)
        }
    }
}

/// What a target tells a client on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notice {
    /// The export `handle` now has `sectors`.
    Resized { handle: u32, sectors: u64 },
    /// The export `handle` was deleted: no more I/O to it.
    Deleted { handle: u32 },
}

/// The largest capacity, in sectors, a disk may have: its size in bytes
/// must fit a `loff_t`.
pub(crate) const MAX_SECTORS: u64 = (i64::MAX as u64) >> 9;

/// [`Notice`]'s encoded size.
pub(crate) const NOTICE_LEN: usize = 16;

impl Notice {
    /// The message.
    pub(crate) fn encode(&self) -> [u8; NOTICE_LEN] {
        let mut b = [0; NOTICE_LEN];
        b[0] = VERSION;
        match *self {
            Self::Resized { handle, sectors } => {
                b[1] = 1;
                b[4..8].copy_from_slice(&handle.to_le_bytes());
                b[8..16].copy_from_slice(&sectors.to_le_bytes());
            }
            Self::Deleted { handle } => {
                b[1] = 2;
                b[4..8].copy_from_slice(&handle.to_le_bytes());
            }
        }
        b
    }

    /// Parses a message, as a client does.
    pub(crate) fn decode(b: &[u8]) -> Result<Self, Refusal> {
        if b.len() != NOTICE_LEN || b[0] != VERSION || b[2..4] != [0; 2] {
            return Err(Refusal::Malformed);
        }
        let handle = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let mut sectors = [0; 8];
        sectors.copy_from_slice(&b[8..16]);
        match b[1] {
            1 if u64::from_le_bytes(sectors) <= MAX_SECTORS => Ok(Self::Resized {
                handle,
                sectors: u64::from_le_bytes(sectors),
            }),
            2 if sectors == [0; 8] => Ok(Self::Deleted { handle }),
            _ => Err(Refusal::Malformed),
        }
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_blk_wire)]
mod tests {
    use super::*;

    fn name(s: &[u8]) -> ExportName {
        ExportName::new(s).unwrap()
    }

    #[test]
    fn export_names_are_short_and_plain() {
        assert!(ExportName::new(b"disk0").is_some());
        assert!(ExportName::new(b"a.b_c-1").is_some());
        assert!(ExportName::new(b"").is_none());
        assert!(ExportName::new(b"Disk").is_none());
        assert!(ExportName::new(b"a/b").is_none());
        assert!(ExportName::new(&[b'a'; NAME_MAX + 1]).is_none());
        assert!(ExportName::new(&[b'a'; NAME_MAX]).is_some());
    }

    #[test]
    fn open_round_trips_and_rejects_the_rest() {
        let o = Open {
            name: name(b"ram0"),
            read_only: true,
            mapping: 0x0123_4567_89ab_cdef,
            attempt: 0x8000_0001,
        };
        let b = o.encode();
        assert!(Open::decode(&b) == Ok(o));
        assert_eq!(b[48..52], [1, 0, 0, 0x80]);
        assert!(Open::decode(&b[..OPEN_LEN - 1]) == Err(Refusal::Malformed));
        let mut bad = b;
        bad[4] = VERSION + 1;
        assert!(Open::decode(&bad) == Err(Refusal::Malformed));
        let mut bad = b;
        bad[5] = 2;
        assert!(Open::decode(&bad) == Err(Refusal::Malformed));
        // Bytes after the name's end: not padding.
        let mut bad = b;
        bad[47] = b'x';
        assert!(Open::decode(&bad) == Err(Refusal::Malformed));
        let mut bad = b;
        bad[16] = b'/';
        assert!(Open::decode(&bad) == Err(Refusal::UnknownExport));
    }

    #[test]
    fn opened_round_trips_and_checks_block_sizes() {
        let o = Opened {
            handle: 7,
            sectors: 1 << 33,
            logical_block_size: 4096,
            physical_block_size: 4096,
            max_discard_sectors: 1 << 20,
            discard_granularity: 4096,
            max_write_zeroes_sectors: 1 << 16,
            read_only: false,
            write_cache: true,
            fua: true,
            rotational: false,
            id: *b"0123456789abcdef",
        };
        assert_eq!(Opened::decode(&o.encode()), Ok(o));
        // No identity.
        let bad = Opened { id: [0; 16], ..o };
        assert_eq!(Opened::decode(&bad.encode()), Err(Refusal::Malformed));
        for (lbs, pbs) in [(1000, 4096), (8192, 8192), (256, 512), (4096, 512)] {
            let bad = Opened {
                logical_block_size: lbs,
                physical_block_size: pbs,
                ..o
            };
            assert_eq!(Opened::decode(&bad.encode()), Err(Refusal::Malformed));
        }
        // A capacity that is not whole logical blocks.
        let bad = Opened { sectors: 9, ..o };
        assert_eq!(Opened::decode(&bad.encode()), Err(Refusal::Malformed));
        // A capacity too large for the block layer.
        let bad = Opened {
            sectors: MAX_SECTORS + 1,
            logical_block_size: 512,
            ..o
        };
        assert_eq!(Opened::decode(&bad.encode()), Err(Refusal::Malformed));
        let mut b = o.encode();
        b[39] = 0x80;
        assert_eq!(Opened::decode(&b), Err(Refusal::Malformed));
    }

    #[test]
    fn block_operations_map_as_the_block_layer_means_them() {
        let f = |fua, preflush, nounmap| Flags {
            fua,
            preflush,
            nounmap,
        };
        let io = |op, flags| Io::from_block(op, flags, 3, 8, 4096).map(|i| (i.op, i.flags));
        assert_eq!(io(Op::Read, f(false, false, false)), Some((IoOp::Read, 0)));
        assert_eq!(
            io(Op::Write, f(true, false, false)),
            Some((IoOp::Write, IO_FUA))
        );
        // PREFLUSH is not FUA: the block layer flushes on its own first.
        assert_eq!(io(Op::Write, f(false, true, false)), Some((IoOp::Write, 0)));
        assert_eq!(io(Op::Flush, f(false, true, false)), Some((IoOp::Flush, 0)));
        assert_eq!(
            io(Op::Discard, f(false, false, false)),
            Some((IoOp::Discard, 0))
        );
        // NOUNMAP is kept.
        assert_eq!(
            io(Op::WriteZeroes, f(false, false, true)),
            Some((IoOp::WriteZeroes, IO_NOUNMAP))
        );
        assert_eq!(
            io(Op::WriteZeroes, f(false, false, false)),
            Some((IoOp::WriteZeroes, 0))
        );
        assert_eq!(io(Op::Other(35), f(false, false, false)), None);
        // A flush covers nothing, whatever blk-mq's flush request says (its
        // sector is all ones), and passes the target's check.
        let flush = Io::from_block(Op::Flush, Flags::default(), 3, u64::MAX, 4096).unwrap();
        assert_eq!((flush.sector, flush.len), (0, 0));
        assert_eq!(
            Io::decode(&flush.encode()).and_then(|f| f.check(8, 512, true, 0)),
            Ok(())
        );
    }

    #[test]
    fn io_round_trips_and_refuses_unknown_ops_and_flags() {
        let io = Io {
            op: IoOp::WriteZeroes,
            flags: IO_NOUNMAP,
            handle: 9,
            sector: 1 << 40,
            len: 1 << 20,
        };
        assert_eq!(Io::decode(&io.encode()), Ok(io));
        let mut b = io.encode();
        b[1] = 9;
        assert_eq!(Io::decode(&b), Err(Refusal::UnknownOp));
        // FUA only on a write, NOUNMAP only on a write of zeroes.
        let read_fua = Io {
            op: IoOp::Read,
            flags: IO_FUA,
            ..io
        };
        assert_eq!(Io::decode(&read_fua.encode()), Err(Refusal::UnknownOp));
        let mut b = io.encode();
        b[0] = VERSION + 1;
        assert_eq!(Io::decode(&b), Err(Refusal::Malformed));
        let mut b = io.encode();
        b[23] = 1;
        assert_eq!(Io::decode(&b), Err(Refusal::Malformed));
        assert_eq!(
            Io::decode(&io.encode()[..IO_LEN - 1]),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn io_is_checked_against_its_export() {
        // 1 MiB of 4 KiB blocks.
        let (sectors, lbs) = (2048, 4096);
        let io = |op, sector, len| Io {
            op,
            flags: 0,
            handle: 1,
            sector,
            len,
        };
        let w = io(IoOp::Write, 8, 4096);
        assert_eq!(w.check(sectors, lbs, false, 4096), Ok(()));
        assert_eq!(w.check(sectors, lbs, true, 4096), Err(Refusal::ReadOnly));
        assert_eq!(w.check(sectors, lbs, false, 4095), Err(Refusal::BadLength));
        // The last block, then one past the end, then an unaligned start.
        assert_eq!(
            io(IoOp::Read, 2040, 4096).check(sectors, lbs, true, 4096),
            Ok(())
        );
        assert_eq!(
            io(IoOp::Read, 2048, 4096).check(sectors, lbs, false, 4096),
            Err(Refusal::OutOfRange)
        );
        assert_eq!(
            io(IoOp::Read, 1, 4096).check(sectors, lbs, false, 4096),
            Err(Refusal::OutOfRange)
        );
        assert_eq!(
            io(IoOp::Read, 8, 512).check(sectors, lbs, false, 512),
            Err(Refusal::OutOfRange)
        );
        // A range that wraps around.
        assert_eq!(
            io(IoOp::Discard, u64::MAX - 7, 4096).check(sectors, lbs, false, 0),
            Err(Refusal::OutOfRange)
        );
        // Discards and writes of zeroes carry no data; a flush nothing.
        assert_eq!(
            io(IoOp::Discard, 0, 1 << 20).check(sectors, lbs, false, 0),
            Ok(())
        );
        assert_eq!(
            io(IoOp::WriteZeroes, 0, 4096).check(sectors, lbs, false, 4096),
            Err(Refusal::BadLength)
        );
        assert_eq!(io(IoOp::Flush, 0, 0).check(sectors, lbs, true, 0), Ok(()));
        assert_eq!(
            io(IoOp::Flush, 8, 0).check(sectors, lbs, false, 0),
            Err(Refusal::BadLength)
        );
        assert_eq!(
            io(IoOp::Read, 0, 0).check(sectors, lbs, false, 0),
            Err(Refusal::OutOfRange)
        );
    }

    #[test]
    fn notices_round_trip() {
        for n in [
            Notice::Resized {
                handle: 2,
                sectors: 1 << 30,
            },
            Notice::Deleted { handle: 5 },
        ] {
            assert_eq!(Notice::decode(&n.encode()), Ok(n));
        }
        let mut b = Notice::Deleted { handle: 5 }.encode();
        b[8] = 1;
        assert_eq!(Notice::decode(&b), Err(Refusal::Malformed));
        b[1] = 3;
        assert_eq!(Notice::decode(&b), Err(Refusal::Malformed));
        // A capacity whose bytes overflow a `loff_t` is no capacity.
        let huge = Notice::Resized {
            handle: 2,
            sectors: MAX_SECTORS + 1,
        };
        assert_eq!(Notice::decode(&huge.encode()), Err(Refusal::Malformed));
        let most = Notice::Resized {
            handle: 2,
            sectors: MAX_SECTORS,
        };
        assert_eq!(Notice::decode(&most.encode()), Ok(most));
    }
}
