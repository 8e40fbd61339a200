// SPDX-License-Identifier: GPL-2.0
//! The `device` object: RDMA devices and ferry's resources on them.

use serde_json::{json, Map, Value};

use crate::{
    attr::{self, Attrs},
    nl::{self, Error},
    uapi::*,
    Ctx, Output,
};

/// One port of a device.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Port {
    pub index: u32,
    pub state: Option<u32>,
    pub phys_state: Option<u32>,
    pub active_mtu: Option<u32>,
    pub max_mtu: Option<u32>,
    pub link_layer: Option<u32>,
    pub gid_tbl_len: Option<u32>,
    pub netdev: Option<String>,
}

/// An RDMA device as ferry reports it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Device {
    pub index: u32,
    pub name: String,
    pub node_guid: Option<u64>,
    pub node_type: Option<u32>,
    /// (json key, value) of the device's limits, in spec order.
    pub caps: Vec<(&'static str, u32)>,
    pub num_comp_vectors: Option<u32>,
    pub cap_flags: Option<u64>,
    pub ports: Vec<Port>,
    pub pd_id: Option<u32>,
}

const CAPS: [(u32, &str); 9] = [
    (FERRY_A_DEVICE_MAX_QP, "max_qp"),
    (FERRY_A_DEVICE_MAX_QP_WR, "max_qp_wr"),
    (FERRY_A_DEVICE_MAX_CQ, "max_cq"),
    (FERRY_A_DEVICE_MAX_CQE, "max_cqe"),
    (FERRY_A_DEVICE_MAX_MR, "max_mr"),
    (FERRY_A_DEVICE_MAX_PD, "max_pd"),
    (FERRY_A_DEVICE_MAX_SEND_SGE, "max_send_sge"),
    (FERRY_A_DEVICE_MAX_RECV_SGE, "max_recv_sge"),
    (
        FERRY_A_DEVICE_MAX_FAST_REG_PAGE_LIST_LEN,
        "max_fast_reg_page_list_len",
    ),
];

fn bad(what: &str) -> Error {
    Error::Protocol(format!("malformed {what} attribute"))
}

fn u32_of(p: &[u8], what: &str) -> Result<u32, Error> {
    attr::u32(p).ok_or_else(|| bad(what))
}

