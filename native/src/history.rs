//! What the records before a part of a file give, for the reader of that part, when one file
//! is read on several threads (`parallel`).
//!
//! A later part's reader needs the processes' mappings and the threads' names as one reader
//! of the whole file would have them when the part begins. Replaying every record before the
//! part on every thread made the work grow with the threads (the last of 16 threads replayed
//! nearly the whole file), so instead each chunk of the file has its state records noted once,
//! by whom they concern (`History`, built by the threads at once), and a later part's reader
//! asks those notes (`Prefix`) for a process or a thread only the first time it meets one:
//! most processes of a system-wide recording live inside one part and are never asked for.
//! Only then are the records that made it read in full (its mappings' files, its name).
//!
//! One reader hands a record over at a flush (a FINISHED_ROUND, `order::Rounds`), in time
//! order within it; when it does is the record's `Key`, the order one reader applies the state
//! records in. A record of the round that ends a chunk may be handed over only at the next
//! round's end, in the next chunk (`late`).
use crate::comms::{self, EarlierNames};
use crate::decode::{parse_state, state_ids, StateIds, StateOp};
use crate::procmaps::{Earlier, EarlierMap};
use crate::symbolize::Symbols;
use byteorder::ByteOrder;
use rustc_hash::FxHashMap;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

/// When one reader of the whole file hands a record over: at which flush (the index of its
/// FINISHED_ROUND among the file's, or their number for the flush at the end), then by time,
/// then by its region offset (`order::Rounds::flush`).
pub type Key = (u32, u64, u64);

/// The FINISHED_ROUND records of the whole file and the latest time before each: what the
/// flush at each hands over.
pub struct Flushes {
    /// Region offsets, in order.
    pub ends: Vec<usize>,
    /// The latest time of the records before each.
    pub cummax: Vec<u64>,
}

impl Flushes {
    /// The limit of the flush at round end `r`: the latest time before the round end before it.
    pub fn limit(&self, r: usize) -> u64 {
        if r == 0 { 0 } else { self.cummax[r - 1] }
    }

    /// The flush that hands over the record at region offset `off`, of time `t`: its round's
    /// end when its time is within that flush's limit, else the next one (whose limit is at
    /// least its time).
    pub fn flush_of(&self, off: usize, t: u64) -> u32 {
        let r = self.ends.partition_point(|&e| e < off);
        let f = if r < self.ends.len() && t <= self.limit(r) { r } else { (r + 1).min(self.ends.len()) };
        f as u32
    }
}

/// What a state record does to one process (by pid) or one thread's name (by tid); the
/// record is at the entry's key's offset.
#[derive(Clone, Copy)]
enum Op {
    /// A mapping (executable or not: its record says).
    Map,
    /// The process execs: its mappings are gone.
    Exec,
    /// A new process forked from `ppid`: its mappings are its parent's.
    Fork { ppid: i32 },
    /// The thread is named.
    Comm,
    /// A new thread from `ptid`: its name is its parent thread's (or none).
    ForkT { ptid: i32 },
}

#[derive(Clone, Copy)]
struct Entry {
    key: Key,
    /// Handed over in the next chunk.
    late: bool,
    op: Op,
}

/// The first executable mapping of a file with a build id in a chunk (apart for the records
/// handed over in the chunk and the late ones): what the DSO table of a later part's reader
/// takes in before it reads (the build id a file's symbols are looked up by is the first
/// one met, wherever it was met).
struct BuildId {
    key: Key,
    late: bool,
    path: String,
    build_id: Vec<u8>,
}

/// What one chunk's state records do, in the order one reader applies them.
pub struct History {
    /// By key.
    entries: Vec<Entry>,
    /// The entries of each process (Map, Exec, Fork): (pid, entry index), by pid then key (a
    /// sorted list: a file of many short-lived processes has hundreds of thousands of them).
    by_pid: Vec<(i32, u32)>,
    /// The entries of each thread's name (Comm, ForkT): (tid, entry index), likewise.
    by_tid: Vec<(i32, u32)>,
    /// By key.
    build_ids: Vec<BuildId>,
    /// The kernel's mappings (pid -1: the kernel image and modules): key, late, region offset.
    kernel: Vec<(Key, bool, usize)>,
}

