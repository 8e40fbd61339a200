// SPDX-License-Identifier: GPL-2.0

//! The transport's shared state: sessions, listeners, services, the work
//! queue every teardown runs on, and the tick that drives timers.
//!
//! The tick runs every [`TICK_MS`] on ferry's own work queue and calls each
//! session's [`Session::tick`]: heartbeats, dead-peer and connect timeouts,
//! reconnect backoff, give-up. One periodic work item instead of timers per
//! session keeps teardown simple: nothing is pending per session, and at
//! unload the tick is stopped once, then the queue is drained and destroyed.

use core::sync::atomic::{
    AtomicBool, AtomicU32,
    Ordering::{Acquire, Relaxed, Release},
};
use kernel::{
    new_mutex, new_spinlock_irq,
    prelude::*,
    sync::{Arc, Mutex, SpinLockIrq},
    workqueue::{HasWork, WorkItem},
};

use super::{device::Ferry, secrets::Secrets};
use crate::{
    channel::ChannelWork,
    cm::SockAddr,
    keys::{Keys, Psk},
    listener::{self, Listener},
    netns::Net,
    rdma::Pd,
    service::{Service, ServiceOps, Services},
    session::{self, Channel, Session},
    wire::{Reason, Secret, ServiceName},
    work::{OwnedQueue, Ticker},
};

/// Period of the transport's tick, in milliseconds.
pub(crate) const TICK_MS: u32 = 100;

/// The transport's part of the module state (a field of [`Ferry`]).
#[pin_data]
pub(crate) struct Transport {
    #[pin]
    sessions: Mutex<KVec<Arc<Session>>>,
    #[pin]
    listeners: Mutex<KVec<Arc<Listener>>>,
    /// The server sessions' secrets, kept a while past their sessions.
    #[pin]
    secrets: Mutex<Secrets>,
    /// The pre-shared keys, by namespace and name.
    #[pin]
    keys: Mutex<Keys<()>>,
    /// Taken by completions that queue work, which may run in softirq.
    #[pin]
    queue: SpinLockIrq<Option<OwnedQueue>>,
    ticker: Arc<Ticker>,
    #[pin]
    services: Services,
    next_session: AtomicU32,
    next_listener: AtomicU32,
    shutting_down: AtomicBool,
    /// A listener may wait for its address: the tick tries them.
    listeners_waiting: AtomicBool,
}

impl Transport {
    /// The transport of a module being loaded; [`Ferry::start`] starts it.
    pub(crate) fn new() -> Result<impl PinInit<Self, Error>> {
        let queue = OwnedQueue::new(c"ferry")?;
        let ticker = Ticker::new(|t| {
            let ferry = Ferry::get().ok_or(ENODEV)?;
            ferry.tick();
            ferry.schedule_tick(t)
        })?;
        Ok(try_pin_init!(Self {
            sessions <- new_mutex!(KVec::new()),
            listeners <- new_mutex!(KVec::new()),
            secrets <- new_mutex!(Secrets::new(
                super::secrets::IDLE_TTL_MS,
                (super::secrets::MAX_PER_PEER, super::secrets::MAX_RECORDS)
            )),
            keys <- new_mutex!(Keys::default()),
            queue <- new_spinlock_irq!(Some(queue)),
            ticker,
            services <- Services::new(),
            next_session: AtomicU32::new(1),
            next_listener: AtomicU32::new(1),
            shutting_down: AtomicBool::new(false),
            listeners_waiting: AtomicBool::new(false),
        }? Error))
    }
}

impl Ferry {
    /// Starts the tick; called once the module state is published.
    pub(crate) fn start(&self) -> Result {
        self.schedule_tick(&self.transport.ticker)
    }

    fn schedule_tick(&self, ticker: &Arc<Ticker>) -> Result {
        let q = self.transport.queue.lock();
        ticker.schedule(q.as_ref().ok_or(ESHUTDOWN)?, TICK_MS)
    }

    fn tick(&self) {
        if self.transport.listeners_waiting.swap(false, Acquire) {
            self.relisten();
        }
        let Ok(sessions) = self.sessions() else {
            return;
        };
        for s in sessions.iter() {
            s.tick();
        }
    }

    /// Tries the listeners that wait for their address (each at most every
    /// [`listener::RELISTEN_MS`]); those still waiting are tried again.
    fn relisten(&self) {
        let Ok(listeners) = self.listeners() else {
            self.transport.listeners_waiting.store(true, Release);
            return;
        };
        for l in listeners.iter() {
            if l.is_waiting() && !l.try_listen() {
                self.transport.listeners_waiting.store(true, Release);
            }
        }
    }

