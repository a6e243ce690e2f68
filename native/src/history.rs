//! What the records before a part of a file give, for the reader of that part, when one file
//! is read on several threads (`parallel`).
//!
//! A later part's reader needs the processes' mappings and the threads' names as one reader
//! of the whole file would have them when the part begins. Replaying every record before the
//! part on every thread made the work grow with the threads (the last of 16 threads replayed
//! nearly the whole file), so instead each part's reader notes, once, what its part's state
//! records do (`History`, built while the others build theirs), and a later part's reader
//! asks those notes (`Prefix`) for a process or a thread only the first time it meets one:
//! most processes of a system-wide recording live inside one part and are never asked for.
//!
//! One reader hands a record over at a flush (a FINISHED_ROUND, `order::Rounds`), in time
//! order within it; when it does is the record's `Key`, the order one reader applies the state
//! records in. A record of the round that ends a part may be handed over only at the next
//! round's end, in the next part (`late`).
use crate::comms::{self, EarlierNames};
use crate::decode::{parse_state, StateOp};
use crate::procmaps::{overlay, Earlier, Map};
use crate::symbolize::Symbols;
use byteorder::ByteOrder;
use rustc_hash::FxHashMap;
use std::sync::{Arc, OnceLock};

/// When one reader of the whole file hands a record over: at which flush (the index of its
/// FINISHED_ROUND among the file's, or their number for the flush at the end), then by time,
/// then by offset (`order::Rounds::flush`).
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

/// What a state record does to one process (by pid) or one thread's name (by tid).
#[derive(Clone, Copy)]
enum Op {
    /// An executable mapping of the part's DSO `dso` (`History::paths`), with the record's
    /// build id when it has one (`History::build_ids`).
    Map { start: u64, len: u64, pgoff: u64, dso: u32, build_id: u32 },
    /// The process execs: its mappings are gone.
    Exec,
    /// A new process forked from `ppid`: its mappings are its parent's.
    Fork { ppid: i32 },
    /// The thread is named the part's name `name` (`History::names`).
    Comm { name: u32 },
    /// A new thread from `ptid`: its name is its parent thread's (or none).
    ForkT { ptid: i32 },
}

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Entry {
    key: Key,
    /// Handed over in the next part.
    late: bool,
    op: Op,
}

/// The first mapping of a DSO in a part, or its first with a build id (separately for the
/// records handed over in the part and the late ones): all that the DSO table of a later
/// part's reader needs of the part's mappings.
#[derive(Clone, Copy)]
struct DsoEvent {
    key: Key,
    late: bool,
    dso: u32,
    build_id: u32,
}

/// What one part's state records do, in the order one reader applies them.
pub struct History {
    /// By key.
    entries: Vec<Entry>,
    /// The entries of each process (Map, Exec, Fork), by key.
    by_pid: FxHashMap<i32, Vec<u32>>,
    /// The entries of each thread's name (Comm, ForkT), by key.
    by_tid: FxHashMap<i32, Vec<u32>>,
    paths: Vec<String>,
    build_ids: Vec<Vec<u8>>,
    /// By key.
    dso_events: Vec<DsoEvent>,
    names: Vec<String>,
    /// The kernel's mappings (pid -1: the kernel image and modules): key, late, region offset.
    kernel: Vec<(Key, bool, usize)>,
}

