// SPDX-License-Identifier: GPL-2.0

//! The responder's side of requests: a request that arrived is an
//! [`Incoming`] until the consumer answers; its data moves by rdma_rw (or is
//! copied, when it came inline), and the answer waits for a credit if it must.

use super::*;

impl<O: Owner> Channel<O> {
    /// Responder: moves the data of `inc` between its requester and `sg` (an
    /// RDMA READ for a request whose data goes to this side, a WRITE for one
    /// whose data comes from it), region after region; `done` is told when
    /// it is over. `sg` must hold the request's whole data. Process context:
    /// rdma_rw allocates as it prepares a transfer.
    ///
    /// Data that came inline is copied into `sg` at once, and `done` comes
    /// back for the caller to call once it no longer borrows `inc` (whose
    /// answer `done` may send): `Ok(Some(done))`.
    pub(crate) fn incoming_rdma(
        &self,
        inc: &mut Incoming<O>,
        sg: SgList,
        done: KBox<dyn RdmaDone>,
    ) -> Result<Option<KBox<dyn RdmaDone>>> {
        let dir = match inc.head.dir {
            // RDMA READ: the device writes the local pages.
            Dir::ToPeer => DmaDir::FromDevice,
            Dir::FromPeer => DmaDir::ToDevice,
            Dir::None => return Err(EINVAL),
        };
        if sg.len() != u64::from(inc.head.data_len) {
            return Err(EINVAL);
        }
        if inc.head.inline {
            // As for an RDMA: only while the connection lives.
            if self.inner.lock().state != ChanState::Up {
                return Err(ENOTCONN);
            }
            sg.copy_from(inc.inline_data())?;
            inc.moved = inc.head.data_len;
            return Ok(Some(done));
        }
        let mut op = RdmaOp {
            done,
            list: Arc::new(sg, GFP_KERNEL)?,
            head: inc.head,
            dir,
            next: 0,
            offset: 0,
        };
        let (first, mut remote) = op.next_region().ok_or(EINVAL)??;
        self.session.hostile().remote(&mut remote);
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if inner.xfer.as_ref().is_some_and(|x| x.rdma_pending(inc.tag)) {
            return Err(EBUSY);
        }
        let Some(qp) = inner.lend_qp() else {
            return Err(ENOTCONN);
        };
        let (tag, len) = (inc.tag, inc.head.data_len);
        // Recorded before it is posted: it may complete, and its `done`
        // answer and free `inc`, at once. Nothing touches `inc` after.
        if let Some(x) = inner.xfer.as_mut() {
            x.set_rdma(tag, op);
        }
        inc.moved = len;
        drop(inner);
        let res = qp.rdma(tag, first, remote, dir);
        let mut inner = self.inner.lock();
        if res.is_err() {
            // Never posted: `done` is not called; the caller hears the error.
            drop(inner.xfer.as_mut().and_then(|x| x.take_rdma(tag)));
            inc.moved = 0;
        }
        inner.end_loan(qp);
        drop(inner);
        res.map_err(|(e, _)| e)?;
        self.stats.add(Counter::RdmaBytes, u64::from(len));
        Ok(None)
    }

