// SPDX-License-Identifier: GPL-2.0

//! Requests and their zero-copy data: the state a channel keeps for them.
//!
//! **Requester.** A request takes a tag (one of the channel's `queue depth`)
//! and a credit. Data to the peer of at most the peer's inline size is
//! copied into the request message itself (inline): nothing is mapped or
//! registered, and the request is over when its response arrives. Other
//! data is DMA-mapped and registered with FRWR
//! regions of the channel's pool, each mapping at most the device's
//! fast-registration page list; the `REG_MR`s are chained before the request's
//! SEND, which names the regions (address, key, length) for the peer. The
//! peer reads or writes exactly those regions and answers with a response,
//! as a SEND_WITH_INV of the first key. When the response arrives, every key
//! the peer did not invalidate is invalidated here (`LOCAL_INV`); only when
//! all are invalid are the pages unmapped and the request completed. A
//! response that names a tag not in flight, or invalidates a key that is not
//! the request's, breaks the protocol and fails the channel.
//!
//! **Responder.** A request that arrives takes one of the channel's responder
//! tags; the consumer gets it as an `Incoming` (see `channel.rs`), moves
//! the data with `Channel::incoming_rdma` (rdma_rw against the requester's
//! regions) and answers with `Channel::respond`, or writes the data and
//! answers at once with `Channel::write_respond` (the answer posted right
//! behind the data when the transfer goes whole, its tag held until the
//! transfer's completion: [`early_answers`] more tags for those). A
//! requester can have at most its queue depth in flight, which is this
//! side's depth: a request beyond it breaks the protocol.
//!
//! **Failure.** The keys are only ever valid while the channel's QP lives.
//! When a channel is shut down, its QP is drained and destroyed, then every
//! region is deregistered, and only then are the requests still in flight
//! completed, with `ECONNABORTED`: no peer can reach their pages any more.

use kernel::{id_pool::IdPool, prelude::*, sync::Arc};

use crate::{
    rdma::{
        device::Registered,
        mr::{DmaDir, MappedSg, Mr, Remote, SgList},
        pd::Pd,
        qp::MAX_REGS,
    },
    wire::request::{Desc, Dir, RequestHead, ResponseHead, MAX_DESCS},
    wire::Refusal,
};

/// A request as a consumer submitted it.
pub(crate) trait Request: Send {
    /// The consumer's header, sent inline.
    fn header(&self) -> &[u8];
    /// Which way its data goes.
    fn dir(&self) -> Dir;
    /// The peer answered: its status, the bytes it moved and its header.
    fn set_response(&mut self, status: i32, moved: u32, hdr: &[u8]);
    /// The request is over (`status` 0: see `set_response`; else ferry's
    /// error), and the consumer owns its pages again. Called once.
    fn complete(self, status: i32);
}

/// What a responder is told when its RDMA READ or WRITE is over.
pub(crate) trait RdmaDone: Send {
    /// `status` 0 or an error; the consumer owns its pages again (they are
    /// unmapped).
    fn done(self, status: i32);
}

/// What one request's data may be so that it always fits the registrations
/// of a channel whose regions map `reg_pages` pages each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataLimits {
    /// Bytes.
    pub(crate) max_data: u32,
    /// Scatterlist entries.
    pub(crate) max_segments: u32,
    /// A mask of the gaps an entry may not have: every entry but the first
    /// starts, and every entry but the last ends, at a multiple of it plus
    /// one (a page), so the pages go into a region's page list as they are.
    pub(crate) virt_boundary_mask: u32,
}

impl DataLimits {
    /// The limits for regions of `reg_pages` pages of `page_size` bytes.
    /// A request gets at most `MAX_REGS` regions (and descriptors), whose
    /// page lists hold every page its data touches; data that starts in the
    /// middle of a page touches one page more than its length fills, so one
    /// page is kept for that (as nvme-rdma does).
    pub(crate) fn new(reg_pages: u32, page_size: u32) -> Self {
        // CAST: `MAX_REGS` and `MAX_DESCS` are 8.
        let pages = reg_pages.saturating_mul(MAX_REGS.min(MAX_DESCS) as u32);
        Self {
            max_data: pages
                .saturating_sub(1)
                .saturating_mul(page_size)
                .min(crate::wire::request::MAX_DATA),
            max_segments: pages,
            virt_boundary_mask: page_size - 1,
        }
    }
}

/// Most regions one request uses.
const REQ_REGS: usize = if MAX_REGS < MAX_DESCS {
    MAX_REGS
} else {
    MAX_DESCS
};

/// The most registered regions a channel keeps for `tags` requests: one
/// each, and enough besides for one request that needs them all. A request
/// finds its regions in the pool or waits (`EAGAIN`): none is registered on
/// the data path.
pub(crate) fn pool_regions(tags: u32) -> u32 {
    // CAST: `REQ_REGS` is 8.
    tags.saturating_add(REQ_REGS as u32 - 1)
}

/// The regions a client's channel registers when it is built: enough for
/// one request of the largest size, or a few small ones (a server's starts
/// with none). The pool grows from there, in process context (see
/// [`Xfer::wants_regions`]), up to [`pool_regions`]: a channel that carries
/// no requests (most of a server's) never registers more, and a connect does
/// not wait for a hundred registrations per channel.
// CAST: `REQ_REGS` is 8.
pub(crate) const FIRST_REGIONS: u32 = REQ_REGS as u32;

/// Encodes a tag: generation in the high bits, index in the low 16.
fn cookie(index: usize, generation: u16) -> u64 {
    // CAST: indices are below `MAX_QUEUE_DEPTH`.
    (u64::from(generation) << 16) | index as u64
}

/// The regions of one request, at most [`REQ_REGS`].
#[derive(Default)]
pub(crate) struct Regions {
    mrs: [Option<Mr>; REQ_REGS],
    n: usize,
}

