"""One perf.data file read on several threads (split at its FINISHED_ROUND records, each part
resolved with the state the records before it leave, the parts merged) gives exactly what one thread
gives: every array, name and id, on every fixture and on a fresh system-wide recording of
many short-lived processes whose parts each hold thousands of samples."""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from support import DATA
from kperfdiff import native

THREADS = (2, 3, 5)


def read(path: Path, kallsyms: Path | None, threads: int, by_process: bool) -> dict:
    d = native.read_perf_data(str(path), kallsyms=str(kallsyms) if kallsyms else None, by_process=by_process,
                              threads=threads)
    # how many chain parts each thread's caches missed: the one figure that is per thread
    d["header"].pop("symbolized_chain_parts")
    return d


def fixtures(tmp: Path) -> list[tuple[Path, Path | None]]:
    """Every perf.data fixture (gzip'd ones unpacked), with the kallsyms beside it."""
    out = []
    for f in sorted((DATA / "perfdata").rglob("*.perf.data*")):
        if f.name.endswith(".gz"):
            g = tmp / "-".join(f.relative_to(DATA).parts)[:-3]
            g.write_bytes(gzip.decompress(f.read_bytes()))
            ks = f.parent / "kallsyms.gz"
            k = None
            if ks.is_file():
                k = tmp / (g.name + ".kallsyms")
                k.write_bytes(gzip.decompress(ks.read_bytes()))
            out.append((g, k))
        elif f.name.endswith(".data"):
            ks = [c for c in (f.with_name(f.name + ".kallsyms"), f.parent / "kallsyms") if c.is_file()]
            out.append((f, ks[0] if ks else None))
    return out


def test_every_fixture_reads_the_same_on_every_thread_count(tmp_path, monkeypatch):
    monkeypatch.setenv("KPERFDIFF_PARALLEL_MIN_BYTES", "0")   # however small the file
    files = fixtures(tmp_path)
    assert len(files) >= 30
    read_ok = 0
    for f, ks in files:
        for by_process in (False, True):
            try:
                one = read(f, ks, 1, by_process)
            except native.PerfDataError as e:
                for t in THREADS:
                    with pytest.raises(native.PerfDataError) as again:
                        read(f, ks, t, by_process)
                    assert str(again.value) == str(e)
                continue
            read_ok += 1
            for t in THREADS:
                assert read(f, ks, t, by_process) == one, f"{f.name} on {t} threads (by_process={by_process})"
    assert read_ok >= 40


@pytest.fixture(scope="module")
def many_rounds(tmp_path_factory) -> tuple[Path, Path]:
    """Two seconds system-wide with call chains while shells start short-lived processes."""
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    d = tmp_path_factory.mktemp("rounds")
    data = d / "shell.perf.data"
    work = "while :; do ls -R /usr/share/doc/python3 > /dev/null; done"
    loops = " & ".join([f"timeout 2 sh -c '{work}'"] * 2)
    p = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-g", "-a", "-o", str(data),
                        "--", "sh", "-c", f"{loops}; wait"], capture_output=True, text=True)
    if p.returncode != 0 or not data.is_file():
        pytest.skip(f"perf record cannot record system-wide here: {p.stderr.strip()[:200]}")
    ks = d / "kallsyms"
    shutil.copy("/proc/kallsyms", ks)
    return data, ks


