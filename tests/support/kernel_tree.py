"""A real kernel tree with a known culprit, for the slow bisection test (make test-bisect).

Debian's linux-source-6.1 (/usr/src/linux-source-6.1.tar.xz) unpacked into a cache folder the
caller gives, made a git repository with one base commit, then a series of synthetic commits on
top: benign ones (a paragraph in the documentation, or a comment appended at the end of a file
the guest's kernel compiles, so its object is rebuilt with the same code) and one culprit, at the
position the caller chooses, that adds a loop of real work inline in ``copy_process``
(kernel/fork.c), which every fork runs once: proc.fork gets slower and copy_process's own
instruction count is what rises, by 6 instructions a round (arm64, counted: 8000 rounds added
48,003 instructions per fork to copy_process, on 63,302 kernel instructions per fork before).

The unpacked tree and its base commit are kept in the cache (unpacking and the first commit take
about a minute), and so are the build outputs (git ignores them), so a second series over the
same cache starts from an incremental build. The commits have fixed authors and dates: the same
series has the same hashes.

    tree = kernel_tree(Path("/tmp/kpd-tree"), culprit_at=11)
    tree.repo, tree.base, tree.commits, tree.culprit, tree.function

For the sentinel (make test-sentinel), :func:`sentinel_tree` makes another series on the same base: a
start commit that adds a loop to getppid (kernel/sys.c: syscall.null is slow there), then commits to
push one by one, among them the fork culprit (proc.fork slower) and, later, the commit that takes the
getppid loop out again (syscall.null faster).
"""
from __future__ import annotations

import os
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path("/usr/src/linux-source-6.1.tar.xz")   # Debian's linux-source-6.1
BASE_TAG = "kpd-base"
BRANCH = "kpd-series"
CULPRIT_FILE = "kernel/fork.c"
CULPRIT_FUNCTION = "copy_process"
CULPRIT_ANCHOR = "\ttrace_task_newtask(p, clone_flags);\n"
# compiled by the guest configuration (targets/guest/kconfig-*): a comment at their end changes no code
COMPILED = ["kernel/sys.c", "mm/memory.c", "fs/exec.c", "kernel/exit.c", "mm/mmap.c", "kernel/signal.c",
            "fs/read_write.c", "mm/page_alloc.c"]
DOCS = "Documentation/admin-guide/kperfdiff-notes.rst"
GETPPID_FILE = "kernel/sys.c"
GETPPID_FUNCTION = "__do_sys_getppid"
GETPPID_ANCHOR = "\tpid = task_tgid_vnr(rcu_dereference(current->real_parent));\n\trcu_read_unlock();\n"
SENTINEL_BRANCH = "kpd-sentinel"
EPOCH = 1700000000     # the base commit's date; each commit of the series one minute later


@dataclass
class KernelTree:
    repo: Path
    base: str               # the good end: the base commit
    commits: list[str]      # the series, oldest first; commits[-1] is the bad end
    culprit: str
    culprit_index: int      # 1-based position of the culprit in the series
    function: str           # the function the culprit adds work to
    loops: int


SENTINEL_AUTHOR = ("Sentinel Pusher", "pusher@example.org")     # the watched branch's commits' author


def _git(repo: Path, *args: str, date: int = EPOCH, author: tuple[str, str] = ("kperfdiff tests",
                                                                               "tests@kperfdiff.invalid")) -> str:
    name, email = author
    env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
               GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
               GIT_AUTHOR_DATE=f"{date} +0000", GIT_COMMITTER_DATE=f"{date} +0000",
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {r.stderr.strip()}")
    return r.stdout.strip()


