//! Aggregation: a sample's raw call chain is interned into a symbolic stack
//! (cached by raw chain: kernel-only chains are shared by every process, user
//! ones keyed by pid and maps generation) and its weight added to its event's
//! total for that stack; at the end each event's profile is built (stacks,
//! self and children per symbol, caller-callee edges) and the `Output` with it.
use crate::abi::*;
use crate::header::{Attr, Events};
use crate::intern::{self, ChainMap, SliceSet};
use crate::output::{EventOut, Fact, Output};
use crate::procmaps::{map_in, Map};
use crate::symbolize::{file_key, Symbols, TAIL_UNMAPPED};
use byteorder::ByteOrder;
use rustc_hash::FxHashMap;

#[derive(Default)]
struct Acc {
    samples: u64,
    weight: u64,
    /// (weight, count) per symbolic stack id.
    by_stack: Vec<(u64, u64)>,
    /// (weight, count) per (comm id << 32 | stack id), when asked for processes.
    by_proc: FxHashMap<u64, (u64, u64)>,
}

/// The raw-chain caches are bounded memos (`ChainMap`): 512 KiB of whole chains,
/// 1 MiB of kernel heads, 512 KiB of tails by file and offset. A memo that fits the
/// core's cache reads faster than a larger one that empties less often: on three files
/// recorded here (1.2M, 1.4M and 0.6M samples, 25-75% of them on chains not seen before)
/// 1 MiB of chains read 9-13% faster than 8 MiB, for 1-10% more chains symbolized; with
/// the tails' memo beside it, on the four shapes of `benchmarks/shapes.py`, half of those
/// sizes read 3-9% faster than the sizes before (1 MiB, 2 MiB, 1 MiB), and a quarter of
/// them 0-5% faster again (the machine shared; the middle kept).
const CHAIN_CACHE_WORDS: usize = 1 << 16;
const HEAD_CACHE_WORDS: usize = 1 << 17;
const TAIL_CACHE_WORDS: usize = 1 << 16;

/// What each thread's memos are of one reader's when `threads` read one file: a half from 4
/// threads, a third from 6, a quarter from 8, so that all the threads' memos together take at
/// most twice one reader's 2 MiB. Each thread reads a share of the file, and on 16 threads the
/// memos at full size took 2 MiB a thread of new pages and of the caches the cores share. On the
/// 71 MB file of docs/figures.md ("Fewer new pages on many threads"), 16 threads took 18,900 page
/// faults a read at full size; with these memos and recent-address caches a quarter of one
/// reader's, 16,100 and less CPU time than with a half (17,100), for 228M instructions of
/// symbolizing against 204M and 219M. The sizes above were chosen on one thread.
pub fn memo_divisor(threads: usize) -> usize {
    (threads / 2).clamp(1, 4)
}
/// The most words one key takes: its prefix, and a chain as long as a record
/// can hold (64 KiB).
const KEY_WORDS: usize = 8 + (64 << 10) / 8;

/// A chain's bytes as words, where they are, when that is possible.
#[inline]
fn in_place<T: ByteOrder>(chain: &[u8]) -> Option<&[u64]> {
    if T::read_u64(&1u64.to_ne_bytes()) != 1 {
        return None;
    }
    // SAFETY: every bit pattern is a valid u64; align_to only takes the aligned middle.
    match unsafe { chain.align_to::<u64>() } {
        (&[], words, &[]) => Some(words),
        _ => None,
    }
}

/// Set in the first word of a chain's key when the ip is keyed by its symbol (a space's
/// generation never reaches bit 56).
const CANONICAL_KEY: u64 = 1 << 56;

/// No part (a chain with no kernel head, or no user tail).
const NO_PART: u32 = u32::MAX;

