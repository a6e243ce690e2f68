//! Work on several threads that start at once, each on a CPU of its own.
//!
//! A read on threads is a row of stages (kallsyms, the index, the runs, the merge levels, the
//! profile), each a burst of a few milliseconds on every thread. Two things made a burst slow:
//! - **Where a new thread starts.** Linux often queues a new or woken thread on the CPU of the
//!   thread that made or woke it, even with other CPUs idle, and it waits there until that CPU's
//!   thread blocks or a load balance moves it. On this project's 2-CPU VM (Linux 6.18), a thread
//!   spawned while its parent went on working for 1.5 ms began after the parent was done in 3 of 4
//!   spawns, and a thread woken likewise in 2 of 3; 2 threads spawned by a parent that only joined
//!   them ran one after the other about half the time. A thread that starts late is a stage that
//!   takes twice as long.
//! - **What a new thread costs.** 16 threads made afresh for every stage were 132 thread starts
//!   in one read of a 71 MB file, each a clone and, at its end, a release of its stack: work that
//!   interrupts every CPU the process runs on.
//!
//! So the threads are kept for the process (`Pool`): at most one a CPU the process may use, made
//! when a burst first wants one there, each waiting on its own CPU (an affinity of that CPU
//! alone, so that its wake-up is there), and free to move while it works (the process's CPUs
//! again; another program may want that CPU). A burst ([`each`]) hands its items to the waiting
//! threads of the other CPUs than the caller's, first one thread of each core, then the cores'
//! second threads; the caller takes items too. When no such thread is free (a burst inside a
//! burst, more items than CPUs), the pool makes one more, where the kernel puts it, so that a
//! burst's items always run at once. Which thread runs an item does not change what it gives;
//! every result comes back in the items' order.
//! `KPERFDIFF_SPREAD=0` in the environment makes fresh threads for each burst instead, where the
//! kernel puts them (to measure what the pool gives).
use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// `f(i, item)` for each item, on the calling thread and the pool's threads; the results in the
/// items' order. A panic in any item comes out of the call (after every item is done).
pub fn each<T: Send, R: Send>(items: Vec<T>, f: impl Fn(usize, T) -> R + Sync) -> Vec<R> {
    let n = items.len();
    if n <= 1 {
        return items.into_iter().map(|t| f(0, t)).collect();
    }
    if !pooled() {
        return fresh_threads(items, f);
    }
    let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let results: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let task = |i: usize| {
        let t = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take().expect("each item is taken once");
        let r = f(i, t);
        *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    };
    run(n, &task);
    results.into_iter().map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every item ran")).collect()
}

/// `f(i)` for `i` in `0..n`, as [`each`] runs its items.
pub fn on_threads<R: Send>(n: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    each((0..n).collect(), |i, _| f(i))
}

/// `s` cut into consecutive pieces of the lengths `lens`, in order: the parts of one output that
/// the items of a burst write, each its own (what the lengths leave over is in no piece).
pub fn pieces_mut<T>(mut s: &mut [T], lens: impl IntoIterator<Item = usize>) -> Vec<&mut [T]> {
    lens.into_iter()
        .map(|k| {
            let (piece, rest) = std::mem::take(&mut s).split_at_mut(k);
            s = rest;
            piece
        })
        .collect()
}

fn pooled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KPERFDIFF_SPREAD").map_or(true, |v| v != "0"))
}

/// `each` on threads made for the call (`KPERFDIFF_SPREAD=0`): the first item on the caller.
fn fresh_threads<T: Send, R: Send>(items: Vec<T>, f: impl Fn(usize, T) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|scope| {
        let mut items = items.into_iter().enumerate();
        let (_, first) = items.next().expect("two items or more");
        let handles: Vec<_> = items.map(|(i, t)| scope.spawn(move || f(i, t))).collect();
        let mut out = vec![f(0, first)];
        out.extend(handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))));
        out
    })
}

type Panic = Box<dyn Any + Send>;

/// One burst: its items, taken in turn by whoever is free, and how many are done.
struct Job {
    /// The burst's task. Its lifetime is the caller's, who does not return before every item
    /// is done (`run`), so no thread holds it longer.
    task: *const (dyn Fn(usize) + Sync + 'static),
    n: usize,
    next: AtomicUsize,
    done: Mutex<(usize, Option<Panic>)>,
    all_done: Condvar,
}

// SAFETY: `task` points to a `Sync` closure that outlives every use (`run` waits for them all).
unsafe impl Send for Job {}
unsafe impl Sync for Job {}

impl Job {
    /// Runs items until none is left to take.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: see `task`: the caller of `run` is still waiting for this item.
            let task = unsafe { &*self.task };
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(i)));
            let mut d = self.done.lock().unwrap_or_else(|e| e.into_inner());
            d.0 += 1;
            if let Err(p) = outcome {
                d.1.get_or_insert(p);
            }
            if d.0 == self.n {
                self.all_done.notify_all();
            }
        }
    }
}

