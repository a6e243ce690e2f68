//! Records in perf's order: sorted by time within the FINISHED_ROUND windows
//! (only around the records that change what a sample resolves to, unless the
//! order of samples matters too: with PERF_SAMPLE_READ),
//! visited straight from the memory map without copying, and handed to a
//! `RecordSink` (statically dispatched: one instance per byte order).
//!
//! Records are read through a window of the map: the pages ahead are mapped
//! in one call per chunk (fewer page faults) and the pages behind, once no
//! pending record needs them, are released, so the file does not all count
//! in the process's resident memory at the end. Compressed files
//! (perf record -z) go through `linux-perf-data`'s reader, which inflates them.
use crate::abi::{REC_COMM, REC_COMPRESSED, REC_COMPRESSED2, REC_FINISHED_ROUND, REC_FORK, REC_MMAP, REC_MMAP2, REC_SAMPLE};
use crate::error::Error;
use crate::header::{Attr, Events};
use crate::layout::PatchedFile;
use byteorder::ByteOrder;
use linux_perf_data::{PerfFile, PerfFileRecord, PerfRecordIter};

/// Why the records stop before the end of the data (the reason the truncation
/// warning gives).
#[derive(Debug)]
pub enum Cut {
    /// A record's header does not fit before the end (at this byte of the file).
    RecordHeader { at: usize },
    /// A record's size is below its header's 8 bytes.
    ImpossibleSize { at: usize, size: usize },
    /// A record runs past the end.
    Record { at: usize },
    /// The crate's reader of compressed files stopped.
    Unreadable(linux_perf_data::Error),
    /// A reader of a later part (`Part`) replayed the round before its part without the
    /// records it needs (a round longer than `REPLAY_WINDOW`): the file must be read on
    /// one thread. Never a result of a whole file's read.
    RoundTooLong,
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::RecordHeader { at } => write!(f, "a record header is cut at byte {at}"),
            Cut::ImpossibleSize { at, size } => write!(f, "a record at byte {at} has an impossible size {size}"),
            Cut::Record { at } => write!(f, "a record is cut at byte {at}"),
            Cut::Unreadable(e) => write!(f, "a record could not be read ({e})"),
            Cut::RoundTooLong => write!(f, "a round is too long to be read in parts"),
        }
    }
}

/// Where the records go, in order.
pub trait RecordSink {
    /// A kernel record (type below 64) of event `ai`.
    fn record<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize);
    /// A record that is only counted (perf's own, type 64 and up).
    fn count(&mut self, ty: u32);
    /// A record that changes the reader's state (`changes_state`), in a part of the file
    /// another thread reads: its effect on the state, without counting it.
    fn replay<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize) {
        self.record::<T>(ty, misc, body, ai)
    }
}

/// The part of a file's records one reader hands over when several threads read it
/// (`parallel`): the flushes after the first FINISHED_ROUND at or after region offset
/// `from` (all from the start when None) up to the one at the first FINISHED_ROUND at or
/// after `to` (to the end when None). Before its part, a reader only replays the records
/// that change its state (`RecordSink::replay`), so that its part resolves as it would
/// when one reader reads the whole file; after it, it stops. The parts of consecutive
/// readers (one's `to` the next one's `from`) hand every record over exactly once, and
/// count each of perf's own records once (by where they lie in the file).
#[derive(Clone, Copy, Debug, Default)]
pub struct Part {
    pub from: Option<usize>,
    pub to: Option<usize>,
}

/// Before its part, a reader keeps the records that do not change its state only from this
/// far before the part's start: only the records of the round that ends the part before
/// (the round its part's first flush is at) can still be pending when its part begins, and
/// they only while every record of that round is kept, in order. Every record of an earlier
/// round is due at the next round's end at the latest (its time is at most the limit then),
/// so it is gone before any of them could be reordered by it. A round longer than this
/// (rounds are perf's buffers drained once: about 100 KB here) makes the part unreadable
/// (`Cut::RoundTooLong`).
const REPLAY_WINDOW: usize = 32 << 20;

