// SPDX-License-Identifier: GPL-2.0

//! Listeners: an address and port on which ferry accepts sessions.
//!
//! A connection request is checked before anything is allocated for it: its
//! private data must decode (see [`crate::wire::ConnectData`]) and fit the
//! session it names. A refusal goes back as CM reject data carrying the
//! [`Reason`], which the client reports instead of a bare "rejected".
//!
//! A request for a session id the host knows (a live server session, or
//! one closed recently) must prove the session's secret (see
//! [`crate::wire::JoinProof`]); one that does not is refused with
//! [`Reason::AuthFailed`] before it touches anything, counted and logged. A
//! new session starts with channel 0, whose hello reply hands the client a
//! fresh secret.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kernel::{
    new_mutex, new_work,
    prelude::*,
    sync::{aref::ARef, Arc, ArcBorrow, Mutex},
    workqueue::{impl_has_work, Work, WorkItem},
};

use crate::{
    channel::OWNER,
    cm::{CmId, ConnectRequest, Event, EventKind, Handler, Locked, SockAddr},
    keys::Psk,
    netns::Net,
    session::{self, Channel, Session},
    wire::{ConnectData, Reason, RejectData, Secret, SECRET_LEN},
};

/// Connection requests rdma_cm queues for a listener.
const BACKLOG: i32 = 128;

/// Most sessions waiting for their first hello, from one address and in all
/// (a connection takes a QP and its receive buffers until its hello is in
/// or its deadline passes, see `HELLO_DEADLINE_MS`).
pub(crate) const MAX_PENDING_PER_PEER: u32 = 8;
/// See [`MAX_PENDING_PER_PEER`].
pub(crate) const MAX_PENDING: u32 = 64;
/// Most sessions one listener keeps from one address, and in all.
pub(crate) const MAX_SESSIONS_PER_PEER: u32 = 256;
/// See [`MAX_SESSIONS_PER_PEER`].
pub(crate) const MAX_SESSIONS: u32 = 1024;

/// What a listener holds, for its admission limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Admission {
    /// Sessions waiting for their first hello, from the request's address.
    pub(crate) pending_peer: u32,
    /// And from anywhere.
    pub(crate) pending: u32,
    /// Sessions from the request's address.
    pub(crate) sessions_peer: u32,
    /// And from anywhere.
    pub(crate) sessions: u32,
}

impl Admission {
    /// Whether a new session may start: none of the limits reached.
    pub(crate) fn admits(&self) -> bool {
        self.pending_peer < MAX_PENDING_PER_PEER
            && self.pending < MAX_PENDING
            && self.sessions_peer < MAX_SESSIONS_PER_PEER
            && self.sessions < MAX_SESSIONS
    }
}

/// What a listener needs of the module around it, handed to it when it is
/// made (the module's state implements it).
pub(crate) trait Host: Send + Sync {
    /// The live server session `session_id` from `peer` in `net`, if there
    /// is one.
    fn server_session(&self, net: &Net, session_id: u64, peer: &SockAddr) -> Option<Arc<Session>>;
    /// The secret of session `session_id` from `peer`'s address in `net`,
    /// and the newest generation it had, if the host knows the session
    /// (live or closed recently).
    fn session_secret(&self, net: &Net, session_id: u64, peer: &SockAddr) -> Option<(Secret, u32)>;
    /// What listener `id` holds, from `peer`'s address and in all.
    fn admission(&self, id: u32, peer: &SockAddr) -> Admission;
    /// Queues listener `l`'s work item (which closes it) on the module's
    /// work queue.
    fn queue_listener(&self, l: Arc<Listener>);
}

