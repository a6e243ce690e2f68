//! Times the native reader on one file, without Python:
//! `cargo run --release --example ingest_time -- FILE [KALLSYMS] [REPEAT]`
//! (with `KPD_BY_PROCESS=1` in the environment, also aggregated per process name; with
//! `KPD_THREADS=N`, on N threads; with `KPD_SYMFS=DIR[:DIR...]`, user symbols from those folders).
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::PathBuf::from(args.get(1).expect("usage: ingest_time FILE [KALLSYMS] [REPEAT]"));
    let opts = native::reader::Options {
        kallsyms: args.get(2).filter(|s| !s.is_empty()).map(Into::into),
        symfs: std::env::var("KPD_SYMFS").map(|v| v.split(':').map(Into::into).collect()).unwrap_or_default(),
        debug_dirs: Vec::new(),
        by_process: std::env::var_os("KPD_BY_PROCESS").is_some(),
        threads: std::env::var("KPD_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(1),
        filter: Default::default(),
        share: None,
    };
    let repeat: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut best = f64::MAX;
    for _ in 0..repeat {
        let t = std::time::Instant::now();
        let out = native::reader::read(&path, &opts).expect("read failed");
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        let n: u64 = out.events.iter().map(|e| e.samples).sum();
        println!("{dt:.3} s  {:.2} Msamples/s  ({n} samples, {} stacks, {} symbols)",
                 n as f64 / dt / 1e6, out.stack_offsets.len() - 1, out.sym_names.len());
    }
    println!("best {best:.3} s");
}