impl Regions {
    fn push(&mut self, mr: Mr) -> Result<(), Mr> {
        match self.mrs.get_mut(self.n) {
            Some(slot) => {
                *slot = Some(mr);
                self.n += 1;
                Ok(())
            }
            None => Err(mr),
        }
    }

    fn len(&self) -> usize {
        self.n
    }

    fn iter(&self) -> impl Iterator<Item = &Mr> {
        self.mrs.iter().flatten()
    }

    /// The regions, as the QP registers them.
    pub(crate) fn as_slice(&self) -> &[Option<Mr>] {
        &self.mrs[..self.n]
    }

    /// Moves every region to `pool`, which has room for all (see
    /// [`Xfer::new`]).
    fn recycle(&mut self, pool: &mut KVec<Mr>) {
        for mr in self.mrs.iter_mut().filter_map(Option::take) {
            // Never fails: the pool holds every region of the channel.
            let _ = pool.push_within_capacity(mr);
        }
        self.n = 0;
    }
}

/// Keys to invalidate, at most [`REQ_REGS`].
pub(crate) struct Keys {
    keys: [u32; REQ_REGS],
    n: usize,
}

impl Keys {
    /// The keys.
    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.keys[..self.n]
    }
}

/// A request's data while it is in flight.
enum Held {
    /// Mapped and registered for the peer.
    Mapped(MappedSg),
    /// Copied into the request message: kept only to be given back.
    Inline(SgList),
}

impl Held {
    /// The list, unmapped.
    fn release(self) -> SgList {
        match self {
            Self::Mapped(m) => m.unmap(),
            Self::Inline(sg) => sg,
        }
    }
}

/// A request in flight.
struct Outstanding<R> {
    req: R,
    data: Option<Held>,
    regs: Regions,
    /// The data length the peer was offered.
    data_len: u32,
    /// Set once the response is in and the invalidations are posted.
    status: Option<i32>,
}

/// A request that is over: complete it outside the channel's lock.
pub(crate) struct Finished<R> {
    req: R,
    data: Option<Held>,
    status: i32,
}

impl<R: Request> Finished<R> {
    /// Unmaps the pages and tells the consumer.
    pub(crate) fn complete(self) {
        drop(self.data.map(Held::release));
        self.req.complete(self.status);
    }
}

/// Why [`Xfer::submit`] refused a request: the error, and the request and
/// its data, back to the caller.
pub(crate) type Refused<R> = (Error, R, Option<SgList>);

/// Most bytes of the peer's requests a channel has posted for RDMA at once;
/// the transfers beyond wait, in order, for earlier ones to end (a larger
/// one goes alone). Everything the channel sends waits behind the RDMA
/// posted before it: a send queue is ordered, and rxe sends nothing past a
/// READ until its responses are in. So this bounds how long a response, a
/// credit or a heartbeat waits behind data. At 1 MiB it takes 0.1 ms at
/// 100 Gb/s, and leaves room for 8 transfers of 128 KiB, more than a
/// path's bandwidth-delay product.
pub(crate) const RDMA_BUDGET: u64 = 1 << 20;

/// Responder entries beyond the queue depth: a transfer to the requester
/// that ends with its answer (`Channel::write_respond`) holds its entry
/// until the transfer's completion, though the answer may go at once,
/// right behind the data, and the requester reuse its tag. So many answers
/// may go before their transfers' completions; beyond, an answer waits for
/// its transfer's.
pub(crate) fn early_answers(depth: u32) -> u32 {
    (depth / 8).clamp(1, 16)
}

/// The responder tags of a channel of queue depth `depth`: one per request
/// the requester may have in flight, and [`early_answers`].
pub(crate) fn responder_tags(depth: u32) -> u32 {
    depth + early_answers(depth)
}

/// A responder's RDMA in flight: the requester's regions are moved one after
/// the other, each against its slice of the consumer's list.
pub(crate) struct RdmaOp<D> {
    pub(crate) done: D,
    /// While the transfer waits for [`RDMA_BUDGET`]: its first region, and
    /// where it goes.
    pub(crate) first: Option<(SgList, Remote)>,
    /// The consumer's list, shared by the slices of a request of several
    /// regions; `None` for one region, which takes the list whole.
    pub(crate) list: Option<Arc<SgList>>,
    pub(crate) head: RequestHead,
    pub(crate) dir: DmaDir,
    /// The next region, and where its bytes start in `list`.
    pub(crate) next: usize,
    pub(crate) offset: u64,
}

impl<D: RdmaDone> RdmaOp<D> {
    /// The transfer of `head`'s regions against `sg` (which holds exactly
    /// its data), and its first region: the part of `sg` it takes and
    /// where it goes. A request of one region (the common case: see
    /// [`DataLimits`]) allocates nothing; one of several shares `sg` among
    /// its slices, which allocate their entries (as rdma_rw allocates for
    /// a list of several entries).
    pub(crate) fn start(
        done: D,
        sg: SgList,
        head: RequestHead,
        dir: DmaDir,
    ) -> core::result::Result<(Self, SgList, Remote), (Error, D)> {
        let Some(&d) = head.descs[..head.ndesc].first() else {
            return Err((EINVAL, done));
        };
        let remote = Remote {
            addr: d.addr,
            len: d.len,
            rkey: d.rkey,
        };
        let mut op = Self {
            done,
            first: None,
            list: None,
            head,
            dir,
            next: 1,
            offset: u64::from(d.len),
        };
        if head.ndesc == 1 {
            if sg.len() != u64::from(d.len) {
                return Err((EINVAL, op.done));
            }
            return Ok((op, sg, remote));
        }
        let first = Arc::new(sg, GFP_KERNEL)
            .map_err(Error::from)
            .and_then(|list| {
                let first = SgList::slice(&list, 0, d.len)?;
                op.list = Some(list);
                Ok(first)
            });
        match first {
            Ok(first) => Ok((op, first, remote)),
            Err(e) => Err((e, op.done)),
        }
    }

