"""One `kperfdiff bench` session: choose, build, run, measure, store.

For every chosen benchmark and copy count (-P), runs ``reps`` fresh worker
processes, reads /proc/vmstat and /proc/interrupts around each, pools every
interval, summarises them and stores the result with its raw values at
once. A benchmark that fails, hangs or cannot run here is stored as failed
or skipped with the reason and the suite goes on. Ctrl-C marks the run
interrupted and keeps what was measured.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core import limits, monitors, stats
from kperfdiff.targets import machine
from kperfdiff.bench import noise
from kperfdiff import targets
from kperfdiff.core.errors import UsageError
from kperfdiff.core.progress import Progress
from kperfdiff.core.records import Result, Run, counted_ops, instruction_counts
from kperfdiff.targets.perf_record import BenchProfiler, finish_recording
from kperfdiff.store import COUNTED_EVENT, Store
from kperfdiff.targets import parse_target_spec
from kperfdiff.targets.boot import measure_boots
from kperfdiff.targets.qemu import QemuTarget
from kperfdiff.bench import build, catalogue, rounds, worker
from kperfdiff.bench.measurement import Measurement, aggregate, store_measurement
from kperfdiff.bench.swap import temporary_swap
from kperfdiff.bench.catalogue import Benchmark
from kperfdiff.bench.pinning import Placement
from kperfdiff.measure import tune


@dataclass
class BenchOptions:
    suite: str = "quick"
    only: str | None = None
    parallel: list[int] = field(default_factory=lambda: [1])
    reps: int = 1
    intervals: int | None = None
    min_batch_ns: int | None = None
    label: str = ""
    variant: str = ""
    params: list[str] = field(default_factory=list)   # BENCH:KEY=VALUE
    allow_swap_setup: bool = False
    timeout: float | None = None
    progress: bool = True
    tiny: bool = False          # use each benchmark's tiny_params (tests)
    profile: bool = False
    profile_freq: int | None = None
    target: str = "local"
    command: str = ""
    precision: float | None = None   # percent: add repetitions until every interval is this tight
    detect: float | None = None      # percent: add repetitions until every result could detect this change
    max_time: float | None = None    # seconds: stop adding repetitions after this long
    annotations: dict = field(default_factory=dict)   # more facts the run keeps (a bisection's commit)
    pin: str = "last"                # which CPU each copy is pinned to (kperfdiff.bench.pinning): last, rotate, off
    placement: Placement | None = None   # decided when the run starts (the tuned CPUs, if a tune is held)

    def policy(self) -> rounds.RepetitionPolicy:
        return rounds.RepetitionPolicy(reps=self.reps, precision=self.precision, max_time=self.max_time,
                                       detect=self.detect)

    def recorded(self) -> dict:
        """The options a run keeps in the store."""
        return {"suite": self.suite, "only": self.only, "parallel": self.parallel, "reps": self.reps,
                "intervals": self.intervals, "params": self.params, "min_batch_ns": self.min_batch_ns,
                "profile": self.profile, "target": self.target, "precision": self.precision, "detect": self.detect,
                "max_time": self.max_time, "pin": self.pin, **self.annotations}



@dataclass
class Outcome:
    run: Run
    results: list[Result]
    exit_status: int


# Parameters that name a program the benchmark starts (as root, when kperfdiff runs as root).
PROGRAM_PARAMS = {"hello"}


def _untrusted_program(path: str) -> str | None:
    """Why ``path`` may not be started by a benchmark, or None: it must be a regular file that only
    root (or the user running kperfdiff) can change, in directories nobody else can change."""
    if not os.path.isabs(path):
        return f"{path!r} must be an absolute path"
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return f"{path} does not exist"
    if not stat.S_ISREG(st.st_mode) or not os.access(path, os.X_OK):
        return f"{path} is not an executable file"
    me = os.geteuid()
    p = os.path.realpath(path)
    while True:
        st = os.stat(p)
        if st.st_uid not in (0, me) or (st.st_mode & 0o022 and not (st.st_mode & stat.S_ISVTX)):
            return (f"{p} can be changed by users other than root, so kperfdiff will not start {path} "
                    f"(as root) from it")
        if p == "/":
            return None
        p = os.path.dirname(p)


def parse_param_overrides(items: list[str], benches: list[Benchmark]) -> dict[str, dict[str, str]]:
    """``BENCH:KEY=VALUE`` (BENCH may be a pattern; ``*`` for all) -> per-benchmark overrides.

    A pattern override applies to the benchmarks that declare the key; an
    override that applies to no chosen benchmark is an error (a typo).
    """
    out: dict[str, dict[str, str]] = {}
    for item in items:
        pat, colon, kv = item.partition(":")
        key, eq, value = kv.partition("=")
        if not colon or not eq or not key:
            raise UsageError(f"--param {item!r} is not of the form BENCH:KEY=VALUE")
        if "\0" in item or len(value) > limits.MAX_VALUE_CHARS:
            raise UsageError(f"--param {item[:60]!r} has a NUL character or a value longer than "
                             f"{limits.MAX_VALUE_CHARS} characters")
        hit = False
        for b in benches:
            if b.name == pat and key not in b.param_names:
                known = ", ".join(sorted(b.param_names)) or "none"
                raise UsageError(f"--param {item!r}: {b.name} has no parameter {key!r} (its parameters: {known})")
            if b.name == pat or (fnmatch.fnmatchcase(b.name, pat) and key in b.param_names):
                if key in b.options and value not in b.options[key]:
                    raise UsageError(f"--param {item!r}: {b.name}'s {key} is one of {', '.join(b.options[key])}")
                out.setdefault(b.name, {})[key] = value
                hit = True
        if not hit:
            raise UsageError(f"--param {item!r} applies to no chosen benchmark")
        if key in PROGRAM_PARAMS:
            why = _untrusted_program(value)
            if why:
                raise UsageError(f"--param {item!r}: {why}")
    return out


def unmet_requirement(b: Benchmark, facts: dict, swap_ready: bool) -> str | None:
    """Why a benchmark cannot run here, or None."""
    for req in b.requires:
        if req == "swap" and not swap_ready:
            return ("needs active swap and none is configured; rerun with --allow-swap-setup to let "
                    "kperfdiff create a temporary zram device or swap file")
        if req == "thp" and facts.get("thp_enabled") not in ("always", "madvise"):
            return f"needs transparent huge pages (mode is {facts.get('thp_enabled')})"
        if req == "root" and os.geteuid() != 0:
            return "needs root"
        if req == "smp" and (facts.get("cpus") or 1) < 2:
            return "needs at least 2 CPUs"
    return None


def measure_repetition(b: Benchmark, binary, params: dict[str, str], copies: int, opts: BenchOptions, rep: int,
                       prefix=None) -> tuple:
    """One repetition: ``copies`` fresh worker processes, with the kernel's counters read around them,
    each pinned to its CPU of round ``rep`` (``opts.placement``; none without one).
    Returns (rep, outputs, monitor deltas, wall seconds), what :func:`aggregate` pools."""
    argv = worker.worker_argv(binary, b.name, params, intervals=opts.intervals or b.intervals,
                              min_batch_ns=opts.min_batch_ns)
    where = opts.placement
    before = machine.counter_snapshot()
    outs = worker.run_copies(argv, copies, opts.timeout or b.timeout, prefix=prefix,
                             cpus=where.cpus(copies, rep) if where else None, cgroup=where.cgroup if where else None)
    after = machine.counter_snapshot()
    return rep, outs, monitors.delta(before, after), outs[0].wall_s if outs else 0.0


def measure(b: Benchmark, binary, params: dict[str, str], copies: int, reps: int, opts: BenchOptions,
            prefix_for_rep=None) -> Measurement:
    """Run one benchmark ``reps`` times with ``copies`` copies on this machine; pool and summarise."""
    started = time.time()
    done: list[tuple] = []
    for rep in range(reps):
        done.append(measure_repetition(b, binary, params, copies, opts, rep,
                                       prefix_for_rep(rep) if prefix_for_rep else None))
        if any(o.status != "ok" for o in done[-1][1]):
            break
    return aggregate(b, done, started, params=params, copies=copies)


@contextlib.contextmanager
def run_lifecycle(store: Store, run: Run, progress: Progress):
    """The state a run ends in: complete when the body finishes, interrupted on Ctrl-C, failed on
    any other error. The progress display is closed and the state stored in every case."""
    state = "failed"
    try:
        yield
        state = "complete"
    except KeyboardInterrupt:
        state = "interrupted"
        raise
    finally:
        progress.close()
        store.finish_run(run.id, state)


def note_status(progress: Progress, name: str, m: Measurement) -> bool:
    """Say on stderr why a benchmark failed or was skipped; True when it failed."""
    if m.status == "failed":
        progress.note(f"kperfdiff: {name} failed: {m.reason}")
    elif m.status == "skipped":
        progress.note(f"kperfdiff: {name} skipped: {m.reason}")
    return m.status == "failed"


def run_bench(store: Store, opts: BenchOptions) -> Outcome:
    """Run the chosen benchmarks into a new run of ``store``, in rounds (:mod:`.rounds`):
    one repetition of every benchmark per round, the order rotated each round; a
    benchmark's result is stored after its first repetition and rewritten (same id)
    after each further one, so Ctrl-C keeps every repetition measured."""
    benches = catalogue.select(opts.suite, opts.only)
    overrides = parse_param_overrides(opts.params, benches)
    if parse_target_spec(opts.target)[0] != "local":
        return run_bench_on_target(store, opts, benches, overrides)
    facts = {**machine.facts(), "tuned": tune.fact()}
    opts.placement = tune.placement(opts.pin)
    profiler = None
    if opts.profile:
        profiler = BenchProfiler(facts, freq=opts.profile_freq)
    binaries = build.build_all(sorted({b.family for b in benches}))
    mid = store.add_machine(facts)
    run = store.start_run(label=opts.label, variant=opts.variant, machine_id=mid, command=opts.command,
                          options=opts.recorded())
    by_name = {b.name: b for b in benches}
    cells = [(b.name, p) for b in benches for p in opts.parallel]     # (benchmark, copies)
    policy = opts.policy()
    progress = Progress(len(cells) * policy.reps, enabled=opts.progress)
    if policy.adaptive:
        # the estimate counts the rounds --precision/--detect may add, at most (rounds of every cell, up to
        # the repetition limit, none started past --max-time from the first round)
        progress.expect_adaptive(len(cells), rounds=max(0, policy.max_reps - policy.reps))
    busy = noise.busy_check()
    if busy:
        progress.note(busy)
    failed = False
    swap_ready = facts.get("swap_active", False)
    done: dict[tuple, list] = {c: [] for c in cells}       # the repetitions measured so far
    stored: dict[tuple, int] = {}                          # result id of each cell
    params_of = {(n, p): by_name[n].run_params(tiny=opts.tiny, overrides=overrides.get(n),
                                               hello=str(binaries["hello"]) if "hello" in binaries else None)
                 for n, p in cells}
    started = {c: time.time() for c in cells}

    with run_lifecycle(store, run, progress), contextlib.ExitStack() as swap:
        def measure_round(order, rep):
            nonlocal failed, swap_ready
            stop = set()
            if rep >= policy.reps:
                progress.adaptive_round(len(order))
            for cell in order:
                b, copies = by_name[cell[0]], cell[1]
                progress.step(f"{b.name} -P {copies}" + (f" {progress.rep_words(rep, policy.reps)}"
                                                         if policy.reps > 1 or rep or policy.adaptive else "")
                              + progress.eta_words())
                if "swap" in b.requires and not swap_ready and opts.allow_swap_setup:
                    swap.enter_context(temporary_swap())
                    swap_ready = True
                reason = unmet_requirement(b, facts, swap_ready)
                if reason:
                    m = Measurement.skipped(b, reason, params=params_of[cell], copies=copies,
                                            started_at=started[cell])
                else:
                    prefix = profiler.prefix_for(run, b, copies)(rep) if profiler else None
                    done[cell].append(measure_repetition(b, binaries[b.family], params_of[cell], copies, opts,
                                                         rep, prefix))
                    m = aggregate(b, done[cell], started[cell], params=params_of[cell], copies=copies)
                m.stop = why.get(cell)
                stored[cell] = store_measurement(store, run.id, m, replace=stored.get(cell))
                if profiler and m.ok:
                    profiler.collect(store, run, stored[cell], b, copies, m.of_repetition(rep))
                if not m.ok:
                    stop.add(cell)
                    failed |= note_status(progress, b.name, m)
                progress.advance()
            return stop

        def half_widths(groups):
            figure = stats.centre_half_width if policy.detect is None else stats.sample_detectable
            return {c: figure([[v for o in outs for v in o.values] for _r, outs, *_ in done[c]]) for c in groups}

        why: dict = {}
        progress.set_time_limit(policy.time_limit)     # bench's --max-time counts from the first round
        why.update(rounds.run_rounds(cells, measure_round, half_widths, policy))
        for cell, rid in stored.items():    # the reason each cell stopped, kept with its result
            b, copies = by_name[cell[0]], cell[1]
            if done[cell]:
                m = aggregate(b, done[cell], started[cell], params=params_of[cell], copies=copies)
                m.stop = why.get(cell)
                store_measurement(store, run.id, m, replace=rid)
    run = store.get_run(run.id)
    return Outcome(run, store.results(run.id), 1 if failed else 0)


def store_target_profiles(store: Store, run: Run, result_id: int, b: Benchmark, copies: int, m: Measurement,
                          facts: dict, event: str) -> None:
    """Record the profiles a target brought back, with meta files beside them like local ones."""

    procs = {(rep, copy): (ops, cpu) for rep, copy, ops, cpu in m.procs}
    counted = {(i.get("rep"), i.get("copy")): instruction_counts(i) for i in m.info}
    for rep, copy, path in m.profiles:
        ops, cpu = procs.get((rep, copy), (None, None))
        extra = {"time_unit": facts["time_unit"]} if facts.get("time_unit") else {}
        if counted.get((rep, copy)):
            extra["instructions"] = counted[rep, copy]
        meta = finish_recording(Path(path), facts, {
            "command": f"kperfdiff worker {b.name}", "benchmark": b.name, "copies": copies, "rep": rep,
            "copy": copy, "event": event, "ops": ops, "cpu_time_ns": cpu,
            "run_id": run.id, "label": run.label, "target": run.target, **extra})
        store.add_profile(run_id=run.id, result_id=result_id, benchmark=b.name, rep=rep, path=str(path),
                          kallsyms=m.kallsyms, event=meta["event"], samples=None, cpu_time_ns=cpu, ops=ops,
                          meta={"copies": copies, "copy": copy, "hw_events": meta["hw_events"],
                                "symfs": m.symfs, **extra})
    # Exact instruction counts per function (deterministic guests): a profile of the event
    # "instructions", whose weight is instructions and whose operations are the timed ones.
    # Their operations are the marked intervals' (counted_ops), whether or not the worker's own
    # counters opened.
    ops_of = {(i.get("rep"), i.get("copy")): counted_ops(i) for i in m.info}
    for rep, copy, path, total in m.counted:
        store.add_profile(run_id=run.id, result_id=result_id, benchmark=b.name, rep=rep, path=str(path),
                          kallsyms=None, event=COUNTED_EVENT, samples=None, cpu_time_ns=total,
                          ops=ops_of.get((rep, copy)),
                          meta={"copies": copies, "copy": copy, "time_unit": facts.get("time_unit") or "instructions",
                                "counted_by": "QEMU TCG plugin (exact, per translation block)"})


def run_bench_on_target(store: Store, opts: BenchOptions, benches: list[Benchmark],
                        overrides: dict[str, dict[str, str]]) -> Outcome:
    """`kperfdiff bench --target SPEC`: every cell in one job on a guest or board, then stored."""
    target = targets.open_target(opts.target)
    run = store.start_run(label=opts.label, variant=opts.variant, target=opts.target, machine_id=None,
                          command=opts.command, options=opts.recorded())
    cells = [targets.Cell(b, p, overrides.get(b.name)) for b in benches for p in opts.parallel]
    progress = Progress(1, enabled=opts.progress)
    failed = False
    with run_lifecycle(store, run, progress):
        progress.step(f"{len(cells)} benchmark cells on {opts.target}")
        with target:
            ms = targets.run_benchmarks(target, cells, opts, artefact_dir=run.artefact_dir)
        progress.advance()
        facts = (ms[0].facts or {}) if ms else {}
        if facts:
            store.set_run_machine(run.id, store.add_machine(facts))
        for c, m in zip(cells, ms):
            rid = store_measurement(store, run.id, m)
            if m.ok and (m.profiles or m.counted):
                store_target_profiles(store, run, rid, c.bench, c.copies, m, facts,
                                      getattr(target, "perf_event", None) or "cpu-clock")
            failed |= note_status(progress, c.bench.name, m)
    run = store.get_run(run.id)
    return Outcome(run, store.results(run.id), 1 if failed else 0)


def run_boot_timing(store: Store, spec: str, mems: list[str], boots: int, *, label: str = "",
                    command: str = "", progress: bool = True, mapping: bool | None = None) -> Outcome:
    """`kperfdiff target boot`: the boot.* benchmarks of a guest, stored as a run like any other."""
    target = targets.open_target(spec)
    if not isinstance(target, QemuTarget):
        raise UsageError(f"boot timing needs a guest target (qemu:arm64 or qemu:x86_64), not {spec!r}")
    if mapping is None:     # the mapping phase is counted on arm64 guests (the plugin decodes AArch64)
        mapping = target.qs.arch == "arm64"
    elif mapping and target.qs.arch != "arm64":
        raise UsageError("the mapping phase (boot.map_*) is counted on arm64 guests only")
    run = store.start_run(label=label, target=spec, machine_id=None, command=command,
                          options={"boot": True, "mems": mems, "boots": boots, "target": spec, "mapping": mapping})
    bar = Progress(len(mems) * boots * (2 if mapping else 1), enabled=progress)
    failed = False

    def step(what: str) -> None:
        bar.step(what)
        bar.advance()

    with run_lifecycle(store, run, bar):
        with target:
            ms = measure_boots(target, mems, boots, progress=step, mapping=mapping)
        if ms and ms[0].facts:
            store.set_run_machine(run.id, store.add_machine(ms[0].facts))
        for m in ms:
            store_measurement(store, run.id, m)
            failed |= note_status(bar, m.benchmark, m)
    run = store.get_run(run.id)
    return Outcome(run, store.results(run.id), 1 if failed else 0)