pub struct Aggregator {
    /// A chain's words, when they cannot be read where they are.
    key: Vec<u64>,
    /// Raw call chains (with mode, ip and, for chains with user frames, pid +
    /// maps generation) -> symbolic stack id.
    chains: ChainMap,
    /// The pid-free head of a raw chain (its mode, ip and the words before its
    /// first user context) -> symbolic part id, so that a chain missing from
    /// `chains` (a new process's) resolves only its user frames.
    heads: ChainMap,
    /// A tail's words translated to what they mean (`tail_key`), with its head part
    /// and mode -> symbolic stack id: a new process whose chains run through the same
    /// files (the same binary and libraries, mapped at other addresses) resolves them
    /// without looking a symbol up.
    tails: ChainMap,
    /// The tail key being built.
    tail_key: Vec<u64>,
    /// Symbolic heads, leaf first.
    parts: SliceSet<u32>,
    /// The stack of each head with no tail (NO_PART until one is seen).
    head_alone: Vec<u32>,
    frames: Vec<u32>,
    /// Symbolic stacks (root first), ids in order of first appearance.
    stacks: SliceSet<u32>,
    /// Raw chain parts symbolized (cache misses).
    symbolized: u64,
    /// Per event.
    acc: Vec<Acc>,
    /// Samples skipped because their weight would overflow their event's total.
    pub overflowed: u64,
}

/// The raw-chain memos (chains, heads, tails) of the runs of a read on threads that are done
/// (`Aggregator::run_done`), emptied for the next runs: a read on threads makes an aggregator
/// for every run of chunks, and the memos' arenas (2 MiB) were new pages for each.
pub static SPARE_MEMOS: crate::cleanup::Spares<[ChainMap; 3]> = crate::cleanup::Spares::new();

impl Aggregator {
    /// An aggregator of `events` events whose memos are `1 / memo_divisor` of one reader's
    /// (`memo_divisor`).
    pub fn new(events: usize, memo_divisor: usize) -> Self {
        let limits = [CHAIN_CACHE_WORDS, HEAD_CACHE_WORDS, TAIL_CACHE_WORDS].map(|w| w / memo_divisor.max(1));
        let spare = SPARE_MEMOS.take_fitting(|memos| memos.iter().zip(limits).all(|(m, l)| m.limit() == l));
        let [chains, heads, tails] = match spare {
            Some(mut memos) => {
                memos.iter_mut().for_each(ChainMap::clear);
                memos
            }
            None => limits.map(|l| ChainMap::memo(l, KEY_WORDS)),
        };
        Aggregator {
            key: Vec::new(),
            chains,
            heads,
            tails,
            tail_key: Vec::new(),
            parts: SliceSet::new(),
            head_alone: Vec::new(),
            frames: Vec::new(),
            stacks: SliceSet::new(),
            symbolized: 0,
            acc: (0..events).map(|_| Acc::default()).collect(),
            overflowed: 0,
        }
    }

    /// How many raw chain parts were symbolized (the rest were cache hits).
    pub fn symbolized_parts(&self) -> u64 {
        self.symbolized
    }

    /// A run of a read on threads is done: its raw-chain memos go to the next run (it symbolizes
    /// no more chains; what it made, its stacks and sums, stays for the merge).
    pub fn run_done(&mut self) {
        let away = |m: &mut ChainMap| std::mem::replace(m, ChainMap::unallocated(m.limit(), KEY_WORDS));
        let memos = [away(&mut self.chains), away(&mut self.heads), away(&mut self.tails)];
        SPARE_MEMOS.give(memos);
    }

    /// Forgets the raw chains symbolized so far (the kernel's symbols moved).
    pub fn forget_raw_chains(&mut self) {
        self.chains.clear();
        self.heads.clear();
        self.tails.clear();
    }

    /// The symbolic stack id of a sample: `chain` is its PERF_SAMPLE_CALLCHAIN words.
    ///
    /// A chain is looked up whole, with its pid and maps generation when it has user
    /// frames. A chain not seen before is symbolized in two parts: the head (the
    /// sample's mode and ip, and the kernel words before the first user context),
    /// which resolves the same in every process and has a cache of its own, and the
    /// tail (from the first user context on; a user-mode sample is all tail), so a new
    /// process's chains resolve only their user frames.
    #[inline(always)] // into the decoder's loop, once a sample (a call costs 20 instructions a sample)
    pub fn resolve_stack<T: ByteOrder>(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, chain: &[u8]) -> u32 {
        // The chain's words where they are in the file when its byte order is the
        // machine's and they are aligned (perf pads records to 8 bytes); a copy otherwise.
        match in_place::<T>(chain) {
            Some(words) => self.resolve_words(syms, pid, mode, ip, words),
            None => self.resolve_copied::<T>(syms, pid, mode, ip, chain),
        }
    }

