// SPDX-License-Identifier: GPL-2.0

//! A block device a module opens by path and does I/O on with bios: what a
//! target serves an export from.
//!
//! C headers: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h),
//! [`include/linux/bio.h`](srctree/include/linux/bio.h).

use core::{ffi::c_void, ptr::NonNull};
use kernel::{
    error::{from_err_ptr, to_result},
    prelude::*,
    str::CStr,
};

use crate::bindings;

/// What a block device is and can do, as its queue limits say.
#[derive(Clone, Copy, Debug, Default)]
pub struct BdevInfo {
    /// Capacity, in 512-byte sectors.
    pub sectors: u64,
    /// Logical block size.
    pub logical_block_size: u32,
    /// Physical block size.
    pub physical_block_size: u32,
    /// The most sectors of one discard (0: none).
    pub max_discard_sectors: u32,
    /// Discard granularity, in bytes.
    pub discard_granularity: u32,
    /// The most sectors of one native write of zeroes (0: the block layer
    /// writes zeroed pages instead).
    pub max_write_zeroes_sectors: u32,
    /// The most sectors of one request.
    pub max_hw_sectors: u32,
    /// A volatile write cache.
    pub write_cache: bool,
    /// Native forced unit access.
    pub fua: bool,
    /// Rotational media.
    pub rotational: bool,
    /// The device itself is read-only.
    pub read_only: bool,
}

/// A block device opened by path (or, in tests, by number), exclusively for
/// its holder: a device that a file system (or another holder) has open is
/// `EBUSY`. Closed on drop.
///
/// # Invariants
///
/// `file` was opened by `bdev_file_open_by_path` (or `_by_dev`) and `bdev`
/// is its device; both stay valid until drop closes the file.
pub struct Bdev {
    file: NonNull<bindings::file>,
    bdev: NonNull<bindings::block_device>,
    writable: bool,
}

// SAFETY: An open block device is used from any thread.
unsafe impl Send for Bdev {}
// SAFETY: Its methods only read what the block layer keeps consistent.
unsafe impl Sync for Bdev {}

/// What [`Bdev::submit`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BioOp {
    /// Reads sectors into the pages.
    Read,
    /// Writes the pages; `fua`: on stable media when it completes.
    Write {
        /// Forced unit access.
        fua: bool,
    },
    /// Flushes the device's write cache (an empty `PREFLUSH` write).
    Flush,
    /// Discards `sectors`.
    Discard {
        /// Sectors from the start.
        sectors: u64,
    },
    /// Writes zeroes to `sectors` (natively, or zeroed pages), keeping the
    /// blocks allocated if `nounmap`.
    WriteZeroes {
        /// Sectors from the start.
        sectors: u64,
        /// Keep the blocks allocated.
        nounmap: bool,
    },
}

/// Pages to do I/O on: a scatterlist of whole entries.
///
/// # Safety
///
/// [`SgPages::sgl`] returns the head of a valid scatterlist of that many
/// entries, the same on every call, whose pages stay allocated while the
/// object lives, do not move with it (they are a separate allocation), and
/// which nobody else touches while it is borrowed or lent (a box of it
/// made raw, by [`Bdev::submit`]).
pub unsafe trait SgPages: Send {
    /// The scatterlist's head and entry count.
    fn sgl(&self) -> (*mut bindings::scatterlist, u32);
}

/// What [`Bdev::submit`] does its work for: it holds the device open and
/// a read's or a write's pages while the bios run, and then hears how they
/// ended.
pub trait BioOwner: Send + Sized + 'static {
    /// The pages a read or a write moves.
    type Pages: SgPages;

    /// The device the bios go to (`None`: the operation ends in `ENODEV`),
    /// which the owner holds open. Asked after [`BioOwner::pages`]; nothing
    /// reaches the owner between this call and the end of its bios.
    fn bdev(&self) -> Option<&Bdev>;

    /// The pages of a read or a write (the other operations have none).
    fn pages(&mut self) -> &mut Self::Pages;

    /// The operation's bios have all ended: `res` is an error one of them
    /// had, if any. Runs where the device ends its bios, which may be a
    /// hard interrupt: it must not sleep, nor take a lock also taken with
    /// interrupts enabled.
    fn ended(this: KBox<Self>, res: Result);
}