    /// Responder: the transfer of tag `tag` completed (`ok`): posts its next
    /// region, if it has one and the channel lives, or tells its consumer.
    pub(super) fn rdma_completed(&self, tag: u32, ok: bool) {
        let mut inner = self.inner.lock();
        if ok {
            inner.last_ack = Instant::now();
        }
        // While the channel shuts down its QP is being drained: the teardown
        // completes the transfer once the QP is gone.
        let Some(qp) = inner.qp.as_deref() else {
            return;
        };
        let _ = qp.rdma_done(tag);
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
            inner.end_loan(qp);
            match res {
                Ok(()) => return,
                Err(e) => status = e.to_errno(),
            }
        }
        let cb = inner.xfer.as_mut().and_then(|x| x.take_rdma(tag));
        drop(inner);
        if let Some(cb) = cb {
            cb.done(status);
        }
    }

    /// Responder: answers `inc` with `status` and `hdr`, invalidating the
    /// requester's first key if the request had data. A response that finds
    /// no credit waits for one (a copy of `hdr`, made then). `EBUSY` while a
    /// transfer of `inc` is in flight, `ENOTCONN` if the channel is gone,
    /// `EMSGSIZE` if `hdr` does not fit.
    pub(crate) fn respond(&self, inc: &Incoming<O>, status: i32, hdr: &[u8]) -> Result {
        let head = ResponseHead {
            status: status.clamp(-4095, 0),
            moved: inc.moved,
        };
        let invalidate = (inc.head.ndesc > 0).then_some(inc.head.descs[0].rkey);
        {
            let mut inner = self.inner.lock();
            if inner.xfer.as_ref().is_some_and(|x| x.rdma_pending(inc.tag)) {
                return Err(EBUSY);
            }
            if inner.state != ChanState::Up {
                return Err(ENOTCONN);
            }
            if Header::LEN + ResponseHead::FIXED + hdr.len() > inner.peer_max_msg as usize {
                return Err(EMSGSIZE);
            }
            let queued = inner.xfer.as_ref().is_some_and(|x| !x.pending.is_empty());
            if !queued {
                match self.send_response(&mut inner, inc.cookie, &head, hdr, invalidate) {
                    Err(e) if e == EAGAIN => {}
                    r => return r,
                }
            }
        }
        // Behind the others, in order.
        let mut copy = KVec::new();
        copy.extend_from_slice(hdr, GFP_KERNEL)?;
        let r = PendingResponse {
            cookie: inc.cookie,
            head,
            hdr: copy,
            invalidate,
        };
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if let Some(x) = inner.xfer.as_mut() {
            // One per responder tag, which `inc` holds: there is room.
            x.pending.push_within_capacity(r).map_err(|_| ENOMEM)?;
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

    /// Sends the responses that wait for credits, while credits last.
    pub(super) fn flush_responses(&self) {
        let mut inner = self.inner.lock();
        loop {
            let Some(r) = inner.xfer.as_mut().and_then(|x| {
                (!x.pending.is_empty())
                    .then(|| x.pending.remove(0).ok())
                    .flatten()
            }) else {
                return;
            };
            if self
                .send_response(&mut inner, r.cookie, &r.head, &r.hdr, r.invalidate)
                .is_err()
            {
                if let Some(x) = inner.xfer.as_mut() {
                    let _ = x.pending.insert_within_capacity(0, r);
                }
                return;
            }
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

    /// An [`Incoming`] is gone: its responder tag is free.
    pub(crate) fn incoming_dropped(&self, tag: u32) {
        if let Some(x) = self.inner.lock().xfer.as_mut() {
            x.put_incoming(tag);
        }
    }
}

/// A request that arrived, until the consumer responds.
pub(crate) struct Incoming<O: Owner> {
    pub(crate) chan: Arc<Channel<O>>,
    /// This side's responder tag.
    pub(crate) tag: u32,
    /// The requester's tag.
    pub(crate) cookie: u64,
    pub(crate) head: RequestHead,
    /// The requester's header, then its inline data if the request has any.
    pub(crate) bytes: KVec<u8>,
    /// Bytes moved so far.
    pub(crate) moved: u32,
}

impl<O: Owner> Incoming<O> {
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
        let inline = if self.head.inline {
            self.head.data_len as usize
        } else {
            0
        };
        &self.bytes[..self.bytes.len() - inline]
    }

    /// The data that came in the request (empty unless it came inline).
    pub(crate) fn inline_data(&self) -> &[u8] {
        &self.bytes[self.header().len()..]
    }

    /// Answers the request: see [`Channel::respond`].
    pub(crate) fn respond(self: KBox<Self>, status: i32, hdr: &[u8]) -> Result {
        let chan = self.chan.clone();
        chan.respond(&self, status, hdr)
    }
}

impl<O: Owner> Drop for Incoming<O> {
    fn drop(&mut self) {
        self.chan.incoming_dropped(self.tag);
    }
}