    /// `resolve_stack` through a copy of the chain's words in the machine's byte order.
    #[inline(never)]
    fn resolve_copied<T: ByteOrder>(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, chain: &[u8]) -> u32 {
        let mut copy = std::mem::take(&mut self.key);
        copy.clear();
        copy.extend(chain.chunks_exact(8).map(T::read_u64));
        let id = self.resolve_words(syms, pid, mode, ip, &copy);
        self.key = copy;
        id
    }

    #[inline(always)]
    fn resolve_words(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, words: &[u64]) -> u32 {
        let shared_head = matches!(mode, MODE_KERNEL | MODE_HV | MODE_GUEST_KERNEL | MODE_GUEST_USER);
        let split = if shared_head { words.iter().position(|&a| a == CTX_USER).unwrap_or(words.len()) } else { 0 };
        // Kernel-only chains are shared by every process; the others depend on the
        // process's mappings at that time (pid + generation).
        let space = if split == words.len() && shared_head { 0 } else { syms.space(pid) };
        // A chain whose first address repeats the ip (perf's layout) is keyed by the ip's
        // symbol instead of the ip: samples at different places in one function, under the
        // same callers, resolve to the same stack and share one entry. The ip only sets the
        // leaf frame and whether that first address is skipped (it is, being the ip).
        let canonical = (mode == MODE_KERNEL || mode == MODE_USER) && words.len() >= 2 && words[0] >= CTX_MAX
            && words[1] == ip;
        let (prefix, rest) = if canonical {
            let leaf = syms.frame_sym(mode, pid, space, ip);
            ([space ^ (mode as u64) << 48 ^ CANONICAL_KEY, leaf as u64, words[0]], &words[2..])
        } else {
            ([space, mode as u64, ip], words)
        };
        let h = intern::hash_parts(&prefix, rest);
        if let Some(id) = self.chains.get(&prefix, rest, h) {
            return id;
        }
        let id = self.symbolize_chain(syms, pid, mode, ip, shared_head, words.split_at(split));
        self.chains.insert_new(&prefix, rest, h, id);
        id
    }

    /// The stack of a raw chain not in the cache: its pid-free head through the heads'
    /// cache, then its tail.
    fn symbolize_chain(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, shared_head: bool,
                       (head_words, tail_words): (&[u64], &[u64])) -> u32 {
        // Whether the chain's first address (which repeats the ip) is still to come.
        let first_pending = head_words.iter().all(|&a| a >= CTX_MAX);
        let mut head = NO_PART;
        if shared_head {
            let prefix = [mode as u64, ip];
            let h = intern::hash_parts(&prefix, head_words);
            head = match self.heads.get(&prefix, head_words, h) {
                Some(id) => id,
                None => {
                    let id = self.symbolize_head(syms, pid, mode, ip, head_words);
                    self.heads.insert_new(&prefix, head_words, h, id);
                    id
                }
            };
            if tail_words.is_empty() {
                return self.head_alone(head);
            }
        }
        self.symbolize_tail(syms, pid, mode, ip, head, shared_head, first_pending, tail_words)
    }

    /// The frames of raw chain words, appended to `frames` (leaf first): see `walk`.
    #[allow(clippy::too_many_arguments)]
    fn frames_of(syms: &mut Symbols, frames: &mut Vec<u32>, pid: i32, mode: u8, ip: u64, with_ip: bool,
                 skip_first: bool, words: &[u64]) {
        let space = syms.space(pid);
        walk(mode, ip, with_ip, skip_first, words, |ctx, a| frames.push(syms.frame_sym(ctx, pid, space, a)));
    }

    /// The interned symbolic part of a head's raw words (after its mode and ip).
    fn symbolize_head(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, words: &[u64]) -> u32 {
        self.symbolized += 1;
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        Self::frames_of(syms, &mut frames, pid, mode, ip, true, true, words);
        let id = self.parts.intern(&frames);
        self.frames = frames;
        id
    }