/// `REPLAY_WINDOW`, or the environment's `KPERFDIFF_REPLAY_WINDOW` (tests make it small, so
/// that small files keep only part of what comes before a part, or too little).
fn replay_window() -> usize {
    std::env::var("KPERFDIFF_REPLAY_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(REPLAY_WINDOW)
}

/// Populate the window ahead, and release it behind, by this much.
const WINDOW_CHUNK: usize = 4 << 20;

/// Offsets in the pending list share a u64 with the event index and, in the
/// top bit, whether the record is one that changes the reader's state (`changes_state`).
const PENDING_OFF_BITS: u32 = 40;
const PENDING_OFF_MASK: u64 = (1 << PENDING_OFF_BITS) - 1;
const PENDING_STATE: u64 = 1 << 63;
const PENDING_AI_MASK: u64 = (1 << (63 - PENDING_OFF_BITS)) - 1;

/// The records of a compressed file, in the crate's order. Returns why they
/// stopped early, when they did.
pub fn read_compressed<T: ByteOrder, S: RecordSink>(
    perf_file: &mut PerfFile,
    record_iter: &mut PerfRecordIter<PatchedFile<'_>>,
    sink: &mut S,
) -> Option<Cut> {
    loop {
        match record_iter.next_record(perf_file) {
            Ok(Some(PerfFileRecord::EventRecord { attr_index, record })) => {
                let body = record.data.as_slice();
                let ty = record.record_type.0;
                if ty == REC_SAMPLE || ty < 64 {
                    sink.record::<T>(ty, record.misc, &body, attr_index);
                }
            }
            Ok(Some(PerfFileRecord::UserRecord(r))) => sink.count(r.record_type.record_type().0),
            Ok(None) => return None,
            Err(e) => return Some(Cut::Unreadable(e)),
        }
    }
}

/// The records of `data[off..end]` (a map of the file when `map` is given),
/// in time order. Returns why they stopped early, when they did.
pub fn read_mapped<T: ByteOrder, S: RecordSink>(
    name: &str,
    data: &[u8],
    map: Option<&memmap2::Mmap>,
    (off, end): (usize, usize),
    events: &Events,
    part: Part,
    sink: &mut S,
) -> Result<Option<Cut>, Error> {
    let region = &data[off..end];
    if region.len() as u64 > PENDING_OFF_MASK || events.len() as u64 > PENDING_AI_MASK {
        return Err(Error::TooLarge { name: name.into() });
    }
    let mut window = Window { map, base: off, end, ahead: off, behind: off };
    // Samples add up the same in any order, so among themselves they need none; only
    // the records that change what a sample resolves to (mappings, processes) need
    // their place in time, and the records only counted need none. Read values
    // (PERF_SAMPLE_READ) are differences from the previous sample, so with them every
    // record keeps its place.
    let mut rounds = Rounds::new(events.samples_commute());
    // Whether this reader's part has begun (records are handed over in full and counted).
    let mut full = part.from.is_none();
    // Before its part, the records that do not change the state are kept from here on
    // (REPLAY_WINDOW); and where the last round ended.
    let keep_from = part.from.map_or(0, |f| f.saturating_sub(replay_window()));
    let mut round_start = 0usize;
    let mut pos = 0usize;
    let mut cut = None;
    while pos < region.len() {
        window.populate(pos);
        let (ty, size) = match record_at::<T>(region, pos, off) {
            Ok(h) => h,
            Err(reason) => {
                cut = Some(reason);
                break;
            }
        };
        let body = &region[pos + 8..pos + size];
        if ty == REC_FINISHED_ROUND {
            if full {
                sink.count(REC_FINISHED_ROUND);
            }
            rounds.end_round::<T, S>(region, sink, full);
            // Only pages of its own part are released: the part before is another reader's.
            if window.map.is_some() && full {
                window.release(rounds.oldest().unwrap_or(pos));
            }
            // The part begins after the flush at the first round's end at or after `from`
            // and ends with the one at or after `to` (at once, when that is the same).
            if !full && part.from.is_some_and(|f| pos >= f) {
                if round_start < keep_from {
                    return Ok(Some(Cut::RoundTooLong));
                }
                full = true;
                window.behind = window.behind.max((window.base + pos + WINDOW_CHUNK - 1) & !(WINDOW_CHUNK - 1));
            }
            round_start = pos;
            if full && part.to.is_some_and(|t| pos >= t) {
                return Ok(None);
            }
        } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
            return Err(Error::UndeclaredCompression { name: name.into() });
        } else if ty >= 64 {
            if full {
                sink.count(ty);
            }
        } else {
            let ai = events.attr_index::<T>(ty, body);
            let t = time_of::<T>(&events.attrs[ai], ty, body);
            let state = changes_state(ty);
            if full || state || pos >= keep_from {
                rounds.push(t, pos, ai, state);
            } else {
                // a record this reader drops, long before its part: only its time counts
                rounds.cur_max = rounds.cur_max.max(t);
            }
        }
        pos += size;
    }
    rounds.flush::<T, S>(region, sink, None, full);
    Ok(if full { cut } else { None })
}

