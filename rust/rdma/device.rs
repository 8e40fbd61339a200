// SPDX-License-Identifier: GPL-2.0

//! RDMA devices.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//! (`struct ib_device`, `struct ib_port_attr`).
//!
//! Two kinds of handle:
//!
//! - [`Device`] (usually as [`ARef<Device>`], which holds the `struct device`
//!   reference) keeps the memory alive and reads what is fixed at registration:
//!   name, index, GUID, limits. It never calls into the driver, so it stays
//!   valid after the device is unregistered.
//! - [`Registered`] holds a *registration* reference (`ib_device_try_get`).
//!   ib_core calls every client's `remove` and then waits for these references
//!   to drop before it finishes unregistering a device, so while one exists the
//!   driver is bound and calls into it (port queries, allocating PDs and CQs)
//!   are valid. Taking one fails once unregistration has begun.

use core::{ops::Deref, ops::RangeInclusive, ptr::NonNull};
use kernel::{
    error::to_result,
    prelude::*,
    sync::aref::{ARef, AlwaysRefCounted},
    types::Opaque,
};

use crate::{bindings, netns::Net};

/// Longest device name including its NUL (`IB_DEVICE_NAME_MAX`).
const NAME_MAX: usize = bindings::IB_DEVICE_NAME_MAX as usize;
/// Longest network device name including its NUL (`IFNAMSIZ`).
const IFNAMSIZ: usize = 16;

/// An RDMA device (`struct ib_device`), for reading what registration fixed.
///
/// # Invariants
///
/// The wrapped `ib_device` is valid: ib_core passed it to a client callback, or
/// an [`ARef<Device>`] or a [`Registered`] holds a reference on it.
#[repr(transparent)]
pub struct Device(Opaque<bindings::ib_device>);

// SAFETY: ib_core objects are used from any thread; ib_core locks internally.
unsafe impl Send for Device {}
// SAFETY: All methods take `&self` and only read fields fixed at registration,
// or copy the name through a helper.
unsafe impl Sync for Device {}

// SAFETY: `get_device`/`put_device` on the embedded `struct device` keep the
// `ib_device` allocation alive (it is freed from the device's release function).
unsafe impl AlwaysRefCounted for Device {
    fn inc_ref(&self) {
        // SAFETY: `self` is valid (type invariant).
        unsafe { bindings::ferry_helper_ib_device_get(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller owns a reference taken by `inc_ref`.
        unsafe { bindings::ferry_helper_ib_device_put(obj.cast().as_ptr()) };
    }
}

impl Device {
    /// Borrows the device at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must point to an `ib_device` that stays valid for `'a`.
    pub unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // SAFETY: `Device` is a transparent wrapper; validity is the caller's promise.
        unsafe { &*ptr.cast() }
    }

    /// The raw `ib_device`.
    pub fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// The device's name, such as `rxe0`: a copy, since it can be renamed.
    pub fn name(&self) -> DeviceName {
        let mut name = DeviceName([0; NAME_MAX]);
        // SAFETY: The device is valid and the buffer holds `NAME_MAX` bytes; the
        // helper copies the fixed `name` array, which a rename rewrites in place.
        unsafe {
            bindings::ferry_helper_ib_device_name(
                self.as_raw(),
                name.0.as_mut_ptr().cast(),
                NAME_MAX,
            )
        };
        name
    }

    /// The device index, as "ifindex" in `rdma dev show`.
    pub fn index(&self) -> u32 {
        // SAFETY: The device is valid (type invariant); `index` is fixed at
        // allocation. Only this field is read, through the raw pointer.
        unsafe { (*self.as_raw()).index }
    }

    /// The node GUID in host byte order.
    pub fn node_guid(&self) -> u64 {
        // SAFETY: As in `index`; the driver sets it before registering.
        u64::from_be(unsafe { (*self.as_raw()).node_guid })
    }

    /// The node type, or `None` for a value this code does not know.
    pub fn node_type(&self) -> Option<NodeType> {
        // SAFETY: As in `index`; the driver sets it before registering.
        NodeType::from_raw(u32::from(unsafe { (*self.as_raw()).node_type }))
    }

    /// Number of completion vectors (interrupt lines for CQ events).
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: As in `index`; the driver sets it before registering.
        u32::try_from(unsafe { (*self.as_raw()).num_comp_vectors }).unwrap_or(0)
    }

    /// The device's limits and capability flags.
    pub fn caps(&self) -> Caps {
        // SAFETY: As in `index`; `attrs` is filled in before registration and
        // not written afterwards. It is copied out, no reference is kept.
        let a = unsafe { core::ptr::addr_of!((*self.as_raw()).attrs).read() };
        Caps {
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_pd: a.max_pd,
            max_send_sge: a.max_send_sge,
            max_recv_sge: a.max_recv_sge,
            max_fast_reg_page_list_len: a.max_fast_reg_page_list_len,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            cap_flags: a.device_cap_flags,
        }
    }

