// SPDX-License-Identifier: GPL-2.0

//! ferry: an RDMA transport for kernel modules.
//!
//! ferry tracks every RDMA device through an ib_core client and holds its own
//! protection domain and completion queue on each; its generic netlink family
//! `ferry` reports them. Sessions, messages and zero-copy transfers build on
//! these per-device resources.
//!
//! Layout: this crate root pulls in the abstractions of `rust/` (the only place
//! with code the compiler cannot check) and the module's own files, one per object: [`device`] (the
//! ib_core client and per-device resources) and [`netlink`] (the control plane).

#[path = "../../rust/bindings.rs"]
mod bindings;
#[path = "../../rust/ferry_nl.rs"]
pub mod ferry_nl;
#[path = "../../rust/genl.rs"]
pub mod genl;
#[path = "../../rust/netns.rs"]
pub mod netns;
#[path = "../../rust/rdma.rs"]
pub mod rdma;
#[path = "../../rust/slot.rs"]
pub mod slot;

mod device;
mod netlink;

use kernel::prelude::*;

module! {
    type: FerryModule,
    name: "ferry",
    authors: ["The ferry authors"],
    description: "RDMA message and block transport for kernel modules",
    license: "GPL",
}

/// The loaded module. Fields drop in order: the netlink family goes first, so no
/// request runs while the ib_core client removes every device.
struct FerryModule {
    _netlink: genl::Registration,
    _client: rdma::client::Registration<device::Ferry>,
}

impl kernel::Module for FerryModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let client = rdma::client::Registration::new(device::Ferry::new()?, device::OWNER)?;
        let netlink = ferry_nl::register()?;
        pr_info!("loaded\n");
        Ok(Self {
            _netlink: netlink,
            _client: client,
        })
    }
}
