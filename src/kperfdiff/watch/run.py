"""One look at the watched branches: their new commits queued, then items taken from the queue until
none is left to take: a commit built and measured (as a bisection's probe is, into an ordinary run),
the change points of the series it fed updated (:mod:`.changes`), a change point bisected
(:func:`kperfdiff.bisect.run.bisect`, verified against its parent) and its culprit attached to it.

Each build and bisection has a git work tree of its own under the store's artefact folder
(``watch-NAME/``), so a watch never checks out anything in the user's tree nor fights a bisection: a
tree for measuring per process slot on each host (``HOST/tree-N``, kept, so a kernel's next build is
incremental; a lock file says which process uses it), and one per bisection (``bisect-ID``, kept until
the bisection is over, so one stopped resumes from its stored probes). With exact counts (a
deterministic guest) a bisection takes the counts the watch stored for the commits it measured: GOOD
and BAD, and any commit between them, are not booted again (a deterministic guest counts the same on
every boot of a kernel).

A commit that does not build, or whose benchmark does not run, is recorded as failed (the reason in
its item) and never tried again; its point is missing from the series. Ctrl-C puts the item being
worked on back in the queue: the next look takes it again, and a bisection resumes.
"""
from __future__ import annotations

import fcntl
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.analysis import culprit as culprits
from kperfdiff.analysis.profile_diff import DEFAULT_TOP
from kperfdiff.bisect import counters, git
from kperfdiff.bisect import run as bisect_run
from kperfdiff.bisect.probe import Build, BuildFailed, Plan, build_probe, measure
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.core.records import WatchItem
from kperfdiff.store import Store
from kperfdiff.watch import changes
from kperfdiff.watch.follow import Line, line_of, queue_line
from kperfdiff.watch.queue import LEASE_S, Lease, owner_id
from kperfdiff.watch.suite import Bench, Suite

MAX_SLOTS = 64       # measuring trees per host (one per watch process running at once)


@dataclass
class Options:
    repo: str
    branches: tuple[str, ...]
    since: str | None = None
    lease_s: float = LEASE_S
    progress: bool = True


@dataclass
class Look:
    """What one look did."""
    suite: Suite
    lines: list[Line]
    queued: int = 0                                         # measurements queued now
    done: list[WatchItem] = field(default_factory=list)     # items this process finished, in order
    new_changes: list[int] = field(default_factory=list)    # change points recorded now


def folder(store: Store, suite: Suite) -> Path:
    """The watch's folder of work trees and builds."""
    return store.artefact_root() / f"watch-{suite.name}"


def build_folder(store: Store, suite: Suite, target: str, commit: str) -> Path:
    """Where a commit's build for a target is kept: a path without the target's commas, slashes and
    colons, since the image's path goes into a target specification (``kernel=PATH``), which commas split."""
    return folder(store, suite) / "builds" / re.sub(r"[^A-Za-z0-9._-]", "_", target) / commit[:12]


