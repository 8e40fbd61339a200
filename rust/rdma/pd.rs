// SPDX-License-Identifier: GPL-2.0

//! Protection domains.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`struct ib_pd`).

use core::ptr::NonNull;
use kernel::{error::from_err_ptr, prelude::*};

use super::device::Registered;
use crate::bindings;

/// A kernel protection domain, deallocated on drop.
///
/// Never created with `IB_PD_UNSAFE_GLOBAL_RKEY`: remote access to memory goes
/// through per-transfer registrations only.
///
/// # Invariants
///
/// `pd` was returned by `__ib_alloc_pd` on `device` and is owned by this object;
/// `device` stays registered while the PD exists.
pub struct Pd {
    pd: NonNull<bindings::ib_pd>,
    device: Registered,
}

// SAFETY: A PD may be used and freed from any thread.
unsafe impl Send for Pd {}
// SAFETY: `&Pd` only reads immutable fields.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `device`, attributed to `owner` in `rdma res show pd`.
    ///
    /// The PD holds a registration reference: drop it in the device's
    /// `ib_client` remove callback, or unregistering the device waits for it.
    /// May sleep.
    pub fn new(device: &Registered, owner: &'static CStr) -> Result<Self> {
        // SAFETY: `device` is registered, so its driver is bound; flags 0 asks for
        // no global rkey; `owner` is static, as ib_core keeps the pointer for
        // resource tracking.
        let pd = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(device.as_raw(), 0, owner.as_char_ptr())
        })?;
        Ok(Self {
            pd: NonNull::new(pd).ok_or(ENOMEM)?,
            device: device.clone(),
        })
    }

    /// The raw `ib_pd`.
    pub fn as_raw(&self) -> *mut bindings::ib_pd {
        self.pd.as_ptr()
    }

    /// The device this PD belongs to.
    pub fn device(&self) -> &Registered {
        &self.device
    }

    /// The resource-tracking id, as "pdn" in `rdma res show pd`.
    pub fn id(&self) -> u32 {
        // SAFETY: `pd` is valid (type invariant); `res.id` is set at allocation.
        unsafe { (*self.as_raw()).res.id }
    }

    /// The lkey that covers all local DMA addresses.
    pub fn local_dma_lkey(&self) -> u32 {
        // SAFETY: `pd` is valid (type invariant); set at allocation.
        unsafe { (*self.as_raw()).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: The PD is owned and its device still registered (type
        // invariant); every object created in it is dropped first by its owner.
        unsafe { bindings::ferry_helper_ib_dealloc_pd(self.as_raw()) };
    }
}