/// The type and size of the record at `pos`, or why it cannot be read
/// (`off`: the region's offset in the file, for the message).
#[inline]
fn record_at<T: ByteOrder>(region: &[u8], pos: usize, off: usize) -> Result<(u32, usize), Cut> {
    if pos + 8 > region.len() {
        return Err(Cut::RecordHeader { at: off + pos });
    }
    let ty = T::read_u32(&region[pos..pos + 4]);
    let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
    if size < 8 {
        return Err(Cut::ImpossibleSize { at: off + pos, size });
    }
    if pos + size > region.len() {
        return Err(Cut::Record { at: off + pos });
    }
    Ok((ty, size))
}

/// Whether a record changes what samples resolve to (a mapping, a process's
/// name or exec, a fork). The others (exits, lost counts, throttling...) are
/// only counted, so their order does not matter either.
#[inline]
pub fn changes_state(ty: u32) -> bool {
    matches!(ty, REC_MMAP | REC_MMAP2 | REC_COMM | REC_FORK)
}

/// A record's time (0 when it has none).
#[inline]
fn time_of<T: ByteOrder>(a: &Attr, ty: u32, body: &[u8]) -> u64 {
    if ty == REC_SAMPLE {
        a.time_from_start.filter(|&o| o + 8 <= body.len()).map(|o| T::read_u64(&body[o..o + 8]))
    } else {
        a.time_from_end
            .filter(|&o| o <= body.len())
            .map(|o| T::read_u64(&body[body.len() - o..body.len() - o + 8]))
    }
    .unwrap_or(0)
}

/// The window over the map, in file offsets: populated up to `ahead`,
/// released up to `behind`.
struct Window<'m> {
    map: Option<&'m memmap2::Mmap>,
    /// The file offset of the region.
    base: usize,
    end: usize,
    ahead: usize,
    behind: usize,
}

impl Window<'_> {
    /// Populates the next chunk when the record at `pos` is near the end of the populated part.
    #[inline]
    fn populate(&mut self, pos: usize) {
        if let Some(m) = self.map {
            if self.base + pos + WINDOW_CHUNK / 2 > self.ahead && self.ahead < self.end {
                let len = WINDOW_CHUNK.min(self.end - self.ahead);
                // Only a hint: on kernels without MADV_POPULATE_READ the pages fault in as usual.
                let _ = m.advise_range(memmap2::Advice::PopulateRead, self.ahead, len);
                self.ahead += len;
            }
        }
    }

    /// Releases the whole chunks before `keep` (a region offset).
    fn release(&mut self, keep: usize) {
        if let Some(m) = self.map {
            let upto = (self.base + keep) & !(WINDOW_CHUNK - 1);
            if upto >= self.behind + WINDOW_CHUNK {
                // SAFETY: a read-only file map: released pages read back
                // from the file (page cache) if touched again; no reference
                // into them is kept past this point except the pending
                // records, which are all at or after `keep`.
                let _ = unsafe {
                    m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.behind, upto - self.behind)
                };
                self.behind = upto;
            }
        }
    }
}

/// The records of the rounds not yet flushed: (time, offset | event index << 40 |
/// PENDING_STATE for a record that changes the reader's state).
struct Rounds {
    pending: Vec<(u64, u64)>,
    /// The latest time of the rounds before the last one.
    prev_max: u64,
    cur_max: u64,
    /// Whether the order of samples among themselves does not matter.
    samples_commute: bool,
    /// The earliest time of a pending record that changes the reader's state.
    state_min: Option<u64>,
}

impl Rounds {
    fn new(samples_commute: bool) -> Self {
        Rounds { pending: Vec::new(), prev_max: 0, cur_max: 0, samples_commute, state_min: None }
    }

    #[inline]
    fn push(&mut self, t: u64, pos: usize, ai: usize, state: bool) {
        self.cur_max = self.cur_max.max(t);
        let flag = if state {
            self.state_min = Some(self.state_min.map_or(t, |m| m.min(t)));
            PENDING_STATE
        } else {
            0
        };
        self.pending.push((t, pos as u64 | (ai as u64) << PENDING_OFF_BITS | flag));
    }

    /// At a FINISHED_ROUND: what is no later than the rounds before the last one is in order.
    fn end_round<T: ByteOrder, S: RecordSink>(&mut self, region: &[u8], sink: &mut S, full: bool) {
        self.flush::<T, S>(region, sink, Some(self.prev_max), full);
        self.prev_max = self.cur_max;
    }

    /// The offset of the earliest pending record in the region.
    fn oldest(&self) -> Option<usize> {
        self.pending.iter().map(|e| (e.1 & PENDING_OFF_MASK) as usize).min()
    }

