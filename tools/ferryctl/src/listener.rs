// SPDX-License-Identifier: GPL-2.0
//! The `listener` object: addresses and ports on which ferry accepts sessions.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use crate::{
    args::{self, KwArgs},
    attr::{self, Attrs},
    matches,
    nl::{self, Error},
    session::enum_name,
    uapi::{enum_names, *},
    usage, CliError, Ctx, Output,
};

/// A listener as ferry reports it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Listener {
    pub id: u32,
    pub addr: Option<IpAddr>,
    pub port: Option<u16>,
    pub sessions: Option<u32>,
    pub auth_refused: Option<u64>,
    pub key: Option<String>,
    pub pending: Option<u32>,
    pub busy_refused: Option<u64>,
    pub stale_refused: Option<u64>,
    /// `listening`, or `waiting` (for its address: its device went away).
    pub state: Option<String>,
    pub limits: Limits,
}

/// A listener's admission limits: on `listener add`, each one given; in a
/// reply, each one the kernel reported.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Limits {
    pub max_sessions: Option<u32>,
    pub max_sessions_per_peer: Option<u32>,
    pub max_pending: Option<u32>,
    pub max_pending_per_peer: Option<u32>,
    pub max_channels: Option<u32>,
}

/// Each limit: its attribute, its name on the command line and in text
/// (JSON: with `_` for `-`), and its field.
fn limit_fields(l: &mut Limits) -> [(u32, &'static str, &mut Option<u32>); 5] {
    [
        (
            FERRY_A_LISTENER_MAX_SESSIONS,
            "max-sessions",
            &mut l.max_sessions,
        ),
        (
            FERRY_A_LISTENER_MAX_SESSIONS_PER_PEER,
            "max-sessions-per-peer",
            &mut l.max_sessions_per_peer,
        ),
        (
            FERRY_A_LISTENER_MAX_PENDING,
            "max-pending",
            &mut l.max_pending,
        ),
        (
            FERRY_A_LISTENER_MAX_PENDING_PER_PEER,
            "max-pending-per-peer",
            &mut l.max_pending_per_peer,
        ),
        (
            FERRY_A_LISTENER_MAX_CHANNELS,
            "max-channels",
            &mut l.max_channels,
        ),
    ]
}

impl Limits {
    /// The limits given, in order: (attribute, name, value).
    fn given(&self) -> Vec<(u32, &'static str, u32)> {
        let mut copy = self.clone();
        limit_fields(&mut copy)
            .into_iter()
            .filter_map(|(ty, name, v)| v.map(|v| (ty, name, v)))
            .collect()
    }
}

fn bad(what: &str) -> Error {
    Error::Protocol(format!("malformed listener {what} attribute"))
}

impl Listener {
    /// Decodes a listener reply. Unknown attributes are skipped; known ones of
    /// the wrong size are an error.
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let mut l = Listener::default();
        let mut have_id = false;
        for (ty, p) in Attrs::new(payload) {
            match u32::from(ty) {
                FERRY_A_LISTENER_ID => {
                    l.id = attr::u32(p).ok_or_else(|| bad("id"))?;
                    have_id = true;
                }
                FERRY_A_LISTENER_ADDR => {
                    l.addr = Some(args::decode_addr(p).ok_or_else(|| bad("addr"))?)
                }
                FERRY_A_LISTENER_PORT => l.port = Some(attr::u16(p).ok_or_else(|| bad("port"))?),
                FERRY_A_LISTENER_SESSIONS => {
                    l.sessions = Some(attr::u32(p).ok_or_else(|| bad("sessions"))?)
                }
                FERRY_A_LISTENER_KEY => l.key = Some(attr::string(p).ok_or_else(|| bad("key"))?),
                FERRY_A_LISTENER_PENDING => {
                    l.pending = Some(attr::u32(p).ok_or_else(|| bad("pending"))?)
                }
                FERRY_A_LISTENER_BUSY_REFUSED => {
                    l.busy_refused = Some(attr::u64(p).ok_or_else(|| bad("busy-refused"))?)
                }
                FERRY_A_LISTENER_AUTH_REFUSED => {
                    l.auth_refused = Some(attr::u64(p).ok_or_else(|| bad("auth-refused"))?)
                }
                FERRY_A_LISTENER_STALE_REFUSED => {
                    l.stale_refused = Some(attr::u64(p).ok_or_else(|| bad("stale-refused"))?)
                }
                FERRY_A_LISTENER_STATE => {
                    let v = attr::u32(p).ok_or_else(|| bad("state"))?;
                    l.state = Some(enum_name(enum_names::FERRY_LISTENER_STATE, v));
                }
                t => {
                    for (ty, name, field) in limit_fields(&mut l.limits) {
                        if ty == t {
                            *field = Some(attr::u32(p).ok_or_else(|| bad(name))?);
                        }
                    }
                }
            }
        }
        if !have_id {
            return Err(Error::Protocol("listener without an id".into()));
        }
        Ok(l)
    }

    /// The JSON object: `id`, `addr`, `port`, `sessions`, `auth_refused`,
    /// `pending`, `busy_refused`, `stale_refused`, the limits (`max_sessions`,
    /// `max_sessions_per_peer`, `max_pending`, `max_pending_per_peer`,
    /// `max_channels`), `key` (if the listener requires one), `state`
    /// (`listening`, or `waiting` for its address).
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("id".into(), json!(self.id));
        if let Some(st) = &self.state {
            o.insert("state".into(), json!(st));
        }
        if let Some(a) = self.addr {
            o.insert("addr".into(), json!(a.to_string()));
        }
        if let Some(p) = self.port {
            o.insert("port".into(), json!(p));
        }
        if let Some(n) = self.sessions {
            o.insert("sessions".into(), json!(n));
        }
        if let Some(n) = self.auth_refused {
            o.insert("auth_refused".into(), json!(n));
        }
        if let Some(n) = self.pending {
            o.insert("pending".into(), json!(n));
        }
        if let Some(n) = self.busy_refused {
            o.insert("busy_refused".into(), json!(n));
        }
        if let Some(n) = self.stale_refused {
            o.insert("stale_refused".into(), json!(n));
        }
        for (_, name, v) in self.limits.given() {
            o.insert(name.replace('-', "_"), json!(v));
        }
        if let Some(k) = &self.key {
            o.insert("key".into(), json!(k));
        }
        Value::Object(o)
    }

    /// `listener 1 addr 192.0.2.1 port 4791 sessions 0 auth-refused 0`.
    pub fn to_text(&self) -> String {
        let mut s = format!("listener {}", self.id);
        if let Some(a) = self.addr {
            s += &format!(" addr {a}");
        }
        if let Some(p) = self.port {
            s += &format!(" port {p}");
        }
        if let Some(st) = &self.state {
            s += &format!(" state {st}");
        }
        if let Some(n) = self.sessions {
            s += &format!(" sessions {n}");
        }
        if let Some(n) = self.auth_refused {
            s += &format!(" auth-refused {n}");
        }
        if let Some(n) = self.pending {
            s += &format!(" pending {n}");
        }
        if let Some(n) = self.busy_refused {
            s += &format!(" busy-refused {n}");
        }
        if let Some(n) = self.stale_refused {
            s += &format!(" stale-refused {n}");
        }
        if let Some(k) = &self.key {
            s += &format!(" key {k}");
        }
        let limits = self.limits.given();
        if !limits.is_empty() {
            s += "\n   ";
            for (_, name, v) in limits {
                s += &format!(" {name} {v}");
            }
        }
        s.push('\n');
        s
    }
}

