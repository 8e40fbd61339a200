// SPDX-License-Identifier: GPL-2.0
//! Command-line arguments: `KEY VALUE` pairs in iproute2 style, numbers and IP
//! addresses. Everything here runs before any netlink: a bad argument is a
//! usage error (exit 1) and nothing reaches the kernel.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    str::FromStr,
};

use crate::{usage, CliError};

/// The keyword arguments of a command.
#[derive(Debug, Default)]
pub struct KwArgs {
    pairs: Vec<(&'static str, String)>,
}

impl KwArgs {
    /// Parses `args` as `KEY VALUE` pairs. Each of `keys` is a keyword, with
    /// aliases after `|` (`"addr|peer"`: the first is the one [`KwArgs::get`]
    /// knows); `_` and `-` are the same in a keyword (`queue_depth`). A word
    /// that is no keyword is the value of `positional`, once
    /// (`listener show 3` is `listener show id 3`).
    pub fn parse(
        args: &[String],
        keys: &[&'static str],
        positional: Option<&'static str>,
    ) -> Result<Self, CliError> {
        let mut kw = KwArgs::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let word = a.replace('_', "-");
            let key = keys
                .iter()
                .find(|k| k.split('|').any(|n| n == word))
                .map(|k| k.split('|').next().unwrap_or(k));
            let (key, value) = match (key, positional) {
                (Some(k), _) => {
                    let v = it
                        .next()
                        .ok_or_else(|| usage(format!("\"{a}\" needs a value")))?;
                    (k, v.clone())
                }
                (None, Some(p)) if !kw.has(p) && !a.starts_with('-') => (p, a.clone()),
                (None, _) => return Err(usage(format!("unknown argument \"{a}\""))),
            };
            if kw.has(key) {
                return Err(usage(format!("duplicate \"{key}\"")));
            }
            kw.pairs.push((key, value));
        }
        Ok(kw)
    }

    fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, which the command needs.
    pub fn required(&self, key: &str) -> Result<&str, CliError> {
        self.get(key)
            .ok_or_else(|| usage(format!("missing \"{key}\"")))
    }