    /// The next region, what a transfer of it needs: the list, where the
    /// region's bytes start in it, the region and the direction; `None`
    /// after the last. Advances. Allocates nothing.
    pub(crate) fn next_desc(&mut self) -> Option<(Arc<SgList>, u64, Desc, DmaDir)> {
        let list = self.list.clone()?;
        let d = *self.head.descs[..self.head.ndesc].get(self.next)?;
        let at = self.offset;
        self.next += 1;
        self.offset += u64::from(d.len);
        Some((list, at, d, self.dir))
    }
}

impl<D> RdmaOp<D> {
    /// Whether every region is posted: none waits for [`RDMA_BUDGET`] or
    /// for the one before it to complete.
    pub(crate) fn posted_whole(&self) -> bool {
        self.first.is_none() && self.next >= self.head.ndesc
    }
}

/// A channel's request state (under the channel's lock). Allocates nothing
/// after [`Xfer::new`] and never sleeps, but for [`Xfer::take_pool`].
pub(crate) struct Xfer<R, D> {
    /// The channel's own handle on its PD's device, which the requests'
    /// mappings hold: none of them touches the device's counts, which
    /// every channel on it shares.
    dev: Option<Arc<Registered>>,
    out: KVec<Option<Outstanding<R>>>,
    gens: KVec<u16>,
    /// The requester's tags in use.
    tags: IdPool,
    /// Where the next search for a free tag starts.
    next_tag: usize,
    in_flight: u32,
    /// Registered regions not in use, with room for [`pool_regions`].
    pool: KVec<Mr>,
    /// Regions registered so far, and the most there may be.
    regions: u32,
    max_regions: u32,
    /// A request found the pool empty since it last grew.
    short: bool,
    /// The responder's tags' transfers.
    incoming: KVec<InSlot<D>>,
    /// Bytes of the responder's transfers posted and not over.
    rdma_posted: u64,
    /// The responder's tags whose transfer waits for [`RDMA_BUDGET`],
    /// oldest first (room for every tag, as the responses that wait for
    /// credits have).
    waiting: KVec<u32>,
}

impl<R: Request, D> Xfer<R, D> {
    /// State for `tags` requests to the peer and [`responder_tags`] from
    /// it, with `first` regions of `pd` that map up to `max_pages` pages
    /// each (none without a PD: then only requests without data go). May
    /// sleep.
    pub(crate) fn new(pd: Option<&Arc<Pd>>, tags: u32, max_pages: u32, first: u32) -> Result<Self> {
        let n = tags as usize;
        let n_in = responder_tags(tags) as usize;
        let regions = pool_regions(tags) as usize;
        let dev = match pd {
            Some(pd) => Some(Arc::new(pd.device().clone(), GFP_KERNEL)?),
            None => None,
        };
        let mut x = Self {
            dev,
            out: KVec::with_capacity(n, GFP_KERNEL)?,
            gens: KVec::with_capacity(n, GFP_KERNEL)?,
            tags: IdPool::with_capacity(n, GFP_KERNEL)?,
            next_tag: 0,
            in_flight: 0,
            pool: KVec::with_capacity(regions, GFP_KERNEL)?,
            regions: 0,
            max_regions: 0,
            short: false,
            incoming: KVec::with_capacity(n_in, GFP_KERNEL)?,
            rdma_posted: 0,
            waiting: KVec::with_capacity(n_in, GFP_KERNEL)?,
        };
        for _ in 0..n {
            x.out.push(None, GFP_KERNEL)?;
            x.gens.push(0, GFP_KERNEL)?;
        }
        for _ in 0..n_in {
            x.incoming.push(InSlot::new(), GFP_KERNEL)?;
        }
        // The pool may hold more ids than asked for: those are never free.
        if n < x.tags.capacity() {
            while let Some(id) = x.tags.find_unused_id(n) {
                id.acquire();
            }
        }
        if let Some(pd) = pd.filter(|_| max_pages > 0) {
            // CAST: `regions` came from a `u32`.
            x.max_regions = regions as u32;
            for _ in 0..first.min(x.max_regions) {
                x.pool.push(Mr::new(pd, max_pages)?, GFP_KERNEL)?;
                x.regions += 1;
            }
        }
        Ok(x)
    }

    /// How many regions the pool should grow by now: as many as it has
    /// (up to its most), once a request found it empty or a quarter or less
    /// of it is free. A pool that has none (a server's) grows only once a
    /// request needed one.
    pub(crate) fn wants_regions(&self) -> u32 {
        if self.regions >= self.max_regions {
            return 0;
        }
        // CAST: the pool holds at most `max_regions`, a `u32`.
        let free = self.pool.len() as u32;
        let low = self.regions > 0 && free <= self.regions / 4;
        if !self.short && !low {
            return 0;
        }
        self.regions.max(1).min(self.max_regions - self.regions)
    }

    /// Adds regions that the pool asked for ([`Xfer::wants_regions`]);
    /// those beyond its room come back. Allocates nothing.
    pub(crate) fn add_regions(&mut self, mrs: &mut KVec<Mr>) {
        while self.regions < self.max_regions {
            let Some(mr) = mrs.pop() else { break };
            // Never fails: the pool has room for `max_regions`.
            if let Err(e) = self.pool.push_within_capacity(mr) {
                let _ = mrs.push_within_capacity(e.0);
                break;
            }
            self.regions += 1;
        }
        self.short = false;
    }

    /// Teardown: every region not in use, to be dropped (deregistered)
    /// without the channel's lock.
    pub(crate) fn take_pool(&mut self) -> KVec<Mr> {
        let mut taken = KVec::new();
        core::mem::swap(&mut taken, &mut self.pool);
        taken
    }