impl History {
    /// The history of one part, from its state records (`order::Stretch::states`): `last_flush`
    /// is the flush its part ends with (None for the last part); `names` whether threads'
    /// names are kept (per process or filtered by comm).
    pub fn build<T: ByteOrder>(region: &[u8], states: &[(usize, u64)], flushes: &Flushes, last_flush: Option<u32>,
                               names: bool) -> History {
        let mut h = History {
            entries: Vec::with_capacity(states.len()),
            by_pid: FxHashMap::default(),
            by_tid: FxHashMap::default(),
            paths: Vec::new(),
            build_ids: Vec::new(),
            dso_events: Vec::new(),
            names: Vec::new(),
            kernel: Vec::new(),
        };
        let mut path_ids: FxHashMap<String, u32> = FxHashMap::default();
        let mut name_ids: FxHashMap<String, u32> = FxHashMap::default();
        // (entry, its pid or tid, whether by tid)
        let mut raw: Vec<(Entry, i32, bool)> = Vec::with_capacity(states.len());
        for &(off, t) in states {
            let key = (flushes.flush_of(off, t), t, off as u64);
            let late = last_flush.is_some_and(|l| key.0 > l);
            let ty = T::read_u32(&region[off..off + 4]);
            let misc = T::read_u16(&region[off + 4..off + 6]);
            let size = T::read_u16(&region[off + 6..off + 8]) as usize;
            let entry = |op| Entry { key, late, op };
            match parse_state::<T>(ty, misc, &region[off + 8..off + size]) {
                Some(StateOp::Map { pid: -1, .. }) => h.kernel.push((key, late, off)),
                Some(StateOp::Map { pid, start, len, pgoff, path, exec: true, build_id }) => {
                    let path = String::from_utf8_lossy(&path);
                    let dso = match path_ids.get(&*path) {
                        Some(&d) => d,
                        None => {
                            let d = h.paths.len() as u32;
                            h.paths.push(path.to_string());
                            path_ids.insert(path.into_owned(), d);
                            d
                        }
                    };
                    let build_id = match build_id {
                        Some(b) => {
                            h.build_ids.push(b);
                            h.build_ids.len() as u32 - 1
                        }
                        None => NONE,
                    };
                    raw.push((entry(Op::Map { start, len, pgoff, dso, build_id }), pid, false));
                }
                Some(StateOp::Comm { pid, tid, exec, name }) => {
                    if exec && pid == tid {
                        raw.push((entry(Op::Exec), pid, false));
                    }
                    if names {
                        let name = comms::clean(&name);
                        let id = *name_ids.entry(name).or_insert_with_key(|n| {
                            h.names.push(n.clone());
                            h.names.len() as u32 - 1
                        });
                        raw.push((entry(Op::Comm { name: id }), tid, true));
                    }
                }
                Some(StateOp::Fork { pid, ppid, tid, ptid }) => {
                    if pid != ppid {
                        raw.push((entry(Op::Fork { ppid }), pid, false));
                    }
                    if names {
                        raw.push((entry(Op::ForkT { ptid }), tid, true));
                    }
                }
                Some(StateOp::Map { .. }) | Some(StateOp::BadMap) | None => {}
            }
        }
        // The records come in file order and a round's records are handed over in time order:
        // nearly sorted already.
        raw.sort_by_key(|r| r.0.key);
        h.kernel.sort_by_key(|k| k.0);
        // the first mapping of each DSO, and its first with a build id, apart for the late ones
        let mut seen = vec![[false; 4]; h.paths.len()];
        for (ix, &(e, id, by_tid)) in raw.iter().enumerate() {
            let list = if by_tid { h.by_tid.entry(id) } else { h.by_pid.entry(id) };
            list.or_default().push(ix as u32);
            h.entries.push(e);
            if let Op::Map { dso, build_id, .. } = e.op {
                let s = &mut seen[dso as usize];
                let (first, with_id) = if e.late { (2, 3) } else { (0, 1) };
                let new_id = build_id != NONE && !s[with_id];
                if !s[first] || new_id {
                    s[first] = true;
                    s[with_id] |= build_id != NONE;
                    h.dso_events.push(DsoEvent { key: e.key, late: e.late, dso, build_id });
                }
            }
        }
        h
    }

    fn is_reset(op: Op) -> bool {
        matches!(op, Op::Exec | Op::Fork { .. })
    }
}

/// Visits the items of the parts before part `k` that one reader hands over before part `k`
/// begins, in the order it does: each part's items (`list`) are sorted by key, its late ones
/// (handed over in the next part) last, merged with the next part's.
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
        // the late items of the last part before `k` are handed over in part `k` itself
        carry = if j + 1 < k { later } else { &[] };
    }
}

/// What the records before part `k` made of the processes, the threads' names and the DSO
/// table, for that part's reader.
pub struct Prefix {
    hists: Arc<Vec<OnceLock<History>>>,
    k: usize,
    /// Per part before `k`: its DSOs' ids in the reader's table.
    dso_ids: Vec<Vec<u32>>,
}

impl Prefix {
    /// For the reader of part `k` (the histories of the parts before it built): adds to its
    /// DSO table the DSOs the mappings before its part name, with the build id the first
    /// mapping that has one gives (as one reader's table has them then).
    pub fn new(hists: Arc<Vec<OnceLock<History>>>, k: usize, syms: &mut Symbols) -> Prefix {
        let mut p = Prefix { hists, k, dso_ids: Vec::new() };
        p.dso_ids = (0..k).map(|j| vec![NONE; p.hist(j).paths.len()]).collect();
        let mut ids = std::mem::take(&mut p.dso_ids);
        let pr = &p;
        visit_prefix(k, move |j| &pr.hist(j).dso_events[..], |e| e.key, |e| e.late, |j, e| {
            let h = pr.hist(j);
            let b = (e.build_id != NONE).then(|| &h.build_ids[e.build_id as usize][..]);
            ids[j][e.dso as usize] = syms.seed_dso(&h.paths[e.dso as usize], b);
        });
        p.dso_ids = ids;
        p
    }

    fn hist(&self, j: usize) -> &History {
        self.hists[j].get().expect("the histories of the parts before are built")
    }

    /// The region offsets of the kernel's mapping records before the part, in the order one
    /// reader applies them (the reader replays them in full: there are few).
    pub fn kernel_records(&self) -> Vec<usize> {
        let mut out = Vec::new();
        visit_prefix(self.k, |j| &self.hist(j).kernel[..], |e| e.0, |e| e.1, |_, e| out.push(e.2));
        out
    }

