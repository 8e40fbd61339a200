// SPDX-License-Identifier: GPL-2.0

//! Making a channel's connection: a client resolves the route and connects,
//! a server accepts a connection request; the QP, its receive buffers and
//! the request state are made first. rdma_cm's events for the channel come
//! in here.

use super::*;

impl<O: Owner> Channel<O> {
    /// Starts a client channel: creates its CM id and resolves the peer. A
    /// failure fails the channel.
    pub(crate) fn start(self: &Arc<Self>) {
        let id = match CmId::new(self.session.net(), self.clone(), OWNER) {
            Ok(id) => id,
            Err(_) => return self.fail(Reason::NoResources),
        };
        let _ = id.set_ack_timeout(crate::params::ack_timeout());
        // Stored before its first event can fail the channel: the teardown
        // that follows a failure takes it under the same lock. A channel
        // closed already stores none (it would never be destroyed).
        let mut cm = self.cm.lock();
        {
            let mut inner = self.inner.lock();
            if inner.state == ChanState::Closed {
                return;
            }
            // Its connect deadline counts from now (a channel after the
            // first was made with it, but starts only once that one is up).
            inner.since = Some(Instant::now());
        }
        let res = id.resolve_addr(None, self.session.peer(), RESOLVE_TIMEOUT_MS);
        *cm = Some(id);
        drop(cm);
        if res.is_err() {
            // No device has a route to the peer.
            self.fail(Reason::Unreachable);
        }
    }

    /// Accepts a server channel from a connection request: creates the QP on
    /// the request's device, posts the receive buffers and accepts.
    pub(crate) fn accept(
        session: &Arc<O>,
        data: &ConnectData,
        req: ConnectRequest<'_>,
    ) -> Result<Arc<Self>, Reason> {
        let chan = Self::new(
            session,
            data.channel,
            data.generation,
            ChanState::Connecting,
        )
        .map_err(|_| Reason::NoResources)?;
        let (qp, ring) = match chan.create_qp(req.id()) {
            Ok(qp) => qp,
            Err(r) => {
                let _ = req.reject(&RejectData { reason: r }.encode());
                return Err(r);
            }
        };
        let ready = req
            .id()
            .modify_qp(&qp, QpState::Rtr)
            .and_then(|()| req.id().modify_qp(&qp, QpState::Rts));
        let mut nonce = [0u8; wire::NONCE_LEN];
        crate::crypto::random_bytes(&mut nonce);
        chan.inner.lock().nonces.0 = Some(nonce);
        let accept = AcceptData {
            session_id: data.session_id,
            nonce: Some(nonce),
        }
        .encode();
        // In the session before its hello can come: the hello of its last
        // channel makes the session connected, which needs them all listed.
        if let Err(r) = O::add_channel(session, chan.clone()) {
            let _ = req.reject(&RejectData { reason: r }.encode());
            chan.inner.lock().enter(ChanState::Closed);
            drop(qp);
            drop(chan.take_qp());
            return Err(r);
        }
        // Completions may arrive as soon as the accept is out: the QP is in
        // place before, and the id is stored before any event can fail the
        // channel (the teardown takes it under the same lock).
        let mut cm = chan.cm.lock();
        let caps = {
            let mut inner = chan.inner.lock();
            inner.qp = Some(qp.clone());
            inner.ring = Some(ring);
            inner.caps.unwrap_or_default()
        };
        let res = ready.and_then(|()| req.accept(chan.clone(), &qp, &conn_params(&accept, &caps)));
        match res {
            Ok(id) => {
                *cm = Some(id);
                // Before the id's lock goes: a teardown, which takes the id
                // first, then holds the QP's last reference.
                drop(qp);
                drop(cm);
                chan.inner.lock().since = Some(Instant::now());
                Ok(chan)
            }
            Err(_) => {
                drop(cm);
                chan.inner.lock().enter(ChanState::Closed);
                drop(qp);
                // Outside the lock: the drain runs completion handlers.
                drop(chan.take_qp());
                Err(Reason::NoResources)
            }
        }
    }

    /// Whether the host can afford the channel's buffers and queues
    /// (`Params::channel_bytes`); if not, logs why `what` (rate limited)
    /// and fails with [`Reason::NoResources`].
    pub(super) fn afford(&self, device: DeviceName, what: &CStr) -> Result<(), Reason> {
        let need = self.session.params().channel_bytes();
        if let Err((_, available)) = crate::params::affordable(need) {
            crate::ratelimit::pr_warn_limited!(
                "{}: session {} channel {}: {}: its buffers and queues need about {} MiB, and the host has {} MiB available\n",
                device.as_cstr(),
                self.session.id(),
                self.index,
                what,
                need >> 20,
                available >> 20
            );
            return Err(Reason::NoResources);
        }
        Ok(())
    }

