"""`kperfdiff watch` on this machine (the local target), real git and real benchmarks: a branch receives 12
commits one by one, each followed by a look, as a CI job after each push would run it. Each commit's build
command prints a parameter of select.file.100 (whose cost grows linearly with n, as in the bisection's
tests): commit 4 makes it about 7x slower (n = 100 -> 1000), commit 8 as much faster again. With improvements
bisected too, the watch names exactly those two commits as culprits, verified, and nothing else; the user's
tree is never touched. (The effect is that large because a point of the series is a whole run's centre, and
on a shared machine a whole process can run twice as slow: the change-point test, at p <= 0.001 with four
points either side, must see through two such points; docs/watch.md.) A look with nothing new measures nothing and says so in one line; a commit that
does not build is recorded, skipped and never tried again; a bad suite file or command line is one
sentence and exit status 2, before anything is stored."""
import json
import signal
import sqlite3
import subprocess
import time

import pytest

from support import KPERFDIFF, assert_one_sentence_error, run_cli
from support.bisect_repo import BUILD_SH, git, push
from schemas.test_schemas import validate

BENCH = "select.file.100"
SUITE = f"""name = "sentinel"
benchmarks = ["{BENCH}"]
targets = ["local"]
reps = 3
max_reps = 9
build = "./build.sh"
improvements = true
"""


def commit(repo, n: int, message: str, build: str = BUILD_SH) -> str:
    """A commit whose build prints param=select.file.100:n=N (``build``: another build script)."""
    return push(repo, [f"param={BENCH}:n={n}"], message, build)


def look(store, suite, repo, *more, check=0):
    return run_cli("--store", store, "watch", suite, "--repo", repo, "--branch", "main", "--no-progress", *more,
                   check=check)


def watch_runs(store) -> list[str]:
    with sqlite3.connect(store) as c:
        return [json.loads(o)["commit"] for (o,) in c.execute(
            "SELECT options FROM run WHERE state='complete' AND options LIKE '%\"watch\"%' ORDER BY id")]


@pytest.mark.long
def test_a_branch_pushed_commit_by_commit_gets_its_two_culprits_and_nothing_else(tmp_path):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    suite.write_text(SUITE)
    commits = []
    for i in range(12):
        n = 1000 if 4 <= i < 8 else 100
        commits.append(commit(repo, n, f"commit {i}: n={n}" if i not in (4, 8) else
                              ("make select slower" if i == 4 else "make select faster")))
        last = look(store, suite, repo, "--format", "json")
        doc = validate("watch", last.stdout)
        [w] = doc["watches"]
        assert [m["commit"] for m in w["measured"]] == [commits[-1]]      # each look measures the new commit
    assert watch_runs(store) == commits                                   # each commit measured once
    current = [c for c in w["changes"] if c["state"] == "current"]
    # every current change point has a culprit (one without, a bisection that found no difference, is
    # printed whole here rather than failing on its missing culprit in the comparison below)
    assert all(c["culprit"] for c in current), json.dumps(w["changes"], indent=1)
    assert sorted((c["direction"], c["culprit"]["hash"]) for c in current) == sorted(
        [("regression", commits[4]), ("improvement", commits[8])]), json.dumps(w["changes"], indent=1)
    for c in current:
        assert c["culprit"]["verified"] is True and c["bisection"]["state"] == "done"
        assert c["culprit"]["subject"].startswith("make select") and c["culprit"]["author"].startswith("Test Author")
        assert (c["before"]["commit"], c["after"]["commit"]) == (commits[commits.index(c["after"]["commit"]) - 1],
                                                                 c["culprit"]["hash"])
    # a level that a busy machine shifted for a few commits is a change point too, until its bisection
    # measures its two commits afresh and finds them alike: it is left unconfirmed, with no culprit
    others = [c for c in w["changes"] if c["state"] != "current"]
    assert all(c["state"] == "unconfirmed" and not c["culprit"] for c in others), json.dumps(w["changes"], indent=1)
    assert w["queue"]["measure"]["done"] == 12 and w["queue"]["bisect"] == {
        "queued": 0, "running": 0, "done": 2 + len(others), "failed": 0}, json.dumps(w["changes"], indent=1)
    # nothing new: nothing measured, one line
    again = look(store, suite, repo)
    assert again.stdout.count("\n") == 1 and "nothing new to measure on main" in again.stdout, again.stdout
    assert "2 change points, 2 culprits" in again.stdout and watch_runs(store) == commits
    # the status, from the store alone, names both culprits
    status = run_cli("--store", store, "watch", "--status", check=0).stdout
    assert f'culprit {commits[4][:12]} "make select slower"' in status
    assert f'culprit {commits[8][:12]} "make select faster"' in status
    # the user's tree: on its branch, clean, never checked out elsewhere, no bisection left in it
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main" and git(repo, "rev-parse", "HEAD") == commits[-1]
    assert git(repo, "status", "--porcelain") == "" and not (repo / ".git" / "BISECT_START").exists()
    trees = git(repo, "worktree", "list", "--porcelain")
    assert trees.count("worktree ") == 2 and "/watch-sentinel/" in trees     # its own, and one measuring tree


