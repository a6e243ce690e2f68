"""`kperfdiff bisect` on this machine (the local target), real benchmarks and real git: the build
command of each commit sets a benchmark parameter, one commit makes the benchmark 4x slower. It
finds, verifies and resumes after being killed; a pair with no difference is refused; bad input is
one sentence."""
import json
import re
import signal
import sqlite3
import subprocess
import time

import numpy as np
import pytest

from support import KPERFDIFF, assert_one_sentence_error, run_cli
from support.bisect_repo import git, make_series, refused_null
from schemas.test_schemas import validate

BENCH = "select.file.100"
FAST = ["--reps", "3", "--max-reps", "9", "--verify-reps", "3", "--no-profile", "--no-progress"]


def bisect_args(store, series, *more):
    return ["--store", store, "bisect", "--repo", series.path, "--good", series.commits[0], "--bad",
            series.commits[-1], "--bench", BENCH, "--build", "./build.sh", *FAST, *more]


def tagged_runs(store, *, probes_of=None) -> int:
    """Complete runs of a bisection in the store; with ``probes_of`` (a series), only those of
    probes (neither GOOD nor BAD)."""
    try:
        with sqlite3.connect(store) as c:
            rows = c.execute("SELECT options FROM run WHERE state='complete' AND options LIKE '%\"bisect\"%'"
                             ).fetchall()
    except sqlite3.Error:
        return 0
    tags = [json.loads(o)["bisect"] for (o,) in rows]
    if probes_of is not None:
        tags = [t for t in tags if t["commit"] not in (probes_of.commits[0], probes_of.commits[-1])]
    return len(tags)


