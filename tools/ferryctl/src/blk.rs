// SPDX-License-Identifier: GPL-2.0
//! The `blk` object: ferry_blk's exports (this host's block devices, served
//! to clients) and mappings (other hosts' exports as local disks), over the
//! `ferry-blk` netlink family.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use crate::{
    args::{self, KwArgs},
    attr::{self, Attrs},
    matches,
    nl::{self, Error},
    uapi::*,
    usage, CliError, Ctx, Output,
};

/// The port a mapping connects to when none is given: the samples' and the
/// demo's listener.
pub const DEFAULT_PORT: u16 = 4791;

/// Names of the export and map attributes, for error messages.
fn export_attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_BLK_A_EXPORT_NAME => Some("name"),
        FERRY_BLK_A_EXPORT_PATH => Some("path"),
        FERRY_BLK_A_EXPORT_READ_ONLY => Some("ro"),
        FERRY_BLK_A_EXPORT_SHARED => Some("shared"),
        FERRY_BLK_A_EXPORT_FORCE => Some("force"),
        FERRY_BLK_A_EXPORT_UUID => Some("uuid"),
        _ => None,
    }
}

fn map_attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_BLK_A_MAP_INDEX => Some("dev"),
        FERRY_BLK_A_MAP_ADDR => Some("addr"),
        FERRY_BLK_A_MAP_PORT => Some("port"),
        FERRY_BLK_A_MAP_EXPORT => Some("export"),
        FERRY_BLK_A_MAP_READ_ONLY => Some("ro"),
        FERRY_BLK_A_MAP_CHANNELS => Some("channels"),
        FERRY_BLK_A_MAP_DEPTH => Some("depth"),
        FERRY_BLK_A_MAP_KEY => Some("key"),
        FERRY_BLK_A_MAP_FORCE => Some("force"),
        FERRY_BLK_A_MAP_FAST_FAIL => Some("fast-fail"),
        FERRY_BLK_A_MAP_GIVE_UP => Some("give-up"),
        FERRY_BLK_A_MAP_RECONNECT_DELAY => Some("reconnect-delay"),
        FERRY_BLK_A_MAP_POLL_QUEUES => Some("poll-queues"),
        _ => None,
    }
}

/// A mapping's times given on the command line, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timers {
    /// `fast-fail S`
    pub fast_fail: Option<u32>,
    /// `give-up S`
    pub give_up: Option<u32>,
    /// `reconnect-delay S`
    pub reconnect_delay: Option<u32>,
}

impl Timers {
    const WORDS: [&'static str; 3] = ["fast-fail", "give-up", "reconnect-delay"];

    fn parse(kw: &KwArgs) -> Result<Self, CliError> {
        Ok(Self {
            fast_fail: kw.num("fast-fail")?,
            give_up: kw.num("give-up")?,
            reconnect_delay: kw.num("reconnect-delay")?,
        })
    }

    /// Adds the times given to a map or set request.
    fn put(&self, mut b: nl::Builder) -> nl::Builder {
        for (attr, v) in [
            (FERRY_BLK_A_MAP_FAST_FAIL, self.fast_fail),
            (FERRY_BLK_A_MAP_GIVE_UP, self.give_up),
            (FERRY_BLK_A_MAP_RECONNECT_DELAY, self.reconnect_delay),
        ] {
            if let Some(v) = v {
                b = b.u32(attr, v);
            }
        }
        b
    }
}

/// A parsed `blk` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `blk export add NAME path PATH [uuid UUID] [ro] [shared]`
    ExportAdd {
        name: String,
        path: String,
        uuid: Option<[u8; 16]>,
        ro: bool,
        shared: bool,
    },
    /// `blk export del NAME [force]`
    ExportDel { name: String, force: bool },
    /// `blk export resize NAME`
    ExportResize { name: String },
    /// `blk map ADDR [port P] export NAME [ro] [channels N] [poll-queues N]
    /// [depth N] [key K] [fast-fail S] [give-up S] [reconnect-delay S]`
    Map {
        addr: IpAddr,
        port: u16,
        export: String,
        ro: bool,
        channels: Option<u32>,
        poll_queues: Option<u32>,
        depth: Option<u32>,
        key: Option<String>,
        timers: Timers,
    },
    /// `blk set DEV [fast-fail S] [give-up S] [reconnect-delay S]`
    Set { index: u32, timers: Timers },
    /// `blk unmap DEV [force]`
    Unmap { index: u32, force: bool },
    /// `blk show`
    Show,
}

