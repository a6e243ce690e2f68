//! Interning of call chains and symbolic stacks: flat arenas, no allocation
//! per entry, one hash probe per lookup.

/// An element of an interned slice.
pub trait Word: Copy + Eq {
    fn word(self) -> u64;
}

impl Word for u64 {
    #[inline]
    fn word(self) -> u64 {
        self
    }
}

impl Word for u32 {
    #[inline]
    fn word(self) -> u64 {
        self as u64
    }
}

/// Hash of a slice: four independent multiply lanes over the words (a short
/// dependency chain), folded and mixed so that the low bits (the table index)
/// depend on every word.
#[inline]
pub fn hash<T: Word>(s: &[T]) -> u64 {
    hash_parts(&[], s)
}

/// Hash of a key made of a short `prefix` (at most 3 words) and a slice, without
/// joining them: the prefix words seed three of the lanes.
#[inline]
pub fn hash_parts<T: Word>(prefix: &[u64], s: &[T]) -> u64 {
    const K: [u64; 4] = [0xf135_7aea_2e62_a9c5, 0x9e37_79b9_7f4a_7c15, 0xc2b2_ae3d_27d4_eb4f, 0x1656_67b1_9e37_79f9];
    let mut lanes = [(s.len() + prefix.len()) as u64, 0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0];
    for (j, &w) in prefix.iter().enumerate().take(3) {
        lanes[j + 1] = (lanes[j + 1] ^ w).wrapping_mul(K[j + 1]).rotate_left(29);
    }
    let mut chunks = s.chunks_exact(4);
    for c in &mut chunks {
        for j in 0..4 {
            lanes[j] = (lanes[j] ^ c[j].word()).wrapping_mul(K[j]).rotate_left(29);
        }
    }
    for (j, &w) in chunks.remainder().iter().enumerate() {
        lanes[j] = (lanes[j] ^ w.word()).wrapping_mul(K[j]).rotate_left(29);
    }
    let mut h = lanes[0] ^ lanes[1].rotate_left(16) ^ lanes[2].rotate_left(32) ^ lanes[3].rotate_left(48);
    h ^= h >> 32;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 29;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 32)
}

const EMPTY: u64 = u64::MAX;

/// A set of slices, each given the next id (0, 1, 2...) when first seen.
/// Slice `id` is `data[offsets[id]..offsets[id + 1]]`, the layout the Python
/// side receives for stacks.
pub struct SliceSet<T> {
    pub data: Vec<T>,
    pub offsets: Vec<u64>,
    hashes: Vec<u64>,
    /// Open addressing, linear probing: (high 32 bits of the hash << 32) | id, or EMPTY.
    slots: Vec<u64>,
}