    /// The stack of a head part and a tail's raw words (after its key words), interned:
    /// through the tails' memo when the tail's addresses translate (`tail_key`).
    #[allow(clippy::too_many_arguments)]
    fn symbolize_tail(&mut self, syms: &mut Symbols, pid: i32, mode: u8, ip: u64, head: u32, shared_head: bool,
                      first_pending: bool, words: &[u64]) -> u32 {
        let (with_ip, skip_first) = (!shared_head, !shared_head || first_pending);
        let mut key = std::mem::take(&mut self.tail_key);
        key.clear();
        let translated = tail_key(&mut key, syms.procs.maps(pid).unwrap_or(&[]), mode, ip, with_ip, skip_first, words);
        let id = if translated {
            let prefix = [head as u64, mode as u64];
            let h = intern::hash_parts(&prefix, &key);
            match self.tails.get(&prefix, &key, h) {
                Some(id) => id,
                None => {
                    let id = self.stack_of_tail_key(syms, head, mode, &key);
                    self.tails.insert_new(&prefix, &key, h, id);
                    id
                }
            }
        } else {
            self.symbolized += 1;
            self.stack_of(head, |frames| Self::frames_of(syms, frames, pid, mode, ip, with_ip, skip_first, words))
        };
        self.tail_key = key;
        id
    }

    /// The stack of a head part and a tail key (`tail_key`), interned.
    fn stack_of_tail_key(&mut self, syms: &mut Symbols, head: u32, mode: u8, key: &[u64]) -> u32 {
        self.symbolized += 1;
        self.stack_of(head, |frames| {
            let mut ctx = mode;
            for &w in key {
                match w {
                    CTX_KERNEL => ctx = MODE_KERNEL,
                    CTX_USER => ctx = MODE_USER,
                    _ => frames.push(syms.tail_key_sym(ctx, w)),
                }
            }
        })
    }

    /// The interned stack of a head part (none for NO_PART) and the frames `tail` appends
    /// after it (leaf first, as the head's).
    fn stack_of(&mut self, head: u32, tail: impl FnOnce(&mut Vec<u32>)) -> u32 {
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        if head != NO_PART {
            frames.extend_from_slice(self.parts.get(head));
        }
        tail(&mut frames);
        frames.reverse();
        let id = self.stacks.intern(&frames);
        self.frames = frames;
        id
    }

    /// The stack of a head with no tail.
    #[inline]
    fn head_alone(&mut self, head: u32) -> u32 {
        let h = head as usize;
        if self.head_alone.len() <= h {
            self.head_alone.resize(h + 1, NO_PART);
        }
        if self.head_alone[h] == NO_PART {
            self.head_alone[h] = self.stack_of(head, |_| {});
        }
        self.head_alone[h]
    }

    /// Takes in what a reader of a later part of the same file (`parallel`) added up:
    /// `syms` and `comms` map its symbol and comm ids to this reader's. Its stacks new to
    /// this one are added in the order it met them (the order one reader of the whole
    /// file would have). False when a total would overflow (the file must be read by one
    /// reader, which skips the samples that would).
    pub fn absorb(&mut self, other: &Aggregator, syms: &[u32], comms: &[u32]) -> bool {
        // its stacks in this table's symbols, and their hashes, on threads (a part's are tens of
        // thousands of frames); then each looked up, or added, in order
        let n = other.stacks.len();
        let threads = if n >= 4096 { 4 } else { 1 };
        let mapped: Vec<(Vec<u32>, Vec<u64>)> = crate::spread::on_threads(threads, |t| {
            let (mut frames, mut hashes) = (Vec::new(), Vec::new());
            let mut start = frames.len();
            for s in t * n / threads..(t + 1) * n / threads {
                frames.extend(other.stacks.get(s as u32).iter().map(|&f| syms[f as usize]));
                hashes.push(intern::hash(&frames[start..]));
                start = frames.len();
            }
            (frames, hashes)
        });
        let mut stack_map: Vec<u32> = Vec::with_capacity(n);
        let mut s = 0u32;
        for (frames, hashes) in &mapped {
            let mut at = 0;
            for &h in hashes {
                let len = other.stacks.get(s).len();
                let key = &frames[at..at + len];
                stack_map.push(match self.stacks.find(key, h) {
                    Some(id) => id,
                    None => self.stacks.insert_new(key, h),
                });
                at += len;
                s += 1;
            }
        }
        self.symbolized += other.symbolized;
        self.overflowed += other.overflowed;
        for (mine, theirs) in self.acc.iter_mut().zip(&other.acc) {
            let Some(weight) = mine.weight.checked_add(theirs.weight) else {
                return false;
            };
            mine.weight = weight;
            mine.samples += theirs.samples;
            for (s, &(w, c)) in theirs.by_stack.iter().enumerate() {
                if c == 0 {
                    continue;
                }
                let t = stack_map[s] as usize;
                if mine.by_stack.len() <= t {
                    mine.by_stack.resize(self.stacks.len().max(t + 1), (0, 0));
                }
                mine.by_stack[t].0 += w;
                mine.by_stack[t].1 += c;
            }
            for (&k, &(w, c)) in &theirs.by_proc {
                let key = (comms[(k >> 32) as usize] as u64) << 32 | stack_map[k as u32 as usize] as u64;
                let e = mine.by_proc.entry(key).or_insert((0, 0));
                e.0 += w;
                e.1 += c;
            }
        }
        true
    }

