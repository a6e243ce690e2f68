//! Records in perf's order: sorted by time within the FINISHED_ROUND windows
//! (only around the records that change what a sample resolves to, unless the
//! order of samples matters too: with PERF_SAMPLE_READ),
//! visited straight from the memory map without copying, and handed to a
//! `RecordSink` (statically dispatched: one instance per byte order).
//!
//! Records are read through a window of the map: the pages fault in as the records
//! reach them (the kernel maps a few around each fault) and the pages behind, once no
//! pending record needs them, are released, so the file does not all count in the process's
//! resident memory (a reader of a part of the file releases only its own part's; the index
//! walk of a mapped file maps none of it: it reads its stretch into a buffer, `index`). The
//! pages are not populated ahead (MADV_POPULATE_READ), which measured no faster on one
//! thread: a populate holds the address space's lock for its whole chunk, so another
//! thread's map or unmap (a library's symbols, the heap) waits for it, and the other
//! threads' populates queue behind that one. A fault takes only the lock of its own mapping.
//! Compressed files (perf record -z) go through `linux-perf-data`'s
//! reader, which inflates them.
//!
//! For a file read on several threads (`parallel`), `find_round` and `index` walk
//! stretches of it without reading the records, and `read_mapped` reads one part,
//! resuming where one reader of the whole file would be when the part begins.
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
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cut::RecordHeader { at } => write!(f, "a record header is cut at byte {at}"),
            Cut::ImpossibleSize { at, size } => write!(f, "a record at byte {at} has an impossible size {size}"),
            Cut::Record { at } => write!(f, "a record is cut at byte {at}"),
            Cut::Unreadable(e) => write!(f, "a record could not be read ({e})"),
        }
    }
}

/// Where the records go, in order.
pub trait RecordSink {
    /// A kernel record (type below 64) of event `ai`.
    fn record<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize);
    /// A record that is only counted (perf's own, type 64 and up).
    fn count(&mut self, ty: u32);
    /// A record that changes the reader's state (`changes_state`), before the part of the
    /// file this reader reads: its effect on the state, without counting it.
    fn replay<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize) {
        self.record::<T>(ty, misc, body, ai)
    }
}

/// Takes nothing: the flushes before a reader's part (`Resume`), which the part before hands over.
struct Nothing;

impl RecordSink for Nothing {
    fn record<T: ByteOrder>(&mut self, _: u32, _: u16, _: &[u8], _: usize) {}
    fn count(&mut self, _: u32) {}
}

/// The part of a file's records one reader hands over when several threads read it
/// (`parallel`): the flushes after the FINISHED_ROUND at `from.at` (all from the start when
/// None) up to the one at the FINISHED_ROUND where `ends` says it ends (to the end when it
/// never does). A later part's reader resumes where one reader of the whole file would be
/// after that flush (`Resume`), with the state (mappings, names) that the records before its
/// part give put in place by the caller (`history`); after its part, it stops. The parts of
/// consecutive readers (where one ends, the next one's `from.at`) hand every record over
/// exactly once, and count each of perf's own records once (by where they lie in the file).
pub struct Part<E: FnMut(usize) -> bool> {
    pub from: Option<Resume>,
    /// Called with the region offset of each FINISHED_ROUND after its flush: whether the part ends there.
    pub ends: E,
}

/// The whole file, one reader.
pub fn whole() -> Part<fn(usize) -> bool> {
    Part { from: None, ends: |_| false }
}

/// Where one reader of the whole file stands just after the flush at the FINISHED_ROUND at
/// region offset `at`: what is still pending then is some of the records of the round that
/// ends there, in an order that its flush and the one before it made (a flush that sorts
/// the records due moves the others around). Every record of an earlier round is due at the
/// next round's end at the latest (its time is at most that flush's limit), so the records
/// from `from`, the start of the round before that one, pushed and flushed as one reader does
/// (handing nothing over), leave exactly what one reader has pending, in its order; `max` is
/// the latest time before `from`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resume {
    pub at: usize,
    pub from: usize,
    pub max: u64,
}

