// SPDX-License-Identifier: GPL-2.0
//! The `session` object: all traffic between this host and one peer for one
//! service, over one or more channels (RC connections).

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use crate::{
    args::{self, KwArgs},
    attr::{self, Attrs},
    matches,
    nl::{self, Error},
    uapi::{enum_names, *},
    usage, CliError, Ctx, Output,
};

/// One channel of a session.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Channel {
    pub index: u32,
    pub qp_num: Option<u32>,
    pub device: Option<String>,
    pub comp_vector: Option<u32>,
    pub credits: Option<u32>,
    pub rtt_us: Option<u32>,
    /// Bytes of memory its message buffers and responder entries hold.
    pub mem_bytes: Option<u32>,
    /// The channel's counters, as for a session.
    pub stats: Option<Vec<(&'static str, u64)>>,
    /// The channel's completion queue.
    pub cq: Option<Cq>,
    /// The consumer polls the channel itself (its CQ's poll context is then
    /// `direct`).
    pub polled: bool,
}

/// A channel's completion queue, from ib_core.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Cq {
    /// Resource-tracking id, as `cqn` in `rdma res show cq`.
    pub id: u32,
    pub cqe: u32,
    pub comp_vector: u32,
    pub poll_ctx: Option<u32>,
}

/// A session as ferry reports it (in replies and in notifications).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Session {
    pub id: u32,
    pub role: Option<u32>,
    pub state: Option<u32>,
    pub addr: Option<IpAddr>,
    pub port: Option<u16>,
    pub service: Option<String>,
    pub channels: Option<u32>,
    pub queue_depth: Option<u32>,
    pub peer_queue_depth: Option<u32>,
    pub max_msg_size: Option<u32>,
    pub heartbeat_ms: Option<u32>,
    pub timeout_ms: Option<u32>,
    pub give_up_s: Option<u32>,
    pub reason: Option<u32>,
    pub reconnects: Option<u32>,
    pub credits: Option<u32>,
    pub rtt_us: Option<u32>,
    pub session_id: Option<u64>,
    pub listener: Option<u32>,
    pub key: Option<String>,
    pub channel_list: Vec<Channel>,
    /// (key, value) of the counters, in spec order; `None` without the nest.
    pub stats: Option<Vec<(&'static str, u64)>>,
}

/// The counters of the `stats` nest and their keys.
const STATS: [(u32, &str); 23] = [
    (FERRY_A_STATS_TX_MSGS, "tx_msgs"),
    (FERRY_A_STATS_RX_MSGS, "rx_msgs"),
    (FERRY_A_STATS_TX_BYTES, "tx_bytes"),
    (FERRY_A_STATS_RX_BYTES, "rx_bytes"),
    (FERRY_A_STATS_HEARTBEATS_TX, "heartbeats_tx"),
    (FERRY_A_STATS_HEARTBEATS_RX, "heartbeats_rx"),
    (FERRY_A_STATS_CREDIT_UPDATES, "credit_updates"),
    (FERRY_A_STATS_CREDIT_STALLS, "credit_stalls"),
    (FERRY_A_STATS_WC_ERRORS, "wc_errors"),
    (FERRY_A_STATS_FLUSH_ERRORS, "flush_errors"),
    (FERRY_A_STATS_DATA_TX, "data_tx"),
    (FERRY_A_STATS_DATA_RX, "data_rx"),
    (FERRY_A_STATS_RX_UNCLAIMED, "rx_unclaimed"),
    (FERRY_A_STATS_REQUESTS_TX, "requests_tx"),
    (FERRY_A_STATS_REQUESTS_RX, "requests_rx"),
    (FERRY_A_STATS_REGISTRATIONS, "registrations"),
    (FERRY_A_STATS_INV_REMOTE, "inv_remote"),
    (FERRY_A_STATS_INV_LOCAL, "inv_local"),
    (FERRY_A_STATS_RDMA_BYTES, "rdma_bytes"),
    (FERRY_A_STATS_POLLED, "polled"),
    (FERRY_A_STATS_INLINE, "inline"),
    (FERRY_A_STATS_PROBES, "probes"),
    (FERRY_A_STATS_EARLY_ANSWERS, "early_answers"),
];

/// Keys of failed work completions by status (`enum ib_wc_status`, whose
/// names they follow): `wc_` and the status, e.g. `wc_rem_access_err`.
const WC_STATUS: [&str; 22] = [
    "wc_success",
    "wc_loc_len_err",
    "wc_loc_qp_op_err",
    "wc_loc_eec_op_err",
    "wc_loc_prot_err",
    "wc_wr_flush_err",
    "wc_mw_bind_err",
    "wc_bad_resp_err",
    "wc_loc_access_err",
    "wc_rem_inv_req_err",
    "wc_rem_access_err",
    "wc_rem_op_err",
    "wc_retry_exc_err",
    "wc_rnr_retry_exc_err",
    "wc_loc_rdd_viol_err",
    "wc_rem_inv_rd_req_err",
    "wc_rem_abort_err",
    "wc_inv_eecn_err",
    "wc_inv_eec_state_err",
    "wc_fatal_err",
    "wc_resp_timeout_err",
    "wc_general_err",
];

fn bad(what: &str) -> Error {
    Error::Protocol(format!("malformed session {what} attribute"))
}

/// The spec name of an enum value (from the uapi header, see build.rs), or the
/// number for a value this ferryctl does not know.
pub fn enum_name(table: &[(u32, &str)], v: u32) -> String {
    table
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| v.to_string())
}

/// `client`, `server`.
pub fn role_name(v: u32) -> String {
    enum_name(enum_names::FERRY_ROLE, v)
}

/// `connecting`, `connected`, `reconnecting`, `closing`, `closed`.
pub fn state_name(v: u32) -> String {
    enum_name(enum_names::FERRY_SESSION_STATE, v)
}

/// `none`, `unknown-service`, `timeout`, ...
pub fn reason_name(v: u32) -> String {
    enum_name(enum_names::FERRY_REASON, v)
}

/// A CQ's poll context: `softirq`, `workqueue`, `unbound_workqueue`, `direct`
/// (the spec's names, with underscores as in the other keys and values).
pub fn poll_ctx_name(v: u32) -> String {
    enum_name(enum_names::FERRY_POLL_CTX, v).replace('-', "_")
}

