// SPDX-License-Identifier: GPL-2.0
//! The `service` object: the services kernel modules offer through ferry.

use serde_json::{json, Map, Value};

use crate::{
    args::KwArgs,
    attr::{self, Attrs},
    matches,
    nl::{self, Error},
    uapi::*,
    usage, CliError, Ctx, Output,
};

/// A service as ferry reports it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub sessions: Option<u32>,
}

fn bad(what: &str) -> Error {
    Error::Protocol(format!("malformed service {what} attribute"))
}

impl Service {
    /// Decodes a service reply. Unknown attributes are skipped; known ones of
    /// the wrong size are an error, and so is a service without a name.
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let mut s = Service::default();
        let mut have_name = false;
        for (ty, p) in Attrs::new(payload) {
            match u32::from(ty) {
                FERRY_A_SERVICE_NAME => {
                    s.name = attr::string(p).ok_or_else(|| bad("name"))?;
                    have_name = true;
                }
                FERRY_A_SERVICE_SESSIONS => {
                    s.sessions = Some(attr::u32(p).ok_or_else(|| bad("sessions"))?)
                }
                _ => {}
            }
        }
        if !have_name {
            return Err(Error::Protocol("service without a name".into()));
        }
        Ok(s)
    }

    /// The JSON object: `name`, `sessions`.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("name".into(), json!(self.name));
        if let Some(n) = self.sessions {
            o.insert("sessions".into(), json!(n));
        }
        Value::Object(o)
    }

    /// `service echo sessions 2`.
    pub fn to_text(&self) -> String {
        let mut s = format!("service {}", self.name);
        if let Some(n) = self.sessions {
            s += &format!(" sessions {n}");
        }
        s.push('\n');
        s
    }
}

/// Names of the `service` attributes, for error messages.
pub fn attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_A_SERVICE_NAME => Some("name"),
        FERRY_A_SERVICE_SESSIONS => Some("sessions"),
        _ => None,
    }
}

/// A parsed `service` command: `show [name NAME]`; `None` is `help`.
pub fn parse(command: &str, args: &[String]) -> Result<Option<Option<String>>, CliError> {
    if matches(command, "show") || matches(command, "list") {
        let kw = KwArgs::parse(args, &["name"], Some("name"))?;
        Ok(Some(kw.get("name").map(String::from)))
    } else if matches(command, "help") {
        Ok(None)
    } else if args.is_empty() {
        // `ferryctl service echo`
        Ok(Some(Some(command.to_string())))
    } else {
        Err(usage(format!("unknown service command \"{command}\"")))
    }
}

/// Lists the services (only `name`, if given: nothing if there is none).
pub fn show(ctx: &mut Ctx, name: Option<&str>) -> Result<Output, CliError> {
    let replies = ctx.request(
        FERRY_CMD_SERVICE_GET,
        nl::NLM_F_DUMP,
        &nl::Builder::new(),
        attr_name,
    )?;
    let mut services = Vec::new();
    for r in &replies {
        let s = Service::decode(r).map_err(|e| CliError::Kernel(e, attr_name))?;
        if name.is_none_or(|n| n == s.name) {
            services.push(s);
        }
    }
    Ok(Output {
        json: services.iter().map(Service::to_json).collect(),
        text: services.iter().map(Service::to_text).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_commands() {
        let p = |s: &str| {
            let a = args(s);
            parse(&a[0], &a[1..])
        };
        assert_eq!(p("show").unwrap(), Some(None));
        assert_eq!(p("show name echo").unwrap(), Some(Some("echo".into())));
        assert_eq!(p("show echo").unwrap(), Some(Some("echo".into())));
        assert_eq!(p("echo").unwrap(), Some(Some("echo".into())));
        assert_eq!(p("help").unwrap(), None);
        assert!(matches!(p("frob x"), Err(CliError::Usage(_))));
    }

    #[test]
    fn decodes_into_text_and_json() {
        let b = nl::Builder::new()
            .str(FERRY_A_SERVICE_NAME, "echo")
            .u32(FERRY_A_SERVICE_SESSIONS, 2);
        let s = Service::decode(b.bytes()).unwrap();
        assert_eq!(s.to_text(), "service echo sessions 2\n");
        assert_eq!(s.to_json(), json!({"name": "echo", "sessions": 2}));
        assert!(
            Service::decode(nl::Builder::new().u32(FERRY_A_SERVICE_SESSIONS, 1).bytes()).is_err()
        );
    }
}
