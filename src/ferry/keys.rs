// SPDX-License-Identifier: GPL-2.0

//! Pre-shared keys: what a listener may require and a client may name, so
//! both sides prove they hold the same key (see [`crate::wire::Auth`]).
//!
//! An administrator adds a key under a name (`key-add`, `CAP_NET_ADMIN`);
//! ferry never hands its bytes back, not even to the administrator, and
//! zeroes them when the last user lets go. Keys live in the network
//! namespace they were added in, and hold it (as a listener does), so its
//! address never names another namespace while a key is there. A listener or session takes the key when
//! it is made and keeps it: deleting a key changes no listener or session
//! that uses it, only what new ones find.

use kernel::{prelude::*, sync::Arc};

use crate::wire::ServiceName;

/// Fewest bytes of a key: 128 bits.
pub(crate) const MIN_KEY_LEN: usize = 16;
/// Most bytes of a key.
pub(crate) const MAX_KEY_LEN: usize = 128;
/// Most keys per namespace.
pub(crate) const MAX_KEYS: usize = 256;

/// A key's bytes, zeroed when dropped.
pub(crate) struct Psk {
    /// Its name, as added.
    pub(crate) name: ServiceName,
    bytes: KVec<u8>,
}

impl Psk {
    /// A copy of `bytes` as key `name`; `EINVAL` unless 16 to 128 bytes.
    pub(crate) fn new(name: ServiceName, bytes: &[u8]) -> Result<Arc<Self>> {
        if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&bytes.len()) {
            return Err(EINVAL);
        }
        let mut v = KVec::with_capacity(bytes.len(), GFP_KERNEL)?;
        v.extend_from_slice(bytes, GFP_KERNEL)?;
        Ok(Arc::new(Self { name, bytes: v }, GFP_KERNEL)?)
    }

    /// The key, for the handshake's MACs alone.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Psk {
    fn drop(&mut self) {
        crate::crypto::wipe(&mut self.bytes);
    }
}

/// The keys of all namespaces; the module keeps them under a mutex. `H`
/// is kept with each key (the module keeps nothing: its namespace exit
/// removes a namespace's keys before the namespace can be reused).
pub(crate) struct Keys<H> {
    /// (namespace, its holder, key): the namespace by address, compared
    /// only, as listeners and sessions compare theirs.
    list: KVec<(usize, H, Arc<Psk>)>,
}

impl<H> Default for Keys<H> {
    fn default() -> Self {
        Self { list: KVec::new() }
    }
}

impl<H> Keys<H> {
    /// Adds `key` in namespace `net`, held by `holder`: `EEXIST` if the
    /// name is taken there, `ENOSPC` beyond [`MAX_KEYS`].
    pub(crate) fn add(&mut self, net: usize, holder: H, key: Arc<Psk>) -> Result {
        let mine = self.list.iter().filter(|(n, _, _)| *n == net);
        if mine.clone().any(|(_, _, k)| k.name == key.name) {
            return Err(EEXIST);
        }
        if mine.count() >= MAX_KEYS {
            return Err(ENOSPC);
        }
        self.list.push((net, holder, key), GFP_KERNEL)?;
        Ok(())
    }

    /// Removes key `name` of namespace `net`: `ENOENT` if there is none.
    pub(crate) fn remove(&mut self, net: usize, name: &ServiceName) -> Result {
        let pos = self
            .list
            .iter()
            .position(|(n, _, k)| *n == net && k.name == *name)
            .ok_or(ENOENT)?;
        self.list.remove(pos).map_err(|_| ENOENT)?;
        Ok(())
    }

    /// Removes every key of namespace `net` (which is going); returns how
    /// many there were.
    pub(crate) fn remove_net(&mut self, net: usize) -> usize {
        let before = self.list.len();
        self.list.retain(|e| e.0 != net);
        before - self.list.len()
    }

    /// Key `name` of namespace `net`.
    pub(crate) fn find(&self, net: usize, name: &ServiceName) -> Option<Arc<Psk>> {
        self.list
            .iter()
            .find(|(n, _, k)| *n == net && k.name == *name)
            .map(|(_, _, k)| k.clone())
    }