def test_a_recording_of_many_rounds_and_processes_reads_the_same(many_rounds, monkeypatch):
    """Parts that begin among short-lived processes and renamed threads: each later part's
    reader asks the parts before it for the processes and names it meets (history.rs)."""
    data, ks = many_rounds
    one = read(data, ks, 1, True)
    assert one["record_counts"].get("User type: 68", 0) >= 12, "too few FINISHED_ROUND records to split"
    assert one["record_counts"]["COMM"] >= 200 and one["record_counts"]["MMAP2"] >= 1000
    monkeypatch.setenv("KPERFDIFF_PARALLEL_MIN_BYTES", "0")
    for t in (2, 3, 4, 7):
        for by_process in (False, True):
            assert read(data, ks, t, by_process) == read(data, ks, 1, by_process), f"{t} threads"
    # every thread did work: each handed over samples of its own. Not an even share: threads steal chunks
    # from each other, so a thread the OS starves (3 threads on 2 CPUs beside another test worker) reads
    # fewer (a 10% floor failed 1 run in about 10 here, at 8.3%)
    code = ("import sys; from kperfdiff import native; "
            "native.read_perf_data(sys.argv[1], kallsyms=sys.argv[2], threads=3)")
    env = {**os.environ, "KPERFDIFF_TRACE_PARTS": "1"}
    p = subprocess.run([sys.executable, "-c", code, str(data), str(ks)], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    parts = [int(line.split(": ")[1].split()[0]) for line in p.stderr.splitlines() if "reader part" in line]
    assert len(parts) == 3 and min(parts) > 0, p.stderr
    assert sum(parts) == sum(e["samples"] for e in one["events"])


def test_small_files_and_one_thread_read_on_one(many_rounds, monkeypatch):
    data, ks = many_rounds
    monkeypatch.delenv("KPERFDIFF_PARALLEL_MIN_BYTES", raising=False)
    code = ("import sys; from kperfdiff import native; "
            "native.read_perf_data(sys.argv[1], kallsyms=sys.argv[2], threads=int(sys.argv[3]))")
    env = {**os.environ, "KPERFDIFF_TRACE_PARTS": "1"}
    env.pop("KPERFDIFF_PARALLEL_MIN_BYTES", None)
    for threads, min_bytes in ((4, None), (1, "0")):
        if min_bytes is not None:
            env["KPERFDIFF_PARALLEL_MIN_BYTES"] = min_bytes
        p = subprocess.run([sys.executable, "-c", code, str(data), str(ks), str(threads)], capture_output=True,
                           text=True, env=env)
        assert p.returncode == 0 and "reader part" not in p.stderr, (threads, p.stderr)


def test_reads_that_share_symbol_tables_read_what_each_reads_alone(many_rounds, tmp_path):
    """Reads given one SymbolShare (the two sides of a diff) parse an ELF file they both need once,
    and each gets what it reads alone, at the same time or not, on one thread or several; a read
    that looks for symbols elsewhere (another symfs) gets its own tables, not the other's."""
    data, ks = many_rounds
    elsewhere = tmp_path / "empty-symfs"
    elsewhere.mkdir()

    def alone(threads=1, symfs=None, share=None):
        d = native.read_perf_data(str(data), kallsyms=str(ks), threads=threads, symfs=symfs, share=share)
        d["header"].pop("symbolized_chain_parts")     # per thread, see read()
        return d

    plain, moved = alone(), alone(symfs=[str(elsewhere)])
    assert plain["sym_names"] != moved["sym_names"]      # the user symbols come from this machine's files
    share = native.SymbolShare()
    results = [None, None]

    def read_shared(i, threads):
        results[i] = alone(threads, share=share)

    both = [threading.Thread(target=read_shared, args=(i, 1 + i)) for i in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    assert results[0] == plain and results[1] == alone(threads=2)
    assert alone(symfs=[str(elsewhere)], share=share) == moved


def test_a_read_on_threads_releases_pages_and_populates_none(many_rounds, tmp_path):
    """The reader's pages fault in as its records reach them and are released behind it
    (MADV_DONTNEED, 4). None is populated ahead (MADV_POPULATE_READ, 22): a populate holds the
    address space's lock for a whole chunk, and on many CPUs the threads' maps and populates
    queued behind one another (order.rs)."""
    data, ks = many_rounds
    trace = tmp_path / "madvise.data"
    code = ("import sys; from kperfdiff import native; "
            "native.read_perf_data(sys.argv[1], kallsyms=sys.argv[2], threads=2)")
    env = {**os.environ, "KPERFDIFF_PARALLEL_MIN_BYTES": "0"}
    p = subprocess.run(["perf", "record", "-q", "-e", "syscalls:sys_enter_madvise", "-o", str(trace), "--",
                        sys.executable, "-c", code, str(data), str(ks)], capture_output=True, text=True, env=env)
    if p.returncode != 0 and "syscalls:sys_enter_madvise" in p.stderr:
        pytest.skip(f"perf cannot trace madvise here: {p.stderr.strip()[:200]}")
    assert p.returncode == 0, p.stderr
    s = subprocess.run(["perf", "script", "-i", str(trace), "-F", "trace"], capture_output=True, text=True)
    behaviours = [int(line.rsplit("behavior: ", 1)[1], 16) for line in s.stdout.splitlines() if "behavior: " in line]
    assert behaviours.count(4) >= 2, s.stdout[-2000:]
    assert 22 not in behaviours
