//! A cheap hasher for maps keyed by numbers: two multiplications a key
//! instead of SipHash's rounds, which showed in the profiles of the hot
//! lookups (the kept chunks on every random read, the keys of an edit).
//! Its keys come from the process or from the user's own data, so a bad
//! spread can only make a lookup slower, never wrong.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// See the module documentation.
#[derive(Default)]
pub(crate) struct CheapHasher(u64);

impl std::hash::Hasher for CheapHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(26) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }

    #[inline]
    fn write_i64(&mut self, x: i64) {
        self.write_u64(x as u64);
    }
}

/// A map with the [`CheapHasher`].
pub(crate) type CheapMap<K, V> = HashMap<K, V, BuildHasherDefault<CheapHasher>>;
