// SPDX-License-Identifier: GPL-2.0

//! Glue between ferry's YNL-generated netlink family and its Rust handlers.
//!
//! `src/ferry/nl_gen.c` (generated from `Documentation/netlink/specs/ferry.yaml`)
//! defines the family, its ops and attribute policies, and calls the
//! `ferry_nl_*` functions below; they hand each request to the safe handlers in
//! `src/ferry/netlink.rs`. The attribute numbers are re-exported here from the
//! generated uapi header so that `src/` never touches the bindings.

use kernel::{prelude::*, sync::Arc};

use crate::{
    bindings,
    genl::{self, op_doit, op_dumpit},
    netns::Net,
    slot::{Published, Slot},
};

/// The registered family, for notifications sent outside any request.
static FAMILY: Slot<genl::Registration> = Slot::new();

/// Registers the `ferry` generic netlink family and publishes it for
/// [`notify`]. Unregistered when the returned guard is dropped (and the last
/// notification in flight is done with it).
///
/// Must be dropped no later than module exit (the module's own field does that).
pub fn register() -> Result<Published<genl::Registration>> {
    // SAFETY: `ferry_nl_family` is a static of this module (nl_gen.c) whose module
    // is this one and whose ops call the handlers below with the policies
    // generated beside them; it is only read (copied). The registration is
    // published in this module's static and unpublished by the guard kept in
    // the module object, which is dropped at module exit; a notification that
    // still holds it then is a call of this module's, which module exit waits
    // for through the RCU grace period and the callers' own teardown.
    let reg = unsafe { genl::Registration::new(&raw const bindings::ferry_nl_family) }?;
    FAMILY.publish(Arc::new(reg, GFP_KERNEL)?)
}

