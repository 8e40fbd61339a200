// SPDX-License-Identifier: GPL-2.0

//! The responder's side of requests: a request that arrived is an
//! [`Incoming`] until the consumer answers; its data moves by rdma_rw (or is
//! copied, when it came inline), and the answer waits for a credit if it must.
//!
//! Each responder tag has an entry of its own in the channel's [`Pool`],
//! made with the channel: the request's header and inline data are copied
//! into it as the request arrives (its receive buffer goes back to the peer
//! at once), and a response that finds no credit waits in it. Nothing is
//! allocated per request, but by rdma_rw for a list of several entries and
//! by a request of several regions (see [`RdmaOp::start`]).

use super::*;

/// A request from the peer, the consumer's until it answers: the loan of
/// its tag's entry.
pub(crate) type Incoming<O> = Lent<InData<O>>;

/// A responder tag's entry: a request that arrived, until its response is
/// sent.
pub(crate) struct InData<O: Owner> {
    /// While lent, the channel the request came on.
    chan: Option<Arc<Channel<O>>>,
    /// This side's responder tag (the entry's index).
    tag: u32,
    /// The requester's tag.
    cookie: u64,
    head: RequestHead,
    /// The requester's header, then its inline data if the request has any;
    /// a response that waits for a credit, its header. Room for a receive
    /// buffer's bytes, made with the entry (vmalloc: no high-order pages
    /// for large messages).
    bytes: VVec<u8>,
    hdr_len: usize,
    /// A response waiting for a credit, and the key it invalidates; its
    /// header is in `bytes`.
    response: Option<(ResponseHead, Option<u32>)>,
    /// Counts the requests the entry held: which one a late look at the
    /// tag finds (see [`Channel::answer_early`]).
    serial: u64,
}

impl<O: Owner> Recycle for InData<O> {
    fn recycle(&mut self) {
        self.chan = None;
        self.response = None;
    }
}

impl<O: Owner> InData<O> {
    fn new(tag: usize, room: usize) -> Result<Self> {
        Ok(Self {
            chan: None,
            // CAST: below the tag count, a `u32`.
            tag: tag as u32,
            cookie: 0,
            head: RequestHead::default(),
            bytes: VVec::with_capacity(room, GFP_KERNEL)?,
            hdr_len: 0,
            response: None,
            serial: 0,
        })
    }

    /// Takes in a request that arrived on `chan`. Copies within the room
    /// the entry was made with: `EMSGSIZE` beyond it (never, for what fits
    /// a receive buffer).
    fn fill(
        &mut self,
        chan: Arc<Channel<O>>,
        cookie: u64,
        head: RequestHead,
        hdr: &[u8],
        data: &[u8],
    ) -> Result {
        if hdr.len() + data.len() > self.bytes.capacity() {
            return Err(EMSGSIZE);
        }
        self.bytes.clear();
        // Within capacity: no allocation.
        self.bytes.extend_from_slice(hdr, GFP_NOWAIT)?;
        self.bytes.extend_from_slice(data, GFP_NOWAIT)?;
        self.hdr_len = hdr.len();
        self.chan = Some(chan);
        self.cookie = cookie;
        self.head = head;
        self.response = None;
        self.serial = self.serial.wrapping_add(1);
        Ok(())
    }

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
        self.bytes.get(..self.hdr_len).unwrap_or(&[])
    }

    /// The data that came in the request (empty unless it came inline).
    pub(crate) fn inline_data(&self) -> &[u8] {
        self.bytes.get(self.hdr_len..).unwrap_or(&[])
    }

    /// The channel it came on.
    pub(crate) fn channel(&self) -> Option<&Arc<Channel<O>>> {
        self.chan.as_ref()
    }

    /// Its responder tag.
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// Its fixed part and regions.
    pub(crate) fn head(&self) -> RequestHead {
        self.head
    }

    /// Whether `len` bytes at `p` lie (partly) in the entry's own buffer,
    /// which a response that waits for a credit overwrites.
    pub(crate) fn holds(&self, p: *const u8, len: usize) -> bool {
        let start = self.bytes.as_ptr() as usize;
        let end = start + self.bytes.capacity();
        let (a, b) = (p as usize, (p as usize).saturating_add(len));
        len > 0 && a < end && b > start
    }
}

