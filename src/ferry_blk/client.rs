// SPDX-License-Identifier: GPL-2.0

//! The client: a target's export mapped as a local disk, `/dev/ferryblkN`.
//!
//! A mapping is one ferry session to the target's service, opened with
//! every FRWR region registered up front (`FERRY_PREREGISTER`) and no room
//! for requests from the target (`FERRY_NO_REQUESTS`), and one
//! blk-mq hardware queue per ferry channel: hardware queue `q` submits on
//! channel `q` under its request's own tag, so the disk's queues and the
//! session's QPs map one to one. `queue_rq` never sleeps and, once a tag
//! has been used, allocates nothing: each request carries its ferry request
//! in its PDU, and its pages are mapped into a scatterlist there and lent
//! to ferry as they are. A request ferry cannot take now (no credit, tag or
//! region) goes back to blk-mq, and the queues run again when ferry says
//! the channel is writable, or the session is up again; a request whose
//! connection failed is requeued, unless the mapping is going away.

use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use kernel::{
    new_condvar, new_mutex, new_spinlock_irq, new_work,
    prelude::*,
    str::CString,
    sync::{rcu, Arc, ArcBorrow, CondVar, CondVarTimeoutResult, Mutex, SetOnce, SpinLockIrq},
    time::{msecs_to_jiffies, Instant, Monotonic},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    blk_ferry::{RqData, SEGMENTS},
    block::{
        disk::{Disk, Limits},
        mq::{
            HasSgTable, Operations, Owned, Queued, SgTable, TagSet, TagSetConfig, TimedOut,
            TimeoutAction,
        },
    },
    ferry_api::{
        Dir, Done, Handler, NetNs, Params, Peer, Request, Session, SessionHandle, SessionRef, Wait,
        MAX_GIVE_UP_S,
    },
    ferry_blk_nl::map_attr as ma,
    indices::DiskIndex,
    slot::RcuCell,
    stats::{IoCounts, IoStats, MapCounters, Op},
    wire::{self, ExportName, Io, IoOp, Notice, Open, Opened},
};

/// How long blk-mq lets a request run before [`Blk::timeout`] resets its
/// channel: the disk's `io_timeout` (sysfs may change it, for requests
/// started from then on).
const TIMEOUT_MS: u32 = 30_000;

/// How long a map waits for the target's answer to its open.
const OPEN_TIMEOUT_MS: u32 = 30_000;

/// How long a reopen after a reconnect may go unanswered (a refusal for now
/// is an answer) before the connection is reset and tried again, in
/// seconds (the module's ticks).
const REOPEN_TIMEOUT_S: u32 = 30;

/// The DMA alignment mask a disk declares when ferry takes any: 4 bytes,
/// as nvme-rdma (a mask of 0 would be the block layer's default of 511).
const DMA_ALIGNMENT: u32 = 3;

/// A mapping's give-up time by default, in seconds, as nvme's
/// `ctrl_loss_tmo`.
pub(crate) const GIVE_UP_S: u32 = 600;

/// The most completions one poll of a polled queue processes, so that a
/// busy queue still lets its poller see the requests it waits for.
const POLL_BUDGET: u32 = 64;

/// A mapping's longest wait between reconnect attempts by default, in
/// seconds (nvme's `reconnect_delay` is 10 s by default too).
pub(crate) const RECONNECT_DELAY_S: u32 = 10;

/// The block driver of every mapping.
pub(crate) struct Blk;

/// A block request's ferry side, in its PDU.
#[derive(Default)]
pub(crate) struct Pdu {
    sg: SgTable<SEGMENTS>,
    /// The ferry request it goes out as: made with the PDU
    /// ([`Operations::init_pdu`]), then kept (ferry hands it back when the
    /// request is over), so `queue_rq` never allocates.
    req: Option<KBox<Request<Sent, RqData<Blk>>>>,
    /// Times the request was requeued because its connection failed (at
    /// most [`MAX_RETRIES`]; reset at its first dispatch).
    retries: u8,
}

/// Times a block request goes again after its connection failed under it
/// (as nvme's default `max_retries`); then it fails (`ENOLINK`, a transport
/// error).
const MAX_RETRIES: u8 = 5;

impl HasSgTable<SEGMENTS> for Pdu {
    fn sg_table(&self) -> &SgTable<SEGMENTS> {
        &self.sg
    }
}

