//! One file on several threads: its records split into consecutive chunks at FINISHED_ROUND
//! records, runs of chunks read by threads of their own, and the runs' profiles merged into
//! exactly what one reader of the whole file gives.
//!
//! 1. Index, on every thread: thread i finds the first FINISHED_ROUND at or after its share's
//!    start (`order::find_round`, a guess from the bytes) and walks the record headers from
//!    there to the first FINISHED_ROUND at or after the next share's start
//!    (`order::index`): where the rounds end, the latest time in each, where the state
//!    records (mappings, exec, fork, names) lie. The walk of the thread before confirms the
//!    guess: it must end exactly where the next walk began (`Plan::new`); otherwise the
//!    file is read on one thread. The file is then cut into `CHUNKS_PER_THREAD` chunks a
//!    thread, at round ends.
//! 2. History, on every thread: what each chunk's state records do, in the order one reader
//!    applies them (`history::History`).
//! 3. Read, on every thread: each thread reads a run of consecutive chunks, taking the next
//!    chunk of its share as long as it has one, then the back half of the share with the most
//!    chunks left (work stealing: how long a chunk takes varies threefold, with the new call
//!    chains in it). A run's reader resumes where one reader would be after the flush its
//!    first chunk begins with (`order::Resume`: the round before it pending, the latest time
//!    so far), and asks the histories of the chunks before it for a process's mappings or a
//!    thread's name the first time it meets one (`history::Prefix`).
//! 4. Merge: symbols, stacks and names get their ids in order of first appearance; since
//!    the runs are consecutive stretches of one reader's order, merging each run's
//!    tables into the earlier runs' in order gives the ids one reader would
//!    (`Symbols::absorb`, `Aggregator::absorb`, `Comms::absorb`), and so does merging any two
//!    neighbours, in any order. A thread with no chunk left to read merges neighbouring runs
//!    that are done while the others still read (`Blocks`); what is left when all are read is
//!    merged pairwise, on threads, level by level. Sums are sums. What cannot be merged
//!    so (the kernel's symbols moving after samples were read, or a total overflowing) makes
//!    the caller read the file on one thread.
//!
//! No thread replays what comes before its run: the work is the same on any number of
//! threads, but for the index, the walk of the round before each run, the processes and
//! threads a run meets that were made before it, and each run's set-up and its cold caches.
use crate::decode::Decoder;
use crate::error::Error;
use crate::header::{BuildIds, Events};
use crate::history::{Flushes, History, Prefix};
use crate::kallsyms::Kallsyms;
use crate::options::Options;
use crate::order::{self, Cut, RecordSink, Resume, Stretch};
use crate::elfsyms::SharedSyms;
use crate::symbolize::Symbols;
use crate::timing::Clock;
use byteorder::ByteOrder;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Each thread's share is at least this large. A thread costs work of its own: its tables, its
/// caches filling again, its share of the index, the history and the merge (callgrind on the 71 MB
/// recording of docs/figures.md: 728M instructions on one thread, 834M on 2, 878M on 4, 1,069M on
/// 16, that is 12-50M a thread, what reading 1.2-5 MB costs), which it pays while the others pay
/// theirs. A 4 MB share still halves when the threads double, for one more level of the merge.
const MIN_PART_BYTES: usize = 4 << 20;

/// How many threads read `len` bytes of records when `asked` may: one per `MIN_PART_BYTES`, and
/// no more than the CPUs this process may run on (more threads than CPUs only add their cost).
/// With `KPERFDIFF_PARALLEL_MIN_BYTES` in the environment, one per that many bytes however few
/// the CPUs (tests read small files on more threads than CPUs with 0, to hold every fixture to one
/// thread's output; benchmarks measure what more threads than CPUs cost).
pub fn threads_for(len: usize, asked: usize) -> usize {
    match std::env::var("KPERFDIFF_PARALLEL_MIN_BYTES").ok().and_then(|v| v.parse::<usize>().ok()) {
        Some(per) => asked.min(len / per.max(1)),
        None => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            asked.min(len / MIN_PART_BYTES).min(cpus)
        }
    }
    .max(1)
}

/// Chunks a thread: more than one, so that a thread that is done early takes over part of
/// another's share.
const CHUNKS_PER_THREAD: usize = 8;

