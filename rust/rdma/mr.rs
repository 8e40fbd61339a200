// SPDX-License-Identifier: GPL-2.0

//! Fast-registration memory regions and DMA-mapped scatterlists.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`ib_alloc_mr`, `ib_map_mr_sg`, `IB_WR_REG_MR`, `IB_WR_LOCAL_INV`).
//!
//! A [`MappedSg`] is a caller's scatterlist mapped for DMA on a device until
//! it is dropped. An [`Mr`] is an FRWR region: [`Mr::map`] points it at part
//! of a mapped scatterlist and gives it a fresh key; the QP's `REG_MR` work
//! request ([`super::qp::Qp::send_registered`]) makes the key valid for the
//! peer, and a `LOCAL_INV` ([`super::qp::Qp::local_invalidate`]) or the peer's
//! send-with-invalidate ends that. The key's low byte changes with every
//! mapping, so a peer that kept an old key cannot use it again.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{error::from_err_ptr, prelude::*, sync::Arc};

use super::{device::Registered, Pd};
use crate::bindings;

/// The direction of a transfer, for DMA mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaDir {
    /// The device reads the memory (it is sent, or read by the peer).
    ToDevice,
    /// The device writes the memory (it is received, or written by the peer).
    FromDevice,
}

impl DmaDir {
    /// The `enum dma_data_direction` value.
    pub(crate) fn as_raw(self) -> bindings::dma_data_direction {
        match self {
            DmaDir::ToDevice => bindings::dma_data_direction_DMA_TO_DEVICE,
            DmaDir::FromDevice => bindings::dma_data_direction_DMA_FROM_DEVICE,
        }
    }

    /// The same, as the `ib_dma_*` shims take it.
    fn raw(self) -> c_int {
        // CAST: the enum's values are small.
        self.as_raw() as c_int
    }
}

/// A scatterlist lent to ferry: its pages stay valid, unchanged by the CPU and
/// mapped by nobody else while this object exists. Dropping it gives them back.
///
/// # Invariants
///
/// `sg` heads a valid scatterlist of `nents` entries holding `len` bytes, for
/// the life of the object.
pub struct SgList {
    sg: NonNull<bindings::scatterlist>,
    nents: u32,
    len: u64,
    /// Entries of its own, and what keeps their pages.
    _own: Option<Own>,
}

/// A list's own entries and what keeps the pages they name.
enum Own {
    /// A slice: the list whose pages they are.
    Slice {
        _entries: KVec<bindings::scatterlist>,
        _parent: Arc<SgList>,
    },
    /// Test builds: pages of its own.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    Pages {
        _entries: KVec<bindings::scatterlist>,
        _pages: KVec<kernel::page::Page>,
    },
}

// SAFETY: The scatterlist is lent for the object's life (the contract of
// `from_raw`), to be used from any thread.
unsafe impl Send for SgList {}
// SAFETY: `&SgList` only reads.
unsafe impl Sync for SgList {}

impl SgList {
    /// Borrows the `nents` entries at `sg`. `EINVAL` for none.
    ///
    /// # Safety
    ///
    /// `sg` heads a valid scatterlist of at least `nents` entries whose pages
    /// nothing else maps, changes or frees until the object is dropped.
    pub unsafe fn from_raw(sg: *mut bindings::scatterlist, nents: u32) -> Result<Self> {
        let head = NonNull::new(sg).ok_or(EINVAL)?;
        if nents == 0 {
            return Err(EINVAL);
        }
        let mut len = 0u64;
        let mut e = sg;
        for _ in 0..nents {
            if e.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: `e` is one of the `nents` valid entries (the contract).
            len += u64::from(unsafe { (*e).length });
            // SAFETY: As above; `sg_next` follows chains.
            e = unsafe { bindings::ferry_helper_sg_next(e) };
        }
        // INVARIANT: the contract.
        Ok(Self {
            sg: head,
            nents,
            len,
            _own: None,
        })
    }

