//! Records in perf's order: sorted by time within the FINISHED_ROUND windows,
//! visited straight from the memory map without copying, and handed to a
//! `RecordSink` (statically dispatched: one instance per byte order).
//!
//! Records are read through a window of the map: the pages ahead are mapped
//! in one call per chunk (fewer page faults) and the pages behind, once no
//! pending record needs them, are released, so the file does not all count
//! in the process's resident memory at the end. Compressed files
//! (perf record -z) go through `linux-perf-data`'s reader, which inflates them.
use crate::abi::{REC_COMPRESSED, REC_COMPRESSED2, REC_FINISHED_ROUND, REC_SAMPLE};
use crate::header::{Attr, Events};
use crate::layout::PatchedFile;
use byteorder::ByteOrder;
use linux_perf_data::{PerfFile, PerfFileRecord, PerfRecordIter};

/// Where the records go, in order.
pub trait RecordSink {
    /// A kernel record (type below 64) of event `ai`.
    fn record<T: ByteOrder>(&mut self, ty: u32, misc: u16, body: &[u8], ai: usize);
    /// A record that is only counted (perf's own, type 64 and up).
    fn count(&mut self, ty: u32);
}

/// Populate the window ahead, and release it behind, by this much.
const WINDOW_CHUNK: usize = 8 << 20;

/// Offsets in the pending list share a u64 with the event index.
const PENDING_OFF_BITS: u32 = 40;
const PENDING_OFF_MASK: u64 = (1 << PENDING_OFF_BITS) - 1;

/// The records of a compressed file, in the crate's order. Returns why they
/// stopped early, when they did.
pub fn read_compressed<T: ByteOrder, S: RecordSink>(
    perf_file: &mut PerfFile,
    record_iter: &mut PerfRecordIter<PatchedFile<'_>>,
    sink: &mut S,
) -> Option<String> {
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
            Err(e) => return Some(format!("a record could not be read ({e})")),
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
    sink: &mut S,
) -> Result<Option<String>, String> {
    let region = &data[off..end];
    if region.len() as u64 > PENDING_OFF_MASK || events.len() as u64 >= 1 << (64 - PENDING_OFF_BITS) {
        return Err(format!("{name} has more than 1 TiB of records or 16M events, which is not supported"));
    }
    let mut window = Window { map, base: off, end, ahead: off, behind: off };
    let mut rounds = Rounds { pending: Vec::new(), prev_max: 0, cur_max: 0 };
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
            sink.count(REC_FINISHED_ROUND);
            rounds.end_round::<T, S>(region, sink);
            if window.map.is_some() {
                window.release(rounds.oldest().unwrap_or(pos));
            }
        } else if ty == REC_COMPRESSED || ty == REC_COMPRESSED2 {
            return Err(format!("{name} holds compressed records but its header does not say so"));
        } else if ty >= 64 {
            sink.count(ty);
        } else {
            let ai = events.attr_index::<T>(ty, body);
            rounds.push(time_of::<T>(&events.attrs[ai], ty, body), pos, ai);
        }
        pos += size;
    }
    rounds.flush::<T, S>(region, sink, None);
    Ok(cut)
}

/// The type and size of the record at `pos`, or why it cannot be read
/// (`off`: the region's offset in the file, for the message).
#[inline]
fn record_at<T: ByteOrder>(region: &[u8], pos: usize, off: usize) -> Result<(u32, usize), String> {
    if pos + 8 > region.len() {
        return Err(format!("a record header is cut at byte {}", off + pos));
    }
    let ty = T::read_u32(&region[pos..pos + 4]);
    let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
    if size < 8 {
        return Err(format!("a record at byte {} has an impossible size {size}", off + pos));
    }
    if pos + size > region.len() {
        return Err(format!("a record is cut at byte {}", off + pos));
    }
    Ok((ty, size))
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

/// The records of the rounds not yet flushed: (time, offset | event index << 40).
struct Rounds {
    pending: Vec<(u64, u64)>,
    /// The latest time of the rounds before the last one.
    prev_max: u64,
    cur_max: u64,
}

impl Rounds {
    #[inline]
    fn push(&mut self, t: u64, pos: usize, ai: usize) {
        self.cur_max = self.cur_max.max(t);
        self.pending.push((t, pos as u64 | (ai as u64) << PENDING_OFF_BITS));
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

    /// Hands the pending records up to time `limit` (all without one) to the sink, in time order.
    fn flush<T: ByteOrder, S: RecordSink>(&mut self, region: &[u8], sink: &mut S, limit: Option<u64>) {
        let pending = &mut self.pending;
        if pending.is_empty() {
            return;
        }
        // A round is a concatenation of per-CPU runs already in time order:
        // the stable sort merges those runs and keeps file order for equal times.
        pending.sort_by_key(|e| e.0);
        let n = match limit {
            Some(l) => pending.partition_point(|e| e.0 <= l),
            None => pending.len(),
        };
        for &(_, packed) in &pending[..n] {
            let pos = (packed & PENDING_OFF_MASK) as usize;
            let ai = (packed >> PENDING_OFF_BITS) as usize;
            let ty = T::read_u32(&region[pos..pos + 4]);
            let misc = T::read_u16(&region[pos + 4..pos + 6]);
            let size = T::read_u16(&region[pos + 6..pos + 8]) as usize;
            let body = &region[pos + 8..pos + size];
            sink.record::<T>(ty, misc, body, ai);
        }
        pending.drain(..n);
    }
}
