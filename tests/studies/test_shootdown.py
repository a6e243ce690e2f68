"""The batched TLB shootdown study's section (studies/shootdown.py): its pure parts, and the section
computed from a real tiny run on this machine (two local variants labelled as the study's arm64 pair,
the loop with a temporary swap, profiled)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import pytest

from kperfdiff import studies
from kperfdiff.bench.swap import active_swap
from kperfdiff.analysis.bench_compare import CellChange
from kperfdiff.store import Store
from kperfdiff.studies import shootdown


def test_labels_make_one_pair_per_architecture_arm64_first():
    assert shootdown.parse_label("arm64-6.12") == ("arm64", "6.12")
    assert shootdown.parse_label("aarch64_6.1") == ("arm64", "6.1")
    assert shootdown.parse_label("x86_64-6.1") == ("x86_64", "6.1")
    assert shootdown.parse_label("huge") is None
    pairs = shootdown.pairs_of(["x86_64-6.12", "arm64-6.1", "x86_64-6.1", "arm64-6.12", "arm64-6.9"])
    assert pairs == [("arm64", "arm64-6.1", "arm64-6.12"), ("x86_64", "x86_64-6.1", "x86_64-6.12")]
    assert shootdown.pairs_of(["arm64-6.1"]) == []


def test_shares_from_folded_stacks_self_and_inclusive():
    folded = {"a_[k];try_to_unmap_one_[k];ptep_clear_flush_[k]": 16.0,
              "a_[k];ptep_clear_flush_[k];flush_tlb_page_[k]": 4.0,
              "a_[k];try_to_unmap_flush_[k];arch_tlbbatch_flush_[k]": 10.0,
              "main;b_[k]": 70.0}
    assert shootdown.shares(folded, 100.0, ("ptep_clear_flush",)) == (16.0, 20.0)
    own, incl = shootdown.shares(folded, 100.0, shootdown.BATCHED)
    assert own == 10.0 and incl == 10.0
    assert all(math.isnan(x) for x in shootdown.shares({}, 0.0, ("x",)))


def test_elapsed_time_is_said_as_the_study_says_it():
    c = CellChange("pageout.anon", 1, "pageout.anon", "pageout.anon", "ns/op", "lower", 100.0, 90.0,
                   change=100 / 90 * 100 - 100, low=5.0, high=16.0, significant=True, method="nested",
                   cv_base=0.01, cv_new=0.01, reps_base=5, reps_new=5)
    assert round(shootdown.elapsed_change(c), 1) == -10.0
    assert shootdown.elapsed_text(c).startswith("-10.0% [-13.8, -4.8], significant")
    assert shootdown.size_bytes("1m") == 1 << 20 and shootdown.size_bytes("64k") == 65536


TINY = """
name = "tiny-shootdown"
benchmarks = ["pageout.anon"]
cores = [1]
reps = 3
intervals = 3
tiny = true
profile = true
allow_swap_setup = true
baseline = "arm64-6.1"
[study]
kind = "tlb-shootdown"
title = "Shootdown <tiny>"
source = "test"
measured = "the loop"
found = "5.4%"
differs = ["both sides are this machine"]
[[variant]]
label = "arm64-6.1"
[[variant]]
label = "arm64-6.12"
"""


@pytest.mark.skipif(not (active_swap() or os.geteuid() == 0) or shutil.which("perf") is None,
                    reason="the loop needs swap (or root to set up a temporary one) and perf")
@pytest.mark.machine_state          # its temporary swap, checked gone after
def test_the_section_of_a_real_tiny_run(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text(TINY)
    swaps_before = active_swap()
    r = subprocess.run([sys.executable, "-m", "kperfdiff", "--store", str(tmp_path / "s.db"), "run", "--no-progress",
                        str(f)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert active_swap() == swaps_before          # the temporary swap is gone again
    exp, _ = studies.load(f)
    sec = studies.section(Store.open(tmp_path / "s.db", create=False), exp)
    per_page, change, mech = sec.tables
    assert per_page.rows[0][0] == "pageout.anon" and all("ns/page (3 reps)" in c for c in per_page.rows[0][1:])
    assert change.columns[1] == "arm64: arm64-6.12 vs arm64-6.1" and "%" in change.rows[0][1]
    assert [row[0] for row in mech.rows] == ["arm64-6.1", "arm64-6.12"]
    assert sec.diffs and sec.diffs[0].result is not None and sec.diffs[0].result.common
    assert sec.direction.agrees in ("yes", "partly", "no") and not sec.emulated
    assert "TCG" not in sec.direction.text       # said only of emulated runs
    assert sec.mechanism.agrees in studies.VERDICTS