/// The chunks of a file read on several threads, and the rounds that order its records.
struct Plan {
    flushes: Flushes,
    /// Every state record (region offset, time), in file order.
    states: Vec<(usize, u64)>,
    chunks: Vec<Chunk>,
}

struct Chunk {
    /// Where one reader is when the chunk begins (None: at the region's start).
    from: Option<Resume>,
    /// The FINISHED_ROUND it ends with (None: it runs to the end, or to a record that cannot be read).
    to: Option<usize>,
    /// Its flush there (for `history`: which of its records are handed over after it).
    last_flush: Option<u32>,
    /// Its state records (indices into `Plan::states`).
    states: std::ops::Range<usize>,
}

impl Plan {
    /// The chunks, about `count` of them, when the stretches chain into the whole region
    /// (each begins where the one before ends, the last reaches the end or a record that
    /// cannot be read); None when a guess was wrong or a record is compressed (the caller
    /// reads the file on one thread).
    fn new(stretches: &[Option<Stretch>], len: usize, count: usize) -> Option<Plan> {
        let mut chain = vec![0usize];
        let mut cur = stretches.first()?.as_ref()?;
        if cur.compressed {
            return None;
        }
        for (i, s) in stretches.iter().enumerate().skip(1) {
            if cur.cut.is_some() || !cur.end_is_round {
                break;
            }
            match s {
                Some(s) if s.start == cur.end && !s.compressed => {
                    chain.push(i);
                    cur = s;
                }
                _ => return None,
            }
        }
        if cur.end_is_round && cur.cut.is_none() {
            return None;
        }
        let last_end = cur.end;
        let (mut ends, mut cummax, mut states) = (Vec::new(), Vec::new(), Vec::new());
        let (mut carry, mut max) = (0u64, 0u64);
        for &i in &chain {
            let s = stretches[i].as_ref()?;
            for (j, &(off, m)) in s.rounds.iter().enumerate() {
                // the records after the stretch before's last round end are this first round's
                max = max.max(if j == 0 { m.max(carry) } else { m });
                ends.push(off);
                cummax.push(max);
            }
            carry = if s.rounds.is_empty() { carry.max(s.tail_max) } else { s.tail_max };
            states.extend_from_slice(&s.states);
        }
        let flushes = Flushes { ends, cummax };
        // chunk boundaries: the first round end at or after each share of the region (a
        // round end at 0 begins the first chunk)
        let mut bounds = vec![0usize];
        for k in 1..count {
            let target = k * len / count;
            let r = flushes.ends.partition_point(|&e| e < target);
            match flushes.ends.get(r) {
                Some(&e) if e > *bounds.last().unwrap() && e < last_end => bounds.push(e),
                _ => {}
            }
        }
        let mut chunks = Vec::with_capacity(bounds.len());
        for (k, &start) in bounds.iter().enumerate() {
            let end = bounds.get(k + 1).copied();
            let from = if start == 0 {
                None
            } else {
                let a = flushes.ends.binary_search(&start).ok()?;
                // from the start of the round before the one that ends where the chunk begins
                let (from, max) = if a >= 2 { (flushes.ends[a - 2] + 8, flushes.cummax[a - 2]) } else { (0, 0) };
                Some(Resume { at: start, from, max })
            };
            let last_flush = match end {
                Some(e) => Some(flushes.ends.binary_search(&e).ok()? as u32),
                None => None,
            };
            let lo = states.partition_point(|s| s.0 < start);
            let hi = end.map_or(states.len(), |e| states.partition_point(|s| s.0 < e));
            chunks.push(Chunk { from, to: end, last_flush, states: lo..hi });
        }
        Some(Plan { flushes, states, chunks })
    }
}

/// Which parts' histories are built: a later part's reader waits for those before it. A
/// thread that panics building one marks it failed (its guard), so that none waits forever.
struct Ready {
    state: Mutex<Vec<u8>>,
    cv: Condvar,
}

const PENDING: u8 = 0;
const BUILT: u8 = 1;
const FAILED: u8 = 2;

impl Ready {
    fn new(n: usize) -> Self {
        Ready { state: Mutex::new(vec![PENDING; n]), cv: Condvar::new() }
    }

