//! Times one cold parse of a kallsyms file in a fresh process (its memory all new, as in a
//! `kperfdiff diff`): `cargo run --release --example kallsyms_time -- FILE [THREADS]`. Prints
//! the parse's wall time, the process's CPU time and its page faults; run it several times.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::PathBuf::from(args.get(1).expect("usage: kallsyms_time FILE [THREADS]"));
    let threads: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let usage = || {
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        let cpu = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
        (cpu(u.ru_utime) + cpu(u.ru_stime), u.ru_minflt)
    };
    let (c0, f0) = usage();
    let t = std::time::Instant::now();
    let k = native::kallsyms::Kallsyms::load_on(&path, threads).expect("parse failed");
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let (c1, f1) = usage();
    println!("{threads} threads: {ms:.3} ms, cpu {:.3} ms, {} faults, {} symbols", c1 - c0, f1 - f0, k.addrs.len());
}