    /// The port numbers of this device.
    pub fn ports(&self) -> RangeInclusive<u32> {
        // SAFETY: The device is valid (type invariant); the helpers read the
        // node type and port count, fixed at registration.
        unsafe {
            bindings::ferry_helper_rdma_start_port(self.as_raw())
                ..=bindings::ferry_helper_rdma_end_port(self.as_raw())
        }
    }

    /// Whether processes in `net` may use this device (ib_core's rule: every
    /// namespace in shared mode, only the device's own in exclusive mode).
    pub fn accessible_from(&self, net: &Net) -> bool {
        // SAFETY: Both objects are valid for the call.
        unsafe { bindings::rdma_dev_access_netns(self.as_raw(), net.as_raw()) }
    }

    /// A registration reference, or `None` if the device is being unregistered.
    pub fn registered(&self) -> Option<Registered> {
        // SAFETY: The device is valid (type invariant).
        if unsafe { bindings::ferry_helper_ib_device_try_get(self.as_raw()) } {
            // INVARIANT: We took a registration reference just now.
            Some(Registered {
                device: self.into(),
            })
        } else {
            None
        }
    }
}

/// A registered RDMA device: while this exists, ib_core cannot finish
/// unregistering it, so calls into its driver are valid.
///
/// Holding one across a client's `remove` makes unregistration wait until it is
/// dropped: keep them short-lived, or drop them in `remove`.
///
/// # Invariants
///
/// Owns one registration reference (`ib_device_try_get`) on `device`.
pub struct Registered {
    device: ARef<Device>,
}

impl Registered {
    /// Queries the attributes of `port`. May sleep.
    pub fn query_port(&self, port: u32) -> Result<PortAttr> {
        if !self.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut attr = bindings::ib_port_attr::default();
        // SAFETY: The device is registered (type invariant), so its driver is
        // bound; `port` is one of its ports and `attr` is a writable
        // `ib_port_attr`.
        to_result(unsafe { bindings::ib_query_port(self.as_raw(), port, &mut attr) })?;
        // SAFETY: As above.
        let link_layer = unsafe { bindings::rdma_port_get_link_layer(self.as_raw(), port) };
        Ok(PortAttr {
            state: PortState::from_raw(attr.state),
            phys_state: attr.phys_state,
            active_mtu: mtu_to_bytes(attr.active_mtu),
            max_mtu: mtu_to_bytes(attr.max_mtu),
            gid_tbl_len: u32::try_from(attr.gid_tbl_len).unwrap_or(0),
            link_layer: LinkLayer::from_raw(link_layer),
        })
    }

    /// The name of the network device under `port` (RoCE, iWARP), if any.
    pub fn port_netdev(&self, port: u32) -> Option<NetdevName> {
        if !self.ports().contains(&port) {
            return None;
        }
        let mut name = NetdevName([0; IFNAMSIZ]);
        // SAFETY: The device is registered (type invariant), `port` is one of its
        // ports and the buffer holds `IFNAMSIZ` bytes.
        let ret = unsafe {
            bindings::ferry_helper_ib_port_netdev_name(
                self.as_raw(),
                port,
                name.0.as_mut_ptr().cast(),
                IFNAMSIZ,
            )
        };
        (ret == 0).then_some(name)
    }
}

impl Deref for Registered {
    type Target = Device;

    fn deref(&self) -> &Device {
        &self.device
    }
}

impl Clone for Registered {
    fn clone(&self) -> Self {
        // SAFETY: We hold a registration reference, so the count is above zero
        // and `ib_device_try_get` cannot fail.
        let got = unsafe { bindings::ferry_helper_ib_device_try_get(self.as_raw()) };
        debug_assert!(got);
        // INVARIANT: We took a registration reference just now.
        Self {
            device: self.device.clone(),
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // SAFETY: We own one registration reference (type invariant).
        unsafe { bindings::ib_device_put(self.as_raw()) };
    }
}

/// A copied RDMA device name.
#[derive(Clone, Copy)]
pub struct DeviceName([u8; NAME_MAX]);

impl DeviceName {
    /// No name (a channel that has no device yet).
    pub const NONE: Self = Self([0; NAME_MAX]);

    /// The name as a C string.
    pub fn as_cstr(&self) -> &CStr {
        // The helper always NUL-terminates; fall back to "" if that ever broke.
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }
}

/// A copied network device name.
pub struct NetdevName([u8; IFNAMSIZ]);

impl NetdevName {
    /// The name as a C string.
    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }
}

/// Device limits and capabilities (from `struct ib_device_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// Most queue pairs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most completion queues.
    pub max_cq: u32,
    /// Most entries per completion queue.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Most scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Most scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Most pages one fast registration (FRWR) can map.
    pub max_fast_reg_page_list_len: u32,
    /// Most RDMA READs a QP answers at once (as the responder).
    pub max_qp_rd_atom: u32,
    /// Most RDMA READs a QP has outstanding (as the initiator).
    pub max_qp_init_rd_atom: u32,
    /// `enum ib_device_cap_flags` bits.
    pub cap_flags: u64,
}

