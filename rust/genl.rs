// SPDX-License-Identifier: GPL-2.0

//! Generic netlink families with operations.
//!
//! C headers: [`include/net/genetlink.h`](srctree/include/net/genetlink.h),
//! [`include/net/netlink.h`](srctree/include/net/netlink.h).
//!
//! The kernel's own Rust netlink support only sends multicast messages. Here a
//! family is defined by a YNL spec: the YNL generator writes the C family, its
//! split ops and attribute policies, and the ops call `extern "C"` handlers that a
//! module's glue forwards to safe Rust functions through [`doit`] and [`dumpit`].
//! Genetlink has validated every attribute against the op's policy before a
//! handler runs; handlers see a [`Request`] or a [`Dump`], answer through a
//! [`Writer`], and report errors as values plus an extack message.

use core::{marker::PhantomData, ptr::NonNull};
use kernel::{
    error::{from_err_ptr, to_result},
    prelude::*,
    types::Opaque,
};

use crate::{bindings, netns::Net};

// Dump positions live in `netlink_callback::args` (`long`), which must hold a u64.
const _: () = assert!(core::mem::size_of::<c_long>() == 8);

/// A registered generic netlink family; unregistered when dropped.
///
/// The family registered is a copy of the template that YNL generates: the
/// template may be read-only after module init (`__ro_after_init`), while
/// genetlink writes the family's id and lists when it registers it.
///
/// # Invariants
///
/// `family` is registered with genetlink, and its ops and policies belong to
/// the module that owns this object.
pub struct Registration {
    family: Pin<KBox<Opaque<bindings::genl_family>>>,
}

impl Registration {
    /// Registers a copy of `template`.
    ///
    /// # Safety
    ///
    /// `template` must point to a valid `genl_family` whose `module` is the
    /// calling module and whose ops, policies and handlers belong to it, and the
    /// returned registration must be dropped no later than module exit: a dump
    /// in progress holds a reference on that module and may call its `dumpit`
    /// after the family is unregistered.
    pub unsafe fn new(template: *const bindings::genl_family) -> Result<Self> {
        if template.is_null() {
            return Err(EINVAL);
        }
        let family = KBox::pin_init(
            Opaque::ffi_init(move |slot: *mut bindings::genl_family| {
                // SAFETY: `template` is a valid family (function safety
                // requirement) and `slot` valid, uninitialized memory for one.
                unsafe { core::ptr::copy_nonoverlapping(template, slot, 1) };
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `family` is a valid family, pinned in a box that lives until
        // `drop` unregisters it; its ops belong to the calling module.
        to_result(unsafe { bindings::genl_register_family(family.get()) })?;
        Ok(Self { family })
    }
}

impl Registration {
    /// Notification `cmd` of this family with the attributes `fill` writes
    /// (at most `size` bytes), ready to multicast.
    pub fn notify_with(
        &self,
        cmd: u32,
        size: usize,
        fill: impl FnOnce(&mut Writer<'_>) -> Result,
    ) -> Result<Notification<'_>> {
        let cmd = u8::try_from(cmd).map_err(|_| EINVAL)?;
        let mut ntf = self.notification(cmd, size)?;
        fill(&mut ntf.writer())?;
        Ok(ntf)
    }

    /// Starts a notification `cmd` of this family with room for `payload`
    /// bytes of attributes, for [`Notification::multicast`].
    pub fn notification(&self, cmd: u8, payload: usize) -> Result<Notification<'_>> {
        // SAFETY: Allocating a netlink message has no preconditions.
        let skb = unsafe { bindings::ferry_helper_genlmsg_new(payload) };
        let skb = NonNull::new(skb).ok_or(ENOMEM)?;
        // SAFETY: `skb` is a fresh message; the family is registered (type
        // invariant) and outlives the notification, which borrows `self`.
        let hdr =
            unsafe { bindings::ferry_helper_genlmsg_put_ntf(self.family.get(), skb.as_ptr(), cmd) };
        // INVARIANT: `skb` is owned; `hdr` is its header or null.
        let ntf = Notification {
            skb,
            hdr,
            family: self,
        };
        if hdr.is_null() {
            return Err(EMSGSIZE);
        }
        Ok(ntf)
    }
}

/// A notification under construction; freed unless sent.
///
/// # Invariants
///
/// `skb` is owned by the notification and `hdr` is its genetlink header.
pub struct Notification<'a> {
    skb: NonNull<bindings::sk_buff>,
    hdr: *mut c_void,
    family: &'a Registration,
}

impl Notification<'_> {
    /// The writer for the notification's attributes.
    pub fn writer(&mut self) -> Writer<'_> {
        Writer {
            skb: self.skb,
            _p: PhantomData,
        }
    }

    /// Sends the notification to the listeners of multicast group `group` (its
    /// index in the family's list) in `net`. Having no listener is not an error.
    pub fn multicast(self, net: &Net, group: u32) -> Result {
        self.send(|family, skb, hdr| {
            // SAFETY: `send`'s contract: a registered family and an owned skb
            // with its header; the call consumes the skb.
            unsafe {
                bindings::ferry_helper_genlmsg_multicast_netns(
                    family,
                    skb,
                    net.as_raw(),
                    hdr,
                    group,
                )
            }
        })
    }

    /// Sends the notification to the listeners of multicast group `group` in
    /// every network namespace (for objects every namespace may see).
    pub fn multicast_all(self, group: u32) -> Result {
        self.send(|family, skb, hdr| {
            // SAFETY: As in `multicast`.
            unsafe { bindings::ferry_helper_genlmsg_multicast_allns(family, skb, hdr, group) }
        })
    }

    /// Hands the message to `send`, which gets the registered family, the
    /// owned skb and its header, and must consume the skb.
    fn send(
        self,
        send: impl FnOnce(*mut bindings::genl_family, *mut bindings::sk_buff, *mut c_void) -> c_int,
    ) -> Result {
        let this = core::mem::ManuallyDrop::new(self);
        // `ManuallyDrop` keeps us from freeing the skb `send` consumed.
        match send(this.family.family.get(), this.skb.as_ptr(), this.hdr) {
            0 => Ok(()),
            r if r == ESRCH.to_errno() => Ok(()),
            r => to_result(r),
        }
    }
}