    /// The `len` bytes from byte `offset` of `parent`, as a list of its own
    /// that names the same pages (and keeps `parent` alive). `EINVAL` for an
    /// empty or out-of-range slice.
    pub fn slice(parent: &Arc<SgList>, offset: u64, len: u32) -> Result<SgList> {
        let end = offset.checked_add(u64::from(len)).ok_or(EINVAL)?;
        if len == 0 || end > parent.len {
            return Err(EINVAL);
        }
        // The parent's entries as (entry, its start in bytes).
        let mut parts = KVec::new();
        let (mut e, mut at) = (parent.as_raw(), 0u64);
        for _ in 0..parent.nents {
            // SAFETY: `e` is one of the parent's valid entries (type invariant).
            let elen = u64::from(unsafe { (*e).length });
            if at + elen > offset && at < end {
                parts.push((e, at), GFP_KERNEL)?;
            }
            at += elen;
            // SAFETY: As above.
            e = unsafe { bindings::ferry_helper_sg_next(e) };
        }
        let n = parts.len();
        let mut own = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            own.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        // CAST: at most the parent's entry count, a `u32`.
        // SAFETY: `own` has room for `n` entries.
        unsafe { bindings::sg_init_table(own.as_mut_ptr(), n as c_uint) };
        for (dst, &(src, start)) in own.iter_mut().zip(parts.iter()) {
            // SAFETY: `src` is a valid entry of the parent.
            let (page, soff, slen) = unsafe {
                (
                    bindings::ferry_helper_sg_page(src),
                    (*src).offset,
                    (*src).length,
                )
            };
            // The part of this entry inside [offset, end).
            let skip = offset.saturating_sub(start);
            let take = (u64::from(slen) - skip).min(end - start.max(offset));
            // CAST: both fit the entry's own `u32` length and offset.
            // SAFETY: `dst` is an initialized entry of `own`; `page` is the
            // parent's, which `_own` keeps alive.
            unsafe {
                bindings::ferry_helper_sg_set_page(dst, page, take as c_uint, soff + skip as c_uint)
            };
        }
        // INVARIANT: `own`'s entries name `len` bytes of the parent's pages,
        // valid while the parent is, which the slice holds; `own` never moves
        // (no push after this).
        let head = NonNull::new(own.as_mut_ptr()).ok_or(EINVAL)?;
        Ok(Self {
            sg: head,
            // CAST: as above.
            nents: n as u32,
            len: u64::from(len),
            _own: Some(Own::Slice {
                _entries: own,
                _parent: parent.clone(),
            }),
        })
    }

    /// Test builds: a list of its own over `len` bytes of fresh zeroed
    /// pages, one entry per page (the last may be partial), for the logic
    /// that takes a caller's list. `EINVAL` for none.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub fn owned(len: usize) -> Result<SgList> {
        use kernel::page::{Page, PAGE_SIZE};
        if len == 0 {
            return Err(EINVAL);
        }
        let n = len.div_ceil(PAGE_SIZE);
        let mut pages = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            pages.push(Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?, GFP_KERNEL)?;
        }
        let mut own = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            own.push(bindings::scatterlist::default(), GFP_KERNEL)?;
        }
        // CAST: `n` pages hold `len` bytes of a test, far below 4 G entries.
        // SAFETY: `own` has room for `n` entries.
        unsafe { bindings::sg_init_table(own.as_mut_ptr(), n as c_uint) };
        for (i, (dst, page)) in own.iter_mut().zip(pages.iter()).enumerate() {
            let take = (len - i * PAGE_SIZE).min(PAGE_SIZE);
            // CAST: at most a page; the kernel crate's `struct page` is the
            // same C type as ferry's bindings'.
            let p = page.as_ptr().cast::<bindings::page>();
            // SAFETY: `dst` is an initialized entry of `own`; `p` is the
            // list's own page, kept with it.
            unsafe { bindings::ferry_helper_sg_set_page(dst, p, take as c_uint, 0) };
        }
        // INVARIANT: `own`'s `n` entries name `len` bytes of `pages`, which
        // the list keeps; `own` never moves (no push after this).
        let head = NonNull::new(own.as_mut_ptr()).ok_or(EINVAL)?;
        Ok(Self {
            sg: head,
            // CAST: as above.
            nents: n as u32,
            len: len as u64,
            _own: Some(Own::Pages {
                _entries: own,
                _pages: pages,
            }),
        })
    }

    /// The bytes the list holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds none (never, for a constructed list).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::scatterlist {
        self.sg.as_ptr()
    }

    /// Its entry count.
    pub fn nents(&self) -> u32 {
        self.nents
    }

    /// Copies the list's bytes into `buf`, which must be exactly as long.
    /// Never sleeps (the pages are mapped with `kmap_local`).
    pub fn copy_to(&self, buf: &mut [u8]) -> Result {
        if buf.len() as u64 != self.len {
            return Err(EINVAL);
        }
        // SAFETY: The list is valid (type invariant) and its pages are lent
        // to us; `buf` is valid for writes of its length.
        let n = unsafe {
            bindings::sg_copy_to_buffer(
                self.as_raw(),
                self.nents,
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n == buf.len() {
            Ok(())
        } else {
            Err(EIO)
        }
    }

    /// Copies `buf`, exactly as long as the list, into the list's pages.
    /// Never sleeps.
    pub fn copy_from(&self, buf: &[u8]) -> Result {
        if buf.len() as u64 != self.len {
            return Err(EINVAL);
        }
        // SAFETY: The list is valid (type invariant) and its pages are lent
        // to us, nobody else writes them; `buf` is valid for reads of its
        // length.
        let n = unsafe {
            bindings::sg_copy_from_buffer(self.as_raw(), self.nents, buf.as_ptr().cast(), buf.len())
        };
        if n == buf.len() {
            Ok(())
        } else {
            Err(EIO)
        }
    }
}

/// A lent scatterlist, DMA-mapped on a device until dropped (or
/// [`MappedSg::unmap`]ped).
///
/// It keeps the device registered through the caller's shared handle: one
/// [`Registered`] per queue, say, so that mapping a request touches no
/// count of the device's, only the handle's own.
///
/// # Invariants
///
/// `sg` is mapped on `device` in `dir`, `mapped` entries of it, which hold
/// `len` bytes.
pub struct MappedSg {
    device: Arc<Registered>,
    sg: SgList,
    mapped: u32,
    dir: DmaDir,
    len: u64,
}

/// Where in a [`MappedSg`] the next registration starts: its entry, that
/// entry's index and the offset in it. Made by [`MappedSg::start`], moved on by [`Mr::map`].
///
/// # Invariants
///
/// `entry` is mapped entry `index` of the list headed by `head`, which the
/// position was made for, and `offset` lies within its mapped length; or
/// `index` is its mapped count (the end).
pub struct MapPos<'a> {
    head: NonNull<bindings::scatterlist>,
    entry: NonNull<bindings::scatterlist>,
    index: u32,
    /// Bytes of `entry` a region before took: an entry larger than what
    /// one region's page list has room for is split between regions.
    offset: u32,
    /// The list stays mapped while the position exists.
    _list: PhantomData<&'a MappedSg>,
}

