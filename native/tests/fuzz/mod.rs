//! A seeded mutation fuzzer of the perf.data reader (stable Rust, no cargo-fuzz).
//!
//! Execution `i` of seed `s` is always the same input: a fixture from
//! tests/data/perfdata (chosen by the seed) with one to four mutations: bit
//! flips, byte overwrites, interesting integers written over header fields,
//! attribute fields, feature-section counts, record headers and sample
//! fields, truncation (anywhere, and at every section boundary), and record
//! duplication and splicing.
//!
//! Each input is read with `reader::read_bytes` and classified:
//! * `Ok`: read, and every invariant below holds;
//! * `Error`: refused with one clear sentence;
//! * `Panic`: the reader panicked (caught here; in kperfdiff it would have
//!   been an internal error);
//! * `Wrong`: read, but an invariant is broken, or the error is not one clean
//!   sentence.
//!
//! Invariants (the oracle), per event: the sample count is the sum of its
//! stacks' counts and the total weight the sum of their weights (no wrapped
//! sum); every self and children weight is finite, not negative and at most
//! the total (no share above 100%); the self weights add up to the total; the
//! samples of all events are at most what the file's size can hold; stack and
//! symbol ids are in range, and an event's stacks and call edges name only
//! symbols it counts (children count above 0: the ones kperfdiff keeps). And:
//! cutting a file anywhere after its records keeps every event's sample count
//! (the events' identity must not be lost with the feature sections). Per
//! process (the reader runs with `by_process`): every sample is in exactly
//! one process's share of its stack, and every share names a process and a
//! stack.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use native::reader::{self, Options, Output};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Ok = 0,
    Error = 1,
    Panic = 2,
    Wrong = 3,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Error => "error",
            Class::Panic => "panic",
            Class::Wrong => "wrong",
        }
    }
}

pub struct Fixture {
    pub name: String,
    pub bytes: Vec<u8>,
    pub layout: Layout,
    /// Samples per event of the unmutated file.
    pub samples: Vec<u64>,
}

/// Where things are in a perf.data file (as its header says).
#[derive(Clone, Default)]
pub struct Layout {
    pub big_endian: bool,
    pub attr_size: u64,
    pub attrs_off: u64,
    pub attrs_len: u64,
    pub data_off: u64,
    pub data_end: u64,
    pub feature_table: u64,
    pub features: Vec<(u64, u64)>,
    /// (offset, size) of the first records.
    pub records: Vec<(u64, u64)>,
}

pub struct Case {
    pub fixture: usize,
    pub bytes: Vec<u8>,
    pub mutations: Vec<String>,
    /// Only cut after the records: every event must keep its samples.
    pub same_samples: bool,
    /// The execution's number.
    pub seq: u64,
}

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/perfdata")
}

fn u16_at(b: &[u8], o: u64, be: bool) -> u64 {
    let a = [b[o as usize], b[o as usize + 1]];
    (if be { u16::from_be_bytes(a) } else { u16::from_le_bytes(a) }) as u64
}

fn u64_at(b: &[u8], o: u64, be: bool) -> u64 {
    let a: [u8; 8] = b[o as usize..o as usize + 8].try_into().unwrap();
    if be { u64::from_be_bytes(a) } else { u64::from_le_bytes(a) }
}

pub fn layout(b: &[u8]) -> Option<Layout> {
    if b.len() < 104 {
        return None;
    }
    let be = &b[..8] == b"2ELIFREP";
    let mut l = Layout {
        big_endian: be,
        attr_size: u64_at(b, 16, be),
        attrs_off: u64_at(b, 24, be),
        attrs_len: u64_at(b, 32, be),
        data_off: u64_at(b, 40, be),
        ..Default::default()
    };
    l.data_end = l.data_off.checked_add(u64_at(b, 48, be))?;
    l.feature_table = l.data_end;
    let nfeat: u32 = (0..4).map(|i| u64_at(b, 72 + 8 * i, be).count_ones()).sum();
    for i in 0..nfeat as u64 {
        let o = l.data_end + 16 * i;
        if o + 16 <= b.len() as u64 {
            l.features.push((u64_at(b, o, be), u64_at(b, o + 8, be)));
        }
    }
    let mut pos = l.data_off;
    while pos + 8 <= l.data_end.min(b.len() as u64) && l.records.len() < 4096 {
        let size = u16_at(b, pos + 6, be);
        if size < 8 {
            break;
        }
        l.records.push((pos, size));
        pos += size;
    }
    Some(l)
}

