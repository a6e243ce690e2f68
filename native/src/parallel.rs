//! One file on several threads: its records split into consecutive parts at FINISHED_ROUND
//! records, each part read by a thread of its own, and the parts' profiles merged into
//! exactly what one reader of the whole file gives.
//!
//! 1. Index, on every thread: thread i finds the first FINISHED_ROUND at or after its share's
//!    start (`order::find_round`, a guess from the bytes) and walks the record headers from
//!    there to the first FINISHED_ROUND at or after the next share's start
//!    (`order::index`): where the rounds end, the latest time in each, where the state
//!    records (mappings, exec, fork, names) lie. The walk of the thread before confirms the
//!    guess: it must end exactly where the next walk began (`Plan::new`); otherwise the
//!    file is read on one thread.
//! 2. History, on every thread: what its part's state records do, in the order one reader
//!    applies them (`history::History`).
//! 3. Read, on every thread: a later part's reader resumes where one reader would be after
//!    the flush its part begins with (`order::Resume`: the round before it pending, the
//!    latest time so far), and asks the histories of the parts before it for a process's
//!    mappings or a thread's name the first time it meets one (`history::Prefix`).
//! 4. Merge: symbols, stacks and names get their ids in order of first appearance; since
//!    the parts are consecutive stretches of one reader's order, merging each part's
//!    tables into the earlier parts' in part order gives the ids one reader would
//!    (`Symbols::absorb`, `Aggregator::absorb`, `Comms::absorb`), and so does merging
//!    neighbours pairwise, on threads, level by level. Sums are sums. What cannot be merged
//!    so (the kernel's symbols moving after samples were read, or a total overflowing) makes
//!    the caller read the file on one thread.
//!
//! No thread replays what comes before its part: the work is the same on any number of
//! threads, but for the walk of the round before each part, the processes and threads a
//! part meets that were made before it, and each thread's set-up and its cold caches.
use crate::decode::Decoder;
use crate::error::Error;
use crate::header::{BuildIds, Events};
use crate::history::{Flushes, History, Prefix};
use crate::kallsyms::Kallsyms;
use crate::options::Options;
use crate::order::{self, Cut, Part, RecordSink, Resume, Stretch};
use crate::symbolize::{SharedSyms, Symbols};
use crate::timing::Clock;
use byteorder::ByteOrder;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Each thread's part is at least this large: a thread's set-up (its tables and caches,
/// about 1 ms) and the processes it meets that were made before its part cost more than a
/// smaller part saves. Measured on the four recording shapes of `benchmarks/shapes.py` and
/// the 71 MB recording of docs/figures.md: see `threads_for`.
const MIN_PART_BYTES: usize = 8 << 20;

/// `MIN_PART_BYTES`, or the environment's `KPERFDIFF_PARALLEL_MIN_BYTES` (tests read small
/// files on several threads with it, to hold every fixture to one thread's output).
pub fn min_part_bytes() -> usize {
    std::env::var("KPERFDIFF_PARALLEL_MIN_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(MIN_PART_BYTES)
}

/// How many threads read `len` bytes of records when `asked` may: one per `min_part_bytes`,
/// at most `asked`.
pub fn threads_for(len: usize, asked: usize) -> usize {
    let per = min_part_bytes().max(1);
    asked.min(len / per).max(1)
}

/// The parts of a file read on several threads, and the rounds that order its records.
struct Plan {
    flushes: Flushes,
    parts: Vec<PartPlan>,
}

struct PartPlan {
    /// Its stretch in the index.
    stretch: usize,
    part: Part,
    /// The flush it ends with (None: it runs to the end).
    last_flush: Option<u32>,
}

impl Plan {
    /// The parts, when the stretches chain into the whole region (each begins where the one
    /// before ends, the last reaches the end or a record that cannot be read); None when a
    /// guess was wrong or a record is compressed (the caller reads the file on one thread).
    fn new(stretches: &[Option<Stretch>]) -> Option<Plan> {
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
        let (mut ends, mut cummax) = (Vec::new(), Vec::new());
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
        }
        let flushes = Flushes { ends, cummax };
        let mut parts = Vec::new();
        for &i in &chain {
            let s = stretches[i].as_ref()?;
            if s.end == s.start {
                continue;
            }
            // a part at the region's start reads from there (and counts a round ending at 0)
            let from = if s.start == 0 {
                None
            } else {
                let a = flushes.ends.binary_search(&s.start).ok()?;
                // from the start of the round before the one that ends where the part begins
                let (from, max) = if a >= 2 { (flushes.ends[a - 2] + 8, flushes.cummax[a - 2]) } else { (0, 0) };
                Some(Resume { at: s.start, from, max })
            };
            let (to, last_flush) = if s.end_is_round {
                (Some(s.end), Some(flushes.ends.binary_search(&s.end).ok()? as u32))
            } else {
                (None, None)
            };
            parts.push(PartPlan { stretch: i, part: Part { from, to }, last_flush });
        }
        Some(Plan { flushes, parts })
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
pub fn read<'o, T: ByteOrder>(
    name: &str,
    data: &[u8],
    map: Option<&memmap2::Mmap>,
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
    let reach: Vec<usize> = (1..threads).map(|i| i * len / threads).collect();
    let stretches: Vec<Option<Stretch>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let reach = &reach;
                scope.spawn(move || {
                    let start = if i == 0 { Some(0) } else { order::find_round::<T>(region, reach[i - 1]) };
                    let s = start.map(|s| order::index::<T>(region, map, span.0, events, s, reach.get(i).copied()));
                    clock.mark(format_args!("stretch {i}: indexed"));
                    s
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let Some(plan) = Plan::new(&stretches) else {
        clock.mark(format_args!("index: not read in parts (a part's start unconfirmed, or compressed records)"));
        return Ok(None);
    };
    let n = plan.parts.len();
    clock.mark(format_args!("index: {n} parts, {} rounds", plan.flushes.ends.len()));
    if n < 2 {
        return Ok(None);
    }
    // 2 and 3: each thread builds its part's history, then reads its part
    let hists: Arc<Vec<OnceLock<History>>> = Arc::new((0..n).map(|_| OnceLock::new()).collect());
    let ready = Ready::new(n);
    let names = opts.by_process || opts.filter.comms.is_some();
    let shared = Arc::new(SharedSyms::default());
    let results: Vec<Result<Option<(Decoder<'o>, Option<Cut>)>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = plan
            .parts
            .iter()
            .enumerate()
            .map(|(i, pp)| {
                let (hists, ready, plan, stretches, shared) = (hists.clone(), &ready, &plan, &stretches, shared.clone());
                scope.spawn(move || {
                    if i + 1 < n {
                        let mut guard = Building { ready, i, built: false };
                        let states = &stretches[pp.stretch].as_ref().expect("a chained stretch").states;
                        let h = History::build::<T>(region, states, &plan.flushes, pp.last_flush, names);
                        let _ = hists[i].set(h);
                        guard.built = true;
                        clock.mark(format_args!("part {i}: history of {} state records", states.len()));
                    }
                    let mut syms = Symbols::new(opts, kallsyms.clone(), build_ids.clone());
                    syms.shared = Some(shared);
                    let mut dec = Decoder::new(events, syms, opts);
                    if i > 0 {
                        if !ready.wait(i) {
                            return Ok(None); // a history failed: its thread's panic comes out of the join
                        }
                        let prefix = Arc::new(Prefix::new(hists.clone(), i, &mut dec.syms));
                        for off in prefix.kernel_records() {
                            let ty = T::read_u32(&region[off..off + 4]);
                            let misc = T::read_u16(&region[off + 4..off + 6]);
                            let body = &region[off + 8..off + T::read_u16(&region[off + 6..off + 8]) as usize];
                            dec.replay::<T>(ty, misc, body, events.attr_index::<T>(ty, body));
                        }
                        dec.syms.procs.prefix = Some(prefix.clone() as Arc<dyn crate::procmaps::Earlier>);
                        if let Some(c) = &mut dec.comms {
                            c.attach(prefix);
                        }
                        clock.mark(format_args!("part {i}: set up, prefix ready"));
                    }
                    let cut = order::read_mapped::<T, _>(name, data, map, span, events, pp.part, &mut dec)?;
                    dec.syms.procs.prefix = None;
                    if let Some(c) = &mut dec.comms {
                        c.prefix = None;
                    }
                    clock.mark(format_args!("part {i}: read ({} samples, {} chain parts symbolized, {} KB)", dec.counts.samples,
                                            dec.agg.symbolized_parts(), (pp.part.to.unwrap_or(len) - pp.part.from.map_or(0, |r| r.at)) >> 10));
                    Ok(Some((dec, cut)))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    clock.mark(format_args!("every part read"));
    let trace = std::env::var_os("KPERFDIFF_TRACE_PARTS").is_some();
    let mut level: Vec<(Decoder<'o>, Option<Cut>)> = Vec::with_capacity(n);
    for (i, r) in results.into_iter().enumerate() {
        let Some((dec, cut)) = r? else {
            return Ok(None);
        };
        if trace {
            // What each thread read (tests check that every part did work): stderr only.
            eprintln!("kperfdiff reader part {} of {n}: {} samples", i + 1, dec.counts.samples);
        }
        if dec.relocated_after_samples || dec.agg.overflowed > 0 {
            return Ok(None);
        }
        level.push((dec, cut));
    }
    // 4. the merge, as a tree: each part absorbs the next, pairs at once, until one is left (in
    // order: absorbing B then C into A gives what absorbing C into B, then that into A, gives)
    while level.len() > 1 {
        let mut pairs = Vec::with_capacity(level.len() / 2 + 1);
        let mut it = level.into_iter();
        while let Some(a) = it.next() {
            pairs.push((a, it.next()));
        }
        let merged: Vec<Option<(Decoder<'o>, Option<Cut>)>> = std::thread::scope(|scope| {
            let mut pairs = pairs.into_iter();
            let here = pairs.next();
            let handles: Vec<_> = pairs.map(|(a, b)| scope.spawn(move || merge(a, b))).collect();
            let mut out = vec![here.and_then(|(a, b)| merge(a, b))];
            out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
            out
        });
        level = match merged.into_iter().collect::<Option<Vec<_>>>() {
            Some(l) => l,
            None => return Ok(None),
        };
    }
    let merged = level.pop();
    clock.mark(format_args!("parts merged"));
    Ok(merged)
}

/// Part `a` with the part after it, `b`, absorbed (`a` alone without one); None when a total
/// would overflow (the file is read on one thread, which skips the samples that would).
fn merge<'o>(a: (Decoder<'o>, Option<Cut>), b: Option<(Decoder<'o>, Option<Cut>)>) -> Option<(Decoder<'o>, Option<Cut>)> {
    let (mut first, first_cut) = a;
    let Some((dec, cut)) = b else {
        return Some((first, first_cut));
    };
    let Decoder { syms, agg, counts, comms, .. } = dec;
    let sym_map = first.syms.absorb(syms);
    let comm_map = match (&mut first.comms, comms) {
        (Some(mine), Some(theirs)) => mine.absorb(theirs),
        _ => Vec::new(),
    };
    if !first.agg.absorb(agg, &sym_map, &comm_map) {
        return None;
    }
    first.counts.absorb(&counts);
    Some((first, first_cut.or(cut)))
}
