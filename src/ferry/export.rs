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
    bindings::{
        ferry_incoming, ferry_limits, ferry_ops, ferry_request, ferry_service, ferry_session,
        ferry_session_params, scatterlist,
    },
    cm::SockAddr,
    device::Ferry,
    netns::Net,
    rdma::mr::SgList,
    service::{Consumer, Service, ServiceOps},
    session::{Params, Session},
    wire::{request::Dir, Reason, ServiceName},
    xfer::{Incoming, RdmaDone, Request},
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
    ferry_submit: unsafe extern "C" fn(*mut ferry_session, *mut ferry_request, c_uint) -> c_int;
    ferry_incoming_header: unsafe extern "C" fn(*const ferry_incoming, *mut u32) -> *const c_void;
    ferry_incoming_dir: unsafe extern "C" fn(*const ferry_incoming) -> c_uint;
    ferry_incoming_data_len: unsafe extern "C" fn(*const ferry_incoming) -> u32;
    ferry_rdma_read: unsafe extern "C" fn(
        *mut ferry_incoming,
        *mut scatterlist,
        c_uint,
        RdmaDoneFn,
        *mut c_void,
    ) -> c_int;
    ferry_rdma_write: unsafe extern "C" fn(
        *mut ferry_incoming,
        *mut scatterlist,
        c_uint,
        RdmaDoneFn,
        *mut c_void,
    ) -> c_int;
    ferry_respond: unsafe extern "C" fn(*mut ferry_incoming, c_int, *const c_void, u32) -> c_int;
}

/// The `done` of `ferry_rdma_read()` and `ferry_rdma_write()`.
type RdmaDoneFn = Option<unsafe extern "C" fn(*mut ferry_incoming, *mut c_void, c_int)>;

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

    fn request(&self, s: &Arc<Session>, inc: KBox<Incoming>) {
        match self.ops().request {
            // SAFETY: As in `up`; the consumer owns `inc` until it responds.
            Some(f) => unsafe { f(handle(s), self.priv_, KBox::into_raw(inc).cast()) },
            None => {
                let _ = inc.respond(EOPNOTSUPP.to_errno(), &[]);
            }
        }
    }
}

/// A C request: the caller's `struct ferry_request`.
///
/// # Invariants
///
/// `rq` is valid until `complete` (the API's contract).
struct CRequest(*mut ferry_request);

// SAFETY: The request may be completed from any thread (the API's contract).
unsafe impl Send for CRequest {}

impl CRequest {
    fn rq(&self) -> &ferry_request {
        // SAFETY: Valid until `complete` (type invariant).
        unsafe { &*self.0 }
    }
}

impl Request for CRequest {
    fn header(&self) -> &[u8] {
        let rq = self.rq();
        if rq.hdr.is_null() || rq.hdr_len == 0 {
            return &[];
        }
        // SAFETY: `hdr` holds `hdr_len` bytes until `ferry_submit` returns
        // (the contract); ferry copies the header before that.
        unsafe { core::slice::from_raw_parts(rq.hdr.cast::<u8>(), rq.hdr_len as usize) }
    }

    fn dir(&self) -> Dir {
        match self.rq().dir {
            crate::bindings::ferry_dir_FERRY_TO_PEER => Dir::ToPeer,
            crate::bindings::ferry_dir_FERRY_FROM_PEER => Dir::FromPeer,
            _ => Dir::None,
        }
    }

