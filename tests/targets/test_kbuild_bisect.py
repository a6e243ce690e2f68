"""A real kernel for the bisection: Debian's linux-source-6.1 as a git series with a culprit
(tests/support/kernel_tree.py), built for the x86_64 guest with targets/kbuild.py and booted in
``qemu:x86_64,kernel=PATH`` (no modules: the guest's drivers are built in). Run by make test-bisect
(KPERFDIFF_KERNEL_TREE keeps the tree and its build outputs between runs); prints the build and
boot times it measures.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kperfdiff.place.inputs import load_sizes
from kperfdiff.targets import kbuild
from support import run_cli
from support.kernel_tree import SOURCE, kernel_tree

pytestmark = [pytest.mark.slow, pytest.mark.bisect,
              pytest.mark.skipif(not SOURCE.is_file() or shutil.which("qemu-system-x86_64") is None,
                                 reason=f"{SOURCE} (Debian's linux-source-6.1) or qemu-system-x86_64 is missing: "
                                        f"make test-bisect installs them")]
CULPRIT_AT = 11


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    cache = Path(os.environ.get("KPERFDIFF_KERNEL_TREE") or tmp_path_factory.mktemp("kernel-tree"))
    t0 = time.monotonic()
    tree = kernel_tree(cache, culprit_at=CULPRIT_AT)
    print(f"\nkernel tree: {tree.repo}, series of {len(tree.commits)} commits ready in "
          f"{time.monotonic() - t0:.0f} s")
    return tree


def _checkout(repo: Path, rev: str) -> None:
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", rev], check=True)


def _fork_once(kernel: Path, store: Path) -> tuple[dict, float]:
    """proc.fork once, profiled, in the x86_64 guest booted with ``kernel``: its result and the wall time."""
    t0 = time.monotonic()
    p = run_cli("--store", str(store), "bench", "--target", f"qemu:x86_64,kernel={kernel}", "--only", "proc.fork",
                "--reps", "1", "--profile", "--format", "json", "--no-progress", timeout=1800)
    seconds = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    (r,) = [r for r in doc["results"] if r["benchmark"] == "proc.fork"]
    # the System.map beside the image is kept with the run's profiles, byte for byte
    (kept,) = Path(doc["run"]["artefact_dir"]).rglob("System.map")
    assert kept.read_bytes() == (kernel.parent / "System.map").read_bytes()
    return r, seconds


def test_the_base_and_the_culprit_build_in_place_and_boot(series, tmp_path):
    repo = series.repo
    progress = print
    _checkout(repo, series.base)
    base = kbuild.build_kernel(repo, "x86_64", out=tmp_path / "base", progress=progress)
    assert base.release.startswith("6.1.") and base.image.name == "bzImage" and base.image_bytes > 1 << 20
    assert base.system_map.read_text().count(" copy_process\n") == 1
    _checkout(repo, series.culprit)
    culprit = kbuild.build_kernel(repo, "x86_64", out=tmp_path / "culprit", progress=progress)
    assert culprit.incremental
    if not base.incremental:
        assert culprit.seconds < base.seconds / 3
    assert culprit.release != base.release, "the release names the commit (LOCALVERSION_AUTO)"
    # the culprit's work is inline: the function it touched grows, in the copied vmlinux's ELF symbols
    grown = load_sizes(culprit.vmlinux).sizes[series.function] - load_sizes(base.vmlinux).sizes[series.function]
    assert grown > 0
    print(f"{series.function}: {grown} bytes more in the culprit's vmlinux")

    for name, k in (("base", base), ("culprit", culprit)):
        r, seconds = _fork_once(k.image, tmp_path / "k.db")
        assert r["status"] == "ok", r
        print(f"{name}: {k.release}, {'incremental' if k.incremental else 'full'} build {k.seconds:.0f} s, "
              f"bzImage {k.image_bytes / 1e6:.2f} MB; boot + proc.fork once, profiled, {seconds:.0f} s: "
              f"{r['centre']:.0f} {r['unit']} (one emulated repetition: time, not the culprit's proof)")


def test_bisect_names_explains_and_verifies_the_culprit_with_exact_counts(series, tmp_path):
    """kperfdiff bisect over the 16 commits: each probe built in place (incremental), booted in a
    deterministic x86_64 guest, proc.fork's kernel instructions per operation counted exactly; it
    names the culprit, verifies it against its parent, and the ranking's first row is the function
    the culprit touched."""
    import math
    t0 = time.monotonic()
    report = tmp_path / "bisect.html"
    p = run_cli("--store", str(tmp_path / "b.db"), "bisect", "--repo", series.repo, "--good", series.base,
                "--bad", series.commits[-1], "--bench", "proc.fork", "--target", "qemu:x86_64,deterministic",
                "--metric", "instructions", "--report", report, "--format", "json", "--no-progress", timeout=5400)
    seconds = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["culprit"]["hash"] == series.culprit
    assert out["verified"] is True
    assert out["measured_probes"] <= math.ceil(math.log2(len(series.commits))) + 2
    first = out["explanation"]["ranking"]["common"][0]
    assert first["symbol"] == series.function, out["explanation"]["ranking"]["common"][:3]
    assert series.culprit in report.read_text()
    print(f"bisection of {len(series.commits)} commits: culprit {series.culprit[:12]} found with "
          f"{out['measured_probes']} probes, verified ({(out['verification']['ratio'] - 1) * 100:+.2f}% against its "
          f"parent), first row {first['symbol']} {first['value_a']:.0f} -> {first['value_b']:.0f} instructions/op; "
          f"wall time of the whole bisection {seconds:.0f} s")
