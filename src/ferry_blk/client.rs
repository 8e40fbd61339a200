// SPDX-License-Identifier: GPL-2.0

//! The client: a target's export mapped as a local disk, `/dev/ferryblkN`.
//!
//! A mapping is one ferry session to the target's service, opened with
//! every FRWR region registered up front (`FERRY_PREREGISTER`), and one
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
    AtomicBool, AtomicU32,
    Ordering::{Acquire, Relaxed, Release},
};
use kernel::{
    new_mutex,
    prelude::*,
    str::CString,
    sync::{Arc, ArcBorrow, Completion, Mutex, SetOnce},
};

use crate::{
    blk_ferry::{HasSgTable, RqData, SEGMENTS},
    block::{
        disk::{Disk, Limits},
        mq::{Operations, Owned, Queued, SgTable, TagSet, TagSetConfig, TimedOut, TimeoutAction},
    },
    ferry_api::{
        Dir, Done, Handler, Params, Peer, Request, Session, SessionHandle, SessionRef, Wait,
    },
    stats::{IoStats, Op},
    wire::{self, ExportName, Io, IoOp, Notice, Open, Opened},
};

/// How long blk-mq lets a request run before [`Blk::timeout`] resets its
/// channel.
const TIMEOUT_MS: u32 = 30_000;

/// The block driver of every mapping.
pub(crate) struct Blk;

/// A block request's ferry side, in its PDU.
#[derive(Default)]
pub(crate) struct Pdu {
    sg: SgTable<SEGMENTS>,
    /// The ferry request it goes out as: made on the tag's first use, then
    /// kept (ferry hands it back when the request is over).
    req: Option<KBox<Request<Sent, RqData<Blk>>>>,
}

impl HasSgTable for Pdu {
    fn sg_table(&self) -> &SgTable<SEGMENTS> {
        &self.sg
    }
}

/// What a mapping's queues, its session's callbacks and its requests
/// share.
#[pin_data]
pub(crate) struct Shared {
    /// The session, once open.
    session: SetOnce<SessionHandle>,
    /// The export's handle at the target, once opened.
    handle: AtomicU32,
    /// No more I/O: unmapped, or the export or the session is gone.
    dead: AtomicBool,
    /// The disk, once added (taken out again at unmap).
    #[pin]
    disk: Mutex<Option<Arc<Disk<Blk>>>>,
    pub(crate) stats: IoStats,
}

/// What a block request's ferry request carries.
pub(crate) struct Sent {
    shared: Option<Arc<Shared>>,
    /// The block request, when it has no data (else the data holds it).
    rq: Option<Owned<Blk>>,
    op: Op,
    fua: bool,
}

impl Done<RqData<Blk>> for Sent {
    fn done(mut req: KBox<Request<Sent, RqData<Blk>>>) {
        let status = req.status();
        let (op, fua) = (req.ctx.op, req.ctx.fua);
        let shared = req.ctx.shared.take();
        let rq = match req.take_data() {
            Some(d) => Some(d.into_request()),
            None => req.ctx.rq.take(),
        };
        let Some(mut rq) = rq else {
            return;
        };
        let len = rq.bytes();
        rq.pdu_mut().req = Some(req);
        let dead = shared.as_ref().is_none_or(|s| s.dead.load(Acquire));
        match status {
            // The connection failed before the answer: once the session is
            // back, the request goes again (the target may have done it:
            // block operations may be repeated).
            Err(e) if e == ECONNABORTED && !dead => rq.requeue(true),
            res => {
                if let Some(s) = shared.as_ref() {
                    s.stats.done(op, fua, len, res.is_ok());
                }
                rq.end(res);
            }
        }
    }
}

#[vtable]
impl Operations for Blk {
    type QueueData = Arc<Shared>;
    type Pdu = Pdu;

