"""The change points of each watched series, kept up to date as commits are measured, and the
bisections they queue.

A watched series is one branch, target and benchmark: the runs that measured the branch's commits
(the watch's own), in the order of the branch's first-parent line, not in the order they were
measured (a commit measured later, say when every Nth became all, falls into its place). Its points
and change points are those of :mod:`kperfdiff.analysis.history` (:func:`build_series`, then
:func:`detect` with what the last analysis of the series left in the store's change cache). The
parameters a build gives each commit (``param=`` lines) and the image a target boots belong to the
commit, not to the series: the series takes the suite's parameters and target.

Otava's split does not find a second change on a short series whose first change is undone by it
(a level of 4 points in 12 that goes back: the whole series is not split, and the first change point
found earlier is merged away). So the series is also analysed from each of the last change points the
watch recorded (:data:`SEGMENTS`) to its end: once a change is recorded, the next is looked for on the
level after it as well.

A change point is recorded with the last commit measured before it and the first after; a change
point recorded before stays recorded (a later analysis that no longer sees it does not undo a
bisected culprit). One that a later analysis puts between other commits of the same stretch, the
same way (its commits changed: a commit between them was measured, or the level settled) is marked
moved, and the new one is recorded and bisected again. Each new regression, and each new improvement
when the suite asks, queues a bisection between its two commits on its target and benchmark; a pair
bisected before (for another branch, or before it moved back) is not bisected again.
"""
from __future__ import annotations

import dataclasses
import math

from kperfdiff.analysis import history as hist
from kperfdiff.core.records import WatchChange
from kperfdiff.store import Store
from kperfdiff.watch.follow import Line
from kperfdiff.watch.suite import Bench, Suite

SEGMENTS = 2        # the newest recorded change points the series is analysed from, as well as whole


def series_of(store: Store, suite: Suite, line: Line, target: str, bench: Bench) -> list[hist.Series]:
    """The watched series of a branch, target and benchmark: its points in line order (one series per
    host; normally one). Only runs of commits on the line count."""
    where = line.position()
    commit_of = {i.run_id: i.commit for i in store.watch_items(suite.name, kind="measure")
                 if i.state == "done" and i.run_id is not None and i.target == target and i.benchmark == bench.id
                 and i.commit in where}
    return series_in_order(store, commit_of, where, target, bench)


def series_in_order(store: Store, commit_of: dict[int, str], where: dict[str, int], target: str,
                    bench: Bench) -> list[hist.Series]:
    """The series of the runs ``commit_of`` (run id -> commit) of one benchmark, its points in the order
    ``where`` gives their commits, the runs' parameters taken as the benchmark's (a build's ``param=``
    lines change them from commit to commit, and the series is one)."""
    if not commit_of:
        return []
    results, runs, machines = store.history([bench.name], copies=bench.cores)
    params = dict(bench.params)
    mine = [dataclasses.replace(r, params=params) for r in results if r.run_id in commit_of]
    as_watched = {rid: dataclasses.replace(run, target=target) for rid, run in runs.items() if rid in commit_of}
    out = hist.build_series(mine, as_watched, machines)
    for s in out:
        s.points.sort(key=lambda p: where[commit_of[p.run.id]])
    return out


@dataclasses.dataclass
class Found:
    """A change point of a watched series as an analysis gives it."""
    before: str
    after: str
    change: hist.ChangePoint

    @property
    def direction(self) -> str:
        return "improvement" if self.change.change.change > 0 else "regression"


def find(store: Store, key: str, series: hist.Series, recorded: list[WatchChange]) -> list[Found]:
    """The change points of the series: of the whole, and from each of the last :data:`SEGMENTS` change
    points recorded to its end (see the module docstring), each analysis from its cache under ``key``.
    A change point that several analyses find has the figures of the one that starts latest (its level
    before the change does not reach across a change recorded before it)."""
    points = [p for p in series.points if math.isfinite(p.centre) and p.centre > 0]
    index = {p.commit: i for i, p in enumerate(points)}
    starts = sorted({index[c.after] for c in recorded if c.state == "current" and c.after in index})
    found: dict[int, Found] = {}
    for lo in [0, *starts[-SEGMENTS:]]:
        if len(points) - lo < 2 * hist.MIN_SEGMENT:
            continue
        part = dataclasses.replace(series, points=points[lo:])
        where = f"{key}|{series.key}|from {points[lo].commit}"
        d = hist.detect(part, store.change_cache(where))
        store.save_change_cache(where, **d.analysed.as_dict())
        for c in d.changes:     # a later start wins: its level before the change stops at the change recorded
            at = lo + c.index
            found[at] = Found(points[at - 1].commit, points[at].commit, c)
    return [found[i] for i in sorted(found)]


def update(store: Store, suite: Suite, line: Line, target: str, bench: Bench, note=lambda text: None) -> list[int]:
    """Analyse the series of a branch, target and benchmark again, record its change points, mark those
    that moved, and queue the bisections of the new ones; the ids of the change points new now."""
    key = f"watch|{suite.name}|{line.branch}|{target}|{bench.id}"
    where = line.position()
    new = []
    for series in series_of(store, suite, line, target, bench):
        recorded = [c for c in store.watch_changes(suite.name)
                    if (c.branch, c.target, c.benchmark) == (line.branch, target, bench.id)]
        for f in find(store, key, series, recorded):
            cid, added = store.record_change(watch=suite.name, branch=line.branch, target=target, benchmark=bench.id,
                                             before=f.before, after=f.after, direction=f.direction,
                                             percent=f.change.change.change, pvalue=f.change.pvalue)
            c = f.change.change
            store.set_change(cid, detail={"interval": [_finite(c.low), _finite(c.high)]})
            if not added:
                continue
            new.append(cid)
            for old in recorded:
                if (old.state == "current" and old.direction == f.direction
                        and where.get(f.before, -1) < where.get(old.after, -1)
                        and where.get(old.before, -1) < where.get(f.after, -1)):
                    store.set_change(old.id, state="moved", detail={"moved_to": [f.before, f.after]})
            note(f"{bench.id} on {target}, {line.branch}: {f.direction} of {f.change.change.change:+.1f}% between "
                 f"{f.before[:12]} and {f.after[:12]}")
            if f.direction == "regression" or suite.improvements:
                queue_bisection(store, suite, line.branch, target, bench, f, cid)
    return new


def _finite(v: float) -> float | None:
    return round(v, 4) if math.isfinite(v) else None


def bisect_key(suite: Suite, target: str, bench_id: str, good: str, bad: str) -> str:
    return f"bisect|{suite.name}|{target}|{bench_id}|{good}|{bad}"


def queue_bisection(store: Store, suite: Suite, branch: str, target: str, bench: Bench, f: Found, change_id: int) -> None:
    """Queue the bisection of a change point, or link it to the bisection of the same two commits queued
    before (whose outcome, when it has one, it gets at once)."""
    item_id, added = store.queue_item(watch=suite.name, kind="bisect",
                                      key=bisect_key(suite, target, bench.id, f.before, f.after), branch=branch,
                                      target=target, benchmark=bench.id, commit=f.after, good=f.before,
                                      detail={"direction": f.direction})
    store.set_change(change_id, bisect_item=item_id)
    item = store.watch_item(item_id)
    if not added and item.state in ("done", "failed"):
        c = item.detail.get("culprit") or {}
        store.attach_culprit(item_id, culprit=c.get("hash"), subject=c.get("subject"), author=c.get("author"),
                             verified=item.detail.get("verified"), detail=item.detail)
