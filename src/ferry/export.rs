// SPDX-License-Identifier: GPL-2.0

//! The exported C API, `include/ferry/ferry.h`: the only `unsafe` of `src/`.
//!
//! Each `extern "C"` function turns what the caller passed into the safe
//! types of `rust/ferry_abi.rs` (under the contract the header states: the
//! function's `unsafe` blocks) and hands them to the safe code: [`Service`]
//! and [`Session`]. A `struct ferry_session *` is a `Session` kept alive by an
//! `Arc` reference the holder owns; a `struct ferry_service *` likewise; a
//! `struct ferry_incoming *` is an [`Incoming`] (the loan of its tag's
//! preallocated entry, as `ForeignOwnable`) the consumer owns. The C
//! caller's `struct ferry_ops` becomes a [`Consumer`] and [`ServiceOps`] here.
//! `exports.c` exports the symbols in the `FERRY` namespace.
//!
//! Each function's type is checked against the header's declaration (which
//! bindgen turns into Rust) by [`checked`], so the two cannot drift apart.

use kernel::ffi::{c_char, c_int, c_uint, c_void};
use kernel::{
    prelude::*,
    sync::{Arc, UniqueArc},
    types::ForeignOwnable,
};

use crate::{
    bindings::{
        __kernel_sockaddr_storage, ferry_incoming, ferry_limits, ferry_ops, ferry_request,
        ferry_service, ferry_session, ferry_session_params, scatterlist,
    },
    channel,
    cm::SockAddr,
    ferry_abi::{self, dir, CRequest, Handle, Ops, RdmaCallback},
    host::Ferry,
    netns::Net,
    params::Params,
    rdma::mr::SgList,
    service::{Service, ServiceOps},
    session::{Consumer, Incoming, Session},
    wire::{request::Dir, Reason, ServiceName},
    xfer::{RdmaDone, Request},
};

/// Asserts that each exported function has the type of its declaration in
/// `include/ferry/ferry.h`: two function items unify into one function pointer
/// type only if their signatures are the same.
macro_rules! checked {
    ($($name:ident),* $(,)?) => {
        $(const _: () = {
            let _ = [crate::bindings::$name, $name];
        };)*
    };
}

checked!(
    ferry_service_register,
    ferry_service_unregister,
    ferry_session_open,
    ferry_session_close,
    ferry_session_get,
    ferry_session_put,
    ferry_session_id,
    ferry_session_peer,
    ferry_session_limits,
    ferry_send,
    ferry_send_on,
    ferry_poll,
    ferry_poll_channel,
    ferry_reset_channel,
    ferry_submit,
    ferry_submit_on,
    ferry_incoming_header,
    ferry_incoming_dir,
    ferry_incoming_data_len,
    ferry_incoming_tag,
    ferry_rdma_read,
    ferry_rdma_write,
    ferry_respond,
);

/// The `done` of `ferry_rdma_read()` and `ferry_rdma_write()`.
type RdmaDoneFn = Option<unsafe extern "C" fn(*mut ferry_incoming, *mut c_void, c_int)>;

/// `FERRY_NOWAIT`.
const NOWAIT: c_uint = crate::bindings::FERRY_NOWAIT;
/// `FERRY_TAGGED`.
const TAGGED: c_uint = crate::bindings::FERRY_TAGGED;

/// The errno a consumer is told for `reason`: 0 for a local close.
fn reason_errno(reason: Reason) -> c_int {
    match reason {
        Reason::LocalClose | Reason::None => 0,
        r => r.errno().to_errno(),
    }
}

/// A C consumer.
struct COps(Ops);

impl Consumer for COps {
    fn up(&self, s: &Arc<Session>) {
        self.0.up(s);
    }

    fn down(&self, s: &Arc<Session>, reason: Reason) {
        self.0.down(s, reason.errno().to_errno());
    }

    fn message(&self, s: &Arc<Session>, data: &[u8]) {
        self.0.message(s, data);
    }

