//! The perf.data file layout: the header, the attribute section and the
//! feature sections, checked against the file before anything is allocated
//! from a count in them.
//!
//! `linux-perf-data` sizes its vectors from counts in the file (the event
//! types section, EVENT_DESC's numbers of events and ids, CMDLINE's number
//! of strings), so a damaged count would ask for terabytes. `check` reads the
//! layout with every offset, size and count bounded by the file's length,
//! and gives the crate a corrected view of the file (`PatchedFile`): the data
//! size clamped to what is there when the file is cut, the event types
//! section (which we do not use) removed, and each damaged feature section
//! we would read dropped from the feature table, with a warning naming it.
//! The attributes, and the event ids each owns, are read here from the
//! attribute section, so events keep their identity when the feature
//! sections are lost.
use crate::error::Error;
use byteorder::ByteOrder;
use std::io::{Read, Seek, SeekFrom};

pub const HEADER_SIZE: usize = 104;
const ATTR_MIN: u64 = 64 + 16; // PERF_ATTR_SIZE_VER0 + the ids section

const FEAT_HOSTNAME: u32 = 3;
const FEAT_ARCH: u32 = 6;
const FEAT_NRCPUS: u32 = 7;
const FEAT_CPUDESC: u32 = 8;
const FEAT_CPUID: u32 = 9;
const FEAT_TOTAL_MEM: u32 = 10;
const FEAT_CMDLINE: u32 = 11;
const FEAT_EVENT_DESC: u32 = 12;
const FEAT_SAMPLE_TIME: u32 = 21;
const FEAT_COMPRESSED: u32 = 27;

/// One attribute as the attribute section has it (the crate drops bits it
/// does not know from sample_type and read_format, so these are read raw).
pub struct RawAttr {
    pub type_: u32,
    pub config: u64,
    pub period_or_freq: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    pub ids: Vec<u64>,
}

pub struct Layout {
    pub file_len: u64,
    pub data_off: u64,
    /// The data size as read: clamped to the file when it is cut.
    pub data_size: u64,
    /// Where the header says the data ends.
    pub expected_end: u64,
    /// Set when the data runs to the end of the file rather than where the header says.
    pub truncated_at: Option<u64>,
    /// The feature table and every section it names are in the file.
    pub features_ok: bool,
    pub attrs: Vec<RawAttr>,
    pub warnings: Vec<String>,
    header: Vec<u8>,
    /// The feature table as the crate is to see it: (file offset, bytes).
    table: Option<(u64, Vec<u8>)>,
}

fn u64_at<T: ByteOrder>(d: &[u8], off: u64) -> u64 {
    T::read_u64(&d[off as usize..off as usize + 8])
}

fn u32_at<T: ByteOrder>(d: &[u8], off: u64) -> u32 {
    T::read_u32(&d[off as usize..off as usize + 4])
}

/// A (offset, size) section that lies inside the file.
fn in_file(off: u64, size: u64, file_len: u64) -> bool {
    off.checked_add(size).is_some_and(|end| end <= file_len)
}

fn feature_name(f: u32) -> String {
    const N: [&str; 32] = ["reserved", "tracing data", "build ids", "hostname", "os release", "version", "arch",
                           "nrcpus", "cpu description", "cpuid", "total memory", "command line", "event description",
                           "cpu topology", "numa topology", "branch stack", "pmu mappings", "group description",
                           "auxtrace", "stat", "cache", "sample time", "memory topology", "clock id", "dir format",
                           "bpf prog info", "bpf btf", "compression", "cpu pmu caps", "clock data",
                           "hybrid topology", "pmu caps"];
    N.get(f as usize).map(|s| s.to_string()).unwrap_or_else(|| format!("feature {f}"))
}

