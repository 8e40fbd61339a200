// SPDX-License-Identifier: GPL-2.0

//! ferry's control plane: the handlers of the `ferry` generic netlink family.
//!
//! The family, its ops and attribute policies are generated from
//! `Documentation/netlink/specs/ferry.yaml`; genetlink validates every attribute
//! against them before a handler runs. Handlers run in process context and may
//! sleep. Every error names its cause in the extack.

use kernel::prelude::*;

use crate::{
    cm::SockAddr,
    ferry_nl::{
        self, channel as ch_attr, cq as cq_attr, device as attr, device_event as dev_ev,
        key as k_attr, listener as l_attr, service as sv_attr, session as s_attr, stats as st_attr,
        wc_status as wc_attr,
    },
    genl::{Dump, Request, Writer},
    host::{Ferry, Observer},
    keys::Psk,
    listener::{Limits, Listener},
    params::Params,
    session::Session,
    stats::{Counter, Counters, COUNTERS, WC_STATUSES},
    wire::{self, Reason, ServiceName},
};

// The wire's reasons are netlink's.
const _: () = assert!(Reason::CmRejected as u32 == ferry_nl::reason::CM_REJECTED);
const _: () = assert!(Reason::Refused as u32 == ferry_nl::reason::REFUSED);
const _: () = assert!(Reason::GaveUp as u32 == ferry_nl::reason::GAVE_UP);
const _: () = assert!(Reason::UnknownService as u32 == ferry_nl::reason::UNKNOWN_SERVICE);
const _: () = assert!(Reason::NoListener as u32 == ferry_nl::reason::NO_LISTENER);
const _: () = assert!(Reason::None as u32 == ferry_nl::reason::NONE);
const _: () = assert!(
    crate::state::SessionState::Connecting as u32 == ferry_nl::state::CONNECTING
        && crate::state::SessionState::Closed as u32 == ferry_nl::state::CLOSED
);

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

/// The address and port of a request, validated.
fn sockaddr(req: &mut Request<'_>, addr_ty: u32, port_ty: u32) -> Result<SockAddr> {
    req.require(addr_ty)?;
    req.require(port_ty)?;
    let port = req.u16(port_ty).unwrap_or(0);
    let Some(addr) = req.bytes(addr_ty).and_then(|a| SockAddr::from_ip(a, port)) else {
        req.bad_attr(addr_ty, c"address must be 4 (IPv4) or 16 (IPv6) bytes");
        return Err(EINVAL);
    };
    Ok(addr)
}

/// Room for a listener's attributes in a reply.
const LISTENER_SIZE: usize = 320;

/// Writes a listener's attributes.
fn fill_listener(w: &mut Writer<'_>, ferry: &Ferry, l: &Listener) -> Result {
    w.put_u32(l_attr::ID, l.id)?;
    w.put_bytes(l_attr::ADDR, l.addr.ip())?;
    w.put_u16(l_attr::PORT, l.addr.port())?;
    w.put_u32(l_attr::SESSIONS, ferry.listener_sessions(l.id))?;
    w.put_u32(
        l_attr::STATE,
        if l.is_listening() {
            l_attr::STATE_LISTENING
        } else {
            l_attr::STATE_WAITING
        },
    )?;
    if let Some(k) = &l.psk {
        w.put_str(l_attr::KEY, k.name.as_cstr())?;
    }
    // (Out of memory for the count: none shown.)
    let pending = ferry.admission(l.id, &l.addr).map_or(0, |a| a.pending);
    w.put_u32(l_attr::PENDING, pending)?;
    w.put_u64(
        l_attr::BUSY_REFUSED,
        l.busy_refused.load(core::sync::atomic::Ordering::Relaxed),
        l_attr::PAD,
    )?;
    w.put_u64(
        l_attr::AUTH_REFUSED,
        l.auth_refused.load(core::sync::atomic::Ordering::Relaxed),
        l_attr::PAD,
    )?;
    w.put_u64(
        l_attr::STALE_REFUSED,
        l.stale_refused.load(core::sync::atomic::Ordering::Relaxed),
        l_attr::PAD,
    )?;
    let m = &l.limits;
    w.put_u32(l_attr::MAX_SESSIONS, m.sessions)?;
    w.put_u32(l_attr::MAX_SESSIONS_PER_PEER, m.sessions_per_peer)?;
    w.put_u32(l_attr::MAX_PENDING, m.pending)?;
    w.put_u32(l_attr::MAX_PENDING_PER_PEER, m.pending_per_peer)?;
    w.put_u32(l_attr::MAX_CHANNELS, u32::from(m.channels))
}