/// Ends the last bio of a chain that [`Bdev::submit`] started for `T`.
///
/// # Safety
///
/// `bio`'s private pointer is a `KBox<T>` made raw by [`Bdev::submit`],
/// not taken back yet; called once, by the block layer, as `bio` ends.
unsafe extern "C" fn bio_end<T: BioOwner>(bio: *mut bindings::bio) {
    // SAFETY: `bio` is ending (the function's contract): ours to read and to
    // put (the chained ones put themselves).
    let (private, errno) = unsafe {
        let r = (
            bindings::ferry_blk_bio_private(bio),
            bindings::ferry_blk_bio_errno(bio),
        );
        bindings::bio_put(bio);
        r
    };
    // SAFETY: `private` is the box `submit` lent (the function's contract).
    let owner = unsafe { KBox::from_raw(private.cast::<T>()) };
    T::ended(owner, to_result(errno));
}

impl Bdev {
    /// Opens the block device at `path` for reading, and writing if `write`,
    /// claimed for `holder` (an address that identifies the claimant; it is
    /// compared, never read). Sleeps.
    pub fn open(path: &CStr, write: bool, holder: *const c_void) -> Result<Self> {
        let mut file = core::ptr::null_mut();
        // SAFETY: `path` is a C string; `file` is valid for writes; a
        // non-null `holder` makes the open exclusive (without holder ops,
        // the block layer only compares it).
        let bdev = unsafe {
            bindings::ferry_blk_bdev_open(path.as_char_ptr(), write, holder.cast_mut(), &mut file)
        };
        Self::opened(bdev, file, write)
    }

