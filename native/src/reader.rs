//! perf.data -> per-event aggregated profiles.
//!
//! The reader is layered as `linux-perf-data` layers a perf.data reader, one
//! module a stage:
//!
//! 1. `layout` checks the header, attribute and feature sections against the
//!    file and gives the crate a corrected view of it; `header` reads the
//!    events (attributes and their ids) and the header facts from it;
//! 2. `order` visits the records in perf's order (sorted by time within the
//!    FINISHED_ROUND windows) straight from a memory map, paging it through
//!    a window;
//! 3. `decode` decodes them: samples into (event, stack, weight), mapping
//!    records into the processes' mappings (`procmaps`) and, when asked, the
//!    threads' names (`comms`);
//! 4. `symbolize` resolves addresses: kernel ones through kallsyms, user ones
//!    through the mappings and the files' ELF symbols;
//! 5. `aggregate` interns the call chains into stacks, adds up each event's
//!    weights and builds the `Output`; `warnings` says what could not be read.
//!
//! The driver: it runs the stages and only imports them; what they share is
//! below them (`options`, `output`, `error`).
use crate::aggregate::Aggregator;
use crate::decode::{Counts, Decoder};
use crate::header::{self, Header};
use crate::kallsyms::Kallsyms;
use crate::layout::{self, Layout};
use crate::order;
use crate::parallel;
use crate::symbolize::Symbols;
use crate::timing::Clock;
use crate::warnings;
use byteorder::{BigEndian, ByteOrder, LittleEndian};
use linux_perf_data::Endianness;
use std::path::Path;

// The crate's reading API: `read` and `read_bytes`, what they take and give back.
pub use crate::error::Error;
pub use crate::options::{Options, SampleFilter};
pub use crate::output::{EventOut, Fact, Output};

pub fn read(path: &Path, opts: &Options) -> Result<Output, Error> {
    let name = path.display().to_string();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(source) => return Err(Error::Open { name, source }),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(source) => return Err(Error::Metadata { name, source }),
    };
    if meta.is_dir() {
        return Err(Error::IsDirectory { name });
    }
    if meta.len() == 0 {
        return Err(Error::Empty { name });
    }
    // SAFETY: read-only private map; a file changed underneath would give
    // wrong numbers but every access is bounds-checked against the map length.
    let map = match unsafe { memmap2::Mmap::map(&file) } {
        Ok(m) => m,
        Err(source) => return Err(Error::Map { name, source }),
    };
    read_data(&name, &map, Some((&map, &file)), opts)
}

/// Reads a perf.data file already in memory (`name` is used in messages).
pub fn read_bytes(name: &str, data: &[u8], opts: &Options) -> Result<Output, Error> {
    read_data(name, data, None, opts)
}

/// `mapped`: the map `data` is, and the file it maps.
fn read_data(name: &str, data: &[u8], mapped: Option<(&memmap2::Mmap, &std::fs::File)>, opts: &Options)
             -> Result<Output, Error> {
    if data.len() < 8 {
        return Err(Error::TooShort { name: name.into() });
    }
    match &data[..8] {
        b"PERFILE2" => read_impl::<LittleEndian>(name, data, mapped, opts, Endianness::LittleEndian),
        b"2ELIFREP" => read_impl::<BigEndian>(name, data, mapped, opts, Endianness::BigEndian),
        b"PERFFILE" => Err(Error::Version1 { name: name.into() }),
        _ => Err(Error::BadMagic { name: name.into() }),
    }
}

