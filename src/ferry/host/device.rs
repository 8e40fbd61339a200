// SPDX-License-Identifier: GPL-2.0

//! RDMA devices as ferry sees them: the ib_core client and the resources ferry
//! holds on each device.
//!
//! On `add`, ferry allocates the device's protection domain; on `remove` it
//! tears down every channel on the device (with their CQs, each channel has
//! its own) and frees the PD before returning, as ib_core requires. The
//! control plane reads devices through [`Ferry::devices`] and fills replies under
//! the device's resource lock, so it never touches a device that is gone.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{aref::ARef, Arc, Mutex},
};

pub(crate) use crate::channel::OWNER;
use crate::{
    ferry_nl::{device as attr, port as port_attr},
    genl::Writer,
    netns::Net,
    rdma::{
        client::{Client, ClientStatic},
        device::Registered,
        Device, Pd,
    },
    session::Session,
};

use super::transport::Transport;

/// What the module's state announces. Netlink observes it (the module's
/// init installs netlink's observer); nothing here calls netlink.
pub(crate) trait Observer: Send + Sync {
    /// Session `s` changed state (or was created or closed).
    fn session_changed(&self, s: &Session);
    /// ferry started (`added`) or stopped using device `index`.
    fn device_changed(&self, added: bool, index: u32, name: &CStr);
    /// Listener `l` started listening again, or its device went away.
    fn listener_changed(&self, l: &crate::listener::Listener);
}

/// ferry's ib_core client, reached from ib_core and netlink callbacks.
pub(crate) static FERRY: ClientStatic<Ferry> = ClientStatic::new();

/// Module-wide state: the devices ferry uses, and the transport over them.
#[pin_data]
pub(crate) struct Ferry {
    /// Every device between `add` and `remove`, in the order they came.
    #[pin]
    devices: Mutex<KVec<Arc<FerryDevice>>>,
    /// Sessions, listeners, services (see [`crate::transport`]).
    #[pin]
    pub(crate) transport: Transport,
    /// Who hears of sessions and devices.
    observer: Arc<dyn Observer>,
}

