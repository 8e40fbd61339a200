// SPDX-License-Identifier: GPL-2.0

//! RDMA verbs: devices, their ib_core clients, protection domains,
//! completion queues and queue pairs.
//!
//! C headers: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! Every object that ib_core attributes to a module through `rdma res show`
//! (PDs, CQs) is created under the name the caller passes, never the
//! `KBUILD_MODNAME` of this file, so the resources show up under the module that
//! owns them.

#[path = "rdma/client.rs"]
pub mod client;
#[path = "rdma/cq.rs"]
pub mod cq;
#[path = "rdma/device.rs"]
pub mod device;
#[path = "rdma/mr.rs"]
pub mod mr;
#[path = "rdma/pd.rs"]
pub mod pd;
#[path = "rdma/qp.rs"]
pub mod qp;

pub use cq::Cq;
pub use device::Device;
pub use pd::Pd;