impl Session {
    /// Decodes a session reply or notification. Unknown attributes are
    /// skipped, so newer kernels stay readable; known ones of the wrong size
    /// are an error, and so is a session without an id.
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let mut s = Session::default();
        let mut have_id = false;
        for (ty, p) in Attrs::new(payload) {
            let u32_of = |what| attr::u32(p).ok_or_else(|| bad(what));
            match u32::from(ty) {
                FERRY_A_SESSION_ID => {
                    s.id = u32_of("id")?;
                    have_id = true;
                }
                FERRY_A_SESSION_ROLE => s.role = Some(u32_of("role")?),
                FERRY_A_SESSION_STATE => s.state = Some(u32_of("state")?),
                FERRY_A_SESSION_ADDR => {
                    s.addr = Some(args::decode_addr(p).ok_or_else(|| bad("addr"))?)
                }
                FERRY_A_SESSION_PORT => s.port = Some(attr::u16(p).ok_or_else(|| bad("port"))?),
                FERRY_A_SESSION_SERVICE => {
                    s.service = Some(attr::string(p).ok_or_else(|| bad("service"))?)
                }
                FERRY_A_SESSION_CHANNELS => s.channels = Some(u32_of("channels")?),
                FERRY_A_SESSION_QUEUE_DEPTH => s.queue_depth = Some(u32_of("queue-depth")?),
                FERRY_A_SESSION_PEER_QUEUE_DEPTH => {
                    s.peer_queue_depth = Some(u32_of("peer-queue-depth")?)
                }
                FERRY_A_SESSION_MAX_MSG_SIZE => s.max_msg_size = Some(u32_of("max-msg-size")?),
                FERRY_A_SESSION_HEARTBEAT_MS => s.heartbeat_ms = Some(u32_of("heartbeat-ms")?),
                FERRY_A_SESSION_TIMEOUT_MS => s.timeout_ms = Some(u32_of("timeout-ms")?),
                FERRY_A_SESSION_GIVE_UP_S => s.give_up_s = Some(u32_of("give-up-s")?),
                FERRY_A_SESSION_REASON => s.reason = Some(u32_of("reason")?),
                FERRY_A_SESSION_RECONNECTS => s.reconnects = Some(u32_of("reconnects")?),
                FERRY_A_SESSION_CREDITS => s.credits = Some(u32_of("credits")?),
                FERRY_A_SESSION_RTT_US => s.rtt_us = Some(u32_of("rtt-us")?),
                FERRY_A_SESSION_SESSION_ID => {
                    s.session_id = Some(attr::u64(p).ok_or_else(|| bad("session-id"))?)
                }
                FERRY_A_SESSION_LISTENER => s.listener = Some(u32_of("listener")?),
                FERRY_A_SESSION_KEY => s.key = Some(attr::string(p).ok_or_else(|| bad("key"))?),
                FERRY_A_SESSION_CHANNEL => s.channel_list.push(decode_channel(p)?),
                FERRY_A_SESSION_STATS => s.stats = Some(decode_stats(p)?),
                _ => {}
            }
        }
        if !have_id {
            return Err(Error::Protocol("session without an id".into()));
        }
        Ok(s)
    }

    /// The JSON object: stable snake_case keys; `channel_list` always, `stats`
    /// with `stats` (`-s`).
    pub fn to_json(&self, stats: bool) -> Value {
        let mut o = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        };
        put("id", Some(json!(self.id)));
        put("role", self.role.map(|v| json!(role_name(v))));
        put("state", self.state.map(|v| json!(state_name(v))));
        put("addr", self.addr.map(|a| json!(a.to_string())));
        put("port", self.port.map(|v| json!(v)));
        put("service", self.service.as_ref().map(|v| json!(v)));
        put("channels", self.channels.map(|v| json!(v)));
        put("queue_depth", self.queue_depth.map(|v| json!(v)));
        put("peer_queue_depth", self.peer_queue_depth.map(|v| json!(v)));
        put("max_msg_size", self.max_msg_size.map(|v| json!(v)));
        put("heartbeat_ms", self.heartbeat_ms.map(|v| json!(v)));
        put("timeout_ms", self.timeout_ms.map(|v| json!(v)));
        put("give_up_s", self.give_up_s.map(|v| json!(v)));
        put("reason", self.reason.map(|v| json!(reason_name(v))));
        put("reconnects", self.reconnects.map(|v| json!(v)));
        put("credits", self.credits.map(|v| json!(v)));
        put("rtt_us", self.rtt_us.map(|v| json!(v)));
        put("session_id", self.session_id.map(|v| json!(v)));
        put("listener", self.listener.map(|v| json!(v)));
        put("key", self.key.as_ref().map(|v| json!(v)));
        let channels = self
            .channel_list
            .iter()
            .map(|c| channel_json(c, stats))
            .collect();
        put("channel_list", Some(Value::Array(channels)));
        if stats {
            put("stats", self.stats.as_ref().map(|s| stats_json(s)));
            put("mem_bytes", self.mem_bytes().map(|v| json!(v)));
        }
        Value::Object(o)
    }

    /// The bytes of memory the channels' buffers and entries hold, if the
    /// kernel told any.
    pub fn mem_bytes(&self) -> Option<u64> {
        self.channel_list
            .iter()
            .filter_map(|c| c.mem_bytes)
            .fold(None, |sum, v| Some(sum.unwrap_or(0) + u64::from(v)))
    }

    /// The first text line, without its newline: `session 3 client connected
    /// peer 192.0.2.2 port 4791 service echo ...`, `reason` unless none.
    pub fn summary(&self) -> String {
        let mut s = format!("session {}", self.id);
        if let Some(v) = self.role {
            s += &format!(" {}", role_name(v));
        }
        if let Some(v) = self.state {
            s += &format!(" {}", state_name(v));
        }
        if let Some(a) = self.addr {
            s += &format!(" peer {a}");
        }
        if let Some(p) = self.port {
            s += &format!(" port {p}");
        }
        if let Some(v) = &self.service {
            s += &format!(" service {v}");
        }
        for (key, v) in [
            ("channels", self.channels),
            ("queue_depth", self.queue_depth),
            ("peer_queue_depth", self.peer_queue_depth),
            ("max_msg_size", self.max_msg_size),
            ("credits", self.credits),
            ("rtt_us", self.rtt_us),
            ("reconnects", self.reconnects),
            ("heartbeat_ms", self.heartbeat_ms),
            ("timeout_ms", self.timeout_ms),
            ("give_up_s", self.give_up_s),
        ] {
            if let Some(v) = v {
                s += &format!(" {key} {v}");
            }
        }
        if let Some(v) = self.session_id {
            s += &format!(" session_id {v:#018x}");
        }
        if let Some(v) = self.listener {
            s += &format!(" listener {v}");
        }
        if let Some(v) = &self.key {
            s += &format!(" key {v}");
        }
        if let Some(v) = self.reason.filter(|&r| r != FERRY_REASON_NONE) {
            s += &format!(" reason {}", reason_name(v));
        }
        s
    }

    /// The text form: the summary line, with `stats` a line of counters, with
    /// `details` a line per channel.
    pub fn to_text(&self, details: bool, stats: bool) -> String {
        let mut s = self.summary();
        s.push('\n');
        if let Some(counters) = self.stats.as_ref().filter(|_| stats) {
            let mut counters = counters.clone();
            if let Some(v) = self.mem_bytes() {
                counters.push(("mem_bytes", v));
            }
            s += &counters_line("    ", &counters);
        }
        if details {
            for c in &self.channel_list {
                s += &format!("    channel {}", c.index);
                if let Some(v) = c.qp_num {
                    s += &format!(" qp {v}");
                }
                if let Some(v) = &c.device {
                    s += &format!(" dev {v}");
                }
                for (key, v) in [
                    ("comp_vector", c.comp_vector),
                    ("credits", c.credits),
                    ("rtt_us", c.rtt_us),
                    ("mem_bytes", c.mem_bytes.filter(|_| stats)),
                ] {
                    if let Some(v) = v {
                        s += &format!(" {key} {v}");
                    }
                }
                if let Some(cq) = &c.cq {
                    s += &format!(" cq {} cqe {}", cq.id, cq.cqe);
                    if let Some(v) = cq.poll_ctx {
                        s += &format!(" poll_ctx {}", poll_ctx_name(v));
                    }
                }
                if c.polled {
                    s += " polled";
                }
                s.push('\n');
                if let Some(counters) = c.stats.as_ref().filter(|_| stats) {
                    s += &counters_line("        ", counters);
                }
            }
        }
        s
    }
}

