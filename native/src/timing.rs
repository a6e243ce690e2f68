//! Where one read's time goes: with `KPERFDIFF_TIMING` set in the environment, each phase
//! of a read (and of each thread of a read on several threads) writes one line to stderr,
//! `kperfdiff timing: +WALL ms [cpu CPU ms] WHAT`, WALL from the start of the read and CPU
//! the calling thread's own CPU time (what it ran, not what it waited). Off, it costs one
//! branch per phase.
use std::sync::OnceLock;
use std::time::Instant;

static ON: OnceLock<bool> = OnceLock::new();

/// Whether phases are timed (`KPERFDIFF_TIMING` set).
pub fn on() -> bool {
    *ON.get_or_init(|| std::env::var_os("KPERFDIFF_TIMING").is_some())
}

/// The CPU time of the calling thread, in milliseconds.
pub fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The start of a read; `mark` writes a phase's line.
#[derive(Clone, Copy)]
pub struct Clock {
    t0: Instant,
    on: bool,
}

impl Clock {
    pub fn start() -> Self {
        Clock { t0: Instant::now(), on: on() }
    }

    /// Writes `+WALL ms cpu CPU ms WHAT` (the calling thread's CPU time) when timing is on.
    pub fn mark(&self, what: std::fmt::Arguments) {
        if self.on {
            eprintln!("kperfdiff timing: {:+9.3} ms cpu {:8.3} ms {what}", self.t0.elapsed().as_secs_f64() * 1e3,
                      thread_cpu_ms());
        }
    }
}