/// `task(0..n)`: on the caller and on the pool's free threads; returns when every item is done.
fn run(n: usize, task: &(dyn Fn(usize) + Sync)) {
    // SAFETY: the lifetime is erased only for the time this call waits below: every item is
    // done (and no thread touches `task` again) before it returns, a panic included.
    let task: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(task) };
    let job = Arc::new(Job { task, n, next: AtomicUsize::new(0), done: Mutex::new((0, None)), all_done: Condvar::new() });
    pool().hand_out(&job, n - 1);
    job.work();
    let mut d = job.done.lock().unwrap_or_else(|e| e.into_inner());
    while d.0 < n {
        d = job.all_done.wait(d).unwrap_or_else(|e| e.into_inner());
    }
    if let Some(p) = d.1.take() {
        drop(d);
        std::panic::resume_unwind(p);
    }
}

/// The threads kept for bursts: at most one a CPU the process may use, made the first time a
/// burst wants one there; then more, unplaced, when a burst finds none free.
struct Pool {
    pid: u32,
    cpus: Option<Cpus>,
    threads: Mutex<Threads>,
}

#[derive(Default)]
struct Threads {
    /// The thread waiting on each CPU of `Cpus::order` (by position there), once made.
    placed: Vec<Option<Arc<Worker>>>,
    unplaced: Vec<Arc<Worker>>,
}

struct Worker {
    /// The CPU it waits on (None: it waits where the kernel puts it).
    cpu: Option<usize>,
    job: Mutex<Option<Arc<Job>>>,
    wake: Condvar,
}

impl Worker {
    /// Gives it `job` when it has none.
    fn give(&self, job: &Arc<Job>) -> bool {
        let mut slot = self.job.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return false;
        }
        *slot = Some(job.clone());
        self.wake.notify_one();
        true
    }
}

/// The most threads a pool keeps unplaced.
const MAX_UNPLACED: usize = 512;

fn pool() -> Arc<Pool> {
    static POOL: Mutex<Option<Arc<Pool>>> = Mutex::new(None);
    let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
    match &*p {
        // a forked child has none of its parent's threads: it makes a pool of its own
        Some(pool) if pool.pid == std::process::id() => pool.clone(),
        _ => {
            let pool = Arc::new(Pool { pid: std::process::id(), cpus: allowed_cpus(), threads: Default::default() });
            *p = Some(pool.clone());
            pool
        }
    }
}

impl Pool {
    /// Gives `job` to `want` free threads: those waiting on the other CPUs than the caller's, in
    /// the CPUs' order, then threads with no CPU of their own, made when none is free (a burst
    /// inside a burst, more items than CPUs), so that the items always run at once.
    fn hand_out(self: &Arc<Self>, job: &Arc<Job>, want: usize) {
        let here = current_cpu();
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let Threads { placed, unplaced } = &mut *threads;
        let mut given = 0;
        if let Some(c) = &self.cpus {
            placed.resize(c.order.len(), None);
            for (&cpu, w) in c.order.iter().zip(placed.iter_mut()) {
                if given == want {
                    return;
                }
                if Some(cpu) == here {
                    continue;
                }
                if w.is_none() {
                    *w = self.start(Some(cpu));
                }
                given += w.as_ref().is_some_and(|w| w.give(job)) as usize;
            }
        }
        for w in unplaced.iter() {
            if given == want {
                return;
            }
            given += w.give(job) as usize;
        }
        while given < want && unplaced.len() < MAX_UNPLACED {
            let Some(w) = self.start(None) else {
                return; // no thread to be had: the caller does the rest
            };
            w.give(job);
            unplaced.push(w);
            given += 1;
        }
    }

    /// A new thread for the pool (None when the system has no thread to give).
    fn start(self: &Arc<Self>, cpu: Option<usize>) -> Option<Arc<Worker>> {
        let w = Arc::new(Worker { cpu, job: Mutex::new(None), wake: Condvar::new() });
        let (worker, pool) = (w.clone(), self.clone());
        std::thread::Builder::new()
            .name("kperfdiff-spread".into())
            .spawn(move || pool.serve(&worker))
            .ok()
            .map(|_| w)
    }