    fn writable(&self, s: &Arc<Session>, qid: u16) {
        self.0.writable(s, qid);
    }

    fn gone(&self, s: &Arc<Session>, reason: Reason) {
        self.0.gone(s, reason_errno(reason));
    }

    fn request(&self, s: &Arc<Session>, inc: Incoming) {
        if let Err(inc) = self.0.request(s, inc) {
            let _ = channel::respond(inc, EOPNOTSUPP.to_errno(), &[]);
        }
    }
}

/// A C service: its ops and the private pointer it registered with.
struct CService(Ops);

impl ServiceOps for CService {
    fn accept(&self, s: &Arc<Session>) -> Result<Arc<dyn Consumer>, Reason> {
        // Made first: nothing may fail once the C service took the session
        // (its private data would never hear `gone`).
        let place = UniqueArc::new_uninit(GFP_KERNEL).map_err(|_| Reason::NoResources)?;
        let priv_ = self.0.accept(s).map_err(|_| Reason::Refused)?;
        let ops = self.0.with_priv(priv_);
        let consumer: Arc<COps> = place.write(COps(ops)).into();
        Ok(consumer)
    }
}

impl Request for CRequest {
    fn header(&self) -> &[u8] {
        CRequest::header(self).unwrap_or(&[])
    }

    fn dir(&self) -> Dir {
        dir_of(CRequest::dir(self))
    }

    fn set_response(&mut self, status: i32, moved: u32, hdr: &[u8]) {
        CRequest::set_response(self, status, moved, hdr);
    }

    fn complete(self, status: i32) {
        CRequest::complete(self, status);
    }
}

fn dir_of(raw: c_uint) -> Dir {
    match raw {
        dir::TO_PEER => Dir::ToPeer,
        dir::FROM_PEER => Dir::FromPeer,
        _ => Dir::None,
    }
}

impl RdmaDone for RdmaCallback {
    fn done(self, status: i32) {
        self.call(status);
    }
}

/// A client's session parameters, from the caller's structure.
fn session_params(
    ferry: &Ferry,
    net: &Net,
    p: &ferry_session_params,
) -> Option<(SockAddr, Params)> {
    let default_channels = ferry.default_channels(net).unwrap_or(1);
    let params = Params::checked(
        p.channels,
        p.poll_channels,
        // CAST: `default_channels` is at most `MAX_CHANNELS`.
        default_channels as u16,
        p.queue_depth,
        p.max_msg,
        p.inline_size,
        p.heartbeat_ms,
        p.timeout_ms,
        p.give_up_s,
        p.reconnect_delay_s,
        p.flags,
    )
    .ok()?;
    let peer = SockAddr::from_storage(ferry_abi::peer_bytes(p))?;
    // Multicast, broadcast or unspecified: no one host answers.
    Some((peer, params)).filter(|_| peer.is_unicast())
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
    let (name, ops) = unsafe { (ferry_abi::c_str(name), Ops::new(ops, priv_)) };
    let (Some(name), Some(ops)) = (name.and_then(ServiceName::new), ops) else {
        return EINVAL.to_ptr();
    };
    let Some(ferry) = Ferry::get() else {
        return ESHUTDOWN.to_ptr();
    };
    let svc = KBox::new(CService(ops), GFP_KERNEL)
        .map_err(Error::from)
        .and_then(|b| ferry.register_service(name, b));
    match svc {
        Ok(svc) => Handle::into_raw(svc),
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
    // SAFETY: The reference `ferry_service_register` returned, given back
    // (the contract).
    let svc = unsafe { Handle::<Service>::from_raw(svc) };
    // Without the module state, nothing holds the service any more.
    if let Some(ferry) = Ferry::get() {
        ferry.unregister_service(&svc);
    }
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
    if p.is_null() {
        return EINVAL.to_ptr();
    }
    // SAFETY: `p` is valid for reads, its `service` a string, its `key` null
    // or a string, and its `net` null or held by the caller across the call
    // (the session takes its own reference); `ops` is valid until the session
    // closes (the contract).
    let (p, ops, service, key, net) = unsafe {
        let p = &*p;
        let net = if p.net.is_null() {
            Net::init()
        } else {
            Net::from_raw(p.net)
        };
        let (service, key) = (ferry_abi::c_str(p.service), ferry_abi::c_str(p.key));
        (p, Ops::new(ops, priv_), service, key, net)
    };
    let Some(ferry) = Ferry::get() else {
        return ESHUTDOWN.to_ptr();
    };
    let (Some(ops), Some(service), Some((peer, params))) = (
        ops,
        service.and_then(ServiceName::new),
        session_params(&ferry, net, p),
    ) else {
        return EINVAL.to_ptr();
    };
    // A key named must exist in the namespace.
    let psk = match key.map(ServiceName::new) {
        None => None,
        Some(None) => return EINVAL.to_ptr(),
        Some(Some(name)) => match ferry.key(net, &name) {
            Some(k) => Some(k),
            None => return ENOKEY.to_ptr(),
        },
    };
    let consumer: Arc<dyn Consumer> = match Arc::new(COps(ops), GFP_KERNEL) {
        Ok(c) => c,
        Err(_) => return ENOMEM.to_ptr(),
    };
    match Session::connect(
        ferry.clone(),
        net,
        peer,
        service,
        params,
        Some(consumer),
        psk,
    ) {
        Ok(s) => Handle::into_raw(s),
        Err(reason) => reason.errno().to_ptr(),
    }
}

/// See `ferry_session_close()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `s` is a handle from `ferry_session_open`, not used afterwards.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_close(s: *mut ferry_session) {
    // SAFETY: The opener's reference, given back (the contract).
    unsafe { Handle::<Session>::from_raw(s) }.close(Reason::LocalClose);
}