def base_tree(cache: Path, source: Path = SOURCE) -> Path:
    """The unpacked source as a git repository with one commit tagged kpd-base (made once per cache)."""
    cache = Path(cache)
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: install Debian's linux-source-6.1 (make test-bisect does)")
    with tarfile.open(source) as tf:
        top = tf.next().name.split("/")[0]
    repo = cache / top
    if (repo / ".git").is_dir():
        try:
            _git(repo, "rev-parse", "-q", "--verify", f"refs/tags/{BASE_TAG}")
            return repo
        except RuntimeError:
            pass
    cache.mkdir(parents=True, exist_ok=True)
    if not (repo / "Makefile").is_file():
        subprocess.run(["tar", "-xJf", str(source), "-C", str(cache)], check=True)
    # Debian's .gitignore ignores everything at the top level (its packaging's repository holds none of
    # the source): the upstream rules alone, so that the source is committed and the build outputs are not
    ignore = repo / ".gitignore"
    ignore.write_text("".join(ln for ln in ignore.read_text().splitlines(keepends=True)
                              if ln.strip() not in ("/*", "!/debian/")))
    _git(repo, "init", "-q", "-b", "kpd-main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"{top}: Debian's linux-source, unpacked")
    _git(repo, "tag", BASE_TAG)
    return repo


def _mixing(variable: str, loops: int, comment: str) -> str:
    """A bounded loop of real work on ``variable``'s value that the compiler keeps every round of."""
    return ("\t{\n"
            f"\t\t/* {comment}: the compiler keeps every round */\n"
            f"\t\tunsigned long mix = (unsigned long){variable};\n"
            "\t\tint i;\n\n"
            f"\t\tfor (i = 0; i < {loops}; i++) {{\n"
            "\t\t\tmix = (mix << 7) ^ (mix >> 3) ^ i;\n"
            "\t\t\tasm volatile(\"\" : \"+r\" (mix));\n"
            "\t\t}\n"
            "\t}\n")


def culprit_patch(text: str, loops: int) -> str:
    """kernel/fork.c with a bounded loop of real work inline in copy_process, on every fork."""
    if text.count(CULPRIT_ANCHOR) != 1:
        raise ValueError(f"{CULPRIT_FILE} has no single line {CULPRIT_ANCHOR.strip()!r} to add work before")
    work = _mixing("p ^ clone_flags", loops, "mix the new task's identity")
    return text.replace(CULPRIT_ANCHOR, work + CULPRIT_ANCHOR)


def getppid_patch(text: str, loops: int) -> str:
    """kernel/sys.c with a bounded loop of real work in getppid, after it has read the parent's pid."""
    if text.count(GETPPID_ANCHOR) != 1:
        raise ValueError(f"{GETPPID_FILE} has no single getppid body to add work to")
    return text.replace(GETPPID_ANCHOR, GETPPID_ANCHOR + _mixing("pid", loops, "mix the parent's pid"))


def _benign(repo: Path, i: int, series: str) -> tuple[str, str]:
    """Commit ``i`` of a series that changes no code: a comment at the end of a compiled file (odd ``i``:
    its object is rebuilt with the same code) or a paragraph of documentation; (its subject, the path)."""
    if i % 2:
        path = COMPILED[(i // 2) % len(COMPILED)]
        with open(repo / path, "a") as fh:
            fh.write(f"\n/* kperfdiff {series}, commit {i}: a note at the end of the file */\n")
        return f"{path.split('/')[0]}: note {i} at the end of {path}", path
    title, paragraph = (("Note", f"A paragraph of commit {i} of the series.") if series == "series" else
                        ("Sentinel note", f"A paragraph of push {i}."))
    with open(repo / DOCS, "a") as fh:
        fh.write(f"{title} {i}\n{'=' * (len(title) + 1 + len(str(i)))}\n\n{paragraph}\n\n")
    return f"Documentation: {title.lower()} {i}", DOCS


def kernel_tree(cache: Path, *, culprit_at: int, commits: int = 16, loops: int = 3000,
                source: Path = SOURCE) -> KernelTree:
    """The base tree (see :func:`base_tree`) with a fresh series of ``commits`` commits on the
    branch kpd-series, checked out at its last; the culprit is the ``culprit_at``-th (1-based)."""
    if not 1 <= culprit_at <= commits:
        raise ValueError(f"culprit_at={culprit_at} is outside the series of {commits} commits")
    repo = base_tree(cache, source)
    _git(repo, "checkout", "-q", "-f", "-B", BRANCH, BASE_TAG)
    hashes = []
    for i in range(1, commits + 1):
        if i == culprit_at:
            f = repo / CULPRIT_FILE
            f.write_text(culprit_patch(f.read_text(), loops))
            subject = f"fork: mix the new task's identity in copy_process ({loops} rounds)"
            path = CULPRIT_FILE
        else:
            subject, path = _benign(repo, i, "series")
        _git(repo, "add", path)
        _git(repo, "commit", "-q", "-m", subject, date=EPOCH + 60 * i)
        hashes.append(_git(repo, "rev-parse", "HEAD"))
    return KernelTree(repo=repo, base=_git(repo, "rev-parse", BASE_TAG), commits=hashes,
                      culprit=hashes[culprit_at - 1], culprit_index=culprit_at, function=CULPRIT_FUNCTION,
                      loops=loops)


@dataclass
class SentinelTree:
    repo: Path
    start: str              # where the watch starts: the base with the getppid loop
    commits: list[str]      # pushed one by one, oldest first
    subjects: list[str]
    slower: str             # the commit that adds the fork loop (proc.fork slower)
    faster: str             # the commit that takes the getppid loop out (syscall.null faster)


def sentinel_tree(cache: Path, *, commits: int = 12, slower_at: int = 4, faster_at: int = 8, loops: int = 3000,
                  getppid_loops: int = 200, source: Path = SOURCE) -> SentinelTree:
    """The base tree (:func:`base_tree`) with a start commit and a series of ``commits`` on the branch
    kpd-sentinel, checked out at its last: the ``slower_at``-th (1-based) adds the fork loop, the
    ``faster_at``-th takes the start's getppid loop out; the others are benign."""
    if not 1 <= slower_at < faster_at <= commits:
        raise ValueError(f"slower_at={slower_at} and faster_at={faster_at} must lie in 1..{commits}, in that order")
    repo = base_tree(cache, source)
    _git(repo, "checkout", "-q", "-f", "-B", SENTINEL_BRANCH, BASE_TAG)
    sysc = repo / GETPPID_FILE
    sysc.write_text(getppid_patch(sysc.read_text(), getppid_loops))
    mixing = _mixing("pid", getppid_loops, "mix the parent's pid")
    _git(repo, "add", GETPPID_FILE)
    _git(repo, "commit", "-q", "-m", f"sys: mix the parent's pid in getppid ({getppid_loops} rounds)",
         date=EPOCH + 30, author=SENTINEL_AUTHOR)
    start = _git(repo, "rev-parse", "HEAD")
    hashes, subjects = [], []
    for i in range(1, commits + 1):
        if i == slower_at:
            f = repo / CULPRIT_FILE
            f.write_text(culprit_patch(f.read_text(), loops))
            subject, path = f"fork: mix the new task's identity in copy_process ({loops} rounds)", CULPRIT_FILE
        elif i == faster_at:
            sysc.write_text(sysc.read_text().replace(mixing, ""))     # the loop out, later notes kept
            subject, path = "sys: getppid returns the parent's pid without mixing it", GETPPID_FILE
        else:
            subject, path = _benign(repo, i, "sentinel")
        _git(repo, "add", path)
        _git(repo, "commit", "-q", "-m", subject, date=EPOCH + 60 * i + 30, author=SENTINEL_AUTHOR)
        hashes.append(_git(repo, "rev-parse", "HEAD"))
        subjects.append(subject)
    return SentinelTree(repo=repo, start=start, commits=hashes, subjects=subjects, slower=hashes[slower_at - 1],
                        faster=hashes[faster_at - 1])
