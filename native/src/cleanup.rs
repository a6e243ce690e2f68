//! What a read on several threads is done with, freed after the read has returned.
//!
//! The parts of a file read on several threads are merged into one (`parallel`), and what
//! each merge takes in leaves the rest of the part behind: hash tables, names, processes,
//! caches, tens of thousands of allocations. Freed where the merge is, they took a fifth of
//! it, and the last merge waits for nothing else. So they are kept (`later`) and freed, with
//! the heap given back to the system (`malloc_trim`), on a thread of its own once the read
//! has made its result (`finish`): the caller does not wait for them. A read on one thread
//! keeps nothing and gives the heap back itself (`give_back`, after its result is handed over).
use std::cell::Cell;
use std::sync::Mutex;

static LATER: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

thread_local! {
    /// Whether this thread's last read left its memory to a thread of its own (`finish`).
    static FREEING: Cell<bool> = const { Cell::new(false) };
}

/// What the runs of a read on threads hand on to the runs after them (caches, emptied by their
/// taker, so that each run does not fill new pages of its own), shared by the read's threads.
/// What is left once the runs are done goes to `later` (`drain`).
pub struct Spares<T>(Mutex<Vec<T>>);

impl<T> Spares<T> {
    pub const fn new() -> Self {
        Spares(Mutex::new(Vec::new()))
    }

    /// One that `fits` (the caches of another read, made to other sizes, are left for it).
    pub fn take_fitting(&self, fits: impl Fn(&T) -> bool) -> Option<T> {
        let mut spares = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let i = spares.iter().rposition(fits)?;
        Some(spares.swap_remove(i))
    }

    pub fn give(&self, x: T) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(x);
    }

    pub fn drain(&self) -> Vec<T> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Keeps `x` to be freed by `finish`.
pub fn later<T: Send + 'static>(x: T) {
    LATER.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(x));
}

/// At the end of a read: frees what `later` keeps, then gives the freed heap back to the
/// system, on a thread of its own (nothing when nothing is kept).
pub fn finish() {
    let kept = std::mem::take(&mut *LATER.lock().unwrap_or_else(|e| e.into_inner()));
    if kept.is_empty() {
        return;
    }
    let freeing = std::thread::Builder::new().name("kperfdiff-free".into()).spawn(move || {
        drop(kept);
        trim();
    });
    FREEING.with(|f| f.set(freeing.is_ok()));
}

/// After a read's result is handed over: gives the freed heap back to the system, glibc
/// keeping freed pages for reuse, which would count against every later file a process
/// reads (a diff's other side); unless the read left that to a thread of its own (`finish`).
pub fn give_back() {
    if !FREEING.with(|f| f.replace(false)) {
        trim();
    }
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory; it takes no pointers.
    unsafe {
        libc::malloc_trim(0);
    }
}
