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
//! - [`SessionRef::submit`] sends a [`Request`], whose data lives in pages
//!   the peer reads or writes by RDMA; [`Done::done`] gets it back.
//!   The peer's handler gets an [`Incoming`] in [`Handler::request`], moves
//!   the data with [`Incoming::read`] or [`Incoming::write`] and answers with
//!   [`Incoming::respond`].
//! - The pages are anything that implements [`Pages`]: [`Data`], pages the
//!   wrapper allocates; [`Lent`], a caller's own `VVec` buffer as it is; or a
//!   type of the caller's that lends a scatterlist it has (a block request's
//!   bio pages, say). They are ferry's until they come back.
//!
//! A handler lives in an `Arc` that ferry holds from `accept` (or open) until
//! [`Handler::gone`], which is always the last callback.

use core::{marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};
use kernel::{
    alloc::Flags,
    bindings,
    error::{from_err_ptr, to_result},
    ffi::{c_int, c_uint, c_void},
    page::AsPageIter,
    page::{Page, PAGE_SIZE},
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

    /// The address's bytes (4 or 16, network byte order) and the port.
    pub fn ip_port(&self) -> (&[u8], u16) {
        match self {
            Peer::V4(a, port) => (&a[..], *port),
            Peer::V6(a, port) => (&a[..], *port),
        }
    }

    /// The address in `st`; `None` unless it is IPv4 or IPv6.
    fn from_storage(st: &ffi::__kernel_sockaddr_storage) -> Option<Self> {
        let mut b = [0u8; 24];
        // SAFETY: `sockaddr_storage` is 128 plain bytes, more than `b`.
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(st).cast::<u8>(),
                b.as_mut_ptr(),
                b.len(),
            )
        };
        let port = u16::from_be_bytes([b[2], b[3]]);
        match u16::from_ne_bytes([b[0], b[1]]) {
            AF_INET => Some(Peer::V4(b[4..8].try_into().ok()?, port)),
            AF_INET6 => Some(Peer::V6(b[8..24].try_into().ok()?, port)),
            _ => None,
        }
    }
}

/// [`Params::inline_size`] for no inline data either way.
pub const NO_INLINE: u32 = u32::MAX;

/// What [`Session::open`] opens: 0 in a number field picks ferry's default
/// (see `struct ferry_session_params`).
pub struct Params<'a> {
    /// The peer's address and port.
    pub peer: Peer,
    /// The peer's service name.
    pub service: &'a CStr,
    /// Channels; 0: one per CPU.
    pub channels: u16,
    /// Polled channels after them (see [`SessionRef::poll_channel`]).
    pub poll_channels: u16,
    /// Receive buffers per channel.
    pub queue_depth: u32,
    /// Largest message this side accepts, including ferry's 16-byte header.
    pub max_msg: u32,
    /// Data to the peer a request may carry in its message, beyond
    /// `max_msg` ([`NO_INLINE`]: none).
    pub inline_size: u32,
    /// Heartbeat interval, ms.
    pub heartbeat_ms: u32,
    /// Silence after which the peer is dead, and the longest a send waits, ms.
    pub timeout_ms: u32,
    /// Seconds of failed reconnecting before the session closes.
    pub give_up_s: u32,
    /// The longest wait between two reconnect attempts, in seconds (see
    /// [`SessionRef::set_reconnect_delay`]).
    pub reconnect_delay_s: u32,
    /// The network namespace to connect in (`None`: the initial one); the
    /// session takes its own reference. A key is looked up there.
    pub net: Option<NetNs<'a>>,
    /// A pre-shared key's name: both sides prove they hold it.
    pub key: Option<&'a CStr>,
    /// Each channel registers every region its requests can need when it
    /// is built, as nvme-rdma does (`FERRY_PREREGISTER`): for a block
    /// device, whose requests then never wait for the pool to grow.
    pub preregister: bool,
    /// This side takes no requests from the peer (`FERRY_NO_REQUESTS`):
    /// its channels keep no room for them, and its peer sends it none.
    pub no_requests: bool,
    /// The channels that are not polled process their completions in
    /// softirq (`FERRY_SOFTIRQ`, only with `no_requests`): the handler's
    /// `message` and `writable`, and its requests' [`Done::done`], then
    /// run in softirq and must never sleep.
    pub softirq: bool,
}

impl<'a> Params<'a> {
    /// Defaults for everything but where to connect.
    pub fn new(peer: Peer, service: &'a CStr) -> Self {
        Self {
            peer,
            service,
            channels: 0,
            poll_channels: 0,
            queue_depth: 0,
            max_msg: 0,
            inline_size: 0,
            heartbeat_ms: 0,
            timeout_ms: 0,
            give_up_s: 0,
            reconnect_delay_s: 0,
            net: None,
            key: None,
            preregister: false,
            no_requests: false,
            softirq: false,
        }
    }
}

/// A network namespace (`struct net`) that a consumer's own type stands
/// for, to hand to ferry (which takes its own reference with `get_net`).
///
/// # Safety
///
/// [`AsNetNs::as_raw_net`] returns a pointer to a `struct net` of which a
/// counted reference is held for as long as `self` is borrowed (a live
/// namespace, not one being dismantled).
pub unsafe trait AsNetNs {
    /// The `struct net`.
    fn as_raw_net(&self) -> *mut c_void;
}

