// SPDX-License-Identifier: GPL-2.0

//! Completions: every message the peer sends is parsed and checked here
//! (the handshake, heartbeats, credits, messages, requests, responses), and
//! every send, registration, invalidation and RDMA that completes is
//! accounted for. A failed work request fails the channel.

use super::*;

impl<O: Owner> Channel<O> {
    /// Server: whether a hello answers the challenge of the key the
    /// listener requires ([`Reason::AuthFailed`] if not). A client that
    /// authenticates where no key is required is refused too: it asked
    /// the server to prove a key it does not have.
    fn check_auth(&self, hello: &Hello) -> Reason {
        let server_nonce = self.inner.lock().nonces.0;
        let good = match (self.session.psk(), &hello.auth) {
            (None, None) => true,
            (Some(key), Some(a)) => self
                .auth_context((server_nonce, a.nonce))
                .is_some_and(|c| crate::crypto::equal_secret(&c.client_mac(key), &a.mac)),
            _ => false,
        };
        if good {
            Reason::None
        } else {
            Reason::AuthFailed
        }
    }

    /// Server: makes the message buffers the connection went without until
    /// its hello was accepted, if the host can still afford them, and posts
    /// the receive buffers among them. Only during the handshake: a channel
    /// refusing, failed or up (a second hello) gets none, and the hello is
    /// refused below. The QP is lent (the teardown waits for it).
    fn grow_buffers(&self) -> Result<(), Reason> {
        let qp = {
            let mut inner = self.inner.lock();
            if !matches!(inner.state, ChanState::Connecting | ChanState::Handshake) {
                return Ok(());
            }
            inner.lend_qp().ok_or(Reason::LocalClose)?
        };
        let res = self.grow_qp(&qp);
        self.end_loan(qp);
        res
    }

    fn grow_qp(&self, qp: &Qp<Self>) -> Result<(), Reason> {
        self.afford(self.device_name(), c"refused the client's hello")?;
        if qp.grow().map_err(|_| Reason::NoResources)? {
            for slot in 1..qp.recv_slots() {
                qp.post_recv(slot).map_err(|_| Reason::NoResources)?;
            }
        }
        Ok(())
    }

    /// The handshake is over: the channel carries traffic, and its session
    /// hears of it (without the channel's lock).
    fn come_up(self: &Arc<Self>, mut inner: SpinLockIrqGuard<'_, Inner<O>>) {
        if !inner.enter(ChanState::Up) {
            return;
        }
        inner.last_heartbeat = Instant::now();
        if self.softirq() {
            // The session's news sleeps: told from the deferred work.
            inner.deferred.0 = true;
            drop(inner);
            self.session
                .queue_channel(self.clone(), ChannelWork::Deferred);
            return;
        }
        drop(inner);
        O::channel_up(&self.session, self.index, self.generation);
    }

