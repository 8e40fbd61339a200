// SPDX-License-Identifier: GPL-2.0

//! The `ferry-blk` family's handlers: exports (target) and mappings
//! (client). Every bad argument is refused with the attribute named.

use kernel::{prelude::*, str::CString};

use crate::{
    client::{MapParams, Mapping},
    events::{put_change, put_name, EVENT_SIZE},
    ferry_api::{NetNs, Peer, MAX_CHANNELS},
    ferry_blk_nl::{
        self as nl, client_attr as ca, export_attr as ea, map_attr as ma, stats_attr as sa,
    },
    genl::{Dump, Request, Writer},
    stats::{IoCounts, Op},
    target::{Access, Export},
    wire::ExportName,
    State,
};

/// Room for a mapping's attributes in a reply: its address, names and
/// numbers (about 200 bytes), its counters (19, 12 bytes each) and identity.
const ENTRY_SIZE: usize = 640;

/// Room for an export's attributes in a reply: a name and a path with their
/// headers (36 and 260 bytes), flags, numbers and counters (at most 16 bytes
/// each, with padding), its UUID (20), and its clients.
const EXPORT_SIZE: usize =
    36 + 260 + 8 + 9 * 16 + 4 + 15 * 16 + 20 + MAX_CLIENTS_LISTED * CLIENT_SIZE;

/// An export's clients listed at most (its `users` counts them all): an
/// entry stays within a dump's first, page-sized message.
const MAX_CLIENTS_LISTED: usize = 16;

/// Room for one client's attributes: a nest of a session, an IPv6 address, a
/// port, a flag and a count.
const CLIENT_SIZE: usize = 4 + 8 + 20 + 8 + 4 + 8;

/// Writes a mapping's counters: its requests' and its connection's.
fn put_map_stats(w: &mut Writer<'_>, s: &IoCounts, c: &[u64; 6]) -> Result {
    w.nest(ma::STATS, |w| {
        put_io_counts(w, s)?;
        let attrs = [
            sa::RECONNECTS,
            sa::REQUEUES,
            sa::FAST_FAILED,
            sa::TIMEOUTS,
            sa::FENCED,
            sa::DISCONNECTED_S,
        ];
        for (attr, v) in attrs.into_iter().zip(c) {
            w.put_u64(attr, *v, sa::PAD)?;
        }
        Ok(())
    })
}

/// Writes the counters of requests or operations.
fn put_io_counts(w: &mut Writer<'_>, s: &IoCounts) -> Result {
    {
        for (attr, v) in [
            (sa::READS, s.ops(Op::Read)),
            (sa::WRITES, s.ops(Op::Write)),
            (sa::FLUSHES, s.ops(Op::Flush)),
            (sa::FUA, s.fua),
            (sa::DISCARDS, s.ops(Op::Discard)),
            (sa::WRITE_ZEROES, s.ops(Op::WriteZeroes)),
            (sa::BYTES_READ, s.bytes_read),
            (sa::BYTES_WRITTEN, s.bytes_written),
            (sa::BYTES_DISCARDED, s.bytes_discarded),
            (sa::BYTES_ZEROED, s.bytes_zeroed),
            (sa::REFUSED, s.refused),
            (sa::BACKING_ERRORS, s.backing_errors),
            (sa::FAILED, s.failed),
        ] {
            w.put_u64(attr, v, sa::PAD)?;
        }
        Ok(())
    }
}

/// Writes what identifies an export and its capacity (an event's
/// attributes).
fn fill_export_id(w: &mut Writer<'_>, e: &Export) -> Result {
    put_name(w, ea::NAME, &e.name)?;
    w.put_str(ea::PATH, &e.path)?;
    if e.access.read_only {
        w.put_flag(ea::READ_ONLY)?;
    }
    if e.access.shared {
        w.put_flag(ea::SHARED)?;
    }
    w.put_u32(ea::HANDLE, e.handle)?;
    w.put_u64(ea::SECTORS, e.sectors(), ea::PAD)?;
    w.put_u32(ea::LOGICAL_BLOCK_SIZE, e.logical_block_size())?;
    w.put_bytes(ea::UUID, &e.id)
}