/// What a mapping's queues, its session's callbacks and its requests
/// share.
///
/// After a reconnect the target's session is a new one: the export is opened
/// again before any request goes. From `down` the queues are quiesced; on
/// `up` the open is sent again, and its answer (the same export: handle and
/// block size) lets the queues go, or fails the mapping.
#[pin_data]
pub(crate) struct Shared {
    /// N of the disk `ferryblkN`.
    index: u32,
    /// The session, once open.
    session: SetOnce<SessionHandle>,
    /// What opens the export (again).
    open: Open,
    /// The export's identity, once opened: every later open must find it.
    id: SetOnce<[u8; 16]>,
    /// The export's handle at the target and its block size, once opened.
    handle: AtomicU32,
    logical_block_size: AtomicU32,
    /// Requests may go: the export is open on the current connection.
    /// (`ready`, `failing_fast` and `dead` are read without a lock, and
    /// written under `conn`'s.)
    ready: AtomicBool,
    /// Where the connection stands (see [`Conn`]).
    #[pin]
    conn: Mutex<Conn>,
    /// An open waits for room on the session (`notices` sends it, woken
    /// by `writable`).
    reopen_pending: AtomicBool,
    /// No more I/O: unmapped, or the export or the session is gone.
    dead: AtomicBool,
    /// `map-add-ntf` went out: changes are told from then on.
    announced: AtomicBool,
    /// The disk, once added (taken out again at unmap, once it is deleted):
    /// read under RCU by `writable`, in softirq, which must not hold the
    /// last reference.
    disk: RcuCell<Disk<Blk>>,
    /// The counters, one set per hardware queue (once the disk is made).
    stats: SetOnce<KVec<IoStats>>,
    /// The target's notices, acted on by `notices` (a disk's capacity and
    /// its death reach the file system, which may wait for I/O that the
    /// completion the notice came on would have to finish).
    #[pin]
    notices: Work<Shared>,
    /// A capacity the target told and `notices` has not set yet
    /// ([`NO_RESIZE`]: none).
    resize: AtomicU64,
    /// The target deleted the export; `notices` has not failed the disk yet.
    deleted: AtomicBool,
    /// The disk is being removed: `notices` leaves it alone.
    removing: AtomicBool,
    /// The answer to a reopen, which `notices` acts on (the request ends
    /// in softirq, and acting on it sleeps).
    #[pin]
    reopen_answer: SpinLockIrq<Option<(u32, Result<Opened>)>>,
    /// Seconds disconnected before requests fail at once while it
    /// reconnects (0: never), as nvme's `fast_io_fail_tmo`.
    fast_fail_s: AtomicU32,
    /// Seconds disconnected before the disk is dead, as `ctrl_loss_tmo`.
    give_up_s: AtomicU32,
    /// The longest wait between reconnect attempts (the session's copy).
    reconnect_delay_s: AtomicU32,
    /// Disconnected beyond `fast_fail_s`: requests fail at once (with
    /// `ENOLINK`, a transport error) until it is live again.
    failing_fast: AtomicBool,
    /// The number of the last open sent (the map's own is 0): the target
    /// lets no older open take a newer one's place, and the client takes
    /// only the answer to the last one it sent.
    attempt: AtomicU32,
    /// What it counts of its connection.
    counters: MapCounters,
}

/// Where a mapping's connection stands. Changed only under
/// [`Shared::conn`]'s lock, by `down`, the tick, an open's answer and a
/// kill, so the queues' quiesce and the state move together.
#[derive(Default)]
struct Conn {
    /// When the connection was lost (while it is not live).
    down_since: Option<Instant<Monotonic>>,
    /// The queues are quiesced (from `down` to the open's answer, or to
    /// failing fast).
    quiesced: bool,
    /// The reopen awaited on the current connection: its number, and when
    /// it was sent (its deadline: [`REOPEN_TIMEOUT_S`]).
    reopen: Option<(u32, Instant<Monotonic>)>,
    /// The target refused the last reopen for now: the tick sends it again.
    reopen_again: bool,
}

/// [`Shared::resize`] when no resize waits (no capacity the target may
/// tell: [`wire::MAX_SECTORS`] is far below).
const NO_RESIZE: u64 = u64::MAX;

impl_has_work! {
    impl HasWork<Self> for Shared { self.notices }
}

impl WorkItem for Shared {
    type Pointer = Arc<Shared>;

    fn run(this: Arc<Shared>) {
        // What the session's softirq callbacks left (the removal still wants
        // it: the requests wait for the reopen).
        let answer = this.reopen_answer.lock().take();
        if let Some((attempt, res)) = answer {
            this.reopened(attempt, res);
        }
        if this.reopen_pending.load(Relaxed) {
            if let Some(s) = this.session.as_ref() {
                this.reopen(s);
            }
        }
        // The disk is being removed: nothing to tell it.
        if this.removing.load(Acquire) {
            return;
        }
        let sectors = this.resize.swap(NO_RESIZE, Acquire);
        if sectors != NO_RESIZE {
            if let Some(d) = this.disk() {
                pr_info!("{}: resized to {} sectors\n", d.name(), sectors);
                d.set_capacity(sectors);
            }
            this.changed();
        }
        if this.deleted.swap(false, Acquire) {
            if let Some(d) = this.disk() {
                d.mark_dead();
            }
            this.kill("the target deleted its export");
        }
    }
}

/// What a block request's ferry request carries (the mapping's state is
/// the request's queue data: no reference per request).
pub(crate) struct Sent {
    /// The block request, when it has no data (else the data holds it).
    rq: Option<Owned<Blk>>,
    op: Op,
    fua: bool,
    /// Its hardware queue (whose counters count it).
    queue: u32,
}

impl Done<RqData<Blk>> for Sent {
    fn done(mut req: KBox<Request<Sent, RqData<Blk>>>) {
        let status = req.status();
        let (op, fua, queue) = (req.ctx.op, req.ctx.fua, req.ctx.queue);
        let rq = match req.take_data() {
            Some(d) => Some(d.into_request()),
            None => req.ctx.rq.take(),
        };
        let Some(mut rq) = rq else {
            return;
        };
        let len = rq.bytes();
        rq.pdu_mut().req = Some(req);
        let dead = rq.queue_data().dead.load(Acquire);
        match status {
            // The connection failed before the answer: once the session is
            // back, the request goes again (the target may have done it:
            // block operations may be repeated), a few times.
            // (A request the target refused as one of a replaced session
            // was sent on a connection that is going: the same.)
            Err(e)
                if (e == ECONNABORTED || e == ESTALE)
                    && !dead
                    && rq.pdu().retries < MAX_RETRIES
                    && !rq.queue_data().failing_fast.load(Acquire) =>
            {
                rq.pdu_mut().retries += 1;
                MapCounters::count(&rq.queue_data().counters.requeues);
                rq.requeue(true)
            }
            res => {
                if let Some(s) = rq.queue_data().queue_stats(queue) {
                    s.done(op, fua, len, res.is_ok());
                }
                // The target does not know the export any more (deleted,
                // and its notice lost): the disk is dead, as on the notice.
                if matches!(res, Err(e) if e == ENODEV) && !dead {
                    let shared: Arc<Shared> = rq.queue_data().into();
                    shared.export_gone();
                }
                // Out of retries: a transport error (BLK_STS_TRANSPORT),
                // which multipath may fail over.
                let res = match res {
                    Err(e) if (e == ECONNABORTED || e == ESTALE) && !dead => Err(ENOLINK),
                    res => res,
                };
                rq.end(res);
            }
        }
    }
}