    /// A free tag: `own`, if the caller chose it (`EINVAL` beyond the tag
    /// count, `EBUSY` while it is in flight), or else the next free one.
    fn take_tag(&mut self, own: Option<u32>) -> Result<usize> {
        let n = self.out.len();
        let id = match own {
            Some(t) if t as usize >= n => return Err(EINVAL),
            Some(t) => match self.tags.find_unused_id(t as usize) {
                Some(id) if id.as_usize() == t as usize => id.acquire(),
                _ => return Err(EBUSY),
            },
            None => {
                let from = if self.next_tag < n { self.next_tag } else { 0 };
                match self.tags.find_unused_id(from) {
                    Some(id) if id.as_usize() < n => id.acquire(),
                    _ => match self.tags.find_unused_id(0) {
                        Some(id) if id.as_usize() < n => id.acquire(),
                        _ => return Err(EAGAIN),
                    },
                }
            }
        };
        self.next_tag = id + 1;
        Ok(id)
    }

    /// Requester: sends `req` through `send` (which gets the tag, the
    /// regions to register, the cookie, the head, the header and the data to
    /// copy inline, and writes the message), under tag `own` if the caller
    /// chose one. Data to the peer of at most `inline_max` bytes goes inline;
    /// other data is mapped and registered. At most `limit` requests are in
    /// flight. On failure the request and its data come back: `EAGAIN`
    /// without a free tag or enough free regions, `EINVAL` for registered
    /// data without a PD. Allocates nothing and never sleeps, and touches
    /// no count of the device's (the mapping holds the channel's handle).
    pub(crate) fn submit(
        &mut self,
        limit: u32,
        inline_max: u32,
        own: Option<u32>,
        req: R,
        data: Option<SgList>,
        send: impl FnOnce(u32, &Regions, u64, &RequestHead, &[u8], Option<&SgList>) -> Result,
    ) -> Result<(), Refused<R>> {
        let dir = req.dir();
        if (dir == Dir::None) != data.is_none() || data.as_ref().is_some_and(|d| d.is_empty()) {
            return Err((EINVAL, req, data));
        }
        if self.in_flight >= limit {
            return Err((EAGAIN, req, data));
        }
        let index = match self.take_tag(own) {
            Ok(i) => i,
            Err(e) => return Err((e, req, data)),
        };
        let mut head = RequestHead {
            dir,
            descs: [Desc::default(); MAX_DESCS],
            ndesc: 0,
            data_len: 0,
            inline: false,
        };
        let mut regs = Regions::default();
        let mut held = None;
        match data {
            None => {}
            Some(sg) if dir == Dir::ToPeer && sg.len() <= u64::from(inline_max) => {
                head.inline = true;
                // CAST: at most `inline_max`, a `u32`.
                head.data_len = sg.len() as u32;
                held = Some(Held::Inline(sg));
            }
            Some(sg) => {
                let Some(dev) = self.dev.as_ref() else {
                    self.tags.release_id(index);
                    return Err((EINVAL, req, Some(sg)));
                };
                let ddir = match dir {
                    Dir::FromPeer => DmaDir::FromDevice,
                    _ => DmaDir::ToDevice,
                };
                // A failed mapping drops the list: the request still owns its
                // pages, and the caller gets the error.
                let m = match MappedSg::new(dev, sg, ddir) {
                    Ok(m) => m,
                    Err(e) => {
                        self.tags.release_id(index);
                        return Err((e, req, None));
                    }
                };
                match self.register(&m, &mut head, &mut regs) {
                    Ok(()) => held = Some(Held::Mapped(m)),
                    Err(e) => {
                        regs.recycle(&mut self.pool);
                        self.tags.release_id(index);
                        return Err((e, req, Some(m.unmap())));
                    }
                }
            }
        }
        self.gens[index] = self.gens[index].wrapping_add(1);
        let c = cookie(index, self.gens[index]);
        let inline = match &held {
            Some(Held::Inline(sg)) => Some(sg),
            _ => None,
        };
        // CAST: `index` is below the tag count, a `u32`.
        let res = send(index as u32, &regs, c, &head, req.header(), inline);
        if let Err(e) = res {
            regs.recycle(&mut self.pool);
            self.tags.release_id(index);
            return Err((e, req, held.map(Held::release)));
        }
        self.out[index] = Some(Outstanding {
            req,
            data: held,
            regs,
            data_len: head.data_len,
            status: None,
        });
        self.in_flight += 1;
        Ok(())
    }

    /// Registers `m` with as many regions of the pool as it takes (at most
    /// [`REQ_REGS`]): `EMSGSIZE` if that is not enough, `EAGAIN` if the
    /// pool runs out.
    fn register(&mut self, m: &MappedSg, head: &mut RequestHead, regs: &mut Regions) -> Result {
        let mut at = m.start();
        while at.index() < m.mapped() {
            if regs.len() == REQ_REGS {
                return Err(EMSGSIZE);
            }
            let Some(mut mr) = self.pool.pop() else {
                self.short = true;
                return Err(EAGAIN);
            };
            let Remote { addr, len, rkey } = match mr.map(m, &mut at) {
                Ok(r) => r,
                Err(e) => {
                    let _ = self.pool.push_within_capacity(mr);
                    return Err(e);
                }
            };
            head.descs[head.ndesc] = Desc { addr, rkey, len };
            head.ndesc += 1;
            if let Err(mr) = regs.push(mr) {
                let _ = self.pool.push_within_capacity(mr);
                return Err(EMSGSIZE);
            }
            head.data_len = head.data_len.checked_add(len).ok_or(EMSGSIZE)?;
        }
        Ok(())
    }

