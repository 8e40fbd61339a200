// SPDX-License-Identifier: GPL-2.0

//! A fixed pool of values, allocated once and lent one at a time.
//!
//! A data path that may not allocate per request keeps what each request
//! needs in a [`Pool`] built with the queue: as many entries as the queue has
//! tags, as nvmet-rdma keeps its `rsps`. [`Pool::lend`] lends an entry to one
//! [`Lent`] handle at a time, claimed with an atomic flag, so taking and
//! giving back never sleeps, never allocates and takes no lock; the index of
//! the entry serves as the request's tag. A handle may cross threads, be
//! handed to C as a plain pointer ([`Lent::into_raw`]) and be taken back
//! ([`Lent::from_raw`]); a lent entry keeps its pool alive.
//!
//! The value stays in its entry between loans: what a request left in it (a
//! buffer's capacity, say) is there for the next one. [`Recycle::recycle`]
//! runs as a loan ends, for what must not outlive it (a reference to the
//! pool's owner, which would make a cycle).

use core::{
    cell::UnsafeCell,
    ffi::c_void,
    marker::PhantomData,
    mem::{offset_of, ManuallyDrop},
    ops::{Deref, DerefMut},
    ptr::{addr_of, NonNull},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};
use kernel::{prelude::*, sync::Arc, types::ForeignOwnable};

/// What a value of a [`Pool`] does as its loan ends.
pub trait Recycle {
    /// Drops what the loan put in the value and the next one must not see
    /// or keep alive. Runs while the entry is still lent; must not sleep.
    fn recycle(&mut self) {}
}

/// One entry of a [`Pool`].
struct Entry<T: Recycle> {
    /// Whether a [`Lent`] holds the entry.
    lent: AtomicBool,
    /// While lent, the reference to the pool that the handle holds.
    home: UnsafeCell<Option<Arc<Pool<T>>>>,
    index: usize,
    value: UnsafeCell<T>,
}

/// A fixed set of `T`s, each lent to one holder at a time.
///
/// # Invariants
///
/// The entries never move (nothing is pushed after [`Pool::new`]). An
/// entry's `home` and `value` are touched only by the one [`Lent`] that
/// exists while its `lent` flag is set, which [`Pool::lend`] sets and the
/// handle's drop clears.
pub struct Pool<T: Recycle> {
    entries: KVVec<Entry<T>>,
    /// How many entries are lent.
    lent: AtomicUsize,
}

// SAFETY: A value is reached through one `Lent` at a time, on whatever
// thread holds it: `T: Send` is all that takes. The flags are atomic.
unsafe impl<T: Recycle + Send> Send for Pool<T> {}
// SAFETY: As above; `&Pool` gives no access to a value by itself.
unsafe impl<T: Recycle + Send> Sync for Pool<T> {}