#[vtable]
impl Operations for Blk {
    type QueueData = Arc<Shared>;
    type Pdu = Pdu;

    fn init_pdu(pdu: &mut Pdu) -> Result {
        let idle = Sent {
            rq: None,
            op: Op::Read,
            fua: false,
            queue: 0,
        };
        pdu.req = Some(Request::new(&[0; wire::IO_LEN], 0, idle, GFP_KERNEL)?);
        Ok(())
    }

    fn queue_rq(
        shared: ArcBorrow<'_, Shared>,
        hw_queue: u32,
        mut rq: Owned<Self>,
        _last: bool,
    ) -> Queued<Self> {
        if rq.first_dispatch() {
            rq.pdu_mut().retries = 0;
        }
        // A request that fails here is counted as one that failed.
        let failed = |rq, e| {
            if let Some(s) = shared.queue_stats(hw_queue) {
                s.failed_unsent();
            }
            Queued::Failed(rq, e)
        };
        if shared.dead.load(Acquire) {
            return failed(rq, EIO);
        }
        let Some(session) = shared.session.as_ref() else {
            return failed(rq, EIO);
        };
        if !shared.ready.load(Acquire) {
            // Disconnected beyond the fast-fail time: a transport error
            // (BLK_STS_TRANSPORT), at once.
            if shared.failing_fast.load(Acquire) {
                MapCounters::count(&shared.counters.fast_failed);
                return failed(rq, ENOLINK);
            }
            // Reconnecting (the queues are being quiesced): soon again.
            return Queued::Busy(rq);
        }
        let Some(io) = Io::from_block(
            rq.op(),
            rq.flags(),
            shared.handle.load(Relaxed),
            rq.sector(),
            rq.bytes(),
        ) else {
            return failed(rq, EOPNOTSUPP);
        };
        let (op, fua) = match io.op {
            IoOp::Read => (Op::Read, false),
            IoOp::Write => (Op::Write, io.flags & wire::IO_FUA != 0),
            IoOp::Flush => (Op::Flush, false),
            IoOp::Discard => (Op::Discard, false),
            IoOp::WriteZeroes => (Op::WriteZeroes, false),
        };
        let ctx = Sent {
            rq: None,
            op,
            fua,
            queue: hw_queue,
        };
        let mut req = match rq.pdu_mut().req.take() {
            Some(mut r) => {
                r.ctx = ctx;
                r
            }
            // Not taken: `init_pdu` made one, and every path gives it back.
            // Should one be lost, it is made again rather than the tag
            // lost with it.
            None => match Request::new(&[0; wire::IO_LEN], 0, ctx, GFP_ATOMIC) {
                Ok(r) => r,
                Err(_) => return Queued::Busy(rq),
            },
        };
        // Never allocates: the header's room was made with the request.
        if req.set_header(&io.encode(), GFP_ATOMIC).is_err() {
            rq.pdu_mut().req = Some(req);
            return failed(rq, EIO);
        }
        let tag = rq.tag();
        match io.op {
            IoOp::Read | IoOp::Write => match RqData::map(rq) {
                Ok(data) => {
                    let dir = if io.op == IoOp::Read {
                        Dir::FromPeer
                    } else {
                        Dir::ToPeer
                    };
                    req.set_data(dir, data);
                }
                Err(mut rq) => {
                    rq.pdu_mut().req = Some(req);
                    return failed(rq, EIO);
                }
            },
            _ => req.ctx.rq = Some(rq),
        }
        // CAST: hardware queues are at most ferry's 64 channels.
        match session.submit_tagged(hw_queue as u16, tag, req, Wait::No) {
            Ok(()) => Queued::Taken,
            Err((e, mut req)) => {
                let rq = match req.take_data() {
                    Some(d) => Some(d.into_request()),
                    None => req.ctx.rq.take(),
                };
                let Some(mut rq) = rq else {
                    return Queued::Taken;
                };
                rq.pdu_mut().req = Some(req);
                if e == EAGAIN || e == EBUSY {
                    // blk-mq tries again shortly (ferry's `writable` also
                    // reruns the queues, but could come before blk-mq has
                    // parked the request).
                    Queued::Busy(rq)
                } else {
                    failed(rq, e)
                }
            }
        }
    }

    fn poll(shared: ArcBorrow<'_, Shared>, hw_queue: u32) -> u32 {
        // Polled hardware queue `q` is polled channel `q` (`Mapping::new`):
        // its answers end their requests in this thread, as nvme-rdma's
        // `ib_process_cq_direct`. (0 while another thread processes them.)
        // CAST: as in `queue_rq`.
        shared.session.as_ref().map_or(0, |s| {
            s.poll_channel(hw_queue as u16, POLL_BUDGET).unwrap_or(0)
        })
    }

    fn timeout(shared: ArcBorrow<'_, Shared>, rq: TimedOut) -> TimeoutAction {
        MapCounters::count(&shared.counters.timeouts);
        // As nvme-rdma: the connection is reset (a lost answer, a stalled
        // QP), and the requests go again once it is back (a slow link or
        // disk wants a larger `io_timeout`). Its requests complete with ECONNABORTED, and are
        // requeued; until then the timer runs again. A channel that is not
        // up is failing already: its request completes once it is torn
        // down (the session reconnects only then).
        // CAST: as in `queue_rq`.
        match shared
            .session
            .as_ref()
            .map(|s| s.reset_channel(rq.hw_queue as u16))
        {
            Some(Ok(())) => crate::ratelimit::pr_warn_limited!(
                "ferryblk{}: a {:?} at sector {} (tag {}) timed out on queue {}: its channel reset\n",
                shared.index,
                rq.op,
                rq.sector,
                rq.tag,
                rq.hw_queue
            ),
            Some(Err(e)) if e == ENOTCONN => {}
            Some(Err(e)) => crate::ratelimit::pr_warn_limited!(
                "ferryblk{}: a {:?} at sector {} (tag {}) timed out on queue {}, which could not be reset ({:?})\n",
                shared.index,
                rq.op,
                rq.sector,
                rq.tag,
                rq.hw_queue,
                e
            ),
            // (No session: the map failed before its disk was made.)
            None => {}
        }
        TimeoutAction::ResetTimer
    }
}

