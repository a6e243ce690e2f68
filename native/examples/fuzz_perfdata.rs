//! The perf.data reader's fuzzer as a program, for fuzz/fuzz_perfdata.py,
//! which runs it in child processes so that an abort is counted, not lost:
//!
//!     fuzz_perfdata [--seed S] [--from I] [--count N] [--dump FILE | --dump-dir DIR]
//!
//! Prints one line per execution, `INDEX<TAB>CLASS[<TAB>DETAIL<TAB>MUTATIONS]`
//! (classes: ok, error, panic, wrong; harness when the fuzzer itself failed),
//! then `done N`. With `--dump`, writes the
//! input of execution `--from` to FILE instead of running it. With
//! `--dump-dir`, each input is also written to DIR/INDEX.perf.data before it is
//! run, and every line carries its mutations (`INDEX<TAB>ok<TAB><TAB>MUTATIONS`),
//! so that the Python load path can be run on the same inputs
//! (fuzz/fuzzing.py).
#[path = "../tests/fuzz/mod.rs"]
mod fuzz;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1));
    let num = |flag: &str, default: u64| get(flag).map(|v| v.parse().expect("a whole number")).unwrap_or(default);
    let (seed, from, count) = (num("--seed", 1), num("--from", 0), num("--count", 1000));
    let fixtures = fuzz::load_fixtures(&fuzz::fixtures_dir());
    if let Some(path) = get("--dump") {
        let case = fuzz::make_case(&fixtures, seed, from);
        std::fs::write(path, &case.bytes).expect("cannot write the dump");
        println!("{}", fuzz::describe(&fixtures, &case));
        return;
    }
    let dump_dir = get("--dump-dir").map(std::path::PathBuf::from);
    fuzz::quiet_panics();
    for i in from..from.saturating_add(count) {
        // A panic of the fuzzer itself is reported apart from the reader's.
        let Ok(case) = std::panic::catch_unwind(|| fuzz::make_case(&fixtures, seed, i)) else {
            println!("{i}\tharness\tthe fuzzer could not make this input");
            continue;
        };
        let name = format!("{}#{i}", fixtures[case.fixture].name);
        if let Some(dir) = &dump_dir {
            std::fs::write(dir.join(format!("{i}.perf.data")), &case.bytes).expect("cannot write the input");
        }
        let (class, detail) = fuzz::run_case(&fixtures, &case, &name);
        if class == fuzz::Class::Ok && dump_dir.is_none() {
            println!("{i}\tok");
        } else {
            let detail = detail.replace(['\t', '\n'], " ");
            println!("{i}\t{}\t{detail}\t{}", class.name(), fuzz::describe(&fixtures, &case));
        }
    }
    println!("done {count}");
}