/// Answers `inc` with `status` and `hdr`, invalidating the requester's
/// first key if the request had data; see [`Channel::respond`].
pub(crate) fn respond<O: Owner>(
    inc: Incoming<O>,
    status: i32,
    hdr: &[u8],
) -> Result<(), (Error, Option<Incoming<O>>)> {
    match inc.chan.clone() {
        Some(chan) => chan.respond(inc, status, hdr),
        None => Err((ENOTCONN, None)),
    }
}

/// The responder's part of a channel (under the channel's lock).
pub(super) struct Responder<O: Owner> {
    /// One entry per responder tag. An entry a consumer still holds keeps
    /// the pool (and the channel) alive past the channel's teardown.
    pool: Arc<Pool<InData<O>>>,
    /// Answered requests whose response waits for a credit, oldest first,
    /// with room for all.
    waiting: KVec<Incoming<O>>,
    /// By tag, the requests whose data goes to the requester with their
    /// answer ([`Channel::write_respond`]) until the transfer completes:
    /// the answer in the entry while it has not gone.
    parked: KVec<Option<Incoming<O>>>,
    /// How many of them answered already, at most
    /// [`xfer::early_answers`]: the entries the requester may have reused
    /// its tags for.
    early: u32,
    /// The queue depth: the most requests the peer may have unanswered.
    depth: u32,
    /// Where the search for a free tag starts.
    next: usize,
    /// The bytes the entries' buffers hold.
    bytes: u64,
}

impl<O: Owner> Responder<O> {
    /// For a queue of `p`'s depth, each entry with room for a receive
    /// buffer's bytes (a message and its inline data). May sleep.
    pub(super) fn new(p: &Params) -> Result<Self> {
        let (tags, room) = (xfer::responder_tags(p.queue_depth), p.recv_buf() as usize);
        let mut parked = KVec::with_capacity(tags as usize, GFP_KERNEL)?;
        for _ in 0..tags {
            parked.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            pool: Pool::new(tags as usize, |i| InData::new(i, room))?,
            waiting: KVec::with_capacity(tags as usize, GFP_KERNEL)?,
            parked,
            early: 0,
            depth: p.queue_depth,
            next: 0,
            // (vmalloc: whole pages.) CAST: `usize` fits in `u64`.
            bytes: (tags as usize * room.next_multiple_of(kernel::page::PAGE_SIZE)) as u64,
        })
    }

    /// The bytes of memory its entries' buffers hold.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A free tag's entry; `None` when the peer has the queue's depth in
    /// flight already.
    fn take(&mut self) -> Option<Incoming<O>> {
        // (The entries answered early are not the peer's any more.)
        if self.pool.lent().saturating_sub(self.early as usize) >= self.depth as usize {
            return None;
        }
        let l = self.pool.lend_any(self.next)?;
        self.next = l.index() + 1;
        Some(l)
    }

    /// How many of the peer's requests are held here.
    pub(super) fn held(&self) -> usize {
        self.pool.lent()
    }

    /// The request of tag `tag` parked with its transfer, once that is over.
    fn unpark(&mut self, tag: u32) -> Option<Incoming<O>> {
        let inc = self.parked.get_mut(tag as usize)?.take()?;
        if inc.response.is_none() {
            self.early -= 1;
        }
        Some(inc)
    }

    /// The transfer of the request parked with tag `tag` ended with
    /// `status`: its answer joins those that wait for credits (with the
    /// error if the data did not go; whether it may go then, `true`), or,
    /// answered already, its entry comes back to be freed after the lock
    /// (the requester's tag took another entry: this one's is not reused).
    fn end_parked(&mut self, tag: u32, status: i32) -> (bool, Option<Incoming<O>>) {
        let Some(mut inc) = self.unpark(tag) else {
            return (false, None);
        };
        let Some((head, _)) = inc.response.as_mut() else {
            return (false, Some(inc));
        };
        if status != 0 {
            head.status = status.clamp(-4095, -1);
            head.moved = 0;
        }
        // One per responder tag, which `inc` holds: there is room.
        match self.waiting.push_within_capacity(inc) {
            Ok(()) => (true, None),
            Err(e) => (false, Some(e.0)),
        }
    }
}

