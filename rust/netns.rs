// SPDX-License-Identifier: GPL-2.0

//! Network namespaces.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h).

use kernel::types::Opaque;

use crate::bindings;

/// A network namespace (`struct net`), borrowed from whoever holds it (the
/// netlink request or dump it came with).
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

    /// The raw `struct net`.
    pub fn as_raw(&self) -> *mut bindings::net {
        self.0.get()
    }
}