/// A network namespace borrowed for `'a` (see [`Params::net`]).
///
/// # Invariants
///
/// `raw` points to a `struct net` of which a counted reference is held for
/// `'a`.
#[derive(Clone, Copy)]
pub struct NetNs<'a> {
    raw: *mut c_void,
    _p: PhantomData<&'a ()>,
}

impl<'a> NetNs<'a> {
    /// The namespace `net` stands for, for as long as it is borrowed.
    pub fn of<N: AsNetNs>(net: &'a N) -> Self {
        // INVARIANT: held while `net` is borrowed (the trait's contract).
        Self {
            raw: net.as_raw_net(),
            _p: PhantomData,
        }
    }
}

/// The most channels a session has, polled ones included (see
/// `struct ferry_session_params`).
pub const MAX_CHANNELS: u16 = 64;

/// The longest give-up time a session takes, in seconds (a week; see
/// `struct ferry_session_params`).
pub const MAX_GIVE_UP_S: u32 = 7 * 86_400;

/// What a session negotiated (`struct ferry_limits`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Channels of the session, polled ones included.
    pub channels: u16,
    /// How many of them, the last ones, are polled.
    pub poll_channels: u16,
    /// The peer's receive buffers per channel.
    pub queue_depth: u32,
    /// Largest message [`SessionRef::send`] takes.
    pub max_payload: u32,
    /// Most bytes of data one request carries.
    pub max_data: u32,
    /// Most scatterlist entries one request's data has.
    pub max_segments: u32,
    /// The gaps the data may not have (see `struct ferry_limits`).
    pub virt_boundary_mask: u32,
    /// The alignment mask the data's address and length need.
    pub dma_alignment: u32,
    /// The most bytes of data to the peer sent in the request message
    /// itself, unregistered (0: none).
    pub inline_size: u32,
    /// The most requests from the peer a channel holds at once (this
    /// side's own queue depth): [`Incoming::tag`] is below it.
    pub incoming_depth: u32,
}

/// Whether a send may wait for a credit (or a send buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Wait up to the session's timeout (not from a callback).
    Yes,
    /// Fail with `EAGAIN`; [`Handler::writable`] follows.
    No,
}

impl Wait {
    fn flags(self) -> c_uint {
        match self {
            Wait::Yes => 0,
            Wait::No => ffi::FERRY_NOWAIT,
        }
    }
}

/// Which way a request's data goes (`enum ferry_dir`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// The request has no data.
    None,
    /// The requester's pages go to the peer, which reads them.
    ToPeer,
    /// The peer writes into the requester's pages.
    FromPeer,
}

impl Dir {
    fn to_raw(self) -> ffi::ferry_dir {
        match self {
            Dir::None => ffi::ferry_dir_FERRY_DIR_NONE,
            Dir::ToPeer => ffi::ferry_dir_FERRY_TO_PEER,
            Dir::FromPeer => ffi::ferry_dir_FERRY_FROM_PEER,
        }
    }

    fn from_raw(d: ffi::ferry_dir) -> Self {
        match d {
            ffi::ferry_dir_FERRY_TO_PEER => Dir::ToPeer,
            ffi::ferry_dir_FERRY_FROM_PEER => Dir::FromPeer,
            _ => Dir::None,
        }
    }
}

/// Memory a request or a transfer lends ferry: a scatterlist whose pages
/// ferry maps for DMA and registers, and that the peer reads or writes,
/// until the object comes back ([`Done::done`], [`Transferred::transferred`]).
///
/// # Safety
///
/// While an implementer is lent (moved into a [`Request`] or a transfer),
/// [`Pages::sgl`] returns the head of a valid scatterlist of that many
/// entries holding [`Pages::len`] bytes, the same on every call, whose pages
/// stay allocated and are neither read, written nor DMA-mapped by anyone but
/// ferry until the object is given back. ferry writes the entries' DMA
/// fields through the pointer (mapping them), so the entries must not live
/// inside the object where a shared reference covers them: in a separate
/// allocation, as `sg_table`s are.
pub unsafe trait Pages: Send + 'static {
    /// The scatterlist's head and entry count.
    fn sgl(&self) -> (*mut bindings::scatterlist, c_uint);
    /// The bytes it holds (at least one).
    fn len(&self) -> usize;
    /// Whether it holds none (never, when lent).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A scatterlist table over `n` pages at `raw`, one entry each, `len` bytes.
fn table_over(raw: &mut KVec<*mut bindings::page>, len: usize) -> Result<bindings::sg_table> {
    let n = u32::try_from(raw.len()).map_err(|_| EINVAL)?;
    if len == 0 || len > raw.len() * PAGE_SIZE || len <= (raw.len() - 1) * PAGE_SIZE {
        return Err(EINVAL);
    }
    let mut table = bindings::sg_table::default();
    // SAFETY: `raw` holds `n` pages, which the caller keeps valid while the
    // table exists; `table` is valid for writes.
    // CAST: a page fits a segment.
    to_result(unsafe {
        bindings::sg_alloc_table_from_pages_segment(
            &mut table,
            raw.as_mut_ptr(),
            n,
            0,
            len,
            PAGE_SIZE as c_uint,
            bindings::GFP_KERNEL,
        )
    })?;
    Ok(table)
}