    /// Queues work item `w` (a channel's idle poll or growth, a session's
    /// failure or close, a listener's close), embedded in its object, on ferry's work queue: nothing happens if it
    /// is queued already, or the module is unloading. Allocates nothing.
    pub(crate) fn queue_work<T, const ID: u64>(&self, w: Arc<T>)
    where
        T: WorkItem<ID, Pointer = Arc<T>> + HasWork<T, ID> + Send + Sync + 'static,
    {
        let q = self.transport.queue.lock();
        if let Some(q) = q.as_ref() {
            let _ = q.queue().enqueue::<Arc<T>, ID>(w);
        }
    }

    /// Whether the module is unloading.
    pub(crate) fn shutting_down(&self) -> bool {
        self.transport.shutting_down.load(Acquire)
    }

    /// The service called `name`, if a module registered it.
    pub(crate) fn service(&self, name: &ServiceName) -> Option<Arc<Service>> {
        self.transport.services.find(name)
    }

    /// Registers service `name` with `ops`: `EEXIST` if the name is taken,
    /// `ESHUTDOWN` while ferry unloads.
    pub(crate) fn register_service(
        &self,
        name: ServiceName,
        ops: KBox<dyn ServiceOps>,
    ) -> Result<Arc<Service>> {
        let svc = Service::new(name, ops)?;
        self.add_service(svc.clone())?;
        Ok(svc)
    }

    /// Unregisters `svc`: refuses new sessions, closes its sessions and waits
    /// until none of their callbacks runs. May sleep.
    pub(crate) fn unregister_service(&self, svc: &Arc<Service>) {
        svc.shut();
        self.remove_service(svc);
        // A session leaves the list when it is closed, before its consumer
        // hears `gone`; `close` returns once it has.
        while let Some(s) = self.find_session(|s| s.belongs_to(svc.key())) {
            s.close(Reason::LocalClose);
        }
    }

    /// Asks the service called `name` to take server session `s`:
    /// [`Reason::UnknownService`] if there is none.
    pub(crate) fn attach(&self, s: &Arc<Session>, name: &ServiceName) -> Result<(), Reason> {
        self.service(name).ok_or(Reason::UnknownService)?.attach(s)
    }

    /// A snapshot of the services, by name.
    pub(crate) fn services(&self) -> Result<KVec<Arc<Service>>> {
        self.transport.services.all()
    }

    /// Registers a service; `EEXIST` if the name is taken.
    pub(crate) fn add_service(&self, svc: Arc<Service>) -> Result {
        if self.shutting_down() {
            return Err(ESHUTDOWN);
        }
        self.transport.services.add(svc)
    }

    /// Unregisters a service.
    pub(crate) fn remove_service(&self, svc: &Arc<Service>) {
        self.transport.services.remove(svc);
    }

    /// A fresh session handle.
    pub(crate) fn next_session_id(&self) -> u32 {
        self.transport.next_session.fetch_add(1, Relaxed)
    }

    /// Registers a session.
    pub(crate) fn add_session(&self, s: Arc<Session>) -> Result {
        if self.shutting_down() {
            return Err(ESHUTDOWN);
        }
        if let Some(secret) = s.server_secret() {
            let net = s.net.as_raw() as usize;
            let generation = s.generation();
            self.transport
                .secrets
                .lock()
                .claim(net, s.session_id, &s.peer, secret, generation)?;
        }
        if let Err(e) = self.transport.sessions.lock().push(s.clone(), GFP_KERNEL) {
            self.release_secret(&s);
            return Err(e.into());
        }
        Ok(())
    }

    /// Forgets a closed session.
    pub(crate) fn remove_session(&self, s: &Session) {
        let mut list = self.transport.sessions.lock();
        let before = list.len();
        list.retain(|x| !core::ptr::eq(&**x, s));
        let removed = list.len() != before;
        drop(list);
        if removed {
            self.release_secret(s);
        }
    }

    fn release_secret(&self, s: &Session) {
        if s.server_secret().is_some() {
            self.transport.secrets.lock().release(
                s.net.as_raw() as usize,
                s.session_id,
                &s.peer,
                s.confirmed.load(Relaxed),
            );
        }
    }

    /// Adds pre-shared key `key` in namespace `net`.
    pub(crate) fn add_key(&self, net: &Net, key: Arc<Psk>) -> Result {
        self.transport
            .keys
            .lock()
            .add(net.as_raw() as usize, (), key)
    }