/// One stretch of a file's records walked without reading them (`index`): where its
/// rounds end, the latest time in each round, and where the records that change the
/// reader's state lie. A stretch begins at the region's start or at a FINISHED_ROUND, and
/// ends at the first FINISHED_ROUND at or after the offset it was asked to reach (that
/// record is the next stretch's first), at the end of the region, or at a record that
/// cannot be read.
pub struct Stretch {
    pub start: usize,
    pub end: usize,
    /// Whether `end` is a FINISHED_ROUND's offset (not the region's end or a cut).
    pub end_is_round: bool,
    /// Why the records stop at `end`, when a record there cannot be read.
    pub cut: Option<Cut>,
    /// A compressed record (which a file that declares no compression cannot hold): read on one thread.
    pub compressed: bool,
    /// Each FINISHED_ROUND in the stretch (region offset), with the latest time of the
    /// records between it and the previous one (or the stretch's start).
    pub rounds: Vec<(usize, u64)>,
    /// The latest time of the records after the last FINISHED_ROUND of the stretch.
    pub tail_max: u64,
    /// Each record that changes the reader's state (`changes_state`): region offset, time.
    pub states: Vec<(usize, u64)>,
}

/// The region offset of the first FINISHED_ROUND at or after `from` that the records after
/// it confirm (the next 64 records, or up to the end, have plausible headers), looking at
/// offsets the size of a record apart from the region's start (8 bytes). A guess: the
/// caller checks that the stretch before ends exactly there (`Stretch::end`).
pub fn find_round<T: ByteOrder>(region: &[u8], from: usize) -> Option<usize> {
    let mut p = (from + 7) & !7;
    while p + 8 <= region.len() {
        if T::read_u32(&region[p..p + 4]) == REC_FINISHED_ROUND && T::read_u16(&region[p + 6..p + 8]) == 8
            && plausible_after::<T>(region, p + 8)
        {
            return Some(p);
        }
        p += 8;
    }
    None
}

/// Whether the records from `pos` on look like records: the next 64 (or up to the end of the
/// region) have a known type and a size that is a multiple of 8 within the region.
fn plausible_after<T: ByteOrder>(region: &[u8], mut pos: usize) -> bool {
    for _ in 0..64 {
        if pos == region.len() {
            return true;
        }
        let Ok((ty, size)) = record_at::<T>(region, pos, 0) else {
            return false;
        };
        if size % 8 != 0 || !(1..32).contains(&ty) && !(64..128).contains(&ty) {
            return false;
        }
        pos += size;
    }
    true
}

/// Walks the records of `region` from `start` (the region's start or a FINISHED_ROUND) up to
/// the first FINISHED_ROUND at or after `reach` (to the end when None), noting what a reader
/// of a later part needs (`Stretch`). When the region is a mapped file's (`mapped`: the map
/// and the file), the walk reads the stretch 256 KB at a time into a buffer of its own (`pread`)
/// and maps none of it: through
/// the map it mapped every page of the stretch and released it behind itself, and the runs then
/// mapped each page again (on 2 threads the walk took 8 ms a half of the 71 MB file, 4.7 of
/// them mapping; each release also interrupts every other CPU the process runs on, to flush its
/// TLB). Otherwise, or if a read fails, it walks the region, releasing the map's pages behind
/// it (the whole chunks of its own stretch only).
pub fn index<T: ByteOrder>(region: &[u8], mapped: Option<(&memmap2::Mmap, &std::fs::File)>, base: usize,
                           events: &Events, start: usize, reach: Option<usize>) -> Stretch {
    if let Some((_, file)) = mapped {
        let mut bytes = Buffered { file, base, len: region.len(), buf: Vec::new(), at: 0, chunk: BUFFERED };
        if let Some(s) = walk::<T>(&mut bytes, base, events, start, reach, |_| {}) {
            return s;
        }
    }
    let own = (base + start + WINDOW_CHUNK - 1) & !(WINDOW_CHUNK - 1);
    let mut window = Window { map: mapped.map(|m| m.0), base, behind: own };
    walk::<T>(&mut Mapped(region), base, events, start, reach, |pos| window.release(pos)).expect("a map is always read")
}