impl<T: Recycle> Pool<T> {
    /// A pool of `n` entries, entry `i` holding `init(i)`. May sleep.
    pub fn new(n: usize, mut init: impl FnMut(usize) -> Result<T>) -> Result<Arc<Self>> {
        let mut entries = KVVec::with_capacity(n, GFP_KERNEL)?;
        for index in 0..n {
            entries.push(
                Entry {
                    lent: AtomicBool::new(false),
                    home: UnsafeCell::new(None),
                    index,
                    value: UnsafeCell::new(init(index)?),
                },
                GFP_KERNEL,
            )?;
        }
        // INVARIANT: complete; none lent.
        Ok(Arc::new(
            Self {
                entries,
                lent: AtomicUsize::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// How many entries it has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Lends entry `i`; `None` if it is lent already or out of range.
    /// Any context.
    pub fn lend(self: &Arc<Self>, i: usize) -> Option<Lent<T>> {
        let e = self.entries.get(i)?;
        e.lent
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        self.lent.fetch_add(1, Ordering::Relaxed);
        // SAFETY: This thread set the flag: the entry is its alone.
        unsafe { *e.home.get() = Some(self.clone()) };
        // INVARIANT: lent, with its pool held in `home`.
        Some(Lent {
            entry: NonNull::from(e),
            _inv: PhantomData,
        })
    }

    /// Lends the first free entry from `from` on (wrapping round); `None`
    /// when all are lent. Any context.
    pub fn lend_any(self: &Arc<Self>, from: usize) -> Option<Lent<T>> {
        let n = self.len();
        (0..n).find_map(|k| {
            let i = (from + k) % n;
            if self.entries[i].lent.load(Ordering::Relaxed) {
                return None;
            }
            self.lend(i)
        })
    }

    /// How many entries are lent now (a snapshot: a loan may begin or end
    /// meanwhile, but for those its caller serializes).
    pub fn lent(&self) -> usize {
        self.lent.load(Ordering::Relaxed)
    }
}

/// Exclusive use of one entry of a [`Pool`], given back when dropped.
///
/// # Invariants
///
/// `entry` is an entry of a live pool whose `lent` flag is set for this
/// handle, the only one; its `home` holds a reference to that pool.
pub struct Lent<T: Recycle> {
    entry: NonNull<Entry<T>>,
    /// Invariant in `T`: the value outlives the loan, so a `Lent<T>` must
    /// not pass for one of a shorter-lived `T`.
    _inv: PhantomData<fn(T) -> T>,
}

// SAFETY: The handle owns its value exclusively (type invariant): it may go
// wherever `T` may.
unsafe impl<T: Recycle + Send> Send for Lent<T> {}
// SAFETY: `&Lent` gives `&T` only.
unsafe impl<T: Recycle + Sync> Sync for Lent<T> {}

impl<T: Recycle> Lent<T> {
    fn entry(&self) -> &Entry<T> {
        // SAFETY: The pool lives while the entry is lent (type invariant).
        unsafe { self.entry.as_ref() }
    }

    /// The entry's index in its pool.
    pub fn index(&self) -> usize {
        self.entry().index
    }
}

// SAFETY: `into_foreign` gives a pointer to the value, aligned for `T`,
// which stays valid (its entry lent, its pool alive) until `from_foreign`
// takes the loan back.
unsafe impl<T: Recycle + 'static> ForeignOwnable for Lent<T> {
    const FOREIGN_ALIGN: usize = core::mem::align_of::<T>();
    type Borrowed<'a> = &'a T;
    type BorrowedMut<'a> = &'a mut T;

    fn into_foreign(self) -> *mut c_void {
        let this = ManuallyDrop::new(self);
        let entry = this.entry.as_ptr();
        // A pointer with the whole entry's provenance, so that
        // `from_foreign` may step back to the entry from it.
        // SAFETY: `entry` is valid (type invariant); no reference is made.
        UnsafeCell::raw_get(unsafe { addr_of!((*entry).value) }).cast()
    }

    unsafe fn from_foreign(ptr: *mut c_void) -> Self {
        // SAFETY: `ptr` is the `value` field of a lent entry (the contract),
        // with the entry's provenance (`into_foreign`), which stays in the
        // pool that the entry's `home` keeps alive.
        let entry = unsafe { ptr.byte_sub(offset_of!(Entry<T>, value)) }.cast::<Entry<T>>();
        // INVARIANT: the loan `into_foreign` kept.
        Self {
            // SAFETY: Derived from the non-null `ptr`, inside the same entry.
            entry: unsafe { NonNull::new_unchecked(entry) },
            _inv: PhantomData,
        }
    }

    unsafe fn borrow<'a>(ptr: *mut c_void) -> &'a T {
        // SAFETY: A lent value, which only shared borrows reach for `'a`
        // (the contract).
        unsafe { &*ptr.cast::<T>() }
    }

    unsafe fn borrow_mut<'a>(ptr: *mut c_void) -> &'a mut T {
        // SAFETY: A lent value that nothing else reaches for `'a` (the
        // contract).
        unsafe { &mut *ptr.cast::<T>() }
    }
}

impl<T: Recycle> Deref for Lent<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: The entry is this handle's alone (type invariant).
        unsafe { &*self.entry().value.get() }
    }
}

impl<T: Recycle> DerefMut for Lent<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: As above, and `self` is borrowed mutably.
        unsafe { &mut *self.entry().value.get() }
    }
}

