//! How soon a thread starts, and how long a burst of work on every CPU takes, three ways: a thread
//! made for the burst (`std::thread::scope`), a kept thread woken for it (a condition variable),
//! and the reader's pool (`native::spread`).
//!
//!     cargo run --release --example thread_start [-- ROUNDS]
//!
//! Two measurements, each ROUNDS times (200 by default) with 3 ms between rounds, the pause
//! between the stages of a read:
//! - **start**: the caller starts one helper, then works 1.5 ms itself, as does the helper; when
//!   the helper begins, whether it began on the caller's CPU, and when both are done. On two idle
//!   CPUs that run at once, 1.5 ms and a little; a helper that waits for the caller's CPU (or
//!   takes it from the caller) makes it 3 ms.
//! - **burst**: as many items as CPUs, each 1.5 ms of work; the burst's wall time. On idle CPUs
//!   that run at once, 1.5 ms and a little.
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const WORK_MS: f64 = 1.5;

fn spin(ms: f64) {
    let t = Instant::now();
    while t.elapsed().as_secs_f64() * 1e3 < ms {
        std::hint::spin_loop();
    }
}

fn cpu() -> i32 {
    // SAFETY: no arguments.
    unsafe { libc::sched_getcpu() }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// p50, p90 and max of `v`.
fn spread_of(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!("p50 {:6.3}  p90 {:6.3}  max {:6.3}", q(0.5), q(0.9), q(1.0))
}

struct Start {
    latency: Vec<f64>,
    wall: Vec<f64>,
    same_cpu: usize,
}

impl Start {
    fn new() -> Start {
        Start { latency: Vec::new(), wall: Vec::new(), same_cpu: 0 }
    }
    fn add(&mut self, (latency, helper_cpu): (f64, i32), caller_cpu: i32, t0: Instant) {
        self.same_cpu += (helper_cpu == caller_cpu) as usize;
        self.latency.push(latency);
        self.wall.push(ms(t0));
    }
    fn line(self, how: &str) -> String {
        let n = self.latency.len();
        format!("start  {how:<6} helper began ms: {}   on the caller's CPU {}/{n}\n       {how:<6} both done ms:    {}",
                spread_of(self.latency), self.same_cpu, spread_of(self.wall))
    }
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pause = || std::thread::sleep(Duration::from_millis(3));
    println!("thread_start: {rounds} rounds, {cpus} CPUs, {WORK_MS} ms of work, 3 ms between rounds");

    // start: a thread made for it
    let mut s = Start::new();
    for _ in 0..rounds {
        let (t0, c0) = (Instant::now(), cpu());
        let began = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                let began = (ms(t0), cpu());
                spin(WORK_MS);
                began
            });
            spin(WORK_MS);
            h.join().unwrap()
        });
        s.add(began, c0, t0);
        pause();
    }
    println!("{}", s.line("made"));

    // start: a kept thread, woken
    // (round, when it began, when and where the helper began)
    type Board = (Mutex<(u64, Option<Instant>, Option<(f64, i32)>)>, Condvar);
    let board: Arc<Board> = Arc::new(Default::default());
    let b = board.clone();
    std::thread::spawn(move || {
        let mut seen = 0;
        loop {
            let mut g = b.0.lock().unwrap();
            while g.0 == seen {
                g = b.1.wait(g).unwrap();
            }
            seen = g.0;
            let began = (ms(g.1.unwrap()), cpu());
            drop(g);
            spin(WORK_MS);
            let mut g = b.0.lock().unwrap();
            g.2 = Some(began);
            b.1.notify_all();
        }
    });
    let mut s = Start::new();
    for r in 0..rounds {
        let (t0, c0) = (Instant::now(), cpu());
        {
            let mut g = board.0.lock().unwrap();
            *g = (r as u64 + 1, Some(t0), None);
            board.1.notify_all();
        }
        spin(WORK_MS);
        let mut g = board.0.lock().unwrap();
        while g.2.is_none() {
            g = board.1.wait(g).unwrap();
        }
        let began = g.2.unwrap();
        drop(g);
        s.add(began, c0, t0);
        pause();
    }
    println!("{}", s.line("woken"));

    // start: the pool
    let mut s = Start::new();
    for _ in 0..rounds {
        let (t0, c0) = (Instant::now(), cpu());
        let got = native::spread::on_threads(2, |_| {
            let began = (ms(t0), cpu());
            spin(WORK_MS);
            began
        });
        // the caller takes the first item (it asks before a woken thread can)
        s.add(got[1], c0, t0);
        pause();
    }
    println!("{}", s.line("pool"));

    // burst: one item a CPU
    let mut made = Vec::new();
    let mut pooled = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        std::thread::scope(|scope| {
            let hs: Vec<_> = (1..cpus).map(|_| scope.spawn(|| spin(WORK_MS))).collect();
            spin(WORK_MS);
            hs.into_iter().for_each(|h| h.join().unwrap());
        });
        made.push(ms(t0));
        pause();
        let t0 = Instant::now();
        native::spread::on_threads(cpus, |_| spin(WORK_MS));
        pooled.push(ms(t0));
        pause();
    }
    println!("burst  made     ms: {}   ({cpus} items of {WORK_MS} ms)", spread_of(made));
    println!("burst  pool     ms: {}", spread_of(pooled));
}
