// SPDX-License-Identifier: GPL-2.0

//! A disk of a blk-mq driver (`struct gendisk`), with the queue limits it
//! is built with, and what its driver changes later: capacity, read-only,
//! quiescing, freezing, marking it dead.
//!
//! C header: [`include/linux/blkdev.h`](srctree/include/linux/blkdev.h).

use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering::Relaxed},
};
use kernel::{error::from_err_ptr, prelude::*, str::CStr, sync::Arc, types::ForeignOwnable};

use super::mq::{Operations, TagSet};
use crate::bindings;

/// A disk's limits and features (`struct queue_limits`): what the block
/// layer builds requests by. Zero in a size: the block layer's default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Limits {
    /// The smallest unit addressed, a power of two from 512 to a page.
    pub logical_block_size: u32,
    /// The smallest unit written atomically.
    pub physical_block_size: u32,
    /// The most sectors one request may cover.
    pub max_hw_sectors: u32,
    /// The most segments of a request.
    pub max_segments: u16,
    /// The largest segment.
    pub max_segment_size: u32,
    /// A segment may cross no address boundary of this mask but at its start
    /// and end (0: none), so a request maps onto page-based registrations.
    pub virt_boundary_mask: u64,
    /// Required alignment of every segment's address and length, less one.
    pub dma_alignment: u32,
    /// The most sectors of one discard (0: no discard).
    pub max_discard_sectors: u32,
    /// Discard granularity, in bytes.
    pub discard_granularity: u32,
    /// The most sectors of one write of zeroes (0: none).
    pub max_write_zeroes_sectors: u32,
    /// A volatile write cache: the block layer sends flushes.
    pub write_cache: bool,
    /// Forced unit access is native (else the block layer emulates it with
    /// a flush).
    pub fua: bool,
    /// Rotational media.
    pub rotational: bool,
}

impl Limits {
    fn to_raw(self) -> bindings::queue_limits {
        let mut features = 0;
        if self.write_cache {
            features |= bindings::FERRY_BLK_FEAT_WRITE_CACHE;
        }
        if self.fua {
            features |= bindings::FERRY_BLK_FEAT_FUA;
        }
        if self.rotational {
            features |= bindings::FERRY_BLK_FEAT_ROTATIONAL;
        }
        bindings::queue_limits {
            features,
            logical_block_size: self.logical_block_size,
            physical_block_size: self.physical_block_size,
            max_hw_sectors: self.max_hw_sectors,
            max_segments: self.max_segments,
            max_segment_size: self.max_segment_size,
            // CAST: `unsigned long` is 64 bits (ferry needs `64BIT`).
            virt_boundary_mask: self.virt_boundary_mask as usize,
            dma_alignment: self.dma_alignment,
            max_hw_discard_sectors: self.max_discard_sectors,
            discard_granularity: self.discard_granularity,
            max_write_zeroes_sectors: self.max_write_zeroes_sectors,
            ..Default::default()
        }
    }
}

/// A disk of driver `T`, added to the system (`/dev/NAME`, partitions
/// allowed); deleted ([`Disk::delete`]) when dropped, if it was not before.
///
/// # Invariants
///
/// `disk` came from `blk_mq_alloc_disk` on `tag_set`'s set, with `queuedata`
/// from `T::QueueData::into_foreign`, and was added; it is deleted and put,
/// and the queue data taken back, on drop.
pub struct Disk<T: Operations> {
    disk: NonNull<bindings::gendisk>,
    queuedata: *mut core::ffi::c_void,
    /// The identity sysfs shows (`wwid`, `uuid`), which the disk's
    /// `private_data` points at: freed after the disk (a field drops after
    /// `drop` has deleted and put it).
    _id: Option<KBox<[u8; 16]>>,
    /// [`Disk::delete`] ran.
    deleted: AtomicBool,
    tag_set: Arc<TagSet<T>>,
}

// SAFETY: The block layer serializes what the methods change.
unsafe impl<T: Operations> Send for Disk<T> {}
// SAFETY: As for `Send`.
unsafe impl<T: Operations> Sync for Disk<T> {}