impl Shared {
    /// The counters of hardware queue `q`: always there (made, one per
    /// queue, before the disk whose queues they count).
    fn queue_stats(&self, q: u32) -> Option<&IoStats> {
        self.stats.as_ref().and_then(|s| s.get(q as usize))
    }

    /// The disk, while it has one: a reference to keep past the RCU
    /// section (what is done with it may sleep).
    fn disk(&self) -> Option<Arc<Disk<Blk>>> {
        self.disk.get_arc()
    }

    /// Runs the disk's queues (requests that found no room go again).
    fn run_queues(&self) {
        if let Some(d) = self.disk() {
            d.run_queues(true);
        }
    }

    /// Lets the queues go again if `down` quiesced them (under `conn`).
    fn resume(&self, conn: &mut Conn) {
        if core::mem::take(&mut conn.quiesced) {
            if let Some(d) = self.disk() {
                d.unquiesce();
            }
        }
    }

    /// The target deleted the export: the disk dies, off the completion
    /// that told.
    fn export_gone(self: &Arc<Self>) {
        if !self.dead.load(Acquire) && !self.deleted.swap(true, AcqRel) {
            self.notice();
        }
    }

    /// Acts on the target's notices on the module's queue, off the
    /// completion they came on.
    fn notice(self: &Arc<Self>) {
        // While the module unloads it has no mappings any more. Already
        // queued: that run sees what was stored before.
        if let Ok(state) = crate::State::get() {
            let _ = state.notices.queue().enqueue(self.clone());
        }
    }

    /// Tells listeners (`ferryctl monitor`) the disk's capacity and state.
    fn changed(&self) {
        if !self.announced.load(Acquire) {
            return;
        }
        if let Some(d) = self.disk() {
            crate::events::map_changed(
                self.index,
                &self.open.name,
                d.name(),
                d.capacity(),
                self.state(),
            );
        }
    }

    /// Its state (`ma::STATE_*`): dead, live (requests go), failing fast,
    /// or connecting.
    fn state(&self) -> u32 {
        if self.dead.load(Acquire) {
            ma::STATE_DEAD
        } else if self.ready.load(Acquire) {
            ma::STATE_LIVE
        } else if self.failing_fast.load(Acquire) {
            ma::STATE_FAILING_FAST
        } else {
            ma::STATE_CONNECTING
        }
    }

    /// Once a second (the module's tick), while it is disconnected: fails
    /// requests fast past its fast-fail time, gives up (the disk dead) past
    /// its give-up time, sends again a reopen the target refused for now,
    /// and resets the connection of a reopen the target has not answered
    /// for [`REOPEN_TIMEOUT_S`]. `s`: its session.
    fn tick(self: &Arc<Self>, s: &SessionRef) {
        let mut conn = self.conn.lock();
        // (Not opened yet: the map's own open waits with its deadline.)
        if self.dead.load(Acquire) || self.ready.load(Acquire) || self.handle.load(Relaxed) == 0 {
            return;
        }
        let Some(since) = conn.down_since else {
            return;
        };
        let down_ms = since.elapsed().as_millis();
        self.counters
            .disconnected(u64::try_from(down_ms).unwrap_or(0));
        let fast_fail = i64::from(self.fast_fail_s.load(Relaxed)) * 1000;
        if fast_fail != 0 && down_ms >= fast_fail && !self.failing_fast.load(Acquire) {
            self.failing_fast.store(true, Release);
            pr_warn!(
                "ferryblk{}: disconnected for {} ms: failing its I/O at once until it is back\n",
                self.index,
                down_ms
            );
            self.changed();
            // The requests waiting on the quiesced queues go, and fail.
            self.resume(&mut conn);
            self.run_queues();
        }
        if down_ms >= i64::from(self.give_up_s.load(Relaxed)) * 1000 {
            pr_err!(
                "ferryblk{}: disconnected for {} ms, past its give-up time: the disk is dead\n",
                self.index,
                down_ms
            );
            return self.kill_locked(&mut conn, "gave up reconnecting");
        }
        let again = core::mem::take(&mut conn.reopen_again);
        let late = conn.reopen.is_some_and(|(_, sent)| {
            sent.elapsed().as_millis() >= i64::from(REOPEN_TIMEOUT_S) * 1000
        });
        if late {
            conn.reopen = None;
        }
        drop(conn);
        if again {
            self.reopen(s);
        }
        if late {
            pr_warn!(
                "ferryblk{}: the target did not answer the reopen in {} s: reconnecting\n",
                self.index,
                REOPEN_TIMEOUT_S
            );
            if let Ok(l) = s.limits() {
                for q in 0..l.channels {
                    let _ = s.reset_channel(q);
                }
            }
        }
    }

    /// Fails the mapping: every request from now on, and those waiting.
    fn kill(&self, why: &str) {
        let mut conn = self.conn.lock();
        self.kill_locked(&mut conn, why);
    }

    /// [`Self::kill`], under `conn`'s lock.
    fn kill_locked(&self, conn: &mut Conn, why: &str) {
        if !self.dead.swap(true, Release) {
            if let Some(d) = self.disk() {
                pr_warn!("{}: {}: failing its I/O\n", d.name(), why);
            }
            self.changed();
        }
        self.resume(conn);
        self.run_queues();
    }