    /// Handles one received message (`invalidated`: the key a
    /// send-with-invalidate ended); `Err` fails the channel. Returns whether
    /// the message granted credits.
    pub(super) fn receive(
        self: &Arc<Self>,
        msg: &[u8],
        invalidated: Option<u32>,
    ) -> Result<bool, Refusal> {
        let (h, payload) = Header::parse(msg)?;
        // The receive buffers may have room for inline data beyond the
        // largest message (when this side takes requests): nothing but a
        // request's inline data may use it.
        let max_msg = self.session.params().max_msg as usize;
        if h.kind != Kind::Request && msg.len() > max_msg {
            return Err(Refusal::breach("a message beyond the largest agreed"));
        }
        let granted = h.credits != 0;
        let role = self.session.role();
        // The session's lock comes before the channel's: ask it first.
        let hello = match (h.kind, role) {
            (Kind::Hello, Role::Server) => match Hello::decode(payload) {
                // The service hears of an authenticated client alone.
                Ok(hello) => Some((
                    Some(hello),
                    match self.check_auth(&hello) {
                        Reason::None => O::check_hello(&self.session, &hello),
                        r => r,
                    },
                )),
                // Limits out of range or authentication asked for: refused,
                // with a reply that says why.
                Err(r) if r != Reason::Malformed => Some((None, r)),
                Err(r) => return Err(Refusal::of_decode(r, "a malformed hello")),
            },
            _ => None,
        };
        // An accepted hello: the message buffers the connection went
        // without and the responder's entries, made here (process context,
        // before the lock), posted and installed before the reply goes (the
        // reply grants the client the receive buffers, and requests may
        // follow). Buffers the host cannot afford refuse the hello.
        let hello = match hello {
            Some((Some(h), Reason::None)) if role == Role::Server => {
                Some((Some(h), self.grow_buffers().err().unwrap_or(Reason::None)))
            }
            other => other,
        };
        let mut responder = match &hello {
            Some((Some(_), Reason::None)) if role == Role::Server => {
                Some(Responder::new(self.session.params()).map_err(|_| Reason::NoResources)?)
            }
            _ => None,
        };
        let mut inner = self.inner.lock();
        if responder.is_some() && inner.responder.is_none() {
            inner.responder = responder.take();
        }
        if role == Role::Server && self.index == 0 && inner.state == ChanState::Up {
            // A client speaks on an accepted channel 0 only once it has the
            // hello reply, and with it the session's secret.
            self.session.peer_confirmed();
        }
        inner.last_rx = Instant::now();
        self.stats.add(Counter::RxMsgs, 1);
        self.stats.add(Counter::RxBytes, msg.len() as u64);
        match (h.kind, inner.state, hello) {
            (Kind::Hello, ChanState::Connecting | ChanState::Handshake, Some((hello, status))) => {
                let p = self.session.params();
                if let Some(hello) = &hello {
                    inner.learn_peer(p, hello.queue_depth, hello.max_msg, hello.inline_size);
                    if let Some(a) = &hello.auth {
                        inner.nonces.1 = a.nonce;
                    }
                }
                inner.credits.grant(h.credits)?;
                // Authenticated: the server's response, and the secret masked.
                let auth = match (status, self.session.psk()) {
                    (Reason::None, Some(key)) => self.auth_context(inner.nonces).map(|c| (c, key)),
                    _ => None,
                };
                let mut secret = match status {
                    Reason::None => self.session.reply_secret(self.index),
                    _ => None,
                };
                if let (Some(s), Some((c, key))) = (secret.as_mut(), &auth) {
                    *s = c.mask_secret(key, s);
                }
                let reply = HelloReply {
                    status,
                    queue_depth: p.queue_depth,
                    max_msg: p.max_msg,
                    heartbeat_ms: p.heartbeat_ms,
                    inline_size: p.inline_taken(),
                    no_requests: !p.sends_requests,
                    secret,
                    mac: auth.map(|(c, key)| {
                        let mut m = c.server_mac(key);
                        self.session.hostile().server_proof(&mut m);
                        m
                    }),
                };
                self.send_locked(&mut inner, Kind::HelloReply, 0, &reply.encode())
                    .map_err(|_| Reason::NoResources)?;
                if status != Reason::None {
                    // (Not `device_name()`: the channel's lock is held.)
                    let dev = inner.device.map_or(DeviceName::NONE, |(_, n)| n);
                    crate::ratelimit::pr_info_limited!(
                        "{}: session {} channel {}: refused the client's hello from {}: {}\n",
                        dev.as_cstr(),
                        self.session.id(),
                        self.index,
                        self.session.peer(),
                        status.describe()
                    );
                    // Fail once the refusal has left (see `send_done`).
                    inner.enter(ChanState::Refusing(status));
                    return Ok(false);
                }
                self.come_up(inner);
                Ok(false)
            }
            (Kind::HelloReply, ChanState::Handshake, None) if role == Role::Client => {
                let reply = HelloReply::decode(payload)
                    .map_err(|r| Refusal::of_decode(r, "a malformed hello reply"))?;
                if reply.status != Reason::None {
                    return Err(reply.status.into());
                }
                // A client that named a key hears the server prove it too.
                let auth = match self.session.psk() {
                    Some(key) => {
                        let c = self.auth_context(inner.nonces).ok_or(Reason::AuthFailed)?;
                        let good = reply
                            .mac
                            .is_some_and(|m| crate::crypto::equal_secret(&m, &c.server_mac(key)));
                        if !good {
                            return Err(Reason::AuthFailed.into());
                        }
                        Some((c, key))
                    }
                    None => None,
                };
                // Channel 0's reply alone hands the secret.
                if let Some(mut secret) = reply.secret.filter(|_| self.index == 0) {
                    if let Some((c, key)) = &auth {
                        secret = c.mask_secret(key, &secret);
                    }
                    self.session.learn_secret(secret);
                }
                let p = self.session.params();
                if !p.takes_requests && !reply.no_requests && self.index == 0 {
                    crate::ratelimit::pr_warn_limited!(
                        "session {}: the server does not know FERRY_NO_REQUESTS: a request from it would fail the channel\n",
                        inner.names.0
                    );
                }
                inner.learn_peer(p, reply.queue_depth, reply.max_msg, reply.inline_size);
                inner.credits.grant(h.credits)?;
                self.come_up(inner);
                Ok(false)
            }
            (Kind::Heartbeat, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                self.stats.add(Counter::HeartbeatsRx, 1);
                // No credit for the ack: the peer's heartbeat times out only if
                // this goes on, which is what it should measure.
                let _ = self.send_locked(&mut inner, Kind::HeartbeatAck, h.cookie, &[]);
                Ok(granted)
            }
            (Kind::Message, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                drop(inner);
                self.stats.add(Counter::DataRx, 1);
                O::deliver(&self.session, payload);
                Ok(granted)
            }
            (Kind::Request, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                let (head, hdr, data) =
                    RequestHead::parse(payload, self.session.params().inline_taken())
                        .map_err(|_| Refusal::breach("a malformed request"))?;
                if msg.len() - data.len() > max_msg {
                    return Err(Refusal::breach(
                        "a request beyond the largest message agreed",
                    ));
                }
                // The requester may have its queue depth in flight: this
                // side's depth, which is also the tag count. The header and
                // inline data go into the tag's entry until the consumer
                // responds; the receive buffer goes back to the peer now.
                let inc = self.incoming(inner, h.cookie, head, hdr, data)?;
                self.stats.add(Counter::RequestsRx, 1);
                O::deliver_request(&self.session, inc);
                Ok(granted)
            }
            (Kind::Response, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                if invalidated.is_some() {
                    self.stats.add(Counter::InvRemote, 1);
                }
                let x = inner
                    .xfer
                    .as_mut()
                    .ok_or(Refusal::breach("a response on a channel without requests"))?;
                match x.response(h.cookie, invalidated, payload)? {
                    Response::Finished(f) => {
                        let grow = x.wants_regions() > 0;
                        drop(inner);
                        f.complete();
                        if grow {
                            Self::grow_regions(self.clone());
                        }
                        // Its tag and regions are free.
                        O::credits_returned(&self.session, self.index);
                    }
                    Response::Invalidate(tag, keys) => {
                        let qp = inner.qp.as_ref().ok_or(Reason::LocalClose)?;
                        if let Err(e) = qp.local_invalidate(tag, keys.as_slice()) {
                            // Once per channel: the failure closes it.
                            let dev = inner.device.map_or(DeviceName::NONE, |(_, n)| n);
                            crate::ratelimit::pr_warn_limited!(
                                "{}: session {} channel {}: posting {} invalidations failed: {:?}\n",
                                dev.as_cstr(),
                                self.session.id(),
                                self.index,
                                keys.as_slice().len(),
                                e
                            );
                            return Err(Reason::TransportError.into());
                        }
                        self.stats
                            .add(Counter::InvLocal, keys.as_slice().len() as u64);
                    }
                }
                Ok(granted)
            }
            (Kind::HeartbeatAck, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                if let Some((seq, at)) = inner.heartbeat_out {
                    if seq == h.cookie {
                        let us = at.elapsed().as_micros_ceil();
                        inner.rtt_us = u32::try_from(us).unwrap_or(u32::MAX);
                        inner.heartbeat_out = None;
                    }
                }
                Ok(granted)
            }
            (Kind::Credits, ChanState::Up, _) => {
                inner.credits.grant(h.credits)?;
                Ok(granted)
            }
            // Completions still coming in after the channel failed: nothing
            // to act on, and no fault of the peer's.
            (_, ChanState::Failed | ChanState::Closed, _) => Ok(false),
            // A message out of place: a hello twice, a reply to a server, data
            // before the handshake.
            _ => Err(Refusal::breach("a message out of place")),
        }
    }

