// SPDX-License-Identifier: GPL-2.0

//! blk-mq: a tag set, and the requests it hands a driver.
//!
//! C header: [`include/linux/blk-mq.h`](srctree/include/linux/blk-mq.h).
//!
//! Shaped like the kernel crate's `kernel::block::mq` (an [`Operations`]
//! trait, a [`TagSet`]), which in Linux 7.3 can only end a request
//! successfully. Here a driver owns each request it is given as an
//! [`Owned`]: it reads the request's sector, length, operation and flags,
//! maps its pages into a scatterlist, keeps per-request data (the PDU), and
//! ends it exactly once, with a status, or requeues it. A request a driver
//! drops unended is ended with an I/O error, never leaked.

use core::{
    ffi::{c_int, c_void},
    marker::PhantomData,
    mem::ManuallyDrop,
    ptr::NonNull,
};
use kernel::{
    error::to_result,
    prelude::*,
    time::msecs_to_jiffies,
    types::{ForeignOwnable, Opaque},
};

use crate::bindings;

/// A request's operation (`enum req_op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read sectors.
    Read,
    /// Write sectors.
    Write,
    /// Flush the device's volatile write cache.
    Flush,
    /// Discard sectors.
    Discard,
    /// Write zeroes to sectors.
    WriteZeroes,
    /// Any other operation (the driver did not ask for it).
    Other(u32),
}

impl Op {
    /// The operation of raw value `op`.
    pub fn from_raw(op: u32) -> Self {
        match op {
            bindings::req_op_REQ_OP_READ => Self::Read,
            bindings::req_op_REQ_OP_WRITE => Self::Write,
            bindings::req_op_REQ_OP_FLUSH => Self::Flush,
            bindings::req_op_REQ_OP_DISCARD => Self::Discard,
            bindings::req_op_REQ_OP_WRITE_ZEROES => Self::WriteZeroes,
            other => Self::Other(other),
        }
    }
}

/// The flags of a request that a block driver acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// Forced unit access: the data is on stable media when it completes.
    pub fua: bool,
    /// Flush the write cache before this request (blk-mq's flush machinery
    /// turns it into a separate flush for a driver that declares a cache).
    pub preflush: bool,
    /// A write of zeroes must not deallocate the blocks.
    pub nounmap: bool,
}

impl Flags {
    /// The flags of raw `opf` (`blk_opf_t`, the operation masked out).
    pub fn from_raw(opf: u32) -> Self {
        Self {
            fua: opf & bindings::FERRY_BLK_REQ_FUA != 0,
            preflush: opf & bindings::FERRY_BLK_REQ_PREFLUSH != 0,
            nounmap: opf & bindings::FERRY_BLK_REQ_NOUNMAP != 0,
        }
    }
}

/// What [`Operations::queue_rq`] did with a request.
pub enum Queued<T: Operations> {
    /// The driver took it: it ends it later.
    Taken,
    /// No room now: blk-mq keeps the request and tries it again soon
    /// (`BLK_STS_RESOURCE`).
    Busy(Owned<T>),
    /// No room now, and the driver runs the queue again once there is
    /// (`BLK_STS_DEV_RESOURCE`; see [`crate::block::disk::Disk::run_queues`]):
    /// only for a driver that can promise the rerun after this returns.
    DevBusy(Owned<T>),
    /// Failed at once with this error; blk-mq ends it.
    Failed(Owned<T>, Error),
}

/// What [`Operations::timeout`] decides about a request that timed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Give it another timeout period (`BLK_EH_RESET_TIMER`).
    ResetTimer,
    /// The driver ends it, or already did (`BLK_EH_DONE`).
    Done,
}

/// A request that timed out, as [`Operations::timeout`] sees it: the driver
/// still owns the request ([`Owned`]), so only what identifies it is here.
#[derive(Clone, Copy, Debug)]
pub struct TimedOut {
    /// Its tag.
    pub tag: u32,
    /// Its hardware queue.
    pub hw_queue: u32,
    /// Its first sector.
    pub sector: u64,
    /// Its operation.
    pub op: Op,
}

