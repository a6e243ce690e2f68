"""The watch's queue at scale, on paper and in a discrete-event simulation.

:func:`paper` is the arithmetic of docs/watch-scale.md: device-hours a day for measuring and for
bisecting a tree under each commit policy, from the durations of :class:`Costs` (each one measured
and sourced there, or labelled an assumption).

:func:`simulate` drives the real queue, ``claim_item`` / ``finish_item`` / ``queue_item`` of a
temporary SQLite store with the clock set by the simulation (``now=``), with simulated durations:
commits arrive, each is queued once per target and benchmark (the keys and order of
:func:`kperfdiff.watch.follow.queue_line`), N workers claim items as :func:`kperfdiff.watch.run.look`
does (each keeps the builds it made, as :class:`kperfdiff.watch.run.Worker` does, so the first
benchmark of a commit a worker takes pays the build), and a measurement that ends a series' new
level queues a bisection. It reports the queue over time, the waits, and each item's claims.

``validation/watch_queue_sim.py --help`` runs it.
"""
from __future__ import annotations

import heapq
import math
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.store import Store

DAY = 86400.0
HOLD = 1e9               # a simulated claim's lease: held until the item ends (renewals are not simulated)


@dataclass(frozen=True)
class Costs:
    """Seconds of each step; the defaults and their sources are docs/watch-scale.md's table."""
    build_full: float = 396.0        # allnoconfig + fragments, x86_64, -j2 (targets.md#kernel-builds)
    build_incremental: float = 16.0  # the next commit in the same tree (13-19 s there)
    boot: float = 4.1                # qemu:x86_64 boot to results (figures.md#guests)
    rep: float = 2.4                 # one repetition of one benchmark: bench --suite full, 114 s / 48
    reps: int = 5                    # the suite's reps (watch.md, default)
    verify_reps: int = 5             # a bisection's verification (default: reps)

    def run(self, reps: int | None = None) -> float:
        """One measured run of one benchmark: one boot (one run_bench call per item), then its reps."""
        return self.boot + (self.reps if reps is None else reps) * self.rep

    def bisection(self, between: int) -> tuple[float, float, int]:
        """(host build seconds, device seconds, probes) of one bisection over ``between`` commits: a full
        build in its fresh tree, then incremental ones; GOOD and BAD measured for the reference;
        ceil(log2 n) probes, each bracketed by GOOD and BAD; the culprit and its parent verified.
        Neighbours (n = 1) are the reference and the verification alone."""
        probes = math.ceil(math.log2(between)) if between > 1 else 0
        builds = self.build_full + self.build_incremental * (1 + probes)
        device = 2 * self.run() + probes * 3 * self.run() + 2 * self.run(self.verify_reps)
        return builds, device, probes


@dataclass(frozen=True)
class Policy:
    name: str
    measured_per_day: float          # commits measured a day
    between: int                     # commits a change point spans: what a bisection searches


def policies(commits_per_day: int, every: int, looks_per_day: int) -> list[Policy]:
    """The suite's ``commits``: all, every Nth, newest (the tip at each look)."""
    newest = min(commits_per_day, looks_per_day)
    return [Policy("all", commits_per_day, 1),
            Policy(f"every {every}", commits_per_day / every, every),
            Policy(f"newest, {looks_per_day} looks a day", newest, max(1, round(commits_per_day / newest)))]