/// The bytes of a region, `n` at `pos` (None: they could not be read).
trait Bytes {
    fn len(&self) -> usize;
    fn at(&mut self, pos: usize, n: usize) -> Option<&[u8]>;
    /// The bytes from `pos` that are at hand (at least 8 when that many are left, maybe
    /// fewer than a record), read first when they are not.
    fn span(&mut self, pos: usize) -> Option<&[u8]>;
}

struct Mapped<'a>(&'a [u8]);

impl Bytes for Mapped<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn at(&mut self, pos: usize, n: usize) -> Option<&[u8]> {
        self.0.get(pos..pos + n)
    }
    fn span(&mut self, pos: usize) -> Option<&[u8]> {
        self.0.get(pos..)
    }
}

/// A region of a file read into a buffer of its own, `BUFFERED` bytes at a time.
struct Buffered<'f> {
    file: &'f std::fs::File,
    /// The file offset of the region, and its length.
    base: usize,
    len: usize,
    buf: Vec<u8>,
    /// The region offset of `buf[0]`.
    at: usize,
    /// How much it reads at a time (a record more when one is longer).
    chunk: usize,
}

const BUFFERED: usize = 256 << 10;

impl Bytes for Buffered<'_> {
    fn len(&self) -> usize {
        self.len
    }
    /// The bytes from the buffer, read first when they are not all in it (the walk asks twice a
    /// record, for its header and for the whole record: inlined, the bytes in the buffer cost a
    /// compare and a slice, a third of the walk's instructions before).
    #[inline(always)]
    fn at(&mut self, pos: usize, n: usize) -> Option<&[u8]> {
        let from = pos.wrapping_sub(self.at);
        if pos >= self.at && n <= self.buf.len() && from <= self.buf.len() - n {
            return Some(&self.buf[from..from + n]);
        }
        self.read_at(pos, n)
    }
    fn span(&mut self, pos: usize) -> Option<&[u8]> {
        let from = pos.wrapping_sub(self.at);
        if pos >= self.at && from.saturating_add(8) <= self.buf.len() {
            return Some(&self.buf[from..]);
        }
        let n = 8.min(self.len.checked_sub(pos)?);
        self.read_at(pos, n)?;
        Some(&self.buf[..])
    }
}

impl Buffered<'_> {
    /// `at` when the bytes are not all in the buffer: `chunk` bytes from `pos` (at least `n`) read.
    #[cold]
    #[inline(never)]
    fn read_at(&mut self, pos: usize, n: usize) -> Option<&[u8]> {
        use std::os::unix::fs::FileExt;
        let want = self.chunk.max(n).min(self.len.checked_sub(pos)?);
        if want < n {
            return None;
        }
        if self.buf.len() < want {
            // zeroed by the system, not written first: the read is the pages' first touch
            self.buf = vec![0; want];
        }
        self.buf.truncate(want);
        self.file.read_exact_at(&mut self.buf, (self.base + pos) as u64).ok()?;
        self.at = pos;
        Some(&self.buf[..n])
    }
}

/// `index`'s walk over `bytes` (None when a read failed); `passed(pos)` at each FINISHED_ROUND.
/// The records wholly in the bytes at hand (`Bytes::span`) are walked in a loop of their own,
/// which looks at each header once; a record that runs past them, or one that cannot be read,
/// takes the general step (its header, then its whole record, each asked for).
fn walk<T: ByteOrder>(bytes: &mut impl Bytes, base: usize, events: &Events, start: usize, reach: Option<usize>,
                      mut passed: impl FnMut(usize)) -> Option<Stretch> {
    let len = bytes.len();
    let mut s = Stretch { start, end: len, end_is_round: false, cut: None, compressed: false,
                          rounds: Vec::new(), tail_max: 0, states: Vec::new() };
    let mut w = Walker { events, same_layout: events.time_layout(), start, reach, max: 0 };
    let mut pos = start;
    'records: while pos < len {
        let span = bytes.span(pos)?;
        let mut i = 0;
        while i + 8 <= span.len() {
            let ty = T::read_u32(&span[i..i + 4]);
            let size = T::read_u16(&span[i + 6..i + 8]) as usize;
            if size < 8 || size > span.len() - i {
                break;
            }
            if w.visit::<T>(&mut s, pos + i, ty, &span[i + 8..i + size], &mut passed) {
                break 'records;
            }
            i += size;
        }
        pos += i;
        if pos >= len {
            break;
        }
        let head = if pos + 8 <= len { Some(bytes.at(pos, 8)?) } else { None };
        let (ty, size) = match header::<T>(head, pos, len, base) {
            Ok(h) => h,
            Err(reason) => {
                s.end = pos;
                s.cut = Some(reason);
                break;
            }
        };
        let body = if ty < 64 { &bytes.at(pos, size)?[8..] } else { &[][..] };
        if w.visit::<T>(&mut s, pos, ty, body, &mut passed) {
            break;
        }
        pos += size;
    }
    s.tail_max = w.max;
    Some(s)
}