/// Names of the `listener` attributes, for error messages.
pub fn attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_A_LISTENER_ID => Some("id"),
        FERRY_A_LISTENER_ADDR => Some("addr"),
        FERRY_A_LISTENER_PORT => Some("port"),
        FERRY_A_LISTENER_SESSIONS => Some("sessions"),
        FERRY_A_LISTENER_AUTH_REFUSED => Some("auth-refused"),
        FERRY_A_LISTENER_KEY => Some("key"),
        FERRY_A_LISTENER_PENDING => Some("pending"),
        FERRY_A_LISTENER_BUSY_REFUSED => Some("busy-refused"),
        FERRY_A_LISTENER_STALE_REFUSED => Some("stale-refused"),
        t => limit_fields(&mut Limits::default())
            .into_iter()
            .find(|(ty, _, _)| *ty == t)
            .map(|(_, name, _)| name),
    }
}

/// A parsed `listener` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `listener add ADDR port PORT [key NAME] [max-sessions N]
    /// [max-sessions-per-peer N] [max-pending N] [max-pending-per-peer N]
    /// [max-channels N]`
    Add {
        addr: IpAddr,
        port: u16,
        key: Option<String>,
        limits: Limits,
    },
    /// `listener del id ID`
    Del { id: u32 },
    /// `listener show [id ID]`
    Show { id: Option<u32> },
}

