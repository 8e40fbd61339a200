// SPDX-License-Identifier: GPL-2.0

//! The RDMA connection manager (rdma_cm): connection identifiers and their events.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h).
//!
//! A [`CmId`] owns an `rdma_cm_id` and the [`Handler`] its events go to. rdma_cm
//! runs a handler under the id's handler mutex, one event at a time; destroying
//! the id takes that mutex, so once [`CmId`] is dropped no event of its runs any
//! more and the handler may go. The same mutex is why two things must not happen
//! inside a handler: dropping the [`CmId`] of the id the event is for (it would
//! wait for itself), and calling the methods that rdma_cm documents as "not
//! from the handler". Methods that need the mutex held (connecting, accepting)
//! exist only on [`Locked`], which only a handler gets.
//!
//! The queue pair of a connection is not attached to the id: ferry creates it
//! itself (so `rdma res show qp` names ferry, not rdma_cm) and moves it through
//! INIT, RTR and RTS with [`Locked::modify_qp`], as librdmacm does for user QPs.
//! Without an attached QP, an active side gets [`EventKind::ConnectResponse`]
//! (not `Established`) and completes the connection with [`Locked::establish`].

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    error::{from_err_ptr, to_result},
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use crate::{
    bindings,
    netns::Net,
    rdma::{device::Registered, qp::Qp, qp::QpState, Device},
};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// `sizeof(struct sockaddr_storage)`.
const SOCKADDR_LEN: usize = 128;

/// Most private data a connect request can carry on InfiniBand and RoCE.
pub const REQ_PRIVATE_DATA_MAX: usize = 56;
/// Most private data an accept can carry on InfiniBand and RoCE.
pub const REP_PRIVATE_DATA_MAX: usize = 196;
/// Most private data a reject can carry on InfiniBand and RoCE.
pub const REJ_PRIVATE_DATA_MAX: usize = 148;
/// The IB CM reject reason for a consumer's reject (`IB_CM_REJ_CONSUMER_DEFINED`).
pub const REJ_CONSUMER_DEFINED: i32 = bindings::ib_cm_rej_reason_IB_CM_REJ_CONSUMER_DEFINED as i32;
/// The IB CM reject reason when nobody listens on the port
/// (`IB_CM_REJ_INVALID_SERVICE_ID`).
pub const REJ_INVALID_SERVICE_ID: i32 =
    bindings::ib_cm_rej_reason_IB_CM_REJ_INVALID_SERVICE_ID as i32;

/// An IPv4 or IPv6 socket address, laid out as `struct sockaddr_storage`.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct SockAddr([u8; SOCKADDR_LEN]);

impl SockAddr {
    /// An IPv4 address (network byte order) and port.
    pub fn v4(addr: [u8; 4], port: u16) -> Self {
        let mut b = [0u8; SOCKADDR_LEN];
        b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[4..8].copy_from_slice(&addr);
        Self(b)
    }

    /// An IPv6 address (network byte order) and port.
    pub fn v6(addr: [u8; 16], port: u16) -> Self {
        let mut b = [0u8; SOCKADDR_LEN];
        b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
        b[2..4].copy_from_slice(&port.to_be_bytes());
        b[8..24].copy_from_slice(&addr);
        Self(b)
    }

    /// An address from its 4 or 16 bytes; `None` for any other length.
    pub fn from_ip(ip: &[u8], port: u16) -> Option<Self> {
        match ip.len() {
            4 => Some(Self::v4(ip.try_into().ok()?, port)),
            16 => Some(Self::v6(ip.try_into().ok()?, port)),
            _ => None,
        }
    }

    /// The address in `storage`, the bytes of a `struct sockaddr_storage`;
    /// `None` unless it is an IPv4 or IPv6 address.
    pub fn from_storage(storage: &[u8]) -> Option<Self> {
        let mut b = [0u8; SOCKADDR_LEN];
        let n = storage.len().min(SOCKADDR_LEN);
        b[..n].copy_from_slice(&storage[..n]);
        let a = Self(b);
        match a.family() {
            AF_INET => Some(Self::v4(a.0[4..8].try_into().ok()?, a.port())),
            AF_INET6 => Some(Self::v6(a.0[8..24].try_into().ok()?, a.port())),
            _ => None,
        }
    }