impl MapPos<'_> {
    /// How many entries lie before the position.
    pub fn index(&self) -> u32 {
        self.index
    }
}

// SAFETY: The entries point into the lent scatterlist (see `SgList`); mapping
// and unmapping may happen on any thread.
unsafe impl Send for MappedSg {}
// SAFETY: `&MappedSg` only reads.
unsafe impl Sync for MappedSg {}

impl MappedSg {
    /// Maps `sg` for `dir` on `device`, which it holds (a count of the
    /// handle's, not of the device's). Fails with `ENOMEM` if the mapping
    /// fails (the list is dropped). Allocates nothing and never sleeps (the
    /// DMA API's mapping does not).
    pub fn new(device: &Arc<Registered>, sg: SgList, dir: DmaDir) -> Result<Self> {
        // CAST: `nents` counts scatterlist entries, far below `i32::MAX`.
        // SAFETY: `device` is registered; `sg` is valid (type invariant of
        // `SgList`) and nobody else maps it.
        let mapped = unsafe {
            bindings::ferry_helper_ib_dma_map_sg(
                device.as_raw(),
                sg.as_raw(),
                sg.nents as c_int,
                dir.raw(),
            )
        };
        if mapped <= 0 {
            return Err(ENOMEM);
        }
        // INVARIANT: unmapped on drop from here on.
        let mut this = Self {
            device: device.clone(),
            sg,
            // CAST: positive and at most `nents`.
            mapped: mapped as u32,
            dir,
            len: 0,
        };
        let mut e = this.sg.as_raw();
        for _ in 0..this.mapped {
            if e.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: `e` is one of the mapped entries.
            this.len += u64::from(unsafe { bindings::ferry_helper_sg_dma_len(e) });
            // SAFETY: `e` is a valid entry; `sg_next` follows chains.
            e = unsafe { bindings::ferry_helper_sg_next(e) };
        }
        Ok(this)
    }

    /// The position of the first entry.
    pub fn start(&self) -> MapPos<'_> {
        // INVARIANT: the list's head is entry 0, mapped (`mapped` is positive).
        MapPos {
            head: self.sg.sg,
            entry: self.sg.sg,
            index: 0,
            offset: 0,
            _list: PhantomData,
        }
    }

    /// Unmaps the list and gives it back.
    pub fn unmap(self) -> SgList {
        let this = core::mem::ManuallyDrop::new(self);
        this.do_unmap();
        // SAFETY: `this` is never used or dropped again: each field is moved
        // out once; `device` is dropped here.
        unsafe {
            drop(core::ptr::read(&this.device));
            core::ptr::read(&this.sg)
        }
    }

    fn do_unmap(&self) {
        // CAST: as in `new`.
        // SAFETY: Mapped in `new` with these arguments (type invariant); no
        // request uses the mapping any more: its owner unmaps it after the
        // transfer completed or the QP was drained.
        unsafe {
            bindings::ferry_helper_ib_dma_unmap_sg(
                self.device.as_raw(),
                self.sg.as_raw(),
                self.sg.nents as c_int,
                self.dir.raw(),
            )
        };
    }

    /// Mapped entries (the mapping may merge entries).
    pub fn mapped(&self) -> u32 {
        self.mapped
    }

    /// The mapped bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing is mapped (never, for a constructed object).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for MappedSg {
    fn drop(&mut self) {
        self.do_unmap();
    }
}