    /// Requester: the response `payload` to `cookie` arrived, invalidating
    /// `invalidated` if the peer sent it with invalidate. Returns the
    /// request if it is over, or the keys to invalidate first (of tag
    /// `index`, see [`Xfer::invalidated`]).
    pub(crate) fn response(
        &mut self,
        cookie: u64,
        invalidated: Option<u32>,
        payload: &[u8],
    ) -> Result<Response<R>, Refusal> {
        // CAST: the low 16 bits are the index, the next 16 the generation.
        let (index, gen) = ((cookie & 0xffff) as usize, (cookie >> 16) as u16);
        let stray = Refusal::breach("a response to no request in flight");
        if cookie >> 32 != 0 || self.gens.get(index) != Some(&gen) {
            return Err(stray);
        }
        let o = self
            .out
            .get_mut(index)
            .and_then(Option::as_mut)
            .filter(|o| o.status.is_none())
            .ok_or(stray)?;
        let (head, hdr) = ResponseHead::parse(payload, o.data_len)
            .map_err(|_| Refusal::breach("a malformed response"))?;
        if let Some(k) = invalidated {
            if !o.regs.iter().any(|m| m.rkey() == k) {
                return Err(Refusal::breach(
                    "a response that invalidates a key not its own",
                ));
            }
        }
        o.req.set_response(head.status, head.moved, hdr);
        o.status = Some(head.status);
        let mut keys = Keys {
            keys: [0; REQ_REGS],
            n: 0,
        };
        for m in o.regs.iter().filter(|m| Some(m.rkey()) != invalidated) {
            keys.keys[keys.n] = m.rkey();
            keys.n += 1;
        }
        if keys.n == 0 {
            return self.finish(index).map(Response::Finished).ok_or(stray);
        }
        // CAST: below the tag count, a `u32`.
        Ok(Response::Invalidate(index as u32, keys))
    }

    /// Requester: the invalidations of tag `index` completed.
    pub(crate) fn invalidated(&mut self, index: u32) -> Option<Finished<R>> {
        let o = self.out.get(index as usize)?.as_ref()?;
        o.status?;
        self.finish(index as usize)
    }

    /// Takes request `index` out, its regions back to the pool.
    fn finish(&mut self, index: usize) -> Option<Finished<R>> {
        let mut o = self.out.get_mut(index)?.take()?;
        self.in_flight -= 1;
        self.tags.release_id(index);
        o.regs.recycle(&mut self.pool);
        Some(Finished {
            status: 0,
            req: o.req,
            data: o.data,
        })
    }

    /// Teardown, after the QP is gone: one request still in flight, to be
    /// completed with `ECONNABORTED`, and its regions. Both are for the
    /// caller to end without the channel's lock: the regions first (their
    /// deregistration may sleep, and ends every key the peer had), then the
    /// request, whose pages go back.
    pub(crate) fn abort_one(&mut self) -> Option<(Finished<R>, Regions)> {
        let i = self.out.iter().position(Option::is_some)?;
        let o = self.out[i].take()?;
        self.in_flight -= 1;
        self.tags.release_id(i);
        let f = Finished {
            req: o.req,
            data: o.data,
            status: ECONNABORTED.to_errno(),
        };
        Some((f, o.regs))
    }

    /// Whether requests are at work: this side's wait for the peer's answer,
    /// or this side moves the data of the peer's by RDMA (or has it wait for
    /// [`RDMA_BUDGET`]).
    pub(crate) fn busy(&self) -> bool {
        self.in_flight > 0 || self.incoming.iter().any(|s| s.rdma.is_some())
    }

    /// What is at work, for logs: this side's requests waiting for an
    /// answer, and the peer's requests whose RDMA is in flight or waits for
    /// [`RDMA_BUDGET`].
    pub(crate) fn load(&self) -> (u32, usize) {
        let rdma = self.incoming.iter().filter(|s| s.rdma.is_some()).count();
        (self.in_flight, rdma)
    }

    /// Responder: a request came for tag `tag`; nothing of it moved yet.
    pub(crate) fn arrived(&mut self, tag: u32) {
        if let Some(s) = self.incoming.get_mut(tag as usize) {
            *s = InSlot::new();
        }
    }

    /// Responder: tag `tag`'s data moved (or, `0`, did not).
    pub(crate) fn set_moved(&mut self, tag: u32, moved: u32) {
        if let Some(s) = self.incoming.get_mut(tag as usize) {
            s.moved = moved;
        }
    }

    /// Responder: the bytes of tag `tag`'s data moved, for its response.
    pub(crate) fn moved(&self, tag: u32) -> u32 {
        self.incoming.get(tag as usize).map_or(0, |s| s.moved)
    }

    /// Responder: remembers tag `tag`'s RDMA `op`, whose first region is
    /// `first` (going to `remote`). They come back if the transfer may be
    /// posted now, its bytes counted against [`RDMA_BUDGET`]; `None` if it
    /// waits behind others, for [`Xfer::next_rdma`].
    pub(crate) fn start_rdma(
        &mut self,
        tag: u32,
        mut op: RdmaOp<D>,
        first: SgList,
        remote: Remote,
    ) -> Option<(SgList, Remote)> {
        let len = u64::from(op.head.data_len);
        let Some(slot) = self.incoming.get_mut(tag as usize) else {
            return Some((first, remote));
        };
        let fits = self.rdma_posted == 0 || self.rdma_posted + len <= RDMA_BUDGET;
        // (Room for a waiting tag is never short: a tag waits once at most,
        // and there is room for each.)
        let waits =
            !(self.waiting.is_empty() && fits) && self.waiting.push_within_capacity(tag).is_ok();
        if waits {
            op.first = Some((first, remote));
            slot.rdma = Some(op);
            return None;
        }
        self.rdma_posted += len;
        slot.rdma = Some(op);
        Some((first, remote))
    }

