"""What a watch says, as one document (``kperfdiff watch --format json``, schema ``watch``): per watch, the
branches it looked at, what this look measured and bisected, every change point with its bisection and
culprit, and the queue; ``--status`` is the same from the store alone, with nothing measured. The
renderers (:mod:`kperfdiff.render.watch`) and a later publisher read this document, never the tables.
"""
from __future__ import annotations

import math

from kperfdiff.core import stats
from kperfdiff.core.records import WatchChange, WatchItem
from kperfdiff.store import Store
from kperfdiff.watch.run import Look

VERSION = 1
STATES = ("queued", "running", "done", "failed")


def document(store: Store, names: list[str], looks: dict[str, Look] | None = None) -> dict:
    """The document of the watches ``names`` (with what each look did, when there was one)."""
    looks = looks or {}
    return {"version": VERSION, "store": str(store.path), "status": not looks,
            "watches": [_watch(store, name, looks.get(name)) for name in names]}


def _watch(store: Store, name: str, look: Look | None) -> dict:
    items = store.watch_items(name)
    subjects = {i.commit: i.detail.get("subject") for i in items if i.kind == "measure"}
    by_id = {i.id: i for i in items}
    doc = {"name": name, "branches": [], "measured": [], "bisected": [],
           "changes": [_change(c, subjects, by_id.get(c.bisect_item)) for c in store.watch_changes(name)],
           "queue": {kind: {s: sum(1 for i in items if i.kind == kind and i.state == s) for s in STATES}
                     for kind in ("measure", "bisect")},
           "workers": sorted({i.owner for i in items if i.state == "running" and i.owner})}
    if look is not None:
        s = look.suite
        doc["suite"] = {"path": s.path, "targets": list(s.targets), "benchmarks": [b.id for b in s.benches],
                        "metric": s.metric, "reps": s.reps, "commits": s.commits, "improvements": s.improvements}
        doc["branches"] = [{"branch": ln.branch, "tip": ln.tip, "base": ln.commits[0].hash, "commits": len(ln.commits),
                            "selected": len(ln.selected)} for ln in look.lines]
        doc["queued_now"] = look.queued
        doc["measured"] = [_measured(store, i) for i in look.done if i.kind == "measure"]
        doc["bisected"] = [_bisected(i) for i in look.done if i.kind == "bisect"]
        doc["new_changes"] = look.new_changes
    return doc


def _measured(store: Store, item: WatchItem) -> dict:
    centre, unit = None, None
    if item.run_id is not None:
        name = item.benchmark.partition("@")[0]
        for r in store.results(item.run_id):
            if r.benchmark == name and r.status == "ok":
                value = stats.nested_centre(list(r.repetitions.values()))
                centre, unit = (value if math.isfinite(value) else None), r.unit
    return {"commit": item.commit, "subject": item.detail.get("subject"), "branch": item.branch,
            "target": item.target, "benchmark": item.benchmark, "state": item.state, "run": item.run_id,
            "centre": centre, "unit": unit, "reason": item.detail.get("reason")}


def _bisected(item: WatchItem) -> dict:
    d = item.detail
    return {"item": item.id, "target": item.target, "benchmark": item.benchmark, "good": item.good,
            "bad": item.commit, "state": item.state, "outcome": d.get("outcome"), "culprit": d.get("culprit"),
            "verified": d.get("verified"), "reason": d.get("reason")}


def _change(c: WatchChange, subjects: dict, item: WatchItem | None) -> dict:
    d = item.detail if item is not None else {}
    culprit = None
    if c.culprit:
        culprit = {"hash": c.culprit, "subject": c.culprit_subject, "author": c.culprit_author,
                   "verified": c.verified, "percent": d.get("verification_percent")}
    explained = d.get("explanation")
    return {"id": c.id, "branch": c.branch, "target": c.target, "benchmark": c.benchmark,
            "before": {"commit": c.before, "subject": subjects.get(c.before)},
            "after": {"commit": c.after, "subject": subjects.get(c.after)},
            "direction": c.direction, "percent": c.percent, "pvalue": c.pvalue, "state": c.state,
            "moved_to": c.detail.get("moved_to"),
            "bisection": None if item is None else {"item": item.id, "state": item.state, "owner": item.owner,
                                                    "outcome": d.get("outcome"), "reason": d.get("reason"),
                                                    "probes": d.get("probes")},
            "culprit": culprit, "explain": explain_command(c.benchmark, d), "explanation": explained}


def explain_command(benchmark: str, d: dict) -> str | None:
    """The ``kperfdiff diff`` command that ranks a culprit's functions against its parent's (its bisection's
    ``d``etail: the explanation's own, or one made from its runs), or None where nothing was profiled."""
    if d.get("explanation"):
        return d["explanation"]["command"]
    if not (d.get("profiled") and d.get("parent_runs") and d.get("culprit_runs")):
        return None
    bench = benchmark.split(" ")[0]
    a, b = (",".join(f"{r}:{bench}" for r in d[k]) for k in ("parent_runs", "culprit_runs"))
    return f"kperfdiff diff {a} {b} --per-op"