    fn set(&self, i: usize, v: u8) {
        self.state.lock().unwrap_or_else(|e| e.into_inner())[i] = v;
        self.cv.notify_all();
    }

    /// Waits for the histories of the parts before `k`: false when one failed.
    fn wait(&self, k: usize) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if s[..k].contains(&FAILED) {
                return false;
            }
            if s[..k].iter().all(|&v| v == BUILT) {
                return true;
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Marks part `i`'s history failed unless it was built.
struct Building<'r> {
    ready: &'r Ready,
    i: usize,
    built: bool,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        self.ready.set(self.i, if self.built { BUILT } else { FAILED });
    }
}

/// The result of one file read on several threads: the first part's decoder with every
/// other part merged into it, and why the records stopped early, when they did. None
/// when the file is not read in parts (fewer than two, a guess of where a part begins was
/// wrong, a compressed record) or the parts cannot be merged exactly: the caller reads the
/// file on one thread. With `KPERFDIFF_TRACE_PARTS` set, each part's samples are written to
/// stderr.
#[allow(clippy::too_many_arguments)]
pub fn read<'o, T: ByteOrder + 'o>(
    name: &str,
    data: &'o [u8],
    mapped: Option<(&memmap2::Mmap, &std::fs::File)>,
    span: (usize, usize),
    events: &'o Events,
    opts: &'o Options,
    kallsyms: &Option<Arc<Kallsyms>>,
    build_ids: &BuildIds,
    threads: usize,
    clock: &Clock,
) -> Result<Option<(Decoder<'o>, Option<Cut>)>, Error> {
    let clock = *clock;
    let region = &data[span.0..span.1];
    let len = region.len();
    // 1. the index: thread i walks from its guess at the first round end at or after i/n of the region
    let stretches = index_stretches::<T>(region, mapped, span.0, events, threads, &clock);
    let plan = Plan::new(&stretches, len, threads * CHUNKS_PER_THREAD);
    drop(stretches); // their state records are the plan's now
    let Some(plan) = plan else {
        clock.mark(format_args!("index: not read in parts (a part's start unconfirmed, or compressed records)"));
        return Ok(None);
    };
    let n = plan.chunks.len();
    clock.mark(format_args!("index: {n} chunks, {} rounds", plan.flushes.ends.len()));
    if n < 2 {
        return Ok(None);
    }
    // 2 and 3: the threads build the chunks' histories, then read runs of chunks
    let threads = threads.min(n);
    let hists: Arc<Vec<OnceLock<History>>> = Arc::new((0..n).map(|_| OnceLock::new()).collect());
    let ready = Ready::new(n);
    let names = opts.by_process || opts.filter.comms.is_some();
    let shared = opts.share.clone().unwrap_or_else(|| Arc::new(SharedSyms::default()));
    // each thread's share of the chunks still to read: (next, end)
    let shares: Vec<Mutex<(usize, usize)>> = (0..threads).map(|t| Mutex::new((t * n / threads, (t + 1) * n / threads))).collect();
    let next_history = std::sync::atomic::AtomicUsize::new(0);
    let blocks = Blocks::new();
    // each run's caches: a share of one reader's (`aggregate::memo_divisor`)
    let share = crate::aggregate::memo_divisor(threads);
    // each thread's result: the samples of the runs it read (or the error of one)
    let results: Vec<Result<u64, Error>> = crate::spread::on_threads(threads, |t| {
        // the histories (of every chunk but the last), taken in turn
        loop {
            let c = next_history.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if c + 1 >= n {
                break;
            }
            let mut guard = Building { ready: &ready, i: c, built: false };
            let ch = &plan.chunks[c];
            let h = History::build::<T>(region, &plan.states[ch.states.clone()], &plan.flushes,
                                        ch.last_flush, names);
            let _ = hists[c].set(h);
            guard.built = true;
        }
        clock.mark(format_args!("thread {t}: histories built"));
        let mut samples = 0;
        let mut first = take(&shares[t]);
        while let Some(c) = first.take().or_else(|| steal(&shares, t)) {
            let mut syms = Symbols::new(opts, kallsyms.clone(), build_ids.clone(), share);
            syms.shared = Some(shared.clone());
            let mut dec = Decoder::new(events, syms, opts, share);
            if c > 0 {
                if !ready.wait(c) {
                    return Ok(samples); // a history failed: its thread's panic comes out of the join
                }
                let prefix = Arc::new(Prefix::<T>::new(hists.clone(), c, region, &mut dec.syms));
                for off in prefix.kernel_records() {
                    let ty = T::read_u32(&region[off..off + 4]);
                    let misc = T::read_u16(&region[off + 4..off + 6]);
                    let body = &region[off + 8..off + T::read_u16(&region[off + 6..off + 8]) as usize];
                    dec.replay::<T>(ty, misc, body, events.attr_index::<T>(ty, body));
                }
                dec.syms.procs.prefix = Some(prefix.clone() as Arc<dyn crate::procmaps::Earlier + 'o>);
                if let Some(c) = &mut dec.comms {
                    c.attach(prefix);
                }
            }
            clock.mark(format_args!("thread {t}: run from chunk {c} set up"));
            // the run goes on into the next chunk of this thread's share while there is one
            let mut cur = c;
            let ends = |pos: usize| {
                if plan.chunks[cur].to != Some(pos) {
                    return false;
                }
                let mut share = shares[t].lock().unwrap_or_else(|e| e.into_inner());
                if share.0 == cur + 1 && share.0 < share.1 {
                    share.0 += 1;
                    cur += 1;
                    false
                } else {
                    true
                }
            };
            let part = order::Part { from: plan.chunks[c].from, ends };
            let cut = order::read_mapped::<T, _, _>(name, data, mapped.map(|m| m.0), span, events, part, &mut dec)?;
            dec.syms.run_done();
            dec.agg.run_done();
            dec.syms.procs.prefix = None;
            if let Some(c) = &mut dec.comms {
                c.prefix = None;
            }
            clock.mark(format_args!("thread {t}: run from chunk {c} read ({} samples, {} chain parts symbolized)",
                                    dec.counts.samples, dec.agg.symbolized_parts()));
            samples += dec.counts.samples;
            blocks.put(c, Block { end: cur + 1, dec, cut });
        }
        blocks.merge_neighbours(t, &clock); // nothing left to read: merge while the others read
        Ok(samples)
    });
    clock.mark(format_args!("every chunk read"));
    // the caches the runs kept for runs to come: none is to come (freed after the read, `cleanup`)
    crate::cleanup::later((crate::aggregate::SPARE_MEMOS.drain(), crate::symbolize::SPARE_SLOTS.drain()));
    let Some(level) = in_order(results, blocks, n)? else {
        return Ok(None);
    };
    let merged = merge_tree(level, &clock);
    clock.mark(format_args!("parts merged"));
    Ok(merged)
}

/// Step 1 of [`read`]: each of `threads` threads indexes the stretch from its guess at the first
/// round end at or after its share of the region (the first from the start).
fn index_stretches<T: ByteOrder>(
    region: &[u8],
    mapped: Option<(&memmap2::Mmap, &std::fs::File)>,
    base: usize,
    events: &Events,
    threads: usize,
    clock: &Clock,
) -> Vec<Option<Stretch>> {
    let clock = *clock;
    let len = region.len();
    let reach: Vec<usize> = (1..threads).map(|i| i * len / threads).collect();
    crate::spread::on_threads(threads, |i| {
        let start = if i == 0 { Some(0) } else { order::find_round::<T>(region, reach[i - 1]) };
        let s = start.map(|s| order::index::<T>(region, mapped, base, events, s, reach.get(i).copied()));
        clock.mark(format_args!("stretch {i}: indexed"));
        s
    })
}

/// Readers of consecutive parts of the file, in order, and where each stopped early (when it did).
type Level<'o> = Vec<(Decoder<'o>, Option<Cut>)>;