/// Whether a feature section the reader uses is whole: every count in it fits in its bytes.
fn feature_whole<T: ByteOrder>(f: u32, s: &[u8]) -> bool {
    let len = s.len() as u64;
    let u32_ = |o: u64| (o + 4 <= len).then(|| u32_at::<T>(s, o) as u64);
    // a perf_header_string at o: its end
    let string = |o: u64| u32_(o).and_then(|n| (o + 4 + n <= len).then_some(o + 4 + n));
    match f {
        FEAT_HOSTNAME..=FEAT_ARCH | FEAT_CPUDESC | FEAT_CPUID => string(0).is_some(),
        FEAT_NRCPUS | FEAT_TOTAL_MEM => len >= 8,
        FEAT_SAMPLE_TIME => len >= 16,
        FEAT_COMPRESSED => len >= 20,
        FEAT_CMDLINE => {
            let Some(nr) = u32_(0) else { return false };
            let mut o = 4;
            for _ in 0..nr {
                match string(o) {
                    Some(end) => o = end,
                    None => return false,
                }
            }
            true
        }
        FEAT_EVENT_DESC => {
            let (Some(nr), Some(attr_size)) = (u32_(0), u32_(4)) else { return false };
            if attr_size < 64 {
                return false;
            }
            let mut o = 8;
            for _ in 0..nr {
                // the attr's own size (at +4) must fit in attr_size
                let Some(own) = u32_(o + 4) else { return false };
                if own > attr_size || o + attr_size > len {
                    return false;
                }
                o += attr_size;
                let Some(nr_ids) = u32_(o) else { return false };
                let Some(end) = string(o + 4) else { return false };
                o = end;
                match nr_ids.checked_mul(8).and_then(|n| o.checked_add(n)) {
                    Some(end) if end <= len => o = end,
                    _ => return false,
                }
            }
            true
        }
        _ => true, // read as raw bytes only, bounded by the section check
    }
}