impl Drop for Notification<'_> {
    fn drop(&mut self) {
        // SAFETY: The notification owns `skb` (type invariant) and was not sent.
        unsafe { bindings::ferry_helper_nlmsg_free(self.skb.as_ptr()) };
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: The family is registered (type invariant). Once this returns no
        // new request reaches its ops, running `doit`s have finished (genetlink
        // waits for them under `cb_lock`), and a dump still in progress keeps
        // the module loaded until it ends.
        unsafe { bindings::genl_unregister_family(self.family.get()) };
    }
}

// SAFETY: The registration is only a handle; genetlink's locks serialize its use.
unsafe impl Send for Registration {}
// SAFETY: As above; `&Registration` gives access to nothing.
unsafe impl Sync for Registration {}

/// The payload of the attribute at `nla`, or `None` for a null pointer.
///
/// # Safety
///
/// `nla` must be null or point to a netlink attribute that genetlink parsed and
/// that stays valid for `'a`.
unsafe fn nla_payload<'a>(nla: *const bindings::nlattr) -> Option<&'a [u8]> {
    if nla.is_null() {
        return None;
    }
    // SAFETY: `nla` points to a valid attribute header (function safety requirement).
    let total = usize::from(unsafe { (*nla).nla_len });
    // NLA_HDRLEN: the header, padded to NLA_ALIGNTO (4).
    let hdr = size_of::<bindings::nlattr>().next_multiple_of(4);
    let len = total.checked_sub(hdr)?;
    // SAFETY: The parser checked that `nla_len` bytes from `nla` lie inside the
    // message, and the payload starts right after the aligned header.
    Some(unsafe { core::slice::from_raw_parts(nla.cast::<u8>().add(hdr), len) })
}

/// A `doit` request: its parsed attributes, its extack and a way to reply.
///
/// # Invariants
///
/// `info` is valid for `'a` and `info.attrs` holds `maxattr + 1` entries.
pub struct Request<'a> {
    info: NonNull<bindings::genl_info>,
    maxattr: u32,
    _p: PhantomData<&'a mut bindings::genl_info>,
}

impl<'a> Request<'a> {
    fn attr_raw(&self, ty: u32) -> *const bindings::nlattr {
        if ty > self.maxattr {
            return core::ptr::null();
        }
        // SAFETY: `info` is valid and `attrs` has `maxattr + 1` entries (type
        // invariant); `ty <= maxattr`.
        unsafe { *(*self.info.as_ptr()).attrs.add(ty as usize) }
    }

