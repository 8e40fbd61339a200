// SPDX-License-Identifier: GPL-2.0

//! Completion queues.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`struct ib_cq`).

use core::{
    ffi::c_void,
    ptr::{null_mut, NonNull},
};
use kernel::{error::from_err_ptr, prelude::*};

use super::device::Registered;
use crate::bindings;

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