/// A block driver: what blk-mq calls.
#[vtable]
pub trait Operations: Sized + Send + Sync + 'static {
    /// What a disk's queue carries for the driver (its `queuedata`).
    type QueueData: ForeignOwnable + Send + Sync;
    /// Per-request data, made with each request of the tag set (when the
    /// tag set or a queue is allocated) and dropped with it; the request's
    /// owner reaches it through [`Owned::pdu`].
    type Pdu: Default + Send;

    /// Completes a request's [`Operations::Pdu`], made in place by
    /// `Default` (a PDU may be too large to pass by value on the stack),
    /// before its first use, in process context: it may allocate with
    /// `GFP_KERNEL`, as upstream's `new_request_data` may, what the driver's
    /// `queue_rq` needs of each request without allocating. An error fails
    /// the tag set's (or the queue's) allocation. By default, nothing.
    fn init_pdu(_pdu: &mut Self::Pdu) -> Result {
        Ok(())
    }

    /// A request for hardware queue `hw_queue`, started. `last`: no other
    /// request follows in this batch (see [`Operations::commit_rqs`]).
    /// Must not sleep: the tag set is not `BLK_MQ_F_BLOCKING`.
    fn queue_rq(
        queue: <Self::QueueData as ForeignOwnable>::Borrowed<'_>,
        hw_queue: u32,
        rq: Owned<Self>,
        last: bool,
    ) -> Queued<Self>;

    /// The batch for `hw_queue` ended without a `last` request.
    fn commit_rqs(_queue: <Self::QueueData as ForeignOwnable>::Borrowed<'_>, _hw_queue: u32) {
        build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// A request timed out.
    fn timeout(
        _queue: <Self::QueueData as ForeignOwnable>::Borrowed<'_>,
        _rq: TimedOut,
    ) -> TimeoutAction {
        build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }

    /// Polls polled hardware queue `hw_queue`: how many completions it
    /// processed (blk-mq only asks whether any), as nvme-rdma's
    /// `ib_process_cq_direct` counts them.
    fn poll(_queue: <Self::QueueData as ForeignOwnable>::Borrowed<'_>, _hw_queue: u32) -> u32 {
        build_error!(kernel::error::VTABLE_DEFAULT_ERROR)
    }
}

/// A started request that its driver owns, until it ends or requeues it.
///
/// # Invariants
///
/// `rq` is a request blk-mq handed to the driver's `queue_rq` and started,
/// not yet ended, requeued or handed back; its PDU holds an initialized
/// `T::Pdu`. Exactly one `Owned` exists for it.
pub struct Owned<T: Operations> {
    rq: NonNull<bindings::request>,
    _p: PhantomData<T>,
}

// SAFETY: A started request may be ended or requeued from any thread and
// context; the PDU is `Send`.
unsafe impl<T: Operations> Send for Owned<T> {}
// SAFETY: Shared references only read the request, and the PDU (`Sync`).
unsafe impl<T: Operations> Sync for Owned<T> where T::Pdu: Sync {}

impl<T: Operations> Owned<T> {
    fn raw(&self) -> *mut bindings::request {
        self.rq.as_ptr()
    }

    /// The request's tag: unique among the requests in flight on its
    /// hardware queue, below the tag set's depth.
    pub fn tag(&self) -> u32 {
        // SAFETY: The request is live (type invariant).
        unsafe { bindings::ferry_blk_rq_tag(self.raw()) }
    }

    /// The hardware queue it was queued on.
    pub fn hw_queue(&self) -> u32 {
        // SAFETY: The request is live and started, so it has its queue.
        unsafe { bindings::ferry_blk_rq_hctx_index(self.raw()) }
    }

    /// Its first sector (512 bytes each).
    pub fn sector(&self) -> u64 {
        // SAFETY: The request is live (type invariant).
        unsafe { bindings::ferry_blk_rq_pos(self.raw()) }
    }

    /// The bytes it covers (0 for a flush).
    pub fn bytes(&self) -> u32 {
        // SAFETY: The request is live (type invariant).
        unsafe { bindings::ferry_blk_rq_bytes(self.raw()) }
    }

