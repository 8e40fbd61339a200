// SPDX-License-Identifier: GPL-2.0

//! A work queue of one module's own, a periodic tick on it, random numbers,
//! the CPU count.
//!
//! C headers: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h),
//! [`include/linux/random.h`](srctree/include/linux/random.h).
//!
//! The kernel crate's [`kernel::workqueue::Queue`] borrows the system queues,
//! which a module cannot flush at unload. [`OwnedQueue`] allocates a queue and
//! destroys it on drop, which first runs every work item still queued: once it
//! is gone, no work of the module runs any more.

use core::{
    ptr::NonNull,
    sync::atomic::{
        AtomicBool,
        Ordering::{Acquire, Release},
    },
};
use kernel::{
    impl_has_delayed_work, new_condvar, new_delayed_work, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, Mutex},
    time::msecs_to_jiffies,
    workqueue::{DelayedWork, Queue, WorkItem},
};

use crate::bindings;

/// A work queue allocated by the module; drained and destroyed on drop.
///
/// # Invariants
///
/// `wq` is a live workqueue owned by this object.
pub struct OwnedQueue {
    wq: NonNull<bindings::workqueue_struct>,
}

// SAFETY: Workqueues may be used and destroyed from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

impl OwnedQueue {
    /// Allocates a reclaim-safe, unbound queue called `name`.
    pub fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a valid string; the queue copies it.
        Self::owning(unsafe { bindings::ferry_helper_alloc_workqueue(name.as_char_ptr()) })
    }

    /// Takes a queue just allocated (null: the allocation failed).
    fn owning(wq: *mut bindings::workqueue_struct) -> Result<Self> {
        Ok(Self {
            wq: NonNull::new(wq).ok_or(ENOMEM)?,
        })
    }

    /// Waits until every work item queued before this call has run.
    /// Sleeps; never from a work item of this queue.
    pub fn flush(&self) {
        // SAFETY: `wq` is live (type invariant).
        unsafe { bindings::__flush_workqueue(self.wq.as_ptr()) };
    }

    /// The queue, for the kernel crate's work item API.
    pub fn queue(&self) -> &Queue {
        // SAFETY: `wq` is live until `self` is dropped (type invariant), which the
        // borrow prevents; the kernel crate's `Queue` is a transparent wrapper.
        unsafe { Queue::from_raw(self.wq.as_ptr().cast()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: The queue is owned (type invariant); `destroy_workqueue` runs
        // what is still queued and frees it. Nothing queues on it afterwards, as
        // nobody can borrow it any more.
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}

/// A module's periodic tick: one delayed work item, on the module's own
/// queue, that runs `tick` every period until [`Ticker::stop`]. One work
/// item for all the module's timers instead of one per object keeps
/// teardown simple: nothing is pending per object, and at unload the tick
/// is stopped once, before the queue is destroyed.
#[pin_data]
pub struct Ticker {
    #[pin]
    work: DelayedWork<Ticker>,
    /// Cleared by [`Ticker::stop`]: the next run ends the ticking.
    running: AtomicBool,
    /// Runs one tick and queues the next ([`Ticker::schedule`]); an error
    /// (the module is going away) ends the ticking.
    tick: fn(&Arc<Ticker>) -> Result,
    #[pin]
    stopped: Mutex<bool>,
    #[pin]
    stopped_cv: CondVar,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for Ticker { self.work }
}

impl WorkItem for Ticker {
    type Pointer = Arc<Ticker>;

    fn run(this: Arc<Ticker>) {
        if this.running.load(Acquire) && (this.tick)(&this).is_ok() {
            return;
        }
        *this.stopped.lock() = true;
        this.stopped_cv.notify_all();
    }
}

impl Ticker {
    /// A ticker that runs `tick` once [`Ticker::schedule`]d.
    pub fn new(tick: fn(&Arc<Ticker>) -> Result) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                work <- new_delayed_work!("work::Ticker::work"),
                running: AtomicBool::new(true),
                tick,
                stopped <- new_mutex!(false),
                stopped_cv <- new_condvar!(),
            }),
            GFP_KERNEL,
        )
    }

    /// Runs the tick on `queue` in `ms` milliseconds (`EBUSY` if it is
    /// queued already).
    pub fn schedule(self: &Arc<Self>, queue: &OwnedQueue, ms: u32) -> Result {
        queue
            .queue()
            .enqueue_delayed(self.clone(), msecs_to_jiffies(ms))
            .map_err(|_| EBUSY)
    }

    /// Stops the tick, and waits until its last run has decided to stop (its
    /// queue's destruction waits for that run's end). Only for a ticker that
    /// was scheduled. Sleeps.
    pub fn stop(&self) {
        self.running.store(false, Release);
        let mut stopped = self.stopped.lock();
        while !*stopped {
            self.stopped_cv.wait(&mut stopped);
        }
    }
}

/// A random `u32` from the kernel's CRNG.
pub fn random_u32() -> u32 {
    // SAFETY: No preconditions.
    unsafe { bindings::get_random_u32() }
}

/// The number of online CPUs.
pub fn num_online_cpus() -> u32 {
    // SAFETY: No preconditions.
    unsafe { bindings::ferry_helper_num_online_cpus() }
}

/// The kernel's tick count (`get_jiffies_64()`), which never wraps.
pub fn jiffies_64() -> u64 {
    // SAFETY: No preconditions; it reads the counter.
    unsafe { bindings::ferry_helper_get_jiffies_64() }
}

/// A random `u64` from the kernel's CRNG.
pub fn random_u64() -> u64 {
    (u64::from(random_u32()) << 32) | u64::from(random_u32())
}