/// What `walk` keeps from record to record.
struct Walker<'e> {
    events: &'e Events,
    /// The events' one time layout, when they share it.
    same_layout: Option<&'e Attr>,
    start: usize,
    reach: Option<usize>,
    /// The latest time since the last FINISHED_ROUND.
    max: u64,
}

impl Walker<'_> {
    /// The record at `pos`, of type `ty` (`body`: its bytes after the header; empty for perf's
    /// own records): true when the stretch ends there (`s.end` set).
    #[inline(always)]
    fn visit<T: ByteOrder>(&mut self, s: &mut Stretch, pos: usize, ty: u32, body: &[u8],
                           passed: &mut impl FnMut(usize)) -> bool {
        if ty == REC_FINISHED_ROUND {
            if pos > self.start && self.reach.is_some_and(|r| pos >= r) {
                s.end = pos;
                s.end_is_round = true;
                return true;
            }
            s.rounds.push((pos, self.max));
            self.max = 0;
            passed(pos);
        } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
            s.compressed = true;
            s.end = pos;
            return true;
        } else if ty < 64 {
            let a = match self.same_layout {
                Some(a) => a,
                None => &self.events.attrs[self.events.attr_index::<T>(ty, body)],
            };
            let t = time_of::<T>(a, ty, body);
            self.max = self.max.max(t);
            if changes_state(ty) {
                s.states.push((pos, t));
            }
        }
        false
    }
}

/// Release the window behind by this much.
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
/// in time order: those of `part` (every one by default). Returns why they stopped early,
/// when they did.
pub fn read_mapped<T: ByteOrder, S: RecordSink, E: FnMut(usize) -> bool>(
    name: &str,
    data: &[u8],
    map: Option<&memmap2::Mmap>,
    (off, end): (usize, usize),
    events: &Events,
    mut part: Part<E>,
    sink: &mut S,
) -> Result<Option<Cut>, Error> {
    let region = &data[off..end];
    if region.len() as u64 > PENDING_OFF_MASK || events.len() as u64 > PENDING_AI_MASK {
        return Err(Error::TooLarge { name: name.into() });
    }
    let mut window = Window { map, base: off, behind: off };
    // Samples add up the same in any order, so among themselves they need none; only
    // the records that change what a sample resolves to (mappings, processes) need
    // their place in time, and the records only counted need none. Read values
    // (PERF_SAMPLE_READ) are differences from the previous sample, so with them every
    // record keeps its place.
    let mut rounds = Rounds::new(events.samples_commute());
    let mut pos = 0usize;
    if let Some(r) = part.from {
        // Where one reader is after the flush at `r.at`: the two rounds before it pushed and
        // flushed, handing nothing over (that was the previous part's) and counting nothing.
        // Its pages are released from its own part's start on.
        window.behind = (off + r.at + WINDOW_CHUNK - 1) & !(WINDOW_CHUNK - 1);
        rounds.prev_max = r.max;
        rounds.cur_max = r.max;
        let mut p = r.from;
        while p <= r.at {
            let (ty, size) = match record_at::<T>(region, p, off) {
                Ok(h) => h,
                Err(reason) => return Ok(Some(reason)),
            };
            if ty == REC_FINISHED_ROUND {
                rounds.end_round::<T, Nothing>(region, &mut Nothing);
            } else if ty < 64 {
                let body = &region[p + 8..p + size];
                let ai = events.attr_index::<T>(ty, body);
                let t = time_of::<T>(&events.attrs[ai], ty, body);
                rounds.push(t, p, ai, changes_state(ty));
            }
            p += size;
        }
        pos = p;
    }
    let mut cut = None;
    while pos < region.len() {
        let (ty, size) = match record_at::<T>(region, pos, off) {
            Ok(h) => h,
            Err(reason) => {
                cut = Some(reason);
                break;
            }
        };
        let body = &region[pos + 8..pos + size];
        if ty == REC_FINISHED_ROUND {
            sink.count(REC_FINISHED_ROUND);
            rounds.end_round::<T, S>(region, sink);
            if window.map.is_some() {
                window.release(rounds.oldest().unwrap_or(pos));
            }
            if (part.ends)(pos) {
                return Ok(None);
            }
        } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
            return Err(Error::UndeclaredCompression { name: name.into() });
        } else if ty >= 64 {
            sink.count(ty);
        } else {
            let ai = events.attr_index::<T>(ty, body);
            let t = time_of::<T>(&events.attrs[ai], ty, body);
            rounds.push(t, pos, ai, changes_state(ty));
        }
        pos += size;
    }
    rounds.flush::<T, S>(region, sink, None);
    Ok(cut)
}

