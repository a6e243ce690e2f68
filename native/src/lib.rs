//! kperfdiff's native core: reads perf.data and aggregates samples.
//!
//! `read_perf_data(path, kallsyms=None, symfs=None, debug_dirs=None, by_process=False, threads=1,
//! comms=None, pids=None, tids=None, cpus=None, share=None)` returns a
//! dict of compact data (strings for the symbol table, `bytes` in native byte
//! order for numeric arrays); see `output::Output`. The top of the crate: it declares the
//! modules and is the one place their errors become Python exceptions (`reader::Error` a
//! `PerfDataError` of one sentence, an ELF file's damage a `ValueError`).
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::path::PathBuf;

mod abi;
mod aggregate;
mod cleanup;
mod comms;
mod decode;
mod defects;
pub mod elf;
mod elfsyms;
mod error;
mod header;
mod history;
mod intern;
pub mod kallsyms;
mod layout;
mod options;
mod order;
mod output;
mod parallel;
mod procmaps;
pub mod reader;
pub mod spread;
mod symbolize;
mod timing;
mod warnings;

pyo3::create_exception!(native, PerfDataError, pyo3::exceptions::PyException, "A perf.data file cannot be read.");

/// Version of the native module, so Python can tell a stale build.
#[pyfunction]
fn native_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is a plain numeric type (u8/u32/u64/f64) with no padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// Whether linux-perf-event-reader still mis-parses group read values (see defects.rs).
#[pyfunction]
fn crate_sample_read_defect() -> bool {
    defects::crate_sample_read_defect()
}

/// The ELF symbol tables of reads made together: reads given the same `SymbolShare` (the two
/// sides of a diff, read at once on two threads) parse a library both need once. It lives as
/// long as the Python object, so a share is made for one group of reads, not kept.
#[pyclass(frozen)]
struct SymbolShare(std::sync::Arc<elfsyms::SharedSyms>);

#[pymethods]
impl SymbolShare {
    #[new]
    fn new() -> Self {
        SymbolShare(Default::default())
    }
}

/// Read a perf.data file and aggregate it per event, on up to `threads` threads (the
/// result is the same for every number). Raises PerfDataError with one sentence when
/// the file cannot be read. `comms`, `pids`, `tids`, `cpus`: keep only the samples of these
/// (perf report's --comms, --pid, --tid, --cpu); the header's `samples_filtered_out` counts the others.
#[pyfunction]
#[pyo3(signature = (path, kallsyms=None, symfs=None, debug_dirs=None, by_process=false, threads=1,
                    comms=None, pids=None, tids=None, cpus=None, share=None))]
#[allow(clippy::too_many_arguments)]
fn read_perf_data<'py>(
    py: Python<'py>,
    path: PathBuf,
    kallsyms: Option<PathBuf>,
    symfs: Option<Vec<PathBuf>>,
    debug_dirs: Option<Vec<PathBuf>>,
    by_process: bool,
    threads: usize,
    comms: Option<Vec<String>>,
    pids: Option<Vec<i32>>,
    tids: Option<Vec<i32>>,
    cpus: Option<Vec<u32>>,
    share: Option<PyRef<'py, SymbolShare>>,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = options::Options {
        kallsyms,
        symfs: symfs.unwrap_or_default(),
        debug_dirs: debug_dirs.unwrap_or_default(),
        by_process,
        threads,
        filter: options::SampleFilter {
            comms: comms.map(|v| v.into_iter().collect()),
            pids: pids.map(|v| v.into_iter().collect()),
            tids: tids.map(|v| v.into_iter().collect()),
            cpus: cpus.map(|v| v.into_iter().collect()),
        },
        share: share.map(|s| s.0.clone()),
    };
    let display = path.display().to_string();
    let result = py.allow_threads(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader::read(&path, &opts)))
    });
    let out = match result {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(PerfDataError::new_err(e.to_string())),
        Err(p) => {
            return Err(PerfDataError::new_err(format!(
                "internal error while reading {display} ({}); please report it with the file",
                panic_message(&p)
            )))
        }
    };
    let clock = timing::Clock::start();
    let profile = to_python(py, out);
    clock.mark(format_args!("to_python (the dict)"));
    cleanup::give_back();
    clock.mark(format_args!("memory given back (malloc_trim; in the background after a read on threads)"));
    profile
}