    /// Opens block device `major:minor`, as [`Bdev::open`] does a path:
    /// for a caller without the path's mount namespace (KUnit's thread).
    /// Sleeps.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub fn open_dev(major: u32, minor: u32, write: bool, holder: *const c_void) -> Result<Self> {
        let mut file = core::ptr::null_mut();
        // SAFETY: `file` is valid for writes; `holder` as in `open`.
        let bdev = unsafe {
            bindings::ferry_blk_bdev_open_dev(major, minor, write, holder.cast_mut(), &mut file)
        };
        Self::opened(bdev, file, write)
    }

    /// The device an open helper returned (an error pointer, or the device
    /// of `file`, which it set).
    fn opened(
        bdev: *mut bindings::block_device,
        file: *mut bindings::file,
        write: bool,
    ) -> Result<Self> {
        let bdev = from_err_ptr(bdev)?;
        // INVARIANT: the helper set `file` on success, and `bdev` is its.
        Ok(Self {
            file: NonNull::new(file).ok_or(EINVAL)?,
            bdev: NonNull::new(bdev).ok_or(EINVAL)?,
            writable: write,
        })
    }

    fn raw(&self) -> *mut bindings::block_device {
        self.bdev.as_ptr()
    }

    /// The largest native write of zeroes the device takes now, in sectors
    /// (0: it has none; a driver may turn it off after a failed one).
    pub fn max_write_zeroes_sectors(&self) -> u32 {
        // SAFETY: The device is open (type invariant).
        unsafe { bindings::ferry_blk_bdev_write_zeroes_sectors(self.raw()) }
    }

    /// Whether the device takes bios that must not wait
    /// ([`Bdev::submit_nowait`]): blk-mq devices do, unless their driver
    /// may block as it takes a request (nbd, nvme-tcp: it would, in the
    /// submitter's context), and device-mapper ones whose every target
    /// does (but not what lies under them).
    pub fn nowait(&self) -> bool {
        // SAFETY: The device is open (type invariant).
        unsafe { bindings::ferry_blk_bdev_nowait(self.raw()) }
    }

    /// Whether `bytes` at `sector`, in at most `segments` entries of a page
    /// at most, go in one bio the block layer does not split for the
    /// device's limits (its largest request, its segments, a chunk's
    /// boundary): it fails one that must not wait and would be split.
    pub fn fits_one_bio(&self, sector: u64, bytes: u32, segments: u32) -> bool {
        // SAFETY: The device is open (type invariant).
        unsafe { bindings::ferry_blk_bdev_fits_one_bio(self.raw(), sector, bytes >> 9, segments) }
    }

    /// What the device is and can do now.
    pub fn info(&self) -> BdevInfo {
        let b = self.raw();
        // SAFETY: The device is open (type invariant).
        unsafe {
            BdevInfo {
                sectors: bindings::ferry_blk_bdev_nr_sectors(b),
                logical_block_size: bindings::ferry_blk_bdev_logical_block_size(b),
                physical_block_size: bindings::ferry_blk_bdev_physical_block_size(b),
                max_discard_sectors: bindings::ferry_blk_bdev_max_discard_sectors(b),
                discard_granularity: bindings::ferry_blk_bdev_discard_granularity(b),
                max_write_zeroes_sectors: self.max_write_zeroes_sectors(),
                max_hw_sectors: bindings::ferry_blk_bdev_max_hw_sectors(b),
                write_cache: bindings::ferry_blk_bdev_write_cache(b),
                fua: bindings::ferry_blk_bdev_fua(b),
                rotational: bindings::ferry_blk_bdev_rotational(b),
                read_only: bindings::ferry_blk_bdev_read_only(b) || !self.writable,
            }
        }
    }

    /// The device's own unique ID (`->get_unique_id()`: NAA, else EUI-64,
    /// else T10), zero-padded to 16 bytes; `None` where it has none (most
    /// virtual devices, partitions, and device-mapper devices, whose ID
    /// would be the one device under them). May sleep (a SCSI disk reads
    /// its VPD page).
    pub fn unique_id(&self) -> Option<[u8; 16]> {
        let mut id = [0u8; 16];
        // SAFETY: The device is open (type invariant); `id` has the 16 bytes
        // the helper writes at most.
        let len = unsafe { bindings::ferry_blk_bdev_unique_id(self.raw(), id.as_mut_ptr()) };
        (len > 0 && id != [0; 16]).then_some(id)
    }

    /// Starts `op` at `sector` on `owner`'s device (on its pages for a read
    /// or a write) and returns without waiting: `owner` hears how it ended
    /// ([`BioOwner::ended`], exactly once, maybe before this returns), as
    /// nvmet's block device backend does. The owner holds the device open
    /// until then. Ends in `EROFS` for a change to a device opened
    /// read-only. Writes are `REQ_SYNC | REQ_IDLE`, as nvmet's: a client
    /// waits for them, and writeback throttling leaves them alone. May
    /// sleep.
    pub fn submit<T: BioOwner>(op: BioOp, sector: u64, owner: KBox<T>) {
        Self::submit_as(op, sector, owner, false)
    }

    /// As [`Bdev::submit`], but the bios never wait (`REQ_NOWAIT`): for a
    /// frozen queue, a device out of tags or memory, one that would have to
    /// be split ([`Bdev::fits_one_bio`] says beforehand), or one that would
    /// block in another way, the operation ends in `EAGAIN` instead
    /// (perhaps after part of it was done: submit it again, whole, where it
    /// may wait). Reads and writes, on a device that allows it
    /// ([`Bdev::nowait`]); other operations (a flush would wait for
    /// writeback throttling all the same, and device-mapper fails every one
    /// that must not wait), or another device, end in `EOPNOTSUPP`. Sleeps
    /// only to allocate its bios (`GFP_NOIO`, from the block layer's
    /// reserve), as a submission from a completion's work does in nvmet.
    pub fn submit_nowait<T: BioOwner>(op: BioOp, sector: u64, owner: KBox<T>) {
        let allowed = matches!(op, BioOp::Read | BioOp::Write { .. })
            && owner.bdev().is_some_and(Bdev::nowait);
        if !allowed {
            return T::ended(owner, Err(EOPNOTSUPP));
        }
        Self::submit_as(op, sector, owner, true)
    }

    /// [`Bdev::submit`], or with `nowait` [`Bdev::submit_nowait`] once
    /// checked.
    fn submit_as<T: BioOwner>(op: BioOp, sector: u64, mut owner: KBox<T>, nowait: bool) {
        // The pages first: once the device is known, the owner is not
        // borrowed mutably again (so it cannot let the device go).
        let pages = match op {
            BioOp::Read | BioOp::Write { .. } => Some(owner.pages().sgl()),
            _ => None,
        };
        let Some((b, writable)) = owner.bdev().map(|d| (d.raw(), d.writable)) else {
            return T::ended(owner, Err(ENODEV));
        };
        let writes = !matches!(op, BioOp::Read | BioOp::Flush);
        if writes && !writable {
            return T::ended(owner, Err(EROFS));
        }
        let gfp = bindings::FERRY_BLK_GFP_NOIO;
        let nowait = if nowait {
            bindings::FERRY_BLK_REQ_NOWAIT
        } else {
            0
        };
        let mut bio: *mut bindings::bio = core::ptr::null_mut();
        // (`b` stays open while `owner` lives: past the bios' end.)
        let ret = match op {
            BioOp::Read | BioOp::Write { .. } => {
                let (sgl, nents) = pages.unwrap_or((core::ptr::null_mut(), 0));
                let opf = match op {
                    BioOp::Read => bindings::FERRY_BLK_OP_READ,
                    BioOp::Write { fua } => {
                        let w = bindings::FERRY_BLK_OP_WRITE
                            | bindings::FERRY_BLK_REQ_SYNC
                            | bindings::FERRY_BLK_REQ_IDLE;
                        if fua {
                            w | bindings::FERRY_BLK_REQ_FUA
                        } else {
                            w
                        }
                    }
                    _ => bindings::FERRY_BLK_OP_READ,
                };
                // SAFETY: `b` is open (above); `sgl` holds `nents` entries
                // whose pages stay valid and nobody else's while `owner` is
                // lent (the `SgPages` contract): until the bios end, as it is
                // lent to them below.
                bio = unsafe { data_bios(b, opf | nowait, sector, sgl, nents) };
                0
            }
            BioOp::Flush => {
                // An empty write with a preflush, as `blkdev_issue_flush`
                // makes; the block layer ends it at once on a device
                // without a write cache.
                // SAFETY: `b` is open (above).
                bio = unsafe {
                    bindings::ferry_blk_bio_alloc(
                        b,
                        0,
                        bindings::FERRY_BLK_OP_WRITE | bindings::FERRY_BLK_REQ_PREFLUSH,
                        0,
                    )
                };
                0
            }
            // SAFETY: `b` is open (above); `bio` is valid for writes and
            // starts null, so the chain is a new one.
            BioOp::Discard { sectors } => unsafe {
                bindings::__blkdev_issue_discard(b, sector, sectors, gfp, &mut bio);
                0
            },
            BioOp::WriteZeroes { sectors, nounmap } => {
                let flags = if nounmap {
                    bindings::BLKDEV_ZERO_NOUNMAP
                } else {
                    0
                };
                // SAFETY: As above. (It refuses, `EPERM` for a read-only
                // device, before it makes any bio.)
                unsafe {
                    bindings::__blkdev_issue_zeroout(b, sector, sectors, gfp, &mut bio, flags)
                }
            }
        };
        if bio.is_null() {
            // Refused, or nothing to do (no sectors); a bio made with
            // `GFP_NOIO` is never missing.
            let res = match (ret, op) {
                (0, BioOp::Discard { .. } | BioOp::WriteZeroes { .. }) => Ok(()),
                (0, _) => Err(ENOMEM),
                (e, _) => to_result(e),
            };
            return T::ended(owner, res);
        }
        let private = KBox::into_raw(owner).cast::<c_void>();
        // SAFETY: `bio` is the chain's last bio, ours and not submitted yet;
        // `bio_end::<T>` takes `private` back, exactly once, when the chain
        // has ended; `submit_bio` takes the bio.
        unsafe {
            bindings::ferry_blk_bio_set_end_io(bio, Some(bio_end::<T>), private);
            bindings::submit_bio(bio);
        }
    }
}

