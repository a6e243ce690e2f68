//! Keeps the `thread_start` example (native/examples/thread_start.rs, the measurement behind
//! `spread`'s pool) running: `cargo test` builds the examples, and this runs it for a few rounds
//! and checks that every measurement comes out. What it measures is for the harness to print,
//! not for a test to judge.
use std::process::Command;

#[test]
fn thread_start_measures_every_way() {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join("thread_start");
    assert!(example.exists(), "{} is not built (cargo test builds the examples)", example.display());
    let out = Command::new(&example).arg("5").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    for what in ["made   helper began", "made   both done", "woken  helper began", "woken  both done", "pool   helper began",
                 "pool   both done", "burst  made", "burst  pool"] {
        let line = text.lines().find(|l| l.contains(what)).unwrap_or_else(|| panic!("no {what:?} in:\n{text}"));
        assert!(line.contains("p50") && line.contains("max"), "{line}");
    }
}