impl Device {
    /// Decodes a `device-get` reply. Unknown attributes are skipped, so newer
    /// kernels stay readable; known ones of the wrong size are an error.
    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let mut d = Device::default();
        let mut have_index = false;
        for (ty, p) in Attrs::new(payload) {
            match u32::from(ty) {
                FERRY_A_DEVICE_INDEX => {
                    d.index = u32_of(p, "index")?;
                    have_index = true;
                }
                FERRY_A_DEVICE_NAME => d.name = attr::string(p).ok_or_else(|| bad("name"))?,
                FERRY_A_DEVICE_NODE_GUID => {
                    d.node_guid = Some(attr::u64(p).ok_or_else(|| bad("node-guid"))?)
                }
                FERRY_A_DEVICE_NODE_TYPE => d.node_type = Some(u32_of(p, "node-type")?),
                FERRY_A_DEVICE_NUM_COMP_VECTORS => {
                    d.num_comp_vectors = Some(u32_of(p, "num-comp-vectors")?)
                }
                FERRY_A_DEVICE_CAP_FLAGS => {
                    d.cap_flags = Some(attr::u64(p).ok_or_else(|| bad("cap-flags"))?)
                }
                FERRY_A_DEVICE_PD_ID => d.pd_id = Some(u32_of(p, "pd-id")?),
                FERRY_A_DEVICE_PORT => d.ports.push(decode_port(p)?),
                t => {
                    if let Some((_, key)) = CAPS.iter().find(|(a, _)| *a == t) {
                        d.caps.push((key, u32_of(p, key)?));
                    }
                }
            }
        }
        if !have_index || d.name.is_empty() {
            return Err(Error::Protocol("device without index or name".into()));
        }
        Ok(d)
    }

    /// The JSON object of this device: stable snake_case keys.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("index".into(), json!(self.index));
        o.insert("name".into(), json!(self.name));
        if let Some(t) = self.node_type {
            o.insert("node_type".into(), json!(node_type_name(t)));
        }
        if let Some(g) = self.node_guid {
            o.insert("node_guid".into(), json!(guid(g)));
        }
        if let Some(n) = self.num_comp_vectors {
            o.insert("num_comp_vectors".into(), json!(n));
        }
        let ports: Vec<Value> = self.ports.iter().map(port_json).collect();
        o.insert("ports".into(), Value::Array(ports));
        if let Some(pd) = self.pd_id {
            o.insert("pd".into(), json!({ "id": pd }));
        }
        let mut caps = Map::new();
        for (k, v) in &self.caps {
            caps.insert((*k).into(), json!(v));
        }
        if let Some(f) = self.cap_flags {
            caps.insert("cap_flags".into(), json!(format!("{f:#x}")));
        }
        o.insert("caps".into(), Value::Object(caps));
        Value::Object(o)
    }

    /// The text form, in the style of `rdma dev show` (`details` adds limits).
    pub fn to_text(&self, details: bool) -> String {
        let mut s = format!("{}: {}:", self.index, self.name);
        if let Some(t) = self.node_type {
            s += &format!(" node_type {}", node_type_name(t));
        }
        if let Some(g) = self.node_guid {
            s += &format!(" node_guid {}", guid(g));
        }
        if let Some(n) = self.num_comp_vectors {
            s += &format!(" comp_vectors {n}");
        }
        if let Some(pd) = self.pd_id {
            s += &format!(" pd {pd}");
        }
        s.push('\n');
        for p in &self.ports {
            s += &format!("    port {}", p.index);
            if let Some(v) = p.state {
                s += &format!(" state {}", port_state_name(v));
            }
            if let Some(v) = p.phys_state {
                s += &format!(" physical_state {}", phys_state_name(v));
            }
            if let Some(v) = &p.netdev {
                s += &format!(" netdev {v}");
            }
            if let Some(v) = p.active_mtu {
                s += &format!(" mtu {v}");
            }
            if details {
                if let Some(v) = p.max_mtu {
                    s += &format!(" max_mtu {v}");
                }
                if let Some(v) = p.link_layer {
                    s += &format!(" link_layer {}", link_layer_name(v));
                }
                if let Some(v) = p.gid_tbl_len {
                    s += &format!(" gid_tbl_len {v}");
                }
            }
            s.push('\n');
        }
        if details {
            s += "    caps";
            for (k, v) in &self.caps {
                s += &format!(" {k} {v}");
            }
            if let Some(f) = self.cap_flags {
                s += &format!(" cap_flags {f:#x}");
            }
            s.push('\n');
        }
        s
    }
}

fn decode_port(p: &[u8]) -> Result<Port, Error> {
    let mut port = Port::default();
    for (ty, v) in Attrs::new(p) {
        let val = || u32_of(v, "port");
        match u32::from(ty) {
            FERRY_A_PORT_INDEX => port.index = val()?,
            FERRY_A_PORT_STATE => port.state = Some(val()?),
            FERRY_A_PORT_PHYS_STATE => port.phys_state = Some(val()?),
            FERRY_A_PORT_ACTIVE_MTU => port.active_mtu = Some(val()?),
            FERRY_A_PORT_MAX_MTU => port.max_mtu = Some(val()?),
            FERRY_A_PORT_LINK_LAYER => port.link_layer = Some(val()?),
            FERRY_A_PORT_GID_TBL_LEN => port.gid_tbl_len = Some(val()?),
            FERRY_A_PORT_NETDEV => {
                port.netdev = Some(attr::string(v).ok_or_else(|| bad("port netdev"))?)
            }
            _ => {}
        }
    }
    Ok(port)
}

fn port_json(p: &Port) -> Value {
    let mut o = Map::new();
    o.insert("port".into(), json!(p.index));
    if let Some(v) = p.state {
        o.insert("state".into(), json!(port_state_name(v)));
    }
    if let Some(v) = p.phys_state {
        o.insert("physical_state".into(), json!(phys_state_name(v)));
    }
    if let Some(v) = &p.netdev {
        o.insert("netdev".into(), json!(v));
    }
    if let Some(v) = p.active_mtu {
        o.insert("active_mtu".into(), json!(v));
    }
    if let Some(v) = p.max_mtu {
        o.insert("max_mtu".into(), json!(v));
    }
    if let Some(v) = p.link_layer {
        o.insert("link_layer".into(), json!(link_layer_name(v)));
    }
    if let Some(v) = p.gid_tbl_len {
        o.insert("gid_tbl_len".into(), json!(v));
    }
    Value::Object(o)
}