    /// A failed work completion: the first one that is not a flush is logged
    /// and fails the channel; flushes are only counted.
    pub(super) fn wc_failed(self: &Arc<Self>, wc: &Wc) {
        self.stats.add_wc(wc.status());
        if wc.flushed() {
            // A flush is the echo of a failure that came first, unless the
            // channel is still up: then nothing else said why.
            if self.stats.add(Counter::FlushErrors, 1) == 0
                && self.inner.lock().state == ChanState::Up
            {
                pr_warn!(
                    "session {} channel {} ({}, attempt {}): work flushed on a channel still up\n",
                    self.session.id(),
                    self.index,
                    match self.session.role() {
                        Role::Client => "client",
                        Role::Server => "server",
                    },
                    self.generation
                );
            }
        } else {
            let first = self.stats.add(Counter::WcErrors, 1) == 0;
            if first {
                crate::ratelimit::pr_warn_limited!(
                    "{}: session {} channel {}: {} (status {}, vendor error {:#x})\n",
                    self.device_name().as_cstr(),
                    self.session.id(),
                    self.index,
                    wc.status_msg(),
                    wc.status(),
                    wc.vendor_err()
                );
            }
        }
        self.fail_in_handler(Reason::TransportError);
    }

    pub(super) fn recv_done(self: &Arc<Self>, wc: &Wc, data: &[u8]) -> bool {
        if !wc.ok() {
            self.wc_failed(wc);
            return false;
        }
        let res = self.receive(data, wc.invalidated());
        if res == Ok(true) {
            self.unblocked();
        }
        match res {
            Ok(_) => true,
            Err(r) => {
                if !r.what.is_empty() {
                    crate::ratelimit::pr_warn_limited!(
                        "{}: session {} channel {}: the peer broke the protocol ({}, {} bytes): closing the connection\n",
                        self.device_name().as_cstr(),
                        self.session.id(),
                        self.index,
                        r.what,
                        data.len()
                    );
                }
                self.fail_in_handler(r.reason);
                false
            }
        }
    }
}

