"""Specific checks of the memory families: ctx, mmap, fault, gups, tlb, pageout.

The generic test (tests/bench/test_benchmarks.py) runs every catalogue entry with
tiny settings; these tests check what it cannot see: GUPS verification,
whether huge pages were really obtained, that TLB shootdowns really happen,
the context-switch overhead subtraction, --sync, bad parameters, and that
no child process outlives a worker.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.bench import build
from kperfdiff.bench.swap import active_swap, temporary_swap
from support import session_members

FAMILIES = ["ctx", "mmap", "fault", "gups", "tlb", "pageout"]
TINY = ["--intervals", "3", "--warmup", "1", "--min-batch-ns", "1000000"]


@pytest.fixture(scope="module")
def binaries() -> dict[str, Path]:
    return {f: build.build_family(f) for f in FAMILIES}


def run(binary: Path, bench: str, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), bench, *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kw)


def parse(out: str) -> tuple[dict[str, str], list[tuple[float, int, int]], dict[str, str]]:
    """(info, intervals, other tagged lines) of a worker's output."""
    info: dict[str, str] = {}
    intervals = []
    other: dict[str, str] = {}
    for ln in out.splitlines():
        tag, _, rest = ln.partition(" ")
        if tag == "info":
            k, _, v = rest.partition(" ")
            info[k] = v
        elif tag == "interval":
            v, n, ns = rest.split()
            intervals.append((float(v), int(n), int(ns)))
        else:
            other[tag] = rest
    return info, intervals, other


def ok(p: subprocess.CompletedProcess) -> tuple[dict[str, str], list[tuple[float, int, int]], dict[str, str]]:
    assert p.returncode == 0, p.stdout + p.stderr
    info, iv, other = parse(p.stdout)
    assert "skip" not in other, other["skip"]
    assert iv and "end" in other, p.stdout
    return info, iv, other


def thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "absent"
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else "absent"


# ------------------------------------------------------------------ gups


@pytest.mark.parametrize("intervals", ["2", "3"])  # odd and even numbers of passes
@pytest.mark.parametrize("bench", ["gups.4k", "gups.huge"])
def test_gups_verifies_with_no_error(binaries, bench, intervals):
    p = run(binaries["gups"], bench, "--intervals", intervals, "log2_words=18")
    if thp_mode() in ("never", "absent") and bench == "gups.huge":
        assert parse(p.stdout)[2].get("skip"), p.stdout
        return
    info, iv, other = ok(p)
    assert other["unit"] == "GUP/s higher"
    assert info["verify_errors"] == "0"
    assert len(iv) == int(intervals)
    for v, n, ns in iv:
        assert n == 4 * 2**18
        assert v == pytest.approx(n / ns, rel=1e-4)  # updates / 1e9 / s
    assert int(info["first_touch_ns"]) > 0


def test_gups_huge_table_gets_huge_pages(binaries):
    if thp_mode() not in ("madvise", "always"):
        pytest.skip(f"THP is {thp_mode()}")
    info, _, _ = ok(run(binaries["gups"], "gups.huge", "--intervals", "1", "log2_words=20"))
    assert int(info["anon_huge_kb"]) > 0
    info, _, _ = ok(run(binaries["gups"], "gups.4k", "--intervals", "1", "log2_words=20"))
    assert int(info["anon_huge_kb"]) == 0


# ----------------------------------------------------------------- fault


def test_fault_anon_huge_gets_huge_pages_and_4k_does_not(binaries):
    if thp_mode() not in ("madvise", "always"):
        pytest.skip(f"THP is {thp_mode()}")
    info, iv, _ = ok(run(binaries["fault"], "fault.anon.huge", *TINY, "size=4m"))
    assert int(info["anon_huge_kb"]) > 0
    assert int(info["thp_fault_alloc"]) > 0
    assert float(info["faults_per_4kb"]) < 0.1
    info4, iv4, _ = ok(run(binaries["fault"], "fault.anon.4k", *TINY, "size=4m"))
    assert int(info4["anon_huge_kb"]) == 0
    assert float(info4["faults_per_4kb"]) >= 0.9
    # Per 4 KB of memory, a huge page fault is far cheaper.
    assert min(v for v, _, _ in iv) < min(v for v, _, _ in iv4)


def test_fault_huge_skips_when_thp_disabled(binaries):
    if thp_mode() not in ("never", "absent"):
        pytest.skip("THP is available here")
    p = run(binaries["fault"], "fault.anon.huge", *TINY)
    assert p.returncode == 0 and parse(p.stdout)[2].get("skip")


def test_fault_file_subtracts_mapping_cost(binaries):
    info, iv, other = ok(run(binaries["fault"], "fault.file", *TINY, "size=1m"))
    assert float(other["overhead"]) > 0
    assert float(info["mmap_munmap_ns"]) / int(info["pages"]) == pytest.approx(float(other["overhead"]), rel=1e-3)
    for v, n, ns in iv:
        assert v == pytest.approx(ns / n - float(other["overhead"]), rel=1e-3, abs=0.01)


@pytest.mark.parametrize("bench", ["fault.cow", "fault.prot"])
def test_fault_cow_and_prot_positive(binaries, bench):
    _, iv, _ = ok(run(binaries["fault"], bench, *TINY, "size=1m"))
    assert all(v > 0 for v, _, _ in iv)


# ------------------------------------------------------------------- tlb


