// SPDX-License-Identifier: GPL-2.0

//! ferry_blk's generic netlink family, `ferry-blk`
//! (Documentation/netlink/specs/ferry-blk.yaml): its registration, its
//! attribute numbers, and the `extern "C"` handlers that the YNL-generated
//! ops table (`src/ferry_blk/nl_gen.c`) names, which forward to the safe
//! handlers of `src/ferry_blk/netlink.rs`.

use kernel::{prelude::*, sync::Arc};

use crate::{
    bindings,
    genl::{self, op_doit, op_dumpit},
    slot::{Published, Slot},
};

/// The registered family.
static FAMILY: Slot<genl::Registration> = Slot::new();

/// Registers the family; unregistered when the guard is dropped, which must
/// be no later than module exit (the module's own field does that).
pub fn register() -> Result<Published<genl::Registration>> {
    // SAFETY: `ferry_blk_nl_family` is a static of this module (nl_gen.c)
    // whose module is this one and whose ops call the handlers below with the
    // policies generated beside them; it is only read (copied). The guard is
    // kept in the module object, dropped at module exit.
    let reg = unsafe { genl::Registration::new(&raw const bindings::ferry_blk_nl_family) }?;
    FAMILY.publish(Arc::new(reg, GFP_KERNEL)?)
}