    /// The value of `key` as a number, if given.
    pub fn num<T: FromStr>(&self, key: &str) -> Result<Option<T>, CliError> {
        self.get(key).map(|v| number(key, v)).transpose()
    }
}

/// The `id ID` (or bare `ID`) of a command that names one object.
pub fn required_id(args: &[String]) -> Result<u32, CliError> {
    let kw = KwArgs::parse(args, &["id"], Some("id"))?;
    number("id", kw.required("id")?)
}

/// `OBJECT ID ...` and `OBJECT id ID ...` are `show`: whether `command` starts
/// such a line, and the arguments for `show` if so.
pub fn show_shortcut(command: &str, args: &[String]) -> Option<Vec<String>> {
    if command == "id" || command.parse::<u32>().is_ok() {
        let mut all = vec![command.to_string()];
        all.extend_from_slice(args);
        Some(all)
    } else {
        None
    }
}

/// A decimal number, or a usage error naming `what`.
pub fn number<T: FromStr>(what: &str, v: &str) -> Result<T, CliError> {
    // u32::from_str takes a leading '+'; iproute2 does not.
    if v.starts_with('+') {
        return Err(usage(format!("invalid {what} \"{v}\"")));
    }
    v.parse()
        .map_err(|_| usage(format!("invalid {what} \"{v}\"")))
}

/// An IPv4 or IPv6 address (`0.0.0.0` and `::` are the wildcards). IPv6 may be
/// written in brackets, `[2001:db8::1]`.
pub fn parse_addr(s: &str) -> Result<IpAddr, CliError> {
    let bare = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .filter(|r| r.contains(':'))
        .unwrap_or(s);
    bare.parse().map_err(|_| {
        usage(format!(
            "invalid address \"{s}\" (need an IPv4 or IPv6 address)"
        ))
    })
}

/// The wire form of an address: 4 or 16 bytes, network byte order.
pub fn addr_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// An address from its wire form; `None` unless 4 or 16 bytes.
pub fn decode_addr(p: &[u8]) -> Option<IpAddr> {
    if let Ok(b) = <[u8; 4]>::try_from(p) {
        Some(IpAddr::V4(Ipv4Addr::from(b)))
    } else if let Ok(b) = <[u8; 16]>::try_from(p) {
        Some(IpAddr::V6(Ipv6Addr::from(b)))
    } else {
        None
    }
}

/// Checks a name of `what` (a key's, an export's): 1 to `max` of `a-z`,
/// `0-9`, `.`, `_`, `-`.
pub fn short_name(what: &str, s: &str, max: u32) -> Result<String, CliError> {
    let ok = !s.is_empty()
        && s.len() <= max as usize
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(&c));
    if ok {
        Ok(s.to_string())
    } else {
        Err(usage(format!(
            "invalid {what} name \"{s}\" (1 to {max} of a-z, 0-9, '.', '_', '-')"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn err(r: Result<impl std::fmt::Debug, CliError>) -> String {
        match r {
            Err(CliError::Usage(m)) => m,
            Err(CliError::Kernel(e, _)) => panic!("kernel error {e}"),
            Ok(v) => panic!("accepted: {v:?}"),
        }
    }

    #[test]
    fn ipv4_and_ipv6_addresses() {
        let a = parse_addr("192.0.2.1").unwrap();
        assert_eq!(addr_bytes(&a), vec![192, 0, 2, 1]);
        assert_eq!(addr_bytes(&parse_addr("0.0.0.0").unwrap()), vec![0; 4]);
        assert_eq!(addr_bytes(&parse_addr("::").unwrap()), vec![0; 16]);
        let a = parse_addr("2001:db8::1").unwrap();
        let mut want = vec![0x20, 0x01, 0x0d, 0xb8];
        want.extend_from_slice(&[0; 11]);
        want.push(1);
        assert_eq!(addr_bytes(&a), want);
        assert_eq!(parse_addr("[2001:db8::1]").unwrap(), a);
        // Round trip through the wire form, printed plain.
        assert_eq!(decode_addr(&want).unwrap().to_string(), "2001:db8::1");
        assert_eq!(
            decode_addr(&[192, 0, 2, 1]).unwrap().to_string(),
            "192.0.2.1"
        );
        assert_eq!(decode_addr(&[1, 2, 3]), None);
        assert_eq!(decode_addr(&[]), None);
    }

    #[test]
    fn bad_addresses() {
        for a in [
            "192.0.2",
            "192.0.2.256",
            "host.example",
            "[192.0.2.1]",
            "2001:db8::1::2",
            "fe80::1%eth0",
            "",
        ] {
            assert!(err(parse_addr(a)).starts_with("invalid address"), "{a}");
        }
    }

    #[test]
    fn keywords_aliases_and_positional() {
        let keys = ["addr|peer", "port", "queue-depth"];
        let kw = KwArgs::parse(
            &args("192.0.2.1 port 4791 queue_depth 64"),
            &keys,
            Some("addr"),
        )
        .unwrap();
        assert_eq!(kw.get("addr"), Some("192.0.2.1"));
        assert_eq!(kw.num::<u16>("port").unwrap(), Some(4791));
        assert_eq!(kw.num::<u32>("queue-depth").unwrap(), Some(64));
        assert_eq!(kw.num::<u32>("channels").unwrap(), None);
        let kw = KwArgs::parse(&args("peer ::1"), &keys, None).unwrap();
        assert_eq!(kw.required("addr").unwrap(), "::1");
        assert_eq!(err(kw.required("port")), "missing \"port\"");
    }

    #[test]
    fn keyword_usage_errors() {
        let keys = ["addr", "port"];
        let e = |s: &str, pos| err(KwArgs::parse(&args(s), &keys, pos));
        assert_eq!(e("port", None), "\"port\" needs a value");
        assert_eq!(e("bogus 1", None), "unknown argument \"bogus\"");
        assert_eq!(e("::1 ::2", Some("addr")), "unknown argument \"::2\"");
        assert_eq!(e("::1 addr ::2", Some("addr")), "duplicate \"addr\"");
        assert_eq!(e("port 1 port 2", None), "duplicate \"port\"");
        assert_eq!(e("-5", Some("addr")), "unknown argument \"-5\"");
        let kw = KwArgs::parse(&args("port 70000"), &keys, None).unwrap();
        assert_eq!(err(kw.num::<u16>("port")), "invalid port \"70000\"");
        assert_eq!(err(number::<u32>("id", "+3")), "invalid id \"+3\"");
        assert_eq!(err(number::<u32>("id", "-1")), "invalid id \"-1\"");
        assert_eq!(err(number::<u32>("id", "0x10")), "invalid id \"0x10\"");
    }
}