pub fn check<T: ByteOrder>(name: &str, data: &[u8]) -> Result<Layout, Error> {
    if data.len() < HEADER_SIZE {
        return Err(Error::HeaderCut { name: name.into(), len: data.len() });
    }
    let file_len = data.len() as u64;
    let header_size = u64_at::<T>(data, 8);
    let attr_size = u64_at::<T>(data, 16);
    let attrs_off = u64_at::<T>(data, 24);
    let attrs_len = u64_at::<T>(data, 32);
    let data_off = u64_at::<T>(data, 40);
    let mut data_size = u64_at::<T>(data, 48);
    let mut warnings = Vec::new();
    if data_off > file_len || !in_file(attrs_off, attrs_len, file_len) {
        return Err(Error::CutBeforeRecords { name: name.into(), file_len });
    }
    if header_size < HEADER_SIZE as u64 || !(ATTR_MIN..=1 << 16).contains(&attr_size) || data_off < HEADER_SIZE as u64 {
        return Err(Error::DamagedHeader { name: name.into() });
    }
    let mut truncated_at = None;
    if data_size == 0 && file_len > data_off {
        warnings.push(format!(
            "{name}: the header records no data size (perf record did not finish); reading records up to the end of the file"
        ));
        data_size = file_len - data_off;
        truncated_at = Some(file_len);
    }
    let expected_end = data_off.saturating_add(data_size);
    if expected_end > file_len {
        truncated_at = Some(file_len);
        data_size = file_len - data_off;
    }

    // The attributes and their ids.
    let mut attrs = Vec::new();
    let mut ids_left = file_len / 8; // the ids of all attributes together fit in the file
    for i in 0..attrs_len / attr_size {
        let b = attrs_off + i * attr_size;
        let (ids_off, ids_size) = (u64_at::<T>(data, b + attr_size - 16), u64_at::<T>(data, b + attr_size - 8));
        let ids = if in_file(ids_off, ids_size, file_len) && ids_size % 8 == 0 && ids_size / 8 <= ids_left {
            ids_left -= ids_size / 8;
            (0..ids_size / 8).map(|k| u64_at::<T>(data, ids_off + 8 * k)).collect()
        } else {
            warnings.push(format!("{name}: the event ids of attribute {i} lie outside the file; they are ignored"));
            Vec::new()
        };
        attrs.push(RawAttr {
            type_: u32_at::<T>(data, b),
            config: u64_at::<T>(data, b + 8),
            period_or_freq: u64_at::<T>(data, b + 16),
            sample_type: u64_at::<T>(data, b + 24),
            read_format: u64_at::<T>(data, b + 32),
            flags: u64_at::<T>(data, b + 40),
            ids,
        });
    }
    if attrs.is_empty() {
        return Err(Error::NoEvents { name: name.into() });
    }

    // The feature table after the data: every section in the file, and whole where we read it.
    let bits: Vec<u32> = (0..256u32).filter(|&f| u64_at::<T>(data, 72 + 8 * (f / 64) as u64) >> (f % 64) & 1 == 1).collect();
    let table_end = expected_end.saturating_add(16 * bits.len() as u64);
    let mut features_ok = table_end <= file_len;
    let mut kept: Vec<(u32, u64, u64)> = Vec::new();
    if features_ok {
        for (k, &f) in bits.iter().enumerate() {
            let o = expected_end + 16 * k as u64;
            let (off, size) = (u64_at::<T>(data, o), u64_at::<T>(data, o + 8));
            if !in_file(off, size, file_len) {
                features_ok = false;
                break;
            }
            if feature_whole::<T>(f, &data[off as usize..(off + size) as usize]) {
                kept.push((f, off, size));
            } else {
                warnings.push(format!("{name}: its {} section is damaged and was ignored", feature_name(f)));
            }
        }
    }
    let mut header = data[..HEADER_SIZE].to_vec();
    let mut put = |at: usize, v: u64| T::write_u64(&mut header[at..at + 8], v);
    put(48, data_size);
    put(56, 0); // the event types section: not used (the attribute section is), not to be parsed
    put(64, 0);
    let mut table = None;
    if !features_ok {
        header[72..104].fill(0);
    } else if kept.len() != bits.len() {
        let mut words = [0u64; 4];
        let mut bytes = vec![0u8; 16 * kept.len()];
        for (k, &(f, off, size)) in kept.iter().enumerate() {
            words[(f / 64) as usize] |= 1 << (f % 64);
            T::write_u64(&mut bytes[16 * k..16 * k + 8], off);
            T::write_u64(&mut bytes[16 * k + 8..16 * k + 16], size);
        }
        for (w, v) in words.iter().enumerate() {
            T::write_u64(&mut header[72 + 8 * w..80 + 8 * w], *v);
        }
        table = Some((expected_end, bytes));
    }
    Ok(Layout { file_len, data_off, data_size, expected_end, truncated_at, features_ok, attrs, warnings, header, table })
}

impl Layout {
    /// The file as `linux-perf-data` is to read it.
    pub fn patched<'a>(&self, data: &'a [u8]) -> PatchedFile<'a> {
        PatchedFile { header: self.header.clone(), table: self.table.clone(), data, pos: 0 }
    }
}

/// The file with a corrected header and feature table laid over it.
pub struct PatchedFile<'a> {
    header: Vec<u8>,
    table: Option<(u64, Vec<u8>)>,
    data: &'a [u8],
    pos: u64,
}

impl Read for PatchedFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let pos = self.pos;
        if pos >= self.data.len() as u64 {
            return Ok(0);
        }
        let (src, limit): (&[u8], u64) = if pos < self.header.len() as u64 {
            (&self.header[pos as usize..], u64::MAX)
        } else {
            match &self.table {
                Some((at, t)) if pos >= *at && pos < at + t.len() as u64 => (&t[(pos - at) as usize..], u64::MAX),
                Some((at, _)) if pos < *at => (&self.data[pos as usize..], at - pos),
                _ => (&self.data[pos as usize..], u64::MAX),
            }
        };
        let n = src.len().min(buf.len()).min(limit.min(usize::MAX as u64) as usize);
        buf[..n].copy_from_slice(&src[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for PatchedFile<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => p as i128,
            SeekFrom::End(d) => self.data.len() as i128 + d as i128,
            SeekFrom::Current(d) => self.pos as i128 + d as i128,
        };
        if new < 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before start"));
        }
        self.pos = new as u64;
        Ok(self.pos)
    }
}
