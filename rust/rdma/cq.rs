// SPDX-License-Identifier: GPL-2.0

//! Completion queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`struct ib_cq`).
//!
//! Two kinds:
//!
//! - [`Cq`]: ib_core polls it from `ib_comp_wq` (`ib_alloc_cq` with
//!   `IB_POLL_WORKQUEUE`).
//! - [`PolledCq`]: ferry polls it itself, from a work item of its own on a
//!   completion work queue ([`OwnedQueue::new_completions`], as
//!   `ib_comp_wq`) after each completion event, and from any thread that asks
//!   ([`Poller::poll`]), as a busy-polling consumer does. An `Owner` word
//!   makes sure only one thread at a time processes its completions, so its
//!   handlers see them one by one, in order, as they would from the work
//!   queue alone. ib_core's own CQs cannot offer that: a CQ of
//!   `IB_POLL_WORKQUEUE` must not be polled by anyone else, and one of
//!   `IB_POLL_DIRECT` gets no completion events.

use core::{
    ffi::c_void,
    ptr::{null_mut, NonNull},
    sync::atomic::{
        AtomicU32,
        Ordering::{AcqRel, Acquire, Relaxed, Release},
    },
};
use kernel::{
    error::from_err_ptr,
    new_work,
    prelude::*,
    sync::{Arc, ArcBorrow},
    time::{delay::fsleep, Delta},
    workqueue::{impl_has_work, Work, WorkItem},
};

use super::device::Registered;
use crate::{bindings, work::OwnedQueue};

/// A completion queue polled from `ib_comp_wq` (`IB_POLL_WORKQUEUE`), freed on
/// drop with `ib_free_cq` (which also waits for rxe's late completions).
///
/// # Invariants
///
/// `cq` was returned by `__ib_alloc_cq` on `device` and is owned by this object;
/// `device` stays registered while the CQ exists.
pub struct Cq {
    cq: NonNull<bindings::ib_cq>,
    device: Registered,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for Cq {}
// SAFETY: `&Cq` only reads fields fixed at allocation.
unsafe impl Sync for Cq {}

impl Cq {
    /// Allocates a CQ with at least `entries` entries on completion vector
    /// `comp_vector` of `device`, attributed to `owner` in `rdma res show cq`.
    ///
    /// The CQ holds a registration reference: drop it in the device's
    /// `ib_client` remove callback, or unregistering the device waits for it.
    /// May sleep.
    pub fn new(
        device: &Registered,
        entries: u32,
        comp_vector: u32,
        owner: &'static CStr,
    ) -> Result<Self> {
        let entries = c_int::try_from(entries).map_err(|_| EINVAL)?;
        let comp_vector = c_int::try_from(comp_vector).map_err(|_| EINVAL)?;
        // SAFETY: `device` is registered, so its driver is bound; no private data
        // is attached; `owner` is static, as ib_core keeps the pointer for
        // resource tracking.
        let cq = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                device.as_raw(),
                null_mut(),
                entries,
                comp_vector,
                bindings::ib_poll_context_IB_POLL_WORKQUEUE,
                owner.as_char_ptr(),
            )
        })?;
        let cq = NonNull::new(cq).ok_or(ENOMEM)?;
        // SAFETY: The CQ was just allocated and no QP uses it yet, so nothing
        // reads the field now; `ib_alloc_cq` leaves it unset (`ib_create_cq`
        // would take it as an argument).
        unsafe { (*cq.as_ptr()).event_handler = Some(cq_event) };
        Ok(Self {
            cq,
            device: device.clone(),
        })
    }

    /// The raw `ib_cq`.
    pub fn as_raw(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    /// The device this CQ belongs to.
    pub fn device(&self) -> &Registered {
        &self.device
    }

    /// The resource-tracking id, as "cqn" in `rdma res show cq`.
    pub fn id(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); `res.id` is set at allocation.
        unsafe { (*self.as_raw()).res.id }
    }

    /// The number of entries the device gave the CQ.
    pub fn entries(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); `cqe` is set at allocation.
        u32::try_from(unsafe { (*self.as_raw()).cqe }).unwrap_or(0)
    }

    /// How the CQ is polled (`enum ib_poll_context`): always `IB_POLL_WORKQUEUE`
    /// for CQs made by [`Cq::new`].
    pub fn poll_ctx(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); set at allocation.
        unsafe { (*self.as_raw()).poll_ctx }
    }

    /// The completion vector the CQ is bound to.
    pub fn comp_vector(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); set at allocation.
        unsafe { (*self.as_raw()).comp_vector }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: The CQ is owned and its device still registered (type
        // invariant); its owner destroys every QP that uses it first.
        unsafe { bindings::ib_free_cq(self.as_raw()) };
    }
}