    /// Adds a sample of weight `w` on `stack` to event `ev`.
    #[inline(always)]
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

    /// `deliver`, also adding the sample to its process's share of the stack when its
    /// process (comm id) is known, that is when samples are aggregated per process.
    #[inline(always)]
    pub fn deliver_in(&mut self, ev: usize, comm: Option<u32>, stack: u32, w: u64) {
        let Some(comm) = comm else {
            return self.deliver(ev, stack, w);
        };
        let skipped = self.overflowed;
        self.deliver(ev, stack, w);
        if self.overflowed == skipped {
            // no overflow: the shares of a stack add up to its weight, which did not overflow
            let e = self.acc[ev].by_proc.entry((comm as u64) << 32 | stack as u64).or_insert((0, 0));
            e.0 += w;
            e.1 += 1;
        }
    }

    /// The output: every event's profile (on up to `threads` threads: `event_out_on`), the
    /// stacks, the symbol tables and the counts of records by type.
    #[allow(clippy::too_many_arguments)]
    pub fn into_output(
        self,
        events: &Events,
        syms: Symbols,
        records: &[u64; 128],
        facts: Vec<(String, Fact)>,
        warnings: Vec<String>,
        comm_names: Vec<String>,
        threads: usize,
    ) -> Output {
        let nsym = syms.len();
        let t0 = std::time::Instant::now();
        let mut stamp = vec![u32::MAX; nsym];
        let mut outs = Vec::new();
        for (ai, acc) in self.acc.iter().enumerate() {
            outs.push(event_out_on(&events.attrs[ai], acc, &self.stacks, nsym, &mut stamp, threads));
        }
        if crate::timing::on() {
            eprintln!("kperfdiff timing: events' profiles {:.3} ms", t0.elapsed().as_secs_f64() * 1e3);
        }
        let (stack_frames, stack_offsets) = (self.stacks.data, self.stacks.offsets);
        let mut stats = Vec::new();
        for (t, &c) in records.iter().enumerate() {
            if c > 0 {
                stats.push((format!("{:?}", linux_perf_event_reader::RecordType(t as u32)), c));
            }
        }
        let t = if threads > 1 {
            // what the read on threads is done with is freed after it returns (`cleanup`)
            let mut syms = syms;
            let t = syms.take_tables();
            crate::cleanup::later(syms.leftovers());
            crate::cleanup::later((self.chains, self.heads, self.tails, self.parts, self.acc, self.key, self.tail_key));
            t
        } else {
            syms.into_tables()
        };
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
            comm_names,
        }
    }
}

/// The addresses of raw chain words, in the context each is in, leaf first, to `f`:
/// the ip first when `with_ip` (in the sample's mode), then each address in the
/// context the markers before it set (the sample's mode until the first marker). With
/// `skip_first`, the first address is the chain's first, which repeats the ip and is
/// skipped when it does.
#[inline(always)]
fn walk(mode: u8, ip: u64, with_ip: bool, skip_first: bool, words: &[u64], mut f: impl FnMut(u8, u64)) {
    if with_ip {
        f(mode, ip);
    }
    let mut ctx = mode;
    let mut first = skip_first;
    for &a in words {
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
        f(ctx, a);
    }
}