@pytest.mark.parametrize("bench", ["tlb.mprotect", "tlb.dontneed"])
def test_tlb_counts_shootdowns(binaries, bench):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    if "TLB" not in Path("/proc/interrupts").read_text():
        pytest.skip("no TLB shootdown line in /proc/interrupts (not x86)")
    # A remote CPU gets an IPI only while the reader thread is running
    # there; on a busy machine it may be preempted for a whole short run,
    # so allow a few tries.
    counts = []
    for _ in range(3):
        info, iv, _ = ok(run(binaries["tlb"], bench, "--intervals", "5", "threads=2", "pages=4"))
        assert float(info["single_thread_ns"]) > 0
        assert int(info["reader_passes"]) > 0
        assert all(v > 0 for v, _, _ in iv)
        counts.append(int(info["tlb_shootdowns"]))
        if counts[-1] > 0:
            break
    assert max(counts) > 0, counts


def test_tlb_joins_its_threads_and_rejects_one_thread(binaries):
    p = run(binaries["tlb"], "tlb.mprotect", *TINY, "threads=1")
    assert p.returncode != 0 and "error" in parse(p.stdout)[2]


# ------------------------------------------------------------------- ctx


def test_ctx_subtracts_overhead(binaries):
    info, iv, other = ok(run(binaries["ctx"], "ctx.8p.16k", *TINY, "size=4k"))
    ovh = float(other["overhead"])
    assert ovh > 0
    assert info["procs"] == "8" and info["size"] == "4096"
    for v, n, ns in iv:
        assert n % 8 == 0
        # value = trip / procs - overhead = ns / (trips * procs) - overhead
        assert v == pytest.approx(ns / n - ovh, rel=1e-3, abs=0.5)


def test_ctx_leaves_no_child_behind(binaries):
    p = subprocess.Popen([str(binaries["ctx"]), "ctx.16p.16k", *TINY], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    deadline = time.time() + 5
    while session_members(p.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert session_members(p.pid) == []


def test_ctx_ring_dies_with_a_killed_parent(binaries):
    p = subprocess.Popen([str(binaries["ctx"]), "ctx.8p.0k", "--intervals", "1000"],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.5)
    assert len(session_members(p.pid)) >= 2
    p.kill()
    p.wait(timeout=10)
    p.stdout.close()
    deadline = time.time() + 5
    while session_members(p.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert session_members(p.pid) == []


# --------------------------------------------------------------- pageout


def test_pageout_file_really_pages_out(binaries, tmp_path):
    info, iv, _ = ok(run(binaries["pageout"], "pageout.file", *TINY, "size=256k", "dir=/var/tmp"))
    assert float(info["pgmajfault_per_loop"]) > 0
    assert float(info["ns_per_page"]) > 0


@pytest.mark.machine_state          # no other test's temporary swap may be active meanwhile
def test_pageout_anon_skips_without_swap(binaries):
    if active_swap():
        pytest.skip("swap is active")
    p = run(binaries["pageout"], "pageout.anon", *TINY)
    assert p.returncode == 0
    assert "swap" in parse(p.stdout)[2]["skip"]


@pytest.mark.skipif(os.geteuid() != 0, reason="temporary swap needs root")
@pytest.mark.machine_state
def test_pageout_anon_swaps_with_temporary_swap(binaries):
    with temporary_swap(64):
        info, iv, _ = ok(run(binaries["pageout"], "pageout.anon", *TINY, "size=256k"))
    assert float(info["pswpout_per_loop"]) > 0
    assert all(v > 0 for v, _, _ in iv)


# ------------------------------------------------------ protocol details


@pytest.mark.parametrize("family,bench,bad", [
    ("ctx", "ctx.2p.0k", "procs=1"),
    ("ctx", "ctx.2p.0k", "size=abc"),
    ("ctx", "ctx.bogus", "x=1"),
    ("mmap", "mmap.1m", "size=4k"),
    ("mmap", "mmap.1m", "file=/nonexistent/file"),
    ("fault", "fault.anon.4k", "size=1k"),
    ("fault", "fault.file", "dir=/nonexistent"),
    ("fault", "fault.nope", "size=1m"),
    ("gups", "gups.4k", "log2_words=3"),
    ("tlb", "tlb.mprotect", "pages=0"),
    ("pageout", "pageout.file", "size=12"),
    ("pageout", "pageout.file", "dir=/nonexistent"),
])
def test_bad_params_are_errors(binaries, family, bench, bad):
    p = run(binaries[family], bench, *TINY, bad)
    assert p.returncode != 0
    other = parse(p.stdout)[2]
    assert "error" in other and other["error"].strip(), p.stdout


@pytest.mark.parametrize("family,bench,params", [
    ("ctx", "ctx.2p.16k", ["size=4k"]),
    ("mmap", "mmap.1m", []),
    ("fault", "fault.anon.4k", ["size=2m"]),
    ("gups", "gups.4k", ["log2_words=16"]),
    ("tlb", "tlb.mprotect", ["pages=4"]),
    ("pageout", "pageout.file", ["size=64k"]),
])
def test_sync_waits_for_the_start_byte(binaries, family, bench, params):
    if family == "tlb" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    p = subprocess.Popen([str(binaries[family]), bench, *TINY, "--sync", *params],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    while True:
        ln = p.stdout.readline()
        assert ln, "worker ended before ready: " + "".join(lines)
        lines.append(ln)
        if ln.strip() == "ready":
            break
        assert not ln.startswith("interval")
    time.sleep(0.2)
    assert p.poll() is None  # still waiting
    p.stdin.write("g")
    p.stdin.close()
    rest = p.stdout.read()
    assert p.wait(timeout=60) == 0
    assert "interval" in rest and rest.rstrip().splitlines()[-1].startswith("end ")