/// Completions the work item processes before it lets others run (ib_core's
/// `IB_POLL_BUDGET_WORKQUEUE` is 65536; ferry's CQs hold a few hundred).
const WORK_BUDGET: c_int = 1024;

/// Who processes a [`PolledCq`]'s completions: nobody, or one thread.
///
/// One word of three bits, changed only by atomic read-modify-writes, so
/// every change sees the one before it:
///
/// - `OWNED`: a thread holds the CQ and processes its completions.
/// - `KICKED`: a completion event's work run found the CQ held. The holder
///   queues the work again when it lets go, so no event is lost. Only ever
///   set together with `OWNED`.
/// - `CLOSED`: the CQ is going away; nobody takes it any more.
#[derive(Default)]
struct Owner(AtomicU32);

impl Owner {
    const OWNED: u32 = 1;
    const KICKED: u32 = 2;
    const CLOSED: u32 = 4;

    /// Takes the CQ if it is open and nobody holds it. If `kick` and
    /// somebody holds it, leaves the holder a kick (see [`Owner::release`]).
    /// Returns whether the caller holds the CQ now.
    fn take(&self, kick: bool) -> bool {
        let mut s = self.0.load(Relaxed);
        loop {
            let new = if s & Self::CLOSED != 0 {
                return false;
            } else if s & Self::OWNED == 0 {
                s | Self::OWNED
            } else if kick && s & Self::KICKED == 0 {
                s | Self::KICKED
            } else {
                return false;
            };
            // Acquire: what the last holder did with the CQ happened before.
            match self.0.compare_exchange(s, new, Acquire, Relaxed) {
                Ok(_) => return s & Self::OWNED == 0,
                Err(now) => s = now,
            }
        }
    }

    /// Lets go of the CQ the caller holds. Returns whether it was kicked
    /// meanwhile: the caller must then queue the work item again.
    fn release(&self) -> bool {
        self.0.fetch_and(!(Self::OWNED | Self::KICKED), Release) & Self::KICKED != 0
    }

    /// Closes the CQ: nobody takes it from now on. A thread may still hold
    /// it: wait until [`Owner::held`] is false.
    fn close(&self) {
        self.0.fetch_or(Self::CLOSED, AcqRel);
    }

    /// Whether a thread holds the CQ.
    fn held(&self) -> bool {
        self.0.load(Acquire) & Self::OWNED != 0
    }
}

/// The part of a [`PolledCq`] that its completion events and its pollers
/// share: the CQ, its `Owner`, its work item and the queue it runs on.
///
/// # Invariants
///
/// `cq` is live while the [`PolledCq`] that made this object exists and has
/// not closed `owner`; a thread that holds `owner` may use it until it lets
/// go, as the [`PolledCq`] waits for that before it destroys the CQ.
#[pin_data]
pub struct Poller {
    cq: NonNull<bindings::ib_cq>,
    owner: Owner,
    #[pin]
    work: Work<Poller>,
    wq: Arc<OwnedQueue>,
}

// SAFETY: The CQ is used only by the thread that holds `owner` (type
// invariant), which may be any thread.
unsafe impl Send for Poller {}
// SAFETY: As for `Send`; the rest is atomic or the work item, which is made
// for sharing.
unsafe impl Sync for Poller {}

impl_has_work! {
    impl HasWork<Self> for Poller { self.work }
}

impl Poller {
    /// Processes up to `budget` completions of the CQ in the calling thread,
    /// calling their handlers here, unless another thread is processing them
    /// (the work item, another poller, or this thread further up its stack).
    /// Returns how many it processed.
    ///
    /// Process context: the handlers may sleep.
    pub fn poll(self: &Arc<Self>, budget: u32) -> u32 {
        if budget == 0 || !self.owner.take(false) {
            return 0;
        }
        let budget = c_int::try_from(budget).unwrap_or(c_int::MAX);
        // SAFETY: The CQ is live while this thread holds it (type invariant).
        // Each of its completions carries the `ib_cqe` of a live request,
        // whose owner handles it in process context.
        let n = unsafe { bindings::ib_process_cq_direct(self.cq.as_ptr(), budget) };
        // A completion event while this thread held the CQ is left to the work
        // item, which also arms the CQ again. An event that came before and
        // is still queued finds its completions gone, and only arms it.
        if self.owner.release() {
            Self::queue(self.clone());
        }
        u32::try_from(n).unwrap_or(0)
    }