impl Cmd {
    /// Parses `listener COMMAND ARGS`; `None` is `help`.
    pub fn parse(command: &str, args: &[String]) -> Result<Option<Self>, CliError> {
        if matches(command, "show") || matches(command, "list") {
            Self::show(args)
        } else if matches(command, "add") {
            let kw = KwArgs::parse(
                args,
                &[
                    "addr",
                    "port",
                    "key",
                    "max-sessions",
                    "max-sessions-per-peer",
                    "max-pending",
                    "max-pending-per-peer",
                    "max-channels",
                ],
                Some("addr"),
            )?;
            let addr = args::parse_addr(kw.required("addr")?)?;
            let port = args::number("port", kw.required("port")?)?;
            let key = kw.get("key").map(crate::key::name).transpose()?;
            let mut limits = Limits::default();
            for (_, name, field) in limit_fields(&mut limits) {
                *field = kw.num(name)?;
            }
            Ok(Some(Cmd::Add {
                addr,
                port,
                key,
                limits,
            }))
        } else if matches(command, "delete") {
            Ok(Some(Cmd::Del {
                id: args::required_id(args)?,
            }))
        } else if matches(command, "help") {
            Ok(None)
        } else if let Some(all) = args::show_shortcut(command, args) {
            // `ferryctl listener 3`, `ferryctl listener id 3`
            Self::show(&all)
        } else {
            Err(usage(format!("unknown listener command \"{command}\"")))
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
            Cmd::Add {
                addr,
                port,
                key,
                limits,
            } => {
                let mut b = b
                    .binary(FERRY_A_LISTENER_ADDR, &args::addr_bytes(addr))
                    .u16(FERRY_A_LISTENER_PORT, *port);
                if let Some(k) = key {
                    b = b.str(FERRY_A_LISTENER_KEY, k);
                }
                for (ty, _, v) in limits.given() {
                    b = b.u32(ty, v);
                }
                (FERRY_CMD_LISTENER_ADD, 0, b)
            }
            Cmd::Del { id } => (FERRY_CMD_LISTENER_DEL, 0, b.u32(FERRY_A_LISTENER_ID, *id)),
            Cmd::Show { id: Some(id) } => {
                (FERRY_CMD_LISTENER_GET, 0, b.u32(FERRY_A_LISTENER_ID, *id))
            }
            Cmd::Show { id: None } => (FERRY_CMD_LISTENER_GET, nl::NLM_F_DUMP, b),
        }
    }
}