/// Writes an export's attributes.
fn fill_export(w: &mut Writer<'_>, e: &Export) -> Result {
    fill_export_id(w, e)?;
    let (users, rw) = e.users();
    w.put_u32(ea::USERS, u32::try_from(users).unwrap_or(u32::MAX))?;
    w.put_u32(ea::RW_USERS, u32::try_from(rw).unwrap_or(u32::MAX))?;
    w.put_u32(ea::INFLIGHT, e.inflight())?;
    w.put_u32(ea::RETIRED, u32::try_from(e.retired()).unwrap_or(u32::MAX))?;
    let stats = e.stats.counts();
    w.nest(ea::STATS, |w| {
        put_io_counts(w, &stats)?;
        w.put_u64(sa::DEFERRED, stats.deferred, sa::PAD)
    })?;
    // The list is best effort: the clients that do not fit are left out
    // (`users` counts them all), never the export.
    let _ = e.clients(MAX_CLIENTS_LISTED, |s, read_only, inflight| {
        w.nest(ea::CLIENT, |w| {
            w.put_u32(ca::SESSION, s.id())?;
            if let Some(p) = s.peer() {
                let (addr, port) = p.ip_port();
                w.put_bytes(ca::ADDR, addr)?;
                w.put_u16(ca::PORT, port)?;
            }
            if read_only {
                w.put_flag(ca::READ_ONLY)?;
            }
            w.put_u32(ca::INFLIGHT, inflight)
        })
    });
    Ok(())
}

/// The export name of attribute `ty`, validated.
fn export_name(req: &mut Request<'_>, ty: u32) -> Result<ExportName> {
    req.require(ty)?;
    match req.str(ty).and_then(|s| ExportName::new(s.to_bytes())) {
        Some(n) => Ok(n),
        None => {
            req.bad_attr(
                ty,
                c"an export name is 1 to 31 characters of a-z, 0-9, '.', '_', '-'",
            );
            Err(EINVAL)
        }
    }
}

/// `export-add`: export a block device.
pub(crate) fn export_add_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    if !crate::capable_sys_admin() {
        req.error(c"exporting a block device needs CAP_SYS_ADMIN");
        return Err(EPERM);
    }
    let name = export_name(req, ea::NAME)?;
    req.require(ea::PATH)?;
    let Some(path) = req.str(ea::PATH) else {
        req.bad_attr(ea::PATH, c"the path must be a string");
        return Err(EINVAL);
    };
    let access = Access {
        read_only: req.has(ea::READ_ONLY),
        shared: req.has(ea::SHARED),
    };
    // (The policy takes 16 bytes exactly.)
    let id = match req.bytes(ea::UUID).map(<[u8; 16]>::try_from) {
        None => None,
        Some(Ok(id)) if id != [0; 16] => Some(id),
        Some(_) => {
            req.bad_attr(ea::UUID, c"an export's UUID is 16 bytes, not all zero");
            return Err(EINVAL);
        }
    };
    let export = match state.target.add(name, path, access, id) {
        Ok(e) => e,
        Err(e) => {
            match e {
                EEXIST => req.bad_attr(ea::NAME, c"an export of this name exists"),
                EADDRINUSE => req.bad_attr(
                    ea::UUID,
                    c"another export has this identity (the uuid given, or the device's own ID)",
                ),
                EBUSY => req.bad_attr(
                    ea::PATH,
                    c"the device is in use: mounted, exported or held by another holder",
                ),
                ENOTBLK => req.bad_attr(ea::PATH, c"not a block device"),
                _ => req.bad_attr(ea::PATH, c"cannot open the block device"),
            }
            return Err(e);
        }
    };
    pr_info!(
        "export {}: {:?} ({} sectors)\n",
        export.name,
        export.path,
        export.sectors()
    );
    export_event(nl::cmd::EXPORT_ADD_NTF, &export);
    let mut reply = req.reply_sized(EXPORT_SIZE)?;
    fill_export(&mut reply.writer(), &export)?;
    reply.send()
}