def test_a_commit_that_does_not_build_is_recorded_and_skipped(tmp_path):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    suite.write_text(SUITE.replace("reps = 3", "reps = 2"))
    good = commit(repo, 100, "base")
    broken = commit(repo, 100, "break the build", build="#!/bin/sh\necho 'no compiler today' >&2\nexit 1\n")
    fixed = commit(repo, 100, "fix the build")
    first = look(store, suite, repo, "--since", good, "--format", "json")
    [w] = validate("watch", first.stdout)["watches"]
    states = {m["commit"]: (m["state"], m["reason"]) for m in w["measured"]}
    assert states[good] == ("done", None) and states[fixed] == ("done", None)
    assert states[broken][0] == "failed" and "build failed: the build command exited with status 1" in states[broken][1]
    assert w["queue"]["measure"] == {"queued": 0, "running": 0, "done": 2, "failed": 1}
    again = look(store, suite, repo)                                      # not tried again
    assert "nothing new to measure on main" in again.stdout and again.stdout.count("\n") == 1
    assert watch_runs(store) == [good, fixed]


def test_bad_input_is_one_sentence_and_stores_nothing(tmp_path):
    repo = tmp_path / "repo"
    commit(repo, 100, "base")
    store = tmp_path / "k.db"
    cases = [
        ("name = 'x'\nbenchmarks = ['select.file.100']\nbuild = './build.sh'\nbogus = 1\n", "bogus is not a suite field"),
        ("benchmarks = ['select.file.100']\nbuild = './build.sh'\n", "name must be a word"),
        ("name = 'x'\nbenchmarks = ['no.such']\nbuild = './build.sh'\n", "'no.such' is not a benchmark"),
        ("name = 'x'\nbenchmarks = ['select.file.100@0']\nbuild = './build.sh'\n", "after @ comes the parallel copies"),
        ("name = 'x'\nbenchmarks = ['select.file.100']\n", "build is needed for the target local"),
        ("name = 'x'\nbenchmarks = ['select.file.100']\nbuild = './b'\ntargets = ['mars']\n", "entry 'mars'"),
        ("name = 'x'\nbenchmarks = ['select.file.100']\nbuild = './b'\nmetric = 'instructions'\n",
         "deterministic guest"),
        ("name = 'x'\nbenchmarks = ['select.file.100']\nbuild = './b'\ncommits = 'some'\n", "commits must be"),
        ("name = 'x'\nbenchmarks = ['select.file.100']\nbuild = './b'\nparams = { 'proc.fork:hello' = 'x' }\n",
         "names no benchmark of the suite"),
        ("name = 'x'\nbenchmarks = ['select.file.100'\n", "suite file"),
    ]
    for i, (text, words) in enumerate(cases):
        suite = tmp_path / f"s{i}.toml"
        suite.write_text(text)
        r = look(store, suite, repo, check=2)
        assert_one_sentence_error(r)
        assert words in r.stderr and str(suite) in r.stderr, (text, r.stderr)
    good = tmp_path / "good.toml"
    good.write_text(SUITE)
    for args, words in [(["--store", store, "watch", good], "needs --repo, --branch"),
                        (["--store", store, "watch", "--status", "--repo", repo], "--status only reads the store"),
                        (["--store", store, "watch", good, "--repo", tmp_path, "--branch", "main"],
                         "is not a git repository"),
                        (["--store", store, "watch", good, "--repo", repo, "--branch", "nobranch"], "names no commit"),
                        (["--store", store, "watch", "--status"], "there is no results store")]:
        r = run_cli(*args, check=2)
        assert_one_sentence_error(r)
        assert words in r.stderr, (args, r.stderr)
    assert not store.exists()