    fn set_response(&mut self, status: i32, moved: u32, hdr: &[u8]) {
        // SAFETY: Valid until `complete` (type invariant); nothing else
        // touches the request while it is ferry's.
        let rq = unsafe { &mut *self.0 };
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

    fn complete(self: KBox<Self>, status: i32) {
        let rq = self.0;
        // SAFETY: As in `set_response`.
        unsafe {
            if status != 0 {
                (*rq).status = status;
                (*rq).resp_len = 0;
                (*rq).moved = 0;
            }
            if let Some(done) = (*rq).done {
                done(rq);
            }
        }
    }
}

/// A C consumer's `done` for an RDMA READ or WRITE.
struct CRdmaDone {
    done: unsafe extern "C" fn(*mut ferry_incoming, *mut c_void, c_int),
    inc: *mut ferry_incoming,
    ctx: *mut c_void,
}

// SAFETY: The callback may run on any thread (the API's contract).
unsafe impl Send for CRdmaDone {}

impl RdmaDone for CRdmaDone {
    fn done(self: KBox<Self>, status: i32) {
        // SAFETY: The consumer's callback, with what it passed.
        unsafe { (self.done)(self.inc, self.ctx, status) };
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
    let (Some(peer), Some(service), Ok(params)) =
        (SockAddr::from_storage(storage), service, params)
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

/// See `ferry_submit()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `rq` is valid, with its header and
/// pages, as the header says.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_submit(
    s: *mut ferry_session,
    rq: *mut ferry_request,
    flags: c_uint,
) -> c_int {
    if rq.is_null() || flags & !NOWAIT != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: `rq` is valid (the contract).
    let r = unsafe { &*rq };
    if r.done.is_none() || (r.hdr.is_null() && r.hdr_len != 0) {
        return EINVAL.to_errno();
    }
    let req = CRequest(rq);
    let data = match (req.dir(), r.sgl.is_null()) {
        (Dir::None, true) => None,
        (Dir::None, false) | (_, true) => return EINVAL.to_errno(),
        // SAFETY: The pages are ferry's until `done` (the contract).
        (_, false) => match unsafe { SgList::from_raw(r.sgl, r.nents) } {
            Ok(l) => Some(l),
            Err(e) => return e.to_errno(),
        },
    };
    let req: KBox<dyn Request> = match KBox::new(req, GFP_KERNEL) {
        Ok(b) => b,
        Err(_) => return ENOMEM.to_errno(),
    };
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { borrow(s) }.request(req, data, flags & NOWAIT != 0) {
        Ok(()) => 0,
        // The request comes back unused: `done` is not called.
        Err((e, _req, _data)) => e.to_errno(),
    }
}

/// Borrows an incoming request.
///
/// # Safety
///
/// `inc` came from a `request` callback and was not given back.
unsafe fn incoming<'a>(inc: *const ferry_incoming) -> &'a mut Incoming {
    // SAFETY: It is a boxed `Incoming` the consumer owns (the contract).
    unsafe { &mut *inc.cast_mut().cast::<Incoming>() }
}

/// See `ferry_incoming_header()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's; `len` is valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_header(
    inc: *const ferry_incoming,
    len: *mut u32,
) -> *const c_void {
    // SAFETY: The contract.
    let hdr = unsafe { incoming(inc) }.header();
    if !len.is_null() {
        // CAST: a header fits a message, far below 4 GiB.
        // SAFETY: The contract.
        unsafe { len.write(hdr.len() as u32) };
    }
    hdr.as_ptr().cast()
}

/// See `ferry_incoming_dir()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_dir(inc: *const ferry_incoming) -> c_uint {
    // SAFETY: The contract.
    match unsafe { incoming(inc) }.dir() {
        Dir::None => crate::bindings::ferry_dir_FERRY_DIR_NONE,
        Dir::ToPeer => crate::bindings::ferry_dir_FERRY_TO_PEER,
        Dir::FromPeer => crate::bindings::ferry_dir_FERRY_FROM_PEER,
    }
}

/// See `ferry_incoming_data_len()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_data_len(inc: *const ferry_incoming) -> u32 {
    // SAFETY: The contract.
    unsafe { incoming(inc) }.data_len()
}

/// Starts the RDMA of `inc` in direction `want`.
///
/// # Safety
///
/// As for `ferry_rdma_read()`.
unsafe fn rdma(
    inc: *mut ferry_incoming,
    sgl: *mut scatterlist,
    nents: c_uint,
    done: RdmaDoneFn,
    ctx: *mut c_void,
    want: Dir,
) -> c_int {
    let Some(done) = done else {
        return EINVAL.to_errno();
    };
    // SAFETY: The contract.
    let i = unsafe { incoming(inc) };
    if i.dir() != want {
        return EINVAL.to_errno();
    }
    // SAFETY: The pages are ferry's until `done` (the contract).
    let sg = match unsafe { SgList::from_raw(sgl, nents) } {
        Ok(l) => l,
        Err(e) => return e.to_errno(),
    };
    if sg.len() != u64::from(i.data_len()) {
        return EINVAL.to_errno();
    }
    let cb: KBox<dyn RdmaDone> = match KBox::new(CRdmaDone { done, inc, ctx }, GFP_KERNEL) {
        Ok(b) => b,
        Err(_) => return ENOMEM.to_errno(),
    };
    let chan = i.chan.clone();
    match chan.incoming_rdma(i, sg, cb) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_rdma_read()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// As the header says: `inc` the consumer's, `sgl` lent until `done`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_rdma_read(
    inc: *mut ferry_incoming,
    sgl: *mut scatterlist,
    nents: c_uint,
    done: RdmaDoneFn,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: The contract.
    unsafe { rdma(inc, sgl, nents, done, ctx, Dir::ToPeer) }
}

/// See `ferry_rdma_write()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// As for `ferry_rdma_read`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_rdma_write(
    inc: *mut ferry_incoming,
    sgl: *mut scatterlist,
    nents: c_uint,
    done: RdmaDoneFn,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: The contract.
    unsafe { rdma(inc, sgl, nents, done, ctx, Dir::FromPeer) }
}

/// See `ferry_respond()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's; `hdr` holds `len` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_respond(
    inc: *mut ferry_incoming,
    status: c_int,
    hdr: *const c_void,
    len: u32,
) -> c_int {
    let hdr = if hdr.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: `hdr` holds `len` bytes (the contract).
        unsafe { core::slice::from_raw_parts(hdr.cast::<u8>(), len as usize) }
    };
    // SAFETY: The contract.
    let i = unsafe { incoming(inc) };
    let chan = i.chan.clone();
    match chan.respond(i, status, hdr) {
        Err(e) if e == EBUSY => e.to_errno(),
        res => {
            // SAFETY: The box the `request` callback handed out, given back.
            drop(unsafe { KBox::from_raw(inc.cast::<Incoming>()) });
            res.map_or_else(|e| e.to_errno(), |()| 0)
        }
    }
}