impl<T: Word> SliceSet<T> {
    pub fn new() -> Self {
        SliceSet { data: Vec::new(), offsets: vec![0], hashes: Vec::new(), slots: vec![EMPTY; 1024] }
    }

    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    #[inline]
    pub fn get(&self, id: u32) -> &[T] {
        let id = id as usize;
        &self.data[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    /// Id of `key` (with `h = hash(key)`) if it is in the set.
    #[inline]
    pub fn find(&self, key: &[T], h: u64) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let tag = h >> 32;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if s >> 32 == tag {
                let id = s as u32;
                if self.get(id) == key {
                    return Some(id);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `key` (known not to be in the set) and returns its id.
    pub fn insert_new(&mut self, key: &[T], h: u64) -> u32 {
        if (self.hashes.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let id = self.hashes.len() as u32;
        self.data.extend_from_slice(key);
        self.offsets.push(self.data.len() as u64);
        self.hashes.push(h);
        self.place(h, id);
        id
    }

    /// Id of `key`, adding it if new.
    pub fn intern(&mut self, key: &[T]) -> u32 {
        let h = hash(key);
        match self.find(key, h) {
            Some(id) => id,
            None => self.insert_new(key, h),
        }
    }

    #[inline]
    fn place(&mut self, h: u64, id: u32) {
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        while self.slots[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = (h >> 32 << 32) | id as u64;
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        self.slots.clear();
        self.slots.resize(n, EMPTY);
        for id in 0..self.hashes.len() {
            let h = self.hashes[id];
            self.place(h, id as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_and_get() {
        let mut s: SliceSet<u64> = SliceSet::new();
        let mut ids = Vec::new();
        for i in 0..5000u64 {
            let key: Vec<u64> = (0..(i % 7)).map(|j| i / 3 + j).collect();
            ids.push((key.clone(), s.intern(&key)));
        }
        for (key, id) in &ids {
            assert_eq!(s.get(*id), &key[..]);
            assert_eq!(s.intern(key), *id);
        }
        // Same slices, same ids; distinct slices, distinct ids.
        let mut seen = std::collections::HashMap::new();
        for (key, id) in &ids {
            assert_eq!(*seen.entry(key.clone()).or_insert(*id), *id);
        }
        assert_eq!(s.len(), seen.len());
        assert_eq!(s.find(&[u64::MAX, 1], hash(&[u64::MAX, 1])), None);
        let e = s.intern(&[]);
        assert_eq!(s.get(e), &[] as &[u64]);
        assert_eq!(s.intern(&[]), e);
    }
}

/// Raw call chains (or parts of them) -> an id, tuned for the per-sample
/// lookup: each entry sits in one arena run `[hash, len << 32 | value, words...]`
/// and the table holds the hash's high 32 bits beside the entry's arena
/// offset, so a probe that misses does not touch the arena, a hit touches the
/// table and one arena run, and nothing is allocated per entry.
///
/// It is a bounded memo: once its entries take more than `limit` words, the next
/// insertion empties it first, so its memory stays bounded however many distinct
/// chains a file holds (a file of many short-lived processes, whose user chains
/// never repeat).
pub struct ChainMap {
    arena: Vec<u64>,
    /// (hash >> 32) << 32 | (arena offset + 1), 0 = empty; linear probing.
    slots: Vec<u64>,
    len: usize,
    limit: usize,
    /// The most words one key may take.
    entry_words: usize,
}

impl ChainMap {
    /// A memo of at most `limit` words of entries whose keys take at most
    /// `entry_words` words; its arena is allocated once, so it never grows by
    /// doubling past the bound.
    pub fn memo(limit: usize, entry_words: usize) -> Self {
        let capacity = limit + 2 + entry_words;
        assert!(capacity < u32::MAX as usize, "a chain memo's arena is addressed by 32-bit offsets");
        ChainMap { arena: Vec::with_capacity(capacity), slots: vec![0; 1024], len: 0, limit, entry_words }
    }

    /// A memo of `limit` words as `memo` makes one, but holding no arena yet (a stand-in for
    /// a memo given away, which takes memory only if it is used).
    pub fn unallocated(limit: usize, entry_words: usize) -> Self {
        ChainMap { arena: Vec::new(), slots: vec![0; 1024], len: 0, limit, entry_words }
    }

    /// The most words its entries take before it is emptied.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn clear(&mut self) {
        self.arena.clear();
        self.slots.iter_mut().for_each(|s| *s = 0);
        self.len = 0;
    }

    /// The value stored for the key `prefix` + `rest` (with `h = hash_parts(prefix, rest)`), if any.
    #[inline(always)]
    pub fn get(&self, prefix: &[u64], rest: &[u64], h: u64) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let tag = h >> 32;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let at = (s as u32 - 1) as usize;
                let meta = self.arena[at + 1];
                let n = (meta >> 32) as usize;
                let p = prefix.len();
                if self.arena[at] == h
                    && n == p + rest.len()
                    && words_eq(&self.arena[at + 2..at + 2 + p], prefix)
                    && words_eq(&self.arena[at + 2 + p..at + 2 + n], rest)
                {
                    return Some(meta as u32);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Stores `value` for the key `prefix` + `rest` (known not to be in the map, and of
    /// at most `entry_words` words), after emptying the memo when it is full.
    pub fn insert_new(&mut self, prefix: &[u64], rest: &[u64], h: u64, value: u32) {
        let n = prefix.len() + rest.len();
        assert!(n <= self.entry_words, "a {n}-word key in a chain memo of {}-word keys", self.entry_words);
        if self.arena.len() > self.limit {
            self.clear();
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let at = self.arena.len();
        self.arena.push(h);
        self.arena.push((n as u64) << 32 | value as u64);
        self.arena.extend_from_slice(prefix);
        self.arena.extend_from_slice(rest);
        self.place(h, at);
        self.len += 1;
    }

    #[inline]
    fn place(&mut self, h: u64, at: usize) {
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = (h >> 32 << 32) | (at as u64 + 1);
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        self.slots.clear();
        self.slots.resize(n, 0);
        let mut at = 0;
        while at < self.arena.len() {
            let h = self.arena[at];
            let len = (self.arena[at + 1] >> 32) as usize;
            self.place(h, at);
            at += 2 + len;
        }
    }
}

/// Slice equality as a plain loop: call chains are short, a libc memcmp call costs more.
#[inline]
fn words_eq(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod chain_tests {
    use super::*;

    #[test]
    fn chain_map() {
        let mut m = ChainMap::memo(1 << 20, 16);
        let keys: Vec<Vec<u64>> =
            (0..3000u64).map(|i| std::iter::once(i).chain((0..(i % 9)).map(|j| i * 7 + j)).collect()).collect();
        // Keys split into a prefix of up to 3 words and the rest, at every split.
        let split = |k: &Vec<u64>, v: usize| k.len().min(v % 4);
        for (v, k) in keys.iter().enumerate() {
            let (p, r) = k.split_at(split(k, v));
            let h = hash_parts(p, r);
            assert_eq!(m.get(p, r, h), None);
            m.insert_new(p, r, h, v as u32);
        }
        assert_eq!(m.len, keys.len());
        for (v, k) in keys.iter().enumerate() {
            let (p, r) = k.split_at(split(k, v));
            assert_eq!(m.get(p, r, hash_parts(p, r)), Some(v as u32));
        }
        assert_eq!(m.get(&[1], &[2, 3], hash_parts(&[1], &[2u64, 3])), None);
        m.clear();
        assert_eq!(m.get(&[], &keys[5], hash_parts(&[], &keys[5])), None);
    }

    #[test]
    fn a_full_memo_empties_before_it_takes_more() {
        let mut m = ChainMap::memo(99, 8);
        for i in 0..10u64 {
            m.insert_new(&[i], &[1, 2, 3, 4, 5, 6, 7], hash_parts(&[i], &[1u64, 2, 3, 4, 5, 6, 7]), i as u32);
        }
        // 10 entries of 10 words (2 of header) fill 100 words: the 11th finds it over 99 and empties it.
        assert_eq!(m.len, 10);
        m.insert_new(&[99], &[], hash_parts(&[99], &[] as &[u64]), 99);
        assert_eq!(m.len, 1);
        assert_eq!(m.get(&[0], &[1, 2, 3, 4, 5, 6, 7], hash_parts(&[0], &[1u64, 2, 3, 4, 5, 6, 7])), None);
        assert_eq!(m.get(&[99], &[], hash_parts(&[99], &[] as &[u64])), Some(99));
    }
}
