//! Decoding the records, in order: a SAMPLE into its event, stack and weight;
//! MMAP, MMAP2, COMM and FORK into the processes' mappings (and, when samples are
//! aggregated per process, COMM and FORK into the threads' names); LOST and
//! LOST_SAMPLES into counts.
//!
//! Non-sample records are parsed with `linux-perf-event-reader`. SAMPLE
//! records are parsed here: linux-perf-event-reader 0.10.2 swaps the grouped
//! and single layouts of the PERF_SAMPLE_READ values and drops the
//! PERF_FORMAT_LOST flag (its `ReadFormat` has no such bit and attrs are
//! parsed with `from_bits_truncate`), so group-sampled files (`-e '{a,b}:S'`)
//! fail or lose their samples. We read `sample_type` / `read_format` raw from
//! the attr section and parse the sample body ourselves;
//! `crate_sample_read_defect()` checks whether the crate still has the defect.
use crate::abi::*;
use crate::aggregate::Aggregator;
use crate::comms::Comms;
use crate::header::{Events, FixedSample};
use crate::options::{Options, SampleFilter};
use crate::order::{changes_state, RecordSink};
use crate::symbolize::Symbols;
use byteorder::ByteOrder;
use linux_perf_event_reader::{CommOrExecRecord, ForkOrExitRecord, Mmap2FileId, Mmap2Record, MmapRecord, RawData};
use rustc_hash::{FxHashMap, FxHashSet};
use std::borrow::Cow;

/// What the records held besides the profile.
pub struct Counts {
    /// Records by type (127: every type from 127 up).
    pub records: [u64; 128],
    pub samples: u64,
    /// SAMPLE records too short for their sample_type, skipped.
    pub malformed: u64,
    /// MMAP2 records with an impossible build id, skipped.
    pub malformed_other: u64,
    /// Read values below their previous one (damaged), skipped.
    pub read_backwards: u64,
    /// Read values of an event id no attribute has, skipped.
    pub unknown_ids: u64,
    pub lost_events: u64,
    pub lost_samples: u64,
    /// Samples the sample filter dropped (`options::SampleFilter`).
    pub filtered_out: u64,
}

impl Counts {
    /// Adds another reader's counts (of another part of the same file: `parallel`).
    pub fn absorb(&mut self, o: &Counts) {
        for (a, b) in self.records.iter_mut().zip(o.records.iter()) {
            *a += b;
        }
        self.samples += o.samples;
        self.malformed += o.malformed;
        self.malformed_other += o.malformed_other;
        self.read_backwards += o.read_backwards;
        self.unknown_ids += o.unknown_ids;
        self.lost_events += o.lost_events;
        self.lost_samples += o.lost_samples;
        self.filtered_out += o.filtered_out;
    }
}

/// The decoding state; the sink of `order`.
pub struct Decoder<'a> {
    events: &'a Events,
    pub syms: Symbols<'a>,
    pub agg: Aggregator,
    pub counts: Counts,
    /// The last value read of each event id (PERF_SAMPLE_READ).
    read_storage: FxHashMap<u64, u64>,
    /// Ids whose next value only restarts counting (after one that went backwards).
    read_resync: FxHashSet<u64>,
    /// The threads' names, when samples are also aggregated per process or filtered by comm.
    pub comms: Option<Comms<'a>>,
    /// Whether samples are aggregated per process (`comms` may also serve the filter alone).
    by_process: bool,
    /// Which samples to keep (None: every one).
    filter: Option<&'a SampleFilter>,
    /// Whether the kernel's symbols moved after samples were resolved (a part of a file
    /// read on several threads could not be merged: `parallel`).
    pub relocated_after_samples: bool,
}

/// Where a SAMPLE's fields are.
struct Sample<'b> {
    ip: u64,
    pid: i32,
    tid: i32,
    cpu: Option<u32>,
    period: Option<u64>,
    /// PERF_SAMPLE_READ: the offset of the first value, how many, and the
    /// stride between them (group layout only).
    read_at: usize,
    read_nr: u64,
    read_stride: usize,
    /// The PERF_SAMPLE_CALLCHAIN words.
    chain: &'b [u8],
}

