// SPDX-License-Identifier: GPL-2.0

//! Requests and their zero-copy data: the state a channel keeps for them.
//!
//! **Requester.** A request takes a tag (one of the channel's `queue depth`)
//! and a credit. Its data, if any, is DMA-mapped and registered with FRWR
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
//! tags; the consumer gets it as an [`Incoming`], moves the data with
//! [`Channel::incoming_rdma`] (rdma_rw against the requester's regions) and
//! answers with [`Channel::respond`]. A requester can have at most its queue
//! depth in flight, which is this side's depth: a request without a free tag
//! breaks the protocol.
//!
//! **Failure.** The keys are only ever valid while the channel's QP lives.
//! When a channel is shut down, its QP is drained and destroyed, then every
//! region is deregistered, and only then are the requests still in flight
//! completed, with `ECONNABORTED`: no peer can reach their pages any more.

use kernel::{prelude::*, sync::Arc};

use crate::{
    channel::Channel,
    rdma::{
        mr::{DmaDir, MappedSg, Mr, Remote, SgList},
        pd::Pd,
        qp::MAX_REGS,
    },
    wire::request::{Desc, Dir, RequestHead, ResponseHead, MAX_DESCS},
    wire::{Reason, Refusal},
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
    fn complete(self: KBox<Self>, status: i32);
}

/// What a responder is told when its RDMA READ or WRITE is over.
pub(crate) trait RdmaDone: Send {
    /// `status` 0 or an error; the consumer owns its pages again (they are
    /// unmapped).
    fn done(self: KBox<Self>, status: i32);
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

/// Encodes a tag: generation in the high bits, index in the low 16.
fn cookie(index: usize, generation: u16) -> u64 {
    // CAST: indices are below `MAX_QUEUE_DEPTH`.
    (u64::from(generation) << 16) | index as u64
}

/// Moves `mrs` to `pool` (a region that finds no room is deregistered).
fn recycle(pool: &mut KVec<Mr>, mrs: &mut KVec<Mr>) {
    for mr in mrs.drain_all() {
        let _ = pool.push(mr, GFP_KERNEL);
    }
}

/// A request in flight.
struct Outstanding {
    req: KBox<dyn Request>,
    sg: Option<MappedSg>,
    mrs: KVec<Mr>,
    /// The data length the peer was offered.
    data_len: u32,
    /// Set once the response is in and the invalidations are posted.
    status: Option<i32>,
}

/// A request that is over: complete it outside the channel's lock.
pub(crate) struct Finished {
    req: KBox<dyn Request>,
    sg: Option<MappedSg>,
    status: i32,
}

impl Finished {
    /// Unmaps the pages and tells the consumer.
    pub(crate) fn complete(self) {
        if let Some(sg) = self.sg {
            let _ = sg.unmap();
        }
        self.req.complete(self.status);
    }
}

/// A responder's RDMA in flight: the requester's regions are moved one after
/// the other, each against its slice of the consumer's list.
pub(crate) struct RdmaOp {
    pub(crate) done: KBox<dyn RdmaDone>,
    pub(crate) list: Arc<SgList>,
    pub(crate) head: RequestHead,
    pub(crate) dir: DmaDir,
    /// The next region, and where its bytes start in `list`.
    pub(crate) next: usize,
    pub(crate) offset: u64,
}

impl RdmaOp {
    /// The next region's slice of the list and the region; `None` after the
    /// last. Advances.
    pub(crate) fn next_region(&mut self) -> Option<Result<(SgList, Remote)>> {
        let d = *self.head.descs[..self.head.ndesc].get(self.next)?;
        let slice = SgList::slice(&self.list, self.offset, d.len);
        self.next += 1;
        self.offset += u64::from(d.len);
        Some(slice.map(|s| {
            (
                s,
                Remote {
                    addr: d.addr,
                    len: d.len,
                    rkey: d.rkey,
                },
            )
        }))
    }
}

/// A responder tag in use.
#[derive(Default)]
struct InSlot {
    used: bool,
    /// The RDMA in flight.
    rdma: Option<RdmaOp>,
}

/// A response that found no credit, sent when credits return.
pub(crate) struct PendingResponse {
    pub(crate) cookie: u64,
    pub(crate) head: ResponseHead,
    pub(crate) hdr: KVec<u8>,
    pub(crate) invalidate: Option<u32>,
}

/// A channel's request state (under the channel's lock).
pub(crate) struct Xfer {
    out: KVec<Option<Outstanding>>,
    gens: KVec<u16>,
    in_flight: u32,
    /// Registered regions not in use.
    pool: KVec<Mr>,
    max_pages: u32,
    incoming: KVec<InSlot>,
    /// Responses waiting for a credit.
    pub(crate) pending: KVec<PendingResponse>,
}

impl Xfer {
    /// State for `tags` requests each way; regions map up to `max_pages`.
    pub(crate) fn new(tags: u32, max_pages: u32) -> Result<Self> {
        let mut x = Self {
            out: KVec::with_capacity(tags as usize, GFP_KERNEL)?,
            gens: KVec::with_capacity(tags as usize, GFP_KERNEL)?,
            in_flight: 0,
            pool: KVec::new(),
            max_pages,
            incoming: KVec::with_capacity(tags as usize, GFP_KERNEL)?,
            pending: KVec::new(),
        };
        for _ in 0..tags {
            x.out.push(None, GFP_KERNEL)?;
            x.gens.push(0, GFP_KERNEL)?;
            x.incoming.push(InSlot::default(), GFP_KERNEL)?;
        }
        Ok(x)
    }