/// Bios over `nents` entries at `sgl`, chained: all but the last are
/// submitted; the last, which ends when they all have, is returned, to
/// be submitted.
///
/// # Safety
///
/// `bdev` is open, and `sgl` holds `nents` valid entries whose pages
/// stay valid until the returned bio ends.
unsafe fn data_bios(
    bdev: *mut bindings::block_device,
    opf: u32,
    sector: u64,
    mut sg: *mut bindings::scatterlist,
    nents: u32,
) -> *mut bindings::bio {
    // CAST: a constant of 256.
    let max_vecs = bindings::BIO_MAX_VECS as u16;
    let vecs = |left: u32| u16::try_from(left).unwrap_or(max_vecs).min(max_vecs);
    // SAFETY: The device is open (the function's contract).
    let mut bio = unsafe { bindings::ferry_blk_bio_alloc(bdev, vecs(nents), opf, sector) };
    let mut at = sector;
    for i in 0..nents {
        // SAFETY: `sg` is entry `i` of the list (the contract).
        let (page, offset, len) =
            unsafe { (bindings::ferry_blk_sg_page(sg), (*sg).offset, (*sg).length) };
        // SAFETY: `bio` is ours, not submitted; the page stays valid
        // until the chain ends (the contract).
        if unsafe { bindings::bio_add_page(bio, page, len, offset) } != len as i32 {
            // Full: the next bio continues where this one ends, and
            // ends only after it (chained).
            // SAFETY: As above; `blk_next_bio` submits `bio`.
            unsafe {
                bio = bindings::blk_next_bio(
                    bio,
                    bdev,
                    u32::from(vecs(nents - i)),
                    opf,
                    bindings::FERRY_BLK_GFP_NOIO,
                );
                bindings::ferry_blk_bio_set_sector(bio, at);
                // A fresh bio with room for vectors takes a page.
                let _ = bindings::bio_add_page(bio, page, len, offset);
            }
        }
        at += u64::from(len / 512);
        // SAFETY: Entries up to `nents` are valid (the contract).
        sg = unsafe { bindings::ferry_blk_sg_next(sg) };
    }
    bio
}