def paper(costs: Costs, *, commits_per_day: int = 100, benchmarks: int = 30, types: int = 3,
          bisections_per_day: float = 10.0, every: int = 10, looks_per_day: int = 24,
          load: float = 0.7) -> list[str]:
    """The arithmetic, one line per step, for each policy."""
    out = [f"inputs: {commits_per_day} commits/day, {benchmarks} benchmarks, {types} device types; "
           f"run of one benchmark = boot {costs.boot} s + {costs.reps} reps x {costs.rep} s = {costs.run():.1f} s; "
           f"builds {costs.build_incremental} s incremental, {costs.build_full} s full; "
           f"{bisections_per_day:g} bisections/day; devices sized for {load:.0%} load",
           f"one device per type measures every commit while {commits_per_day} x {benchmarks} x run <= "
           f"{load:.0%} x 86400 s: a run of one benchmark <= {DAY * load / (commits_per_day * benchmarks):.1f} s"]
    for p in policies(commits_per_day, every, looks_per_day):
        per_commit = benchmarks * costs.run()
        measure = p.measured_per_day * per_commit                       # device-seconds a day, per type
        builds = p.measured_per_day * costs.build_incremental          # host seconds a day, per type
        b_host, b_dev, probes = costs.bisection(p.between)
        bisect = bisections_per_day / types * b_dev                      # spread over the types
        devices = math.ceil((measure + bisect) / (DAY * load))
        out += [f"{p.name}: {p.measured_per_day:g} commits/day measured",
                f"  measuring, per type: {p.measured_per_day:g} x {benchmarks} x {costs.run():.1f} s = "
                f"{measure / 3600:.1f} device-h/day ({measure * types / 3600:.1f} for {types} types); builds "
                f"{p.measured_per_day:g} x {costs.build_incremental} s = {builds / 3600:.2f} host-h/day per type "
                f"(full builds: {p.measured_per_day * costs.build_full / 3600:.1f})",
                f"  bisecting: span {p.between} commit(s), {probes} probes + reference + verification = "
                f"{b_dev:.0f} device-s and {b_host:.0f} host-s each; {bisections_per_day:g}/day = "
                f"{bisections_per_day * b_dev / 3600:.1f} device-h/day ({bisect / 3600:.2f} per type)",
                f"  devices per type at {load:.0%} load: ceil(({measure / 3600:.1f} + {bisect / 3600:.2f}) / "
                f"{DAY * load / 3600:.1f}) = {devices}"]
    return out


@dataclass
class Scenario:
    commits_per_day: float = 100.0
    benchmarks: int = 30
    targets: int = 3
    workers: int = 3
    days: float = 2.0
    changes_per_day: float = 10.0    # change points found a day (each queues a bisection)
    every: int = 1
    bisect_first: bool = True        # claim bisections before measurements (the queue's order)
    seed: int = 1
    costs: Costs = field(default_factory=Costs)


@dataclass
class Outcome:
    samples: list[tuple[float, int, int]] = field(default_factory=list)   # (t, measure queued, bisect queued)
    waits: dict[str, list[float]] = field(default_factory=lambda: {"measure": [], "bisect": []})
    claims: dict[int, int] = field(default_factory=dict)                  # item id -> times claimed
    queued: dict[str, int] = field(default_factory=lambda: {"measure": 0, "bisect": 0})
    done: dict[str, int] = field(default_factory=lambda: {"measure": 0, "bisect": 0})
    builds: int = 0
    busy: float = 0.0
    end: float = 0.0
    states: dict[str, int] = field(default_factory=dict)


