// SPDX-License-Identifier: GPL-2.0

//! Completion queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`struct ib_cq`).
//!
//! Every CQ comes from ib_core (`__ib_alloc_cq`), in one of two poll
//! contexts ([`PollCtx`]):
//!
//! - [`PollCtx::Workqueue`]: ib_core polls it from `ib_comp_wq` after each
//!   completion event, and nobody else may.
//! - [`PollCtx::Softirq`]: ib_core polls it in softirq (`irq_poll`) after
//!   each completion event, as nvme-rdma's host queues: no thread is woken,
//!   and the handlers run in atomic context (they must not sleep).
//! - [`PollCtx::Direct`]: nobody polls it but its users, through its
//!   [`Poller`], as nvme-rdma's poll queues are polled by blk-mq's `.poll`. It
//!   gets no completion events. An `Owner` word lets one thread at a time
//!   process its completions (`ib_process_cq_direct` must not run twice at
//!   once), so its handlers see them one by one, in order.
//!
//! The completion handlers (`ib_cqe.done`) run one at a time per CQ, in
//! process context but for [`PollCtx::Softirq`]. Of the CQ's fields only `event_handler`
//! is written, once, right after allocation (`ib_alloc_cq` leaves it to its
//! caller); ib_core's own (`poll_ctx`, `cq_context`, ...) never are.
//!
//! Whoever creates QPs on a [`Cq`] must post only work requests whose
//! `wr_cqe` stays valid until its completion has been handled (or the QP is
//! drained): the pollers call `wr_cqe->done` of every completion.

use core::{
    ffi::c_void,
    ptr::{null_mut, NonNull},
    sync::atomic::{
        AtomicBool, AtomicU32,
        Ordering::{AcqRel, Acquire, Relaxed, Release},
    },
};
use kernel::{
    error::from_err_ptr,
    prelude::*,
    sync::Arc,
    time::{delay::fsleep, Delta},
};

use super::device::Registered;
use crate::bindings;

/// Who processes a CQ's completions (`enum ib_poll_context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollCtx {
    /// ib_core, from `ib_comp_wq` (`IB_POLL_WORKQUEUE`).
    Workqueue,
    /// The CQ's users, through its [`Poller`] (`IB_POLL_DIRECT`).
    Direct,
    /// ib_core, in softirq (`IB_POLL_SOFTIRQ`): handlers must not sleep.
    Softirq,
}

impl PollCtx {
    fn raw(self) -> bindings::ib_poll_context {
        match self {
            Self::Workqueue => bindings::ib_poll_context_IB_POLL_WORKQUEUE,
            Self::Direct => bindings::ib_poll_context_IB_POLL_DIRECT,
            Self::Softirq => bindings::ib_poll_context_IB_POLL_SOFTIRQ,
        }
    }
}