/// Splits the bare flags (`ro`, `shared`, `force`) off `args`.
fn flags(args: &[String], allowed: &[&str]) -> (Vec<String>, Vec<&'static str>) {
    let mut rest = Vec::new();
    let mut set = Vec::new();
    for a in args {
        match ["ro", "read-only", "shared", "force"]
            .iter()
            .find(|f| **f == a.as_str() && allowed.contains(f))
        {
            Some(&"read-only") => set.push("ro"),
            Some(f) => set.push(*f),
            None => rest.push(a.clone()),
        }
    }
    (rest, set)
}

/// An export name: 1 to 31 of `[a-z0-9._-]`.
fn export_name(s: &str) -> Result<String, CliError> {
    args::short_name("export", s, FERRY_BLK_EXPORT_NAME_LEN)
}

/// A UUID: 32 hex digits, with or without the dashes of
/// `01234567-89ab-cdef-0123-456789abcdef`; not all zeroes.
pub fn parse_uuid(s: &str) -> Result<[u8; 16], CliError> {
    let bad = || {
        usage(format!(
            "invalid uuid \"{s}\" (32 hex digits, as 01234567-89ab-cdef-0123-456789abcdef)"
        ))
    };
    let hex: Vec<u8> = s.bytes().filter(|&c| c != b'-').collect();
    let dashes_ok = s.len() == 32
        || [8, 13, 18, 23]
            .iter()
            .all(|&i| s.as_bytes().get(i) == Some(&b'-'));
    if hex.len() != 32 || !dashes_ok || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(bad());
    }
    let mut id = [0u8; 16];
    for (i, b) in id.iter_mut().enumerate() {
        let pair = std::str::from_utf8(&hex[2 * i..2 * i + 2]).map_err(|_| bad())?;
        *b = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
    }
    if id == [0; 16] {
        return Err(bad());
    }
    Ok(id)
}

/// A UUID as text: `01234567-89ab-cdef-0123-456789abcdef`.
pub fn uuid_text(id: &[u8]) -> String {
    let mut s = String::new();
    for (i, b) in id.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s += &format!("{b:02x}");
    }
    s
}

/// A disk: `/dev/ferryblkN`, `ferryblkN` or `N`.
fn disk_index(s: &str) -> Result<u32, CliError> {
    let n = s.trim_start_matches("/dev/").trim_start_matches("ferryblk");
    n.parse()
        .map_err(|_| usage(format!("invalid disk \"{s}\" (ferryblkN)")))
}

impl Cmd {
    /// Parses `blk COMMAND ARGS`; `None` is `help`.
    pub fn parse(command: &str, args: &[String]) -> Result<Option<Self>, CliError> {
        if matches(command, "show") || matches(command, "list") {
            if let Some(a) = args.first() {
                return Err(usage(format!("unknown argument \"{a}\"")));
            }
            Ok(Some(Cmd::Show))
        } else if matches(command, "export") {
            let Some(sub) = args.first() else {
                return Err(usage("missing export command (add, del, resize)".into()));
            };
            let rest = &args[1..];
            if matches(sub, "add") {
                let (rest, set) = flags(rest, &["ro", "read-only", "shared"]);
                let kw = KwArgs::parse(&rest, &["name", "path", "uuid"], Some("name"))?;
                Ok(Some(Cmd::ExportAdd {
                    name: export_name(kw.required("name")?)?,
                    path: kw.required("path")?.to_string(),
                    uuid: kw.get("uuid").map(parse_uuid).transpose()?,
                    ro: set.contains(&"ro"),
                    shared: set.contains(&"shared"),
                }))
            } else if matches(sub, "delete") {
                let (rest, set) = flags(rest, &["force"]);
                let kw = KwArgs::parse(&rest, &["name"], Some("name"))?;
                Ok(Some(Cmd::ExportDel {
                    name: export_name(kw.required("name")?)?,
                    force: set.contains(&"force"),
                }))
            } else if matches(sub, "resize") {
                let kw = KwArgs::parse(rest, &["name"], Some("name"))?;
                Ok(Some(Cmd::ExportResize {
                    name: export_name(kw.required("name")?)?,
                }))
            } else {
                Err(usage(format!("unknown export command \"{sub}\"")))
            }
        } else if matches(command, "map") {
            let (rest, set) = flags(args, &["ro", "read-only"]);
            let mut words = vec![
                "addr",
                "port",
                "export",
                "channels",
                "poll-queues",
                "depth",
                "key",
            ];
            words.extend(Timers::WORDS);
            let kw = KwArgs::parse(&rest, &words, Some("addr"))?;
            Ok(Some(Cmd::Map {
                addr: args::parse_addr(kw.required("addr")?)?,
                port: kw.num("port")?.unwrap_or(DEFAULT_PORT),
                export: export_name(kw.required("export")?)?,
                ro: set.contains(&"ro"),
                channels: kw.num("channels")?,
                poll_queues: kw.num("poll-queues")?,
                depth: kw.num("depth")?,
                key: kw.get("key").map(crate::key::name).transpose()?,
                timers: Timers::parse(&kw)?,
            }))
        } else if matches(command, "set") {
            let mut words = vec!["dev"];
            words.extend(Timers::WORDS);
            let kw = KwArgs::parse(args, &words, Some("dev"))?;
            let timers = Timers::parse(&kw)?;
            if timers == Timers::default() {
                return Err(usage(
                    "nothing to set (fast-fail, give-up, reconnect-delay)".into(),
                ));
            }
            Ok(Some(Cmd::Set {
                index: disk_index(kw.required("dev")?)?,
                timers,
            }))
        } else if matches(command, "unmap") {
            let (rest, set) = flags(args, &["force"]);
            let kw = KwArgs::parse(&rest, &["dev"], Some("dev"))?;
            Ok(Some(Cmd::Unmap {
                index: disk_index(kw.required("dev")?)?,
                force: set.contains(&"force"),
            }))
        } else if matches(command, "help") {
            Ok(None)
        } else {
            Err(usage(format!("unknown blk command \"{command}\"")))
        }
    }
}

