// SPDX-License-Identifier: GPL-2.0

//! The target: block devices of this host exported under a name, served to
//! the clients whose sessions open them.
//!
//! A client's session names one export in its first request ([`Open`]);
//! each later request is one block operation ([`Io`]), checked against the
//! export before it touches the disk. Reads and writes move their data by
//! RDMA straight between the client's pages and the pages the bios use (a
//! write's data read from the client first, a read's written to it after
//! the bio). A read's or a write's bios are submitted where it arrived, on
//! ferry's completion work (as nvmet submits from its completion's), as
//! bios that must not wait: that work must stay short, and one that would
//! wait (a frozen or busy device), every other operation, and every
//! operation on a device that takes no such bios, go to the target's work
//! queue instead (see [`start_op`]). Nothing waits for the bios. Bios that
//! end before their submission returns (brd's, a refusal) go on where they
//! were submitted, with no hop (see [`submit`]); the end of others queues
//! the slot's work item, which answers or moves a read's data (ferry
//! answers in process context only). A write is answered only once its
//! bio has completed.
//!
//! An operation lives in a slot of its session from its check to its
//! answer: one slot per tag of a channel (`ferry_incoming_tag()`), made by
//! the session's open, with its work item and the box its data moves in.
//! Data of a page or less stays in the slot (of a channel's first 128
//! tags) for the tag's next operation of that length, so a workload of one
//! such block size allocates nothing (a flush, discard or write of zeroes
//! borrows the slot's kept box, if it has one, and leaves its pages alone);
//! other operations allocate their pages, as nvmet's commands do.

use core::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use kernel::{
    c_str, new_mutex, new_spinlock, new_spinlock_irq, new_work,
    prelude::*,
    revocable::Revocable,
    str::CString,
    sync::{Arc, Mutex, SetOnce, SpinLock, SpinLockIrq},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    block::bdev::{Bdev, BdevInfo, BioOp, BioOwner},
    ferry_api::{
        Data, Handler, Incoming, SessionHandle, SessionRef, Transfer, Transferred, Wait,
        MAX_CHANNELS,
    },
    stats::{IoStats, Op},
    wire::{self, ExportName, Io, IoOp, Notice, Open, Opened, Refusal},
    work::OwnedQueue,
};

/// The most bytes of one read or write a target accepts.
pub(crate) const MAX_IO_BYTES: u32 = 4 << 20;

/// How an export is shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// Clients may only read.
    pub(crate) read_only: bool,
    /// Several clients may map it read-write at once (they coordinate).
    pub(crate) shared: bool,
}

/// One session that opened an export: a user while its session lives, then
/// kept as retired until its last operation has ended (the fence a
/// reconnect waits for), however its session ended.
struct User {
    session: SessionHandle,
    read_only: bool,
    /// The client's id of its mapping: its next session after a reconnect
    /// takes this one's place, once this one's operations are over.
    mapping: u64,
    /// The number of its open within the mapping: an older open never
    /// takes the place of a newer one.
    attempt: u32,
    /// That session's operations, and whether they may start.
    ops: Arc<SessionOps>,
    /// A notice its session had no room for: the module's tick sends it
    /// again (a later one replaces it).
    pending: Option<Notice>,
}

impl User {
    /// Its session ended or was replaced: it stays only while operations
    /// it started are at work.
    fn retired(&self) -> bool {
        self.ops.closed.load(SeqCst)
    }

    /// Retired, and none of its operations at work any more.
    fn over(&self) -> bool {
        self.retired() && self.ops.inflight.load(SeqCst) == 0
    }
}

/// A session's operations at work on its export, and whether new ones may
/// start.
///
/// An operation counts itself (`inflight`, `SeqCst`), then reads `closed`;
/// a reopen of the mapping sets `closed`, then reads `inflight`: so either
/// the operation sees it closed and is refused, or the reopen sees it at
/// work and waits (or is refused for now).
struct SessionOps {
    inflight: AtomicU32,
    /// The session ended, or a newer session of its mapping opened the
    /// export: it starts no operation any more.
    closed: AtomicBool,
}

/// A block device exported under a name.
#[pin_data]
pub(crate) struct Export {
    pub(crate) name: ExportName,
    /// The device's path, as given.
    pub(crate) path: CString,
    pub(crate) access: Access,
    /// What clients name it by once open (numbered anew when the module
    /// loads again: the identity is what tells one disk from another).
    pub(crate) handle: u32,
    /// Its identity, a UUID: given, or the device's own unique ID, or
    /// random. The client checks it at every open.
    pub(crate) id: [u8; 16],
    /// The device, until the export is deleted (the operations at work hold
    /// it meanwhile). Read under RCU, without a lock.
    #[pin]
    bdev: Revocable<Arc<Bdev>>,
    /// Its claim on the device: an allocation of its own, whose address is
    /// the holder (dropped after `bdev`, which closes the device).
    _claim: KBox<u8>,
    info: BdevInfo,
    /// Capacity, in sectors (it changes on a resize).
    sectors: AtomicU64,
    logical_block_size: u32,
    /// No client may open it or do I/O on it any more.
    deleted: AtomicBool,
    /// Operations between their check and their answer.
    inflight: AtomicU32,
    /// Operations deferred to the target's queue whose bios are not
    /// submitted yet: while any wait, new ones go there too, behind them
    /// (one whose bios would wait for a tag is not overtaken again and
    /// again by those that arrive meanwhile and take the tags it waits
    /// for).
    waiting: AtomicU32,
    /// The sessions that opened it, and the retired ones whose operations
    /// are still at work.
    #[pin]
    users: Mutex<KVec<User>>,
    pub(crate) stats: IoStats,
    /// Test builds: a `hostile-stall` export's first write was held.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    stalled: AtomicBool,
}

impl Export {
    /// Waits, at most `ms` milliseconds (`u32::MAX`: for ever), until no
    /// operation of the export is at work; whether none is. Sleeps.
    fn drained_within(&self, ms: u32) -> bool {
        let waited = crate::work::jiffies_64();
        // CAST: seconds of jiffies fit any width.
        let limit = kernel::time::msecs_to_jiffies(ms) as u64;
        while self.inflight.load(SeqCst) != 0 {
            if ms != u32::MAX && crate::work::jiffies_64() - waited >= limit {
                return false;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
        }
        true
    }

    /// What a client is told of it, opened read-only or not.
    fn describe(&self, read_only: bool) -> Opened {
        let i = self.info;
        Opened {
            handle: self.handle,
            sectors: self.sectors.load(Relaxed),
            logical_block_size: i.logical_block_size,
            physical_block_size: i.physical_block_size,
            max_discard_sectors: i.max_discard_sectors,
            discard_granularity: i.discard_granularity,
            // Always offered: the block layer writes zeroed pages where the
            // device has no command for it.
            max_write_zeroes_sectors: MAX_IO_BYTES / 512,
            read_only: read_only || self.access.read_only || i.read_only,
            // Always, as nvmet reports a volatile write cache for every
            // controller: the client sends every flush and FUA write, and
            // the block layer here ends them at once where the device has
            // no cache. What the device has now may not be what it has
            // later (sysfs `write_cache`, a dm table reload): a client told
            // "no cache" once would never flush again.
            write_cache: true,
            fua: true,
            rotational: i.rotational,
            id: self.id,
        }
    }

    /// Calls `f` with each of the first `max` sessions that have it open:
    /// the session, whether read-only, and its operations at work.
    pub(crate) fn clients(
        &self,
        max: usize,
        mut f: impl FnMut(&SessionRef, bool, u32) -> Result,
    ) -> Result {
        let users = self.live_users();
        for u in users.iter().filter(|u| !u.retired()).take(max) {
            f(&u.session, u.read_only, u.ops.inflight.load(Relaxed))?;
        }
        Ok(())
    }

    /// How many sessions have it open, and how many of them read-write.
    pub(crate) fn users(&self) -> (usize, usize) {
        let users = self.live_users();
        let open = users.iter().filter(|u| !u.retired());
        let rw = open.clone().filter(|u| !u.read_only).count();
        (open.count(), rw)
    }

    /// Sessions that ended, or were replaced, and still have operations at
    /// work.
    pub(crate) fn retired(&self) -> usize {
        self.live_users().iter().filter(|u| u.retired()).count()
    }

    /// The users, less the retired ones whose operations are over.
    fn live_users(&self) -> kernel::sync::MutexGuard<'_, KVec<User>> {
        let mut users = self.users.lock();
        users.retain(|u| !u.over());
        users
    }

    /// Its capacity, in sectors.
    pub(crate) fn sectors(&self) -> u64 {
        self.sectors.load(Relaxed)
    }

    /// Its logical block size.
    pub(crate) fn logical_block_size(&self) -> u32 {
        self.logical_block_size
    }

    /// Operations between their check and their answer.
    pub(crate) fn inflight(&self) -> u32 {
        self.inflight.load(Relaxed)
    }

    /// Whether a retired session of mapping `mapping` still has operations
    /// at work.
    fn fenced(&self, mapping: u64) -> bool {
        self.users
            .lock()
            .iter()
            .any(|u| u.mapping == mapping && u.retired() && u.ops.inflight.load(SeqCst) != 0)
    }