/// `indent` and the counters as `key value` pairs on one line.
fn counters_line(indent: &str, counters: &[(&'static str, u64)]) -> String {
    // Each pair brings its own leading space.
    let mut s = indent.get(1..).unwrap_or_default().to_string();
    for (k, v) in counters {
        s += &format!(" {k} {v}");
    }
    s.push('\n');
    s
}

fn decode_channel(p: &[u8]) -> Result<Channel, Error> {
    let mut c = Channel::default();
    for (ty, v) in Attrs::new(p) {
        let val = || attr::u32(v).ok_or_else(|| bad("channel"));
        match u32::from(ty) {
            FERRY_A_CHANNEL_INDEX => c.index = val()?,
            FERRY_A_CHANNEL_QP_NUM => c.qp_num = Some(val()?),
            FERRY_A_CHANNEL_DEVICE => {
                c.device = Some(attr::string(v).ok_or_else(|| bad("channel device"))?)
            }
            FERRY_A_CHANNEL_COMP_VECTOR => c.comp_vector = Some(val()?),
            FERRY_A_CHANNEL_CREDITS => c.credits = Some(val()?),
            FERRY_A_CHANNEL_RTT_US => c.rtt_us = Some(val()?),
            FERRY_A_CHANNEL_MEM_BYTES => c.mem_bytes = Some(val()?),
            FERRY_A_CHANNEL_STATS => c.stats = Some(decode_stats(v)?),
            FERRY_A_CHANNEL_CQ => c.cq = Some(decode_cq(v)?),
            FERRY_A_CHANNEL_POLLED if v.is_empty() => c.polled = true,
            FERRY_A_CHANNEL_POLLED => return Err(bad("channel polled")),
            _ => {}
        }
    }
    Ok(c)
}

fn decode_cq(p: &[u8]) -> Result<Cq, Error> {
    let mut cq = Cq::default();
    for (ty, v) in Attrs::new(p) {
        let val = |what| attr::u32(v).ok_or_else(|| bad(what));
        match u32::from(ty) {
            FERRY_A_CQ_ID => cq.id = val("cq id")?,
            FERRY_A_CQ_CQE => cq.cqe = val("cq cqe")?,
            FERRY_A_CQ_COMP_VECTOR => cq.comp_vector = val("cq comp-vector")?,
            FERRY_A_CQ_POLL_CTX => cq.poll_ctx = Some(val("cq poll-ctx")?),
            _ => {}
        }
    }
    Ok(cq)
}

fn decode_stats(p: &[u8]) -> Result<Vec<(&'static str, u64)>, Error> {
    let mut counters = Vec::new();
    for (ty, v) in Attrs::new(p) {
        if let Some((_, key)) = STATS.iter().find(|(a, _)| *a == u32::from(ty)) {
            counters.push((*key, attr::u64(v).ok_or_else(|| bad("stats"))?));
        } else if u32::from(ty) == FERRY_A_STATS_WC_STATUS {
            // A status this ferryctl cannot name (from a newer kernel) is left out.
            if let Some(c) = decode_wc_status(v)? {
                counters.push(c);
            }
        }
    }
    Ok(counters)
}

/// One `wc-status` nest: the status's key and its count, or `None` for a
/// status without a name here.
fn decode_wc_status(p: &[u8]) -> Result<Option<(&'static str, u64)>, Error> {
    let (mut status, mut count) = (None, None);
    for (ty, v) in Attrs::new(p) {
        match u32::from(ty) {
            FERRY_A_WC_STATUS_STATUS => status = attr::u32(v),
            FERRY_A_WC_STATUS_COUNT => count = attr::u64(v),
            _ => {}
        }
    }
    let (Some(status), Some(count)) = (status, count) else {
        return Err(bad("wc-status"));
    };
    Ok(WC_STATUS.get(status as usize).map(|key| (*key, count)))
}

fn channel_json(c: &Channel, stats: bool) -> Value {
    let mut o = Map::new();
    o.insert("index".into(), json!(c.index));
    if let Some(v) = c.qp_num {
        o.insert("qp_num".into(), json!(v));
    }
    if let Some(v) = &c.device {
        o.insert("device".into(), json!(v));
    }
    if let Some(v) = c.comp_vector {
        o.insert("comp_vector".into(), json!(v));
    }
    if let Some(v) = c.credits {
        o.insert("credits".into(), json!(v));
    }
    if let Some(v) = c.rtt_us {
        o.insert("rtt_us".into(), json!(v));
    }
    if let Some(v) = c.mem_bytes {
        o.insert("mem_bytes".into(), json!(v));
    }
    if let Some(cq) = &c.cq {
        o.insert("cq".into(), cq_json(cq));
    }
    o.insert("polled".into(), json!(c.polled));
    if let Some(v) = c.stats.as_ref().filter(|_| stats) {
        o.insert("stats".into(), stats_json(v));
    }
    Value::Object(o)
}

fn cq_json(cq: &Cq) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), json!(cq.id));
    o.insert("cqe".into(), json!(cq.cqe));
    o.insert("comp_vector".into(), json!(cq.comp_vector));
    if let Some(v) = cq.poll_ctx {
        o.insert("poll_ctx".into(), json!(poll_ctx_name(v)));
    }
    Value::Object(o)
}