    /// Its operation.
    pub fn op(&self) -> Op {
        // SAFETY: The request is live (type invariant).
        Op::from_raw(unsafe { bindings::ferry_blk_req_op(self.raw()) })
    }

    /// Its flags.
    pub fn flags(&self) -> Flags {
        // SAFETY: The request is live (type invariant).
        Flags::from_raw(unsafe { bindings::ferry_blk_rq_flags(self.raw()) })
    }

    /// Whether this is the request's first dispatch, not a requeued one's
    /// (it marks the request `RQF_DONTPREP`, as nvme does: blk-mq then puts
    /// it back past the I/O scheduler when it is requeued). Per-request
    /// state in the PDU, which blk-mq keeps between requests of a tag, is
    /// reset then.
    pub fn first_dispatch(&mut self) -> bool {
        // SAFETY: The request is live and started, and owned here (type
        // invariant): nothing else touches its flags meanwhile.
        unsafe { bindings::ferry_blk_rq_first_dispatch(self.raw()) }
    }

    /// The physical segments of its data (what [`Owned::map_sg`] fills).
    pub fn segments(&self) -> u32 {
        // SAFETY: The request is live (type invariant).
        u32::from(unsafe { bindings::ferry_blk_rq_nr_phys_segments(self.raw()) })
    }

    /// What its disk's queue carries for the driver (`queuedata`): no
    /// reference is taken, the request's lifetime bounds the borrow.
    pub fn queue_data(&self) -> <T::QueueData as ForeignOwnable>::Borrowed<'_> {
        // SAFETY: The request is live (type invariant), so its queue is; the
        // queue's data came from `T::QueueData::into_foreign` (see `Disk`)
        // and is taken back only after the queue is drained of requests,
        // this one included.
        unsafe { T::QueueData::borrow(bindings::ferry_blk_rq_queuedata(self.raw())) }
    }

    /// Its per-request data.
    pub fn pdu(&self) -> &T::Pdu {
        // SAFETY: The PDU holds an initialized `T::Pdu` (type invariant),
        // which only this owner reaches while the request is started.
        unsafe { &*bindings::ferry_blk_rq_to_pdu(self.raw()).cast::<T::Pdu>() }
    }

    /// Its per-request data, to change.
    pub fn pdu_mut(&mut self) -> &mut T::Pdu {
        // SAFETY: As for `pdu`; `&mut self` makes the access exclusive.
        unsafe { &mut *bindings::ferry_blk_rq_to_pdu(self.raw()).cast::<T::Pdu>() }
    }

    /// Maps the request's data into the scatterlist of its PDU: the number
    /// of entries used (0 for a request without data). `EINVAL` if the
    /// table is shorter than the request's segments.
    pub fn map_sg<const N: usize>(&mut self) -> Result<u32>
    where
        T::Pdu: HasSgTable<N>,
    {
        if self.segments() as usize > N {
            return Err(EINVAL);
        }
        let table = self.pdu().sg_table();
        table.init();
        // SAFETY: The request is live (type invariant); the table holds `N`
        // initialized entries, at least the request's segments, which is
        // the most `blk_rq_map_sg` writes; `&mut self` keeps anyone else
        // off the PDU, and the entries are `Opaque`.
        let n = unsafe { bindings::ferry_blk_rq_map_sg(self.raw(), table.as_raw()) };
        u32::try_from(n).map_err(|_| EINVAL)
    }

    /// Ends the request: `Ok` or the error it failed with.
    pub fn end(self, res: Result) {
        let status = status_of(res);
        let rq = self.into_raw();
        // SAFETY: The driver owned the started request (type invariant) and
        // gives it up here.
        unsafe { bindings::blk_mq_end_request(rq, status) };
    }

    /// Puts the request back on blk-mq's requeue list, to be queued again;
    /// `kick`: start the requeue list now.
    pub fn requeue(self, kick: bool) {
        let rq = self.into_raw();
        // SAFETY: As for `end`.
        unsafe { bindings::blk_mq_requeue_request(rq, kick) };
    }

    /// Gives the request up without ending it (blk-mq takes it back).
    fn into_raw(self) -> *mut bindings::request {
        ManuallyDrop::new(self).raw()
    }
}

