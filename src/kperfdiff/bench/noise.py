"""Noise you can see: what else happened on the machine while a benchmark ran.

Recorded around every repetition (one set of worker copies):

* **steal**: jiffies the hypervisor gave our vCPUs to someone else, from the
  ``steal`` column of /proc/stat, as a share of all CPU time (:class:`SystemSnapshot`);
* **other runnable tasks**: sampled every 50 ms by :class:`RunnableSampler`, the
  kernel's count of running tasks (``nr_running()``) minus our own tasks in state R
  minus the sampler itself; when that leaves any, the tasks in state R are counted
  one by one, and the benchmark's own (its copies' sessions, which children inherit,
  however short-lived or reparented) are left out;
* per worker process (:class:`ProcessNoise`): involuntary and voluntary context
  switches (``wait4`` rusage, which includes reaped children), CPU migrations
  (``se.nr_migrations`` of /proc/PID/sched) and time spent waiting on a run queue
  (/proc/PID/schedstat), read for every thread and child of the worker while it runs
  (:class:`TaskTracker`) and summed over them, last value before each task exited;
* CPU frequency per CPU where cpufreq exposes it.

:func:`system_noise` turns these into one :class:`Noise` per repetition and
:func:`disturbance` says, against :data:`THRESHOLDS`, why a repetition was
disturbed. :func:`busy_check` is the one-line warning before a run.

Every reader tolerates missing files (a VM without cpufreq, a process that has
exited, a kernel without schedstats): it returns None or nothing, never raises.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROC = Path("/proc")
CPU_SYS = Path("/sys/devices/system/cpu")
# The columns of a /proc/stat cpu line that add up to all CPU time. guest and
# guest_nice are already counted in user and nice, so they are left out.
STAT_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

# Limits beyond which a repetition is "disturbed". Each is a share of time or a
# rate that does not depend on the machine's speed; none was tuned on one machine.
THRESHOLDS = {
    # Steal is CPU time our vCPUs wanted but the hypervisor gave to another guest:
    # 5% of all CPU time is as large as the changes kperfdiff is asked to find.
    "steal_pct": 5.0,
    # Other tasks wanting to run, on average, beyond the CPUs our copies leave free
    # minus one (wake-ups land on busy CPUs before the load balancer moves them, and
    # other work shares caches, memory bandwidth and SMT siblings): half a CPU of
    # other work is a third of the CPU time of a single copy it has to share with.
    "other_runnable_mean": 0.5,
    # Involuntary switches are recorded but are no limit: on an idle 2-vCPU VM a
    # single-process worker is preempted 10-190 times a second (kernel threads,
    # the VM's agent), yet loses only 0.1-1.7% of its runnable time to them
    # (run-queue wait below). The time lost is what disturbs a measurement, so the
    # limit is on that time.
    # Share of a task's runnable time spent waiting on a run queue. Counted only for
    # single-task copies that, together, did not outnumber the CPUs: then any wait
    # is for someone else's task; 10% directly slows a CPU-bound measure by 10%.
    # Cooperating tasks (ping-pong in ctx, ipc) wait for each other by design.
    "run_delay_pct": 10.0,
}


# ----------------------------------------------------------------------------- readers

def _read(path: Path) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:      # gone, absent on this kernel, not permitted
        return None


def parse_proc_stat(text: str) -> tuple[dict[str, int], int | None]:
    """The summed ``cpu`` line of /proc/stat by column (user..steal), and ``procs_running``."""
    jiffies: dict[str, int] = {}
    running = None
    for ln in text.splitlines():
        parts = ln.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            jiffies = {k: int(v) for k, v in zip(STAT_COLUMNS, parts[1:])}
        elif parts[0] == "procs_running" and len(parts) > 1:
            running = int(parts[1])
    return jiffies, running


def read_cpu_mhz(root: Path = CPU_SYS) -> list[float] | None:
    """Current frequency of each CPU in MHz (cpufreq ``scaling_cur_freq``, in kHz);
    None when cpufreq is not exposed (most VMs)."""
    out = []
    for p in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        text = _read(p)
        if text and text.strip().isdigit():
            out.append(int(text) / 1000.0)
    return out or None


def read_governors(root: Path = CPU_SYS) -> set[str]:
    """The cpufreq scaling governors in use; empty when not exposed."""
    return {t.strip() for p in root.glob("cpu[0-9]*/cpufreq/scaling_governor") if (t := _read(p))}


def parse_sched(text: str) -> dict[str, float]:
    """The ``name : value`` lines of /proc/PID/sched (``se.nr_migrations``,
    ``nr_involuntary_switches``, ...)."""
    out = {}
    for ln in text.splitlines():
        name, sep, value = ln.partition(":")
        if sep:
            try:
                out[name.strip()] = float(value)
            except ValueError:
                pass
    return out


def parse_schedstat(text: str) -> tuple[int, int, int] | None:
    """/proc/PID/schedstat: (time on CPU ns, time waiting on a run queue ns, timeslices)."""
    parts = text.split()
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def stat_fields(stat_text: str) -> list[str]:
    """The fields of a /proc/.../stat line after the command (which may hold spaces and
    parentheses): state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt, majflt,
    cmajflt, utime, stime, cutime, cstime, ...; [] when the line has no command."""
    _, sep, rest = stat_text.rpartition(")")
    return rest.split() if sep else []


def task_state(stat_text: str) -> str | None:
    """The state letter of a /proc/.../stat line (R, S, D, Z...)."""
    f = stat_fields(stat_text)
    return f[0] if f else None


def reaped_children(stat_text: str) -> bool:
    """Whether the process of a /proc/PID/stat line has waited for a child: its children's minor
    faults (``cminflt``) or CPU time (``cutime``, ``cstime``) are not zero."""
    f = stat_fields(stat_text)
    return len(f) > 14 and any(x.isdigit() and int(x) > 0 for x in (f[8], f[13], f[14]))


def tasks_of(pid: int | list[int], proc: Path = PROC) -> list[tuple[int, int]]:
    """(pid, tid) of every thread of ``pid`` (or of several pids) and, recursively, of its
    children (/proc/PID/task/TID/children), each once even where the trees overlap; processes
    that vanish meanwhile are skipped."""
    out, todo, seen = [], [pid] if isinstance(pid, int) else list(pid), set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            tids = [int(t) for t in os.listdir(proc / str(p) / "task")]
        except (OSError, ValueError):
            continue
        for t in tids:
            out.append((p, t))
            kids = _read(proc / str(p) / "task" / str(t) / "children")
            todo.extend(int(c) for c in (kids or "").split() if c.isdigit())
    return out


def running_tasks(proc: Path = PROC) -> list[tuple[int, int, int]]:
    """(pid, tid, session) of every task in state R now, from /proc/PID/task/TID/stat; tasks
    that vanish meanwhile are skipped. Reads one file per task on the machine, so a caller
    does it only when :func:`nr_running` says there is something to find."""
    out = []
    for p in os.listdir(proc):
        if not p.isdigit():
            continue
        try:
            tids = os.listdir(proc / p / "task")
        except OSError:
            continue
        for t in tids:
            f = stat_fields(_read(proc / p / "task" / t / "stat") or "")
            if len(f) > 3 and f[0] == "R" and f[3].lstrip("-").isdigit() and t.isdigit():
                out.append((int(p), int(t), int(f[3])))
    return out


def nr_running(proc: Path = PROC) -> int | None:
    """The kernel's count of runnable tasks, ``nr_running()``: the same counter as
    ``procs_running`` of /proc/stat, read from /proc/loadavg, which is far cheaper."""
    text = _read(proc / "loadavg")
    try:
        return int(text.split()[3].split("/")[0]) if text else None
    except (IndexError, ValueError):
        return None


# ----------------------------------------------------------------------------- system

@dataclass
class SystemSnapshot:
    t: float                                   # time.monotonic()
    jiffies: dict[str, int] = field(default_factory=dict)   # /proc/stat cpu line, summed over CPUs
    procs_running: int | None = None
    cpu_mhz: list[float] | None = None         # per CPU, None without cpufreq


def system_snapshot(stat_text: str | None = None, cpu_root: Path = CPU_SYS) -> SystemSnapshot:
    """/proc/stat (or ``stat_text``) and the CPU frequencies now; empty fields when unreadable."""
    t = time.monotonic()
    if stat_text is None:
        stat_text = _read(PROC / "stat") or ""
    jiffies, running = parse_proc_stat(stat_text)
    return SystemSnapshot(t, jiffies, running, read_cpu_mhz(cpu_root))


def steal_pct(before: SystemSnapshot, after: SystemSnapshot) -> float | None:
    """Steal jiffies / all jiffies * 100 between two snapshots; None without data or time."""
    if "steal" not in before.jiffies or "steal" not in after.jiffies:
        return None
    total = sum(after.jiffies.get(k, 0) - before.jiffies.get(k, 0) for k in STAT_COLUMNS)
    if total <= 0:
        return None
    return 100.0 * (after.jiffies["steal"] - before.jiffies["steal"]) / total


class RunnableSampler:
    """Count, every ``interval`` seconds in a daemon thread, the runnable tasks that are not ours.

    ``own_pids_fn()`` gives the benchmark's processes: kpd-run and its copies, each the leader
    of its own session. Their threads and children are found by :func:`tasks_of`, and a task
    whose session is one of theirs is ours too: children inherit the session, so the children
    a benchmark forks (``proc.fork`` makes thousands a second, each gone before a listing of
    the tree could see it) and children reparented away from the tree are never taken for
    other work.

    Each sample first takes the cheap count ``nr_running - own listed tasks in state R - 1``,
    the 1 being the sampler itself (or more: every running thread of this process, such as the
    runner reading /proc). It is an upper bound (children born since the listing count in it);
    when it is above 0 the tasks in state R are read one by one (:func:`running_tasks`) and the
    sample is the ones neither ours nor this process's, at most the cheap count (which stands
    when /proc lists no task at all).

    A context manager; the thread never raises and stops within one interval. ``samples``
    holds the count of other tasks of each sample, ``own_samples`` the count of our own
    running tasks (workers only), ``session_tasks`` the tasks seen running in each own
    session but ``runner``'s (kpd-run's pid and session: a copy caught between its fork and its
    ``setsid`` is in it, beside kpd-run, and a one-task copy then looked like two, whose wait for
    a CPU :func:`disturbance` no longer judged: the contention test failed so in 7 of 20 runs here).
    """

    def __init__(self, own_pids_fn, interval: float = 0.05, proc: Path = PROC, runner: int | None = None):
        self.own_pids_fn, self.interval, self.proc, self.runner = own_pids_fn, interval, proc, runner
        self.samples: list[int] = []
        self.own_samples: list[int] = []
        self.session_tasks: dict[int, set[int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def running_of(self, tasks: list[tuple[int, int]]) -> set[int]:
        """The tids among ``tasks`` in state R."""
        out = set()
        for p, t in tasks:
            text = _read(self.proc / str(p) / "task" / str(t) / "stat")
            if text and task_state(text) == "R":
                out.add(t)
        return out

    def sample(self) -> None:
        """One sample. Our tasks' states are read just before and just after the count, and a
        task counted as ours if running in either: tasks that switch thousands of times a
        second (ping-pong) are counted by the kernel but may be seen sleeping an instant later,
        and would be taken for other work. This errs towards fewer other tasks."""
        roots = list(self.own_pids_fn())
        tasks = tasks_of(roots, self.proc)     # kpd-run's tree holds its copies' trees: each task once
        me = os.getpid()
        try:
            mine = [(me, int(t)) for t in os.listdir(self.proc / str(me) / "task")]
        except (OSError, ValueError):
            mine = []
        first = self.running_of(tasks)
        running = nr_running(self.proc)
        if running is None:
            return
        listed = first | self.running_of(tasks)
        other = max(0, running - len(listed) - max(1, len(self.running_of(mine))))
        own = len(listed)
        found = running_tasks(self.proc) if other > 0 else []
        if found:      # (none at all: /proc lists no tasks, as recorded files; the cheap count stands)
            sessions = set(roots)
            ours = set(listed)
            others = 0
            for p, t, sid in found:
                if t in listed or sid in sessions:
                    ours.add(t)
                    if sid != self.runner:
                        self.session_tasks.setdefault(sid, set()).add(t)
                elif p != me:
                    others += 1
            other, own = min(other, others), len(ours)
        self.samples.append(other)
        self.own_samples.append(own)

    # The sampler's share of one CPU, at most: it runs beside the benchmark, and on a machine of
    # many tasks reading each one's state takes milliseconds, so the pause after a sample is at
    # least (1 - DUTY) / DUTY times what the sample took.
    DUTY = 0.1

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                self.sample()
            except Exception:     # a sampler must never take the run down
                pass
            took = time.monotonic() - t
            self._stop.wait(max(self.interval, took * (1 - self.DUTY) / self.DUTY))

    def __enter__(self) -> RunnableSampler:
        self._thread = threading.Thread(target=self._loop, name="kperfdiff-noise", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        # a thread whose start a Ctrl-C interrupted may never have started: nothing to join then
        if self._thread and self._thread.ident is not None:
            self._thread.join(timeout=1.0)

    @property
    def mean_other(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None

    @property
    def max_other(self) -> int | None:
        return max(self.samples, default=None)

    @property
    def max_own(self) -> int | None:
        return max(self.own_samples, default=None)

    @property
    def most_session_tasks(self) -> int:
        """The most distinct tasks seen running in one own session (0: none seen)."""
        return max((len(t) for t in self.session_tasks.values()), default=0)


# ----------------------------------------------------------------------------- processes

@dataclass
class ProcessNoise:
    """What one worker process (its threads and children together) went through."""
    nivcsw: int = 0           # involuntary context switches (wait4 rusage)
    nvcsw: int = 0            # voluntary context switches (wait4 rusage)
    migrations: int = 0       # se.nr_migrations summed over tasks, last value read
    run_delay_ns: int = 0     # schedstat: time runnable but waiting for a CPU
    run_ns: int = 0           # schedstat: time on a CPU
    maxrss_kb: int = 0
    tasks: int = 0            # threads and child processes seen (0: never sampled)

    @property
    def run_delay_pct(self) -> float | None:
        busy = self.run_ns + self.run_delay_ns
        return 100.0 * self.run_delay_ns / busy if busy > 0 else None


class TaskTracker:
    """The last /proc/PID/sched and schedstat values of every task of some worker trees.

    Call :meth:`sample` often while the workers run (a task's counters vanish with it,
    so the last read before it exits is what is kept), then :meth:`process_noise`
    with the wait4 rusage of each worker.
    """

    def __init__(self, proc: Path = PROC):
        self.proc = proc
        self.last: dict[int, dict[int, tuple[int, int, int]]] = {}   # root -> tid -> (migr, run, delay)
        self.reaped: set[int] = set()     # roots a process of which has waited for a child

    def sample(self, roots: list[int]) -> None:
        for root in roots:
            seen = self.last.setdefault(root, {})
            for p, t in tasks_of(root, self.proc):
                base = self.proc / str(p) / "task" / str(t)
                if p == t and root not in self.reaped and reaped_children(_read(base / "stat") or ""):
                    self.reaped.add(root)
                ss = parse_schedstat(_read(base / "schedstat") or "")
                sched = parse_sched(_read(base / "sched") or "")
                if ss is None and not sched:
                    continue
                old = seen.get(t, (0, 0, 0))
                seen[t] = (int(sched.get("se.nr_migrations", old[0])),
                           ss[0] if ss else old[1], ss[1] if ss else old[2])

    def process_noise(self, root: int, rusage=None) -> ProcessNoise:
        """The noise of worker ``root``'s tree; ``tasks`` is at least 2 when it waited for a child
        no sample saw (``proc.fork``'s live a few microseconds)."""
        tasks = self.last.get(root, {}).values()
        pn = ProcessNoise(migrations=sum(m for m, _, _ in tasks), run_ns=sum(r for _, r, _ in tasks),
                          run_delay_ns=sum(d for _, _, d in tasks),
                          tasks=max(len(tasks), 2) if root in self.reaped else len(tasks))
        if rusage is not None:
            pn.nivcsw, pn.nvcsw, pn.maxrss_kb = rusage.ru_nivcsw, rusage.ru_nvcsw, rusage.ru_maxrss
        return pn


# ----------------------------------------------------------------------------- one repetition

@dataclass
class Noise:
    """The noise of one measurement (one set of copies), or of several combined."""
    wall_s: float = 0.0
    steal_pct: float | None = None
    other_runnable_mean: float | None = None
    other_runnable_max: int | None = None
    nivcsw: int = 0                        # summed over copies
    nivcsw_per_s: float | None = None      # per copy per second of wall time
    migrations: int = 0                    # summed over copies
    run_delay_pct: float | None = None     # mean over copies
    cpu_mhz_min: float | None = None
    cpu_mhz_max: float | None = None
    copies: int = 0
    tasks_per_copy: int = 0                # most tasks (threads + children) of one copy; 0 unknown
    own_runnable_max: int | None = None    # most of our tasks seen runnable at once
    reps: int = 1

    def as_dict(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @staticmethod
    def combine(noises: list[Noise]) -> Noise:
        """Several repetitions as one: wall time, switches and migrations add up; steal,
        other-runnable mean, switch rate and run delay are means weighted by wall time
        (over the repetitions that have them); maxima and the frequency range span all."""
        if not noises:
            return Noise(reps=0)
        wall = sum(n.wall_s for n in noises)

        def wmean(name):
            have = [(getattr(n, name), n.wall_s) for n in noises if getattr(n, name) is not None]
            w = sum(s for _, s in have)
            if not have:
                return None
            return sum(v * s for v, s in have) / w if w > 0 else sum(v for v, _ in have) / len(have)

        def extreme(name, f):
            vals = [getattr(n, name) for n in noises if getattr(n, name) is not None]
            return f(vals) if vals else None

        return Noise(wall_s=wall, steal_pct=wmean("steal_pct"), other_runnable_mean=wmean("other_runnable_mean"),
                     other_runnable_max=extreme("other_runnable_max", max), nivcsw=sum(n.nivcsw for n in noises),
                     nivcsw_per_s=wmean("nivcsw_per_s"), migrations=sum(n.migrations for n in noises),
                     run_delay_pct=wmean("run_delay_pct"), cpu_mhz_min=extreme("cpu_mhz_min", min),
                     cpu_mhz_max=extreme("cpu_mhz_max", max), copies=max(n.copies for n in noises),
                     tasks_per_copy=max(n.tasks_per_copy for n in noises),
                     own_runnable_max=extreme("own_runnable_max", max), reps=sum(n.reps for n in noises))


def system_noise(before: SystemSnapshot, after: SystemSnapshot, sampler: RunnableSampler | None,
                 procs: list[ProcessNoise]) -> Noise:
    """The :class:`Noise` of one repetition from the snapshots around it, its sampler
    (None: no runnable counts) and its copies' :class:`ProcessNoise`."""
    wall = max(0.0, after.t - before.t)
    mhz = (before.cpu_mhz or []) + (after.cpu_mhz or [])
    delays = [d for p in procs if (d := p.run_delay_pct) is not None]
    nivcsw = sum(p.nivcsw for p in procs)
    return Noise(
        wall_s=wall, steal_pct=steal_pct(before, after),
        other_runnable_mean=sampler.mean_other if sampler else None,
        other_runnable_max=sampler.max_other if sampler else None,
        nivcsw=nivcsw, nivcsw_per_s=nivcsw / len(procs) / wall if procs and wall > 0 else None,
        migrations=sum(p.migrations for p in procs),
        run_delay_pct=sum(delays) / len(delays) if delays else None,
        cpu_mhz_min=min(mhz) if mhz else None, cpu_mhz_max=max(mhz) if mhz else None,
        copies=len(procs),
        tasks_per_copy=max([p.tasks for p in procs] + [sampler.most_session_tasks if sampler else 0]),
        own_runnable_max=sampler.max_own if sampler else None)


def other_limit(copies: int, cpus: int) -> float:
    """The most other runnable tasks, on average, that leave ``copies`` copies on ``cpus`` CPUs
    undisturbed: :data:`THRESHOLDS` ``other_runnable_mean`` beyond the free CPUs less one."""
    return THRESHOLDS["other_runnable_mean"] + max(0, cpus - copies - 1)


def disturbance(noise: Noise, *, copies: int, cpus: int) -> list[str]:
    """Why ``noise`` makes its measurement disturbed, one sentence per cause; [] when clean.

    Only what other work does to us counts (:data:`THRESHOLDS`): steal and other runnable
    tasks beyond the CPUs we leave free (less one) always; run-queue wait only when each
    copy is one task (``tasks_per_copy`` <= 1) and our tasks did not outnumber the CPUs.
    Involuntary switches are recorded, not judged: they are frequent and cheap. Cooperating processes (ping-pong in ctx, ipc) switch
    voluntarily, preempt each other on wake-up and wait for each other by design.
    """
    th, out = THRESHOLDS, []
    if noise.steal_pct is not None and noise.steal_pct > th["steal_pct"]:
        out.append(f"steal {noise.steal_pct:.1f}% of CPU time (limit {th['steal_pct']:g}%)")
    limit = other_limit(copies, cpus)
    if noise.other_runnable_mean is not None and noise.other_runnable_mean > limit:
        out.append(f"{noise.other_runnable_mean:.2f} other runnable tasks on average (limit {limit:g} "
                   f"with {copies} of {cpus} CPUs in use)")
    own = noise.own_runnable_max if noise.own_runnable_max is not None else copies
    alone = noise.tasks_per_copy <= 1 and own <= cpus and copies <= cpus
    if alone and noise.run_delay_pct is not None and noise.run_delay_pct > th["run_delay_pct"]:
        out.append(f"waited for a CPU {noise.run_delay_pct:.1f}% of its runnable time "
                   f"(limit {th['run_delay_pct']:g}%)")
    return out


# ----------------------------------------------------------------------------- before a run

def busy_check(sample_s: float = 0.5, *, proc: Path = PROC, cpu_root: Path = CPU_SYS) -> str | None:
    """One warning sentence when the machine is busy before a run (as pyperf's ``system``
    check), or None when quiet: load average above the CPU count, other runnable tasks
    during a ``sample_s`` sample (mean above :func:`other_limit` for one copy), steal above
    its limit over the sample; when busy, a hint if a cpufreq governor is not ``performance``
    (a governor alone does not make a machine busy). Missing files are skipped."""
    cpus = os.cpu_count() or 1
    reasons = []
    load = _read(proc / "loadavg")
    try:
        load1 = float(load.split()[0]) if load else None
    except (ValueError, IndexError):
        load1 = None
    if load1 is not None and load1 > cpus:
        reasons.append(f"load average {load1:.2f} on {cpus} CPUs")
    before = system_snapshot(_read(proc / "stat") or "", cpu_root)
    with RunnableSampler(lambda: [], interval=0.05, proc=proc) as s:
        time.sleep(sample_s)
    after = system_snapshot(_read(proc / "stat") or "", cpu_root)
    if s.mean_other is not None and s.mean_other > other_limit(1, cpus):
        reasons.append(f"{s.mean_other:.1f} other tasks runnable on average")
    st = steal_pct(before, after)
    if st is not None and st > THRESHOLDS["steal_pct"]:
        reasons.append(f"steal {st:.0f}% of CPU time")
    if not reasons:
        return None
    govs = read_governors(cpu_root) - {"performance"}
    hint = f" (hint: the cpufreq governor is {', '.join(sorted(govs))}, not performance)" if govs else ""
    return f"kperfdiff: warning: the machine is busy: {'; '.join(reasons)}; results may be noisy{hint}."