impl<O: Owner> Channel<O> {
    /// A request arrived: the tag's entry it goes in, filled after the
    /// channel's lock (which `inner` holds and this lets go), or why not.
    pub(super) fn incoming(
        self: &Arc<Self>,
        mut inner: SpinLockIrqGuard<'_, Inner<O>>,
        cookie: u64,
        head: RequestHead,
        hdr: &[u8],
        data: &[u8],
    ) -> Result<Incoming<O>, Refusal> {
        let mut inc = inner
            .responder
            .as_mut()
            .and_then(Responder::take)
            .ok_or_else(|| {
                if inner.responder.is_some() {
                    Refusal::breach("more requests than its queue depth")
                } else {
                    Refusal::breach("a request to a side that takes none")
                }
            })?;
        if let Some(x) = inner.xfer.as_mut() {
            x.arrived(inc.tag);
        }
        drop(inner);
        inc.fill(self.clone(), cookie, head, hdr, data)
            .map_err(|_| Refusal::from(Reason::NoResources))?;
        Ok(inc)
    }

    /// Responder: copies the data that came inline in `inc` into `sg`
    /// (which holds exactly as much), as a transfer would move it. Never
    /// sleeps; only while the connection lives.
    pub(crate) fn incoming_inline(&self, inc: &InData<O>, sg: SgList) -> Result {
        if !inc.head.inline || sg.len() != u64::from(inc.head.data_len) {
            return Err(EINVAL);
        }
        sg.copy_from(inc.inline_data())?;
        // One look under the lock: moved only while the connection lives.
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if let Some(x) = inner.xfer.as_mut() {
            x.set_moved(inc.tag, inc.head.data_len);
        }
        Ok(())
    }

    /// Responder: moves the data of the request of responder tag `tag` and
    /// `head` between its requester and `sg` (an RDMA READ for a request
    /// whose data goes to this side, a WRITE for one whose data comes from
    /// it), region after region; `done` is told when it is over. `sg` must
    /// hold the request's whole data. Process context: rdma_rw allocates as
    /// it prepares a transfer of several entries. Takes the request's tag
    /// and head, not the request: once posted, the transfer may complete and
    /// the request be answered and its entry reused at once.
    pub(crate) fn incoming_rdma(
        &self,
        tag: u32,
        head: RequestHead,
        sg: SgList,
        done: Done,
    ) -> Result {
        let dir = match head.dir {
            // RDMA READ: the device writes the local pages.
            Dir::ToPeer => DmaDir::FromDevice,
            Dir::FromPeer => DmaDir::ToDevice,
            Dir::None => return Err(EINVAL),
        };
        if head.inline || sg.len() != u64::from(head.data_len) {
            return Err(EINVAL);
        }
        let (op, first, mut remote) = RdmaOp::start(done, sg, head, dir).map_err(|(e, _)| e)?;
        self.session.hostile().remote(&mut remote);
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        let Some(x) = inner.xfer.as_mut() else {
            return Err(ENOTCONN);
        };
        if x.rdma_pending(tag) {
            return Err(EBUSY);
        }
        let len = head.data_len;
        // Recorded before it is posted: it may complete, and its `done`
        // answer the request, at once.
        x.set_moved(tag, len);
        let Some((first, remote)) = x.start_rdma(tag, op, first, remote) else {
            // Behind other transfers: `rdma_completed` posts it.
            return Ok(());
        };
        let qp = inner.lend_qp();
        drop(inner);
        let res = match qp.as_ref() {
            Some(qp) => {
                self.session.hostile().cut(qp, true);
                qp.rdma(tag, first, remote, dir).map_err(|(e, _)| e)
            }
            None => Err(ENOTCONN),
        };
        let mut inner = self.inner.lock();
        if res.is_err() {
            // Never posted: `done` is not called; the caller hears the error.
            if let Some(x) = inner.xfer.as_mut() {
                let _ = x.take_rdma(tag);
                x.set_moved(tag, 0);
            }
        }
        if let Some(qp) = qp {
            self.end_loan_locked(&mut inner, qp);
        }
        let more = res.is_err() && inner.xfer.as_ref().is_some_and(Xfer::has_waiting);
        drop(inner);
        if more {
            // Transfers queued behind this one while it was being posted.
            self.start_waiting();
        }
        let posted = res?;
        self.stats.add(Counter::RdmaBytes, u64::from(len));
        if posted == Posted::Part {
            // The teardown ends the transfer.
            self.fail(Reason::TransportError);
        }
        Ok(())
    }