/// A fast-registration memory region, deregistered on drop.
///
/// # Invariants
///
/// `mr` came from `ib_alloc_mr` on `pd` with room for `max_pages` pages.
pub struct Mr {
    mr: NonNull<bindings::ib_mr>,
    max_pages: u32,
    key: u8,
    _pd: Arc<Pd>,
}

// SAFETY: An MR may be used and freed from any thread.
unsafe impl Send for Mr {}
// SAFETY: `&Mr` only reads.
unsafe impl Sync for Mr {}

/// What a peer needs to reach a registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The region's I/O virtual address.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// The key that grants access.
    pub rkey: u32,
}

impl Mr {
    /// Allocates a region that maps up to `max_pages` pages. May sleep.
    pub fn new(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        // SAFETY: `pd` is live on a registered device.
        let mr = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(
                pd.as_raw(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                max_pages,
            )
        })?;
        Ok(Self {
            mr: NonNull::new(mr).ok_or(ENOMEM)?,
            max_pages,
            key: 0,
            _pd: pd.clone(),
        })
    }

    /// The raw `ib_mr`.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_mr {
        self.mr.as_ptr()
    }

    /// Most pages one mapping may cover.
    pub fn max_pages(&self) -> u32 {
        self.max_pages
    }

    /// Points the region at `sg`'s mapped bytes from `at` on, as many as its
    /// page list holds, with a new key, and moves `at` past them: an entry
    /// that does not fit whole is split, the rest of it left for the next
    /// region. Returns what the peer needs. `at` must be a position of `sg`
    /// before its end (`EINVAL` otherwise). The region must not be
    /// registered (valid) now. Allocates nothing and never sleeps.
    pub fn map(&mut self, sg: &MappedSg, at: &mut MapPos<'_>) -> Result<Remote> {
        if at.head != sg.sg.sg || at.index >= sg.mapped {
            return Err(EINVAL);
        }
        let left = sg.mapped - at.index;
        self.key = self.key.wrapping_add(1);
        // In: where the first entry's bytes start; out: where the entry it
        // stopped in goes on (0 when it took its entries whole).
        let mut offset = at.offset;
        // SAFETY: The region is not in use (the caller's promise, and it is
        // `&mut`); `at.entry` is mapped entry `at.index` of `sg` (type
        // invariant of `MapPos`), followed by `left - 1` more, and `offset`
        // lies within it.
        let n = unsafe {
            bindings::ferry_helper_ib_update_fast_reg_key(self.as_raw(), self.key);
            bindings::ib_map_mr_sg(
                self.as_raw(),
                at.entry.as_ptr(),
                // CAST: at most `nents`, which is small.
                left as c_int,
                &mut offset,
                // CAST: a page is 4 KiB to 64 KiB.
                kernel::page::PAGE_SIZE as c_uint,
            )
        };
        // Whole entries taken; none when the region took part of the first
        // one only, which is progress if it went past `at.offset`.
        // CAST: `n` is checked not negative.
        if n < 0 || n as u32 > left || (n == 0 && offset <= at.offset) {
            return Err(EINVAL);
        }
        // SAFETY: `mr` is live; `ib_map_mr_sg` set these fields.
        let (addr, len, rkey) = unsafe {
            let m = &*self.as_raw();
            (m.iova, m.length, m.rkey)
        };
        let remote = Remote {
            addr,
            len: u32::try_from(len).map_err(|_| EINVAL)?,
            rkey,
        };
        // CAST: as above.
        for _ in 0..n as u32 {
            // SAFETY: `at.entry` is a valid entry of the list; `sg_next`
            // follows chains (and gives null after the last).
            let next = unsafe { bindings::ferry_helper_sg_next(at.entry.as_ptr()) };
            at.index += 1;
            // INVARIANT: the next mapped entry, or the end (where `entry` is
            // never used again).
            if let Some(e) = NonNull::new(next) {
                at.entry = e;
            }
        }
        at.offset = offset;
        Ok(remote)
    }

    /// The length of the current mapping.
    pub fn length(&self) -> u64 {
        // SAFETY: `mr` is live (type invariant).
        unsafe { (*self.as_raw()).length }
    }

    /// The key of the current mapping.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is live (type invariant).
        unsafe { (*self.as_raw()).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: The region is owned (type invariant) and no work request
        // uses it: its owner drops it after its QP was drained or the
        // registration was invalidated.
        unsafe { bindings::ferry_helper_ib_dereg_mr(self.as_raw()) };
    }
}