    /// Tells every user `n`, as far as their sessions take it.
    fn tell_users(&self, n: Notice) {
        let msg = n.encode();
        for u in self.live_users().iter_mut().filter(|u| !u.retired()) {
            // Test builds: a `hostile-lossy` export's notices are lost the
            // first time, as when a session has no room for them.
            #[cfg(CONFIG_FERRY_KUNIT_TEST)]
            if self.name.as_bytes() == b"hostile-lossy" {
                pr_info!(
                    "export {}: hostile export: a notice to session {} lost\n",
                    self.name,
                    u.session.id()
                );
                u.pending = Some(n);
                continue;
            }
            if let Err(e) = u.session.send(&msg, Wait::No) {
                crate::ratelimit::pr_warn_limited!(
                    "export {}: could not tell session {} yet: {:?}\n",
                    self.name,
                    u.session.id(),
                    e
                );
                u.pending = Some(n);
            }
        }
    }

    /// Sends again the notices its users had no room for, and lets the
    /// retired users whose operations are over go (the module's tick).
    fn tell_again(&self) {
        for u in self.live_users().iter_mut().filter(|u| !u.retired()) {
            let Some(n) = u.pending else {
                continue;
            };
            if u.session.send(&n.encode(), Wait::No).is_ok() {
                pr_info!(
                    "export {}: told session {} again: {:?}\n",
                    self.name,
                    u.session.id(),
                    n
                );
                u.pending = None;
            }
        }
    }
}

/// The exports of this host, and the service clients reach them through.
#[pin_data]
pub(crate) struct Target {
    #[pin]
    exports: Mutex<KVec<Arc<Export>>>,
    next_handle: AtomicU32,
    /// Where block operations submit their bios, and go on once they ended.
    queue: OwnedQueue,
    /// Where opens wait for the operations of the sessions they replace.
    opens: OwnedQueue,
}

