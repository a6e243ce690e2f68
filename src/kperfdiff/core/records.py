"""What the store holds, as plain data: machines, runs, results, profiles and experiments, and
what results say about disturbance.

Everything that reads results (compare, the renderers) imports these types from here, never
from the store, so nothing that only reads results depends on SQLite.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Machine:
    """A machine configuration runs were measured on: its facts (kperfdiff.targets.machine.facts)
    and their fingerprint. A run whose machine is not known has one of no id and no facts."""
    id: int | None = None
    fingerprint: str | None = None
    facts: dict = field(default_factory=dict)

    @property
    def arch(self) -> str | None:
        return self.facts.get("arch")

    @property
    def emulated(self) -> bool:
        return bool(self.facts.get("emulated"))


@dataclass
class Run:
    id: int
    label: str
    variant: str
    target: str
    machine_id: int | None
    tool_version: str
    started_at: float
    ended_at: float | None
    state: str
    command: str
    options: dict = field(default_factory=dict)
    artefact_dir: str | None = None
    experiment_hash: str | None = None


@dataclass
class Result:
    id: int
    run_id: int
    benchmark: str
    params: dict
    copies: int
    status: str
    reason: str | None
    unit: str | None
    better: str | None
    n: int | None
    median: float | None
    min: float | None
    max: float | None
    q1: float | None
    q3: float | None
    mean: float | None
    stdev: float | None
    cv: float | None
    overhead: float | None
    ops: int | None
    cpu_ns: int | None
    wall_s: float | None
    monitors: dict
    info: list
    values: list[float] = field(default_factory=list)
    # (rep, copy, seq, value, ops, ns) for every interval
    raw: list[tuple] = field(default_factory=list)
    # schema 2: set for the cells of an experiment (kperfdiff run)
    experiment_id: int | None = None
    cell: str | None = None
    rep: int | None = None
    bench_key: str | None = None
    # schema 3: per repetition {"rep": n, ...noise, "disturbed": [reasons]}, and why the repetitions stopped
    noise: list = field(default_factory=list)
    stop: str | None = None

    @property
    def repetitions(self) -> dict[int, list[float]]:
        """The interval values of each repetition (every copy pooled), by its number in ``raw``,
        in the order measured."""
        by_rep: dict[int, list[float]] = {}
        for rep, _copy, _seq, value, _ops, _ns in self.raw:
            by_rep.setdefault(rep, []).append(value)
        return dict(sorted(by_rep.items()))

    @property
    def disturbed(self) -> list[str]:
        """Why repetitions of this result were disturbed, one reason per repetition and cause."""
        return [f"rep {shown_rep(n.get('rep', 0))}: {r}" for n in self.noise for r in n.get("disturbed", [])]


@dataclass(frozen=True)
class StoredProfile:
    """A perf recording of one copy of one repetition of a result (or the exact instruction counts
    of a deterministic guest, event ``instructions``). ``path``, ``kallsyms`` and ``meta["symfs"]``
    are where those files are now."""
    id: int
    result_id: int | None
    run_id: int
    benchmark: str
    rep: int
    path: str
    kallsyms: str | None
    event: str | None
    samples: int | None
    cpu_time_ns: int | None
    ops: int | None
    meta: dict = field(default_factory=dict)   # copies, symfs, instructions...


@dataclass(frozen=True)
class StoredExperiment:
    """An experiment (``kperfdiff run FILE``) as the store holds it: the file it was made from, its
    state, and the process (pid, boot, host) that runs or last ran it, with its heartbeat (updated)."""
    id: int
    name: str
    path: str
    file_hash: str
    spec: dict
    state: str              # running / complete / interrupted / failed / superseded
    cells: int
    created: float
    updated: float | None
    pid: int | None
    boot_id: str | None
    host: str | None



@dataclass(frozen=True)
class WatchItem:
    """A piece of the sentinel's work (``kperfdiff watch``): measure one commit on one target, or bisect
    one change point (GOOD the last commit measured before it, the commit the first after it), with
    its state and its lease: the process that holds it (owner) until when (lease_until, by the
    store's clock), so several processes on one store share the queue."""
    id: int
    watch: str              # the suite's name
    kind: str               # measure / bisect
    key: str                # what the work is (unique: the same work is queued once)
    branch: str
    target: str
    benchmark: str          # NAME@CORES, and the suite's parameters of it
    commit: str             # measure: the commit; bisect: the first commit measured after the change (BAD)
    good: str | None        # bisect: the last commit measured before the change
    position: int | None    # measure: the commit's place on its branch (first parent, from the watch's base)
    state: str              # queued / running / done / failed
    owner: str | None
    lease_until: float | None
    attempts: int
    run_id: int | None      # measure: the run that measured it
    detail: dict            # subject; the outcome (a bisection's culprit) or why it failed
    created: float
    updated: float | None


@dataclass(frozen=True)
class WatchChange:
    """A change point of a watched series (a branch, target and benchmark, in commit order): the last
    commit measured before it and the first after, which way it went, and the culprit its bisection
    named. ``state``: current; moved (a later analysis put it between other commits); or unconfirmed
    (its bisection measured the two commits afresh and found no difference)."""
    id: int
    watch: str
    branch: str
    target: str
    benchmark: str
    before: str
    after: str
    direction: str          # regression / improvement
    percent: float | None   # the change, signed, positive = better (as compare states it)
    pvalue: float | None
    state: str
    bisect_item: int | None
    culprit: str | None
    culprit_subject: str | None
    culprit_author: str | None
    verified: bool | None
    detail: dict
    found: float
    updated: float | None
    notified: float | None = None   # when its culprit went to a --notify command (None: not yet)

# How a result whose latency could not be told from zero says so (status failed): a subtraction
# benchmark's intervals fell to or below zero (stats.unresolved_difference).
UNRESOLVABLE = "not resolvable"


def unresolvable(reason: str | None) -> bool:
    """Whether a failed result's ``reason`` says its latency could not be told from zero."""
    return bool(reason) and reason.startswith(UNRESOLVABLE + ":")


def result_names(results: list[Result]) -> list[str]:
    """Each result's benchmark name, with the parameters that tell apart results of the same name
    and copy count in one list (``boot.init [mem=4G]``); the name alone where nothing varies."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in results:
        groups.setdefault((r.benchmark, r.copies), []).append(r.params)
    varying: dict[str, set[str]] = {}
    for (bench, _), params in groups.items():
        keys = set().union(*params)
        varying.setdefault(bench, set()).update(k for k in keys if len({p.get(k) for p in params}) > 1)
    out = []
    for r in results:
        keys = sorted(varying.get(r.benchmark, ()))
        out.append(r.benchmark + (" [" + " ".join(f"{k}={r.params.get(k, '')}" for k in keys) + "]" if keys else ""))
    return out


def shown_rep(rep: int) -> int:
    """A repetition's number as a user sees it (messages, CSV, JSON, file names, LAVA job names):
    from 1. The store keeps them from 0 (stores and artefacts of before are read as they are)."""
    return rep + 1


def rep_stem(bench: str, copies: int, rep: int) -> str:
    """The stem of a repetition's artefacts (profiles, counts): ``BENCH.P<copies>.r<repetition>``,
    the repetition numbered as shown (from 1)."""
    return f"{bench}.P{copies}.r{shown_rep(rep)}"


@dataclass
class Repetition:
    """One repetition (a fresh set of worker processes) of a benchmark in a run."""

    number: int            # 0-based, counted on across the results of its group (shown from 1: shown_rep)
    result: Result
    rep: int               # its number inside ``result.raw``
    values: list[float]    # its interval values, every copy pooled
    noise: dict            # its noise entry, {} when none was stored


@dataclass
class ResultGroup:
    """The results of one benchmark, parameter set and copy count in one run: a bench run keeps one
    result holding every repetition, an experiment one result per repetition (one per cell)."""

    name: str              # as result_names gives it
    results: list[Result]
    repetitions: list[Repetition]

    @property
    def reps(self) -> list[list[float]]:
        """The interval values of each repetition, in the order measured."""
        return [r.values for r in self.repetitions]

    @property
    def unresolved(self) -> Result | None:
        """The first result whose latency could not be told from zero (:func:`unresolvable`), or
        None. The group then has no number, as compare judges such a sample: the repetitions that
        resolved would give one biased upwards."""
        return next((r for r in self.results if r.status != "ok" and unresolvable(r.reason)), None)

    @property
    def noise(self) -> list[dict]:
        """The repetitions' noise entries, renumbered as the group's repetitions."""
        return [{**r.noise, "rep": r.number} for r in self.repetitions if r.noise]


def group_results(results: list[Result]) -> list[ResultGroup]:
    """The results of a run by benchmark, parameters and copy count, in the order first measured,
    each with its repetitions numbered across its results."""
    groups: dict[tuple[str, int], ResultGroup] = {}
    for name, r in zip(result_names(results), results):
        g = groups.setdefault((name, r.copies), ResultGroup(name, [], []))
        g.results.append(r)
        noise = {n.get("rep"): n for n in r.noise}
        for rep, values in r.repetitions.items():
            g.repetitions.append(Repetition(len(g.repetitions), r, rep, values, noise.get(rep) or {}))
    return list(groups.values())


def summarise_disturbance(entries: list[dict], reps: int | None = None) -> str | None:
    """One line for the repetitions of a result that were disturbed, from their stored noise
    entries ({"rep": n, ..., "disturbed": [reasons]}): how many of them, and the reasons of the
    most disturbed one. None when none was disturbed."""
    bad = [e for e in entries if e.get("disturbed")]
    if not bad:
        return None
    worst = max(bad, key=lambda e: len(e["disturbed"]))
    total = reps if reps is not None else len(entries)
    return (f"{len(bad)} of {total} repetitions disturbed, e.g. rep {shown_rep(worst.get('rep', 0))}: "
            + "; ".join(worst["disturbed"]))


def counted_ops(info: dict) -> int | None:
    """The operations of a worker's counted (and marked) intervals (kpd --count), also when its own
    instruction counters could not be opened (x86_64 guests under TCG have no PMU), or None."""
    try:
        ops = int(info["counted_ops"])
    except (KeyError, TypeError, ValueError):
        return None
    return ops if ops > 0 else None


def instruction_counts(info: dict) -> dict | None:
    """A worker's exact instruction counts (kpd --count): {"kernel", "user", "ops"}, or None."""
    try:
        out = {"kernel": int(info["instructions_kernel"]), "user": int(info["instructions_user"]),
               "ops": counted_ops(info)}
    except (KeyError, TypeError, ValueError):
        return None
    return out if out["ops"] and out["kernel"] >= 0 and out["user"] >= 0 else None