impl<T: Operations> Drop for Owned<T> {
    fn drop(&mut self) {
        // A request is never leaked: one its driver forgot fails.
        // SAFETY: The driver owned the started request (type invariant).
        unsafe { bindings::blk_mq_end_request(self.raw(), bindings::FERRY_BLK_STS_IOERR) };
    }
}

/// The status a request ends with for `res`: errors that mean "try again"
/// to blk-mq (`ENOMEM`, `EBUSY`, `EAGAIN`, `EREMCHG`) would requeue a
/// request instead of ending it, so they end it as an I/O error.
fn status_of(res: Result) -> bindings::blk_status_t {
    match res {
        Ok(()) => bindings::FERRY_BLK_STS_OK,
        Err(e) if [ENOMEM, EBUSY, EAGAIN, EREMCHG].contains(&e) => bindings::FERRY_BLK_STS_IOERR,
        // SAFETY: Any errno has a status.
        Err(e) => unsafe { bindings::errno_to_blk_status(e.to_errno()) },
    }
}

/// Per-request data that holds the scatterlist of `N` entries its
/// request's data is mapped into ([`Owned::map_sg`]).
pub trait HasSgTable<const N: usize> {
    /// The table.
    fn sg_table(&self) -> &SgTable<N>;
}

/// A scatterlist of `N` entries that a request's data is mapped into
/// ([`Owned::map_sg`]), typically inside the request's PDU. The entries
/// are written through shared references (the kernel and a device map
/// them), so they are `Opaque`.
///
/// Not `Sync`: only the request's owner maps into it.
pub struct SgTable<const N: usize> {
    sg: [Opaque<bindings::scatterlist>; N],
}

// SAFETY: The entries only describe pages; who may touch them is the
// request's owner's business, and the kernel's.
unsafe impl<const N: usize> Send for SgTable<N> {}

impl<const N: usize> Default for SgTable<N> {
    fn default() -> Self {
        const { assert!(N > 0) };
        Self {
            sg: [const { Opaque::zeroed() }; N],
        }
    }
}

impl<const N: usize> SgTable<N> {
    /// The first entry, for C.
    pub(crate) fn as_raw(&self) -> *mut bindings::scatterlist {
        // `Opaque` is transparent: the array is one of entries, which C may
        // write through this pointer (they are `Opaque`).
        self.sg.as_ptr().cast::<bindings::scatterlist>().cast_mut()
    }

    /// Marks every entry unused and the last as the end.
    fn init(&self) {
        // SAFETY: `sg` holds `N` entries, which the kernel may write
        // through a shared reference (they are `Opaque`).
        // CAST: `N` is a table size.
        unsafe { bindings::sg_init_table(self.as_raw(), N as u32) };
    }
}

/// Sizes of a [`TagSet`].
#[derive(Clone, Copy, Debug)]
pub struct TagSetConfig {
    /// Hardware queues whose requests complete by themselves.
    pub hw_queues: u32,
    /// Polled hardware queues, after them (`HCTX_TYPE_POLL`).
    pub poll_queues: u32,
    /// Tags per hardware queue.
    pub depth: u32,
    /// How long a request may take before [`Operations::timeout`]; 0: the
    /// block layer's default (30 s).
    pub timeout_ms: u32,
}

/// A blk-mq tag set (`struct blk_mq_tag_set`): the requests of every
/// hardware queue, each with a `T::Pdu`.
///
/// # Invariants
///
/// `inner` was set up by `blk_mq_alloc_tag_set` and is freed on drop.
#[pin_data(PinnedDrop)]
pub struct TagSet<T: Operations> {
    #[pin]
    inner: Opaque<bindings::blk_mq_tag_set>,
    _p: PhantomData<T>,
}

// SAFETY: blk-mq serializes the tag set's own changes.
unsafe impl<T: Operations> Send for TagSet<T> {}
// SAFETY: As for `Send`.
unsafe impl<T: Operations> Sync for TagSet<T> {}