/// The blocks of runs left, in chunk order, ready to merge: None when a chunk is missing (a history
/// failed), a run cannot be merged exactly (relocated after samples, an aggregate overflowed) or a
/// merge while reading would have overflowed a total. With `KPERFDIFF_TRACE_PARTS` set, each
/// thread's samples go to stderr.
fn in_order<'o>(results: Vec<Result<u64, Error>>, blocks: Blocks<'o>, n: usize) -> Result<Option<Level<'o>>, Error> {
    let trace = std::env::var_os("KPERFDIFF_TRACE_PARTS").is_some();
    let threads = results.len();
    for (t, r) in results.into_iter().enumerate() {
        let samples = r?;
        if trace {
            // What each thread read (tests check that every thread did work): stderr only.
            eprintln!("kperfdiff reader part {} of {threads}: {samples} samples", t + 1);
        }
    }
    let state = blocks.0.into_inner().unwrap_or_else(|e| e.into_inner());
    if state.failed {
        return Ok(None);
    }
    // every chunk read, once (none is missing when no history failed)
    let mut next = 0;
    let mut level = Vec::with_capacity(state.done.len());
    for (first, b) in state.done {
        if first != next || !b.mergeable() {
            return Ok(None);
        }
        next = b.end;
        level.push((b.dec, b.cut));
    }
    Ok((next == n).then_some(level))
}