/// `export-del`: delete an export.
pub(crate) fn export_del_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    let name = export_name(req, ea::NAME)?;
    let export = state.target.find(&name);
    match state.target.delete(&name, req.has(ea::FORCE)) {
        Ok(_) => {
            pr_info!("export {}: deleted\n", name);
            if let Some(e) = export {
                export_event(nl::cmd::EXPORT_DEL_NTF, &e);
            }
            Ok(())
        }
        Err(e) => {
            match e {
                ENOENT => req.bad_attr(ea::NAME, c"no export of this name"),
                EBUSY => req.bad_attr(
                    ea::NAME,
                    c"clients have the export mapped: unmap it there, or force",
                ),
                _ => req.error(c"the export could not be deleted"),
            }
            Err(e)
        }
    }
}

/// `export-resize`: read an export's capacity again and tell its clients.
pub(crate) fn export_resize_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    let name = export_name(req, ea::NAME)?;
    if let Err(e) = state.target.resize(&name) {
        match e {
            ENOENT => req.bad_attr(ea::NAME, c"no export of this name"),
            EBUSY => req.bad_attr(ea::NAME, c"the device shrank while the export is mapped"),
            _ => req.error(c"the export could not be resized"),
        }
        return Err(e);
    }
    let export = state.target.find(&name).ok_or(ENOENT)?;
    export_event(nl::cmd::EXPORT_RESIZE_NTF, &export);
    let mut reply = req.reply_sized(EXPORT_SIZE)?;
    fill_export(&mut reply.writer(), &export)?;
    reply.send()
}

/// `export-get` dump: every export.
pub(crate) fn export_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let state = State::get()?;
    for (i, e) in state.target.exports()?.iter().enumerate() {
        let i = i as u64;
        if i < *dump.position() {
            continue;
        }
        dump.entry(|w| fill_export(w, e))?;
        *dump.position() = i + 1;
    }
    Ok(())
}

/// Writes a mapping's attributes.
fn fill_map(w: &mut Writer<'_>, m: &Mapping) -> Result {
    fill_map_id(w, m, m.sectors())?;
    put_map_stats(w, &m.stats(), &m.counters())?;
    w.put_u32(ma::INFLIGHT, m.inflight())?;
    w.put_bytes(ma::UUID, m.id())?;
    let t = m.timers();
    w.put_u32(ma::FAST_FAIL, t.fast_fail_s)?;
    w.put_u32(ma::GIVE_UP, t.give_up_s)?;
    w.put_u32(ma::RECONNECT_DELAY, t.reconnect_delay_s)?;
    let (queues, polled) = m.queues();
    w.put_u32(ma::CHANNELS, queues.into())?;
    w.put_u32(ma::POLL_QUEUES, polled.into())
}

/// Writes what identifies a mapping, its capacity (`sectors`) and state
/// (an event's attributes).
fn fill_map_id(w: &mut Writer<'_>, m: &Mapping, sectors: u64) -> Result {
    w.put_u32(ma::INDEX, m.index())?;
    let (addr, port) = m.peer_addr();
    w.put_bytes(ma::ADDR, addr)?;
    w.put_u16(ma::PORT, port)?;
    put_name(w, ma::EXPORT, &m.export)?;
    if m.read_only() {
        w.put_flag(ma::READ_ONLY)?;
    }
    w.put_str(ma::DISK, m.disk_name())?;
    w.put_u32(ma::SESSION, m.session_id())?;
    put_change(w, sectors, m.state())
}