impl<T: Operations> TagSet<T> {
    /// Allocates a tag set of `cfg`'s sizes. Sleeps.
    pub fn new(cfg: TagSetConfig) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            inner <- Opaque::try_ffi_init(move |slot: *mut bindings::blk_mq_tag_set| {
                let nr_hw_queues = cfg.hw_queues.checked_add(cfg.poll_queues).ok_or(EINVAL)?;
                if cfg.hw_queues == 0 || cfg.depth == 0 {
                    return Err(EINVAL);
                }
                let cmd_size = u32::try_from(core::mem::size_of::<T::Pdu>())?;
                let set = bindings::blk_mq_tag_set {
                    ops: &OperationsVTable::<T>::VTABLE,
                    nr_hw_queues,
                    // Default, read (the same queues) and, with some, poll.
                    nr_maps: if cfg.poll_queues > 0 { 3 } else { 1 },
                    queue_depth: cfg.depth,
                    cmd_size,
                    numa_node: bindings::NUMA_NO_NODE,
                    // CAST: jiffies of at most an hour fit.
                    timeout: msecs_to_jiffies(cfg.timeout_ms.min(3_600_000)) as u32,
                    // The default queues' count, for `map_queues` (a number,
                    // never a pointer).
                    driver_data: cfg.hw_queues as usize as *mut c_void,
                    ..Default::default()
                };
                // SAFETY: `slot` is valid for writes; the set is then
                // complete for `blk_mq_alloc_tag_set`, whose ops are static.
                to_result(unsafe {
                    slot.write(set);
                    bindings::blk_mq_alloc_tag_set(slot)
                })
            }),
            _p: PhantomData,
        })
    }

    /// How many of its requests the driver holds now (started, not yet
    /// ended or requeued), counted over every hardware queue's tags by
    /// `blk_mq_tagset_busy_iter`: a figure for reports, which costs the
    /// data path nothing.
    pub fn busy(&self) -> u32 {
        /// Counts one request.
        ///
        /// # Safety
        ///
        /// `data` is the `u32` counter [`TagSet::busy`] passes.
        unsafe extern "C" fn count(_rq: *mut bindings::request, data: *mut c_void) -> bool {
            // SAFETY: The counter, valid and not otherwise used during the
            // iteration (the contract).
            unsafe { *data.cast::<u32>() += 1 };
            true
        }
        let mut n = 0u32;
        // SAFETY: The set is live (type invariant): its tags are the set's,
        // so quiesced queues or a deleted disk do not matter until the set
        // is freed, and nothing here changes its queue count meanwhile.
        // blk-mq holds a reference on each request across `count`, which
        // only touches `n`, valid for the call (synchronous).
        unsafe {
            bindings::blk_mq_tagset_busy_iter(self.as_raw(), Some(count), (&raw mut n).cast())
        };
        n
    }

    /// The raw tag set.
    pub(crate) fn as_raw(&self) -> *mut bindings::blk_mq_tag_set {
        self.inner.get()
    }
}

#[pinned_drop]
impl<T: Operations> PinnedDrop for TagSet<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Set up by `blk_mq_alloc_tag_set` (type invariant); no disk
        // uses it any more (a `Disk` holds its tag set).
        unsafe { bindings::blk_mq_free_tag_set(self.inner.get()) };
    }
}

/// The `blk_mq_ops` of driver `T`.
struct OperationsVTable<T: Operations>(PhantomData<T>);

impl<T: Operations> OperationsVTable<T> {
    const VTABLE: bindings::blk_mq_ops = bindings::blk_mq_ops {
        queue_rq: Some(Self::queue_rq),
        commit_rqs: if T::HAS_COMMIT_RQS {
            Some(Self::commit_rqs)
        } else {
            None
        },
        timeout: if T::HAS_TIMEOUT {
            Some(Self::timeout)
        } else {
            None
        },
        poll: if T::HAS_POLL { Some(Self::poll) } else { None },
        init_request: Some(Self::init_request),
        exit_request: Some(Self::exit_request),
        map_queues: Some(Self::map_queues),
        queue_rqs: None,
        get_budget: None,
        put_budget: None,
        set_rq_budget_token: None,
        get_rq_budget_token: None,
        complete: None,
        init_hctx: None,
        exit_hctx: None,
        cleanup_rq: None,
        busy: None,
        #[cfg(CONFIG_BLK_DEBUG_FS)]
        show_rq: None,
    };