    /// Deletes key `name` of namespace `net`; what uses it keeps it.
    pub(crate) fn del_key(&self, net: &Net, name: &ServiceName) -> Result {
        self.transport
            .keys
            .lock()
            .remove(net.as_raw() as usize, name)
    }

    /// Namespace `net` is dismantled: its keys and its sessions' secrets
    /// go (they are known by the namespace's address, which a new one may
    /// reuse). Its listeners and sessions hold it, so none is left.
    pub(crate) fn net_gone(&self, net: &Net) {
        let at = net.as_raw() as usize;
        let keys = self.transport.keys.lock().remove_net(at);
        let secrets = self.transport.secrets.lock().forget_net(at);
        if keys + secrets != 0 {
            pr_info!(
                "a network namespace went: {} keys and {} session secrets of it dropped\n",
                keys,
                secrets
            );
        }
    }

    /// Key `name` of namespace `net`.
    pub(crate) fn key(&self, net: &Net, name: &ServiceName) -> Option<Arc<Psk>> {
        self.transport.keys.lock().find(net.as_raw() as usize, name)
    }

    /// The names of namespace `net`'s keys.
    pub(crate) fn key_names(&self, net: &Net) -> Result<KVec<ServiceName>> {
        self.transport.keys.lock().names(net.as_raw() as usize)
    }

    /// The secret of server session `session_id` from `peer`'s address in
    /// `net`, live or recently closed, and the newest generation it had.
    pub(crate) fn session_secret(
        &self,
        net: &Net,
        session_id: u64,
        peer: &SockAddr,
    ) -> Option<(Secret, u32)> {
        self.transport
            .secrets
            .lock()
            .find(net.as_raw() as usize, session_id, peer)
    }

    /// The session with handle `id`.
    pub(crate) fn session(&self, id: u32) -> Option<Arc<Session>> {
        self.find_session(|s| s.id == id)
    }

    /// The first session `pred` holds for.
    pub(crate) fn find_session(&self, pred: impl Fn(&Session) -> bool) -> Option<Arc<Session>> {
        self.transport
            .sessions
            .lock()
            .iter()
            .find(|s| pred(s))
            .cloned()
    }

    /// The live server session with handshake id `session_id` from `peer`'s
    /// address in `net` (not one that is closing: a replaced session stays
    /// listed until its teardown ends).
    pub(crate) fn server_session(
        &self,
        net: &Net,
        session_id: u64,
        peer: &SockAddr,
    ) -> Option<Arc<Session>> {
        self.find_session(|s| {
            s.role == crate::state::Role::Server
                && s.session_id == session_id
                && s.peer.ip() == peer.ip()
                && s.net.as_raw() == net.as_raw()
                && !s.is_closing()
        })
    }

    /// A snapshot of the sessions, by handle.
    pub(crate) fn sessions(&self) -> Result<KVec<Arc<Session>>> {
        let guard = self.transport.sessions.lock();
        let mut v = KVec::with_capacity(guard.len(), GFP_KERNEL)?;
        for s in guard.iter() {
            v.push(s.clone(), GFP_KERNEL)?;
        }
        drop(guard);
        v.sort_unstable_by_key(|s| s.id);
        Ok(v)
    }

    /// Adds a listener on `addr` in `net`. `EADDRINUSE` if ferry listens there
    /// already.
    pub(crate) fn add_listener(
        self: &Arc<Self>,
        net: &Net,
        addr: SockAddr,
        psk: Option<Arc<Psk>>,
        limits: crate::listener::Limits,
    ) -> Result<Arc<Listener>> {
        if self.shutting_down() {
            return Err(ESHUTDOWN);
        }
        let dup = self
            .transport
            .listeners
            .lock()
            .iter()
            .any(|l| l.addr == addr && l.net.as_raw() == net.as_raw());
        if dup {
            return Err(EADDRINUSE);
        }
        let id = self.transport.next_listener.fetch_add(1, Relaxed);
        let l = Listener::new(id, net, addr, self.clone(), self.clone(), psk, limits)?;
        let mut list = self.transport.listeners.lock();
        if let Err(e) = list.push(l.clone(), GFP_KERNEL) {
            drop(list);
            l.close();
            return Err(e.into());
        }
        Ok(l)
    }

    /// Removes listener `id` if `net` may see it.
    pub(crate) fn del_listener(&self, net: &Net, id: u32) -> Result {
        let mut list = self.transport.listeners.lock();
        let pos = list
            .iter()
            .position(|l| l.id == id && l.net.as_raw() == net.as_raw())
            .ok_or(ENOENT)?;
        let l = list.remove(pos)?;
        drop(list);
        l.close();
        Ok(())
    }

