//! The file's header as the reader uses it: its events (the attributes, and
//! the ids that name them in records) and the facts of its feature sections.
//!
//! `layout::check` has bounded every section before this reads them: the
//! `linux-perf-data` crate parses the corrected view of the file
//! (`Layout::patched`). The attributes are taken from the attribute section
//! (the crate drops the sample_type / read_format bits it does not know),
//! named from the event description when it lists the same events, each with
//! the ids of both.
use crate::abi::*;
use crate::defects::crate_sample_read_defect;
use crate::elfsyms;
use crate::error::Error;
use crate::layout::{Layout, PatchedFile, RawAttr};
use crate::output::Fact;
use byteorder::ByteOrder;
use linux_perf_data::{AttributeDescription, Endianness, PerfFile, PerfFileReader, PerfRecordIter};
use rustc_hash::FxHashMap;

pub struct Attr {
    pub name: String,
    pub type_: u32,
    pub config: u64,
    pub period_or_freq: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub freq: bool,
    pub sample_id_all: bool,
    /// Byte offset of the time field from the start of a SAMPLE body.
    pub time_from_start: Option<usize>,
    /// Byte offset of the time field from the end of a non-sample body.
    pub time_from_end: Option<usize>,
    /// Where a SAMPLE's fields are when none before the call chain varies in size
    /// (no PERF_SAMPLE_READ), so a sample is read with one length check.
    pub fixed: Option<FixedSample>,
}

/// Byte offsets in a SAMPLE body of a fixed layout (None: the field is absent).
#[derive(Clone, Copy)]
pub struct FixedSample {
    pub ip: Option<usize>,
    pub tid: Option<usize>,
    /// The CPU field (its first u32 is the CPU).
    pub cpu: Option<usize>,
    pub period: Option<usize>,
    /// The call chain's count word, when there is a call chain.
    pub chain: Option<usize>,
    /// The bytes up to the call chain's words (or to the last field read).
    pub len: usize,
}

/// The events of the file, and which event each record is of.
pub struct Events {
    pub attrs: Vec<Attr>,
    id_to_attr: FxHashMap<u64, usize>,
    /// The same, as a list, when there are few ids (a scan beats hashing).
    id_list: Vec<(u64, usize)>,
    all_identifier: bool,
    /// Whether every event's records keep their time at the same place (`Attr::time_from_start`,
    /// `time_from_end`): a record's time is then read without finding its event.
    same_time_layout: bool,
}

/// Build ids by path.
pub type BuildIds = FxHashMap<String, Vec<u8>>;

/// What the header says, and the crate's reader (compressed records are read through it).
pub struct Header<'a> {
    pub events: Events,
    pub facts: Vec<(String, Fact)>,
    /// The build ids of the build id section, by path.
    pub build_ids: BuildIds,
    /// The records are compressed (perf record -z).
    pub compressed: bool,
    pub perf_file: PerfFile,
    pub record_iter: PerfRecordIter<PatchedFile<'a>>,
}

pub fn read<'a>(name: &str, data: &'a [u8], layout: &Layout, endian: Endianness) -> Result<Header<'a>, Error> {
    let PerfFileReader { perf_file, record_iter } = PerfFileReader::parse_file(layout.patched(data))
        .map_err(|source| Error::Unreadable { name: name.into(), source })?;
    let events = Events::new(&layout.attrs, perf_file.event_attributes());
    if events.attrs.is_empty() {
        return Err(Error::NoEvents { name: name.into() });
    }
    let (facts, build_ids) = facts(&perf_file, endian, layout.features_ok);
    let compressed = perf_file.features().has_feature(linux_perf_data::Feature::COMPRESSED);
    Ok(Header { events, facts, build_ids, compressed, perf_file, record_iter })
}

fn event_name_fallback(type_: u32, config: u64) -> String {
    let hw = ["cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses", "bus-cycles",
              "stalled-cycles-frontend", "stalled-cycles-backend", "ref-cycles"];
    let sw = ["cpu-clock", "task-clock", "page-faults", "context-switches", "cpu-migrations", "minor-faults",
              "major-faults", "alignment-faults", "emulation-faults", "dummy", "bpf-output", "cgroup-switches"];
    match type_ {
        0 if (config as usize) < hw.len() => hw[config as usize].to_string(),
        1 if (config as usize) < sw.len() => sw[config as usize].to_string(),
        _ => format!("event:type={type_},config={config:#x}"),
    }
}

