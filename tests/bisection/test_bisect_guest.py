"""`kperfdiff bisect --metric instructions` in a deterministic guest (QEMU TCG, -icount): a prebuilt
Debian kernel booted with each commit's command line; one commit among benign ones turns on
init_on_alloc=1 (zero every allocation). Exact kernel instructions per operation, one repetition
per probe: the bisection names that commit within ceil(log2 N) + 2 probes, verifies it against its
parent, and the ranking of culprit against parent puts the zeroing functions first."""
import json
import math
import shutil

import pytest

from support import run_cli
from support.bisect_repo import make_series
from kperfdiff.core.errors import UsageError
from kperfdiff.targets.qemu import parse_spec


def deterministic_arch() -> str:
    """x86_64 where the deterministic mode is offered for it, else arm64."""
    try:
        parse_spec("qemu:x86_64,deterministic")
        return "x86_64"
    except UsageError:
        return "arm64"


ARCH = deterministic_arch()
QEMU = {"x86_64": "qemu-system-x86_64", "arm64": "qemu-system-aarch64"}[ARCH]
need_guest = pytest.mark.skipif(not shutil.which(QEMU), reason=f"{QEMU} is not installed")
N = 8


@need_guest
@pytest.mark.long
def test_init_on_alloc_is_found_verified_and_explained(tmp_path, home):
    s = make_series(tmp_path / "repo", N, 5, good=["append=init_on_alloc=0"], bad=["append=init_on_alloc=1"],
                    benign={3: ["append=quiet"]})
    report = tmp_path / "bisect.html"
    r = run_cli("bisect", "--repo", s.path, "--good", s.commits[0], "--bad", s.commits[-1], "--bench", "proc.fork",
                "--target", f"qemu:{ARCH},deterministic", "--metric", "instructions", "--build", "./build.sh",
                "--no-progress",
                "--format", "json", "--report", report, timeout=1200)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["culprit"]["hash"] == s.culprit
    assert out["measured_probes"] <= math.ceil(math.log2(N)) + 2
    assert out["verified"] is True and out["verification"]["ratio"] > 1
    ranking = out["explanation"]["ranking"]
    top = [row["symbol"] for row in ranking["common"][:2]]
    assert all(("memset" in name or "clear_page" in name) for name in top), top
    page = report.read_text()
    assert s.culprit in page and "<svg" in page and "verified" in page
    print(f"{ARCH}: {out['measured_probes']} probes, {out['seconds']:.0f} s, ranking top {top}")
