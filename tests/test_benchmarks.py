"""The speed harnesses (benchmarks/bench_ingest.py, bench_diff.py) keep running: each is run once,
--repeat 1, on a small perf.data with call chains from tests/data standing in for a recording shape
(and, for bench_ingest, on --file), and its rows and JSON are checked. A copy of this checkout whose
native reader takes `threads` (a wrapper around the real one) exercises the one-file-on-all-cores
figure and its MISMATCH check. A few seconds in all."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support import DATA, KPERFDIFF, ROOT

pytestmark = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")

PLAIN = DATA / "perfdata" / "plain.perf.data"      # 3652 samples with call chains
SAMPLES = 3652
NUM = r"\d+\.\d+"


@pytest.fixture
def shape_dir(tmp_path) -> Path:
    """A shapes folder (shapes.recordings reuses what it finds): fork-a and fork-b are plain.perf.data,
    with the kallsyms of its boot."""
    d = tmp_path / "shapes"
    d.mkdir()
    for side in "ab":
        shutil.copy(PLAIN, d / f"fork-{side}.perf.data")
    (d / "kallsyms").write_bytes(gzip.decompress((DATA / "perfdata" / "kallsyms.gz").read_bytes()))
    return d


def harness(script: Path, *args, check: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def before_checkout(tmp_path: Path) -> Path:
    """Another checkout for --before: this one's sources behind a .venv of this interpreter."""
    d = tmp_path / "before"
    (d / ".venv" / "bin").mkdir(parents=True)
    python = d / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    (d / ".venv" / "bin" / "kperfdiff").symlink_to(KPERFDIFF)
    (d / "src").symlink_to(ROOT / "src")
    return d


