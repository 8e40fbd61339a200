// SPDX-License-Identifier: GPL-2.0

//! Services and consumers: how other kernel modules plug into sessions.
//!
//! A [`Service`] is a name a module registers with [`ServiceOps`]; a client's
//! first hello naming it asks the service to [`ServiceOps::accept`] the new
//! session, which answers with the session's [`Consumer`]. A module that opens
//! a client session gives its [`Consumer`] directly. The exported C API
//! (`include/ferry/ferry.h`) implements both traits over a `struct ferry_ops`.
//!
//! The consumer's callbacks and their contexts are those the C header states:
//! [`Consumer::up`], [`Consumer::message`] and [`Consumer::writable`] run on
//! the completion work of a channel; [`Consumer::down`] and [`Consumer::gone`]
//! on ferry's work queue or in the thread that closes the session.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

use crate::{
    channel::Incoming,
    device::Ferry,
    session::Session,
    wire::{Reason, ServiceName},
};

/// What the user of a session is told; see `struct ferry_ops`.
pub(crate) trait Consumer: Send + Sync {
    /// The session is connected (again).
    fn up(&self, s: &Arc<Session>);
    /// The session lost its connection and reconnects.
    fn down(&self, s: &Arc<Session>, reason: Reason);
    /// A message arrived; `data` is only valid during the call.
    fn message(&self, s: &Arc<Session>, data: &[u8]);
    /// Channel `qid` has room again after a refused send or submit.
    fn writable(&self, s: &Arc<Session>, qid: u16);
    /// A request arrived; the consumer answers it with `Incoming::respond`.
    fn request(&self, s: &Arc<Session>, inc: KBox<Incoming>);
    /// The session is closed; the last call.
    fn gone(&self, s: &Arc<Session>, reason: Reason);
}

/// What a service is asked.
pub(crate) trait ServiceOps: Send + Sync {
    /// A client opened session `s`: the consumer for it, or why not.
    fn accept(&self, s: &Arc<Session>) -> Result<Arc<dyn Consumer>, Reason>;
}

/// A registered service.
#[pin_data]
pub(crate) struct Service {
    /// The name clients ask for.
    pub(crate) name: ServiceName,
    ops: KBox<dyn ServiceOps>,
    /// Whether the service takes sessions; held while one is accepted, so
    /// that unregistering sees every session the service took.
    #[pin]
    open: Mutex<bool>,
}

impl Service {
    /// Registers `name`. Fails with `EEXIST` if it is taken, `ESHUTDOWN` while
    /// ferry unloads.
    pub(crate) fn register(name: ServiceName, ops: KBox<dyn ServiceOps>) -> Result<Arc<Self>> {
        let ferry = Ferry::get().ok_or(ESHUTDOWN)?;
        let svc = Arc::pin_init(
            pin_init!(Self {
                name,
                ops,
                open <- new_mutex!(true),
            }),
            GFP_KERNEL,
        )?;
        ferry.add_service(svc.clone())?;
        Ok(svc)
    }

    /// Unregisters the service: refuses new sessions, closes its sessions and
    /// waits until none of their callbacks runs. May sleep.
    pub(crate) fn unregister(self: &Arc<Self>) {
        *self.open.lock() = false;
        let Some(ferry) = Ferry::get() else { return };
        ferry.remove_service(self);
        // Every session the service took is attached by now, and no other
        // will be. A session leaves the list when it is closed, before its
        // consumer hears `gone`; `close` returns once it has.
        while let Some(s) = ferry.find_session(|s| s.belongs_to(self)) {
            s.close(Reason::LocalClose);
        }
    }

    /// Asks the service to take session `s`, and attaches it if it does.
    pub(crate) fn attach(self: &Arc<Self>, s: &Arc<Session>) -> Result<(), Reason> {
        let open = self.open.lock();
        if !*open {
            return Err(Reason::UnknownService);
        }
        let consumer = self.ops.accept(s)?;
        s.set_consumer(self.clone(), consumer);
        drop(open);
        Ok(())
    }
}

/// The registered services (a field of [`crate::transport::Transport`]).
#[pin_data]
pub(crate) struct Services {
    #[pin]
    list: Mutex<KVec<Arc<Service>>>,
}

impl Services {
    /// No services.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            list <- new_mutex!(KVec::new()),
        })
    }

    /// Adds `svc`; `EEXIST` if its name is taken.
    pub(crate) fn add(&self, svc: Arc<Service>) -> Result {
        let mut list = self.list.lock();
        if list.iter().any(|s| s.name == svc.name) {
            return Err(EEXIST);
        }
        list.push(svc, GFP_KERNEL)?;
        Ok(())
    }

    /// Removes `svc`.
    pub(crate) fn remove(&self, svc: &Arc<Service>) {
        self.list
            .lock()
            .retain(|s| !core::ptr::eq::<Service>(&**s, &**svc));
    }

    /// A snapshot of the services, sorted by name.
    pub(crate) fn all(&self) -> Result<KVec<Arc<Service>>> {
        let list = self.list.lock();
        let mut v = KVec::with_capacity(list.len(), GFP_KERNEL)?;
        for s in list.iter() {
            v.push(s.clone(), GFP_KERNEL)?;
        }
        drop(list);
        v.sort_unstable_by(|a, b| a.name.as_cstr().to_bytes().cmp(b.name.as_cstr().to_bytes()));
        Ok(v)
    }

    /// The service called `name`.
    pub(crate) fn find(&self, name: &ServiceName) -> Option<Arc<Service>> {
        self.list.lock().iter().find(|s| s.name == *name).cloned()
    }
}