/// Pages of data for a request or a transfer: `len` bytes in whole pages,
/// with the scatterlist that lends them to ferry.
///
/// # Invariants
///
/// `table` was filled by `sg_alloc_table_from_pages_segment` over `pages`,
/// one entry per page, `len` bytes in all, and is freed on drop.
pub struct Data {
    pages: KVec<Page>,
    table: bindings::sg_table,
    len: usize,
}

// SAFETY: The table only points at the pages the object owns.
unsafe impl Send for Data {}
// SAFETY: Shared references only read.
unsafe impl Sync for Data {}

impl Data {
    /// `len` bytes (at least one) of zeroed pages. May sleep.
    pub fn new(len: usize) -> Result<Self> {
        Self::alloc(len, true)
    }

    /// `len` bytes (at least one) of pages that hold whatever they held
    /// (not zeroed): for data that a transfer or a read fills whole before
    /// anything reads it. The caller must fill every byte before any of it
    /// is read, sent or written anywhere (or drop it unread): until then
    /// it is whatever kernel memory the pages held. Zeroing costs a pass
    /// over every page, most of the time of a large allocation. May sleep.
    pub fn for_overwrite(len: usize) -> Result<Self> {
        Self::alloc(len, false)
    }

    fn alloc(len: usize, zeroed: bool) -> Result<Self> {
        let flags = GFP_KERNEL;
        let page_flags = if zeroed {
            flags | kernel::alloc::flags::__GFP_ZERO
        } else {
            flags
        };
        let n = len.div_ceil(PAGE_SIZE);
        if n == 0 || u32::try_from(len).is_err() {
            return Err(EINVAL);
        }
        let mut pages = KVec::with_capacity(n, flags)?;
        let mut raw = KVec::with_capacity(n, flags)?;
        for _ in 0..n {
            let page = Page::alloc_page(page_flags)?;
            raw.push(page.as_ptr(), flags)?;
            pages.push(page, flags)?;
        }
        let table = table_over(&mut raw, len)?;
        // INVARIANT: the table was just filled over `pages`.
        Ok(Self { pages, table, len })
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Visits the byte range `off..off + n` page by page: `f(page, offset in
    /// the page, offset in the range, length)`.
    fn chunks(
        &self,
        off: usize,
        n: usize,
        mut f: impl FnMut(&Page, usize, usize, usize) -> Result,
    ) -> Result {
        if off.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(EINVAL);
        }
        let mut done = 0;
        while done < n {
            let at = off + done;
            let in_page = at % PAGE_SIZE;
            let take = (PAGE_SIZE - in_page).min(n - done);
            let page = self.pages.get(at / PAGE_SIZE).ok_or(EINVAL)?;
            f(page, in_page, done, take)?;
            done += take;
        }
        Ok(())
    }

    /// Copies `src` into the data at `off`.
    pub fn write(&mut self, off: usize, src: &[u8]) -> Result {
        self.chunks(off, src.len(), |page, in_page, at, n| {
            // SAFETY: `src[at..at + n]` is in bounds (the range is), and
            // nothing else touches the page meanwhile: `&mut self`, and
            // ferry only ever holds `Data` moved into it.
            unsafe { page.write_raw(src.as_ptr().add(at), in_page, n) }
        })
    }

    /// Copies the data at `off` into `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result {
        self.chunks(off, dst.len(), |page, in_page, at, n| {
            // SAFETY: `dst[at..at + n]` is in bounds (the range is); no one
            // writes the page meanwhile: writing takes `&mut self`, and ferry
            // only ever holds `Data` moved into it.
            unsafe { page.read_raw(dst.as_mut_ptr().add(at), in_page, n) }
        })
    }
}

