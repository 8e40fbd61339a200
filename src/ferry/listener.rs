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
//!
//! A listener outlives its RDMA device: when the device goes away, rdma_cm
//! tears its id down, and the listener waits for its address, trying to
//! bind and listen again every [`RELISTEN_MS`] (from the transport's tick,
//! as nvmet-rdma's port repair work does) until the address is on a device
//! again. Its configuration (address, key, limits, counters) stays.

use core::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
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
    wire::{newer, ConnectData, Reason, RejectData, Secret, SECRET_LEN},
};

/// Connection requests rdma_cm queues for a listener.
const BACKLOG: i32 = 128;

/// How often a listener whose device went away tries to listen again.
pub(crate) const RELISTEN_MS: u32 = 1000;

/// Most sessions waiting for their first hello, from one address and in all,
/// by default (a connection takes a QP and its receive buffers until its
/// hello is in or its deadline passes, see `HELLO_DEADLINE_MS`).
pub(crate) const MAX_PENDING_PER_PEER: u32 = 8;
/// See [`MAX_PENDING_PER_PEER`].
pub(crate) const MAX_PENDING: u32 = 64;
/// Most sessions one listener keeps from one address, and in all, by
/// default.
pub(crate) const MAX_SESSIONS_PER_PEER: u32 = 256;
/// See [`MAX_SESSIONS_PER_PEER`].
pub(crate) const MAX_SESSIONS: u32 = 1024;

/// A listener's admission limits (`listener add`'s `max-*` attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Most open sessions, from all addresses.
    pub(crate) sessions: u32,
    /// Most open sessions from one address.
    pub(crate) sessions_per_peer: u32,
    /// Most sessions waiting for their first hello, from all addresses.
    pub(crate) pending: u32,
    /// Most sessions waiting for their first hello from one address.
    pub(crate) pending_per_peer: u32,
    /// Most channels of a session (1 to [`crate::wire::MAX_CHANNELS`]).
    pub(crate) channels: u16,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            sessions: MAX_SESSIONS,
            sessions_per_peer: MAX_SESSIONS_PER_PEER,
            pending: MAX_PENDING,
            pending_per_peer: MAX_PENDING_PER_PEER,
            channels: crate::wire::MAX_CHANNELS,
        }
    }
}

/// What becomes of a connection request, from what the host knows of the
/// session it names (see [`judge`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A session the host does not know: a new one, with a fresh secret.
    New,
    /// A known session whose server side is gone, started again by its
    /// client (channel 0, a newer generation than it had).
    Restart,
    /// A channel of the live session's current attempt.
    Join,
    /// A newer attempt of the live session's client: the old one goes.
    Replace,
    /// Refused: the session's secret is not proved.
    Forged,
    /// Refused: the secret is proved, but the request is no newer than the
    /// session's own attempt (a replayed request, or a late one).
    Stale,
    /// Refused: a channel other than 0 of a session the host does not know.
    NotFirst,
    /// Refused: a live session whose secret the host no longer finds (the
    /// request raced the session's end); nothing was proved. The client
    /// tries again.
    Racing,
}

