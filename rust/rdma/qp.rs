// SPDX-License-Identifier: GPL-2.0

//! Reliable-connected queue pairs with their own CQ and message buffers.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`struct ib_qp`, `struct ib_cqe`, `ib_post_send`, `ib_post_recv`).
//!
//! A [`Qp`] owns an RC QP, the CQ both its queues complete on (a [`Cq`]
//! that ib_core polls from `ib_comp_wq`, or one its users poll through
//! [`Qp::poller`]), and one DMA-mapped buffer per work request *slot*: slots
//! `0..recv_slots` receive, the rest send. Every posted work request carries the
//! `ib_cqe` of its slot; whoever polls the CQ calls [`Completion`] with the
//! slot and, for a receive, the bytes that arrived. A slot is busy from posting
//! until its completion has been handled, so its buffer is never written by the
//! CPU and the device at once.
//!
//! Send slots are used in order, as a ring, and most sends are unsignaled: one
//! in every `send_slots / 4` asks for a completion (and any send made with
//! [`Qp::send_signaled`]). A send queue completes in order, so that completion
//! frees its slot and every slot before it. A failed or flushed send completes
//! whether signaled or not, and frees the same way. The ring's head is a
//! [`SendRing`] apart from the QP, which a send takes as `&mut`: sends are
//! posted in the order their slots were taken, and the QP itself is only
//! ever shared (`&Qp`), so its owner can lend it to a thread that moves it
//! to the error state or posts an RDMA while the ring stays under the
//! owner's lock.
//!
//! Besides its slots, a QP has *tags*, one per request that can be in flight,
//! each with `ib_cqe`s of its own ([`TagOp`]): registrations
//! ([`Qp::send_registered`]), invalidations ([`Qp::local_invalidate`]) and an
//! RDMA READ or WRITE through the kernel's rdma_rw API ([`Qp::rdma`]). Their
//! completions reach [`Completion::tag_done`].
//!
//! Dropping the [`Qp`] drains it (`ib_drain_qp`: every posted request completes,
//! flushed, and its handler has run), then destroys the QP, then the CQ, once
//! no thread polls it any more (late completions rxe can deliver are not
//! handled).
//! So the handler is never called after the drop, and never with a freed buffer.
//! Do not drop a `Qp` from its own completion handler: the drain would wait for
//! itself.

use core::{
    cell::UnsafeCell,
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    alloc::{KVVec, VVec},
    error::from_err_ptr,
    error::to_result,
    page::PAGE_SIZE,
    prelude::*,
    sync::{Arc, ArcBorrow, SetOnce},
};

use super::{
    cq::{Cq, PollCtx, Poller},
    device::Registered,
    mr::{DmaDir, Mr, Remote, SgList},
    Pd,
};
use crate::bindings;

/// Most registrations one send may carry.
pub const MAX_REGS: usize = 8;

/// QP states ferry moves a QP through (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpState {
    /// Initialized: receives may be posted.
    Init = bindings::ib_qp_state_IB_QPS_INIT,
    /// Ready to receive.
    Rtr = bindings::ib_qp_state_IB_QPS_RTR,
    /// Ready to send.
    Rts = bindings::ib_qp_state_IB_QPS_RTS,
    /// Error: every outstanding request completes flushed.
    Err = bindings::ib_qp_state_IB_QPS_ERR,
}

/// A work completion, as far as ferry reads it.
pub struct Wc {
    status: u32,
    vendor_err: u32,
    byte_len: u32,
    invalidated: Option<u32>,
}

impl Wc {
    /// Whether the request succeeded.
    pub fn ok(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    /// Whether the request was flushed because the QP had gone to the error
    /// state (an expected consequence of an earlier failure or a drain).
    pub fn flushed(&self) -> bool {
        self.status == bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR
    }

    /// The raw `enum ib_wc_status`.
    pub fn status(&self) -> u32 {
        self.status
    }

    /// The device's own error code, for the log.
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    /// ib_core's text for the status, such as "RNR retry counter exceeded".
    pub fn status_msg(&self) -> &'static CStr {
        // SAFETY: `ib_wc_status_msg` returns a static string for any value.
        unsafe { CStr::from_char_ptr(bindings::ib_wc_status_msg(self.status)) }
    }

    /// Bytes received (receives only).
    pub fn byte_len(&self) -> u32 {
        self.byte_len
    }

    /// The rkey the peer's send-with-invalidate invalidated (receives only).
    pub fn invalidated(&self) -> Option<u32> {
        self.invalidated
    }
}

/// The per-tag work a [`Qp`] tracks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TagOp {
    /// A registration (`REG_MR`); completes only on failure.
    Reg = 0,
    /// Invalidations (`LOCAL_INV`); the last one completes.
    Inv = 1,
    /// An RDMA READ or WRITE; see [`Qp::rdma`].
    Rdma = 2,
    /// A work request of an RDMA READ or WRITE other than its last (rdma_rw
    /// splits a transfer); completes only on failure, with the status the
    /// device gave. The transfer itself completes on [`TagOp::Rdma`], which
    /// is then flushed.
    RdmaStep = 3,
}

/// `ib_cqe`s per tag: one per [`TagOp`].
const TAG_OPS: u32 = 4;