impl Ferry {
    /// Creates the state with no device; `observer` hears of changes.
    pub(crate) fn new(observer: Arc<dyn Observer>) -> Result<Arc<Self>> {
        let transport = Transport::new()?;
        Arc::pin_init(
            try_pin_init!(Self {
                devices <- new_mutex!(KVec::new()),
                transport <- transport,
                observer,
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Tells the observer that listener `l` changed.
    pub(crate) fn listener_changed(&self, l: &crate::listener::Listener) {
        self.observer.listener_changed(l);
    }

    /// Tells the observer that session `s` changed.
    pub(crate) fn session_changed(&self, s: &Session) {
        self.observer.session_changed(s);
    }

    /// The state of the loaded module, if it is loaded.
    pub(crate) fn get() -> Option<Arc<Self>> {
        FERRY.get()
    }

    /// The default channel count: one per CPU, capped by the completion
    /// vectors of the devices `net` may use, and by the protocol's maximum.
    pub(crate) fn default_channels(&self, net: &Net) -> Result<u32> {
        let vectors = self
            .devices()?
            .iter()
            .filter(|d| d.accessible_from(net))
            .map(|d| d.num_comp_vectors())
            .max()
            .unwrap_or(1);
        Ok(crate::work::num_online_cpus()
            .min(vectors)
            .clamp(1, u32::from(crate::wire::MAX_CHANNELS)))
    }

    /// A snapshot of the devices, ordered by device index.
    pub(crate) fn devices(&self) -> Result<KVec<Arc<FerryDevice>>> {
        let guard = self.devices.lock();
        let mut list = KVec::with_capacity(guard.len(), GFP_KERNEL)?;
        for d in guard.iter() {
            list.push(d.clone(), GFP_KERNEL)?;
        }
        drop(guard);
        list.sort_unstable_by_key(|d| d.device.index());
        Ok(list)
    }

    /// The PD of device `index`, if ferry uses that device.
    pub(crate) fn pd_of(&self, index: u32) -> Option<Arc<Pd>> {
        let dev = self
            .devices
            .lock()
            .iter()
            .find(|d| d.index() == index)
            .cloned()?;
        let res = dev.resources.lock();
        res.as_ref().map(|r| r.pd.clone())
    }
}

/// What ferry holds on one device. Freed by `remove`, before the device goes.
struct Resources {
    // Channels hold the PD too; `remove` tears them down first.
    pd: Arc<Pd>,
}

impl Resources {
    fn new(device: &Registered) -> Result<Self> {
        let pd = Arc::new(Pd::new(device, OWNER)?, GFP_KERNEL)?;
        Ok(Self { pd })
    }
}

/// An RDMA device that ferry uses.
#[pin_data]
pub(crate) struct FerryDevice {
    device: ARef<Device>,
    /// `None` once the device is removed: a reader that still holds the
    /// `FerryDevice` then sees it gone.
    #[pin]
    resources: Mutex<Option<Resources>>,
}

impl FerryDevice {
    /// The device index.
    pub(crate) fn index(&self) -> u32 {
        self.device.index()
    }

    /// Whether the device is called `name`.
    pub(crate) fn has_name(&self, name: &CStr) -> bool {
        self.device.name().as_cstr() == name
    }

    /// The device's completion vectors.
    pub(crate) fn num_comp_vectors(&self) -> u32 {
        self.device.num_comp_vectors()
    }

    /// Whether processes in `net` may see and use the device.
    pub(crate) fn accessible_from(&self, net: &Net) -> bool {
        self.device.accessible_from(net)
    }

    /// Room a netlink message describing this device needs.
    pub(crate) fn message_size(&self) -> usize {
        const BASE: usize = 512; // device attributes, PD and headers
        const PER_PORT: usize = 128; // one nested port with its netdev name
        let ports = self.device.ports().count();
        BASE + PER_PORT * ports
    }

    /// Writes the device's netlink attributes. Fails with `ENODEV` if, and only
    /// if, the device was removed meanwhile; a port whose query fails is reported
    /// with its number alone. May sleep.
    pub(crate) fn fill(&self, w: &mut Writer<'_>) -> Result {
        let resources = self.resources.lock();
        let res = resources.as_ref().ok_or(ENODEV)?;
        // The PD holds a registration reference, so the driver is still bound.
        let dev = res.pd.device();
        let caps = dev.caps();
        w.put_u32(attr::INDEX, dev.index())?;
        w.put_str(attr::NAME, dev.name().as_cstr())?;
        w.put_u64(attr::NODE_GUID, dev.node_guid(), attr::PAD)?;
        if let Some(t) = dev.node_type() {
            w.put_u32(attr::NODE_TYPE, t as u32)?;
        }
        w.put_u32(attr::NUM_COMP_VECTORS, dev.num_comp_vectors())?;
        w.put_u32(attr::MAX_QP, caps.max_qp)?;
        w.put_u32(attr::MAX_QP_WR, caps.max_qp_wr)?;
        w.put_u32(attr::MAX_CQ, caps.max_cq)?;
        w.put_u32(attr::MAX_CQE, caps.max_cqe)?;
        w.put_u32(attr::MAX_MR, caps.max_mr)?;
        w.put_u32(attr::MAX_PD, caps.max_pd)?;
        w.put_u32(attr::MAX_SEND_SGE, caps.max_send_sge)?;
        w.put_u32(attr::MAX_RECV_SGE, caps.max_recv_sge)?;
        w.put_u32(
            attr::MAX_FAST_REG_PAGE_LIST_LEN,
            caps.max_fast_reg_page_list_len,
        )?;
        w.put_u64(attr::CAP_FLAGS, caps.cap_flags, attr::PAD)?;
        for port in dev.ports() {
            w.nest(attr::PORT, |w| {
                w.put_u32(port_attr::INDEX, port)?;
                // rxe, for one, fails the query while its netdev is going away.
                if let Ok(pa) = dev.query_port(port) {
                    if let Some(state) = pa.state {
                        w.put_u32(port_attr::STATE, state as u32)?;
                    }
                    w.put_u32(port_attr::PHYS_STATE, u32::from(pa.phys_state))?;
                    w.put_u32(port_attr::ACTIVE_MTU, pa.active_mtu)?;
                    w.put_u32(port_attr::MAX_MTU, pa.max_mtu)?;
                    if let Some(ll) = pa.link_layer {
                        w.put_u32(port_attr::LINK_LAYER, ll as u32)?;
                    }
                    w.put_u32(port_attr::GID_TBL_LEN, pa.gid_tbl_len)?;
                }
                if let Some(nd) = dev.port_netdev(port) {
                    w.put_str(port_attr::NETDEV, nd.as_cstr())?;
                }
                Ok(())
            })?;
        }
        w.put_u32(attr::PD_ID, res.pd.id())
    }
}

impl Client for Ferry {
    type DeviceData = Arc<FerryDevice>;

    fn client_static() -> &'static ClientStatic<Self> {
        &FERRY
    }

    fn add(&self, device: &Registered) -> Result<Arc<FerryDevice>> {
        let resources = Resources::new(device).inspect_err(|e| {
            pr_warn!(
                "{}: cannot allocate resources ({:?}), not using it\n",
                device.name().as_cstr(),
                e
            )
        })?;
        let pd_id = resources.pd.id();
        let fdev = Arc::pin_init(
            pin_init!(FerryDevice {
                device: ARef::<Device>::from(&**device),
                resources <- new_mutex!(Some(resources)),
            }),
            GFP_KERNEL,
        )?;
        self.devices.lock().push(fdev.clone(), GFP_KERNEL)?;
        self.observer
            .device_changed(true, device.index(), device.name().as_cstr());
        pr_info!("{}: added (pd {})\n", device.name().as_cstr(), pd_id);
        Ok(fdev)
    }

    fn remove(&self, device: &Registered, fdev: Arc<FerryDevice>) {
        self.devices.lock().retain(|d| !Arc::ptr_eq(d, &fdev));
        // Every channel on the device, with its QP, CQ and PD reference, goes
        // first; their sessions recover on other devices or close.
        self.device_removed(fdev.index());
        self.observer
            .device_changed(false, fdev.index(), device.name().as_cstr());
        // Waits for any netlink reader of this device, then frees the PD (and
        // its registration reference) before ib_core goes on.
        drop(fdev.resources.lock().take());
        pr_info!("{}: removed\n", device.name().as_cstr());
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_device)]
mod tests {
    use super::*;
    use crate::rdma::cq::{Cq, PollCtx};

    // A failed assertion ends a test's thread without dropping what it
    // holds, and a module loaded before any device (module_lifecycle) runs
    // these too: each test drops its references before it asserts, and
    // without a device has nothing to check.

    /// Every device ferry tracks holds a PD that ib_core attributes to ferry
    /// (the test harness creates rxe0 before it loads ferry).
    #[test]
    fn every_device_holds_a_pd() -> Result {
        let ferry = Ferry::get().ok_or(ENODEV)?;
        let devices = ferry.devices()?;
        let mut mismatched = 0;
        for d in devices.iter() {
            let guard = d.resources.lock();
            let res = guard.as_ref().ok_or(ENODEV)?;
            if res.pd.device().index() != d.index() {
                mismatched += 1;
            }
        }
        drop((devices, ferry));
        assert_eq!(mismatched, 0);
        Ok(())
    }

    /// CQs come from ib_core in the poll context asked for, each with its
    /// own restrack id and at least the entries asked for; only a direct one
    /// has a poller, and polling an empty one finds nothing.
    #[test]
    fn cqs_in_both_poll_contexts() -> Result {
        let ferry = Ferry::get().ok_or(ENODEV)?;
        let devices = ferry.devices()?;
        let Some(d) = devices.first() else {
            return Ok(());
        };
        let guard = d.resources.lock();
        let res = guard.as_ref().ok_or(ENODEV)?;
        let wq = Cq::new(res.pd.device(), 16, 0, PollCtx::Workqueue, OWNER)?;
        let direct = Cq::new(res.pd.device(), 16, 0, PollCtx::Direct, OWNER)?;
        let ids_differ = wq.id() != direct.id();
        let entries = wq.entries() >= 16 && direct.entries() >= 16;
        let ctxs = (wq.poll_ctx(), direct.poll_ctx());
        let wq_poller = wq.poller().is_some();
        let p = direct.poller().ok_or(EINVAL)?;
        // A user polled since the last look: the idle poll does nothing
        // (and finds nothing), and the next one polls, as nobody did since.
        let polled = [p.poll(16), p.poll_if_idle(16), p.poll_if_idle(16)];
        direct.stop_polling();
        let stopped = [p.poll(16), p.poll_if_idle(16)];
        drop((wq, direct));
        drop(guard);
        drop((devices, ferry));
        assert!(ids_differ);
        assert!(entries);
        assert_eq!(
            ctxs,
            (
                crate::ferry_nl::POLL_WORKQUEUE,
                crate::ferry_nl::POLL_DIRECT
            )
        );
        assert!(!wq_poller);
        assert_eq!(polled, [0, 0, 0]);
        assert_eq!(stopped, [0, 0]);
        Ok(())
    }
}
