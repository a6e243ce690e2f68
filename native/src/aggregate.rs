//! Aggregation: a sample's raw call chain is interned into a symbolic stack
//! (cached by raw chain: kernel-only chains are shared by every process, user
//! ones keyed by pid and maps generation) and its weight added to its event's
//! total for that stack; at the end each event's profile is built (stacks,
//! self and children per symbol, caller-callee edges) and the `Output` with it.
use crate::abi::*;
use crate::header::{Attr, Events};
use crate::intern::{self, ChainMap, SliceSet};
use crate::reader::{EventOut, Fact, Output};
use crate::symbolize::Symbols;
use byteorder::ByteOrder;
use rustc_hash::FxHashMap;

#[derive(Default)]
struct Acc {
    samples: u64,
    weight: u64,
    /// (weight, count) per symbolic stack id.
    by_stack: Vec<(u64, u64)>,
}

pub struct Aggregator {
    raw_key: Vec<u64>,
    /// Raw call chains (with mode, ip and, for user stacks, pid + maps
    /// generation) -> symbolic stack id.
    raw_chains: ChainMap,
    frames: Vec<u32>,
    /// Symbolic stacks (root first), ids in order of first appearance.
    stacks: SliceSet<u32>,
    /// Per event.
    acc: Vec<Acc>,
    /// Samples skipped because their weight would overflow their event's total.
    pub overflowed: u64,
}

impl Aggregator {
    pub fn new(events: usize) -> Self {
        Aggregator {
            raw_key: Vec::new(),
            raw_chains: ChainMap::new(),
            frames: Vec::new(),
            stacks: SliceSet::new(),
            acc: (0..events).map(|_| Acc::default()).collect(),
            overflowed: 0,
        }
    }

    pub fn unique_raw_stacks(&self) -> usize {
        self.raw_chains.len()
    }

    /// Forgets the raw chains symbolized so far (the kernel's symbols moved).
    pub fn forget_raw_chains(&mut self) {
        self.raw_chains.clear();
    }

    /// The symbolic stack id of a sample: `chain` is its PERF_SAMPLE_CALLCHAIN words.
    pub fn resolve_stack<T: ByteOrder>(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, chain: &[u8]) -> u32 {
        let mut key = std::mem::take(&mut self.raw_key);
        key.clear();
        key.push(0);
        key.push(mode as u64);
        key.push(ip);
        let mut user = mode == MODE_USER || mode == MODE_UNKNOWN;
        for w in chain.chunks_exact(8) {
            let a = T::read_u64(w);
            if a == CTX_USER {
                user = true;
            }
            key.push(a);
        }
        // Kernel-only stacks are shared by every process; user ones depend on
        // the process's mappings at that time (pid + generation).
        key[0] = if user { ((pid as u32 as u64) << 40) ^ syms.procs.generation(pid) ^ (1 << 63) } else { 0 };
        let h = intern::hash(&key);
        if let Some(id) = self.raw_chains.get(&key, h) {
            self.raw_key = key;
            return id;
        }
        let id = self.symbolize(syms, &key, pid, mode, ip);
        if let Err(e) = self.raw_chains.insert_new(&key, h, id) {
            panic!("{e}");
        }
        self.raw_key = key;
        id
    }

    /// The symbolic stack of a raw chain key not seen before, interned.
    fn symbolize(&mut self, syms: &mut Symbols, key: &[u64], pid: i32, mode: u8, ip: u64) -> u32 {
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.push(syms.frame_sym(mode, pid, ip));
        if key.len() > 3 {
            let mut ctx = mode;
            let mut first = true;
            for &a in &key[3..] {
                if a >= CTX_MAX {
                    ctx = match a {
                        CTX_KERNEL => MODE_KERNEL,
                        CTX_USER => MODE_USER,
                        CTX_HV => MODE_HV,
                        CTX_GUEST_KERNEL | CTX_GUEST => MODE_GUEST_KERNEL,
                        CTX_GUEST_USER => MODE_GUEST_USER,
                        _ => ctx,
                    };
                    continue;
                }
                if first {
                    first = false;
                    if a == ip {
                        continue;
                    }
                }
                let s = syms.frame_sym(ctx, pid, a);
                frames.push(s);
            }
        }
        frames.reverse();
        let id = self.stacks.intern(&frames);
        self.frames = frames;
        id
    }