    fn payload(&self, ty: u32) -> Option<&'a [u8]> {
        // SAFETY: The attribute pointer came from genetlink's parse of this request,
        // which lives for `'a`.
        unsafe { nla_payload(self.attr_raw(ty)) }
    }

    /// Whether attribute `ty` is present.
    pub fn has(&self, ty: u32) -> bool {
        !self.attr_raw(ty).is_null()
    }

    /// The value of the `u32` attribute `ty`, if present and four bytes long.
    pub fn u32(&self, ty: u32) -> Option<u32> {
        let p = self.payload(ty)?;
        Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
    }

    /// The value of the `u16` attribute `ty`, if present and two bytes long.
    pub fn u16(&self, ty: u32) -> Option<u16> {
        let p = self.payload(ty)?;
        Some(u16::from_ne_bytes(p.get(..2)?.try_into().ok()?))
    }

    /// The payload of the binary attribute `ty`, if present.
    pub fn bytes(&self, ty: u32) -> Option<&'a [u8]> {
        self.payload(ty)
    }

    /// The string attribute `ty`, if present and NUL-terminated.
    pub fn str(&self, ty: u32) -> Option<&'a CStr> {
        CStr::from_bytes_until_nul(self.payload(ty)?).ok()
    }

    fn extack(&self) -> *mut bindings::netlink_ext_ack {
        // SAFETY: `info` is valid (type invariant).
        unsafe { (*self.info.as_ptr()).extack }
    }

    /// Fails with `EINVAL` and reports attribute `ty` as missing unless present.
    pub fn require(&mut self, ty: u32) -> Result {
        if self.has(ty) {
            return Ok(());
        }
        // SAFETY: `extack` is the request's (or null, which the helper accepts).
        unsafe { bindings::ferry_helper_nl_set_err_attr_miss(self.extack(), ty) };
        Err(EINVAL)
    }

    /// Reports `msg` in the extack, pointing at attribute `ty` if present.
    pub fn bad_attr(&mut self, ty: u32, msg: &'static CStr) {
        // SAFETY: `extack` is the request's; the attribute (or null) belongs to the
        // request; `msg` is static, as extack keeps the pointer.
        unsafe {
            bindings::ferry_helper_nl_set_err_msg_attr(
                self.extack(),
                self.attr_raw(ty),
                msg.as_char_ptr(),
            )
        };
    }

    /// Reports `msg` in the extack.
    pub fn error(&mut self, msg: &'static CStr) {
        // SAFETY: As in `bad_attr`, with no attribute.
        unsafe { bindings::ferry_helper_nl_set_err_msg(self.extack(), msg.as_char_ptr()) };
    }

    /// The network namespace of the requesting socket.
    pub fn net(&self) -> &'a Net {
        // SAFETY: `info` is valid (type invariant); the requesting socket, and so
        // its namespace, outlives the request.
        unsafe { Net::from_raw(bindings::ferry_helper_genl_info_net(self.info.as_ptr())) }
    }

    /// Starts a reply with room for `payload` bytes of attributes.
    pub fn reply_sized(&self, payload: usize) -> Result<Reply<'a>> {
        // SAFETY: Allocating a netlink message has no preconditions.
        let skb = unsafe { bindings::ferry_helper_genlmsg_new(payload) };
        let skb = NonNull::new(skb).ok_or(ENOMEM)?;
        // SAFETY: `skb` is a fresh message and `info` is valid (type invariant).
        let hdr =
            unsafe { bindings::ferry_helper_genlmsg_put_reply(skb.as_ptr(), self.info.as_ptr()) };
        let reply = Reply {
            skb,
            hdr,
            info: self.info,
            _p: PhantomData,
        };
        if hdr.is_null() {
            return Err(EMSGSIZE);
        }
        Ok(reply)
    }
}

/// A reply message under construction; freed unless sent.
///
/// # Invariants
///
/// `skb` is owned by the reply; `hdr`, if non-null, is its genetlink header;
/// `info` is the request's, valid for `'a`.
pub struct Reply<'a> {
    skb: NonNull<bindings::sk_buff>,
    hdr: *mut c_void,
    info: NonNull<bindings::genl_info>,
    _p: PhantomData<&'a mut bindings::genl_info>,
}