fn opts() -> Options {
    // per process too, so that hostile COMM and FORK records are read as well
    Options { kallsyms: None, symfs: Vec::new(), debug_dirs: Vec::new(), by_process: true, threads: 1, filter: Default::default(), share: None }
}

pub fn load_fixtures(dir: &Path) -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for sub in [dir.to_path_buf(), dir.join("arm64"), dir.join("compressed"), dir.join("comm"), dir.join("fuzz")] {
        if let Ok(rd) = std::fs::read_dir(&sub) {
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "data") {
                    paths.push(p);
                }
            }
        }
    }
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let bytes = std::fs::read(&p).unwrap();
        let name = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
        let Ok(o) = reader::read_bytes(&name, &bytes, &opts()) else { continue };
        if o.events.iter().all(|e| e.samples == 0) {
            continue;
        }
        let Some(layout) = layout(&bytes) else { continue };
        out.push(Fixture { name, samples: o.events.iter().map(|e| e.samples).collect(), bytes, layout });
    }
    out
}

/// splitmix64: a small, good, seedable generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, i: u64) -> Rng {
        let mut r = Rng(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next();
        r
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn interesting(r: &mut Rng, len: u64) -> u64 {
    const V: [u64; 19] = [0, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff,
                          1 << 32, 1 << 56, 1 << 63, u64::MAX, u64::MAX - 1, 4096];
    match r.below(V.len() as u64 + 2) {
        i if i < V.len() as u64 => V[i as usize],
        i if i == V.len() as u64 => len,
        _ => len + 1 + r.below(64),
    }
}

fn put(b: &mut [u8], off: u64, width: u64, v: u64, be: bool) -> bool {
    let (o, w) = (off as usize, width as usize);
    if o + w > b.len() {
        return false;
    }
    let bytes = if be { v.to_be_bytes() } else { v.to_le_bytes() };
    let src = if be { &bytes[8 - w..] } else { &bytes[..w] };
    b[o..o + w].copy_from_slice(src);
    true
}

/// One mutation of `b` (whose unmutated layout is `l`); returns its description.
fn mutate(b: &mut Vec<u8>, l: &Layout, r: &mut Rng) -> (String, bool) {
    let len = b.len() as u64;
    let be = l.big_endian;
    let width = [1u64, 2, 4, 8][r.below(4) as usize];
    match r.below(13) {
        0 => {
            let n = 1 + r.below(8);
            for _ in 0..n {
                let o = r.below(len) as usize;
                b[o] ^= 1 << r.below(8);
            }
            (format!("flip {n} bits"), false)
        }
        1 => {
            let o = r.below(len) as usize;
            b[o] = r.below(256) as u8;
            (format!("byte {o} = {}", b[o]), false)
        }
        2 => {
            let o = r.below(len) & !(width - 1);
            let v = interesting(r, len);
            put(b, o, width, v, be);
            (format!("u{} at {o} = {v:#x}", width * 8), false)
        }
        3 => {
            // a header field: sizes, section offsets and sizes, feature bits
            const F: [u64; 12] = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96];
            let o = F[r.below(F.len() as u64) as usize];
            let v = interesting(r, len);
            put(b, o, 8, v, be);
            (format!("header u64 at {o} = {v:#x}"), false)
        }
        4 if l.attr_size >= 80 && l.attrs_len >= l.attr_size => {
            // an attribute field, or its ids section
            let n = l.attrs_len / l.attr_size;
            let base = l.attrs_off + r.below(n) * l.attr_size;
            const F: [(u64, u64); 9] = [(0, 4), (4, 4), (8, 8), (16, 8), (24, 8), (32, 8), (40, 8), (0, 0), (8, 0)];
            let (fo, fw) = F[r.below(F.len() as u64) as usize];
            let (o, w) = if fw == 0 { (base + l.attr_size - 16 + fo, 8) } else { (base + fo, fw) };
            let v = interesting(r, len);
            put(b, o, w, v, be);
            (format!("attr u{} at {o} = {v:#x}", w * 8), false)
        }
        5 if !l.features.is_empty() => {
            // a feature section's table entry, or one of its first counts
            let (fi, (off, size)) = {
                let i = r.below(l.features.len() as u64);
                (i, l.features[i as usize])
            };
            let v = interesting(r, len);
            if r.below(2) == 0 {
                let o = l.feature_table + 16 * fi + 8 * r.below(2);
                put(b, o, 8, v, be);
                (format!("feature {fi} table u64 at {o} = {v:#x}"), false)
            } else {
                let o = off + 4 * r.below((size / 4).clamp(1, 6));
                put(b, o, 4, v, be);
                (format!("feature {fi} u32 at {o} = {v:#x}"), false)
            }
        }
        6 | 7 if !l.records.is_empty() => {
            // a record: its header, or a word of its body (period, time, read values, call chain)
            let (off, size) = l.records[r.below(l.records.len() as u64) as usize];
            let v = interesting(r, len);
            if r.below(3) == 0 {
                let (o, w) = [(off, 4), (off + 4, 2), (off + 6, 2)][r.below(3) as usize];
                put(b, o, w, v, be);
                (format!("record header u{} at {o} = {v:#x}", w * 8), false)
            } else {
                let o = off + 8 + 8 * r.below(((size - 8) / 8).max(1));
                put(b, o, 8, v, be);
                (format!("record body u64 at {o} = {v:#x}"), false)
            }
        }
        8 => {
            let at = r.below(len + 1);
            b.truncate(at as usize);
            (format!("cut at {at}"), false)
        }
        9 => {
            // cut at a section boundary: the attrs, the records, the feature table, a feature section
            let mut cuts = vec![l.attrs_off, l.attrs_off + l.attrs_len, l.data_off, l.data_end,
                                l.feature_table + 16 * l.features.len() as u64];
            for &(off, size) in &l.features {
                cuts.push(off);
                cuts.push(off + size / 2);
            }
            let at = cuts[r.below(cuts.len() as u64) as usize].min(len);
            b.truncate(at as usize);
            (format!("cut at section boundary {at}"), at >= l.data_end)
        }
        10 | 11 if l.records.len() > 2 && l.records.iter().any(|&(o, s)| o + s > len) => {
            // the file was cut before some records: cut it again
            let at = r.below(len + 1);
            b.truncate(at as usize);
            (format!("cut at {at}"), false)
        }
        10 if l.records.len() > 2 => {
            // duplicate a record over another one's place, or splice a run of records elsewhere
            let (so, ss) = l.records[r.below(l.records.len() as u64) as usize];
            let (to, _) = l.records[r.below(l.records.len() as u64) as usize];
            let chunk = b[so as usize..(so + ss) as usize].to_vec();
            let end = ((to + ss) as usize).min(b.len());
            let n = end - to as usize;
            b[to as usize..end].copy_from_slice(&chunk[..n]);
            (format!("record at {so} copied over {to}"), false)
        }
        11 if l.records.len() > 2 => {
            let (so, ss) = l.records[r.below(l.records.len() as u64) as usize];
            let (to, _) = l.records[r.below(l.records.len() as u64) as usize];
            let chunk = b[so as usize..(so + ss) as usize].to_vec();
            let tail = b.split_off(to as usize);
            b.extend_from_slice(&chunk);
            b.extend_from_slice(&tail);
            (format!("record at {so} inserted at {to}"), false)
        }
        _ => {
            // a whole u64 of the records with an interesting value, often the sample period or time
            let o = (l.data_off + r.below(l.data_end.min(len).saturating_sub(l.data_off).max(1))) & !7;
            let v = interesting(r, len);
            put(b, o, 8, v, be);
            (format!("data u64 at {o} = {v:#x}"), false)
        }
    }
}

