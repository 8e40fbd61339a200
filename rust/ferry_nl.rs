// SPDX-License-Identifier: GPL-2.0

//! Glue between ferry's YNL-generated netlink family and its Rust handlers.
//!
//! `src/ferry/nl_gen.c` (generated from `Documentation/netlink/specs/ferry.yaml`)
//! defines the family, its ops and attribute policies, and calls the
//! `ferry_nl_*` functions below; they hand each request to the safe handlers in
//! `src/ferry/netlink.rs`. The attribute numbers are re-exported here from the
//! generated uapi header so that `src/` never touches the bindings.

use kernel::prelude::*;

use crate::{bindings, genl};

/// Registers the `ferry` generic netlink family. Unregistered when dropped.
///
/// Must be dropped no later than module exit (the module's own field does that).
pub fn register() -> Result<genl::Registration> {
    // SAFETY: `ferry_nl_family` is a static of this module (nl_gen.c) whose module
    // is this one and whose ops call the handlers below with the policies
    // generated beside them; it is only read (copied). Every `Registration` is
    // kept in the module object, which is dropped at module exit.
    unsafe { genl::Registration::new(&raw const bindings::ferry_nl_family) }
}

/// `FERRY_POLL_CTX_WORKQUEUE`, as ferry reports a CQ polled from `ib_comp_wq`.
pub const POLL_WORKQUEUE: u32 = bindings::ferry_poll_ctx_FERRY_POLL_CTX_WORKQUEUE;

/// Attribute numbers of the `device` set.
pub mod device {
    use crate::bindings;

    /// Device index.
    pub const INDEX: u32 = bindings::FERRY_A_DEVICE_INDEX;
    /// Device name.
    pub const NAME: u32 = bindings::FERRY_A_DEVICE_NAME;
    /// Node GUID.
    pub const NODE_GUID: u32 = bindings::FERRY_A_DEVICE_NODE_GUID;
    /// Node type.
    pub const NODE_TYPE: u32 = bindings::FERRY_A_DEVICE_NODE_TYPE;
    /// Completion vectors.
    pub const NUM_COMP_VECTORS: u32 = bindings::FERRY_A_DEVICE_NUM_COMP_VECTORS;
    /// Most QPs.
    pub const MAX_QP: u32 = bindings::FERRY_A_DEVICE_MAX_QP;
    /// Most WRs per QP.
    pub const MAX_QP_WR: u32 = bindings::FERRY_A_DEVICE_MAX_QP_WR;
    /// Most CQs.
    pub const MAX_CQ: u32 = bindings::FERRY_A_DEVICE_MAX_CQ;
    /// Most CQ entries.
    pub const MAX_CQE: u32 = bindings::FERRY_A_DEVICE_MAX_CQE;
    /// Most MRs.
    pub const MAX_MR: u32 = bindings::FERRY_A_DEVICE_MAX_MR;
    /// Most PDs.
    pub const MAX_PD: u32 = bindings::FERRY_A_DEVICE_MAX_PD;
    /// Most send SGEs.
    pub const MAX_SEND_SGE: u32 = bindings::FERRY_A_DEVICE_MAX_SEND_SGE;
    /// Most receive SGEs.
    pub const MAX_RECV_SGE: u32 = bindings::FERRY_A_DEVICE_MAX_RECV_SGE;
    /// Most pages per fast registration.
    pub const MAX_FAST_REG_PAGE_LIST_LEN: u32 = bindings::FERRY_A_DEVICE_MAX_FAST_REG_PAGE_LIST_LEN;
    /// Capability flags.
    pub const CAP_FLAGS: u32 = bindings::FERRY_A_DEVICE_CAP_FLAGS;
    /// A port (nest, repeated).
    pub const PORT: u32 = bindings::FERRY_A_DEVICE_PORT;
    /// ferry's PD id.
    pub const PD_ID: u32 = bindings::FERRY_A_DEVICE_PD_ID;
    /// One of ferry's CQs (nest, repeated).
    pub const CQ: u32 = bindings::FERRY_A_DEVICE_CQ;
    /// Padding for 64-bit attributes.
    pub const PAD: u32 = bindings::FERRY_A_DEVICE_PAD;
}

/// Attribute numbers of the `port` set.
pub mod port {
    use crate::bindings;

    /// Port number.
    pub const INDEX: u32 = bindings::FERRY_A_PORT_INDEX;
    /// Logical state.
    pub const STATE: u32 = bindings::FERRY_A_PORT_STATE;
    /// Physical state.
    pub const PHYS_STATE: u32 = bindings::FERRY_A_PORT_PHYS_STATE;
    /// Active MTU in bytes.
    pub const ACTIVE_MTU: u32 = bindings::FERRY_A_PORT_ACTIVE_MTU;
    /// Largest MTU in bytes.
    pub const MAX_MTU: u32 = bindings::FERRY_A_PORT_MAX_MTU;
    /// Link layer.
    pub const LINK_LAYER: u32 = bindings::FERRY_A_PORT_LINK_LAYER;
    /// GID table length.
    pub const GID_TBL_LEN: u32 = bindings::FERRY_A_PORT_GID_TBL_LEN;
    /// Network device name.
    pub const NETDEV: u32 = bindings::FERRY_A_PORT_NETDEV;
}

/// Attribute numbers of the `cq` set.
pub mod cq {
    use crate::bindings;

    /// Resource-tracking id.
    pub const ID: u32 = bindings::FERRY_A_CQ_ID;
    /// Entries.
    pub const CQE: u32 = bindings::FERRY_A_CQ_CQE;
    /// Completion vector.
    pub const COMP_VECTOR: u32 = bindings::FERRY_A_CQ_COMP_VECTOR;
    /// Poll context.
    pub const POLL_CTX: u32 = bindings::FERRY_A_CQ_POLL_CTX;
}

/// `FERRY_CMD_DEVICE_GET`, do.
///
/// # Safety
///
/// Only genetlink calls this, as the op's `doit`, with a valid `info`.
#[no_mangle]
unsafe extern "C" fn ferry_nl_device_get_doit(
    _skb: *mut bindings::sk_buff,
    info: *mut bindings::genl_info,
) -> c_int {
    // SAFETY: genetlink passes the request's `info`, valid for the call, with
    // attributes parsed against the op's policy, whose maxattr nl_gen.c sets to
    // `FERRY_A_DEVICE_NAME`.
    unsafe {
        genl::doit(
            info,
            bindings::FERRY_A_DEVICE_NAME,
            crate::netlink::device_get_doit,
        )
    }
}

/// `FERRY_CMD_DEVICE_GET`, dump.
///
/// # Safety
///
/// Only genetlink calls this, as the op's `dumpit`, with a valid `skb` and `cb`.
#[no_mangle]
unsafe extern "C" fn ferry_nl_device_get_dumpit(
    skb: *mut bindings::sk_buff,
    cb: *mut bindings::netlink_callback,
) -> c_int {
    // SAFETY: genetlink passes the dump's `skb` and `cb`, valid for the call.
    unsafe { genl::dumpit(skb, cb, crate::netlink::device_get_dumpit) }
}