@pytest.mark.parametrize("commits,chosen", [(3, [0, 3, 6]), ("'newest'", [7])])
def test_every_nth_or_only_the_newest_commit_is_queued(tmp_path, commits, chosen):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    hashes = [commit(repo, 100, f"commit {i}") for i in range(8)]
    suite.write_text(SUITE + f"commits = {commits}\n")
    from kperfdiff.store import Store
    from kperfdiff.bisect.git import Repo
    from kperfdiff.watch import follow, suite as suites
    s = Store.open(store)
    parsed = suites.parse(suite)
    line = follow.line_of(Repo(repo), s, parsed, "main", since=hashes[0])
    assert [c.hash for c in line.commits] == hashes
    assert follow.queue_line(s, parsed, line) == len(chosen)
    assert [i.commit for i in s.watch_items("sentinel")] == [hashes[k] for k in chosen]
    assert follow.queue_line(s, parsed, line) == 0                        # queued once
    # without --since, the watch starts again from the oldest commit it queued on the branch
    assert follow.line_of(Repo(repo), s, parsed, "main").commits[0].hash == hashes[chosen[0]]


def test_ctrl_c_puts_the_commit_back_in_the_queue_and_the_next_look_measures_it(tmp_path):
    repo, store, suite = tmp_path / "repo", tmp_path / "k.db", tmp_path / "suite.toml"
    suite.write_text(SUITE.replace("reps = 3", "reps = 12"))
    tip = commit(repo, 100, "base")
    p = subprocess.Popen([str(KPERFDIFF), "--store", str(store), "watch", str(suite), "--repo", str(repo), "--branch",
                          "main", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _running(store):
        time.sleep(0.1)
    time.sleep(1.0)                                               # its first repetitions measured
    p.send_signal(signal.SIGINT)                                  # as Ctrl-C, in the middle of the measurement
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "interrupted" in err, (p.returncode, out, err)
    with sqlite3.connect(store) as c:
        assert c.execute("SELECT state, owner, lease_until FROM watch_item").fetchall() == [("queued", None, None)]
        assert c.execute("SELECT state FROM run").fetchall() == [("interrupted",)]
    again = look(store, suite, repo, "--format", "json")
    [w] = validate("watch", again.stdout)["watches"]
    assert [(m["commit"], m["state"]) for m in w["measured"]] == [(tip, "done")] and watch_runs(store) == [tip]
    # --follow looks again after --interval until Ctrl-C, which then stops it cleanly
    p = subprocess.Popen([str(KPERFDIFF), "--store", str(store), "watch", str(suite), "--repo", str(repo), "--branch",
                          "main", "--follow", "--interval", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    time.sleep(4)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode in (0, 130), err
    assert out.count("nothing new to measure on main") >= 2, out             # a line per look
    with sqlite3.connect(store) as c:
        assert c.execute("SELECT state FROM watch_item").fetchall() == [("done",)]


def _running(store) -> bool:
    try:
        with sqlite3.connect(store) as c:
            return bool(c.execute("SELECT count(*) FROM run WHERE state='running'").fetchone()[0])
    except sqlite3.Error:
        return False