/// Attributes of one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: Option<PortState>,
    /// Physical state (IBTA PortPhysicalState: 5 is LinkUp).
    pub phys_state: u8,
    /// Active path MTU in bytes (0 if unknown).
    pub active_mtu: u32,
    /// Largest path MTU in bytes (0 if unknown).
    pub max_mtu: u32,
    /// Entries in the GID table.
    pub gid_tbl_len: u32,
    /// Link layer.
    pub link_layer: Option<LinkLayer>,
}

macro_rules! raw_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $c:expr,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u32)]
        pub enum $name {
            $($(#[$vm])* $v = $c as u32,)*
        }

        impl $name {
            /// Converts the C value; `None` for values this code does not know.
            pub fn from_raw(raw: u32) -> Option<Self> {
                $(if raw == $c as u32 {
                    return Some(Self::$v);
                })*
                None
            }
        }
    };
}

raw_enum!(
    /// Node type (`enum rdma_node_type`).
    NodeType {
        /// Channel adapter (InfiniBand, RoCE).
        Ca = bindings::RDMA_NODE_IB_CA,
        /// Switch.
        Switch = bindings::RDMA_NODE_IB_SWITCH,
        /// Router.
        Router = bindings::RDMA_NODE_IB_ROUTER,
        /// iWARP NIC.
        Rnic = bindings::RDMA_NODE_RNIC,
        /// usNIC.
        Usnic = bindings::RDMA_NODE_USNIC,
        /// usNIC over UDP.
        UsnicUdp = bindings::RDMA_NODE_USNIC_UDP,
        /// Unspecified.
        Unspecified = bindings::RDMA_NODE_UNSPECIFIED,
    }
);

raw_enum!(
    /// Logical port state (`enum ib_port_state`).
    PortState {
        /// No state change.
        Nop = bindings::ib_port_state_IB_PORT_NOP,
        /// Down.
        Down = bindings::ib_port_state_IB_PORT_DOWN,
        /// Initializing.
        Init = bindings::ib_port_state_IB_PORT_INIT,
        /// Armed.
        Armed = bindings::ib_port_state_IB_PORT_ARMED,
        /// Active: usable.
        Active = bindings::ib_port_state_IB_PORT_ACTIVE,
        /// Active, deferred.
        ActiveDefer = bindings::ib_port_state_IB_PORT_ACTIVE_DEFER,
    }
);

raw_enum!(
    /// Link layer (`enum rdma_link_layer`).
    LinkLayer {
        /// Unspecified.
        Unspecified = bindings::rdma_link_layer_IB_LINK_LAYER_UNSPECIFIED,
        /// InfiniBand.
        Infiniband = bindings::rdma_link_layer_IB_LINK_LAYER_INFINIBAND,
        /// Ethernet (RoCE).
        Ethernet = bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET,
    }
);

/// Bytes of an `enum ib_mtu` value, as `ib_mtu_enum_to_int`; 0 if invalid.
pub fn mtu_to_bytes(mtu: bindings::ib_mtu) -> u32 {
    match mtu {
        bindings::ib_mtu_IB_MTU_256 => 256,
        bindings::ib_mtu_IB_MTU_512 => 512,
        bindings::ib_mtu_IB_MTU_1024 => 1024,
        bindings::ib_mtu_IB_MTU_2048 => 2048,
        bindings::ib_mtu_IB_MTU_4096 => 4096,
        _ => 0,
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_rdma_device)]
mod tests {
    use super::*;

    #[test]
    fn mtu_enum_to_bytes() {
        assert_eq!(mtu_to_bytes(bindings::ib_mtu_IB_MTU_256), 256);
        assert_eq!(mtu_to_bytes(bindings::ib_mtu_IB_MTU_1024), 1024);
        assert_eq!(mtu_to_bytes(bindings::ib_mtu_IB_MTU_4096), 4096);
        assert_eq!(mtu_to_bytes(0), 0);
        assert_eq!(mtu_to_bytes(6), 0);
    }

    #[test]
    fn raw_enums_round_trip_and_reject_unknown() {
        for raw in 0..=5 {
            assert_eq!(PortState::from_raw(raw).map(|s| s as u32), Some(raw));
        }
        assert_eq!(PortState::from_raw(6), None);
        for raw in 1..=7 {
            assert_eq!(NodeType::from_raw(raw).map(|t| t as u32), Some(raw));
        }
        assert_eq!(NodeType::from_raw(0), None);
        assert_eq!(NodeType::from_raw(8), None);
        assert_eq!(LinkLayer::from_raw(2), Some(LinkLayer::Ethernet));
        assert_eq!(LinkLayer::from_raw(3), None);
    }
}