impl Target {
    /// No exports yet.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                exports <- new_mutex!(KVec::new()),
                next_handle: AtomicU32::new(1),
                queue: OwnedQueue::new(c_str!("ferry_blk_target"))?,
                opens: OwnedQueue::new(c_str!("ferry_blk_open"))?,
            }),
            GFP_KERNEL,
        )
    }

    /// Once a second (the module's tick): the notices that found no room
    /// go again. A deleted export's are not: its clients find it gone at
    /// their next request (`ENODEV`).
    pub(crate) fn tick(&self) {
        if let Ok(exports) = self.exports() {
            for e in exports.iter() {
                e.tell_again();
            }
        }
    }

    /// The export called `name`.
    pub(crate) fn find(&self, name: &ExportName) -> Option<Arc<Export>> {
        self.exports
            .lock()
            .iter()
            .find(|e| e.name == *name)
            .cloned()
    }

    /// A snapshot of the exports.
    pub(crate) fn exports(&self) -> Result<KVec<Arc<Export>>> {
        let list = self.exports.lock();
        let mut v = KVec::with_capacity(list.len(), GFP_KERNEL)?;
        for e in list.iter() {
            v.push(e.clone(), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// Exports the block device at `path` as `name`, with identity `id`
    /// (else the device's own unique ID, else a random UUID): `EEXIST` if
    /// the name is taken, `EADDRINUSE` if another export has the identity,
    /// `EBUSY` if the device is in use (mounted, exported, held), the
    /// device's error if it cannot be opened. Sleeps.
    pub(crate) fn add(
        &self,
        name: ExportName,
        path: &CStr,
        access: Access,
        id: Option<[u8; 16]>,
    ) -> Result<Arc<Export>> {
        if self.find(&name).is_some() {
            return Err(EEXIST);
        }
        // Each export's claim is its own: a device is exported once.
        let claim = KBox::new(0u8, GFP_KERNEL)?;
        let holder = core::ptr::from_ref::<u8>(&claim).cast();
        let bdev = Arc::new(Bdev::open(path, !access.read_only, holder)?, GFP_KERNEL)?;
        let info = bdev.info();
        let id = id.or_else(|| bdev.unique_id()).unwrap_or_else(random_uuid);
        let export = Arc::pin_init(
            try_pin_init!(Export {
                name,
                path: CString::try_from(path)?,
                access,
                handle: self.next_handle.fetch_add(1, Relaxed),
                id,
                bdev <- Revocable::new(bdev),
                _claim: claim,
                info,
                sectors: AtomicU64::new(info.sectors),
                logical_block_size: info.logical_block_size,
                deleted: AtomicBool::new(false),
                inflight: AtomicU32::new(0),
                waiting: AtomicU32::new(0),
                users <- new_mutex!(KVec::new()),
                stats: IoStats::default(),
                #[cfg(CONFIG_FERRY_KUNIT_TEST)]
                stalled: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        )?;
        let mut list = self.exports.lock();
        // Checked again: two adds of one name may race.
        if list.iter().any(|e| e.name == name) {
            return Err(EEXIST);
        }
        // Two exports of one identity would be one disk to their clients.
        if list.iter().any(|e| e.id == id) {
            return Err(EADDRINUSE);
        }
        list.push(export.clone(), GFP_KERNEL)?;
        Ok(export)
    }

    /// Re-reads export `name`'s capacity (its device grew) and tells its
    /// clients. `EBUSY` if it shrank while clients have it open.
    pub(crate) fn resize(&self, name: &ExportName) -> Result<u64> {
        let e = self.find(name).ok_or(ENOENT)?;
        let now = e.bdev.try_access_with(|b| b.info().sectors).ok_or(ENOENT)?;
        let (users, _) = e.users();
        if now < e.sectors() && users > 0 {
            return Err(EBUSY);
        }
        e.sectors.store(now, Relaxed);
        e.tell_users(Notice::Resized {
            handle: e.handle,
            sectors: now,
        });
        Ok(now)
    }

    /// Deletes export `name`: `EBUSY` while clients have it open, unless
    /// `force`, which tells them it is gone and fails their I/O from now
    /// on. Waits at most [`DELETE_WAIT_MS`] for its operations at work
    /// (a hung backing disk holds them): `Ok(true)` once none is left and
    /// the device is closed; `Ok(false)` if some are still at work, and a
    /// work item of the target's, which keeps the module loaded, closes the
    /// device once the last has ended. Sleeps.
    pub(crate) fn delete(&self, name: &ExportName, force: bool) -> Result<bool> {
        let e = {
            let mut list = self.exports.lock();
            let i = list.iter().position(|e| e.name == *name).ok_or(ENOENT)?;
            {
                // Under the users' lock: no open slips in between.
                let users = list[i].users.lock();
                if users.iter().any(|u| !u.retired()) && !force {
                    return Err(EBUSY);
                }
                list[i].deleted.store(true, SeqCst);
            }
            list.remove(i).map_err(|_| ENOENT)?
        };
        e.tell_users(Notice::Deleted { handle: e.handle });
        // Operations counted before the flag end; those counted after it
        // see it and end at once.
        if !e.drained_within(DELETE_WAIT_MS) {
            pr_warn!(
                "export {}: deleted with {} operations still at work in the backing disk: its device is closed once they end\n",
                e.name,
                e.inflight.load(SeqCst)
            );
            self.queue_reaper(e);
            return Ok(false);
        }
        // The device is free again now, whoever still holds the export.
        e.bdev.revoke();
        // Its retired users go (each holds its session, which holds the
        // export: nothing else would look at them any more).
        drop(e.live_users());
        Ok(true)
    }
}

/// How long deleting an export waits for its operations at work before it
/// returns and leaves the rest to a work item ([`Reaper`]).
const DELETE_WAIT_MS: u32 = 3000;

/// A deleted export whose operations were still at work when its deletion
/// returned: closes its device once the last has ended, then gives back
/// the module reference it holds (their bios end in the module's code). On
/// the target's open queue (it sleeps, and the queue's destruction at
/// unload waits for it, after its last act).
#[pin_data]
struct Reaper {
    #[pin]
    work: Work<Reaper>,
    export: Arc<Export>,
}

impl_has_work! {
    impl HasWork<Self> for Reaper { self.work }
}

impl WorkItem for Reaper {
    type Pointer = Pin<KBox<Reaper>>;

    fn run(this: Pin<KBox<Reaper>>) {
        let e = &this.export;
        while e.inflight.load(SeqCst) != 0 {
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(100));
        }
        e.bdev.revoke();
        // (As `Target::delete`.)
        drop(e.live_users());
        pr_info!(
            "export {}: its last operation ended: its device is closed\n",
            e.name
        );
        drop(this);
        // Last: the module may go from here on, and the queue's
        // destruction waits for this work item to return.
        crate::module_put();
    }
}

impl Target {
    /// Leaves deleted export `e` to a [`Reaper`], which keeps the module
    /// loaded. Without memory for it, or while the module unloads, waits
    /// here instead (as the deletion did before it had a bound).
    fn queue_reaper(&self, e: Arc<Export>) {
        if crate::module_get() {
            let export = e.clone();
            let r = KBox::pin_init(
                pin_init!(Reaper {
                    work <- new_work!("ferry_blk::Reaper::work"),
                    export,
                }),
                GFP_KERNEL,
            );
            match r {
                // A new box is never queued already: it always goes.
                Ok(r) => return self.opens.queue().enqueue(r),
                Err(_) => crate::module_put(),
            }
        }
        e.drained_within(u32::MAX);
        e.bdev.revoke();
    }

    /// The module unloads, its service gone (every session closed): closes
    /// every export without telling its clients that it was deleted. They
    /// reconnect, and find it again if it is added back with the same
    /// identity once the module is loaded again. Waits for each export's
    /// operations at work, however long a hung backing disk holds them:
    /// their bios end in the module's code. Sleeps.
    pub(crate) fn shutdown(&self) {
        let list = core::mem::take(&mut *self.exports.lock());
        for e in list.iter() {
            // Nothing new starts (no session is left to ask, anyway).
            e.deleted.store(true, SeqCst);
            if !e.drained_within(DELETE_WAIT_MS) {
                pr_warn!(
                    "export {}: unloading waits for {} operations still at work in the backing disk\n",
                    e.name,
                    e.inflight.load(SeqCst)
                );
                e.drained_within(u32::MAX);
            }
            e.bdev.revoke();
            drop(e.live_users());
            pr_info!("export {}: closed (ferry_blk unloads)\n", e.name);
        }
    }
}

/// A random (version 4) UUID.
fn random_uuid() -> [u8; 16] {
    let mut id = [0; 16];
    id[..8].copy_from_slice(&crate::work::random_u64().to_le_bytes());
    id[8..].copy_from_slice(&crate::work::random_u64().to_le_bytes());
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id
}

/// The service clients open sessions to.
pub(crate) struct TargetService(pub(crate) Arc<Target>);

impl crate::ferry_api::Service for TargetService {
    type Session = TargetSession;

    fn accept(&self, _s: &SessionRef) -> Result<Arc<TargetSession>> {
        let ops = Arc::new(
            SessionOps {
                inflight: AtomicU32::new(0),
                closed: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        let slots = Slots::new()?;
        let state = Arc::pin_init(
            pin_init!(SessionState {
                phase <- new_mutex!(Phase {
                    ended: false,
                    opening: false,
                    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
                    held: KVec::new(),
                }),
                opened: SetOnce::new(),
                ops,
                slots,
            }),
            GFP_KERNEL,
        )?;
        Ok(Arc::new(
            TargetSession {
                target: self.0.clone(),
                state,
            },
            GFP_KERNEL,
        )?)
    }
}

/// A client's session.
pub(crate) struct TargetSession {
    target: Arc<Target>,
    /// What its open, on the target's open queue, shares with it.
    state: Arc<SessionState>,
}

/// A session's export, once open.
#[pin_data]
struct SessionState {
    /// Where its open and its end stand (held briefly, never across a wait).
    #[pin]
    phase: Mutex<Phase>,
    /// The export it opened, and whether read-only: set once, then read
    /// by every operation without a lock.
    opened: SetOnce<(Arc<Export>, bool)>,
    /// Its operations at work (a reconnected mapping's next session waits
    /// for them: an old write must not land after a newer one), and
    /// whether they may start.
    ops: Arc<SessionOps>,
    /// Its operations' places, made by its open.
    slots: Slots,
}

/// Where a session's open and its end stand.
struct Phase {
    /// The session ended (`gone`): no open may add a user any more.
    ended: bool,
    /// An open of the session is at work (a session opens once; an open
    /// refused for now may be sent again).
    opening: bool,
    /// Test builds: the writes a `hostile-hold` export never answers, until
    /// the session ends.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    held: KVec<Incoming>,
}

/// How long an open waits for the operations of the session it replaces
/// before it is refused for now ([`Refusal::Fenced`]): the client sends it
/// again, so a hung backing disk holds no open, and no work item, for ever.
const FENCE_WAIT_MS: u32 = 1000;

impl SessionState {
    /// Opens export `e` (the one `o` names) for session `s`, as it asked.
    ///
    /// The sessions of the same mapping before a reconnect are closed at
    /// once (they start no operation any more) and kept, retired, until
    /// their operations have ended; this waits for those at most
    /// [`FENCE_WAIT_MS`] (on the target's open queue, never on a
    /// completion), then refuses the open for now. So no write of an
    /// earlier connection lands after one the client sends once this open
    /// is answered. Sleeps.
    fn open(&self, e: Arc<Export>, s: &SessionRef, o: Open) -> Result<Opened, Refusal> {
        let read_only = o.read_only || e.access.read_only;
        if !o.read_only && e.access.read_only {
            return Err(Refusal::ReadOnly);
        }
        {
            let mut phase = self.phase.lock();
            if phase.ended {
                return Err(Refusal::UnknownExport);
            }
            if self.opened.as_ref().is_some() || phase.opening {
                return Err(Refusal::Malformed);
            }
            phase.opening = true;
        }
        let res = self.try_open(&e, s, &o, read_only);
        let res = match res {
            Err(Refusal::Fenced) => {
                let waited = crate::work::jiffies_64();
                // CAST: a second of jiffies fits any width.
                let limit = kernel::time::msecs_to_jiffies(FENCE_WAIT_MS) as u64;
                while e.fenced(o.mapping) && crate::work::jiffies_64() - waited < limit {
                    kernel::time::delay::fsleep(kernel::time::Delta::from_millis(10));
                }
                self.try_open(&e, s, &o, read_only)
            }
            res => res,
        };
        self.phase.lock().opening = false;
        res
    }

    /// One try of [`Self::open`]: closes the mapping's earlier sessions, and
    /// adds this one as a user unless any of them still has operations at
    /// work ([`Refusal::Fenced`]).
    fn try_open(
        &self,
        e: &Arc<Export>,
        s: &SessionRef,
        o: &Open,
        read_only: bool,
    ) -> Result<Opened, Refusal> {
        let phase = self.phase.lock();
        if phase.ended {
            return Err(Refusal::UnknownExport);
        }
        let mut users = e.live_users();
        if e.deleted.load(SeqCst) {
            return Err(Refusal::UnknownExport);
        }
        // (A retired session of another mapping counts while its
        // operations are at work: its writes land before a new writer's.)
        let others_rw = users.iter().any(|u| !u.read_only && u.mapping != o.mapping);
        if !read_only && !e.access.shared && others_rw {
            return Err(Refusal::Busy);
        }
        // A late open of the mapping (its session was replaced meanwhile):
        // the newer one stays.
        if users
            .iter()
            .any(|u| u.mapping == o.mapping && u.attempt > o.attempt)
        {
            return Err(Refusal::Replaced);
        }
        for u in users.iter().filter(|u| u.mapping == o.mapping) {
            // `SeqCst`, then the count: see `SessionOps`.
            u.ops.closed.store(true, SeqCst);
        }
        users.retain(|u| !u.over());
        if users.iter().any(|u| u.mapping == o.mapping) {
            return Err(Refusal::Fenced);
        }
        let user = User {
            session: s.to_owned(),
            read_only,
            mapping: o.mapping,
            attempt: o.attempt,
            ops: self.ops.clone(),
            pending: None,
        };
        users.push(user, GFP_KERNEL).map_err(|_| Refusal::Busy)?;
        let desc = e.describe(read_only);
        // Empty until now: only an open sets it, under `phase`, and the
        // session's end reads it there.
        let _ = self.opened.populate((e.clone(), read_only));
        drop(users);
        drop(phase);
        Ok(desc)
    }

    /// Ends session `s`: it starts no operation any more, and its export
    /// keeps it as a retired user until its operations are over.
    fn end(&self, s: &SessionRef) {
        let mut phase = self.phase.lock();
        phase.ended = true;
        self.ops.closed.store(true, SeqCst);
        let e = self.opened.as_ref().map(|(e, _)| e.clone());
        // Answered (to a session that is gone) out of the lock.
        #[cfg(CONFIG_FERRY_KUNIT_TEST)]
        let _held = core::mem::take(&mut phase.held);
        drop(phase);
        if let Some(e) = e {
            let inflight = self.ops.inflight.load(SeqCst);
            if inflight != 0 {
                pr_info!(
                    "export {}: session {} ended with {} operations at work: its mapping is fenced until they end\n",
                    e.name,
                    s.id(),
                    inflight
                );
            }
            // Those over go now; the others when the next open or listing
            // finds them over.
            drop(e.live_users());
        }
    }

    /// Answers open `req` of session `s` (`o`, naming export `e`).
    fn answer_open(&self, e: Arc<Export>, s: &SessionRef, req: Incoming, o: Open) {
        let res = self.open(e, s, o);
        // Here, on the open queue, rather than on a completion.
        if let (Ok(_), Ok(l)) = (&res, s.limits()) {
            self.slots.prepare(l.channels, l.incoming_depth);
        }
        let _ = match res {
            #[cfg(CONFIG_FERRY_KUNIT_TEST)]
            Ok(desc)
                if !matches!(
                    hostile::Mode::of(&self.opened),
                    hostile::Mode::None | hostile::Mode::Hold | hostile::Mode::Stall
                ) =>
            {
                hostile::answer(s, req, &desc, hostile::Mode::of(&self.opened))
            }
            Ok(desc) => req.respond(Ok(()), &desc.encode()),
            Err(r) => refuse_open(s, req, r),
        };
    }
}

/// Refuses open `req` of session `s` for `r`, with a log line.
fn refuse_open(s: &SessionRef, req: Incoming, r: Refusal) -> Result {
    crate::ratelimit::pr_warn_limited!(
        "target: session {}: refused an open: {}\n",
        s.id(),
        r.describe()
    );
    req.respond(Err(r.errno()), &[])
}

impl TargetSession {
    /// Starts block operation `hdr` of request `req`, or refuses it. Takes
    /// no lock shared with other channels: the export was opened before the
    /// client's first operation. (A write's data is fetched first, and a
    /// read's bios are submitted here, on ferry's completion work: their
    /// pages are allocated here, `GFP_KERNEL` as nvmet's, if the slot keeps
    /// none of that length.)
    fn io(&self, s: &SessionRef, req: Incoming, hdr: &[u8; wire::IO_LEN]) {
        let opened = self.state.opened.as_ref();
        let checked = Io::decode(hdr).and_then(|io| {
            let (e, ro) = opened.ok_or(Refusal::UnknownExport)?;
            if io.handle != e.handle {
                return Err(Refusal::UnknownExport);
            }
            io.check(e.sectors(), e.logical_block_size, *ro, req.data_len())?;
            let most = match io.op {
                IoOp::Read | IoOp::Write | IoOp::WriteZeroes => MAX_IO_BYTES,
                IoOp::Discard => e.info.max_discard_sectors.saturating_mul(512),
                IoOp::Flush => 0,
            };
            if io.op == IoOp::Discard && most == 0 {
                return Err(Refusal::UnknownOp);
            }
            if io.len > most {
                return Err(Refusal::BadLength);
            }
            // Counted before the deletion flag and the session's close are
            // read: a deletion, and the open of the mapping's next session,
            // wait for it, or this sees them.
            let busy = Busy::new(e.clone(), self.state.ops.clone());
            if e.deleted.load(SeqCst) {
                return Err(Refusal::UnknownExport);
            }
            if self.state.ops.closed.load(SeqCst) {
                return Err(Refusal::Replaced);
            }
            Ok((io, busy))
        });
        let (io, busy) = match checked {
            Ok(v) => v,
            Err(r) => {
                if let Some((e, _)) = opened {
                    e.stats.refused(r);
                }
                crate::ratelimit::pr_warn_limited!("target: refused a request: {}\n", r.describe());
                let _ = req.respond(Err(r.errno()), &[]);
                return;
            }
        };
        let slot = match self.state.slots.take(s, &req) {
            Ok(slot) => slot,
            Err(e) => return finish(None, busy, req, io, Err(e), None),
        };
        if io.op == IoOp::Write {
            // The data first, from the client's pages.
            match slot.transfer(io.len) {
                Ok(mut t) => {
                    t.ctx = Stage {
                        target: Some(self.target.clone()),
                        slot: Some(slot),
                        busy: Some(busy),
                        io: Some(io),
                        ..Stage::default()
                    };
                    req.read(t);
                }
                Err(e) => finish(Some(&*slot), busy, req, io, Err(e), None),
            }
            return;
        }
        start_op(
            slot,
            self.target.clone(),
            busy,
            req,
            io,
            None,
            Origin::Completion,
        );
    }
}

impl Handler for TargetSession {
    fn message(&self, s: &SessionRef, _data: &[u8]) {
        crate::ratelimit::pr_warn_limited!(
            "target: session {} sent a message, which this protocol has not\n",
            s.id()
        );
    }

    fn request(&self, s: &SessionRef, req: Incoming) {
        let hdr = req.header();
        if hdr.len() == wire::OPEN_LEN {
            let open = Open::decode(hdr).and_then(|o| {
                let e = self.target.find(&o.name).ok_or(Refusal::UnknownExport)?;
                Ok((o, e))
            });
            match open {
                // On the target's open queue: an open may wait for the
                // operations of the mapping's session before a reconnect.
                Ok((open, export)) => self.target.queue_open(OpenJob {
                    export,
                    state: self.state.clone(),
                    session: s.to_owned(),
                    req,
                    open,
                }),
                Err(r) => {
                    let _ = refuse_open(s, req, r);
                }
            }
            return;
        }
        let Ok(hdr) = <[u8; wire::IO_LEN]>::try_from(hdr) else {
            let _ = req.respond(Err(Refusal::Malformed.errno()), &[]);
            return;
        };
        #[cfg(CONFIG_FERRY_KUNIT_TEST)]
        if hostile::drop_write(&self.state.opened, s, req.tag().0, &hdr) {
            return;
        }
        #[cfg(CONFIG_FERRY_KUNIT_TEST)]
        let Some(req) = hostile::hold_write(&self.state, s, req, &hdr) else {
            return;
        };
        self.io(s, req, &hdr);
    }

    fn gone(&self, s: &SessionRef, _err: Option<Error>) {
        self.state.end(s);
    }
}

/// An operation between its check and its answer: its export and its
/// session count it (deleting an export, and the session of the same
/// mapping after a reconnect, wait for them).
struct Busy(Arc<Export>, Arc<SessionOps>);

impl Busy {
    fn new(export: Arc<Export>, session: Arc<SessionOps>) -> Self {
        export.inflight.fetch_add(1, SeqCst);
        session.inflight.fetch_add(1, SeqCst);
        Self(export, session)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.1.inflight.fetch_sub(1, SeqCst);
        self.0.inflight.fetch_sub(1, SeqCst);
    }
}

/// What an operation's work item does next.
///
/// The operation holds the target (whose queue its work uses) from its
/// check until its bios have ended, and drops it before its count
/// ([`Busy`]): while counted, its export is not deleted yet, so the module,
/// and with it the target, stays. So the target is never dropped last in a
/// bio's end (an interrupt, maybe) nor on its own queue (which cannot be
/// destroyed from its own work). (Fields drop in their order: the target
/// is first.)
enum Job {
    /// A block operation, checked (a write's data fetched), whose bios
    /// could not be submitted from the completion's context: its bios next.
    Start {
        target: Arc<Target>,
        busy: Busy,
        req: Incoming,
        io: Io,
        /// A write's data (and the box it came in), or the box made for a
        /// read's.
        data: Option<KBox<Transfer<Stage, Data>>>,
    },
    /// Its bios ended, with `res`: the operation is in the box's stage.
    Ended {
        target: Arc<Target>,
        t: KBox<Transfer<Stage, Data>>,
        res: Result,
    },
}

impl Job {
    /// The target, on whose queue the job runs.
    fn target(&self) -> &Target {
        match self {
            Job::Start { target, .. } | Job::Ended { target, .. } => target,
        }
    }
}

/// Where an operation is while its data moves or its bios run: its slot
/// and the operation (none while the box is kept for the next operation).
/// (Fields drop in their order: the target and the device go before the
/// operation's count, see [`Job`].)
#[derive(Default)]
struct Stage {
    /// A write's, while its data moves, and every operation's while its
    /// bios run: the target, whose queue their end goes to.
    target: Option<Arc<Target>>,
    /// The device, while the bios run (deleting the export closes it once
    /// no operation is counted).
    bdev: Option<Arc<Bdev>>,
    /// The operation's slot.
    slot: Option<Arc<OpSlot>>,
    /// The operation, counted.
    busy: Option<Busy>,
    /// What it is.
    io: Option<Io>,
    /// While its bios run (ferry holds it while the data moves).
    req: Option<Incoming>,
    /// Its write of zeroes is written with zeroed pages, or was tried
    /// natively once already: the device had no native one when it was
    /// submitted, or it is the retry of one that failed.
    zero_pages: bool,
    /// Its bios were submitted from the completion's context, not to wait
    /// ([`Bdev::submit_nowait`]): if they would have, the operation is
    /// submitted again on the target's queue.
    nowait: bool,
}

impl Stage {
    /// Whether bios that ended with `res` are submitted again on the
    /// target's queue: they were not to wait and would have (or, never, the
    /// device no longer takes such bios). One test for both the bios' end,
    /// which counts the operation as waiting, and [`end_op`], which submits
    /// it and stops counting it.
    fn goes_again(&self, res: &Result) -> bool {
        self.nowait && res.is_err_and(|e| e == EAGAIN || e == EOPNOTSUPP)
    }
}

impl Transferred for Stage {
    fn transferred(mut t: KBox<Transfer<Self, Data>>, req: Incoming, status: Result) {
        let Stage {
            target,
            slot,
            busy,
            io,
            ..
        } = core::mem::take(&mut t.ctx);
        // Never without all three: every transfer starts with them. The
        // request then answers `EIO` as it goes, and the slot is free. (The
        // target goes before the operation's count: see `Job`.)
        let Some(slot) = slot else {
            drop(target);
            return;
        };
        let (Some(busy), Some(io)) = (busy, io) else {
            drop(target);
            slot.give_back(None);
            return;
        };
        match (io.op, status, target) {
            // A write's data is here: its bios next, from here (ferry's
            // completion work, or the thread tearing the channel down).
            (IoOp::Write, Ok(()), Some(target)) => {
                start_op(slot, target, busy, req, io, Some(t), Origin::Completion)
            }
            // Never: a write's transfer starts with the target.
            (IoOp::Write, Ok(()), None) => finish(Some(&*slot), busy, req, io, Err(EIO), Some(t)),
            // A read's data is delivered, or a transfer failed. (The
            // target goes before the operation's count.)
            (_, status, target) => {
                drop(target);
                finish(Some(&*slot), busy, req, io, status, Some(t))
            }
        }
    }

    fn answered(mut t: KBox<Transfer<Self, Data>>, status: Result) {
        // A read's data went with its answer, or could not (the client then
        // sees its channel fail and sends the read again).
        let Stage { slot, busy, io, .. } = core::mem::take(&mut t.ctx);
        if let (Some(busy), Some(io)) = (busy.as_ref(), io.as_ref()) {
            count(busy, io, &status);
        }
        if let Some(slot) = slot {
            slot.give_back(Some(t));
        }
        // Last, as in `finish`.
        drop(busy);
    }
}

impl BioOwner for Transfer<Stage, Data> {
    type Pages = Data;

    fn bdev(&self) -> Option<&Bdev> {
        self.ctx.bdev.as_deref()
    }

    fn pages(&mut self) -> &mut Data {
        &mut self.data
    }

    fn ended(mut t: KBox<Self>, res: Result) {
        if t.ctx.goes_again(&res) {
            // To be submitted again on the target's queue (`end_op`): new
            // operations wait behind it meanwhile.
            if let Some(busy) = t.ctx.busy.as_ref() {
                busy.0.waiting.fetch_add(1, Relaxed);
            }
        }
        let (Some(slot), Some(target)) = (t.ctx.slot.take(), t.ctx.target.take()) else {
            // Never: `submit` lends the box with both. Its request cannot be
            // answered from here (perhaps an interrupt), so it is kept, and
            // its export cannot be deleted any more.
            crate::ratelimit::pr_warn_limited!("target: a bio ended without its slot\n");
            KBox::leak(t);
            return;
        };
        slot.run(Job::Ended { target, t, res });
    }
}

/// Counts block operation `io` as done, with `res`.
fn count(busy: &Busy, io: &Io, res: &Result) {
    let op = match io.op {
        IoOp::Read => Op::Read,
        IoOp::Write => Op::Write,
        IoOp::Flush => Op::Flush,
        IoOp::Discard => Op::Discard,
        IoOp::WriteZeroes => Op::WriteZeroes,
    };
    busy.0
        .stats
        .done(op, io.flags & wire::IO_FUA != 0, io.len, res.is_ok());
}

/// Answers block operation `io` with `res`, and counts it; gives its slot
/// back, with the box its data was in.
fn finish(
    slot: Option<&OpSlot>,
    busy: Busy,
    req: Incoming,
    io: Io,
    res: Result,
    data: Option<KBox<Transfer<Stage, Data>>>,
) {
    count(&busy, &io, &res);
    // Before the answer: ferry frees the tag inside `respond`, and the
    // tag's next operation may come on another CPU before it returns.
    if let Some(slot) = slot {
        slot.give_back(data);
    }
    let _ = req.respond(res, &[]);
    // `busy` goes last: the export may go once the answer is out.
    drop(busy);
}

/// The place of one block operation at a time: one per tag of a channel
/// (each request a channel may hold), used by every operation of that tag,
/// so that an operation allocates nothing but its pages of data, and those
/// only when they are more than a page or not of the length the tag's last
/// operation had. (It holds nothing of the target but a queued job's,
/// which its work item drops first: that work item, or a bio's end, may be
/// the last to hold the slot, which frees nothing that cannot be freed
/// there.)
#[pin_data]
struct OpSlot {
    /// Where the operation goes on once its bios ended, and submits them
    /// if it could not from the completion's context (on the target's
    /// queue).
    #[pin]
    work: Work<OpSlot>,
    /// An operation holds it, from its check to its answer.
    taken: AtomicBool,
    /// It keeps a page of data between operations (the first
    /// [`KEPT_TAGS`] tags of a channel do).
    keeps: bool,
    /// What the work item does next, while it waits for the queue; or
    /// what the thread submitting the operation's bios does next, if they
    /// end before it is done. (Set where bios end too: with interrupts
    /// off.)
    #[pin]
    job: SpinLockIrq<Next>,
    /// The box of the last transfer of a page or less, with its pages: the
    /// next transfer of that length uses them again.
    #[pin]
    spare: SpinLock<Option<KBox<Transfer<Stage, Data>>>>,
}

impl_has_work! {
    impl HasWork<Self> for OpSlot { self.work }
}

/// A slot's next job, and who runs it.
#[derive(Default)]
struct Next {
    job: Option<Job>,
    /// A thread is submitting the slot's bios ([`submit`]): the end of
    /// those that end meanwhile is left to it, not queued.
    held: bool,
}

/// The largest data a slot keeps between operations: a page, as
/// nvmet-rdma keeps an inline page per command.
const KEPT_BYTES: usize = kernel::page::PAGE_SIZE;

/// How many tags of a channel keep a page: at most 512 KiB per channel
/// (a server's depth may reach some 900 tags, and 64 channels).
const KEPT_TAGS: u32 = 128;

impl OpSlot {
    /// A free slot, which keeps a page of data between operations if
    /// `keeps`. May sleep.
    fn new(keeps: bool) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                work <- new_work!("ferry_blk::OpSlot::work"),
                taken: AtomicBool::new(false),
                keeps,
                job <- new_spinlock_irq!(Next::default()),
                spare <- new_spinlock!(None),
            }),
            GFP_KERNEL,
        )
    }

    /// Takes the slot if it is free.
    fn try_take(&self) -> bool {
        // Acquire: what the last operation left in the slot is seen.
        self.taken
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_ok()
    }

    /// A transfer box with `len` bytes of pages: the kept one, if its pages
    /// have that length, else new ones, not zeroed (whatever they hold: the
    /// transfer or the bio fills them all before they are read, and an
    /// operation whose transfer or bios failed sends none of them). Data of
    /// more than a page leaves the kept box alone. May sleep.
    fn transfer(&self, len: u32) -> Result<KBox<Transfer<Stage, Data>>> {
        // CAST: at most `MAX_IO_BYTES`.
        let len = len as usize;
        if len > KEPT_BYTES {
            return Transfer::new(Data::for_overwrite(len)?, Stage::default(), GFP_KERNEL);
        }
        let spare = self.spare.lock().take();
        match spare {
            Some(t) if t.data.len() == len => Ok(t),
            Some(mut t) => {
                t.data = Data::for_overwrite(len)?;
                Ok(t)
            }
            None => Transfer::new(Data::for_overwrite(len)?, Stage::default(), GFP_KERNEL),
        }
    }

    /// Queues `job` on the target's queue, or leaves it to the thread
    /// submitting the slot's bios ([`OpSlot::hold`]). Any context.
    fn run(self: &Arc<Self>, job: Job) {
        let mut next = self.job.lock();
        if next.job.is_some() {
            // Never: one operation at a time holds the slot, and its work
            // item took its last job. The job is kept (dropping it here would
            // answer its request, perhaps in an interrupt), and its export
            // cannot be deleted any more.
            drop(next);
            crate::ratelimit::pr_warn_limited!("target: a slot's work was still queued\n");
            core::mem::forget(job);
            return;
        }
        let held = next.held;
        let job = next.job.insert(job);
        if held {
            // `OpSlot::release` takes it.
            return;
        }
        // Under the lock, which the work item takes first: the job's target
        // is not dropped before the queueing is over. (Queued already:
        // never, as above.)
        let _ = job.target().queue.queue().enqueue(self.clone());
    }

    /// The calling thread submits the slot's bios: if they end before
    /// [`OpSlot::release`], their end is left to it.
    fn hold(&self) {
        self.job.lock().held = true;
    }

    /// The calling thread is done submitting: the job of bios that ended
    /// meanwhile, if they did, for it to run.
    fn release(&self) -> Option<Job> {
        let mut next = self.job.lock();
        next.held = false;
        next.job.take()
    }

    /// A box for an operation without data (a flush, a discard, a write of
    /// zeroes): the kept one, whatever its pages (they are not used), or a
    /// page's. May sleep.
    fn any_transfer(&self) -> Result<KBox<Transfer<Stage, Data>>> {
        let spare = self.spare.lock().take();
        match spare {
            Some(t) => Ok(t),
            None => self.transfer(512),
        }
    }

    /// The operation is over: keeps its box (and its pages) for the next
    /// one if they are a page at most and the slot keeps pages, and frees
    /// the slot.
    fn give_back(&self, data: Option<KBox<Transfer<Stage, Data>>>) {
        if let Some(mut t) = data.filter(|t| self.keeps && t.data.len() <= KEPT_BYTES) {
            // Nothing of the operation stays (its slot would hold itself).
            t.ctx = Stage::default();
            let old = self.spare.lock().replace(t);
            drop(old);
        }
        // Release: the kept box is in place before the slot is free (a
        // plain store on x86, where `SeqCst` is a full barrier per
        // operation).
        self.taken.store(false, Release);
    }
}

impl WorkItem for OpSlot {
    type Pointer = Arc<OpSlot>;

    fn run(this: Arc<OpSlot>) {
        // (The lock goes before the operation runs: it sleeps.)
        let job = this.job.lock().job.take();
        match job {
            Some(Job::Start {
                target,
                busy,
                req,
                io,
                data,
            }) => {
                // Its bios go now (deferred: counted as waiting).
                busy.0.waiting.fetch_sub(1, Relaxed);
                start_op(this, target, busy, req, io, data, Origin::Queue)
            }
            Some(Job::Ended { target, t, res }) => end_op(this, target, t, res, Origin::Queue),
            None => {}
        }
    }
}

/// A session's slots: for each channel, one per tag.
struct Slots {
    /// Each channel's, made at the open (or at the channel's first
    /// operation if the open could not); empty if they could not be made.
    channels: KVec<SetOnce<KVec<Arc<OpSlot>>>>,
}

impl Slots {
    /// None made yet. May sleep.
    fn new() -> Result<Self> {
        let mut channels = KVec::with_capacity(usize::from(MAX_CHANNELS), GFP_KERNEL)?;
        for _ in 0..MAX_CHANNELS {
            channels.push(SetOnce::new(), GFP_KERNEL)?;
        }
        Ok(Self { channels })
    }

    /// Makes the slots of channels `0..channels`, `depth` each, where they
    /// are not made yet. May sleep.
    fn prepare(&self, channels: u16, depth: u32) {
        for c in self.channels.iter().take(usize::from(channels)) {
            Self::prepare_channel(c, depth);
        }
    }

    /// Makes a channel's `depth` slots if they are not made yet: none if
    /// there is no memory for them (its operations then get one each).
    fn prepare_channel(c: &SetOnce<KVec<Arc<OpSlot>>>, depth: u32) {
        if c.as_ref().is_some() {
            return;
        }
        let make = || -> Result<KVec<Arc<OpSlot>>> {
            // CAST: a depth is at most a few thousand.
            let mut slots = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
            for tag in 0..depth {
                slots.push(OpSlot::new(tag < KEPT_TAGS)?, GFP_KERNEL)?;
            }
            Ok(slots)
        };
        // Made concurrently by another operation of the channel: theirs
        // are kept.
        let _ = c.populate(make().unwrap_or_default());
    }

    /// Tag `tag` of channel `qid`'s slot, taken, if it has one and it is
    /// free.
    fn get(&self, qid: u16, tag: u32) -> Option<Arc<OpSlot>> {
        let slots = self.channels.get(usize::from(qid))?.as_ref()?;
        // CAST: a tag is below the depth, a `usize`.
        let slot = slots.get(tag as usize)?;
        slot.try_take().then(|| slot.clone())
    }

    /// The slot of request `req` of session `s`, taken; a new one for this
    /// operation alone if its channel has none (the session was not
    /// connected yet at its open, and is not now, or there was no memory).
    /// May sleep.
    fn take(&self, s: &SessionRef, req: &Incoming) -> Result<Arc<OpSlot>> {
        let (qid, tag) = req.tag();
        let c = self.channels.get(usize::from(qid)).ok_or(EINVAL)?;
        if c.as_ref().is_none() {
            // Made by the open, unless the session was not connected yet
            // then: now (the limits take the session's lock).
            if let Ok(l) = s.limits() {
                Self::prepare_channel(c, l.incoming_depth);
            }
        }
        if let Some(slot) = self.get(qid, tag) {
            return Ok(slot);
        }
        // CAST: a tag is below the depth, a `usize`.
        if c.as_ref().is_some_and(|slots| (tag as usize) < slots.len()) {
            // Never: a target's session does not reconnect, so no operation
            // of an earlier connection holds the tag's slot.
            crate::ratelimit::pr_warn_limited!(
                "target: session {}: the slot of tag {} of channel {} is taken\n",
                s.id(),
                tag,
                qid
            );
        }
        let slot = OpSlot::new(false)?;
        slot.try_take();
        Ok(slot)
    }
}

/// An open, for the target's open queue. (Nothing of it holds the
/// target: the module's exit drops the target's last reference, whose
/// queues run what is left on them then.)
struct OpenJob {
    /// The export it names.
    export: Arc<Export>,
    state: Arc<SessionState>,
    session: SessionHandle,
    req: Incoming,
    open: Open,
}

/// An open on the target's open queue, which may sleep (an open waits for
/// the operations of the session it replaces).
#[pin_data]
struct OpenWork {
    #[pin]
    work: Work<OpenWork>,
    /// Taken when it runs.
    #[pin]
    open: SpinLock<Option<OpenJob>>,
}

impl_has_work! {
    impl HasWork<Self> for OpenWork { self.work }
}

impl Target {
    /// Runs `open` on the open queue. If it cannot (no memory), its
    /// request is answered `EIO`.
    fn queue_open(&self, open: OpenJob) {
        let w = KBox::pin_init(
            pin_init!(OpenWork {
                work <- new_work!("ferry_blk::OpenWork::work"),
                open <- new_spinlock!(Some(open)),
            }),
            GFP_KERNEL,
        );
        // Without memory the open went with the initializer: its request
        // answered `EIO` as it dropped.
        // A new box is never queued already: it always goes.
        if let Ok(w) = w {
            self.opens.queue().enqueue(w);
        }
    }
}

impl WorkItem for OpenWork {
    type Pointer = Pin<KBox<OpenWork>>;

    fn run(this: Pin<KBox<OpenWork>>) {
        // (The lock goes before the open runs: it sleeps.)
        let open = this.open.lock().take();
        if let Some(o) = open {
            o.state.answer_open(o.export, &o.session, o.req, o.open);
        }
    }
}

/// Where [`start_op`] runs.
#[derive(Clone, Copy, PartialEq)]
enum Origin {
    /// Where the request, or a write's data, came: ferry's completion work
    /// (or the thread tearing a channel down), which must not wait long:
    /// while it does, its channel processes nothing, heartbeats included.
    Completion,
    /// The target's queue, where a submission may wait.
    Queue,
}

/// Starts block operation `io` in `slot`: its bios, which end in
/// [`BioOwner::ended`]. `data`: a write's, or the box made for a read's.
///
/// From the completion's context, as nvmet submits from its completion's:
/// reads and writes go to a device that takes bios that must not wait
/// ([`Bdev::submit_nowait`]) from here, if they fit one bio the block layer
/// does not split (it fails such a bio that must not wait). Any other
/// operation (a flush would wait for writeback throttling) or device goes
/// to the target's queue, as does an operation whose bios would have waited
/// (see [`end_op`]), and every operation while one deferred waits there
/// (so that it is not overtaken again and again).
fn start_op(
    slot: Arc<OpSlot>,
    target: Arc<Target>,
    busy: Busy,
    req: Incoming,
    io: Io,
    data: Option<KBox<Transfer<Stage, Data>>>,
    from: Origin,
) {
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    if hostile::stalls(&busy, &io) {
        if from == Origin::Completion {
            return defer(slot, target, busy, req, io, data);
        }
        hostile::stall_write(&busy, &io);
    }
    let t = match (io.op, data) {
        (_, Some(t)) => Ok(t),
        (IoOp::Read, None) => slot.transfer(io.len),
        (IoOp::Write, None) => Err(EINVAL),
        (_, None) => slot.any_transfer(),
    };
    let mut t = match t {
        Ok(t) => t,
        Err(e) => {
            // (The target goes before the operation's count: see `Job`.)
            drop(target);
            return finish(Some(&*slot), busy, req, io, Err(e), None);
        }
    };
    // Counted before the deletion flag was read: the device is there until
    // the operation's count goes.
    let Some(bdev) = busy.0.bdev.try_access_with(|b| b.clone()) else {
        drop(target);
        return finish(Some(&*slot), busy, req, io, Err(ENODEV), Some(t));
    };
    let nowait = from == Origin::Completion;
    // (A read's or a write's pages are whole pages: one segment each at
    // most.) CAST: a page's size fits a `u32`.
    let segments = io.len.div_ceil(kernel::page::PAGE_SIZE as u32);
    if nowait
        && !(matches!(io.op, IoOp::Read | IoOp::Write)
            && busy.0.waiting.load(Relaxed) == 0
            && bdev.nowait()
            && bdev.fits_one_bio(io.sector, io.len, segments))
    {
        drop(bdev);
        busy.0.stats.deferred();
        return defer(slot, target, busy, req, io, Some(t));
    }
    t.ctx = Stage {
        target: Some(target),
        bdev: Some(bdev),
        slot: Some(slot),
        busy: Some(busy),
        io: Some(io),
        req: Some(req),
        zero_pages: false,
        nowait,
    };
    submit(t, from);
}

/// Sends operation `io` to the target's queue, where its bios are
/// submitted (counted as waiting there until they are).
fn defer(
    slot: Arc<OpSlot>,
    target: Arc<Target>,
    busy: Busy,
    req: Incoming,
    io: Io,
    data: Option<KBox<Transfer<Stage, Data>>>,
) {
    busy.0.waiting.fetch_add(1, Relaxed);
    slot.run(Job::Start {
        target,
        busy,
        req,
        io,
        data,
    });
}

/// Submits the bios of the operation in `t`'s stage, which holds its
/// device and its slot, from `from`.
///
/// If they end before the submission returns (a device that ends bios as
/// it takes them, as brd does, or one that refused them), the operation
/// goes on here, as nvmet's does from a bio's end: no hop to the target's
/// queue. Bios that end later, in an interrupt perhaps, go on there
/// (their data is sent with rdma_rw, which may allocate).
fn submit(mut t: KBox<Transfer<Stage, Data>>, from: Origin) {
    let (Some(io), Some(slot)) = (t.ctx.io.as_ref(), t.ctx.slot.clone()) else {
        // Never: the stage is the operation's.
        return;
    };
    let sectors = u64::from(io.len / 512);
    let op = match io.op {
        IoOp::Read => BioOp::Read,
        IoOp::Write => BioOp::Write {
            fua: io.flags & wire::IO_FUA != 0,
        },
        IoOp::Flush => BioOp::Flush,
        IoOp::Discard => BioOp::Discard { sectors },
        IoOp::WriteZeroes => BioOp::WriteZeroes {
            sectors,
            nounmap: io.flags & wire::IO_NOUNMAP != 0,
        },
    };
    let sector = io.sector;
    if matches!(op, BioOp::WriteZeroes { .. }) && zeroes_limit(&t.ctx) == Some(0) {
        // `__blkdev_issue_zeroout` writes zeroed pages: nothing to retry.
        t.ctx.zero_pages = true;
    }
    slot.hold();
    if t.ctx.nowait {
        Bdev::submit_nowait(op, sector, t);
    } else {
        Bdev::submit(op, sector, t);
    }
    match slot.release() {
        Some(Job::Ended { target, t, res }) => end_op(slot, target, t, res, from),
        // Never: an operation's bios end with `Ended`.
        Some(job) => slot.run(job),
        None => {}
    }
}

/// The largest native write of zeroes of the stage's device, if it has one
/// (0: the device has none).
fn zeroes_limit(stage: &Stage) -> Option<u32> {
    stage.bdev.as_ref().map(|b| b.max_write_zeroes_sectors())
}

/// Goes on with the operation in `t`, whose bios ended with `res`: a read's
/// data to the client, or the answer. From `from`: the target's queue, or
/// the completion's context that submitted the bios, if they ended there.
fn end_op(
    slot: Arc<OpSlot>,
    target: Arc<Target>,
    mut t: KBox<Transfer<Stage, Data>>,
    res: Result,
    from: Origin,
) {
    let op = t.ctx.io.as_ref().map(|io| io.op);
    let res = match (op, res) {
        // Its bios would have waited (or, never, the device no longer
        // takes bios that must not): submitted again on the target's
        // queue, where they may (from the completion's context, the job
        // goes there first).
        (Some(_), r) if t.ctx.goes_again(&r) => {
            if from == Origin::Completion {
                return slot.run(Job::Ended { target, t, res: r });
            }
            if let Some(busy) = t.ctx.busy.as_ref() {
                busy.0.stats.deferred();
                // (Counted as waiting where its bios ended.)
                busy.0.waiting.fetch_sub(1, Relaxed);
            }
            t.ctx.nowait = false;
            t.ctx.target = Some(target);
            t.ctx.slot = Some(slot);
            return submit(t, Origin::Queue);
        }
        // As `blkdev_issue_discard`: a device that stopped discarding.
        (Some(IoOp::Discard), Err(e)) if e == EOPNOTSUPP => Ok(()),
        // As `blkdev_issue_zeroout`: a device whose native write of zeroes
        // failed and was turned off meanwhile (its driver set the limit to
        // 0) gets zeroed pages instead, once. (One that failed without a
        // native one is not written again.)
        (Some(IoOp::WriteZeroes), Err(_))
            if !t.ctx.zero_pages && zeroes_limit(&t.ctx) == Some(0) =>
        {
            t.ctx.zero_pages = true;
            t.ctx.target = Some(target);
            t.ctx.slot = Some(slot);
            return submit(t, from);
        }
        (_, res) => res,
    };
    // Before the operation's count (see `Job`): the deletion of its export
    // closes the device once no operation is counted.
    drop(target);
    drop(t.ctx.bdev.take());
    let (Some(busy), Some(io), Some(req)) = (t.ctx.busy.take(), t.ctx.io.take(), t.ctx.req.take())
    else {
        // Never: `start_op` lends the box with all three.
        return slot.give_back(None);
    };
    if let Err(e) = res {
        busy.0.stats.backing_error();
        crate::ratelimit::pr_warn_limited!(
            "export {}: {:?} of {} bytes at sector {} failed: {:?}\n",
            busy.0.name,
            io.op,
            io.len,
            io.sector,
            e
        );
        return finish(Some(&*slot), busy, req, io, Err(e), Some(t));
    }
    if io.op == IoOp::Read {
        // The data goes to the client's pages now, and the answer right
        // behind it, as nvmet-rdma's: the client need not wait for this
        // side to see the write complete (`Stage::answered`).
        t.ctx = Stage {
            slot: Some(slot),
            busy: Some(busy),
            io: Some(io),
            ..Stage::default()
        };
        return req.write_respond(t, Ok(()), &[]);
    }
    finish(Some(&*slot), busy, req, io, Ok(()), Some(t))
}

/// A hostile target, in test builds only (the `blk_hostile_target` case):
/// an export whose name says how answers its clients wrongly.
#[cfg(CONFIG_FERRY_KUNIT_TEST)]
mod hostile {
    use super::*;

    /// How the target misbehaves towards the clients of an export.
    #[derive(Clone, Copy, PartialEq)]
    pub(super) enum Mode {
        /// As it should.
        None,
        /// `hostile-short`: the open's answer a byte short.
        Short,
        /// `hostile-bsize`: a logical block size of 1000 bytes.
        BlockSize,
        /// `hostile-notices`: a right answer, then notices of a wrong
        /// length, of an unknown kind, and of an impossible capacity.
        Notices,
        /// `hostile-drop`: every write fails the session under it, never
        /// answered (the client requeues it until its retries run out).
        Drop,
        /// `hostile-hold`: every write is held, never answered, until its
        /// session ends (the client's timeout resets the connection).
        Hold,
        /// `hostile-stall`: the export's first write stays "in the backing
        /// disk" until its session has ended and [`STALL_AFTER_END_MS`]
        /// more, then lands (the client's timeout resets the connection,
        /// and the write is sent again meanwhile).
        Stall,
    }

    /// How long a `hostile-stall` write lands after its session ended.
    const STALL_AFTER_END_MS: u64 = 8000;

    /// Whether `io` (counted by `busy`) may be the write [`stall_write`]
    /// holds: a write of a `hostile-stall` export that held none yet (it
    /// goes to the target's queue, where it may sleep).
    pub(super) fn stalls(busy: &Busy, io: &Io) -> bool {
        let e = &busy.0;
        e.name.as_bytes() == b"hostile-stall" && io.op == IoOp::Write && !e.stalled.load(SeqCst)
    }

    /// In `Stall` mode, holds the export's first write (`io`, counted by
    /// `busy`) before its bios are submitted, until its session has ended
    /// and [`STALL_AFTER_END_MS`] more (at most two minutes in all). On the
    /// target's queue: sleeps.
    pub(super) fn stall_write(busy: &Busy, io: &Io) {
        if !stalls(busy, io) || busy.0.stalled.swap(true, SeqCst) {
            return;
        }
        pr_info!(
            "target: hostile export: holding a write of {} bytes at sector {} in the backing disk\n",
            io.len,
            io.sector
        );
        let step = kernel::time::Delta::from_millis(10);
        for _ in 0..12_000 {
            if busy.1.closed.load(SeqCst) {
                break;
            }
            kernel::time::delay::fsleep(step);
        }
        kernel::time::delay::fsleep(kernel::time::Delta::from_millis(STALL_AFTER_END_MS as i64));
        pr_info!(
            "target: hostile export: the held write at sector {} lands now\n",
            io.sector
        );
    }

    impl Mode {
        /// The mode of the export just opened by the session of `opened`.
        pub(super) fn of(opened: &SetOnce<(Arc<Export>, bool)>) -> Self {
            match opened.as_ref().map(|(e, _)| e.name) {
                Some(n) if n.as_bytes() == b"hostile-short" => Self::Short,
                Some(n) if n.as_bytes() == b"hostile-bsize" => Self::BlockSize,
                Some(n) if n.as_bytes() == b"hostile-notices" => Self::Notices,
                Some(n) if n.as_bytes() == b"hostile-drop" => Self::Drop,
                Some(n) if n.as_bytes() == b"hostile-hold" => Self::Hold,
                Some(n) if n.as_bytes() == b"hostile-stall" => Self::Stall,
                _ => Self::None,
            }
        }
    }

    /// Answers the open `req` wrongly, as the export's mode says.
    pub(super) fn answer(s: &SessionRef, req: Incoming, desc: &Opened, mode: Mode) -> Result {
        pr_info!(
            "target: hostile export: answering session {} wrongly\n",
            s.id()
        );
        let mut b = desc.encode();
        match mode {
            Mode::Short => return req.respond(Ok(()), &b[..b.len() - 1]),
            Mode::BlockSize => b[16..20].copy_from_slice(&1000u32.to_le_bytes()),
            Mode::Notices | Mode::Drop | Mode::Hold | Mode::Stall | Mode::None => {}
        }
        req.respond(Ok(()), &b)?;
        if mode == Mode::Notices {
            let good = Notice::Resized {
                handle: desc.handle,
                sectors: u64::MAX,
            }
            .encode();
            let mut unknown = good;
            unknown[1] = 3;
            for msg in [&good[..15], &unknown[..], &good[..]] {
                let _ = s.send(msg, Wait::No);
            }
        }
        Ok(())
    }

    /// In `Drop` mode, fails session `s` under the write of header `hdr`,
    /// which came on channel `qid` and is never answered: whether it did.
    pub(super) fn drop_write(
        opened: &SetOnce<(Arc<Export>, bool)>,
        s: &SessionRef,
        qid: u16,
        hdr: &[u8; wire::IO_LEN],
    ) -> bool {
        if Mode::of(opened) != Mode::Drop || !Io::decode(hdr).is_ok_and(|io| io.op == IoOp::Write) {
            return false;
        }
        // The write's own channel fails first, before the write is dropped
        // (a dropped request is answered `EIO` on its own channel, if that
        // is still up): the answer goes nowhere. Failed after another, it
        // could be out of reach already (the first failure closes the
        // session) and still up, and the write would be answered. The
        // others fail too, though the session's close would take them
        // anyway: all a session may have (its limits are not known while
        // its last channels still connect, and the others just refuse).
        let own = s.reset_channel(qid).is_ok();
        let others = (0..MAX_CHANNELS)
            .filter(|&q| q != qid && s.reset_channel(q).is_ok())
            .count();
        pr_info!(
            "target: hostile export: failing session {} under a write (its channel {} reset: {}, {} others)\n",
            s.id(),
            qid,
            own,
            others
        );
        true
    }

    /// In `Hold` mode, keeps the write `req` of header `hdr` unanswered
    /// until session `s` (whose `state` it is) ends; else gives it back.
    pub(super) fn hold_write(
        state: &SessionState,
        s: &SessionRef,
        req: Incoming,
        hdr: &[u8; wire::IO_LEN],
    ) -> Option<Incoming> {
        if Mode::of(&state.opened) != Mode::Hold
            || !Io::decode(hdr).is_ok_and(|io| io.op == IoOp::Write)
        {
            return Some(req);
        }
        let mut phase = state.phase.lock();
        if phase.ended {
            return Some(req);
        }
        if phase.held.reserve(1, GFP_KERNEL).is_err() {
            return Some(req);
        }
        if let Err(e) = phase.held.push_within_capacity(req) {
            return Some(e.0);
        }
        pr_info!(
            "target: hostile export: holding a write of session {}\n",
            s.id()
        );
        None
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_blk_target_slots)]
mod tests {
    use super::*;

    /// Marks `t`'s pages with `byte`.
    fn mark(t: &mut KBox<Transfer<Stage, Data>>, byte: u8) -> Result {
        let n = t.data.len();
        let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
        v.resize(n, byte, GFP_KERNEL)?;
        t.data.write(0, &v)
    }

    /// Whether `t`'s pages hold `byte` throughout.
    fn marked(t: &KBox<Transfer<Stage, Data>>, byte: u8) -> Result<bool> {
        let n = t.data.len();
        let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
        v.resize(n, 0, GFP_KERNEL)?;
        t.data.read(0, &mut v)?;
        Ok(v.iter().all(|&b| b == byte))
    }

    #[test]
    fn one_operation_at_a_time_holds_a_slot() -> Result {
        let slot = OpSlot::new(true)?;
        assert!(slot.try_take());
        assert!(!slot.try_take());
        slot.give_back(None);
        assert!(slot.try_take());
        Ok(())
    }

    #[test]
    fn a_page_of_data_is_kept_for_the_next_operation_of_its_length() -> Result {
        let slot = OpSlot::new(true)?;
        let mut t = slot.transfer(KEPT_BYTES as u32)?;
        mark(&mut t, 0x5a)?;
        slot.give_back(Some(t));
        // The same pages for the same length.
        let t = slot.transfer(KEPT_BYTES as u32)?;
        assert!(marked(&t, 0x5a)?);
        slot.give_back(Some(t));
        // More than a page leaves the kept page alone (new pages, not
        // zeroed: whatever they hold), and is not kept.
        let mut t = slot.transfer(2 * KEPT_BYTES as u32)?;
        assert_eq!(t.data.len(), 2 * KEPT_BYTES);
        mark(&mut t, 0x33)?;
        slot.give_back(Some(t));
        let t = slot.transfer(KEPT_BYTES as u32)?;
        assert!(marked(&t, 0x5a)?);
        slot.give_back(Some(t));
        // Another length gets new pages, kept in turn.
        let mut t = slot.transfer(512)?;
        assert_eq!(t.data.len(), 512);
        mark(&mut t, 0xa5)?;
        slot.give_back(Some(t));
        assert!(marked(&slot.transfer(512)?, 0xa5)?);
        Ok(())
    }

    #[test]
    fn a_kept_box_holds_nothing_of_its_operation() -> Result {
        let slot = OpSlot::new(true)?;
        let mut t = slot.transfer(KEPT_BYTES as u32)?;
        t.ctx.slot = Some(slot.clone());
        slot.give_back(Some(t));
        // The slot does not hold itself through its kept box.
        let spare = slot.spare.lock();
        let kept = spare.as_ref().ok_or(ENOENT)?;
        assert!(kept.ctx.slot.is_none());
        Ok(())
    }

    #[test]
    fn bios_that_end_in_their_submission_are_left_to_the_submitter() -> Result {
        let target = Target::new()?;
        let slot = OpSlot::new(true)?;
        assert!(slot.try_take());
        // Ended while held: nothing queued, the submitter takes the job.
        slot.hold();
        let t = slot.transfer(512)?;
        slot.run(Job::Ended {
            target: target.clone(),
            t,
            res: Ok(()),
        });
        let job = slot.release().ok_or(ENOENT)?;
        assert!(matches!(job, Job::Ended { res: Ok(()), .. }));
        assert!(slot.release().is_none());
        drop(job);
        assert!(!slot.try_take());
        // Ended later: queued. The work item ends the operation (one
        // without a request here), which frees the slot.
        let t = slot.transfer(512)?;
        slot.run(Job::Ended {
            target: target.clone(),
            t,
            res: Ok(()),
        });
        let mut waited = 0;
        while !slot.try_take() {
            // The queued job runs within 10 s.
            assert!(waited < 10_000);
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
            waited += 1;
        }
        assert!(slot.release().is_none());
        Ok(())
    }

    #[test]
    fn each_tag_has_its_slot_and_a_taken_one_is_not_lent_again() -> Result {
        let slots = Slots::new()?;
        assert!(slots.get(0, 0).is_none());
        slots.prepare(2, 4);
        let a = slots.get(1, 3).ok_or(ENOENT)?;
        // Taken: not lent again until given back.
        assert!(slots.get(1, 3).is_none());
        let b = slots.get(0, 3).ok_or(ENOENT)?;
        assert!(!Arc::ptr_eq(&a, &b));
        // Beyond the depth, the channels made, or all channels: none.
        assert!(slots.get(0, 4).is_none());
        assert!(slots.get(2, 0).is_none());
        assert!(slots.get(MAX_CHANNELS, 0).is_none());
        a.give_back(None);
        let again = slots.get(1, 3).ok_or(ENOENT)?;
        assert!(Arc::ptr_eq(&a, &again));
        Ok(())
    }

    #[test]
    fn only_a_channels_first_tags_keep_a_page() -> Result {
        let slots = Slots::new()?;
        slots.prepare(1, KEPT_TAGS + 2);
        let first = slots.get(0, KEPT_TAGS - 1).ok_or(ENOENT)?;
        let last = slots.get(0, KEPT_TAGS + 1).ok_or(ENOENT)?;
        assert!(first.keeps && !last.keeps);
        let t = last.transfer(KEPT_BYTES as u32)?;
        last.give_back(Some(t));
        assert!(last.spare.lock().is_none());
        Ok(())
    }

    #[test]
    fn only_bios_not_to_wait_that_would_have_go_again() {
        let mut stage = Stage::default();
        // Submitted to wait (on the target's queue): whatever they ended
        // with is the operation's answer.
        for res in [Ok(()), Err(EAGAIN), Err(EOPNOTSUPP), Err(EIO)] {
            assert!(!stage.goes_again(&res));
        }
        // Not to wait: again on the queue if they would have waited (or
        // the device refused such bios), else their end is the answer.
        stage.nowait = true;
        assert!(stage.goes_again(&Err(EAGAIN)));
        assert!(stage.goes_again(&Err(EOPNOTSUPP)));
        assert!(!stage.goes_again(&Ok(())));
        assert!(!stage.goes_again(&Err(EIO)));
        assert!(!stage.goes_again(&Err(ENOSPC)));
    }
}