/// A listening address and port.
#[pin_data]
pub(crate) struct Listener {
    /// Local handle (netlink `id`).
    pub(crate) id: u32,
    /// The address and port listened on.
    pub(crate) addr: SockAddr,
    /// The namespace of the listening id.
    pub(crate) net: ARef<Net>,
    /// `None` once the listener is closed, or its device went away.
    #[pin]
    cm: Mutex<Option<CmId<Listener>>>,
    /// The module around it, for the listener and for the sessions it makes.
    host: Arc<dyn Host>,
    sessions: Arc<dyn session::Host>,
    /// Requests refused because they did not prove a known session's secret.
    pub(crate) auth_refused: AtomicU64,
    /// New sessions refused for the admission limits.
    pub(crate) busy_refused: AtomicU64,
    /// The key every session accepted here must prove.
    pub(crate) psk: Option<Arc<Psk>>,
    /// Closes the listener when its device goes away (not in its own
    /// handler, which closing waits for); embedded, so never lost for want
    /// of memory.
    #[pin]
    work: Work<Listener>,
}

impl_has_work! {
    impl HasWork<Self> for Listener { self.work }
}

impl WorkItem for Listener {
    type Pointer = Arc<Listener>;

    fn run(this: Arc<Listener>) {
        this.close();
    }
}

impl Listener {
    /// Binds and listens on `addr` in `net`.
    pub(crate) fn new(
        id: u32,
        net: &Net,
        addr: SockAddr,
        host: Arc<dyn Host>,
        sessions: Arc<dyn session::Host>,
        psk: Option<Arc<Psk>>,
    ) -> Result<Arc<Self>> {
        let l = Arc::pin_init(
            pin_init!(Self {
                id,
                addr,
                net: net.into(),
                cm <- new_mutex!(None),
                host,
                sessions,
                auth_refused: AtomicU64::new(0),
                busy_refused: AtomicU64::new(0),
                psk,
                work <- new_work!("ferry::Listener::work"),
            }),
            GFP_KERNEL,
        )?;
        let cm = CmId::new(net, l.clone(), OWNER)?;
        if addr.is_v6() {
            // An IPv6 listener takes IPv6 only; IPv4 gets its own.
            cm.set_afonly(true)?;
        }
        cm.bind(&addr)?;
        cm.listen(BACKLOG)?;
        *l.cm.lock() = Some(cm);
        Ok(l)
    }

    /// Stops listening. Sessions accepted through the listener stay. May sleep;
    /// not from the listener's own handler.
    pub(crate) fn close(&self) {
        let cm = self.cm.lock().take();
        drop(cm);
    }

    /// Whether the listener still listens.
    pub(crate) fn is_listening(&self) -> bool {
        self.cm.lock().is_some()
    }

    fn refuse(req: ConnectRequest<'_>, reason: Reason) {
        let _ = req.reject(&RejectData { reason }.encode());
    }