// SAFETY: The table covers `len` bytes of the object's own pages (type
// invariant); while it is lent nobody else can reach them: `read` and
// `write` need the object, which ferry holds.
unsafe impl Pages for Data {
    fn sgl(&self) -> (*mut bindings::scatterlist, c_uint) {
        (self.table.sgl, self.table.nents)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Data {
    fn drop(&mut self) {
        // SAFETY: Filled by `sg_alloc_table_from_pages_segment` (type
        // invariant); the pages go after it.
        unsafe { bindings::sg_free_table(&mut self.table) };
    }
}

/// A caller's own buffer lent as it is, with no copy: the first `len` bytes
/// of a `VVec`'s pages. [`Lent::into_inner`] gives the buffer back.
///
/// The pages are reached by DMA through their `struct page` and by the CPU
/// through the vmalloc address: on an architecture whose caches can alias
/// (not x86 or arm64), a caller must `flush_kernel_vmap_range()` before
/// lending and `invalidate_kernel_vmap_range()` after data came in, as
/// `bio_map_kern()` does; `Data` has no such caveat.
///
/// # Invariants
///
/// `table` was filled by `sg_alloc_table_from_pages_segment` over the pages
/// of `buf`'s allocation, which never moves (`buf` is not reachable for
/// changes), `len` bytes from its start; it is freed on drop.
pub struct Lent {
    buf: VVec<u8>,
    table: bindings::sg_table,
    len: usize,
}

// SAFETY: The table only points at the pages of the object's own buffer.
unsafe impl Send for Lent {}

impl Lent {
    /// Lends the first `len` bytes (at least one) of `buf`, which must hold
    /// them. On failure the buffer comes back with the error. May sleep.
    pub fn new(mut buf: VVec<u8>, len: usize) -> core::result::Result<Self, (Error, VVec<u8>)> {
        let n = len.div_ceil(PAGE_SIZE);
        if len == 0 || len > buf.len() {
            return Err((EINVAL, buf));
        }
        let mut raw = match KVec::with_capacity(n, GFP_KERNEL) {
            Ok(v) => v,
            Err(e) => return Err((e.into(), buf)),
        };
        for page in buf.page_iter().take(n) {
            // Never fails: there is room for `n`.
            let _ = raw.push_within_capacity(page.as_ptr());
        }
        match table_over(&mut raw, len) {
            // INVARIANT: the table was just filled over `buf`'s pages.
            Ok(table) => Ok(Self { buf, table, len }),
            Err(e) => Err((e, buf)),
        }
    }

    /// The lent bytes, as they are now (not while lent: ferry holds the
    /// object then).
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> VVec<u8> {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: Filled by `sg_alloc_table_from_pages_segment` (type
        // invariant), and not used again.
        unsafe { bindings::sg_free_table(&mut this.table) };
        // SAFETY: `this` is never used or dropped again; `buf` is moved out
        // once.
        unsafe { core::ptr::read(&this.buf) }
    }
}

// SAFETY: The table covers `len` bytes of the buffer's pages (type
// invariant); while the object is lent nobody else can reach the buffer: it
// is only reached through the object, which ferry holds.
unsafe impl Pages for Lent {
    fn sgl(&self) -> (*mut bindings::scatterlist, c_uint) {
        (self.table.sgl, self.table.nents)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: Filled by `sg_alloc_table_from_pages_segment` (type
        // invariant); the buffer goes after it.
        unsafe { bindings::sg_free_table(&mut self.table) };
    }
}

/// What a request's submitter is told when it is over.
pub trait Done<P: Pages = Data>: Send + Sized + 'static {
    /// `req` is over: see [`Request::status`]. Its pages are the caller's
    /// again. Runs where `struct ferry_request`'s `done` runs: do not wait
    /// here, nor drop a [`Session`].
    fn done(req: KBox<Request<Self, P>>);
}

/// A request: a header, optionally data (any [`Pages`], [`Data`] unless
/// said otherwise) and its direction, room for the response, and the
/// caller's `ctx`. Reusable once [`Done::done`] has it.
#[repr(C)]
pub struct Request<T: Done<P>, P: Pages = Data> {
    /// First: `done_raw` finds the request from it.
    raw: ffi::ferry_request,
    header: KVec<u8>,
    response: KVec<u8>,
    data: Option<(Dir, P)>,
    /// The caller's.
    pub ctx: T,
}

// SAFETY: `raw` only points into the request's own buffers.
unsafe impl<T: Done<P>, P: Pages> Send for Request<T, P> {}

impl<T: Done<P>, P: Pages> Request<T, P> {
    /// A request with `header` and no data; up to `response_room` bytes of
    /// the peer's response header are kept.
    pub fn new(header: &[u8], response_room: usize, ctx: T, flags: Flags) -> Result<KBox<Self>> {
        let mut h = KVec::new();
        h.extend_from_slice(header, flags)?;
        let response = KVec::from_elem(0u8, response_room, flags)?;
        let raw = ffi::ferry_request {
            hdr: core::ptr::null(),
            hdr_len: 0,
            dir: ffi::ferry_dir_FERRY_DIR_NONE,
            sgl: core::ptr::null_mut(),
            nents: 0,
            tag: 0,
            resp: core::ptr::null_mut(),
            resp_size: 0,
            done: None,
            priv_: core::ptr::null_mut(),
            status: 0,
            resp_len: 0,
            moved: 0,
        };
        Ok(KBox::new(
            Self {
                raw,
                header: h,
                response,
                data: None,
                ctx,
            },
            flags,
        )?)
    }

    /// Replaces the header.
    pub fn set_header(&mut self, header: &[u8], flags: Flags) -> Result {
        self.header.clear();
        Ok(self.header.extend_from_slice(header, flags)?)
    }

    /// Gives the request `data`, which goes `dir` ([`Dir::ToPeer`] or
    /// [`Dir::FromPeer`]); returns what it had.
    pub fn set_data(&mut self, dir: Dir, data: P) -> Option<P> {
        self.data.replace((dir, data)).map(|(_, d)| d)
    }

    /// Takes the request's data back.
    pub fn take_data(&mut self) -> Option<P> {
        self.data.take().map(|(_, d)| d)
    }

    /// The request's data.
    pub fn data(&self) -> Option<&P> {
        self.data.as_ref().map(|(_, d)| d)
    }

    /// The outcome, once done: the peer's status, or `ECONNABORTED` if the
    /// connection failed before the response (the peer may have acted on it).
    pub fn status(&self) -> Result {
        to_result(self.raw.status)
    }

    /// The peer's response header, once done.
    pub fn response(&self) -> &[u8] {
        let n = (self.raw.resp_len as usize).min(self.response.len());
        self.response.get(..n).unwrap_or(&[])
    }

    /// Bytes of data the peer says it moved, once done.
    pub fn moved(&self) -> u32 {
        self.raw.moved
    }

    /// Fills in `raw` for `ferry_submit`, with `tag` for `FERRY_TAGGED`.
    ///
    /// Every pointer it sets points into heap buffers the request owns, which
    /// stay put while ferry has the request, as the request itself does
    /// (boxed).
    fn prepare(&mut self, tag: u32) {
        let (dir, (sgl, nents)) = match &self.data {
            Some((dir, d)) => (*dir, d.sgl()),
            None => (Dir::None, (core::ptr::null_mut(), 0)),
        };
        let sgl = sgl.cast::<ffi::scatterlist>();
        self.raw = ffi::ferry_request {
            hdr: self.header.as_ptr().cast(),
            hdr_len: u32::try_from(self.header.len()).unwrap_or(u32::MAX),
            dir: dir.to_raw(),
            sgl,
            nents,
            tag,
            resp: self.response.as_mut_ptr().cast(),
            resp_size: u32::try_from(self.response.len()).unwrap_or(u32::MAX),
            done: Some(Self::done_raw),
            priv_: core::ptr::null_mut(),
            status: 0,
            resp_len: 0,
            moved: 0,
        };
    }

    /// # Safety
    ///
    /// Called by ferry only, once, with the pointer to the `raw` of a request
    /// that [`SessionRef::submit`] gave it (derived from the whole box).
    unsafe extern "C" fn done_raw(rq: *mut ffi::ferry_request) {
        // SAFETY: `raw` is the first field of the `#[repr(C)]` request, which
        // `submit` leaked from a box: ferry gives it back now.
        let req = unsafe { KBox::from_raw(rq.cast::<Self>()) };
        T::done(req);
    }
}

/// A request from the peer, the handler's until it answers (dropping it
/// answers `EIO`). Its functions may be called from any context that may
/// sleep.
///
/// # Invariants
///
/// Wraps a `struct ferry_incoming` that ferry handed over and that has not
/// been answered, with no transfer in flight.
pub struct Incoming(NonNull<ffi::ferry_incoming>);

// SAFETY: ferry's request functions may be called from any thread.
unsafe impl Send for Incoming {}

/// What a data transfer's initiator is told when it is over.
pub trait Transferred<P: Pages = Data>: Send + Sized + 'static {
    /// The data moved (`status` is `Ok`) or could not: `req` is back, to be
    /// answered, and `t` with it, its pages the caller's again.
    fn transferred(t: KBox<Transfer<Self, P>>, req: Incoming, status: Result);

    /// The data of [`Incoming::write_respond`] went (`status` is `Ok`) or
    /// could not, and the request is answered: `t` is back, its pages the
    /// caller's again. By default `t` is dropped.
    fn answered(t: KBox<Transfer<Self, P>>, status: Result) {
        let _ = status;
        drop(t);
    }
}

/// A transfer of a request's data: the pages it moves to or from and the
/// caller's context, in a box the caller makes and gets back in
/// [`Transferred::transferred`], to use again: a consumer that keeps one
/// per request it may hold at a time allocates nothing per transfer.
pub struct Transfer<T, P: Pages = Data> {
    /// The pages.
    pub data: P,
    /// The caller's.
    pub ctx: T,
}

impl<T, P: Pages> Transfer<T, P> {
    /// A boxed transfer of `data`, with `ctx`.
    pub fn new(data: P, ctx: T, flags: Flags) -> Result<KBox<Self>> {
        Ok(KBox::new(Self { data, ctx }, flags)?)
    }
}

impl Incoming {
    fn as_raw(&self) -> *mut ffi::ferry_incoming {
        self.0.as_ptr()
    }

    /// The request's header.
    pub fn header(&self) -> &[u8] {
        let mut len = 0u32;
        // SAFETY: A live request (type invariant).
        let p = unsafe { ffi::ferry_incoming_header(self.as_raw(), &mut len) };
        if p.is_null() || len == 0 {
            return &[];
        }
        // SAFETY: ferry keeps `len` bytes at `p` until the answer, which
        // takes `self`.
        unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len as usize) }
    }