    fn region(&mut self, pd: &Arc<Pd>) -> Result<Mr> {
        match self.pool.pop() {
            Some(mr) => Ok(mr),
            None => Mr::new(pd, self.max_pages),
        }
    }

    /// Requester: maps and registers `data` and sends `req` through `send`
    /// (which gets the regions to register and writes the message). At most
    /// `limit` requests are in flight. On failure the request and its data
    /// come back.
    #[allow(clippy::type_complexity)]
    pub(crate) fn submit(
        &mut self,
        pd: &Arc<Pd>,
        limit: u32,
        req: KBox<dyn Request>,
        data: Option<SgList>,
        send: impl FnOnce(u32, &[Mr], u64, &RequestHead, &[u8]) -> Result,
    ) -> Result<(), (Error, KBox<dyn Request>, Option<SgList>)> {
        let dir = req.dir();
        if (dir == Dir::None) != data.is_none() {
            return Err((EINVAL, req, data));
        }
        if self.in_flight >= limit {
            return Err((EAGAIN, req, data));
        }
        let Some(index) = self.out.iter().position(Option::is_none) else {
            return Err((EAGAIN, req, data));
        };
        let mut head = RequestHead {
            dir,
            descs: [Desc::default(); MAX_DESCS],
            ndesc: 0,
            data_len: 0,
        };
        let mut mrs = KVec::new();
        let mut mapped = None;
        if let Some(sg) = data {
            let ddir = match dir {
                Dir::FromPeer => DmaDir::FromDevice,
                _ => DmaDir::ToDevice,
            };
            // A failed mapping drops the list: the request still owns its
            // pages, and the caller gets the error.
            let m = match MappedSg::new(pd.device(), sg, ddir) {
                Ok(m) => m,
                Err(e) => return Err((e, req, None)),
            };
            match self.register(pd, &m, &mut head, &mut mrs) {
                Ok(()) => mapped = Some(m),
                Err(e) => {
                    recycle(&mut self.pool, &mut mrs);
                    return Err((e, req, Some(m.unmap())));
                }
            }
        }
        self.gens[index] = self.gens[index].wrapping_add(1);
        let c = cookie(index, self.gens[index]);
        // CAST: `index` is below the tag count, a `u32`.
        let res = send(index as u32, &mrs, c, &head, req.header());
        if let Err(e) = res {
            recycle(&mut self.pool, &mut mrs);
            return Err((e, req, mapped.map(MappedSg::unmap)));
        }
        self.out[index] = Some(Outstanding {
            req,
            sg: mapped,
            mrs,
            data_len: head.data_len,
            status: None,
        });
        self.in_flight += 1;
        Ok(())
    }

    /// Registers `m` with as many regions as it takes (at most `MAX_DESCS`).
    fn register(
        &mut self,
        pd: &Arc<Pd>,
        m: &MappedSg,
        head: &mut RequestHead,
        mrs: &mut KVec<Mr>,
    ) -> Result {
        let mut first = 0;
        while first < m.mapped() {
            if head.ndesc == MAX_DESCS.min(MAX_REGS) {
                return Err(EMSGSIZE);
            }
            let mut mr = self.region(pd)?;
            let (n, Remote { addr, len, rkey }) = match mr.map(m, first) {
                Ok(r) => r,
                Err(e) => {
                    self.pool.push(mr, GFP_KERNEL).ok();
                    return Err(e);
                }
            };
            head.descs[head.ndesc] = Desc { addr, rkey, len };
            head.ndesc += 1;
            head.data_len = head.data_len.checked_add(len).ok_or(EMSGSIZE)?;
            mrs.push(mr, GFP_KERNEL)?;
            first += n;
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
    ) -> Result<Response, Refusal> {
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
            if !o.mrs.iter().any(|m| m.rkey() == k) {
                return Err(Refusal::breach(
                    "a response that invalidates a key not its own",
                ));
            }
        }
        o.req.set_response(head.status, head.moved, hdr);
        o.status = Some(head.status);
        let mut keys = KVec::new();
        for m in o.mrs.iter().filter(|m| Some(m.rkey()) != invalidated) {
            keys.push(m.rkey(), GFP_KERNEL)
                .map_err(|_| Reason::NoResources)?;
        }
        if keys.is_empty() {
            return self.finish(index).map(Response::Finished).ok_or(stray);
        }
        // CAST: below the tag count, a `u32`.
        Ok(Response::Invalidate(index as u32, keys))
    }