    fn family(&self) -> u16 {
        u16::from_ne_bytes([self.0[0], self.0[1]])
    }

    /// The address bytes: 4 for IPv4, 16 for IPv6, none for anything else.
    pub fn ip(&self) -> &[u8] {
        match self.family() {
            AF_INET => &self.0[4..8],
            AF_INET6 => &self.0[8..24],
            _ => &[],
        }
    }

    /// Whether this is an address one host answers to: not unspecified,
    /// multicast, the limited broadcast or reserved (IPv4 240/4), and not a
    /// v4-mapped IPv6 address of those. (A subnet's broadcast address looks
    /// like any other here; rdma_cm finds no host behind it.)
    pub fn is_unicast(&self) -> bool {
        let v4 = |a: &[u8]| a[0] != 0 && a[0] < 224;
        match self.ip() {
            a if a.len() == 4 => v4(a),
            a if a.len() == 16 => {
                let mapped = a[..10].iter().all(|&b| b == 0) && a[10] == 0xff && a[11] == 0xff;
                if mapped {
                    v4(&a[12..])
                } else {
                    a[0] != 0xff && a.iter().any(|&b| b != 0)
                }
            }
            _ => false,
        }
    }

    /// The port, in host byte order.
    pub fn port(&self) -> u16 {
        u16::from_be_bytes([self.0[2], self.0[3]])
    }

    /// Whether this is an IPv6 address.
    pub fn is_v6(&self) -> bool {
        self.family() == AF_INET6
    }

    fn as_raw(&self) -> *mut bindings::sockaddr {
        self.0.as_ptr().cast_mut().cast()
    }

    /// Copies the `sockaddr_storage` at `p`.
    ///
    /// # Safety
    ///
    /// `p` must be valid for reading a `struct sockaddr_storage`.
    unsafe fn read(p: *const c_void) -> Self {
        let mut b = [0u8; SOCKADDR_LEN];
        // SAFETY: The caller promises `SOCKADDR_LEN` readable bytes at `p`.
        unsafe { core::ptr::copy_nonoverlapping(p.cast::<u8>(), b.as_mut_ptr(), SOCKADDR_LEN) };
        Self(b)
    }
}

impl kernel::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let ip = self.ip();
        if ip.len() == 4 {
            write!(f, "{}.{}.{}.{}:{}", ip[0], ip[1], ip[2], ip[3], self.port())
        } else if ip.len() == 16 {
            f.write_str("[")?;
            for i in 0..8 {
                if i > 0 {
                    f.write_str(":")?;
                }
                write!(f, "{:x}", u16::from_be_bytes([ip[2 * i], ip[2 * i + 1]]))?;
            }
            write!(f, "]:{}", self.port())
        } else {
            f.write_str("?")
        }
    }
}

/// The kinds of rdma_cm event (`enum rdma_cm_event_type`) a [`Handler`] sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Address resolved: resolve the route next.
    AddrResolved,
    /// Address resolution failed.
    AddrError,
    /// Route resolved: create the QP and connect.
    RouteResolved,
    /// Route resolution failed.
    RouteError,
    /// The peer accepted (active side, no QP attached to the id): move the QP
    /// to RTR and RTS, then [`Locked::establish`].
    ConnectResponse,
    /// The connection could not be set up.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// The peer refused; see [`Event::reject_reason`] and [`Event::private_data`].
    Rejected,
    /// The connection is up.
    Established,
    /// The connection is down.
    Disconnected,
    /// The RDMA device of the id is going away: its owner must destroy the id
    /// (not from this handler) before the device can finish unregistering.
    DeviceRemoval,
    /// The address the id is bound to moved to another device.
    AddrChange,
    /// The id left the time-wait state: its QP number may be reused.
    TimewaitExit,
    /// Any other event (multicast, which ferry does not use).
    Other(u32),
}