/// See `ferry_session_get()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_get(s: *mut ferry_session) {
    // SAFETY: The caller holds a reference (the contract).
    let s: Arc<Session> = unsafe { Handle::<Session>::borrow(s) }.into();
    // The new reference now belongs to the caller.
    let _: *mut ferry_session = Handle::into_raw(s);
}

/// See `ferry_session_put()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller gives back a reference from `ferry_session_get`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_put(s: *mut ferry_session) {
    // SAFETY: The reference `ferry_session_get` took (the contract).
    drop(unsafe { Handle::<Session>::from_raw(s) });
}

/// Test builds only: makes session `s` commit protocol breach `fault` (see
/// `src/ferry/hostile.rs`). 0, `-EINVAL` for an unknown fault, or
/// `-ENOTCONN`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_test_misbehave(s: *mut ferry_session, fault: u32) -> c_int {
    let Some(f) = crate::hostile::Fault::from_u32(fault) else {
        return EINVAL.to_errno();
    };
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { Handle::<Session>::borrow(s) }.misbehave(f) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_session_set_reconnect_delay()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_set_reconnect_delay(
    s: *const ferry_session,
    secs: u32,
) -> c_int {
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { Handle::<Session>::borrow(s) }.set_reconnect_delay(secs) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_session_id()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_id(s: *const ferry_session) -> u32 {
    // SAFETY: The caller holds a reference (the contract).
    unsafe { Handle::<Session>::borrow(s) }.id
}

// `SockAddr` holds the bytes of a `struct sockaddr_storage`.
const _: () =
    assert!(core::mem::size_of::<SockAddr>() == core::mem::size_of::<__kernel_sockaddr_storage>());

/// See `ferry_session_peer()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `out` is valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_session_peer(
    s: *const ferry_session,
    out: *mut __kernel_sockaddr_storage,
) {
    // SAFETY: The caller holds a reference (the contract).
    let peer = unsafe { Handle::<Session>::borrow(s) }.peer;
    // SAFETY: `out` is valid for writes of a `struct sockaddr_storage` (the
    // contract), whose size a `SockAddr` has (asserted above); written
    // unaligned, as the storage may be aligned less than a `SockAddr`.
    unsafe { out.cast::<SockAddr>().write_unaligned(peer) };
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
    match unsafe { Handle::<Session>::borrow(s) }.limits() {
        Ok(l) => {
            let l = ferry_limits {
                channels: l.channels,
                poll_channels: l.poll_channels,
                queue_depth: l.queue_depth,
                max_payload: l.max_payload,
                max_data: l.data.max_data,
                max_segments: l.data.max_segments,
                virt_boundary_mask: l.data.virt_boundary_mask,
                dma_alignment: 0,
                inline_size: l.inline_size,
                incoming_depth: l.incoming_depth,
            };
            // SAFETY: `out` is valid for writes (the contract).
            unsafe { out.write(l) };
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
    // SAFETY: As this function's contract.
    unsafe { send(s, None, data, len, flags) }
}

/// See `ferry_send_on()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `data` is valid for `len` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_send_on(
    s: *mut ferry_session,
    qid: u16,
    data: *const c_void,
    len: usize,
    flags: c_uint,
) -> c_int {
    // SAFETY: As this function's contract.
    unsafe { send(s, Some(qid), data, len, flags) }
}

/// `ferry_send()` and `ferry_send_on()`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `data` is valid for `len` bytes.
unsafe fn send(
    s: *mut ferry_session,
    on: Option<u16>,
    data: *const c_void,
    len: usize,
    flags: c_uint,
) -> c_int {
    if flags & !NOWAIT != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: `data` holds `len` bytes; the caller holds a reference to `s`
    // (the contract).
    let (data, s) = unsafe { (ferry_abi::bytes(data, len), Handle::<Session>::borrow(s)) };
    if data.is_empty() {
        return EMSGSIZE.to_errno();
    }
    match s.send(on, data, flags & NOWAIT != 0) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_poll()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_poll(s: *mut ferry_session) -> c_int {
    // SAFETY: The caller holds a reference (the contract).
    let s = unsafe { Handle::<Session>::borrow(s) };
    let n = s.poll(crate::bindings::FERRY_POLL_BUDGET);
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// See `ferry_reset_channel()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_reset_channel(s: *mut ferry_session, qid: u16) -> c_int {
    // SAFETY: The caller holds a reference (the contract).
    match unsafe { Handle::<Session>::borrow(s) }.reset_channel(qid) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// See `ferry_poll_channel()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_poll_channel(
    s: *mut ferry_session,
    qid: u16,
    budget: c_uint,
) -> c_int {
    // SAFETY: The caller holds a reference (the contract).
    let s = unsafe { Handle::<Session>::borrow(s) };
    match s.poll_channel(qid, budget) {
        Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
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
    // SAFETY: As this function's contract.
    unsafe { submit(s, None, rq, flags) }
}

/// See `ferry_submit_on()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `rq` is valid, with its header and
/// pages, as the header says.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_submit_on(
    s: *mut ferry_session,
    qid: u16,
    rq: *mut ferry_request,
    flags: c_uint,
) -> c_int {
    // SAFETY: As this function's contract.
    unsafe { submit(s, Some(qid), rq, flags) }
}

/// `ferry_submit()` and `ferry_submit_on()`.
///
/// # Safety
///
/// The caller holds a reference to `s`; `rq` is valid, with its header and
/// pages, as the header says.
unsafe fn submit(
    s: *mut ferry_session,
    on: Option<u16>,
    rq: *mut ferry_request,
    flags: c_uint,
) -> c_int {
    if flags & !(NOWAIT | TAGGED) != 0 || (flags & TAGGED != 0 && on.is_none()) {
        return EINVAL.to_errno();
    }
    // SAFETY: `rq` is valid and ferry's until its `done` (the contract).
    let Some(req) = (unsafe { CRequest::new(rq) }) else {
        return EINVAL.to_errno();
    };
    let (sgl, nents) = req.data();
    if CRequest::header(&req).is_none() {
        return EINVAL.to_errno();
    }
    let data = match (dir_of(CRequest::dir(&req)), sgl.is_null()) {
        (Dir::None, true) => None,
        (Dir::None, false) | (_, true) => return EINVAL.to_errno(),
        // SAFETY: The pages are ferry's until `done` (the contract).
        (_, false) => match unsafe { SgList::from_raw(sgl, nents) } {
            Ok(l) => Some(l),
            Err(e) => return e.to_errno(),
        },
    };
    let own = (flags & TAGGED != 0).then(|| req.tag());
    // SAFETY: The caller holds a reference (the contract).
    let s = unsafe { Handle::<Session>::borrow(s) };
    match s.request(on, own, req, data, flags & NOWAIT != 0) {
        Ok(()) => 0,
        // The request comes back unused: `done` is not called.
        Err((e, _req, _data)) => e.to_errno(),
    }
}

/// See `ferry_incoming_header()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's; `len` is null or valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_header(
    inc: *const ferry_incoming,
    len: *mut u32,
) -> *const c_void {
    // SAFETY: The consumer owns `inc` (the contract).
    let hdr = unsafe { Incoming::borrow(inc.cast_mut().cast()) }.header();
    if !len.is_null() {
        // CAST: a header fits a message, far below 4 GiB.
        // SAFETY: Valid for writes (the contract).
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
    // SAFETY: The consumer owns `inc` (the contract).
    match unsafe { Incoming::borrow(inc.cast_mut().cast()) }.dir() {
        Dir::None => dir::NONE,
        Dir::ToPeer => dir::TO_PEER,
        Dir::FromPeer => dir::FROM_PEER,
    }
}

/// See `ferry_incoming_data_len()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_data_len(inc: *const ferry_incoming) -> u32 {
    // SAFETY: The consumer owns `inc` (the contract).
    unsafe { Incoming::borrow(inc.cast_mut().cast()) }.data_len()
}

/// See `ferry_incoming_tag()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// `inc` is the consumer's; `qid` is NULL or valid for writes.
#[no_mangle]
pub(crate) unsafe extern "C" fn ferry_incoming_tag(
    inc: *const ferry_incoming,
    qid: *mut u16,
) -> u32 {
    // SAFETY: The consumer owns `inc` (the contract).
    let i = unsafe { Incoming::borrow(inc.cast_mut().cast()) };
    if !qid.is_null() {
        // A request the consumer holds has its channel until it is answered.
        let q = i.channel().map_or(0, |c| c.index());
        // SAFETY: Valid for writes (the contract).
        unsafe { qid.write(q) };
    }
    i.tag()
}

/// Starts the RDMA of `inc` (whose data must go `want`) with `sg`. Data
/// that came inline is copied at once: its callback comes back, to be
/// called (with 0) once `inc` is no longer borrowed.
///
/// # Safety
///
/// `inc` is the consumer's, with no transfer in flight.
unsafe fn rdma(
    inc: *mut ferry_incoming,
    sg: SgList,
    done: RdmaCallback,
    want: Dir,
) -> Result<Option<RdmaCallback>> {
    // The borrow ends before a transfer is posted, whose completion may
    // answer the request and reuse its entry at once.
    let (chan, tag, head) = {
        // SAFETY: The consumer owns `inc` (the contract).
        let i = unsafe { Incoming::borrow(inc.cast()) };
        if i.dir() != want || sg.len() != u64::from(i.data_len()) {
            return Err(EINVAL);
        }
        let chan = i.channel().ok_or(ENOTCONN)?.clone();
        if i.head().inline {
            chan.incoming_inline(i, sg)?;
            return Ok(Some(done));
        }
        (chan, i.tag(), i.head())
    };
    chan.incoming_rdma(tag, head, sg, done)?;
    Ok(None)
}

/// What `ferry_rdma_read()` and `ferry_rdma_write()` return for `rdma`'s
/// result; a transfer that is already over (inline data) is told so here,
/// after the request's last borrow (its callback may answer and free it).
fn rdma_started(res: Result<Option<RdmaCallback>>) -> c_int {
    match res {
        Ok(None) => 0,
        Ok(Some(cb)) => {
            cb.done(0);
            0
        }
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
    // SAFETY: The consumer owns `inc`, lends `sgl` and may be called back
    // once with `inc` and `ctx` (the contract).
    let lent = unsafe { lent_transfer(sgl, nents, done, inc, ctx) };
    rdma_started(lent.and_then(|(sg, cb)| {
        // SAFETY: As above.
        unsafe { rdma(inc, sg, cb, Dir::ToPeer) }
    }))
}

/// A transfer's list and callback, from the consumer's: `EINVAL` without
/// a `done`.
///
/// # Safety
///
/// `sgl` heads `nents` entries the consumer lends until `done`, which may
/// be called once, from any thread, with `inc` and `ctx`.
unsafe fn lent_transfer(
    sgl: *mut scatterlist,
    nents: c_uint,
    done: RdmaDoneFn,
    inc: *mut ferry_incoming,
    ctx: *mut c_void,
) -> Result<(SgList, RdmaCallback)> {
    let done = done.ok_or(EINVAL)?;
    // SAFETY: The contract.
    unsafe {
        Ok((
            SgList::from_raw(sgl, nents)?,
            RdmaCallback::new(done, inc, ctx),
        ))
    }
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
    // SAFETY: As in `ferry_rdma_read`.
    let lent = unsafe { lent_transfer(sgl, nents, done, inc, ctx) };
    rdma_started(lent.and_then(|(sg, cb)| {
        // SAFETY: As above.
        unsafe { rdma(inc, sg, cb, Dir::FromPeer) }
    }))
}

/// See `ferry_rdma_write_respond()` in `include/ferry/ferry.h`.
///
/// # Safety
///
/// As for `ferry_rdma_read`; `hdr` holds `len` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn ferry_rdma_write_respond(
    inc: *mut ferry_incoming,
    sgl: *mut scatterlist,
    nents: c_uint,
    status: c_int,
    hdr: *const c_void,
    len: u32,
    done: RdmaDoneFn,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: The consumer lends `sgl`, and gives `inc` up (the request is
    // answered) but for an error, when `done` is not called: it is called
    // once at most, with no request.
    let (sg, cb) = match unsafe { lent_transfer(sgl, nents, done, core::ptr::null_mut(), ctx) } {
        Ok(x) => x,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: `hdr` holds `len` bytes (the contract); `write_respond`
    // refuses one inside the request's entry. The consumer gives the
    // request up unless this fails, when it is handed back below.
    let (hdr, i) = unsafe {
        (
            ferry_abi::bytes(hdr, len as usize),
            Incoming::from_foreign(inc.cast()),
        )
    };
    let Some(chan) = i.channel().cloned() else {
        let _ = i.into_foreign();
        return ENOTCONN.to_errno();
    };
    match chan.write_respond(i, sg, status, hdr, cb) {
        Ok(()) => 0,
        Err((e, i, _)) => {
            let _ = i.into_foreign();
            e.to_errno()
        }
    }
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
    // SAFETY: The consumer owns `inc` (the contract).
    if unsafe { Incoming::borrow(inc.cast()) }.holds(hdr.cast(), len as usize) {
        // A response that waits for a credit is kept in that entry.
        return EINVAL.to_errno();
    }
    // SAFETY: `hdr` holds `len` bytes, outside the request's entry (checked
    // above); the consumer gives the request back (the contract).
    let (hdr, i) = unsafe {
        (
            ferry_abi::bytes(hdr, len as usize),
            Incoming::from_foreign(inc.cast()),
        )
    };
    match channel::respond(i, status, hdr) {
        Ok(()) => 0,
        // A transfer is in flight: the request stays the consumer's.
        Err((e, Some(i))) => {
            let _ = i.into_foreign();
            e.to_errno()
        }
        Err((e, None)) => e.to_errno(),
    }
}
