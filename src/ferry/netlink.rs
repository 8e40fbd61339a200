// SPDX-License-Identifier: GPL-2.0

//! ferry's control plane: the handlers of the `ferry` generic netlink family.
//!
//! The family, its ops and attribute policies are generated from
//! `Documentation/netlink/specs/ferry.yaml`; genetlink validates every attribute
//! against them before a handler runs. Handlers run in process context and may
//! sleep. Every error names its cause in the extack.

use kernel::prelude::*;

use crate::{
    device::Ferry,
    ferry_nl::device as attr,
    genl::{Dump, Request},
};

/// `device-get` do: the device named by `index` or `name` (both must agree).
pub(crate) fn device_get_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let index = req.u32(attr::INDEX);
    let name = req.str(attr::NAME);
    if index.is_none() && name.is_none() {
        return req.require(attr::NAME);
    }
    // Only the devices the requester's network namespace may use; in
    // exclusive mode names are unique per namespace only.
    let net = req.net();
    let devices = ferry.devices()?;
    let found = devices.iter().find(|d| {
        d.accessible_from(net)
            && index.is_none_or(|i| d.index() == i)
            && name.is_none_or(|n| d.has_name(n))
    });
    let Some(dev) = found else {
        match (index, name) {
            (Some(_), Some(_)) => req.error(c"no RDMA device has this index and name"),
            (Some(_), None) => req.bad_attr(attr::INDEX, c"no RDMA device with this index"),
            _ => req.bad_attr(attr::NAME, c"no RDMA device with this name"),
        }
        return Err(ENODEV);
    };
    let mut reply = req.reply_sized(dev.message_size())?;
    if let Err(e) = dev.fill(&mut reply.writer()) {
        req.error(if e == ENODEV {
            c"the RDMA device was removed while being read"
        } else {
            c"the device does not fit in a netlink message"
        });
        return Err(e);
    }
    reply.send()
}

/// `device-get` dump: every device, by increasing index.
pub(crate) fn device_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    for dev in ferry.devices()?.iter() {
        let index = u64::from(dev.index());
        if index < *dump.position() || !dev.accessible_from(dump.net()) {
            continue;
        }
        match dump.entry(|w| dev.fill(w)) {
            // `fill` fails with ENODEV only for a device removed since the
            // snapshot: not an error for the dump.
            Ok(()) | Err(ENODEV) => *dump.position() = index + 1,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