    /// Hands the pending records up to time `limit` (all without one) to the sink, in
    /// time order (equal times in file order). When samples commute and none of the
    /// records due changes the reader's state, they go in the order they are found,
    /// in the same pass that keeps the rest: no sort. Unless `full`, only the records
    /// that change the reader's state are handed over (replayed), the others dropped:
    /// what stays pending is the same either way.
    fn flush<T: ByteOrder, S: RecordSink>(&mut self, region: &[u8], sink: &mut S, limit: Option<u64>, full: bool) {
        let due = |t: u64| limit.map_or(true, |l| t <= l);
        if self.samples_commute && !self.state_min.is_some_and(due) {
            let mut kept = 0;
            for i in 0..self.pending.len() {
                let e = self.pending[i];
                if due(e.0) {
                    if full {
                        deliver_one::<T, S>(region, sink, e.1);
                    }
                } else {
                    self.pending[kept] = e;
                    kept += 1;
                }
            }
            self.pending.truncate(kept);
            return;
        }
        // A round is a concatenation of per-CPU runs already in time order: the stable
        // sort merges those runs. Offsets are unique and in file order, so equal times keep it.
        let n = partition(&mut self.pending, |e| due(e.0));
        let records = &mut self.pending[..n];
        if full {
            records.sort_by_key(|e| (e.0, e.1 & PENDING_OFF_MASK));
            for e in records.iter() {
                deliver_one::<T, S>(region, sink, e.1);
            }
        } else {
            // Only the state records are replayed: they alone need sorting.
            let mut states: Vec<(u64, u64)> = records.iter().copied().filter(|e| e.1 & PENDING_STATE != 0).collect();
            states.sort_unstable_by_key(|e| (e.0, e.1 & PENDING_OFF_MASK));
            for e in &states {
                replay_one::<T, S>(region, sink, e.1);
            }
        }
        self.pending.drain(..n);
        self.state_min = self.pending.iter().filter(|e| e.1 & PENDING_STATE != 0).map(|e| e.0).min();
    }
}

/// The record at a pending entry's offset: its type, misc, body and event index.
#[inline]
fn pending_record<T: ByteOrder>(region: &[u8], packed: u64) -> (u32, u16, &[u8], usize) {
    let pos = (packed & PENDING_OFF_MASK) as usize;
    let ai = ((packed >> PENDING_OFF_BITS) & PENDING_AI_MASK) as usize;
    let ty = T::read_u32(&region[pos..pos + 4]);
    let misc = T::read_u16(&region[pos + 4..pos + 6]);
    let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
    (ty, misc, &region[pos + 8..pos + size], ai)
}

/// Hands the record at a pending entry's offset to the sink.
#[inline]
fn deliver_one<T: ByteOrder, S: RecordSink>(region: &[u8], sink: &mut S, packed: u64) {
    let (ty, misc, body, ai) = pending_record::<T>(region, packed);
    sink.record::<T>(ty, misc, body, ai);
}

/// Replays the state record at a pending entry's offset (`RecordSink::replay`).
#[inline(never)]
fn replay_one<T: ByteOrder, S: RecordSink>(region: &[u8], sink: &mut S, packed: u64) {
    let (ty, misc, body, ai) = pending_record::<T>(region, packed);
    sink.replay::<T>(ty, misc, body, ai);
}