/// The admission limits of a `listener-add` request: each given one at
/// least 1 (channels at most 64), the others their defaults.
fn listener_limits(req: &mut Request<'_>) -> Result<Limits> {
    let mut m = Limits::default();
    for (ty, field) in [
        (l_attr::MAX_SESSIONS, &mut m.sessions),
        (l_attr::MAX_SESSIONS_PER_PEER, &mut m.sessions_per_peer),
        (l_attr::MAX_PENDING, &mut m.pending),
        (l_attr::MAX_PENDING_PER_PEER, &mut m.pending_per_peer),
    ] {
        match req.u32(ty) {
            Some(0) => {
                req.bad_attr(ty, c"a limit is at least 1");
                return Err(EINVAL);
            }
            Some(v) => *field = v,
            None => {}
        }
    }
    if let Some(v) = req.u32(l_attr::MAX_CHANNELS) {
        match u16::try_from(v) {
            Ok(c) if (1..=crate::wire::MAX_CHANNELS).contains(&c) => m.channels = c,
            _ => {
                req.bad_attr(l_attr::MAX_CHANNELS, c"channels: 1 to 64");
                return Err(EINVAL);
            }
        }
    }
    Ok(m)
}

/// `listener-add`: listen on an address and port.
pub(crate) fn listener_add_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let addr = sockaddr(req, l_attr::ADDR, l_attr::PORT)?;
    if addr.port() == 0 {
        req.bad_attr(l_attr::PORT, c"port 0 is not a port");
        return Err(EINVAL);
    }
    let psk = named_key(req, &ferry, l_attr::KEY)?;
    let limits = listener_limits(req)?;
    let l = match ferry.add_listener(req.net(), addr, psk, limits) {
        Ok(l) => l,
        Err(e) => {
            req.error(match e {
                EADDRINUSE => c"ferry already listens on this address and port",
                EADDRNOTAVAIL | ENODEV => c"no RDMA device has this address",
                ESHUTDOWN => c"ferry is unloading",
                _ => c"cannot listen on this address and port",
            });
            return Err(e);
        }
    };
    let mut reply = req.reply_sized(LISTENER_SIZE)?;
    fill_listener(&mut reply.writer(), &ferry, &l)?;
    reply.send()
}

/// The service or key name in attribute `ty`, if the request has one:
/// `EINVAL` (the extack says `rule`) if it is not a name.
fn name_attr(req: &mut Request<'_>, ty: u32, rule: &'static CStr) -> Result<Option<ServiceName>> {
    let Some(name) = req.str(ty) else {
        return Ok(None);
    };
    match ServiceName::new(name.to_bytes()) {
        Some(n) => Ok(Some(n)),
        None => {
            req.bad_attr(ty, rule);
            Err(EINVAL)
        }
    }
}

/// What a key name may be.
const KEY_NAMES: &CStr = c"key names are 1 to 31 of a-z, 0-9, '.', '_', '-'";

/// The key attribute `ty` names, if the request has one: `ENOKEY` (with
/// the extack saying so) if the namespace has no such key.
fn named_key(
    req: &mut Request<'_>,
    ferry: &Ferry,
    ty: u32,
) -> Result<Option<kernel::sync::Arc<Psk>>> {
    let Some(name) = name_attr(req, ty, KEY_NAMES)? else {
        return Ok(None);
    };
    match ferry.key(req.net(), &name) {
        Some(k) => Ok(Some(k)),
        None => {
            req.bad_attr(ty, c"no such key (ferryctl key add)");
            Err(ENOKEY)
        }
    }
}

