//! perf report's sample filters in the reader (`Options::filter`): comm.perf.data's samples by
//! process name (`perf script -F comm` counts sh 41, renamed 35, dd 25, seq 20, perl 1), the
//! same on one thread and three, and nothing kept counted as filtered out.
use native::reader::{self, Fact, Options, SampleFilter};
use std::path::PathBuf;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/perfdata/comm/comm.perf.data")
}

fn opts(filter: SampleFilter, threads: usize) -> Options {
    Options { kallsyms: None, symfs: Vec::new(), debug_dirs: Vec::new(), by_process: false, threads, filter, share: None }
}

fn fact(out: &reader::Output, key: &str) -> i64 {
    match out.facts.iter().find(|(k, _)| k == key) {
        Some((_, Fact::Int(v))) => *v,
        _ => panic!("no fact {key}"),
    }
}

#[test]
fn comm_filter_keeps_the_samples_of_those_names_on_any_number_of_threads() {
    let names = |v: &[&str]| SampleFilter { comms: Some(v.iter().map(|s| s.to_string()).collect()), ..Default::default() };
    for (keep, kept) in [(vec!["dd"], 25u64), (vec!["sh", "seq"], 61), (vec!["nosuch"], 0)] {
        let one = reader::read(&fixture(), &opts(names(&keep), 1)).unwrap();
        std::env::set_var("KPERFDIFF_PARALLEL_MIN_BYTES", "0");
        let mut three = reader::read(&fixture(), &opts(names(&keep), 3)).unwrap();
        let mut one_cmp = reader::read(&fixture(), &opts(names(&keep), 1)).unwrap();
        for o in [&mut three, &mut one_cmp] {
            o.facts.retain(|(k, _)| k != "symbolized_chain_parts");
        }
        assert!(one_cmp == three, "{keep:?}: three threads differ");
        assert_eq!(one.events[0].samples, kept, "{keep:?}");
        assert_eq!(fact(&one, "samples_filtered_out"), 122 - kept as i64, "{keep:?}");
    }
    // no filter: every sample, none filtered out
    let all = reader::read(&fixture(), &opts(SampleFilter::default(), 1)).unwrap();
    assert_eq!((all.events[0].samples, fact(&all, "samples_filtered_out")), (122, 0));
    // a pid no sample has, and a CPU of a file without CPUs: nothing kept
    let pid = SampleFilter { pids: Some([-7].into_iter().collect()), ..Default::default() };
    let cpu = SampleFilter { cpus: Some([0].into_iter().collect()), ..Default::default() };
    for f in [pid, cpu] {
        assert_eq!(reader::read(&fixture(), &opts(f, 1)).unwrap().events[0].samples, 0);
    }
}