    /// Which way the request's data goes.
    pub fn dir(&self) -> Dir {
        // SAFETY: A live request (type invariant).
        Dir::from_raw(unsafe { ffi::ferry_incoming_dir(self.as_raw()) })
    }

    /// How many bytes of data the request has.
    pub fn data_len(&self) -> u32 {
        // SAFETY: A live request (type invariant).
        unsafe { ffi::ferry_incoming_data_len(self.as_raw()) }
    }

    /// Where the request is held: its channel and its tag there, below
    /// [`Limits::incoming_depth`]. No two requests of one connection of a
    /// channel share them while the handler holds them, so a consumer may
    /// keep a context per tag, made in advance. The tag is free again
    /// inside [`Incoming::respond`]: give the context back before. One held
    /// across a client's reconnect may share them with a request of the new
    /// connection. See `ferry_incoming_tag()`.
    pub fn tag(&self) -> (u16, u32) {
        let mut qid = 0u16;
        // SAFETY: A live request (type invariant); `qid` is valid for writes.
        let tag = unsafe { ffi::ferry_incoming_tag(self.as_raw(), &mut qid) };
        (qid, tag)
    }

    /// Answers the request with `status` and a response header; see
    /// `ferry_respond()`.
    pub fn respond(self, status: Result, header: &[u8]) -> Result {
        // (A header too long fails below, and the request goes back all the
        // same.)
        let len = u32::try_from(header.len()).unwrap_or(u32::MAX);
        let this = ManuallyDrop::new(self);
        let status = status.err().map_or(0, Error::to_errno);
        // SAFETY: A live request with no transfer in flight (type invariant),
        // so ferry takes it back whatever the result: `this` is not used again.
        to_result(unsafe { ffi::ferry_respond(this.as_raw(), status, header.as_ptr().cast(), len) })
    }