    /// Responder: writes `sg` (exactly the data of `inc`, a request whose
    /// data comes from this side) into the requester's regions and answers
    /// `inc` with `status` and `hdr` behind it, as nvmet-rdma chains its
    /// RDMA WRITE and response: the answer is posted right after the data
    /// when the transfer could be posted whole at once, a credit is there
    /// and fewer than [`xfer::early_answers`] such answers wait for their
    /// transfers' completions; else once the transfer is over, with its
    /// error if the data did not go (a failed completion fails the channel
    /// too, and a failed channel answers nothing). `inc`'s entry stays
    /// taken until the transfer is over, then `done` is told. On an error
    /// nothing was posted, and all three come back (but `inc`'s header,
    /// which the answer's may have replaced). Process context, as
    /// [`Channel::incoming_rdma`].
    pub(crate) fn write_respond(
        &self,
        mut inc: Incoming<O>,
        sg: SgList,
        status: i32,
        hdr: &[u8],
        done: Done,
    ) -> Result<(), (Error, Incoming<O>, Done)> {
        let head = inc.head;
        if head.dir != Dir::FromPeer
            || head.inline
            || sg.len() != u64::from(head.data_len)
            || inc.holds(hdr.as_ptr(), hdr.len())
        {
            return Err((EINVAL, inc, done));
        }
        let tag = inc.tag;
        let (op, first, mut remote) = match RdmaOp::start(done, sg, head, DmaDir::ToDevice) {
            Ok(x) => x,
            Err((e, done)) => return Err((e, inc, done)),
        };
        self.session.hostile().remote(&mut remote);
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up || inner.responder.is_none() {
            return Err((ENOTCONN, inc, op.done));
        }
        if Header::LEN + ResponseHead::FIXED + hdr.len() > inner.peer_max_msg as usize {
            return Err((EMSGSIZE, inc, op.done));
        }
        let Some(x) = inner.xfer.as_mut() else {
            return Err((ENOTCONN, inc, op.done));
        };
        if x.rdma_pending(tag) {
            return Err((EBUSY, inc, op.done));
        }
        // The answer waits in the entry: the request's bytes are not needed
        // any more. (Within the entry's room, a message: no allocation.)
        inc.bytes.clear();
        if inc.bytes.extend_from_slice(hdr, GFP_NOWAIT).is_err() {
            return Err((ENOMEM, inc, op.done));
        }
        let response = ResponseHead {
            status: status.clamp(-4095, 0),
            moved: head.data_len,
        };
        inc.response = Some((response, head.descs.first().map(|d| d.rkey)));
        let serial = inc.serial;
        x.set_moved(tag, head.data_len);
        let now = x.start_rdma(tag, op, first, remote);
        if let Some(slot) = inner
            .responder
            .as_mut()
            .and_then(|r| r.parked.get_mut(tag as usize))
        {
            *slot = Some(inc);
        }
        // Behind other transfers: answered once it is over.
        let Some((first, remote)) = now else {
            return Ok(());
        };
        // A channel closing: the teardown ends the transfer.
        let Some(qp) = inner.lend_qp() else {
            return Ok(());
        };
        drop(inner);
        self.session.hostile().cut(&qp, true);
        let res = qp.rdma(tag, first, remote, DmaDir::ToDevice);
        let mut inner = self.inner.lock();
        self.end_loan_locked(&mut inner, qp);
        match res {
            Ok(Posted::All) => {}
            Ok(Posted::Part) => {
                // The teardown ends the transfer.
                drop(inner);
                self.fail(Reason::TransportError);
                return Ok(());
            }
            Err((e, _)) => {
                // Never posted: still all here (the teardown waited for the
                // loan, and nothing completed). Its budget goes to those
                // that wait.
                let (done, more) = match inner.xfer.as_mut() {
                    Some(x) => {
                        x.set_moved(tag, 0);
                        (x.take_rdma(tag), x.has_waiting())
                    }
                    None => (None, false),
                };
                let inc = inner.responder.as_mut().and_then(|r| r.unpark(tag));
                drop(inner);
                if more {
                    self.start_waiting();
                }
                return match (inc, done) {
                    (Some(inc), Some(done)) => Err((e, inc, done)),
                    // Never.
                    _ => Ok(()),
                };
            }
        }
        self.stats.add(Counter::RdmaBytes, u64::from(head.data_len));
        self.answer_early(&mut inner, tag, serial);
        Ok(())
    }

