// SPDX-License-Identifier: GPL-2.0

//! Services and consumers: how other kernel modules plug into sessions.
//!
//! A [`Service`] is a name a module registers with [`ServiceOps`]; a client's
//! first hello naming it asks the service to [`ServiceOps::accept`] the new
//! session, which answers with the session's `Consumer` (see `session.rs`). A
//! module that opens a client session gives its `Consumer` directly. The
//! exported C API (`include/ferry/ferry.h`) implements both traits over a
//! `struct ferry_ops`.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use kernel::{
    new_condvar, new_mutex,
    prelude::*,
    sync::{Arc, CondVar, Mutex, UniqueArc},
};

use crate::{
    session::{Consumer, ServiceKey, Session},
    wire::{Reason, ServiceName},
};

/// Where the next service's key comes from.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

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
    /// What its sessions know it by.
    key: ServiceKey,
    ops: KBox<dyn ServiceOps>,
    /// Whether the service takes sessions, and how many it is being asked
    /// about. The consumer's `accept` runs without this lock.
    #[pin]
    gate: Mutex<Gate>,
    /// Signalled when the last `accept` in progress returns.
    #[pin]
    answered: CondVar,
}

/// See [`Service::gate`].
struct Gate {
    open: bool,
    accepting: u32,
}

impl Service {
    /// A service called `name`, not registered yet (see the host's
    /// `register_service`).
    pub(crate) fn new(name: ServiceName, ops: KBox<dyn ServiceOps>) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                name,
                key: ServiceKey(NEXT_KEY.fetch_add(1, Relaxed)),
                ops,
                gate <- new_mutex!(Gate {
                    open: true,
                    accepting: 0,
                }),
                answered <- new_condvar!(),
            }),
            GFP_KERNEL,
        )
    }

    /// What its sessions know it by ([`Session::belongs_to`]).
    pub(crate) fn key(&self) -> ServiceKey {
        self.key
    }

    /// Refuses new sessions from now on; once it returns, every session the
    /// service took is attached (and no other will be). It waits for the
    /// `accept` calls in progress, so `accept` may not unregister its own
    /// service.
    pub(crate) fn shut(&self) {
        let mut gate = self.gate.lock();
        gate.open = false;
        while gate.accepting > 0 {
            self.answered.wait(&mut gate);
        }
    }

    /// Asks the service to take session `s`, and attaches it if it does.
    /// The consumer's `accept` runs with no lock of ferry's held.
    pub(crate) fn attach(self: &Arc<Self>, s: &Arc<Session>) -> Result<(), Reason> {
        // The consumer's place first: nothing may fail once the consumer
        // took the session (it would never hear `gone`).
        let place = UniqueArc::new_uninit(GFP_KERNEL).map_err(|_| Reason::NoResources)?;
        {
            let mut gate = self.gate.lock();
            if !gate.open {
                return Err(Reason::UnknownService);
            }
            gate.accepting += 1;
        }
        // Attached before `shut` can return: it waits for this call.
        let res = self
            .ops
            .accept(s)
            .map(|c| s.set_consumer(self.key, place.write(c).into()));
        let mut gate = self.gate.lock();
        gate.accepting -= 1;
        if gate.accepting == 0 {
            self.answered.notify_all();
        }
        drop(gate);
        res
    }
}

/// The registered services (a field of the transport's state).
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