/// Multicasts notification `cmd` (see [`cmd`]) to the `events` group of
/// every network namespace (exports and disks belong to the host, and
/// every namespace may list them), with attributes written by `fill` (at
/// most `size` bytes). Does nothing when the family is not registered
/// (module loading or unloading) or nobody listens. Sleeps (allocates).
pub fn notify(cmd: u32, size: usize, fill: impl FnOnce(&mut genl::Writer<'_>) -> Result) -> Result {
    let Some(family) = FAMILY.get() else {
        return Ok(());
    };
    let ntf = family.notify_with(cmd, size, fill)?;
    ntf.multicast_all(bindings::FERRY_BLK_NLGRP_EVENTS)
}

/// Notification commands.
pub mod cmd {
    use crate::bindings;

    /// A block device was exported.
    pub const EXPORT_ADD_NTF: u32 = bindings::FERRY_BLK_CMD_EXPORT_ADD_NTF;
    /// An export was deleted.
    pub const EXPORT_DEL_NTF: u32 = bindings::FERRY_BLK_CMD_EXPORT_DEL_NTF;
    /// An export's capacity was read again.
    pub const EXPORT_RESIZE_NTF: u32 = bindings::FERRY_BLK_CMD_EXPORT_RESIZE_NTF;
    /// An export was mapped as a disk.
    pub const MAP_ADD_NTF: u32 = bindings::FERRY_BLK_CMD_MAP_ADD_NTF;
    /// A mapping was removed.
    pub const MAP_DEL_NTF: u32 = bindings::FERRY_BLK_CMD_MAP_DEL_NTF;
    /// A mapping's capacity or state changed.
    pub const MAP_CHANGE_NTF: u32 = bindings::FERRY_BLK_CMD_MAP_CHANGE_NTF;
}

/// Attributes of an export (`FERRY_BLK_A_EXPORT_*`).
pub mod export_attr {
    use crate::bindings;

    /// Padding for 64-bit values.
    pub const PAD: u32 = bindings::FERRY_BLK_A_EXPORT_PAD;
    /// Name.
    pub const NAME: u32 = bindings::FERRY_BLK_A_EXPORT_NAME;
    /// Block device path.
    pub const PATH: u32 = bindings::FERRY_BLK_A_EXPORT_PATH;
    /// Clients may only read.
    pub const READ_ONLY: u32 = bindings::FERRY_BLK_A_EXPORT_READ_ONLY;
    /// Several read-write clients.
    pub const SHARED: u32 = bindings::FERRY_BLK_A_EXPORT_SHARED;
    /// Delete even while mapped.
    pub const FORCE: u32 = bindings::FERRY_BLK_A_EXPORT_FORCE;
    /// What clients name it by.
    pub const HANDLE: u32 = bindings::FERRY_BLK_A_EXPORT_HANDLE;
    /// Capacity in sectors.
    pub const SECTORS: u32 = bindings::FERRY_BLK_A_EXPORT_SECTORS;
    /// Logical block size.
    pub const LOGICAL_BLOCK_SIZE: u32 = bindings::FERRY_BLK_A_EXPORT_LOGICAL_BLOCK_SIZE;
    /// Sessions that have it open.
    pub const USERS: u32 = bindings::FERRY_BLK_A_EXPORT_USERS;
    /// Of which read-write.
    pub const RW_USERS: u32 = bindings::FERRY_BLK_A_EXPORT_RW_USERS;
    /// Operations at work.
    pub const INFLIGHT: u32 = bindings::FERRY_BLK_A_EXPORT_INFLIGHT;
    /// Counters (nest of [`super::stats_attr`]).
    pub const STATS: u32 = bindings::FERRY_BLK_A_EXPORT_STATS;
    /// A session that has it open (nest of [`super::client_attr`]; one each).
    pub const CLIENT: u32 = bindings::FERRY_BLK_A_EXPORT_CLIENT;
    /// Its identity, a UUID (16 bytes).
    pub const UUID: u32 = bindings::FERRY_BLK_A_EXPORT_UUID;
    /// Ended or replaced sessions with operations still at work.
    pub const RETIRED: u32 = bindings::FERRY_BLK_A_EXPORT_RETIRED;
}

/// Attributes of an export's client (`FERRY_BLK_A_CLIENT_*`).
pub mod client_attr {
    use crate::bindings;

    /// ferry session id.
    pub const SESSION: u32 = bindings::FERRY_BLK_A_CLIENT_SESSION;
    /// The client's address.
    pub const ADDR: u32 = bindings::FERRY_BLK_A_CLIENT_ADDR;
    /// The client's port.
    pub const PORT: u32 = bindings::FERRY_BLK_A_CLIENT_PORT;
    /// Opened read-only.
    pub const READ_ONLY: u32 = bindings::FERRY_BLK_A_CLIENT_READ_ONLY;
    /// Its operations at work.
    pub const INFLIGHT: u32 = bindings::FERRY_BLK_A_CLIENT_INFLIGHT;
}

/// Attributes of a mapping (`FERRY_BLK_A_MAP_*`).
pub mod map_attr {
    use crate::bindings;

    /// Padding for 64-bit values.
    pub const PAD: u32 = bindings::FERRY_BLK_A_MAP_PAD;
    /// N of /dev/ferryblkN.
    pub const INDEX: u32 = bindings::FERRY_BLK_A_MAP_INDEX;
    /// Target address.
    pub const ADDR: u32 = bindings::FERRY_BLK_A_MAP_ADDR;
    /// Target port.
    pub const PORT: u32 = bindings::FERRY_BLK_A_MAP_PORT;
    /// Export name.
    pub const EXPORT: u32 = bindings::FERRY_BLK_A_MAP_EXPORT;
    /// Mapped read-only.
    pub const READ_ONLY: u32 = bindings::FERRY_BLK_A_MAP_READ_ONLY;
    /// Channels.
    pub const CHANNELS: u32 = bindings::FERRY_BLK_A_MAP_CHANNELS;
    /// Queue depth.
    pub const DEPTH: u32 = bindings::FERRY_BLK_A_MAP_DEPTH;
    /// Pre-shared key name.
    pub const KEY: u32 = bindings::FERRY_BLK_A_MAP_KEY;
    /// Unmap while open.
    pub const FORCE: u32 = bindings::FERRY_BLK_A_MAP_FORCE;
    /// Disk name.
    pub const DISK: u32 = bindings::FERRY_BLK_A_MAP_DISK;
    /// ferry session id.
    pub const SESSION: u32 = bindings::FERRY_BLK_A_MAP_SESSION;
    /// Capacity in sectors.
    pub const SECTORS: u32 = bindings::FERRY_BLK_A_MAP_SECTORS;
    /// State (`FERRY_BLK_MAP_STATE_*`).
    pub const STATE: u32 = bindings::FERRY_BLK_A_MAP_STATE;
    /// Counters (nest of [`super::stats_attr`]).
    pub const STATS: u32 = bindings::FERRY_BLK_A_MAP_STATS;
    /// Requests sent and not answered.
    pub const INFLIGHT: u32 = bindings::FERRY_BLK_A_MAP_INFLIGHT;
    /// The export's identity, as its target said (16 bytes).
    pub const UUID: u32 = bindings::FERRY_BLK_A_MAP_UUID;
    /// State: up.
    pub const STATE_LIVE: u32 = bindings::ferry_blk_map_state_FERRY_BLK_MAP_STATE_LIVE;
    /// State: dead (I/O fails).
    pub const STATE_DEAD: u32 = bindings::ferry_blk_map_state_FERRY_BLK_MAP_STATE_DEAD;
    /// State: connection lost, I/O waits.
    pub const STATE_CONNECTING: u32 = bindings::ferry_blk_map_state_FERRY_BLK_MAP_STATE_CONNECTING;
    /// State: lost beyond the fast-fail time, I/O fails at once.
    pub const STATE_FAILING_FAST: u32 =
        bindings::ferry_blk_map_state_FERRY_BLK_MAP_STATE_FAILING_FAST;
    /// Seconds disconnected before I/O fails at once (0: never).
    pub const FAST_FAIL: u32 = bindings::FERRY_BLK_A_MAP_FAST_FAIL;
    /// Seconds disconnected before the disk is dead.
    pub const GIVE_UP: u32 = bindings::FERRY_BLK_A_MAP_GIVE_UP;
    /// The longest wait between reconnect attempts, in seconds.
    pub const RECONNECT_DELAY: u32 = bindings::FERRY_BLK_A_MAP_RECONNECT_DELAY;
    /// Polled hardware queues, after the others.
    pub const POLL_QUEUES: u32 = bindings::FERRY_BLK_A_MAP_POLL_QUEUES;
}

/// Attributes of the counters (`FERRY_BLK_A_STATS_*`).
pub mod stats_attr {
    use crate::bindings;

    /// Padding for 64-bit values.
    pub const PAD: u32 = bindings::FERRY_BLK_A_STATS_PAD;
    /// Reads.
    pub const READS: u32 = bindings::FERRY_BLK_A_STATS_READS;
    /// Writes.
    pub const WRITES: u32 = bindings::FERRY_BLK_A_STATS_WRITES;
    /// Flushes.
    pub const FLUSHES: u32 = bindings::FERRY_BLK_A_STATS_FLUSHES;
    /// Writes with forced unit access.
    pub const FUA: u32 = bindings::FERRY_BLK_A_STATS_FUA;
    /// Discards.
    pub const DISCARDS: u32 = bindings::FERRY_BLK_A_STATS_DISCARDS;
    /// Writes of zeroes.
    pub const WRITE_ZEROES: u32 = bindings::FERRY_BLK_A_STATS_WRITE_ZEROES;
    /// Bytes read.
    pub const BYTES_READ: u32 = bindings::FERRY_BLK_A_STATS_BYTES_READ;
    /// Bytes written.
    pub const BYTES_WRITTEN: u32 = bindings::FERRY_BLK_A_STATS_BYTES_WRITTEN;
    /// Refused as invalid.
    pub const REFUSED: u32 = bindings::FERRY_BLK_A_STATS_REFUSED;
    /// Failed by the backing disk.
    pub const BACKING_ERRORS: u32 = bindings::FERRY_BLK_A_STATS_BACKING_ERRORS;
    /// Failed, for any reason.
    pub const FAILED: u32 = bindings::FERRY_BLK_A_STATS_FAILED;
    /// Bytes discarded.
    pub const BYTES_DISCARDED: u32 = bindings::FERRY_BLK_A_STATS_BYTES_DISCARDED;
    /// Bytes written as zeroes.
    pub const BYTES_ZEROED: u32 = bindings::FERRY_BLK_A_STATS_BYTES_ZEROED;
    /// A mapping's connection losses.
    pub const RECONNECTS: u32 = bindings::FERRY_BLK_A_STATS_RECONNECTS;
    /// A mapping's requests requeued.
    pub const REQUEUES: u32 = bindings::FERRY_BLK_A_STATS_REQUEUES;
    /// A mapping's requests failed fast.
    pub const FAST_FAILED: u32 = bindings::FERRY_BLK_A_STATS_FAST_FAILED;
    /// A mapping's requests timed out.
    pub const TIMEOUTS: u32 = bindings::FERRY_BLK_A_STATS_TIMEOUTS;
    /// A mapping's reopens refused for now (fenced).
    pub const FENCED: u32 = bindings::FERRY_BLK_A_STATS_FENCED;
    /// Seconds a mapping spent disconnected.
    pub const DISCONNECTED_S: u32 = bindings::FERRY_BLK_A_STATS_DISCONNECTED_S;
    /// An export's operations submitted on ferry_blk's work queue.
    pub const DEFERRED: u32 = bindings::FERRY_BLK_A_STATS_DEFERRED;
}

op_doit!(
    /// `FERRY_BLK_CMD_EXPORT_ADD`, do.
    ferry_blk_nl_export_add_doit => crate::netlink::export_add_doit,
    maxattr FERRY_BLK_A_EXPORT_UUID
);
op_doit!(
    /// `FERRY_BLK_CMD_EXPORT_DEL`, do.
    ferry_blk_nl_export_del_doit => crate::netlink::export_del_doit,
    maxattr FERRY_BLK_A_EXPORT_FORCE
);
op_doit!(
    /// `FERRY_BLK_CMD_EXPORT_RESIZE`, do.
    ferry_blk_nl_export_resize_doit => crate::netlink::export_resize_doit,
    maxattr FERRY_BLK_A_EXPORT_NAME
);
op_dumpit!(
    /// `FERRY_BLK_CMD_EXPORT_GET`, dump.
    ferry_blk_nl_export_get_dumpit => crate::netlink::export_get_dumpit
);
op_doit!(
    /// `FERRY_BLK_CMD_MAP_ADD`, do.
    ferry_blk_nl_map_add_doit => crate::netlink::map_add_doit,
    maxattr FERRY_BLK_A_MAP_POLL_QUEUES
);
op_doit!(
    /// `FERRY_BLK_CMD_MAP_SET`, do.
    ferry_blk_nl_map_set_doit => crate::netlink::map_set_doit,
    maxattr FERRY_BLK_A_MAP_RECONNECT_DELAY
);
op_doit!(
    /// `FERRY_BLK_CMD_MAP_DEL`, do.
    ferry_blk_nl_map_del_doit => crate::netlink::map_del_doit,
    maxattr FERRY_BLK_A_MAP_FORCE
);
op_dumpit!(
    /// `FERRY_BLK_CMD_MAP_GET`, dump.
    ferry_blk_nl_map_get_dumpit => crate::netlink::map_get_dumpit
);