    /// Whether part `j`'s entry is handed over before part `k` begins, and before `before`.
    #[inline]
    fn visible(&self, j: usize, e: &Entry, before: Option<Key>) -> bool {
        (j + 1 < self.k || !e.late) && before.is_none_or(|b| e.key < b)
    }

    /// The entries of `id` (a pid in `by_pid`, or a tid in `by_tid`) handed over before part
    /// `k` and before `before`, from the last one that `reset` says starts afresh (returned
    /// apart) on, in key order.
    fn since_reset(&self, id: i32, before: Option<Key>, by_tid: bool, reset: impl Fn(Op) -> bool)
                   -> (Option<(usize, Entry)>, Vec<(usize, Entry)>) {
        let mut got: Vec<(usize, Entry)> = Vec::new();
        // once a part holds a reset, only the part before it can still hold later entries (its late ones)
        let mut reset_in: Option<usize> = None;
        for j in (0..self.k).rev() {
            let h = self.hist(j);
            let list = if by_tid { h.by_tid.get(&id) } else { h.by_pid.get(&id) };
            for &ix in list.map_or(&[][..], |l| &l[..]) {
                let e = h.entries[ix as usize];
                if self.visible(j, &e, before) {
                    if reset(e.op) && reset_in.is_none() {
                        reset_in = Some(j);
                    }
                    got.push((j, e));
                }
            }
            if reset_in.is_some_and(|r| j + 1 == r || r == 0) {
                break;
            }
        }
        got.sort_by_key(|g| g.1.key);
        match got.iter().rposition(|g| reset(g.1.op)) {
            Some(i) => {
                let r = got[i];
                got.drain(..=i);
                (Some(r), got)
            }
            None => (None, got),
        }
    }

    /// The mappings of process `pid` as the records before the part leave them (None when
    /// none of them names it): from its last exec or fork (its parent's mappings then) on.
    fn proc_maps(&self, pid: i32) -> Option<Vec<Map>> {
        let mut layers: Vec<Vec<(usize, Entry)>> = Vec::new();
        let (mut p, mut before) = (pid, None);
        loop {
            let (reset, ops) = self.since_reset(p, before, false, History::is_reset);
            if layers.is_empty() && reset.is_none() && ops.is_empty() {
                return None;
            }
            layers.push(ops);
            match reset {
                // the keys go down from one parent to the next: the walk ends
                Some((_, Entry { key, op: Op::Fork { ppid }, .. })) => {
                    p = ppid;
                    before = Some(key);
                }
                _ => break,
            }
        }
        let mut maps: Vec<Map> = Vec::new();
        for layer in layers.iter().rev() {
            for (j, e) in layer {
                if let Op::Map { start, len, pgoff, dso, .. } = e.op {
                    maps = overlay(&maps, start, len, pgoff, self.dso_ids[*j][dso as usize]);
                }
            }
        }
        Some(maps)
    }

    /// The name of thread `tid` as the records before the part leave it (None: none).
    fn thread_name(&self, tid: i32) -> Option<&str> {
        let (mut t, mut before) = (tid, None);
        loop {
            // the latest entry of the thread: every one sets its name afresh
            let (last, _) = self.since_reset(t, before, true, |_| true);
            match last {
                None => return None,
                Some((j, Entry { op: Op::Comm { name }, .. })) => return Some(&self.hist(j).names[name as usize]),
                Some((_, Entry { key, op: Op::ForkT { ptid }, .. })) => {
                    t = ptid;
                    before = Some(key);
                }
                Some(_) => return None,
            }
        }
    }
}

impl Earlier for Prefix {
    fn maps(&self, pid: i32) -> Option<Vec<Map>> {
        self.proc_maps(pid)
    }
}

impl EarlierNames for Prefix {
    fn comm(&self, tid: i32) -> Option<&str> {
        self.thread_name(tid)
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
    fn the_prefix_is_visited_in_key_order_without_the_last_parts_late_items() {
        // (key, late): part 0's late item comes after part 1's first
        let parts: Vec<Vec<(Key, bool)>> = vec![
            vec![((0, 1, 0), false), ((1, 9, 8), true)],
            vec![((1, 2, 16), false), ((1, 10, 24), false), ((2, 3, 32), true)],
            vec![((3, 4, 40), false)],
        ];
        let visit = |k| {
            let mut got = Vec::new();
            visit_prefix(k, |j| &parts[j][..], |e| e.0, |e| e.1, |j, e| got.push((j, e.0)));
            got
        };
        assert_eq!(visit(1), vec![(0, (0, 1, 0))]);
        assert_eq!(visit(2), vec![(0, (0, 1, 0)), (1, (1, 2, 16)), (0, (1, 9, 8)), (1, (1, 10, 24))]);
        assert_eq!(visit(3).len(), 6);
        assert_eq!(visit(3)[4], (1, (2, 3, 32)));
    }
}