    /// Creates the QP on the device `id` is bound to, moves it to INIT and
    /// posts every receive buffer it has (a server's: the first, for the
    /// hello); the channel's request state (with its registered regions)
    /// comes with it.
    pub(super) fn create_qp(
        self: &Arc<Self>,
        id: &Locked<'_>,
    ) -> Result<(Arc<Qp<Self>>, SendRing), Reason> {
        let device = id.device().ok_or(Reason::DeviceRemoved)?;
        let pd = self
            .session
            .pd_of(device.index())
            .ok_or(Reason::DeviceRemoved)?;
        let p = &self.session.params();
        self.afford(device.name(), c"not built")?;
        let vectors = device.num_comp_vectors().max(1);
        let cfg = QpConfig {
            recv_slots: p.queue_depth,
            send_slots: p.queue_depth,
            // A message, and the inline data a request may add to it.
            recv_buf_size: p.recv_buf(),
            send_buf_size: p.send_buf(),
            comp_vector: u32::from(self.index) % vectors,
            // Each responder tag has an rdma_rw context of its own; a
            // requester's tags are fewer.
            tags: if self.session.role() == Role::Server || p.takes_requests {
                xfer::responder_tags(p.queue_depth)
            } else {
                p.queue_depth
            },
            port: id.port_num(),
            whole_buffers: crate::params::whole_buffers(),
            // A server's connection holds one message buffer each way until
            // the client's hello is accepted (see `Channel::receive`): the
            // hello is the one message a client sends before the reply.
            first_buffers_only: self.session.role() == Role::Server,
        };
        let caps = device.caps();
        if xfer::pool_regions(p.queue_depth) > caps.max_mr {
            return Err(Reason::NoResources);
        }
        let first = match self.session.role() {
            Role::Client if p.preregister => xfer::pool_regions(p.queue_depth),
            Role::Client => xfer::FIRST_REGIONS,
            Role::Server => 0,
        };
        let xfer = Xfer::new(
            Some(&pd),
            p.queue_depth,
            caps.max_fast_reg_page_list_len.min(MAX_REG_PAGES),
            first,
        )
        .map_err(|_| Reason::NoResources)?;
        // The peer's requests: their headers and inline data, in the
        // receive buffers' size. A server's channel gets them once the
        // client's hello is accepted (see `Channel::receive`): until then a
        // connection holds as little as it can.
        let responder = match self.session.role() {
            Role::Client if p.takes_requests => {
                Some(Responder::new(p).map_err(|_| Reason::NoResources)?)
            }
            Role::Client | Role::Server => None,
        };
        let ctx = if p.polled(self.index) {
            PollCtx::Direct
        } else if self.softirq() {
            PollCtx::Softirq
        } else {
            PollCtx::Workqueue
        };
        let (qp, ring) =
            Qp::new(&pd, cfg, self.clone(), OWNER, ctx).map_err(|_| Reason::NoResources)?;
        let qp = Arc::new(qp, GFP_KERNEL).map_err(|_| Reason::NoResources)?;
        id.modify_qp(&qp, QpState::Init)
            .map_err(|_| Reason::TransportError)?;
        let posted = match self.session.role() {
            Role::Client => qp.recv_slots(),
            Role::Server => 1,
        };
        for slot in 0..posted {
            qp.post_recv(slot).map_err(|_| Reason::NoResources)?;
        }
        let mut inner = self.inner.lock();
        if inner.state == ChanState::Closed {
            // Torn down meanwhile: what was made goes, outside the lock.
            drop(inner);
            drop(xfer);
            drop(responder);
            return Err(Reason::LocalClose);
        }
        inner.device = Some((device.index(), device.name()));
        inner.caps = Some(caps);
        inner.pd = Some(pd);
        inner.xfer = Some(xfer);
        inner.responder = responder;
        drop(inner);
        Ok((qp, ring))
    }

    pub(super) fn cm_event(self: &Arc<Self>, id: &Locked<'_>, ev: &Event<'_>) {
        match ev.kind() {
            EventKind::AddrResolved => {
                if id.resolve_route(RESOLVE_TIMEOUT_MS).is_err() {
                    self.fail(Reason::Unreachable);
                }
            }
            EventKind::AddrError | EventKind::RouteError => self.fail(Reason::Unreachable),
            EventKind::RouteResolved => {
                if let Err(r) = self.route_resolved(id) {
                    self.fail(r);
                }
            }
            EventKind::ConnectResponse => {
                if let Err(r) = self.connect_response(id, ev) {
                    self.fail(r);
                }
            }
            EventKind::Established => {
                // Server side: the client's hello may already be in.
                let mut inner = self.inner.lock();
                if inner.state == ChanState::Connecting {
                    inner.enter(ChanState::Handshake);
                }
            }
            EventKind::Rejected => {
                let reason = match ev.consumer_reject_data().and_then(RejectData::decode) {
                    Some(r) => r.reason,
                    None if ev.status() == cm::REJ_INVALID_SERVICE_ID => Reason::NoListener,
                    None => {
                        // A peer can send any number of these.
                        crate::ratelimit::pr_info_limited!(
                            "session {}: connect rejected: {}\n",
                            self.session.id(),
                            id.reject_msg(ev.status())
                        );
                        Reason::CmRejected
                    }
                };
                self.fail(reason);
            }
            EventKind::Unreachable | EventKind::ConnectError => {
                self.fail(if ev.status() == ETIMEDOUT.to_errno() {
                    Reason::Timeout
                } else {
                    Reason::Unreachable
                })
            }
            EventKind::Disconnected => self.fail(Reason::PeerClosed),
            // The session's work destroys the id, which rdma_cm waits for.
            EventKind::DeviceRemoval => self.fail(Reason::DeviceRemoved),
            EventKind::AddrChange => self.fail(Reason::Unreachable),
            EventKind::TimewaitExit | EventKind::Other(_) => {}
        }
    }