    /// Queues the work item (nothing happens if it is queued already).
    fn queue(this: Arc<Self>) {
        let wq = this.wq.clone();
        let _ = wq.queue().enqueue(this);
    }
}

impl WorkItem for Poller {
    type Pointer = Arc<Poller>;

    fn run(this: Arc<Self>) {
        if !this.owner.take(true) {
            // Closed, or held: the holder queues the work again.
            return;
        }
        let cq = this.cq.as_ptr();
        // SAFETY: The CQ is live while this thread holds it (type invariant);
        // its completions are handled as in `Poller::poll`.
        let n = unsafe { bindings::ib_process_cq_direct(cq, WORK_BUDGET) };
        // Over budget: let other work run, then go on. Else ask for the next
        // event, and go on at once if a completion slipped in before it.
        let more = n >= WORK_BUDGET
            // SAFETY: As above.
            || unsafe { bindings::ferry_helper_ib_req_notify_cq(cq, NOTIFY) } > 0;
        let kicked = this.owner.release();
        if more || kicked {
            Self::queue(this);
        }
    }
}

/// Ask for an event at the next completion, and say whether one came since
/// the CQ was last polled empty (ib_core's `IB_POLL_FLAGS`).
const NOTIFY: bindings::ib_cq_notify_flags = bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP
    | bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS;

/// A completion queue that ferry polls itself: from its work item on a
/// completion work queue after a completion event (as `IB_POLL_WORKQUEUE`
/// does on `ib_comp_wq`), and from any thread through its [`Poller`];
/// destroyed on drop.
///
/// # Invariants
///
/// `poller.cq` was returned by `__ib_create_cq` on `device`, with `poller` as
/// its context, and is owned by this object; `_device` stays registered while
/// the CQ exists.
pub struct PolledCq {
    poller: Arc<Poller>,
    /// Held for its registration reference.
    _device: Registered,
}

impl PolledCq {
    /// Allocates a CQ with at least `entries` entries on completion vector
    /// `comp_vector` of `device`, attributed to `owner` in `rdma res show cq`,
    /// whose completion events queue its work on `wq`, and asks for its first
    /// event.
    ///
    /// The CQ holds a registration reference, as a [`Cq`] does. May sleep.
    pub fn new(
        device: &Registered,
        entries: u32,
        comp_vector: u32,
        owner: &'static CStr,
        wq: &Arc<OwnedQueue>,
    ) -> Result<Self> {
        let attr = bindings::ib_cq_init_attr {
            cqe: entries,
            comp_vector,
            ..Default::default()
        };
        // SAFETY: `device` is registered, so its driver is bound; `attr` is
        // valid for the call; `owner` is static, as ib_core keeps the pointer
        // for resource tracking. The context is set below, before the CQ is
        // armed: until then the driver calls neither handler.
        let cq = from_err_ptr(unsafe {
            bindings::__ib_create_cq(
                device.as_raw(),
                Some(comp_event),
                Some(cq_event),
                null_mut(),
                &attr,
                owner.as_char_ptr(),
            )
        })?;
        let cq = NonNull::new(cq).ok_or(ENOMEM)?;
        let poller = match Arc::pin_init(
            pin_init!(Poller {
                cq,
                owner: Owner::default(),
                work <- new_work!("ferry::cq"),
                wq: wq.clone(),
            }),
            GFP_KERNEL,
        ) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: The CQ was just created, no QP uses it and it was
                // never armed.
                unsafe { bindings::ib_destroy_cq_user(cq.as_ptr(), null_mut()) };
                return Err(e);
            }
        };
        // SAFETY: The CQ is live, unarmed and unused, so nothing reads these
        // fields now. `poll_ctx` is what `rdma res show` reports, and what
        // `ib_drain_qp` reads to know that a work item, not the drainer,
        // polls the CQ; `cq_context` is the `Poller` that `self` keeps alive
        // until the CQ is destroyed (the handler's contract).
        unsafe {
            (*cq.as_ptr()).poll_ctx = bindings::ib_poll_context_IB_POLL_WORKQUEUE;
            (*cq.as_ptr()).cq_context = Arc::as_ptr(&poller).cast_mut().cast();
            bindings::ferry_helper_ib_req_notify_cq(
                cq.as_ptr(),
                bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP,
            );
        }
        Ok(Self {
            poller,
            _device: device.clone(),
        })
    }

    /// The raw `ib_cq`, to create QPs on.
    pub fn as_raw(&self) -> *mut bindings::ib_cq {
        self.poller.cq.as_ptr()
    }

    /// Who polls this CQ in the caller's thread.
    pub fn poller(&self) -> &Arc<Poller> {
        &self.poller
    }

    /// The completion vector the CQ is bound to.
    pub fn comp_vector(&self) -> u32 {
        // SAFETY: The CQ is live while `self` exists (type invariant); the
        // field is set at creation.
        unsafe { (*self.as_raw()).comp_vector }
    }
}