impl Drop for Bdev {
    fn drop(&mut self) {
        // SAFETY: Opened by `bdev_file_open_by_path` or `_by_dev` (type
        // invariant); no bio of it runs: their owners hold it until they end
        // (`submit`).
        unsafe { bindings::bdev_fput(self.file.as_ptr()) };
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_blk_bdev)]
mod tests {
    use super::*;
    use crate::ferry_api::Data;
    use kernel::{
        new_spinlock_irq,
        sync::{Arc, Completion, SpinLockIrq},
    };

    /// Where a test's operation tells its end and gives its box back.
    #[pin_data]
    struct Back {
        #[pin]
        done: Completion,
        #[pin]
        probe: SpinLockIrq<Option<KBox<Probe>>>,
    }

    /// A test's operation: its device, its pages, and how it ended.
    struct Probe {
        bdev: Arc<Bdev>,
        data: Data,
        res: Option<Result>,
        back: Arc<Back>,
    }

    impl BioOwner for Probe {
        type Pages = Data;

        fn bdev(&self) -> Option<&Bdev> {
            Some(&self.bdev)
        }

        fn pages(&mut self) -> &mut Data {
            &mut self.data
        }

        fn ended(mut this: KBox<Self>, res: Result) {
            this.res = Some(res);
            let back = this.back.clone();
            *back.probe.lock() = Some(this);
            back.done.complete_all();
        }
    }

    /// Runs `op` at `sector` of `b` on `data` and waits for its end: how it
    /// ended, and the pages.
    fn run(b: &Arc<Bdev>, op: BioOp, sector: u64, data: Data) -> Result<(Result, Data)> {
        run_by(Bdev::submit::<Probe>, b, op, sector, data)
    }

    /// As [`run`], submitted by `submit`.
    fn run_by(
        submit: fn(BioOp, u64, KBox<Probe>),
        b: &Arc<Bdev>,
        op: BioOp,
        sector: u64,
        data: Data,
    ) -> Result<(Result, Data)> {
        let back = Arc::pin_init(
            pin_init!(Back {
                done <- Completion::new(),
                probe <- new_spinlock_irq!(None),
            }),
            GFP_KERNEL,
        )?;
        let probe = Probe {
            bdev: b.clone(),
            data,
            res: None,
            back: back.clone(),
        };
        submit(op, sector, KBox::new(probe, GFP_KERNEL)?);
        back.done.wait_for_completion();
        let p = back.probe.lock().take().ok_or(EINVAL)?;
        let Probe { data, res, .. } = KBox::into_inner(p);
        Ok((res.ok_or(EINVAL)?, data))
    }

    /// A RAM disk of the test kernel (brd's `ram15`, which no case uses),
    /// by number: KUnit's thread does not see the VM's `/dev`.
    const DISK: (u32, u32) = (1, 15);

