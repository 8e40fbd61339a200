// SPDX-License-Identifier: GPL-2.0

//! The module's state: what this host runs and with what. [`Ferry`] holds
//! the RDMA devices ferry uses ([`device`]) and the transport over them
//! ([`transport`]: sessions, listeners, services, the work queue and the
//! tick), and tells an [`Observer`] (netlink) what changes.
//!
//! This is the top of the crate's modules: sessions, channels, listeners
//! and services never name it. What they need of it (a device's PD, the
//! work queue, the service a hello names) they get through the traits they
//! define and [`Ferry`] implements, handed to them when they are made.
//! Only the module's entry points look the state up ([`Ferry::get`]): the
//! exported C API, the genetlink handlers, the ib_core client's callbacks,
//! the tick, init and exit.

mod device;
mod secrets;
mod transport;

pub(crate) use device::{Ferry, Observer, OWNER};