impl Attr {
    pub(crate) fn new(a: &RawAttr, name: String) -> Attr {
        let st = a.sample_type;
        let sample_id_all = a.flags & ATTR_FLAG_SAMPLE_ID_ALL != 0;
        let time_from_start = (st & SAMPLE_TIME != 0)
            .then(|| 8 * (st & (SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID)).count_ones() as usize);
        let time_from_end = (sample_id_all && st & SAMPLE_TIME != 0).then(|| {
            8 * (st & (SAMPLE_TIME | SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER)).count_ones() as usize
        });
        let at = |bits: u64| 8 * (st & bits).count_ones() as usize;
        let before_period = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR | SAMPLE_ID
            | SAMPLE_STREAM_ID | SAMPLE_CPU;
        let fixed = (st & SAMPLE_READ == 0).then(|| FixedSample {
            ip: (st & SAMPLE_IP != 0).then(|| at(SAMPLE_IDENTIFIER)),
            tid: (st & SAMPLE_TID != 0).then(|| at(SAMPLE_IDENTIFIER | SAMPLE_IP)),
            cpu: (st & SAMPLE_CPU != 0).then(|| at(before_period & !SAMPLE_CPU)),
            period: (st & SAMPLE_PERIOD != 0).then(|| at(before_period)),
            chain: (st & SAMPLE_CALLCHAIN != 0).then(|| at(before_period | SAMPLE_PERIOD)),
            len: at(before_period | SAMPLE_PERIOD) + if st & SAMPLE_CALLCHAIN != 0 { 8 } else { 0 },
        });
        Attr {
            name,
            type_: a.type_,
            config: a.config,
            period_or_freq: a.period_or_freq,
            sample_type: st,
            read_format: a.read_format,
            freq: a.flags & ATTR_FLAG_FREQ != 0,
            sample_id_all,
            time_from_start,
            time_from_end,
            fixed,
        }
    }
}

impl Events {
    /// The attributes as the attribute section has them, named from the
    /// event description when it lists the same events.
    fn new(raw: &[RawAttr], descs: &[AttributeDescription]) -> Events {
        let named = descs.len() == raw.len();
        let mut attrs = Vec::new();
        let mut id_to_attr = FxHashMap::default();
        for (i, a) in raw.iter().enumerate() {
            let name = named.then(|| descs[i].name.clone()).flatten().unwrap_or_else(|| event_name_fallback(a.type_, a.config));
            for id in a.ids.iter().chain(if named { descs[i].event_ids.iter() } else { [].iter() }) {
                id_to_attr.entry(*id).or_insert(i);
            }
            attrs.push(Attr::new(a, name));
        }
        let all_identifier = attrs.iter().all(|a| a.sample_type & SAMPLE_IDENTIFIER != 0);
        let same_time_layout = attrs.windows(2).all(|w| {
            (w[0].time_from_start, w[0].time_from_end) == (w[1].time_from_start, w[1].time_from_end)
        });
        Events { attrs, id_list: id_to_attr.iter().map(|(&k, &v)| (k, v)).collect(), id_to_attr, all_identifier,
                 same_time_layout }
    }

    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    /// Whether samples add up the same in any order: no event reads values
    /// (PERF_SAMPLE_READ), which are differences from the previous sample.
    pub fn samples_commute(&self) -> bool {
        self.attrs.iter().all(|a| a.sample_type & SAMPLE_READ == 0)
    }

    /// The event whose layout gives a record's time (`order::time_of`) when every event's is
    /// the same: the record's own event need not be found.
    #[inline]
    pub fn time_layout(&self) -> Option<&Attr> {
        self.same_time_layout.then(|| &self.attrs[0])
    }

