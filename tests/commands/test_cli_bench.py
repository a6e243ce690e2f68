"""`kperfdiff bench`, `runs`, `show` as a user runs them."""
import json
import os
import subprocess

import pytest

from support import assert_one_sentence_error, run_cli
from kperfdiff.bench import build, catalogue
from kperfdiff.store import Store

TINY = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]


def test_list_text_and_json():
    p = run_cli("bench", "--list", check=0)
    for b in catalogue.load_catalogue():
        assert b.name in p.stdout
    j = json.loads(run_cli("bench", "--list", "--format", "json", check=0).stdout)
    names = [b["name"] for b in j["benchmarks"]]
    assert len(names) == len(set(names)) == len(catalogue.load_catalogue())
    assert all(b["better"] in ("lower", "higher") and b["unit"] for b in j["benchmarks"])


def test_only_patterns_and_json(home):
    p = run_cli("bench", "--only", "syscall.n*,syscall.stat", "--format", "json", *TINY, check=0)
    j = json.loads(p.stdout)
    assert j["version"] == 1 and j["run"]["state"] == "complete"
    assert [r["benchmark"] for r in j["results"]] == ["syscall.null", "syscall.stat"]
    for r in j["results"]:
        assert r["status"] == "ok" and r["unit"] == "ns/op" and r["better"] == "lower"
        assert len(r["intervals"]) == 3 and r["summary"]["median"] > 0
        assert "vmstat.pgfault" in r["monitors"] or r["monitors"] is not None
    runs = json.loads(run_cli("runs", "--format", "json", check=0).stdout)["runs"]
    assert runs[-1]["id"] == j["run"]["id"]
    shown = run_cli("show", str(j["run"]["id"]), "--raw", check=0).stdout
    assert "syscall.stat" in shown and "machine:" in shown and "raw intervals" in shown


def test_parallel_copies_pool_intervals(home):
    p = run_cli("bench", "--only", "syscall.null", "-P", "1-2", "--reps", "2", "--format", "json", *TINY, check=0)
    res = json.loads(p.stdout)["results"]
    assert [(r["copies"], len(r["intervals"])) for r in res] == [(1, 6), (2, 12)]
    assert {(i["rep"], i["copy"]) for i in res[1]["intervals"]} == {(1, 0), (1, 1), (2, 0), (2, 1)}


