//! The hash of the maps a request looks an alias up in (the routes, the metric labels): a
//! multiply-and-rotate over eight bytes at a time, a few instructions for a short name where
//! std's SipHash takes hundreds. Its keys come from the config, so a client's names can only
//! miss or hit them: there is nothing to flood.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by alias.
pub type AliasMap<V> = HashMap<String, V, BuildHasherDefault<AliasHasher>>;

#[derive(Default, Clone, Copy)]
pub struct AliasHasher(u64);

impl AliasHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for AliasHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, b: u8) {
        self.add(u64::from(b));
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits (the table's bucket index) weakest: fold the high in.
        self.0 ^ (self.0 >> 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_maps_find_what_was_put() {
        let mut m: AliasMap<usize> = AliasMap::default();
        let names: Vec<String> = (0..2000).map(|i| format!("model-{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            m.insert(n.clone(), i);
        }
        for (i, n) in names.iter().enumerate() {
            assert_eq!(m.get(n.as_str()), Some(&i));
        }
        assert_eq!(m.get("model-"), None);
        assert_eq!(m.get("model-20000"), None);
        assert_eq!(m.get(""), None);
    }
}