impl<T: Recycle> Drop for Lent<T> {
    fn drop(&mut self) {
        let e = self.entry();
        // SAFETY: Still this handle's alone: the flag is set.
        let home = unsafe {
            (*e.value.get()).recycle();
            (*e.home.get()).take()
        };
        if let Some(pool) = home.as_ref() {
            pool.lent.fetch_sub(1, Ordering::Relaxed);
        }
        e.lent.store(false, Ordering::Release);
        // The entry may be lent again from here; the pool may go with
        // `home`, after the last touch of `e`.
        drop(home);
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_pool)]
mod tests {
    use super::*;

    /// A value that counts its loans' ends.
    struct V {
        n: usize,
        bytes: KVec<u8>,
        recycled: u32,
    }

    impl Recycle for V {
        fn recycle(&mut self) {
            self.recycled += 1;
        }
    }

    fn pool(n: usize) -> Result<Arc<Pool<V>>> {
        Pool::new(n, |i| {
            Ok(V {
                n: i * 10,
                bytes: KVec::with_capacity(16, GFP_KERNEL)?,
                recycled: 0,
            })
        })
    }

    #[test]
    fn an_entry_is_lent_once_at_a_time() -> Result {
        let pool = pool(3)?;
        assert_eq!(pool.len(), 3);
        let a = pool.lend(1).ok_or(EINVAL)?;
        assert_eq!((a.index(), a.n), (1, 10));
        assert!(pool.lend(1).is_none());
        assert!(pool.lend(3).is_none());
        assert_eq!(pool.lent(), 1);
        drop(a);
        assert_eq!(pool.lent(), 0);
        let a = pool.lend(1).ok_or(EINVAL)?;
        assert_eq!(a.recycled, 1);
        Ok(())
    }

    #[test]
    fn lend_any_wraps_and_runs_out() -> Result {
        let pool = pool(3)?;
        let a = pool.lend_any(2).ok_or(EINVAL)?;
        let b = pool.lend_any(2).ok_or(EINVAL)?;
        let c = pool.lend_any(2).ok_or(EINVAL)?;
        assert_eq!((a.index(), b.index(), c.index()), (2, 0, 1));
        assert!(pool.lend_any(0).is_none());
        drop(b);
        assert_eq!(pool.lend_any(1).map(|l| l.index()), Some(0));
        Ok(())
    }

    #[test]
    fn a_value_stays_between_loans_and_through_c() -> Result {
        let pool = pool(2)?;
        let mut a = pool.lend(0).ok_or(EINVAL)?;
        a.bytes.extend_from_slice(b"abc", GFP_KERNEL)?;
        let raw = a.into_foreign();
        // Still lent while C holds it.
        assert!(pool.lend(0).is_none());
        // SAFETY: `raw` came from `into_foreign` and is not taken back yet.
        assert_eq!(unsafe { Lent::<V>::borrow(raw) }.bytes.as_slice(), b"abc");
        // SAFETY: As above; not used after.
        let mut a = unsafe { Lent::<V>::from_foreign(raw) };
        assert_eq!(a.index(), 0);
        a.bytes.push(b'd', GFP_KERNEL)?;
        drop(a);
        let a = pool.lend(0).ok_or(EINVAL)?;
        assert_eq!(a.bytes.as_slice(), b"abcd");
        assert!(a.bytes.capacity() >= 16);
        assert_eq!(a.recycled, 1);
        Ok(())
    }

    #[test]
    fn a_loan_keeps_its_pool() -> Result {
        let pool = pool(1)?;
        let a = pool.lend(0).ok_or(EINVAL)?;
        drop(pool);
        assert_eq!(a.n, 0);
        drop(a);
        Ok(())
    }
}