    /// The event a record is of (the first when its id is missing or unknown).
    #[inline]
    pub fn attr_index<T: ByteOrder>(&self, ty: u32, body: &[u8]) -> usize {
        if self.attrs.len() == 1 {
            return 0;
        }
        let id = if self.all_identifier {
            if ty == REC_SAMPLE {
                (body.len() >= 8).then(|| T::read_u64(&body[..8]))
            } else if self.attrs[0].sample_id_all && body.len() >= 8 {
                Some(T::read_u64(&body[body.len() - 8..]))
            } else {
                None
            }
        } else {
            let st = self.attrs[0].sample_type;
            if ty == REC_SAMPLE {
                (st & SAMPLE_ID != 0).then(|| {
                    8 * (st & (SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR)).count_ones() as usize
                }).filter(|&o| o + 8 <= body.len()).map(|o| T::read_u64(&body[o..o + 8]))
            } else if self.attrs[0].sample_id_all && st & SAMPLE_ID != 0 {
                let o = 8 * (st & (SAMPLE_ID | SAMPLE_STREAM_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER)).count_ones() as usize;
                (o <= body.len()).then(|| T::read_u64(&body[body.len() - o..body.len() - o + 8]))
            } else {
                None
            }
        };
        id.and_then(|id| self.event_of_id(id)).unwrap_or(0)
    }

    #[inline]
    pub fn event_of_id(&self, id: u64) -> Option<usize> {
        if self.id_list.len() <= 16 {
            self.id_list.iter().find(|e| e.0 == id).map(|e| e.1)
        } else {
            self.id_to_attr.get(&id).copied()
        }
    }
}

/// The header facts, in order, and the build ids of the build id section.
fn facts(perf_file: &PerfFile, endian: Endianness, features_ok: bool) -> (Vec<(String, Fact)>, BuildIds) {
    let mut facts: Vec<(String, Fact)> = Vec::new();
    let s = |v: Result<Option<&str>, linux_perf_data::Error>| v.ok().flatten().map(|x| Fact::Str(x.to_string()));
    if let Some(f) = s(perf_file.arch()) { facts.push(("arch".into(), f)); }
    if let Some(f) = s(perf_file.hostname()) { facts.push(("hostname".into(), f)); }
    if let Some(f) = s(perf_file.os_release()) { facts.push(("os_release".into(), f)); }
    if let Some(f) = s(perf_file.perf_version()) { facts.push(("perf_version".into(), f)); }
    if let Some(f) = s(perf_file.cpu_desc()) { facts.push(("cpu_desc".into(), f)); }
    if let Some(f) = s(perf_file.cpu_id()) { facts.push(("cpu_id".into(), f)); }
    if let Ok(Some(n)) = perf_file.nr_cpus() {
        facts.push(("nr_cpus_online".into(), Fact::Int(n.nr_cpus_online as i64)));
        facts.push(("nr_cpus_available".into(), Fact::Int(n.nr_cpus_available as i64)));
    }
    if let Ok(Some(c)) = perf_file.cmdline() {
        facts.push(("cmdline".into(), Fact::List(c.iter().map(|x| x.to_string()).collect())));
    }
    if let Ok(Some(m)) = perf_file.total_mem() {
        facts.push(("total_mem_kb".into(), Fact::Int(m as i64)));
    }
    if let Ok(Some(r)) = perf_file.sample_time_range() {
        facts.push(("first_sample_time".into(), Fact::Int(r.first_sample_time as i64)));
        facts.push(("last_sample_time".into(), Fact::Int(r.last_sample_time as i64)));
    }
    let mut header_build_ids = FxHashMap::default();
    let mut bid_pairs = Vec::new();
    if let Ok(b) = perf_file.build_ids() {
        for info in b.values() {
            let p = String::from_utf8_lossy(&info.path).into_owned();
            bid_pairs.push((p.clone(), elfsyms::build_id_hex(&info.build_id)));
            header_build_ids.insert(p, elfsyms::trim_build_id(&info.build_id).to_vec());
        }
    }
    bid_pairs.sort();
    facts.push(("build_ids".into(), Fact::Pairs(bid_pairs)));
    facts.push(("endian".into(), Fact::Str(if endian == Endianness::LittleEndian { "little" } else { "big" }.into())));
    facts.push(("features_read".into(), Fact::Bool(features_ok)));
    facts.push(("crate_sample_read_defect".into(), Fact::Bool(crate_sample_read_defect())));
    (facts, header_build_ids)
}