impl<T: Operations> Disk<T> {
    /// Makes and adds disk `name` of `capacity` sectors with `limits`, whose
    /// requests come from `tag_set` and whose queue carries `data`; with
    /// `id`, a UUID it shows in sysfs as `wwid` (`uuid.` and the UUID, as
    /// an NVMe namespace's: udev's `/dev/disk/by-id` links) and `uuid`.
    /// Sleeps.
    pub fn add(
        name: &CStr,
        tag_set: Arc<TagSet<T>>,
        limits: Limits,
        capacity: u64,
        read_only: bool,
        id: Option<[u8; 16]>,
        data: T::QueueData,
    ) -> Result<Self> {
        let id = id.map(|id| KBox::new(id, GFP_KERNEL)).transpose()?;
        let mut lim = limits.to_raw();
        let queuedata = data.into_foreign();
        // SAFETY: The set is live (the `Arc`), `lim` is valid for the call.
        let disk = from_err_ptr(unsafe {
            bindings::ferry_blk_alloc_disk(tag_set.as_raw(), &mut lim, queuedata)
        });
        let disk = match disk {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: From `into_foreign` above; nothing else has it.
                drop(unsafe { T::QueueData::from_foreign(queuedata) });
                return Err(e);
            }
        };
        // SAFETY: A fresh disk, not added; `name` is a C string.
        unsafe {
            bindings::ferry_blk_disk_setup(disk, name.as_char_ptr());
            bindings::set_capacity_and_notify(disk, capacity);
            bindings::set_disk_ro(disk, read_only);
        }
        let id_ptr = id.as_deref().map_or(core::ptr::null(), |id| id.as_ptr());
        // SAFETY: As above. `id_ptr` is null or 16 bytes that live as long
        // as the disk (see `_id`).
        let added = unsafe { bindings::ferry_blk_disk_add(disk, id_ptr) };
        if added != 0 {
            // SAFETY: Never added: putting it frees the disk and its queue,
            // and then nothing uses `queuedata` any more.
            unsafe {
                bindings::put_disk(disk);
                drop(T::QueueData::from_foreign(queuedata));
            }
            return Err(Error::from_errno(added));
        }
        Ok(Self {
            // SAFETY: `from_err_ptr` passed a valid pointer.
            disk: unsafe { NonNull::new_unchecked(disk) },
            queuedata,
            _id: id,
            deleted: AtomicBool::new(false),
            tag_set,
        })
    }

    fn raw(&self) -> *mut bindings::gendisk {
        self.disk.as_ptr()
    }

    /// Its name, as in `/dev`.
    pub fn name(&self) -> &CStr {
        // SAFETY: The disk is live (type invariant); its name is a C string
        // fixed when it was added.
        unsafe { CStr::from_char_ptr(bindings::ferry_blk_disk_name(self.raw())) }
    }

    /// Its capacity, in sectors.
    pub fn capacity(&self) -> u64 {
        // SAFETY: The disk is live (type invariant).
        unsafe { bindings::ferry_blk_disk_capacity(self.raw()) }
    }

    /// Changes its capacity, and tells userspace (a `RESIZE=1` change
    /// uevent) if it changed.
    pub fn set_capacity(&self, sectors: u64) {
        // SAFETY: The disk is live (type invariant).
        unsafe { bindings::set_capacity_and_notify(self.raw(), sectors) };
    }

    /// Makes it read-only, or writable.
    pub fn set_read_only(&self, ro: bool) {
        // SAFETY: The disk is live (type invariant).
        unsafe { bindings::set_disk_ro(self.raw(), ro) };
    }

    /// How many holders have it open.
    pub fn openers(&self) -> u32 {
        // SAFETY: The disk is live (type invariant).
        unsafe { bindings::ferry_blk_disk_openers(self.raw()) }
    }

    /// How many of its requests the driver holds now; see [`TagSet::busy`].
    pub fn busy(&self) -> u32 {
        self.tag_set.busy()
    }

    fn queue(&self) -> *mut bindings::request_queue {
        // SAFETY: The disk is live (type invariant), and so is its queue.
        unsafe { bindings::ferry_blk_disk_queue(self.raw()) }
    }

    /// Stops `queue_rq` calls (waiting for those running) until
    /// [`Disk::unquiesce`]. Sleeps.
    pub fn quiesce(&self) {
        // SAFETY: The queue is live.
        unsafe { bindings::blk_mq_quiesce_queue(self.queue()) };
    }

    /// Lets `queue_rq` run again.
    pub fn unquiesce(&self) {
        // SAFETY: The queue is live.
        unsafe { bindings::blk_mq_unquiesce_queue(self.queue()) };
    }

    /// Waits until no request is in flight and holds new ones back, until
    /// [`Disk::unfreeze`]. Sleeps.
    pub fn freeze(&self) {
        // SAFETY: The queue is live.
        unsafe { bindings::ferry_blk_freeze_queue(self.queue()) };
    }

    /// Lets requests in again after [`Disk::freeze`].
    pub fn unfreeze(&self) {
        // SAFETY: The queue is live.
        unsafe { bindings::ferry_blk_unfreeze_queue(self.queue()) };
    }

    /// Runs hardware queue `index` again (after [`super::mq::Queued::Busy`]),
    /// from a work item if `in_work`; nothing if the disk has no such
    /// queue.
    pub fn run_queue(&self, index: u32, in_work: bool) {
        // SAFETY: The queue is live; an index it has no queue for is looked
        // up and skipped.
        unsafe { bindings::ferry_blk_run_hw_queue(self.queue(), index, in_work) };
    }

    /// Runs every hardware queue again (after [`super::mq::Queued::DevBusy`]),
    /// from a work item if `in_work`.
    pub fn run_queues(&self, in_work: bool) {
        // SAFETY: The queue is live.
        unsafe { bindings::blk_mq_run_hw_queues(self.queue(), in_work) };
    }

    /// Removes the disk from the system (`del_gendisk`), draining its
    /// requests: the driver's queues must keep working until it returns (a
    /// request still waiting for room must be able to go, or fail). Once;
    /// the memory goes with the last reference. Sleeps.
    pub fn delete(&self) {
        if !self.deleted.swap(true, Relaxed) {
            // SAFETY: The disk was added (type invariant), and is deleted
            // once (the flag).
            unsafe { bindings::del_gendisk(self.raw()) };
        }
    }

    /// Fails every request from now on, without waiting for the holders to
    /// close it (a forced removal).
    pub fn mark_dead(&self) {
        // SAFETY: The disk is live (type invariant).
        unsafe { bindings::blk_mark_disk_dead(self.raw()) };
    }
}

impl<T: Operations> Drop for Disk<T> {
    fn drop(&mut self) {
        self.delete();
        // SAFETY: The disk was added and is deleted (type invariant, above).
        // `del_gendisk` drained its queue: no operation of `T` runs for it
        // afterwards, so the queue data may go once the disk is put.
        unsafe {
            bindings::put_disk(self.raw());
            drop(T::QueueData::from_foreign(self.queuedata));
        }
    }
}