fn stats_json(counters: &[(&'static str, u64)]) -> Value {
    let mut o = Map::new();
    for (k, v) in counters {
        o.insert((*k).into(), json!(v));
    }
    Value::Object(o)
}

/// Names of the `session` attributes, for error messages.
pub fn attr_name(ty: u16) -> Option<&'static str> {
    Some(match u32::from(ty) {
        FERRY_A_SESSION_ID => "id",
        FERRY_A_SESSION_ADDR => "addr",
        FERRY_A_SESSION_PORT => "port",
        FERRY_A_SESSION_SERVICE => "service",
        FERRY_A_SESSION_CHANNELS => "channels",
        FERRY_A_SESSION_QUEUE_DEPTH => "queue-depth",
        FERRY_A_SESSION_MAX_MSG_SIZE => "max-msg-size",
        FERRY_A_SESSION_HEARTBEAT_MS => "heartbeat-ms",
        FERRY_A_SESSION_TIMEOUT_MS => "timeout-ms",
        FERRY_A_SESSION_GIVE_UP_S => "give-up-s",
        FERRY_A_SESSION_KEY => "key",
        _ => return None,
    })
}

/// `session connect`'s arguments. The options left out are the kernel's to
/// choose.
#[derive(Debug, Clone, PartialEq)]
pub struct Connect {
    pub addr: IpAddr,
    pub port: u16,
    pub service: String,
    /// (attribute, value) of the options given, in spec order.
    pub options: Vec<(u32, u32)>,
    /// The pre-shared key to prove, by name.
    pub key: Option<String>,
}

/// The options of `session connect`: keyword, attribute.
const CONNECT_OPTIONS: [(&str, u32); 6] = [
    ("channels", FERRY_A_SESSION_CHANNELS),
    ("queue-depth", FERRY_A_SESSION_QUEUE_DEPTH),
    ("max-msg-size", FERRY_A_SESSION_MAX_MSG_SIZE),
    ("heartbeat-ms", FERRY_A_SESSION_HEARTBEAT_MS),
    ("timeout-ms", FERRY_A_SESSION_TIMEOUT_MS),
    ("give-up-s", FERRY_A_SESSION_GIVE_UP_S),
];

/// A parsed `session` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `session connect ADDR port PORT service NAME [OPTIONS]`
    Connect(Connect),
    /// `session disconnect id ID`
    Disconnect { id: u32 },
    /// `session show [id ID]`
    Show { id: Option<u32> },
}

impl Cmd {
    /// Parses `session COMMAND ARGS`; `None` is `help`.
    pub fn parse(command: &str, args: &[String]) -> Result<Option<Self>, CliError> {
        if matches(command, "show") || matches(command, "list") {
            Self::show(args)
        } else if matches(command, "connect") {
            let mut keys = vec!["addr|peer", "port", "service", "key"];
            keys.extend(CONNECT_OPTIONS.iter().map(|(k, _)| *k));
            let kw = KwArgs::parse(args, &keys, Some("addr"))?;
            let addr = args::parse_addr(kw.required("addr")?)?;
            let port = args::number("port", kw.required("port")?)?;
            let service = kw.required("service")?.to_string();
            if service.is_empty() || service.len() > FERRY_SERVICE_NAME_LEN as usize {
                return Err(usage(format!(
                    "invalid service \"{service}\" (1 to {FERRY_SERVICE_NAME_LEN} bytes)"
                )));
            }
            let mut options = Vec::new();
            for (key, attr) in CONNECT_OPTIONS {
                if let Some(v) = kw.num::<u32>(key)? {
                    options.push((attr, v));
                }
            }
            let key = kw.get("key").map(crate::key::name).transpose()?;
            Ok(Some(Cmd::Connect(Connect {
                addr,
                port,
                service,
                options,
                key,
            })))
        } else if matches(command, "disconnect") {
            Ok(Some(Cmd::Disconnect {
                id: args::required_id(args)?,
            }))
        } else if matches(command, "help") {
            Ok(None)
        } else if let Some(all) = args::show_shortcut(command, args) {
            // `ferryctl session 3`, `ferryctl session id 3`
            Self::show(&all)
        } else {
            Err(usage(format!("unknown session command \"{command}\"")))
        }
    }

    fn show(args: &[String]) -> Result<Option<Self>, CliError> {
        let kw = KwArgs::parse(args, &["id"], Some("id"))?;
        Ok(Some(Cmd::Show { id: kw.num("id")? }))
    }