/// A GUID as `rdma` prints it: four groups of four hex digits.
pub fn guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn name_or_num(names: &[&str], first: u32, v: u32) -> String {
    v.checked_sub(first)
        .and_then(|i| names.get(i as usize))
        .map(|s| s.to_string())
        .unwrap_or_else(|| v.to_string())
}

/// Node type names, as `rdma dev show` prints them.
pub fn node_type_name(v: u32) -> String {
    name_or_num(
        &[
            "ca",
            "switch",
            "router",
            "rnic",
            "usnic",
            "usnic_udp",
            "unspecified",
        ],
        FERRY_NODE_TYPE_CA,
        v,
    )
}

/// Port state names, as `rdma link show` prints them.
pub fn port_state_name(v: u32) -> String {
    name_or_num(
        &["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"],
        FERRY_PORT_STATE_NOP,
        v,
    )
}

/// Physical port state names, as `rdma link show` prints them.
pub fn phys_state_name(v: u32) -> String {
    name_or_num(
        &[
            "SLEEP",
            "POLLING",
            "DISABLED",
            "PORT_CONFIGURATION_TRAINING",
            "LINK_UP",
            "LINK_ERROR_RECOVERY",
            "PHY_TEST",
        ],
        1,
        v,
    )
}

/// Link layer names.
pub fn link_layer_name(v: u32) -> String {
    name_or_num(
        &["unspecified", "infiniband", "ethernet"],
        FERRY_LINK_LAYER_UNSPECIFIED,
        v,
    )
}

/// Names of the `device` attributes, for error messages.
pub fn attr_name(ty: u16) -> Option<&'static str> {
    match u32::from(ty) {
        FERRY_A_DEVICE_INDEX => Some("index"),
        FERRY_A_DEVICE_NAME => Some("name"),
        _ => None,
    }
}