    fn queue_rq(
        shared: ArcBorrow<'_, Shared>,
        hw_queue: u32,
        mut rq: Owned<Self>,
        _last: bool,
    ) -> Queued<Self> {
        if shared.dead.load(Acquire) {
            return Queued::Failed(rq, EIO);
        }
        let Some(session) = shared.session.as_ref() else {
            return Queued::Failed(rq, EIO);
        };
        let Some(io) = Io::from_block(
            rq.op(),
            rq.flags(),
            shared.handle.load(Relaxed),
            rq.sector(),
            rq.bytes(),
        ) else {
            return Queued::Failed(rq, EOPNOTSUPP);
        };
        let (op, fua) = match io.op {
            IoOp::Read => (Op::Read, false),
            IoOp::Write => (Op::Write, io.flags & wire::IO_FUA != 0),
            IoOp::Flush => (Op::Flush, false),
            IoOp::Discard => (Op::Discard, false),
            IoOp::WriteZeroes => (Op::WriteZeroes, false),
        };
        let ctx = Sent {
            shared: Some(shared.into()),
            rq: None,
            op,
            fua,
        };
        let mut req = match rq.pdu_mut().req.take() {
            Some(mut r) => {
                r.ctx = ctx;
                r
            }
            // The tag's first request: its ferry request is made now, and
            // kept for its next ones.
            None => match Request::new(&[0; wire::IO_LEN], 0, ctx, GFP_ATOMIC) {
                Ok(r) => r,
                Err(_) => return Queued::Busy(rq),
            },
        };
        // Never allocates: the header's room was made with the request.
        if req.set_header(&io.encode(), GFP_ATOMIC).is_err() {
            rq.pdu_mut().req = Some(req);
            return Queued::Failed(rq, EIO);
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
                    return Queued::Failed(rq, EIO);
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
                req.ctx.shared = None;
                let Some(mut rq) = rq else {
                    return Queued::Taken;
                };
                rq.pdu_mut().req = Some(req);
                if e == EAGAIN || e == EBUSY {
                    // ferry calls `writable` (or `up`) when there is room.
                    Queued::DevBusy(rq)
                } else {
                    Queued::Failed(rq, e)
                }
            }
        }
    }

    fn timeout(shared: ArcBorrow<'_, Shared>, rq: TimedOut) -> TimeoutAction {
        crate::ratelimit::pr_warn_limited!(
            "client: a request at sector {} timed out on queue {}: resetting its channel\n",
            rq.sector,
            rq.hw_queue
        );
        if let Some(s) = shared.session.as_ref() {
            // Its requests complete with ECONNABORTED, and are requeued.
            // CAST: as in `queue_rq`.
            let _ = s.reset_channel(rq.hw_queue as u16);
        }
        TimeoutAction::ResetTimer
    }
}

impl Shared {
    /// Runs the disk's queues (requests that found no room go again).
    fn run_queues(&self) {
        if let Some(d) = self.disk.lock().as_ref() {
            d.run_queues(true);
        }
    }
}

/// A mapping's session callbacks.
struct ClientHandler {
    shared: Arc<Shared>,
}

impl Handler for ClientHandler {
    fn up(&self, _s: &SessionRef) {
        self.shared.run_queues();
    }

    fn writable(&self, _s: &SessionRef, _qid: u16) {
        self.shared.run_queues();
    }

    fn message(&self, s: &SessionRef, data: &[u8]) {
        let handle = self.shared.handle.load(Relaxed);
        match Notice::decode(data) {
            Ok(Notice::Resized { handle: h, sectors }) if h == handle => {
                if let Some(d) = self.shared.disk.lock().as_ref() {
                    pr_info!("{}: resized to {} sectors\n", d.name(), sectors);
                    d.set_capacity(sectors);
                }
            }
            Ok(Notice::Deleted { handle: h }) if h == handle => {
                self.shared.dead.store(true, Release);
                if let Some(d) = self.shared.disk.lock().as_ref() {
                    pr_warn!("{}: the target deleted its export\n", d.name());
                    d.mark_dead();
                }
                self.shared.run_queues();
            }
            _ => {
                crate::ratelimit::pr_warn_limited!(
                    "client: session {}: ignored a malformed notice from the target\n",
                    s.id()
                );
            }
        }
    }

    fn gone(&self, _s: &SessionRef, err: Option<Error>) {
        if err.is_some() {
            // The target is gone for good: fail what waits.
            self.shared.dead.store(true, Release);
            self.shared.run_queues();
        }
    }
}

/// What an [`Open`] request's answer is awaited with.
#[pin_data]
struct OpenWait {
    #[pin]
    done: Completion,
    #[pin]
    answer: Mutex<Option<Result<Opened>>>,
}

/// The context of an [`Open`] request.
struct OpenCtx(Arc<OpenWait>);

impl Done for OpenCtx {
    fn done(req: KBox<Request<Self>>) {
        let answer = req
            .status()
            .and_then(|()| Opened::decode(req.response()).map_err(|r| r.errno()));
        *req.ctx.0.answer.lock() = Some(answer);
        req.ctx.0.done.complete_all();
    }
}

/// What a mapping is asked for.
pub(crate) struct MapParams {
    pub(crate) peer: Peer,
    pub(crate) export: ExportName,
    pub(crate) read_only: bool,
    /// Channels, and so hardware queues (0: one per CPU).
    pub(crate) channels: u16,
    /// Requests in flight per queue (0: ferry's default).
    pub(crate) depth: u32,
    /// A pre-shared key's name.
    pub(crate) key: Option<CString>,
}

