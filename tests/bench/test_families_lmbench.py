"""Specific checks of the lmbench-style families: signal, select, proc, ipc, fs, ctx,
and of validation/vs_lmbench.py's readers of lmbench's output.

The generic test (tests/bench/test_benchmarks.py) runs every catalogue entry with
tiny settings; these tests check what it cannot see: self-measured
overheads, clear errors for bad paths, and that no child process or
temporary file outlives a worker.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.bench import build, worker
from kperfdiff.core import stats
from support import DATA, ROOT, session_members

TINY = ["--intervals", "3", "--warmup", "1", "--min-batch-ns", "1000000"]


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return build.build_all(["signal", "select", "proc", "ipc", "fs", "ctx"])


def run(binary: Path, bench: str, *args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), bench, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def wait_session_empty(sid: int, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_signal_catch_subtracts_kill0(binaries):
    p = run(binaries["signal"], "signal.catch", *TINY)
    o = worker.parse_output(p.stdout, "signal.catch")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    # The overhead is the worker's own kill(self, 0) measurement ...
    assert o.overhead and o.overhead > 0
    assert abs(o.overhead - float(o.info["kill0_ns"])) <= 0.01 * o.overhead + 0.1
    # ... and is smaller than the raw time: each interval is raw - overhead.
    # the catch's cost subtracted; on a busy machine (parallel tests) an interval can fall to zero or
    # below, which the measurement then refuses as not resolvable rather than storing
    assert all(v > 0 for v in o.values) or stats.unresolved_difference(o.values, o.overhead, "ns/op")


def test_signal_prot_subtracts_catch(binaries):
    p = run(binaries["signal"], "signal.prot", *TINY)
    o = worker.parse_output(p.stdout, "signal.prot")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    catch = float(o.info["catch_raw_ns"]) - float(o.info["kill0_ns"])
    assert o.overhead == pytest.approx(catch, rel=0.01, abs=1)
    assert all(v > 0 for v in o.values)


@pytest.mark.parametrize("bench", ["proc.exec", "proc.shell"])
def test_proc_missing_hello_is_a_clear_error(binaries, tmp_path, bench):
    missing = tmp_path / "no-such-hello"
    p = run(binaries["proc"], bench, *TINY, f"hello={missing}")
    assert p.returncode != 0
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith("error ")]
    assert errors and str(missing) in errors[0], p.stdout
    assert "interval" not in p.stdout


def test_proc_exec_default_hello_is_next_to_the_worker(binaries, tmp_path):
    # The worker looks for kpd-hello beside itself when hello= is absent.
    (tmp_path / "kpd-proc").symlink_to(binaries["proc"])
    (tmp_path / "kpd-hello").symlink_to(binaries["hello"])
    p = run(tmp_path / "kpd-proc", "proc.exec", *TINY)
    o = worker.parse_output(p.stdout, "proc.exec")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    assert o.info["hello"] == str(tmp_path / "kpd-hello")


@pytest.mark.parametrize("family,bench", [("proc", "proc.fork"), ("proc", "proc.shell"),
                                          ("ipc", "ipc.pipe"), ("ipc", "ipc.tcp"),
                                          ("ipc", "ipc.connect")])
def test_no_child_left_behind(binaries, family, bench):
    args = [str(binaries[family]), bench, *TINY]
    if family == "proc":
        args.append(f"hello={binaries['hello']}")
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                         start_new_session=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert worker.parse_output(out, bench).status == "ok"
    assert wait_session_empty(p.pid) == []


def test_ipc_peer_dies_with_a_killed_worker(binaries):
    p = subprocess.Popen([str(binaries["ipc"]), "ipc.pipe", "--sync"], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, text=True, start_new_session=True)
    try:
        while (line := p.stdout.readline()) and line.strip() != "ready":
            pass
        assert line.strip() == "ready"
        assert len(session_members(p.pid)) == 2  # the worker and its echo peer
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        assert wait_session_empty(p.pid) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_ipc_error_kills_peer(binaries):
    # The parent gives up (start signal never comes): kpd_fail's exit path
    # must take the forked peer with it.
    p = subprocess.Popen([str(binaries["ipc"]), "ipc.udp", "--sync"], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, text=True, start_new_session=True)
    out, _ = p.communicate(input="", timeout=30)
    assert p.returncode != 0 and "error the parent went away" in out
    assert wait_session_empty(p.pid) == []


def test_fs_missing_dir_is_an_error(binaries, tmp_path):
    missing = tmp_path / "missing"
    p = run(binaries["fs"], "fs.create.0k", *TINY, f"dir={missing}")
    assert p.returncode != 0
    errors = [ln for ln in p.stdout.splitlines() if ln.startswith("error ")]
    assert errors and str(missing) in errors[0], p.stdout
    assert not missing.exists()


@pytest.mark.parametrize("bench", ["fs.create.10k", "fs.delete.0k"])
def test_fs_leaves_dir_clean(binaries, tmp_path, bench):
    p = run(binaries["fs"], bench, *TINY, f"dir={tmp_path}")
    o = worker.parse_output(p.stdout, bench)
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    assert o.info["dir"].startswith(str(tmp_path) + "/kpd-fs-")
    assert list(tmp_path.iterdir()) == []


def test_fs_batches_are_resized_when_files_get_dearer(binaries, tmp_path):
    # On ext4 without a journal (this VM's default dir, /tmp) a create scans past every inode
    # deleted in the last 30 s to 5 min, so each batch makes the next one's files dearer.
    # Sized once at the start, batches grew to seconds (fs.create.0k 13-88x lat_fs, which
    # re-sizes every batch). Here a batch is made dearer by stopping the worker in it: the
    # next batch must be sized down to the batch length, as lat_fs's would be.
    p = subprocess.Popen([str(binaries["fs"]), "fs.create.0k", "--intervals", "12", "--warmup", "0",
                          "--min-batch-ns", "10000000", f"dir={tmp_path}"],
                         stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    out = []
    for line in p.stdout:
        out.append(line)
        if line.startswith("interval ") and sum(x.startswith("interval ") for x in out) <= 6:
            os.kill(p.pid, signal.SIGSTOP)  # lands in the next batch's timed creations
            time.sleep(0.2)
            os.kill(p.pid, signal.SIGCONT)
    p.wait(timeout=120)
    o = worker.parse_output("".join(out), "fs.create.0k")
    assert p.returncode == 0 and o.status == "ok", out
    ops = [n for _, n, _ in o.intervals]
    assert min(ops) < ops[0] / 3, ops


def test_fs_error_after_setup_cleans_up(binaries, tmp_path):
    # --sync with no start byte fails after the directory is made.
    p = subprocess.run([str(binaries["fs"]), "fs.delete.0k", "--sync", f"dir={tmp_path}"],
                       capture_output=True, text=True, input="", timeout=30)
    assert p.returncode != 0 and "error " in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_select_descriptor_count(binaries):
    p = run(binaries["select"], "select.tcp.100", *TINY, "n=37")
    o = worker.parse_output(p.stdout, "select.tcp.100")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    assert o.info["descriptors"] == "37 tcp"
    p = run(binaries["select"], "select.file.10", *TINY, "n=5000")
    assert p.returncode != 0 and "error parameter n=5000" in p.stdout


def test_ipc_cpus_same_pins_both(binaries):
    p = run(binaries["ipc"], "ipc.pipe", *TINY, "cpus=same")
    o = worker.parse_output(p.stdout, "ipc.pipe")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    w, wc, pe, pc = o.info["cpus"].split()
    assert (w, pe) == ("worker", "peer") and wc == pc
    p = run(binaries["ipc"], "ipc.pipe", *TINY, "cpus=sideways")
    assert p.returncode != 0 and "error parameter cpus=sideways" in p.stdout


def test_ctx_cpus_placements(binaries):
    # same: one CPU for the whole ring; split: members alternate between two
    # CPUs; any: nothing pinned (lmbench). pin=0/1 are the older spelling.
    ncpu = len(os.sched_getaffinity(0))
    for cpus, alias in (("same", "pin=1"), ("split", None), ("any", "pin=0")):
        for arg in filter(None, (f"cpus={cpus}", alias)):
            p = run(binaries["ctx"], "ctx.2p.0k", *TINY, arg)
            o = worker.parse_output(p.stdout, "ctx.2p.0k")
            assert p.returncode == 0, p.stdout + p.stderr
            if cpus == "split" and ncpu < 2:
                assert o.status == "skip"
                continue
            assert o.status == "ok" and len(o.values) == 3, p.stdout
            policy, a, b = o.info["cpus"].split()
            assert policy == cpus
            if cpus == "same":
                assert a == b != "-1"
            elif cpus == "split":
                assert a != b and "-1" not in (a, b)
            else:
                assert a == b == "-1"
    p = run(binaries["ctx"], "ctx.2p.0k", *TINY, "cpus=sideways")
    assert p.returncode != 0 and "error parameter cpus=sideways" in p.stdout


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_ctx_split_runs_members_on_two_cpus(binaries):
    # Under split the ring member the worker forks really runs on the other CPU.
    p = subprocess.Popen([str(binaries["ctx"]), "ctx.2p.0k", "--sync", "cpus=split", *TINY],
                         stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        while (line := p.stdout.readline()) and line.strip() != "ready":
            pass
        assert line.strip() == "ready"
        kids = [pid for pid in session_members(p.pid) if pid != p.pid]
        assert len(kids) == 1
        assert os.sched_getaffinity(kids[0]) != os.sched_getaffinity(p.pid)
        assert len(os.sched_getaffinity(kids[0])) == len(os.sched_getaffinity(p.pid)) == 1
        p.stdin.write("g")
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ------------------------------------------------ validation/vs_lmbench.py

LMB_DATA = DATA / "lmbench"


@pytest.fixture(scope="module")
def vs():
    spec = importlib.util.spec_from_file_location("vs_lmbench", ROOT / "validation" / "vs_lmbench.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vs_lmbench"] = mod  # dataclasses look their module up
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("vs_lmbench", None)


@pytest.mark.parametrize("fixture,spec,bench,ns", [
    ("lat_syscall_null.txt", "lat_syscall null", "syscall.null", 303.7),
    ("lat_syscall_open.txt", "lat_syscall open", "syscall.open", 2800.7),
    ("lat_sig_prot.txt", "lat_sig prot FILE", "signal.prot", 444.9),
    ("lat_pagefault.txt", "lat_pagefault FILE", "fault.file", 264.6),
    ("lat_proc_shell.txt", "lat_proc shell", "proc.shell", 1183200.0),
    ("lat_select_tcp.txt", "lat_select -n 100 tcp", "select.tcp.100", 4857.0),
    ("lat_tcp.txt", "lat_tcp localhost", "ipc.tcp", 14143.2),
    ("lat_udp.txt", "lat_udp localhost", "ipc.udp", 15098.4),
    ("lat_connect.txt", "lat_connect localhost", "ipc.connect", 30620.1),
    ("lat_mmap_16m.txt", "lat_mmap 16m FILE", "mmap.16m", 146000.0),       # "<MB> <us>"
    ("lat_ctx_16k_8.txt", "lat_ctx -s 16 8", "ctx.8p.16k", 3980.0),         # "<procs> <us>"
    ("lat_fs_0.txt", "lat_fs -s 0 /tmp", "fs.create.0k", 1e9 / 161482),     # files per second
    ("lat_fs_0.txt", "lat_fs -s 0 /tmp", "fs.delete.0k", 1e9 / 222102),
    ("lat_fs_0.txt", "lat_fs -s 10k /tmp", "fs.create.10k", 1e9 / 84382),
    ("lat_fs_0.txt", "lat_fs -s 10k /tmp", "fs.delete.10k", 1e9 / 137030),
])
def test_vs_lmbench_parsers(vs, fixture, spec, bench, ns):
    tool, *args = spec.split()
    text = (LMB_DATA / fixture).read_text()
    assert vs.parse_lmbench(tool, args, bench, text) == pytest.approx(ns, rel=1e-6)


def test_vs_lmbench_parsers_reject_other_output(vs):
    with pytest.raises(vs.ParseError):
        vs.parse_lmbench("lat_syscall", ["null"], "syscall.null", "lat_syscall: usage\n")
    with pytest.raises(vs.ParseError):  # lat_ctx lines for another ring size
        vs.parse_lmbench("lat_ctx", ["-s", "16", "2"], "ctx.2p.16k",
                         (LMB_DATA / "lat_ctx_16k_8.txt").read_text())


def test_vs_lmbench_catalogue_commands_have_parsers(vs):
    # Every lmbench command the catalogue names is one the harness can read.
    from kperfdiff.bench import catalogue
    known = {"lat_syscall", "lat_sig", "lat_pagefault", "lat_proc", "lat_select", "lat_tcp",
             "lat_udp", "lat_connect", "lat_mmap", "lat_ctx", "lat_fs", "lat_pipe", "lat_unix"}
    tools = {b.lmbench.split()[0] for b in catalogue.load_catalogue() if b.lmbench}
    assert tools <= known


def test_vs_lmbench_verdict_uses_stated_reason(vs):
    p = vs.Pair("x.y", "lat_x", {}, "minor detail; vs lmbench: 2x because of Z. Other sentence.")
    p.kpd, p.lmb = [200.0, 210.0], [100.0, 100.0]
    assert vs.summarise(p)["verdict"] == "differs: 2x because of Z"
    p.differences = "minor detail"
    assert vs.summarise(p)["verdict"] == "DISAGREES"
    p.kpd = [110.0, 90.0]
    r = vs.summarise(p)
    assert r["verdict"] == "agree" and r["ratio"] == pytest.approx(1.0)


def test_vs_lmbench_without_lmbench_exits_2():
    env = {k: v for k, v in os.environ.items() if k != "LMBENCH_BIN"}
    p = subprocess.run([sys.executable, str(ROOT / "validation" / "vs_lmbench.py")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "LMBENCH_BIN" in lines[0] and "lmbench" in lines[0], p.stderr


@pytest.mark.parametrize("offset, expect", [(None, 0), ("1536k", 1536 << 10), ("4k", 4096)])
def test_mmap_places_every_mapping_past_a_2m_boundary(tmp_path, offset, expect):
    # Where a 1 MB mapping lands relative to a 2 MB boundary decides its cost (whole-folio
    # mapping or page by page), so the worker places it itself rather than leave it to ASLR.
    f = tmp_path / "file"
    f.write_bytes(b"m" * (1 << 20))
    args = [*TINY, f"file={f}"] + ([f"pmd_offset={offset}"] if offset else [])
    p = run(build.build_family("mmap"), "mmap.1m", *args)
    o = worker.parse_output(p.stdout, "mmap.1m")
    assert p.returncode == 0 and o.status == "ok", p.stdout + p.stderr
    assert int(o.info["pmd_offset"]) == expect


def test_mmap_bad_pmd_offset_is_an_error(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"m" * (1 << 20))
    p = run(build.build_family("mmap"), "mmap.1m", *TINY, f"file={f}", "pmd_offset=2m")
    assert p.returncode != 0 and "error pmd_offset=" in p.stdout


# The harness driven end to end against stand-ins for lmbench's programs (tests/support/lmbench_standin.py
# prints each tool's exact output format), so its kperfdiff side cannot rot unnoticed.
STANDIN = ROOT / "tests" / "support" / "lmbench_standin.py"


@pytest.fixture(scope="module")
def standin_bin(tmp_path_factory) -> Path:
    from kperfdiff.bench import catalogue
    d = tmp_path_factory.mktemp("lmbench-bin")
    tools = {b.lmbench.split()[0] for b in catalogue.load_catalogue() if b.lmbench} | {"lat_syscall"}
    for tool in tools:
        exe = d / tool
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" {tool} "$@"\n')
        exe.chmod(0o755)
    return d


def test_vs_lmbench_reads_every_catalogue_command_from_its_standin(vs, standin_bin, tmp_path):
    # Every lmbench command of the catalogue, as the harness runs it (arguments, FILE, ENOUGH),
    # is one the stand-in accepts and the harness reads back as 2 us.
    from kperfdiff.bench import catalogue
    for b in catalogue.load_catalogue():
        if not b.lmbench:
            continue
        size = vs.file_size(b.lmbench)
        f = vs.fresh_file(tmp_path, size) if size else None
        tool, args = vs.lmbench_argv(b.lmbench, f)
        out = vs.run_lmbench(standin_bin, tool, args, 60, vs.ENOUGH_US)
        assert vs.parse_lmbench(tool, args, b.name, out) == pytest.approx(2000.0), (b.name, out)
        if f:
            assert f.stat().st_size == size


def test_vs_lmbench_runs_at_head_against_standins(standin_bin, tmp_path):
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "STANDIN_LOG": str(log), "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "vs_lmbench.py"), "--lmbench-bin", str(standin_bin),
         "--rounds", "1", "--only", "fault.file,mmap.16m,fs.create.0k,syscall.null", "--format", "json",
         "--fs-settle", "0", "--timeout", "120", "--kperfdiff-args", "--intervals 3 --min-batch-ms 1"],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    rows = {r["benchmark"]: r for r in json.loads(p.stdout)["results"]}
    assert set(rows) == {"fault.file", "mmap.16m", "fs.create.0k", "syscall.null"}, rows
    for name, r in rows.items():
        assert r["errors"] == [] and r["kperfdiff_ns"] > 0, (name, r["errors"], p.stderr)
        assert r["lmbench_ns"] == pytest.approx(2000.0), name
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    assert all(c["enough"] == str(10000) for c in calls)  # lmbench's batch = kperfdiff's 10 ms
    fs = [c for c in calls if c["tool"] == "lat_fs"]
    # lat_fs in a directory of its own inside the catalogue's default dir (/tmp, not a tmpfs),
    # removed afterwards; stopped once its 0k line is out (the stand-in then sleeps for an hour)
    assert len(fs) == 1 and fs[0]["args"][:2] == ["-s", "0"], fs
    own = Path(fs[0]["args"][2])
    assert own.parent == Path("/tmp") and own.name.startswith("kpd-lat_fs-") and not own.exists()
    mapped = [c for c in calls if c["tool"] in ("lat_pagefault", "lat_mmap")]
    assert len(mapped) == 2 and all(len(c["files"]) == 1 for c in mapped)  # a real file each time


def test_vs_lmbench_refuses_an_undeclared_param_before_running(standin_bin, tmp_path):
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "STANDIN_LOG": str(log), "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(
        [sys.executable, str(ROOT / "validation" / "vs_lmbench.py"), "--lmbench-bin", str(standin_bin),
         "--only", "fault.file", "--param", "fault.file:file=/etc/passwd"],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and p.stdout == "" and not log.exists()
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no parameter 'file'" in lines[0], p.stderr
