// SPDX-License-Identifier: GPL-2.0

//! Disk numbers: the N of `/dev/ferryblkN`.
//!
//! A new mapping takes the lowest number free, as nvme's controllers take
//! theirs from an IDA. A number is taken before the map connects and is
//! free again only when its [`DiskIndex`] goes: the mapping holds it and
//! deletes its disk before it lets it go, so a map that failed gives its
//! number back, an unmap frees it at once, and no new disk is ever named
//! like one still in sysfs.

use kernel::{
    id_pool::IdPool,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// The numbers in use.
#[pin_data]
pub(crate) struct DiskIndices {
    /// A set bit for each number in use.
    #[pin]
    pool: Mutex<IdPool>,
}

impl DiskIndices {
    /// No number in use.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                pool <- new_mutex!(IdPool::new()),
            }),
            GFP_KERNEL,
        )
    }

    /// Takes the lowest free number. Sleeps (the pool may grow).
    pub(crate) fn take(self: &Arc<Self>) -> Result<DiskIndex> {
        let mut pool = self.pool.lock();
        loop {
            if let Some(free) = pool.find_unused_id(0) {
                let id = free.as_u32();
                free.acquire();
                return Ok(DiskIndex {
                    indices: self.clone(),
                    id,
                });
            }
            // (A mutex: the bitmap may be allocated under it.)
            let resizer = pool.grow_request().ok_or(ENOSPC)?.realloc(GFP_KERNEL)?;
            pool.grow(resizer);
        }
    }
}

/// A number in use, free again when this goes.
pub(crate) struct DiskIndex {
    /// Where it goes back to.
    indices: Arc<DiskIndices>,
    /// The number.
    id: u32,
}

impl DiskIndex {
    /// The number.
    pub(crate) fn get(&self) -> u32 {
        self.id
    }
}

impl Drop for DiskIndex {
    fn drop(&mut self) {
        // CAST: a `u32` fits a `usize`.
        self.indices.pool.lock().release_id(self.id as usize);
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_blk_indices)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_number_is_taken_and_given_back() -> Result {
        let indices = DiskIndices::new()?;
        let a = indices.take()?;
        let b = indices.take()?;
        let c = indices.take()?;
        assert_eq!((a.get(), b.get(), c.get()), (0, 1, 2));
        drop(b);
        assert_eq!(indices.take()?.get(), 1);
        drop(a);
        let d = indices.take()?;
        assert_eq!(d.get(), 0);
        assert_eq!(indices.take()?.get(), 1);
        drop((c, d));
        assert_eq!(indices.take()?.get(), 0);
        Ok(())
    }

    #[test]
    fn numbers_go_past_the_first_bitmap() -> Result {
        let indices = DiskIndices::new()?;
        let mut held = KVec::new();
        for i in 0..200u32 {
            let x = indices.take()?;
            assert_eq!(x.get(), i);
            held.push(x, GFP_KERNEL)?;
        }
        held.remove(150).map_err(|_| EINVAL)?;
        assert_eq!(indices.take()?.get(), 150);
        Ok(())
    }
}