impl EventKind {
    fn from_raw(e: bindings::rdma_cm_event_type) -> Self {
        match e {
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => Self::AddrResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => Self::AddrError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => Self::RouteResolved,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => Self::RouteError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_RESPONSE => Self::ConnectResponse,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => Self::ConnectError,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => Self::Unreachable,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => Self::Rejected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => Self::Established,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => Self::Disconnected,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => Self::DeviceRemoval,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => Self::AddrChange,
            bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => Self::TimewaitExit,
            other => Self::Other(other),
        }
    }
}

/// One rdma_cm event, borrowed for the handler call.
pub struct Event<'a> {
    kind: EventKind,
    status: i32,
    private_data: &'a [u8],
    consumer_reject: Option<&'a [u8]>,
}

impl Event<'_> {
    /// What happened.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// The event's status: a negative errno for errors, the IB CM reject
    /// reason (positive) for [`EventKind::Rejected`].
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The private data the peer sent with its request, accept or reject.
    /// rdma_cm may pad it with zeros up to the transport's maximum.
    pub fn private_data(&self) -> &[u8] {
        self.private_data
    }

    /// For [`EventKind::Rejected`]: the peer consumer's reject data, present
    /// only if the peer's ULP (not its CM) refused.
    pub fn consumer_reject_data(&self) -> Option<&[u8]> {
        self.consumer_reject
    }
}

/// Receives the events of the ids it is attached to.
///
/// Handlers run in rdma_cm's process context (its work queues, or the caller of
/// a resolve), may sleep, and are serialized per id.
pub trait Handler: Send + Sync + 'static {
    /// An event for `id`. Must not drop `id`'s own [`CmId`].
    fn event(this: ArcBorrow<'_, Self>, id: &Locked<'_>, event: &Event<'_>);

    /// A connection request arrived on a listening id. Dropping `req` without
    /// accepting it rejects the connection (with the data given to
    /// [`ConnectRequest::reject`], or with none). The default rejects.
    fn connect_request(this: ArcBorrow<'_, Self>, req: ConnectRequest<'_>, event: &Event<'_>) {
        let _ = (this, req, event);
    }
}

/// An `rdma_cm_id` whose handler mutex is held: only handlers get one.
///
/// # Invariants
///
/// `id` is valid for `'a` and its handler mutex is held for `'a`.
pub struct Locked<'a> {
    id: NonNull<bindings::rdma_cm_id>,
    _p: PhantomData<&'a bindings::rdma_cm_id>,
}

/// Connection parameters for [`Locked::connect`] and [`ConnectRequest::accept`].
#[derive(Clone, Copy, Default)]
pub struct ConnParams<'a> {
    /// Private data for the peer.
    pub private_data: &'a [u8],
    /// RDMA READs the peer may have outstanding at this side.
    pub responder_resources: u8,
    /// RDMA READs this side may have outstanding at the peer.
    pub initiator_depth: u8,
    /// Transport retries before a send fails (0..=7).
    pub retry_count: u8,
    /// Retries after a receiver-not-ready NAK (0..=7; 7 means forever).
    pub rnr_retry_count: u8,
}

impl ConnParams<'_> {
    fn to_raw(self, qp_num: u32, max_data: usize) -> Result<bindings::rdma_conn_param> {
        if self.private_data.len() > max_data {
            return Err(EINVAL);
        }
        Ok(bindings::rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            // CAST: at most `max_data` (< 256) bytes, checked above.
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: 0,
            qp_num,
            qkey: 0,
        })
    }
}

impl<'a> Locked<'a> {
    /// # Safety
    ///
    /// `id` must be valid, with its handler mutex held, for `'a`.
    unsafe fn new(id: *mut bindings::rdma_cm_id) -> Option<Self> {
        // INVARIANT: the caller's promise.
        Some(Self {
            id: NonNull::new(id)?,
            _p: PhantomData,
        })
    }

