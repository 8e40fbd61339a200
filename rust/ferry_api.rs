// SPDX-License-Identifier: GPL-2.0

//! The safe Rust face of ferry's kernel API, for Rust consumers.
//!
//! C header: [`include/ferry/ferry.h`](../include/ferry/ferry.h), which states
//! every contract this module relies on; Documentation/api.md is the guide.
//!
//! A consumer module pulls this file in with `#[path]` (one crate per module)
//! and says `imports_ns: ["FERRY"]` in its `module!`.
//!
//! - A [`Registration`] offers a [`Service`]: each session a client opens is
//!   handed to [`Service::accept`], whose [`Handler`] gets the session's
//!   callbacks. Dropping the registration closes the service's sessions and
//!   waits until none of their callbacks runs.
//! - [`Session::open`] opens a client session with a [`Handler`]; dropping
//!   the [`Session`] closes it.
//! - In callbacks a session is a [`SessionRef`]; [`SessionRef::to_owned`]
//!   keeps it beyond the callback.
//!
//! A handler lives in an `Arc` that ferry holds from `accept` (or open) until
//! [`Handler::gone`], which is always the last callback.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    error::{from_err_ptr, to_result},
    ffi::{c_int, c_void},
    prelude::*,
    sync::{Arc, ArcBorrow},
};

/// Raw bindings to `include/ferry/ferry.h`, generated at build time.
#[allow(
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    dead_code,
    missing_docs,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    improper_ctypes,
    unreachable_pub,
    unsafe_op_in_unsafe_fn
)]
mod ffi {
    use kernel::ffi;
    type __kernel_size_t = usize;
    type __kernel_ssize_t = isize;
    type __kernel_ptrdiff_t = isize;
    include!("bindings/ferry_api_generated.rs");
}

/// An IPv4 or IPv6 address and port to connect to.
#[derive(Clone, Copy)]
pub enum Peer {
    /// An IPv4 address (as written: `[192, 0, 2, 1]`) and port.
    V4([u8; 4], u16),
    /// An IPv6 address and port.
    V6([u8; 16], u16),
}

/// `AF_INET` and `AF_INET6`.
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

impl Peer {
    /// The address as a `struct sockaddr_storage`.
    fn storage(&self) -> ffi::__kernel_sockaddr_storage {
        let mut st = ffi::__kernel_sockaddr_storage::default();
        let mut b = [0u8; 28];
        let (family, port) = match *self {
            Peer::V4(ip, port) => {
                b[4..8].copy_from_slice(&ip);
                (AF_INET, port)
            }
            Peer::V6(ip, port) => {
                b[8..24].copy_from_slice(&ip);
                (AF_INET6, port)
            }
        };
        b[0..2].copy_from_slice(&family.to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        // SAFETY: `sockaddr_storage` is 128 plain bytes, more than `b`.
        unsafe {
            core::ptr::copy_nonoverlapping(
                b.as_ptr(),
                core::ptr::from_mut(&mut st).cast::<u8>(),
                b.len(),
            )
        };
        st
    }
}

/// What [`Session::open`] opens: 0 in a number field picks ferry's default
/// (see `struct ferry_session_params`).
pub struct Params<'a> {
    /// The peer's address and port.
    pub peer: Peer,
    /// The peer's service name.
    pub service: &'a CStr,
    /// Channels; 0: one per CPU.
    pub channels: u16,
    /// Receive buffers per channel.
    pub queue_depth: u32,
    /// Largest message this side accepts, including ferry's 16-byte header.
    pub max_msg: u32,
    /// Heartbeat interval, ms.
    pub heartbeat_ms: u32,
    /// Silence after which the peer is dead, and the longest a send waits, ms.
    pub timeout_ms: u32,
    /// Seconds of failed reconnecting before the session closes.
    pub give_up_s: u32,
}

impl<'a> Params<'a> {
    /// Defaults for everything but where to connect.
    pub fn new(peer: Peer, service: &'a CStr) -> Self {
        Self {
            peer,
            service,
            channels: 0,
            queue_depth: 0,
            max_msg: 0,
            heartbeat_ms: 0,
            timeout_ms: 0,
            give_up_s: 0,
        }
    }
}

