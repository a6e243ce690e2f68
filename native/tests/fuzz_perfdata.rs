//! The seeded mutation fuzzer of the perf.data reader, bounded for CI (see
//! tests/fuzz/mod.rs for the mutations and the invariants).
//!
//! `KPD_FUZZ_ITERS` (default 20000) executions of seed `KPD_FUZZ_SEED` (default
//! 1), or as many as fit in `KPD_FUZZ_SECONDS`; fails on any panic or wrong
//! result. The address space is capped at 4 GiB so that an allocation sized
//! from a damaged count fails (and the test with it) instead of swapping.
mod fuzz;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.trim().parse().unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}")))
}

/// Caps the virtual address space of this test process (Linux RLIMIT_AS).
fn limit_address_space(bytes: u64) {
    extern "C" {
        fn setrlimit(resource: i32, rlim: *const [u64; 2]) -> i32;
    }
    const RLIMIT_AS: i32 = 9;
    // SAFETY: setrlimit reads two u64s (struct rlimit on 64-bit Linux).
    unsafe { setrlimit(RLIMIT_AS, &[bytes, bytes]) };
}

#[test]
fn fuzz_perfdata_reader() {
    let seed = env_u64("KPD_FUZZ_SEED").unwrap_or(1);
    let seconds = env_u64("KPD_FUZZ_SECONDS");
    let iters = env_u64("KPD_FUZZ_ITERS").unwrap_or(if seconds.is_some() { u64::MAX } else { 20000 });
    let fixtures = fuzz::load_fixtures(&fuzz::fixtures_dir());
    assert!(fixtures.len() >= 5, "only {} perf.data fixtures read cleanly", fixtures.len());
    #[cfg(target_os = "linux")]
    limit_address_space(4 << 30);
    fuzz::quiet_panics();
    // Every input is also read on three threads, however small (see fuzz::run_case).
    std::env::set_var("KPERFDIFF_PARALLEL_MIN_BYTES", "0");
    let t0 = std::time::Instant::now();
    let mut counts = [0u64; 4];
    let mut failures = Vec::new();
    let mut n = 0;
    while n < iters && seconds.is_none_or(|s| t0.elapsed().as_secs() < s) {
        let case = fuzz::make_case(&fixtures, seed, n);
        let name = format!("{}#{n}", fixtures[case.fixture].name);
        let (class, detail) = fuzz::run_case(&fixtures, &case, &name);
        counts[class as usize] += 1;
        if class >= fuzz::Class::Panic {
            failures.push(format!("#{n} {}: {detail} [{}]", class.name(), fuzz::describe(&fixtures, &case)));
        }
        n += 1;
    }
    let _ = std::panic::take_hook();
    println!(
        "fuzz_perfdata: seed {seed}, {n} executions over {} fixtures in {:.1} s: ok {}, error {}, panic {}, wrong {}",
        fixtures.len(), t0.elapsed().as_secs_f64(), counts[0], counts[1], counts[2], counts[3]
    );
    assert!(
        failures.is_empty(),
        "{} failures (reproduce one with `cargo run --profile testing --example fuzz_perfdata -- --seed {seed} --from N --count 1`):\n{}",
        failures.len(),
        failures.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn oracle_catches_a_stack_naming_a_symbol_its_event_does_not_count() {
    // what kperfdiff's load path cannot take: it keeps only the symbols an event counts
    let fixtures = fuzz::load_fixtures(&fuzz::fixtures_dir());
    let f = fixtures.iter().find(|f| f.name == "tiny-group.perf.data").expect("tiny-group.perf.data");
    let opts = native::reader::Options { kallsyms: None, symfs: Vec::new(), debug_dirs: Vec::new(), by_process: true, threads: 1, filter: Default::default(), share: None };
    let mut o = native::reader::read_bytes(&f.name, &f.bytes, &opts).unwrap();
    assert_eq!(fuzz::invariant_problem(&o, f.bytes.len(), None), None);
    let s = o.events[1].stack_ids[0] as usize;
    let leaf = o.stack_frames[o.stack_offsets[s + 1] as usize - 1] as usize;
    o.events[1].children_count[leaf] = 0;
    let problem = fuzz::invariant_problem(&o, f.bytes.len(), None).unwrap();
    assert!(problem.ends_with("a stack names a symbol the event does not count"), "{problem}");
}