/// A mapped export.
pub(crate) struct Mapping {
    pub(crate) index: u32,
    pub(crate) export: ExportName,
    peer: Peer,
    read_only: bool,
    shared: Arc<Shared>,
    disk: Arc<Disk<Blk>>,
    session: Session<ClientHandler>,
}

impl Mapping {
    /// Opens a session to the target, opens the export and adds the disk
    /// `ferryblk{index}`. Sleeps.
    pub(crate) fn new(index: u32, p: &MapParams) -> Result<Self> {
        let shared = Arc::pin_init(
            pin_init!(Shared {
                session: SetOnce::new(),
                handle: AtomicU32::new(0),
                dead: AtomicBool::new(false),
                disk <- new_mutex!(None),
                stats: IoStats::default(),
            }),
            GFP_KERNEL,
        )?;
        let mut params = Params::new(p.peer, wire::SERVICE);
        params.channels = p.channels;
        params.queue_depth = p.depth;
        params.preregister = true;
        params.key = p.key.as_deref();
        let handler = Arc::new(
            ClientHandler {
                shared: shared.clone(),
            },
            GFP_KERNEL,
        )?;
        let session = Session::open(&params, handler)?;
        shared.session.populate(session.to_owned());
        let opened = open_export(&session, p)?;
        shared.handle.store(opened.handle, Relaxed);
        let limits = session.limits()?;
        let tag_set = Arc::pin_init(
            TagSet::new(TagSetConfig {
                hw_queues: u32::from(limits.channels - limits.poll_channels),
                poll_queues: 0,
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
            dma_alignment: limits.dma_alignment,
            max_discard_sectors: opened.max_discard_sectors,
            discard_granularity: opened.discard_granularity,
            max_write_zeroes_sectors: opened.max_write_zeroes_sectors,
            write_cache: opened.write_cache,
            fua: opened.fua,
            rotational: opened.rotational,
        };
        let name = CString::try_from_fmt(fmt!("ferryblk{}", index))?;
        let disk = Arc::new(
            Disk::add(
                &name,
                tag_set,
                disk_limits,
                opened.sectors,
                opened.read_only || p.read_only,
                shared.clone(),
            )?,
            GFP_KERNEL,
        )?;
        *shared.disk.lock() = Some(disk.clone());
        Ok(Self {
            index,
            export: p.export,
            peer: p.peer,
            read_only: opened.read_only || p.read_only,
            shared,
            disk,
            session,
        })
    }

    /// The disk's name.
    pub(crate) fn disk_name(&self) -> &CStr {
        self.disk.name()
    }

    /// The target's address and port.
    pub(crate) fn peer_addr(&self) -> (&[u8], u16) {
        match &self.peer {
            Peer::V4(a, port) => (&a[..], *port),
            Peer::V6(a, port) => (&a[..], *port),
        }
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

    /// The counters.
    pub(crate) fn stats(&self) -> &IoStats {
        &self.shared.stats
    }

    /// Whether I/O fails from now on (the export or the session is gone).
    pub(crate) fn is_dead(&self) -> bool {
        self.shared.dead.load(Acquire)
    }

    /// Removes the disk and closes the session. `force`: fails the I/O in
    /// flight first (the target may be gone); otherwise the disk's requests
    /// drain. Sleeps.
    pub(crate) fn remove(self, force: bool) {
        if force {
            self.shared.dead.store(true, Release);
            self.disk.mark_dead();
            if let Ok(l) = self.session.limits() {
                for q in 0..l.channels {
                    let _ = self.session.reset_channel(q);
                }
            }
        }
        // The last other reference (the callbacks') goes now.
        self.shared.disk.lock().take();
        let Self { disk, session, .. } = self;
        // Deleting the disk drains its queues while the session still
        // carries them; then the session closes.
        drop(disk);
        drop(session);
    }
}

/// Sends the [`Open`] request of `p` and waits for the target's answer.
fn open_export(session: &SessionRef, p: &MapParams) -> Result<Opened> {
    let wait = Arc::pin_init(
        pin_init!(OpenWait {
            done <- Completion::new(),
            answer <- new_mutex!(None),
        }),
        GFP_KERNEL,
    )?;
    let open = Open {
        name: p.export,
        read_only: p.read_only,
    };
    let req = Request::new(
        &open.encode(),
        wire::OPENED_LEN,
        OpenCtx(wait.clone()),
        GFP_KERNEL,
    )?;
    session.submit(req, Wait::Yes).map_err(|(e, _)| e)?;
    wait.done.wait_for_completion();
    let answer = wait.answer.lock().take();
    answer.unwrap_or(Err(EIO))
}