impl<'a> Decoder<'a> {
    /// `opts.by_process`: also aggregate each event's stacks per process name (see `comms`);
    /// `opts.filter`: keep only the samples it keeps; `memo_divisor`: see `aggregate::memo_divisor`.
    pub fn new(events: &'a Events, syms: Symbols<'a>, opts: &'a Options, memo_divisor: usize) -> Self {
        let by_process = opts.by_process;
        let filter = opts.filter.active().then_some(&opts.filter);
        Decoder {
            events,
            syms,
            agg: Aggregator::new(events.len(), memo_divisor),
            counts: Counts {
                records: [0; 128],
                samples: 0,
                malformed: 0,
                malformed_other: 0,
                read_backwards: 0,
                unknown_ids: 0,
                lost_events: 0,
                lost_samples: 0,
                filtered_out: 0,
            },
            read_storage: FxHashMap::default(),
            read_resync: Default::default(),
            comms: (by_process || filter.is_some_and(|f| f.comms.is_some())).then(Comms::new),
            by_process,
            filter,
            relocated_after_samples: false,
        }
    }

    #[inline]
    fn sample<T: ByteOrder>(&mut self, misc: u16, body: &[u8], ai: usize) {
        self.counts.samples += 1;
        let events = self.events;
        let a = &events.attrs[ai];
        let (st, rf) = (a.sample_type, a.read_format);
        let parsed = match &a.fixed {
            Some(f) => parse_fixed::<T>(f, body),
            None => parse_sample::<T>(st, rf, body),
        };
        let Some(s) = parsed else {
            self.counts.malformed += 1;
            return;
        };
        let comm = self.comms.as_mut().map(|c| c.of(s.tid));
        if let Some(f) = self.filter {
            let named = |c: &Comms, set: &rustc_hash::FxHashSet<String>| comm.is_some_and(|id| set.contains(c.name(id)));
            if !f.keeps_ids(s.pid, s.tid, s.cpu)
                || f.comms.as_ref().is_some_and(|set| !self.comms.as_ref().is_some_and(|c| named(c, set)))
            {
                self.counts.filtered_out += 1;
                // its read values still move each counter on: the next kept sample weighs what the
                // counter grew since this one, as perf computes it before its filters
                if st & SAMPLE_READ != 0 && rf & FORMAT_ID != 0 {
                    self.deliver_reads::<T>(rf, body, &s, None, None);
                }
                return;
            }
        }
        let comm = if self.by_process { comm } else { None };
        let mode = (misc & 7) as u8;
        let stack = self.agg.resolve_stack::<T>(&mut self.syms, s.pid, mode, s.ip, s.chain);
        if st & SAMPLE_READ != 0 && rf & FORMAT_ID != 0 {
            self.deliver_reads::<T>(rf, body, &s, Some(stack), comm);
        } else {
            let w = match s.period {
                Some(p) => p,
                None if !a.freq && a.period_or_freq > 0 => a.period_or_freq,
                None => 1,
            };
            self.agg.deliver_in(ai, comm, stack, w);
        }
    }

    /// A sample's read values, each weighting its own event by how much it grew (`stack` None: a
    /// sample the filter dropped, whose values are only remembered).
    fn deliver_reads<T: ByteOrder>(&mut self, rf: u64, body: &[u8], s: &Sample, stack: Option<u32>, comm: Option<u32>) {
        let time_words = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as usize + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
        for k in 0..s.read_nr as usize {
            let (v_at, id_at) = if rf & FORMAT_GROUP != 0 {
                let at = s.read_at + k * s.read_stride;
                (at, at + 8)
            } else {
                (s.read_at, s.read_at + 8 + 8 * time_words)
            };
            let value = T::read_u64(&body[v_at..v_at + 8]);
            let id = T::read_u64(&body[id_at..id_at + 8]);
            let Some(ev) = self.events.event_of_id(id) else {
                self.counts.unknown_ids += 1;
                continue;
            };
            let prev = self.read_storage.insert(id, value);
            // A counter never goes back: a value below the previous one is damaged (it
            // would wrap to an enormous weight). It is skipped, and so is the next one,
            // which only restarts counting from a sound value.
            if !self.read_resync.is_empty() && self.read_resync.remove(&id) {
                continue;
            }
            let Some(w) = value.checked_sub(prev.unwrap_or(0)) else {
                self.counts.read_backwards += 1;
                self.read_resync.insert(id);
                continue;
            };
            if w == 0 {
                continue;
            }
            if let Some(stack) = stack {
                self.agg.deliver_in(ev, comm, stack, w);
            }
        }
    }
}