/// A completion queue from ib_core, freed on drop with `ib_free_cq` (which
/// also waits for rxe's late completions).
///
/// # Invariants
///
/// `cq` was returned by `__ib_alloc_cq` on `device` and is owned by this object;
/// `device` stays registered while the CQ exists. `poller` is `Some` exactly
/// for an `IB_POLL_DIRECT` CQ, and points to `cq`.
pub struct Cq {
    cq: NonNull<bindings::ib_cq>,
    device: Registered,
    poller: Option<Arc<Poller>>,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for Cq {}
// SAFETY: `&Cq` only reads fields fixed at allocation; polling goes through
// the `Poller`, which serializes it.
unsafe impl Sync for Cq {}

impl Cq {
    /// Allocates a CQ with at least `entries` entries on completion vector
    /// `comp_vector` of `device`, polled as `ctx` says, attributed to `owner`
    /// in `rdma res show cq`.
    ///
    /// The CQ holds a registration reference: drop it in the device's
    /// `ib_client` remove callback, or unregistering the device waits for it.
    /// May sleep.
    pub fn new(
        device: &Registered,
        entries: u32,
        comp_vector: u32,
        ctx: PollCtx,
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
                ctx.raw(),
                owner.as_char_ptr(),
            )
        })?;
        let cq = NonNull::new(cq).ok_or(ENOMEM)?;
        // SAFETY: The CQ was just allocated and no QP uses it yet, so nothing
        // reads the field now; `ib_alloc_cq` leaves it unset (`ib_create_cq`
        // would take it as an argument).
        unsafe { (*cq.as_ptr()).event_handler = Some(cq_event) };
        let poller = match ctx {
            PollCtx::Workqueue | PollCtx::Softirq => None,
            PollCtx::Direct => match Arc::new(
                Poller {
                    cq,
                    owner: Owner::default(),
                    polled: AtomicBool::new(false),
                },
                GFP_KERNEL,
            ) {
                Ok(p) => Some(p),
                Err(e) => {
                    // SAFETY: The CQ was just allocated and nothing uses it.
                    unsafe { bindings::ib_free_cq(cq.as_ptr()) };
                    return Err(e.into());
                }
            },
        };
        Ok(Self {
            cq,
            device: device.clone(),
            poller,
        })
    }

    /// The raw `ib_cq`, to create QPs on.
    pub fn as_raw(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    /// The device this CQ belongs to.
    pub fn device(&self) -> &Registered {
        &self.device
    }

    /// Who polls an `IB_POLL_DIRECT` CQ; `None` for one ib_core polls.
    pub fn poller(&self) -> Option<&Arc<Poller>> {
        self.poller.as_ref()
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

    /// How the CQ is polled (`enum ib_poll_context`), as ib_core recorded it.
    pub fn poll_ctx(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); set at allocation.
        unsafe { (*self.as_raw()).poll_ctx }
    }

    /// The completion vector the CQ is bound to.
    pub fn comp_vector(&self) -> u32 {
        // SAFETY: `cq` is valid (type invariant); set at allocation.
        unsafe { (*self.as_raw()).comp_vector }
    }

    /// Stops the CQ's pollers for good and waits until none is inside: from
    /// then on the caller alone processes its completions (`ib_drain_qp`
    /// polls an `IB_POLL_DIRECT` CQ itself). Does nothing for a CQ ib_core
    /// polls. May sleep; must not be called from a completion handler of
    /// this CQ (it would wait for itself).
    pub(crate) fn stop_polling(&self) {
        if let Some(p) = &self.poller {
            p.owner.close();
            while p.owner.held() {
                fsleep(Delta::from_millis(1));
            }
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        self.stop_polling();
        // SAFETY: The CQ is owned and its device still registered (type
        // invariant); its owner destroys every QP that uses it first, and
        // nobody polls it any more.
        unsafe { bindings::ib_free_cq(self.as_raw()) };
    }
}

/// Who processes an `IB_POLL_DIRECT` CQ's completions: nobody, or one thread.
///
/// One word of two bits, changed only by atomic read-modify-writes, so every
/// change sees the one before it:
///
/// - `OWNED`: a thread holds the CQ and processes its completions.
/// - `CLOSED`: the CQ is going away; nobody takes it any more.
#[derive(Default)]
struct Owner(AtomicU32);

impl Owner {
    const OWNED: u32 = 1;
    const CLOSED: u32 = 2;

    /// Takes the CQ if it is open and nobody holds it. Returns whether the
    /// caller holds it now.
    fn take(&self) -> bool {
        let mut s = self.0.load(Relaxed);
        loop {
            if s & (Self::CLOSED | Self::OWNED) != 0 {
                return false;
            }
            // Acquire: what the last holder did with the CQ happened before.
            match self
                .0
                .compare_exchange(s, s | Self::OWNED, Acquire, Relaxed)
            {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    /// Lets go of the CQ the caller holds.
    fn release(&self) {
        self.0.fetch_and(!Self::OWNED, Release);
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

/// Polls an `IB_POLL_DIRECT` [`Cq`] in the calling thread. Shared by the
/// CQ's users (an `Arc`); polling a CQ that is gone does nothing.
///
/// # Invariants
///
/// `cq` is live until `owner` is closed and no thread holds it: the [`Cq`]
/// waits for that before it frees the CQ. Every completion on it carries the
/// `wr_cqe` of a request that is still live (the [`Cq`]'s contract with its
/// QPs' owner).
pub struct Poller {
    cq: NonNull<bindings::ib_cq>,
    owner: Owner,
    /// Polled since [`Poller::poll_if_idle`] last looked.
    polled: AtomicBool,
}

// SAFETY: The CQ is used only by the thread that holds `owner` (type
// invariant), which may be any thread.
unsafe impl Send for Poller {}
// SAFETY: As for `Send`; the rest is atomic.
unsafe impl Sync for Poller {}

impl Poller {
    /// Processes up to `budget` completions of the CQ in the calling thread,
    /// calling their handlers here, unless another thread is processing them
    /// (another poller, or this thread further up its stack). Returns how
    /// many it processed.
    ///
    /// Process context: the handlers may sleep.
    pub fn poll(&self, budget: u32) -> u32 {
        let n = self.process(budget);
        if n.is_some() {
            self.polled.store(true, Relaxed);
        }
        n.unwrap_or(0)
    }

    /// Polls as [`Poller::poll`] if none of the CQ's users did since the last
    /// call, so that a CQ its users left alone still makes progress. Returns
    /// how many completions it processed. Its own polls do not count as a
    /// user's.
    pub fn poll_if_idle(&self, budget: u32) -> u32 {
        if self.polled.swap(false, Relaxed) {
            return 0;
        }
        self.process(budget).unwrap_or(0)
    }

    /// Processes up to `budget` completions unless another thread holds the
    /// CQ (`None` then, or with a zero budget).
    fn process(&self, budget: u32) -> Option<u32> {
        if budget == 0 || !self.owner.take() {
            return None;
        }
        let budget = c_int::try_from(budget).unwrap_or(c_int::MAX);
        // SAFETY: The CQ is live while this thread holds it, and each of its
        // completions carries the `ib_cqe` of a live request (type
        // invariants), whose owner handles it in process context.
        let n = unsafe { bindings::ib_process_cq_direct(self.cq.as_ptr(), budget) };
        self.owner.release();
        Some(u32::try_from(n).unwrap_or(0))
    }
}

/// Logs a CQ's asynchronous event, rate limited, with the device's name. A
/// CQ that overflows is reported only this way (`IB_EVENT_CQ_ERR`): the
/// completion that did not fit is lost (rxe then moves a QP whose receive it
/// was to the error state, and its requests are flushed).
///
/// # Safety
///
/// Only the driver calls this, with a valid event of a live CQ.
unsafe extern "C" fn cq_event(ev: *mut bindings::ib_event, _ctx: *mut c_void) {
    // SAFETY: `ev` is valid for the call, and names a CQ (the contract).
    let (kind, cq) = unsafe { ((*ev).event, (*ev).element.cq) };
    // SAFETY: `ib_event_msg` returns a static string for any value; the CQ
    // and its device are live during its event, and its resource id is fixed
    // at allocation.
    let (msg, id, dev) = unsafe {
        (
            CStr::from_char_ptr(bindings::ib_event_msg(kind)),
            (*cq).res.id,
            super::Device::from_raw((*cq).device),
        )
    };
    // `rdma res show cq` lists it by this id.
    crate::ratelimit::pr_warn_limited!("{} CQ {}: {}\n", dev.name().as_cstr(), id, msg);
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_cq_owner)]
mod tests {
    use super::Owner;

    #[test]
    fn one_holder_at_a_time() {
        let o = Owner::default();
        assert!(o.take());
        assert!(o.held());
        // Another poller does not get it.
        assert!(!o.take());
        o.release();
        assert!(!o.held());
        assert!(o.take());
        o.release();
    }

    #[test]
    fn closed_is_never_taken() {
        let o = Owner::default();
        assert!(o.take());
        o.close();
        // The holder keeps it until it lets go.
        assert!(o.held());
        assert!(!o.take());
        o.release();
        assert!(!o.held());
        assert!(!o.take());
        assert!(!o.held());
    }
}
