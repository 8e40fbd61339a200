// SPDX-License-Identifier: GPL-2.0

//! Network namespaces.
//!
//! C header: [`include/net/net_namespace.h`](srctree/include/net/net_namespace.h).

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::to_result, prelude::*, sync::aref::AlwaysRefCounted, types::Opaque};

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

/// What a module does when a network namespace is dismantled.
pub trait NetExit: 'static {
    /// `net` is going: its last reference is gone, and nothing of the
    /// module's may use it after this returns. Process context; may sleep.
    fn exit(net: &Net);
}

/// Pernet operations whose `exit` calls [`NetExit::exit`] of `T`
/// (`register_pernet_subsys`). Dropping the registration unregisters it,
/// which calls `exit` for every namespace that still exists.
///
/// # Invariants
///
/// `ops` is registered, and stays in place until drop unregisters it.
pub struct PernetRegistration<T: NetExit> {
    ops: Pin<KBox<Opaque<bindings::pernet_operations>>>,
    _t: PhantomData<T>,
}

// SAFETY: The registration is only unregistered through `&mut self`; the
// operations themselves are used by the kernel from any thread.
unsafe impl<T: NetExit> Send for PernetRegistration<T> {}
// SAFETY: `&PernetRegistration` gives no access.
unsafe impl<T: NetExit> Sync for PernetRegistration<T> {}

impl<T: NetExit> PernetRegistration<T> {
    /// Registers the operations. May sleep.
    pub fn new() -> Result<Self> {
        let ops = KBox::pin(
            Opaque::new(bindings::pernet_operations {
                exit: Some(exit_callback::<T>),
                ..Default::default()
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `ops` is valid and pinned in a box that stays until drop
        // unregisters it (type invariant).
        to_result(unsafe { bindings::register_pernet_subsys(ops.get()) })?;
        Ok(Self {
            ops,
            _t: PhantomData,
        })
    }
}

impl<T: NetExit> Drop for PernetRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: `ops` is registered (type invariant); the box is freed only
        // after this returns.
        unsafe { bindings::unregister_pernet_subsys(self.ops.get()) };
    }
}

/// The `exit` of [`PernetRegistration`].
///
/// # Safety
///
/// Called by the namespace core with a namespace valid for the call.
unsafe extern "C" fn exit_callback<T: NetExit>(net: *mut bindings::net) {
    // SAFETY: The namespace is valid for the call (the contract).
    T::exit(unsafe { Net::from_raw(net) });
}