    /// # Safety
    ///
    /// blk-mq calls this with a live `hctx` of a queue whose `queuedata`
    /// came from `T::QueueData::into_foreign` (see `Disk`), and `bd` naming
    /// a request of `T`'s tag set that it hands to the driver.
    unsafe extern "C" fn queue_rq(
        hctx: *mut bindings::blk_mq_hw_ctx,
        bd: *const bindings::blk_mq_queue_data,
    ) -> bindings::blk_status_t {
        // SAFETY: `bd` is valid for the call (the contract).
        let (rq, last) = unsafe { ((*bd).rq, (*bd).last) };
        // SAFETY: The request is the driver's now (the contract).
        unsafe { bindings::blk_mq_start_request(rq) };
        // INVARIANT: started, the driver's, its PDU initialized by
        // `init_request`; this is the one owner.
        let owned = Owned {
            // SAFETY: blk-mq never hands over a null request.
            rq: unsafe { NonNull::new_unchecked(rq) },
            _p: PhantomData,
        };
        // SAFETY: `hctx` is live (the contract).
        let (data, index) = unsafe {
            (
                bindings::ferry_blk_hctx_queuedata(hctx),
                bindings::ferry_blk_hctx_index(hctx),
            )
        };
        // SAFETY: `queuedata` came from `into_foreign` and is given back only
        // after the disk's queue is gone (the contract, and `Disk`).
        let queue = unsafe { T::QueueData::borrow(data) };
        let (back, status) = match T::queue_rq(queue, index, owned, last) {
            Queued::Taken => return bindings::FERRY_BLK_STS_OK,
            Queued::Busy(rq) => (rq, bindings::FERRY_BLK_STS_RESOURCE),
            Queued::DevBusy(rq) => (rq, bindings::FERRY_BLK_STS_DEV_RESOURCE),
            Queued::Failed(rq, e) => (rq, status_of(Err(e))),
        };
        if back.raw() != rq {
            // Another request than the one given (which the driver kept or
            // ended): blk-mq must not touch the one given again, and the
            // other goes back to it.
            pr_warn!("block: queue_rq gave back another request than its own\n");
            back.requeue(true);
            return bindings::FERRY_BLK_STS_OK;
        }
        back.into_raw();
        status
    }

    /// # Safety
    ///
    /// As for `queue_rq`, for `hctx`.
    unsafe extern "C" fn commit_rqs(hctx: *mut bindings::blk_mq_hw_ctx) {
        // SAFETY: `hctx` is live (the contract).
        let (data, index) = unsafe {
            (
                bindings::ferry_blk_hctx_queuedata(hctx),
                bindings::ferry_blk_hctx_index(hctx),
            )
        };
        // SAFETY: As in `queue_rq`.
        T::commit_rqs(unsafe { T::QueueData::borrow(data) }, index);
    }

    /// # Safety
    ///
    /// blk-mq calls this with a live, started request of `T`'s tag set,
    /// whose queue's `queuedata` came from `T::QueueData::into_foreign`.
    unsafe extern "C" fn timeout(rq: *mut bindings::request) -> bindings::blk_eh_timer_return {
        // SAFETY: `rq` is live and started (the contract); only what
        // identifies it is read, not the PDU its owner may be using.
        let (info, data) = unsafe {
            (
                TimedOut {
                    tag: bindings::ferry_blk_rq_tag(rq),
                    hw_queue: bindings::ferry_blk_rq_hctx_index(rq),
                    sector: bindings::ferry_blk_rq_pos(rq),
                    op: Op::from_raw(bindings::ferry_blk_req_op(rq)),
                },
                bindings::ferry_blk_rq_queuedata(rq),
            )
        };
        // SAFETY: As in `queue_rq`.
        match T::timeout(unsafe { T::QueueData::borrow(data) }, info) {
            TimeoutAction::ResetTimer => bindings::blk_eh_timer_return_BLK_EH_RESET_TIMER,
            TimeoutAction::Done => bindings::blk_eh_timer_return_BLK_EH_DONE,
        }
    }