impl History {
    /// The history of one chunk, from its state records (region offset, time): `last_flush` is
    /// the flush it ends with (None for the last chunk); `names` whether threads' names are
    /// kept (per process or filtered by comm).
    pub fn build<T: ByteOrder>(region: &[u8], states: &[(usize, u64)], flushes: &Flushes, last_flush: Option<u32>,
                               names: bool) -> History {
        let mut h = History { entries: Vec::with_capacity(states.len()), by_pid: Vec::new(), by_tid: Vec::new(),
                              build_ids: Vec::new(), kernel: Vec::new() };
        // (entry, its pid or tid, whether by tid)
        let mut raw: Vec<(Entry, i32, bool)> = Vec::with_capacity(states.len());
        let mut with_build_id: FxHashMap<(&[u8], bool), ()> = FxHashMap::default();
        for &(off, t) in states {
            let key = (flushes.flush_of(off, t), t, off as u64);
            let late = last_flush.is_some_and(|l| key.0 > l);
            let (ty, misc, body) = record::<T>(region, off);
            let entry = |op| Entry { key, late, op };
            match state_ids::<T>(ty, misc, body) {
                Some(StateIds::Map { pid: -1, .. }) => h.kernel.push((key, late, off)),
                Some(StateIds::Map { pid, build_id }) => {
                    raw.push((entry(Op::Map), pid, false));
                    if build_id {
                        if let Some(StateOp::Map { path, exec: true, build_id: Some(b), .. }) = parse_state::<T>(ty, misc, body) {
                            let raw_path = path_in(body, &path);
                            if with_build_id.insert((raw_path, late), ()).is_none() {
                                let path = String::from_utf8_lossy(&path).into_owned();
                                h.build_ids.push(BuildId { key, late, path, build_id: b });
                            }
                        }
                    }
                }
                Some(StateIds::Comm { pid, tid, exec }) => {
                    if exec && pid == tid {
                        raw.push((entry(Op::Exec), pid, false));
                    }
                    if names {
                        raw.push((entry(Op::Comm), tid, true));
                    }
                }
                Some(StateIds::Fork { pid, ppid, tid, ptid }) => {
                    if pid != ppid {
                        raw.push((entry(Op::Fork { ppid }), pid, false));
                    }
                    if names {
                        raw.push((entry(Op::ForkT { ptid }), tid, true));
                    }
                }
                None => {}
            }
        }
        // The records come in file order and a round's records are handed over in time order:
        // nearly sorted already. Two entries of one record (an exec's, a fork's) go to two lists.
        raw.sort_unstable_by_key(|r| r.0.key);
        h.kernel.sort_unstable_by_key(|k| k.0);
        h.build_ids.sort_by_key(|b| b.key);
        for (ix, &(e, id, by_tid)) in raw.iter().enumerate() {
            if by_tid { &mut h.by_tid } else { &mut h.by_pid }.push((id, ix as u32));
            h.entries.push(e);
        }
        h.by_pid.sort_unstable();
        h.by_tid.sort_unstable();
        h
    }
}

/// The record at region offset `off`: type, misc and body.
fn record<T: ByteOrder>(region: &[u8], off: usize) -> (u32, u16, &[u8]) {
    let ty = T::read_u32(&region[off..off + 4]);
    let misc = T::read_u16(&region[off + 4..off + 6]);
    let size = T::read_u16(&region[off + 6..off + 8]) as usize;
    (ty, misc, &region[off + 8..off + size])
}

/// A path as the record's bytes (a key that needs no copy).
fn path_in<'b>(body: &'b [u8], path: &[u8]) -> &'b [u8] {
    // the parser's path is a slice of the body when the record is in one piece
    let (start, end) = (body.as_ptr() as usize, body.as_ptr() as usize + body.len());
    let p = path.as_ptr() as usize;
    if p >= start && p + path.len() <= end {
        &body[p - start..p - start + path.len()]
    } else {
        body
    }
}