    /// The connection was lost (`down`): requests wait (the queues are
    /// quiesced) until the export is open on a new one.
    fn lost(&self) {
        let mut conn = self.conn.lock();
        // Any reopen of the lost connection is stale now.
        conn.reopen = None;
        conn.reopen_again = false;
        if !self.ready.load(Acquire) {
            return;
        }
        conn.down_since = Some(Instant::now());
        self.ready.store(false, Release);
        MapCounters::count(&self.counters.reconnects);
        if !core::mem::replace(&mut conn.quiesced, true) {
            if let Some(d) = self.disk() {
                d.quiesce();
            }
        }
        self.changed();
    }

    /// Sends the open again on the new connection of session `s`.
    fn reopen(self: &Arc<Self>, s: &SessionRef) {
        self.reopen_pending.store(false, Relaxed);
        let attempt = {
            let mut conn = self.conn.lock();
            if self.ready.load(Acquire) || self.dead.load(Acquire) {
                return;
            }
            let attempt = self.attempt.fetch_add(1, Relaxed).wrapping_add(1);
            conn.reopen = Some((attempt, Instant::now()));
            conn.reopen_again = false;
            attempt
        };
        let open = Open {
            attempt,
            ..self.open
        };
        let req = match Request::new(
            &open.encode(),
            wire::OPENED_LEN,
            OpenCtx::Reopen(self.clone(), attempt),
            GFP_KERNEL,
        ) {
            Ok(r) => r,
            Err(_) => return self.kill("no memory to open the export again"),
        };
        // (Out of `conn`'s lock: a request may end before `submit` returns.)
        match s.submit(req, Wait::No) {
            Ok(()) => {}
            // `writable` tries again.
            Err((e, _)) if e == EAGAIN => self.reopen_pending.store(true, Relaxed),
            Err(_) => self.kill("could not open the export again"),
        }
    }

    /// The target answered reopen number `attempt` with `res`.
    fn reopened(self: &Arc<Self>, attempt: u32, res: Result<Opened>) {
        let mut conn = self.conn.lock();
        // An answer on a connection lost since, or to an open sent again
        // since: the last one's answer decides.
        // (Dead meanwhile: an answer that waited for `notices` changes
        // nothing.)
        if conn.reopen.map(|(a, _)| a) != Some(attempt) || self.dead.load(Acquire) {
            return;
        }
        conn.reopen = None;
        match res {
            // Another disk under the export's name (the target exported
            // another device, or another target took the address): not one
            // request goes to it.
            Ok(o) if self.id.as_ref() != Some(&o.id) => {
                pr_err!(
                    "ferryblk{}: export {} at the target is another disk now (identity {:?}, was {:?}): the disk is dead\n",
                    self.index,
                    self.open.name,
                    Uuid(&o.id),
                    Uuid(self.id.as_ref().unwrap_or(&[0; 16]))
                );
                self.kill_locked(&mut conn, "the target's export has another identity");
            }
            // The same disk: its handle may be another (the target's module
            // was loaded again, and numbers its exports anew), which the
            // requests name from now on (each is encoded as it goes).
            Ok(o) if o.logical_block_size == self.logical_block_size.load(Relaxed) => {
                self.handle.store(o.handle, Relaxed);
                // A new capacity is set as a notice's is, off this
                // completion, after any notice that came before.
                if self.disk().is_some_and(|d| d.capacity() != o.sectors) {
                    self.resize.store(o.sectors, Release);
                    self.notice();
                }
                if let Some(since) = conn.down_since.take() {
                    let ms = since.elapsed().as_millis();
                    self.counters.reconnected(u64::try_from(ms).unwrap_or(0));
                }
                let was_failing = self.failing_fast.swap(false, AcqRel);
                self.ready.store(true, Release);
                if was_failing {
                    pr_info!("ferryblk{}: live again\n", self.index);
                }
                self.changed();
                self.resume(&mut conn);
                self.run_queues();
            }
            Ok(_) => self.kill_locked(
                &mut conn,
                "the export's block size changed while the session was down",
            ),
            // The target still has operations of the mapping's earlier
            // connection at work (a write there must land before any newer
            // one goes): it waited a while; the tick sends the open again.
            Err(e) if e == EAGAIN => {
                MapCounters::count(&self.counters.fenced);
                conn.reopen_again = true;
                crate::ratelimit::pr_info_limited!(
                    "ferryblk{}: the target still has operations of the earlier connection at work: opening again\n",
                    self.index
                );
            }
            // The target has no such export, now: it may be starting (its
            // listener up before its exports, after a reboot or a reload).
            // The tick opens again, until the give-up time; a deletion is
            // told by its notice, or by the answer to a request on the
            // connection that had the export open.
            Err(e) if e == ENODEV => {
                conn.reopen_again = true;
                crate::ratelimit::pr_info_limited!(
                    "ferryblk{}: the target has no export {} (yet): opening again\n",
                    self.index,
                    self.open.name
                );
            }
            // The connection failed under the open: the next `up` sends it
            // again.
            Err(e) if e == ECONNABORTED => {}
            Err(_) => self.kill_locked(&mut conn, "the target refused to open the export again"),
        }
    }
}

/// A mapping's session callbacks.
struct ClientHandler {
    shared: Arc<Shared>,
}

impl Handler for ClientHandler {
    fn down(&self, _s: &SessionRef, _err: Error) {
        // The requests in flight come back (and are requeued); the others
        // wait until the export is open on the new connection.
        self.shared.lost();
    }

    fn up(&self, s: &SessionRef) {
        // The first `up` is the map's own: it opens the export itself.
        let opened = self.shared.handle.load(Relaxed) != 0;
        if opened && !self.shared.ready.load(Acquire) && !self.shared.dead.load(Acquire) {
            self.shared.reopen(s);
        }
    }