/// Moves the entries for which `due` holds to the front (in no particular order) and
/// returns how many there are.
fn partition(v: &mut [(u64, u64)], due: impl Fn(&(u64, u64)) -> bool) -> usize {
    let mut n = 0;
    for i in 0..v.len() {
        if due(&v[i]) {
            v.swap(n, i);
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::REC_MMAP2;
    use byteorder::LittleEndian;

    /// Collects (type, time) in the order records arrive.
    struct Seen(Vec<(u32, u64)>);

    impl RecordSink for Seen {
        fn record<T: ByteOrder>(&mut self, ty: u32, _misc: u16, body: &[u8], _ai: usize) {
            self.0.push((ty, T::read_u64(&body[..8])));
        }
        fn count(&mut self, _ty: u32) {}
    }

    /// A 16-byte record of type `ty` whose body is its time `t`, appended to `region`
    /// and pending in `rounds`.
    fn append(region: &mut Vec<u8>, rounds: &mut Rounds, ty: u32, t: u64) {
        rounds.push(t, region.len(), 0, changes_state(ty));
        region.extend_from_slice(&ty.to_le_bytes());
        region.extend_from_slice(&0u16.to_le_bytes());
        region.extend_from_slice(&16u16.to_le_bytes());
        region.extend_from_slice(&t.to_le_bytes());
    }

    /// Records of the given (type, time), pending in one round; then flushed.
    fn flushed(records: &[(u32, u64)], commute: bool, limit: Option<u64>) -> (Vec<(u32, u64)>, usize) {
        let mut region = Vec::new();
        let mut rounds = Rounds::new(commute);
        for &(ty, t) in records {
            append(&mut region, &mut rounds, ty, t);
        }
        let mut seen = Seen(Vec::new());
        rounds.flush::<LittleEndian, Seen>(&region, &mut seen, limit, true);
        (seen.0, rounds.pending.len())
    }

    #[test]
    fn samples_go_between_the_state_records_around_their_time() {
        // A pseudo-random interleaving of two CPUs' runs, with mappings among them.
        let mut records = Vec::new();
        let mut x = 12345u64;
        for i in 0..2000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let t = if i % 2 == 0 { i * 10 } else { i * 10 - 7 } + (x >> 60);
            let ty = if x % 97 == 0 { REC_MMAP2 } else { REC_SAMPLE };
            records.push((ty, t));
        }
        let states = records.iter().filter(|r| r.0 != REC_SAMPLE).count();
        assert!(states > 5);
        for commute in [true, false] {
            let (seen, left) = flushed(&records, commute, Some(15_000));
            let due = records.iter().filter(|r| r.1 <= 15_000).count();
            assert_eq!((seen.len(), left), (due, records.len() - due));
            // Every state record sits after every earlier record and before every later one.
            for (i, r) in seen.iter().enumerate() {
                if r.0 != REC_SAMPLE || !commute {
                    assert!(seen[..i].iter().all(|e| e.1 <= r.1), "{r:?} after a later record");
                    assert!(seen[i + 1..].iter().all(|e| e.1 >= r.1), "{r:?} before an earlier record");
                }
            }
            let mut got: Vec<_> = seen.clone();
            let mut want: Vec<_> = records.iter().copied().filter(|r| r.1 <= 15_000).collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn mappings_left_pending_keep_their_place_in_later_rounds() {
        // Rounds of samples and mappings from two CPUs whose times overlap the round
        // before; mappings not yet due at one round's end must still be placed in time
        // when a later round hands them over (and exits, only counted, go anywhere).
        let mut region = Vec::new();
        let mut rounds = Rounds::new(true);
        let mut seen = Seen(Vec::new());
        let mut x = 99u64;
        let mut pushed = Vec::new();
        for round in 0..40u64 {
            for i in 0..50u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let t = round * 1000 + i * 20 + (x >> 54);
                let ty = match x % 23 {
                    0 => REC_MMAP2,
                    1 => crate::abi::REC_EXIT,
                    _ => REC_SAMPLE,
                };
                append(&mut region, &mut rounds, ty, t);
                pushed.push((ty, t));
            }
            rounds.end_round::<LittleEndian, Seen>(&region, &mut seen, true);
        }
        rounds.flush::<LittleEndian, Seen>(&region, &mut seen, None, true);
        let seen = seen.0;
        assert_eq!(seen.len(), pushed.len());
        assert!(seen.iter().filter(|r| r.0 == REC_MMAP2).count() > 40);
        for (i, r) in seen.iter().enumerate() {
            if r.0 == REC_MMAP2 {
                assert!(seen[..i].iter().all(|e| e.1 <= r.1), "{r:?} after a later record");
                assert!(seen[i + 1..].iter().all(|e| e.1 >= r.1), "{r:?} before an earlier record");
            }
        }
    }

    #[test]
    fn equal_times_keep_file_order() {
        let records = [(REC_SAMPLE, 5), (REC_MMAP2, 5), (REC_SAMPLE, 5), (REC_MMAP2, 3), (REC_SAMPLE, 4)];
        // Samples between two mappings come in any order; the sample at time 5 before
        // the mapping at time 5 in the file stays before it.
        let (mut seen, _) = flushed(&records, true, None);
        seen[1..3].sort_unstable();
        assert_eq!(seen, vec![(REC_MMAP2, 3), (REC_SAMPLE, 4), (REC_SAMPLE, 5), (REC_MMAP2, 5), (REC_SAMPLE, 5)]);
        let (seen, _) = flushed(&records, false, None);
        assert_eq!(seen, vec![(REC_MMAP2, 3), (REC_SAMPLE, 4), (REC_SAMPLE, 5), (REC_MMAP2, 5), (REC_SAMPLE, 5)]);
    }
}
