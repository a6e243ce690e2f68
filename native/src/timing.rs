//! Where one read's time goes: with `KPERFDIFF_TIMING` set in the environment, each phase
//! of a read (and of each thread of a read on several threads) writes one line to stderr,
//! `kperfdiff timing: +WALL ms cpu CPU ms flt FAULTS WHAT`, WALL from the start of the read, CPU
//! the calling thread's own CPU time (what it ran, not what it waited) and FAULTS its page faults
//! so far (minor and major: a page the thread touched first, or one read from the file), so that
//! a phase's faults are the difference of two of its thread's lines. Off, it costs one branch per
//! phase.
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

/// The page faults of the calling thread so far (minor and major).
pub fn thread_faults() -> i64 {
    // SAFETY: getrusage writes one rusage; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is Linux's, the calling thread's own usage.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_minflt + ru.ru_majflt
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

    /// Writes `+WALL ms cpu CPU ms flt FAULTS WHAT` (the calling thread's CPU time and page faults)
    /// when timing is on.
    pub fn mark(&self, what: std::fmt::Arguments) {
        if self.on {
            eprintln!("{}", self.line(what));
        }
    }

    fn line(&self, what: std::fmt::Arguments) -> String {
        format!("kperfdiff timing: {:+9.3} ms cpu {:8.3} ms flt {:6} {what}", self.t0.elapsed().as_secs_f64() * 1e3,
                thread_cpu_ms(), thread_faults())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_counts_the_pages_its_thread_touched() {
        let clock = Clock::start();
        let faults = |line: &str| -> i64 {
            let rest = line.split(" flt ").nth(1).unwrap_or_else(|| panic!("no flt in {line:?}"));
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        let before = clock.line(format_args!("before"));
        // 64 pages of a fresh anonymous map, each written once: 64 faults at least (a map, not the
        // heap, whose pages another test may have touched already)
        let len = 64 << 12;
        // SAFETY: a new private anonymous map of `len` bytes, written within its length, then unmapped.
        unsafe {
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE,
                               libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(p, libc::MAP_FAILED);
            for page in 0..64 {
                std::ptr::write_volatile((p as *mut u8).add(page << 12), 1);
            }
            libc::munmap(p, len);
        }
        let after = clock.line(format_args!("after"));
        assert!(after.ends_with(" after") && after.contains(" ms cpu "), "{after}");
        assert!(faults(&after) - faults(&before) >= 64, "{before}\n{after}");
    }
}