/// The key of a tail's addresses by what they mean, into `key`: the addresses `walk`
/// gives, kernel ones as they are, user ones as their file and offset (`file_key`) in
/// the process's `maps` (TAIL_UNMAPPED when none holds them), with a context marker
/// before each change of context. Two tails with the same key resolve to the same
/// frames. False (and the key unusable) when an address is in another context or its
/// file and offset do not fit a word.
fn tail_key(key: &mut Vec<u64>, maps: &[Map], mode: u8, ip: u64, with_ip: bool, skip_first: bool,
            words: &[u64]) -> bool {
    if mode != MODE_KERNEL && mode != MODE_USER {
        return false;
    }
    let mut ok = true;
    let mut ctx = mode;
    // The mapping of the last user address: a chain's frames run through few files.
    let mut last: Option<Map> = None;
    walk(mode, ip, with_ip, skip_first, words, |c, a| {
        if c != ctx {
            match c {
                MODE_KERNEL => key.push(CTX_KERNEL),
                MODE_USER => key.push(CTX_USER),
                _ => ok = false,
            }
            ctx = c;
        }
        if c == MODE_KERNEL {
            key.push(a);
        } else if c == MODE_USER {
            let m = match last {
                Some(m) if a >= m.start && a < m.end => Some(m),
                _ => map_in(maps, a),
            };
            match m {
                Some(m) => {
                    last = Some(m);
                    match file_key(m.dso, a - m.start + m.pgoff) {
                        Some(k) if k >> 63 == 0 => key.push(k),
                        _ => ok = false,
                    }
                }
                None => key.push(TAIL_UNMAPPED),
            }
        }
    });
    ok
}

/// An event's profile without its stacks, edges and processes: its facts, and zeroed sums
/// per symbol.
fn event_head(a: &Attr, acc: &Acc, nsym: usize) -> EventOut {
    EventOut {
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
        proc_comm: Vec::new(),
        proc_stack: Vec::new(),
        proc_weight: Vec::new(),
        proc_count: Vec::new(),
    }
}

/// The event's weight per process name and stack, by comm id then stack id.
fn procs_of(acc: &Acc, out: &mut EventOut) {
    let mut procs: Vec<(u64, (u64, u64))> = acc.by_proc.iter().map(|(&k, &v)| (k, v)).collect();
    procs.sort_unstable_by_key(|p| p.0);
    for (k, (w, c)) in procs {
        out.proc_comm.push((k >> 32) as u32);
        out.proc_stack.push(k as u32);
        out.proc_weight.push(w as f64);
        out.proc_count.push(c);
    }
}

/// An event with at least this many stacks has its profile built on several threads.
const THREADED_OUTPUT_STACKS: usize = 4096;