/// Decodes the counters of a `stats` nest.
fn stats(p: &[u8]) -> Value {
    let mut o = Map::new();
    for (ty, v) in Attrs::new(p) {
        let name = match u32::from(ty) {
            FERRY_BLK_A_STATS_READS => "reads",
            FERRY_BLK_A_STATS_WRITES => "writes",
            FERRY_BLK_A_STATS_FLUSHES => "flushes",
            FERRY_BLK_A_STATS_FUA => "fua",
            FERRY_BLK_A_STATS_DISCARDS => "discards",
            FERRY_BLK_A_STATS_WRITE_ZEROES => "write_zeroes",
            FERRY_BLK_A_STATS_BYTES_READ => "bytes_read",
            FERRY_BLK_A_STATS_BYTES_WRITTEN => "bytes_written",
            FERRY_BLK_A_STATS_BYTES_DISCARDED => "bytes_discarded",
            FERRY_BLK_A_STATS_BYTES_ZEROED => "bytes_zeroed",
            FERRY_BLK_A_STATS_REFUSED => "refused",
            FERRY_BLK_A_STATS_BACKING_ERRORS => "backing_errors",
            FERRY_BLK_A_STATS_FAILED => "failed",
            FERRY_BLK_A_STATS_RECONNECTS => "reconnects",
            FERRY_BLK_A_STATS_REQUEUES => "requeues",
            FERRY_BLK_A_STATS_FAST_FAILED => "fast_failed",
            FERRY_BLK_A_STATS_TIMEOUTS => "timeouts",
            FERRY_BLK_A_STATS_FENCED => "fenced",
            FERRY_BLK_A_STATS_DISCONNECTED_S => "disconnected_s",
            FERRY_BLK_A_STATS_DEFERRED => "deferred",
            _ => continue,
        };
        if let Some(v) = attr::u64(v) {
            o.insert(name.into(), json!(v));
        }
    }
    Value::Object(o)
}

fn bad(what: &str) -> Error {
    Error::Protocol(format!("malformed {what} attribute"))
}

/// A client of an export as JSON: `session`, `addr`, `port`, `read_only`,
/// `inflight`.
fn decode_client(p: &[u8]) -> Result<Value, Error> {
    let mut o = Map::new();
    o.insert("read_only".into(), json!(false));
    for (ty, v) in Attrs::new(p) {
        let (k, val) = match u32::from(ty) {
            FERRY_BLK_A_CLIENT_SESSION => (
                "session",
                json!(attr::u32(v).ok_or_else(|| bad("session"))?),
            ),
            FERRY_BLK_A_CLIENT_ADDR => (
                "addr",
                json!(args::decode_addr(v).ok_or_else(|| bad("addr"))?.to_string()),
            ),
            FERRY_BLK_A_CLIENT_PORT => ("port", json!(attr::u16(v).ok_or_else(|| bad("port"))?)),
            FERRY_BLK_A_CLIENT_READ_ONLY => ("read_only", json!(true)),
            FERRY_BLK_A_CLIENT_INFLIGHT => (
                "inflight",
                json!(attr::u32(v).ok_or_else(|| bad("inflight"))?),
            ),
            _ => continue,
        };
        o.insert(k.into(), val);
    }
    Ok(Value::Object(o))
}