impl Drop for PolledCq {
    fn drop(&mut self) {
        let p = &self.poller;
        p.owner.close();
        while p.owner.held() {
            fsleep(Delta::from_millis(1));
        }
        // SAFETY: Nobody holds the CQ and nobody will (it is closed); its
        // owner destroyed every QP on it first. Once destroyed, the driver
        // calls neither handler again.
        let ret = unsafe { bindings::ib_destroy_cq_user(self.as_raw(), null_mut()) };
        if ret != 0 {
            // Still the driver's: its handlers may run, so their context stays.
            pr_err!("CQ: destroying it failed ({}): leaking it\n", ret);
            core::mem::forget(p.clone());
            return;
        }
        // A work run still queued finds the CQ closed and only drops its
        // reference to the poller: wait for it. (One that a run re-queued as
        // it let go may come later, to the same end; the queue's owner drains
        // the queue before it destroys it.)
        // SAFETY: The work item is initialized and pinned inside the `Arc`.
        unsafe { bindings::flush_work(Work::raw_get(&p.work).cast()) };
    }
}

/// The completion event handler of a [`PolledCq`]: queues its work item.
/// Any context (rxe calls it under a spinlock, with interrupts off).
///
/// # Safety
///
/// Only the driver calls this, with the `Poller` given as the CQ's context,
/// which its [`PolledCq`] keeps alive until the CQ is destroyed.
unsafe extern "C" fn comp_event(_cq: *mut bindings::ib_cq, ctx: *mut c_void) {
    // SAFETY: `ctx` came from `Arc::as_ptr` and the `Arc` is alive (the
    // contract).
    let p = unsafe { ArcBorrow::<Poller>::from_raw(ctx.cast()) };
    Poller::queue(p.into());
}

/// Logs a CQ's asynchronous event. A CQ that overflows is reported only this
/// way (`IB_EVENT_CQ_ERR`): the completion that did not fit is lost (rxe then
/// moves a QP whose receive it was to the error state, and its requests are
/// flushed).
///
/// # Safety
///
/// Only the driver calls this, with a valid event of a live CQ.
unsafe extern "C" fn cq_event(ev: *mut bindings::ib_event, _ctx: *mut c_void) {
    // SAFETY: `ev` is valid for the call, and names a CQ (the contract).
    let (kind, cq) = unsafe { ((*ev).event, (*ev).element.cq) };
    // SAFETY: `ib_event_msg` returns a static string for any value; the CQ is
    // live during its event, and its resource id is fixed at allocation.
    let (msg, id) = unsafe {
        (
            CStr::from_char_ptr(bindings::ib_event_msg(kind)),
            (*cq).res.id,
        )
    };
    pr_warn!("CQ {}: {}\n", id, msg);
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_cq_owner)]
mod tests {
    use super::Owner;

    #[test]
    fn one_holder_at_a_time() {
        let o = Owner::default();
        assert!(o.take(false));
        assert!(o.held());
        // Another poller, or a work run: neither gets it.
        assert!(!o.take(false));
        assert!(!o.take(true));
        // The work run left a kick, once.
        assert!(o.release());
        assert!(!o.held());
        assert!(o.take(true));
        assert!(!o.release());
    }

    #[test]
    fn a_poller_leaves_no_kick() {
        let o = Owner::default();
        assert!(o.take(true));
        assert!(!o.take(false));
        assert!(!o.release());
    }

    #[test]
    fn closed_is_never_taken() {
        let o = Owner::default();
        assert!(o.take(false));
        o.close();
        // The holder keeps it until it lets go; a late work run leaves no
        // kick, as there is nothing left to do.
        assert!(o.held());
        assert!(!o.take(true));
        assert!(!o.take(false));
        assert!(!o.release());
        assert!(!o.held());
        assert!(!o.take(true));
        assert!(!o.take(false));
        assert!(!o.held());
    }
}