    /// Client: route known; create the QP and send the connect request.
    pub(super) fn route_resolved(self: &Arc<Self>, id: &Locked<'_>) -> Result<(), Reason> {
        let hostile = self.session.hostile();
        hostile.connect_step(self.index, self.generation);
        let (qp, ring) = self.create_qp(id)?;
        // The connect's deadline restarts once the QP is built: with
        // `FERRY_PREREGISTER` that took one registration per tag.
        self.inner.lock().since = Some(Instant::now());
        hostile.connect_step(self.index, self.generation);
        let mut data = ConnectData {
            minor: wire::MINOR,
            proof: None,
            session_id: self.session.session_id(),
            generation: self.generation,
            channel: self.index,
            channels: self.session.params().channels,
            max_msg: self.session.params().max_msg,
            // CAST: at most `MAX_QUEUE_DEPTH`, which fits.
            queue_depth: self.session.params().queue_depth as u16,
            no_inline: self.session.params().inline_size == 0,
            no_requests: !self.session.params().takes_requests,
        };
        if let Some(secret) = self.session.join_secret() {
            data.prove(&secret);
        }
        let data = data.encode();
        // Held until the connect is out: the teardown, which takes the QP,
        // takes the id under it first.
        let cm = self.cm.lock();
        let caps = {
            let mut inner = self.inner.lock();
            if cm.is_none() || inner.state != ChanState::Resolving {
                drop(inner);
                drop(cm);
                drop(qp);
                return Err(Reason::LocalClose);
            }
            inner.qp = Some(qp.clone());
            inner.ring = Some(ring);
            inner.enter(ChanState::Connecting);
            inner.caps.unwrap_or_default()
        };
        let res = id.connect(&qp, &conn_params(&data, &caps));
        drop(qp);
        drop(cm);
        // A QP that never connected goes with the channel's teardown.
        res.map_err(|_| Reason::NoResources)
    }

    /// Client: the server accepted; check its data, bring the QP up, complete
    /// the connection and say hello.
    pub(super) fn connect_response(&self, id: &Locked<'_>, ev: &Event<'_>) -> Result<(), Reason> {
        let acc = AcceptData::decode(ev.private_data())?;
        if acc.session_id != self.session.session_id() {
            return Err(Reason::ProtocolError);
        }
        // A server before 1.2 cannot answer the key's challenge.
        if self.session.psk().is_some() && acc.nonce.is_none() {
            return Err(Reason::AuthFailed);
        }
        self.inner.lock().nonces.0 = acc.nonce;
        // As in `route_resolved`: no teardown takes the QP meanwhile.
        let cm = self.cm.lock();
        let qp = match cm.as_ref() {
            Some(_) => self.inner.lock().qp.clone(),
            None => None,
        };
        let qp = qp.ok_or(Reason::LocalClose)?;
        let res = id
            .modify_qp(&qp, QpState::Rtr)
            .and_then(|()| id.modify_qp(&qp, QpState::Rts))
            .and_then(|()| id.establish());
        drop(qp);
        drop(cm);
        res.map_err(|_| Reason::TransportError)?;
        let mut inner = self.inner.lock();
        if inner.state != ChanState::Connecting {
            return Err(Reason::LocalClose);
        }
        inner.enter(ChanState::Handshake);
        inner.since = Some(Instant::now());
        self.send_hello(&mut inner).map_err(|_| Reason::NoResources)
    }
}

/// How long address and route resolution may take, in milliseconds.
pub(super) const RESOLVE_TIMEOUT_MS: u32 = 2000;

/// Transport retries before a send to a silent peer fails (rxe takes 7 as
/// no limit: there, only the heartbeats end a silent peer's connection).
pub(super) const RETRY_COUNT: u8 = 7;

/// RDMA READs a channel has in flight each way, at most.
pub(super) const RDMA_READS: u32 = 16;

pub(super) fn conn_params<'a>(private_data: &'a [u8], caps: &Caps) -> ConnParams<'a> {
    ConnParams {
        private_data,
        // CAST: at most `RDMA_READS`.
        responder_resources: caps.max_qp_rd_atom.min(RDMA_READS) as u8,
        // CAST: as above.
        initiator_depth: caps.max_qp_init_rd_atom.min(RDMA_READS) as u8,
        retry_count: RETRY_COUNT,
        // Credits make receiver-not-ready impossible: one would be a bug, and
        // must fail loudly instead of being retried.
        rnr_retry_count: 0,
    }
}

impl<O: Owner> Handler for Channel<O> {
    fn event(this: ArcBorrow<'_, Self>, id: &Locked<'_>, ev: &Event<'_>) {
        let this: Arc<Self> = this.into();
        this.cm_event(id, ev);
    }
}