/// An export as JSON: `name`, `path`, `read_only`, `shared`, `handle`,
/// `sectors`, `logical_block_size`, `users`, `rw_users`, `inflight`,
/// `uuid`, `retired`, `stats`, and `clients` (the sessions that have it
/// open, the first 16).
fn decode_export(p: &[u8]) -> Result<Value, Error> {
    let mut o = Map::new();
    o.insert("kind".into(), json!("export"));
    o.insert("read_only".into(), json!(false));
    o.insert("shared".into(), json!(false));
    let mut clients = Vec::new();
    for (ty, v) in Attrs::new(p) {
        if u32::from(ty) == FERRY_BLK_A_EXPORT_CLIENT {
            clients.push(decode_client(v)?);
            continue;
        }
        let (k, val) = match u32::from(ty) {
            FERRY_BLK_A_EXPORT_NAME => ("name", json!(attr::string(v).ok_or_else(|| bad("name"))?)),
            FERRY_BLK_A_EXPORT_PATH => ("path", json!(attr::string(v).ok_or_else(|| bad("path"))?)),
            FERRY_BLK_A_EXPORT_READ_ONLY => ("read_only", json!(true)),
            FERRY_BLK_A_EXPORT_SHARED => ("shared", json!(true)),
            FERRY_BLK_A_EXPORT_HANDLE => {
                ("handle", json!(attr::u32(v).ok_or_else(|| bad("handle"))?))
            }
            FERRY_BLK_A_EXPORT_SECTORS => (
                "sectors",
                json!(attr::u64(v).ok_or_else(|| bad("sectors"))?),
            ),
            FERRY_BLK_A_EXPORT_LOGICAL_BLOCK_SIZE => (
                "logical_block_size",
                json!(attr::u32(v).ok_or_else(|| bad("block size"))?),
            ),
            FERRY_BLK_A_EXPORT_USERS => ("users", json!(attr::u32(v).ok_or_else(|| bad("users"))?)),
            FERRY_BLK_A_EXPORT_RW_USERS => {
                ("rw_users", json!(attr::u32(v).ok_or_else(|| bad("users"))?))
            }
            FERRY_BLK_A_EXPORT_INFLIGHT => (
                "inflight",
                json!(attr::u32(v).ok_or_else(|| bad("inflight"))?),
            ),
            FERRY_BLK_A_EXPORT_STATS => ("stats", stats(v)),
            FERRY_BLK_A_EXPORT_UUID if v.len() == 16 => ("uuid", json!(uuid_text(v))),
            FERRY_BLK_A_EXPORT_RETIRED => (
                "retired",
                json!(attr::u32(v).ok_or_else(|| bad("retired"))?),
            ),
            _ => continue,
        };
        o.insert(k.into(), val);
    }
    o.insert("clients".into(), Value::Array(clients));
    Ok(Value::Object(o))
}