/// Multicasts event `cmd` (`ferry_blk_nl::cmd::EXPORT_*`) of export `e`.
/// As [`crate::events::map_changed`], an event that cannot be sent is
/// lost. Sleeps.
pub(crate) fn export_event(cmd: u32, e: &Export) {
    let _ = nl::notify(cmd, EVENT_SIZE, |w| fill_export_id(w, e));
}

/// Multicasts event `cmd` (`ferry_blk_nl::cmd::MAP_ADD_NTF` or
/// `MAP_DEL_NTF`) of mapping `m`, whose disk has (or had, before it was
/// deleted) `sectors`; as [`export_event`].
pub(crate) fn map_event(cmd: u32, m: &Mapping, sectors: u64) {
    let _ = nl::notify(cmd, EVENT_SIZE, |w| fill_map_id(w, m, sectors));
}

/// `map-add`: map another host's export.
pub(crate) fn map_add_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    if !crate::capable_sys_admin() {
        req.error(c"mapping a disk needs CAP_SYS_ADMIN");
        return Err(EPERM);
    }
    req.require(ma::ADDR)?;
    req.require(ma::PORT)?;
    let port = req.u16(ma::PORT).unwrap_or(0);
    let peer = match req.bytes(ma::ADDR) {
        Some(&[a, b, c, d]) => Peer::V4([a, b, c, d], port),
        Some(a) if a.len() == 16 => {
            let mut v6 = [0u8; 16];
            v6.copy_from_slice(a);
            Peer::V6(v6, port)
        }
        _ => {
            req.bad_attr(ma::ADDR, c"address must be 4 (IPv4) or 16 (IPv6) bytes");
            return Err(EINVAL);
        }
    };
    let export = export_name(req, ma::EXPORT)?;
    let channels = req.u32(ma::CHANNELS).unwrap_or(0);
    let Ok(channels) = u16::try_from(channels).map_err(|_| ()).and_then(|c| {
        if c <= MAX_CHANNELS {
            Ok(c)
        } else {
            Err(())
        }
    }) else {
        req.bad_attr(ma::CHANNELS, c"channels must be 0 (one per CPU) to 64");
        return Err(EINVAL);
    };
    // (The policy keeps it below 64.) As nvme-fabrics caps
    // `nr_poll_queues`, first: a polled queue beyond the CPUs would have no
    // CPU to submit or poll on it.
    let poll_queues = req
        .u32(ma::POLL_QUEUES)
        .unwrap_or(0)
        .min(crate::work::num_online_cpus()) as u16;
    if channels.saturating_add(poll_queues) > MAX_CHANNELS {
        req.bad_attr(
            ma::POLL_QUEUES,
            c"channels and polled queues together must be at most 64",
        );
        return Err(EINVAL);
    }
    let depth = req.u32(ma::DEPTH).unwrap_or(0);
    if depth != 0 && !(2..=1024).contains(&depth) {
        req.bad_attr(ma::DEPTH, c"depth must be 0 (ferry's default) or 2 to 1024");
        return Err(EINVAL);
    }
    let key = match req.str(ma::KEY) {
        Some(k) => Some(CString::try_from(k)?),
        None => None,
    };
    // (The policy checks their range.)
    let p = MapParams {
        net: NetNs::of(&*req),
        peer,
        export,
        read_only: req.has(ma::READ_ONLY),
        channels,
        poll_queues,
        depth,
        key,
        fast_fail_s: req.u32(ma::FAST_FAIL).unwrap_or(0),
        give_up_s: req.u32(ma::GIVE_UP).unwrap_or(crate::client::GIVE_UP_S),
        reconnect_delay_s: req
            .u32(ma::RECONNECT_DELAY)
            .unwrap_or(crate::client::RECONNECT_DELAY_S),
    };
    let mapping = match state.map(&p) {
        Ok(m) => m,
        Err(e) => {
            match e {
                ENODEV if crate::State::get().is_err() => req.error(c"ferry_blk is being unloaded"),
                ECONNREFUSED => req.error(c"the target refused the session (no ferry_blk there?)"),
                ENODEV => req.bad_attr(ma::EXPORT, c"the target has no export of this name"),
                EROFS => req.bad_attr(ma::READ_ONLY, c"the export is read-only: map it read-only"),
                EBUSY => req.bad_attr(
                    ma::EXPORT,
                    c"another client has the export mapped read-write (it is not shared)",
                ),
                EACCES => req.bad_attr(ma::KEY, c"authentication failed"),
                ENOKEY => req.bad_attr(
                    ma::KEY,
                    c"no such key in this network namespace (ferryctl key add)",
                ),
                EPROTO => req.error(c"the target's answer is malformed (see the kernel log)"),
                ETIMEDOUT | EHOSTUNREACH | ENETUNREACH => {
                    req.bad_attr(ma::ADDR, c"the target did not answer")
                }
                _ => req.error(c"the export could not be mapped"),
            }
            return Err(e);
        }
    };
    let mut reply = req.reply_sized(ENTRY_SIZE)?;
    state.with_map(mapping, |m| {
        map_event(nl::cmd::MAP_ADD_NTF, m, m.sectors());
        m.announced();
        fill_map(&mut reply.writer(), m)
    })?;
    reply.send()
}