    fn writable(&self, _s: &SessionRef, qid: u16) {
        // In softirq (`softirq` in the session's parameters): the open that
        // waits for room goes from `notices`.
        if self.shared.reopen_pending.load(Relaxed) {
            self.shared.notice();
        }
        // Hardware queue `qid` submits on channel `qid` alone (`queue_rq`):
        // the others did not wait for this one's room. (A refusal of the
        // session's, while it reconnected, is told with the first channel
        // that has room: the reconnect runs every queue, and blk-mq runs a
        // queue whose request found no room again within 3 ms.) blk-mq's
        // worker runs it; the disk is borrowed under RCU (a reference
        // dropped here could be the last).
        let guard = rcu::read_lock();
        if let Some(d) = self.shared.disk.get(&guard) {
            d.run_queue(u32::from(qid), true);
        }
    }

    fn message(&self, s: &SessionRef, data: &[u8]) {
        let handle = self.shared.handle.load(Relaxed);
        match Notice::decode(data) {
            // A capacity in whole logical blocks only.
            Ok(Notice::Resized { handle: h, sectors })
                if h == handle
                    && sectors
                        % u64::from(self.shared.logical_block_size.load(Relaxed) / 512).max(1)
                        != 0 =>
            {
                crate::ratelimit::pr_warn_limited!(
                    "client: session {}: ignored a resize to {} sectors, not in whole blocks\n",
                    s.id(),
                    sectors
                );
            }
            Ok(Notice::Resized { handle: h, sectors }) if h == handle => {
                self.shared.resize.store(sectors, Release);
                self.shared.notice();
            }
            Ok(Notice::Deleted { handle: h }) if h == handle => self.shared.export_gone(),
            // Of another export (of an earlier connection): not ours.
            Ok(_) => {}
            Err(_) => {
                crate::ratelimit::pr_warn_limited!(
                    "client: session {}: ignored a malformed notice from the target\n",
                    s.id()
                );
            }
        }
    }

    fn gone(&self, _s: &SessionRef, err: Option<Error>) {
        if err.is_some() {
            self.shared.kill("the session to the target is gone");
        }
    }
}

/// A UUID, printed as one (`0123abcd-...`).
pub(crate) struct Uuid<'a>(pub(crate) &'a [u8; 16]);

impl core::fmt::Debug for Uuid<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{:02x}", b)?;
        }
        Ok(())
    }
}

/// What an [`Open`] request's answer is awaited with.
#[pin_data]
struct OpenWait {
    /// Written by the open's `done`, in softirq.
    #[pin]
    answer: SpinLockIrq<Option<Result<Opened>>>,
    #[pin]
    done: CondVar,
}

/// The context of an [`Open`] request: a map's first, awaited, or one sent
/// again after a reconnect (with its number).
enum OpenCtx {
    Wait(Arc<OpenWait>),
    Reopen(Arc<Shared>, u32),
}

impl Done for OpenCtx {
    fn done(req: KBox<Request<Self>>) {
        let answer = req.status().and_then(|()| {
            Opened::decode(req.response()).map_err(|_| {
                crate::ratelimit::pr_warn_limited!(
                    "client: the target's answer to an open is malformed ({} bytes)\n",
                    req.response().len()
                );
                EPROTO
            })
        });
        match &req.ctx {
            OpenCtx::Wait(w) => {
                *w.answer.lock() = Some(answer);
                w.done.notify_all();
            }
            // (In softirq: acted on by `notices`; a later answer replaces
            // an earlier one, which `reopened` would have ignored.)
            OpenCtx::Reopen(shared, attempt) => {
                *shared.reopen_answer.lock() = Some((*attempt, answer));
                shared.notice();
            }
        }
    }
}

/// What a mapping is asked for.
pub(crate) struct MapParams<'a> {
    /// The network namespace to connect in: the asker's.
    pub(crate) net: NetNs<'a>,
    pub(crate) peer: Peer,
    pub(crate) export: ExportName,
    pub(crate) read_only: bool,
    /// Channels, and so hardware queues, besides the polled ones (0: one
    /// per CPU).
    pub(crate) channels: u16,
    /// Polled hardware queues after them, each on a polled channel.
    pub(crate) poll_queues: u16,
    /// Requests in flight per queue (0: ferry's default).
    pub(crate) depth: u32,
    /// A pre-shared key's name, of the namespace's keys.
    pub(crate) key: Option<CString>,
    /// Seconds disconnected before requests fail at once (0: never).
    pub(crate) fast_fail_s: u32,
    /// Seconds disconnected before the disk is dead.
    pub(crate) give_up_s: u32,
    /// The longest wait between reconnect attempts, in seconds.
    pub(crate) reconnect_delay_s: u32,
}

/// A mapping's times (see [`Mapping::timers`]), in seconds.
pub(crate) struct Timers {
    /// Disconnected before requests fail at once (0: never).
    pub(crate) fast_fail_s: u32,
    /// Disconnected before the disk is dead.
    pub(crate) give_up_s: u32,
    /// The longest wait between reconnect attempts.
    pub(crate) reconnect_delay_s: u32,
}

/// A mapped export.
pub(crate) struct Mapping {
    /// N of the disk `ferryblkN`: free again when the mapping goes, after
    /// its disk was deleted.
    index: DiskIndex,
    pub(crate) export: ExportName,
    peer: Peer,
    read_only: bool,
    /// Hardware queues, and how many of them (the last) are polled.
    queues: (u16, u16),
    shared: Arc<Shared>,
    disk: Arc<Disk<Blk>>,
    session: Session<ClientHandler>,
}

