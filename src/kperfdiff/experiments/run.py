"""Running an experiment's matrix (:func:`run_experiment`): every cell measured and stored at once,
resumed where it stopped, on a shared store with a heartbeat that tells other machines it is alive.

The cells and their order: :mod:`kperfdiff.experiments.matrix`; more repetitions until the changes
are known precisely: :mod:`kperfdiff.experiments.adaptive`; variants on LAVA labs:
:mod:`kperfdiff.experiments.lava`.

* **Resume.** ``kperfdiff run FILE`` again continues an interrupted or crashed
  experiment of the same name: the cells already stored ok or skipped are
  never measured again; failed cells are measured again (the new attempt
  replaces the failed row in one transaction). The identity of an experiment
  is the hash of its parsed content (comments, layout and ``description`` do
  not count). If the file changed after a partial run, ``run`` refuses with a
  sentence saying so, unless ``--restart``: then the old experiment is kept
  in the store as ``superseded`` and a new one starts from zero.
* **Identity.** Each cell keeps what it was measured on
  (:func:`kperfdiff.targets.machine.identity`: kernel release, build id where readable,
  ``uname -v`` and command line, a machine fingerprint, the kperfdiff version);
  a guest's or board's cells the identity its job reported. A resume whose
  identity differs from a variant's stored cells refuses in one sentence naming
  the difference, before anything is measured and leaving the experiment as it
  was (``--restart`` measures afresh; ``--name`` gives another experiment). This
  machine's identity is checked before the run starts; a guest's or board's at
  its first job, before any of its cells is stored, or, when the whole experiment
  has nothing left to measure, by one empty job (a guest variant with nothing left
  while others still have cells is not asked). Cells stored before identities
  were kept (schema 5) have none and are never resumed onto.
* **Knobs.** Before anything is measured every knob of every variant is
  checked by writing its value and reading it back, then restoring the
  original; a knob that cannot be set (file absent, not root, value refused)
  stops the run with the reason. Only performance knobs are accepted without
  ``--allow-knob`` and dangerous files never (see :mod:`kperfdiff.measure.knobs`).
  The original values are written to the machine's pending-restore file
  before the first change and removed only once restored, and knobs are
  restored in a ``finally`` with SIGINT/SIGTERM/SIGHUP blocked, so Ctrl-C, a
  kill or a failing benchmark leaves the machine as it was; after a crash
  (SIGKILL) the next kperfdiff command of any kind restores them first.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kperfdiff import targets
from kperfdiff.bench import build, noise
from kperfdiff.bench.measurement import Measurement, store_measurement
from kperfdiff.bench.swap import temporary_swap
from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, StoreError
from kperfdiff.core.progress import Progress
from kperfdiff.core.records import StoredExperiment
from kperfdiff.experiments import adaptive
from kperfdiff.experiments.file import Experiment, Variant
from kperfdiff.experiments.lava import LavaVariants, is_lava
from kperfdiff.experiments.matrix import Cell, matrix
from kperfdiff.measure import knobs as knobmod
from kperfdiff.measure import tune
from kperfdiff.measure.session import BenchOptions, measure, store_target_profiles, unmet_requirement
from kperfdiff.store.keepalive import KeepAlive
from kperfdiff.targets import machine
from kperfdiff.targets.boot import measure_batch
from kperfdiff.targets.perf_record import BenchProfiler, require_perf


class StaleCells(InputError):
    """A resumed experiment's stored cells were measured on another kernel, machine or kperfdiff."""


