"""validation/bisect_accuracy.py keeps running: its --quick mode (one 50% series and one null
series of 8 commits, on this machine, real benchmarks and real git) prints its calibration, a line
per bisection and the summary table; the 50% series finds exactly its culprit and the null series
names none. Slow (35 s on a quiet 2-CPU machine, up to 95 s when the null series is not refused
at once and its probes are walked)."""
import re
import subprocess
import sys

import pytest

from support import ROOT

HEAD = ["effect", "bisections", "exact culprit", "probes mean/max", "bound", "verified", "wrong/false", "refused",
        "no culprit", "errors", "measured BAD/GOOD [min, max]", "wall s"]


@pytest.mark.slow
def test_quick_harness_finds_the_culprit_and_no_culprit_on_the_null_series(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "validation" / "bisect_accuracy.py"), "--quick", "--store",
                        str(tmp_path / "acc.db")], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert re.search(r"^calibration \(1 rounds.*time = -?\d+ \+ [\d.]+\*n ns$", out, re.M), out
    assert re.search(r"^  50%: n = 100 -> \d+ \(expected \+\d+\.\d%\)$", out, re.M), out
    assert re.search(r"load average at start [\d.]+ [\d.]+ [\d.]+ on \d+ CPUs", out)
    assert re.search(r"^load average at end [\d.]+ [\d.]+ [\d.]+; \d+ s in all$", out, re.M)
    # a line per bisection
    lines = re.findall(r"^ +\d+/2 +(50%|null) #1: culprit at +(\S+), found +(\S+) \(([^)]*)\)", out, re.M)
    assert [x[0] for x in lines] == ["50%", "null"], out
    assert lines[0][3].startswith("exact") and lines[0][1] == lines[0][2], out
    # refused, as a rule; but GOOD and BAD of a null series differ "significantly" about once in
    # 20 (the test's 5%), and then the bisection must still name no commit
    assert lines[1][3] in ("refused", "no culprit"), out
    # the table: its header, a rule, one row per group
    rows = out[out.index("\neffect "):].strip().splitlines()
    assert re.split(r"\s{2,}", rows[0]) == HEAD
    assert set(rows[1]) <= {"-", " "}
    fifty = dict(zip(HEAD, re.split(r"\s{2,}", rows[2])))
    null = dict(zip(HEAD, re.split(r"\s{2,}", rows[3])))
    assert fifty["effect"] == "50%" and fifty["bisections"] == "1" and fifty["exact culprit"] == "1/1 (100%)"
    assert fifty["wrong/false"] == "0" and fifty["refused"] == "0/1 (0%)" and fifty["bound"] == "5"
    assert 1 <= int(fifty["probes mean/max"].split("/")[-1]) <= 5
    assert null["effect"] == "null" and null["wrong/false"] == "0/1 (0%)"
    assert null["errors"] == "0" and fifty["errors"] == "0"


def test_bad_options_are_one_sentence():
    for args, words in ((["--effects", "5,abc"], "percentages"), (["--series", "-1"], "0 or more")):
        p = subprocess.run([sys.executable, str(ROOT / "validation" / "bisect_accuracy.py"), *args],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
        assert p.returncode == 2 and "Traceback" not in p.stderr and words in p.stderr, p.stderr


def test_null_series_alone_under_a_load_of_its_own(tmp_path):
    """--series 0 --null N measures the reference's level alone (no calibration), and --load keeps
    processes of the harness's own busy meanwhile: the run says so, and none is left running."""
    bad = subprocess.run([sys.executable, str(ROOT / "validation" / "bisect_accuracy.py"), "--load", "heavy:2"],
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert bad.returncode == 2 and "--load takes steady:N or bursts:N" in bad.stderr, bad.stderr
    p = subprocess.run([sys.executable, str(ROOT / "validation" / "bisect_accuracy.py"), "--series", "0", "--null",
                        "1", "--commits", "2", "--reps", "3", "--max-reps", "3", "--load", "bursts:1", "--store",
                        str(tmp_path / "acc.db")], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "calibration" not in p.stdout
    assert "1 bisections, with 1 process(es) of its own kept busy (bursts)" in p.stdout, p.stdout
    assert re.search(r"^ +1/1 +null #1: culprit at +-, found +- \((refused|no culprit)\)", p.stdout, re.M), p.stdout
    assert re.search(r"^null +1 ", p.stdout, re.M), p.stdout
    left = subprocess.run(["pgrep", "-f", "pattern, seed = sys.argv"], capture_output=True, text=True)
    assert left.stdout == "", "a --load process outlived the harness"