impl Mapping {
    /// Opens a session to the target, opens the export and adds the disk
    /// `ferryblk{index}`. Sleeps.
    pub(crate) fn new(index: DiskIndex, p: &MapParams<'_>) -> Result<Self> {
        let number = index.get();
        let open = Open {
            name: p.export,
            read_only: p.read_only,
            mapping: u64::from(crate::work::random_u32()) << 32
                | u64::from(crate::work::random_u32()),
            attempt: 0,
        };
        let shared = Arc::pin_init(
            pin_init!(Shared {
                index: number,
                session: SetOnce::new(),
                open,
                id: SetOnce::new(),
                handle: AtomicU32::new(0),
                logical_block_size: AtomicU32::new(0),
                ready: AtomicBool::new(false),
                conn <- new_mutex!(Conn::default()),
                reopen_pending: AtomicBool::new(false),
                dead: AtomicBool::new(false),
                announced: AtomicBool::new(false),
                disk: RcuCell::new(),
                stats: SetOnce::new(),
                notices <- new_work!("ferry_blk::Shared::notices"),
                resize: AtomicU64::new(NO_RESIZE),
                deleted: AtomicBool::new(false),
                removing: AtomicBool::new(false),
                reopen_answer <- new_spinlock_irq!(None),
                fast_fail_s: AtomicU32::new(p.fast_fail_s),
                give_up_s: AtomicU32::new(p.give_up_s.max(1)),
                reconnect_delay_s: AtomicU32::new(p.reconnect_delay_s),
                failing_fast: AtomicBool::new(false),
                attempt: AtomicU32::new(0),
                counters: MapCounters::default(),
            }),
            GFP_KERNEL,
        )?;
        let mut params = Params::new(p.peer, wire::SERVICE);
        params.channels = p.channels;
        params.poll_channels = p.poll_queues;
        params.queue_depth = p.depth;
        params.preregister = true;
        // The target only answers and tells (messages): the channels keep
        // no room for requests from it.
        params.no_requests = true;
        // Answers end their requests in softirq, as nvme-rdma's: no thread
        // is woken per I/O (the callbacks below never sleep).
        params.softirq = true;
        params.net = Some(p.net);
        params.key = p.key.as_deref();
        // ferry_blk gives up by itself, after its own time (which may be
        // changed live): the session reconnects as long as ferry allows.
        params.give_up_s = MAX_GIVE_UP_S;
        params.reconnect_delay_s = p.reconnect_delay_s;
        let handler = Arc::new(
            ClientHandler {
                shared: shared.clone(),
            },
            GFP_KERNEL,
        )?;
        let session = Session::open(&params, handler)?;
        shared.session.populate(session.to_owned());
        let opened = open_export(&session, &open)?;
        if opened.handle == 0 {
            return Err(EPROTO);
        }
        shared.id.populate(opened.id);
        shared
            .logical_block_size
            .store(opened.logical_block_size, Relaxed);
        shared.handle.store(opened.handle, Relaxed);
        let limits = session.limits()?;
        // One hardware queue per channel: hardware queue `q` submits on
        // channel `q` alone, the polled ones last on both sides.
        let queues = limits.channels;
        let tag_set = Arc::pin_init(
            TagSet::new(TagSetConfig {
                hw_queues: u32::from(queues - limits.poll_channels),
                poll_queues: u32::from(limits.poll_channels),
                depth: limits.queue_depth,
                timeout_ms: TIMEOUT_MS,
            }),
            GFP_KERNEL,
        )?;
        // Every request fits one ferry request: its bytes, its segments,
        // each segment's boundaries and alignment.
        let max_bytes = limits
            .max_data
            .min((SEGMENTS * kernel::page::PAGE_SIZE) as u32);
        let disk_limits = Limits {
            logical_block_size: opened.logical_block_size,
            physical_block_size: opened.physical_block_size,
            max_hw_sectors: max_bytes / 512,
            max_segments: u16::try_from(limits.max_segments.min(SEGMENTS as u32)).unwrap_or(1),
            max_segment_size: 0,
            virt_boundary_mask: u64::from(limits.virt_boundary_mask),
            // ferry's 0 ("registrations map any byte offset") is the block
            // layer's default of a sector: the least it takes below that is
            // what nvme-rdma declares, 4 bytes (mask 3).
            dma_alignment: if limits.dma_alignment == 0 {
                DMA_ALIGNMENT
            } else {
                limits.dma_alignment
            },
            max_discard_sectors: opened.max_discard_sectors,
            discard_granularity: opened.discard_granularity,
            max_write_zeroes_sectors: opened.max_write_zeroes_sectors,
            write_cache: opened.write_cache,
            fua: opened.fua,
            rotational: opened.rotational,
        };
        let mut stats = KVec::with_capacity(usize::from(queues), GFP_KERNEL)?;
        for _ in 0..queues {
            stats.push(IoStats::default(), GFP_KERNEL)?;
        }
        shared.stats.populate(stats);
        let name = CString::try_from_fmt(fmt!("ferryblk{}", number))?;
        // Open: requests may go (adding the disk reads its partition table).
        shared.ready.store(true, Release);
        let disk = Arc::new(
            Disk::add(
                &name,
                tag_set,
                disk_limits,
                opened.sectors,
                opened.read_only || p.read_only,
                Some(opened.id),
                shared.clone(),
            )?,
            GFP_KERNEL,
        )?;
        shared.disk.set(Some(disk.clone()));
        Ok(Self {
            index,
            export: p.export,
            peer: p.peer,
            read_only: opened.read_only || p.read_only,
            queues: (queues, limits.poll_channels),
            shared,
            disk,
            session,
        })
    }

    /// N of the disk `ferryblkN`.
    pub(crate) fn index(&self) -> u32 {
        self.index.get()
    }

    /// The export's identity, as the target said at the map.
    pub(crate) fn id(&self) -> &[u8; 16] {
        self.shared.id.as_ref().unwrap_or(&[0; 16])
    }

    /// The disk's name.
    pub(crate) fn disk_name(&self) -> &CStr {
        self.disk.name()
    }

    /// The target's address and port.
    pub(crate) fn peer_addr(&self) -> (&[u8], u16) {
        self.peer.ip_port()
    }

