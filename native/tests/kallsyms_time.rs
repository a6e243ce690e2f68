//! Keeps the `kallsyms_time` example (native/examples/kallsyms_time.rs, a cold parse of a
//! kallsyms file in a fresh process) running: `cargo test` builds the examples, and this parses a
//! small file with it on one and on two threads and checks what it prints. How long the parse
//! takes is for the harness to print, not for a test to judge.
use std::process::Command;

#[test]
fn kallsyms_time_parses_and_prints_its_measures() {
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().and_then(|deps| deps.parent()).unwrap().join("examples").join("kallsyms_time");
    assert!(example.exists(), "{} is not built (cargo test builds the examples)", example.display());
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