/// `key-add`: a pre-shared key under a name.
pub(crate) fn key_add_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    req.require(k_attr::NAME)?;
    req.require(k_attr::SECRET)?;
    let name = name_attr(req, k_attr::NAME, KEY_NAMES)?.ok_or(EINVAL)?;
    let Ok(key) = Psk::new(name, req.bytes(k_attr::SECRET).unwrap_or(&[])) else {
        req.bad_attr(k_attr::SECRET, c"a key is 16 to 128 bytes");
        return Err(EINVAL);
    };
    ferry.add_key(req.net(), key).inspect_err(|e| {
        req.error(match *e {
            EEXIST => c"a key of that name exists (delete it first)",
            ENOSPC => c"too many keys in this network namespace",
            _ => c"cannot add the key",
        })
    })
}

/// `key-del`: forget a key; what uses it keeps it.
pub(crate) fn key_del_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    req.require(k_attr::NAME)?;
    let name = name_attr(req, k_attr::NAME, KEY_NAMES)?.ok_or(EINVAL)?;
    ferry
        .del_key(req.net(), &name)
        .inspect_err(|_| req.bad_attr(k_attr::NAME, c"no such key"))
}

/// `key-get`: the names of the requester's namespace's keys.
pub(crate) fn key_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let names = ferry.key_names(dump.net())?;
    // CAST: a position is an index into the list.
    for (i, name) in names.iter().enumerate().skip(*dump.position() as usize) {
        dump.entry(|w| w.put_str(k_attr::NAME, name.as_cstr()))?;
        // CAST: an index fits in 64 bits.
        *dump.position() = i as u64 + 1;
    }
    Ok(())
}

/// `listener-del`: stop listening.
pub(crate) fn listener_del_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    req.require(l_attr::ID)?;
    let id = req.u32(l_attr::ID).unwrap_or(0);
    ferry.del_listener(req.net(), id).inspect_err(|_| {
        req.bad_attr(l_attr::ID, c"no listener with this id");
    })
}

/// `listener-get` do.
pub(crate) fn listener_get_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    req.require(l_attr::ID)?;
    let id = req.u32(l_attr::ID).unwrap_or(0);
    let net = req.net();
    let found = ferry
        .listeners()?
        .into_iter()
        .find(|l| l.id == id && l.net.as_raw() == net.as_raw());
    let Some(l) = found else {
        req.bad_attr(l_attr::ID, c"no listener with this id");
        return Err(ENOENT);
    };
    let mut reply = req.reply_sized(LISTENER_SIZE)?;
    fill_listener(&mut reply.writer(), &ferry, &l)?;
    reply.send()
}

/// `listener-get` dump, by id.
pub(crate) fn listener_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let mut list = ferry.listeners()?;
    list.sort_unstable_by_key(|l| l.id);
    for l in list.iter() {
        let id = u64::from(l.id);
        if id < *dump.position() || l.net.as_raw() != dump.net().as_raw() {
            continue;
        }
        dump.entry(|w| fill_listener(w, &ferry, l))?;
        *dump.position() = id + 1;
    }
    Ok(())
}

/// Room a session message needs.
fn session_size(s: &Session) -> usize {
    // A stats nest: each counter (with its pad) and each work completion
    // status (a nest of a u32 and a padded u64).
    let stats = 16 * COUNTERS + 32 * WC_STATUSES;
    // The session's attributes and stats, and per channel its own and stats.
    680 + stats + (96 + stats) * usize::from(s.params.channels)
}