    /// Sends the answer parked with tag `tag`'s transfer now, behind its
    /// data, if it is still that of request `serial` (the transfer may have
    /// completed, and the tag taken another, since it was posted) with
    /// every region posted, the answers that wait for credits are not
    /// before it, a credit is there, and fewer than [`xfer::early_answers`]
    /// went before their transfers' completions.
    fn answer_early(&self, inner: &mut Inner<O>, tag: u32, serial: u64) {
        if !inner
            .xfer
            .as_ref()
            .is_some_and(|x| x.rdma_posted_whole(tag))
        {
            return;
        }
        let limit = xfer::early_answers(self.session.params().queue_depth);
        let Some(r) = inner.responder.as_mut() else {
            return;
        };
        let mine = r
            .parked
            .get(tag as usize)
            .and_then(Option::as_ref)
            .is_some_and(|inc| inc.serial == serial && inc.response.is_some());
        if !mine || !r.waiting.is_empty() || r.early >= limit {
            return;
        }
        let Some(mut inc) = r.parked.get_mut(tag as usize).and_then(Option::take) else {
            return;
        };
        let sent = inc.response.is_some_and(|(head, invalidate)| {
            self.send_response(inner, inc.cookie, &head, &inc.bytes, invalidate)
                .is_ok()
        });
        if sent {
            inc.response = None;
            self.stats.add(Counter::EarlyAnswers, 1);
        }
        if let Some(r) = inner.responder.as_mut() {
            if sent {
                r.early += 1;
            }
            if let Some(slot) = r.parked.get_mut(tag as usize) {
                *slot = Some(inc);
            }
        }
    }

    /// Posts the transfers that waited for [`xfer::RDMA_BUDGET`], as far as it
    /// goes now, while the channel is up (its teardown ends the others).
    /// One that cannot be posted fails (its `done` is told). Process
    /// context, as [`Channel::incoming_rdma`].
    fn start_waiting(&self) {
        loop {
            let mut inner = self.inner.lock();
            if inner.state != ChanState::Up {
                return;
            }
            let Some((tag, sg, remote, dir, len)) = inner.xfer.as_mut().and_then(Xfer::next_rdma)
            else {
                return;
            };
            // A channel closing: the teardown ends the transfer.
            let Some(qp) = inner.lend_qp() else {
                drop(inner);
                drop(sg);
                return;
            };
            drop(inner);
            let res = qp.rdma(tag, sg, remote, dir).map_err(|(e, _)| e);
            let mut inner = self.inner.lock();
            self.end_loan_locked(&mut inner, qp);
            let (cb, (answer, free)) = match res {
                Ok(_) => (None, (false, None)),
                Err(e) => (
                    inner.xfer.as_mut().and_then(|x| {
                        x.set_moved(tag, 0);
                        x.take_rdma(tag)
                    }),
                    inner
                        .responder
                        .as_mut()
                        .map_or((false, None), |r| r.end_parked(tag, e.to_errno())),
                ),
            };
            drop(inner);
            drop(free);
            if answer {
                self.flush_responses();
            }
            match (res, cb) {
                (Ok(Posted::All), _) => {
                    self.stats.add(Counter::RdmaBytes, u64::from(len));
                }
                (Ok(Posted::Part), _) => {
                    // The teardown ends the transfer, and the waiting ones.
                    self.fail(Reason::TransportError);
                    return;
                }
                (Err(e), Some(cb)) => cb.done(e.to_errno()),
                (Err(_), None) => {}
            }
        }
    }