    fn raw(&self) -> *mut bindings::rdma_cm_id {
        self.id.as_ptr()
    }

    /// The device the id is bound to, if any, with a registration reference;
    /// `None` if unbound or being unregistered.
    pub fn device(&self) -> Option<Registered> {
        // SAFETY: `id` is valid (type invariant); `device` is set when the id
        // binds and stays valid while it is bound, which the held handler mutex
        // guarantees for this call.
        let dev = unsafe { (*self.raw()).device };
        if dev.is_null() {
            return None;
        }
        // SAFETY: `dev` is the bound device, valid for this call (see above).
        unsafe { Device::from_raw(dev) }.registered()
    }

    /// The port of the device the id is bound to.
    pub fn port_num(&self) -> u32 {
        // SAFETY: `id` is valid (type invariant).
        unsafe { (*self.raw()).port_num }
    }

    /// The peer's address.
    pub fn dst_addr(&self) -> SockAddr {
        // SAFETY: `id` is valid (type invariant); the helper returns its
        // `sockaddr_storage`.
        unsafe { SockAddr::read(bindings::ferry_helper_cm_dst_addr(self.raw())) }
    }

    /// Resolves the route to the resolved address (after `AddrResolved`).
    pub fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: `id` is valid (type invariant).
        to_result(unsafe { bindings::rdma_resolve_route(self.raw(), timeout_ms as c_ulong) })
    }

    /// Moves `qp` to `state` with the attributes rdma_cm derives from this id's
    /// route and connection (`rdma_init_qp_attr`).
    pub fn modify_qp<H: crate::rdma::qp::Completion>(&self, qp: &Qp<H>, state: QpState) -> Result {
        let mut attr = bindings::ib_qp_attr {
            qp_state: state as u32,
            ..Default::default()
        };
        let mut mask: c_int = 0;
        // SAFETY: `id` is valid (type invariant); `attr` and `mask` are ours.
        to_result(unsafe { bindings::rdma_init_qp_attr(self.raw(), &mut attr, &mut mask) })?;
        if state == QpState::Init {
            // The active side reaches INIT before it connects, when the id
            // knows of no RDMA READ yet: allow remote reads and writes here.
            // Only keys registered for one transfer open any memory.
            // CAST: access flags are small.
            attr.qp_access_flags |= (bindings::ib_access_flags_IB_ACCESS_REMOTE_READ
                | bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE)
                as c_int;
        }
        qp.modify(&mut attr, mask)
    }

    /// Sends a connect request for `qp` (after `RouteResolved`, with the QP in
    /// INIT).
    pub fn connect<H: crate::rdma::qp::Completion>(
        &self,
        qp: &Qp<H>,
        params: &ConnParams<'_>,
    ) -> Result {
        let mut raw = params.to_raw(qp.qp_num(), REQ_PRIVATE_DATA_MAX)?;
        // SAFETY: `id` is valid and its handler mutex held (type invariant), as
        // `rdma_connect_locked` requires; `raw` and the private data it points
        // to live across the call, which copies them.
        to_result(unsafe { bindings::rdma_connect_locked(self.raw(), &mut raw) })
    }

    /// Completes the connection on the active side after `ConnectResponse`,
    /// with the QP in RTS: sends the CM's ready-to-use message.
    pub fn establish(&self) -> Result {
        // SAFETY: `id` is valid and its handler mutex held (type invariant), as
        // `rdma_accept` requires; no parameters means "send RTU".
        to_result(unsafe { bindings::rdma_accept(self.raw(), core::ptr::null_mut()) })
    }

    /// Starts a disconnect.
    pub fn disconnect(&self) -> Result {
        // SAFETY: `id` is valid (type invariant).
        to_result(unsafe { bindings::rdma_disconnect(self.raw()) })
    }

    /// The text rdma_cm gives for the IB CM reject reason `reason`.
    pub fn reject_msg(&self, reason: i32) -> &'static CStr {
        // SAFETY: `id` is valid (type invariant); the function returns a static
        // string for any reason.
        unsafe { CStr::from_char_ptr(bindings::rdma_reject_msg(self.raw(), reason)) }
    }
}

