//! Keeps the measuring examples running: `cargo test` builds the examples, and each test here runs
//! one on a small input and checks what it prints. What they measure is for the harness to print,
//! not for a test to judge.
//! - `thread_start` (native/examples/thread_start.rs, the measurement behind `spread`'s pool);
//! - `kallsyms_time` (native/examples/kallsyms_time.rs, a cold parse of a kallsyms file in a fresh
//!   process).
use std::path::PathBuf;
use std::process::Command;

/// The built example `name`, beside this test's binary.
fn built_example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join(name);
    assert!(example.exists(), "{} is not built (cargo test builds the examples)", example.display());
    example
}

#[test]
fn thread_start_measures_every_way() {
    let out = Command::new(built_example("thread_start")).arg("5").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for what in ["made   helper began", "made   both done", "woken  helper began", "woken  both done", "pool   helper began",
                 "pool   both done", "burst  made", "burst  pool"] {
        let line = text.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} in:\n{text}"));
        assert!(line.contains("p50") && line.contains("max"), "{line}");
    }
}

#[test]
fn kallsyms_time_parses_and_prints_its_measures() {
    let example = built_example("kallsyms_time");
    let dir = std::env::temp_dir().join(format!("kpd-kallsyms-time-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kallsyms");
    let mut text = String::new();
    for i in 0..40_000u64 {
        text.push_str(&format!("{:016x} T f{i}\n", 0xffff_ffff_8100_0000u64 + i * 32));
    }
    std::fs::write(&file, text).unwrap();
    for threads in ["1", "2"] {
        let out = Command::new(&example).arg(&file).arg(threads).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8(out.stdout).unwrap();
        assert!(line.starts_with(&format!("{threads} threads: ")) && line.contains(" ms, cpu ")
                && line.contains(" faults, 40000 symbols"), "{line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