pub fn make_case(fixtures: &[Fixture], seed: u64, i: u64) -> Case {
    let mut r = Rng::new(seed, i);
    let fi = r.below(fixtures.len() as u64) as usize;
    let f = &fixtures[fi];
    let mut bytes = f.bytes.clone();
    let n = 1 + r.below(4);
    let mut mutations = Vec::new();
    let mut only_late_cuts = true;
    for _ in 0..n {
        if bytes.is_empty() {
            break;
        }
        let (m, late_cut) = mutate(&mut bytes, &f.layout, &mut r);
        only_late_cuts &= late_cut;
        mutations.push(m);
    }
    Case { fixture: fi, bytes, mutations, same_samples: only_late_cuts, seq: i }
}

pub fn describe(fixtures: &[Fixture], c: &Case) -> String {
    format!("{}: {}", fixtures[c.fixture].name, c.mutations.join("; "))
}

/// The first broken invariant of a result (see the module text).
pub fn invariant_problem(o: &Output, file_len: usize, expect: Option<&[u64]>) -> Option<String> {
    let nsym = o.sym_names.len();
    let nstacks = o.stack_offsets.len().saturating_sub(1);
    if o.stack_offsets.last().copied().unwrap_or(0) as usize != o.stack_frames.len() {
        return Some("stack offsets do not end at the frames' end".into());
    }
    if o.stack_frames.iter().any(|&f| f as usize >= nsym) {
        return Some("a stack frame names no symbol".into());
    }
    let mut all = 0u64;
    for e in &o.events {
        let t = e.total_weight as f64;
        let eps = 1e-9 * t.max(1.0);
        if e.stack_ids.iter().any(|&s| s as usize >= nstacks) {
            return Some(format!("{}: a stack id out of range", e.name));
        }
        // kperfdiff keeps only the symbols an event counts: its stacks and call edges name no other
        for &s in &e.stack_ids {
            let (a, b) = (o.stack_offsets[s as usize] as usize, o.stack_offsets[s as usize + 1] as usize);
            if a > b || b > o.stack_frames.len() || o.stack_frames[a..b].iter().any(|&f| e.children_count[f as usize] == 0) {
                return Some(format!("{}: a stack names a symbol the event does not count", e.name));
            }
        }
        if e.edges.iter().any(|&f| f as usize >= nsym || e.children_count[f as usize] == 0) {
            return Some(format!("{}: a call edge names a symbol the event does not count", e.name));
        }
        let count: u64 = e.stack_count.iter().sum();
        if count != e.samples {
            return Some(format!("{}: {} samples but its stacks count {count}", e.name, e.samples));
        }
        let sw: f64 = e.stack_weight.iter().sum();
        if (sw - t).abs() > eps.max(1e-6 * t) {
            return Some(format!("{}: total weight {} but its stacks weigh {sw}", e.name, e.total_weight));
        }
        for (what, v) in [("self", &e.self_weight), ("children", &e.children_weight)] {
            if v.iter().any(|&w| !w.is_finite() || w < 0.0 || w > t + eps) {
                return Some(format!("{}: a {what} weight is negative, not finite or above the total", e.name));
            }
        }
        // per process: every sample in exactly one process's share of its stack
        if e.proc_comm.iter().any(|&c| c as usize >= o.comm_names.len()) || e.proc_stack.iter().any(|&s| s as usize >= nstacks) {
            return Some(format!("{}: a process share names no process or no stack", e.name));
        }
        let pc: u64 = e.proc_count.iter().sum();
        let pw: f64 = e.proc_weight.iter().sum();
        if pc != e.samples || (pw - t).abs() > eps.max(1e-6 * t) {
            return Some(format!("{}: {} samples of weight {t} but the processes' shares count {pc} of weight {pw}",
                                e.name, e.samples));
        }
        let ss: f64 = e.self_weight.iter().sum();
        if (ss - sw).abs() > eps.max(1e-6 * t) {
            return Some(format!("{}: self weights add up to {ss}, the stacks to {sw}", e.name));
        }
        all = all.saturating_add(e.samples);
    }
    // A SAMPLE record takes at least 8 bytes; a group read gives each member event one sample.
    if all > (file_len as u64 / 8) * o.events.len() as u64 {
        return Some(format!("{all} samples from a file of {file_len} bytes"));
    }
    if let Some(want) = expect {
        let got: Vec<u64> = o.events.iter().map(|e| e.samples).collect();
        if got != want {
            return Some(format!("cut after the records, the events' samples changed from {want:?} to {got:?}"));
        }
    }
    None
}