/// Visits the items of the chunks before chunk `k` that one reader hands over before chunk `k`
/// begins, in the order it does: each chunk's items (`list`) are sorted by key, its late ones
/// (handed over in the next chunk) last, merged with the next chunk's.
fn visit_prefix<'a, E: 'a>(k: usize, list: impl Fn(usize) -> &'a [E], key: impl Fn(&E) -> Key,
                           late: impl Fn(&E) -> bool, mut f: impl FnMut(usize, &E)) {
    let mut carry: &[E] = &[];
    for j in 0..k {
        let items = list(j);
        let (now, later) = items.split_at(items.partition_point(|e| !late(e)));
        let (mut a, mut b) = (0, 0);
        while a < carry.len() || b < now.len() {
            if b == now.len() || a < carry.len() && key(&carry[a]) < key(&now[b]) {
                f(j - 1, &carry[a]);
                a += 1;
            } else {
                f(j, &now[b]);
                b += 1;
            }
        }
        // the late items of the last chunk before `k` are handed over in chunk `k` itself
        carry = if j + 1 < k { later } else { &[] };
    }
}

/// What the records before chunk `k` made of the processes and the threads' names, for the
/// reader that begins there: it reads the records it needs from the file's `region`.
pub struct Prefix<'o, T> {
    hists: Arc<Vec<OnceLock<History>>>,
    k: usize,
    region: &'o [u8],
    order: PhantomData<fn() -> T>,
}

impl<'o, T: ByteOrder> Prefix<'o, T> {
    /// For the reader of chunk `k` (the histories of the chunks before it built): puts in its
    /// DSO table the build ids the mappings before its chunk give, the first one of each file
    /// (as one reader's table has them then).
    pub fn new(hists: Arc<Vec<OnceLock<History>>>, k: usize, region: &'o [u8], syms: &mut Symbols) -> Self {
        let p = Prefix { hists, k, region, order: PhantomData };
        visit_prefix(k, |j| &p.hist(j).build_ids[..], |e| e.key, |e| e.late, |_, e| {
            syms.seed_dso(&e.path, Some(&e.build_id));
        });
        p
    }

    fn hist(&self, j: usize) -> &History {
        self.hists[j].get().expect("the histories of the chunks before are built")
    }

    /// The region offsets of the kernel's mapping records before the chunk, in the order one
    /// reader applies them (the reader replays them in full: there are few).
    pub fn kernel_records(&self) -> Vec<usize> {
        let mut out = Vec::new();
        visit_prefix(self.k, |j| &self.hist(j).kernel[..], |e| e.0, |e| e.1, |_, e| out.push(e.2));
        out
    }

    /// Whether chunk `j`'s entry is handed over before chunk `k` begins, and before `before`.
    #[inline]
    fn visible(&self, j: usize, e: &Entry, before: Option<Key>) -> bool {
        (j + 1 < self.k || !e.late) && before.is_none_or(|b| e.key < b)
    }

    /// The entries of `id` (a pid in `by_pid`, or a tid in `by_tid`) handed over before chunk
    /// `k` and before `before`, from the last one that `reset` says starts afresh (returned
    /// apart) on, in key order.
    #[allow(clippy::type_complexity)]
    fn since_reset(&self, id: i32, before: Option<Key>, by_tid: bool, reset: impl Fn(Op) -> bool)
                   -> (Option<Entry>, Vec<Entry>) {
        let mut got: Vec<Entry> = Vec::new();
        // once a chunk holds a reset, only the chunk before it can still hold later entries (its late ones)
        let mut reset_in: Option<usize> = None;
        for j in (0..self.k).rev() {
            let h = self.hist(j);
            let all = if by_tid { &h.by_tid } else { &h.by_pid };
            let from = all.partition_point(|e| e.0 < id);
            for &(_, ix) in all[from..].iter().take_while(|e| e.0 == id) {
                let e = h.entries[ix as usize];
                if self.visible(j, &e, before) {
                    if reset(e.op) && reset_in.is_none() {
                        reset_in = Some(j);
                    }
                    got.push(e);
                }
            }
            if reset_in.is_some_and(|r| j + 1 == r || r == 0) {
                break;
            }
        }
        got.sort_by_key(|e| e.key);
        match got.iter().rposition(|e| reset(e.op)) {
            Some(i) => {
                let r = got[i];
                got.drain(..=i);
                (Some(r), got)
            }
            None => (None, got),
        }
    }
}

