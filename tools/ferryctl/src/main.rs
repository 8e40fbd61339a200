// SPDX-License-Identifier: GPL-2.0
//! ferryctl: control tool for ferry, an RDMA transport for kernel modules.
//!
//! Grammar (iproute2 style): `ferryctl [OPTIONS] OBJECT [COMMAND [ARGS]]`, with
//! `show` as the default command and objects and commands abbreviable.
//! Exit codes: 0 success, 1 usage error, 2 the kernel refused or is unreachable.

mod args;
mod attr;
mod blk;
mod device;
mod key;
mod listener;
mod monitor;
mod nl;
mod service;
mod session;

/// Constants generated from include/uapi/linux/ferry.h (see build.rs).
#[allow(dead_code)]
mod uapi {
    include!(concat!(env!("OUT_DIR"), "/uapi.rs"));
}

use std::{io::Write, process::ExitCode};

use serde_json::Value;

const HELP: &str = "\
Usage: ferryctl [OPTIONS] OBJECT [COMMAND [ARGS]]
       ferryctl help

OBJECT := { device | key | listener | service | session | blk | monitor }
OPTIONS := { -j[son] | -p[retty] | -s[tatistics] | -d[etails] | -V[ersion] | -h[elp] }

ferryctl device show [DEV | name DEV | index N]
    RDMA devices ferry uses and the resources it holds on each.

ferryctl key add NAME [file PATH]
ferryctl key del NAME
ferryctl key show
    Pre-shared keys, by name: 16 to 128 bytes read from PATH or standard
    input (one trailing newline dropped), never shown again.

ferryctl listener add ADDR port PORT [key NAME] [max-sessions N]
         [max-sessions-per-peer N] [max-pending N] [max-pending-per-peer N]
         [max-channels N]
ferryctl listener del id ID
ferryctl listener show [id ID]
    Addresses and ports on which ferry accepts sessions (ADDR may be
    0.0.0.0 or ::); with a key, only clients that prove it. The limits:
    open sessions and sessions waiting for their hello, in all and from
    one address (default 1024, 256, 64, 8), channels a session (64).

ferryctl service show [NAME | name NAME]
    Services kernel modules offer through ferry, with their sessions.

ferryctl session connect ADDR port PORT service NAME [channels N]
        [queue-depth N] [max-msg-size BYTES] [heartbeat-ms MS]
        [timeout-ms MS] [give-up-s S] [key NAME]
ferryctl session disconnect id ID
ferryctl session show [id ID]
    Sessions to and from peers; -d adds their channels, -s their counters.

ferryctl blk export add NAME path DEV [uuid UUID] [ro] [shared]
ferryctl blk export del NAME [force]
ferryctl blk export resize NAME
    Block devices this host exports to ferry_blk clients (needs the
    ferry_blk module): opened exclusively; uuid: its identity (else the
    device's own ID, else random); ro: clients may only read; shared:
    several clients may write; force: delete while mapped.

ferryctl blk map ADDR [port PORT] export NAME [ro] [channels N]
        [poll-queues N] [depth N] [key NAME] [fast-fail S] [give-up S]
        [reconnect-delay S]
ferryctl blk set DEV [fast-fail S] [give-up S] [reconnect-delay S]
ferryctl blk unmap DEV [force]
ferryctl blk show
    Other hosts' exports mapped as local disks (/dev/ferryblkN; PORT
    defaults to 4791); fast-fail: seconds disconnected before I/O fails at
    once (0, the default: never); give-up: before the disk is dead (600);
    reconnect-delay: the longest wait between reconnect attempts (10);
    channels: hardware queues (one per CPU); poll-queues: polled queues
    after them, for io_uring's polled I/O (0); set changes the times live. force: unmap while the disk is open, failing its
    I/O. show lists exports and mappings; -s adds their counters.

ferryctl monitor
    Print session and device events as they happen, until interrupted.

Exit status: 0 success, 1 usage error, 2 the kernel refused the request.
";