    /// Whether it is mapped read-only.
    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// The disk's capacity, in sectors.
    pub(crate) fn sectors(&self) -> u64 {
        self.disk.capacity()
    }

    /// The session's id (`ferryctl session show`).
    pub(crate) fn session_id(&self) -> u32 {
        self.session.id()
    }

    /// Whether the disk is open.
    pub(crate) fn in_use(&self) -> bool {
        self.disk.openers() > 0
    }

    /// Its `map-add-ntf` went out: later changes are told too.
    pub(crate) fn announced(&self) {
        self.shared.announced.store(true, Release);
    }

    /// The counters, summed over the queues.
    pub(crate) fn stats(&self) -> IoCounts {
        IoCounts::sum(self.shared.stats.as_ref().map_or(&[][..], |s| &s[..]))
    }

    /// Requests at work: blk-mq started them and the driver has not ended
    /// or requeued them yet (counted now, over the tags: the data path
    /// counts nothing for it).
    pub(crate) fn inflight(&self) -> u32 {
        self.disk.busy()
    }

    /// Its state (`ma::STATE_*`).
    pub(crate) fn state(&self) -> u32 {
        self.shared.state()
    }

    /// What it counted of its connection: reconnects, requeues,
    /// fast-failed, timeouts, fenced reopens, seconds disconnected.
    pub(crate) fn counters(&self) -> [u64; 6] {
        self.shared.counters.counts()
    }

    /// Its hardware queues: those whose requests complete by themselves,
    /// and the polled ones after them.
    pub(crate) fn queues(&self) -> (u16, u16) {
        (self.queues.0 - self.queues.1, self.queues.1)
    }

    /// Its fast-fail, give-up and reconnect-delay times, in seconds.
    pub(crate) fn timers(&self) -> Timers {
        Timers {
            fast_fail_s: self.shared.fast_fail_s.load(Relaxed),
            give_up_s: self.shared.give_up_s.load(Relaxed),
            reconnect_delay_s: self.shared.reconnect_delay_s.load(Relaxed),
        }
    }

    /// Changes its fast-fail, give-up and reconnect-delay times (those
    /// given), live: fast-fail and give-up count from when the connection
    /// was lost; a lower reconnect delay also cuts a longer wait short.
    pub(crate) fn set_timers(
        &self,
        fast_fail_s: Option<u32>,
        give_up_s: Option<u32>,
        reconnect_delay_s: Option<u32>,
    ) -> Result {
        if let Some(r) = reconnect_delay_s {
            self.session.set_reconnect_delay(r)?;
            self.shared.reconnect_delay_s.store(r, Relaxed);
        }
        if let Some(f) = fast_fail_s {
            self.shared.fast_fail_s.store(f, Relaxed);
        }
        if let Some(g) = give_up_s {
            self.shared.give_up_s.store(g.max(1), Relaxed);
        }
        Ok(())
    }

    /// Once a second: see [`Shared::tick`].
    pub(crate) fn tick(&self) {
        Shared::tick(&self.shared, &self.session);
    }

    /// Whether the target can be reached: requests would go (a mapping whose
    /// session reconnects can only be removed by force).
    pub(crate) fn reachable(&self) -> bool {
        self.shared.ready.load(Acquire) || self.shared.dead.load(Acquire)
    }

    /// Removes the disk and closes the session. `force`: fails the I/O
    /// waiting or in flight first (the target may be gone); otherwise the
    /// disk's requests drain. Sleeps.
    pub(crate) fn remove(&self, force: bool) {
        // No notice acts on the disk from here on (but the reopen's answer,
        // as the callback did): one at work ends first.
        self.shared.removing.store(true, Release);
        if let Ok(state) = crate::State::get() {
            state.notices.flush();
        }
        if force {
            self.fail_all();
        }
        // The callbacks still reach the disk while it is deleted: a request
        // that waits for room, or for the session, can go or fail.
        self.disk.delete();
        self.shared.disk.set(None);
        // Then, when the mapping is dropped, the fields go: the disk's
        // memory, then the session.
    }

    /// Fails the I/O waiting or in flight, and every request from now on.
    fn fail_all(&self) {
        self.disk.mark_dead();
        if let Ok(l) = self.session.limits() {
            for q in 0..l.channels {
                let _ = self.session.reset_channel(q);
            }
        }
        self.shared.kill("unmapped by force");
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Not removed (a failed map's end): by force.
        if self.shared.disk.get_arc().is_some() {
            self.shared.removing.store(true, Release);
            self.fail_all();
            self.disk.delete();
            self.shared.disk.set(None);
        }
    }
}

/// Sends `open` and waits for the target's answer (at most
/// [`OPEN_TIMEOUT_MS`], or until a signal).
fn open_export(session: &SessionRef, open: &Open) -> Result<Opened> {
    let wait = Arc::pin_init(
        pin_init!(OpenWait {
            answer <- new_spinlock_irq!(None),
            done <- new_condvar!(),
        }),
        GFP_KERNEL,
    )?;
    let req = Request::new(
        &open.encode(),
        wire::OPENED_LEN,
        OpenCtx::Wait(wait.clone()),
        GFP_KERNEL,
    )?;
    session.submit(req, Wait::Yes).map_err(|(e, _)| e)?;
    let mut answer = wait.answer.lock();
    loop {
        if let Some(a) = answer.take() {
            return a;
        }
        // (The request's context keeps `wait` for its answer, whenever the
        // session ends it.)
        match wait
            .done
            .wait_interruptible_timeout(&mut answer, msecs_to_jiffies(OPEN_TIMEOUT_MS))
        {
            CondVarTimeoutResult::Woken { .. } => {}
            CondVarTimeoutResult::Timeout => return Err(ETIMEDOUT),
            CondVarTimeoutResult::Signal { .. } => return Err(EINTR),
        }
    }
}
