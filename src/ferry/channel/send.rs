// SPDX-License-Identifier: GPL-2.0

//! The data path out: messages and requests, each taking a credit and a
//! send slot under the channel's spinlock, never sleeping, never allocating.

use super::*;

impl<O: Owner> Channel<O> {
    /// Sends a message, taking a credit. `EAGAIN` if there is no credit or send
    /// slot. The handshake's sends are signaled (a refusal fails the channel
    /// once it has left, in `send_done`); the rest only now and then.
    pub(super) fn send_locked(
        &self,
        inner: &mut Inner<O>,
        kind: Kind,
        cookie: u64,
        payload: &[u8],
    ) -> Result {
        let (Some(qp), Some(ring)) = (inner.qp.as_deref(), inner.ring.as_mut()) else {
            return Err(ENOTCONN);
        };
        let grant = inner.credits.take(kind == Kind::Credits).ok_or(EAGAIN)?;
        let fill = |buf: &mut [u8]| {
            let mut n = Header::write(kind, grant, cookie, payload, buf)?;
            if kind == Kind::Message {
                n = self.session.hostile().message(buf, n);
            }
            Ok(n)
        };
        // A heartbeat's completion is a sign of life even when its answer
        // waits behind the peer's own RDMA on the peer's send queue: the
        // peer's adapter acknowledged it (see `Inner::last_ack`).
        let res = if matches!(kind, Kind::Hello | Kind::HelloReply | Kind::Heartbeat) {
            qp.send_signaled(ring, fill)
        } else {
            qp.send(ring, fill)
        };
        match res {
            Ok(_) => {
                self.stats.add(Counter::TxMsgs, 1);
                self.stats
                    .add(Counter::TxBytes, (Header::LEN + payload.len()) as u64);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Sends a consumer's message. `ENOTCONN` unless the channel is up,
    /// `EMSGSIZE` if it exceeds the peer's limit, `EAGAIN` without a credit.
    pub(crate) fn send_message(&self, data: &[u8]) -> Result {
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Up {
            return Err(ENOTCONN);
        }
        if data.is_empty() || data.len() > (inner.peer_max_msg as usize).saturating_sub(Header::LEN)
        {
            return Err(EMSGSIZE);
        }
        self.send_locked(&mut inner, Kind::Message, 0, data)?;
        self.stats.add(Counter::DataTx, 1);
        Ok(())
    }

    /// Sends request `req` with its `data` (see [`crate::xfer`]). On failure
    /// both come back: `ENOTCONN` unless the channel is up, `EAGAIN` without
    /// a credit, a free tag or free regions, `EBUSY` if `own` (the caller's
    /// tag) is in flight, `EINVAL` if it is beyond the queue depth,
    /// `EMSGSIZE` if the header does not fit the peer's limit or the data
    /// needs more than 8 registrations. Allocates nothing and never sleeps.
    /// A request whose registrations the driver took but not its send is
    /// kept as posted (the peer never sees it): the channel fails at the
    /// next tick, and its teardown ends the request.
    pub(crate) fn submit(
        &self,
        own: Option<u32>,
        req: Req,
        data: Option<SgList>,
    ) -> Result<(), Refused<Req>> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if inner.state != ChanState::Up {
            return Err((ENOTCONN, req, data));
        }
        let (Some(qp), Some(ring), Some(xfer)) = (
            inner.qp.as_deref(),
            inner.ring.as_mut(),
            inner.xfer.as_mut(),
        ) else {
            return Err((ENOTCONN, req, data));
        };
        // The largest head: every region used.
        let worst = RequestHead::FIXED + RequestHead::DESC * wire::request::MAX_DESCS;
        if Header::LEN + worst + Request::header(&req).len() > inner.peer_max_msg as usize {
            return Err((EMSGSIZE, req, data));
        }
        let Some(grant) = inner.credits.take(false) else {
            return Err((EAGAIN, req, data));
        };
        let write = Request::dir(&req) == Dir::FromPeer;
        let limit = inner.peer_depth.min(self.session.params().queue_depth);
        let mut part = false;
        let res = xfer.submit(
            limit,
            inner.peer_inline,
            own,
            req,
            data,
            |tag, regs, cookie, head, hdr, inline| {
                let mrs = regs.as_slice();
                let mut bytes = 0;
                if mrs.iter().flatten().next().is_some() {
                    self.session.hostile().cut(qp, false);
                }
                let posted = qp.send_registered(ring, tag, mrs, write, |buf| {
                    let n = Header::write_with(Kind::Request, grant, cookie, buf, |p| {
                        head.write(hdr, p, |d| match inline {
                            Some(sg) => sg.copy_to(d),
                            None => Err(EINVAL),
                        })
                    })?;
                    self.session.hostile().request(buf);
                    bytes = n;
                    Ok(n)
                })?;
                if posted == Posted::Part {
                    // Registrations at work, the request not sent: held as
                    // posted, so its regions and pages stay until the
                    // teardown ends them; the tick fails the channel.
                    part = true;
                    return Ok(());
                }
                self.stats.add(Counter::TxBytes, bytes as u64);
                self.stats.add(Counter::Registrations, mrs.len() as u64);
                if inline.is_some() {
                    self.stats.add(Counter::Inline, 1);
                }
                Ok(())
            },
        );
        if part {
            inner.broken = true;
        }
        match res {
            Ok(()) => {
                self.stats.add(Counter::RequestsTx, 1);
                self.stats.add(Counter::TxMsgs, 1);
                Ok(())
            }
            Err(e) => {
                inner.credits.untake(grant);
                Err(e)
            }
        }
    }

    /// Client, connection up: sends the hello.
    pub(super) fn send_hello(&self, inner: &mut Inner<O>) -> Result {
        let p = &self.session.params();
        let mut auth = match (self.session.psk(), inner.nonces.0) {
            (Some(key), Some(_)) => {
                crate::crypto::random_bytes(&mut inner.nonces.1);
                self.auth_context(inner.nonces).map(|c| Auth {
                    nonce: inner.nonces.1,
                    mac: c.client_mac(key),
                })
            }
            _ => None,
        };
        self.session.hostile().client_proof(&mut auth);
        let hello = Hello {
            service: self.session.service(),
            queue_depth: p.queue_depth,
            max_msg: p.max_msg,
            heartbeat_ms: p.heartbeat_ms,
            inline_size: p.inline_taken(),
            auth,
        };
        self.send_locked(inner, Kind::Hello, 0, &hello.encode())
    }

    /// Processes up to `budget` of the channel's completions in the calling
    /// thread, unless another thread is processing them; counts and returns
    /// how many. The handlers take the channel's lock: the caller holds none
    /// of ferry's.
    pub(crate) fn poll(&self, budget: u32) -> u32 {
        let Some(poller) = self.inner.lock().qp.as_deref().and_then(Qp::poller) else {
            return 0;
        };
        let n = poller.poll(budget);
        if n != 0 {
            self.stats.add(Counter::Polled, n.into());
        }
        n
    }
}
