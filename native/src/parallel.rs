//! One file on several threads: its records split into consecutive parts at
//! FINISHED_ROUND records (`order::Part`), each part read by a thread of its own, and
//! the parts' profiles merged into exactly what one reader of the whole file gives.
//!
//! Every thread walks the file from its start: before its part it only replays the
//! records that change what samples resolve to (mappings, exec, fork, names), in the
//! order one reader would apply them, so that its part resolves the same. Symbols,
//! stacks and names get their ids in order of first appearance; since the parts are
//! consecutive stretches of one reader's order, merging each part's tables into the
//! earlier parts' in part order gives the ids one reader would (`Symbols::absorb`,
//! `Aggregator::absorb`, `Comms::absorb`). Sums are sums. What cannot be merged so
//! (the kernel's symbols moving after samples were read, or a total overflowing) makes
//! the caller read the file on one thread.
use crate::decode::Decoder;
use crate::error::Error;
use crate::header::{BuildIds, Events};
use crate::kallsyms::Kallsyms;
use crate::options::Options;
use crate::order::{self, Cut, Part};
use crate::symbolize::Symbols;
use byteorder::ByteOrder;
use std::sync::Arc;

/// Files smaller than this are read on one thread: the threads' set-up would cost more.
const MIN_BYTES: usize = 16 << 20;

/// `MIN_BYTES`, or the environment's `KPERFDIFF_PARALLEL_MIN_BYTES` (tests read small
/// files on several threads with it, to hold every fixture to one thread's output).
pub fn min_bytes() -> usize {
    std::env::var("KPERFDIFF_PARALLEL_MIN_BYTES").ok().and_then(|v| v.parse().ok()).unwrap_or(MIN_BYTES)
}

/// What replaying a stretch of the file costs, against reading it in full (measured on
/// the four recording shapes of `benchmarks/shapes.py`: 0.22-0.28). The parts are sized so
/// that every thread has the same work: the later ones replay more before their part.
const REPLAY_COST: f64 = 0.25;

/// The region offsets where each part after the first begins (`threads - 1` of them),
/// so that each thread's replay and part take the same time.
pub fn boundaries(len: usize, threads: usize) -> Vec<usize> {
    // Thread i reads x_i..x_{i+1} in full after replaying 0..x_i: x_{i+1} - x_i + r x_i
    // is the same c for every i, so x_{i+1} = c + (1 - r) x_i, from x_0 = 0.
    let r = REPLAY_COST;
    let mut x = vec![0.0f64];
    for i in 0..threads {
        x.push(1.0 + (1.0 - r) * x[i]);
    }
    let total = x[threads];
    x[1..threads].iter().map(|&v| (v / total * len as f64) as usize).collect()
}

/// The result of one file read on several threads: the first part's decoder with every
/// other part merged into it, and why the records stopped early, when they did. None
/// when the parts cannot be merged exactly (the caller reads the file on one thread).
/// With `KPERFDIFF_TRACE_PARTS` set, each part's samples are written to stderr.
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
) -> Result<Option<(Decoder<'o>, Option<Cut>)>, Error> {
    let cuts = boundaries(span.1 - span.0, threads);
    let parts: Vec<Part> = (0..threads)
        .map(|i| Part { from: i.checked_sub(1).map(|j| cuts[j]), to: cuts.get(i).copied() })
        .collect();
    let results: Vec<Result<(Decoder<'o>, Option<Cut>), Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|&part| {
                scope.spawn(move || {
                    let syms = Symbols::new(opts, kallsyms.clone(), build_ids.clone());
                    let mut dec = Decoder::new(events, syms, opts);
                    let cut = order::read_mapped::<T, _>(name, data, map, span, events, part, &mut dec)?;
                    Ok((dec, cut))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let trace = std::env::var_os("KPERFDIFF_TRACE_PARTS").is_some();
    let mut merged: Option<(Decoder<'o>, Option<Cut>)> = None;
    for (i, r) in results.into_iter().enumerate() {
        let (dec, cut) = r?;
        if matches!(cut, Some(Cut::RoundTooLong)) {
            return Ok(None);
        }
        if trace {
            // What each thread read (tests check that every part did work): stderr only.
            eprintln!("kperfdiff reader part {} of {threads}: {} samples", i + 1, dec.counts.samples);
        }
        if dec.relocated_after_samples || dec.agg.overflowed > 0 {
            return Ok(None);
        }
        merged = match merged {
            None => Some((dec, cut)),
            Some((mut first, first_cut)) => {
                let Decoder { syms, agg, counts, comms, .. } = dec;
                let sym_map = first.syms.absorb(syms);
                let comm_map = match (&mut first.comms, comms) {
                    (Some(mine), Some(theirs)) => mine.absorb(theirs),
                    _ => Vec::new(),
                };
                if !first.agg.absorb(agg, &sym_map, &comm_map) {
                    return Ok(None);
                }
                first.counts.absorb(&counts);
                Some((first, first_cut.or(cut)))
            }
        };
    }
    Ok(merged)
}