/// Command-line state shared by the objects.
pub struct Ctx {
    sock: nl::Socket,
    family: Option<nl::Family>,
    /// The `ferry-blk` family, resolved on first use.
    blk_family: Option<u16>,
    details: bool,
    stats: bool,
}

impl Ctx {
    /// The `ferry` family, resolved on first use.
    fn resolve(&mut self) -> Result<&nl::Family, CliError> {
        let f = match self.family.take() {
            Some(f) => f,
            None => self
                .sock
                .family(uapi::FERRY_FAMILY_NAME)
                .map_err(|e| CliError::Kernel(e, |_| None))?,
        };
        Ok(self.family.insert(f))
    }

    /// The `ferry` family id.
    fn family(&mut self) -> Result<u16, CliError> {
        Ok(self.resolve()?.id)
    }

    /// The id of the `ferry` multicast group `name`.
    fn mcast_group(&mut self, name: &str) -> Result<u32, CliError> {
        self.resolve()?.group(name).ok_or_else(|| {
            CliError::Kernel(
                nl::Error::NoGroup(uapi::FERRY_FAMILY_NAME.into(), name.into()),
                |_| None,
            )
        })
    }

    /// Sends a `ferry` request and returns its replies; `names` names the
    /// attributes a kernel error may point at.
    fn request(
        &mut self,
        cmd: u32,
        flags: u16,
        attrs: &nl::Builder,
        names: fn(u16) -> Option<&'static str>,
    ) -> Result<Vec<Vec<u8>>, CliError> {
        let family = self.family()?;
        let version = uapi::FERRY_FAMILY_VERSION;
        self.send(family, version, cmd, flags, attrs, names)
    }

    /// Sends a `ferry-blk` request (ferry_blk's family) and returns its
    /// replies; as [`Ctx::request`].
    fn request_blk(
        &mut self,
        cmd: u32,
        flags: u16,
        attrs: &nl::Builder,
        names: fn(u16) -> Option<&'static str>,
    ) -> Result<Vec<Vec<u8>>, CliError> {
        let family = match self.blk_family {
            Some(f) => f,
            None => {
                let f = self
                    .sock
                    .family(uapi::FERRY_BLK_FAMILY_NAME)
                    .map_err(|e| CliError::Kernel(e, |_| None))?
                    .id;
                *self.blk_family.insert(f)
            }
        };
        let version = uapi::FERRY_BLK_FAMILY_VERSION;
        self.send(family, version, cmd, flags, attrs, names)
    }

    fn send(
        &mut self,
        family: u16,
        version: u32,
        cmd: u32,
        flags: u16,
        attrs: &nl::Builder,
        names: fn(u16) -> Option<&'static str>,
    ) -> Result<Vec<Vec<u8>>, CliError> {
        self.sock
            .request(family, cmd as u8, version as u8, flags, attrs.bytes())
            .map_err(|e| CliError::Kernel(e, names))
    }
}

/// What a command prints: the same objects as JSON and as text.
pub struct Output {
    json: Vec<Value>,
    text: Vec<String>,
}

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad command line: exit 1.
    Usage(String),
    /// The kernel said no: exit 2. The function names the object's attributes.
    Kernel(nl::Error, fn(u16) -> Option<&'static str>),
}

fn usage(msg: String) -> CliError {
    CliError::Usage(msg)
}

impl CliError {
    fn report(&self) -> (String, u8) {
        match self {
            CliError::Usage(m) => (format!("Error: {m}. Try \"ferryctl help\"."), 1),
            CliError::Kernel(e, names) => {
                let mut s = format!("Error: {e}");
                if let nl::Error::Kernel(k) = e {
                    let name = |t: u16| {
                        names(t)
                            .map(|n| format!("\"{n}\""))
                            .unwrap_or(format!("{t}"))
                    };
                    if let Some(t) = k.missing_attr {
                        s += &format!(" [missing attribute {}]", name(t));
                    } else if let Some(t) = k.bad_attr {
                        s += &format!(" [attribute {}]", name(t));
                    }
                }
                (s, 2)
            }
        }
    }
}