fn to_python(py: Python<'_>, out: output::Output) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let facts = PyDict::new(py);
    for (k, v) in &out.facts {
        match v {
            output::Fact::Str(s) => facts.set_item(k, s)?,
            output::Fact::Int(i) => facts.set_item(k, i)?,
            output::Fact::Bool(b) => facts.set_item(k, b)?,
            output::Fact::List(l) => facts.set_item(k, l)?,
            output::Fact::Pairs(p) => facts.set_item(k, p.clone())?,
        }
    }
    d.set_item("header", facts)?;
    d.set_item("warnings", &out.warnings)?;
    let stats = PyDict::new(py);
    for (k, v) in &out.stats {
        stats.set_item(k, v)?;
    }
    d.set_item("record_counts", stats)?;
    d.set_item("sym_names", &out.sym_names)?;
    d.set_item("sym_dso", PyBytes::new(py, as_bytes(&out.sym_dso)))?;
    d.set_item("sym_kernel", PyBytes::new(py, as_bytes(&out.sym_kernel)))?;
    d.set_item("dso_names", &out.dso_names)?;
    d.set_item("dso_paths", &out.dso_paths)?;
    d.set_item("stack_frames", PyBytes::new(py, as_bytes(&out.stack_frames)))?;
    d.set_item("stack_offsets", PyBytes::new(py, as_bytes(&out.stack_offsets)))?;
    let events = PyList::empty(py);
    for e in &out.events {
        let ed = PyDict::new(py);
        ed.set_item("name", &e.name)?;
        ed.set_item("type", e.type_)?;
        ed.set_item("config", e.config)?;
        ed.set_item("sample_type", e.sample_type)?;
        ed.set_item("read_format", e.read_format)?;
        ed.set_item("freq", e.freq)?;
        ed.set_item("period_or_freq", e.period_or_freq)?;
        ed.set_item("has_period", e.has_period)?;
        ed.set_item("samples", e.samples)?;
        ed.set_item("total_weight", e.total_weight)?;
        ed.set_item("stack_ids", PyBytes::new(py, as_bytes(&e.stack_ids)))?;
        ed.set_item("stack_weight", PyBytes::new(py, as_bytes(&e.stack_weight)))?;
        ed.set_item("stack_count", PyBytes::new(py, as_bytes(&e.stack_count)))?;
        ed.set_item("self_weight", PyBytes::new(py, as_bytes(&e.self_weight)))?;
        ed.set_item("children_weight", PyBytes::new(py, as_bytes(&e.children_weight)))?;
        ed.set_item("self_count", PyBytes::new(py, as_bytes(&e.self_count)))?;
        ed.set_item("children_count", PyBytes::new(py, as_bytes(&e.children_count)))?;
        ed.set_item("edges", PyBytes::new(py, as_bytes(&e.edges)))?;
        ed.set_item("edge_weight", PyBytes::new(py, as_bytes(&e.edge_weight)))?;
        ed.set_item("edge_count", PyBytes::new(py, as_bytes(&e.edge_count)))?;
        ed.set_item("proc_comm", PyBytes::new(py, as_bytes(&e.proc_comm)))?;
        ed.set_item("proc_stack", PyBytes::new(py, as_bytes(&e.proc_stack)))?;
        ed.set_item("proc_weight", PyBytes::new(py, as_bytes(&e.proc_weight)))?;
        ed.set_item("proc_count", PyBytes::new(py, as_bytes(&e.proc_count)))?;
        events.append(ed)?;
    }
    d.set_item("events", events)?;
    d.set_item("comm_names", &out.comm_names)?;
    Ok(d)
}

#[pymodule]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(native_version, m)?)?;
    m.add_function(wrap_pyfunction!(read_perf_data, m)?)?;
    m.add_class::<SymbolShare>()?;
    m.add_function(wrap_pyfunction!(crate_sample_read_defect, m)?)?;
    m.add_function(wrap_pyfunction!(elf::elf_info, m)?)?;
    m.add_function(wrap_pyfunction!(elf::elf_functions, m)?)?;
    m.add_function(wrap_pyfunction!(kallsyms::symbol_map, m)?)?;
    m.add("PerfDataError", m.py().get_type::<PerfDataError>())?;
    // Every call into the reader catches panics and turns them into a PerfDataError
    // sentence; the default hook would also print the panic on stderr.
    std::panic::set_hook(Box::new(|_| {}));
    Ok(())
}
