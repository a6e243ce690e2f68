"""Specific checks of the lmbench-style families: signal, select, proc, ipc, fs.

The generic test (tests/test_benchmarks.py) runs every catalogue entry with
tiny settings; these tests check what it cannot see: self-measured
overheads, clear errors for bad paths, and that no child process or
temporary file outlives a worker.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.bench import build, worker
from conftest import session_members

TINY = ["--intervals", "3", "--warmup", "1", "--min-batch-ns", "1000000"]


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return build.build_all(["signal", "select", "proc", "ipc", "fs"])


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
    assert all(v > 0 for v in o.values)


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