@pytest.mark.parametrize("args,needle", [
    (["bench", "--only", "nosuch.bench"], "no benchmark matches"),
    (["bench", "-P", "0"], "core counts run from 1 to 1024"),
    (["bench", "-P", "x"], "not a list of core counts"),
    (["bench", "--reps", "0"], "whole number"),
    (["bench", "--only", "syscall.null", "--param", "syscall.null"], "BENCH:KEY=VALUE"),
    (["bench", "--only", "syscall.null", "--param", "fault.*:nokey=1"], "applies to no chosen benchmark"),
    (["show", "424242"], "no run 424242"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_one_sentence(home, args, needle):
    Store.open(home / "kperfdiff.db").conn.close()     # show reads an existing store (it never makes one)
    p = run_cli(*args)
    assert_one_sentence_error(p)
    assert needle in p.stderr


def test_unwritable_store(tmp_path):
    p = run_cli("--store", "/proc/kperfdiff.db", "bench", "--only", "syscall.null", *TINY)
    assert_one_sentence_error(p)


def test_failed_benchmark_recorded_and_exit_status(home):
    # a bad parameter makes the worker fail: recorded as failed, suite goes on, exit 1
    p = run_cli("bench", "--only", "syscall.null,syscall.stat", "--param", "syscall.stat:path=/no/such/file",
                "--format", "json", *TINY)
    assert p.returncode == 1
    res = {r["benchmark"]: r for r in json.loads(p.stdout)["results"]}
    assert res["syscall.null"]["status"] == "ok"
    assert res["syscall.stat"]["status"] == "failed" and "stat" in res["syscall.stat"]["reason"]


def _elf_machine(path):
    with open(path, "rb") as f:
        head = f.read(20)
    assert head[:4] == b"\x7fELF"
    return int.from_bytes(head[18:20], "little")


def test_aarch64_cross_build_static():
    out = build.build_all(arch="aarch64")
    assert set(out) >= set(catalogue.families())
    for path in out.values():
        assert _elf_machine(path) == 183  # EM_AARCH64
        info = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True).stdout
        if info:
            assert "statically linked" in info


def test_build_cache_is_keyed_by_source():
    a = build.build_family("syscall")
    b = build.build_family("syscall")
    assert a == b and a.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="creating swap needs root")
@pytest.mark.machine_state
def test_allow_swap_setup_runs_pageout_and_removes_the_swap(home):
    from kperfdiff.bench.swap import active_swap
    before = active_swap()
    p = run_cli("bench", "--only", "pageout.anon", "--allow-swap-setup", "--format", "json", *TINY)
    r = json.loads(p.stdout)["results"][0]
    if before:
        assert r["status"] == "ok"
    else:
        assert r["status"] == "ok", r["reason"]
        assert r["summary"]["median"] > 0
        assert r["monitors"].get("vmstat.pswpout", 0) > 0   # pages really went to swap
    assert active_swap() == before                           # and the temporary swap is gone
    without = json.loads(run_cli("bench", "--only", "pageout.anon", "--format", "json", *TINY).stdout)["results"][0]
    if not before:
        assert without["status"] == "skipped" and "--allow-swap-setup" in without["reason"]


def test_reps_run_in_rotated_rounds(home):
    """Repetitions are spread over the run: one of every benchmark per round, the order rotated."""
    p = run_cli("bench", "--only", "syscall.null,syscall.stat", "--reps", "3", "--format", "json", *TINY, check=0)
    j = json.loads(p.stdout)
    from kperfdiff.store import Store
    s = Store.open(home / "kperfdiff.db")
    rows = {r.benchmark: r for r in s.results(j["run"]["id"])}
    # each result keeps all 3 repetitions, and its intervals come from 3 processes
    for name in ("syscall.null", "syscall.stat"):
        assert sorted({x[0] for x in rows[name].raw}) == [0, 1, 2]
        assert rows[name].stop == "3 repetitions (fixed count)"
    out = j["results"][0]
    assert out["reps"] == 3 and out["half_width_pct"] > 0 and out["centre"] > 0
    text = run_cli("show", str(j["run"]["id"]), check=0).stdout
    assert "+-95%" in text


def test_precision_adds_repetitions_and_says_why_it_stopped(home):
    loose = json.loads(run_cli("bench", "--only", "syscall.null", "--reps", "3", "--precision", "1000",
                               "--format", "json", *TINY, check=0).stdout)["results"][0]
    assert loose["reps"] == 3 and loose["stop"].startswith("precision reached")
    tight = json.loads(run_cli("bench", "--only", "syscall.null", "--reps", "3", "--precision", "0.0001",
                               "--max-time", "1", "--format", "json", *TINY, check=0).stdout)["results"][0]
    assert tight["reps"] >= 3 and tight["stop"].startswith(("time limit (1 s)", "repetition limit"))
    text = run_cli("show", "2", check=0).stdout
    assert "time limit" in text or "repetition limit" in text
    for bad in ("0", "-1", "nan", "inf", "x"):
        assert_one_sentence_error(run_cli("bench", "--only", "syscall.null", "--precision", bad, *TINY))


def test_detect_adds_repetitions_until_a_change_of_p_could_be_seen(home):
    """--detect P: repetitions until a comparison with a run like it could see P% (80% power), each result
    saying which ended it; show gives every result's detectable change; one rule at a time."""
    loose = json.loads(run_cli("bench", "--only", "syscall.null", "--reps", "3", "--detect", "9999",
                               "--format", "json", *TINY, check=0).stdout)["results"][0]
    assert loose["reps"] == 3 and loose["stop"].startswith("detectable change reached: detectable ")
    assert 0 < loose["detectable_pct"] <= 9999 and loose["stop"].endswith("<= 9999% after 3 repetitions")
    tight = json.loads(run_cli("bench", "--only", "syscall.null", "--reps", "3", "--detect", "0.0001",
                               "--max-time", "1", "--format", "json", *TINY, check=0).stdout)["results"][0]
    assert tight["stop"].startswith(("time limit (1 s): detectable ", "repetition limit: detectable "))
    text = run_cli("show", "2", check=0).stdout
    assert " detect " in text.splitlines()[next(i for i, ln in enumerate(text.splitlines())
                                               if ln.startswith("benchmark"))]
    assert_one_sentence_error(run_cli("bench", "--only", "syscall.null", "--detect", "5", "--precision", "5", *TINY))


def test_noise_is_recorded_and_a_disturbed_result_is_marked(home):
    """Two busy loops beside the benchmark: every repetition is marked disturbed, with the reason, in
    the table, the JSON and compare; the busy machine is announced before the run."""
    import sys
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        p = run_cli("bench", "--only", "syscall.null", "--reps", "3", "--format", "json", *TINY, check=0)
        p2 = run_cli("bench", "--only", "syscall.null", "--reps", "3", *TINY, check=0)
    finally:
        for lp in loops:
            lp.kill()
            lp.wait()
    r = json.loads(p.stdout)["results"][0]
    assert [n["rep"] for n in r["noise"]] == [1, 2, 3]
    for n in r["noise"]:
        assert {"steal_pct", "other_runnable_mean", "nivcsw", "migrations", "run_delay_pct"} <= set(n)
        assert any("other runnable tasks" in x or "involuntary" in x or "run-queue" in x for x in n["disturbed"])
    assert r["disturbed"]
    assert "the machine is busy" in p.stderr
    assert "! disturbed" in p2.stdout and "repetitions disturbed" in p2.stdout
    cmp = run_cli("compare", "1", "2", check=0).stdout
    assert "syscall.null -P 1 ! baseline: 3 of 3 repetitions disturbed" in cmp
