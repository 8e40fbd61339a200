// SPDX-License-Identifier: GPL-2.0

//! A mapping's changes as `ferry-blk` events (`map-change-ntf`), and the
//! attribute writers the events share with the replies of
//! [`crate::netlink`].

use kernel::prelude::*;

use crate::{
    ferry_blk_nl::{self as nl, map_attr as ma},
    genl::Writer,
    wire::{ExportName, NAME_MAX},
};

/// Room for an event's attributes: an export's name and path with their
/// headers (36 and 260 bytes), its UUID (20) and numbers.
pub(crate) const EVENT_SIZE: usize = 512;

/// Writes a mapping's capacity and state (`ma::STATE_*`).
pub(crate) fn put_change(w: &mut Writer<'_>, sectors: u64, state: u32) -> Result {
    w.put_u64(ma::SECTORS, sectors, ma::PAD)?;
    w.put_u32(ma::STATE, state)
}

/// Writes `name` as attribute `ty` (a string).
pub(crate) fn put_name(w: &mut Writer<'_>, ty: u32, name: &ExportName) -> Result {
    let mut buf = [0u8; NAME_MAX + 1];
    buf[..name.as_bytes().len()].copy_from_slice(name.as_bytes());
    w.put_str(ty, CStr::from_bytes_until_nul(&buf).map_err(|_| EINVAL)?)
}

/// Multicasts that disk `disk` of mapping `index` (of export `export`) now
/// has `sectors` and is in `state` (`ma::STATE_*`). An event that cannot be sent (no
/// memory) is lost: a listener reads the state again with a dump, as after
/// an overrun of its socket. Sleeps.
pub(crate) fn map_changed(index: u32, export: &ExportName, disk: &CStr, sectors: u64, state: u32) {
    let _ = nl::notify(nl::cmd::MAP_CHANGE_NTF, EVENT_SIZE, |w| {
        w.put_u32(ma::INDEX, index)?;
        put_name(w, ma::EXPORT, export)?;
        w.put_str(ma::DISK, disk)?;
        put_change(w, sectors, state)
    });
}