@contextlib.contextmanager
def _term_as_interrupt():
    """SIGTERM and SIGHUP stop the run like Ctrl-C, so the finally clauses run."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    old = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class RunOptions:
    restart: bool = False
    progress: bool = True
    command: str = ""
    pin: bool = True        # False: --no-pin (the file's `pin = false` too turns pinning off)


@dataclass
class RunOutcome:
    experiment: StoredExperiment
    measured: int
    total: int
    failed: int
    exit_status: int


def _open_or_create(store, exp: Experiment, total: int, restart: bool, log=None,
                    identities: dict[str, dict] | None = None) -> tuple[StoredExperiment, str | None]:
    """The experiment to run (a new one, or the one to resume) and the state a resumed one had before
    (None: a new one). One process at a time decides, per name (two machines starting one experiment
    on a shared store at once: the second finds the first running it). ``identities``: this machine's
    identity for each variant measured here (:func:`local_identities`), which their stored cells must
    have to be resumed."""
    with store.exclusive(f"experiment {exp.name}"):
        return _open_or_create_now(store, exp, total, restart, log or (lambda m: None), identities)


def _ago(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    return f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60} min"


def _heartbeat_words(store, old: StoredExperiment) -> tuple[str, float | None]:
    """'its heartbeat was last seen 42 s ago (at 2024-06-11 14:03:12)', and that age in seconds."""
    age = store.heartbeat_age(old.id)
    if age is None:
        return "it has no heartbeat", None
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - age))
    return f"its heartbeat was last seen {_ago(age)} ago (at {at})", age


def _busy(store, exp: Experiment, old: StoredExperiment) -> InputError:
    """The refusal to run an experiment another live process is running."""
    if not store.of_another_host(old):
        return InputError(f"experiment {exp.name} (id {old.id}) is being run now by process {old.pid}; "
                          f"wait for it or stop it first")
    seen, _ = _heartbeat_words(store, old)
    return InputError(f"experiment {exp.name} (id {old.id}) is being run now by process {old.pid} on "
                      f"{old.host}: {seen}; wait for it or stop it there (if that machine is dead, kperfdiff run "
                      f"takes the experiment over once its heartbeat is {_ago(limits.EXPERIMENT_DEAD_S)} old)")


def local_identities(exp: Experiment) -> dict[str, dict]:
    """variant label -> this machine's identity now (:func:`machine.identity`), for the variants
    measured here (none: no facts are read)."""
    local = [v.label for v in exp.variants if v.target == "local"]
    here = machine.identity(machine.facts(probe_perf=False)) if local else None
    return {label: here for label in local}


def stale_cells(exp: Experiment, stored: dict[str, dict[str, int]], identities: dict[str, dict]) -> str | None:
    """What differs between the identity of an experiment's stored cells (``stored``: variant ->
    {identity JSON: cells}, Store.cell_identities) and ``identities`` (variant label -> its identity
    now, for the variants whose identity is known), as words naming the variant, how many cells and
    the difference; None if nothing does."""
    for v in exp.variants:
        now = identities.get(v.label)
        if now is None:
            continue
        for text, n in sorted(stored.get(v.label, {}).items()):
            diff = machine.identity_difference(json.loads(text) if text else None, now)
            if diff:
                return f"{n} stored cells of variant {v.label} have {diff}" if not text else \
                    f"{n} stored cells of variant {v.label} were measured on {diff}"
    return None


def stale_refusal(exp: Experiment, old: StoredExperiment, what: str) -> StaleCells:
    """The one sentence that refuses to add cells to an experiment whose stored ones differ."""
    return StaleCells(f"experiment {exp.name} (id {old.id}) was measured on another kernel, machine or "
                      f"kperfdiff than this run's ({what}); kperfdiff does not mix them: run with --restart to "
                      f"measure it afresh (the stored cells stay in the store, marked superseded) or give the "
                      f"experiment another name (--name NAME)")


def _open_or_create_now(store, exp: Experiment, total: int, restart: bool, log,
                        identities: dict[str, dict] | None = None) -> tuple[StoredExperiment, str | None]:
    old = store.latest_experiment(exp.name)
    h = exp.file_hash()
    if old is not None and store.experiment_owner_alive(old):
        raise _busy(store, exp, old)
    if old is not None and old.state == "running" and store.of_another_host(old):
        # a shared store's experiment whose machine stopped saying it is alive: take it over, if no other
        # machine does first and its process does not speak up meanwhile
        seen, _ = _heartbeat_words(store, old)
        if not store.take_over_experiment(old.id):
            raise _busy(store, exp, store.get_experiment(old.id))
        log(f"kperfdiff: experiment {exp.name} (id {old.id}) was left running by process {old.pid} on "
            f"{old.host}, and {seen}: taking it over (that process, if it comes back, stops)")
        old = store.get_experiment(old.id)
    if old is not None and (restart or old.file_hash != h):
        # nothing measured yet (it stopped before its first cell, e.g. on a knob): nothing to protect
        if not restart and store.cell_states(old.id):
            done = sum(1 for s in store.cell_states(old.id).values() if s in ("ok", "skipped"))
            raise InputError(f"{exp.path} changed since experiment {exp.name} (id {old.id}) started, "
                             f"{done} of {old.cells} cells done; rerun with --restart to start it again "
                             f"(the old results stay in the store), or give the experiment another name")
        store.set_experiment_state(old.id, "superseded")
        old = None
    if old is None:
        eid = store.create_experiment(name=exp.name, path=str(Path(exp.path).resolve()), file_hash=h,
                                      spec=exp.spec(), cells=total)
        return store.get_experiment(eid), None
    if identities:
        what = stale_cells(exp, store.cell_identities(old.id), identities)
        if what:
            raise stale_refusal(exp, old, what)
    store.set_experiment_state(old.id, "running", claim=True)
    return store.get_experiment(old.id), old.state


def _prefix_words(v: Variant) -> list[str]:
    words: list[str] = []
    if v.env:
        words += ["env"] + [f"{k}={val}" for k, val in v.env.items()]
    if v.cpus:
        words += ["taskset", "-c", v.cpus]
    return words


def _check_cpus(exp: Experiment) -> None:
    allowed = os.sched_getaffinity(0)
    for v in exp.variants:
        if not v.cpus:
            continue
        want = set(limits.parse_cpu_list(v.cpus))
        missing = sorted(want - allowed)
        if missing:
            raise InputError(f"{exp.path}: variant {v.label!r}.cpus names CPU {missing[0]}, which this machine "
                             f"does not have or does not allow (allowed: {len(allowed)} CPUs)")


def run_experiment(store, exp: Experiment, opts: RunOptions, log=None) -> RunOutcome:
    """Run (or resume) the whole matrix of ``exp`` into ``store``."""
    return _MatrixRun(store, exp, opts, log or (lambda m: print(m, file=sys.stderr, flush=True))).run()


class _MatrixRun:
    """One run of an experiment's matrix: the cells still to measure, the variants' runs in the
    store, the knob guard, and what has been measured so far."""

    def __init__(self, store, exp: Experiment, opts: RunOptions, log):
        self.store, self.exp, self.opts, self.log = store, exp, opts, log
        _check_cpus(exp)
        m = matrix(exp)
        self.columns, self.overrides, self.all_cells = m.columns, m.overrides, m.cells
        self.bench_by_name = m.bench_by_name
        knobmod.repair_pending(log, strict=True)
        if exp.profile:
            require_perf()
        expr, self.state_before = _open_or_create(store, exp, len(self.all_cells), opts.restart, log,
                                                  local_identities(exp))
        self.resumed = self.state_before is not None
        self.eid = expr.id
        self.expr = expr
        # variant -> {identity JSON: cells}: what the stored cells were measured on (a guest's are
        # compared with its first job's facts, before anything of that job is stored)
        self.identities = store.cell_identities(self.eid)
        self.heartbeat = _Heartbeat(store, self.eid)
        states = store.cell_states(self.eid)
        self.todo = [c for c in self.all_cells if states.get(c.id) not in ("ok", "skipped")]
        self.guard = knobmod.KnobGuard()
        self.swap = contextlib.ExitStack()
        self.runs: dict[str, object] = {}
        self.facts: dict[str, dict | None] = {}
        self.finished: set[str] = set()
        self.measured = self.failed = 0
        self.binaries: dict = {}
        self.profilers: dict = {}
        self.progress: Progress | None = None
        self.lava = LavaVariants(exp, self.bench_by_name, self.overrides)

    def run(self) -> RunOutcome:
        exp, store, eid = self.exp, self.store, self.eid
        done_before = len(self.all_cells) - len(self.todo)
        if self.resumed:
            self.log(f"kperfdiff: resuming experiment {exp.name} (id {eid}): {done_before} of "
                     f"{len(self.all_cells)} cells already stored")
        state = "failed"
        self.heartbeat.start()
        try:
            with _term_as_interrupt():
                self.facts = self._knobs_and_facts()
                self._probe_finished_targets()
                self.runs = self._variant_runs()
                self._prepare(done_before)
                try:
                    self.measure_cells(self.todo)
                    if exp.precision or exp.detect:
                        self.binaries = self.binaries or self._build()
                        why = adaptive.repeat_until_precise(store, exp, eid, self.columns, self.measure_cells,
                                                            self.progress, self.log)
                        for (key, cores), text in why.items():
                            store.set_cell_stop(eid, key, cores, text)
                finally:
                    self.progress.close()
                remaining_failed = sum(1 for s in store.cell_states(eid).values() if s == "failed")
                state = "failed" if remaining_failed else "complete"
        except StaleCells:
            # refused before a cell of the mismatching variant was stored: the experiment keeps its state
            before = self.state_before
            state = before if before in ("complete", "failed") else "interrupted"
            raise
        except KeyboardInterrupt:
            state = "interrupted"
            self.log(f"kperfdiff: experiment {exp.name} interrupted after {self.measured} cells; run the same "
                     f"command again to resume it")
            raise
        finally:
            self._finish(state)
        return RunOutcome(store.get_experiment(eid), self.measured, len(self.all_cells), self.failed,
                          1 if self.failed else 0)

    def _knobs_and_facts(self) -> dict[str, dict | None]:
        """Every knob of every variant can be set (checked before anything is measured), and the
        machine facts each variant runs with (a guest or board says what it is after its first job)."""
        facts: dict[str, dict | None] = {}
        for v in self.exp.variants:
            if v.target == "local":
                self.guard.apply(v.knobs)
                facts[v.label] = {**machine.facts(), "tuned": tune.fact()}
            else:
                facts[v.label] = None
        self.guard.apply({})
        return facts

    def _probe_finished_targets(self) -> None:
        """A finished experiment run again, with variants on guests or boards: one empty job per such
        variant says what it runs now, so the stored cells are not taken as measured on the kernel it
        runs now when they were not. (With cells left to measure, a variant's first job says it, and
        a variant with none left is not asked: rerunning failed jobs costs no more jobs.)"""
        if not self.resumed or self.todo:
            return
        for v in self.exp.variants:
            if v.target == "local" or not self.identities.get(v.label):
                continue
            self.log(f"kperfdiff: {v.label}: asking {v.target} what it runs now (one empty job), to check the "
                     f"stored cells were measured on it")
            with targets.open_target(v.target, cmdline=v.cmdline) as t:
                self.facts[v.label] = t.facts() or None
            self._check_identity(v.label, self.facts[v.label])

    def _check_identity(self, label: str, facts: dict | None) -> dict | None:
        """The identity of a variant's cell measured with ``facts``; refuses (StaleCells) if the variant's
        stored cells have another."""
        if not facts:
            return None
        ident = machine.identity(facts)
        what = stale_cells(self.exp, self.identities, {label: ident})
        if what:
            raise stale_refusal(self.exp, self.expr, what)
        return ident

    def target_said(self, label: str, facts: dict | None) -> None:
        """A guest's or board's job said what it runs (``facts``): the first time, checked against the
        variant's stored cells (refused, StaleCells, before the run records a machine its cells were
        not measured on), then kept as the variant's facts and its run's machine."""
        if not facts or self.facts.get(label) is not None:
            return
        self._check_identity(label, facts)
        self.facts[label] = facts
        self.store.set_run_machine(self.runs[label].id, self.store.add_machine(facts))

    def _variant_runs(self) -> dict[str, object]:
        """One run per variant, reused when resuming."""
        exp, store = self.exp, self.store
        existing = {r.variant: r for r in store.experiment_runs(self.eid)}
        runs: dict[str, object] = {}
        for v in exp.variants:
            mid = store.add_machine(self.facts[v.label]) if self.facts[v.label] else None
            if v.label in existing:
                runs[v.label] = store.reopen_run(existing[v.label].id)
                continue
            r = store.start_run(label=f"{exp.name}/{v.label}", variant=v.label, target=v.target,
                                machine_id=mid, command=self.opts.command, experiment_hash=exp.file_hash(),
                                options={"experiment": exp.name, "experiment_id": self.eid,
                                         "knobs": v.knobs, "env": v.env, "cpus": v.cpus,
                                         "pin": exp.pin and self.opts.pin and not v.cpus,
                                         "vars": v.vars, "cmdline": v.cmdline, "params": v.params})
            store.link_run(r.id, self.eid)
            runs[v.label] = r
        return runs

    def _build(self) -> dict:
        return build.build_all(sorted({b.family for b in self.bench_by_name.values()} - {"boot"}))

    def _prepare(self, done_before: int) -> None:
        exp, todo = self.exp, self.todo
        self.binaries = self._build() if todo else {}
        self.bopts = BenchOptions(intervals=exp.intervals,
                                  min_batch_ns=int(exp.min_batch_ms * 1e6) if exp.min_batch_ms else None,
                                  timeout=exp.timeout, progress=self.opts.progress,
                                  pin="last" if exp.pin and self.opts.pin else "off")
        self.bopts.placement = tune.placement(self.bopts.pin)
        if exp.profile:
            self.profilers = {label: BenchProfiler(f, freq=exp.profile_freq) for label, f in self.facts.items() if f}
        self.swap_ready = {label: (f or {}).get("swap_active", False) for label, f in self.facts.items()}
        if todo and any(v.target == "local" for v in exp.variants):
            busy = noise.busy_check()
            if busy:
                self.log(busy)
        self.progress = Progress(len(todo), enabled=self.opts.progress)
        then = ""
        if exp.precision or exp.detect:
            # the estimate counts the adaptive rounds that may follow, at most
            adaptive.expect(self.store, exp, self.eid, self.columns, self.progress)
            pol = adaptive.policy(exp)
            then = (f", then more rounds until every change {'is known to' if exp.detect is None else 'could detect'} "
                    f"{pol.goal}, for at most {pol.time_limit:g} s")
        if todo:
            self.log(f"kperfdiff: experiment {exp.name} (id {self.eid}): {len(todo)} cells to measure "
                     f"({len(exp.variants)} variants x {len(self.columns[exp.variants[0].label])} benchmarks x "
                     f"{len(exp.cores)} core counts x {exp.reps} reps"
                     + (f", {done_before} done before" if done_before else "") + ")" + then)

    def stored(self, c: Cell, m: Measurement, profile_store) -> None:
        """One measured cell into the store at once (so a rerun resumes after it), with the identity of
        what it was measured on (refused if the variant's stored cells have another)."""
        facts = m.facts or self.facts.get(c.variant)
        ident = self._check_identity(c.variant, facts) if m.status != "failed" else \
            (machine.identity(facts) if facts else None)
        rid = store_measurement(self.store, self.runs[c.variant].id, m, experiment_id=self.eid, cell=c.id,
                                rep=c.rep, bench_key=c.key, identity=ident)
        if ident is not None and m.status != "failed":
            key = json.dumps(ident, sort_keys=True)
            counts = self.identities.setdefault(c.variant, {})
            counts[key] = counts.get(key, 0) + 1
        if m.ok:
            profile_store(rid)
        self.finished.add(c.id)
        self.measured += 1
        self.heartbeat.check(self.exp.name)
        if m.status == "failed":
            self.failed += 1
            self.progress.note(f"kperfdiff: {c.variant}: {m.benchmark} -P {c.cores} rep {c.rep + 1} failed: "
                               f"{m.reason}")
        elif m.status == "skipped" and c.rep == 0:
            self.progress.note(f"kperfdiff: {c.variant}: {m.benchmark} skipped: {m.reason}")
        self.progress.advance()

    def measure_cells(self, batch_cells: list[Cell]) -> None:
        exp = self.exp
        for c in batch_cells:
            if c.id in self.finished:
                continue
            v = exp.variant(c.variant)
            eta = self.progress.eta_words()
            if is_lava(v.target):
                # every LAVA variant's cells still to measure, as jobs in flight on the lab's devices
                batch = [x for x in batch_cells if is_lava(exp.variant(x.variant).target) and x.id not in self.finished]
                self.progress.step(f"{len(batch)} cells as LAVA jobs ({len({(x.variant, x.rep) for x in batch})} "
                                   f"jobs){eta}", steps=len(batch))
                for x, m, keep in self.lava.measure(batch, self.runs, self.store, self.target_said, self.progress.note):
                    self.stored(x, m, keep)
                continue
            if v.target != "local":
                # a guest boots (or a board connects) once for all of this variant's cells of this rep
                batch = [x for x in batch_cells
                         if x.variant == c.variant and x.rep == c.rep and x.id not in self.finished]
                self.progress.step(f"{c.variant}: {len(batch)} cells on {v.target}, "
                                   f"{self.progress.rep_words(c.rep, exp.reps)}{eta}", steps=len(batch))
                for x, m, keep in _measure_remote(exp, v, batch, self.bench_by_name, self.overrides,
                                                  self.runs[v.label], self.store, self.target_said):
                    self.stored(x, m, keep)
                continue
            b = self.bench_by_name[c.benchmark]
            self.progress.step(f"{c.variant}: {c.benchmark} -P {c.cores} {self.progress.rep_words(c.rep, exp.reps)}{eta}")
            self.guard.apply(v.knobs)
            m = _measure_cell(exp, v, c, b, self.binaries, self.overrides, self.facts, self.swap_ready, self.swap,
                              self.profilers, self.runs[v.label], self.bopts, measure, unmet_requirement)
            prof = self.profilers.get(v.label)
            self.stored(c, m, (lambda rid, c=c, b=b, m=m, prof=prof: prof.collect(
                self.store, self.runs[c.variant], rid, b, c.cores, m)) if prof else (lambda rid: None))

    def _finish(self, state: str) -> None:
        """Knobs restored, swap removed, runs and the experiment closed, even on Ctrl-C."""
        problems = self.guard.restore()
        self.heartbeat.stop()
        self.lava.close()
        try:
            self.swap.close()
        finally:
            # unless another machine took the experiment over: its runs are that one's now
            with knobmod.signals_blocked():
                if not self.heartbeat.lost and self.store.owns_experiment(self.eid):
                    for r in self.runs.values():
                        self.store.finish_run(r.id, "complete" if state == "complete" else
                                              ("failed" if state == "failed" else "interrupted"))
                    self.store.set_experiment_state(self.eid, state)
        for pr in problems:
            self.log(f"kperfdiff: warning: {pr}; the original value is kept in the store and the next kperfdiff "
                     f"run tries again")


class _Heartbeat(KeepAlive):
    """While an experiment runs on a PostgreSQL store, its heartbeat every limits.HEARTBEAT_S seconds
    (Store.heartbeat), from a thread with a connection of its own, so it goes on while a cell is measured
    (a guest's batch of cells can take many minutes): another machine judges by it whether this process
    is alive. An SQLite store's experiments are judged by their pid: no thread. ``lost``: the experiment
    is no longer this process's (another machine took it over while this one was not heard from)."""

    def __init__(self, store, eid: int):
        super().__init__(store, limits.HEARTBEAT_S, lambda own: own.heartbeat(eid), "kperfdiff-heartbeat")
        self.eid = eid

    def start(self) -> None:
        if self.store.postgres:
            super().start()

    def check(self, name: str) -> None:
        """Stop (after the cell just stored) if another machine took the experiment over."""
        if self.lost:
            raise StoreError(f"experiment {name} (id {self.eid}) was taken over by another machine while this "
                             f"process's heartbeat did not reach the store; this process stops (the cells it "
                             f"stored are kept)")


def _measure_cell(exp, v, c, b, binaries, overrides, facts, swap_ready, swap, profilers, run, bopts, measure,
                  unmet_requirement) -> Measurement:
    params = b.run_params(tiny=exp.tiny, overrides=overrides[v.label].get(b.name),
                          hello=str(binaries["hello"]) if "hello" in binaries else None)
    if "swap" in b.requires and not swap_ready[v.label] and exp.allow_swap_setup:
        # this machine's swap, for this machine's variants; a guest or board sets up its own in its
        # job (targets.run_benchmarks with allow_swap_setup)
        swap.enter_context(temporary_swap())
        for other in exp.variants:
            if other.target == "local":
                swap_ready[other.label] = True
    reason = unmet_requirement(b, facts[v.label], swap_ready[v.label])
    if reason:
        return Measurement.skipped(b, reason, params=params, copies=c.cores)
    words = _prefix_words(v)
    prof = profilers.get(v.label)
    rep = c.rep

    def prefix_for_rep(_ignored):
        if prof is None:
            return list(words) or None
        return words + prof.prefix_for(run, b, c.cores)(rep)

    where = getattr(bopts, "placement", None)
    if where is not None and v.cpus:      # the variant's own CPU list (taskset) wins over pinning
        bopts = dataclasses.replace(bopts, placement=None)
    elif where is not None:
        # the round (rep) picks the CPUs: every variant of one round runs on the same ones
        bopts = dataclasses.replace(bopts, placement=dataclasses.replace(where, first_round=rep))
    return measure(b, binaries[b.family], params, c.cores, 1, bopts, prefix_for_rep).as_repetition(rep)


def _measure_remote(exp, v, batch, bench_by_name, overrides, run, store, said):
    """Measure a batch of one variant's cells (one rep) in one job on its target.

    Yields (cell, measurement, profile-storing function) per cell.
    Each job also says what machine the target is: ``said(label, facts)``
    (_MatrixRun.target_said) before its cells are yielded.
    """
    opts = BenchOptions(reps=1, intervals=exp.intervals, tiny=exp.tiny,
                        min_batch_ns=int(exp.min_batch_ms * 1e6) if exp.min_batch_ms else None,
                        timeout=exp.timeout, profile=exp.profile, profile_freq=exp.profile_freq,
                        allow_swap_setup=exp.allow_swap_setup)
    if any(bench_by_name[x.benchmark].family == "boot" for x in batch):
        # boot.*: the guest's own boots measure them (targets/boot.py), not a job in one boot
        boots = [x for x in batch if bench_by_name[x.benchmark].family == "boot"]
        with targets.open_target(v.target, cmdline=v.cmdline) as t:
            ms = measure_batch(t, [x.benchmark for x in boots])
        said(v.label, ms[0].facts if ms else None)
        for x, m in zip(boots, ms):
            yield x, m.as_repetition(x.rep), (lambda rid: None)
        batch = [x for x in batch if bench_by_name[x.benchmark].family != "boot"]
        if not batch:
            return
    cells = [targets.Cell(bench_by_name[x.benchmark], x.cores, overrides[v.label].get(x.benchmark)) for x in batch]
    with targets.open_target(v.target, cmdline=v.cmdline) as t:
        ms = targets.run_benchmarks(t, cells, opts, artefact_dir=run.artefact_dir, first_rep=batch[0].rep)
        event = getattr(t, "perf_event", None) or "cpu-clock"
    said(v.label, ms[0].facts if ms else None)
    for x, tc, m in zip(batch, cells, ms):
        def keep(rid, tc=tc, m=m):
            if m.profiles or m.counted:
                store_target_profiles(store, run, rid, tc.bench, tc.copies, m, m.facts or {}, event)
        yield x, m, keep


def describe_stored(store, exp: Experiment, restart: bool = False) -> str:
    """What ``run`` would do with what the store holds of the experiment (``run --dry-run``): how many
    cells are stored, whether they can be resumed (the same file; measured on the identity this machine
    has now) and how many would be measured. ``store`` None: there is no store yet."""
    total = len(matrix(exp).cells)
    old = store.latest_experiment(exp.name) if store is not None else None
    states = store.cell_states(old.id) if old is not None else {}
    if old is None or not states:
        return f"stored: none; run would measure all {total} cells\n"
    done = sum(1 for x in states.values() if x in ("ok", "skipped"))
    head = f"stored: {done} of {total} cells, in experiment {exp.name} (id {old.id}, {old.state})"
    afresh = f"--restart (or another --name) measures all {total} cells afresh"
    if restart:
        return f"{head}; with --restart run keeps them (marked superseded) and measures all {total} cells afresh\n"
    if old.file_hash != exp.file_hash():
        return f"{head}, made from another version of the file: run refuses to resume it; {afresh}\n"
    what = stale_cells(exp, store.cell_identities(old.id), local_identities(exp))
    if what:
        return f"{head}, but {what}: run refuses to mix them; {afresh}\n"
    out = f"{head}, measured on this machine's kernel as it is now; run would measure {total - done}"
    remote = [v.label for v in exp.variants if v.target != "local"]
    if remote:
        out += (f" (the stored cells of {', '.join(remote)} are checked against what their target runs at its "
                f"first job)")
    return out + "\n"
