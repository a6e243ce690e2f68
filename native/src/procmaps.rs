//! The processes' executable mappings, as the MMAP, MMAP2, COMM (exec) and
//! FORK records build them. Every change takes a new generation, so that a
//! user call chain can be cached per (pid, generation).
use rustc_hash::FxHashMap;

#[derive(Clone, Copy)]
pub struct Map {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub dso: u32,
}

#[derive(Default)]
struct Proc {
    maps: Vec<Map>,
    gen: u64,
}

pub struct Processes {
    procs: FxHashMap<i32, Proc>,
    next_gen: u64,
    /// (pid, maps generation, next_gen when cached), by pid % 16: valid while
    /// no process changed (every change takes a new generation).
    gen_cache: [(i32, u64, u64); 16],
}

impl Processes {
    pub fn new() -> Self {
        Processes { procs: FxHashMap::default(), next_gen: 0, gen_cache: [(0, 0, u64::MAX); 16] }
    }

    fn new_gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    /// The generation of a process's mappings (0 for a process never seen).
    #[inline]
    pub fn generation(&mut self, pid: i32) -> u64 {
        let slot = &self.gen_cache[pid as usize & 15];
        if slot.0 == pid && slot.2 == self.next_gen {
            slot.1
        } else {
            let gen = self.procs.get(&pid).map(|p| p.gen).unwrap_or(0);
            self.gen_cache[pid as usize & 15] = (pid, gen, self.next_gen);
            gen
        }
    }

    /// A key for what a user address of `pid` means now: its pid and maps generation,
    /// with the top bit set (never 0, which stands for kernel addresses). Equal keys
    /// resolve every user address to the same symbol.
    #[inline]
    pub fn space(&mut self, pid: i32) -> u64 {
        ((pid as u32 as u64) << 40) ^ self.generation(pid) ^ (1 << 63)
    }

    /// The mapping of `addr` in process `pid`.
    pub fn map_of(&self, pid: i32, addr: u64) -> Option<Map> {
        self.procs.get(&pid).and_then(|p| {
            let i = p.maps.partition_point(|m| m.start <= addr);
            (i > 0 && addr < p.maps[i - 1].end).then(|| p.maps[i - 1])
        })
    }

    /// A new mapping, over whatever it overlaps.
    pub fn add_map(&mut self, pid: i32, start: u64, len: u64, pgoff: u64, dso: u32) {
        let end = start.saturating_add(len);
        let gen = self.new_gen();
        let p = self.procs.entry(pid).or_default();
        let mut maps = Vec::with_capacity(p.maps.len() + 2);
        for m in p.maps.drain(..) {
            if m.end <= start || m.start >= end {
                maps.push(m);
            } else {
                if m.start < start {
                    maps.push(Map { end: start, ..m });
                }
                if m.end > end {
                    maps.push(Map { start: end, pgoff: m.pgoff + (end - m.start), ..m });
                }
            }
        }
        maps.push(Map { start, end, pgoff, dso });
        maps.sort_unstable_by_key(|m| m.start);
        p.maps = maps;
        p.gen = gen;
    }

    /// The process execs: its mappings are gone.
    pub fn exec(&mut self, pid: i32) {
        let gen = self.new_gen();
        let p = self.procs.entry(pid).or_default();
        p.maps.clear();
        p.gen = gen;
    }

    /// A new process with its parent's mappings.
    pub fn fork(&mut self, pid: i32, ppid: i32) {
        let maps = self.procs.get(&ppid).map(|p| p.maps.clone()).unwrap_or_default();
        let gen = self.new_gen();
        self.procs.insert(pid, Proc { maps, gen });
    }
}