impl Decoder<'_> {
    /// A record that changes the reader's state (a mapping, a thread's name or exec, a
    /// fork). `counted`: whether it is this reader's to count (not a replay).
    #[inline]
    fn state<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], counted: bool) {
        match parse_state::<T>(ty, misc, body) {
            Some(StateOp::Map { pid, start, len, pgoff, path, exec, build_id }) => {
                if self.syms.mmap(pid, start, len, pgoff, &path, exec, build_id) {
                    self.relocated();
                }
            }
            Some(StateOp::BadMap) => self.counts.malformed_other += counted as u64,
            Some(StateOp::Comm { pid, tid, exec, name }) => {
                if exec && pid == tid {
                    self.syms.procs.exec(pid);
                }
                if let Some(c) = &mut self.comms {
                    c.set(tid, &name);
                }
            }
            Some(StateOp::Fork { pid, ppid, tid, ptid }) => {
                if pid != ppid {
                    self.syms.fork(pid, ppid);
                }
                if let Some(c) = &mut self.comms {
                    c.fork(tid, ptid);
                }
            }
            None => {}
        }
    }

    /// The kernel's symbols moved: the stacks already symbolized are stale.
    fn relocated(&mut self) {
        self.agg.forget_raw_chains();
        if self.counts.samples > 0 {
            self.relocated_after_samples = true;
        }
    }
}

impl RecordSink for Decoder<'_> {
    #[inline]
    fn record<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize) {
        self.counts.records[(ty as usize).min(127)] += 1;
        match ty {
            REC_SAMPLE => self.sample::<T>(misc, body, ai),
            _ if changes_state(ty) => self.state::<T>(ty, misc, body, true),
            REC_EXIT => {}
            REC_LOST => {
                if body.len() >= 16 {
                    self.counts.lost_events += T::read_u64(&body[8..16]);
                }
            }
            REC_LOST_SAMPLES => {
                if body.len() >= 8 {
                    self.counts.lost_samples += T::read_u64(&body[0..8]);
                }
            }
            _ => {}
        }
    }

    #[inline]
    fn count(&mut self, ty: u32) {
        self.counts.records[(ty as usize).min(127)] += 1;
    }

    fn replay<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], _ai: usize) {
        self.state::<T>(ty, misc, body, false);
    }
}

/// What a record that changes the reader's state (`changes_state`) says.
pub enum StateOp<'b> {
    /// An MMAP or MMAP2 record: a mapping of `path` (pid -1: the kernel's).
    Map { pid: i32, start: u64, len: u64, pgoff: u64, path: Cow<'b, [u8]>, exec: bool, build_id: Option<Vec<u8>> },
    /// An MMAP2 record with an impossible build id: skipped (and counted as malformed).
    BadMap,
    /// A COMM record: thread `tid` is named `name`; `exec` when it comes from an exec.
    Comm { pid: i32, tid: i32, exec: bool, name: Cow<'b, [u8]> },
    /// A FORK record: `pid`/`tid` new, from `ppid`/`ptid`.
    Fork { pid: i32, ppid: i32, tid: i32, ptid: i32 },
}

/// A state record's meaning (`changes_state`): None when it does not parse (it is then
/// ignored) or is of another type. The one parser of these records, for the reader and for
/// the history of what comes before a part (`history`).
#[inline]
pub fn parse_state<T: ByteOrder>(ty: u32, misc: u16, body: &[u8]) -> Option<StateOp<'_>> {
    let raw = RawData::Single(body);
    match ty {
        REC_MMAP => {
            let r = MmapRecord::parse::<T>(raw, misc).ok()?;
            Some(StateOp::Map { pid: r.pid, start: r.address, len: r.length, pgoff: r.page_offset,
                                path: r.path.as_slice(), exec: r.is_executable, build_id: None })
        }
        REC_MMAP2 => {
            // linux-perf-event-reader asserts (panics) on a build id longer than 20 bytes
            if misc & MISC_MMAP_BUILD_ID != 0 && body.get(32).is_some_and(|&n| n > 20) {
                return Some(StateOp::BadMap);
            }
            let r = Mmap2Record::parse::<T>(raw, misc).ok()?;
            let build_id = match r.file_id {
                Mmap2FileId::BuildId(b) => Some(b),
                _ => None,
            };
            // PROT_EXEC
            Some(StateOp::Map { pid: r.pid, start: r.address, len: r.length, pgoff: r.page_offset,
                                path: r.path.as_slice(), exec: r.protection & 4 != 0, build_id })
        }
        REC_COMM => {
            let r = CommOrExecRecord::parse::<T>(raw, misc).ok()?;
            Some(StateOp::Comm { pid: r.pid, tid: r.tid, exec: r.is_execve, name: r.name.as_slice() })
        }
        REC_FORK => {
            let r = ForkOrExitRecord::parse::<T>(raw).ok()?;
            Some(StateOp::Fork { pid: r.pid, ppid: r.ppid, tid: r.tid, ptid: r.ptid })
        }
        _ => None,
    }
}