/// Multicasts notification `cmd` to the `events` group in `net`, with
/// attributes written by `fill` (at most `size` bytes). Does nothing when the
/// family is not registered (module loading or unloading) or nobody listens.
pub fn notify(
    cmd: u32,
    size: usize,
    net: &Net,
    fill: impl FnOnce(&mut genl::Writer<'_>) -> Result,
) -> Result {
    let Some(family) = FAMILY.get() else {
        return Ok(());
    };
    let ntf = family.notify_with(cmd, size, fill)?;
    ntf.multicast(net, bindings::FERRY_NLGRP_EVENTS)
}

/// As [`notify`], to every network namespace.
pub fn notify_all(
    cmd: u32,
    size: usize,
    fill: impl FnOnce(&mut genl::Writer<'_>) -> Result,
) -> Result {
    let Some(family) = FAMILY.get() else {
        return Ok(());
    };
    let ntf = family.notify_with(cmd, size, fill)?;
    ntf.multicast_all(bindings::FERRY_NLGRP_EVENTS)
}

/// Notification commands.
pub mod cmd {
    use crate::bindings;

    /// A session changed state.
    pub const SESSION_NTF: u32 = bindings::FERRY_CMD_SESSION_NTF;
    /// ferry started using a device.
    pub const DEVICE_ADD_NTF: u32 = bindings::FERRY_CMD_DEVICE_ADD_NTF;
    /// ferry stopped using a device.
    pub const DEVICE_DEL_NTF: u32 = bindings::FERRY_CMD_DEVICE_DEL_NTF;
    /// A listener's device went away, or it listens again.
    pub const LISTENER_NTF: u32 = bindings::FERRY_CMD_LISTENER_NTF;
}

/// Attribute numbers of the `listener` set.
pub mod listener {
    use crate::bindings;

    /// Handle.
    pub const ID: u32 = bindings::FERRY_A_LISTENER_ID;
    /// Address, 4 or 16 bytes.
    pub const ADDR: u32 = bindings::FERRY_A_LISTENER_ADDR;
    /// Port.
    pub const PORT: u32 = bindings::FERRY_A_LISTENER_PORT;
    /// Open sessions accepted through it.
    pub const SESSIONS: u32 = bindings::FERRY_A_LISTENER_SESSIONS;
    /// Requests refused for not proving a known session's secret.
    pub const AUTH_REFUSED: u32 = bindings::FERRY_A_LISTENER_AUTH_REFUSED;
    /// Padding of the `u64` attribute.
    pub const PAD: u32 = bindings::FERRY_A_LISTENER_PAD;
    /// The key sessions must prove, by name.
    pub const KEY: u32 = bindings::FERRY_A_LISTENER_KEY;
    /// Sessions waiting for their first hello.
    pub const PENDING: u32 = bindings::FERRY_A_LISTENER_PENDING;
    /// New sessions refused for the limits.
    pub const BUSY_REFUSED: u32 = bindings::FERRY_A_LISTENER_BUSY_REFUSED;
    /// Requests refused that proved the secret but were stale.
    pub const STALE_REFUSED: u32 = bindings::FERRY_A_LISTENER_STALE_REFUSED;
    /// Most open sessions, from all addresses.
    pub const MAX_SESSIONS: u32 = bindings::FERRY_A_LISTENER_MAX_SESSIONS;
    /// Most open sessions from one address.
    pub const MAX_SESSIONS_PER_PEER: u32 = bindings::FERRY_A_LISTENER_MAX_SESSIONS_PER_PEER;
    /// Most sessions waiting for their hello, from all addresses.
    pub const MAX_PENDING: u32 = bindings::FERRY_A_LISTENER_MAX_PENDING;
    /// Most sessions waiting for their hello from one address.
    pub const MAX_PENDING_PER_PEER: u32 = bindings::FERRY_A_LISTENER_MAX_PENDING_PER_PEER;
    /// Most channels of a session.
    pub const MAX_CHANNELS: u32 = bindings::FERRY_A_LISTENER_MAX_CHANNELS;
    /// Whether it listens (`STATE_*`).
    pub const STATE: u32 = bindings::FERRY_A_LISTENER_STATE;
    /// State: listening.
    pub const STATE_LISTENING: u32 = bindings::ferry_listener_state_FERRY_LISTENER_STATE_LISTENING;
    /// State: waiting for its address to be on a device again.
    pub const STATE_WAITING: u32 = bindings::ferry_listener_state_FERRY_LISTENER_STATE_WAITING;
}

/// Attribute numbers of the `session` set.
pub mod session {
    use crate::bindings;

    /// Handle.
    pub const ID: u32 = bindings::FERRY_A_SESSION_ID;
    /// Role.
    pub const ROLE: u32 = bindings::FERRY_A_SESSION_ROLE;
    /// State.
    pub const STATE: u32 = bindings::FERRY_A_SESSION_STATE;
    /// Peer address.
    pub const ADDR: u32 = bindings::FERRY_A_SESSION_ADDR;
    /// Peer port.
    pub const PORT: u32 = bindings::FERRY_A_SESSION_PORT;
    /// Service name.
    pub const SERVICE: u32 = bindings::FERRY_A_SESSION_SERVICE;
    /// Channel count.
    pub const CHANNELS: u32 = bindings::FERRY_A_SESSION_CHANNELS;
    /// Local queue depth.
    pub const QUEUE_DEPTH: u32 = bindings::FERRY_A_SESSION_QUEUE_DEPTH;
    /// Peer queue depth.
    pub const PEER_QUEUE_DEPTH: u32 = bindings::FERRY_A_SESSION_PEER_QUEUE_DEPTH;
    /// Largest message.
    pub const MAX_MSG_SIZE: u32 = bindings::FERRY_A_SESSION_MAX_MSG_SIZE;
    /// Heartbeat interval.
    pub const HEARTBEAT_MS: u32 = bindings::FERRY_A_SESSION_HEARTBEAT_MS;
    /// Dead-peer timeout.
    pub const TIMEOUT_MS: u32 = bindings::FERRY_A_SESSION_TIMEOUT_MS;
    /// Give-up time.
    pub const GIVE_UP_S: u32 = bindings::FERRY_A_SESSION_GIVE_UP_S;
    /// Last failure reason.
    pub const REASON: u32 = bindings::FERRY_A_SESSION_REASON;
    /// Reconnects.
    pub const RECONNECTS: u32 = bindings::FERRY_A_SESSION_RECONNECTS;
    /// Send credits.
    pub const CREDITS: u32 = bindings::FERRY_A_SESSION_CREDITS;
    /// Round trip.
    pub const RTT_US: u32 = bindings::FERRY_A_SESSION_RTT_US;
    /// Handshake session id.
    pub const SESSION_ID: u32 = bindings::FERRY_A_SESSION_SESSION_ID;
    /// A channel (nest, repeated).
    pub const CHANNEL: u32 = bindings::FERRY_A_SESSION_CHANNEL;
    /// Counters (nest).
    pub const STATS: u32 = bindings::FERRY_A_SESSION_STATS;
    /// Accepting listener.
    pub const LISTENER: u32 = bindings::FERRY_A_SESSION_LISTENER;
    /// Padding for 64-bit attributes.
    pub const PAD: u32 = bindings::FERRY_A_SESSION_PAD;
    /// The key the handshake proves, by name.
    pub const KEY: u32 = bindings::FERRY_A_SESSION_KEY;
}

/// Attribute numbers of the `channel` set.
pub mod channel {
    use crate::bindings;

    /// Index.
    pub const INDEX: u32 = bindings::FERRY_A_CHANNEL_INDEX;
    /// QP number.
    pub const QP_NUM: u32 = bindings::FERRY_A_CHANNEL_QP_NUM;
    /// Device name.
    pub const DEVICE: u32 = bindings::FERRY_A_CHANNEL_DEVICE;
    /// Completion vector.
    pub const COMP_VECTOR: u32 = bindings::FERRY_A_CHANNEL_COMP_VECTOR;
    /// Send credits.
    pub const CREDITS: u32 = bindings::FERRY_A_CHANNEL_CREDITS;
    /// Round trip.
    pub const RTT_US: u32 = bindings::FERRY_A_CHANNEL_RTT_US;
    /// The channel's counters.
    pub const STATS: u32 = bindings::FERRY_A_CHANNEL_STATS;
    /// The channel's CQ.
    pub const CQ: u32 = bindings::FERRY_A_CHANNEL_CQ;
    /// The consumer polls the channel.
    pub const POLLED: u32 = bindings::FERRY_A_CHANNEL_POLLED;
    /// Bytes its buffers and responder entries hold.
    pub const MEM_BYTES: u32 = bindings::FERRY_A_CHANNEL_MEM_BYTES;
}

/// Attribute numbers of the `stats` set.
pub mod stats {
    use crate::bindings;

    /// Messages sent.
    pub const TX_MSGS: u32 = bindings::FERRY_A_STATS_TX_MSGS;
    /// Messages received.
    pub const RX_MSGS: u32 = bindings::FERRY_A_STATS_RX_MSGS;
    /// Bytes sent.
    pub const TX_BYTES: u32 = bindings::FERRY_A_STATS_TX_BYTES;
    /// Bytes received.
    pub const RX_BYTES: u32 = bindings::FERRY_A_STATS_RX_BYTES;
    /// Heartbeats sent.
    pub const HEARTBEATS_TX: u32 = bindings::FERRY_A_STATS_HEARTBEATS_TX;
    /// Heartbeats received.
    pub const HEARTBEATS_RX: u32 = bindings::FERRY_A_STATS_HEARTBEATS_RX;
    /// Explicit credit updates.
    pub const CREDIT_UPDATES: u32 = bindings::FERRY_A_STATS_CREDIT_UPDATES;
    /// Sends that waited for a credit.
    pub const CREDIT_STALLS: u32 = bindings::FERRY_A_STATS_CREDIT_STALLS;
    /// Failed work completions.
    pub const WC_ERRORS: u32 = bindings::FERRY_A_STATS_WC_ERRORS;
    /// Flushed work completions.
    pub const FLUSH_ERRORS: u32 = bindings::FERRY_A_STATS_FLUSH_ERRORS;
    /// Padding for 64-bit attributes.
    pub const PAD: u32 = bindings::FERRY_A_STATS_PAD;
    /// Consumers' messages sent.
    pub const DATA_TX: u32 = bindings::FERRY_A_STATS_DATA_TX;
    /// Consumers' messages received.
    pub const DATA_RX: u32 = bindings::FERRY_A_STATS_DATA_RX;
    /// Consumers' messages dropped for want of a consumer.
    pub const RX_UNCLAIMED: u32 = bindings::FERRY_A_STATS_RX_UNCLAIMED;
    /// Requests sent.
    pub const REQUESTS_TX: u32 = bindings::FERRY_A_STATS_REQUESTS_TX;
    /// Requests received.
    pub const REQUESTS_RX: u32 = bindings::FERRY_A_STATS_REQUESTS_RX;
    /// FRWR registrations.
    pub const REGISTRATIONS: u32 = bindings::FERRY_A_STATS_REGISTRATIONS;
    /// Registrations the peer invalidated.
    pub const INV_REMOTE: u32 = bindings::FERRY_A_STATS_INV_REMOTE;
    /// Registrations invalidated locally.
    pub const INV_LOCAL: u32 = bindings::FERRY_A_STATS_INV_LOCAL;
    /// Bytes moved by RDMA.
    pub const RDMA_BYTES: u32 = bindings::FERRY_A_STATS_RDMA_BYTES;
    /// Failed work completions of one status (a `wc-status` nest).
    pub const WC_STATUS: u32 = bindings::FERRY_A_STATS_WC_STATUS;
    /// Completions processed by consumers' polling.
    pub const POLLED: u32 = bindings::FERRY_A_STATS_POLLED;
    /// Requests sent with inline data.
    pub const INLINE: u32 = bindings::FERRY_A_STATS_INLINE;
    /// Zero-length RDMA WRITEs that checked the peer's adapter.
    pub const PROBES: u32 = bindings::FERRY_A_STATS_PROBES;
    /// Answers sent right behind their data.
    pub const EARLY_ANSWERS: u32 = bindings::FERRY_A_STATS_EARLY_ANSWERS;
}

/// Attribute numbers of the `wc-status` set.
pub mod wc_status {
    use crate::bindings;

    /// The status (`enum ib_wc_status`).
    pub const STATUS: u32 = bindings::FERRY_A_WC_STATUS_STATUS;
    /// How many work completions failed with it.
    pub const COUNT: u32 = bindings::FERRY_A_WC_STATUS_COUNT;
    /// Padding for 64-bit attributes.
    pub const PAD: u32 = bindings::FERRY_A_WC_STATUS_PAD;
}

/// Attribute numbers of the `service` set.
pub mod service {
    use crate::bindings;

    /// The service's name.
    pub const NAME: u32 = bindings::FERRY_A_SERVICE_NAME;
    /// Its open sessions in the requester's namespace.
    pub const SESSIONS: u32 = bindings::FERRY_A_SERVICE_SESSIONS;
}

/// Attribute numbers of the `key` set.
pub mod key {
    use crate::bindings;

    /// The key's name.
    pub const NAME: u32 = bindings::FERRY_A_KEY_NAME;
    /// Its bytes (`key-add` only).
    pub const SECRET: u32 = bindings::FERRY_A_KEY_SECRET;
}

/// Attribute numbers of the `device-event` set.
pub mod device_event {
    use crate::bindings;

    /// Device index.
    pub const INDEX: u32 = bindings::FERRY_A_DEVICE_EVENT_INDEX;
    /// Device name.
    pub const NAME: u32 = bindings::FERRY_A_DEVICE_EVENT_NAME;
}

/// `enum ferry_reason` values, which the wire protocol shares.
pub mod reason {
    use crate::bindings;

    /// No failure.
    pub const NONE: u32 = bindings::ferry_reason_FERRY_REASON_NONE;
    /// A refusal the peer's CM gave for itself.
    pub const CM_REJECTED: u32 = bindings::ferry_reason_FERRY_REASON_CM_REJECTED;
    /// The service refused the session (the highest value).
    pub const REFUSED: u32 = bindings::ferry_reason_FERRY_REASON_REFUSED;
    /// Gave up reconnecting.
    pub const GAVE_UP: u32 = bindings::ferry_reason_FERRY_REASON_GAVE_UP;
    /// Unknown service.
    pub const UNKNOWN_SERVICE: u32 = bindings::ferry_reason_FERRY_REASON_UNKNOWN_SERVICE;
    /// Nobody listens.
    pub const NO_LISTENER: u32 = bindings::ferry_reason_FERRY_REASON_NO_LISTENER;
}

/// `enum ferry_session_state` values.
pub mod state {
    use crate::bindings;

    /// Connecting.
    pub const CONNECTING: u32 = bindings::ferry_session_state_FERRY_SESSION_STATE_CONNECTING;
    /// Closed.
    pub const CLOSED: u32 = bindings::ferry_session_state_FERRY_SESSION_STATE_CLOSED;
}

/// `FERRY_POLL_CTX_WORKQUEUE`, as ferry reports a CQ polled from `ib_comp_wq`.
pub const POLL_WORKQUEUE: u32 = bindings::ferry_poll_ctx_FERRY_POLL_CTX_WORKQUEUE;
/// `FERRY_POLL_CTX_DIRECT`, as ferry reports a CQ its consumer polls.
pub const POLL_DIRECT: u32 = bindings::ferry_poll_ctx_FERRY_POLL_CTX_DIRECT;

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

op_doit!(
    /// `FERRY_CMD_DEVICE_GET`, do.
    ferry_nl_device_get_doit => crate::netlink::device_get_doit, maxattr FERRY_A_DEVICE_NAME
);
op_dumpit!(
    /// `FERRY_CMD_DEVICE_GET`, dump.
    ferry_nl_device_get_dumpit => crate::netlink::device_get_dumpit
);
op_doit!(
    /// `FERRY_CMD_LISTENER_ADD`, do.
    ferry_nl_listener_add_doit => crate::netlink::listener_add_doit, maxattr FERRY_A_LISTENER_MAX_CHANNELS
);
op_doit!(
    /// `FERRY_CMD_LISTENER_DEL`, do.
    ferry_nl_listener_del_doit => crate::netlink::listener_del_doit, maxattr FERRY_A_LISTENER_ID
);
op_doit!(
    /// `FERRY_CMD_LISTENER_GET`, do.
    ferry_nl_listener_get_doit => crate::netlink::listener_get_doit, maxattr FERRY_A_LISTENER_ID
);
op_dumpit!(
    /// `FERRY_CMD_LISTENER_GET`, dump.
    ferry_nl_listener_get_dumpit => crate::netlink::listener_get_dumpit
);
op_doit!(
    /// `FERRY_CMD_SESSION_CONNECT`, do.
    ferry_nl_session_connect_doit => crate::netlink::session_connect_doit,
    maxattr FERRY_A_SESSION_KEY
);
op_doit!(
    /// `FERRY_CMD_SESSION_DISCONNECT`, do.
    ferry_nl_session_disconnect_doit => crate::netlink::session_disconnect_doit,
    maxattr FERRY_A_SESSION_ID
);
op_doit!(
    /// `FERRY_CMD_SESSION_GET`, do.
    ferry_nl_session_get_doit => crate::netlink::session_get_doit, maxattr FERRY_A_SESSION_ID
);
op_dumpit!(
    /// `FERRY_CMD_SESSION_GET`, dump.
    ferry_nl_session_get_dumpit => crate::netlink::session_get_dumpit
);
op_dumpit!(
    /// `FERRY_CMD_SERVICE_GET`, dump.
    ferry_nl_service_get_dumpit => crate::netlink::service_get_dumpit
);
op_doit!(
    /// `FERRY_CMD_KEY_ADD`, do.
    ferry_nl_key_add_doit => crate::netlink::key_add_doit, maxattr FERRY_A_KEY_SECRET
);
op_doit!(
    /// `FERRY_CMD_KEY_DEL`, do.
    ferry_nl_key_del_doit => crate::netlink::key_del_doit, maxattr FERRY_A_KEY_NAME
);
op_dumpit!(
    /// `FERRY_CMD_KEY_GET`, dump.
    ferry_nl_key_get_dumpit => crate::netlink::key_get_dumpit
);
