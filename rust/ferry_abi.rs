// SPDX-License-Identifier: GPL-2.0

//! The C side of ferry's kernel API, `include/ferry/ferry.h`, made safe.
//!
//! The `extern "C"` entry points in `src/ferry/export.rs` check their
//! arguments and turn the caller's raw structures into the types here, under
//! the contracts the header states; from then on everything is safe:
//!
//! - [`Ops`]: a caller's `struct ferry_ops` and private pointer, with one
//!   method per callback.
//! - [`CRequest`]: a caller's `struct ferry_request`, ferry's until `done`.
//! - [`RdmaCallback`]: the `done` of `ferry_rdma_read()`/`ferry_rdma_write()`.
//! - [`Handle`]: the `Arc` behind a `struct ferry_session *` or
//!   `struct ferry_service *`.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    ffi::{c_char, c_int, c_void},
    prelude::*,
    sync::{Arc, ArcBorrow},
    types::ForeignOwnable,
};

use crate::bindings::{
    ferry_incoming, ferry_ops, ferry_request, ferry_session, ferry_session_params, scatterlist,
};

/// A caller's callbacks and private pointer.
///
/// # Invariants
///
/// `ops` is valid, and has a `message` callback, for as long as ferry may
/// call it (the API's contract: until the session closes or the service is
/// unregistered).
pub struct Ops {
    ops: NonNull<ferry_ops>,
    priv_: *mut c_void,
}

// SAFETY: The API requires the callbacks to be callable from any thread; the
// private pointer is the caller's to synchronize.
unsafe impl Send for Ops {}
// SAFETY: As for `Send`.
unsafe impl Sync for Ops {}

impl Ops {
    /// Takes `ops` and `priv_`; `None` if `ops` is null or has no `message`.
    ///
    /// # Safety
    ///
    /// `ops` is null or valid for as long as ferry may use it (see the type's
    /// invariants).
    pub unsafe fn new(ops: *const ferry_ops, priv_: *mut c_void) -> Option<Self> {
        let ops = NonNull::new(ops.cast_mut())?;
        // SAFETY: Valid (the function's contract).
        unsafe { ops.as_ref() }.message?;
        // INVARIANT: the contract, and `message` was just checked.
        Some(Self { ops, priv_ })
    }

    /// The same callbacks with another private pointer (a service's session).
    pub fn with_priv(&self, priv_: *mut c_void) -> Self {
        // INVARIANT: the same `ops`.
        Self {
            ops: self.ops,
            priv_,
        }
    }

    fn ops(&self) -> &ferry_ops {
        // SAFETY: Valid while ferry may call it (type invariant).
        unsafe { self.ops.as_ref() }
    }

    /// `accept`: the session's private pointer (the service's own without an
    /// `accept` callback), or the callback's error.
    pub fn accept<T>(&self, s: &Arc<T>) -> Result<*mut c_void, c_int> {
        let s = Handle::as_raw::<ferry_session>(s);
        let mut priv_ = self.priv_;
        if let Some(f) = self.ops().accept {
            // SAFETY: The caller's callback, called as the header says;
            // `priv_` is a valid place for its answer.
            let ret = unsafe { f(s, self.priv_, &mut priv_) };
            if ret != 0 {
                return Err(ret);
            }
        }
        Ok(priv_)
    }

    /// `up`, if the caller has one.
    pub fn up<T>(&self, s: &Arc<T>) {
        let s = Handle::as_raw::<ferry_session>(s);
        if let Some(f) = self.ops().up {
            // SAFETY: The caller's callback, called as the header says.
            unsafe { f(s, self.priv_) };
        }
    }

    /// `down`, if the caller has one.
    pub fn down<T>(&self, s: &Arc<T>, err: c_int) {
        let s = Handle::as_raw::<ferry_session>(s);
        if let Some(f) = self.ops().down {
            // SAFETY: The caller's callback, called as the header says.
            unsafe { f(s, self.priv_, err) };
        }
    }

    /// `message`.
    pub fn message<T>(&self, s: &Arc<T>, data: &[u8]) {
        let s = Handle::as_raw::<ferry_session>(s);
        if let Some(f) = self.ops().message {
            // SAFETY: As in `up`; `data` is valid for the call.
            unsafe { f(s, self.priv_, data.as_ptr().cast(), data.len()) };
        }
    }