/// `ferryctl device show [NAME | name NAME | index N]`.
pub fn show(ctx: &mut Ctx, args: &[String]) -> Result<Output, crate::CliError> {
    let mut name = None;
    let mut index = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "name" | "dev" => {
                name = Some(
                    it.next()
                        .ok_or_else(|| crate::usage(format!("\"{a}\" needs a device name")))?
                        .clone(),
                )
            }
            "index" => {
                let v = it
                    .next()
                    .ok_or_else(|| crate::usage("\"index\" needs a number".into()))?;
                index = Some(
                    v.parse::<u32>()
                        .map_err(|_| crate::usage(format!("invalid index \"{v}\"")))?,
                );
            }
            _ if name.is_none() && !a.starts_with('-') => name = Some(a.clone()),
            _ => return Err(crate::usage(format!("unknown argument \"{a}\""))),
        }
    }
    let family = ctx.family()?;
    let mut req = nl::Builder::new();
    if let Some(n) = &name {
        req = req.str(FERRY_A_DEVICE_NAME, n);
    }
    if let Some(i) = index {
        req = req.u32(FERRY_A_DEVICE_INDEX, i);
    }
    let dump = name.is_none() && index.is_none();
    let flags = if dump { nl::NLM_F_DUMP } else { 0 };
    let replies = ctx
        .sock
        .request(
            family,
            FERRY_CMD_DEVICE_GET as u8,
            FERRY_FAMILY_VERSION as u8,
            flags,
            req.bytes(),
        )
        .map_err(|e| crate::CliError::Kernel(e, attr_name))?;
    let mut devices = Vec::new();
    for r in &replies {
        devices.push(Device::decode(r).map_err(|e| crate::CliError::Kernel(e, attr_name))?);
    }
    Ok(Output {
        json: devices.iter().map(Device::to_json).collect(),
        text: devices.iter().map(|d| d.to_text(ctx.details)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nl::Builder;

    fn nest(ty: u32, inner: &Builder) -> Vec<u8> {
        let mut v = ((inner.bytes().len() + 4) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&((ty as u16) | 0x8000).to_ne_bytes());
        v.extend_from_slice(inner.bytes());
        v
    }

    fn sample() -> Vec<u8> {
        let port = Builder::new()
            .u32(FERRY_A_PORT_INDEX, 1)
            .u32(FERRY_A_PORT_STATE, FERRY_PORT_STATE_ACTIVE)
            .u32(FERRY_A_PORT_PHYS_STATE, 5)
            .u32(FERRY_A_PORT_ACTIVE_MTU, 1024)
            .u32(FERRY_A_PORT_LINK_LAYER, FERRY_LINK_LAYER_ETHERNET)
            .str(FERRY_A_PORT_NETDEV, "eth0");
        let mut b = Builder::new()
            .u32(FERRY_A_DEVICE_INDEX, 0)
            .str(FERRY_A_DEVICE_NAME, "rxe0")
            .u32(FERRY_A_DEVICE_NODE_TYPE, FERRY_NODE_TYPE_CA)
            .u32(FERRY_A_DEVICE_MAX_QP, 1048560)
            .u32(FERRY_A_DEVICE_PD_ID, 2)
            .u32(999, 7) // an attribute from a newer kernel
            .bytes()
            .to_vec();
        // u64 node guid
        b.extend_from_slice(&12u16.to_ne_bytes());
        b.extend_from_slice(&(FERRY_A_DEVICE_NODE_GUID as u16).to_ne_bytes());
        b.extend_from_slice(&0x5054_00ff_fef0_1000u64.to_ne_bytes());
        b.extend(nest(FERRY_A_DEVICE_PORT, &port));
        b
    }

    #[test]
    fn decodes_a_device_and_skips_unknown_attributes() {
        let d = Device::decode(&sample()).unwrap();
        assert_eq!(d.name, "rxe0");
        assert_eq!(
            d.node_guid.map(guid).as_deref(),
            Some("5054:00ff:fef0:1000")
        );
        assert_eq!(d.ports.len(), 1);
        assert_eq!(d.ports[0].netdev.as_deref(), Some("eth0"));
        assert_eq!(d.caps, vec![("max_qp", 1048560)]);
    }

    #[test]
    fn json_and_text_agree() {
        let d = Device::decode(&sample()).unwrap();
        let j = d.to_json();
        assert_eq!(j["name"], "rxe0");
        assert_eq!(j["node_type"], "ca");
        assert_eq!(j["node_guid"], "5054:00ff:fef0:1000");
        assert_eq!(j["ports"][0]["state"], "ACTIVE");
        assert_eq!(j["ports"][0]["physical_state"], "LINK_UP");
        assert_eq!(j["ports"][0]["link_layer"], "ethernet");
        assert_eq!(j["pd"]["id"], 2);
        // CQs are the channels' now (see session.rs), not the device's.
        assert!(j.get("cqs").is_none(), "{j}");
        let t = d.to_text(false);
        assert!(
            t.starts_with("0: rxe0: node_type ca node_guid 5054:00ff:fef0:1000 pd 2\n"),
            "{t}"
        );
        assert!(
            t.contains("    port 1 state ACTIVE physical_state LINK_UP netdev eth0 mtu 1024\n"),
            "{t}"
        );
        assert!(d.to_text(true).contains("caps max_qp 1048560"));
        let t = d.to_text(true);
        assert!(!t.lines().any(|l| l.trim_start().starts_with("cq ")), "{t}");
    }

    #[test]
    fn wrong_sized_known_attribute_is_an_error() {
        let b = Builder::new()
            .u32(FERRY_A_DEVICE_INDEX, 0)
            .str(FERRY_A_DEVICE_NAME, "x")
            .str(FERRY_A_DEVICE_PD_ID, "xx");
        assert!(matches!(Device::decode(b.bytes()), Err(Error::Protocol(_))));
        let b = Builder::new().str(FERRY_A_DEVICE_NAME, "x");
        assert!(Device::decode(b.bytes()).is_err());
    }

    #[test]
    fn names_fall_back_to_numbers() {
        assert_eq!(port_state_name(4), "ACTIVE");
        assert_eq!(port_state_name(17), "17");
        assert_eq!(node_type_name(0), "0");
        assert_eq!(phys_state_name(5), "LINK_UP");
    }
}