/// A connection request on a listening id, for its handler to accept or reject.
///
/// The request is for a new id that rdma_cm created; it starts out with the
/// listener's handler. Accepting gives it a handler of its own and returns the
/// [`CmId`] that owns it; otherwise rdma_cm destroys it when the listener's
/// handler returns.
pub struct ConnectRequest<'a> {
    id: Locked<'a>,
    accepted: &'a mut bool,
}

impl<'a> ConnectRequest<'a> {
    /// The new id, for its device, addresses and QP transitions.
    pub fn id(&self) -> &Locked<'a> {
        &self.id
    }

    /// Accepts the connection on `qp` (in RTS, see [`Locked::modify_qp`]): the
    /// new id's events go to `handler` from now on, and the returned [`CmId`]
    /// owns it.
    pub fn accept<H: Handler, C: crate::rdma::qp::Completion>(
        self,
        handler: Arc<H>,
        qp: &Qp<C>,
        params: &ConnParams<'_>,
    ) -> Result<CmId<H>> {
        let mut raw = params.to_raw(qp.qp_num(), REP_PRIVATE_DATA_MAX)?;
        // SAFETY: The id is valid and its handler mutex held (type invariant of
        // `Locked`), as rdma_cm requires both for moving its handler and for
        // `rdma_accept`; `handler` outlives the id, as the returned `CmId`
        // keeps it until after `rdma_destroy_id`.
        unsafe {
            bindings::ferry_helper_cm_set_handler(
                self.id.raw(),
                Some(trampoline::<H>),
                Arc::as_ptr(&handler).cast_mut().cast(),
            );
        }
        // SAFETY: As above; `raw` lives across the call, which copies it. On
        // failure the id stays rdma_cm's, which destroys it (without calling
        // a handler) once the listener's handler returns.
        to_result(unsafe { bindings::rdma_accept(self.id.raw(), &mut raw) })?;
        // INVARIANT: the new id is ours from here on: the listener's trampoline
        // returns 0 for it, so rdma_cm does not destroy it.
        *self.accepted = true;
        Ok(CmId {
            id: self.id.id,
            handler,
        })
    }

    /// Rejects the connection with `private_data` for the peer (at most
    /// [`REJ_PRIVATE_DATA_MAX`] bytes).
    pub fn reject(self, private_data: &[u8]) -> Result {
        let len = u8::try_from(private_data.len()).map_err(|_| EINVAL)?;
        if usize::from(len) > REJ_PRIVATE_DATA_MAX {
            return Err(EINVAL);
        }
        // SAFETY: The id is valid (type invariant of `Locked`); the data is
        // copied by the call.
        to_result(unsafe {
            bindings::rdma_reject(
                self.id.raw(),
                private_data.as_ptr().cast(),
                len,
                // CAST: IB CM reject reasons fit in a byte.
                REJ_CONSUMER_DEFINED as u8,
            )
        })
    }
}

/// An rdma_cm identifier and the handler of its events; destroyed on drop.
///
/// # Invariants
///
/// `id` is a live `rdma_cm_id` owned by this object, whose event handler is
/// `trampoline::<H>` with `Arc::as_ptr(&handler)` as context.
pub struct CmId<H: Handler> {
    id: NonNull<bindings::rdma_cm_id>,
    handler: Arc<H>,
}

// SAFETY: rdma_cm ids may be used and destroyed from any thread.
unsafe impl<H: Handler> Send for CmId<H> {}
// SAFETY: The `&self` methods are calls rdma_cm serializes internally.
unsafe impl<H: Handler> Sync for CmId<H> {}