    /// A snapshot of the listeners, by handle.
    pub(crate) fn listeners(&self) -> Result<KVec<Arc<Listener>>> {
        let guard = self.transport.listeners.lock();
        let mut v = KVec::with_capacity(guard.len(), GFP_KERNEL)?;
        for l in guard.iter() {
            v.push(l.clone(), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// What listener `id` holds for `peer`'s address and in all: sessions
    /// waiting for their first hello, and sessions.
    pub(crate) fn admission(&self, id: u32, peer: &SockAddr) -> Result<listener::Admission> {
        let mut a = listener::Admission::default();
        // A snapshot: the sessions' own locks are not taken under the list's.
        let sessions = self.sessions()?;
        for s in sessions.iter().filter(|s| s.listener == Some(id)) {
            let mine = s.peer.ip() == peer.ip();
            let pending = s.awaits_first_hello();
            a.sessions += 1;
            a.sessions_peer += u32::from(mine);
            a.pending += u32::from(pending);
            a.pending_peer += u32::from(mine && pending);
        }
        Ok(a)
    }

    /// Open sessions accepted through listener `id`.
    pub(crate) fn listener_sessions(&self, id: u32) -> u32 {
        let n = self
            .transport
            .sessions
            .lock()
            .iter()
            .filter(|s| s.listener == Some(id))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Tears down every channel on RDMA device `index`, before it goes.
    pub(crate) fn device_removed(&self, index: u32) {
        if let Ok(sessions) = self.sessions() {
            for s in sessions.iter() {
                s.device_removed(index);
            }
        }
    }

    /// Module unload: refuses new work, stops the tick, closes every listener
    /// and session (their peers see a disconnect), then drains the work queue.
    pub(crate) fn shutdown(&self) {
        let t = &self.transport;
        t.shutting_down.store(true, Release);
        t.ticker.stop();
        let listeners = core::mem::take(&mut *t.listeners.lock());
        for l in listeners.iter() {
            l.close();
        }
        // Sessions remove themselves from the list as they close. The list's
        // lock must not be held meanwhile: CM handlers take it.
        loop {
            let first = t.sessions.lock().first().cloned();
            let Some(s) = first else { break };
            s.close(Reason::LocalClose);
            self.remove_session(&s);
        }
        // (Destroyed out of the lock: that sleeps.)
        let queue = t.queue.lock().take();
        drop(queue);
    }
}

/// What sessions (and their channels) need of the module.
impl session::Host for Ferry {
    fn next_session_id(&self) -> u32 {
        Ferry::next_session_id(self)
    }

    fn add_session(&self, s: Arc<Session>) -> Result {
        Ferry::add_session(self, s)
    }

    fn remove_session(&self, s: &Session) {
        Ferry::remove_session(self, s)
    }

    fn session_changed(&self, s: &Session) {
        Ferry::session_changed(self, s)
    }

    fn attach(&self, s: &Arc<Session>, name: &ServiceName) -> Result<(), Reason> {
        Ferry::attach(self, s, name)
    }

    fn shutting_down(&self) -> bool {
        Ferry::shutting_down(self)
    }

    fn queue_session(&self, s: Arc<Session>) {
        self.queue_work::<_, 0>(s);
    }

    fn queue_channel(&self, c: Arc<Channel>, w: ChannelWork) {
        match w {
            ChannelWork::IdlePoll => self.queue_work::<_, 0>(c),
            ChannelWork::Grow => self.queue_work::<_, 1>(c),
            ChannelWork::Deferred => self.queue_work::<_, 2>(c),
        }
    }

    fn pd_of(&self, index: u32) -> Option<Arc<Pd>> {
        Ferry::pd_of(self, index)
    }
}

/// What listeners need of the module.
impl listener::Host for Ferry {
    fn server_session(&self, net: &Net, session_id: u64, peer: &SockAddr) -> Option<Arc<Session>> {
        Ferry::server_session(self, net, session_id, peer)
    }

    fn session_secret(&self, net: &Net, session_id: u64, peer: &SockAddr) -> Option<(Secret, u32)> {
        Ferry::session_secret(self, net, session_id, peer)
    }

    fn admission(&self, id: u32, peer: &SockAddr) -> Result<listener::Admission> {
        Ferry::admission(self, id, peer)
    }

    fn queue_listener(&self, l: Arc<Listener>) {
        self.queue_work::<_, 0>(l);
    }

    fn listener_changed(&self, l: &Listener) {
        if l.is_waiting() {
            self.transport.listeners_waiting.store(true, Release);
        }
        Ferry::listener_changed(self, l);
    }
}