impl Reply<'_> {
    /// The writer for the reply's attributes.
    pub fn writer(&mut self) -> Writer<'_> {
        Writer {
            skb: self.skb,
            _p: PhantomData,
        }
    }

    /// Finishes the message and sends it to the requester.
    pub fn send(self) -> Result {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `skb` is owned and `hdr` is its header (type invariant); sending
        // hands the skb to netlink, and `ManuallyDrop` keeps us from freeing it.
        unsafe {
            bindings::ferry_helper_genlmsg_end(this.skb.as_ptr(), this.hdr);
            to_result(bindings::ferry_helper_genlmsg_reply(
                this.skb.as_ptr(),
                this.info.as_ptr(),
            ))
        }
    }
}

impl Drop for Reply<'_> {
    fn drop(&mut self) {
        // SAFETY: The reply owns `skb` (type invariant) and was not sent.
        unsafe { bindings::ferry_helper_nlmsg_free(self.skb.as_ptr()) };
    }
}

/// One round of a dump: fills an skb with as many entries as fit.
///
/// Entries are written with [`Dump::entry`]; the handler keeps its place in
/// [`Dump::position`] and returns `EMSGSIZE` (as `entry` does) when the skb is
/// full, which makes genetlink call it again with a fresh skb.
///
/// # Invariants
///
/// `skb` and `cb` are valid for `'a`, and `cb` belongs to a genetlink dump.
pub struct Dump<'a> {
    skb: NonNull<bindings::sk_buff>,
    cb: NonNull<bindings::netlink_callback>,
    _p: PhantomData<&'a mut bindings::netlink_callback>,
}

impl Dump<'_> {
    /// Where the previous round stopped: zero at first, kept across rounds.
    pub fn position(&mut self) -> &mut u64 {
        // SAFETY: `cb` is valid (type invariant); `args` is an array of six
        // `long`s that belongs to the dump's owner (genetlink leaves it alone),
        // `long` is 64 bits (asserted at the top of this file), and the borrow is
        // tied to `&mut self`.
        unsafe { &mut *bindings::ferry_helper_netlink_cb_args(self.cb.as_ptr()).cast::<u64>() }
    }

    /// The network namespace of the dumping socket.
    pub fn net(&self) -> &Net {
        // SAFETY: `cb` is valid (type invariant); its socket, and so the socket's
        // namespace, outlives the dump.
        unsafe { Net::from_raw(bindings::ferry_helper_netlink_cb_net(self.cb.as_ptr())) }
    }

    /// Adds one entry, written by `f`. If `f` fails, the partial entry is removed
    /// and its error returned; `EMSGSIZE` means the skb is full.
    pub fn entry(&mut self, f: impl FnOnce(&mut Writer<'_>) -> Result) -> Result {
        // SAFETY: `skb` and `cb` are valid (type invariant).
        let hdr =
            unsafe { bindings::ferry_helper_genlmsg_put_dump(self.skb.as_ptr(), self.cb.as_ptr()) };
        if hdr.is_null() {
            return Err(EMSGSIZE);
        }
        let mut w = Writer {
            skb: self.skb,
            _p: PhantomData,
        };
        let res = f(&mut w);
        // SAFETY: `hdr` is the header just put into `skb`.
        unsafe {
            if res.is_ok() {
                bindings::ferry_helper_genlmsg_end(self.skb.as_ptr(), hdr)
            } else {
                bindings::ferry_helper_genlmsg_cancel(self.skb.as_ptr(), hdr)
            }
        };
        res
    }
}

/// Writes attributes into a message being built.
///
/// # Invariants
///
/// `skb` is a netlink message under construction, valid and exclusively ours
/// for `'a`.
pub struct Writer<'a> {
    skb: NonNull<bindings::sk_buff>,
    _p: PhantomData<&'a mut bindings::sk_buff>,
}