    /// Reads a [`Dir::ToPeer`] request's data into `t`'s pages (exactly
    /// [`Incoming::data_len`] bytes); `t`'s context is told when it is
    /// there. Also when it cannot start: [`Transferred::transferred`] is
    /// called exactly once.
    pub fn read<P: Pages, T: Transferred<P>>(self, t: KBox<Transfer<T, P>>) {
        self.transfer(t, Dir::ToPeer)
    }

    /// Writes `t`'s pages (exactly [`Incoming::data_len`] bytes) into a
    /// [`Dir::FromPeer`] request's pages; as for [`Incoming::read`].
    pub fn write<P: Pages, T: Transferred<P>>(self, t: KBox<Transfer<T, P>>) {
        self.transfer(t, Dir::FromPeer)
    }

    /// Writes `t`'s pages into a [`Dir::FromPeer`] request's pages, as
    /// [`Incoming::write`], and answers with `status` and `header` right
    /// behind the data; see `ferry_rdma_write_respond()`. Once the data
    /// went (or could not), [`Transferred::answered`] is told; if the
    /// transfer cannot start, [`Transferred::transferred`] is, with the
    /// request back (unanswered).
    pub fn write_respond<P: Pages, T: Transferred<P>>(
        self,
        t: KBox<Transfer<T, P>>,
        status: Result,
        header: &[u8],
    ) {
        let (sgl, nents) = t.data.sgl();
        let sgl = sgl.cast::<ffi::scatterlist>();
        let ptr = KBox::into_raw(t);
        let this = ManuallyDrop::new(self);
        let len = u32::try_from(header.len()).unwrap_or(u32::MAX);
        let status = status.err().map_or(0, Error::to_errno);
        // SAFETY: A live request with no transfer in flight (type
        // invariant), which ferry takes unless this fails; `sgl` heads the
        // scatterlist of `(*ptr).data`, valid and untouched until
        // `answered_done` gives it back; `header` holds `len` bytes.
        let ret = unsafe {
            ffi::ferry_rdma_write_respond(
                this.as_raw(),
                sgl,
                nents,
                status,
                header.as_ptr().cast(),
                len,
                Some(Self::answered_done::<P, T>),
                ptr.cast(),
            )
        };
        if ret != 0 {
            // SAFETY: ferry did not take it: `done` will not run.
            let t = unsafe { KBox::from_raw(ptr) };
            // INVARIANT: nothing started; the request is still ours.
            T::transferred(t, Incoming(this.0), Err(Error::from_errno(ret)));
        }
    }

    /// # Safety
    ///
    /// Called by ferry only, once per transfer `write_respond` started,
    /// with the context it gave.
    unsafe extern "C" fn answered_done<P: Pages, T: Transferred<P>>(
        _in: *mut ffi::ferry_incoming,
        ctx: *mut c_void,
        status: c_int,
    ) {
        // SAFETY: `ctx` is the box `write_respond` leaked; ferry gives it
        // back.
        let t = unsafe { KBox::from_raw(ctx.cast::<Transfer<T, P>>()) };
        T::answered(t, to_result(status));
    }

    fn transfer<P: Pages, T: Transferred<P>>(self, t: KBox<Transfer<T, P>>, dir: Dir) {
        let (sgl, nents) = t.data.sgl();
        let sgl = sgl.cast::<ffi::scatterlist>();
        let ptr = KBox::into_raw(t);
        let this = ManuallyDrop::new(self);
        let start = match dir {
            Dir::ToPeer => ffi::ferry_rdma_read,
            _ => ffi::ferry_rdma_write,
        };
        // SAFETY: A live request with no transfer in flight (type invariant);
        // `sgl` heads the scatterlist of `(*ptr).data`, which stays valid
        // and untouched until `transfer_done` gives it back.
        let ret = unsafe {
            start(
                this.as_raw(),
                sgl,
                nents,
                Some(Self::transfer_done::<P, T>),
                ptr.cast(),
            )
        };
        if ret != 0 {
            // SAFETY: ferry did not take it: `done` will not run.
            let t = unsafe { KBox::from_raw(ptr) };
            // INVARIANT: no transfer started; the request is still ours.
            T::transferred(t, Incoming(this.0), Err(Error::from_errno(ret)));
        }
    }

    /// # Safety
    ///
    /// Called by ferry only, once per started transfer, with its request
    /// and the context `transfer` gave.
    unsafe extern "C" fn transfer_done<P: Pages, T: Transferred<P>>(
        in_: *mut ffi::ferry_incoming,
        ctx: *mut c_void,
        status: c_int,
    ) {
        // SAFETY: `ctx` is the box `transfer` leaked; ferry gives it back.
        let t = unsafe { KBox::from_raw(ctx.cast::<Transfer<T, P>>()) };
        let Some(raw) = NonNull::new(in_) else {
            return;
        };
        // INVARIANT: the transfer is over; the request is the caller's again.
        T::transferred(t, Incoming(raw), to_result(status));
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        // SAFETY: A live request with no transfer in flight (type invariant);
        // ferry takes it back.
        let _ = unsafe { ffi::ferry_respond(self.as_raw(), EIO.to_errno(), core::ptr::null(), 0) };
    }
}

