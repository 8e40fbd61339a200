// SPDX-License-Identifier: GPL-2.0

//! A module-wide slot for state that C callbacks without a context pointer reach.
//!
//! Some kernel interfaces call back into a module with no pointer to the module's
//! state: `ib_client::add` gets only the device, generic netlink handlers only the
//! request. Such a module keeps its state in a `static` [`Slot`], publishes it from
//! its init function and unpublishes it on exit; the callbacks [`Slot::get`] it.
//!
//! The slot is RCU-protected: readers take a reference under `rcu_read_lock()`,
//! and unpublishing clears the pointer and waits for a grace period before the
//! publisher's reference is dropped, so a reader never sees freed state.

use core::{
    marker::PhantomData,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    prelude::*,
    sync::{rcu, Arc, ArcBorrow},
};

use crate::bindings;

/// A slot that holds at most one published [`Arc<T>`].
///
/// # Invariants
///
/// `ptr` is null or was returned by [`Arc::into_raw`] in [`Slot::publish`]; that
/// reference is owned by the slot until [`Published`] is dropped, which clears
/// `ptr` and waits for an RCU grace period before releasing it.
pub struct Slot<T> {
    ptr: AtomicPtr<T>,
    _p: PhantomData<Arc<T>>,
}

// SAFETY: The slot only hands out `Arc<T>` clones, which may cross threads when
// `T: Send + Sync`.
unsafe impl<T: Send + Sync> Sync for Slot<T> {}
// SAFETY: As above.
unsafe impl<T: Send + Sync> Send for Slot<T> {}

impl<T: Send + Sync> Slot<T> {
    /// Creates an empty slot; usable in a `static`.
    pub const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(ptr::null_mut()),
            _p: PhantomData,
        }
    }

    /// Publishes `value`. It stays reachable through [`Slot::get`] until the
    /// returned [`Published`] is dropped.
    ///
    /// Fails with `EBUSY` if something is published already.
    pub fn publish(&'static self, value: Arc<T>) -> Result<Published<T>> {
        let raw = Arc::into_raw(value).cast_mut();
        if self
            .ptr
            .compare_exchange(ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: `raw` came from `Arc::into_raw` above and was not stored.
            drop(unsafe { Arc::from_raw(raw) });
            return Err(EBUSY);
        }
        Ok(Published { slot: self })
    }

    /// Returns a reference to the published value, or `None` if there is none.
    ///
    /// Callable from any context, including atomic ones.
    pub fn get(&self) -> Option<Arc<T>> {
        let _guard = rcu::read_lock();
        let raw = self.ptr.load(Ordering::Acquire);
        if raw.is_null() {
            return None;
        }
        // SAFETY: By the type invariant `raw` came from `Arc::into_raw` and the
        // slot's reference is released only after `ptr` is cleared and a grace
        // period has passed; we are inside an RCU read-side critical section that
        // began before we loaded `raw`, so that reference is still held and the
        // object is alive.
        let borrowed = unsafe { ArcBorrow::from_raw(raw) };
        Some(borrowed.into())
    }
}

impl<T: Send + Sync> Default for Slot<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Keeps a value published in a [`Slot`]; unpublishes it when dropped.
///
/// Dropping waits for an RCU grace period and may sleep.
pub struct Published<T: Send + Sync + 'static> {
    slot: &'static Slot<T>,
}

impl<T: Send + Sync + 'static> Drop for Published<T> {
    fn drop(&mut self) {
        let raw = self.slot.ptr.swap(ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: `synchronize_rcu` may be called from any sleepable context, which
        // `Drop` of a `Published` is documented to require.
        unsafe { bindings::synchronize_rcu() };
        if !raw.is_null() {
            // SAFETY: `raw` came from `Arc::into_raw` in `publish` (type invariant of
            // `Slot`), and no reader can still be using the slot's reference: the
            // pointer is cleared and a grace period has passed.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_slot)]
mod tests {
    use super::*;

    static SLOT: Slot<u32> = Slot::new();

    #[test]
    fn publish_get_unpublish() -> Result {
        assert!(SLOT.get().is_none());
        let published = SLOT.publish(Arc::new(7, GFP_KERNEL)?)?;
        assert_eq!(SLOT.get().map(|v| *v), Some(7));
        // A second publisher is refused and the first value stays.
        assert_eq!(SLOT.publish(Arc::new(8, GFP_KERNEL)?).err(), Some(EBUSY));
        assert_eq!(SLOT.get().map(|v| *v), Some(7));
        // A reader's reference outlives unpublishing.
        let held = SLOT.get().ok_or(EINVAL)?;
        drop(published);
        assert!(SLOT.get().is_none());
        assert_eq!(*held, 7);
        Ok(())
    }
}