/// Handles the completions of a [`Qp`]'s requests.
///
/// Called from `ib_comp_wq`, or in a thread that polls the CQ
/// ([`Qp::poller`]), never from two at once: process context, may take
/// mutexes, should not block for long; or, on a QP made with
/// [`PollCtx::Softirq`], in softirq, where nothing may sleep. Completions of
/// one queue arrive in posting order.
pub trait Completion: Send + Sync + 'static {
    /// Receive slot `slot` completed. `data` holds the bytes received (empty on
    /// failure). Return `true` to post the slot again at once.
    fn recv_done(this: ArcBorrow<'_, Self>, slot: u32, wc: &Wc, data: &[u8]) -> bool;

    /// Receive slot `slot` was posted again after [`Completion::recv_done`]
    /// asked for it: from now on the peer may fill it.
    fn recv_reposted(this: ArcBorrow<'_, Self>, slot: u32);

    /// The send in slot `slot` completed: a signaled one, or any that failed.
    /// Its slot and those of every earlier send are free again.
    fn send_done(this: ArcBorrow<'_, Self>, slot: u32, wc: &Wc);

    /// Work of tag `tag` completed. For [`TagOp::Rdma`], the transfer's
    /// rdma_rw context is gone and its list dropped before this runs: the
    /// tag may carry the next transfer at once.
    fn tag_done(_this: ArcBorrow<'_, Self>, _tag: u32, _op: TagOp, _wc: &Wc) {}

    /// Called with `true` before each completion's handler runs and with
    /// `false` after it returned, in the same thread: whoever calls back into
    /// the QP's owner from a handler can be told apart from other threads.
    fn handling(_this: ArcBorrow<'_, Self>, _on: bool) {}
}

/// Sizes of a [`Qp`].
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// Receive slots (buffers posted to the receive queue).
    pub recv_slots: u32,
    /// Send slots (sends that can be outstanding).
    pub send_slots: u32,
    /// Bytes per receive buffer: the largest message to receive.
    pub recv_buf_size: u32,
    /// Bytes per send buffer: the largest message to send.
    pub send_buf_size: u32,
    /// Completion vector of the QP's CQ.
    pub comp_vector: u32,
    /// Tags: requests that can be in flight, each with registrations,
    /// invalidations and RDMA of its own (0: none).
    pub tags: u32,
    /// The port the QP uses (for rdma_rw).
    pub port: u32,
    /// One allocation per message buffer even where the device could
    /// scatter a buffer over its pages (see [`Area`]).
    pub whole_buffers: bool,
    /// Only the first buffer of each direction is made now, the others by
    /// [`Qp::grow`]: a server's connection holds one buffer each way until
    /// its peer's hello is accepted.
    pub first_buffers_only: bool,
}

/// The most scatter entries a message buffer takes: the largest buffer a
/// channel asks for (a 64 KiB message and 16 KiB of inline data) in 4 KiB
/// pages.
pub const MAX_BUF_SGES: usize = 20;

/// The distance between two message buffers of `len` bytes in an [`Area`]
/// built of pages, which is what each one costs: a buffer of at most a page
/// takes a power of two, so it never crosses a page; a larger one whole
/// pages.
pub fn buf_stride(len: usize) -> usize {
    if len <= PAGE_SIZE {
        len.max(64).next_power_of_two()
    } else {
        len.div_ceil(PAGE_SIZE) * PAGE_SIZE
    }
}

/// How an [`Area`] holds its buffers.
enum Layout {
    /// One virtually contiguous (vmalloc) area of `count * stride` bytes at
    /// `base`, whose page `p` is mapped at `dma[p]`: no buffer needs more
    /// than order-0 pages, and one larger than a page is scattered over its
    /// pages.
    Paged {
        _mem: VVec<u8>,
        base: NonNull<u8>,
        dma: KVVec<u64>,
    },
    /// One allocation per buffer, each mapped whole (`(memory, its first
    /// byte, its mapping)`): for a device that cannot scatter a buffer over
    /// as many entries as it has pages.
    Whole {
        bufs: KVVec<(KVec<u8>, NonNull<u8>, u64)>,
    },
}

/// The message buffers of one direction: `count` buffers of `len` bytes.
/// Their pages come from one vmalloc area and are mapped one by one, when
/// the device takes a scatter entry per page ([`Area::sges_for`]);
/// otherwise each buffer is one allocation ([`Layout`]). The CPU sees each
/// buffer as one slice.
///
/// # Invariants
///
/// Every buffer is `len` bytes at [`Area::ptr`], which nothing reads or
/// writes but through those pointers (the device and the CPU write through
/// `&Area`); every page or buffer is mapped on `device` in direction `dir`
/// until drop (vmalloc hands out whole pages, so a page past the last
/// buffer's end belongs to the area).
struct Area {
    device: Registered,
    layout: Layout,
    stride: usize,
    len: usize,
    dir: bindings::dma_data_direction,
}

impl Area {
    /// The bytes of memory the area holds: whole pages of its vmalloc
    /// area, or its buffers' allocations as kmalloc rounds them (a power of
    /// two: its caches up to 8 KiB, whole pages of a power-of-two order
    /// beyond). Never walks the buffers.
    fn bytes(&self) -> usize {
        match &self.layout {
            Layout::Paged { dma, .. } => dma.len() * PAGE_SIZE,
            Layout::Whole { bufs } => bufs.len() * self.len.next_power_of_two(),
        }
    }

    /// The scatter entries a buffer of `len` bytes takes when the area is
    /// built of pages.
    fn sges_for(len: usize) -> usize {
        len.div_ceil(PAGE_SIZE).max(1)
    }

    /// `count` buffers of `len` bytes, built of pages if the device takes
    /// `max_sge` scatter entries per work request or more.
    fn new(
        device: &Registered,
        count: usize,
        len: usize,
        dir: bindings::dma_data_direction,
        max_sge: usize,
    ) -> Result<Self> {
        if Self::sges_for(len) > max_sge.min(MAX_BUF_SGES) {
            return Self::whole(device, count, len, dir);
        }
        let stride = buf_stride(len);
        let total = count.checked_mul(stride).ok_or(ENOMEM)?;
        let pages = total.div_ceil(PAGE_SIZE);
        let mut mem = VVec::from_elem(0u8, total, GFP_KERNEL)?;
        let base = NonNull::new(mem.as_mut_ptr()).ok_or(ENOMEM)?;
        let mut area = Self {
            device: device.clone(),
            layout: Layout::Paged {
                _mem: mem,
                base,
                dma: KVVec::with_capacity(pages, GFP_KERNEL)?,
            },
            stride,
            len,
            dir,
        };
        let Layout::Paged { dma: list, .. } = &mut area.layout else {
            return Err(EINVAL);
        };
        for p in 0..pages {
            // vmalloc memory is page aligned, so page `p` starts here.
            let addr = base.as_ptr().wrapping_add(p * PAGE_SIZE);
            // SAFETY: `addr` is a whole page of the vmalloc area `mem` (which
            // is allocated in whole pages), kept allocated and unmoved until
            // the mapping is undone in drop; `device` is registered.
            let dma = unsafe {
                bindings::ferry_helper_ib_dma_map_page(
                    device.as_raw(),
                    bindings::vmalloc_to_page(addr.cast()),
                    0,
                    PAGE_SIZE,
                    dir as c_int,
                )
            };
            // SAFETY: `dma` was just returned by a map on `device`.
            if unsafe { bindings::ferry_helper_ib_dma_mapping_error(device.as_raw(), dma) } != 0 {
                // Drop unmaps the pages mapped so far.
                return Err(ENOMEM);
            }
            // Never fails: room for every page was reserved.
            let _ = list.push_within_capacity(dma);
        }
        Ok(area)
    }

    /// `count` buffers of `len` bytes, one allocation each.
    fn whole(
        device: &Registered,
        count: usize,
        len: usize,
        dir: bindings::dma_data_direction,
    ) -> Result<Self> {
        let mut area = Self {
            device: device.clone(),
            layout: Layout::Whole {
                bufs: KVVec::with_capacity(count, GFP_KERNEL)?,
            },
            stride: len,
            len,
            dir,
        };
        let Layout::Whole { bufs } = &mut area.layout else {
            return Err(EINVAL);
        };
        for _ in 0..count {
            let mut mem = KVec::from_elem(0u8, len, GFP_KERNEL)?;
            let ptr = NonNull::new(mem.as_mut_ptr()).ok_or(ENOMEM)?;
            // SAFETY: `ptr` is `len` bytes of kmalloc memory, kept allocated
            // (and unmoved) until the mapping is undone in drop; `device` is
            // registered.
            let dma = unsafe {
                bindings::ferry_helper_ib_dma_map_single(
                    device.as_raw(),
                    ptr.as_ptr().cast(),
                    len,
                    dir as c_int,
                )
            };
            // SAFETY: `dma` was just returned by a map on `device`.
            if unsafe { bindings::ferry_helper_ib_dma_mapping_error(device.as_raw(), dma) } != 0 {
                return Err(ENOMEM);
            }
            // Never fails: room for every buffer was reserved.
            let _ = bufs.push_within_capacity((mem, ptr, dma));
        }
        Ok(area)
    }

    /// The scatter entries a whole buffer takes.
    fn sges(&self) -> usize {
        match self.layout {
            Layout::Paged { .. } => Self::sges_for(self.len),
            Layout::Whole { .. } => 1,
        }
    }

    /// Buffer `i`'s first byte.
    fn ptr(&self, i: usize) -> *mut u8 {
        match &self.layout {
            Layout::Paged { base, .. } => base.as_ptr().wrapping_add(i * self.stride),
            Layout::Whole { bufs } => bufs[i].1.as_ptr(),
        }
    }

    /// The pieces of buffer `i`'s first `n` bytes, one per page (or one):
    /// `f` gets each one's DMA address and length.
    fn pieces(&self, i: usize, n: usize, mut f: impl FnMut(u64, usize)) {
        let n = n.min(self.len);
        match &self.layout {
            Layout::Paged { dma, .. } => page_pieces(i * self.stride, n, |page, offset, len| {
                // CAST: a page offset fits in `u64`.
                f(dma[page] + offset as u64, len)
            }),
            Layout::Whole { bufs } if n > 0 => f(bufs[i].2, n),
            Layout::Whole { .. } => {}
        }
    }

    /// The scatter list of buffer `i`'s first `n` bytes, in `sges`; returns
    /// how many entries it took (at most [`Area::sges`]).
    fn sges_of(
        &self,
        i: usize,
        n: usize,
        lkey: u32,
        sges: &mut [bindings::ib_sge; MAX_BUF_SGES],
    ) -> usize {
        let mut k = 0;
        self.pieces(i, n, |addr, len| {
            if let Some(sge) = sges.get_mut(k) {
                // CAST: at most a buffer, whose size came from a `u32`.
                *sge = bindings::ib_sge {
                    addr,
                    length: len as u32,
                    lkey,
                };
                k += 1;
            }
        });
        k
    }

    /// Hands buffer `i`'s first `n` bytes to the CPU, after the device
    /// wrote them.
    fn sync_for_cpu(&self, i: usize, n: usize) {
        self.pieces(i, n, |addr, len| {
            // SAFETY: `addr` lies in a page or buffer mapped on `device` in
            // `dir`.
            unsafe {
                bindings::ferry_helper_ib_dma_sync_single_for_cpu(
                    self.device.as_raw(),
                    addr,
                    len,
                    self.dir as c_int,
                )
            }
        });
        if let Layout::Paged { .. } = self.layout {
            // CAST: at most a buffer, whose size came from a `u32`.
            let n = n.min(self.len) as c_int;
            // SAFETY: The bytes lie in the vmalloc area: its alias of the
            // pages the device wrote is made current (a no-op where caches are
            // physically indexed).
            unsafe { bindings::ferry_helper_invalidate_kernel_vmap_range(self.ptr(i).cast(), n) };
        }
    }

    /// Hands buffer `i`'s first `n` bytes to the device, after the CPU
    /// wrote them.
    fn sync_for_device(&self, i: usize, n: usize) {
        if let Layout::Paged { .. } = self.layout {
            // CAST: at most a buffer, whose size came from a `u32`.
            let n = n.min(self.len) as c_int;
            // SAFETY: The bytes lie in the vmalloc area: what the CPU wrote
            // through it reaches the pages (a no-op where caches are physically
            // indexed).
            unsafe { bindings::ferry_helper_flush_kernel_vmap_range(self.ptr(i).cast(), n) };
        }
        self.pieces(i, n, |addr, len| {
            // SAFETY: `addr` lies in a page or buffer mapped on `device` in
            // `dir`.
            unsafe {
                bindings::ferry_helper_ib_dma_sync_single_for_device(
                    self.device.as_raw(),
                    addr,
                    len,
                    self.dir as c_int,
                )
            }
        });
    }
}

/// The message buffers of one direction: buffer 0 in an [`Area`] of its
/// own, the others in a second one, made with it or later ([`Qp::grow`]).
struct Buffers {
    first: Area,
    rest: SetOnce<Area>,
    /// Buffers in all, and the scatter entries the device takes per work
    /// request (what the second area is made with).
    count: usize,
    max_sge: usize,
}

impl Buffers {
    /// `count` buffers of `len` bytes (see [`Area::new`]); only the first
    /// unless `all`.
    fn new(
        device: &Registered,
        count: usize,
        len: usize,
        dir: bindings::dma_data_direction,
        max_sge: usize,
        all: bool,
    ) -> Result<Self> {
        let b = Self {
            first: Area::new(device, 1, len, dir, max_sge)?,
            rest: SetOnce::new(),
            count,
            max_sge,
        };
        if all {
            b.publish(b.make_rest()?);
        }
        Ok(b)
    }

    /// The bytes of memory the buffers made so far hold.
    fn bytes(&self) -> usize {
        self.first.bytes() + self.rest.as_ref().map_or(0, Area::bytes)
    }

    /// The buffers after the first, if they are missing: the area to
    /// [`Buffers::publish`].
    fn make_rest(&self) -> Result<Option<Area>> {
        if self.count <= 1 || self.rest.as_ref().is_some() {
            return Ok(None);
        }
        let a = &self.first;
        Area::new(&a.device, self.count - 1, a.len, a.dir, self.max_sge).map(Some)
    }

    /// Makes `rest` (from [`Buffers::make_rest`]) the buffers after the
    /// first.
    fn publish(&self, rest: Option<Area>) {
        if let Some(r) = rest {
            self.rest.populate(r);
        }
    }

    /// Buffer `i`'s area and its index there; `None` for one not made yet.
    fn get(&self, i: usize) -> Option<(&Area, usize)> {
        match i.checked_sub(1) {
            None => Some((&self.first, 0)),
            Some(j) => self.rest.as_ref().map(|a| (a, j)),
        }
    }

    /// The scatter entries a whole buffer takes.
    fn sges(&self) -> usize {
        self.first.sges()
    }
}

/// Splits the `n` bytes from byte `at` of an area at its page boundaries:
/// `f` gets each piece's page, offset in the page and length.
fn page_pieces(mut at: usize, n: usize, mut f: impl FnMut(usize, usize, usize)) {
    let end = at + n;
    while at < end {
        let offset = at % PAGE_SIZE;
        let len = (PAGE_SIZE - offset).min(end - at);
        f(at / PAGE_SIZE, offset, len);
        at += len;
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // No request uses the area any more: its QP, if any, was drained and
        // destroyed first.
        match &self.layout {
            Layout::Paged { dma, .. } => {
                for &addr in dma.iter() {
                    // SAFETY: Each page was mapped on `device` in `dir` (type
                    // invariant).
                    unsafe {
                        bindings::ferry_helper_ib_dma_unmap_page(
                            self.device.as_raw(),
                            addr,
                            PAGE_SIZE,
                            self.dir as c_int,
                        )
                    };
                }
            }
            Layout::Whole { bufs } => {
                for (_, _, addr) in bufs.iter() {
                    // SAFETY: Each buffer was mapped whole on `device` in `dir`
                    // (type invariant).
                    unsafe {
                        bindings::ferry_helper_ib_dma_unmap_single(
                            self.device.as_raw(),
                            *addr,
                            self.len,
                            self.dir as c_int,
                        )
                    };
                }
            }
        }
    }
}

/// The `ib_cqe` of one slot or tag and the way back to its QP.
#[repr(C)]
struct Cqe<H: Completion> {
    cqe: UnsafeCell<bindings::ib_cqe>,
    owner: *const Inner<H>,
    slot: u32,
    /// `None` for a slot.
    op: Option<TagOp>,
}

/// The rdma_rw context of a tag and the list it mapped.
struct Rw {
    ctx: bindings::rdma_rw_ctx,
    sg: Option<SgList>,
    dir: DmaDir,
}

/// What a [`Qp`] owns, at a fixed address that the slots point to.
///
/// # Invariants
///
/// `qp` is a live RC QP on `pd`'s device whose queues complete on `cq`;
/// `cqes[i].owner` points to this object; `busy[i]` is set while receive slot
/// `i` is posted or its completion is being handled; a send slot is posted from
/// when the ring hands it out until its sequence number falls behind `tail`.
struct Inner<H: Completion> {
    qp: NonNull<bindings::ib_qp>,
    handler: Arc<H>,
    cqes: KVVec<Cqe<H>>,
    /// The receive slots' buffers, then the send slots'.
    rx: Buffers,
    tx: Buffers,
    /// One per receive slot (send slots follow the ring).
    busy: KVec<AtomicBool>,
    recv_slots: u32,
    /// The first send not completed, numbered as in [`Ring`]: the slots of the
    /// sends before it are free. Only the completion work stores it.
    tail: AtomicU32,
    /// `TAG_OPS` per tag.
    tag_cqes: KVVec<Cqe<H>>,
    /// The rdma_rw context of each tag; `rw_busy[t]` says whether tag `t`'s
    /// holds a mapping, and who may touch it (its owner, exclusively).
    rw: KVVec<UnsafeCell<Rw>>,
    rw_busy: KVec<AtomicBool>,
    port: u32,
    /// Whether the QP ever left RESET (a QP in RESET has nothing to drain).
    initialized: AtomicBool,
    cq: Option<Cq>,
    pd: Arc<Pd>,
    /// Unique among QPs (see [`SendRing`]).
    id: u64,
    /// Test builds: the next chain of several requests is posted as a
    /// driver that refuses its last request would ([`Qp::cut_next_chain`]).
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    cut: AtomicBool,
}

/// A reliable-connected QP with its CQ and buffers; see the module docs.
pub struct Qp<H: Completion> {
    inner: KBox<Inner<H>>,
}

/// The head of a [`Qp`]'s send ring: the sends of a QP go through the one
/// [`Qp::new`] made with it.
pub struct SendRing {
    ring: Ring,
    /// The id of the QP it belongs to.
    owner: u64,
}

/// The next QP's id: ids are never reused, so a ring can never pass for
/// another QP's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The order of a QP's send slots, and which sends are signaled.
///
/// Sends are numbered modulo `2 * sends`, so that a full ring and an empty one
/// differ; send `n` uses slot index `n % sends`. The poster owns `head`, the
/// completion work the tail (in [`Inner`]).
#[derive(Debug)]
struct Ring {
    /// The number of the next send.
    head: u32,
    /// Send slots.
    sends: u32,
    /// Unsignaled sends since the last signaled one.
    unsignaled: u32,
    /// Every this many sends, one is signaled.
    every: u32,
}

impl Ring {
    fn new(sends: u32) -> Self {
        Self {
            head: 0,
            sends,
            unsignaled: 0,
            // At most a quarter of the ring waits for a later completion, and
            // a full ring always holds a signaled send.
            every: (sends / 4).max(1),
        }
    }

    /// The next send's slot index, and whether it must be signaled (always if
    /// `force`), when the sends before `tail` have completed; `None` while
    /// every slot is busy.
    fn next(&self, tail: u32, force: bool) -> Option<(u32, bool)> {
        let busy = (self.head + 2 * self.sends - tail) % (2 * self.sends);
        (busy < self.sends).then(|| {
            (
                self.head % self.sends,
                force || self.unsignaled + 1 >= self.every,
            )
        })
    }

    /// Records that the send [`Ring::next`] gave was posted.
    fn posted(&mut self, signaled: bool) {
        self.head = (self.head + 1) % (2 * self.sends);
        self.unsignaled = if signaled { 0 } else { self.unsignaled + 1 };
    }

    /// The tail once the send in slot index `index` has completed, with the
    /// tail before it `tail`: sends complete in order, so it was the first
    /// from `tail` on to use that slot.
    fn completed(sends: u32, tail: u32, index: u32) -> u32 {
        let ahead = (index + sends - tail % sends) % sends;
        (tail + ahead + 1) % (2 * sends)
    }
}

// SAFETY: The QP is used through `ib_post_*` calls, which drivers serialize
// internally, and per-slot state guarded by the atomic busy flags and the send
// ring (whose head only the QP's one `&mut SendRing` moves, and whose tail is
// atomic).
unsafe impl<H: Completion> Send for Qp<H> {}
// SAFETY: As for `Send`.
unsafe impl<H: Completion> Sync for Qp<H> {}

impl<H: Completion> Qp<H> {
    /// Creates the QP (in RESET) on `pd`'s device, its CQ sized for every
    /// request that can be outstanding (plus the drain's), polled as `ctx`
    /// says, and its buffers; attributed to `owner` in `rdma res show`; and
    /// the head of its send ring, which every send takes. Fails with `EINVAL`
    /// if the device cannot hold that many requests. May sleep.
    pub fn new(
        pd: &Arc<Pd>,
        cfg: QpConfig,
        handler: Arc<H>,
        owner: &'static CStr,
        ctx: PollCtx,
    ) -> Result<(Self, SendRing)> {
        let device = pd.device();
        let caps = device.caps();
        // One more on each queue for ib_drain_qp's marker requests; per tag,
        // its registrations and invalidations; then what rdma_rw adds for one
        // context per tag, each of which may need a WR per `max_send_sge`
        // pages of a 2 MiB transfer. rdma_rw puts up to the QP's
        // `max_send_sge` pages in each READ or WRITE: the QP asks for the
        // device's most, as this budget assumes (with one, a 2 MiB transfer
        // would take 512 work requests).
        let send_sge = caps.max_send_sge.max(1);
        let rdma_ctxs = cfg.tags * 512u32.div_ceil(send_sge);
        let rw_wrs = if cfg.tags == 0 {
            0
        } else {
            // SAFETY: `device` is registered; the port is the caller's.
            unsafe { bindings::rdma_rw_max_send_wr(device.as_raw(), cfg.port, rdma_ctxs, 0) }
        };
        // CAST: `MAX_REGS` is 8.
        let tag_wrs = cfg.tags.saturating_mul(2 * MAX_REGS as u32);
        let rq = cfg.recv_slots + 1;
        let sq = (cfg.send_slots + 1)
            .saturating_add(tag_wrs)
            .saturating_add(rw_wrs);
        if cfg.recv_slots == 0
            || cfg.send_slots == 0
            || cfg.recv_buf_size == 0
            || cfg.send_buf_size == 0
            || rq > caps.max_qp_wr
            || sq > caps.max_qp_wr
            || rq.saturating_add(sq) > caps.max_cqe
        {
            return Err(EINVAL);
        }
        let cq = Cq::new(device, rq + sq, cfg.comp_vector, ctx, owner)?;
        let total = (cfg.recv_slots + cfg.send_slots) as usize;
        let all = !cfg.first_buffers_only;
        let rx = Buffers::new(
            device,
            cfg.recv_slots as usize,
            cfg.recv_buf_size as usize,
            bindings::dma_data_direction_DMA_FROM_DEVICE,
            if cfg.whole_buffers {
                0
            } else {
                caps.max_recv_sge as usize
            },
            all,
        )?;
        let tx = Buffers::new(
            device,
            cfg.send_slots as usize,
            cfg.send_buf_size as usize,
            bindings::dma_data_direction_DMA_TO_DEVICE,
            if cfg.whole_buffers {
                0
            } else {
                send_sge as usize
            },
            all,
        )?;
        let mut busy = KVec::with_capacity(cfg.recv_slots as usize, GFP_KERNEL)?;
        for _ in 0..cfg.recv_slots {
            busy.push(AtomicBool::new(false), GFP_KERNEL)?;
        }
        let mut init = bindings::ib_qp_init_attr {
            send_cq: cq.as_raw(),
            recv_cq: cq.as_raw(),
            cap: bindings::ib_qp_cap {
                // rdma_rw adds its own share (`rw_wrs`) on creation.
                max_send_wr: sq - rw_wrs,
                max_recv_wr: rq,
                max_send_sge: send_sge,
                // CAST: at most `MAX_BUF_SGES`.
                max_recv_sge: rx.sges() as u32,
                max_rdma_ctxs: if cfg.tags == 0 { 0 } else { rdma_ctxs },
                ..Default::default()
            },
            // Registrations and all but the last invalidation are unsignaled.
            sq_sig_type: bindings::ib_sig_type_IB_SIGNAL_REQ_WR,
            event_handler: Some(qp_event),
            qp_type: bindings::ib_qp_type_IB_QPT_RC,
            port_num: cfg.port,
            ..Default::default()
        };
        // SAFETY: `pd` is a live PD on a registered device; `init` names a live
        // CQ of that device for both queues; `owner` is static.
        let qp = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(pd.as_raw(), &mut init, owner.as_char_ptr())
        });
        let qp = NonNull::new(qp?).ok_or(ENOMEM)?;
        // If the box cannot be allocated, dropping the `Inner` undoes all of it.
        let mut inner = KBox::new(
            Inner {
                qp,
                handler,
                cqes: KVVec::new(),
                rx,
                tx,
                busy,
                recv_slots: cfg.recv_slots,
                tail: AtomicU32::new(0),
                tag_cqes: KVVec::new(),
                rw: KVVec::new(),
                rw_busy: KVec::new(),
                port: cfg.port,
                initialized: AtomicBool::new(false),
                cq: Some(cq),
                pd: pd.clone(),
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                #[cfg(CONFIG_FERRY_KUNIT_TEST)]
                cut: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        let owner_ptr: *const Inner<H> = &*inner;
        // Large for deep queues: from vmalloc if need be (no high-order
        // allocation).
        let mut cqes = KVVec::with_capacity(total, GFP_KERNEL)?;
        for slot in 0..total {
            cqes.push(
                Cqe {
                    cqe: UnsafeCell::new(bindings::ib_cqe {
                        done: Some(done::<H>),
                    }),
                    owner: owner_ptr,
                    // CAST: `total` is the sum of two `u32`s checked above.
                    slot: slot as u32,
                    op: None,
                },
                GFP_KERNEL,
            )?;
        }
        let mut tag_cqes = KVVec::with_capacity((cfg.tags * TAG_OPS) as usize, GFP_KERNEL)?;
        let mut rw = KVVec::with_capacity(cfg.tags as usize, GFP_KERNEL)?;
        let mut rw_busy = KVec::with_capacity(cfg.tags as usize, GFP_KERNEL)?;
        for tag in 0..cfg.tags {
            for op in [TagOp::Reg, TagOp::Inv, TagOp::Rdma, TagOp::RdmaStep] {
                tag_cqes.push(
                    Cqe {
                        cqe: UnsafeCell::new(bindings::ib_cqe {
                            done: Some(done::<H>),
                        }),
                        owner: owner_ptr,
                        slot: tag,
                        op: Some(op),
                    },
                    GFP_KERNEL,
                )?;
            }
            rw.push(
                UnsafeCell::new(Rw {
                    ctx: Default::default(),
                    sg: None,
                    dir: DmaDir::ToDevice,
                }),
                GFP_KERNEL,
            )?;
            rw_busy.push(AtomicBool::new(false), GFP_KERNEL)?;
        }
        // INVARIANT: the slots and tags point to `inner`, which a box keeps in
        // place.
        inner.cqes = cqes;
        inner.tag_cqes = tag_cqes;
        inner.rw = rw;
        inner.rw_busy = rw_busy;
        let ring = SendRing {
            ring: Ring::new(cfg.send_slots),
            owner: inner.id,
        };
        Ok((Self { inner }, ring))
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: `qp` is live (type invariant); `qp_num` is fixed at creation.
        unsafe { (*self.inner.qp.as_ptr()).qp_num }
    }

    /// The bytes of memory the QP's message buffers hold, receive and send
    /// (the driver's own queues not counted).
    pub fn buffer_bytes(&self) -> u64 {
        // CAST: `usize` fits in `u64`.
        (self.inner.rx.bytes() + self.inner.tx.bytes()) as u64
    }

    /// The completion vector of the QP's CQ.
    pub fn comp_vector(&self) -> u32 {
        self.inner.cq.as_ref().map_or(0, Cq::comp_vector)
    }

    /// The QP's CQ.
    pub fn cq(&self) -> Option<&Cq> {
        self.inner.cq.as_ref()
    }

    /// What polls the QP's CQ in a caller's thread, if its users poll it
    /// ([`PollCtx::Direct`]); see [`Poller::poll`]. Once the QP is gone,
    /// polling it does nothing.
    pub fn poller(&self) -> Option<Arc<Poller>> {
        self.inner.cq.as_ref().and_then(Cq::poller).cloned()
    }

    /// The number of receive slots.
    pub fn recv_slots(&self) -> u32 {
        self.inner.recv_slots
    }

    /// Makes the message buffers that a QP built with
    /// [`QpConfig::first_buffers_only`] went without, both ways; returns
    /// whether it made them (`false`: they were there). Posting the receive
    /// slots after the first is the caller's. Until then a receive slot or
    /// send after the first fails with `ENOBUFS`. One caller at a time (a
    /// channel grows from its own completion handler). Sleeps.
    pub fn grow(&self) -> Result<bool> {
        let inner = &*self.inner;
        // Both made before either is published: a failure leaves neither.
        let rx = inner.rx.make_rest()?;
        let tx = inner.tx.make_rest()?;
        let made = rx.is_some();
        inner.rx.publish(rx);
        inner.tx.publish(tx);
        Ok(made)
    }

    /// Applies `attr` under `mask` (`ib_modify_qp`).
    pub(crate) fn modify(&self, attr: &mut bindings::ib_qp_attr, mask: c_int) -> Result {
        // SAFETY: `qp` is live (type invariant); `attr` is valid for the call.
        to_result(unsafe { bindings::ib_modify_qp(self.inner.qp.as_ptr(), attr, mask) })?;
        self.inner.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Test builds: the next chain of several work requests the QP posts
    /// (a request's registrations and its send, or an RDMA transfer) goes as
    /// a driver that takes all but its last request and refuses that one
    /// would leave it ([`Posted::Part`]), so the tests can watch the QP's
    /// owner cope.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub fn cut_next_chain(&self) {
        self.inner.cut.store(true, Ordering::Relaxed);
    }

    /// Moves the QP to the error state: every posted request completes flushed.
    pub fn set_error(&self) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: QpState::Err as u32,
            ..Default::default()
        };
        self.modify(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE as c_int)
    }

    /// Posts receive slot `slot` (the QP must be in INIT or later). Fails with
    /// `EBUSY` if it is posted already, `EINVAL` if it is not a receive slot.
    pub fn post_recv(&self, slot: u32) -> Result {
        if slot >= self.inner.recv_slots {
            return Err(EINVAL);
        }
        self.inner.claim(slot)?;
        self.inner.post_recv_claimed(slot)
    }

    /// Fills the next send slot with `fill` (which gets the whole buffer and
    /// returns how many bytes to send) and posts it as a SEND, signaled only
    /// now and then (see the module docs). Returns the slot; fails with
    /// `EAGAIN` if every send slot is busy, `EINVAL` if `ring` is not this
    /// QP's. Allocates nothing and never sleeps.
    pub fn send(
        &self,
        ring: &mut SendRing,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<u32> {
        self.post_send(ring, fill, SendKind::Plain, false)
            .map(|(slot, _)| slot)
    }

    /// As [`Qp::send`], always signaled: [`Completion::send_done`] hears of
    /// this very send.
    pub fn send_signaled(
        &self,
        ring: &mut SendRing,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<u32> {
        self.post_send(ring, fill, SendKind::Plain, true)
            .map(|(slot, _)| slot)
    }

    /// As [`Qp::send`], as a SEND_WITH_INV that invalidates the peer's `rkey`
    /// when it arrives.
    pub fn send_with_invalidate(
        &self,
        ring: &mut SendRing,
        rkey: u32,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<u32> {
        self.post_send(ring, fill, SendKind::Invalidate(rkey), false)
            .map(|(slot, _)| slot)
    }

    /// As [`Qp::send`], after registering each region of `mrs` (unsignaled
    /// `REG_MR` requests of tag `tag`, chained before the SEND, so the peer
    /// has the keys before it reads the message; `None` entries are
    /// skipped): for remote writes if `write`, else for remote reads. A
    /// failed registration completes on [`TagOp::Reg`].
    pub fn send_registered(
        &self,
        ring: &mut SendRing,
        tag: u32,
        mrs: &[Option<Mr>],
        write: bool,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> Result<Posted> {
        if mrs.len() > MAX_REGS || tag >= self.tags() {
            return Err(EINVAL);
        }
        self.post_send(ring, fill, SendKind::Registered(tag, mrs, write), false)
            .map(|(_, posted)| posted)
    }

    fn post_send(
        &self,
        ring: &mut SendRing,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
        kind: SendKind<'_>,
        signaled: bool,
    ) -> Result<(u32, Posted)> {
        let inner = &*self.inner;
        if ring.owner != inner.id {
            return Err(EINVAL);
        }
        let (index, signaled) = ring
            .ring
            .next(inner.tail.load(Ordering::Acquire), signaled)
            .ok_or(EAGAIN)?;
        let slot = inner.recv_slots + index;
        let posted = inner.fill_and_send(slot, fill, kind, signaled)?;
        // The send is a chain's last request: on `Part` it was not posted,
        // and its slot stays free.
        if posted == Posted::All {
            ring.ring.posted(signaled);
        }
        Ok((slot, posted))
    }

    /// Posts a signaled zero-length RDMA WRITE in the next send slot: it
    /// needs no key (InfiniBand C9-88) and no receive buffer of the peer's,
    /// so it goes when no message may, and its completion (on
    /// [`Completion::send_done`]) says the peer's adapter acknowledged it.
    /// Fails with `EAGAIN` if every send slot is busy. Allocates nothing and
    /// never sleeps.
    pub fn probe(&self, ring: &mut SendRing) -> Result<u32> {
        self.post_send(ring, |_| Ok(0), SendKind::Probe, true)
            .map(|(slot, _)| slot)
    }

    /// The number of tags.
    pub fn tags(&self) -> u32 {
        // CAST: built from a `u32` count.
        (self.inner.tag_cqes.len() as u32) / TAG_OPS
    }

    /// Invalidates `rkeys` (local registrations of tag `tag`): chained
    /// `LOCAL_INV` requests, the last one signaled, completing on
    /// [`TagOp::Inv`] once all have.
    pub fn local_invalidate(&self, tag: u32, rkeys: &[u32]) -> Result {
        if rkeys.is_empty() || rkeys.len() > MAX_REGS || tag >= self.tags() {
            return Err(EINVAL);
        }
        let inner = &*self.inner;
        let cqe = inner.tag_cqe(tag, TagOp::Inv);
        let mut wrs: [bindings::ib_send_wr; MAX_REGS] = Default::default();
        let n = rkeys.len();
        for (i, &rkey) in rkeys.iter().enumerate() {
            let wr = &mut wrs[i];
            wr.opcode = bindings::ib_wr_opcode_IB_WR_LOCAL_INV;
            wr.ex.invalidate_rkey = rkey;
            wr.__bindgen_anon_1.wr_cqe = cqe;
        }
        wrs[n - 1].send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED as c_int;
        for i in 0..n - 1 {
            let next: *mut bindings::ib_send_wr = &mut wrs[i + 1];
            wrs[i].next = next;
        }
        // SAFETY: The chain is valid for the call (the driver copies it); the
        // tag's cqe lives as long as the QP.
        match unsafe { inner.post_chain(&mut wrs[0]) }? {
            Posted::All => Ok(()),
            // The caller fails the channel on any error.
            Posted::Part => Err(EIO),
        }
    }

    /// Moves data between the local list `sg` and the peer's region `remote`
    /// with rdma_rw: `DmaDir::FromDevice` reads the peer's memory into `sg`
    /// (RDMA READ), `DmaDir::ToDevice` writes `sg` into the peer's (RDMA
    /// WRITE); `sg` must hold exactly `remote.len` bytes. Completes on
    /// [`TagOp::Rdma`] of `tag`, when the QP has destroyed the context and
    /// dropped the list (or at the QP's teardown, after its drain).
    /// On failure the list comes back with the error: `EBUSY` if the tag has
    /// a transfer already, `EINVAL` for a length mismatch. A chain the driver
    /// took only in part gives [`Posted::Part`]: the list stays with the
    /// context until the drain, and the caller fails the QP's owner.
    pub fn rdma(
        &self,
        tag: u32,
        sg: SgList,
        remote: Remote,
        dir: DmaDir,
    ) -> Result<Posted, (Error, SgList)> {
        let inner = &*self.inner;
        if sg.len() != u64::from(remote.len) {
            return Err((EINVAL, sg));
        }
        let Some(busy) = inner.rw_busy.get(tag as usize) else {
            return Err((EINVAL, sg));
        };
        if busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err((EBUSY, sg));
        }
        let rw = inner.rw[tag as usize].get();
        let qp = inner.qp.as_ptr();
        let (raw_sg, nents) = (sg.as_raw(), sg.nents());
        // SAFETY: The tag's context is ours while `busy` is set; `qp` is live;
        // the list is valid while we hold it (type invariant of `SgList`), and
        // the context keeps it until `rw_destroy`.
        let ret = unsafe {
            bindings::rdma_rw_ctx_init(
                &mut (*rw).ctx,
                qp,
                inner.port,
                raw_sg,
                nents,
                0,
                remote.addr,
                remote.rkey,
                dir.as_raw(),
            )
        };
        if ret < 0 {
            busy.store(false, Ordering::Release);
            return Err((Error::from_errno(ret), sg));
        }
        // SAFETY: As above.
        unsafe {
            (*rw).sg = Some(sg);
            (*rw).dir = dir;
        }
        let cqe = inner.tag_cqe(tag, TagOp::Rdma);
        let step = inner.tag_cqe(tag, TagOp::RdmaStep);
        // SAFETY: The context is initialized on this QP and port; the tag's
        // cqes live as long as the QP. rdma_rw gives its chain's last request
        // `cqe` and leaves the others without one, so the device's status for
        // a failed one would be dropped: they get `step`. The chain lives in
        // the context, which stays until `rw_destroy`; the driver copies it.
        let ret = unsafe {
            let first = bindings::rdma_rw_ctx_wrs(
                &mut (*rw).ctx,
                qp,
                inner.port,
                cqe,
                core::ptr::null_mut(),
            );
            let mut wr = first;
            while !wr.is_null() {
                if (*wr).__bindgen_anon_1.wr_cqe.is_null() {
                    (*wr).__bindgen_anon_1.wr_cqe = step;
                }
                wr = (*wr).next;
            }
            inner.post_chain(first)
        };
        match ret {
            // On `Part` the context stays until the drain: the prefix may be
            // at work.
            Ok(posted) => Ok(posted),
            Err(e) => match inner.rw_destroy(tag) {
                Some(sg) => Err((e, sg)),
                None => Ok(Posted::All),
            },
        }
    }
}

/// How much of a chain of work requests the driver took, when
/// [`Qp::send_registered`] or [`Qp::rdma`] did not fail (they fail when it
/// took none).
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Posted {
    /// All of it.
    All,
    /// A prefix: the driver refused the rest. What the chain holds (its
    /// regions, its list) may be at work until the QP's drain, and its last
    /// request, whose completion would have said when it is over, never
    /// completes. The caller treats the chain as posted and fails the QP's
    /// owner: [`Qp::set_error`] flushes the prefix (it may sleep, so not
    /// from atomic context), and the teardown's drain ends the rest.
    Part,
}

/// What [`Inner::fill_and_send`] posts.
enum SendKind<'a> {
    /// A SEND.
    Plain,
    /// A SEND_WITH_INV of the peer's rkey.
    Invalidate(u32),
    /// Registrations of a tag (for remote writes if `.2`), then a SEND.
    Registered(u32, &'a [Option<Mr>], bool),
    /// A zero-length RDMA WRITE: nothing moves, no receive buffer of the
    /// peer's is used, and its completion says the peer's adapter answered.
    Probe,
}

impl<H: Completion> Inner<H> {
    /// The number of send slots.
    fn sends(&self) -> u32 {
        // CAST: the slots number the sum of two `u32`s.
        self.cqes.len() as u32 - self.recv_slots
    }

    fn claim(&self, slot: u32) -> Result {
        let busy = self.busy.get(slot as usize).ok_or(EINVAL)?;
        busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ())
            .map_err(|_| EBUSY)
    }

    fn release(&self, slot: u32) {
        if let Some(b) = self.busy.get(slot as usize) {
            b.store(false, Ordering::Release);
        }
    }

    /// Slot `slot`'s area and its index there; `ENOBUFS` for a buffer not
    /// made yet (see [`Qp::grow`]).
    fn buf(&self, slot: u32) -> Result<(&Area, usize)> {
        match slot.checked_sub(self.recv_slots) {
            None => self.rx.get(slot as usize),
            Some(i) => self.tx.get(i as usize),
        }
        .ok_or(ENOBUFS)
    }

    fn cqe(&self, slot: u32) -> *mut bindings::ib_cqe {
        self.cqes[slot as usize].cqe.get()
    }

    fn tag_cqe(&self, tag: u32, op: TagOp) -> *mut bindings::ib_cqe {
        self.tag_cqes[(tag * TAG_OPS + op as u32) as usize]
            .cqe
            .get()
    }

    /// Posts the chain of send requests that `first` heads, and says how
    /// much of it the driver took: all of it, or (on failure) none of it, or
    /// a prefix ([`Posted::Part`]). A driver that fails a chain of several
    /// without naming the first request it refused counts as having taken
    /// a prefix. Never
    /// sleeps: the QP's owner fails it (see [`Posted::Part`]).
    ///
    /// # Safety
    ///
    /// `first` heads a chain of send requests valid for `ib_post_send` on
    /// this QP, whose `ib_cqe`s live as long as the QP, and which the
    /// caller lets this function change for the call (test builds cut it).
    unsafe fn post_chain(&self, first: *mut bindings::ib_send_wr) -> Result<Posted> {
        #[cfg(CONFIG_FERRY_KUNIT_TEST)]
        if self.cut.swap(false, Ordering::Relaxed) {
            // SAFETY: As below; the chain is the caller's to change for the
            // call, and gets its last link back.
            if let Some(posted) = unsafe { self.post_cut(first) } {
                return posted;
            }
        }
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: `qp` is live (type invariant); the chain is the caller's
        // promise; `bad` is valid for the call.
        let ret = unsafe { bindings::ferry_helper_ib_post_send(self.qp.as_ptr(), first, &mut bad) };
        if ret >= 0 {
            return Ok(Posted::All);
        }
        let e = Error::from_errno(ret);
        // SAFETY: `first` is valid (the caller's promise).
        if core::ptr::eq(bad, first) || unsafe { (*first).next.is_null() } {
            return Err(e);
        }
        self.warn_part(e);
        Ok(Posted::Part)
    }

    fn warn_part(&self, e: Error) {
        // SAFETY: `qp` is live (type invariant); `qp_num` is fixed at creation.
        let num = unsafe { (*self.qp.as_ptr()).qp_num };
        crate::ratelimit::pr_warn_limited!(
            "{} QP {}: a chain of send requests was posted only in part ({:?})\n",
            self.pd.device().name().as_cstr(),
            num,
            e
        );
    }

    /// Test builds ([`Qp::cut_next_chain`]): posts all of the chain but its
    /// last request, and says so as a driver would have; `None` (nothing
    /// posted) for a chain of one.
    ///
    /// # Safety
    ///
    /// As [`Inner::post_chain`].
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    unsafe fn post_cut(&self, first: *mut bindings::ib_send_wr) -> Option<Result<Posted>> {
        // SAFETY: The chain is valid, and the caller's to change for the
        // call: its next-to-last request loses its link to the last one for
        // the post, and gets it back.
        unsafe {
            let mut prev = first;
            if (*prev).next.is_null() {
                return None;
            }
            while !(*(*prev).next).next.is_null() {
                prev = (*prev).next;
            }
            let last = (*prev).next;
            (*prev).next = core::ptr::null_mut();
            let ret =
                bindings::ferry_helper_ib_post_send(self.qp.as_ptr(), first, core::ptr::null_mut());
            (*prev).next = last;
            Some(to_result(ret).map(|()| {
                self.warn_part(EINVAL);
                Posted::Part
            }))
        }
    }

    /// Destroys tag `tag`'s rdma_rw context, if it has one, and gives its
    /// list back. Called only when none of the context's work requests can
    /// still be at work: right after posting them failed with none taken,
    /// on the completion of the chain's last one (which completes after the
    /// others, flushed or not), and after the QP's drain (which is also how
    /// a chain posted only in part ends: see [`Posted::Part`]).
    fn rw_destroy(&self, tag: u32) -> Option<SgList> {
        let busy = self.rw_busy.get(tag as usize)?;
        if !busy.load(Ordering::Acquire) {
            return None;
        }
        let rw = self.rw[tag as usize].get();
        // SAFETY: `busy` is set, so the context was initialized on this QP by
        // `Qp::rdma` with the list it holds, and its work has completed (the
        // callers, listed above; none is a public function).
        let sg = unsafe {
            let sg = (*rw).sg.take();
            if let Some(l) = sg.as_ref() {
                bindings::rdma_rw_ctx_destroy(
                    &mut (*rw).ctx,
                    self.qp.as_ptr(),
                    self.port,
                    l.as_raw(),
                    l.nents(),
                    (*rw).dir.as_raw(),
                );
            }
            sg
        };
        busy.store(false, Ordering::Release);
        sg
    }

    /// Posts receive slot `slot`, which the caller has claimed.
    fn post_recv_claimed(&self, slot: u32) -> Result {
        let (area, i) = match self.buf(slot) {
            Ok(b) => b,
            Err(e) => {
                self.release(slot);
                return Err(e);
            }
        };
        let mut sges = [bindings::ib_sge::default(); MAX_BUF_SGES];
        // CAST: at most `MAX_BUF_SGES`.
        let num_sge = area.sges_of(i, area.len, self.pd.local_dma_lkey(), &mut sges) as c_int;
        let mut wr = bindings::ib_recv_wr {
            sg_list: sges.as_mut_ptr(),
            num_sge,
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = self.cqe(slot);
        // SAFETY: `qp` is live (type invariant); the WR and its scatter list are
        // valid for the call (the driver copies them); the buffer stays mapped and the slot's
        // cqe in place until the request completes, which the drain in drop
        // waits for.
        let ret = to_result(unsafe { bindings::ferry_helper_ib_post_recv(self.qp.as_ptr(), &wr) });
        if ret.is_err() {
            self.release(slot);
        }
        ret
    }

    /// Posts send slot `slot`, which the caller owns: it is the ring's next,
    /// and free.
    fn fill_and_send(
        &self,
        slot: u32,
        fill: impl FnOnce(&mut [u8]) -> Result<usize>,
        kind: SendKind<'_>,
        signaled: bool,
    ) -> Result<Posted> {
        if let SendKind::Probe = kind {
            let mut wr = bindings::ib_rdma_wr {
                wr: bindings::ib_send_wr {
                    opcode: bindings::ib_wr_opcode_IB_WR_RDMA_WRITE,
                    send_flags: bindings::ib_send_flags_IB_SEND_SIGNALED as c_int,
                    ..Default::default()
                },
                // No bytes: no address or key (C9-88).
                remote_addr: 0,
                rkey: 0,
            };
            wr.wr.__bindgen_anon_1.wr_cqe = self.cqe(slot);
            // SAFETY: As in `post_recv_claimed`; the request (no scatter
            // entries, the slot's cqe, which lives as long as the QP) is
            // valid for the call, and is the `ib_rdma_wr` its opcode says.
            return to_result(unsafe {
                bindings::ferry_helper_ib_post_send(self.qp.as_ptr(), &wr.wr, core::ptr::null_mut())
            })
            .map(|()| Posted::All);
        }
        let (area, i) = self.buf(slot)?;
        // SAFETY: The slot's last send has completed (it is behind `tail`) and
        // the caller holds the QP's one `&mut SendRing`, so neither the device
        // nor another thread reads or writes its buffer; the buffer is
        // `area.len` valid bytes (`Area`'s invariant).
        let bytes = unsafe { core::slice::from_raw_parts_mut(area.ptr(i), area.len) };
        let len = fill(bytes)?;
        if len > area.len {
            return Err(EMSGSIZE);
        }
        area.sync_for_device(i, len);
        let mut sges = [bindings::ib_sge::default(); MAX_BUF_SGES];
        // CAST: at most `MAX_BUF_SGES`.
        let num_sge = area.sges_of(i, len, self.pd.local_dma_lkey(), &mut sges) as c_int;
        let mut wr = bindings::ib_send_wr {
            sg_list: sges.as_mut_ptr(),
            num_sge,
            opcode: bindings::ib_wr_opcode_IB_WR_SEND,
            send_flags: if signaled {
                bindings::ib_send_flags_IB_SEND_SIGNALED as c_int
            } else {
                0
            },
            ..Default::default()
        };
        wr.__bindgen_anon_1.wr_cqe = self.cqe(slot);
        if let SendKind::Invalidate(rkey) = kind {
            wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV;
            wr.ex.invalidate_rkey = rkey;
        }
        let send: *mut bindings::ib_send_wr = &mut wr;
        let mut regs: [bindings::ib_reg_wr; MAX_REGS] = Default::default();
        let mut first: *mut bindings::ib_send_wr = send;
        if let SendKind::Registered(tag, mrs, write) = kind {
            let cqe = self.tag_cqe(tag, TagOp::Reg);
            let n = mrs.iter().flatten().count();
            for (i, mr) in mrs.iter().flatten().enumerate() {
                let access = if write {
                    bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE
                        | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE
                } else {
                    bindings::ib_access_flags_IB_ACCESS_REMOTE_READ
                };
                let r = &mut regs[i];
                r.wr.opcode = bindings::ib_wr_opcode_IB_WR_REG_MR;
                r.wr.__bindgen_anon_1.wr_cqe = cqe;
                r.mr = mr.as_raw();
                r.key = mr.rkey();
                // CAST: access flags are small.
                r.access = access as c_int;
            }
            for i in 0..n {
                let next: *mut bindings::ib_send_wr =
                    if i + 1 < n { &mut regs[i + 1].wr } else { send };
                regs[i].wr.next = next;
            }
            if n > 0 {
                first = &mut regs[0].wr;
            }
        }
        // SAFETY: The chain (registrations of live MRs, whose tag's cqe
        // lives as long as the QP, then the slot's send) is valid for the
        // call (the driver copies it).
        unsafe { self.post_chain(first) }
    }

    /// Handles the completion `wc` of `slot`.
    fn complete(&self, slot: u32, wc: &bindings::ib_wc) {
        let w = Wc::from_raw(wc);
        if slot >= self.recv_slots {
            let tail = self.tail.load(Ordering::Relaxed);
            let tail = Ring::completed(self.sends(), tail, slot - self.recv_slots);
            self.tail.store(tail, Ordering::Release);
            H::send_done(self.handler.as_arc_borrow(), slot, &w);
            return;
        }
        // A posted slot's buffer exists: posting needed it.
        let Ok((area, i)) = self.buf(slot) else {
            kernel::pr_warn_once!("a completion of receive slot {} without its buffer\n", slot);
            self.release(slot);
            return;
        };
        let len = if w.ok() {
            (wc.byte_len as usize).min(area.len)
        } else {
            0
        };
        area.sync_for_cpu(i, len);
        // SAFETY: The slot stays claimed until it is posted again or released
        // below, so neither the device nor another thread writes the buffer
        // while the handler reads it.
        let data = unsafe { core::slice::from_raw_parts(area.ptr(i), len) };
        if H::recv_done(self.handler.as_arc_borrow(), slot, &w, data) && w.ok() {
            // A failed post fails the QP, which the handler sees as flushes.
            if self.post_recv_claimed(slot).is_ok() {
                H::recv_reposted(self.handler.as_arc_borrow(), slot);
            }
        } else {
            self.release(slot);
        }
    }
}

impl Wc {
    fn from_raw(wc: &bindings::ib_wc) -> Self {
        // CAST: `IB_WC_WITH_INVALIDATE` is a small flag.
        let inv = wc.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int != 0;
        Self {
            status: wc.status,
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            // SAFETY: The union holds the rkey when the flag says so.
            invalidated: inv.then_some(unsafe { wc.ex.invalidate_rkey }),
        }
    }
}

impl<H: Completion> Drop for Inner<H> {
    fn drop(&mut self) {
        let qp = self.qp.as_ptr();
        // `ib_drain_qp` polls an `IB_POLL_DIRECT` CQ itself: nobody else
        // may from here on.
        if let Some(cq) = &self.cq {
            cq.stop_polling();
        }
        if self.initialized.load(Ordering::Acquire) {
            // SAFETY: `qp` is live (type invariant); its CQ is ib_core's, and
            // either polled by ib_core or, for `IB_POLL_DIRECT`, by nobody but
            // the drain itself, as `ib_drain_qp` requires. After it returns
            // every posted request has completed and been handled.
            unsafe { bindings::ib_drain_qp(qp) };
        }
        // Transfers the drain ended: flushed before their chain's last
        // request was handled, or posted only in part (`Posted::Part`).
        for tag in 0..self.rw_busy.len() {
            // CAST: an index of a `u32`-sized list.
            let _ = self.rw_destroy(tag as u32);
        }
        // SAFETY: `qp` is live and idle; nothing uses it after this.
        unsafe { bindings::ferry_helper_ib_destroy_qp(qp) };
        // The CQ goes after its QP; the buffers are
        // unmapped when the fields drop, the PD last.
        drop(self.cq.take());
    }
}

/// Logs a QP's asynchronous event (a fatal error, a path migration): the
/// driver's only word on errors no completion reports. Rate limited, with
/// the device's name.
///
/// # Safety
///
/// Only ib_core calls this, with a valid event of a live QP.
unsafe extern "C" fn qp_event(ev: *mut bindings::ib_event, _ctx: *mut c_void) {
    // SAFETY: `ev` is valid for the call, and names a QP (the contract).
    let (kind, qp) = unsafe { ((*ev).event, (*ev).element.qp) };
    // SAFETY: `ib_event_msg` returns a static string for any value; the QP
    // and its device are live during its event.
    let (msg, num, dev) = unsafe {
        (
            CStr::from_char_ptr(bindings::ib_event_msg(kind)),
            (*qp).qp_num,
            super::Device::from_raw((*qp).device),
        )
    };
    // A peer's bad requests raise these: limited. `ferryctl session show`
    // names the session and channel of a QP number.
    crate::ratelimit::pr_warn_limited!("{} QP {}: {}\n", dev.name().as_cstr(), num, msg);
}

/// The `done` function of every slot's `ib_cqe`.
///
/// # Safety
///
/// Only the CQ's polling (ib_core's `ib_comp_wq` work or softirq, or
/// `ib_process_cq_direct`) calls this, with a valid `wc` whose `wr_cqe` is
/// the `cqe` field of a [`Cqe<H>`] of a live [`Inner<H>`].
unsafe extern "C" fn done<H: Completion>(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid for the call.
    let wc = unsafe { &*wc };
    // SAFETY: every request posted by `Inner` carries a `wr_cqe`.
    let cqe = unsafe { wc.__bindgen_anon_1.wr_cqe };
    // SAFETY: `cqe` is the first field of a `#[repr(C)]` `Cqe<H>` (the function's
    // contract), so the pointers coincide; the slot lives as long as its
    // `Inner`, which the drain in its drop keeps alive across this call.
    let slot = unsafe { &*cqe.cast::<Cqe<H>>() };
    // SAFETY: `owner` points to the live `Inner` (type invariant of `Inner`).
    let inner = unsafe { &*slot.owner };
    H::handling(inner.handler.as_arc_borrow(), true);
    match slot.op {
        None => inner.complete(slot.slot, wc),
        Some(op) => {
            if op == TagOp::Rdma {
                // The chain's last request: every one before it has completed
                // (a queue completes in order), so its context goes now,
                // before anything can post on the tag again.
                drop(inner.rw_destroy(slot.slot));
            }
            H::tag_done(
                inner.handler.as_arc_borrow(),
                slot.slot,
                op,
                &Wc::from_raw(wc),
            )
        }
    }
    H::handling(inner.handler.as_arc_borrow(), false);
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_qp_ring)]
mod tests {
    use super::{buf_stride, page_pieces, Area, Ring, MAX_BUF_SGES, PAGE_SIZE};

    /// `page_pieces` as a list of (page, offset, length).
    fn pieces(at: usize, n: usize) -> ([(usize, usize, usize); 24], usize) {
        let mut out = [(0, 0, 0); 24];
        let mut k = 0;
        page_pieces(at, n, |p, o, l| {
            out[k] = (p, o, l);
            k += 1;
        });
        (out, k)
    }

    #[test]
    fn small_buffers_never_cross_a_page() {
        // Powers of two up to a page: each buffer within one page.
        for len in [1, 64, 100, 256, 3000, PAGE_SIZE] {
            let stride = buf_stride(len);
            assert!(stride >= len && PAGE_SIZE % stride == 0);
            for i in 0..64 {
                let (_, k) = pieces(i * stride, len);
                assert_eq!(k, 1);
            }
            assert_eq!(Area::sges_for(len), 1);
        }
    }

    #[test]
    fn large_buffers_start_on_a_page_and_take_one_entry_per_page() {
        // A 4 KiB message with 4 KiB inline; the largest, 64 KiB and 16 KiB.
        let largest = 65536 + 16384;
        for len in [PAGE_SIZE + 1, 8192, 69632, largest] {
            let stride = buf_stride(len);
            assert_eq!(stride % PAGE_SIZE, 0);
            assert!(stride >= len && stride - len < PAGE_SIZE);
            let (p, k) = pieces(3 * stride, len);
            assert_eq!(k, Area::sges_for(len));
            assert_eq!((p[0].0, p[0].1), (3 * stride / PAGE_SIZE, 0));
            // Whole pages, and the rest in the last.
            let total: usize = p[..k].iter().map(|x| x.2).sum();
            assert_eq!(total, len);
            assert!(p[..k - 1].iter().all(|x| x.1 == 0 && x.2 == PAGE_SIZE));
        }
        assert!(Area::sges_for(largest) <= MAX_BUF_SGES);
        // Fewer bytes used, fewer entries; none for nothing.
        assert_eq!(pieces(0, 5000).1, 2);
        assert_eq!(pieces(0, 0).1, 0);
        assert_eq!(pieces(PAGE_SIZE - 10, 20), {
            let mut e = [(0, 0, 0); 24];
            e[0] = (0, PAGE_SIZE - 10, 10);
            e[1] = (1, 0, 10);
            (e, 2)
        });
    }

    #[test]
    fn signals_one_in_a_quarter() {
        let mut r = Ring::new(16);
        let mut tail = 0;
        let mut signaled = 0;
        for n in 0..64 {
            let (index, signal) = r.next(tail, false).unwrap();
            assert_eq!(index, n % 16);
            r.posted(signal);
            if signal {
                signaled += 1;
                // Its completion frees it and all before it.
                tail = Ring::completed(16, tail, index);
                assert_eq!(r.next(tail, false).map(|(i, _)| i), Some((n + 1) % 16));
            }
        }
        assert_eq!(signaled, 16);
        // A forced signal resets the count; a ring of 2 signals every send.
        assert_eq!(r.next(tail, true).map(|(_, s)| s), Some(true));
        assert_eq!(Ring::new(2).next(0, false), Some((0, true)));
    }

    #[test]
    fn full_ring_refuses_and_holds_a_signaled_send() {
        let mut r = Ring::new(8);
        let mut signals = 0;
        for _ in 0..8 {
            let (_, signal) = r.next(0, false).unwrap();
            signals += u32::from(signal);
            r.posted(signal);
        }
        assert_eq!(r.next(0, false), None);
        assert!(signals >= 1);
        // The last signaled send (the 8th, index 7) frees the whole ring.
        let tail = Ring::completed(8, 0, 7);
        assert_eq!(r.next(tail, false).map(|(i, _)| i), Some(0));
    }

    #[test]
    fn numbers_wrap_without_losing_slots() {
        // A ring of 3, far past many wraps of its numbering (0..6).
        let mut r = Ring::new(3);
        let mut tail = 0;
        for n in 0..1000u32 {
            let (index, signal) = r.next(tail, false).unwrap();
            assert_eq!(index, n % 3);
            r.posted(signal);
            // A failure completes an unsignaled send too: in order.
            tail = Ring::completed(3, tail, index);
        }
        // Two outstanding, then their completion out of the middle of the
        // numbering: the first at or after the tail that uses the slot.
        let (a, _) = r.next(tail, false).unwrap();
        r.posted(false);
        let (b, _) = r.next(tail, false).unwrap();
        r.posted(false);
        let mid = Ring::completed(3, tail, a);
        assert_eq!(r.next(mid, false).map(|(i, _)| i), Some((b + 1) % 3));
        let end = Ring::completed(3, mid, b);
        assert_eq!((end + 6 - tail) % 6, 2);
    }
}
