//! SkimpyOffsetMap: the cleaner's key → latest offset map, 24 bytes a slot (a 16-byte hash of the
//! key and the offset), open addressing with linear probing, as Kafka's.

use sha2::{Digest, Sha256};

/// A slot is this hash and an 8-byte offset: the 24 bytes `CleanerConfig::slots_per_thread` counts.
const HASH_SIZE: usize = 16;

pub struct SkimpyOffsetMap {
    hashes: Vec<[u8; HASH_SIZE]>,
    /// -1 marks a free slot.
    offsets: Vec<i64>,
    entries: usize,
    latest_offset: i64,
}

fn hash_of(key: &[u8]) -> [u8; HASH_SIZE] {
    let digest = Sha256::digest(key);
    let mut h = [0u8; HASH_SIZE];
    h.copy_from_slice(&digest[..HASH_SIZE]);
    h
}

impl SkimpyOffsetMap {
    /// A map of `slots` entries (at least one).
    pub fn new(slots: usize) -> SkimpyOffsetMap {
        let slots = slots.max(1);
        SkimpyOffsetMap {
            hashes: vec![[0u8; HASH_SIZE]; slots],
            offsets: vec![-1; slots],
            entries: 0,
            latest_offset: -1,
        }
    }

    pub fn slots(&self) -> usize {
        self.offsets.len()
    }

    pub fn size(&self) -> usize {
        self.entries
    }

    /// The slot holding `hash`, or the free slot where it would go; `None` when the map is full
    /// and `hash` is not in it.
    fn slot_of(&self, hash: &[u8; HASH_SIZE]) -> Option<usize> {
        let mut start = [0u8; 8];
        start.copy_from_slice(&hash[..8]);
        let n = self.slots();
        let mut at = (u64::from_be_bytes(start) % n as u64) as usize;
        for _ in 0..n {
            if self.offsets[at] < 0 || self.hashes[at] == *hash {
                return Some(at);
            }
            at = (at + 1) % n;
        }
        None
    }

    /// Records `offset` as the latest for `key`. Returns false when the map is full.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let hash = hash_of(key);
        let Some(at) = self.slot_of(&hash) else {
            return false;
        };
        if self.offsets[at] < 0 {
            self.entries += 1;
            self.hashes[at] = hash;
        }
        self.offsets[at] = offset;
        self.latest_offset = self.latest_offset.max(offset);
        true
    }

    /// The latest offset recorded for `key`, or -1.
    pub fn get(&self, key: &[u8]) -> i64 {
        let hash = hash_of(key);
        match self.slot_of(&hash) {
            Some(at) if self.offsets[at] >= 0 => self.offsets[at],
            _ => -1,
        }
    }

    /// The last offset the map has seen (records after it are not in the map's dirty range).
    pub fn latest_offset(&self) -> i64 {
        self.latest_offset
    }

    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = self.latest_offset.max(offset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_put_twice_keeps_its_latest_offset_in_one_slot() {
        let mut m = SkimpyOffsetMap::new(8);
        assert!(m.put(b"a", 1));
        assert!(m.put(b"b", 2));
        assert!(m.put(b"a", 5));
        assert_eq!((m.get(b"a"), m.get(b"b"), m.get(b"c")), (5, 2, -1));
        assert_eq!((m.size(), m.latest_offset()), (2, 5));
    }

    #[test]
    fn a_full_map_refuses_a_new_key_but_updates_a_known_one() {
        let mut m = SkimpyOffsetMap::new(3);
        for (i, k) in [b"x", b"y", b"z"].iter().enumerate() {
            assert!(m.put(*k, i as i64));
        }
        assert!(!m.put(b"w", 9));
        assert!(m.put(b"y", 10));
        assert_eq!((m.get(b"y"), m.get(b"w")), (10, -1));
    }
}
