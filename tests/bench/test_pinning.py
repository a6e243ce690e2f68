"""Pinning: every repetition's copies run on a chosen CPU, kept in their info; the same CPUs for every
variant of a round of an experiment; --no-pin and `pin = false` turn it off."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from kperfdiff.bench.build import build_runner
from kperfdiff.bench.pinning import Placement
from support import run_cli, two_variant_experiment

FAST = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]


def test_placement_leaves_cpu0_and_rotates():
    assert Placement("last", (0, 1, 2, 3)).cpus(1, 0) == [3]
    assert Placement("last", (0, 1, 2, 3)).cpus(2, 5) == [2, 3]
    assert Placement("last", (0, 1)).cpus(2, 0) == [0, 1]          # more copies than quiet CPUs: CPU 0 too
    assert [Placement("rotate", (0, 1, 2, 3)).cpus(1, r) for r in range(4)] == [[1], [2], [3], [1]]
    assert Placement("last", (0,)).cpus(2, 0) == [0, 0]
    assert Placement("off").cpus(1, 0) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_kpd_run_pins_each_copy(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))[-2:]
    subprocess.run([str(build_runner()), "-o", str(tmp_path), "-n", "2", "-t", "10", "-c", ",".join(map(str, cpus)),
                    "--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"], check=True)
    got = [(tmp_path / f"c{i}.out").read_text().split()[-1] for i in range(2)]
    assert got == [str(c) for c in cpus]


def _infos(out: str) -> list[list[dict]]:
    return [r["info"] for r in json.loads(out)["results"]]


def test_bench_records_the_cpu_of_every_repetition(home):
    p = run_cli("bench", "--only", "syscall.null", "--reps", "3", "-P", "1,2", *FAST, "--format", "json", check=0)
    one, two = _infos(p.stdout)
    last = sorted(os.sched_getaffinity(0))[-1]
    assert [i["cpu"] for i in one] == [str(last)] * 3
    assert len({(i["rep"], i["cpu"]) for i in two}) == 6 or len(os.sched_getaffinity(0)) < 2   # distinct per copy
    p = run_cli("bench", "--only", "syscall.null", "--reps", "2", *FAST, "--no-pin", "--format", "json", check=0)
    assert all("cpu" not in i for i in _infos(p.stdout)[0])


def test_rotate_moves_each_round(home):
    p = run_cli("bench", "--only", "syscall.null", "--reps", "4", "--pin", "rotate", *FAST, "--format", "json", check=0)
    cpus = [i["cpu"] for i in _infos(p.stdout)[0]]
    assert len(cpus) == 4 and (len(set(cpus)) > 1 or len(os.sched_getaffinity(0)) < 3)


def _cells(home) -> list[tuple]:
    """(variant, rep, cpu) of every copy of every run in the store."""
    out = []
    for r in json.loads(run_cli("runs", "--all", "--format", "json", check=0).stdout)["runs"]:
        shown = json.loads(run_cli("show", r["id"], "--format", "json", check=0).stdout)
        out += [(r["variant"], i["rep"], i.get("cpu")) for res in shown["results"] for i in res["info"]]
    return out


def test_experiment_same_cpu_for_every_variant_of_a_round(tmp_path, home):
    f = two_variant_experiment(tmp_path / "e.toml", "pinned", reps=3, min_batch_ms=1)
    run_cli("run", f, "--no-progress", check=0)
    cells = _cells(home)
    by_rep: dict = {}
    for variant, rep, cpu in cells:
        assert cpu is not None
        by_rep.setdefault(rep, set()).add(cpu)
    assert len(by_rep) == 3 and all(len(c) == 1 for c in by_rep.values())


def test_experiment_pin_false_and_variant_cpus(tmp_path, home):
    f = two_variant_experiment(tmp_path / "e.toml", "unpinned", reps=1, min_batch_ms=1, pin=False)
    run_cli("run", f, "--no-progress", check=0)
    assert all(cpu is None for *_, cpu in _cells(home))
