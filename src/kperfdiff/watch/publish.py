"""What a watch publishes, from the store alone: the feed (``feed.json`` of ``kperfdiff watch --publish``,
schema ``watch-feed``): per watch, each watched series (branch, target, benchmark) with its points in
commit order and the change points marked on it, and each change point with its commits, change and
interval, culprit, verification and the command lines that reproduce it; and the culprits that a
``--notify`` command has not been sent yet. The renderers (:mod:`kperfdiff.render.watch`) make the text
report, the JSON and the HTML site of it.

A series' order is its commits' places on the branch that queued them (a commit on two watched
branches is measured once, and its point is on the branch that queued it first).
"""
from __future__ import annotations

import math
import shlex

from kperfdiff.analysis import culprit as culprits
from kperfdiff.analysis.profile_diff import DEFAULT_TOP, DiffResult
from kperfdiff.core.records import WatchChange
from kperfdiff.store import Store
from kperfdiff.watch import changes as cps
from kperfdiff.watch import report
from kperfdiff.watch.suite import Bench

VERSION = 1


def bench_of(bench_id: str) -> Bench:
    """The benchmark a queue names ``NAME@CORES KEY=VALUE ...``."""
    head, *params = bench_id.split(" ")
    name, _, cores = head.partition("@")
    return Bench(name, int(cores or 1), tuple(tuple(p.split("=", 1)) for p in params))


def series_id(branch: str, target: str, benchmark: str) -> str:
    return f"{branch} | {target} | {benchmark}"


def _finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


def _series(store: Store, name: str, stored: list[WatchChange]) -> list[dict]:
    """Each series of the watch with its points in commit order and its current change points' places."""
    items = [i for i in store.watch_items(name, kind="measure")]
    subjects = {i.commit: i.detail.get("subject") for i in items}
    out = []
    for branch, target, benchmark in sorted(dict.fromkeys((i.branch, i.target, i.benchmark) for i in items)):
        mine = [i for i in items if (i.branch, i.target, i.benchmark) == (branch, target, benchmark)]
        commit_of = {i.run_id: i.commit for i in mine if i.state == "done" and i.run_id is not None}
        where = {i.commit: i.position or 0 for i in mine}
        points, unit = [], None
        for s in cps.series_in_order(store, commit_of, where, target, bench_of(benchmark)):
            unit = s.unit
            for p in s.points:
                hw = p.centre * p.half_width_pct / 100 if _finite(p.half_width_pct) else None
                points.append({"commit": p.commit, "subject": subjects.get(p.commit), "run": p.run.id,
                               "centre": _finite(p.centre), "low": _finite(p.centre - hw) if hw else None,
                               "high": _finite(p.centre + hw) if hw else None})
        ids = {p["commit"]: k for k, p in enumerate(points)}
        marks = [{"change": c.id, "index": ids[c.after]} for c in stored
                 if (c.branch, c.target, c.benchmark) == (branch, target, benchmark) and c.state == "current"
                 and c.after in ids]
        out.append({"id": series_id(branch, target, benchmark), "branch": branch, "target": target,
                    "benchmark": benchmark, "unit": unit, "points": points, "changes": marks})
    return out


def reproduce(c: WatchChange) -> dict:
    """The command lines that reproduce a change point's bisection and its culprit's verification."""
    args = c.detail.get("command")
    if not args:
        return {"bisect": None, "verify": None, "explain": None}
    verify = None
    if c.culprit:
        at = args.index("--good")
        verify = shlex.join(args[:at] + ["--good", f"{c.culprit}^", "--bad", c.culprit] + args[at + 4:])
    return {"bisect": shlex.join(args), "verify": verify, "explain": report.explain_command(c.benchmark, c.detail)}


def feed(store: Store, names: list[str]) -> dict:
    """The feed of the watches ``names``: their series and change points (see the module docstring)."""
    doc = report.document(store, names)
    out = {"version": VERSION, "store": doc["store"], "watches": []}
    for w in doc["watches"]:
        stored = {c.id: c for c in store.watch_changes(w["name"])}
        series = _series(store, w["name"], list(stored.values()))
        changes = []
        for c in w["changes"]:
            s = stored[c["id"]]
            low, high = (s.detail.get("interval") or [None, None])[:2]
            changes.append({**c, "series": series_id(c["branch"], c["target"], c["benchmark"]),
                            "interval": {"low": low, "high": high}, "notified": s.notified is not None,
                            "profiled": bool(s.detail.get("profiled")), "reproduce": reproduce(s)})
        out["watches"].append({"name": w["name"], "series": series, "changes": changes, "queue": w["queue"]})
    return out


def to_notify(store: Store, name: str) -> list[int]:
    """The change points of the watch with a culprit that no notify command has been sent yet."""
    return [c.id for c in store.watch_changes(name) if c.culprit and c.notified is None and c.state == "current"]


def culprit_diffs(store: Store, feed_doc: dict) -> dict[int, DiffResult]:
    """Per change point of the feed with a culprit whose verification runs were profiled: the ranking of
    culprit against parent with both sides' folded stacks, what the site draws its differential flame
    graph from (recomputed from the stored profiles; the feed keeps only the ranking's head)."""
    out = {}
    for w in feed_doc["watches"]:
        stored = {c.id: c for c in store.watch_changes(w["name"])}
        for c in w["changes"]:
            d = stored[c["id"]].detail
            if not (c["culprit"] and c["state"] == "current" and d.get("profiled") and d.get("parent_runs")
                    and d.get("culprit_runs")):
                continue
            b = bench_of(c["benchmark"])
            args = d.get("command") or []
            metric = args[args.index("--metric") + 1] if "--metric" in args[:-1] else "time"
            ex = culprits.explain(store.profile_lookup, d["parent_runs"], d["culprit_runs"], b.name, b.cores, metric,
                                  DEFAULT_TOP)
            if ex.diff is not None:
                out[c["id"]] = ex.diff
    return out