    /// Responder: the transfer of tag `tag` completed (`ok`): posts its next
    /// region, if it has one and the channel lives, or tells its consumer
    /// and posts the transfers that waited for its budget.
    pub(super) fn rdma_completed(&self, tag: u32, ok: bool) {
        let mut inner = self.inner.lock();
        if ok {
            inner.last_ack = Instant::now();
        }
        // While the channel shuts down its QP is being drained: the teardown
        // completes the transfer once the QP is gone. (The QP has destroyed
        // the transfer's rdma_rw context already.)
        if inner.qp.is_none() {
            return;
        }
        let mut status = if ok { 0 } else { EIO.to_errno() };
        let next = match inner.xfer.as_mut().and_then(|x| x.rdma_op(tag)) {
            Some(op) if ok => op.next_desc(),
            _ => None,
        };
        if let Some((list, offset, d, dir)) = next {
            // A channel closing: the teardown completes the transfer, which
            // is not over.
            let Some(qp) = inner.lend_qp() else { return };
            drop(inner);
            // Slicing allocates and rdma_rw may: without the lock.
            let res = SgList::slice(&list, offset, d.len).and_then(|sg| {
                let remote = Remote {
                    addr: d.addr,
                    len: d.len,
                    rkey: d.rkey,
                };
                qp.rdma(tag, sg, remote, dir).map_err(|(e, _)| e)
            });
            inner = self.inner.lock();
            self.end_loan_locked(&mut inner, qp);
            match res {
                Ok(Posted::All) => return,
                Ok(Posted::Part) => {
                    // The teardown ends the transfer.
                    drop(inner);
                    self.fail(Reason::TransportError);
                    return;
                }
                Err(e) => status = e.to_errno(),
            }
        }
        let (cb, more) = match inner.xfer.as_mut() {
            Some(x) => (x.take_rdma(tag), ok && x.has_waiting()),
            None => (None, false),
        };
        // A transfer that ends with its answer (`write_respond`): the
        // answer goes now if it did not go with the data, behind those
        // that wait for credits; the entry is free once it has gone. (The
        // requester's next request on this channel comes through this
        // same completion context, after this.)
        let (answer, free) = inner
            .responder
            .as_mut()
            .map_or((false, None), |r| r.end_parked(tag, status));
        drop(inner);
        drop(free);
        if answer {
            self.flush_responses();
        }
        // Its answer first: what `done` sends must not queue behind the
        // transfers that start next.
        if let Some(cb) = cb {
            cb.done(status);
        }
        // The budget it held goes to those that wait. (A failed completion
        // fails the channel, whose teardown ends them.)
        if more {
            self.start_waiting();
        }
    }