/// Judges a request for channel `channel` of attempt `generation`: `known`
/// is the newest generation the host had for the session and whether the
/// request proved its secret, if the host knows the session; `live` is the
/// generation of its live server session, if there is one.
pub(crate) fn judge(
    channel: u16,
    generation: u32,
    known: Option<(u32, bool)>,
    live: Option<u32>,
) -> Verdict {
    match (known, live) {
        (Some((_, false)), _) => Verdict::Forged,
        (Some((had, true)), None) if channel == 0 && newer(generation, had) => Verdict::Restart,
        (Some(_), None) => Verdict::Stale,
        (Some(_), Some(g)) if g == generation => Verdict::Join,
        (Some(_), Some(g)) if newer(generation, g) => Verdict::Replace,
        (Some(_), Some(_)) => Verdict::Stale,
        // A live session has its record from before it was listed; this is
        // a request racing its end.
        (None, Some(_)) => Verdict::Racing,
        (None, None) if channel != 0 => Verdict::NotFirst,
        (None, None) => Verdict::New,
    }
}

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
    /// Whether a new session may start: none of `limits` reached. One that
    /// replaces a live session of its client that this listener counts
    /// (`replaced`: whether that one still waits for its first hello; it is
    /// closed once this one is admitted) takes that one's place.
    pub(crate) fn admits(&self, limits: &Limits, replaced: Option<bool>) -> bool {
        let (old, old_pending) = replaced.map_or((0, 0), |p| (1, u32::from(p)));
        self.pending_peer.saturating_sub(old_pending) < limits.pending_per_peer
            && self.pending.saturating_sub(old_pending) < limits.pending
            && self.sessions_peer.saturating_sub(old) < limits.sessions_per_peer
            && self.sessions.saturating_sub(old) < limits.sessions
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
    /// What listener `id` holds, from `peer`'s address and in all; an error
    /// if it cannot be counted (out of memory).
    fn admission(&self, id: u32, peer: &SockAddr) -> Result<Admission>;
    /// Queues listener `l`'s work item (which lets its device's id go) on
    /// the module's work queue.
    fn queue_listener(&self, l: Arc<Listener>);
    /// Listener `l` started or stopped listening.
    fn listener_changed(&self, l: &Listener);
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
    /// Deleted (or the module unloads): it never listens again. Set under
    /// `cm`'s lock.
    closed: AtomicBool,
    /// When it next tries to listen, while it waits for its address
    /// (jiffies).
    next_try: AtomicU64,
    /// The module around it, for the listener and for the sessions it makes.
    host: Arc<dyn Host>,
    sessions: Arc<dyn session::Host>,
    /// Requests refused because they did not prove a known session's secret.
    pub(crate) auth_refused: AtomicU64,
    /// Requests that proved the secret but were no newer than the
    /// session's attempt, or named a channel it has (replayed, or late).
    pub(crate) stale_refused: AtomicU64,
    /// New sessions refused for the admission limits.
    pub(crate) busy_refused: AtomicU64,
    /// The key every session accepted here must prove.
    pub(crate) psk: Option<Arc<Psk>>,
    /// Its admission limits.
    pub(crate) limits: Limits,
    /// Lets the id go when its device goes away (not in its own handler,
    /// which destroying the id waits for); embedded, so never lost for want
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
        let cm = this.cm.lock().take();
        if cm.is_some() {
            drop(cm);
            this.next_try.store(crate::work::jiffies_64(), Relaxed);
            pr_warn!(
                "listener {} on {}: waiting for its address to be on an RDMA device again\n",
                this.id,
                this.addr
            );
            this.host.listener_changed(&this);
        }
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
        limits: Limits,
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
                stale_refused: AtomicU64::new(0),
                busy_refused: AtomicU64::new(0),
                psk,
                limits,
                closed: AtomicBool::new(false),
                next_try: AtomicU64::new(0),
                work <- new_work!("ferry::Listener::work"),
            }),
            GFP_KERNEL,
        )?;
        let cm = l.bind_listen()?;
        *l.cm.lock() = Some(cm);
        Ok(l)
    }

    /// A new id of the listener's, bound to its address and listening. May
    /// sleep.
    fn bind_listen(self: &Arc<Self>) -> Result<CmId<Listener>> {
        let cm = CmId::new(&self.net, self.clone(), OWNER)?;
        if self.addr.is_v6() {
            // An IPv6 listener takes IPv6 only; IPv4 gets its own.
            cm.set_afonly(true)?;
        }
        cm.bind(&self.addr)?;
        cm.listen(BACKLOG)?;
        Ok(cm)
    }

    /// Stops listening for good (deleted, or the module unloads). Sessions
    /// accepted through the listener stay. May sleep; not from the
    /// listener's own handler.
    pub(crate) fn close(&self) {
        let cm = {
            let mut cm = self.cm.lock();
            self.closed.store(true, Release);
            cm.take()
        };
        drop(cm);
    }

    /// Whether the listener listens (else its device went away, and it
    /// waits for its address).
    pub(crate) fn is_listening(&self) -> bool {
        self.cm.lock().is_some()
    }

    /// Whether it waits for its address: its device went away, and it is
    /// not closed.
    pub(crate) fn is_waiting(&self) -> bool {
        !self.closed.load(Acquire) && !self.is_listening()
    }

    /// While it waits for its address, tries to listen again, at most every
    /// [`RELISTEN_MS`]: whether it listens now. From the transport's tick;
    /// may sleep.
    pub(crate) fn try_listen(self: &Arc<Self>) -> bool {
        if !self.is_waiting() {
            return !self.closed.load(Acquire);
        }
        let now = crate::work::jiffies_64();
        if now < self.next_try.load(Relaxed) {
            return false;
        }
        // CAST: a second of jiffies fits any width.
        let next = now + kernel::time::msecs_to_jiffies(RELISTEN_MS) as u64;
        self.next_try.store(next, Relaxed);
        // (Not on a device yet: the bind fails, quietly; it is tried again.)
        let Ok(cm) = self.bind_listen() else {
            return false;
        };
        let mut slot = self.cm.lock();
        if self.closed.load(Acquire) || slot.is_some() {
            // Deleted meanwhile: the new id goes (out of the lock).
            drop(slot);
            drop(cm);
            return false;
        }
        *slot = Some(cm);
        drop(slot);
        pr_info!("listener {} on {}: listening again\n", self.id, self.addr);
        self.host.listener_changed(self);
        true
    }

    fn refuse(req: ConnectRequest<'_>, reason: Reason) {
        let _ = req.reject(&RejectData { reason }.encode());
    }

    fn accept_request(&self, req: ConnectRequest<'_>, ev: &Event<'_>) {
        // Deleted meanwhile (its id goes once this handler returns).
        if self.closed.load(Acquire) {
            return Self::refuse(req, Reason::NoListener);
        }
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
        let peer = req.id().dst_addr();
        if self.sessions.shutting_down() {
            crate::ratelimit::pr_info_limited!(
                "listener {}: refused a request from {}: ferry is being unloaded\n",
                self.id,
                peer
            );
            return Self::refuse(req, Reason::ShuttingDown);
        }
        // Version 1.2 made the session's secret part of the handshake: an
        // older client cannot join a session it opened, so it gets none.
        if data.minor < 2 {
            crate::ratelimit::pr_info_limited!(
                "listener {}: refused a request from {}: protocol 1.{} (1.2 or later needed)\n",
                self.id,
                peer,
                data.minor
            );
            return Self::refuse(req, Reason::Version);
        }
        let existing = self.host.server_session(&self.net, data.session_id, &peer);
        let known = self.host.session_secret(&self.net, data.session_id, &peer);
        let proved = known.is_some_and(|(s, _)| data.proves(ev.private_data(), &s));
        let verdict = judge(
            data.channel,
            data.generation,
            known.map(|(_, g)| (g, proved)),
            existing.as_ref().map(|s| s.generation()),
        );
        let secret = match (verdict, known) {
            (Verdict::Forged, _) => {
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
            (Verdict::Stale, _) => {
                self.stale_refused.fetch_add(1, Relaxed);
                crate::ratelimit::pr_warn_limited!(
                    "listener {}: refused a connect from {} to session {:#x} (channel {}, attempt {}): not newer than the session's (replayed, or late)\n",
                    self.id,
                    peer,
                    data.session_id,
                    data.channel,
                    data.generation
                );
                return Self::refuse(req, Reason::BadChannel);
            }
            (Verdict::Racing, _) => {
                crate::ratelimit::pr_info_limited!(
                    "listener {}: refused a connect from {} to session {:#x}: it is closing\n",
                    self.id,
                    peer,
                    data.session_id
                );
                return Self::refuse(req, Reason::BadChannel);
            }
            (Verdict::NotFirst, _) => {
                crate::ratelimit::pr_info_limited!(
                    "listener {}: refused a connect from {} to channel {} of session {:#x}, which it does not know\n",
                    self.id,
                    peer,
                    data.channel,
                    data.session_id
                );
                return Self::refuse(req, Reason::BadChannel);
            }
            (Verdict::New, _) => {
                let mut s = [0u8; SECRET_LEN];
                crate::crypto::random_bytes(&mut s);
                s
            }
            (_, Some((secret, _))) => secret,
            // `judge` gives the others only for a known session.
            (_, None) => return Self::refuse(req, Reason::BadChannel),
        };
        // A new session, or one replacing its stale self: the limits first,
        // before anything is allocated for it.
        if verdict != Verdict::Join && data.channels > self.limits.channels {
            self.busy_refused.fetch_add(1, Relaxed);
            crate::ratelimit::pr_warn_limited!(
                "listener {}: refused a new session from {}: {} channels asked, {} at most here\n",
                self.id,
                peer,
                data.channels,
                self.limits.channels
            );
            return Self::refuse(req, Reason::Busy);
        }
        // The session replaced, if this listener counts it.
        let replaced = match (verdict, existing.as_ref()) {
            (Verdict::Replace, Some(s)) if s.listener == Some(self.id) => {
                Some(s.awaits_first_hello())
            }
            _ => None,
        };
        if verdict != Verdict::Join
            && !self
                .host
                .admission(self.id, &peer)
                // Not counted (out of memory): not admitted.
                .is_ok_and(|a| a.admits(&self.limits, replaced))
        {
            self.busy_refused.fetch_add(1, Relaxed);
            crate::ratelimit::pr_warn_limited!(
                "listener {}: refused a new session from {}: too many sessions, or too many waiting for their hello\n",
                self.id,
                peer
            );
            return Self::refuse(req, Reason::Busy);
        }
        // The session the channel joins, if it exists already.
        let joined = match (verdict, existing) {
            (Verdict::Join, Some(s)) => {
                if let Err(r) = s.check_request(data.generation, data.channel, data.channels) {
                    // The attempt is the session's: a channel it has (a
                    // replay of a live channel's request, counted), or a
                    // count it was not opened with (a broken client).
                    if r == Reason::DuplicateChannel {
                        self.stale_refused.fetch_add(1, Relaxed);
                    }
                    crate::ratelimit::pr_warn_limited!(
                        "listener {}: refused a connect from {} to session {:#x} (channel {} of {}): {}\n",
                        self.id,
                        peer,
                        data.session_id,
                        data.channel,
                        data.channels,
                        r.describe()
                    );
                    return Self::refuse(req, r);
                }
                Some(s)
            }
            // A newer attempt from the same client: what is left of the old one
            // is half-open and must not block it.
            (Verdict::Replace, Some(s)) => {
                // Not here: closing waits for CM handlers.
                s.close_later(Reason::PeerClosed);
                None
            }
            _ => None,
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
                    // The store of secrets is full, for this address or in
                    // all, and no other address gave a record up.
                    Err(e) if e == EDQUOT || e == ENOSPC => {
                        self.busy_refused.fetch_add(1, Relaxed);
                        let whose = if e == EDQUOT {
                            c"for its address"
                        } else {
                            c"in all"
                        };
                        crate::ratelimit::pr_warn_limited!(
                            "listener {}: refused a new session from {}: too many sessions' secrets kept {}\n",
                            self.id,
                            peer,
                            whose
                        );
                        return Self::refuse(req, Reason::Busy);
                    }
                    Err(e) => {
                        crate::ratelimit::pr_warn_limited!(
                            "listener {}: refused a new session from {}: error {}\n",
                            self.id,
                            peer,
                            e.to_errno()
                        );
                        return Self::refuse(req, Reason::NoResources);
                    }
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
                "listener {} on {}: RDMA device removed, not listening until its address is back\n",
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

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_listener_judge)]
mod tests {
    use super::{judge, Admission, Limits, Verdict};

    #[test]
    fn unknown_sessions_start_on_channel_0() {
        assert_eq!(judge(0, 1, None, None), Verdict::New);
        assert_eq!(judge(1, 1, None, None), Verdict::NotFirst);
    }

    #[test]
    fn a_known_session_needs_its_secret() {
        // Whatever else the request says.
        assert_eq!(judge(0, 9, Some((1, false)), None), Verdict::Forged);
        assert_eq!(judge(1, 1, Some((1, false)), Some(1)), Verdict::Forged);
        assert_eq!(judge(0, 2, Some((1, false)), Some(1)), Verdict::Forged);
    }

    #[test]
    fn a_replayed_request_starts_nothing() {
        // The server side is gone: only channel 0 of a newer attempt.
        assert_eq!(judge(0, 2, Some((1, true)), None), Verdict::Restart);
        assert_eq!(judge(0, 1, Some((1, true)), None), Verdict::Stale);
        assert_eq!(judge(1, 2, Some((1, true)), None), Verdict::Stale);
        // Live: an older attempt's request is stale; the same attempt's
        // joins (the session refuses a channel it has); a newer replaces.
        assert_eq!(judge(0, 1, Some((2, true)), Some(2)), Verdict::Stale);
        assert_eq!(judge(1, 2, Some((2, true)), Some(2)), Verdict::Join);
        assert_eq!(judge(0, 3, Some((2, true)), Some(2)), Verdict::Replace);
        // Generations wrap.
        assert_eq!(judge(0, 0, Some((u32::MAX, true)), None), Verdict::Restart);
        assert_eq!(judge(0, u32::MAX, Some((0, true)), None), Verdict::Stale);
    }

    #[test]
    fn a_replacing_session_takes_its_predecessors_place() {
        let limits = Limits {
            sessions_per_peer: 2,
            pending_per_peer: 1,
            ..Limits::default()
        };
        let full = Admission {
            sessions_peer: 2,
            sessions: 2,
            ..Admission::default()
        };
        assert!(!full.admits(&limits, None));
        assert!(full.admits(&limits, Some(false)));
        // Another's wait for its hello counts as before.
        let waiting = Admission {
            pending_peer: 1,
            ..full
        };
        assert!(!waiting.admits(&limits, Some(false)));
        // The predecessor's own wait goes with it: a client whose first
        // attempt is stuck before its hello may try again.
        assert!(waiting.admits(&limits, Some(true)));
    }

    #[test]
    fn a_live_session_without_its_record_is_a_race() {
        assert_eq!(judge(0, 1, None, Some(1)), Verdict::Racing);
    }
}