/// What a session negotiated (`struct ferry_limits`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Channels of the session.
    pub channels: u16,
    /// The peer's receive buffers per channel.
    pub queue_depth: u32,
    /// Largest message [`SessionRef::send`] takes.
    pub max_payload: u32,
}

/// Whether a send may wait for a credit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Wait up to the session's timeout (not from a callback).
    Yes,
    /// Fail with `EAGAIN`; [`Handler::writable`] follows.
    No,
}

/// The callbacks of a session; see `struct ferry_ops` for their contexts.
pub trait Handler: Send + Sync + Sized + 'static {
    /// The session is connected (again).
    fn up(&self, _s: &SessionRef) {}
    /// The connection is lost (`err` says why); a client reconnects.
    fn down(&self, _s: &SessionRef, _err: Error) {}
    /// A message arrived; `data` is valid during the call only.
    fn message(&self, s: &SessionRef, data: &[u8]);
    /// Credits returned after a send failed with `EAGAIN`.
    fn writable(&self, _s: &SessionRef) {}
    /// The session is closed (`None`: closed on this side); the last call.
    fn gone(&self, _s: &SessionRef, _err: Option<Error>) {}
}

/// A service: decides on each session a client opens.
pub trait Service: Send + Sync + 'static {
    /// The handler of one of the service's sessions.
    type Session: Handler;
    /// A client opened session `s`: its handler, or an error to refuse it.
    fn accept(&self, s: &SessionRef) -> Result<Arc<Self::Session>>;
}

/// A session handle as callbacks see it (`struct ferry_session *`).
///
/// # Invariants
///
/// Wraps a handle that ferry or the holder keeps a reference to for as long
/// as the `&SessionRef` lives.
#[repr(transparent)]
pub struct SessionRef(ffi::ferry_session);

impl SessionRef {
    /// # Safety
    ///
    /// `ptr` is a live handle for `'a`.
    unsafe fn from_raw<'a>(ptr: *mut ffi::ferry_session) -> &'a Self {
        // SAFETY: Transparent wrapper; validity is the caller's promise.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut ffi::ferry_session {
        core::ptr::from_ref(self).cast_mut().cast()
    }

    /// The id `ferryctl session show` lists the session under.
    pub fn id(&self) -> u32 {
        // SAFETY: A live handle (type invariant).
        unsafe { ffi::ferry_session_id(self.as_raw()) }
    }

    /// What the session negotiated; `ENOTCONN` unless connected.
    pub fn limits(&self) -> Result<Limits> {
        let mut l = ffi::ferry_limits::default();
        // SAFETY: A live handle (type invariant); `l` is valid for writes.
        to_result(unsafe { ffi::ferry_session_limits(self.as_raw(), &mut l) })?;
        Ok(Limits {
            channels: l.channels,
            queue_depth: l.queue_depth,
            max_payload: l.max_payload,
        })
    }

    /// Sends `data` as one message; see `ferry_send()`.
    pub fn send(&self, data: &[u8], wait: Wait) -> Result {
        let flags = match wait {
            Wait::Yes => 0,
            Wait::No => ffi::FERRY_NOWAIT,
        };
        // SAFETY: A live handle (type invariant); `data` is valid for the call.
        to_result(unsafe {
            ffi::ferry_send(self.as_raw(), data.as_ptr().cast(), data.len(), flags)
        })
    }

    /// A reference of the caller's own to the session.
    pub fn to_owned(&self) -> SessionHandle {
        // SAFETY: A live handle (type invariant).
        unsafe { ffi::ferry_session_get(self.as_raw()) };
        // INVARIANT: the reference just taken.
        SessionHandle(NonNull::from(self))
    }
}

/// A counted reference to a session, from [`SessionRef::to_owned`].
///
/// # Invariants
///
/// Holds one reference taken with `ferry_session_get`.
pub struct SessionHandle(NonNull<SessionRef>);

// SAFETY: ferry's session functions may be called from any thread.
unsafe impl Send for SessionHandle {}
// SAFETY: As for `Send`.
unsafe impl Sync for SessionHandle {}

