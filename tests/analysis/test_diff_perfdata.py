"""`kperfdiff diff` on perf.data (native reader), checked against `perf report`
of the same files run at test time."""
from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import DATA, ROOT, run_cli

PD = DATA / "perfdata"
TEXT = DATA / "text"

pytestmark = pytest.mark.skipif(
    shutil.which("perf") is None or not (PD / "plain.perf.data").exists()
    or not (ROOT / "src" / "kperfdiff" / "ingest" / "perfdata.py").exists(),
    reason="needs perf and the native perf.data reader with its fixtures")


@pytest.fixture(scope="module")
def kallsyms(tmp_path_factory):
    out = tmp_path_factory.mktemp("ks") / "kallsyms"
    out.write_bytes(gzip.decompress((PD / "kallsyms.gz").read_bytes()))
    return out


def perf_report(path: Path, kallsyms: Path) -> tuple[dict[str, float], str]:
    p = subprocess.run(["perf", "report", "-i", str(path), "--stdio", "--no-children", "--sort", "sym",
                        "-g", "none", "--kallsyms", str(kallsyms)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out: dict[str, float] = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^\s+(\d+\.\d+)%\s+(?:\d+\.\d+%\s+)*\[k\]\s+(\S+)\s*$", line)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0.0) + float(m.group(1))
    return out, p.stdout


def test_perfdata_diff_matches_perf_report(kallsyms):
    import json
    ra, _ = perf_report(PD / "plain.perf.data", kallsyms)
    rb, _ = perf_report(PD / "group.perf.data", kallsyms)
    p = run_cli("diff", PD / "plain.perf.data", PD / "group.perf.data", "--kallsyms", kallsyms,
                "--format", "json", "--top", "0", "--no-equivalence", "--no-normalise", check=0)
    doc = json.loads(p.stdout)
    assert doc["common"]
    for row in doc["common"]:
        # perf report leaves out a function with no self samples: its share is 0
        assert abs(row["value_a"] - ra.get(row["symbol"], 0.0)) <= 0.006, row
        assert abs(row["value_b"] - rb.get(row["symbol"], 0.0)) <= 0.006, row
    common = {r["symbol"] for r in doc["common"]}
    assert set(ra) & set(rb) <= common <= set(ra) | set(rb)
    only = {r["symbol"] for r in doc["only_a"] + doc["only_b"]}
    assert not only & common and only | common == set(ra) | set(rb)


def test_perfdata_vs_text_of_the_same_recording(tmp_path, kallsyms):
    """A perf.data and the perf script text made from it diff to zero on kernel functions."""
    script = tmp_path / "plain.script"
    with open(script, "w") as f:
        subprocess.run(["perf", "script", "-i", str(PD / "plain.perf.data"), "--kallsyms", str(kallsyms)],
                       stdout=f, stderr=subprocess.DEVNULL, check=True, timeout=120)
    p = run_cli("diff", PD / "plain.perf.data", script, "--kallsyms", kallsyms, "--children", "--top", "0",
                "--format", "json", check=0)
    import json
    doc = json.loads(p.stdout)
    assert doc["common"] and not doc["only_a"] and not doc["only_b"]
    assert max(r["diff"] for r in doc["common"]) < 1e-6


def test_real_arm64_vs_x86_equivalence():
    """A real arm64 profile (QEMU guest, tests/data/perfdata/arm64) against a real x86_64 one:
    page fault entry and clear page compare under their roles."""
    import json
    arm = PD / "arm64" / "fault.anon.4k.perf.data"
    if not arm.exists():
        pytest.skip("no arm64 fixture")
    p = run_cli("diff", arm, TEXT / "forkexec.script", "--labels", "ARM,x86", "--format", "json", "--top", "0",
                check=0)
    doc = json.loads(p.stdout)
    rows = {r["symbol"]: r for r in doc["common"]}
    pf = rows["[page fault entry]"]
    assert "el0_da" in pf["members_a"] and "exc_page_fault" in pf["members_b"]
    assert pf["value_a"] > pf["value_b"]
    cp = rows["clear_page"]   # the *_erms rule: one row, both names shown
    assert cp["names_a"] == ["clear_page"] and cp["names_b"] == ["clear_page_erms"]  # __pi_clear_page
    only = {r["symbol"] for r in doc["only_a"] + doc["only_b"]}
    assert not only & {"el0_da", "do_mem_abort", "exc_page_fault", "clear_page", "clear_page_erms"}
    text = run_cli("diff", arm, TEXT / "forkexec.script", "--labels", "ARM,x86", check=0).stdout
    lines = text.splitlines()
    assert lines[6].split(None, 4) == [f"{pf['value_a']:.2f}", f"{pf['value_b']:.2f}", f"{pf['delta']:+.2f}",
                                f"{pf['ratio']:.2f}x", "[page fault entry]"]
    members = {m["name"]: m["value"] for m in pf["member_values_a"]}
    assert sum(members.values()) == pytest.approx(pf["value_a"])
    assert f"{members['el0_da']:.2f}" in next(ln for ln in lines[7:] if ln.endswith("    el0_da"))
