// SPDX-License-Identifier: GPL-2.0
//! `ferryctl monitor`: prints ferry's notifications (the `events` multicast
//! group), and ferry_blk's when it is loaded (its family's `events` group),
//! as they arrive, one line each, until killed.

use std::io::{self, Write};

use serde_json::{json, Map, Value};

use crate::{
    attr::{self, Attrs},
    nl::Error,
    session::Session,
    uapi::*,
    usage, CliError, Ctx,
};

/// `monitor` takes no arguments.
pub fn parse(args: &[String]) -> Result<(), CliError> {
    match args.first() {
        None => Ok(()),
        Some(a) => Err(usage(format!("unknown argument \"{a}\""))),
    }
}

/// A device ferry started or stopped using.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DeviceEvent {
    pub index: u32,
    pub name: String,
}

impl DeviceEvent {
    fn decode(payload: &[u8]) -> Result<Self, Error> {
        let bad = || Error::Protocol("malformed device event".into());
        let mut d = DeviceEvent::default();
        let (mut have_index, mut have_name) = (false, false);
        for (ty, p) in Attrs::new(payload) {
            match u32::from(ty) {
                FERRY_A_DEVICE_EVENT_INDEX => {
                    d.index = attr::u32(p).ok_or_else(bad)?;
                    have_index = true;
                }
                FERRY_A_DEVICE_EVENT_NAME => {
                    d.name = attr::string(p).ok_or_else(bad)?;
                    have_name = true;
                }
                _ => {}
            }
        }
        if !have_index || !have_name {
            return Err(Error::Protocol("device event without index or name".into()));
        }
        Ok(d)
    }
}

/// The family a notification came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Source {
    /// `ferry`: sessions and devices.
    Ferry,
    /// `ferry-blk`: exports and mappings.
    Blk,
}

/// One notification, rendered: the text line, or the JSON object's line.
/// `None` for a command this ferryctl does not know (a newer kernel's).
pub fn render(
    source: Source,
    cmd: u8,
    payload: &[u8],
    json: bool,
    pretty: bool,
    stats: bool,
) -> Result<Option<String>, Error> {
    if source == Source::Blk {
        return match crate::blk::event(cmd, payload)? {
            Some((event, obj, text)) => line(event, obj, text, json, pretty).map(Some),
            None => Ok(None),
        };
    }
    let (event, obj, text) = match u32::from(cmd) {
        FERRY_CMD_SESSION_NTF => {
            let s = Session::decode(payload)?;
            ("session", s.to_json(stats), s.summary())
        }
        FERRY_CMD_LISTENER_NTF => {
            let l = crate::listener::Listener::decode(payload)?;
            (
                "listener",
                l.to_json(),
                l.to_text().lines().next().unwrap_or_default().to_string(),
            )
        }
        c @ (FERRY_CMD_DEVICE_ADD_NTF | FERRY_CMD_DEVICE_DEL_NTF) => {
            let d = DeviceEvent::decode(payload)?;
            let (event, verb) = if c == FERRY_CMD_DEVICE_ADD_NTF {
                ("device-add", "add")
            } else {
                ("device-del", "del")
            };
            let obj = json!({ "index": d.index, "name": d.name });
            (
                event,
                obj,
                format!("device {verb} {} index {}", d.name, d.index),
            )
        }
        _ => return Ok(None),
    };
    line(event, obj, text, json, pretty).map(Some)
}

/// An event's line: `text`, or the JSON object of `event` and `obj`'s keys.
fn line(event: &str, obj: Value, text: String, json: bool, pretty: bool) -> Result<String, Error> {
    if !json {
        return Ok(text);
    }
    // "event" first, then the object's own keys.
    let mut o = Map::new();
    o.insert("event".into(), json!(event));
    if let Value::Object(fields) = obj {
        o.extend(fields);
    }
    let v = Value::Object(o);
    let s = if pretty {
        serde_json::to_string_pretty(&v)
    } else {
        serde_json::to_string(&v)
    };
    s.map_err(|e| Error::Protocol(format!("cannot encode JSON: {e}")))
}