/// The type and size of the record at `pos`, or why it cannot be read
/// (`off`: the region's offset in the file, for the message).
#[inline]
fn record_at<T: ByteOrder>(region: &[u8], pos: usize, off: usize) -> Result<(u32, usize), Cut> {
    header::<T>(region.get(pos..pos + 8), pos, region.len(), off)
}

/// `record_at` of a region of `len` bytes whose 8 bytes at `pos` are `head` (None: fewer are left).
fn header<T: ByteOrder>(head: Option<&[u8]>, pos: usize, len: usize, off: usize) -> Result<(u32, usize), Cut> {
    let Some(head) = head else {
        return Err(Cut::RecordHeader { at: off + pos });
    };
    let ty = T::read_u32(&head[..4]);
    let size = T::read_u16(&head[6..8]) as usize;
    if size < 8 {
        return Err(Cut::ImpossibleSize { at: off + pos, size });
    }
    if pos + size > len {
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

/// The window over the map, in file offsets: released up to `behind`.
struct Window<'m> {
    map: Option<&'m memmap2::Mmap>,
    /// The file offset of the region.
    base: usize,
    behind: usize,
}

impl Window<'_> {
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
    fn end_round<T: ByteOrder, S: RecordSink>(&mut self, region: &[u8], sink: &mut S) {
        self.flush::<T, S>(region, sink, Some(self.prev_max));
        self.prev_max = self.cur_max;
    }

    /// The offset of the earliest pending record in the region.
    fn oldest(&self) -> Option<usize> {
        self.pending.iter().map(|e| (e.1 & PENDING_OFF_MASK) as usize).min()
    }

    /// Hands the pending records up to time `limit` (all without one) to the sink, in
    /// time order (equal times in file order). When samples commute and none of the
    /// records due changes the reader's state, they go in the order they are found,
    /// in the same pass that keeps the rest: no sort.
    fn flush<T: ByteOrder, S: RecordSink>(&mut self, region: &[u8], sink: &mut S, limit: Option<u64>) {
        let due = |t: u64| limit.map_or(true, |l| t <= l);
        if self.samples_commute && !self.state_min.is_some_and(due) {
            let mut kept = 0;
            for i in 0..self.pending.len() {
                let e = self.pending[i];
                if due(e.0) {
                    deliver_one::<T, S>(region, sink, e.1);
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
        records.sort_by_key(|e| (e.0, e.1 & PENDING_OFF_MASK));
        for e in records.iter() {
            deliver_one::<T, S>(region, sink, e.1);
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
        rounds.flush::<LittleEndian, Seen>(&region, &mut seen, limit);
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
            rounds.end_round::<LittleEndian, Seen>(&region, &mut seen);
        }
        rounds.flush::<LittleEndian, Seen>(&region, &mut seen, None);
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

    /// `walk`'s result, found one record at a time with nothing but `header` and `time_of`.
    fn one_by_one(region: &[u8], base: usize, events: &Events, start: usize, reach: Option<usize>) -> Stretch {
        let mut s = Stretch { start, end: region.len(), end_is_round: false, cut: None, compressed: false,
                              rounds: Vec::new(), tail_max: 0, states: Vec::new() };
        let (mut pos, mut max) = (start, 0u64);
        while pos < region.len() {
            let (ty, size) = match header::<LittleEndian>(region.get(pos..pos + 8), pos, region.len(), base) {
                Ok(h) => h,
                Err(reason) => {
                    (s.end, s.cut) = (pos, Some(reason));
                    break;
                }
            };
            if ty == REC_FINISHED_ROUND {
                if pos > start && reach.is_some_and(|r| pos >= r) {
                    (s.end, s.end_is_round) = (pos, true);
                    break;
                }
                s.rounds.push((pos, max));
                max = 0;
            } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
                (s.compressed, s.end) = (true, pos);
                break;
            } else if ty < 64 {
                let body = &region[pos + 8..pos + size];
                let t = time_of::<LittleEndian>(&events.attrs[events.attr_index::<LittleEndian>(ty, body)], ty, body);
                max = max.max(t);
                if changes_state(ty) {
                    s.states.push((pos, t));
                }
            }
            pos += size;
        }
        s.tail_max = max;
        s
    }

    /// The walk of a stretch read into a buffer finds what the walk of the map finds, and both
    /// what a walk of one record at a time finds: every fixture, stretches from its start and from the first round end after a third and two
    /// thirds of it, buffers of a record or so (a refill at almost every record) and of a
    /// quarter megabyte (the walk's own); a file that is not the one mapped (its reads fail) falls back to the map.
    #[test]
    fn a_stretch_read_into_a_buffer_is_indexed_as_the_map() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/perfdata");
        let mut checked = 0;
        for name in ["plain.perf.data", "group.perf.data", "tiny.perf.data", "truncated.perf.data", "arm64/fault.anon.4k.perf.data"] {
            let path = dir.join(name);
            let file = std::fs::File::open(&path).unwrap();
            let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
            let layout = crate::layout::check::<LittleEndian>(name, &map).unwrap();
            let endian = linux_perf_event_reader::Endianness::LittleEndian;
            let events = crate::header::read(name, &map, &layout, endian).unwrap().events;
            let span = (layout.data_off as usize, (layout.data_off + layout.data_size) as usize);
            let region = &map[span.0..span.1.min(map.len())];
            let fields = |s: &Stretch| format!("{} {} {} {:?} {} {:?} {} {:?}", s.start, s.end, s.end_is_round, s.cut, s.compressed,
                                               s.rounds, s.tail_max, s.states);
            let starts = [Some(0), find_round::<LittleEndian>(region, region.len() / 3),
                          find_round::<LittleEndian>(region, 2 * region.len() / 3)];
            for start in starts.into_iter().flatten() {
                for reach in [None, Some(start + region.len() / 3)] {
                    let mapped = walk::<LittleEndian>(&mut Mapped(region), span.0, &events, start, reach, |_| {}).unwrap();
                    assert_eq!(fields(&mapped), fields(&one_by_one(region, span.0, &events, start, reach)),
                               "{name} from {start} to {reach:?}: the walk against one record at a time");
                    for chunk in [40, 4096, BUFFERED] {
                        let mut b = Buffered { file: &file, base: span.0, len: region.len(), buf: Vec::new(), at: 0, chunk };
                        let buffered = walk::<LittleEndian>(&mut b, span.0, &events, start, reach, |_| {}).unwrap();
                        assert_eq!(fields(&buffered), fields(&mapped), "{name} from {start} to {reach:?}, {chunk} bytes a read");
                    }
                    let other = std::fs::File::open(dir.join("tiny-group.perf.data")).unwrap();
                    let fell_back = index::<LittleEndian>(region, Some((&map, &other)), span.0, &events, start, reach);
                    if region.len() > 20000 {
                        assert_eq!(fields(&fell_back), fields(&mapped), "{name}: a failed read");
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked >= 20, "{checked} stretches");
    }
}
