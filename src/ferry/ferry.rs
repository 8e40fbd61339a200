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
#[path = "../../rust/cm.rs"]
pub mod cm;
#[path = "../../rust/crypto.rs"]
pub mod crypto;
#[path = "../../rust/ferry_abi.rs"]
pub mod ferry_abi;
#[path = "../../rust/ferry_nl.rs"]
pub mod ferry_nl;
#[path = "../../rust/genl.rs"]
pub mod genl;
#[path = "../../rust/mem.rs"]
pub mod mem;
#[path = "../../rust/netns.rs"]
pub mod netns;
#[path = "../../rust/pool.rs"]
pub mod pool;
#[path = "../../rust/ratelimit.rs"]
pub mod ratelimit;
#[path = "../../rust/rdma.rs"]
pub mod rdma;
#[path = "../../rust/slot.rs"]
pub mod slot;
#[path = "../../rust/work.rs"]
pub mod work;

mod backoff;
mod channel;
mod credits;
mod export;
mod host;
mod hostile;
mod keys;
mod listener;
mod netlink;
mod params;
mod service;
mod session;
mod state;
mod stats;
mod wire;
mod xfer;

use kernel::prelude::*;

module! {
    type: FerryModule,
    name: "ferry",
    authors: ["The ferry authors"],
    description: "RDMA message and block transport for kernel modules",
    license: "GPL",
    params: {
        whole_buffers: bool {
            default: false,
            description: "Give every message buffer an allocation of its own, as on a device that cannot scatter one over its pages (for tests of that path)",
        },
        ack_timeout: u8 {
            default: crate::params::DEFAULT_ACK_TIMEOUT,
            description: "Local ACK timeout of every client channel this host opens: 4.096 us * 2^N before a transport retry, N from 1 to 20 (14 is 67 ms; tests use 1 to make the device retransmit all the time). A server channel takes what rdma_cm derives from the client's connect request",
        },
    },
}

/// The loaded module. On unload the netlink family goes first, so no request
/// runs; then the transport closes every session and listener; then the
/// ib_core client removes every device.
struct FerryModule {
    netlink: Option<slot::Published<genl::Registration>>,
    ferry: kernel::sync::Arc<host::Ferry>,
    _client: rdma::client::Registration<host::Ferry>,
    _pernet: netns::PernetRegistration<NetGone>,
}

/// A network namespace's exit: what ferry knows of it by address goes.
struct NetGone;

impl netns::NetExit for NetGone {
    fn exit(net: &netns::Net) {
        if let Some(ferry) = host::Ferry::get() {
            ferry.net_gone(net);
        }
    }
}

impl kernel::Module for FerryModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        params::set_whole_buffers(module_parameters::whole_buffers.value());
        let ack_timeout = module_parameters::ack_timeout.value();
        if params::set_ack_timeout(ack_timeout).is_err() {
            pr_err!(
                "ack_timeout={} is out of range ({} to {})\n",
                ack_timeout,
                params::ACK_TIMEOUTS.start(),
                params::ACK_TIMEOUTS.end()
            );
            return Err(EINVAL);
        }
        let events = kernel::sync::Arc::new(netlink::Events, GFP_KERNEL)?;
        let ferry = host::Ferry::new(events)?;
        let client = rdma::client::Registration::new(ferry.clone(), host::OWNER)?;
        ferry.start()?;
        // Before any key can be added (netlink).
        let pernet = match netns::PernetRegistration::new() {
            Ok(p) => p,
            Err(e) => {
                ferry.shutdown();
                return Err(e);
            }
        };
        let netlink = match ferry_nl::register() {
            Ok(n) => n,
            Err(e) => {
                ferry.shutdown();
                return Err(e);
            }
        };
        pr_info!("loaded\n");
        Ok(Self {
            netlink: Some(netlink),
            ferry,
            _client: client,
            _pernet: pernet,
        })
    }
}

impl Drop for FerryModule {
    fn drop(&mut self) {
        drop(self.netlink.take());
        self.ferry.shutdown();
    }
}
