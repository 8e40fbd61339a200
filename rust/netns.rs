// SPDX-License-Identifier: GPL-2.0

//! Network namespaces.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h).

use core::ptr::NonNull;
use kernel::{sync::aref::AlwaysRefCounted, types::Opaque};

use crate::bindings;

/// A network namespace (`struct net`), borrowed from whoever holds it (the
/// netlink request or dump it came with), or kept alive by an `ARef<Net>`.
///
/// # Invariants
///
/// The wrapped `struct net` is valid for the lifetime of the borrow.
#[repr(transparent)]
pub struct Net(Opaque<bindings::net>);

impl Net {
    /// Borrows the namespace at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a `struct net` that stays valid for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::net) -> &'a Self {
        // SAFETY: `Net` is a transparent wrapper; validity is the caller's promise.
        unsafe { &*ptr.cast() }
    }

    /// The initial namespace, `init_net`.
    pub fn init() -> &'static Self {
        // SAFETY: `init_net` is a static that lives as long as the kernel.
        unsafe { Self::from_raw(core::ptr::addr_of_mut!(bindings::init_net)) }
    }

    /// The raw `struct net`.
    pub fn as_raw(&self) -> *mut bindings::net {
        self.0.get()
    }
}

// SAFETY: `Net` is only used through shared references; the kernel synchronizes
// its namespace objects internally.
unsafe impl Send for Net {}
// SAFETY: As for `Send`.
unsafe impl Sync for Net {}

// SAFETY: `get_net`/`put_net` keep the namespace alive: it is not torn down
// while a reference taken by `get_net` is held.
unsafe impl AlwaysRefCounted for Net {
    fn inc_ref(&self) {
        // SAFETY: `self` is valid (type invariant).
        unsafe { bindings::ferry_helper_get_net(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference taken by `inc_ref`.
        unsafe { bindings::ferry_helper_put_net(obj.cast().as_ptr()) };
    }
}
