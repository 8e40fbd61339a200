// SPDX-License-Identifier: GPL-2.0
//! Netlink attribute (TLV) parsing.

/// Mask of the attribute type bits (without NLA_F_NESTED / NLA_F_NET_BYTEORDER).
pub const TYPE_MASK: u16 = 0x3fff;

/// Iterates over the attributes in a buffer, yielding (type, payload). Stops at
/// the first malformed header rather than reading past the buffer.
#[derive(Clone)]
pub struct Attrs<'a> {
    buf: &'a [u8],
}

impl<'a> Attrs<'a> {
    /// Attributes in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The payload of the first attribute of type `ty`.
    pub fn get(self, ty: u16) -> Option<&'a [u8]> {
        let mut it = self;
        it.find(|(t, _)| *t == ty).map(|(_, p)| p)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let hdr = self.buf.get(..4)?;
        let len = u16::from_ne_bytes([hdr[0], hdr[1]]) as usize;
        let ty = u16::from_ne_bytes([hdr[2], hdr[3]]) & TYPE_MASK;
        if len < 4 || len > self.buf.len() {
            self.buf = &[];
            return None;
        }
        let payload = &self.buf[4..len];
        self.buf = &self.buf[len.next_multiple_of(4).min(self.buf.len())..];
        Some((ty, payload))
    }
}

/// A `u16` payload.
pub fn u16(p: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(p.try_into().ok()?))
}

/// A `u32` payload.
pub fn u32(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.try_into().ok()?))
}

/// A `u64` payload.
pub fn u64(p: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(p.try_into().ok()?))
}

/// A NUL-terminated string payload.
pub fn string(p: &[u8]) -> Option<String> {
    let end = p.iter().position(|&b| b == 0)?;
    String::from_utf8(p[..end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterates_and_masks_nested_flag() {
        let buf = [
            8, 0, 1, 0, 7, 0, 0, 0, 9, 0, 2, 0x80, b'r', b'x', b'e', b'0', 0, 0, 0, 0,
        ];
        let v: Vec<_> = Attrs::new(&buf).collect();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0], (1, &[7, 0, 0, 0][..]));
        assert_eq!(v[1].0, 2);
        assert_eq!(string(v[1].1).as_deref(), Some("rxe0"));
    }

    #[test]
    fn stops_at_lying_lengths() {
        // Second attribute claims 200 bytes.
        let buf = [8, 0, 1, 0, 7, 0, 0, 0, 200, 0, 2, 0, 1, 2, 3, 4];
        assert_eq!(Attrs::new(&buf).count(), 1);
        let buf = [2, 0, 1, 0];
        assert_eq!(Attrs::new(&buf).count(), 0);
    }

    #[test]
    fn scalar_lengths_are_exact() {
        assert_eq!(u32(&[1, 0, 0, 0]), Some(1));
        assert_eq!(u32(&[1, 0, 0]), None);
        assert_eq!(u64(&[1, 0, 0, 0, 0, 0, 0, 0]), Some(1));
        assert_eq!(string(b"abc"), None);
    }
}
