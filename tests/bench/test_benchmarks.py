"""Every benchmark in the catalogue runs with tiny settings and yields
positive finite values in its declared unit (or a stated skip)."""
import math

import pytest

from kperfdiff.targets import machine
from kperfdiff.bench import build, catalogue, worker
from kperfdiff.core import stats
from kperfdiff.core.errors import UsageError
from kperfdiff.measure.session import parse_param_overrides, unmet_requirement

FACTS = machine.facts(probe_perf=False)
BENCHES = catalogue.load_catalogue()


@pytest.fixture(scope="module")
def binaries():
    return build.build_all()


@pytest.mark.parametrize("bench", BENCHES, ids=[b.name for b in BENCHES])
def test_benchmark_tiny(bench, binaries):
    reason = unmet_requirement(bench, FACTS, FACTS["swap_active"])
    if reason:
        pytest.skip(reason)
    params = bench.run_params(tiny=True, hello=str(binaries["hello"]))
    argv = worker.worker_argv(binaries[bench.family], bench.name, params, intervals=3, min_batch_ns=1_000_000,
                              warmup=1)
    out = worker.run_copies(argv, 1, timeout=bench.timeout)[0]
    if out.status == "skipped":
        pytest.skip(f"{bench.name}: {out.skip}")
    assert out.status == "ok", f"{bench.name}: {out.error}\n{out.stderr}"
    assert out.unit == bench.unit and out.better == bench.better
    assert len(out.intervals) == 3
    assert all(math.isfinite(v) for v in out.values), (bench.name, out.values)
    if out.overhead is not None and not all(v > 0 for v in out.values):
        # a subtraction benchmark on a busy machine: the difference fell to zero or below, which
        # the measurement refuses as not resolvable instead of storing (bench/measurement.py)
        assert stats.unresolved_difference(out.values, out.overhead, bench.unit), (bench.name, out.values)
    else:
        assert all(v > 0 for v in out.values), (bench.name, out.values)
    assert out.ops > 0


def test_catalogue_is_complete():
    names = {b.name for b in BENCHES}
    families = {b.family for b in BENCHES}
    assert {"syscall", "signal", "select", "proc", "ctx", "ipc", "fs", "mmap", "fault", "gups", "tlb",
            "pageout"} <= families
    assert len([b for b in BENCHES if "quick" in b.suites]) >= 20
    assert "syscall.null" in names


def test_run_params_precedence():
    fork = catalogue.get("proc.fork")
    assert fork.run_params(hello="/h")["hello"] == "/h"
    assert fork.run_params(hello="/h", overrides={"hello": "/mine"})["hello"] == "/mine"
    assert "hello" not in catalogue.get("syscall.null").run_params(hello="/h")
    gups = catalogue.get("gups.4k")
    assert gups.run_params()["log2_words"] == gups.params["log2_words"]
    assert gups.run_params(tiny=True)["log2_words"] == gups.tiny_params["log2_words"]
    assert gups.run_params(tiny=True, overrides={"log2_words": "12"})["log2_words"] == "12"
    assert gups.params["log2_words"] != "12"  # the catalogue itself is not changed


def test_an_option_is_offered_not_set(binaries):
    """proc.fork's exit= (lmbench's exit() in the child) is taken from an override only: a default
    would change the parameters every stored proc.fork result is filed under."""
    fork = catalogue.get("proc.fork")
    assert fork.options == {"exit": ("_exit", "exit")} and "exit" not in fork.run_params(hello="/h")
    assert parse_param_overrides(["proc.fork:exit=exit"], [fork]) == {"proc.fork": {"exit": "exit"}}
    assert parse_param_overrides(["proc.*:exit=exit"], list(BENCHES)) == {"proc.fork": {"exit": "exit"}}
    with pytest.raises(UsageError, match="proc.fork's exit is one of _exit, exit"):
        parse_param_overrides(["proc.fork:exit=abort"], [fork])
    for how, ok in [("exit", True), ("abort", False)]:
        params = fork.run_params(tiny=True, hello=str(binaries["hello"]), overrides={"exit": how})
        argv = worker.worker_argv(binaries["proc"], fork.name, params, intervals=3, min_batch_ns=1_000_000, warmup=1)
        out = worker.run_copies(argv, 1, timeout=fork.timeout)[0]
        if ok:
            assert out.status == "ok" and len(out.intervals) == 3 and all(v > 0 for v in out.values), out.stderr
        else:
            assert out.status != "ok" and "exit=abort: the child's exit is _exit or exit" in (out.error or ""), out


def test_every_unit_says_what_an_operation_is(tmp_path):
    """Every benchmark's catalogue entry says what one operation of its unit is, and the unit printed
    says it: ns per 4 KB page for the anonymous faults (huge pages too), ns per fork; a family without
    it is refused with the benchmark named."""
    for b in BENCHES:
        assert b.op, b.name
        assert b.unit_label == (f"{b.unit.split('/')[0]} per {b.op}" if b.unit.endswith("/op") else b.unit), b.name
        assert "/op" not in b.unit_label, b.name
    assert catalogue.get("fault.anon.huge").unit_label == "ns per 4 KB page"
    assert catalogue.get("fault.anon.4k").unit_label == "ns per 4 KB page"
    assert catalogue.get("proc.fork").unit_label == "ns per fork"
    assert catalogue.get("gups.huge").unit_label == "GUP/s"
    assert catalogue.operations()["ipc.pipe"] == "round trip"
    (tmp_path / "x.c").write_text("")
    (tmp_path / "x.toml").write_text('family = "x"\n[[bench]]\nname = "x.a"\nexercises = "e"\nunit = "ns/op"\n'
                                     'better = "lower"\n')
    with pytest.raises(catalogue.CatalogueError, match="x.a: no op"):
        catalogue.load_families(tmp_path)