impl<O: Owner> Completion for Channel<O> {
    fn recv_done(this: ArcBorrow<'_, Self>, _slot: u32, wc: &Wc, data: &[u8]) -> bool {
        let this: Arc<Self> = this.into();
        this.recv_done(wc, data)
    }

    fn tag_done(this: ArcBorrow<'_, Self>, tag: u32, op: TagOp, wc: &Wc) {
        match op {
            // Registrations are unsignaled: this is a failure.
            // Both complete only on failure: the transfer's own completion
            // follows, flushed.
            TagOp::Reg | TagOp::RdmaStep => Arc::<Self>::from(this).wc_failed(wc),
            TagOp::Inv if !wc.ok() => Arc::<Self>::from(this).wc_failed(wc),
            TagOp::Inv => {
                let (f, grow) = {
                    let mut inner = this.inner.lock();
                    let x = inner.xfer.as_mut();
                    x.map_or((None, false), |x| {
                        (x.invalidated(tag), x.wants_regions() > 0)
                    })
                };
                if let Some(f) = f {
                    f.complete();
                    if grow {
                        Self::grow_regions(this.into());
                    }
                    // Its tag and regions are free: what waits for them may go on.
                    O::credits_returned(&this.session, this.index);
                }
            }
            TagOp::Rdma => {
                this.rdma_completed(tag, wc.ok());
                if !wc.ok() {
                    Arc::<Self>::from(this).wc_failed(wc);
                }
            }
        }
    }

    fn handling(this: ArcBorrow<'_, Self>, on: bool) {
        // Completions of one CQ never run concurrently: this is the only task
        // that stores here.
        this.cb_task
            .store(if on { current_task() } else { 0 }, Release);
    }

    fn recv_reposted(this: ArcBorrow<'_, Self>, _slot: u32) {
        let mut inner = this.inner.lock();
        if inner.credits.reposted() && inner.state == ChanState::Up {
            // Nothing else went out to carry the grant: send it alone.
            if this.send_locked(&mut inner, Kind::Credits, 0, &[]).is_ok() {
                this.stats.add(Counter::CreditUpdates, 1);
            }
        }
    }

    fn send_done(this: ArcBorrow<'_, Self>, _slot: u32, wc: &Wc) {
        if !wc.ok() {
            Arc::<Self>::from(this).wc_failed(wc);
            return;
        }
        let mut inner = this.inner.lock();
        inner.last_ack = Instant::now();
        let state = inner.state;
        drop(inner);
        if let ChanState::Refusing(reason) = state {
            Arc::<Self>::from(this).fail_in_handler(reason);
            return;
        }
        // Send slots came free: what found none may go on.
        this.unblocked();
    }
}
