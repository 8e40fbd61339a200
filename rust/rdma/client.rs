// SPDX-License-Identifier: GPL-2.0

//! ib_core clients: being told of every RDMA device as it comes and goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`struct ib_client`, `ib_register_client`).
//!
//! ib_core calls a client's `add` for every registered device (at registration
//! time for existing ones) and `remove` when a device goes away or the client
//! unregisters. `remove` must release everything the client holds on the device
//! before it returns: ib_core frees the device afterwards.
//!
//! `add` receives no pointer to the client, so, as C clients do, the `ib_client`
//! lives in a `static` ([`ClientStatic`]) beside the published client object.

use kernel::{error::to_result, prelude::*, sync::Arc, types::Opaque};

use super::{device::Registered, Device};
use crate::{
    bindings,
    slot::{Published, Slot},
};

/// A module's ib_core client.
pub trait Client: Send + Sync + Sized + 'static {
    /// What the client keeps per device, from `add` to `remove`.
    type DeviceData: Send + Sync;

    /// The static that holds this client's registration.
    fn client_static() -> &'static ClientStatic<Self>;

    /// A device appeared (or existed when the client registered).
    ///
    /// Process context, may sleep; ib_core serializes it with `remove` for the
    /// same device. An error means the client does not use this device; `remove`
    /// is then not called for it.
    fn add(&self, device: &Registered) -> Result<Self::DeviceData>;

    /// `device` is going away (or the client unregisters). Everything held on it,
    /// `data` included, must be released before returning. Process context, may
    /// sleep.
    fn remove(&self, device: &Registered, data: Self::DeviceData);
}

/// The `ib_client` of a module and the client object its callbacks reach.
///
/// Declare one as a `static` and return it from [`Client::client_static`].
///
/// # Invariants
///
/// `raw` is registered with ib_core exactly while a [`Registration`] for it
/// exists, and is only written before registration.
pub struct ClientStatic<T: Client> {
    raw: Opaque<bindings::ib_client>,
    client: Slot<T>,
}

// SAFETY: `raw` is only written by `Registration::new` before it is registered
// (ib_core then synchronizes its own fields); `client` is `Sync`.
unsafe impl<T: Client> Sync for ClientStatic<T> {}

impl<T: Client> ClientStatic<T> {
    /// An unregistered client; usable in a `static`.
    pub const fn new() -> Self {
        Self {
            raw: Opaque::zeroed(),
            client: Slot::new(),
        }
    }

    /// The registered client object, or `None` when not registered.
    pub fn get(&self) -> Option<Arc<T>> {
        self.client.get()
    }
}

impl<T: Client> Default for ClientStatic<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// A registered ib_core client; unregistered (removing every device) on drop.
///
/// # Invariants
///
/// `statik.raw` is registered with ib_core, with `T`'s trampolines as callbacks.
pub struct Registration<T: Client> {
    statik: &'static ClientStatic<T>,
    // Dropped after unregistering, so callbacks always find the client.
    _published: Published<T>,
}

impl<T: Client> Registration<T> {
    /// Publishes `client` and registers it with ib_core under `name`. `add` runs
    /// for every existing device before this returns. May sleep.
    ///
    /// Fails with `EBUSY` if `T` is registered already.
    pub fn new(client: Arc<T>, name: &'static CStr) -> Result<Self> {
        let statik = T::client_static();
        let published = statik.client.publish(client)?;
        // SAFETY: Nobody else writes `raw`: the successful publish above makes this
        // the only registration (a second one fails with `EBUSY`), and ib_core
        // does not know `raw` before `ib_register_client`.
        unsafe {
            let raw = statik.raw.get();
            (*raw).name = name.as_char_ptr();
            (*raw).add = Some(add_callback::<T>);
            (*raw).remove = Some(remove_callback::<T>);
        }
        // SAFETY: `raw` is a static, so it outlives the registration, and its
        // callbacks are valid functions.
        to_result(unsafe { bindings::ib_register_client(statik.raw.get()) })?;
        Ok(Self {
            statik,
            _published: published,
        })
    }
}

impl<T: Client> Drop for Registration<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` is registered (type invariant). This calls `remove` for every
        // device that `add` accepted and returns after the last callback.
        unsafe { bindings::ib_unregister_client(self.statik.raw.get()) };
    }
}

/// ib_core's `add` callback for `T`.
///
/// # Safety
///
/// Only ib_core calls this, with a valid device, while `T` is registered.
unsafe extern "C" fn add_callback<T: Client>(raw: *mut bindings::ib_device) -> c_int {
    let statik = T::client_static();
    let Some(client) = statik.get() else {
        return ENODEV.to_errno();
    };
    // SAFETY: ib_core passes a valid device for the duration of `add`.
    let device = unsafe { Device::from_raw(raw) };
    // ib_core holds the device's first registration reference until after every
    // client's `remove`, so this cannot fail here.
    let Some(device) = device.registered() else {
        return ENODEV.to_errno();
    };
    // Allocate first: once `add` succeeded, nothing may fail, since ib_core
    // calls `remove` only for devices whose `add` returned 0.
    let slot = match KBox::<T::DeviceData>::new_uninit(GFP_KERNEL) {
        Ok(slot) => slot,
        Err(e) => return Error::from(e).to_errno(),
    };
    let data = match client.add(&device) {
        Ok(data) => KBox::write(slot, data),
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `raw` is valid and `statik.raw` is the registered client whose `add`
    // this is. ib_core hands the pointer back to `remove_callback` once, which
    // takes ownership of the box again.
    unsafe { bindings::ib_set_client_data(raw, statik.raw.get(), KBox::into_raw(data).cast()) };
    0
}

/// ib_core's `remove` callback for `T`.
///
/// # Safety
///
/// Only ib_core calls this, once per successful `add`, with a valid device and
/// the client data `add_callback` set.
unsafe extern "C" fn remove_callback<T: Client>(raw: *mut bindings::ib_device, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` was set by `add_callback` from `KBox::into_raw`, and ib_core
    // passes it to `remove` exactly once.
    let data = unsafe { KBox::from_raw(data.cast::<T::DeviceData>()) };
    // SAFETY: ib_core passes a valid device for the duration of `remove`.
    let device = unsafe { Device::from_raw(raw) };
    // ib_core drops its own registration reference only after every client's
    // `remove`, so taking one cannot fail here.
    match (T::client_static().get(), device.registered()) {
        (Some(client), Some(device)) => client.remove(&device, KBox::into_inner(data)),
        // Unreachable (see above). Freeing the data still releases what it holds.
        _ => drop(data),
    }
}
