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

/// A cell that holds at most one [`Arc<T>`], read under RCU: readers borrow
/// the value for an RCU read-side critical section without touching its
/// reference count, from any context; a writer replaces it and waits for a
/// grace period before the old value's reference is dropped.
///
/// # Invariants
///
/// `ptr` is null or came from [`Arc::into_raw`]; the cell owns that
/// reference until it is replaced and a grace period has passed.
pub struct RcuCell<T> {
    ptr: AtomicPtr<T>,
    _p: PhantomData<Arc<T>>,
}

// SAFETY: The cell only lends `&T` and drops `Arc<T>`s, which may cross
// threads when `T: Send + Sync`.
unsafe impl<T: Send + Sync> Sync for RcuCell<T> {}
// SAFETY: As above.
unsafe impl<T: Send + Sync> Send for RcuCell<T> {}

impl<T: Send + Sync> RcuCell<T> {
    /// An empty cell.
    pub const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(ptr::null_mut()),
            _p: PhantomData,
        }
    }

    /// Empties every cell of `cells` and drops their values once no reader
    /// can see them: one RCU grace period for up to 64 cells. May sleep.
    /// Each call drops only the values it took out itself, so calls that
    /// overlap (or a `set` beside one) are sound.
    pub fn clear_all(cells: &[Self]) {
        for chunk in cells.chunks(64) {
            let mut taken = [ptr::null_mut::<T>(); 64];
            let mut any = false;
            for (c, t) in chunk.iter().zip(taken.iter_mut()) {
                *t = c.ptr.swap(ptr::null_mut(), Ordering::AcqRel);
                any |= !t.is_null();
            }
            if !any {
                continue;
            }
            rcu::synchronize_rcu();
            for old in taken.into_iter().filter(|p| !p.is_null()) {
                // SAFETY: `old` came from `Arc::into_raw` (type invariant);
                // this call took it out of its cell before the grace period
                // that just passed, so no reader holds it, and nobody else
                // has it.
                drop(unsafe { Arc::from_raw(old) });
            }
        }
    }

    /// The value, for as long as the read-side critical section `_guard`
    /// lasts. Allocates nothing and never sleeps.
    pub fn get<'a>(&'a self, _guard: &'a rcu::Guard) -> Option<&'a T> {
        let raw = self.ptr.load(Ordering::Acquire);
        // SAFETY: `raw` is null or came from `Arc::into_raw` (type invariant),
        // and that reference is dropped only after the pointer was replaced
        // and a grace period passed, which cannot happen before `_guard`'s
        // critical section, begun before the load, ends.
        unsafe { raw.as_ref() }
    }

    /// A reference to the value, to keep beyond a read-side critical
    /// section. Never sleeps.
    pub fn get_arc(&self) -> Option<Arc<T>> {
        let guard = rcu::read_lock();
        let raw = self.ptr.load(Ordering::Acquire);
        if raw.is_null() {
            return None;
        }
        // SAFETY: As in `get`: `raw` came from `Arc::into_raw` and the cell's
        // reference outlives the critical section `guard` holds.
        let borrowed = unsafe { ArcBorrow::from_raw(raw) };
        let arc = borrowed.into();
        drop(guard);
        Some(arc)
    }

    /// Replaces the value with `value`; the old one is dropped once no
    /// reader can still see it. Waits for an RCU grace period if there was
    /// one: may sleep.
    pub fn set(&self, value: Option<Arc<T>>) {
        drop(self.replace(value));
    }

    /// Replaces the value with `value` and returns the old one once no
    /// reader can still see it in the cell. Waits for an RCU grace period
    /// if there was one: may sleep.
    pub fn replace(&self, value: Option<Arc<T>>) -> Option<Arc<T>> {
        let new = value.map_or(ptr::null_mut(), |v| Arc::into_raw(v).cast_mut());
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if old.is_null() {
            return None;
        }
        rcu::synchronize_rcu();
        // SAFETY: `old` came from `Arc::into_raw` (type invariant); it is no
        // longer in the cell and a grace period has passed, so no reader
        // holds it: the cell's reference is ours.
        Some(unsafe { Arc::from_raw(old) })
    }
}

impl<T: Send + Sync> Default for RcuCell<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Drop for RcuCell<T> {
    fn drop(&mut self) {
        let raw = *self.ptr.get_mut();
        if !raw.is_null() {
            // SAFETY: `raw` came from `Arc::into_raw` (type invariant);
            // with `&mut self` there is no reader.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }
}

// ferry's module runs these; ferry_blk, which builds this file too, not.
#[cfg(all(CONFIG_FERRY_KUNIT_TEST, not(CONFIG_FERRY_BLK_MODULE)))]
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

    #[test]
    fn rcu_cell_lends_and_replaces() -> Result {
        let cell = RcuCell::<u32>::new();
        let v = Arc::new(1, GFP_KERNEL)?;
        cell.set(Some(v.clone()));
        {
            let g = rcu::read_lock();
            assert_eq!(cell.get(&g).copied(), Some(1));
        }
        cell.set(Some(Arc::new(2, GFP_KERNEL)?));
        // The old value's reference went back once readers were done.
        assert!(Arc::into_unique_or_drop(v).is_some());
        let g = rcu::read_lock();
        assert_eq!(cell.get(&g).copied(), Some(2));
        drop(g);
        // `replace` hands the old value back, and the cell holds the new.
        let old = cell.replace(Some(Arc::new(4, GFP_KERNEL)?));
        assert_eq!(old.as_deref().copied(), Some(2));
        assert_eq!(cell.get_arc().as_deref().copied(), Some(4));
        cell.set(None);
        let g = rcu::read_lock();
        assert!(cell.get(&g).is_none());
        drop(g);
        assert!(cell.replace(None).is_none());
        // Several at once, one grace period.
        let cells = [RcuCell::new(), RcuCell::new(), RcuCell::new()];
        let w = Arc::new(3, GFP_KERNEL)?;
        cells[0].set(Some(w.clone()));
        cells[2].set(Some(w.clone()));
        RcuCell::clear_all(&cells);
        assert!(cells.iter().all(|c| c.get_arc().is_none()));
        assert!(Arc::into_unique_or_drop(w).is_some());
        Ok(())
    }
}
