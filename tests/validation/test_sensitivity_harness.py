"""validation/sensitivity.py keeps running: its --quick mode (one 10% trial and one null trial, each
run by the version checked out at HEAD and by this checkout's, on this machine, real benchmarks)
prints its calibration, a line per trial and the table of every version and effect, and leaves no git
worktree behind (about 10 s on a quiet 2-CPU machine, so CI runs it; its JSON form is checked by a
slow test). Its failures are one sentence each: bad options, a revision that does not exist, a
command that fails, a calibration that is all noise."""
import json
import re
import subprocess
import sys

import pytest

from support import ROOT

SCRIPT = ROOT / "validation" / "sensitivity.py"
HEAD = ["version", "effect", "expected", "trials", "detected", "false positives", "wrong sign", "same", "unknown",
        "change median [min, max]", "detectable median", "run s median"]


def harness(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True).stdout


def test_quick_harness_prints_a_line_per_trial_and_a_row_per_version_and_effect(tmp_path):
    before = worktrees()
    p = harness("--quick", "--before-rev", "HEAD", "--store-dir", tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert re.search(r"^sensitivity: select\.file\.100 .*; before: PYTHONPATH=\S+/src \S+ -m kperfdiff \(\w{12}\); "
                     r"after: \S+; load average at start [\d.]+ [\d.]+ [\d.]+ on \d+ CPUs$", out, re.M), out
    assert re.search(r"^calibration \(1 rounds.*time = -?\d+ \+ [\d.]+\*n ns$", out, re.M), out
    assert re.search(r"^  10%: n = 100 -> \d+ \(slower by \+\d+\.\d%: expected change -\d+\.\d%\)$", out, re.M), out
    lines = re.findall(r"^ +\d/4 +(before|after) +(10%|null) #1: n = (\d+); change (.*); run [\d.]+ s$", out, re.M)
    assert sorted((v, g) for v, g, *_ in lines) == [("after", "10%"), ("after", "null"), ("before", "10%"),
                                                    ("before", "null")], out
    assert [n for _, g, n, _ in lines if g == "null"] == ["100", "100"]
    assert all(re.match(r"[+-]\d+\.\d%( \[[+-]\d+\.\d, [+-]\d+\.\d\]| \[no interval\]) \(", c) for *_, c in lines)
    # the table: its header, a rule, a row per version and effect
    rows = out[out.index("\nversion "):].strip().splitlines()
    assert re.split(r"\s{2,}", rows[0]) == HEAD
    assert set(rows[1]) <= {"-", " "}
    cells = [dict(zip(HEAD, re.split(r"\s{2,}", r))) for r in rows[2:6]]
    assert [(c["version"], c["effect"]) for c in cells] == [("before", "10%"), ("before", "null"), ("after", "10%"),
                                                           ("after", "null")]
    for c in cells:
        assert c["trials"] == "1" and re.fullmatch(r"[\d.]+", c["run s median"]), c
        if c["effect"] == "null":
            assert c["detected"] == c["wrong sign"] == c["expected"] == "-", c
            assert re.fullmatch(r"[01]/1 \((0|100)%\)", c["false positives"]), c
        else:
            assert c["false positives"] == "-" and re.fullmatch(r"-\d+\.\d%", c["expected"]), c
            assert re.fullmatch(r"[01]/1 \((0|100)%\)", c["detected"]) and c["wrong sign"] in ("0", "1"), c
    assert re.search(r"^load average at end [\d.]+ [\d.]+ [\d.]+; \d+ s in all$", out, re.M)
    assert {f.name for f in tmp_path.iterdir()} >= {"before.db", "after.db", "calibrate.db", "sens-10pct-1.before.toml",
                                                    "sens-10pct-1.after.toml"}
    assert worktrees() == before


@pytest.mark.slow
def test_json_has_every_trial_and_summary():
    p = harness("--quick", "--versions", "after", "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["bench"] == "select.file.100" and doc["reps"] == 3 and list(doc["versions"]) == ["after"]
    assert doc["calibration"]["b"] > 0 and [g["name"] for g in doc["groups"]] == ["10%", "null"]
    assert [(t["version"], t["group"]) for t in doc["trials"]] == [("after", "10%"), ("after", "null")]
    assert all(isinstance(t["significant"], bool) and t["verdict"] for t in doc["trials"])
    assert [(s["group"], s["trials"]) for s in doc["summary"]] == [("10%", 1), ("null", 1)]
    assert re.search(r"^ +1/2 +after +10% #1: ", p.stderr, re.M), p.stderr


def fake_kperfdiff(tmp_path, body: str) -> str:
    """A command standing in for kperfdiff: ``body`` runs with ``n`` (select.file.100's) and ``args``."""
    f = tmp_path / "fake.py"
    f.write_text("import json, re, sys\nargs = sys.argv[1:]\n"
                 "n = int(re.search(r':n=(\\d+)', ' '.join(args)).group(1)) if ':n=' in ' '.join(args) else 0\n"
                 + body)
    return f"{sys.executable} {f}"


def test_a_calibration_that_is_all_noise_is_one_sentence(tmp_path):
    fake = fake_kperfdiff(tmp_path, "print(json.dumps({'results': [{'benchmark': 'select.file.100', 'status': 'ok', "
                                    "'summary': {'min': 5000 - n}}]}))\n")
    p = harness("--quick", "--versions", "after", "--after", fake, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("sensitivity: select.file.100 did not get slower as n grew")
    assert "too noisy to calibrate" in p.stderr


def test_a_failing_command_is_one_sentence(tmp_path):
    fake = fake_kperfdiff(tmp_path, "sys.exit(sys.stderr.write('kperfdiff: no such store\\n') and 3)\n")
    p = harness("--quick", "--versions", "after", "--after", fake, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert re.fullmatch(r"sensitivity: kperfdiff bench .* failed \(3\): kperfdiff: no such store", p.stderr.strip())


def test_bad_options_and_revisions_are_one_sentence():
    for args, words, status in ((["--effects", "5,abc"], "percentages", 2), (["--reps", "2"], "3 or more", 2),
                                (["--versions", "after,during"], "before, after or both", 2),
                                (["--bench", "select.file.100"], "BENCH:PARAM=BASE", 2),
                                (["--before-rev", "no-such-rev"], "--before-rev no-such-rev: cannot check it out", 1)):
        p = harness(*args, timeout=60)
        assert p.returncode == status and "Traceback" not in p.stderr and words in p.stderr, (args, p.stderr)
