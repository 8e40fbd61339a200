// SPDX-License-Identifier: GPL-2.0

//! The block layer, for ferry_blk: blk-mq tag sets and requests
//! ([`mq`]), disks with their limits ([`disk`]), and block devices opened
//! by path for bio I/O ([`bdev`]).
//!
//! Linux 7.3's `kernel::block::mq` can only end a request successfully and
//! keeps its tag set private; this layer is shaped like it, so that a driver
//! could move to the kernel's once it grows what a network block driver
//! needs: error completion and requeue, per-request data, scatterlist
//! mapping, timeouts, polled queues, queue limits, capacity changes.

#[path = "block/bdev.rs"]
pub mod bdev;
#[path = "block/disk.rs"]
pub mod disk;
#[path = "block/mq.rs"]
pub mod mq;
