// SPDX-License-Identifier: GPL-2.0

//! The exported C API, `include/ferry/ferry.h`: the only `unsafe` of `src/`.
//!
//! Each `extern "C"` function checks what the caller passed and hands it to
//! the safe code: [`Service`] and [`Session`]. A `struct ferry_session *` is a
//! `Session` kept alive by an `Arc` reference the holder owns; a `struct
//! ferry_service *` likewise. The C caller's `struct ferry_ops` becomes a
//! [`Consumer`] and [`ServiceOps`] here. `exports.c` exports the symbols in
//! the `FERRY` namespace.
//!
//! Each function's type is checked against the header's declaration (which
//! bindgen turns into Rust) by [`checked`], so the two cannot drift apart.

use kernel::ffi::{c_char, c_int, c_uint, c_void};
use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use crate::{
    bindings::{ferry_limits, ferry_ops, ferry_service, ferry_session, ferry_session_params},
    cm::SockAddr,
    device::Ferry,
    netns::Net,
    service::{Consumer, Service, ServiceOps},
    session::{Params, Session},
    wire::{Reason, ServiceName},
};

/// Asserts that each exported function has the type of its declaration in
/// `include/ferry/ferry.h`.
macro_rules! checked {
    ($($name:ident: $ty:ty;)*) => {
        $(const _: [$ty; 2] = [crate::bindings::$name, $name];)*
    };
}

checked! {
    ferry_service_register:
        unsafe extern "C" fn(*const c_char, *const ferry_ops, *mut c_void) -> *mut ferry_service;
    ferry_service_unregister: unsafe extern "C" fn(*mut ferry_service);
    ferry_session_open: unsafe extern "C" fn(
        *const ferry_session_params,
        *const ferry_ops,
        *mut c_void,
    ) -> *mut ferry_session;
    ferry_session_close: unsafe extern "C" fn(*mut ferry_session);
    ferry_session_get: unsafe extern "C" fn(*mut ferry_session);
    ferry_session_put: unsafe extern "C" fn(*mut ferry_session);
    ferry_session_id: unsafe extern "C" fn(*const ferry_session) -> u32;
    ferry_session_limits: unsafe extern "C" fn(*mut ferry_session, *mut ferry_limits) -> c_int;
    ferry_send: unsafe extern "C" fn(*mut ferry_session, *const c_void, usize, c_uint) -> c_int;
}

/// `FERRY_NOWAIT`.
const NOWAIT: c_uint = crate::bindings::FERRY_NOWAIT;

/// The errno a consumer is told for `reason`: 0 for a local close.
fn reason_errno(reason: Reason) -> c_int {
    match reason {
        Reason::LocalClose | Reason::None => 0,
        r => r.errno().to_errno(),
    }
}

fn handle(s: &Arc<Session>) -> *mut ferry_session {
    Arc::as_ptr(s).cast_mut().cast()
}

/// A C consumer: its ops and its private pointer.
///
/// # Invariants
///
/// `ops` is valid until the session is closed (the API's contract), and has
/// a `message` callback.
struct COps {
    ops: *const ferry_ops,
    priv_: *mut c_void,
}

// SAFETY: The API requires the callbacks to be callable from any thread; the
// private pointer is the consumer's to synchronize.
unsafe impl Send for COps {}
// SAFETY: As for `Send`.
unsafe impl Sync for COps {}

impl COps {
    fn ops(&self) -> &ferry_ops {
        // SAFETY: Valid while the session is open (type invariant); ferry calls
        // no callback after `gone`.
        unsafe { &*self.ops }
    }
}

impl Consumer for COps {
    fn up(&self, s: &Arc<Session>) {
        if let Some(f) = self.ops().up {
            // SAFETY: A callback of the consumer, called as the header says.
            unsafe { f(handle(s), self.priv_) };
        }
    }

    fn down(&self, s: &Arc<Session>, reason: Reason) {
        if let Some(f) = self.ops().down {
            // SAFETY: As in `up`.
            unsafe { f(handle(s), self.priv_, reason.errno().to_errno()) };
        }
    }