/// `map-set`: change a mapping's fast-fail, give-up and reconnect-delay
/// times.
pub(crate) fn map_set_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    if !crate::capable_sys_admin() {
        req.error(c"changing a mapping needs CAP_SYS_ADMIN");
        return Err(EPERM);
    }
    req.require(ma::INDEX)?;
    let index = req.u32(ma::INDEX).unwrap_or(u32::MAX);
    let (fast_fail, give_up) = (req.u32(ma::FAST_FAIL), req.u32(ma::GIVE_UP));
    let reconnect_delay = req.u32(ma::RECONNECT_DELAY);
    if fast_fail.is_none() && give_up.is_none() && reconnect_delay.is_none() {
        req.error(c"nothing to set: fast-fail, give-up, reconnect-delay");
        return Err(EINVAL);
    }
    let mut reply = req.reply_sized(ENTRY_SIZE)?;
    let res = state.with_map(index, |m| {
        m.set_timers(fast_fail, give_up, reconnect_delay)?;
        fill_map(&mut reply.writer(), m)
    });
    if let Err(e) = res {
        if e == ENOENT {
            req.bad_attr(ma::INDEX, c"no mapping of this index");
        }
        return Err(e);
    }
    reply.send()
}

/// `map-del`: remove a mapping.
pub(crate) fn map_del_doit(req: &mut Request<'_>) -> Result {
    let state = State::get()?;
    if !crate::capable_sys_admin() {
        req.error(c"unmapping a disk needs CAP_SYS_ADMIN");
        return Err(EPERM);
    }
    req.require(ma::INDEX)?;
    let index = req.u32(ma::INDEX).unwrap_or(u32::MAX);
    match state.unmap(index, req.has(ma::FORCE)) {
        Ok(()) => Ok(()),
        Err(e) => {
            match e {
                ENOENT => req.bad_attr(ma::INDEX, c"no mapping of this index"),
                EBUSY => req.bad_attr(
                    ma::INDEX,
                    c"the disk is open, or its target unreachable: close it, or force",
                ),
                _ => req.error(c"the mapping could not be removed"),
            }
            Err(e)
        }
    }
}

/// `map-get` dump: every mapping.
pub(crate) fn map_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let state = State::get()?;
    let maps = state.maps.lock();
    for (i, m) in maps.iter().enumerate() {
        let i = i as u64;
        if i < *dump.position() {
            continue;
        }
        dump.entry(|w| fill_map(w, m))?;
        *dump.position() = i + 1;
    }
    Ok(())
}