    /// Responder: answers `inc` with `status` and `hdr`, invalidating the
    /// requester's first key if the request had data. A response that finds
    /// no credit waits for one in `inc`'s entry, whose tag stays taken until
    /// it goes (`hdr` must not lie in that entry: see [`InData::holds`]).
    /// `EBUSY` while a transfer of `inc` is in flight (`inc` comes back),
    /// `ENOTCONN` if the channel is gone, `EMSGSIZE` if `hdr` does not fit.
    ///
    /// A tag goes back before the channel's lock does: the peer may reuse
    /// it as soon as the response is out, and this side must have it free
    /// by the time that request arrives.
    pub(crate) fn respond(
        &self,
        mut inc: Incoming<O>,
        status: i32,
        hdr: &[u8],
    ) -> Result<(), (Error, Option<Incoming<O>>)> {
        let invalidate = (inc.head.ndesc > 0).then_some(inc.head.descs[0].rkey);
        // On the error paths below `inc` goes back after the lock: the
        // parameter outlives the guard.
        let mut inner = self.inner.lock();
        if inner.xfer.as_ref().is_some_and(|x| x.rdma_pending(inc.tag)) {
            drop(inner);
            return Err((EBUSY, Some(inc)));
        }
        if inner.state != ChanState::Up {
            return Err((ENOTCONN, None));
        }
        if Header::LEN + ResponseHead::FIXED + hdr.len() > inner.peer_max_msg as usize {
            return Err((EMSGSIZE, None));
        }
        let head = ResponseHead {
            status: status.clamp(-4095, 0),
            moved: inner.xfer.as_ref().map_or(0, |x| x.moved(inc.tag)),
        };
        let queued = inner
            .responder
            .as_ref()
            .is_some_and(|r| !r.waiting.is_empty());
        if !queued {
            match self.send_response(&mut inner, inc.cookie, &head, hdr, invalidate) {
                Err(e) if e == EAGAIN => {}
                Ok(()) => {
                    // Up, so the responder holds the pool: this is not its
                    // last reference, nor `inc`'s of the channel (the
                    // caller's), and giving the tag back never sleeps.
                    drop(inc);
                    return Ok(());
                }
                Err(e) => return Err((e, None)),
            }
        }
        // Behind the others, in order, in its own entry (which holds a
        // message: the peer's limit is at most this side's).
        if hdr.len() > inc.bytes.capacity() {
            return Err((EMSGSIZE, None));
        }
        inc.bytes.clear();
        if inc.bytes.extend_from_slice(hdr, GFP_NOWAIT).is_err() {
            return Err((ENOMEM, None));
        }
        inc.response = Some((head, invalidate));
        let Some(r) = inner.responder.as_mut() else {
            return Err((ENOTCONN, None));
        };
        // One per responder tag, which `inc` holds: there is room.
        if let Err(e) = r.waiting.push_within_capacity(inc) {
            drop(inner);
            drop(e);
            return Err((ENOMEM, None));
        }
        drop(inner);
        // A credit may have come back meanwhile.
        self.flush_responses();
        Ok(())
    }

    pub(super) fn send_response(
        &self,
        inner: &mut Inner<O>,
        cookie: u64,
        head: &ResponseHead,
        hdr: &[u8],
        invalidate: Option<u32>,
    ) -> Result {
        let (Some(qp), Some(ring)) = (inner.qp.as_deref(), inner.ring.as_mut()) else {
            return Err(ENOTCONN);
        };
        let grant = inner.credits.take(false).ok_or(EAGAIN)?;
        let fill = |buf: &mut [u8]| {
            let n = Header::write_with(Kind::Response, grant, cookie, buf, |p| head.write(hdr, p))?;
            self.stats.add(Counter::TxBytes, n as u64);
            Ok(n)
        };
        let res = match invalidate {
            Some(rkey) => qp.send_with_invalidate(ring, rkey, fill),
            None => qp.send(ring, fill),
        };
        match res {
            Ok(_) => {
                self.stats.add(Counter::TxMsgs, 1);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Credits or send slots came back: sends the responses that wait for
    /// them, then lets the session's blocked senders go on.
    pub(super) fn unblocked(&self) {
        self.flush_responses();
        O::credits_returned(&self.session, self.index);
    }

    /// Sends the responses that wait for credits, while credits last; each
    /// gives its tag back under the lock, as in [`Channel::respond`].
    pub(super) fn flush_responses(&self) {
        loop {
            let mut inner = self.inner.lock();
            let Some(r) = inner.responder.as_mut() else {
                return;
            };
            if r.waiting.is_empty() {
                return;
            }
            let Ok(inc) = r.waiting.remove(0) else {
                return;
            };
            let sent = match inc.response {
                Some((head, invalidate)) => self
                    .send_response(&mut inner, inc.cookie, &head, &inc.bytes, invalidate)
                    .is_ok(),
                // Never: only a response waits.
                None => true,
            };
            if !sent {
                if let Some(r) = inner.responder.as_mut() {
                    if let Err(e) = r.waiting.insert_within_capacity(0, inc) {
                        drop(inner);
                        drop(e);
                    }
                }
                return;
            }
            // As in `respond`: the responder holds the pool, the caller the
            // channel.
            drop(inc);
            drop(inner);
        }
    }

    /// Test builds: sends a response to a request the peer never made.
    #[cfg(CONFIG_FERRY_KUNIT_TEST)]
    pub(crate) fn send_stray_response(&self) -> Result {
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        // Tag 0xfff0 of generation 0xffff: beyond any tag count.
        self.send_locked(&mut inner, Kind::Response, 0xffff_fff0, &[0u8; 16])
    }
}