/// A mapping as JSON: `index`, `addr`, `port`, `export`, `read_only`,
/// `disk`, `session`, `sectors`, `state` (`live`, `connecting`,
/// `failing-fast`, `dead`), `stats`, `inflight`, `uuid`, `fast_fail`,
/// `give_up`, `reconnect_delay`, `channels` (hardware queues besides the
/// polled ones), `poll_queues`.
fn decode_map(p: &[u8]) -> Result<Value, Error> {
    let mut o = Map::new();
    o.insert("kind".into(), json!("map"));
    o.insert("read_only".into(), json!(false));
    for (ty, v) in Attrs::new(p) {
        let (k, val) = match u32::from(ty) {
            FERRY_BLK_A_MAP_INDEX => ("index", json!(attr::u32(v).ok_or_else(|| bad("index"))?)),
            FERRY_BLK_A_MAP_ADDR => (
                "addr",
                json!(args::decode_addr(v).ok_or_else(|| bad("addr"))?.to_string()),
            ),
            FERRY_BLK_A_MAP_PORT => ("port", json!(attr::u16(v).ok_or_else(|| bad("port"))?)),
            FERRY_BLK_A_MAP_EXPORT => (
                "export",
                json!(attr::string(v).ok_or_else(|| bad("export"))?),
            ),
            FERRY_BLK_A_MAP_READ_ONLY => ("read_only", json!(true)),
            FERRY_BLK_A_MAP_DISK => ("disk", json!(attr::string(v).ok_or_else(|| bad("disk"))?)),
            FERRY_BLK_A_MAP_SESSION => (
                "session",
                json!(attr::u32(v).ok_or_else(|| bad("session"))?),
            ),
            FERRY_BLK_A_MAP_SECTORS => (
                "sectors",
                json!(attr::u64(v).ok_or_else(|| bad("sectors"))?),
            ),
            FERRY_BLK_A_MAP_STATE => {
                let s = attr::u32(v).ok_or_else(|| bad("state"))?;
                let name = enum_names::FERRY_BLK_MAP_STATE
                    .iter()
                    .find(|(n, _)| *n == s)
                    .map_or("unknown", |(_, name)| name);
                ("state", json!(name))
            }
            FERRY_BLK_A_MAP_STATS => ("stats", stats(v)),
            FERRY_BLK_A_MAP_INFLIGHT => (
                "inflight",
                json!(attr::u32(v).ok_or_else(|| bad("inflight"))?),
            ),
            FERRY_BLK_A_MAP_UUID if v.len() == 16 => ("uuid", json!(uuid_text(v))),
            FERRY_BLK_A_MAP_FAST_FAIL => (
                "fast_fail",
                json!(attr::u32(v).ok_or_else(|| bad("fast-fail"))?),
            ),
            FERRY_BLK_A_MAP_GIVE_UP => (
                "give_up",
                json!(attr::u32(v).ok_or_else(|| bad("give-up"))?),
            ),
            FERRY_BLK_A_MAP_RECONNECT_DELAY => (
                "reconnect_delay",
                json!(attr::u32(v).ok_or_else(|| bad("reconnect-delay"))?),
            ),
            FERRY_BLK_A_MAP_CHANNELS => (
                "channels",
                json!(attr::u32(v).ok_or_else(|| bad("channels"))?),
            ),
            FERRY_BLK_A_MAP_POLL_QUEUES => (
                "poll_queues",
                json!(attr::u32(v).ok_or_else(|| bad("poll-queues"))?),
            ),
            _ => continue,
        };
        o.insert(k.into(), val);
    }
    Ok(Value::Object(o))
}

/// A `ferry-blk` notification (`ferryctl monitor`): its event's name, the
/// object (as `blk show` has it, without `kind`), and its line of text;
/// `None` for a command this ferryctl does not know (a newer kernel's).
pub fn event(cmd: u8, payload: &[u8]) -> Result<Option<(&'static str, Value, String)>, Error> {
    let (name, export) = match u32::from(cmd) {
        FERRY_BLK_CMD_EXPORT_ADD_NTF => ("blk-export-add", true),
        FERRY_BLK_CMD_EXPORT_DEL_NTF => ("blk-export-del", true),
        FERRY_BLK_CMD_EXPORT_RESIZE_NTF => ("blk-export-resize", true),
        FERRY_BLK_CMD_MAP_ADD_NTF => ("blk-map-add", false),
        FERRY_BLK_CMD_MAP_DEL_NTF => ("blk-map-del", false),
        FERRY_BLK_CMD_MAP_CHANGE_NTF => ("blk-map-change", false),
        _ => return Ok(None),
    };
    let mut v = if export {
        decode_export(payload)?
    } else {
        decode_map(payload)?
    };
    let first = if export { "name" } else { "disk" };
    if v.get(first).is_none() {
        return Err(Error::Protocol(format!("{name} event without {first}")));
    }
    if let Value::Object(o) = &mut v {
        o.remove("kind");
        // An event names the export, not its clients.
        o.remove("clients");
        // A change says nothing of access: no default either.
        if u32::from(cmd) == FERRY_BLK_CMD_MAP_CHANGE_NTF {
            o.remove("read_only");
        }
    }
    // "blk export add NAME path P ..." or "blk map change DISK export E ...".
    let mut text = format!("{} {}", name.replace('-', " "), plain(&v[first]));
    for k in [
        "path", "addr", "port", "export", "sectors", "state", "session", "uuid",
    ] {
        if let Some(x) = v.get(k) {
            text += &format!(" {k} {}", plain(x));
        }
    }
    for (k, word) in [("read_only", "ro"), ("shared", "shared")] {
        if v.get(k) == Some(&json!(true)) {
            text += &format!(" {word}");
        }
    }
    Ok(Some((name, v, text)))
}

/// A JSON value as text: strings without their quotes.
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

