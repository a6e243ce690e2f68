"""Profiles read several at once (both sides of a diff, every replicate of a side) are the same
as read one after another: the parallel load is only faster, never different."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from support import DATA, run_cli
from kperfdiff.core.errors import InputError
from kperfdiff.ingest.load import load_many, load_sides

XARCH = DATA / "perfdata" / "xarch"
BENCHES = ("fault.anon.4k", "proc.exec", "proc.fork", "proc.shell")


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, tuple[list[Path], Path]]:
    """The cross-architecture fixtures unpacked: per arch, its perf.data files and kallsyms."""
    out = {}
    for arch in ("arm64", "x86_64"):
        d = tmp_path_factory.mktemp(arch)
        files = []
        for b in BENCHES:
            f = d / f"{b}.perf.data"
            f.write_bytes(gzip.decompress((XARCH / arch / f"{b}.perf.data.gz").read_bytes()))
            files.append(f)
        ks = d / "kallsyms.ref"
        ks.write_bytes(gzip.decompress((XARCH / arch / "kallsyms.gz").read_bytes()))
        out[arch] = (files, ks)
    return out


def no_store(ref: str):
    raise AssertionError(f"{ref} looked up in a store")


def sides(recordings, workers):
    (fa, ka), (fb, kb) = recordings["arm64"], recordings["x86_64"]
    return load_sides([",".join(map(str, fa)), ",".join(map(str, fb))], no_store,
                      kallsyms=[str(ka), str(kb)], symfs=[None, None], workers=workers)


def test_parallel_profiles_equal_serial_ones(recordings):
    serial, parallel = sides(recordings, 1), sides(recordings, 4)
    assert [len(s) for s in serial] == [4, 4]
    for side_s, side_p in zip(serial, parallel):
        for s, p in zip(side_s, side_p):
            assert (s.source, s.event, s.label, s.arch) == (p.source, p.event, p.label, p.arch)
            assert s.symbols == p.symbols
            assert np.array_equal(s.self_weight, p.self_weight)
            assert np.array_equal(s.children_weight, p.children_weight)
            assert (s.total_weight, s.samples) == (p.total_weight, p.samples)
            assert list(s.stacks.items()) == list(p.stacks.items())
            assert s.edges == p.edges
    # the replicates are in the order the side names them
    assert [Path(p.source).name for p in parallel[0]] == [f"{b}.perf.data" for b in BENCHES]


def test_diff_output_is_the_same_with_any_number_of_jobs(recordings):
    (fa, ka), (fb, kb) = recordings["arm64"], recordings["x86_64"]
    args = ["diff", ",".join(map(str, fa)), ",".join(map(str, fb)), "--kallsyms-a", ka, "--kallsyms-b", kb,
            "--children", "--top", "0", "--format", "json"]
    one = run_cli(*args, "--jobs", "1", check=0).stdout
    two = run_cli(*args, "--jobs", "2", check=0).stdout
    assert one == two
    assert '"significant": true' in one or '"significant": false' in one   # replicates were compared


def test_the_first_failure_in_order_is_the_one_reported():
    def ok():
        return "fine"

    def bad(n):
        def f():
            raise InputError(f"file {n} is broken")
        return f

    with pytest.raises(InputError, match="file 1 is broken"):
        load_many([ok, bad(1), ok, bad(2)], workers=4)
    assert load_many([ok, ok], workers=2) == ["fine", "fine"]


def test_meanwhile_runs_on_the_calling_thread_while_the_files_are_read():
    """load_many's ``meanwhile`` (what `diff` does while its files are read: load numpy) runs once,
    on the calling thread, while the loads are in flight: a load that waits for it finishes; with
    one worker it runs before the loads."""
    import threading
    done = threading.Event()
    calls = []

    def meanwhile():
        calls.append(threading.current_thread() is threading.main_thread())
        done.set()

    def job(i):
        return lambda: (done.wait(10) and i, threading.current_thread() is threading.main_thread())
    assert load_many([job(1), job(2)], workers=2, meanwhile=meanwhile) == [(1, False), (2, False)]
    assert calls == [True]
    done.clear()
    assert load_many([job(1), job(2)], workers=1, meanwhile=meanwhile) == [(1, True), (2, True)]
    assert calls == [True, True]