/// Writes a session's attributes.
fn fill_session(w: &mut Writer<'_>, s: &Session) -> Result {
    let info = s.info()?;
    w.put_u32(s_attr::ID, s.id)?;
    w.put_u32(s_attr::ROLE, s.role as u32)?;
    w.put_u32(s_attr::STATE, info.state as u32)?;
    w.put_bytes(s_attr::ADDR, s.peer.ip())?;
    w.put_u16(s_attr::PORT, s.peer.port())?;
    if let Some(svc) = info.service {
        w.put_str(s_attr::SERVICE, svc.as_cstr())?;
    }
    let p = &s.params;
    w.put_u32(s_attr::CHANNELS, u32::from(p.channels))?;
    w.put_u32(s_attr::QUEUE_DEPTH, p.queue_depth)?;
    w.put_u32(s_attr::PEER_QUEUE_DEPTH, info.peer_depth)?;
    w.put_u32(s_attr::MAX_MSG_SIZE, info.max_msg)?;
    w.put_u32(s_attr::HEARTBEAT_MS, p.heartbeat_ms)?;
    w.put_u32(s_attr::TIMEOUT_MS, p.timeout_ms)?;
    w.put_u32(s_attr::GIVE_UP_S, p.give_up_s)?;
    w.put_u32(s_attr::REASON, info.reason as u32)?;
    w.put_u32(s_attr::RECONNECTS, info.reconnects)?;
    let credits = info.channels.iter().map(|c| c.credits).sum();
    w.put_u32(s_attr::CREDITS, credits)?;
    let rtt = info
        .channels
        .iter()
        .map(|c| c.rtt_us)
        .filter(|&r| r != 0)
        .min()
        .unwrap_or(0);
    w.put_u32(s_attr::RTT_US, rtt)?;
    if let Some(id) = s.shown_id() {
        w.put_u64(s_attr::SESSION_ID, id, s_attr::PAD)?;
    }
    if let Some(l) = s.listener {
        w.put_u32(s_attr::LISTENER, l)?;
    }
    if let Some(k) = &s.psk {
        w.put_str(s_attr::KEY, k.name.as_cstr())?;
    }
    for c in info.channels.iter() {
        w.nest(s_attr::CHANNEL, |w| {
            w.put_u32(ch_attr::INDEX, c.index)?;
            if let Some(q) = c.qp_num {
                w.put_u32(ch_attr::QP_NUM, q)?;
            }
            if let Some(d) = c.device.as_ref() {
                w.put_str(ch_attr::DEVICE, d.as_cstr())?;
            }
            if let Some(v) = c.comp_vector {
                w.put_u32(ch_attr::COMP_VECTOR, v)?;
            }
            if let (Some((id, entries, ctx)), Some(v)) = (c.cq, c.comp_vector) {
                w.nest(ch_attr::CQ, |w| {
                    w.put_u32(cq_attr::ID, id)?;
                    w.put_u32(cq_attr::CQE, entries)?;
                    w.put_u32(cq_attr::COMP_VECTOR, v)?;
                    w.put_u32(cq_attr::POLL_CTX, ctx)
                })?;
            }
            if c.polled {
                w.put_flag(ch_attr::POLLED)?;
            }
            w.put_u32(ch_attr::CREDITS, c.credits)?;
            w.put_u32(ch_attr::RTT_US, c.rtt_us)?;
            w.put_u32(ch_attr::MEM_BYTES, c.mem_bytes)?;
            w.nest(ch_attr::STATS, |w| put_counters(w, &c.counters))
        })?;
    }
    w.nest(s_attr::STATS, |w| put_counters(w, &info.totals))
}

/// Each counter's attribute in the `stats` set.
const COUNTER_ATTRS: [(Counter, u32); COUNTERS] = [
    (Counter::TxMsgs, st_attr::TX_MSGS),
    (Counter::RxMsgs, st_attr::RX_MSGS),
    (Counter::TxBytes, st_attr::TX_BYTES),
    (Counter::RxBytes, st_attr::RX_BYTES),
    (Counter::HeartbeatsTx, st_attr::HEARTBEATS_TX),
    (Counter::HeartbeatsRx, st_attr::HEARTBEATS_RX),
    (Counter::CreditUpdates, st_attr::CREDIT_UPDATES),
    (Counter::CreditStalls, st_attr::CREDIT_STALLS),
    (Counter::WcErrors, st_attr::WC_ERRORS),
    (Counter::FlushErrors, st_attr::FLUSH_ERRORS),
    (Counter::DataTx, st_attr::DATA_TX),
    (Counter::DataRx, st_attr::DATA_RX),
    (Counter::RxUnclaimed, st_attr::RX_UNCLAIMED),
    (Counter::RequestsTx, st_attr::REQUESTS_TX),
    (Counter::RequestsRx, st_attr::REQUESTS_RX),
    (Counter::Registrations, st_attr::REGISTRATIONS),
    (Counter::InvRemote, st_attr::INV_REMOTE),
    (Counter::InvLocal, st_attr::INV_LOCAL),
    (Counter::RdmaBytes, st_attr::RDMA_BYTES),
    (Counter::Polled, st_attr::POLLED),
    (Counter::Inline, st_attr::INLINE),
    (Counter::Probes, st_attr::PROBES),
    (Counter::EarlyAnswers, st_attr::EARLY_ANSWERS),
];