/// Runs a parsed command: `add` and `show` print listeners, `del` nothing.
pub fn exec(ctx: &mut Ctx, cmd: &Cmd) -> Result<Option<Output>, CliError> {
    let (op, flags, req) = cmd.request();
    let replies = ctx.request(op, flags, &req, attr_name)?;
    if let Cmd::Del { .. } = cmd {
        return Ok(None);
    }
    let mut listeners = Vec::new();
    for r in &replies {
        listeners.push(Listener::decode(r).map_err(|e| CliError::Kernel(e, attr_name))?);
    }
    Ok(Some(Output {
        json: listeners.iter().map(Listener::to_json).collect(),
        text: listeners.iter().map(Listener::to_text).collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::Attrs;

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

    #[test]
    fn parses_commands() {
        let add = parse("add 192.0.2.1 port 4791").unwrap().unwrap();
        assert_eq!(
            add,
            Cmd::Add {
                addr: "192.0.2.1".parse().unwrap(),
                port: 4791,
                key: None,
                limits: Limits::default(),
            }
        );
        assert_eq!(parse("a addr :: port 1 key k-1").unwrap().unwrap(), {
            Cmd::Add {
                addr: "::".parse().unwrap(),
                port: 1,
                key: Some("k-1".into()),
                limits: Limits::default(),
            }
        });
        assert_eq!(
            parse("add ::1 port 1 max-sessions-per-peer 2 max-channels 4")
                .unwrap()
                .unwrap(),
            Cmd::Add {
                addr: "::1".parse().unwrap(),
                port: 1,
                key: None,
                limits: Limits {
                    max_sessions_per_peer: Some(2),
                    max_channels: Some(4),
                    ..Limits::default()
                },
            }
        );
        assert!(matches!(
            parse("add ::1 port 1 key K"),
            Err(CliError::Usage(_))
        ));
        assert_eq!(parse("del id 3").unwrap(), Some(Cmd::Del { id: 3 }));
        assert_eq!(parse("delete 3").unwrap(), Some(Cmd::Del { id: 3 }));
        assert_eq!(parse("show").unwrap(), Some(Cmd::Show { id: None }));
        assert_eq!(parse("show id 7").unwrap(), Some(Cmd::Show { id: Some(7) }));
        assert_eq!(parse("7").unwrap(), Some(Cmd::Show { id: Some(7) }));
        assert_eq!(parse("id 7").unwrap(), Some(Cmd::Show { id: Some(7) }));
        assert_eq!(parse("help").unwrap(), None);
    }

    #[test]
    fn usage_errors() {
        assert_eq!(usage_msg("add 192.0.2.1"), "missing \"port\"");
        assert_eq!(usage_msg("add port 4791"), "missing \"addr\"");
        assert!(usage_msg("add 192.0.2.300 port 1").starts_with("invalid address"));
        assert_eq!(usage_msg("add ::1 port x"), "invalid port \"x\"");
        assert_eq!(usage_msg("add ::1 port 65536"), "invalid port \"65536\"");
        assert_eq!(usage_msg("del"), "missing \"id\"");
        assert_eq!(usage_msg("del id"), "\"id\" needs a value");
        assert_eq!(usage_msg("show id -1"), "invalid id \"-1\"");
        assert_eq!(usage_msg("show 1 2"), "unknown argument \"2\"");
        assert_eq!(usage_msg("frob"), "unknown listener command \"frob\"");
        assert_eq!(
            usage_msg("add ::1 port 1 max-pending x"),
            "invalid max-pending \"x\""
        );
    }

    #[test]
    fn add_request_attributes() {
        let (op, flags, b) = parse("add 2001:db8::1 port 4791")
            .unwrap()
            .unwrap()
            .request();
        assert_eq!((op, flags), (FERRY_CMD_LISTENER_ADD, 0));
        let a: Vec<_> = Attrs::new(b.bytes()).collect();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].0 as u32, FERRY_A_LISTENER_ADDR);
        assert_eq!(a[0].1.len(), 16);
        assert_eq!(&a[0].1[..4], &[0x20, 0x01, 0x0d, 0xb8]);
        assert_eq!(
            a[1],
            (FERRY_A_LISTENER_PORT as u16, &4791u16.to_ne_bytes()[..])
        );
        let (op, flags, b) = parse("show").unwrap().unwrap().request();
        assert_eq!(
            (op, flags, b.bytes().len()),
            (FERRY_CMD_LISTENER_GET, nl::NLM_F_DUMP, 0)
        );
    }

    #[test]
    fn decodes_into_text_and_json() {
        let b = nl::Builder::new()
            .u32(FERRY_A_LISTENER_ID, 1)
            .binary(FERRY_A_LISTENER_ADDR, &[192, 0, 2, 1])
            .u16(FERRY_A_LISTENER_PORT, 4791)
            .u32(FERRY_A_LISTENER_SESSIONS, 0)
            .u64(FERRY_A_LISTENER_AUTH_REFUSED, 3);
        let l = Listener::decode(b.bytes()).unwrap();
        assert_eq!(
            l.to_text(),
            "listener 1 addr 192.0.2.1 port 4791 sessions 0 auth-refused 3\n"
        );
        assert_eq!(
            l.to_json(),
            json!({"id": 1, "addr": "192.0.2.1", "port": 4791, "sessions": 0, "auth_refused": 3})
        );
        let mut v6 = [0u8; 16];
        v6[15] = 1;
        let b = nl::Builder::new()
            .u32(FERRY_A_LISTENER_ID, 2)
            .binary(FERRY_A_LISTENER_ADDR, &v6);
        let l = Listener::decode(b.bytes()).unwrap();
        assert_eq!(l.to_text(), "listener 2 addr ::1\n");
        assert_eq!(l.to_json()["addr"], "::1");
        let b = nl::Builder::new()
            .u32(FERRY_A_LISTENER_ID, 2)
            .binary(FERRY_A_LISTENER_ADDR, &[1, 2, 3]);
        assert!(Listener::decode(b.bytes()).is_err());
        assert!(
            Listener::decode(nl::Builder::new().u16(FERRY_A_LISTENER_PORT, 1).bytes()).is_err()
        );
    }
}
