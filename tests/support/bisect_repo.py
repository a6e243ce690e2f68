"""Small git repositories to bisect: a series of commits, one of which (the culprit) changes what a
probe runs. Each commit holds ``settings`` (the lines its build prints) and ``build.sh``, which
prints them, as `kperfdiff bisect --build ./build.sh` expects (append=..., param=...).

Used by tests/bisect, tests/watch (:func:`push`: one commit at a time, as a watched branch receives
them) and validation/bisect_accuracy.py.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

BUILD_SH = "#!/bin/sh\n# what a probe runs: this commit's settings, as kperfdiff bisect --build reads them\ncat settings\n"


@dataclass
class Series:
    path: Path
    commits: list[str]       # oldest first; commits[0] is GOOD, commits[-1] is BAD
    culprit: str | None      # None: a null series (nothing changes what a probe runs)


def git(path: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Test Author", "GIT_AUTHOR_EMAIL": "author@example.org",
           "GIT_COMMITTER_NAME": "Test Author", "GIT_COMMITTER_EMAIL": "author@example.org",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def push(repo: Path, settings: list[str], message: str, build: str = BUILD_SH) -> str:
    """Commit ``settings`` (the lines ``build`` prints) on the branch main of ``repo`` (made when missing),
    as one push to a watched branch; the new commit's hash."""
    if not (repo / ".git").exists():
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
    (repo / "build.sh").write_text(build)
    (repo / "build.sh").chmod(0o755)
    (repo / "settings").write_text("".join(f"{s}\n" for s in settings))
    (repo / "notes").write_text(f"{message}\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_series(path: Path, n: int, culprit_at: int | None, good: list[str], bad: list[str],
                benign: dict[int, list[str]] | None = None) -> Series:
    """A repository at ``path`` with a base commit (GOOD) and ``n`` commits after it; commit number
    ``culprit_at`` (1..n) switches the settings from ``good`` to ``bad``; ``benign`` may give other
    commits settings of their own that should not matter (say, a neutral kernel argument)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "build.sh").write_text(BUILD_SH)
    (path / "build.sh").chmod(0o755)
    current = list(good)
    (path / "settings").write_text("".join(f"{s}\n" for s in current))
    (path / "notes").write_text("base\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "base")
    commits = [git(path, "rev-parse", "HEAD")]
    culprit = None
    for i in range(1, n + 1):
        if i == culprit_at:
            current = list(bad) + [s for s in current if s not in good]
            (path / "settings").write_text("".join(f"{s}\n" for s in current))
            msg = "change what the probe runs (the regression)"
        elif benign and i in benign:
            current = current + benign[i]
            (path / "settings").write_text("".join(f"{s}\n" for s in current))
            msg = f"benign setting {i}"
        else:
            with open(path / "notes", "a") as f:
                f.write(f"note {i}\n")
            msg = f"notes: entry {i}"
        git(path, "commit", "-q", "-am", msg)
        commits.append(git(path, "rev-parse", "HEAD"))
        if i == culprit_at:
            culprit = commits[-1]
    return Series(path, commits, culprit)


# A null pair (GOOD and BAD alike) is called different with probability REFERENCE_ALPHA (2%): a test
# that asserts one refusal fails that often by design, and the five of `make test` together in one
# CI run in ten. Such a test takes the first refusal of two independent attempts, each into its own
# store: both called different 0.04% of the time at the test's level, while a level gone wrong
# (say 30%) still fails one run in eleven.
NULL_ATTEMPTS = 2


def refused_null(bisect, base: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """``bisect(store)`` (a bisection of a null pair, its CompletedProcess) into a store of its own per
    attempt (``base`` with .0.db, .1.db) until one is refused (exit status 3): that one and its store,
    or the last."""
    for i in range(NULL_ATTEMPTS):
        store = base.with_name(f"{base.name}.{i}.db")
        r = bisect(store)
        if r.returncode == 3:
            break
    return r, store