/// Writes the attributes of the `stats` set.
fn put_counters(w: &mut Writer<'_>, c: &Counters) -> Result {
    for (counter, ty) in COUNTER_ATTRS {
        w.put_u64(ty, c.get(counter), st_attr::PAD)?;
    }
    for (status, n) in (0u32..).zip(c.wc.iter()).filter(|(_, n)| **n != 0) {
        w.nest(st_attr::WC_STATUS, |w| {
            w.put_u32(wc_attr::STATUS, status)?;
            w.put_u64(wc_attr::COUNT, *n, wc_attr::PAD)
        })?;
    }
    Ok(())
}

/// An optional `u32` attribute within `range`, or `default`.
fn bounded(
    req: &mut Request<'_>,
    ty: u32,
    range: core::ops::RangeInclusive<u32>,
    default: u32,
    msg: &'static CStr,
) -> Result<u32> {
    match req.u32(ty) {
        None => Ok(default),
        Some(v) if range.contains(&v) => Ok(v),
        Some(_) => {
            req.bad_attr(ty, msg);
            Err(ERANGE)
        }
    }
}

/// `session-connect`: open a session and wait until it is up or refused.
pub(crate) fn session_connect_doit(req: &mut Request<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let peer = sockaddr(req, s_attr::ADDR, s_attr::PORT)?;
    if !peer.is_unicast() {
        req.bad_attr(s_attr::ADDR, c"the peer must be a unicast address");
        return Err(EINVAL);
    }
    req.require(s_attr::SERVICE)?;
    let service = name_attr(
        req,
        s_attr::SERVICE,
        c"service names are 1 to 31 of a-z, 0-9, '.', '_', '-'",
    )?
    .ok_or(EINVAL)?;
    let d = Params::DEFAULT;
    let channels = match req.u32(s_attr::CHANNELS) {
        None | Some(0) => ferry.default_channels(req.net())?,
        Some(_) => bounded(
            req,
            s_attr::CHANNELS,
            1..=u32::from(wire::MAX_CHANNELS),
            1,
            c"at most 64 channels",
        )?,
    };
    let queue_depth = bounded(
        req,
        s_attr::QUEUE_DEPTH,
        wire::MIN_QUEUE_DEPTH..=wire::MAX_QUEUE_DEPTH,
        d.queue_depth,
        c"queue depth must be 2 to 1024",
    )?;
    let max_msg = bounded(
        req,
        s_attr::MAX_MSG_SIZE,
        wire::MIN_MSG_SIZE..=wire::MAX_MSG_SIZE,
        d.max_msg,
        c"message size must be 256 to 65536 bytes",
    )?;
    let heartbeat_ms = bounded(
        req,
        s_attr::HEARTBEAT_MS,
        wire::HEARTBEAT_MS,
        d.heartbeat_ms,
        c"heartbeat must be 100 to 60000 ms",
    )?;
    let timeout_ms = bounded(
        req,
        s_attr::TIMEOUT_MS,
        heartbeat_ms.saturating_mul(2)..=600_000,
        d.timeout_ms.max(heartbeat_ms.saturating_mul(2)),
        c"timeout must be two heartbeats to 600000 ms",
    )?;
    let give_up_s = bounded(
        req,
        s_attr::GIVE_UP_S,
        0..=7 * 86_400,
        d.give_up_s,
        c"give-up time must be 0 (never) to 604800 s",
    )?;
    let params = Params {
        // CAST: at most `MAX_CHANNELS`, checked above.
        channels: channels as u16,
        // Nobody would poll them: a session without a consumer has none.
        poll_channels: 0,
        queue_depth,
        max_msg,
        inline_size: d.inline_size,
        heartbeat_ms,
        timeout_ms,
        give_up_s,
        reconnect_delay_s: d.reconnect_delay_s,
        preregister: false,
        takes_requests: true,
        sends_requests: true,
        softirq: false,
    };
    let psk = named_key(req, &ferry, s_attr::KEY)?;
    if let Err(e) = params.check_memory(&peer) {
        req.error(c"the host cannot spare the memory these channels, queue depth and message size need (see the kernel log)");
        return Err(e);
    }
    match Session::connect(ferry.clone(), req.net(), peer, service, params, None, psk) {
        Ok(s) => {
            let mut reply = req.reply_sized(session_size(&s))?;
            fill_session(&mut reply.writer(), &s)?;
            reply.send()
        }
        Err(reason) => {
            req.error(reason.describe());
            Err(reason.errno())
        }
    }
}