class Worker:
    """Does the items one process takes: builds and measures in its measuring tree, bisects in a tree
    per bisection."""

    def __init__(self, store: Store, suite: Suite, repo: git.Repo, opts: Options, note):
        self.store, self.suite, self.repo, self.opts, self.note = store, suite, repo, opts, note
        self.owner = owner_id()
        self.builds: dict[tuple[str, str], Build | BuildFailed] = {}
        self._tree: git.Repo | None = None
        self._lock = None

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()

    def tree(self, rev: str) -> git.Repo:
        """This process's measuring tree (the first free slot of this host), made when missing."""
        if self._tree is None:
            host = socket.gethostname() or "host"
            for slot in range(MAX_SLOTS):
                path = folder(self.store, self.suite) / host / f"tree-{slot}"
                path.parent.mkdir(parents=True, exist_ok=True)
                lock = open(f"{path}.lock", "w")
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    lock.close()
                    continue
                self._lock = lock
                self._tree = self.repo.add_worktree(path, rev)
                break
            else:
                raise KperfdiffError(f"{MAX_SLOTS} watch processes of {self.suite.name} run on this host already")
        return self._tree

    def bench(self, item: WatchItem) -> Bench | None:
        return next((b for b in self.suite.benches if b.id == item.benchmark), None)

    def plan(self, item: WatchItem, bench: Bench, tree: Path, good: str) -> Plan:
        return Plan(repo=str(tree), good=good, bad=item.commit, bench=bench.name, cores=bench.cores,
                    target=item.target, metric=self.suite.metric, build=self.suite.build, config=self.suite.config,
                    params=bench.param_args)

    def work(self, item: WatchItem) -> WatchItem:
        """Do one claimed item under its lease, and record how it ended; the item as it is then."""
        bench = self.bench(item)
        with Lease(self.store, item.id, self.owner, self.opts.lease_s) as lease:
            try:
                if bench is None or item.target not in self.suite.targets:
                    state, run_id, detail = "failed", None, {"reason": f"the suite no longer measures {item.benchmark} "
                                                                       f"on {item.target}"}
                elif item.kind == "measure":
                    state, run_id, detail = self.measure(item, bench)
                else:
                    state, run_id, detail = self.bisect(item, bench)
            except BaseException:        # Ctrl-C, or an error that stops the watch: back in the queue
                self.store.finish_item(item.id, self.owner, "queued")
                raise
        if lease.lost or not self.store.finish_item(item.id, self.owner, state, run_id=run_id, detail=detail):
            self.note(f"item {item.id} was taken over by another process while this one worked on it; "
                      f"its outcome here is not counted")
        elif item.kind == "bisect":
            c = detail.get("culprit") or {}
            self.store.attach_culprit(item.id, culprit=c.get("hash"), subject=c.get("subject"), author=c.get("author"),
                                      verified=detail.get("verified"), detail=detail)
        return self.store.watch_item(item.id)

    def measure(self, item: WatchItem, bench: Bench) -> tuple[str, int | None, dict]:
        """Build the commit (once per target) in the measuring tree, then measure the benchmark."""
        tree = self.tree(item.commit)
        subject = item.detail.get("subject", "")
        plan = self.plan(item, bench, tree.path, item.commit)
        key = (item.commit, item.target)
        if key not in self.builds:
            tree.checkout(item.commit)
            out = build_folder(self.store, self.suite, item.target, item.commit)
            self.note(f"building {item.commit[:12]} ({subject[:60]}) for {item.target}")
            try:
                self.builds[key] = build_probe(plan, tree.path, out, timeout=self.suite.build_timeout,
                                               progress=self.note)
            except BuildFailed as e:
                self.builds[key] = e
        built = self.builds[key]
        if isinstance(built, BuildFailed):
            return "failed", None, {"reason": f"build failed: {built}"}
        self.note(f"measuring {bench.id} on {item.target} at {item.commit[:12]} ({subject[:60]})")
        tag = {"name": self.suite.name, "branch": item.branch, "target": item.target, "benchmark": bench.id,
               "item": item.id}
        try:
            run = measure(self.store, plan, built, commit=item.commit, subject=subject, role="watch",
                          reps=self.suite.reps, profile=self.suite.profile and self.suite.metric != "instructions",
                          progress=self.opts.progress,
                          tagged=("watch", tag))
        except BuildFailed as e:
            return "failed", None, {"reason": str(e)}
        return "done", run.id, {}

    def counted(self, item: WatchItem) -> dict[str, list[int]]:
        """The runs of the commits this watch measured on the item's target and benchmark: with exact counts,
        the bisection takes them as GOOD's, BAD's and any probe's values instead of booting them again."""
        return {i.commit: [i.run_id] for i in self.store.watch_items(self.suite.name, kind="measure")
                if i.state == "done" and i.run_id is not None and (i.target, i.benchmark) == (item.target, item.benchmark)}

    def bisect(self, item: WatchItem, bench: Bench) -> tuple[str, int | None, dict]:
        """Bisect the change point between GOOD (the last commit measured before it) and BAD, in a tree of
        the bisection's own; the culprit, verified against its parent, or why there is none."""
        path = folder(self.store, self.suite) / f"bisect-{item.id}"
        tree = self.repo.add_worktree(path, item.commit)
        exact = self.suite.metric == "instructions"
        opts = bisect_run.Options(repo=str(tree.path), good=item.good, bad=item.commit, bench=bench.name,
                                  cores=bench.cores, target=item.target, metric=self.suite.metric,
                                  build=self.suite.build, config=self.suite.config, params=bench.param_args,
                                  reps=None if exact else self.suite.reps, max_reps=self.suite.max_reps,
                                  verify_reps=self.suite.verify_reps, profile=self.suite.profile and not exact,
                                  bracket=self.suite.bracket,
                                  build_timeout=self.suite.build_timeout, progress=self.opts.progress,
                                  known=self.counted(item) if exact else {})
        self.note(f"bisecting {bench.id} on {item.target} between {item.good[:12]} and {item.commit[:12]}")
        try:
            out = bisect_run.bisect(self.store, opts, self.note)
        except bisect_run.NothingToBisect as e:
            self.repo.remove_worktree(path)
            return "done", None, {"outcome": "no difference", "reason": str(e)}
        except KperfdiffError as e:
            self.repo.remove_worktree(path)
            return "failed", None, {"reason": str(e)}
        self.repo.remove_worktree(path)
        detail = {**outcome(out), "profiled": self.suite.profile, "command": command(self.opts.repo, opts, bench)}
        if self.suite.profile and out.culprit_runs and out.parent_runs:
            self.note(f"explaining {out.culprit.hash[:12]}: the ranking of culprit against parent")
            detail["explanation"] = explanation(self.store, out)
        return "done", None, detail


