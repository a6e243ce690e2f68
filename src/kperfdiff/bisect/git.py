"""The git repository a bisection walks: revisions resolved to hashes, the commits between GOOD
and BAD, `git bisect` driven one verdict at a time, and the checkouts the verification needs; the
first-parent line of a branch and the work trees of its own that the sentinel (kperfdiff watch)
builds in.

Every call is ``git -C DIR ...`` with a list of arguments (no shell); a failing call becomes one
sentence naming the command and git's own last line.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.core.errors import InputError, KperfdiffError


@dataclass(frozen=True)
class Commit:
    hash: str
    subject: str
    author: str

    @property
    def short(self) -> str:
        return self.hash[:12]


class Repo:
    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        if not self.path.is_dir():
            raise InputError(f"--repo {path}: no such directory")
        top = self._git("rev-parse", "--show-toplevel", check=False)
        if top.returncode != 0:
            raise InputError(f"--repo {path} is not a git repository")
        self.path = Path(top.stdout.strip())

    def _git(self, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        try:
            p = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, text=True,
                               stdin=subprocess.DEVNULL, env=env)
        except FileNotFoundError:
            raise KperfdiffError("git is not installed (the bisection drives git bisect)") from None
        if check and p.returncode != 0:
            last = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no message"]
            raise KperfdiffError(f"git {' '.join(args[:3])} failed in {self.path}: {last[0]}")
        return p

    def resolve(self, rev: str, what: str) -> str:
        """The full hash of the commit ``rev`` names (``what``: the option it came from)."""
        if not rev or rev.startswith("-"):
            raise InputError(f"{what} {rev!r} is not a revision")
        p = self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if p.returncode != 0:
            raise InputError(f"{what} {rev} names no commit in {self.path}")
        return p.stdout.strip()

    def commit(self, rev: str) -> Commit:
        out = self._git("show", "-s", "--format=%H%x00%s%x00%an <%ae>", rev).stdout.rstrip("\n")
        h, subject, author = out.split("\x00")
        return Commit(h, subject, author)

    def is_ancestor(self, a: str, b: str) -> bool:
        return self._git("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def parents(self, rev: str) -> list[str]:
        return self._git("rev-list", "--parents", "-n", "1", rev).stdout.split()[1:]

    def between(self, good: str, bad: str) -> list[str]:
        """The commits a bisection from ``good`` to ``bad`` may name: BAD's ancestors that are not
        GOOD's, oldest first (what git bisect considers)."""
        return self._git("rev-list", "--reverse", f"{good}..{bad}").stdout.split()

    def first_parent_line(self, base: str, tip: str) -> list[Commit]:
        """``base`` and the commits after it on ``tip``'s first-parent line (the commits as the branch
        received them, a merge as one commit), oldest first."""
        out = self._git("log", "--first-parent", "--reverse", "--format=%H%x00%s%x00%an <%ae>", f"{base}..{tip}").stdout
        after = [Commit(*ln.split("\x00")) for ln in out.splitlines() if ln.count("\x00") == 2]
        return [self.commit(base), *after]

    def oldest_of_line(self, revs: list[str]) -> str | None:
        """The commit every one of ``revs`` descends from (of commits on one line, the oldest), or None."""
        p = self._git("merge-base", "--octopus", *revs, check=False) if revs else None
        return p.stdout.strip() or None if p is not None and p.returncode == 0 else None

    def add_worktree(self, path: Path, rev: str) -> "Repo":
        """A work tree of this repository at ``path`` with ``rev`` checked out (detached), made unless it is
        there already: kperfdiff's own, so its checkouts never touch the user's tree. Its repository."""
        path = Path(path)
        if (path / ".git").exists() and subprocess.run(["git", "-C", str(path), "rev-parse", "--git-dir"],
                                                       capture_output=True, stdin=subprocess.DEVNULL).returncode != 0:
            shutil.rmtree(path)          # a tree of a repository that is gone (its .git names nothing)
        if not (path / ".git").exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            self._git("worktree", "prune")
            self._git("worktree", "add", "-q", "--force", "--detach", str(path), rev)
        tree = Repo(path)
        if tree.common_dir() != self.common_dir():
            raise InputError(f"{path} is a work tree of another repository than {self.path}; remove it, or "
                             f"give that repository with --repo")
        return tree

    def remove_worktree(self, path: Path) -> None:
        """Remove a work tree :meth:`add_worktree` made (its build output with it)."""
        self._git("worktree", "remove", "--force", str(path), check=False)
        self._git("worktree", "prune", check=False)

    def common_dir(self) -> Path:
        return Path(self._git("rev-parse", "--path-format=absolute", "--git-common-dir").stdout.strip()).resolve()

    def head(self) -> str:
        return self._git("rev-parse", "HEAD").stdout.strip()

    def dirty(self) -> list[str]:
        """Tracked files with changes (untracked files, such as build output, do not count)."""
        return [ln[3:] for ln in self._git("status", "--porcelain", "--untracked-files=no").stdout.splitlines()]

    def original_ref(self) -> str:
        """What to return to afterwards: the branch checked out, else the commit."""
        p = self._git("symbolic-ref", "-q", "--short", "HEAD", check=False)
        return p.stdout.strip() if p.returncode == 0 else self.head()

    def checkout(self, rev: str) -> None:
        self._git("checkout", "-q", "--detach", rev)

    def restore(self, ref: str) -> None:
        self._git("checkout", "-q", ref)

    # -- git bisect ------------------------------------------------------------------------------

    def bisecting(self) -> bool:
        return (self.git_dir() / "BISECT_START").exists()

    def git_dir(self) -> Path:
        return Path(self._git("rev-parse", "--absolute-git-dir").stdout.strip())

    def bisect_start(self, good: str, bad: str) -> str:
        """Start (or restart) git bisect; the output of its first step."""
        self.bisect_reset()
        return self._git("bisect", "start", bad, good).stdout

    def bisect_mark(self, verdict: str, rev: str) -> str:
        """``git bisect good|bad|skip REV``: git's answer (the next commit checked out, or the first
        bad commit). When skipped commits leave nothing to test, the answer lists the commits the
        first bad one is among (as git says after its own skip)."""
        assert verdict in ("good", "bad", "skip")
        p = self._git("bisect", verdict, rev, check=False)
        if p.returncode == 0:
            return p.stdout
        if "cannot bisect more" in (p.stdout + p.stderr):
            return "There are only 'skip'ped commits left to test.\n" + "\n".join(self.remaining()) + "\n"
        raise KperfdiffError(f"git bisect {verdict} {rev[:12]} failed in {self.path}: "
                             f"{(p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ['no message']}")

    def remaining(self) -> list[str]:
        """The commits the first bad one may still be: BAD's ancestors that no good mark excludes."""
        refs = self._git("for-each-ref", "--format=%(refname)", "refs/bisect/").stdout.split()
        goods = [r for r in refs if r.startswith("refs/bisect/good")]
        return self._git("rev-list", "refs/bisect/bad", "--not", *goods).stdout.split()

    def bisect_reset(self) -> None:
        if self.bisecting():
            self._git("bisect", "reset")

    def bisect_log(self) -> str:
        return self._git("bisect", "log", check=False).stdout

    def revert_on(self, base: str, culprit: str) -> None:
        """Check out ``base`` and apply the revert of ``culprit`` to the work tree (not committed)."""
        self.checkout(base)
        p = self._git("revert", "--no-commit", culprit, check=False)
        if p.returncode != 0:
            self._git("revert", "--abort", check=False)
            self._git("checkout", "-q", "-f", base, check=False)
            raise KperfdiffError(f"the revert of {culprit[:12]} does not apply on top of {base[:12]} "
                                 f"(--verify-revert needs a clean revert)")

    def discard_changes(self) -> None:
        self._git("reset", "-q", "--hard")


def first_bad(output: str) -> str | None:
    """The hash git bisect names in '<hash> is the first bad commit', or None."""
    for ln in output.splitlines():
        if ln.strip().endswith("is the first bad commit"):
            return ln.split()[0]
    return None


def next_probe(output: str) -> str | None:
    """The commit git bisect checked out to test next ('[<hash>] subject'), or None."""
    for ln in output.splitlines():
        if ln.startswith("[") and "]" in ln:
            h = ln[1:ln.index("]")]
            if len(h) == 40:
                return h
    return None


def only_skipped(output: str) -> list[str] | None:
    """When git bisect stops on skipped commits: the commits it says the first bad one is among."""
    if "only 'skip'ped commits left to test" not in output:
        return None
    return [ln.split()[0] for ln in output.splitlines() if len(ln.split()[0:1]) and len(ln.split()[0]) == 40]