class _Sim:
    """One simulated run: the event heap, the workers' build caches, and the store's queue."""

    def __init__(self, sc: Scenario, store: Store):
        self.sc, self.store, self.out = sc, store, Outcome()
        self.rng = random.Random(sc.seed)
        self.events: list[tuple[float, int, str, object]] = []
        self.seq = 0
        self.idle = list(range(sc.workers))
        self.built: list[set[tuple[str, str]]] = [set() for _ in range(sc.workers)]
        self.kinds = ("bisect", "measure") if sc.bisect_first else ("measure", "bisect")
        self.prev: str | None = None
        measured_per_day = sc.commits_per_day / sc.every * sc.benchmarks * sc.targets
        self.p_change = min(1.0, sc.changes_per_day / measured_per_day)

    def at(self, t: float, what: str, arg: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, what, arg))

    def commit(self, t: float, n: int) -> None:
        """Commit n arrives; every Nth is queued once per target and benchmark (queue_line's keys)."""
        if n % self.sc.every:
            return
        c = f"c{n:06d}"
        for target in range(self.sc.targets):
            for b in range(self.sc.benchmarks):
                change = self.rng.random() < self.p_change       # drawn at queueing: same draws in either policy
                self.store.queue_item(watch="sim", kind="measure", key=f"measure|sim|t{target}|b{b}|{c}",
                                      branch="main", target=f"t{target}", benchmark=f"b{b}", commit=c,
                                      good=self.prev, detail={"change": change}, now=t)
                self.out.queued["measure"] += 1
        self.prev = c

    def duration(self, w: int, item) -> float:
        c = self.sc.costs
        if item.kind == "bisect":
            host, dev, _ = c.bisection(self.sc.every)
            return host + dev
        key = (item.commit, item.target)
        if key in self.built[w]:
            return c.run()
        first = not any(t == item.target for _, t in self.built[w])
        self.built[w].add(key)
        self.out.builds += 1
        return (c.build_full if first else c.build_incremental) + c.run()

    def claim(self, t: float) -> None:
        """Every idle worker claims the next item, as look() does, until none is left to take."""
        while self.idle:
            w = self.idle[-1]
            item = self.store.claim_item("sim", f"w{w}", HOLD, now=t, kinds=self.kinds)
            if item is None:
                return
            self.idle.pop()
            self.out.claims[item.id] = self.out.claims.get(item.id, 0) + 1
            self.out.waits[item.kind].append(t - item.created)
            d = self.duration(w, item)
            self.out.busy += d
            self.at(t + d, "end", (w, item))

    def end(self, t: float, w: int, item) -> None:
        assert self.store.finish_item(item.id, f"w{w}", "done", now=t)
        self.out.done[item.kind] += 1
        if item.kind == "measure" and item.detail.get("change") and item.good:
            key = f"bisect|sim|{item.target}|{item.benchmark}|{item.good}|{item.commit}"
            _, added = self.store.queue_item(watch="sim", kind="bisect", key=key, branch="main", target=item.target,
                                             benchmark=item.benchmark, commit=item.commit, good=item.good, now=t)
            self.out.queued["bisect"] += added
        self.idle.append(w)

    def sample(self, t: float) -> None:
        items = self.store.conn.execute("SELECT kind, count(*) FROM watch_item WHERE state='queued' GROUP BY kind")
        n = dict(items.fetchall())
        self.out.samples.append((t, n.get("measure", 0), n.get("bisect", 0)))

    def run(self) -> Outcome:
        sc, horizon = self.sc, self.sc.days * DAY
        gap = DAY / sc.commits_per_day
        for n in range(int(sc.commits_per_day * sc.days)):
            self.at(n * gap, "commit", n)
        for k in range(int(sc.days * 24) + 1):
            self.at(k * 3600.0, "sample")
        while self.events and self.events[0][0] <= horizon:
            t, _, what, arg = heapq.heappop(self.events)
            if what == "commit":
                self.commit(t, arg)
            elif what == "end":
                self.end(t, *arg)
            elif what == "sample":
                self.sample(t)
                continue
            self.claim(t)
        self.out.end = horizon
        rows = self.store.conn.execute("SELECT state, count(*) FROM watch_item GROUP BY state").fetchall()
        self.out.states = dict(rows)
        return self.out


def simulate(sc: Scenario, folder: str | Path | None = None) -> Outcome:
    """Run the scenario on a fresh SQLite store in ``folder`` (a temporary one when None)."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(folder or tmp) / "sim.db")
        try:
            return _Sim(sc, store).run()
        finally:
            store.conn.close()


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def report(sc: Scenario, out: Outcome) -> list[str]:
    """What a simulated run did, as text."""
    h = lambda s: s / 3600  # noqa: E731
    lines = [f"{sc.commits_per_day:g} commits/day (every {sc.every}), {sc.benchmarks} benchmarks x {sc.targets} targets, "
             f"{sc.workers} workers, {sc.changes_per_day:g} change points/day, {sc.days:g} days, "
             f"{'bisections' if sc.bisect_first else 'measurements'} first",
             f"  workers busy {min(out.busy, sc.workers * out.end) / (sc.workers * out.end):.0%} (work started: {out.busy / (sc.workers * out.end):.0%} of their time); builds {out.builds}",
             "  hour  measure queued  bisect queued"]
    step = max(1, len(out.samples) // 8)
    lines += [f"  {t / 3600:4.0f}  {m:14d}  {b:13d}" for t, m, b in out.samples[::step]]
    for kind in ("measure", "bisect"):
        w = out.waits[kind]
        lines.append(f"  {kind}: queued {out.queued[kind]}, started {len(w)}, done {out.done[kind]}; wait median "
                     f"{h(_pct(w, 0.5)):.1f} h, p90 {h(_pct(w, 0.9)):.1f} h, max {h(max(w, default=float('nan'))):.1f} h")
    twice = sum(1 for n in out.claims.values() if n > 1)
    lines.append(f"  items claimed twice: {twice}; states at the end: {out.states}")
    return lines
