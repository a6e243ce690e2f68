"""Hostile text profiles: a bounded run of the mutation fuzzer (fuzz/fuzzing.py; the long mode is
fuzz/fuzz_text.py), every input it ever broke a reader with (tests/data/text/fuzz/), and the
inputs that are not files at all."""
import os
import subprocess
import time

import numpy as np
import pytest

from support import DATA, KPERFDIFF, assert_one_sentence_error, run_cli
from fuzzing import fuzz, invariant_problem
from kperfdiff.core.errors import InputError
from kperfdiff.core.files import check_input_file
from kperfdiff.ingest.load import load

FUZZ = DATA / "text" / "fuzz"


def test_fuzz_text_readers(tmp_path):
    """Executions and seed from KPD_FUZZ_TEXT_EXECS / KPD_FUZZ_SEED (CI: 3000, seed 1)."""
    n = int(os.environ.get("KPD_FUZZ_TEXT_EXECS", "3000"))
    seed = int(os.environ.get("KPD_FUZZ_SEED", "1"))
    counts, examples = fuzz(tmp_path, executions=n, seed=seed)
    print(f"text fuzz, seed {seed}: {dict(counts)}")
    assert sum(counts.values()) == n
    assert counts["ok"] > n // 2 and counts["error"] > 0      # the mutations reach the readers and hurt
    assert not counts["crash"] and not counts["wrong"], examples


def test_invariants_catch_what_they_claim():
    """The oracle itself: a share above 100% and an infinite total are caught."""
    prof = load(DATA / "text" / "forkexec.folded")
    assert invariant_problem(prof) is None
    prof.self_weight = prof.self_weight.copy()
    prof.self_weight[0] = prof.total_weight * 1.5
    assert "share of 150.00%" in invariant_problem(prof)
    prof = load(DATA / "text" / "forkexec.folded")
    prof.total_weight = float("inf")
    assert "total weight" in invariant_problem(prof)


@pytest.mark.parametrize("name, stderr_words, rows", [
    # found by the fuzzer: a row of 999.99% was taken as is (a share above 100%)
    ("row-999pct.report", "skipped 1 unreadable line (first at line 12)", 10),
    # found by the fuzzer: a negative percentage was read as positive
    ("negative-pct.report", "skipped 1 unreadable line (first at line 12)", 10),
    # found by the fuzzer: a 400-digit sample count crashed the reader (OverflowError)
    ("samples-400-digits.report", "skipped 1 unreadable line (first at line 6)", 10),
    # the issue: a 400-digit period made the total infinite and every share "-"
    ("period-400-digits.script", "skipped 1 unreadable line (first at line 4)", None),
    # the issue: counts of 1e308 made the total infinite and every share 0.00
    ("count-1e308.folded", "skipped 2 unreadable lines (first at line 2)", None),
    # the issue: a valid folded file whose first line is over 64 KiB was rejected
    ("first-line-70k.folded", None, None),
])
def test_fuzz_found_inputs_read_with_a_warning(name, stderr_words, rows):
    prof = load(FUZZ / name)
    assert invariant_problem(prof) is None
    warnings = prof.meta.get("warnings", [])
    if stderr_words:
        assert any(stderr_words in w for w in warnings), warnings
    else:
        assert not warnings
    if rows is not None:
        assert len(prof.symbols) == rows
    assert np.all(prof.self_weight <= prof.total_weight)
    r = run_cli("diff", FUZZ / name, FUZZ / name, "--format", "json", check=0)
    assert "Traceback" not in r.stderr
    if stderr_words:
        assert stderr_words in r.stderr


def test_first_line_over_64k_is_one_stack():
    prof = load(FUZZ / "first-line-70k.folded")
    assert max(len(s) for s in prof.stacks) == 7001 and prof.samples >= 3


def test_reports_pasted_together_are_refused():
    r = run_cli("diff", FUZZ / "pasted-twice.report", DATA / "text" / "forkexec.report")
    assert_one_sentence_error(r)
    assert r.returncode == 2 and "add up to 198.76%, more than 100%" in r.stderr


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "profile.fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    r = run_cli("diff", fifo, DATA / "text" / "forkexec.folded", timeout=20)
    assert time.monotonic() - t0 < 15
    assert_one_sentence_error(r)
    assert r.returncode == 2 and "is a FIFO, not a profile file" in r.stderr


@pytest.mark.parametrize("args", [
    ["diff", "/dev/zero", str(DATA / "text" / "forkexec.folded")],
    ["diff", str(DATA / "text" / "forkexec.folded"), "/dev/urandom"],
    ["diff", str(DATA / "perfdata" / "plain.perf.data"), str(DATA / "perfdata" / "plain.perf.data"),
     "--kallsyms", "/dev/zero"],
    ["run", "/dev/zero", "--dry-run"],
    ["place", "plan", str(DATA / "place" / "forkexec.folded"), "--sizes", "/dev/zero", "--hw",
     str(DATA.parent.parent / "examples" / "place" / "arm926-tcm.toml")],
    ["place", "plan", str(DATA / "place" / "forkexec.folded"), "--sizes", str(DATA / "place" / "System.map"),
     "--hw", "/dev/zero"],
])
def test_devices_are_refused_fast(args):
    p = subprocess.run([str(KPERFDIFF), *args], capture_output=True, text=True, timeout=20,
                       stdin=subprocess.DEVNULL)
    assert_one_sentence_error(p)
    assert p.returncode == 2 and "is a device" in p.stderr, p.stderr


def test_nul_in_a_path_is_a_sentence():
    with pytest.raises(InputError, match="NUL"):
        check_input_file("a\0b")


def test_fuzz_lava_job_logs(tmp_path):
    """The LAVA job-log reader and results frame decoder (fuzz/fuzzing.py fuzz_lava): every mutated log
    is read, or refused with one sentence; never a crash, never a file outside the results folder."""
    from fuzzing import fuzz_lava
    n = int(os.environ.get("KPD_FUZZ_TEXT_EXECS", "3000"))
    seed = int(os.environ.get("KPD_FUZZ_SEED", "1"))
    counts, examples = fuzz_lava(tmp_path, executions=n, seed=seed)
    print(f"lava fuzz, seed {seed}: {dict(counts)}")
    assert sum(counts.values()) == n
    assert counts["ok"] > n // 10 and counts["error"] > n // 10
    assert not counts["crash"] and not counts["wrong"], examples