    /// The names of namespace `net`'s keys, sorted.
    pub(crate) fn names(&self, net: usize) -> Result<KVec<ServiceName>> {
        let mut v = KVec::new();
        for (_, _, k) in self.list.iter().filter(|(n, _, _)| *n == net) {
            v.push(k.name, GFP_KERNEL)?;
        }
        v.sort_unstable_by(|a, b| a.as_cstr().to_bytes().cmp(b.as_cstr().to_bytes()));
        Ok(v)
    }
}

#[cfg(CONFIG_FERRY_KUNIT_TEST)]
#[kunit_tests(ferry_keys)]
mod tests {
    use super::*;

    fn name(s: &[u8]) -> ServiceName {
        ServiceName::new(s).unwrap()
    }

    #[test]
    fn keys_are_per_namespace_and_never_shorter_than_128_bits() -> Result {
        assert!(Psk::new(name(b"k"), &[1; MIN_KEY_LEN - 1]).is_err());
        assert!(Psk::new(name(b"k"), &[1; MAX_KEY_LEN + 1]).is_err());
        let mut keys = Keys::default();
        keys.add(1, (), Psk::new(name(b"k"), &[1; 16])?)?;
        assert_eq!(
            keys.add(1, (), Psk::new(name(b"k"), &[2; 16])?),
            Err(EEXIST)
        );
        // Another namespace has a name of its own.
        keys.add(2, (), Psk::new(name(b"k"), &[2; 16])?)?;
        assert_eq!(keys.find(1, &name(b"k")).map(|k| k.bytes()[0]), Some(1));
        assert_eq!(keys.find(2, &name(b"k")).map(|k| k.bytes()[0]), Some(2));
        assert!(keys.find(3, &name(b"k")).is_none());
        // A user keeps the key it took after the key is deleted.
        let held = keys.find(1, &name(b"k")).ok_or(ENOENT)?;
        keys.remove(1, &name(b"k"))?;
        assert_eq!(keys.remove(1, &name(b"k")), Err(ENOENT));
        assert!(keys.find(1, &name(b"k")).is_none());
        assert_eq!(held.bytes(), &[1; 16]);
        keys.add(1, (), Psk::new(name(b"b"), &[3; 16])?)?;
        keys.add(1, (), Psk::new(name(b"a"), &[3; 16])?)?;
        let names = keys.names(1)?;
        assert_eq!(names.len(), 2);
        assert!(names[0] == name(b"a") && names[1] == name(b"b"));
        assert_eq!(keys.names(2)?.len(), 1);
        Ok(())
    }

    #[test]
    fn a_namespace_that_goes_takes_its_keys() -> Result {
        let mut keys = Keys::default();
        keys.add(1, (), Psk::new(name(b"a"), &[1; 16])?)?;
        keys.add(1, (), Psk::new(name(b"b"), &[1; 16])?)?;
        keys.add(2, (), Psk::new(name(b"a"), &[2; 16])?)?;
        assert_eq!(keys.remove_net(1), 2);
        assert!(keys.find(1, &name(b"a")).is_none());
        assert!(keys.find(2, &name(b"a")).is_some());
        // A namespace that reuses the address starts with none.
        assert_eq!(keys.names(1)?.len(), 0);
        assert_eq!(keys.remove_net(1), 0);
        Ok(())
    }

    #[test]
    fn a_namespace_holds_at_most_max_keys() -> Result {
        let mut keys = Keys::<()>::default();
        for i in 0..MAX_KEYS {
            // CAST: below 1000, each digit below 10.
            let digit = |d: usize| b'0' + (i / d % 10) as u8;
            let n = name(&[b'k', digit(100), digit(10), digit(1)]);
            keys.add(7, (), Psk::new(n, &[1; 16])?)?;
        }
        let more = Psk::new(name(b"one-more"), &[1; 16])?;
        assert_eq!(keys.add(7, (), more.clone()), Err(ENOSPC));
        keys.add(8, (), more)?;
        Ok(())
    }
}