    /// Runs `test` on the test disk, opened for writing if `write`, then
    /// discards the whole disk (a RAM disk frees its pages, and is left as
    /// the test found it) and closes it, whatever the test found.
    fn on_disk(write: bool, test: impl FnOnce(&Arc<Bdev>) -> Result) -> Result {
        let claim = KBox::new(0u8, GFP_KERNEL)?;
        let holder = core::ptr::from_ref::<u8>(&claim).cast();
        let b = Arc::new(Bdev::open_dev(DISK.0, DISK.1, write, holder)?, GFP_KERNEL)?;
        let res = test(&b);
        let all = BioOp::Discard {
            sectors: b.info().sectors,
        };
        let wiped = if write {
            run(&b, all, 0, Data::new(512)?)?.0
        } else {
            Ok(())
        };
        drop(b);
        drop(claim);
        res.and(wiped)
    }

    /// `Ok` if `ok`, else logs what failed and fails (a test's assertion
    /// that lets it close its device first).
    fn check(ok: bool, what: &str) -> Result {
        if ok {
            Ok(())
        } else {
            pr_err!("ferry_blk_bdev: {}\n", what);
            Err(EINVAL)
        }
    }

    /// A page-sized buffer: the helpers below go a page at a time, so
    /// that no test needs a large contiguous allocation.
    fn page_buf(byte: u8) -> Result<KVec<u8>> {
        let mut v = KVec::with_capacity(kernel::page::PAGE_SIZE, GFP_KERNEL)?;
        v.resize(kernel::page::PAGE_SIZE, byte, GFP_KERNEL)?;
        Ok(v)
    }

    /// `len` bytes made a page at a time: `fill(offset, page)` writes the
    /// page at `offset` (the last one may be shorter).
    fn made(len: usize, mut fill: impl FnMut(usize, &mut [u8])) -> Result<Data> {
        let mut d = Data::new(len)?;
        let mut v = page_buf(0)?;
        for off in (0..len).step_by(kernel::page::PAGE_SIZE) {
            let n = kernel::page::PAGE_SIZE.min(len - off);
            fill(off, &mut v[..n]);
            d.write(off, &v[..n])?;
        }
        Ok(d)
    }

    /// `len` bytes of `byte`.
    fn filled(len: usize, byte: u8) -> Result<Data> {
        made(len, |_, p| p.fill(byte))
    }

    /// `len` bytes of `seed`, each 512-byte sector starting with its own
    /// index (little endian): a bio at the wrong sector reads or writes
    /// another sector's.
    fn indexed(len: usize, seed: u8) -> Result<Data> {
        made(len, |off, p| {
            p.fill(seed);
            for (i, s) in p.chunks_mut(512).enumerate() {
                // CAST: a test disk has far fewer than 2^32 sectors.
                let idx = ((off / 512 + i) as u32).to_le_bytes();
                let n = idx.len().min(s.len());
                s[..n].copy_from_slice(&idx[..n]);
            }
        })
    }

