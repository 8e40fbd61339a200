// SPDX-License-Identifier: GPL-2.0

//! HMAC-SHA256, random bytes and a constant-time comparison: what ferry's
//! handshake proves a secret with.
//!
//! C headers: [`include/crypto/sha2.h`](srctree/include/crypto/sha2.h),
//! [`include/crypto/utils.h`](srctree/include/crypto/utils.h),
//! [`include/linux/random.h`](srctree/include/linux/random.h).
//!
//! The kernel's SHA-256 library (`CONFIG_CRYPTO_LIB_SHA256`) computes in any
//! context and allocates nothing, so a connection request's proof is checked
//! in the rdma_cm handler that received it.

use core::mem::MaybeUninit;

use crate::bindings;

/// Bytes of an HMAC-SHA256 value.
pub const HMAC_SHA256_LEN: usize = 32;

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; HMAC_SHA256_LEN] {
    let mut ctx = MaybeUninit::<bindings::hmac_sha256_ctx>::uninit();
    let mut out = [0u8; HMAC_SHA256_LEN];
    // SAFETY: `ctx` is writable, and the call initializes all of it; `key`
    // is valid for its length. The functions compute in any context and
    // keep no pointer past the call.
    unsafe { bindings::hmac_sha256_init_usingrawkey(ctx.as_mut_ptr(), key.as_ptr(), key.len()) };
    for p in parts {
        // SAFETY: `ctx` was initialized above; `p` is valid for its length.
        unsafe { bindings::ferry_helper_hmac_sha256_update(ctx.as_mut_ptr(), p.as_ptr(), p.len()) };
    }
    // SAFETY: `ctx` was initialized; `out` has room for the digest. The call
    // zeroizes `ctx`.
    unsafe { bindings::hmac_sha256_final(ctx.as_mut_ptr(), out.as_mut_ptr()) };
    out
}

/// Zeroes `buf` with stores the compiler may not drop as dead (as
/// `memzero_explicit` does): for key and secret bytes about to be freed.
pub fn wipe(buf: &mut [u8]) {
    for b in buf.iter_mut() {
        // SAFETY: `b` is a valid, aligned and exclusive reference.
        unsafe { core::ptr::write_volatile(b, 0) };
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

/// Zeroes `spare` (a vector's unused capacity, where a removed element's
/// bytes may linger after the elements behind it moved up) as [`wipe`]
/// does.
pub fn wipe_spare<T>(spare: &mut [core::mem::MaybeUninit<T>]) {
    for s in spare.iter_mut() {
        // SAFETY: `s` is a valid, aligned and exclusive reference; every
        // bit pattern is a valid `MaybeUninit`.
        unsafe { core::ptr::write_volatile(s, core::mem::MaybeUninit::zeroed()) };
    }
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

/// Fills `buf` from the kernel's CRNG.
pub fn random_bytes(buf: &mut [u8]) {
    // SAFETY: `buf` is writable for its length.
    unsafe { bindings::get_random_bytes(buf.as_mut_ptr().cast(), buf.len()) };
}

/// Whether `a` and `b` are equal, in a time that does not depend on where
/// they differ (for comparing a MAC a peer sent with the expected one).
pub fn equal_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // SAFETY: Both are valid for the length compared, which is theirs.
    let differ =
        unsafe { bindings::__crypto_memneq(a.as_ptr().cast(), b.as_ptr().cast(), a.len()) };
    differ == 0
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kernel::prelude::kunit_tests(ferry_crypto)]
mod tests {
    use super::*;

    fn hex(s: &str) -> kernel::prelude::KVec<u8> {
        let b = s.as_bytes();
        let nib = |c: u8| match c {
            b'0'..=b'9' => c - b'0',
            _ => c - b'a' + 10,
        };
        let mut v = kernel::prelude::KVec::new();
        for p in b.chunks(2) {
            v.push((nib(p[0]) << 4) | nib(p[1]), kernel::prelude::GFP_KERNEL)
                .unwrap();
        }
        v
    }

    /// RFC 4231 test cases 1 to 4, 6 and 7 (5 truncates its output).
    #[test]
    fn rfc4231_vectors() {
        let aa131 = [0xaau8; 131];
        let cases: [(&[u8], &[u8], &str); 6] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 20],
                &[0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                &[
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                    22, 23, 24, 25,
                ],
                &[0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                &aa131,
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                &aa131,
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.",
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (key, data, want) in cases {
            let got = hmac_sha256(key, &[data]);
            assert_eq!(&got[..], &hex(want)[..]);
            // Split anywhere, the same value.
            let (a, b) = data.split_at(data.len() / 3);
            assert_eq!(hmac_sha256(key, &[a, b]), got);
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(equal_secret(b"abcd", b"abcd"));
        assert!(!equal_secret(b"abcd", b"abce"));
        assert!(!equal_secret(b"abcd", b"abc"));
        let mut a = [0u8; 16];
        let mut b = [0u8; 16];
        random_bytes(&mut a);
        random_bytes(&mut b);
        assert!(a != [0u8; 16] && a != b);
    }
}