/// `event_out` on up to `threads` threads, the same profile: the stacks in consecutive
/// chunks, each adding up its self and children per symbol and its caller-callee edges; then
/// the edges by ranges of callers, each from every chunk's (each stack is walked once,
/// however many the threads). The weights add up in integers, which gives the
/// f64 that `event_out`'s running sums give while the event's total is below 2^53 (every
/// partial sum is then exact); above, or with few stacks, it is `event_out` itself.
fn event_out_on(a: &Attr, acc: &Acc, stacks: &SliceSet<u32>, nsym: usize, stamp: &mut [u32], threads: usize)
                -> EventOut {
    let n = acc.by_stack.len();
    if threads < 2 || acc.weight >= 1 << 53 || n < THREADED_OUTPUT_STACKS {
        return event_out(a, acc, stacks, nsym, stamp);
    }
    let mut out = event_head(a, acc, nsym);
    procs_of(acc, &mut out);
    // each thread adds up its chunk of the stacks: sums per symbol, and edges (sorted)
    let (sums, chunk_edges): (Vec<Sums>, Vec<Edges>) =
        crate::spread::on_threads(threads, |i| chunk_sums(acc, stacks, nsym, i * n / threads..(i + 1) * n / threads))
            .into_iter()
            .unzip();
    // then each thread adds up, for its range of symbols, every chunk's sums and the edges
    // from those symbols (as callers)
    let ranges: Vec<(usize, usize)> = (0..threads).map(|j| (j * nsym / threads, (j + 1) * nsym / threads)).collect();
    let lens = || ranges.iter().map(|&(lo, hi)| hi - lo);
    let pieces: Vec<_> = ranges.iter().copied()
        .zip(crate::spread::pieces_mut(&mut out.self_weight, lens()))
        .zip(crate::spread::pieces_mut(&mut out.children_weight, lens()))
        .zip(crate::spread::pieces_mut(&mut out.self_count, lens()))
        .zip(crate::spread::pieces_mut(&mut out.children_count, lens()))
        .collect();
    let edges: Vec<Edges> = crate::spread::each(pieces, |_, (((((lo, hi), sw), cw), sc), cc)| {
        for f in lo..hi {
            let (mut s_w, mut c_w) = (0u64, 0u64);
            for t in &sums {
                s_w += t.self_w[f];
                c_w += t.children_w[f];
                sc[f - lo] += t.self_c[f];
                cc[f - lo] += t.children_c[f];
            }
            sw[f - lo] = s_w as f64;
            cw[f - lo] = c_w as f64;
        }
        edges_of_callers(&chunk_edges, lo as u32, hi as u32)
    });
    for t in &sums {
        out.stack_ids.extend_from_slice(&t.ids);
        out.stack_weight.extend(t.weight.iter().map(|&w| w as f64));
        out.stack_count.extend_from_slice(&t.count);
    }
    // the chunks' sums and edges are freed after the read (`cleanup`)
    crate::cleanup::later((sums, chunk_edges));
    let e: usize = edges.iter().map(|v| v.len()).sum();
    out.edges.reserve(2 * e);
    out.edge_weight.reserve(e);
    out.edge_count.reserve(e);
    for ((a, b), (w, c)) in edges.into_iter().flatten() {
        out.edges.push(a);
        out.edges.push(b);
        out.edge_weight.push(w as f64);
        out.edge_count.push(c);
    }
    out
}

/// What one chunk of an event's stacks adds up (`event_out_on`): the stacks it holds, with their
/// weights and counts, and each symbol's self and children sums.
struct Sums {
    ids: Vec<u32>,
    weight: Vec<u64>,
    count: Vec<u64>,
    self_w: Vec<u64>,
    self_c: Vec<u64>,
    children_w: Vec<u64>,
    children_c: Vec<u64>,
}

/// Caller-callee edges with their weights and counts, sorted.
type Edges = Vec<((u32, u32), (u64, u64))>;

/// The sums and the edges of the stacks `range` of an event.
fn chunk_sums(acc: &Acc, stacks: &SliceSet<u32>, nsym: usize, range: std::ops::Range<usize>) -> (Sums, Edges) {
    let mut t = Sums { ids: Vec::new(), weight: Vec::new(), count: Vec::new(), self_w: vec![0; nsym],
                       self_c: vec![0; nsym], children_w: vec![0; nsym], children_c: vec![0; nsym] };
    let mut stamp = vec![u32::MAX; nsym];
    let mut edges: FxHashMap<(u32, u32), (u64, u64)> = FxHashMap::default();
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    for s in range {
        let (w, c) = acc.by_stack[s];
        if c == 0 {
            continue;
        }
        let st = stacks.get(s as u32);
        t.ids.push(s as u32);
        t.weight.push(w);
        t.count.push(c);
        let leaf = *st.last().unwrap() as usize;
        t.self_w[leaf] += w;
        t.self_c[leaf] += c;
        for &f in st.iter() {
            if stamp[f as usize] != s as u32 {
                stamp[f as usize] = s as u32;
                t.children_w[f as usize] += w;
                t.children_c[f as usize] += c;
            }
        }
        add_edges(&mut edges, &mut pairs, st.windows(2).map(|p| (p[0], p[1])), w, c);
    }
    let mut ev: Edges = edges.into_iter().collect();
    ev.sort_unstable_by_key(|e| e.0);
    (t, ev)
}