impl core::ops::Deref for SessionHandle {
    type Target = SessionRef;

    fn deref(&self) -> &SessionRef {
        // SAFETY: The reference held keeps the handle live (type invariant).
        unsafe { self.0.as_ref() }
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        // SAFETY: Gives back the reference held (type invariant).
        unsafe { ffi::ferry_session_put(self.as_raw()) };
    }
}

/// A client session from [`Session::open`]; dropping it closes it.
///
/// # Invariants
///
/// Holds the reference `ferry_session_open` returned.
pub struct Session<H: Handler> {
    raw: NonNull<SessionRef>,
    _handler: PhantomData<Arc<H>>,
}

// SAFETY: As for `SessionHandle`.
unsafe impl<H: Handler> Send for Session<H> {}
// SAFETY: As for `SessionHandle`.
unsafe impl<H: Handler> Sync for Session<H> {}

impl<H: Handler> Session<H> {
    /// Opens a session and waits until it is up or has failed; see
    /// `ferry_session_open()` for the errors.
    pub fn open(p: &Params<'_>, handler: Arc<H>) -> Result<Self> {
        let raw = ffi::ferry_session_params {
            net: core::ptr::null_mut(),
            peer: p.peer.storage(),
            service: p.service.as_char_ptr(),
            channels: p.channels,
            queue_depth: p.queue_depth,
            max_msg: p.max_msg,
            heartbeat_ms: p.heartbeat_ms,
            timeout_ms: p.timeout_ms,
            give_up_s: p.give_up_s,
        };
        let priv_ = Arc::into_raw(handler).cast_mut().cast::<c_void>();
        // SAFETY: `raw` is valid for the call; the ops are static; `priv_`
        // is a reference to the handler that `gone` gives back.
        let s = from_err_ptr(unsafe { ffi::ferry_session_open(&raw, &Vtable::<H>::OPS, priv_) });
        match s.ok().and_then(NonNull::new) {
            Some(s) => Ok(Self {
                // INVARIANT: the opener's reference.
                raw: s.cast(),
                _handler: PhantomData,
            }),
            None => {
                // A failed open calls nothing: the reference is still ours.
                // SAFETY: From `Arc::into_raw` above.
                drop(unsafe { Arc::<H>::from_raw(priv_.cast()) });
                Err(s.err().unwrap_or(ENOMEM))
            }
        }
    }
}

impl<H: Handler> core::ops::Deref for Session<H> {
    type Target = SessionRef;

    fn deref(&self) -> &SessionRef {
        // SAFETY: The opener's reference keeps the handle live (type invariant).
        unsafe { self.raw.as_ref() }
    }
}

impl<H: Handler> Drop for Session<H> {
    fn drop(&mut self) {
        // SAFETY: Gives back the opener's reference (type invariant).
        unsafe { ffi::ferry_session_close(self.as_raw()) };
    }
}

/// A registered service; dropping it unregisters it.
///
/// # Invariants
///
/// `raw` is the registration of `service`, whose pointer it was given.
pub struct Registration<S: Service> {
    raw: NonNull<ffi::ferry_service>,
    service: *const S,
}

// SAFETY: Unregistering may happen from any thread; `S` is `Send + Sync`.
unsafe impl<S: Service> Send for Registration<S> {}
// SAFETY: As for `Send`.
unsafe impl<S: Service> Sync for Registration<S> {}

impl<S: Service> Registration<S> {
    /// Offers `service` as `name`; see `ferry_service_register()`.
    pub fn new(name: &CStr, service: Arc<S>) -> Result<Self> {
        let ptr = Arc::into_raw(service);
        // SAFETY: `name` is a string; the ops are static; `ptr` stays valid
        // until the drop, which unregisters first.
        let raw = from_err_ptr(unsafe {
            ffi::ferry_service_register(
                name.as_char_ptr(),
                &ServiceVtable::<S>::OPS,
                ptr.cast_mut().cast(),
            )
        });
        match raw.ok().and_then(NonNull::new) {
            Some(raw) => Ok(Self { raw, service: ptr }),
            None => {
                // SAFETY: From `Arc::into_raw` above; ferry did not keep it.
                drop(unsafe { Arc::from_raw(ptr) });
                Err(raw.err().unwrap_or(ENOMEM))
            }
        }
    }
}