    /// Whether `a` and `b` hold the same bytes.
    fn same(a: &Data, b: &Data) -> Result<bool> {
        if a.len() != b.len() {
            return Ok(false);
        }
        let (mut x, mut y) = (page_buf(0)?, page_buf(1)?);
        for off in (0..a.len()).step_by(kernel::page::PAGE_SIZE) {
            let n = kernel::page::PAGE_SIZE.min(a.len() - off);
            a.read(off, &mut x[..n])?;
            b.read(off, &mut y[..n])?;
            if x[..n] != y[..n] {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `d` holds `byte` throughout.
    fn holds(d: &Data, byte: u8) -> Result<bool> {
        let mut v = page_buf(!byte)?;
        for off in (0..d.len()).step_by(kernel::page::PAGE_SIZE) {
            let n = kernel::page::PAGE_SIZE.min(d.len() - off);
            d.read(off, &mut v[..n])?;
            if v[..n].iter().any(|&x| x != byte) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    #[test]
    fn every_operation_ends_in_its_owner() -> Result {
        on_disk(true, |b| {
            let write = BioOp::Write { fua: false };
            check(run(b, write, 8, filled(8192, 0x5a)?)?.0.is_ok(), "write")?;
            let (res, d) = run(b, BioOp::Read, 8, Data::new(8192)?)?;
            check(res.is_ok() && holds(&d, 0x5a)?, "read back")?;
            // A flush, then the range zeroed, keeping its blocks.
            check(run(b, BioOp::Flush, 0, Data::new(512)?)?.0.is_ok(), "flush")?;
            let zeroes = BioOp::WriteZeroes {
                sectors: 16,
                nounmap: true,
            };
            check(
                run(b, zeroes, 8, Data::new(512)?)?.0.is_ok(),
                "write zeroes",
            )?;
            let (res, d) = run(b, BioOp::Read, 8, filled(8192, 0x77)?)?;
            check(res.is_ok() && holds(&d, 0)?, "zeroes read back")?;
            // Discarded: a RAM disk frees the pages, which read as zeroes.
            let fua = BioOp::Write { fua: true };
            check(run(b, fua, 8, filled(8192, 0x5a)?)?.0.is_ok(), "FUA write")?;
            let discard = BioOp::Discard { sectors: 16 };
            check(run(b, discard, 8, Data::new(512)?)?.0.is_ok(), "discard")?;
            let (res, d) = run(b, BioOp::Read, 8, filled(8192, 0x77)?)?;
            check(res.is_ok() && holds(&d, 0)?, "discarded range read back")
        })
    }

    #[test]
    fn data_past_one_bio_is_chained_and_read_back() -> Result {
        on_disk(true, |b| {
            // More pages than one bio holds (`BIO_MAX_VECS`).
            let len = (bindings::BIO_MAX_VECS as usize + 44) * kernel::page::PAGE_SIZE;
            let write = BioOp::Write { fua: false };
            check(
                run(b, write, 0, indexed(len, 0xc3)?)?.0.is_ok(),
                "chained write",
            )?;
            let (res, d) = run(b, BioOp::Read, 0, filled(len, 0x11)?)?;
            check(
                res.is_ok() && same(&d, &indexed(len, 0xc3)?)?,
                "chained read back",
            )?;
            // Past the end of the disk: the block layer's error, in the owner.
            let end = b.info().sectors;
            let res = run(b, BioOp::Read, end, Data::new(4096)?)?.0;
            check(res == Err(EIO), "a read past the end")
        })
    }

    #[test]
    fn an_operation_that_must_not_wait_runs_where_the_device_allows_it() -> Result {
        on_disk(true, |b| {
            // brd takes bios that must not wait. (It allocates its pages
            // without waiting for them too: short of memory, a write ends in
            // EAGAIN, and goes again where it may wait.)
            check(b.nowait(), "brd takes REQ_NOWAIT bios")?;
            check(b.fits_one_bio(16, 12288, 3), "12 KiB in one bio")?;
            let nowait = Bdev::submit_nowait::<Probe>;
            let write = BioOp::Write { fua: true };
            let res = match run_by(nowait, b, write, 16, indexed(12288, 0x3c)?)?.0 {
                Err(e) if e == EAGAIN => run(b, write, 16, indexed(12288, 0x3c)?)?.0,
                res => res,
            };
            check(res.is_ok(), "write")?;
            // Into pages not zeroed: the read fills them whole.
            let (res, d) = run_by(nowait, b, BioOp::Read, 16, Data::for_overwrite(12288)?)?;
            check(
                res.is_ok() && same(&d, &indexed(12288, 0x3c)?)?,
                "read back",
            )?;
            // Flushes and discards are refused.
            check(
                run_by(nowait, b, BioOp::Flush, 0, Data::new(512)?)?.0 == Err(EOPNOTSUPP),
                "flush",
            )?;
            let discard = BioOp::Discard { sectors: 8 };
            check(
                run_by(nowait, b, discard, 16, Data::new(512)?)?.0 == Err(EOPNOTSUPP),
                "discard",
            )
        })
    }

    #[test]
    fn a_read_only_open_refuses_changes() -> Result {
        on_disk(false, |b| {
            let write = BioOp::Write { fua: false };
            check(run(b, write, 0, filled(4096, 1)?)?.0 == Err(EROFS), "write")?;
            let zeroes = BioOp::WriteZeroes {
                sectors: 8,
                nounmap: false,
            };
            check(
                run(b, zeroes, 0, Data::new(512)?)?.0 == Err(EROFS),
                "zeroes",
            )?;
            check(run(b, BioOp::Read, 0, Data::new(4096)?)?.0.is_ok(), "read")
        })
    }
}
