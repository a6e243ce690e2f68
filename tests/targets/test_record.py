"""Recording profiles: `kperfdiff record` and `kperfdiff bench --profile`, with real perf."""
import json
import os
import subprocess

import pytest

from support import DATA, assert_one_sentence_error, run_cli
from kperfdiff.targets import machine, perf_record as record
from kperfdiff.core.arch import normalise_arch
from kperfdiff.core.errors import InputError
from kperfdiff.store import Store


def _perf_samples(path) -> int:
    r = subprocess.run(["perf", "script", "-i", str(path), "-F", "ip"], capture_output=True, text=True)
    return sum(1 for ln in r.stdout.splitlines() if ln.strip())


def test_record_any_command(tmp_path):
    out = tmp_path / "rec"
    p = run_cli("record", "-o", out, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=4k", "count=200000", check=0)
    assert "recorded" in p.stderr
    pd = out / "perf.perf.data"
    assert pd.exists() and (out / "kallsyms").exists()
    meta = json.loads((out / "perf.profile.json").read_text())
    assert meta["command"].startswith("dd ") and meta["event"] in ("cpu-clock", "cycles")
    assert meta["kallsyms"] == "kallsyms" and meta["arch"] == normalise_arch(__import__("os").uname().machine)
    hw = json.loads((out / "perf.hwstat.json").read_text())
    assert set(hw["available"]) | set(hw["unavailable"]) == set(record.HW_EVENTS)
    assert (out / "perf.buildids").exists()
    assert _perf_samples(pd) > 0


def test_record_propagates_exit_status(tmp_path):
    p = run_cli("record", "-o", tmp_path / "r", "--", "sh", "-c", "exit 3")
    assert p.returncode == 3


def test_record_bad_input(tmp_path):
    assert_one_sentence_error(run_cli("record", "-o", tmp_path / "r"))
    p = run_cli("record", "-o", tmp_path / "r", "--", "no-such-command-xyz")
    assert_one_sentence_error(p)
    assert "not found" in p.stderr


def test_bench_profile_stores_profiles(home):
    p = run_cli("bench", "--only", "syscall.open", "--profile", "-P", "1,2", "--intervals", "3", "--min-batch-ms",
                "2", "--no-progress", "--format", "json", check=0)
    run_id = json.loads(p.stdout)["run"]["id"]
    s = Store.open(home / "kperfdiff.db")
    profs = s.profiles(run_id)
    assert [(x.meta["copies"], x.meta["copy"]) for x in profs] == [(1, 0), (2, 0), (2, 1)]
    # the files are named by the repetition as shown (from 1; the store keeps rep 0)
    assert [os.path.basename(x.path) for x in profs] == ["syscall.open.P1.r1.c0.perf.data",
                                                         "syscall.open.P2.r1.c0.perf.data",
                                                         "syscall.open.P2.r1.c1.perf.data"]
    assert {x.rep for x in profs} == {0}
    for x in profs:
        assert x.ops > 0 and x.cpu_time_ns > 0 and x.event in ("cpu-clock", "cycles")
        assert _perf_samples(x.path) > 0
        assert x.kallsyms and open(x.kallsyms).readline().split()[2]
    # two core counts: the reference must choose one; the parallel copies of a repetition are one replicate
    with pytest.raises(InputError, match=r"at 1, 2 cores; choose one as \d+:syscall.open@N"):
        s.profile_refs(f"{run_id}:syscall.open")
    (paths1, meta1), = s.profile_refs(f"{run_id}:syscall.open@1")
    (paths2, meta2), = s.profile_refs(f"{run_id}:syscall.open@2")
    assert len(paths1) == 1 and len(paths2) == 2 and meta2["cores"] == 2
    assert meta2["ops"] == sum(x.ops for x in profs if x.meta["copies"] == 2)
    with pytest.raises(InputError, match="no profile of syscall.open at 4 cores"):
        s.profile_refs(f"{run_id}:syscall.open@4")


def test_perf_stat_parsing_from_recorded_outputs():
    hw = record.parse_perf_stat_csv((DATA / "record" / "perf-stat-hw.csv").read_text())
    assert hw["cycles"] == 1204411290 and hw["dTLB-load-misses"] == 310233
    assert hw["iTLB-load-misses"] is None
    vm = machine.parse_perf_stat_support((DATA / "record" / "perf-stat-vm.txt").read_text())
    assert vm["cpu-clock"] and not vm["cycles"] and not vm["dTLB-load-misses"]
    facts = {"perf_events": {"cycles": True, "instructions": True, "cpu-clock": True}}
    assert record.sampling_event(facts) == "cycles"
    assert record.available_hw_events(facts) == ["cycles", "instructions"]
    assert record.sampling_event({"perf_events": vm}) == "cpu-clock"