    /// `writable`, if the caller has one.
    pub fn writable<T>(&self, s: &Arc<T>, qid: u16) {
        let s = Handle::as_raw::<ferry_session>(s);
        if let Some(f) = self.ops().writable {
            // SAFETY: The caller's callback, called as the header says.
            unsafe { f(s, self.priv_, qid) };
        }
    }

    /// `gone`, if the caller has one.
    pub fn gone<T>(&self, s: &Arc<T>, err: c_int) {
        let s = Handle::as_raw::<ferry_session>(s);
        if let Some(f) = self.ops().gone {
            // SAFETY: The caller's callback, called as the header says.
            unsafe { f(s, self.priv_, err) };
        }
    }

    /// `request`, handing `inc` to the consumer; without a `request`
    /// callback, `inc` comes back.
    pub fn request<T, I: ForeignOwnable>(&self, s: &Arc<T>, inc: I) -> Result<(), I> {
        let Some(f) = self.ops().request else {
            return Err(inc);
        };
        let s = Handle::as_raw::<ferry_session>(s);
        // SAFETY: As in `up`; the consumer owns `inc` from here.
        unsafe { f(s, self.priv_, inc.into_foreign().cast()) };
        Ok(())
    }
}

/// `enum ferry_dir`.
pub mod dir {
    use crate::bindings;

    /// `FERRY_DIR_NONE`.
    pub const NONE: u32 = bindings::ferry_dir_FERRY_DIR_NONE;
    /// `FERRY_TO_PEER`.
    pub const TO_PEER: u32 = bindings::ferry_dir_FERRY_TO_PEER;
    /// `FERRY_FROM_PEER`.
    pub const FROM_PEER: u32 = bindings::ferry_dir_FERRY_FROM_PEER;
}

/// The bytes of a C string, without its NUL; `None` for a null pointer.
///
/// # Safety
///
/// `s` is null or a NUL-terminated string valid for `'a`.
pub unsafe fn c_str<'a>(s: *const c_char) -> Option<&'a [u8]> {
    if s.is_null() {
        return None;
    }
    // SAFETY: A NUL-terminated string (the contract).
    Some(unsafe { CStr::from_char_ptr(s) }.to_bytes())
}

/// `len` bytes at `data`; empty for a null pointer or no length.
///
/// # Safety
///
/// `data` is null or valid for `len` bytes for `'a`.
pub unsafe fn bytes<'a>(data: *const c_void, len: usize) -> &'a [u8] {
    if data.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: Valid for `len` bytes (the contract).
    unsafe { core::slice::from_raw_parts(data.cast(), len) }
}

/// The bytes of a `struct sockaddr_storage` in `p`.
pub fn peer_bytes(p: &ferry_session_params) -> &[u8] {
    // SAFETY: `peer` is a plain struct of bytes, borrowed as long as `p`.
    unsafe {
        core::slice::from_raw_parts(
            core::ptr::from_ref(&p.peer).cast::<u8>(),
            core::mem::size_of_val(&p.peer),
        )
    }
}

/// A caller's `struct ferry_request`, ferry's from `ferry_submit()` until
/// [`CRequest::complete`].
///
/// # Invariants
///
/// `rq` is valid and nobody else touches it until `complete`.
pub struct CRequest(NonNull<ferry_request>);

// SAFETY: The request may be completed from any thread (the API's contract).
unsafe impl Send for CRequest {}

impl CRequest {
    /// Takes `rq`; `None` if it is null or has no `done`.
    ///
    /// # Safety
    ///
    /// `rq` is null or valid, and the caller's no more, until `done` runs.
    pub unsafe fn new(rq: *mut ferry_request) -> Option<Self> {
        let rq = NonNull::new(rq)?;
        // SAFETY: Valid (the contract).
        unsafe { rq.as_ref() }.done?;
        // INVARIANT: the contract.
        Some(Self(rq))
    }

    fn rq(&self) -> &ferry_request {
        // SAFETY: Valid until `complete` (type invariant).
        unsafe { self.0.as_ref() }
    }

    /// The header; `None` if it is null with a length.
    pub fn header(&self) -> Option<&[u8]> {
        let rq = self.rq();
        if rq.hdr.is_null() && rq.hdr_len != 0 {
            return None;
        }
        // SAFETY: `hdr` holds `hdr_len` bytes until `ferry_submit()` returns
        // (the API's contract), and ferry copies it before that.
        Some(unsafe { bytes(rq.hdr, rq.hdr_len as usize) })
    }