/// The edges from callers `lo..hi`, each chunk's (sorted) added up, sorted.
fn edges_of_callers(chunks: &[Edges], lo: u32, hi: u32) -> Edges {
    let mut mine: Edges = Vec::new();
    for ev in chunks {
        let from = ev.partition_point(|e| e.0 .0 < lo);
        let to = ev.partition_point(|e| e.0 .0 < hi);
        mine.extend_from_slice(&ev[from..to]);
    }
    mine.sort_unstable_by_key(|e| e.0);
    let mut summed: Edges = Vec::with_capacity(mine.len());
    for (k, (w, c)) in mine {
        match summed.last_mut() {
            Some(last) if last.0 == k => {
                last.1 .0 += w;
                last.1 .1 += c;
            }
            _ => summed.push((k, (w, c))),
        }
    }
    summed
}

/// A stack's caller -> callee edges, each counted once however often the stack repeats it, added
/// with the stack's weight and count (`pairs`: scratch space kept between stacks).
fn add_edges(edges: &mut FxHashMap<(u32, u32), (u64, u64)>, pairs: &mut Vec<(u32, u32)>,
             from: impl Iterator<Item = (u32, u32)>, w: u64, c: u64) {
    pairs.clear();
    pairs.extend(from);
    pairs.sort_unstable();
    pairs.dedup();
    for &pr in pairs.iter() {
        let e = edges.entry(pr).or_insert((0, 0));
        e.0 += w;
        e.1 += c;
    }
}

/// One event's profile. `stamp` (one per symbol) marks the symbols already
/// counted in a stack's children.
fn event_out(a: &Attr, acc: &Acc, stacks: &SliceSet<u32>, nsym: usize, stamp: &mut [u32]) -> EventOut {
    let mut out = event_head(a, acc, nsym);
    procs_of(acc, &mut out);
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
        add_edges(&mut edges, &mut pairs, st.windows(2).map(|p| (p[0], p[1])), w, c);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::RawAttr;

    /// A run's memos are the share of one reader's its read asked for, whatever memos of
    /// other sizes another read left spare; a run that is done hands on memos of its own sizes.
    #[test]
    fn memos_are_the_share_asked_for() {
        let limits = |a: &Aggregator| [a.chains.limit(), a.heads.limit(), a.tails.limit()];
        let full = [CHAIN_CACHE_WORDS, HEAD_CACHE_WORDS, TAIL_CACHE_WORDS];
        assert_eq!((memo_divisor(1), memo_divisor(2), memo_divisor(4), memo_divisor(16)), (1, 1, 2, 4));
        let mut big = Aggregator::new(1, 1);
        assert_eq!(limits(&big), full);
        big.run_done();
        for d in [4, 2, 1] {
            let mut a = Aggregator::new(1, d);
            assert_eq!(limits(&a), full.map(|w| w / d), "a share of 1/{d}");
            a.run_done();
            assert_eq!(limits(&a), full.map(|w| w / d), "1/{d}, handed on");
        }
    }

    /// The profile built on threads is `event_out`'s, f64 for f64.
    #[test]
    fn an_event_built_on_threads_is_the_same() {
        let raw = RawAttr { type_: 1, config: 0, period_or_freq: 1, sample_type: SAMPLE_PERIOD, read_format: 0, flags: 0,
                            ids: vec![] };
        let attr = Attr::new(&raw, "e".into());
        let nsym = 700usize;
        let mut stacks = SliceSet::new();
        let mut acc = Acc::default();
        let mut x = 11u64;
        for _ in 0..9000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            // stacks with repeated frames (recursion) and shared prefixes
            let depth = 1 + (x >> 58) as usize;
            let frames: Vec<u32> = (0..depth).map(|d| ((x >> (d % 40)) as usize % nsym) as u32).collect();
            let id = stacks.intern(&frames) as usize;
            if acc.by_stack.len() <= id {
                acc.by_stack.resize(id + 1, (0, 0));
            }
            let w = 1 + (x >> 20) % 100_000;
            acc.by_stack[id].0 += w;
            acc.by_stack[id].1 += 1;
            acc.weight += w;
            acc.samples += 1;
        }
        assert!(acc.by_stack.len() >= THREADED_OUTPUT_STACKS);
        let mut stamp = vec![u32::MAX; nsym];
        let one = event_out(&attr, &acc, &stacks, nsym, &mut stamp);
        for threads in [2, 3, 16] {
            assert_eq!(event_out_on(&attr, &acc, &stacks, nsym, &mut stamp, threads), one, "{threads} threads");
        }
    }
}
