//! The processes' executable mappings, as the MMAP, MMAP2, COMM (exec) and
//! FORK records build them. Every change takes a new generation; a forked child
//! shares its parent's mappings and generation until one of them changes, so a
//! user call chain can be cached per generation (what its addresses mean), and a
//! fork-heavy file's children reuse their parent's chains.
//!
//! The reader of a later part of a file read on several threads (`parallel`) starts with
//! none of the processes the records before its part made: it asks them (`Earlier`, which
//! `history` answers) for a process's mappings the first time it meets the process
//! (`Symbols::space`, which also numbers their files), and keeps the answer.
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// One executable mapping of a file, as a record before a part of the file made it.
pub struct EarlierMap {
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    pub path: String,
    pub build_id: Option<Vec<u8>>,
}

/// What the records before a part of the file made of the processes (`history::Prefix`).
pub trait Earlier: Send + Sync {
    /// The mappings of process `pid` when the part begins, in the order they were made over
    /// an empty process (None when no record names the process).
    fn maps(&self, pid: i32) -> Option<Vec<EarlierMap>>;
}

#[derive(Clone, Copy)]
pub struct Map {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub dso: u32,
}

/// A process's mappings, shared with the processes forked from it until one changes.
#[derive(Default, Clone)]
struct Proc {
    maps: Arc<Vec<Map>>,
    gen: u64,
}

/// Processes by pid: pids are small and handed out in order, so a table of pages of 1024
/// pids (allocated as pids are met) beats a hash map on a file of many short-lived
/// processes; pids outside it (negative, or past 2^22: pid_max's limit) go to a map. A page
/// is 16 KB, written whole when it is made: each run of a file read on threads makes its own
/// (with pages of 4096 pids, 64 KB, a read of the 71 MB file of docs/figures.md on 16 threads
/// took about 1,000 more page faults, of 20,000).
#[derive(Default)]
struct PidTable {
    pages: Vec<Option<Box<[Option<Proc>]>>>,
    others: FxHashMap<i32, Proc>,
}

const PAGE_BITS: u32 = 10;
const MAX_PAGED_PID: i32 = 1 << 22;

impl PidTable {
    #[inline(always)]
    fn get(&self, pid: i32) -> Option<&Proc> {
        if (0..MAX_PAGED_PID).contains(&pid) {
            let page = self.pages.get((pid >> PAGE_BITS) as usize)?.as_ref()?;
            page[(pid & ((1 << PAGE_BITS) - 1)) as usize].as_ref()
        } else {
            self.others.get(&pid)
        }
    }

    #[inline]
    fn slot(&mut self, pid: i32) -> &mut Option<Proc> {
        let (page, i) = ((pid >> PAGE_BITS) as usize, (pid & ((1 << PAGE_BITS) - 1)) as usize);
        if self.pages.len() <= page {
            self.pages.resize_with(page + 1, || None);
        }
        &mut self.pages[page].get_or_insert_with(|| (0..1 << PAGE_BITS).map(|_| None).collect())[i]
    }

    fn insert(&mut self, pid: i32, p: Proc) {
        if (0..MAX_PAGED_PID).contains(&pid) {
            *self.slot(pid) = Some(p);
        } else {
            self.others.insert(pid, p);
        }
    }

    fn get_or_default(&mut self, pid: i32) -> &mut Proc {
        if (0..MAX_PAGED_PID).contains(&pid) {
            self.slot(pid).get_or_insert_with(Proc::default)
        } else {
            self.others.entry(pid).or_default()
        }
    }
}

pub struct Processes<'o> {
    procs: PidTable,
    next_gen: u64,
    /// (pid, maps generation, next_gen when cached), by pid % 16: valid while
    /// no process changed (every change takes a new generation).
    gen_cache: [(i32, u64, u64); 16],
    /// What the records before this reader's part made of the processes (a later part's
    /// reader: `parallel`), asked the first time a process is met.
    pub prefix: Option<Arc<dyn Earlier + 'o>>,
}

impl<'o> Processes<'o> {
    pub fn new() -> Self {
        Processes { procs: PidTable::default(), next_gen: 0, gen_cache: [(0, 0, u64::MAX); 16], prefix: None }
    }