    /// The caller's tag (`FERRY_TAGGED`).
    pub fn tag(&self) -> u32 {
        self.rq().tag
    }

    /// `enum ferry_dir`, as the caller set it.
    pub fn dir(&self) -> u32 {
        self.rq().dir
    }

    /// The data's scatterlist and its entry count (null without data).
    pub fn data(&self) -> (*mut scatterlist, u32) {
        (self.rq().sgl, self.rq().nents)
    }

    /// Records the peer's answer: the response header is copied to `resp`
    /// (as much as fits).
    pub fn set_response(&mut self, status: c_int, moved: u32, hdr: &[u8]) {
        // SAFETY: Valid and ferry's until `complete` (type invariant).
        let rq = unsafe { self.0.as_mut() };
        let n = hdr.len().min(rq.resp_size as usize);
        if !rq.resp.is_null() && n > 0 {
            // SAFETY: `resp` has room for `resp_size` bytes (the contract).
            unsafe { core::ptr::copy_nonoverlapping(hdr.as_ptr(), rq.resp.cast::<u8>(), n) };
        }
        rq.status = status;
        // CAST: at most `resp_size`, a `u32`.
        rq.resp_len = n as u32;
        rq.moved = moved;
    }

    /// Ends the request (`status` other than 0 overrides the response) and
    /// calls its `done`, which gives it back to the caller.
    pub fn complete(mut self, status: c_int) {
        let p = self.0.as_ptr();
        // SAFETY: As in `set_response`.
        let rq = unsafe { self.0.as_mut() };
        if status != 0 {
            rq.status = status;
            rq.resp_len = 0;
            rq.moved = 0;
        }
        if let Some(done) = rq.done {
            // SAFETY: The caller's callback with its own request.
            unsafe { done(p) };
        }
    }
}

/// The `done` of an RDMA READ or WRITE, with what it is called with.
pub struct RdmaCallback {
    done: unsafe extern "C" fn(*mut ferry_incoming, *mut c_void, c_int),
    inc: *mut ferry_incoming,
    ctx: *mut c_void,
}

// SAFETY: The callback may run on any thread (the API's contract).
unsafe impl Send for RdmaCallback {}

impl RdmaCallback {
    /// Keeps `done` to be called with `inc` and `ctx`.
    ///
    /// # Safety
    ///
    /// `done` may be called once, from any thread, with these arguments.
    pub unsafe fn new(
        done: unsafe extern "C" fn(*mut ferry_incoming, *mut c_void, c_int),
        inc: *mut ferry_incoming,
        ctx: *mut c_void,
    ) -> Self {
        Self { done, inc, ctx }
    }

    /// Calls it.
    pub fn call(self, status: c_int) {
        // SAFETY: The contract of `new`.
        unsafe { (self.done)(self.inc, self.ctx, status) };
    }
}

/// The `Arc<T>` behind a C handle: `Arc::into_raw` of it, cast.
pub struct Handle<T>(PhantomData<T>);

impl<T> Handle<T> {
    /// A handle that owns one reference.
    pub fn into_raw<C>(a: Arc<T>) -> *mut C {
        Arc::into_raw(a).cast_mut().cast()
    }

    /// A handle for `a` that owns nothing.
    pub fn as_raw<C>(a: &Arc<T>) -> *mut C {
        Arc::as_ptr(a).cast_mut().cast()
    }

    /// Takes back the reference `p` owns.
    ///
    /// # Safety
    ///
    /// `p` came from [`Handle::into_raw`] and its reference is given back.
    pub unsafe fn from_raw<C>(p: *const C) -> Arc<T> {
        // SAFETY: The contract.
        unsafe { Arc::from_raw(p.cast()) }
    }

    /// Borrows the object behind `p`.
    ///
    /// # Safety
    ///
    /// `p` came from [`Handle::into_raw`] or [`Handle::as_raw`], and a
    /// reference to it is held for `'a`.
    pub unsafe fn borrow<'a, C>(p: *const C) -> ArcBorrow<'a, T> {
        // SAFETY: The contract.
        unsafe { ArcBorrow::from_raw(p.cast()) }
    }
}