@pytest.mark.long
def test_finds_verifies_and_resumes_after_a_kill(tmp_path):
    s = make_series(tmp_path / "repo", 6, 4, good=[f"param={BENCH}:n=100"], bad=[f"param={BENCH}:n=400"])
    store = str(tmp_path / "k.db")
    # first attempt: killed (as a crash would) once GOOD, BAD and the first probe are stored
    p = subprocess.Popen([str(KPERFDIFF), *map(str, bisect_args(store, s, "--format", "json"))],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while tagged_runs(store, probes_of=s) < 1 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert tagged_runs(store, probes_of=s) >= 1
    # the same command again resumes: what is stored is not measured again
    r = run_cli(*bisect_args(store, s, "--format", "json"), check=0)
    out = validate("bisect", r.stdout)
    assert out["culprit"]["hash"] == s.culprit
    assert out["verified"] is True
    steps = {st["role"]: st for st in out["steps"] if st["role"] in ("good", "bad")}
    assert steps["good"]["measured_now"] == 0 and steps["bad"]["measured_now"] == 0
    probes = [st for st in out["steps"] if st["role"] == "probe"]
    # (a probe still undecided after its stored repetitions gets more)
    assert len(probes[0]["values"]) > probes[0]["measured_now"]
    assert out["measured_probes"] <= 3 + 2                      # ceil(log2 6) + 2
    assert out["reference"]["ratio"] > 1.3
    # each repetition contributes the 10th percentile of its intervals (not their median)
    assert out["value"] == "p10" and out["modes"] == []
    good = steps["good"]
    with sqlite3.connect(store) as c:
        reps = {}
        for run in good["runs"]:
            for rep, v in c.execute("SELECT i.rep, i.value FROM interval i JOIN result r ON r.id = i.result_id "
                                    "WHERE r.run_id = ? AND r.benchmark = ?", (run, BENCH)):
                reps.setdefault((run, rep), []).append(v)
    low = sorted(float(np.percentile(v, 10)) for v in reps.values())
    assert sorted(good["values"]) == pytest.approx(low, rel=1e-12)
    assert sorted(good["values"]) != pytest.approx(sorted(float(np.median(v)) for v in reps.values()), rel=1e-9)
    # git is back where it was: no bisection in progress, the branch checked out
    assert git(s.path, "symbolic-ref", "--short", "HEAD") == "main"
    assert not (s.path / ".git" / "BISECT_START").exists()
    # every probe is an ordinary run
    show = run_cli("--store", store, "show", str(probes[0]["runs"][0]), check=0)
    assert BENCH in show.stdout


def test_a_pair_with_no_difference_is_refused(tmp_path):
    s = make_series(tmp_path / "repo", 4, None, good=[f"param={BENCH}:n=100"], bad=[])
    r, _ = refused_null(lambda store: run_cli(*bisect_args(store, s, "--max-reps", "6")), tmp_path / "k")
    assert r.returncode == 3, r.stderr
    assert_one_sentence_error(r)
    assert "do not differ significantly" in r.stderr and "no commit is blamed" in r.stderr
    assert "could have seen a change of" in r.stderr          # what the refusal could have detected
    assert r.stdout == ""
    assert git(s.path, "symbolic-ref", "--short", "HEAD") == "main"


def test_detect_ends_the_reference_once_it_could_see_that_much(tmp_path):
    """--detect P: GOOD and BAD get no more repetitions once their test could see P% (here a loose
    5000%, reached at the first look, 3 and 3, on a quiet machine; a CI run with a guest booting on the
    other CPU once needed the second look, 5 and 5), and the refusal says so; the same with --value
    median. A --detect that 9 repetitions cannot reach says that more are needed."""
    s = make_series(tmp_path / "repo", 3, None, good=[f"param={BENCH}:n=100"], bad=[])
    for value in ("p10", "median"):
        r, store = refused_null(lambda store: run_cli(*bisect_args(store, s, "--max-reps", "9", "--detect", "5000",
                                                                   "--value", value)), tmp_path / value)
        assert r.returncode == 3, r.stderr
        assert_one_sentence_error(r)
        reps = re.search(r"; (\d+) and (\d+) repetitions; at this noise the test could have seen a change of "
                         r"([\d.]+)% or more, within --detect 5000%\)", r.stderr)
        assert reps, r.stderr
        n, n_bad, seen = int(reps[1]), int(reps[2]), float(reps[3])
        assert n == n_bad and n in (3, 5, 7) and seen <= 5000, r.stderr     # a look before the last (9)
        assert tagged_runs(store) == 2 * n
    r, _ = refused_null(lambda store: run_cli(*bisect_args(store, s, "--reps", "3", "--max-reps", "3", "--detect",
                                                           "0.001")), tmp_path / "tight")
    assert r.returncode == 3 and "not the 0.001% of --detect: more repetitions (--max-reps)" in r.stderr, r.stderr


def test_bad_input_is_one_sentence(tmp_path):
    s = make_series(tmp_path / "repo", 2, 1, good=[f"param={BENCH}:n=100"], bad=[f"param={BENCH}:n=200"])
    store = str(tmp_path / "k.db")
    base = ["--store", store, "bisect", "--repo", s.path, "--bench", BENCH, "--build", "./build.sh"]
    cases = [
        (["--good", s.commits[0], "--bad", s.commits[0]], "same commit"),
        (["--good", s.commits[-1], "--bad", s.commits[0]], "is not an ancestor"),
        (["--good", "nosuchrev", "--bad", s.commits[0]], "names no commit"),
        (["--good", s.commits[0], "--bad", s.commits[-1], "--metric", "instructions"], "deterministic"),
        (["--good", s.commits[0], "--bad", s.commits[-1], "--bench", "no.such"], "is not a benchmark"),
    ]
    for extra, words in cases:
        r = run_cli(*base, *extra)
        assert_one_sentence_error(r)
        assert words in r.stderr, (extra, r.stderr)
    r = run_cli("--store", store, "bisect", "--repo", tmp_path, "--good", "a", "--bad", "b", "--bench", BENCH)
    assert_one_sentence_error(r)
    assert "is not a git repository" in r.stderr
    (s.path / "notes").write_text("changed\n")
    r = run_cli(*base, "--good", s.commits[0], "--bad", s.commits[-1])
    assert_one_sentence_error(r)
    assert "uncommitted changes" in r.stderr
    assert tagged_runs(store) == 0