impl<H: Handler> CmId<H> {
    /// Creates an RC id in `net` (TCP port space) whose events go to
    /// `handler`, attributed to `owner` in `rdma res show cm_id`.
    pub fn new(net: &Net, handler: Arc<H>, owner: &'static CStr) -> Result<Self> {
        // SAFETY: `net` is valid (rdma_cm takes its own reference); the context
        // is kept alive by the returned object until after `rdma_destroy_id`;
        // `owner` is static.
        let id = from_err_ptr(unsafe {
            bindings::__rdma_create_kernel_id(
                net.as_raw(),
                Some(trampoline::<H>),
                Arc::as_ptr(&handler).cast_mut().cast(),
                bindings::rdma_ucm_port_space_RDMA_PS_TCP,
                bindings::ib_qp_type_IB_QPT_RC,
                owner.as_char_ptr(),
            )
        })?;
        Ok(Self {
            id: NonNull::new(id).ok_or(ENOMEM)?,
            handler,
        })
    }

    /// The handler.
    pub fn handler(&self) -> &Arc<H> {
        &self.handler
    }

    /// Binds to a local address (a wildcard address binds to no device).
    pub fn bind(&self, addr: &SockAddr) -> Result {
        // SAFETY: `id` is valid (type invariant); `addr` is a complete sockaddr.
        to_result(unsafe { bindings::rdma_bind_addr(self.id.as_ptr(), addr.as_raw()) })
    }

    /// Restricts an IPv6 wildcard bind to IPv6 (`afonly`), or not.
    pub fn set_afonly(&self, afonly: bool) -> Result {
        // SAFETY: `id` is valid (type invariant); called before binding.
        to_result(unsafe { bindings::rdma_set_afonly(self.id.as_ptr(), afonly.into()) })
    }

    /// Listens for connection requests (after [`CmId::bind`]).
    pub fn listen(&self, backlog: i32) -> Result {
        // SAFETY: `id` is valid (type invariant).
        to_result(unsafe { bindings::rdma_listen(self.id.as_ptr(), backlog) })
    }

    /// Starts resolving `dst` (and `src`, if given) to a device and port; the
    /// result arrives as an `AddrResolved` or `AddrError` event. Not from this
    /// id's handler.
    pub fn resolve_addr(&self, src: Option<&SockAddr>, dst: &SockAddr, timeout_ms: u32) -> Result {
        // CAST: `c_ulong` is 64 bits wide on every architecture ferry builds for.
        let timeout = timeout_ms as c_ulong;
        let src = src.map_or(core::ptr::null_mut(), SockAddr::as_raw);
        // SAFETY: `id` is valid (type invariant); the addresses are complete
        // sockaddrs that rdma_cm copies.
        to_result(unsafe {
            bindings::rdma_resolve_addr(self.id.as_ptr(), src, dst.as_raw(), timeout)
        })
    }

    /// Sets the local ACK timeout of the QP (4.096 µs * 2^timeout) rdma_cm
    /// uses when it computes the QP attributes.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result {
        // SAFETY: `id` is valid (type invariant).
        to_result(unsafe { bindings::rdma_set_ack_timeout(self.id.as_ptr(), timeout) })
    }

    /// Starts a disconnect; the `Disconnected` event follows.
    pub fn disconnect(&self) -> Result {
        // SAFETY: `id` is valid (type invariant).
        to_result(unsafe { bindings::rdma_disconnect(self.id.as_ptr()) })
    }
}

impl<H: Handler> Drop for CmId<H> {
    fn drop(&mut self) {
        // SAFETY: The id is owned (type invariant). `rdma_destroy_id` waits for a
        // running handler and no handler runs after it returns, so `handler`
        // (dropped after this) outlives every call with its pointer.
        unsafe { bindings::rdma_destroy_id(self.id.as_ptr()) };
    }
}