    /// Requester: the invalidations of tag `index` completed.
    pub(crate) fn invalidated(&mut self, index: u32) -> Option<Finished> {
        let o = self.out.get(index as usize)?.as_ref()?;
        o.status?;
        self.finish(index as usize)
    }

    /// Takes request `index` out, its regions back to the pool.
    fn finish(&mut self, index: usize) -> Option<Finished> {
        let mut o = self.out.get_mut(index)?.take()?;
        self.in_flight -= 1;
        recycle(&mut self.pool, &mut o.mrs);
        Some(Finished {
            status: 0,
            req: o.req,
            sg: o.sg,
        })
    }

    /// Teardown, after the QP is gone: deregisters every region and returns
    /// the requests in flight, to be completed with `ECONNABORTED`.
    pub(crate) fn abort_all(&mut self) -> KVec<Finished> {
        self.pool.clear();
        let n = self.out.iter().filter(|o| o.is_some()).count();
        // Without room for the list (out of memory), a request is completed
        // here, under the channel's lock: its regions are gone already.
        let mut done = KVec::with_capacity(n, GFP_KERNEL).unwrap_or_default();
        for slot in self.out.iter_mut() {
            if let Some(mut o) = slot.take() {
                o.mrs.clear();
                let f = Finished {
                    req: o.req,
                    sg: o.sg,
                    status: ECONNABORTED.to_errno(),
                };
                if let Err(e) = done.push_within_capacity(f) {
                    e.0.complete();
                }
            }
        }
        self.in_flight = 0;
        done
    }

    /// Whether requests are at work: this side's wait for the peer's answer,
    /// or this side moves the data of the peer's by RDMA.
    pub(crate) fn busy(&self) -> bool {
        self.in_flight > 0 || self.incoming.iter().any(|s| s.rdma.is_some())
    }

    /// Responder: a free tag for an incoming request.
    pub(crate) fn take_incoming(&mut self) -> Option<u32> {
        let i = self.incoming.iter().position(|s| !s.used)?;
        self.incoming[i].used = true;
        // CAST: below the tag count, a `u32`.
        Some(i as u32)
    }

    /// Responder: tag `tag` is free again.
    pub(crate) fn put_incoming(&mut self, tag: u32) {
        if let Some(s) = self.incoming.get_mut(tag as usize) {
            *s = InSlot::default();
        }
    }

    /// Responder: remembers tag `tag`'s RDMA.
    pub(crate) fn set_rdma(&mut self, tag: u32, op: RdmaOp) {
        if let Some(s) = self.incoming.get_mut(tag as usize) {
            s.rdma = Some(op);
        }
    }

    /// Responder: tag `tag`'s RDMA in flight.
    pub(crate) fn rdma_op(&mut self, tag: u32) -> Option<&mut RdmaOp> {
        self.incoming.get_mut(tag as usize)?.rdma.as_mut()
    }

    /// Responder: whether tag `tag` has an RDMA in flight.
    pub(crate) fn rdma_pending(&self, tag: u32) -> bool {
        self.incoming
            .get(tag as usize)
            .is_some_and(|s| s.rdma.is_some())
    }

    /// Responder: the callback of tag `tag`'s RDMA, once it is over.
    pub(crate) fn take_rdma(&mut self, tag: u32) -> Option<KBox<dyn RdmaDone>> {
        Some(self.incoming.get_mut(tag as usize)?.rdma.take()?.done)
    }

    /// Responder, teardown: every RDMA callback still pending.
    pub(crate) fn take_all_rdma(&mut self) -> KVec<(u32, KBox<dyn RdmaDone>)> {
        let mut v = KVec::new();
        for (i, s) in self.incoming.iter_mut().enumerate() {
            if let Some(op) = s.rdma.take() {
                // CAST: below the tag count.
                if v.push((i as u32, op.done), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        v
    }
}

/// What a response leads to.
pub(crate) enum Response {
    /// The request is over.
    Finished(Finished),
    /// Invalidate these keys of tag `.0` first.
    Invalidate(u32, KVec<u32>),
}

/// A request that arrived, until the consumer responds.
pub(crate) struct Incoming {
    pub(crate) chan: Arc<Channel>,
    /// This side's responder tag.
    pub(crate) tag: u32,
    /// The requester's tag.
    pub(crate) cookie: u64,
    pub(crate) head: RequestHead,
    pub(crate) hdr: KVec<u8>,
    /// Bytes moved so far.
    pub(crate) moved: u32,
}

impl Incoming {
    /// Which way its data goes.
    pub(crate) fn dir(&self) -> Dir {
        self.head.dir
    }

    /// Bytes of data.
    pub(crate) fn data_len(&self) -> u32 {
        self.head.data_len
    }

    /// The requester's header.
    pub(crate) fn header(&self) -> &[u8] {
        &self.hdr
    }

    /// Answers the request: see [`Channel::respond`].
    pub(crate) fn respond(self: KBox<Self>, status: i32, hdr: &[u8]) -> Result {
        let chan = self.chan.clone();
        chan.respond(&self, status, hdr)
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.chan.incoming_dropped(self.tag);
    }
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