    /// # Safety
    ///
    /// As for `commit_rqs`.
    unsafe extern "C" fn poll(
        hctx: *mut bindings::blk_mq_hw_ctx,
        _iob: *mut bindings::io_comp_batch,
    ) -> c_int {
        // SAFETY: `hctx` is live (the contract).
        let (data, index) = unsafe {
            (
                bindings::ferry_blk_hctx_queuedata(hctx),
                bindings::ferry_blk_hctx_index(hctx),
            )
        };
        // SAFETY: As in `queue_rq`.
        let n = T::poll(unsafe { T::QueueData::borrow(data) }, index);
        c_int::try_from(n).unwrap_or(c_int::MAX)
    }

    /// # Safety
    ///
    /// blk-mq calls this once per request of the tag set, before its first
    /// use, with room for `cmd_size` (`size_of::<T::Pdu>()`) bytes behind it.
    unsafe extern "C" fn init_request(
        _set: *mut bindings::blk_mq_tag_set,
        rq: *mut bindings::request,
        _hctx_idx: u32,
        _numa_node: c_int,
    ) -> c_int {
        // The PDU follows the request, whose size keeps 8-byte alignment.
        const { assert!(core::mem::align_of::<T::Pdu>() <= 8) };
        // SAFETY: `rq` is a request of the tag set (the function's
        // contract), so its PDU is there.
        let pdu = unsafe { bindings::ferry_blk_rq_to_pdu(rq).cast::<T::Pdu>() };
        // SAFETY: The PDU is `cmd_size` bytes, aligned for `T::Pdu` (above),
        // and unused until now.
        unsafe { pdu.write(T::Pdu::default()) };
        // SAFETY: Written just above; nothing else uses it yet.
        match T::init_pdu(unsafe { &mut *pdu }) {
            Ok(()) => 0,
            Err(e) => {
                // blk-mq frees the requests made so far (`exit_request`),
                // not this one: its PDU goes here.
                // SAFETY: Written above, and no longer used.
                unsafe { core::ptr::drop_in_place(pdu) };
                e.to_errno()
            }
        }
    }

    /// # Safety
    ///
    /// blk-mq calls this once per request that `init_request` set up, when
    /// it frees the request; it is not in use.
    unsafe extern "C" fn exit_request(
        _set: *mut bindings::blk_mq_tag_set,
        rq: *mut bindings::request,
        _hctx_idx: u32,
    ) {
        // SAFETY: `init_request` put a `T::Pdu` there, and nobody uses it.
        unsafe { core::ptr::drop_in_place(bindings::ferry_blk_rq_to_pdu(rq).cast::<T::Pdu>()) };
    }

    /// # Safety
    ///
    /// blk-mq calls this with the live tag set that `TagSet::new` set up.
    unsafe extern "C" fn map_queues(set: *mut bindings::blk_mq_tag_set) {
        // SAFETY: The set is live and blk-mq lets its driver fill its maps
        // now; `driver_data` holds the default queues' count.
        unsafe {
            let default = (*set).driver_data as usize as u32;
            let poll = (*set).nr_hw_queues - default;
            let maps = &mut (*set).map;
            let types = [
                (bindings::hctx_type_HCTX_TYPE_DEFAULT, default, 0),
                (bindings::hctx_type_HCTX_TYPE_READ, default, 0),
                (bindings::hctx_type_HCTX_TYPE_POLL, poll, default),
            ];
            for (t, nr_queues, offset) in types.into_iter().take((*set).nr_maps as usize) {
                let map = &mut maps[t as usize];
                map.nr_queues = nr_queues;
                map.queue_offset = offset;
                bindings::blk_mq_map_queues(map);
            }
        }
    }
}