/// The runs of a read on threads that are done, as blocks of consecutive chunks: a thread with no
/// chunk left to read merges two neighbours (the earlier absorbing the later, which any order of
/// merges may do: `merge`), while the others read; what is left is merged after (`merge_tree`).
struct Blocks<'o>(Mutex<BlockState<'o>>);

struct BlockState<'o> {
    /// Each block by its first chunk; a block being merged is out of the map.
    done: std::collections::BTreeMap<usize, Block<'o>>,
    /// A merge would have overflowed a total (the file is read on one thread).
    failed: bool,
}

/// Runs of consecutive chunks, merged into one reader's result.
struct Block<'o> {
    /// The chunk after its last.
    end: usize,
    dec: Decoder<'o>,
    cut: Option<Cut>,
}

impl Block<'_> {
    /// Whether its reader can be merged exactly (`merge` takes the totals' overflow into account).
    fn mergeable(&self) -> bool {
        !self.dec.relocated_after_samples && self.dec.agg.overflowed == 0
    }
}

impl<'o> Blocks<'o> {
    fn new() -> Self {
        Blocks(Mutex::new(BlockState { done: std::collections::BTreeMap::new(), failed: false }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BlockState<'o>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, first: usize, b: Block<'o>) {
        self.state().done.insert(first, b);
    }

    /// The result of a merge of the block from chunk `first` (None: it would overflow a total).
    fn put_merged(&self, first: usize, b: Option<Block<'o>>) {
        match b {
            Some(b) => self.put(first, b),
            None => self.state().failed = true,
        }
    }

    /// For thread `t`, which has nothing left to read: merges neighbouring blocks while there are two.
    fn merge_neighbours(&self, t: usize, clock: &Clock) {
        while let Some(((a, first), (b, second))) = self.take_pair() {
            let end = second.end;
            let merged = merge((first.dec, first.cut), Some((second.dec, second.cut)));
            self.put_merged(a, merged.map(|(dec, cut)| Block { end, dec, cut }));
            clock.mark(format_args!("thread {t}: merged the runs from chunks {a} and {b}"));
        }
    }

    /// Two neighbouring blocks that can be merged exactly, taken out of the map (none once a merge
    /// failed).
    #[allow(clippy::type_complexity)]
    fn take_pair(&self) -> Option<((usize, Block<'o>), (usize, Block<'o>))> {
        let mut s = self.state();
        if s.failed {
            return None;
        }
        let mut it = s.done.iter().peekable();
        let mut found = None;
        while let Some((&a, block)) = it.next() {
            if let Some((&b, next)) = it.peek() {
                if block.end == b && block.mergeable() && next.mergeable() {
                    found = Some((a, b));
                    break;
                }
            }
        }
        let (a, b) = found?;
        let first = s.done.remove(&a)?;
        let second = s.done.remove(&b)?;
        Some(((a, first), (b, second)))
    }
}

/// Step 4 of [`read`]: the merge, as a tree: each run absorbs the next, pairs at once, until one is
/// left (in order: absorbing B then C into A gives what absorbing C into B, then that into A,
/// gives); None when a pair cannot be merged exactly.
fn merge_tree<'o>(mut level: Level<'o>, clock: &Clock) -> Option<(Decoder<'o>, Option<Cut>)> {
    while level.len() > 1 {
        let runs = level.len();
        let mut pairs = Vec::with_capacity(level.len() / 2 + 1);
        let mut it = level.into_iter();
        while let Some(a) = it.next() {
            pairs.push((a, it.next()));
        }
        let merged = crate::spread::each(pairs, |_, (a, b)| merge(a, b));
        level = merged.into_iter().collect::<Option<Vec<_>>>()?;
        clock.mark(format_args!("merge level: {runs} runs -> {}", level.len()));
    }
    level.pop()
}

/// While a file is read on several threads: glibc's heaps grow by this much at a time. Each
/// thread allocates from a heap of its own (an arena), which grows by `M_TOP_PAD` (128 KB by
/// default) at a time, with an mprotect that stops every thread faulting a page in: 16 threads
/// made 1,250 of them per read of a 71 MB file; with 32 MB, 38 (measured with strace -f -c),
/// and half the voluntary context switches. Untouched, the pad costs no memory, and the
/// `malloc_trim` after the read gives it back.
const HEAP_PAD: i32 = 32 << 20;

/// `HEAP_PAD` for the life of the guard (the caller's: kallsyms is parsed on the threads too), then glibc's default again (unless the environment
/// sets the pad, `MALLOC_TOP_PAD_`: then it is left alone).
pub struct HeapPad(bool);

impl HeapPad {
    pub fn set() -> HeapPad {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if std::env::var_os("MALLOC_TOP_PAD_").is_none() {
            // SAFETY: mallopt only sets a parameter of the allocator; it takes no pointers.
            unsafe { libc::mallopt(libc::M_TOP_PAD, HEAP_PAD) };
            return HeapPad(true);
        }
        HeapPad(false)
    }
}

impl Drop for HeapPad {
    fn drop(&mut self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if self.0 {
            // SAFETY: as above; 128 KB is glibc's DEFAULT_TOP_PAD.
            unsafe { libc::mallopt(libc::M_TOP_PAD, 128 << 10) };
        }
    }
}

/// The next chunk of a share, taken.
fn take(share: &Mutex<(usize, usize)>) -> Option<usize> {
    let mut s = share.lock().unwrap_or_else(|e| e.into_inner());
    (s.0 < s.1).then(|| {
        s.0 += 1;
        s.0 - 1
    })
}

/// For thread `t`, whose share is done: the back half of the share with the most chunks left
/// (all of it when one is left: its owner is reading another), which becomes `t`'s share; its
/// first chunk, taken.
fn steal(shares: &[Mutex<(usize, usize)>], t: usize) -> Option<usize> {
    loop {
        let left = |s: &Mutex<(usize, usize)>| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.1 - s.0
        };
        let (victim, most) = (0..shares.len()).filter(|&v| v != t).map(|v| (v, left(&shares[v]))).max_by_key(|e| e.1)?;
        if most == 0 {
            return None;
        }
        let (from, to) = {
            let mut s = shares[victim].lock().unwrap_or_else(|e| e.into_inner());
            if s.1 == s.0 {
                continue; // its owner got there first: look again
            }
            let mid = s.0 + (s.1 - s.0) / 2;
            let to = s.1;
            s.1 = mid;
            (mid, to)
        };
        *shares[t].lock().unwrap_or_else(|e| e.into_inner()) = (from + 1, to);
        return Some(from);
    }
}

/// Part `a` with the part after it, `b`, absorbed (`a` alone without one); None when a total
/// would overflow (the file is read on one thread, which skips the samples that would).
fn merge<'o>(a: (Decoder<'o>, Option<Cut>), b: Option<(Decoder<'o>, Option<Cut>)>) -> Option<(Decoder<'o>, Option<Cut>)> {
    let (mut first, first_cut) = a;
    let Some((dec, cut)) = b else {
        return Some((first, first_cut));
    };
    let Decoder { mut syms, agg, counts, mut comms, .. } = dec;
    let sym_map = first.syms.absorb(&mut syms);
    let comm_map = match (&mut first.comms, &mut comms) {
        (Some(mine), Some(theirs)) => mine.absorb(theirs),
        _ => Vec::new(),
    };
    let merged = first.agg.absorb(&agg, &sym_map, &comm_map);
    // what the part leaves behind is freed after the read (`cleanup`)
    crate::cleanup::later((syms.leftovers(), agg));
    if !merged {
        return None;
    }
    first.counts.absorb(&counts);
    Some((first, first_cut.or(cut)))
}