/// The C event handler of ids whose context is an `H`.
///
/// # Safety
///
/// Only rdma_cm calls this, with `id` valid and its handler mutex held, and
/// `event` valid for the call; `id->context` is the `H` of the [`CmId`] (or, for
/// a connection request, of the listening [`CmId`]) that installed it.
unsafe extern "C" fn trampoline<H: Handler>(
    id: *mut bindings::rdma_cm_id,
    event: *mut bindings::rdma_cm_event,
) -> c_int {
    // SAFETY: rdma_cm passes a valid id, with its handler mutex held, for the call.
    let Some(locked) = (unsafe { Locked::new(id) }) else {
        return 0;
    };
    // SAFETY: `context` is `Arc::as_ptr` of the `Arc<H>` of a `CmId`, which
    // cannot be destroyed (and drop its reference) while this handler holds
    // the id's (or, for a request, the listener's) handler mutex.
    let handler = unsafe { ArcBorrow::from_raw((*id).context.cast::<H>().cast_const()) };
    // SAFETY: `event` is valid for the call.
    let ev = unsafe { &*event };
    // SAFETY: for connection events `param.conn` is the active member; its data
    // pointer and length describe the private data, valid for the call.
    let private_data = unsafe {
        let conn = &ev.param.conn;
        if conn.private_data.is_null() {
            &[][..]
        } else {
            core::slice::from_raw_parts(
                conn.private_data.cast::<u8>(),
                usize::from(conn.private_data_len),
            )
        }
    };
    let kind = EventKind::from_raw(ev.event);
    let consumer_reject = if kind == EventKind::Rejected {
        let mut len: u8 = 0;
        // SAFETY: `id` and `event` are valid; the returned data (if any) lives
        // as long as the event.
        let p = unsafe { bindings::rdma_consumer_reject_data(id, event, &mut len) };
        if p.is_null() {
            None
        } else {
            // SAFETY: `p` points to `len` bytes of the event's private data.
            Some(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), usize::from(len)) })
        }
    } else {
        None
    };
    let event = Event {
        kind,
        status: ev.status,
        private_data,
        consumer_reject,
    };
    if ev.event == bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST {
        let mut accepted = false;
        H::connect_request(
            handler,
            ConnectRequest {
                id: locked,
                accepted: &mut accepted,
            },
            &event,
        );
        // Not accepted: a non-zero return makes rdma_cm destroy the new id.
        return if accepted { 0 } else { -1 };
    }
    H::event(handler, &locked, &event);
    // The id is owned by its `CmId`: never let rdma_cm destroy it.
    0
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_cm)]
mod tests {
    use super::SockAddr;

    #[test]
    fn only_unicast_peers() {
        let v6 = |s: [u16; 8]| {
            let mut b = [0u8; 16];
            for (i, w) in s.iter().enumerate() {
                b[2 * i..2 * i + 2].copy_from_slice(&w.to_be_bytes());
            }
            SockAddr::v6(b, 1)
        };
        for a in [[192, 0, 2, 1], [10, 0, 0, 1], [223, 255, 255, 254]] {
            assert!(SockAddr::v4(a, 1).is_unicast());
        }
        for a in [
            [0, 0, 0, 0],
            [0, 1, 2, 3],
            [224, 0, 0, 1],
            [239, 1, 1, 1],
            [240, 0, 0, 1],
            [255; 4],
        ] {
            assert!(!SockAddr::v4(a, 1).is_unicast());
        }
        assert!(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]).is_unicast());
        assert!(v6([0xfe80, 0, 0, 0, 0, 0, 0, 1]).is_unicast());
        assert!(v6([0, 0, 0, 0, 0, 0xffff, 0xc000, 0x0201]).is_unicast());
        assert!(!v6([0; 8]).is_unicast());
        assert!(!v6([0xffff; 8]).is_unicast());
        assert!(!v6([0xff02, 0, 0, 0, 0, 0, 0, 1]).is_unicast());
        assert!(!v6([0, 0, 0, 0, 0, 0xffff, 0xe000, 1]).is_unicast());
        assert!(!v6([0, 0, 0, 0, 0, 0xffff, 0xffff, 0xffff]).is_unicast());
    }
}