    /// The request: command, netlink flags and attributes.
    pub fn request(&self) -> (u32, u16, nl::Builder) {
        let b = nl::Builder::new();
        match self {
            Cmd::Connect(c) => {
                let mut b = b
                    .binary(FERRY_A_SESSION_ADDR, &args::addr_bytes(&c.addr))
                    .u16(FERRY_A_SESSION_PORT, c.port)
                    .str(FERRY_A_SESSION_SERVICE, &c.service);
                for (attr, v) in &c.options {
                    b = b.u32(*attr, *v);
                }
                if let Some(k) = &c.key {
                    b = b.str(FERRY_A_SESSION_KEY, k);
                }
                (FERRY_CMD_SESSION_CONNECT, 0, b)
            }
            Cmd::Disconnect { id } => (
                FERRY_CMD_SESSION_DISCONNECT,
                0,
                b.u32(FERRY_A_SESSION_ID, *id),
            ),
            Cmd::Show { id: Some(id) } => {
                (FERRY_CMD_SESSION_GET, 0, b.u32(FERRY_A_SESSION_ID, *id))
            }
            Cmd::Show { id: None } => (FERRY_CMD_SESSION_GET, nl::NLM_F_DUMP, b),
        }
    }
}

/// Runs a parsed command: `connect` and `show` print sessions, `disconnect`
/// nothing.
pub fn exec(ctx: &mut Ctx, cmd: &Cmd) -> Result<Option<Output>, CliError> {
    let (op, flags, req) = cmd.request();
    let replies = ctx.request(op, flags, &req, attr_name)?;
    if let Cmd::Disconnect { .. } = cmd {
        return Ok(None);
    }
    let mut sessions = Vec::new();
    for r in &replies {
        sessions.push(Session::decode(r).map_err(|e| CliError::Kernel(e, attr_name))?);
    }
    Ok(Some(Output {
        json: sessions.iter().map(|s| s.to_json(ctx.stats)).collect(),
        text: sessions
            .iter()
            .map(|s| s.to_text(ctx.details, ctx.stats))
            .collect(),
    }))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::nl::Builder;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn parse(s: &str) -> Result<Option<Cmd>, CliError> {
        let a = args(s);
        Cmd::parse(&a[0], &a[1..])
    }

    fn usage_msg(s: &str) -> String {
        match parse(s) {
            Err(CliError::Usage(m)) => m,
            _ => panic!("{s} was no usage error"),
        }
    }

    pub fn nest(ty: u32, inner: &[u8]) -> Vec<u8> {
        let mut v = ((inner.len() + 4) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&((ty as u16) | 0x8000).to_ne_bytes());
        v.extend_from_slice(inner);
        v.resize(v.len().next_multiple_of(4), 0);
        v
    }

    fn u64_attr(ty: u32, v: u64) -> Vec<u8> {
        let mut b = 12u16.to_ne_bytes().to_vec();
        b.extend_from_slice(&(ty as u16).to_ne_bytes());
        b.extend_from_slice(&v.to_ne_bytes());
        b
    }

    /// A server session as the kernel would send it, with two channels and
    /// statistics.
    pub fn sample() -> Vec<u8> {
        let mut b = Builder::new()
            .u32(FERRY_A_SESSION_ID, 3)
            .u32(FERRY_A_SESSION_ROLE, FERRY_ROLE_SERVER)
            .u32(FERRY_A_SESSION_STATE, FERRY_SESSION_STATE_RECONNECTING)
            .binary(FERRY_A_SESSION_ADDR, &[192, 0, 2, 2])
            .u16(FERRY_A_SESSION_PORT, 4791)
            .str(FERRY_A_SESSION_SERVICE, "echo")
            .u32(FERRY_A_SESSION_CHANNELS, 2)
            .u32(FERRY_A_SESSION_QUEUE_DEPTH, 128)
            .u32(FERRY_A_SESSION_PEER_QUEUE_DEPTH, 64)
            .u32(FERRY_A_SESSION_MAX_MSG_SIZE, 4096)
            .u32(FERRY_A_SESSION_HEARTBEAT_MS, 1000)
            .u32(FERRY_A_SESSION_TIMEOUT_MS, 5000)
            .u32(FERRY_A_SESSION_GIVE_UP_S, 600)
            .u32(FERRY_A_SESSION_REASON, FERRY_REASON_UNKNOWN_SERVICE)
            .u32(FERRY_A_SESSION_RECONNECTS, 1)
            .u32(FERRY_A_SESSION_CREDITS, 254)
            .u32(FERRY_A_SESSION_RTT_US, 210)
            .u32(FERRY_A_SESSION_LISTENER, 1)
            .u32(999, 7) // an attribute from a newer kernel
            .bytes()
            .to_vec();
        b.extend(u64_attr(FERRY_A_SESSION_SESSION_ID, 0x1234_5678_9abc_def0));
        for (i, qp) in [(0, 17), (1, 18)] {
            let ch = Builder::new()
                .u32(FERRY_A_CHANNEL_INDEX, i)
                .u32(FERRY_A_CHANNEL_QP_NUM, qp)
                .str(FERRY_A_CHANNEL_DEVICE, "rxe0")
                .u32(FERRY_A_CHANNEL_COMP_VECTOR, i)
                .u32(FERRY_A_CHANNEL_CREDITS, 127)
                .u32(FERRY_A_CHANNEL_RTT_US, 200 + i);
            let mut ch = ch.bytes().to_vec();
            if i == 1 {
                let mut st = u64_attr(FERRY_A_STATS_REGISTRATIONS, 7);
                st.extend(u64_attr(FERRY_A_STATS_INV_REMOTE, 7));
                ch.extend(nest(FERRY_A_CHANNEL_STATS, &st));
            }
            b.extend(nest(FERRY_A_SESSION_CHANNEL, &ch));
        }
        let mut stats = Vec::new();
        for (i, (attr, _)) in STATS.iter().enumerate() {
            stats.extend(u64_attr(*attr, 10 * i as u64));
        }
        stats.extend(Builder::new().u32(FERRY_A_STATS_PAD, 0).bytes());
        b.extend(nest(FERRY_A_SESSION_STATS, &stats));
        b
    }

    #[test]
    fn parses_a_connect_and_encodes_its_attributes() {
        let cmd = parse(
            "connect 192.0.2.2 port 4791 service echo channels 2 queue_depth 128 \
             timeout-ms 5000",
        )
        .unwrap()
        .unwrap();
        let (op, flags, b) = cmd.request();
        assert_eq!((op, flags), (FERRY_CMD_SESSION_CONNECT, 0));
        let want = Builder::new()
            .binary(FERRY_A_SESSION_ADDR, &[192, 0, 2, 2])
            .u16(FERRY_A_SESSION_PORT, 4791)
            .str(FERRY_A_SESSION_SERVICE, "echo")
            .u32(FERRY_A_SESSION_CHANNELS, 2)
            .u32(FERRY_A_SESSION_QUEUE_DEPTH, 128)
            .u32(FERRY_A_SESSION_TIMEOUT_MS, 5000);
        assert_eq!(b.bytes(), want.bytes());
        // Byte by byte: address in network order, u16 port padded to 4.
        assert_eq!(
            &b.bytes()[..8],
            &[8, 0, FERRY_A_SESSION_ADDR as u8, 0, 192, 0, 2, 2]
        );
        let port = 4791u16.to_ne_bytes();
        assert_eq!(
            &b.bytes()[8..16],
            &[6, 0, FERRY_A_SESSION_PORT as u8, 0, port[0], port[1], 0, 0]
        );

        let all = parse(
            "c peer :: port 1 service s max-msg-size 65536 heartbeat_ms 100 give-up-s 0 \
             channels 0 key k1",
        )
        .unwrap()
        .unwrap();
        let Cmd::Connect(c) = all else {
            panic!("not a connect")
        };
        assert_eq!(c.addr, "::".parse::<IpAddr>().unwrap());
        assert_eq!(
            c.options,
            vec![
                (FERRY_A_SESSION_CHANNELS, 0),
                (FERRY_A_SESSION_MAX_MSG_SIZE, 65536),
                (FERRY_A_SESSION_HEARTBEAT_MS, 100),
                (FERRY_A_SESSION_GIVE_UP_S, 0),
            ]
        );
        assert_eq!(c.key.as_deref(), Some("k1"));
        let (_, _, b) = Cmd::Connect(c).request();
        let addr = Attrs::new(b.bytes()).get(FERRY_A_SESSION_ADDR as u16);
        assert_eq!(addr, Some(&[0u8; 16][..]));
        let key = Attrs::new(b.bytes()).get(FERRY_A_SESSION_KEY as u16);
        assert_eq!(key, Some(&b"k1\0"[..]));
    }

    #[test]
    fn other_commands() {
        assert_eq!(
            parse("disconnect id 3").unwrap(),
            Some(Cmd::Disconnect { id: 3 })
        );
        assert_eq!(parse("d 3").unwrap(), Some(Cmd::Disconnect { id: 3 }));
        assert_eq!(parse("show").unwrap(), Some(Cmd::Show { id: None }));
        assert_eq!(parse("list id 4").unwrap(), Some(Cmd::Show { id: Some(4) }));
        assert_eq!(parse("4").unwrap(), Some(Cmd::Show { id: Some(4) }));
        let (op, flags, b) = parse("show").unwrap().unwrap().request();
        assert_eq!(
            (op, flags, b.bytes().len()),
            (FERRY_CMD_SESSION_GET, nl::NLM_F_DUMP, 0)
        );
        let (op, flags, b) = parse("show 4").unwrap().unwrap().request();
        assert_eq!((op, flags), (FERRY_CMD_SESSION_GET, 0));
        assert_eq!(b.bytes(), Builder::new().u32(FERRY_A_SESSION_ID, 4).bytes());
    }

    #[test]
    fn usage_errors() {
        assert_eq!(
            usage_msg("connect 192.0.2.2 port 4791"),
            "missing \"service\""
        );
        assert_eq!(
            usage_msg("connect port 4791 service echo"),
            "missing \"addr\""
        );
        assert_eq!(usage_msg("connect ::1 service echo"), "missing \"port\"");
        assert_eq!(
            usage_msg("connect ::1 port 1 service echo channels two"),
            "invalid channels \"two\""
        );
        assert_eq!(
            usage_msg("connect ::1 port 1 service echo queue-depth 4294967296"),
            "invalid queue-depth \"4294967296\""
        );
        assert_eq!(
            usage_msg("connect ::1 port 1 service echo credits 5"),
            "unknown argument \"credits\""
        );
        assert_eq!(
            usage_msg("connect ::1 port 1 service echo timeout-ms"),
            "\"timeout-ms\" needs a value"
        );
        assert!(usage_msg("connect nohost port 1 service echo").starts_with("invalid address"));
        let long = "x".repeat(FERRY_SERVICE_NAME_LEN as usize + 1);
        assert!(
            usage_msg(&format!("connect ::1 port 1 service {long}")).starts_with("invalid service")
        );
        assert!(parse(&format!("connect ::1 port 1 service {}", &long[1..])).is_ok());
        assert_eq!(usage_msg("disconnect"), "missing \"id\"");
        assert_eq!(usage_msg("disconnect id x"), "invalid id \"x\"");
        assert_eq!(usage_msg("frob"), "unknown session command \"frob\"");
    }

    #[test]
    fn enum_names_come_from_the_header() {
        assert_eq!(reason_name(FERRY_REASON_UNKNOWN_SERVICE), "unknown-service");
        assert_eq!(reason_name(FERRY_REASON_NONE), "none");
        assert_eq!(reason_name(FERRY_REASON_CM_REJECTED), "cm-rejected");
        assert_eq!(reason_name(FERRY_REASON_RESET), "reset");
        assert_eq!(reason_name(FERRY_REASON_AUTH_FAILED), "auth-failed");
        assert_eq!(reason_name(FERRY_REASON_BUSY), "busy");
        assert_eq!(reason_name(4242), "4242");
        assert_eq!(state_name(FERRY_SESSION_STATE_CONNECTED), "connected");
        assert_eq!(state_name(FERRY_SESSION_STATE_CLOSED), "closed");
        assert_eq!(role_name(FERRY_ROLE_CLIENT), "client");
        assert_eq!(role_name(FERRY_ROLE_SERVER), "server");
        // Every entry of every table, not just the ones above.
        assert_eq!(
            enum_names::FERRY_REASON.len(),
            FERRY_REASON_BUSY as usize + 1
        );
        for (_, name) in enum_names::FERRY_REASON {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{name}"
            );
        }
    }

    #[test]
    fn decodes_channels_and_stats() {
        let s = Session::decode(&sample()).unwrap();
        assert_eq!(s.id, 3);
        assert_eq!(s.addr, Some("192.0.2.2".parse().unwrap()));
        assert_eq!(s.session_id, Some(0x1234_5678_9abc_def0));
        assert_eq!(s.channel_list.len(), 2);
        assert_eq!(
            s.channel_list[1],
            Channel {
                index: 1,
                qp_num: Some(18),
                device: Some("rxe0".into()),
                comp_vector: Some(1),
                credits: Some(127),
                rtt_us: Some(201),
                mem_bytes: None,
                stats: Some(vec![("registrations", 7), ("inv_remote", 7)]),
                cq: None,
                polled: false,
            }
        );
        assert_eq!(s.channel_list[0].stats, None);
        let stats = s.stats.as_ref().unwrap();
        assert_eq!(stats.len(), 23);
        assert_eq!(stats[0], ("tx_msgs", 0));
        assert_eq!(stats[9], ("flush_errors", 90));
        assert_eq!(stats[12], ("rx_unclaimed", 120));
        assert_eq!(stats[18], ("rdma_bytes", 180));
        assert_eq!(stats[19], ("polled", 190));
        assert_eq!(stats[20], ("inline", 200));
        assert_eq!(stats[21], ("probes", 210));
    }

    #[test]
    fn decodes_wc_status() {
        let wc = |status: u32, count: u64| {
            let mut n = Builder::new()
                .u32(FERRY_A_WC_STATUS_STATUS, status)
                .bytes()
                .to_vec();
            n.extend(u64_attr(FERRY_A_WC_STATUS_COUNT, count));
            nest(FERRY_A_STATS_WC_STATUS, &n)
        };
        let mut st = u64_attr(FERRY_A_STATS_WC_ERRORS, 1);
        st.extend(wc(5, 3));
        st.extend(wc(10, 1));
        assert_eq!(
            decode_stats(&st).unwrap(),
            vec![
                ("wc_errors", 1),
                ("wc_wr_flush_err", 3),
                ("wc_rem_access_err", 1)
            ]
        );
        // A status this ferryctl cannot name is left out; a nest without its
        // count is malformed.
        assert_eq!(decode_stats(&wc(22, 1)).unwrap(), vec![]);
        let no_count = Builder::new()
            .u32(FERRY_A_WC_STATUS_STATUS, 5)
            .bytes()
            .to_vec();
        assert!(decode_stats(&nest(FERRY_A_STATS_WC_STATUS, &no_count)).is_err());
    }

    #[test]
    fn text_form() {
        let s = Session::decode(&sample()).unwrap();
        let line = "session 3 server reconnecting peer 192.0.2.2 port 4791 service echo \
                    channels 2 queue_depth 128 peer_queue_depth 64 max_msg_size 4096 \
                    credits 254 rtt_us 210 reconnects 1 heartbeat_ms 1000 timeout_ms 5000 \
                    give_up_s 600 session_id 0x123456789abcdef0 listener 1 \
                    reason unknown-service\n";
        assert_eq!(s.to_text(false, false), line);
        let stats = "    tx_msgs 0 rx_msgs 10 tx_bytes 20 rx_bytes 30 heartbeats_tx 40 \
                     heartbeats_rx 50 credit_updates 60 credit_stalls 70 wc_errors 80 \
                     flush_errors 90 data_tx 100 data_rx 110 rx_unclaimed 120 requests_tx 130 \
                     requests_rx 140 registrations 150 inv_remote 160 inv_local 170 \
                     rdma_bytes 180 polled 190 inline 200 probes 210 early_answers 220\n";
        assert_eq!(s.to_text(false, true), format!("{line}{stats}"));
        let channels = "    channel 0 qp 17 dev rxe0 comp_vector 0 credits 127 rtt_us 200\n    \
                        channel 1 qp 18 dev rxe0 comp_vector 1 credits 127 rtt_us 201\n";
        assert_eq!(s.to_text(true, false), format!("{line}{channels}"));
        let ch_stats = "        registrations 7 inv_remote 7\n";
        assert_eq!(
            s.to_text(true, true),
            format!("{line}{stats}{channels}{ch_stats}")
        );

        // A client without a reason to report, and a small session id.
        let mut b = Builder::new()
            .u32(FERRY_A_SESSION_ID, 4)
            .u32(FERRY_A_SESSION_ROLE, FERRY_ROLE_CLIENT)
            .u32(FERRY_A_SESSION_STATE, FERRY_SESSION_STATE_CONNECTED)
            .u32(FERRY_A_SESSION_REASON, FERRY_REASON_NONE)
            .bytes()
            .to_vec();
        b.extend(u64_attr(FERRY_A_SESSION_SESSION_ID, 0x1234));
        let s = Session::decode(&b).unwrap();
        assert_eq!(
            s.to_text(true, true),
            "session 4 client connected session_id 0x0000000000001234\n"
        );
    }

    #[test]
    fn json_form() {
        let s = Session::decode(&sample()).unwrap();
        let j = s.to_json(false);
        let keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "id",
                "role",
                "state",
                "addr",
                "port",
                "service",
                "channels",
                "queue_depth",
                "peer_queue_depth",
                "max_msg_size",
                "heartbeat_ms",
                "timeout_ms",
                "give_up_s",
                "reason",
                "reconnects",
                "credits",
                "rtt_us",
                "session_id",
                "listener",
                "channel_list",
            ]
        );
        assert_eq!(j["role"], "server");
        assert_eq!(j["state"], "reconnecting");
        assert_eq!(j["reason"], "unknown-service");
        assert_eq!(j["addr"], "192.0.2.2");
        assert_eq!(j["session_id"], 0x1234_5678_9abc_def0u64);
        assert_eq!(
            j["channel_list"][0],
            json!({"index": 0, "qp_num": 17, "device": "rxe0", "comp_vector": 0,
                   "credits": 127, "rtt_us": 200, "polled": false})
        );
        let j = s.to_json(true);
        assert_eq!(j["stats"]["tx_bytes"], 20);
        assert_eq!(j["stats"]["flush_errors"], 90);
        assert_eq!(j["stats"]["data_rx"], 110);
        assert_eq!(j["stats"].as_object().unwrap().len(), 23);
        assert_eq!(j["stats"]["polled"], 190);
        assert_eq!(j["stats"]["inline"], 200);

        // A session reported with only its id still has a channel list.
        let s = Session::decode(Builder::new().u32(FERRY_A_SESSION_ID, 9).bytes()).unwrap();
        assert_eq!(s.to_json(true), json!({"id": 9, "channel_list": []}));
    }

    /// A session with an ordinary channel and a polled one, each with its CQ.
    fn sample_with_cqs() -> Vec<u8> {
        let mut b = Builder::new().u32(FERRY_A_SESSION_ID, 5).bytes().to_vec();
        for (i, cq_id, poll_ctx, polled) in [
            (0, 12, FERRY_POLL_CTX_WORKQUEUE, false),
            (1, 13, FERRY_POLL_CTX_DIRECT, true),
        ] {
            let cq = Builder::new()
                .u32(FERRY_A_CQ_ID, cq_id)
                .u32(FERRY_A_CQ_CQE, 513)
                .u32(FERRY_A_CQ_COMP_VECTOR, i)
                .u32(FERRY_A_CQ_POLL_CTX, poll_ctx)
                .u32(999, 7); // an attribute from a newer kernel
            let mut ch = Builder::new()
                .u32(FERRY_A_CHANNEL_INDEX, i)
                .u32(FERRY_A_CHANNEL_QP_NUM, 17 + i)
                .u32(FERRY_A_CHANNEL_COMP_VECTOR, i)
                .bytes()
                .to_vec();
            ch.extend(nest(FERRY_A_CHANNEL_CQ, cq.bytes()));
            if polled {
                ch.extend(Builder::new().binary(FERRY_A_CHANNEL_POLLED, &[]).bytes());
            }
            b.extend(nest(FERRY_A_SESSION_CHANNEL, &ch));
        }
        b
    }

    #[test]
    fn memory_per_channel_and_in_all_with_stats() {
        let mut b = Builder::new().u32(FERRY_A_SESSION_ID, 5).bytes().to_vec();
        b.extend(nest(FERRY_A_SESSION_STATS, Builder::new().bytes()));
        for (i, mem) in [(0, 3_149_824), (1, 1_052_672)] {
            let ch = Builder::new()
                .u32(FERRY_A_CHANNEL_INDEX, i)
                .u32(FERRY_A_CHANNEL_MEM_BYTES, mem);
            b.extend(nest(FERRY_A_SESSION_CHANNEL, ch.bytes()));
        }
        let s = Session::decode(&b).unwrap();
        assert_eq!(s.channel_list[1].mem_bytes, Some(1_052_672));
        assert_eq!(s.mem_bytes(), Some(4_202_496));
        let text = s.to_text(true, true);
        assert!(text.contains("    mem_bytes 4202496\n"), "{text}");
        assert!(text.contains("channel 0 mem_bytes 3149824\n"), "{text}");
        // Without -s, neither.
        assert!(!s.to_text(true, false).contains("mem_bytes"));
        assert_eq!(s.to_json(true)["mem_bytes"], json!(4_202_496));
        assert_eq!(
            s.to_json(true)["channel_list"][0]["mem_bytes"],
            json!(3_149_824)
        );
        // An older kernel tells none: nothing is made up.
        let old = Session::decode(&sample_with_cqs()).unwrap();
        assert_eq!(old.mem_bytes(), None);
    }

    #[test]
    fn channel_cq_and_polled() {
        let s = Session::decode(&sample_with_cqs()).unwrap();
        assert_eq!(
            s.channel_list[1],
            Channel {
                index: 1,
                qp_num: Some(18),
                comp_vector: Some(1),
                cq: Some(Cq {
                    id: 13,
                    cqe: 513,
                    comp_vector: 1,
                    poll_ctx: Some(FERRY_POLL_CTX_DIRECT),
                }),
                polled: true,
                ..Default::default()
            }
        );
        assert!(!s.channel_list[0].polled);

        assert_eq!(
            s.to_text(true, false),
            "session 5\n    \
             channel 0 qp 17 comp_vector 0 cq 12 cqe 513 poll_ctx workqueue\n    \
             channel 1 qp 18 comp_vector 1 cq 13 cqe 513 poll_ctx direct polled\n"
        );
        assert_eq!(s.to_text(false, false), "session 5\n");

        let j = s.to_json(false);
        assert_eq!(
            j["channel_list"],
            json!([
                {"index": 0, "qp_num": 17, "comp_vector": 0,
                 "cq": {"id": 12, "cqe": 513, "comp_vector": 0, "poll_ctx": "workqueue"},
                 "polled": false},
                {"index": 1, "qp_num": 18, "comp_vector": 1,
                 "cq": {"id": 13, "cqe": 513, "comp_vector": 1, "poll_ctx": "direct"},
                 "polled": true},
            ])
        );
        let keys: Vec<&str> = j["channel_list"][1]
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys, ["index", "qp_num", "comp_vector", "cq", "polled"]);

        assert_eq!(poll_ctx_name(FERRY_POLL_CTX_SOFTIRQ), "softirq");
        assert_eq!(
            poll_ctx_name(FERRY_POLL_CTX_UNBOUND_WORKQUEUE),
            "unbound_workqueue"
        );
        assert_eq!(poll_ctx_name(42), "42");
    }

    #[test]
    fn malformed_channel_cq_and_polled() {
        let session = |ch: &[u8]| {
            let mut b = Builder::new().u32(FERRY_A_SESSION_ID, 1).bytes().to_vec();
            b.extend(nest(FERRY_A_SESSION_CHANNEL, ch));
            Session::decode(&b)
        };
        let polled_with_payload = Builder::new().u32(FERRY_A_CHANNEL_POLLED, 1);
        assert!(session(polled_with_payload.bytes()).is_err());
        let short_cqe = Builder::new().u16(FERRY_A_CQ_CQE, 1);
        assert!(session(&nest(FERRY_A_CHANNEL_CQ, short_cqe.bytes())).is_err());
    }

    #[test]
    fn malformed_sessions() {
        let no_id = Builder::new().u32(FERRY_A_SESSION_STATE, 1);
        assert!(Session::decode(no_id.bytes()).is_err());
        let short_port = Builder::new()
            .u32(FERRY_A_SESSION_ID, 1)
            .u32(FERRY_A_SESSION_PORT, 4791);
        assert!(Session::decode(short_port.bytes()).is_err());
        let mut bad_stats = Builder::new().u32(FERRY_A_SESSION_ID, 1).bytes().to_vec();
        bad_stats.extend(nest(
            FERRY_A_SESSION_STATS,
            Builder::new().u32(FERRY_A_STATS_TX_MSGS, 1).bytes(),
        ));
        assert!(Session::decode(&bad_stats).is_err());
    }
}