/// Whom a state record concerns (`history`): the records `parse_state` parses (the same
/// checks of their length), read without their names and paths.
pub enum StateIds {
    /// An MMAP or MMAP2 record of process `pid` (-1: the kernel's), with a build id or not.
    Map { pid: i32, build_id: bool },
    /// A COMM record of thread `tid` of process `pid`, made by an exec or not.
    Comm { pid: i32, tid: i32, exec: bool },
    Fork { pid: i32, ppid: i32, tid: i32, ptid: i32 },
}

/// `parse_state`'s record, whom it concerns only (None for a record it does not parse, or an
/// MMAP2 record with an impossible build id).
#[inline]
pub fn state_ids<T: ByteOrder>(ty: u32, misc: u16, body: &[u8]) -> Option<StateIds> {
    let word = |i: usize| T::read_u32(&body[4 * i..4 * i + 4]) as i32;
    match ty {
        // pid, tid, address, length, page offset
        REC_MMAP if body.len() >= 32 => Some(StateIds::Map { pid: word(0), build_id: false }),
        REC_MMAP2 => {
            let build_id = misc & MISC_MMAP_BUILD_ID != 0;
            if build_id && body.get(32).is_some_and(|&n| n > 20) {
                return None;
            }
            // and the file's id (24 bytes), protection and flags
            (body.len() >= 64).then(|| StateIds::Map { pid: word(0), build_id })
        }
        REC_COMM if body.len() >= 8 => Some(StateIds::Comm { pid: word(0), tid: word(1), exec: misc & MISC_COMM_EXEC != 0 }),
        // and a time
        REC_FORK if body.len() >= 24 => Some(StateIds::Fork { pid: word(0), ppid: word(1), tid: word(2), ptid: word(3) }),
        _ => None,
    }
}

/// The next u64 of a sample body, or `None` from the enclosing function when the body ends first.
macro_rules! next_u64 {
    ($T:ident, $body:ident, $p:ident) => {{
        if $p + 8 > $body.len() {
            return None;
        }
        let v = $T::read_u64(&$body[$p..$p + 8]);
        $p += 8;
        v
    }};
}

/// Where the fields of a SAMPLE body are; `None` when it is too short for its sample_type.
#[inline]
fn parse_sample<T: ByteOrder>(st: u64, rf: u64, body: &[u8]) -> Option<Sample<'_>> {
    let mut p = 0usize;
    if st & SAMPLE_IDENTIFIER != 0 {
        next_u64!(T, body, p);
    }
    let ip = if st & SAMPLE_IP != 0 { next_u64!(T, body, p) } else { 0 };
    let (pid, tid) = if st & SAMPLE_TID != 0 {
        if p + 8 > body.len() {
            return None;
        }
        let v = (T::read_u32(&body[p..p + 4]) as i32, T::read_u32(&body[p + 4..p + 8]) as i32);
        p += 8;
        v
    } else {
        (-1, -1)
    };
    if st & SAMPLE_TIME != 0 {
        next_u64!(T, body, p);
    }
    if st & SAMPLE_ADDR != 0 {
        next_u64!(T, body, p);
    }
    if st & SAMPLE_ID != 0 {
        next_u64!(T, body, p);
    }
    if st & SAMPLE_STREAM_ID != 0 {
        next_u64!(T, body, p);
    }
    let cpu = if st & SAMPLE_CPU != 0 { Some(next_u64!(T, body, p) as u32) } else { None };
    let period = if st & SAMPLE_PERIOD != 0 { Some(next_u64!(T, body, p)) } else { None };
    let (read_at, read_nr, read_stride) = if st & SAMPLE_READ != 0 { parse_read::<T>(rf, body, &mut p)? } else { (0, 0, 0) };
    let chain: &[u8] = if st & SAMPLE_CALLCHAIN != 0 {
        let nr = next_u64!(T, body, p);
        match (nr as usize).checked_mul(8) {
            Some(n) if p + n <= body.len() => &body[p..p + n],
            _ => return None,
        }
    } else {
        &[]
    };
    Some(Sample { ip, pid, tid, cpu, period, read_at, read_nr, read_stride, chain })
}