/// The callbacks of a session; see `struct ferry_ops` for their contexts.
pub trait Handler: Send + Sync + Sized + 'static {
    /// The session is connected (again).
    fn up(&self, _s: &SessionRef) {}
    /// The connection is lost (`err` says why); a client reconnects.
    fn down(&self, _s: &SessionRef, _err: Error) {}
    /// A message arrived; `data` is valid during the call only.
    fn message(&self, s: &SessionRef, data: &[u8]);
    /// Channel `qid` has room again (credits, tags, regions or send
    /// buffers) after a send or submit on it, or on the session, failed
    /// with `EAGAIN`; see `struct ferry_ops`.
    fn writable(&self, _s: &SessionRef, _qid: u16) {}
    /// The session is closed (`None`: closed on this side); the last call.
    fn gone(&self, _s: &SessionRef, _err: Option<Error>) {}
    /// The peer sent a request. Move its data with [`Incoming::read`] or
    /// [`Incoming::write`], then answer with [`Incoming::respond`], now or
    /// later. By default the answer is `EOPNOTSUPP`.
    fn request(&self, _s: &SessionRef, req: Incoming) {
        // Nothing to do if it fails: the connection is gone, and with it
        // the request.
        let _ = req.respond(Err(EOPNOTSUPP), &[]);
    }
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

    /// Changes the longest wait between reconnect attempts, live: 1 to 3600
    /// s, on a client session. See `ferry_session_set_reconnect_delay()`.
    pub fn set_reconnect_delay(&self, secs: u32) -> Result {
        // SAFETY: A live handle (type invariant).
        to_result(unsafe { ffi::ferry_session_set_reconnect_delay(self.as_raw(), secs) })
    }

    /// The peer's address: a client session's listener, or a server
    /// session's client. See `ferry_session_peer()`.
    pub fn peer(&self) -> Option<Peer> {
        let mut st = ffi::__kernel_sockaddr_storage::default();
        // SAFETY: A live handle (type invariant); `st` is valid for writes.
        unsafe { ffi::ferry_session_peer(self.as_raw(), &mut st) };
        Peer::from_storage(&st)
    }

    /// What the session negotiated; `ENOTCONN` unless connected.
    pub fn limits(&self) -> Result<Limits> {
        let mut l = ffi::ferry_limits::default();
        // SAFETY: A live handle (type invariant); `l` is valid for writes.
        to_result(unsafe { ffi::ferry_session_limits(self.as_raw(), &mut l) })?;
        Ok(Limits {
            channels: l.channels,
            poll_channels: l.poll_channels,
            queue_depth: l.queue_depth,
            max_payload: l.max_payload,
            max_data: l.max_data,
            max_segments: l.max_segments,
            virt_boundary_mask: l.virt_boundary_mask,
            dma_alignment: l.dma_alignment,
            inline_size: l.inline_size,
            incoming_depth: l.incoming_depth,
        })
    }

    /// Sends `data` as one message; see `ferry_send()`.
    pub fn send(&self, data: &[u8], wait: Wait) -> Result {
        // SAFETY: A live handle (type invariant); `data` is valid for the call.
        to_result(unsafe {
            ffi::ferry_send(
                self.as_raw(),
                data.as_ptr().cast(),
                data.len(),
                wait.flags(),
            )
        })
    }

    /// Sends `data` as one message on channel `qid`; see `ferry_send_on()`.
    pub fn send_on(&self, qid: u16, data: &[u8], wait: Wait) -> Result {
        // SAFETY: A live handle (type invariant); `data` is valid for the call.
        to_result(unsafe {
            ffi::ferry_send_on(
                self.as_raw(),
                qid,
                data.as_ptr().cast(),
                data.len(),
                wait.flags(),
            )
        })
    }

    /// Processes the polled channels' waiting completions in the calling
    /// thread, running the callbacks they lead to here, and returns how many;
    /// see `ferry_poll()`. For a consumer that spins while it waits for an
    /// answer.
    pub fn poll(&self) -> u32 {
        // SAFETY: A live handle (type invariant).
        let n = unsafe { ffi::ferry_poll(self.as_raw()) };
        u32::try_from(n).unwrap_or(0)
    }

    /// Fails channel `qid` so the session reconnects; its requests in
    /// flight complete with `ECONNABORTED`. See `ferry_reset_channel()`.
    pub fn reset_channel(&self, qid: u16) -> Result {
        // SAFETY: A live handle (type invariant).
        to_result(unsafe { ffi::ferry_reset_channel(self.as_raw(), qid) })
    }

    /// Processes up to `budget` completions of polled channel `qid` in the
    /// calling thread and returns how many; `EINVAL` if `qid` is not a
    /// polled channel. See `ferry_poll_channel()`.
    pub fn poll_channel(&self, qid: u16, budget: u32) -> Result<u32> {
        // SAFETY: A live handle (type invariant).
        let n = unsafe { ffi::ferry_poll_channel(self.as_raw(), qid, budget) };
        to_result(n)?;
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// Sends a request; see `ferry_submit()`. On success
    /// [`Done::done`] gets `req` back exactly once, when the peer has
    /// answered or the connection has failed; on failure it comes back here.
    pub fn submit<T: Done<P>, P: Pages>(
        &self,
        req: KBox<Request<T, P>>,
        wait: Wait,
    ) -> core::result::Result<(), (Error, KBox<Request<T, P>>)> {
        self.submit_raw(None, None, req, wait)
    }

    /// Sends a request on channel `qid`, as [`SessionRef::submit`]; see
    /// `ferry_submit_on()`.
    pub fn submit_on<T: Done<P>, P: Pages>(
        &self,
        qid: u16,
        req: KBox<Request<T, P>>,
        wait: Wait,
    ) -> core::result::Result<(), (Error, KBox<Request<T, P>>)> {
        self.submit_raw(Some(qid), None, req, wait)
    }

    /// Sends a request on channel `qid` under the caller's own `tag` (below
    /// the queue depth, not in flight on that channel), as a blk-mq driver
    /// uses its request's tag; see `FERRY_TAGGED`. With [`Wait::No`]
    /// callable from atomic context.
    pub fn submit_tagged<T: Done<P>, P: Pages>(
        &self,
        qid: u16,
        tag: u32,
        req: KBox<Request<T, P>>,
        wait: Wait,
    ) -> core::result::Result<(), (Error, KBox<Request<T, P>>)> {
        self.submit_raw(Some(qid), Some(tag), req, wait)
    }

    fn submit_raw<T: Done<P>, P: Pages>(
        &self,
        on: Option<u16>,
        tag: Option<u32>,
        req: KBox<Request<T, P>>,
        wait: Wait,
    ) -> core::result::Result<(), (Error, KBox<Request<T, P>>)> {
        let req = KBox::into_raw(req);
        // SAFETY: `req` is valid (from `into_raw`), and ours until ferry
        // takes it below.
        unsafe { (*req).prepare(tag.unwrap_or(0)) };
        let flags = wait.flags() | if tag.is_some() { ffi::FERRY_TAGGED } else { 0 };
        // SAFETY: A live handle (type invariant). `raw` is the first field of
        // `*req`, whose pointer (derived from the box, so valid for all of
        // it) `Request::done_raw` turns back into the box; `*req` stays put
        // and valid until then, and its buffers and pages with it (see
        // `Request::prepare`).
        let rq = unsafe { &raw mut (*req).raw };
        let ret = match on {
            // SAFETY: As above.
            None => unsafe { ffi::ferry_submit(self.as_raw(), rq, flags) },
            // SAFETY: As above.
            Some(qid) => unsafe { ffi::ferry_submit_on(self.as_raw(), qid, rq, flags) },
        };
        if ret == 0 {
            return Ok(());
        }
        // SAFETY: ferry did not take it: `done` will not run.
        Err((Error::from_errno(ret), unsafe { KBox::from_raw(req) }))
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
            // Held across the call, which is all ferry needs (type
            // invariant of `NetNs`: `p` borrows it).
            net: p.net.map_or(core::ptr::null_mut(), |n| n.raw.cast()),
            peer: p.peer.storage(),
            service: p.service.as_char_ptr(),
            channels: p.channels,
            poll_channels: p.poll_channels,
            queue_depth: p.queue_depth,
            max_msg: p.max_msg,
            inline_size: p.inline_size,
            heartbeat_ms: p.heartbeat_ms,
            timeout_ms: p.timeout_ms,
            give_up_s: p.give_up_s,
            reconnect_delay_s: p.reconnect_delay_s,
            key: p.key.map_or(core::ptr::null(), |k| k.as_char_ptr()),
            flags: if p.preregister {
                ffi::FERRY_PREREGISTER
            } else {
                0
            } | if p.no_requests {
                ffi::FERRY_NO_REQUESTS
            } else {
                0
            } | if p.softirq { ffi::FERRY_SOFTIRQ } else { 0 },
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
        request: Some(Self::request),
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
    unsafe extern "C" fn writable(s: *mut ffi::ferry_session, priv_: *mut c_void, qid: u16) {
        // SAFETY: As in `up`.
        unsafe { Self::handler(priv_).writable(SessionRef::from_raw(s), qid) };
    }

    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle
    /// and `priv_` the session's handler reference.
    unsafe extern "C" fn gone(s: *mut ffi::ferry_session, priv_: *mut c_void, err: c_int) {
        // SAFETY: The last callback: ferry gives the handler reference back.
        let h = unsafe { Arc::<H>::from_raw(priv_.cast()) };
        // SAFETY: ferry passes a live handle.
        let s = unsafe { SessionRef::from_raw(s) };
        h.gone(s, (err < 0).then(|| Error::from_errno(err)));
    }
}

impl<H: Handler> Vtable<H> {
    /// # Safety
    ///
    /// Called by ferry only, as `struct ferry_ops` says: `s` is a live handle,
    /// `priv_` the session's handler reference, and `in_` a request handed
    /// over to the handler.
    unsafe extern "C" fn request(
        s: *mut ffi::ferry_session,
        priv_: *mut c_void,
        in_: *mut ffi::ferry_incoming,
    ) {
        let Some(raw) = NonNull::new(in_) else {
            return;
        };
        // INVARIANT: ferry hands the request over, unanswered.
        let req = Incoming(raw);
        // SAFETY: As in `up`.
        unsafe { Self::handler(priv_).request(SessionRef::from_raw(s), req) };
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
