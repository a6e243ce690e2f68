"""`kperfdiff system tune|show|reset` on this machine's real cgroups, IRQs and sysctls: what it changes
is put back byte for byte by reset, and by any kperfdiff command after a kill -9 half-way through a
tune; what the machine lacks is reported, not an error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kperfdiff.measure import tune as tm
from schemas.test_schemas import validate
from support import ROOT, run_cli

# the machine's own cgroups and IRQs: one test at a time of all those so marked (tests/conftest.py)
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="system tune needs root"), pytest.mark.machine_state]


def snapshot() -> dict[str, str]:
    """Every file a tune may touch, as bytes, and the cgroup directories."""
    files = [*Path("/proc/irq").glob("*/smp_affinity_list"), Path("/proc/irq/default_smp_affinity"),
             Path("/proc/sys/kernel/nmi_watchdog"), *Path(tm.CPU_SYS).glob("cpu[0-9]*/cpufreq/scaling_*"),
             Path(tm.CPU_SYS, "cpufreq/boost"), Path(tm.CPU_SYS, "intel_pstate/no_turbo")]
    out = {}
    for f in files:
        try:
            out[str(f)] = f.read_bytes()
        except OSError:
            pass
    for root in filter(None, (tm.cpuset_v1_root(), tm.cgroup2_root())):
        out[root + "/(children)"] = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        ctl = Path(root, "cgroup.subtree_control")
        if ctl.exists():
            out[str(ctl)] = ctl.read_bytes()
    return out


def test_tune_show_reset_restores_every_file(home):
    before = snapshot()
    p = run_cli("system", "tune", check=0)
    try:
        assert "tuned for benchmarks on CPUs" in p.stdout
        lines = p.stdout.splitlines()[1:]
        assert lines and all(ln.split()[0] in ("changed", "unchanged", "not") for ln in lines)
        show = validate("system show", run_cli("system", "show", "--format", "json", check=0).stdout)
        assert show["tuned"]["cpus"] == tm.default_cpus()
        if len(tm.online_cpus()) > 1 and tm.cpuset_v1_root():
            assert show["tuned"]["cgroup"]
        # a run measured while tuned says so, and its copies ran on the tuned CPUs
        out = json.loads(run_cli("bench", "--only", "syscall.null", "--reps", "2", "--intervals", "3",
                                 "--min-batch-ms", "1", "--no-progress", "--format", "json", check=0).stdout)
        assert out["machine"]["tuned"].startswith("yes")
        assert {i["cpu"] for i in out["results"][0]["info"]} <= {str(c) for c in show["tuned"]["cpus"]}
        assert run_cli("system", "tune", check=2).stderr.count("\n") == 1     # tuned already: one sentence
    finally:
        run_cli("system", "reset", check=0)
    assert snapshot() == before
    assert "not tuned" in run_cli("system", "reset", check=0).stderr


def test_not_present_is_reported_not_an_error(home):
    p = run_cli("system", "tune", check=0)
    run_cli("system", "reset", check=0)
    for what in ("cpufreq", "turbo/boost"):
        present = any(Path(tm.CPU_SYS).glob("cpu*/cpufreq")) if what == "cpufreq" else \
            Path(tm.CPU_SYS, "cpufreq/boost").exists() or Path(tm.CPU_SYS, "intel_pstate/no_turbo").exists()
        if not present:
            assert any(ln.strip().startswith("not tunable") and what in ln for ln in p.stdout.splitlines())


KILLED_TUNE = """
import os, signal
from kperfdiff.measure import tune as tm
from kperfdiff.measure.knobs import PendingRestores
t = tm._Tuner(tm.default_cpus(), PendingRestores())
t.cpuset(); t.irqs(); t.frequency()
os.kill(os.getpid(), signal.SIGKILL)        # before the tune is held
"""


def test_kill_9_during_tune_is_undone_by_the_next_command(home):
    before = snapshot()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "-c", KILLED_TUNE], env=env)
    assert p.returncode == -9
    if len(tm.online_cpus()) > 1 and tm.cpuset_v1_root():
        assert snapshot() != before
    r = run_cli("system", "show", check=0)     # any command puts the machine back first
    assert snapshot() == before, r.stderr
    assert "not tuned" in run_cli("system", "reset", check=0).stderr


def test_bad_cpus_are_one_sentence(home):
    p = run_cli("system", "tune", "--cpus", "999", check=2)
    assert "not online" in p.stderr and p.stderr.count("\n") == 1