fn clean_sentence(msg: &str) -> Option<String> {
    if msg.trim().is_empty() {
        return Some("an empty error".into());
    }
    if msg.contains('\n') || msg.len() > 600 {
        return Some(format!("an error that is not one sentence: {msg:?}"));
    }
    if msg.contains("panicked") || msg.contains("internal error") {
        return Some(format!("an internal error: {msg}"));
    }
    None
}

pub fn run_case(fixtures: &[Fixture], c: &Case, name: &str) -> (Class, String) {
    let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader::read_bytes(name, &c.bytes, &opts())));
    match got {
        Err(p) => {
            let msg = p.downcast_ref::<&str>().map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            (Class::Panic, msg)
        }
        Ok(Err(e)) => {
            let msg = e.to_string();
            match clean_sentence(&msg) {
                Some(problem) => (Class::Wrong, problem),
                None => (Class::Error, msg),
            }
        }
        Ok(Ok(o)) => {
            let expect = c.same_samples.then(|| fixtures[c.fixture].samples.as_slice());
            if let Some(p) = invariant_problem(&o, c.bytes.len(), expect) {
                return (Class::Wrong, p);
            }
            // The same input on three threads (the parts' merge, `parallel`) gives the same
            // output, but for the count of chain parts symbolized (a cache's, per thread);
            // checked on every fourth input, which keeps the run's time.
            if c.seq % 4 != 0 {
                return (Class::Ok, String::new());
            }
            let three = Options { threads: 3, ..opts() };
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader::read_bytes(name, &c.bytes, &three))) {
                Ok(Ok(mut t)) => {
                    let mut o = o;
                    for out in [&mut o, &mut t] {
                        out.facts.retain(|(k, _)| k != "symbolized_chain_parts");
                    }
                    if t != o {
                        return (Class::Wrong, "read on three threads, it gives another output".into());
                    }
                    // and with a sample filter (perf report's --comms and --cpu), on every eighth
                    // input: one thread and three give the same
                    if c.seq % 8 == 0 {
                        let filter = native::reader::SampleFilter {
                            comms: Some(["dd".to_string(), "sh".to_string()].into_iter().collect()),
                            cpus: Some([0u32, 1].into_iter().collect()),
                            ..Default::default()
                        };
                        let one = Options { filter: filter.clone(), ..opts() };
                        let three = Options { threads: 3, filter, ..opts() };
                        let read = |o: &Options| {
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader::read_bytes(name, &c.bytes, o)))
                        };
                        match (read(&one), read(&three)) {
                            (Ok(Ok(mut a)), Ok(Ok(mut b))) => {
                                for out in [&mut a, &mut b] {
                                    out.facts.retain(|(k, _)| k != "symbolized_chain_parts");
                                }
                                if a != b {
                                    return (Class::Wrong, "filtered, read on three threads, it gives another output".into());
                                }
                            }
                            (Ok(Err(_)), Ok(Err(_))) => {}
                            (Err(_), _) | (_, Err(_)) => return (Class::Panic, "filtered, the reader panicked".into()),
                            _ => return (Class::Wrong, "filtered, one thread and three disagree on refusing it".into()),
                        }
                    }
                    (Class::Ok, String::new())
                }
                Ok(Err(e)) => (Class::Wrong, format!("read on three threads, it is refused: {e}")),
                Err(_) => (Class::Panic, "read on three threads, the reader panicked".into()),
            }
        }
    }
}

/// Panics are counted, not printed.
pub fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}