    /// A pool thread: waits on its CPU for a job, works on it wherever the kernel lets it run,
    /// and waits again.
    fn serve(&self, w: &Worker) {
        let here = w.cpu.map(only);
        loop {
            if let Some(h) = &here {
                set_affinity(h);
            }
            let job = {
                let mut slot = w.job.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(j) = slot.as_ref() {
                        break j.clone();
                    }
                    slot = w.wake.wait(slot).unwrap_or_else(|e| e.into_inner());
                }
            };
            if let (Some(_), Some(c)) = (&here, &self.cpus) {
                set_affinity(&c.allowed);
            }
            job.work();
            *w.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// The CPUs a process may run on.
struct Cpus {
    allowed: libc::cpu_set_t,
    /// Each core's first thread before any core's second.
    order: Vec<usize>,
}

fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    let c = unsafe { libc::sched_getcpu() };
    (c >= 0).then_some(c as usize)
}

fn only(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: a cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (a CPU of a set the kernel gave).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set
}

/// Sets the calling thread's CPUs; a failure (a CPU gone offline, a cpuset changed meanwhile)
/// only leaves the thread where it is.
fn set_affinity(set: &libc::cpu_set_t) {
    // SAFETY: the set is a valid cpu_set_t of the size given; 0 is the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
}

/// The CPUs this process may run on, each core's first thread first (None when they cannot be
/// read, or there is only one: nothing to place).
fn allowed_cpus() -> Option<Cpus> {
    // SAFETY: as in `only`; sched_getaffinity writes at most the size given.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut allowed) } != 0 {
        return None;
    }
    let mut order: Vec<(usize, usize)> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .map(|c| (sibling_rank(c), c))
        .collect();
    if order.len() < 2 {
        return None;
    }
    order.sort_unstable();
    Some(Cpus { allowed, order: order.into_iter().map(|(_, c)| c).collect() })
}

/// Which thread of its core CPU `cpu` is (0: the first), from sysfs; 0 when unknown.
fn sibling_rank(cpu: usize) -> usize {
    let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
    std::fs::read_to_string(path).ok().map_or(0, |l| cpu_list(&l).iter().position(|&s| s == cpu).unwrap_or(0))
}

/// The CPUs of a sysfs list such as `0-1,8-9` (ranges of up to 64).
fn cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let mut ends = part.splitn(2, '-').map(|x| x.trim().parse::<usize>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), None) => cpus.push(a),
            (Some(Ok(a)), Some(Ok(b))) if b >= a && b - a < 64 => cpus.extend(a..=b),
            _ => {}
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_once_in_order_and_a_panic_comes_out_after_the_others() {
        let out = each((0..9u64).collect(), |i, x| (i as u64, x * x));
        assert_eq!(out, (0..9u64).map(|x| (x, x * x)).collect::<Vec<_>>());
        assert_eq!(on_threads(1, |i| i + 7), vec![7]);
        assert!(each(Vec::<u8>::new(), |_, x| x).is_empty());
        let finished = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(|| {
            on_threads(3, |i| {
                if i == 2 {
                    panic!("two")
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                finished.fetch_add(1, Ordering::SeqCst);
            })
        });
        assert!(r.is_err());
        assert_eq!(finished.load(Ordering::SeqCst), 2, "the call returned before its other items were done");
        // the pool still works after a panic, and a burst inside a burst finishes
        let nested = on_threads(4, |i| on_threads(3, |j| i * 10 + j).iter().sum::<usize>());
        assert_eq!(nested, vec![3, 33, 63, 93]);
        assert_eq!(on_threads(40, |i| i).len(), 40);
    }

    #[test]
    fn pieces_are_consecutive_and_of_their_lengths() {
        let mut v: Vec<u32> = (0..10).collect();
        let pieces = pieces_mut(&mut v, [3, 0, 5]);
        assert_eq!(pieces.iter().map(|p| p.to_vec()).collect::<Vec<_>>(), vec![vec![0, 1, 2], vec![], vec![3, 4, 5, 6, 7]]);
        for p in pieces {
            p.iter_mut().for_each(|x| *x += 100);
        }
        assert_eq!(v, [100, 101, 102, 103, 104, 105, 106, 107, 8, 9]);
    }

    #[test]
    fn items_run_at_once_on_cpus_of_their_own_and_free_to_move() {
        let Some(cpus) = allowed_cpus() else {
            return; // one CPU: nothing to place
        };
        let n = cpus.order.len().min(4);
        // each item waits until all have begun: they run at once; each says where it ran and
        // what it may run on
        let begun = AtomicUsize::new(0);
        let seen = on_threads(n, |_| {
            begun.fetch_add(1, Ordering::SeqCst);
            let t = std::time::Instant::now();
            while begun.load(Ordering::SeqCst) < n {
                assert!(t.elapsed().as_secs() < 10, "the items did not run at once");
                std::hint::spin_loop();
            }
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
            let free = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).count();
            (std::thread::current().id(), free)
        });
        let mut threads: Vec<_> = seen.iter().map(|s| s.0).collect();
        threads.sort_by_key(|t| format!("{t:?}"));
        threads.dedup();
        assert_eq!(threads.len(), n, "two items ran on one thread: {seen:?}");
        assert!(seen.iter().all(|s| s.1 == cpus.order.len()), "an item ran pinned: {seen:?}");
    }

    #[test]
    fn sysfs_cpu_lists() {
        assert_eq!(cpu_list("0-1,8-9\n"), vec![0, 1, 8, 9]);
        assert_eq!(cpu_list("3"), vec![3]);
        assert_eq!(cpu_list("x,2"), vec![2]);
    }
}