def threaded_checkout(tmp_path: Path) -> Path:
    """A copy of this checkout whose `native.read_perf_data` takes `threads` (and ignores it, unless
    FAKE_MISMATCH is set: then threads > 1 counts one sample more)."""
    d = tmp_path / "threaded"
    shutil.copytree(ROOT / "benchmarks", d / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    pkg = d / "src" / "kperfdiff"
    shutil.copytree(ROOT / "src" / "kperfdiff", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    so = next(pkg.glob("native*.so"))
    (pkg / "_real").mkdir()
    so.rename(pkg / "_real" / so.name)
    (pkg / "native.py").write_text('''
import os
from kperfdiff._real import native as _real
from kperfdiff._real.native import *  # noqa: F401,F403


def read_perf_data(path, kallsyms=None, symfs=None, debug_dirs=None, by_process=False, threads=1):
    d = _real.read_perf_data(path, kallsyms=kallsyms, symfs=symfs, debug_dirs=debug_dirs, by_process=by_process)
    if threads > 1 and os.environ.get("FAKE_MISMATCH"):
        d["events"][0]["samples"] += 1
    return d


read_perf_data.__text_signature__ = "(path, kallsyms=None, symfs=None, debug_dirs=None, by_process=False, threads=1)"
''')
    return d


def test_bench_ingest_shapes(shape_dir, tmp_path):
    p = harness(ROOT / "benchmarks" / "bench_ingest.py", "--shapes", "fork", "--dir", shape_dir, "--repeat", 1,
                "--before", before_checkout(tmp_path))
    out = p.stdout
    assert re.search(rf"^fork +{SAMPLES} +{NUM} +\d+ +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +{NUM}x +{NUM}/{NUM}$",
                     out, re.M), out
    assert re.search(rf"^target >= 10 Msamples/s on one core: fork {NUM} Msamples/s, (met|NOT met)", out, re.M), out
    assert "target one file on 2 cores >= 1.7x one core: " in out
    row = json.loads(out.splitlines()[-1])["shapes"][0]
    assert (row["shape"], row["samples"]) == ("fork", SAMPLES)
    assert row["native"] > 0 and row["before"] > 0 and row["cat"] > 0
    assert row["load_before"] >= 0 and row["load_after"] >= 0


def test_bench_ingest_threads(shape_dir, tmp_path):
    """With a reader that takes `threads`: the second figure per shape, identical dicts, and MISMATCH
    (exit 1) when threads > 1 returns another dict."""
    script = threaded_checkout(tmp_path) / "benchmarks" / "bench_ingest.py"
    args = ("--shapes", "fork", "--dir", shape_dir, "--repeat", 1, "--threads", 2)
    out = harness(script, *args).stdout
    assert re.search(rf"^fork +2 +{NUM} +{NUM} +{NUM}x  identical$", out, re.M), out
    assert re.search(rf"^target one file on 2 cores >= 1.7x one core: fork {NUM}x on 2 threads: (met|NOT met)$",
                     out, re.M), out
    assert json.loads(out.splitlines()[-1])["shapes"][0]["difference"] is None
    bad = harness(script, *args, check=1, env={"FAKE_MISMATCH": "1"}).stdout
    assert re.search(r"^fork .*MISMATCH: by_process=False\['events'\]\[0\]\['samples'\]: differs$", bad, re.M), bad
    assert "MISMATCH: threads=2 returned a different dict from threads=1 for fork" in bad


def test_bench_ingest_curve(shape_dir):
    """--curve --file: a row per thread count with the machine's ceiling beside it (N one-thread reads
    at once), its figures consistent with each other, and the CPUs named as cores; no perf needed."""
    out = harness(ROOT / "benchmarks" / "bench_ingest.py", "--curve", "--file", shape_dir / "fork-a.perf.data",
                  "--kallsyms", shape_dir / "kallsyms", "--curve-threads", "1,2", "--repeat", 1,
                  env={"PATH": os.path.dirname(sys.executable)}).stdout
    assert re.search(rf"{SAMPLES} samples\);.* \d+ CPUs on \d+ cores \(\d+(\.\d+)? threads? a core\); load", out), out
    rows = {}
    for n, ident in ((1, r"\(the reference\)"), (2, "identical")):
        m = re.search(rf"^ +{n} +({NUM}) +{NUM} +({NUM})x +{NUM} +{NUM} +{NUM} +{NUM} +{NUM} +\d+ +({NUM}) +({NUM})x "
                      rf"+({NUM})  {ident}$", out, re.M)
        assert m, (n, out)
        rows[n] = [float(x) for x in m.groups()]
    best1, _, at_once1, ceiling1, _ = rows[1]
    best2, up2, at_once2, ceiling2, of2 = rows[2]
    assert at_once1 == best1 and ceiling1 == 1.0                        # one read alone is its own ceiling
    # from the printed figures, each rounded (to 0.0005 s, 0.005): the ceiling is 2 reads' time against one's
    assert 2 * (best1 - 5e-4) / (at_once2 + 5e-4) - 5e-3 <= ceiling2 <= 2 * (best1 + 5e-4) / (at_once2 - 5e-4) + 5e-3
    assert (up2 - 5e-3) / (ceiling2 + 5e-3) - 5e-3 <= of2 <= (up2 + 5e-3) / (ceiling2 - 5e-3) + 5e-3, out


def test_bench_ingest_file(shape_dir):
    out = harness(ROOT / "benchmarks" / "bench_ingest.py", "--file", shape_dir / "fork-a.perf.data",
                  "--kallsyms", shape_dir / "kallsyms", "--repeat", 1).stdout
    assert f"{SAMPLES} samples" in out.splitlines()[0]
    for row in ("native ingest (native.read_perf_data)", "ingest.perfdata.load (native + Profile)",
                "native ingest, by_process=True", "ingest.perfdata.load(by_process=True)",
                "perf report --stdio --sort sym -g none --no-children", "perf script > /dev/null",
                "cat perf.data > /dev/null (page cache)"):
        assert re.search(rf"^{re.escape(row)} +{NUM} +{NUM} +{NUM} +{NUM}$", out, re.M), (row, out)
    assert "(call graph)" not in out                   # only with --full
    assert re.search(rf"^two copies of the file, ingest.perfdata.load: {NUM} s one after the other", out, re.M), out


def test_bench_diff_shapes(shape_dir, tmp_path):
    p = harness(ROOT / "benchmarks" / "bench_diff.py", "--shapes", "fork", "--dir", shape_dir, "--repeat", 1,
                "--replicates", 2, "--before", before_checkout(tmp_path))
    out = p.stdout
    for name in ("kperfdiff diff --children", "perf diff", "before: kperfdiff diff --children",
                 "kperfdiff diff --children -j 1", "kperfdiff diff --children, 2 a side", "before: 2 a side"):
        assert re.search(rf"^fork +{re.escape(name)} +{NUM} +{NUM} +{NUM} +{NUM}$", out, re.M), (name, out)
    assert re.search(rf"^target fork: kperfdiff diff --children at most 0.4x perf diff: {NUM}x \(median\), "
                     rf"(met|NOT met); under 150 MB: \d+ MB, (met|NOT met); ", out, re.M), out
    shape = json.loads(out.splitlines()[-1])["shapes"][0]
    assert shape["samples"] == [SAMPLES, SAMPLES]
    assert all(run["rss_kb"] > 0 and len(run["seconds"]) == 1 for run in shape["runs"].values())


@pytest.mark.parametrize("script,args", [
    ("bench_ingest.py", ["--shapes", "fork,nope"]),
    ("bench_diff.py", ["--shapes", "nope"]),
    ("bench_diff.py", ["--detail", "nope"]),
    ("bench_ingest.py", ["--file", "missing.perf.data", "--kallsyms", "missing"]),
])
def test_bad_arguments(script, args, tmp_path):
    p = harness(ROOT / "benchmarks" / script, *args, "--dir", tmp_path, check=1)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_bench_ingest_curve_before(shape_dir, tmp_path):
    """--curve --before: the other checkout's read at each N in the same rounds, its switches, and
    its time over this one's."""
    out = harness(ROOT / "benchmarks" / "bench_ingest.py", "--curve", "--file", shape_dir / "fork-a.perf.data",
                  "--kallsyms", shape_dir / "kallsyms", "--curve-threads", "1", "--repeat", 1,
                  "--before", before_checkout(tmp_path)).stdout
    assert re.search(r"before s +vcsw +gain  dict vs threads=1$", out, re.M), out
    m = re.search(rf"^ +1 +({NUM}) .* ({NUM}) +\d+ +({NUM})x  \(the reference\)$", out, re.M)
    assert m, out
    best, before, gain = (float(x) for x in m.groups())
    assert (before - 5e-4) / (best + 5e-4) - 5e-3 <= gain <= (before + 5e-4) / (best - 5e-4) + 5e-3, out


KIT = ROOT / "benchmarks" / "many_cores_kit.py"


def packed_kit(shape_dir: Path, tmp_path: Path) -> Path:
    kit = tmp_path / "kit"
    p = harness(KIT, "pack", "--kit", kit, "--file", shape_dir / "fork-a.perf.data", "--kallsyms",
                shape_dir / "kallsyms", "--before", before_checkout(tmp_path))
    assert re.search(rf"^kit {re.escape(str(kit))}: {NUM} MB recording, {SAMPLES} samples, \d+ user-space files, "
                     rf"5 pieces, {NUM} MiB to carry$", p.stdout, re.M), p.stdout
    assert "under 70 MB" in p.stdout                      # a small file is packed, and said to be small
    return kit


def test_many_cores_kit_packs_and_runs(shape_dir, tmp_path):
    """The 16-core kit: packed here from a recording, its kallsyms and another checkout's module, then
    run as the device machine runs it (a Python with no venv packages, no perf on the PATH): the
    curve with the before module, the curve with fresh threads, the timing lines, and the summary."""
    kit = packed_kit(shape_dir, tmp_path)
    manifest = json.loads((kit / "manifest.json").read_text())
    assert manifest["recording"] == {"name": "fork-a.perf.data", "bytes": PLAIN.stat().st_size,
                                     "samples": SAMPLES, "user_files": manifest["recording"]["user_files"],
                                     "meets_70mb": False}
    assert sorted(manifest["pieces"]) == ["before.abi3.so", "kallsyms.xz", "native.abi3.so",
                                          "recording.perf.data.xz", "symfs.tar.xz"]
    out = tmp_path / "out"
    p = harness(KIT, "run", "--kit", kit, "--out", out, "--quick",
                env={"PATH": os.path.dirname(sys.executable)})
    curve = (out / "curve.txt").read_text()
    assert re.search(r"^ +2 +.* identical$", curve, re.M) and "before s" in curve, curve
    assert re.search(r"^ +2 +.* identical$", (out / "curve-fresh-threads.txt").read_text(), re.M)
    assert "kperfdiff timing:" in (out / "timing-1.txt").read_text()
    assert "CPU model: " in (out / "facts.txt").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["best_s"]) == ["1", "2"] and summary["met"] is False
    assert summary["speedup"]["1"] == 1.0 and json.loads(p.stdout.splitlines()[-1]) == summary


def test_many_cores_kit_refuses_a_damaged_kit(shape_dir, tmp_path):
    """A piece changed after packing, a kit without its manifest or with one of another shape, a symfs
    that would write outside its folder: each one sentence and exit 1, nothing measured."""
    kit = packed_kit(shape_dir, tmp_path)
    sabotage = tmp_path / "bad"
    shutil.copytree(kit, sabotage)
    with (sabotage / "kallsyms.xz").open("r+b") as f:
        f.seek(10)
        f.write(b"\0\1\2")
    (sabotage / "empty").mkdir()
    evil = tmp_path / "evil.tar.xz"
    with tarfile.open(evil, "w:xz") as tar:
        info = tarfile.TarInfo("../outside")
        info.size = 0
        tar.addfile(info)
    manifest = json.loads((kit / "manifest.json").read_text())
    manifest["pieces"]["symfs.tar.xz"] = {"bytes": evil.stat().st_size,
                                          "sha256": hashlib.sha256(evil.read_bytes()).hexdigest()}
    (tmp_path / "evil").mkdir()
    for name in manifest["pieces"]:
        shutil.copy(kit / name, tmp_path / "evil" / name)
    shutil.copy(evil, tmp_path / "evil" / "symfs.tar.xz")
    (tmp_path / "evil" / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "manifest.json").write_text('{"pieces": ["native.abi3.so"], "recording": {}}')
    for where, said in ((sabotage, "kallsyms.xz is missing or not the file the manifest names"),
                        (sabotage / "empty", "not a kit (no readable manifest.json"),
                        (tmp_path / "listed", "not a kit (no readable manifest.json"),
                        (tmp_path / "evil", "../outside is not a plain file of a symfs")):
        p = harness(KIT, "run", "--kit", where, "--out", tmp_path / "out", "--quick", check=1)
        assert said in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "outside").exists() and not (tmp_path / "out" / "curve.txt").exists()
