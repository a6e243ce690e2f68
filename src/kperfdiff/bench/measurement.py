"""The one measurement type, how worker outputs become one, and the one way it is stored.

Every path that measures (``kperfdiff bench`` here or on a target, the cells of
an experiment, guest boot timing) ends in a :class:`Measurement`: one benchmark
at one parameter set and copy count, over one or more repetitions, with every
raw interval, the kernel's counter deltas and the noise of every repetition.
:func:`aggregate` makes one from worker outputs; :func:`store_measurement`
writes one into the store, as a run's result or as an experiment's cell.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

from kperfdiff.core import monitors, stats
from kperfdiff.bench import noise
from kperfdiff.core.records import UNRESOLVABLE


@dataclass
class Measurement:
    status: str                                  # ok, failed, skipped
    benchmark: str
    unit: str | None
    better: str | None
    reason: str | None = None
    started_at: float = field(default_factory=time.time)
    params: dict = field(default_factory=dict)
    copies: int = 1
    raw: list[tuple] = field(default_factory=list)       # (rep, copy, seq, value, ops, ns)
    info: list[dict] = field(default_factory=list)
    monitors: dict = field(default_factory=dict)          # counter deltas summed over repetitions
    noise: list[dict] = field(default_factory=list)       # per repetition: kperfdiff.bench.noise + "disturbed"
    summary: dict | None = None
    ops: int | None = None
    cpu_ns: int | None = None
    wall_s: float | None = None
    overhead: float | None = None
    procs: list[tuple] = field(default_factory=list)      # (rep, copy, ops, cpu ns) per process
    stop: str | None = None                               # why the repetitions stopped
    # brought back from a target or a guest
    facts: dict | None = None
    profiles: list[tuple] = field(default_factory=list)   # (rep, copy, perf.data path)
    # (rep, copy, folded path, total instructions): exact instruction counts per function
    # (deterministic guests; targets/guest/counting.py)
    counted: list[tuple] = field(default_factory=list)
    kallsyms: str | None = None
    symfs: str | None = None
    extra: dict = field(default_factory=dict)             # e.g. boot timing's slowest initcalls

    @classmethod
    def skipped(cls, b, reason: str, *, params: dict | None = None, copies: int = 1,
                started_at: float | None = None) -> "Measurement":
        return cls("skipped", b.name, b.unit, b.better, reason=reason, params=dict(params or {}), copies=copies,
                   started_at=started_at if started_at is not None else time.time())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_repetition(self, rep: int) -> "Measurement":
        """The same measurement with its only repetition numbered ``rep`` (an experiment's cell)."""
        return replace(self, raw=[(rep, *r[1:]) for r in self.raw],
                       info=[{**i, "rep": rep} for i in self.info],
                       procs=[(rep, *p[1:]) for p in self.procs],
                       noise=[{**n, "rep": rep} for n in self.noise],
                       profiles=[(rep, *p[1:]) for p in self.profiles])

    def of_repetition(self, rep: int) -> "Measurement":
        """Only the processes (and profiles) of repetition ``rep``."""
        return replace(self, procs=[p for p in self.procs if p[0] == rep],
                       profiles=[p for p in self.profiles if p[0] == rep])


def repetition_noise(rep: int, outs: list) -> list[dict]:
    """What disturbed one repetition (:mod:`kperfdiff.bench.noise`), with the reasons it counts as
    disturbed under the stated thresholds: [] when nothing was sampled (a remote target)."""
    n = outs[0].rep_noise if outs else None
    if n is None:
        return []
    reasons = noise.disturbance(n, copies=len(outs), cpus=os.cpu_count() or 1)
    return [{"rep": rep, **n.as_dict(), "disturbed": reasons}]


def aggregate(b, reps: list[tuple[int, list, dict, float]], started: float, *, params: dict | None = None,
              copies: int | None = None) -> Measurement:
    """Pool the worker outputs of one benchmark's processes into a :class:`Measurement`.

    ``reps``: (rep, outputs of its copies, monitor deltas, wall seconds) per repetition;
    each repetition's noise comes with its outputs (``rep_noise``). The first copy that
    failed or skipped decides the status; otherwise every interval is pooled and
    summarised. A subtraction benchmark (its workers announce an overhead) whose interval falls to
    or below zero fails as not resolvable (:func:`~kperfdiff.core.stats.unresolved_difference`): no
    latency is stored for it. Used for local runs and for results brought back from a target alike.
    """
    m = Measurement("ok", b.name, b.unit, b.better, started_at=started, params=dict(params or {}),
                    copies=copies if copies is not None else (len(reps[0][1]) if reps and reps[0][1] else 1))
    ops = cpu = 0
    overheads = []
    wall = 0.0
    for rep, outs, mon_delta, wall_s in reps:
        monitors.add(m.monitors, mon_delta)
        m.noise += repetition_noise(rep, outs)
        for copy, o in enumerate(outs):
            if o.status != "ok":
                m.status, m.reason = o.status, o.error or o.skip
                return m
            if o.unit != b.unit or o.better != b.better:
                m.status = "failed"
                m.reason = (f"the worker reported {o.unit} ({o.better} is better) but the catalogue says "
                            f"{b.unit} ({b.better})")
                return m
            why = stats.unresolved_difference(o.values, o.overhead, b.unit) if o.overhead is not None else None
            if why:
                m.status = "failed"
                m.reason = f"{UNRESOLVABLE}: repetition {rep + 1}" + (f", copy {copy + 1}" if len(outs) > 1 else "") \
                    + f": {why}"
                m.raw = []        # nor the repetitions before it: no number is kept
                return m
            m.raw.extend((rep, copy, seq, v, n, ns) for seq, (v, n, ns) in enumerate(o.intervals))
            m.info.append({"rep": rep, "copy": copy, **o.info})
            ops += o.ops
            cpu += o.cpu_user_ns + o.cpu_sys_ns
            m.procs.append((rep, copy, o.ops, o.cpu_user_ns + o.cpu_sys_ns))
            if o.overhead is not None:
                overheads.append(o.overhead)
        wall += wall_s
    if not m.raw:
        m.status, m.reason = "failed", "no process of this benchmark reported a result"
        return m
    m.summary = stats.summarize([r[3] for r in m.raw]).as_dict()
    m.ops, m.cpu_ns, m.wall_s = ops, cpu, wall
    m.overhead = sorted(overheads)[len(overheads) // 2] if overheads else None
    return m


def store_measurement(store, run_id: int, m: Measurement, *, replace: int | None = None,
                      experiment_id: int | None = None, cell: str | None = None, rep: int | None = None,
                      bench_key: str | None = None, identity: dict | None = None) -> int:
    """Store ``m`` as a result of run ``run_id`` (rewriting result ``replace`` when the benchmark
    gained repetitions), or with ``cell`` as one cell of experiment ``experiment_id`` measured on
    ``identity`` (kperfdiff.targets.machine.identity)."""
    kw = dict(benchmark=m.benchmark, params=m.params, copies=m.copies, status=m.status, reason=m.reason,
              unit=m.unit, better=m.better, summary=m.summary, raw=m.raw, overhead=m.overhead, ops=m.ops,
              cpu_ns=m.cpu_ns, wall_s=m.wall_s, monitors=m.monitors, info=m.info, started_at=m.started_at,
              noise=m.noise, stop=m.stop)
    if cell is not None:
        return store.add_cell_result(run_id, experiment_id=experiment_id, cell=cell, rep=rep, bench_key=bench_key,
                                     identity=identity, **kw)
    return store.add_result(run_id, replace=replace, **kw)