struct Opts {
    json: bool,
    pretty: bool,
    details: bool,
    stats: bool,
}

/// Matches `word` against `full` the way iproute2 does: any non-empty prefix.
fn matches(word: &str, full: &str) -> bool {
    !word.is_empty() && full.starts_with(word)
}

fn parse_opts(args: &mut Vec<String>) -> Result<Option<Opts>, CliError> {
    let mut o = Opts {
        json: false,
        pretty: false,
        details: false,
        stats: false,
    };
    while let Some(a) = args.first().cloned() {
        if !a.starts_with('-') || a == "-" {
            break;
        }
        args.remove(0);
        let w = a.trim_start_matches('-');
        if matches(w, "json") {
            o.json = true;
        } else if matches(w, "pretty") {
            o.pretty = true;
        } else if matches(w, "details") {
            o.details = true;
        } else if matches(w, "statistics") || w == "stats" {
            o.stats = true;
        } else if matches(w, "Version") {
            println!("ferryctl {}", env!("CARGO_PKG_VERSION"));
            return Ok(None);
        } else if matches(w, "help") {
            print!("{HELP}");
            return Ok(None);
        } else {
            return Err(usage(format!("unknown option \"{a}\"")));
        }
    }
    Ok(Some(o))
}

fn run(mut args: Vec<String>) -> Result<(), CliError> {
    let Some(opts) = parse_opts(&mut args)? else {
        return Ok(());
    };
    let Some(object) = args.first().cloned() else {
        eprint!("{HELP}");
        return Err(usage("missing OBJECT".into()));
    };
    args.remove(0);
    if matches(&object, "help") {
        print!("{HELP}");
        return Ok(());
    }
    // A usage error never reaches the kernel: every object checks all of its
    // arguments before it sends anything (listener, session and monitor even
    // before this opens the socket). `-s` is accepted for every object; only
    // sessions have statistics.
    let open = || -> Result<Ctx, CliError> {
        Ok(Ctx {
            sock: nl::Socket::open().map_err(|e| CliError::Kernel(e, |_| None))?,
            family: None,
            blk_family: None,
            details: opts.details,
            stats: opts.stats,
        })
    };
    if matches(&object, "monitor") {
        // No commands: `ferryctl monitor` and nothing more (or `help`).
        if args.len() == 1 && matches(&args[0], "help") {
            print!("{HELP}");
            return Ok(());
        }
        monitor::parse(&args)?;
        return monitor::run(&mut open()?, opts.json, opts.pretty);
    }
    let command = args.first().cloned().unwrap_or_else(|| "show".into());
    if !args.is_empty() {
        args.remove(0);
    }
    let out = if matches(&object, "device") {
        if matches(&command, "show") || matches(&command, "list") {
            device::show(&mut open()?, &args)?
        } else if matches(&command, "help") {
            print!("{HELP}");
            return Ok(());
        } else {
            // A device name given without "show": `ferryctl device rxe0`.
            let mut all = vec![command];
            all.extend(args);
            device::show(&mut open()?, &all)?
        }
    } else if matches(&object, "listener") {
        let Some(cmd) = listener::Cmd::parse(&command, &args)? else {
            print!("{HELP}");
            return Ok(());
        };
        match listener::exec(&mut open()?, &cmd)? {
            Some(out) => out,
            None => return Ok(()),
        }
    } else if matches(&object, "key") {
        let Some(cmd) = key::Cmd::parse(&command, &args)? else {
            print!("{HELP}");
            return Ok(());
        };
        match key::exec(&mut open()?, &cmd)? {
            Some(out) => out,
            None => return Ok(()),
        }
    } else if matches(&object, "service") {
        let Some(name) = service::parse(&command, &args)? else {
            print!("{HELP}");
            return Ok(());
        };
        service::show(&mut open()?, name.as_deref())?
    } else if matches(&object, "blk") {
        let Some(cmd) = blk::Cmd::parse(&command, &args)? else {
            print!("{HELP}");
            return Ok(());
        };
        match blk::exec(&mut open()?, &cmd)? {
            Some(out) => out,
            None => return Ok(()),
        }
    } else if matches(&object, "session") {
        let Some(cmd) = session::Cmd::parse(&command, &args)? else {
            print!("{HELP}");
            return Ok(());
        };
        match session::exec(&mut open()?, &cmd)? {
            Some(out) => out,
            None => return Ok(()),
        }
    } else {
        return Err(usage(format!("unknown object \"{object}\"")));
    };
    print_output(&out, opts.json, opts.pretty);
    Ok(())
}