    fn accept_request(&self, req: ConnectRequest<'_>, ev: &Event<'_>) {
        let data = match ConnectData::decode(ev.private_data()) {
            Ok(d) => d,
            Err(r) => {
                crate::ratelimit::pr_info_limited!(
                    "listener {}: refused a request from {}: {}\n",
                    self.id,
                    req.id().dst_addr(),
                    r.describe()
                );
                return Self::refuse(req, r);
            }
        };
        if self.sessions.shutting_down() {
            return Self::refuse(req, Reason::ShuttingDown);
        }
        // Version 1.2 made the session's secret part of the handshake: an
        // older client cannot join a session it opened, so it gets none.
        if data.minor < 2 {
            return Self::refuse(req, Reason::Version);
        }
        let peer = req.id().dst_addr();
        let existing = self.host.server_session(&self.net, data.session_id, &peer);
        let known = self.host.session_secret(&self.net, data.session_id, &peer);
        let proved = known.is_some_and(|(s, _)| data.proves(ev.private_data(), &s));
        let secret = match known {
            // A session whose server side is gone starts again on channel 0
            // alone, with a newer generation than it had: a replayed request
            // is not.
            Some((_, generation))
                if proved
                    && existing.is_none()
                    && (data.channel != 0
                        || (data.generation.wrapping_sub(generation) as i32) <= 0) =>
            {
                return Self::refuse(req, Reason::BadChannel);
            }
            Some((secret, _)) if proved => secret,
            Some(_) => {
                self.auth_refused.fetch_add(1, Relaxed);
                crate::ratelimit::pr_warn_limited!(
                    "listener {}: refused a connect from {} to session {:#x} (channel {}): {}\n",
                    self.id,
                    peer,
                    data.session_id,
                    data.channel,
                    if data.proof.is_some() {
                        c"wrong proof of the session's secret"
                    } else {
                        c"no proof of the session's secret"
                    }
                );
                return Self::refuse(req, Reason::AuthFailed);
            }
            // Unknown: a new session, which starts with channel 0.
            None if data.channel != 0 => return Self::refuse(req, Reason::BadChannel),
            None => {
                let mut s = [0u8; SECRET_LEN];
                crate::crypto::random_bytes(&mut s);
                s
            }
        };
        // A new session, or one replacing its stale self: the limits first,
        // before anything is allocated for it.
        let new = existing
            .as_ref()
            .is_none_or(|s| s.generation() != data.generation);
        if new && !self.host.admission(self.id, &peer).admits() {
            self.busy_refused.fetch_add(1, Relaxed);
            crate::ratelimit::pr_warn_limited!(
                "listener {}: refused a new session from {}: too many sessions, or too many waiting for their hello\n",
                self.id,
                peer
            );
            return Self::refuse(req, Reason::Busy);
        }
        // The session the channel joins, if it exists already.
        let joined = match existing {
            Some(s) if s.generation() == data.generation => {
                if let Err(r) = s.check_request(data.generation, data.channel, data.channels) {
                    return Self::refuse(req, r);
                }
                Some(s)
            }
            // A newer attempt from the same client: what is left of the old one
            // is half-open and must not block it.
            Some(s) if (data.generation.wrapping_sub(s.generation()) as i32) > 0 => {
                // Not here: closing waits for CM handlers.
                s.close_later(Reason::PeerClosed);
                None
            }
            Some(_) => return Self::refuse(req, Reason::BadChannel),
            None => None,
        };
        let session = match joined {
            Some(s) => s,
            // A new server session, of the secret found or drawn above.
            None => {
                // What the host cannot afford is refused before the session
                // is made (the channel checks again when it is built).
                let need = crate::params::Params::server(&data).channel_bytes();
                if let Err((_, available)) = crate::params::affordable(need) {
                    crate::ratelimit::pr_warn_limited!(
                        "listener {}: refused a new session from {}: its channel needs about {} MiB, and the host has {} MiB available\n",
                        self.id,
                        peer,
                        need >> 20,
                        available >> 20
                    );
                    return Self::refuse(req, Reason::NoResources);
                }
                let (sessions, psk) = (self.sessions.clone(), self.psk.clone());
                let made = Session::server(
                    sessions, &self.net, peer, &data, self.id, secret, proved, psk,
                );
                match made {
                    Ok(s) => s,
                    Err(_) => return Self::refuse(req, Reason::NoResources),
                }
            }
        };
        // The channel joins the session's list in `accept`, before its hello.
        if let Err(r) = Channel::accept(&session, &data, req) {
            session.channel_failed(data.channel, data.generation, r);
        }
    }
}

impl Handler for Listener {
    fn event(this: ArcBorrow<'_, Self>, _id: &Locked<'_>, ev: &Event<'_>) {
        if ev.kind() == EventKind::DeviceRemoval {
            // Bound to a device that is going away: rdma_cm waits until the id
            // is destroyed, which must not happen in this handler.
            pr_warn!(
                "listener {} on {}: RDMA device removed, no longer listening\n",
                this.id,
                this.addr
            );
            let this: Arc<Self> = this.into();
            this.host.clone().queue_listener(this);
        }
    }

    fn connect_request(this: ArcBorrow<'_, Self>, req: ConnectRequest<'_>, ev: &Event<'_>) {
        this.accept_request(req, ev);
    }
}
