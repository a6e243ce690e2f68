"""The branch follower: each watched branch's first-parent line from the watch's base to its tip, the
commits of it the suite measures (all, every Nth, or the tip), queued once per target and benchmark.

The base is where the watch starts on a branch: ``--since REV`` when given; else the oldest commit
the watch has queued on that branch; else, the first time, the branch's tip (a watch starts from
now, not from the branch's whole history). Every Nth counts from the base, so the same commits are
chosen whatever the tip.
"""
from __future__ import annotations

from dataclasses import dataclass

from kperfdiff.bisect import git
from kperfdiff.core.errors import InputError
from kperfdiff.store import Store
from kperfdiff.watch.suite import Suite


@dataclass
class Line:
    branch: str
    tip: str
    commits: list[git.Commit]        # the base first, then each commit the branch received, oldest first
    selected: list[git.Commit]       # those the suite measures

    def position(self) -> dict[str, int]:
        """Each commit's place on the line (0: the base)."""
        return {c.hash: i for i, c in enumerate(self.commits)}


def measure_key(suite: Suite, target: str, bench_id: str, commit: str) -> str:
    return f"measure|{suite.name}|{target}|{bench_id}|{commit}"


def line_of(repo: git.Repo, store: Store, suite: Suite, branch: str, since: str | None = None) -> Line:
    """The branch's line from the watch's base (see the module docstring) to its tip."""
    tip = repo.resolve(branch, "--branch")
    if since is not None:
        base = repo.resolve(since, "--since")
        if not repo.is_ancestor(base, tip):
            raise InputError(f"--since {since} is not an ancestor of --branch {branch}: the watch follows the "
                             f"commits from it to the branch's tip")
    else:
        queued = list(dict.fromkeys(i.commit for i in store.watch_items(suite.name, kind="measure")
                                    if i.branch == branch))
        base = (repo.oldest_of_line([*queued, tip]) if queued else None) or tip
    commits = repo.first_parent_line(base, tip)
    selected = [commits[-1]] if suite.newest_only else commits[::suite.every]
    return Line(branch, tip, commits, selected)


def queue_line(store: Store, suite: Suite, line: Line) -> int:
    """Queue the measurement of each selected commit of the line on each target, of each benchmark,
    unless it is queued already (on this branch or another); how many were queued now."""
    where = line.position()
    n = 0
    for c in line.selected:
        for target in suite.targets:
            for b in suite.benches:
                _, added = store.queue_item(watch=suite.name, kind="measure", key=measure_key(suite, target, b.id, c.hash),
                                            branch=line.branch, target=target, benchmark=b.id, commit=c.hash,
                                            position=where[c.hash], detail={"subject": c.subject, "author": c.author})
                n += added
    return n