def explanation(store: Store, out: bisect_run.Outcome) -> dict:
    """The culprit explained as ``kperfdiff bisect`` explains it: the ranking of culprit against parent from
    their verification runs' profiles (exact counts' with the metric instructions), the counters that moved."""
    p = out.plan
    moved = counters.against_parent(store, out.parent_runs, out.culprit_runs, p.bench, p.cores)
    return culprits.top_functions(culprits.explain(store.profile_lookup, out.parent_runs, out.culprit_runs, p.bench,
                                                   p.cores, p.metric, DEFAULT_TOP, moved))


def command(repo: str, opts: bisect_run.Options, bench: Bench) -> list[str]:
    """The ``kperfdiff bisect`` command line that runs this bisection again, on the user's tree."""
    args = ["kperfdiff", "bisect", "--repo", str(Path(repo).resolve()), "--good", opts.good, "--bad", opts.bad,
            "--bench", bench.name + (f"@{bench.cores}" if bench.cores > 1 else ""), "--target", opts.target]
    args += ["--build", opts.build] if opts.build else ["--config", str(opts.config)] if opts.config else []
    if opts.metric != "time":
        args += ["--metric", opts.metric]
    for flag, v in (("--reps", opts.reps), ("--max-reps", opts.max_reps), ("--verify-reps", opts.verify_reps)):
        if v is not None:
            args += [flag, str(v)]
    for p in opts.params:
        args += ["--param", p]
    return args + ([] if opts.bracket or opts.metric != "time" else ["--no-bracket"]) + \
        ([] if opts.profile else ["--no-profile"])


def outcome(out: bisect_run.Outcome) -> dict:
    """What a bisection's item and its change points keep of it."""
    c = out.culprit
    return {"outcome": "culprit" if c else "no culprit",
            "culprit": {"hash": c.hash, "subject": c.subject, "author": c.author} if c else None,
            "candidates": [x.hash for x in out.candidates],
            "verified": out.verified if c else None,
            "reference_percent": out.reference.percent,
            "verification_percent": out.verification.percent if out.verification else None,
            "probes": out.measured_probes, "seconds": round(out.seconds, 1),
            "parent_runs": out.parent_runs, "culprit_runs": out.culprit_runs, "bisection": out.plan.key}


def look(store: Store, suite: Suite, opts: Options, note=lambda text: None) -> Look:
    """Queue the new commits of the branches, then work on the queue until nothing is left to take."""
    repo = git.Repo(opts.repo)
    lines = [line_of(repo, store, suite, b, opts.since) for b in dict.fromkeys(opts.branches)]
    done = Look(suite, lines)
    for line in lines:
        done.queued += queue_line(store, suite, line)
    worker = Worker(store, suite, repo, opts, note)
    try:
        while (item := store.claim_item(suite.name, worker.owner, opts.lease_s)) is not None:
            item = worker.work(item)
            done.done.append(item)
            if item.kind != "measure" or item.state != "done":
                continue
            bench = worker.bench(item)
            for line in lines:
                if item.commit in line.position():
                    done.new_changes += changes.update(store, suite, line, item.target, bench, note)
    finally:
        worker.close()
    return done