impl<T: ByteOrder> Earlier for Prefix<'_, T> {
    /// From the process's last exec or fork (its parent's mappings then) on.
    fn maps(&self, pid: i32) -> Option<Vec<EarlierMap>> {
        let mut layers: Vec<Vec<Entry>> = Vec::new();
        let (mut p, mut before) = (pid, None);
        loop {
            let (reset, ops) = self.since_reset(p, before, false, |op| matches!(op, Op::Exec | Op::Fork { .. }));
            if layers.is_empty() && reset.is_none() && ops.is_empty() {
                return None;
            }
            layers.push(ops);
            match reset {
                // the keys go down from one parent to the next: the walk ends
                Some(Entry { key, op: Op::Fork { ppid }, .. }) => {
                    p = ppid;
                    before = Some(key);
                }
                _ => break,
            }
        }
        let mut maps = Vec::new();
        for e in layers.iter().rev().flatten() {
            let (ty, misc, body) = record::<T>(self.region, e.key.2 as usize);
            if let Some(StateOp::Map { start, len, pgoff, path, exec: true, build_id, .. }) = parse_state::<T>(ty, misc, body) {
                maps.push(EarlierMap { start, len, pgoff, path: String::from_utf8_lossy(&path).into_owned(), build_id });
            }
        }
        Some(maps)
    }
}

impl<T: ByteOrder> EarlierNames for Prefix<'_, T> {
    fn comm(&self, tid: i32) -> Option<String> {
        let (mut t, mut before) = (tid, None);
        loop {
            // the latest entry of the thread: every one sets its name afresh
            let (last, _) = self.since_reset(t, before, true, |_| true);
            match last {
                None => return None,
                Some(Entry { op: Op::ForkT { ptid }, key, .. }) => {
                    t = ptid;
                    before = Some(key);
                }
                Some(e) => {
                    let (ty, misc, body) = record::<T>(self.region, e.key.2 as usize);
                    return match parse_state::<T>(ty, misc, body) {
                        Some(StateOp::Comm { name, .. }) => Some(comms::clean(&name)),
                        _ => None,
                    };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_handed_over_at_its_rounds_end_or_the_next() {
        // rounds end at offsets 100, 200, 300; the latest times before them 10, 20, 35
        let f = Flushes { ends: vec![100, 200, 300], cummax: vec![10, 20, 35] };
        assert_eq!(f.flush_of(50, 0), 0); // the first flush's limit is 0
        assert_eq!(f.flush_of(50, 7), 1);
        assert_eq!(f.flush_of(150, 10), 1); // within the limit of the flush at 200 (10)
        assert_eq!(f.flush_of(150, 11), 2);
        assert_eq!(f.flush_of(250, 20), 2);
        assert_eq!(f.flush_of(250, 35), 3); // after the last round end: the flush at the end
        assert_eq!(f.flush_of(350, 0), 3);
    }

    #[test]
    fn the_prefix_is_visited_in_key_order_without_the_last_chunks_late_items() {
        // (key, late): chunk 0's late item comes after chunk 1's first
        let chunks: Vec<Vec<(Key, bool)>> = vec![
            vec![((0, 1, 0), false), ((1, 9, 8), true)],
            vec![((1, 2, 16), false), ((1, 10, 24), false), ((2, 3, 32), true)],
            vec![((3, 4, 40), false)],
        ];
        let visit = |k| {
            let mut got = Vec::new();
            visit_prefix(k, |j| &chunks[j][..], |e| e.0, |e| e.1, |j, e| got.push((j, e.0)));
            got
        };
        assert_eq!(visit(1), vec![(0, (0, 1, 0))]);
        assert_eq!(visit(2), vec![(0, (0, 1, 0)), (1, (1, 2, 16)), (0, (1, 9, 8)), (1, (1, 10, 24))]);
        assert_eq!(visit(3).len(), 6);
        assert_eq!(visit(3)[4], (1, (2, 3, 32)));
    }
}
