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

/// A block device opened by path, exclusively for its holder: a device
/// that a file system (or another holder) has open is `EBUSY`. Closed on
/// drop.
///
/// # Invariants
///
/// `file` was opened by `bdev_file_open_by_path` and `bdev` is its device;
/// both stay valid until drop closes the file.
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
/// object lives and which nobody else touches while it is borrowed.
pub unsafe trait SgPages: Send {
    /// The scatterlist's head and entry count.
    fn sgl(&self) -> (*mut bindings::scatterlist, u32);
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
        let bdev = from_err_ptr(unsafe {
            bindings::ferry_blk_bdev_open(path.as_char_ptr(), write, holder.cast_mut(), &mut file)
        })?;
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
                max_write_zeroes_sectors: bindings::ferry_blk_bdev_write_zeroes_sectors(b),
                max_hw_sectors: bindings::ferry_blk_bdev_max_hw_sectors(b),
                write_cache: bindings::ferry_blk_bdev_write_cache(b),
                fua: bindings::ferry_blk_bdev_fua(b),
                rotational: bindings::ferry_blk_bdev_rotational(b),
                read_only: bindings::ferry_blk_bdev_read_only(b) || !self.writable,
            }
        }
    }

    /// Does `op` at `sector` on `pages` (a read's or write's; `None` for
    /// the others) and waits until it is over: the first error of its
    /// bios. `EINVAL` for a read or write without pages, `EROFS` for a
    /// change to a device opened read-only. Sleeps.
    pub fn io<P: SgPages>(&self, op: BioOp, sector: u64, pages: Option<&mut P>) -> Result {
        let writes = !matches!(op, BioOp::Read | BioOp::Flush);
        if writes && !self.writable {
            return Err(EROFS);
        }
        let b = self.raw();
        let gfp = bindings::FERRY_BLK_GFP_KERNEL;
        let ret = match op {
            BioOp::Read | BioOp::Write { .. } => {
                let (sgl, nents) = pages.ok_or(EINVAL)?.sgl();
                let opf = match op {
                    BioOp::Read => bindings::FERRY_BLK_OP_READ,
                    BioOp::Write { fua: true } => {
                        bindings::FERRY_BLK_OP_WRITE | bindings::FERRY_BLK_REQ_FUA
                    }
                    _ => bindings::FERRY_BLK_OP_WRITE,
                };
                // SAFETY: `sgl` holds `nents` entries whose pages stay valid
                // and ours while `pages` is borrowed (the `SgPages`
                // contract), past the wait.
                unsafe {
                    let last = self.data_bios(opf, sector, sgl, nents);
                    let ret = bindings::submit_bio_wait(last);
                    // Ours to put once waited for (the chained ones put
                    // themselves as they end).
                    bindings::bio_put(last);
                    ret
                }
            }
            // SAFETY: The device is open (type invariant).
            BioOp::Flush => unsafe { bindings::blkdev_issue_flush(b) },
            // SAFETY: As above.
            BioOp::Discard { sectors } => unsafe {
                bindings::blkdev_issue_discard(b, sector, sectors, gfp)
            },
            BioOp::WriteZeroes { sectors, nounmap } => {
                let flags = if nounmap {
                    bindings::BLKDEV_ZERO_NOUNMAP
                } else {
                    0
                };
                // SAFETY: As above.
                unsafe { bindings::blkdev_issue_zeroout(b, sector, sectors, gfp, flags) }
            }
        };
        to_result(ret)
    }

    /// Bios over `nents` entries at `sgl`, chained: all but the last are
    /// submitted; the last, which ends when they all have, is returned, to
    /// be submitted.
    ///
    /// # Safety
    ///
    /// `sgl` holds `nents` valid entries whose pages stay valid until the
    /// returned bio ends.
    unsafe fn data_bios(
        &self,
        opf: u32,
        sector: u64,
        mut sg: *mut bindings::scatterlist,
        nents: u32,
    ) -> *mut bindings::bio {
        // CAST: a constant of 256.
        let max_vecs = bindings::BIO_MAX_VECS as u16;
        let vecs = |left: u32| u16::try_from(left).unwrap_or(max_vecs).min(max_vecs);
        // SAFETY: The device is open.
        let mut bio =
            unsafe { bindings::ferry_blk_bio_alloc(self.raw(), vecs(nents), opf, sector) };
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
                        self.raw(),
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
}

impl Drop for Bdev {
    fn drop(&mut self) {
        // SAFETY: Opened by `bdev_file_open_by_path` (type invariant); its
        // I/O is over (`Bdev::io` waits, and borrows it meanwhile).
        unsafe { bindings::bdev_fput(self.file.as_ptr()) };
    }
}