    fn message(&self, s: &Arc<Session>, data: &[u8]) {
        if let Some(f) = self.ops().message {
            // SAFETY: As in `up`; `data` is valid for the call.
            unsafe { f(handle(s), self.priv_, data.as_ptr().cast(), data.len()) };
        }
    }

    fn writable(&self, s: &Arc<Session>) {
        if let Some(f) = self.ops().writable {
            // SAFETY: As in `up`.
            unsafe { f(handle(s), self.priv_) };
        }
    }

    fn gone(&self, s: &Arc<Session>, reason: Reason) {
        if let Some(f) = self.ops().gone {
            // SAFETY: As in `up`.
            unsafe { f(handle(s), self.priv_, reason_errno(reason)) };
        }
    }
}

/// A C service: its ops and the private pointer it registered with.
struct CService(COps);

impl ServiceOps for CService {
    fn accept(&self, s: &Arc<Session>) -> Result<Arc<dyn Consumer>, Reason> {
        let mut priv_ = self.0.priv_;
        if let Some(f) = self.0.ops().accept {
            // SAFETY: As in `COps::up`; `priv_` is a valid place for the answer.
            if unsafe { f(handle(s), self.0.priv_, &mut priv_) } != 0 {
                return Err(Reason::Refused);
            }
        }
        let consumer = COps {
            ops: self.0.ops,
            priv_,
        };
        Ok(Arc::new(consumer, GFP_KERNEL).map_err(|_| Reason::NoResources)?)
    }
}

/// Checks `ops`: not null, with a `message` callback.
///
/// # Safety
///
/// `ops` is null or valid for reads.
unsafe fn valid_ops(ops: *const ferry_ops) -> bool {
    // SAFETY: Null or valid (the function's contract).
    !ops.is_null() && unsafe { (*ops).message.is_some() }
}

/// Reads a service name from a C string.
///
/// # Safety
///
/// `name` is null or a NUL-terminated string.
unsafe fn service_name(name: *const c_char) -> Option<ServiceName> {
    if name.is_null() {
        return None;
    }
    // SAFETY: A NUL-terminated string (the function's contract).
    let name = unsafe { CStr::from_char_ptr(name) };
    ServiceName::new(name.to_bytes())
}

/// See `ferry_service_register()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// As the header says: `name` a string, `ops` valid until unregistering.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_service_register(
    name: *const c_char,
    ops: *const ferry_ops,
    priv_: *mut c_void,
) -> *mut ferry_service {
    // SAFETY: The caller passes a string and valid ops (the contract).
    let (name, valid) = unsafe { (service_name(name), valid_ops(ops)) };
    let Some(name) = name.filter(|_| valid) else {
        return EINVAL.to_ptr();
    };
    // INVARIANT: `ops` is valid until unregistering and has `message`.
    let svc = KBox::new(CService(COps { ops, priv_ }), GFP_KERNEL)
        .map_err(Error::from)
        .and_then(|b| Service::register(name, b));
    match svc {
        Ok(svc) => Arc::into_raw(svc).cast_mut().cast(),
        Err(e) => e.to_ptr(),
    }
}

/// See `ferry_service_unregister()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `svc` came from `ferry_service_register` and is not used afterwards.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_service_unregister(svc: *mut ferry_service) {
    // SAFETY: `svc` holds the reference `ferry_service_register` returned,
    // given back here (the contract).
    let svc = unsafe { Arc::<Service>::from_raw(svc.cast_const().cast()) };
    svc.unregister();
}