/// Subscribes to `events` (and ferry_blk's, when it is loaded: a ferry_blk
/// loaded later is not followed) and prints every notification until
/// killed (or until standard output is closed, which ends it quietly).
pub fn run(ctx: &mut Ctx, json: bool, pretty: bool) -> Result<(), CliError> {
    let family = ctx.family()?;
    let group = ctx.mcast_group(FERRY_MCGRP_EVENTS)?;
    let kernel = |e| CliError::Kernel(e, |_| None);
    ctx.sock.subscribe(group).map_err(kernel)?;
    let mut families = vec![family];
    let blk = ctx.sock.family(FERRY_BLK_FAMILY_NAME).ok();
    if let Some(b) = &blk {
        let group = b.group(FERRY_BLK_MCGRP_EVENTS).ok_or_else(|| {
            kernel(Error::NoGroup(
                FERRY_BLK_FAMILY_NAME.into(),
                FERRY_BLK_MCGRP_EVENTS.into(),
            ))
        })?;
        ctx.sock.subscribe(group).map_err(kernel)?;
        families.push(b.id);
    }
    let stdout = io::stdout();
    loop {
        let events = match ctx.sock.events(&families) {
            Ok(ev) => ev,
            Err(Error::Io(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                eprintln!("Warning: notifications were lost (receive buffer overrun)");
                continue;
            }
            Err(e) => return Err(kernel(e)),
        };
        for ev in events {
            let source = if ev.family == family {
                Source::Ferry
            } else {
                Source::Blk
            };
            match render(source, ev.cmd, &ev.payload, json, pretty, ctx.stats) {
                Ok(Some(line)) => {
                    // A line at a time, flushed: a reader on a pipe sees each
                    // event as it happens.
                    let mut w = stdout.lock();
                    if writeln!(w, "{line}").and_then(|()| w.flush()).is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {}
                Err(e) => eprintln!("Warning: skipped a notification: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{nl::Builder, session};

    fn device(index: u32, name: &str) -> Vec<u8> {
        Builder::new()
            .u32(FERRY_A_DEVICE_EVENT_INDEX, index)
            .str(FERRY_A_DEVICE_EVENT_NAME, name)
            .bytes()
            .to_vec()
    }

    fn render_ok(cmd: u32, p: &[u8], json: bool) -> String {
        render(Source::Ferry, cmd as u8, p, json, false, false)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn device_events() {
        let p = device(2, "rxe0");
        assert_eq!(
            render_ok(FERRY_CMD_DEVICE_ADD_NTF, &p, false),
            "device add rxe0 index 2"
        );
        assert_eq!(
            render_ok(FERRY_CMD_DEVICE_DEL_NTF, &p, false),
            "device del rxe0 index 2"
        );
        assert_eq!(
            render_ok(FERRY_CMD_DEVICE_ADD_NTF, &p, true),
            r#"{"event":"device-add","index":2,"name":"rxe0"}"#
        );
        assert_eq!(
            render_ok(FERRY_CMD_DEVICE_DEL_NTF, &p, true),
            r#"{"event":"device-del","index":2,"name":"rxe0"}"#
        );
        let no_name = Builder::new().u32(FERRY_A_DEVICE_EVENT_INDEX, 2);
        assert!(render(
            Source::Ferry,
            FERRY_CMD_DEVICE_ADD_NTF as u8,
            no_name.bytes(),
            false,
            false,
            false
        )
        .is_err());
    }

    #[test]
    fn listener_events_say_whether_it_listens() {
        let p = Builder::new()
            .u32(FERRY_A_LISTENER_ID, 1)
            .binary(FERRY_A_LISTENER_ADDR, &[192, 0, 2, 1])
            .u16(FERRY_A_LISTENER_PORT, 4791)
            .u32(FERRY_A_LISTENER_STATE, FERRY_LISTENER_STATE_WAITING)
            .u32(FERRY_A_LISTENER_MAX_CHANNELS, 64);
        let text = render_ok(FERRY_CMD_LISTENER_NTF, p.bytes(), false);
        assert_eq!(text, "listener 1 addr 192.0.2.1 port 4791 state waiting");
        let v: Value =
            serde_json::from_str(&render_ok(FERRY_CMD_LISTENER_NTF, p.bytes(), true)).unwrap();
        assert_eq!(
            (&v["event"], &v["state"], &v["id"]),
            (&json!("listener"), &json!("waiting"), &json!(1))
        );
    }

    #[test]
    fn session_events_are_one_line() {
        let p = session::tests::sample();
        let text = render_ok(FERRY_CMD_SESSION_NTF, &p, false);
        assert!(
            text.starts_with("session 3 server reconnecting peer 192.0.2.2 port 4791"),
            "{text}"
        );
        assert!(text.ends_with(" reason unknown-service"), "{text}");
        assert!(!text.contains('\n'));
        let line = render_ok(FERRY_CMD_SESSION_NTF, &p, true);
        assert!(!line.contains('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v.as_object().unwrap().keys().next().unwrap(), "event");
        assert_eq!(v["event"], "session");
        assert_eq!(v["id"], 3);
        assert_eq!(v["state"], "reconnecting");
        assert_eq!(v["channel_list"].as_array().unwrap().len(), 2);
        assert!(v.get("stats").is_none());
        let with_stats = render(
            Source::Ferry,
            FERRY_CMD_SESSION_NTF as u8,
            &p,
            true,
            false,
            true,
        )
        .unwrap()
        .unwrap();
        let v: Value = serde_json::from_str(&with_stats).unwrap();
        assert_eq!(v["stats"]["rx_msgs"], 10);
    }

    #[test]
    fn unknown_commands_are_skipped() {
        assert_eq!(
            render(Source::Ferry, 200, &[], false, false, false).unwrap(),
            None
        );
        assert_eq!(
            render(
                Source::Ferry,
                FERRY_CMD_SESSION_GET as u8 + 100,
                &[],
                true,
                false,
                false
            )
            .unwrap(),
            None
        );
        assert_eq!(
            render(Source::Blk, 200, &[], false, false, false).unwrap(),
            None
        );
    }

    #[test]
    fn blk_events() {
        let export = Builder::new()
            .str(FERRY_BLK_A_EXPORT_NAME, "ram0")
            .str(FERRY_BLK_A_EXPORT_PATH, "/dev/nullb0")
            .flag(FERRY_BLK_A_EXPORT_READ_ONLY)
            .u64(FERRY_BLK_A_EXPORT_SECTORS, 2048);
        let ntf = |cmd: u32, p: &Builder, json| {
            render(Source::Blk, cmd as u8, p.bytes(), json, false, false)
                .unwrap()
                .unwrap()
        };
        assert_eq!(
            ntf(FERRY_BLK_CMD_EXPORT_ADD_NTF, &export, false),
            "blk export add ram0 path /dev/nullb0 sectors 2048 ro"
        );
        let v: Value =
            serde_json::from_str(&ntf(FERRY_BLK_CMD_EXPORT_DEL_NTF, &export, true)).unwrap();
        assert_eq!(v["event"], "blk-export-del");
        assert_eq!(v["sectors"], 2048);
        assert!(v.get("kind").is_none());
        let change = Builder::new()
            .u32(FERRY_BLK_A_MAP_INDEX, 0)
            .str(FERRY_BLK_A_MAP_EXPORT, "ram0")
            .str(FERRY_BLK_A_MAP_DISK, "ferryblk0")
            .u64(FERRY_BLK_A_MAP_SECTORS, 4096)
            .u32(FERRY_BLK_A_MAP_STATE, FERRY_BLK_MAP_STATE_DEAD);
        assert_eq!(
            ntf(FERRY_BLK_CMD_MAP_CHANGE_NTF, &change, false),
            "blk map change ferryblk0 export ram0 sectors 4096 state dead"
        );
        let v: Value =
            serde_json::from_str(&ntf(FERRY_BLK_CMD_MAP_CHANGE_NTF, &change, true)).unwrap();
        assert_eq!(v["state"], "dead");
        assert!(v.get("read_only").is_none());
        // Without the disk's name, it is malformed.
        let bare = Builder::new().u32(FERRY_BLK_A_MAP_INDEX, 0);
        assert!(render(
            Source::Blk,
            FERRY_BLK_CMD_MAP_ADD_NTF as u8,
            bare.bytes(),
            false,
            false,
            false
        )
        .is_err());
    }

    #[test]
    fn takes_no_arguments() {
        assert!(parse(&[]).is_ok());
        assert!(parse(&["session".to_string()]).is_err());
    }
}