/// A sample of a fixed layout (no PERF_SAMPLE_READ): what `parse_sample` reads, with one
/// length check for the fields and one for the call chain.
#[inline]
fn parse_fixed<'b, T: ByteOrder>(f: &FixedSample, body: &'b [u8]) -> Option<Sample<'b>> {
    if body.len() < f.len {
        return None;
    }
    let ip = f.ip.map_or(0, |o| T::read_u64(&body[o..o + 8]));
    let pid = f.tid.map_or(-1, |o| T::read_u32(&body[o..o + 4]) as i32);
    let tid = f.tid.map_or(-1, |o| T::read_u32(&body[o + 4..o + 8]) as i32);
    let cpu = f.cpu.map(|o| T::read_u32(&body[o..o + 4]));
    let period = f.period.map(|o| T::read_u64(&body[o..o + 8]));
    let chain: &[u8] = match f.chain {
        Some(o) => {
            let nr = T::read_u64(&body[o..o + 8]);
            match (nr as usize).checked_mul(8) {
                Some(n) if f.len + n <= body.len() => &body[f.len..f.len + n],
                _ => return None,
            }
        }
        None => &[],
    };
    Some(Sample { ip, pid, tid, cpu, period, read_at: 0, read_nr: 0, read_stride: 0, chain })
}

/// PERF_SAMPLE_READ at `*p`: read_format decides the layout (the crate's
/// defect). Returns (offset of the first value, number of values, stride).
#[inline]
fn parse_read<T: ByteOrder>(rf: u64, body: &[u8], p: &mut usize) -> Option<(usize, u64, usize)> {
    let id_words = (rf & FORMAT_ID != 0) as usize;
    let lost_words = (rf & FORMAT_LOST != 0) as usize;
    let time_words = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as usize + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
    if rf & FORMAT_GROUP != 0 {
        let mut q = *p;
        let read_nr = next_u64!(T, body, q);
        q += 8 * time_words;
        let read_at = q;
        let read_stride = 8 * (1 + id_words + lost_words);
        let need = (read_nr as usize).checked_mul(read_stride);
        match need {
            Some(n) if read_nr <= 4096 && q + n <= body.len() => q += n,
            _ => return None,
        }
        *p = q;
        Some((read_at, read_nr, read_stride))
    } else {
        // For the single layout, the id sits after the times.
        let read_at = *p;
        *p += 8 * (1 + time_words + id_words + lost_words);
        if *p > body.len() {
            return None;
        }
        Some((read_at, 1, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::Attr;
    use crate::layout::RawAttr;
    use byteorder::LittleEndian;

    /// The one-check reader of fixed layouts reads what the field-by-field reader does,
    /// for every sample_type without PERF_SAMPLE_READ and bodies of every length.
    #[test]
    fn fixed_layouts_read_as_the_general_parser() {
        let bits = [SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_ID, SAMPLE_STREAM_ID,
                    SAMPLE_CPU, SAMPLE_PERIOD, SAMPLE_CALLCHAIN];
        let words: Vec<u64> = (0..24u64).map(|i| 0x1000 + i * 0x111).collect();
        let mut checked = 0;
        for mask in 0..(1u32 << bits.len()) {
            let st = bits.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1).fold(0, |a, (_, b)| a | b);
            let raw = RawAttr { type_: 1, config: 0, period_or_freq: 1, sample_type: st, read_format: 0, flags: 0,
                                ids: vec![] };
            let attr = Attr::new(&raw, "e".into());
            let fixed = attr.fixed.expect("a layout without PERF_SAMPLE_READ is fixed");
            for nr in [0u64, 3, u64::MAX / 4] {
                let mut w = words.clone();
                if st & SAMPLE_CALLCHAIN != 0 {
                    let at = (fixed.chain.unwrap()) / 8;
                    w[at] = nr;
                }
                let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
                for len in 0..=bytes.len() {
                    let body = &bytes[..len];
                    let a = parse_sample::<LittleEndian>(st, 0, body).map(|s| (s.ip, s.pid, s.tid, s.cpu, s.period, s.chain.to_vec()));
                    let b = parse_fixed::<LittleEndian>(&fixed, body).map(|s| (s.ip, s.pid, s.tid, s.cpu, s.period, s.chain.to_vec()));
                    assert_eq!(a, b, "sample_type {st:#x}, {len} bytes, nr {nr}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000);
    }
}