fn print_output(out: &Output, json: bool, pretty: bool) {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if json {
        let v = Value::Array(out.json.clone());
        let s = if pretty {
            serde_json::to_string_pretty(&v)
        } else {
            serde_json::to_string(&v)
        };
        let _ = writeln!(w, "{}", s.unwrap_or_default());
    } else {
        for t in &out.text {
            let _ = write!(w, "{t}");
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (msg, code) = e.report();
            eprintln!("{msg}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_are_abbreviable() {
        let mut a = args("-j -p -d -s device show");
        let o = parse_opts(&mut a).ok().flatten().unwrap();
        assert!(o.json && o.pretty && o.details && o.stats);
        assert_eq!(a, args("device show"));
        let mut a = args("--json dev");
        assert!(parse_opts(&mut a).ok().flatten().unwrap().json);
    }

    #[test]
    fn usage_errors_exit_1() {
        let mut a = args("-x device");
        let e = parse_opts(&mut a).err().unwrap();
        assert_eq!(e.report().1, 1);
        assert!(e.report().0.starts_with("Error: unknown option \"-x\""));
        assert_eq!(run(args("frobnicate")).err().unwrap().report().1, 1);
        assert_eq!(run(vec![]).err().unwrap().report().1, 1);
    }

    #[test]
    fn kernel_errors_exit_2_and_name_the_attribute() {
        let k = nl::KernelError {
            errno: libc::ENODEV,
            msg: Some("no RDMA device with this name".into()),
            bad_attr: Some(uapi::FERRY_A_DEVICE_NAME as u16),
            missing_attr: None,
        };
        let (msg, code) = CliError::Kernel(nl::Error::Kernel(k), device::attr_name).report();
        assert_eq!(code, 2);
        assert_eq!(
            msg,
            "Error: no RDMA device with this name (No such device) [attribute \"name\"]"
        );
        let (msg, code) =
            CliError::Kernel(nl::Error::NoFamily("ferry".into()), device::attr_name).report();
        assert_eq!(code, 2);
        assert!(
            msg.starts_with("Error: the ferry module is not loaded"),
            "{msg}"
        );
    }

    #[test]
    fn bad_arguments_are_usage_errors_before_any_netlink() {
        for a in [
            "device show index x",
            "device show index",
            "device show rxe0 extra",
            "listener add 192.0.2.1",
            "listener add 192.0.2.1 port 4791 bogus",
            "listener del id x",
            "listener frob",
            "session connect 192.0.2.1 port 4791",
            "session connect 192.0.2.1 port 4791 service echo channels -1",
            "session connect ::1::2 port 4791 service echo",
            "session disconnect",
            "session show id 1 id 2",
            "monitor extra",
        ] {
            assert_eq!(run(args(a)).err().map(|e| e.report().1), Some(1), "{a}");
        }
    }

    #[test]
    fn usage_errors_are_one_line() {
        let (msg, code) = run(args("session connect ::1 port 4791"))
            .err()
            .unwrap()
            .report();
        assert_eq!(code, 1);
        assert_eq!(msg, "Error: missing \"service\". Try \"ferryctl help\".");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn missing_group_is_a_kernel_error() {
        let e = CliError::Kernel(nl::Error::NoGroup("ferry".into(), "events".into()), |_| {
            None
        });
        let (msg, code) = e.report();
        assert_eq!(code, 2);
        assert!(msg.starts_with("Error: the loaded ferry module has no multicast group \"events\""));
    }
}