fn read_impl<T: ByteOrder>(
    name: &str,
    data: &[u8],
    mapped: Option<(&memmap2::Mmap, &std::fs::File)>,
    opts: &Options,
    endian: Endianness,
) -> Result<Output, Error> {
    let clock = Clock::start();
    let mut layout = layout::check::<T>(name, data)?;
    let Header { events, mut facts, build_ids, compressed, mut perf_file, mut record_iter } =
        header::read(name, data, &layout, endian)?;
    let span = (layout.data_off as usize, (layout.data_off + layout.data_size) as usize);
    // One file on several threads when it is large enough (a part per `parallel::threads_for`
    // bytes), its records are not compressed and its samples need no order among themselves
    // (no PERF_SAMPLE_READ); its kallsyms is then parsed on those threads too.
    let threads = parallel::threads_for(span.1 - span.0, opts.threads);
    let on_threads = threads > 1 && !compressed && events.samples_commute();
    let _pad = on_threads.then(parallel::HeapPad::set);
    clock.mark(format_args!("layout and header"));
    let kallsyms = match &opts.kallsyms {
        Some(p) => Some(Kallsyms::load_shared(p, if on_threads { threads } else { 1 })?),
        None => None,
    };
    clock.mark(format_args!("kallsyms"));
    if let Some(p) = &opts.kallsyms {
        facts.push(("kallsyms".into(), Fact::Str(p.display().to_string())));
    }
    let parallel = if on_threads {
        parallel::read::<T>(name, data, mapped, span, &events, opts, &kallsyms, &build_ids, threads, &clock)?
    } else {
        None
    };
    let (dec, cut) = match parallel {
        Some(done) => done,
        None => {
            let mut dec = Decoder::new(&events, Symbols::new(opts, kallsyms, build_ids, 1), opts, 1);
            let cut = if compressed {
                order::read_compressed::<T, _>(&mut perf_file, &mut record_iter, &mut dec)
            } else {
                order::read_mapped::<T, _, _>(name, data, mapped.map(|m| m.0), span, &events, order::whole(), &mut dec)?
            };
            clock.mark(format_args!("records read on one thread ({} chain parts symbolized)", dec.agg.symbolized_parts()));
            (dec, cut)
        }
    };

    let Decoder { mut syms, agg, counts, comms, .. } = dec;
    let mut warnings = std::mem::take(&mut layout.warnings);
    warnings.append(&mut syms.warnings);
    warnings::closing(name, cut, &layout, &counts, agg.overflowed, &syms, &mut warnings);
    closing_facts(&mut facts, &layout, &counts, &agg, &syms);
    clock.mark(format_args!("warnings and facts"));
    let comm_names = comms.map(|c| c.into_names()).unwrap_or_default();
    let out = agg.into_output(&events, syms, &counts.records, facts, warnings, comm_names, if on_threads { threads } else { 1 });
    clock.mark(format_args!("output built"));
    crate::cleanup::finish();
    Ok(out)
}

/// The facts known once the records are read.
fn closing_facts(facts: &mut Vec<(String, Fact)>, layout: &Layout, counts: &Counts, agg: &Aggregator, syms: &Symbols) {
    facts.push(("samples".into(), Fact::Int(counts.samples as i64)));
    facts.push(("samples_filtered_out".into(), Fact::Int(counts.filtered_out as i64)));
    facts.push(("symbolized_chain_parts".into(), Fact::Int(agg.symbolized_parts() as i64)));
    facts.push(("lost_events".into(), Fact::Int(counts.lost_events as i64)));
    facts.push(("lost_samples".into(), Fact::Int(counts.lost_samples as i64)));
    facts.push(("truncated".into(), Fact::Bool(layout.truncated_at.is_some())));
    facts.push(("kernel_reloc".into(), Fact::Int(syms.kernel_reloc)));
    if let Some((n, a)) = &syms.kernel_ref {
        facts.push(("kernel_ref_symbol".into(), Fact::Str(format!("{n}={a:#x}"))));
    }
    // What a symbol source is checked against (ingest/symcheck.py): the recorded kernel and
    // module mappings, and the symbol source's own landmarks. Addresses as hex text.
    if let Some((start, len, pgoff)) = syms.kernel_map {
        facts.push(("kernel_map".into(), Fact::List(vec![format!("{start:#x}"), format!("{len:#x}"), format!("{pgoff:#x}")])));
    }
    if !syms.module_maps.is_empty() {
        let maps = syms.module_maps.iter().map(|(n, s, l)| (n.clone(), format!("{s:#x} {l:#x}"))).collect();
        facts.push(("module_maps".into(), Fact::Pairs(maps)));
    }
    if let Some(k) = syms.kallsyms() {
        let marks = [("_text", k.text), ("_stext", k.stext), ("_etext", k.etext), ("_end", k.end)];
        let marks = marks.iter().filter_map(|(n, a)| a.map(|a| (n.to_string(), format!("{a:#x}")))).collect();
        facts.push(("kallsyms_landmarks".into(), Fact::Pairs(marks)));
        if let Some(b) = &k.build_id {
            facts.push(("kallsyms_build_id".into(), Fact::Str(b.clone())));
        }
        let spans = k.module_spans();
        let mods = k.modules.iter().zip(spans).skip(1)
            .filter_map(|(n, s)| s.map(|(lo, hi)| (n.trim_matches(|c| c == '[' || c == ']').to_string(), format!("{lo:#x} {hi:#x}"))))
            .collect();
        facts.push(("kallsyms_modules".into(), Fact::Pairs(mods)));
    }
}