impl Writer<'_> {
    /// Adds a `u32` attribute.
    pub fn put_u32(&mut self, ty: u32, value: u32) -> Result {
        // SAFETY: `skb` is valid (type invariant).
        to_result(unsafe {
            bindings::ferry_helper_nla_put_u32(self.skb.as_ptr(), ty as c_int, value)
        })
    }

    /// Adds a `u64` attribute, 64-bit aligned with attribute `pad` if needed.
    pub fn put_u64(&mut self, ty: u32, value: u64, pad: u32) -> Result {
        // SAFETY: `skb` is valid (type invariant).
        to_result(unsafe {
            bindings::ferry_helper_nla_put_u64(self.skb.as_ptr(), ty as c_int, value, pad as c_int)
        })
    }

    /// Adds a `u16` attribute.
    pub fn put_u16(&mut self, ty: u32, value: u16) -> Result {
        // SAFETY: `skb` is valid (type invariant).
        to_result(unsafe {
            bindings::ferry_helper_nla_put_u16(self.skb.as_ptr(), ty as c_int, value)
        })
    }

    /// Adds a binary attribute holding `value`.
    pub fn put_bytes(&mut self, ty: u32, value: &[u8]) -> Result {
        let len = c_int::try_from(value.len()).map_err(|_| EMSGSIZE)?;
        // SAFETY: `skb` is valid (type invariant); `value` is readable for `len` bytes.
        to_result(unsafe {
            bindings::ferry_helper_nla_put(
                self.skb.as_ptr(),
                ty as c_int,
                len,
                value.as_ptr().cast(),
            )
        })
    }

    /// Adds a flag attribute (no payload).
    pub fn put_flag(&mut self, ty: u32) -> Result {
        self.put_bytes(ty, &[])
    }

    /// Adds a NUL-terminated string attribute.
    pub fn put_str(&mut self, ty: u32, value: &CStr) -> Result {
        // SAFETY: `skb` is valid (type invariant); `value` is NUL-terminated.
        to_result(unsafe {
            bindings::ferry_helper_nla_put_string(
                self.skb.as_ptr(),
                ty as c_int,
                value.as_char_ptr(),
            )
        })
    }

    /// Adds a nested attribute whose contents `f` writes; on failure nothing of
    /// it remains.
    pub fn nest(&mut self, ty: u32, f: impl FnOnce(&mut Writer<'_>) -> Result) -> Result {
        // SAFETY: `skb` is valid (type invariant).
        let start =
            unsafe { bindings::ferry_helper_nla_nest_start(self.skb.as_ptr(), ty as c_int) };
        if start.is_null() {
            return Err(EMSGSIZE);
        }
        let res = f(self);
        // SAFETY: `start` is the nest just opened in `skb`.
        unsafe {
            if res.is_ok() {
                bindings::ferry_helper_nla_nest_end(self.skb.as_ptr(), start)
            } else {
                bindings::ferry_helper_nla_nest_cancel(self.skb.as_ptr(), start)
            }
        };
        res
    }
}