    /// Adds a sample of weight `w` on `stack` to event `ev`.
    #[inline]
    pub fn deliver(&mut self, ev: usize, stack: u32, w: u64) {
        let a = &mut self.acc[ev];
        // The weights of an event add up in 64 bits, as perf's do; a sample that would
        // overflow them (a damaged period of 2^64-1) is skipped rather than wrapped.
        let Some(total) = a.weight.checked_add(w) else {
            self.overflowed += 1;
            return;
        };
        a.samples += 1;
        a.weight = total;
        let s = stack as usize;
        if a.by_stack.len() <= s {
            a.by_stack.resize(self.stacks.len().max(s + 1), (0, 0));
        }
        a.by_stack[s].0 += w;
        a.by_stack[s].1 += 1;
    }

    /// The output: every event's profile, the stacks, the symbol tables and
    /// the counts of records by type.
    pub fn into_output(
        self,
        events: &Events,
        syms: Symbols,
        records: &[u64; 128],
        facts: Vec<(String, Fact)>,
        warnings: Vec<String>,
    ) -> Output {
        let nsym = syms.len();
        let mut stamp = vec![u32::MAX; nsym];
        let mut outs = Vec::new();
        for (ai, acc) in self.acc.iter().enumerate() {
            outs.push(event_out(&events.attrs[ai], acc, &self.stacks, nsym, &mut stamp));
        }
        let (stack_frames, stack_offsets) = (self.stacks.data, self.stacks.offsets);
        let mut stats = Vec::new();
        for (t, &c) in records.iter().enumerate() {
            if c > 0 {
                stats.push((format!("{:?}", linux_perf_event_reader::RecordType(t as u32)), c));
            }
        }
        let t = syms.into_tables();
        Output {
            facts,
            events: outs,
            sym_names: t.sym_names,
            sym_dso: t.sym_dso,
            sym_kernel: t.sym_kernel,
            dso_names: t.dso_names,
            dso_paths: t.dso_paths,
            stack_frames,
            stack_offsets,
            warnings,
            stats,
        }
    }
}

/// One event's profile. `stamp` (one per symbol) marks the symbols already
/// counted in a stack's children.
fn event_out(a: &Attr, acc: &Acc, stacks: &SliceSet<u32>, nsym: usize, stamp: &mut [u32]) -> EventOut {
    let mut out = EventOut {
        name: a.name.clone(),
        type_: a.type_,
        config: a.config,
        sample_type: a.sample_type,
        read_format: a.read_format,
        freq: a.freq,
        period_or_freq: a.period_or_freq,
        has_period: a.sample_type & SAMPLE_PERIOD != 0 || a.sample_type & SAMPLE_READ != 0,
        samples: acc.samples,
        total_weight: acc.weight,
        stack_ids: Vec::new(),
        stack_weight: Vec::new(),
        stack_count: Vec::new(),
        self_weight: vec![0.0; nsym],
        children_weight: vec![0.0; nsym],
        self_count: vec![0; nsym],
        children_count: vec![0; nsym],
        edges: Vec::new(),
        edge_weight: Vec::new(),
        edge_count: Vec::new(),
    };
    stamp.iter_mut().for_each(|s| *s = u32::MAX);
    let mut edges: FxHashMap<(u32, u32), (u64, u64)> = FxHashMap::default();
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for (s, &(w, c)) in acc.by_stack.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let st = stacks.get(s as u32);
        out.stack_ids.push(s as u32);
        out.stack_weight.push(w as f64);
        out.stack_count.push(c);
        let leaf = *st.last().unwrap() as usize;
        out.self_weight[leaf] += w as f64;
        out.self_count[leaf] += c;
        for &f in st.iter() {
            if stamp[f as usize] != s as u32 {
                stamp[f as usize] = s as u32;
                out.children_weight[f as usize] += w as f64;
                out.children_count[f as usize] += c;
            }
        }
        pairs.clear();
        pairs.extend(st.windows(2).map(|p| (p[0], p[1])));
        pairs.sort_unstable();
        pairs.dedup();
        for &pr in &pairs {
            let e = edges.entry(pr).or_insert((0, 0));
            e.0 += w;
            e.1 += c;
        }
    }
    let mut ev: Vec<_> = edges.into_iter().collect();
    ev.sort_unstable_by_key(|e| e.0);
    for ((a, b), (w, c)) in ev {
        out.edges.push(a);
        out.edges.push(b);
        out.edge_weight.push(w as f64);
        out.edge_count.push(c);
    }
    out
}