    /// The processes, to be freed later (`cleanup`).
    pub fn into_table(self) -> impl Send + 'static {
        self.procs
    }

    /// Whether process `pid` is still to be asked of the records before the part (a later
    /// part's reader that has not met it).
    #[inline]
    pub fn unmet(&self, pid: i32) -> bool {
        self.prefix.is_some() && self.procs.get(pid).is_none()
    }

    /// A process met for the first time by a later part's reader, with the mappings the
    /// records before the part left it (None: none of them names it; it is kept as an empty
    /// process, so that it is asked once).
    pub fn met(&mut self, pid: i32, maps: Option<Vec<Map>>) {
        match maps {
            None => self.procs.insert(pid, Proc::default()),
            Some(maps) => {
                let gen = self.new_gen();
                self.procs.insert(pid, Proc { maps: Arc::new(maps), gen });
            }
        }
    }

    fn new_gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    /// The generation of a process's mappings (0 for a process never seen). Asked for each sample
    /// with user frames: always inlined (the compiler's choice flips with the size of its callers,
    /// and a call cost 15 instructions a sample).
    #[inline(always)]
    pub fn generation(&mut self, pid: i32) -> u64 {
        let slot = &self.gen_cache[pid as usize & 15];
        if slot.0 == pid && slot.2 == self.next_gen {
            slot.1
        } else {
            let gen = self.procs.get(pid).map(|p| p.gen).unwrap_or(0);
            self.gen_cache[pid as usize & 15] = (pid, gen, self.next_gen);
            gen
        }
    }

    /// A key for what a user address of `pid` means now: its maps generation, with
    /// the top bit set (never 0, which stands for kernel addresses). Equal keys resolve
    /// every user address to the same symbol: a generation is one set of mappings,
    /// shared only by processes forked from one another while none of them changed.
    /// A process never seen has generation 0 and no mappings, like every other such.
    #[inline]
    pub fn space(&mut self, pid: i32) -> u64 {
        self.generation(pid) ^ (1 << 63)
    }

    /// The mapping of `addr` in process `pid`.
    pub fn map_of(&self, pid: i32, addr: u64) -> Option<Map> {
        self.maps(pid).and_then(|maps| map_in(maps, addr))
    }

    /// The mappings of process `pid`, sorted by address (None for a process never seen).
    #[inline]
    pub fn maps(&self, pid: i32) -> Option<&[Map]> {
        self.procs.get(pid).map(|p| &p.maps[..])
    }

    /// A new mapping, over whatever it overlaps.
    pub fn add_map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, dso: u32) {
        let gen = self.new_gen();
        let p = self.procs.get_or_default(pid);
        p.maps = Arc::new(overlay(&p.maps, start, len, pgoff, dso));
        p.gen = gen;
    }

    /// The process execs: its mappings are gone.
    pub fn exec(&mut self, pid: i32) {
        let gen = self.new_gen();
        self.procs.insert(pid, Proc { maps: Arc::default(), gen });
    }

    /// A new process with its parent's mappings: it shares them, and their generation,
    /// until it or its parent maps or execs.
    pub fn fork(&mut self, pid: i32, ppid: i32) {
        let child = self.procs.get(ppid).cloned().unwrap_or_default();
        self.procs.insert(pid, child);
        // The cached generation of `pid` may be an earlier process's with that pid.
        self.gen_cache[pid as usize & 15].2 = u64::MAX;
    }
}

/// `maps` (sorted by address) with a new mapping over whatever it overlaps.
pub fn overlay(maps: &[Map], start: u64, len: u64, pgoff: u64, dso: u32) -> Vec<Map> {
    let end = start.saturating_add(len);
    let mut out = Vec::with_capacity(maps.len() + 2);
    for &m in maps {
        if m.end <= start || m.start >= end {
            out.push(m);
        } else {
            if m.start < start {
                out.push(Map { end: start, ..m });
            }
            if m.end > end {
                out.push(Map { start: end, pgoff: m.pgoff + (end - m.start), ..m });
            }
        }
    }
    out.push(Map { start, end, pgoff, dso });
    out.sort_unstable_by_key(|m| m.start);
    out
}

/// The mapping of `addr` among `maps` (sorted by address).
#[inline]
pub fn map_in(maps: &[Map], addr: u64) -> Option<Map> {
    let i = maps.partition_point(|m| m.start <= addr);
    (i > 0 && addr < maps[i - 1].end).then(|| maps[i - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pids on both sides of a page's edge, at the ends of the paged range and outside it
    /// (negative, past 2^22) each keep their own process.
    #[test]
    fn each_pid_keeps_its_own_process_across_pages() {
        let page = 1 << PAGE_BITS;
        let pids = [0, 1, page - 1, page, page + 1, 3 * page - 1, MAX_PAGED_PID - 1, MAX_PAGED_PID, -1, i32::MIN, i32::MAX];
        let mut t = PidTable::default();
        for (k, &pid) in pids.iter().enumerate() {
            t.insert(pid, Proc { maps: Arc::new(Vec::new()), gen: k as u64 + 1 });
        }
        for (k, &pid) in pids.iter().enumerate() {
            assert_eq!(t.get(pid).map(|p| p.gen), Some(k as u64 + 1), "pid {pid}");
        }
        for pid in [2, page - 2, 2 * page, MAX_PAGED_PID - 2, -2] {
            assert!(t.get(pid).is_none(), "pid {pid} was never inserted");
        }
        t.get_or_default(page).gen = 99;
        assert_eq!(t.get(page).map(|p| p.gen), Some(99));
        assert_eq!(t.get(page - 1).map(|p| p.gen), Some(3));
    }
}