/// The session `id` if the requester's namespace owns it.
fn find_session(req: &mut Request<'_>) -> Result<kernel::sync::Arc<Session>> {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    req.require(s_attr::ID)?;
    let id = req.u32(s_attr::ID).unwrap_or(0);
    let net = req.net();
    match ferry.session(id).filter(|s| s.net.as_raw() == net.as_raw()) {
        Some(s) => Ok(s),
        None => {
            req.bad_attr(s_attr::ID, c"no session with this id");
            Err(ENOENT)
        }
    }
}

/// `session-disconnect`: close a session.
pub(crate) fn session_disconnect_doit(req: &mut Request<'_>) -> Result {
    let s = find_session(req)?;
    s.close(Reason::LocalClose);
    Ok(())
}

/// `session-get` do.
pub(crate) fn session_get_doit(req: &mut Request<'_>) -> Result {
    let s = find_session(req)?;
    let mut reply = req.reply_sized(session_size(&s))?;
    fill_session(&mut reply.writer(), &s)?;
    reply.send()
}

/// `session-get` dump, by id.
pub(crate) fn session_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    for s in ferry.sessions()?.iter() {
        let id = u64::from(s.id);
        if id < *dump.position() || s.net.as_raw() != dump.net().as_raw() {
            continue;
        }
        dump.entry(|w| fill_session(w, s))?;
        *dump.position() = id + 1;
    }
    Ok(())
}

/// Netlink's view of the module's state: what changes is multicast to the
/// `events` group.
pub(crate) struct Events;

impl Observer for Events {
    /// Multicasts a session's state to the group in its namespace.
    fn session_changed(&self, s: &Session) {
        let _ = ferry_nl::notify(ferry_nl::cmd::SESSION_NTF, session_size(s), &s.net, |w| {
            fill_session(w, s)
        });
    }

    /// Multicasts that ferry started (`added`) or stopped using a device.
    fn device_changed(&self, added: bool, index: u32, name: &CStr) {
        let cmd = if added {
            ferry_nl::cmd::DEVICE_ADD_NTF
        } else {
            ferry_nl::cmd::DEVICE_DEL_NTF
        };
        let _ = ferry_nl::notify_all(cmd, 128, |w| {
            w.put_u32(dev_ev::INDEX, index)?;
            w.put_str(dev_ev::NAME, name)
        });
    }

    /// Multicasts a listener's state to the group in its namespace.
    fn listener_changed(&self, l: &Listener) {
        let Some(ferry) = Ferry::get() else {
            return;
        };
        let _ = ferry_nl::notify(ferry_nl::cmd::LISTENER_NTF, LISTENER_SIZE, &l.net, |w| {
            fill_listener(w, &ferry, l)
        });
    }
}

/// `service-get` dump, by name.
pub(crate) fn service_get_dumpit(dump: &mut Dump<'_>) -> Result {
    let ferry = Ferry::get().ok_or(ENODEV)?;
    let services = ferry.services()?;
    let sessions = ferry.sessions()?;
    // CAST: a position is an index into the list.
    for (i, svc) in services.iter().enumerate().skip(*dump.position() as usize) {
        let n = sessions
            .iter()
            .filter(|s| s.net.as_raw() == dump.net().as_raw() && s.belongs_to(svc.key()))
            .count();
        dump.entry(|w| {
            w.put_str(sv_attr::NAME, svc.name.as_cstr())?;
            w.put_u32(sv_attr::SESSIONS, u32::try_from(n).unwrap_or(u32::MAX))
        })?;
        // CAST: an index fits in 64 bits.
        *dump.position() = i as u64 + 1;
    }
    Ok(())
}