/// Runs a `doit` handler for genetlink.
///
/// # Safety
///
/// `info` must be the `genl_info` genetlink passed to the op, whose `attrs` hold
/// `maxattr + 1` entries (the op's `maxattr`), valid for the call.
pub unsafe fn doit(
    info: *mut bindings::genl_info,
    maxattr: u32,
    handler: impl FnOnce(&mut Request<'_>) -> Result,
) -> c_int {
    let Some(info) = NonNull::new(info) else {
        return EINVAL.to_errno();
    };
    // INVARIANT: guaranteed by the function's safety requirements.
    let mut req = Request {
        info,
        maxattr,
        _p: PhantomData,
    };
    match handler(&mut req) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Runs one round of a `dumpit` handler for genetlink.
///
/// # Safety
///
/// `skb` and `cb` must be what genetlink passed to the dump op, valid for the call.
pub unsafe fn dumpit(
    skb: *mut bindings::sk_buff,
    cb: *mut bindings::netlink_callback,
    handler: impl FnOnce(&mut Dump<'_>) -> Result,
) -> c_int {
    let (Some(skb), Some(cb)) = (NonNull::new(skb), NonNull::new(cb)) else {
        return EINVAL.to_errno();
    };
    // INVARIANT: guaranteed by the function's safety requirements.
    let mut dump = Dump {
        skb,
        cb,
        _p: PhantomData,
    };
    // A full skb (`EMSGSIZE`) with entries in it makes netlink call again.
    match handler(&mut dump) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Allocates an empty message, for building attributes outside a request.
///
/// Used by the tests; freed on drop.
pub struct Message {
    skb: NonNull<bindings::sk_buff>,
}

impl Message {
    /// Allocates a message with room for `payload` bytes.
    pub fn new(payload: usize) -> Result<Self> {
        // SAFETY: No preconditions.
        let skb = unsafe { bindings::ferry_helper_genlmsg_new(payload) };
        let skb = from_err_ptr(skb)?;
        Ok(Self {
            skb: NonNull::new(skb).ok_or(ENOMEM)?,
        })
    }

    /// The writer for this message.
    pub fn writer(&mut self) -> Writer<'_> {
        Writer {
            skb: self.skb,
            _p: PhantomData,
        }
    }

    /// The attributes written so far, as bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `skb` is valid and owned; `data`/`len` describe its linear data,
        // which a freshly allocated netlink skb keeps entirely linear.
        unsafe {
            let skb = self.skb.as_ptr();
            core::slice::from_raw_parts(
                bindings::ferry_helper_skb_data(skb),
                bindings::ferry_helper_skb_len(skb) as usize,
            )
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        // SAFETY: The message owns `skb`.
        unsafe { bindings::ferry_helper_nlmsg_free(self.skb.as_ptr()) };
    }
}

/// Defines the `extern "C"` `doit` of an op, which a YNL-generated ops table
/// (nl_gen.c) names: it forwards to a safe handler.
macro_rules! op_doit {
    ($(#[$doc:meta])* $name:ident => $handler:path, maxattr $maxattr:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// Only genetlink calls this, as the op's `doit`, with a valid `info`.
        #[no_mangle]
        unsafe extern "C" fn $name(
            _skb: *mut $crate::bindings::sk_buff,
            info: *mut $crate::bindings::genl_info,
        ) -> kernel::ffi::c_int {
            // SAFETY: genetlink passes the request's `info`, valid for the call,
            // with attributes parsed against the op's policy, whose maxattr
            // the generated table sets to the one named here.
            unsafe { $crate::genl::doit(info, $crate::bindings::$maxattr, $handler) }
        }
    };
}

/// Defines the `extern "C"` `dumpit` of an op, as [`op_doit`] does.
macro_rules! op_dumpit {
    ($(#[$doc:meta])* $name:ident => $handler:path) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// Only genetlink calls this, as the op's `dumpit`, with a valid `skb` and `cb`.
        #[no_mangle]
        unsafe extern "C" fn $name(
            skb: *mut $crate::bindings::sk_buff,
            cb: *mut $crate::bindings::netlink_callback,
        ) -> kernel::ffi::c_int {
            // SAFETY: genetlink passes the dump's `skb` and `cb`, valid for the call.
            unsafe { $crate::genl::dumpit(skb, cb, $handler) }
        }
    };
}

pub(crate) use {op_doit, op_dumpit};

// ferry's module runs these; ferry_blk, which builds this file too, not.
#[cfg(all(CONFIG_FERRY_KUNIT_TEST, not(CONFIG_FERRY_BLK_MODULE)))]
#[kunit_tests(ferry_genl)]
mod tests {
    use super::*;

    #[test]
    fn writer_encodes_attributes() -> Result {
        let mut msg = Message::new(256)?;
        {
            let mut w = msg.writer();
            w.put_u32(1, 0xdead_beef)?;
            w.nest(2, |w| w.put_str(3, c"rxe0"))?;
        }
        let b = msg.bytes();
        // u32: len 8, type 1, value; nest: len 4 + (4 + "rxe0\0" padded to 8), type 2.
        assert_eq!(b.len(), 8 + 4 + 12);
        assert_eq!(&b[..4], &[8, 0, 1, 0]);
        assert_eq!(&b[4..8], &0xdead_beef_u32.to_ne_bytes());
        assert_eq!(&b[8..12], &[16, 0, 2, 0x80]);
        assert_eq!(&b[12..16], &[9, 0, 3, 0]);
        assert_eq!(&b[16..21], b"rxe0\0");
        Ok(())
    }

    #[test]
    fn failed_nest_leaves_nothing() -> Result {
        let mut msg = Message::new(256)?;
        {
            let mut w = msg.writer();
            w.put_u32(1, 1)?;
            assert_eq!(
                w.nest(2, |w| {
                    w.put_u32(3, 3)?;
                    Err(EINVAL)
                }),
                Err(EINVAL)
            );
        }
        assert_eq!(msg.bytes().len(), 8);
        Ok(())
    }
}