/// The text of an export (a line, and a line per client) or a mapping.
fn to_text(v: &Value, with_stats: bool) -> String {
    let get = |k: &str| {
        v.get(k)
            .map(|x| x.to_string().trim_matches('"').to_string())
    };
    let mut s = if v["kind"] == "export" {
        let mut s = format!(
            "export {} path {} uuid {} sectors {} users {} inflight {}",
            get("name").unwrap_or_default(),
            get("path").unwrap_or_default(),
            get("uuid").unwrap_or_default(),
            get("sectors").unwrap_or_default(),
            get("users").unwrap_or_default(),
            get("inflight").unwrap_or_default()
        );
        if let Some(r) = v.get("retired").filter(|r| **r != json!(0)) {
            s += &format!(" retired {r}");
        }
        s
    } else {
        let mut s = format!(
            "{} addr {} port {} export {} uuid {} sectors {} state {} session {} inflight {} \
             fast-fail {} give-up {} reconnect-delay {}",
            get("disk").unwrap_or_default(),
            get("addr").unwrap_or_default(),
            get("port").unwrap_or_default(),
            get("export").unwrap_or_default(),
            get("uuid").unwrap_or_default(),
            get("sectors").unwrap_or_default(),
            get("state").unwrap_or_default(),
            get("session").unwrap_or_default(),
            get("inflight").unwrap_or_default(),
            get("fast_fail").unwrap_or_default(),
            get("give_up").unwrap_or_default(),
            get("reconnect_delay").unwrap_or_default()
        );
        // (Older modules say nothing of their queues.)
        if let Some(c) = v.get("channels") {
            s += &format!(" queues {c}");
        }
        if let Some(p) = v.get("poll_queues").filter(|p| **p != json!(0)) {
            s += &format!(" poll-queues {p}");
        }
        s
    };
    if v["read_only"] == true {
        s += " ro";
    }
    if v.get("shared") == Some(&json!(true)) {
        s += " shared";
    }
    // An export's clients, a line each.
    for c in v
        .get("clients")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let get = |k: &str| c.get(k).map(plain).unwrap_or_default();
        s += &format!(
            "\n    client session {} addr {} port {} inflight {}{}",
            get("session"),
            get("addr"),
            get("port"),
            get("inflight"),
            if c["read_only"] == true { " ro" } else { "" }
        );
    }
    if with_stats {
        if let Some(Value::Object(st)) = v.get("stats") {
            s += "\n   ";
            for (k, x) in st {
                s += &format!(" {} {}", k.replace('_', "-"), x);
            }
        }
    }
    s.push('\n');
    s
}