    /// Responder: whether transfers wait for [`RDMA_BUDGET`].
    pub(crate) fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Responder: the oldest transfer that waits, if [`RDMA_BUDGET`] lets it
    /// go now (its bytes are then counted): its tag, first region, where
    /// that goes, its direction and its bytes.
    pub(crate) fn next_rdma(&mut self) -> Option<(u32, SgList, Remote, DmaDir, u32)> {
        while let Some(&tag) = self.waiting.first() {
            let op = self
                .incoming
                .get_mut(tag as usize)
                .and_then(|s| s.rdma.as_mut())
                .filter(|op| op.first.is_some());
            if let Some(op) = op.as_ref() {
                let len = u64::from(op.head.data_len);
                if self.rdma_posted != 0 && self.rdma_posted + len > RDMA_BUDGET {
                    return None;
                }
            }
            let _ = self.waiting.remove(0);
            // (A transfer gone from its slot waits no more.)
            if let Some(op) = op {
                let (sg, remote) = op.first.take()?;
                self.rdma_posted += u64::from(op.head.data_len);
                return Some((tag, sg, remote, op.dir, op.head.data_len));
            }
        }
        None
    }

    /// Responder: tag `tag`'s RDMA in flight.
    pub(crate) fn rdma_op(&mut self, tag: u32) -> Option<&mut RdmaOp<D>> {
        self.incoming.get_mut(tag as usize)?.rdma.as_mut()
    }

    /// Responder: whether tag `tag` has an RDMA in flight, every region of
    /// it posted (see [`RdmaOp::posted_whole`]).
    pub(crate) fn rdma_posted_whole(&self, tag: u32) -> bool {
        self.incoming
            .get(tag as usize)
            .and_then(|s| s.rdma.as_ref())
            .is_some_and(RdmaOp::posted_whole)
    }

    /// Responder: whether tag `tag` has an RDMA in flight, or waiting.
    pub(crate) fn rdma_pending(&self, tag: u32) -> bool {
        self.incoming
            .get(tag as usize)
            .is_some_and(|s| s.rdma.is_some())
    }

    /// Responder: the callback of tag `tag`'s RDMA, once it is over (or
    /// was never posted); its bytes no longer count against
    /// [`RDMA_BUDGET`].
    pub(crate) fn take_rdma(&mut self, tag: u32) -> Option<D> {
        let op = self.incoming.get_mut(tag as usize)?.rdma.take()?;
        if op.first.is_none() {
            let len = u64::from(op.head.data_len);
            kernel::warn_on!(self.rdma_posted < len);
            self.rdma_posted = self.rdma_posted.saturating_sub(len);
        }
        Some(op.done)
    }

    /// Responder, teardown: the callback of an RDMA still pending.
    pub(crate) fn take_one_rdma(&mut self) -> Option<D> {
        let tag = self.incoming.iter().position(|s| s.rdma.is_some())?;
        // CAST: below the tag count, a `u32`.
        self.take_rdma(tag as u32)
    }
}

/// A responder tag's transfer state.
struct InSlot<D> {
    /// The RDMA in flight.
    rdma: Option<RdmaOp<D>>,
    /// The bytes moved, for the response.
    moved: u32,
}

impl<D> InSlot<D> {
    fn new() -> Self {
        Self {
            rdma: None,
            moved: 0,
        }
    }
}

/// What a response leads to.
pub(crate) enum Response<R> {
    /// The request is over.
    Finished(Finished<R>),
    /// Invalidate these keys of tag `.0` first.
    Invalidate(u32, Keys),
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_xfer_limits)]
mod tests {
    use super::DataLimits;

    #[test]
    fn limits_keep_a_page_for_an_offset() {
        // rxe: 512 pages a region, 8 regions: 4096 pages, less one.
        let l = DataLimits::new(512, 4096);
        assert_eq!(l.max_data, 4095 * 4096);
        assert_eq!(l.max_segments, 4096);
        assert_eq!(l.virt_boundary_mask, 4095);
        // A device with short page lists.
        assert_eq!(DataLimits::new(16, 4096).max_data, 127 * 4096);
        // Never beyond what the protocol carries.
        assert_eq!(DataLimits::new(1 << 20, 4096).max_data, 64 << 20);
        // No device yet: nothing fits.
        assert_eq!(DataLimits::new(0, 4096).max_data, 0);
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_xfer_tags)]
mod tag_tests {
    use super::*;
    use core::sync::atomic::{AtomicI32, AtomicU32, Ordering::Relaxed};

    /// A request that records how it ended.
    struct Probe {
        done: Arc<AtomicU32>,
        status: Arc<AtomicI32>,
        dir: Dir,
    }

    impl Request for Probe {
        fn header(&self) -> &[u8] {
            b"hdr"
        }
        fn dir(&self) -> Dir {
            self.dir
        }
        fn set_response(&mut self, status: i32, _moved: u32, _hdr: &[u8]) {
            self.status.store(status, Relaxed);
        }
        fn complete(self, status: i32) {
            if status != 0 {
                self.status.store(status, Relaxed);
            }
            self.done.fetch_add(1, Relaxed);
        }
    }

    /// The responder's transfers are not under test here.
    struct NoRdma;

    impl RdmaDone for NoRdma {
        fn done(self, _status: i32) {}
    }

    struct Rig {
        x: Xfer<Probe, NoRdma>,
        done: Arc<AtomicU32>,
        status: Arc<AtomicI32>,
    }

    impl Rig {
        fn new(tags: u32) -> Result<Self> {
            Ok(Self {
                x: Xfer::new(None, tags, 0, FIRST_REGIONS)?,
                done: Arc::new(AtomicU32::new(0), GFP_KERNEL)?,
                status: Arc::new(AtomicI32::new(0), GFP_KERNEL)?,
            })
        }

        /// Submits a request; returns its (tag, cookie) or the error.
        fn submit(&mut self, limit: u32, own: Option<u32>) -> Result<(u32, u64)> {
            let req = Probe {
                done: self.done.clone(),
                status: self.status.clone(),
                dir: Dir::None,
            };
            let mut sent = (0, 0);
            self.x
                .submit(
                    limit,
                    4096,
                    own,
                    req,
                    None,
                    |tag, regs, cookie, head, hdr, inline| {
                        assert_eq!((regs.len(), head.ndesc, hdr), (0, 0, &b"hdr"[..]));
                        assert!(inline.is_none() && !head.inline);
                        sent = (tag, cookie);
                        Ok(())
                    },
                )
                .map_err(|(e, _, _)| e)?;
            Ok(sent)
        }