/// See `ferry_session_open()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `p` valid for reads, its `service` a string and its `net` null or a live
/// namespace; `ops` valid until the session is closed.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_open(
    p: *const ferry_session_params,
    ops: *const ferry_ops,
    priv_: *mut c_void,
) -> *mut ferry_session {
    // SAFETY: The caller passes valid ops (the contract).
    if p.is_null() || !unsafe { valid_ops(ops) } {
        return EINVAL.to_ptr();
    }
    // SAFETY: `p` is valid for reads (the contract).
    let p = unsafe { &*p };
    let Some(ferry) = Ferry::get() else {
        return ESHUTDOWN.to_ptr();
    };
    let net = if p.net.is_null() {
        Net::init()
    } else {
        // SAFETY: The caller holds the namespace across the call (the contract);
        // the session takes its own reference.
        unsafe { Net::from_raw(p.net) }
    };
    // SAFETY: `peer` is a plain struct of bytes.
    let storage = unsafe {
        core::slice::from_raw_parts(
            core::ptr::from_ref(&p.peer).cast::<u8>(),
            core::mem::size_of_val(&p.peer),
        )
    };
    // SAFETY: `service` is a string (the contract).
    let service = unsafe { service_name(p.service) };
    let default_channels = ferry.default_channels(net).unwrap_or(1);
    let params = Params::checked(
        p.channels,
        // CAST: `default_channels` is at most `MAX_CHANNELS`.
        default_channels as u16,
        p.queue_depth,
        p.max_msg,
        p.heartbeat_ms,
        p.timeout_ms,
        p.give_up_s,
    );
    let (Some(peer), Some(service), Ok(params)) = (SockAddr::from_storage(storage), service, params)
    else {
        return EINVAL.to_ptr();
    };
    // INVARIANT: `ops` is valid until the session closes and has `message`.
    let consumer: Arc<dyn Consumer> = match Arc::new(COps { ops, priv_ }, GFP_KERNEL) {
        Ok(c) => c,
        Err(_) => return ENOMEM.to_ptr(),
    };
    match Session::connect(&ferry, net, peer, service, params, Some(consumer)) {
        Ok(s) => Arc::into_raw(s).cast_mut().cast(),
        Err(reason) => reason.errno().to_ptr(),
    }
}

/// Borrows the session behind a handle.
///
/// # Safety
///
/// `s` is a handle whose reference the caller holds for `'a`.
unsafe fn borrow<'a>(s: *const ferry_session) -> ArcBorrow<'a, Session> {
    // SAFETY: A handle is `Arc::into_raw` of a session, and the caller's
    // reference keeps it alive for `'a` (the function's contract).
    unsafe { ArcBorrow::from_raw(s.cast()) }
}

/// See `ferry_session_close()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `s` is a handle from `ferry_session_open`, not used afterwards.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_close(s: *mut ferry_session) {
    // SAFETY: The opener's reference, given back (the contract).
    let s = unsafe { Arc::<Session>::from_raw(s.cast_const().cast()) };
    s.close(Reason::LocalClose);
}

/// See `ferry_session_get()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_get(s: *mut ferry_session) {
    // SAFETY: The caller holds a reference (the contract).
    let s: Arc<Session> = unsafe { borrow(s) }.into();
    // The new reference now belongs to the caller.
    let _ = Arc::into_raw(s);
}

/// See `ferry_session_put()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller gives back a reference from `ferry_session_get`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_put(s: *mut ferry_session) {
    // SAFETY: The reference `ferry_session_get` took (the contract).
    drop(unsafe { Arc::<Session>::from_raw(s.cast_const().cast()) });
}

/// See `ferry_session_id()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_id(s: *const ferry_session) -> u32 {
    // SAFETY: The caller holds a reference (the contract).
    unsafe { borrow(s) }.id
}

/// See `ferry_session_limits()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `out` is valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_limits(
    s: *mut ferry_session,
    out: *mut ferry_limits,
) -> c_int {
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { borrow(s) }.limits() {
        Ok((channels, queue_depth, max_payload)) => {
            // SAFETY: `out` is valid for writes (the contract).
            unsafe {
                out.write(ferry_limits {
                    channels,
                    queue_depth,
                    max_payload,
                })
            };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_send()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `data` is valid for `len` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_send(
    s: *mut ferry_session,
    data: *const c_void,
    len: usize,
    flags: c_uint,
) -> c_int {
    if flags & !NOWAIT != 0 {
        return EINVAL.to_errno();
    }
    if data.is_null() || len == 0 {
        return EMSGSIZE.to_errno();
    }
    // SAFETY: `data` is valid for `len` bytes (the contract).
    let data = unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len) };
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { borrow(s) }.send(data, flags & NOWAIT != 0) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}
