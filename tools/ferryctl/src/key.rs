// SPDX-License-Identifier: GPL-2.0
//! The `key` object: pre-shared keys a listener may require and a session
//! may name. Their bytes go into the kernel and never come back out.

use std::io::Read;

use serde_json::json;

use crate::{
    args::KwArgs,
    attr::{self, Attrs},
    matches,
    nl::{self, Error},
    uapi::*,
    usage, CliError, Ctx, Output,
};

/// Fewest bytes of a key (128 bits) and most.
const KEY_LEN: std::ops::RangeInclusive<usize> = 16..=128;

/// Checks a key name: 1 to 31 of `a-z`, `0-9`, `.`, `_`, `-`.
pub fn name(s: &str) -> Result<String, CliError> {
    crate::args::short_name("key", s, FERRY_SERVICE_NAME_LEN)
}

/// Names of the `key` attributes, for error messages.
pub fn attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_A_KEY_NAME => Some("name"),
        FERRY_A_KEY_SECRET => Some("secret"),
        _ => None,
    }
}

/// A parsed `key` command.
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `key add NAME [file PATH]`: the key from PATH, or standard input.
    Add { name: String, file: Option<String> },
    /// `key del NAME`
    Del { name: String },
    /// `key show`
    Show,
}

impl Cmd {
    /// Parses `key COMMAND ARGS`; `None` is `help`.
    pub fn parse(command: &str, args: &[String]) -> Result<Option<Self>, CliError> {
        if matches(command, "show") || matches(command, "list") {
            KwArgs::parse(args, &[], None)?;
            Ok(Some(Cmd::Show))
        } else if matches(command, "add") {
            let kw = KwArgs::parse(args, &["name", "file"], Some("name"))?;
            Ok(Some(Cmd::Add {
                name: name(kw.required("name")?)?,
                file: kw.get("file").map(String::from),
            }))
        } else if matches(command, "delete") {
            let kw = KwArgs::parse(args, &["name"], Some("name"))?;
            Ok(Some(Cmd::Del {
                name: name(kw.required("name")?)?,
            }))
        } else if matches(command, "help") {
            Ok(None)
        } else {
            Err(usage(format!("unknown key command \"{command}\"")))
        }
    }
}

/// The key's bytes as read: one trailing newline (`\n` or `\r\n`) dropped,
/// so `echo`, `base64` and editors can write a key file (a binary key that
/// ends in a newline byte loses it: keep keys as text); 16 to 128 bytes
/// left.
pub fn key_bytes(mut raw: Vec<u8>) -> Result<Vec<u8>, CliError> {
    if raw.ends_with(b"\n") {
        raw.pop();
        if raw.ends_with(b"\r") {
            raw.pop();
        }
    }
    if !KEY_LEN.contains(&raw.len()) {
        return Err(usage(format!(
            "a key is {} to {} bytes, not {}",
            KEY_LEN.start(),
            KEY_LEN.end(),
            raw.len()
        )));
    }
    Ok(raw)
}

fn read_key(file: Option<&str>) -> Result<Vec<u8>, CliError> {
    let mut raw = Vec::new();
    // Enough to tell a key that is too long: never all of /dev/urandom.
    let limit = *KEY_LEN.end() as u64 + 3;
    let res = match file {
        Some(path) => std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut raw)),
        None => std::io::stdin().take(limit).read_to_end(&mut raw),
    };
    res.map_err(|e| usage(format!("cannot read the key: {e}")))?;
    key_bytes(raw)
}

/// Runs a parsed command: `show` lists names, `add` and `del` print nothing.
pub fn exec(ctx: &mut Ctx, cmd: &Cmd) -> Result<Option<Output>, CliError> {
    match cmd {
        Cmd::Add { name, file } => {
            let mut secret = read_key(file.as_deref())?;
            let req = nl::Builder::new()
                .str(FERRY_A_KEY_NAME, name)
                .binary(FERRY_A_KEY_SECRET, &secret);
            secret.fill(0);
            ctx.request(FERRY_CMD_KEY_ADD, 0, &req, attr_name)?;
            Ok(None)
        }
        Cmd::Del { name } => {
            let req = nl::Builder::new().str(FERRY_A_KEY_NAME, name);
            ctx.request(FERRY_CMD_KEY_DEL, 0, &req, attr_name)?;
            Ok(None)
        }
        Cmd::Show => {
            let replies = ctx.request(
                FERRY_CMD_KEY_GET,
                nl::NLM_F_DUMP,
                &nl::Builder::new(),
                attr_name,
            )?;
            let mut names = Vec::new();
            for r in &replies {
                let n = Attrs::new(r)
                    .find(|(ty, _)| u32::from(*ty) == FERRY_A_KEY_NAME)
                    .and_then(|(_, p)| attr::string(p))
                    .ok_or_else(|| {
                        CliError::Kernel(Error::Protocol("key without a name".into()), attr_name)
                    })?;
                names.push(n);
            }
            Ok(Some(Output {
                json: names.iter().map(|n| json!({ "name": n })).collect(),
                text: names.iter().map(|n| format!("key {n}\n")).collect(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<Cmd>, CliError> {
        let a: Vec<String> = s.split_whitespace().map(String::from).collect();
        Cmd::parse(&a[0], &a[1..])
    }

    #[test]
    fn parses_commands() {
        assert_eq!(
            parse("add k1").unwrap(),
            Some(Cmd::Add {
                name: "k1".into(),
                file: None
            })
        );
        assert_eq!(
            parse("add name k1 file /tmp/k").unwrap(),
            Some(Cmd::Add {
                name: "k1".into(),
                file: Some("/tmp/k".into())
            })
        );
        assert_eq!(
            parse("del k1").unwrap(),
            Some(Cmd::Del { name: "k1".into() })
        );
        assert_eq!(parse("show").unwrap(), Some(Cmd::Show));
        assert_eq!(parse("help").unwrap(), None);
        for bad in ["add", "add K1", "add a/b", "del", "frob", "show x"] {
            assert!(matches!(parse(bad), Err(CliError::Usage(_))), "{bad}");
        }
        assert!(name(&"k".repeat(32)).is_err());
        assert!(name(&"k".repeat(31)).is_ok());
    }

    #[test]
    fn key_bytes_drop_one_newline_and_need_128_bits() {
        assert_eq!(key_bytes(b"0123456789abcdef\n".to_vec()).unwrap().len(), 16);
        assert_eq!(
            key_bytes(b"0123456789abcdef\r\n".to_vec()).unwrap().len(),
            16
        );
        assert_eq!(
            key_bytes(b"0123456789abcdef\n\n".to_vec()).unwrap().len(),
            17
        );
        assert!(key_bytes(b"0123456789abcde\n".to_vec()).is_err());
        assert!(key_bytes(vec![7; 129]).is_err());
        assert!(key_bytes(vec![7; 128]).is_ok());
    }
}