        /// Submits a request whose `data` goes `dir`, data up to
        /// `inline_max` bytes inline: whether it went inline, its length and
        /// the sum of the inline bytes the message would carry; or the
        /// error and the length of the data that came back.
        fn submit_data(
            &mut self,
            dir: Dir,
            data: SgList,
            inline_max: u32,
        ) -> core::result::Result<(bool, u32, u64), (Error, Option<u64>)> {
            let req = Probe {
                done: self.done.clone(),
                status: self.status.clone(),
                dir,
            };
            let mut sent = (false, 0, 0);
            self.x
                .submit(
                    16,
                    inline_max,
                    None,
                    req,
                    Some(data),
                    |_tag, regs, _cookie, head, _hdr, inline| {
                        assert_eq!(regs.len(), 0);
                        let mut sum = 0;
                        if let Some(sg) = inline {
                            let mut b = KVec::from_elem(0u8, sg.len() as usize, GFP_KERNEL)?;
                            sg.copy_to(&mut b)?;
                            sum = b.iter().map(|&x| u64::from(x)).sum();
                        }
                        sent = (head.inline, head.data_len, sum);
                        Ok(())
                    },
                )
                .map_err(|(e, _, data)| (e, data.map(|d| d.len())))?;
            Ok(sent)
        }

        /// The peer's response to `cookie` with `status`.
        fn respond(&mut self, cookie: u64, status: i32) -> Result<bool, Refusal> {
            let mut b = [0u8; 32];
            let n = ResponseHead { status, moved: 0 }
                .write(b"re", &mut b)
                .map_err(|_| Refusal::breach("test"))?;
            match self.x.response(cookie, None, &b[..n])? {
                Response::Finished(f) => {
                    f.complete();
                    Ok(true)
                }
                Response::Invalidate(..) => Ok(false),
            }
        }
    }

    #[test]
    fn tags_are_unique_and_bounded() -> Result {
        let mut r = Rig::new(4)?;
        let mut seen = [false; 4];
        for _ in 0..4 {
            let (tag, _) = r.submit(4, None)?;
            assert!(!seen[tag as usize]);
            seen[tag as usize] = true;
        }
        // The queue is full: by the limit, and by the tags.
        assert_eq!(r.submit(4, None).err(), Some(EAGAIN));
        assert_eq!(r.submit(8, None).err(), Some(EAGAIN));
        assert!(r.x.busy());
        Ok(())
    }

    #[test]
    fn the_limit_is_the_peers_depth() -> Result {
        let mut r = Rig::new(8)?;
        r.submit(2, None)?;
        r.submit(2, None)?;
        assert_eq!(r.submit(2, None).err(), Some(EAGAIN));
        Ok(())
    }

    #[test]
    fn own_tags_are_checked() -> Result {
        let mut r = Rig::new(4)?;
        assert_eq!(r.submit(4, Some(2))?.0, 2);
        assert_eq!(r.submit(4, Some(2)).err(), Some(EBUSY));
        assert_eq!(r.submit(4, Some(4)).err(), Some(EINVAL));
        // The IdPool holds 64 ids at least: those beyond the count never go.
        for _ in 0..3 {
            assert!(r.submit(4, None)?.0 < 4);
        }
        assert_eq!(r.submit(4, None).err(), Some(EAGAIN));
        Ok(())
    }

    #[test]
    fn a_response_completes_once_and_frees_its_tag() -> Result {
        let mut r = Rig::new(2)?;
        let (tag, cookie) = r.submit(2, Some(1))?;
        assert_eq!(tag, 1);
        assert_eq!(r.respond(cookie, -5).ok(), Some(true));
        assert_eq!((r.done.load(Relaxed), r.status.load(Relaxed)), (1, -5));
        // The same response again, or one for a tag never used: a breach.
        assert!(r.respond(cookie, 0).is_err());
        assert!(r.respond(0, 0).is_err());
        assert_eq!(r.done.load(Relaxed), 1);
        // The tag is free again, under a new generation: the old cookie
        // cannot complete the new request.
        let (tag2, cookie2) = r.submit(2, Some(1))?;
        assert_eq!(tag2, 1);
        assert_ne!(cookie, cookie2);
        assert!(r.respond(cookie, 0).is_err());
        assert_eq!(r.respond(cookie2, 0).ok(), Some(true));
        assert!(!r.x.busy());
        Ok(())
    }

