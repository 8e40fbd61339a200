// SPDX-License-Identifier: GPL-2.0

//! What joins ferry's kernel API ([`crate::ferry_api`]) and the block layer
//! ([`crate::block`]) in ferry_blk: a block request's own pages lent to a
//! ferry request ([`RqData`]), ferry's pages lent to a block device's
//! I/O, and a netlink request's network namespace handed to ferry.

use core::ffi::c_uint;
use kernel::bindings as kbindings;

use crate::{
    block::{
        bdev::SgPages,
        mq::{HasSgTable, Operations, Owned},
    },
    ferry_api::{AsNetNs, Data, Pages},
    genl::Request,
};

// SAFETY: The namespace of the socket that sent the request: the socket
// holds a counted reference to it for as long as the request is handled,
// and so as long as the request is borrowed.
unsafe impl AsNetNs for Request<'_> {
    fn as_raw_net(&self) -> *mut core::ffi::c_void {
        self.net().as_raw().cast()
    }
}

/// The most segments a client's request has: its scatterlist's size.
pub const SEGMENTS: usize = 128;

/// A started block request whose data is mapped into its PDU's
/// scatterlist, lent to ferry as a request's pages: the request ends only
/// once ferry gives it back ([`RqData::into_request`]).
///
/// # Invariants
///
/// The table of `rq`'s PDU holds `nents` entries mapping `len` bytes (at
/// least one) of `rq`'s pages, which stay the request's until it ends.
pub struct RqData<T: Operations>
where
    T::Pdu: HasSgTable<SEGMENTS>,
{
    rq: Owned<T>,
    nents: u32,
    len: usize,
}

impl<T: Operations> RqData<T>
where
    T::Pdu: HasSgTable<SEGMENTS>,
{
    /// Maps `rq`'s data into its PDU's table; the request back if it has
    /// none (a flush, a discard), or more segments than the table holds.
    pub fn map(mut rq: Owned<T>) -> core::result::Result<Self, Owned<T>> {
        let len = rq.bytes() as usize;
        match rq.map_sg::<SEGMENTS>() {
            // INVARIANT: mapped, `n` entries of `len` bytes.
            Ok(n) if n > 0 && len > 0 => Ok(Self { rq, nents: n, len }),
            _ => Err(rq),
        }
    }

    /// The request, to end.
    pub fn into_request(self) -> Owned<T> {
        self.rq
    }

    /// The request.
    pub fn request(&self) -> &Owned<T> {
        &self.rq
    }
}

// SAFETY: The table lives in the request's PDU, not inside this object, and
// is `Opaque`; it and the pages it maps stay put and the request's until
// the request ends, which needs the `Owned` this object holds (type
// invariant); only `Owned::map_sg` writes it, which needs `&mut` of that
// `Owned`, which this object does not give out: nobody but ferry touches
// them while it is lent.
unsafe impl<T: Operations> Pages for RqData<T>
where
    T::Pdu: HasSgTable<SEGMENTS>,
{
    fn sgl(&self) -> (*mut kbindings::scatterlist, c_uint) {
        (
            self.rq
                .pdu()
                .sg_table()
                .as_raw()
                .cast::<kbindings::scatterlist>(),
            self.nents,
        )
    }

    fn len(&self) -> usize {
        self.len
    }
}

// SAFETY: A `Data`'s table is a separate allocation over pages it owns,
// kept until it is dropped (see `ferry_api::Data`), which do not move with
// it; a `&mut` borrow, or a box of it made raw, keeps anyone else off them.
unsafe impl SgPages for Data {
    fn sgl(&self) -> (*mut crate::bindings::scatterlist, u32) {
        let (sgl, n) = Pages::sgl(self);
        (sgl.cast(), n)
    }
}