impl<S: Service> Drop for Registration<S> {
    fn drop(&mut self) {
        // SAFETY: The registration (type invariant); after this no callback
        // of the service runs.
        unsafe { ffi::ferry_service_unregister(self.raw.as_ptr()) };
        // SAFETY: From `Arc::into_raw` in `new`; nothing uses it any more.
        drop(unsafe { Arc::from_raw(self.service) });
    }
}

/// The `struct ferry_ops` of a handler type and its trampolines.
struct Vtable<H>(PhantomData<H>);

impl<H: Handler> Vtable<H> {
    const OPS: ffi::ferry_ops = ffi::ferry_ops {
        accept: None,
        up: Some(Self::up),
        down: Some(Self::down),
        message: Some(Self::message),
        writable: Some(Self::writable),
        gone: Some(Self::gone),
        request: None,
    };

    /// # Safety
    ///
    /// `priv_` is a session's handler reference (from `Arc::into_raw`), live
    /// until `gone` gives it back.
    unsafe fn handler<'a>(priv_: *mut c_void) -> ArcBorrow<'a, H> {
        // SAFETY: The function's contract.
        unsafe { ArcBorrow::from_raw(priv_.cast()) }
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn up(s: *mut ffi::ferry_session, priv_: *mut c_void) {
        // SAFETY: ferry passes a live handle and the session's `priv`.
        unsafe { Self::handler(priv_).up(SessionRef::from_raw(s)) };
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn down(s: *mut ffi::ferry_session, priv_: *mut c_void, err: c_int) {
        let err = Error::from_errno(err);
        // SAFETY: As in `up`.
        unsafe { Self::handler(priv_).down(SessionRef::from_raw(s), err) };
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn message(
        s: *mut ffi::ferry_session,
        priv_: *mut c_void,
        data: *const c_void,
        len: usize,
    ) {
        // SAFETY: ferry passes `len` valid bytes at `data` for the call.
        let data = unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len) };
        // SAFETY: As in `up`.
        unsafe { Self::handler(priv_).message(SessionRef::from_raw(s), data) };
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn writable(s: *mut ffi::ferry_session, priv_: *mut c_void) {
        // SAFETY: As in `up`.
        unsafe { Self::handler(priv_).writable(SessionRef::from_raw(s)) };
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn gone(s: *mut ffi::ferry_session, priv_: *mut c_void, err: c_int) {
        // SAFETY: The last callback: ferry gives the handler reference back.
        let h = unsafe { Arc::<H>::from_raw(priv_.cast()) };
        // SAFETY: ferry passes a live handle.
        h.gone(
            unsafe { SessionRef::from_raw(s) },
            (err < 0).then(|| Error::from_errno(err)),
        );
    }
}

/// The `struct ferry_ops` of a service type: its sessions' plus `accept`.
struct ServiceVtable<S>(PhantomData<S>);

impl<S: Service> ServiceVtable<S> {
    const OPS: ffi::ferry_ops = ffi::ferry_ops {
        accept: Some(Self::accept),
        ..Vtable::<S::Session>::OPS
    };

    /// # Safety
    ///
    /// Called by ferry only: `s` is a live handle, `service_priv` the
    /// registered service and `priv_` valid for writes.
    unsafe extern "C" fn accept(
        s: *mut ffi::ferry_session,
        service_priv: *mut c_void,
        priv_: *mut *mut c_void,
    ) -> c_int {
        // SAFETY: `service_priv` is the service `Registration::new` registered,
        // live until the registration is dropped, which waits for callbacks.
        let svc = unsafe { &*service_priv.cast::<S>() };
        // SAFETY: ferry passes a live handle.
        match svc.accept(unsafe { SessionRef::from_raw(s) }) {
            Ok(h) => {
                // SAFETY: `priv_` is valid for writes; `gone` gives it back.
                unsafe { priv_.write(Arc::into_raw(h).cast_mut().cast()) };
                0
            }
            Err(e) => e.to_errno(),
        }
    }
}