    #[test]
    fn teardown_aborts_each_request_once() -> Result {
        let mut r = Rig::new(4)?;
        for _ in 0..3 {
            r.submit(4, None)?;
        }
        let mut n = 0;
        while let Some((f, regs)) = r.x.abort_one() {
            drop(regs);
            f.complete();
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(r.done.load(Relaxed), 3);
        assert_eq!(r.status.load(Relaxed), ECONNABORTED.to_errno());
        assert!(!r.x.busy());
        // Every tag is free again.
        for _ in 0..4 {
            r.submit(4, None)?;
        }
        Ok(())
    }

    #[test]
    fn regions_cover_one_request_of_eight_besides_one_each() {
        assert_eq!(pool_regions(128), 135);
        assert_eq!(pool_regions(2), 9);
    }

    #[test]
    fn a_pool_without_regions_never_grows() -> Result {
        // Without a PD there are no regions to want.
        let mut r = Rig::new(16)?;
        assert_eq!(r.x.wants_regions(), 0);
        // A server's pool (room for them, none yet) grows only once a
        // request found it empty, and then by one.
        r.x.max_regions = pool_regions(16);
        assert_eq!(r.x.wants_regions(), 0);
        r.x.short = true;
        assert_eq!(r.x.wants_regions(), 1);
        Ok(())
    }

    #[test]
    fn small_data_to_the_peer_goes_inline() -> Result {
        let mut r = Rig::new(4)?;
        // Two pages' worth, at the limit: inline, every byte in the message.
        let data = SgList::owned(8192)?;
        data.copy_from(&[3u8; 8192])?;
        assert_eq!(
            r.submit_data(Dir::ToPeer, data, 8192),
            Ok((true, 8192, 3 * 8192))
        );
        // One byte more must be registered, which this state (no PD) cannot:
        // the request and its data come back.
        let big = SgList::owned(8193)?;
        assert_eq!(
            r.submit_data(Dir::ToPeer, big, 8192),
            Err((EINVAL, Some(8193)))
        );
        // Data from the peer never goes inline, however small.
        let small = SgList::owned(16)?;
        assert_eq!(
            r.submit_data(Dir::FromPeer, small, 8192),
            Err((EINVAL, Some(16)))
        );
        // No inline data at all when the peer takes none.
        let small = SgList::owned(16)?;
        assert_eq!(
            r.submit_data(Dir::ToPeer, small, 0),
            Err((EINVAL, Some(16)))
        );
        // Only the inline request holds a tag.
        assert_eq!(r.x.load().0, 1);
        Ok(())
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_xfer_rdma)]
mod rdma_tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// This side's requests, not under test here.
    struct NoRequest;

    impl Request for NoRequest {
        fn header(&self) -> &[u8] {
            &[]
        }
        fn dir(&self) -> Dir {
            Dir::None
        }
        fn set_response(&mut self, _status: i32, _moved: u32, _hdr: &[u8]) {}
        fn complete(self, _status: i32) {}
    }

    /// A transfer's end, counted.
    struct Counted(Arc<AtomicU32>);

    impl RdmaDone for Counted {
        fn done(self, _status: i32) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    struct Rig {
        x: Xfer<NoRequest, Counted>,
        ended: Arc<AtomicU32>,
    }

    impl Rig {
        fn new(tags: u32) -> Result<Self> {
            Ok(Self {
                x: Xfer::new(None, tags, 0, 0)?,
                ended: Arc::new(AtomicU32::new(0), GFP_KERNEL)?,
            })
        }

        /// Starts the responder's transfer of `len` bytes (one region) on
        /// `tag`: whether it may be posted now.
        fn start(&mut self, tag: u32, len: u32) -> Result<bool> {
            let mut head = RequestHead {
                dir: Dir::ToPeer,
                descs: [Desc::default(); MAX_DESCS],
                ndesc: 1,
                data_len: len,
                inline: false,
            };
            head.descs[0].len = len;
            let sg = SgList::owned(len as usize)?;
            let done = Counted(self.ended.clone());
            let (op, first, remote) =
                RdmaOp::start(done, sg, head, DmaDir::FromDevice).map_err(|(e, _)| e)?;
            Ok(self.x.start_rdma(tag, op, first, remote).is_some())
        }

        /// Ends tag `tag`'s transfer, as its last completion does.
        fn end(&mut self, tag: u32) {
            if let Some(done) = self.x.take_rdma(tag) {
                done.done(0);
            }
        }

        /// The tags `next_rdma` lets go now, in order.
        fn released(&mut self) -> KVec<u32> {
            let mut tags = KVec::new();
            while let Some((tag, ..)) = self.x.next_rdma() {
                let _ = tags.push(tag, GFP_KERNEL);
            }
            tags
        }
    }

    const KIB: u32 = 1024;
    const BUDGET: u32 = RDMA_BUDGET as u32;

    #[test]
    fn transfers_beyond_the_budget_wait_and_none_overtakes() -> Result {
        let mut r = Rig::new(8)?;
        // Three quarters go; half waits; 4 KiB would fit, but waits behind it.
        assert!(r.start(0, BUDGET / 4 * 3)?);
        assert!(!r.start(1, BUDGET / 2)?);
        assert!(!r.start(2, 4 * KIB)?);
        assert_eq!(r.x.rdma_posted, u64::from(BUDGET / 4 * 3));
        assert!(r.x.rdma_pending(1) && r.x.rdma_pending(2) && r.x.has_waiting());
        assert!(r.released().is_empty());
        // The first over: both go, in order, and count.
        r.end(0);
        assert_eq!(&r.released()[..], &[1, 2]);
        assert_eq!(r.x.rdma_posted, u64::from(BUDGET / 2 + 4 * KIB));
        assert!(!r.x.has_waiting());
        r.end(1);
        r.end(2);
        assert_eq!(r.x.rdma_posted, 0);
        assert_eq!(r.ended.load(Relaxed), 3);
        Ok(())
    }

    #[test]
    fn a_transfer_larger_than_the_budget_goes_alone() -> Result {
        let mut r = Rig::new(4)?;
        assert!(r.start(0, 2 * BUDGET)?);
        assert!(!r.start(1, 4 * KIB)?);
        assert!(!r.start(2, 2 * BUDGET)?);
        r.end(0);
        // The small one goes; the big one waits for it to end.
        assert_eq!(&r.released()[..], &[1]);
        r.end(1);
        assert_eq!(&r.released()[..], &[2]);
        assert_eq!(r.x.rdma_posted, u64::from(2 * BUDGET));
        Ok(())
    }

    #[test]
    fn the_teardown_ends_every_transfer_once() -> Result {
        let mut r = Rig::new(4)?;
        assert!(r.start(0, BUDGET)?);
        assert!(!r.start(1, BUDGET)?);
        assert!(!r.start(2, 4 * KIB)?);
        while let Some(done) = r.x.take_one_rdma() {
            done.done(-103);
        }
        assert_eq!(r.ended.load(Relaxed), 3);
        // Nothing posted counts any more, and none of the waiting goes.
        assert_eq!(r.x.rdma_posted, 0);
        assert!(r.released().is_empty());
        Ok(())
    }
}