/// Runs a parsed command: `show`, `export add`, `export resize`, `map` and
/// `set` print what they show or made; the rest nothing.
pub fn exec(ctx: &mut Ctx, cmd: &Cmd) -> Result<Option<Output>, CliError> {
    let b = nl::Builder::new();
    let mut values = Vec::new();
    match cmd {
        Cmd::ExportAdd {
            name,
            path,
            uuid,
            ro,
            shared,
        } => {
            let mut b = b
                .str(FERRY_BLK_A_EXPORT_NAME, name)
                .str(FERRY_BLK_A_EXPORT_PATH, path);
            if let Some(id) = uuid {
                b = b.binary(FERRY_BLK_A_EXPORT_UUID, id);
            }
            if *ro {
                b = b.flag(FERRY_BLK_A_EXPORT_READ_ONLY);
            }
            if *shared {
                b = b.flag(FERRY_BLK_A_EXPORT_SHARED);
            }
            for r in ctx.request_blk(FERRY_BLK_CMD_EXPORT_ADD, 0, &b, export_attr_name)? {
                values.push(decode_export(&r).map_err(|e| CliError::Kernel(e, export_attr_name))?);
            }
        }
        Cmd::ExportDel { name, force } => {
            let mut b = b.str(FERRY_BLK_A_EXPORT_NAME, name);
            if *force {
                b = b.flag(FERRY_BLK_A_EXPORT_FORCE);
            }
            ctx.request_blk(FERRY_BLK_CMD_EXPORT_DEL, 0, &b, export_attr_name)?;
            return Ok(None);
        }
        Cmd::ExportResize { name } => {
            let b = b.str(FERRY_BLK_A_EXPORT_NAME, name);
            for r in ctx.request_blk(FERRY_BLK_CMD_EXPORT_RESIZE, 0, &b, export_attr_name)? {
                values.push(decode_export(&r).map_err(|e| CliError::Kernel(e, export_attr_name))?);
            }
        }
        Cmd::Map {
            addr,
            port,
            export,
            ro,
            channels,
            poll_queues,
            depth,
            key,
            timers,
        } => {
            let mut b = b
                .binary(FERRY_BLK_A_MAP_ADDR, &args::addr_bytes(addr))
                .u16(FERRY_BLK_A_MAP_PORT, *port)
                .str(FERRY_BLK_A_MAP_EXPORT, export);
            if *ro {
                b = b.flag(FERRY_BLK_A_MAP_READ_ONLY);
            }
            if let Some(c) = channels {
                b = b.u32(FERRY_BLK_A_MAP_CHANNELS, *c);
            }
            if let Some(c) = poll_queues {
                b = b.u32(FERRY_BLK_A_MAP_POLL_QUEUES, *c);
            }
            if let Some(d) = depth {
                b = b.u32(FERRY_BLK_A_MAP_DEPTH, *d);
            }
            if let Some(k) = key {
                b = b.str(FERRY_BLK_A_MAP_KEY, k);
            }
            let b = timers.put(b);
            for r in ctx.request_blk(FERRY_BLK_CMD_MAP_ADD, 0, &b, map_attr_name)? {
                values.push(decode_map(&r).map_err(|e| CliError::Kernel(e, map_attr_name))?);
            }
        }
        Cmd::Set { index, timers } => {
            let b = timers.put(b.u32(FERRY_BLK_A_MAP_INDEX, *index));
            for r in ctx.request_blk(FERRY_BLK_CMD_MAP_SET, 0, &b, map_attr_name)? {
                values.push(decode_map(&r).map_err(|e| CliError::Kernel(e, map_attr_name))?);
            }
        }
        Cmd::Unmap { index, force } => {
            let mut b = b.u32(FERRY_BLK_A_MAP_INDEX, *index);
            if *force {
                b = b.flag(FERRY_BLK_A_MAP_FORCE);
            }
            ctx.request_blk(FERRY_BLK_CMD_MAP_DEL, 0, &b, map_attr_name)?;
            return Ok(None);
        }
        Cmd::Show => {
            for r in ctx.request_blk(
                FERRY_BLK_CMD_EXPORT_GET,
                nl::NLM_F_DUMP,
                &b,
                export_attr_name,
            )? {
                values.push(decode_export(&r).map_err(|e| CliError::Kernel(e, export_attr_name))?);
            }
            for r in ctx.request_blk(FERRY_BLK_CMD_MAP_GET, nl::NLM_F_DUMP, &b, map_attr_name)? {
                values.push(decode_map(&r).map_err(|e| CliError::Kernel(e, map_attr_name))?);
            }
        }
    }
    let with_stats = ctx.stats;
    Ok(Some(Output {
        text: values.iter().map(|v| to_text(v, with_stats)).collect(),
        json: values,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<Cmd>, CliError> {
        let a: Vec<String> = s.split_whitespace().map(String::from).collect();
        Cmd::parse(&a[0], &a[1..])
    }

    fn usage_msg(s: &str) -> String {
        match parse(s) {
            Err(CliError::Usage(m)) => m,
            _ => panic!("{s} was no usage error"),
        }
    }

    #[test]
    fn parses_commands() {
        assert_eq!(
            parse("export add ram0 path /dev/ram0 ro").unwrap().unwrap(),
            Cmd::ExportAdd {
                name: "ram0".into(),
                path: "/dev/ram0".into(),
                uuid: None,
                ro: true,
                shared: false,
            }
        );
        let id = *b"\x01\x23\x45\x67\x89\xab\xcd\xef\x01\x23\x45\x67\x89\xab\xcd\xef";
        for text in [
            "01234567-89ab-cdef-0123-456789abcdef",
            "0123456789ABCDEF0123456789abcdef",
        ] {
            assert_eq!(
                parse(&format!("export add ram0 path /dev/ram0 uuid {text}"))
                    .unwrap()
                    .unwrap(),
                Cmd::ExportAdd {
                    name: "ram0".into(),
                    path: "/dev/ram0".into(),
                    uuid: Some(id),
                    ro: false,
                    shared: false,
                }
            );
        }
        assert_eq!(uuid_text(&id), "01234567-89ab-cdef-0123-456789abcdef");
        assert_eq!(
            parse("export del ram0 force").unwrap().unwrap(),
            Cmd::ExportDel {
                name: "ram0".into(),
                force: true,
            }
        );
        assert_eq!(
            parse("map 192.0.2.1 export ram0 channels 2 poll-queues 1 depth 64")
                .unwrap()
                .unwrap(),
            Cmd::Map {
                addr: "192.0.2.1".parse().unwrap(),
                port: DEFAULT_PORT,
                export: "ram0".into(),
                ro: false,
                channels: Some(2),
                poll_queues: Some(1),
                depth: Some(64),
                key: None,
                timers: Timers::default(),
            }
        );
        assert_eq!(
            parse("map 192.0.2.1 export ram0 fast-fail 5 give-up 60 reconnect-delay 2")
                .unwrap()
                .unwrap(),
            Cmd::Map {
                addr: "192.0.2.1".parse().unwrap(),
                port: DEFAULT_PORT,
                export: "ram0".into(),
                ro: false,
                channels: None,
                poll_queues: None,
                depth: None,
                key: None,
                timers: Timers {
                    fast_fail: Some(5),
                    give_up: Some(60),
                    reconnect_delay: Some(2),
                },
            }
        );
        assert_eq!(
            parse("set ferryblk2 fast-fail 0").unwrap().unwrap(),
            Cmd::Set {
                index: 2,
                timers: Timers {
                    fast_fail: Some(0),
                    ..Timers::default()
                },
            }
        );
        assert_eq!(
            parse("unmap /dev/ferryblk3 force").unwrap().unwrap(),
            Cmd::Unmap {
                index: 3,
                force: true,
            }
        );
        assert_eq!(
            parse("unmap ferryblk0").unwrap().unwrap(),
            Cmd::Unmap {
                index: 0,
                force: false
            }
        );
        assert_eq!(parse("show").unwrap(), Some(Cmd::Show));
        assert_eq!(parse("help").unwrap(), None);
    }

    #[test]
    fn usage_errors() {
        assert_eq!(usage_msg("export add ram0"), "missing \"path\"");
        assert!(usage_msg("export add Ram0 path /dev/x").starts_with("invalid export name"));
        assert_eq!(usage_msg("map 192.0.2.1"), "missing \"export\"");
        assert!(usage_msg("unmap sda").starts_with("invalid disk"));
        assert_eq!(
            usage_msg("map 192.0.2.1 export a port x"),
            "invalid port \"x\""
        );
        assert_eq!(usage_msg("frob"), "unknown blk command \"frob\"");
        assert_eq!(
            usage_msg("set ferryblk0"),
            "nothing to set (fast-fail, give-up, reconnect-delay)"
        );
        for bad in [
            "0123",
            "00000000-0000-0000-0000-000000000000",
            "01234567-89ab-cdef-0123-456789abcdeg",
            "0123456-789ab-cdef-0123-456789abcdef",
        ] {
            assert!(
                usage_msg(&format!("export add a path /dev/x uuid {bad}"))
                    .starts_with("invalid uuid"),
                "{bad}"
            );
        }
        // `force` is no flag of `map`.
        assert_eq!(
            usage_msg("map 192.0.2.1 export a force"),
            "unknown argument \"force\""
        );
    }

    #[test]
    fn an_export_lists_its_clients() {
        let client = |session, ro: bool| {
            let b = nl::Builder::new()
                .u32(FERRY_BLK_A_CLIENT_SESSION, session)
                .binary(FERRY_BLK_A_CLIENT_ADDR, &[192, 0, 2, 2])
                .u16(FERRY_BLK_A_CLIENT_PORT, 50000)
                .u32(FERRY_BLK_A_CLIENT_INFLIGHT, 3);
            if ro {
                b.flag(FERRY_BLK_A_CLIENT_READ_ONLY)
            } else {
                b
            }
        };
        let b = nl::Builder::new()
            .str(FERRY_BLK_A_EXPORT_NAME, "ram0")
            .u32(FERRY_BLK_A_EXPORT_USERS, 2)
            .binary(FERRY_BLK_A_EXPORT_CLIENT, client(7, false).bytes())
            .binary(FERRY_BLK_A_EXPORT_CLIENT, client(9, true).bytes());
        let v = decode_export(b.bytes()).unwrap();
        assert_eq!(
            v["clients"],
            json!([
                {"session": 7, "addr": "192.0.2.2", "port": 50000, "inflight": 3, "read_only": false},
                {"session": 9, "addr": "192.0.2.2", "port": 50000, "inflight": 3, "read_only": true},
            ])
        );
        assert!(to_text(&v, false)
            .contains("\n    client session 9 addr 192.0.2.2 port 50000 inflight 3 ro\n"));
        // Events name the export alone.
        let (_, e, _) = event(FERRY_BLK_CMD_EXPORT_ADD_NTF as u8, b.bytes())
            .unwrap()
            .unwrap();
        assert!(e.get("clients").is_none());
    }
}
