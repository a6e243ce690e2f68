"""The study's method end to end on one machine: the same benchmark on an
emulated arm64 guest and an emulated x86_64 guest (same Debian kernel
version), profiled, then `kperfdiff diff` between them with equivalent
functions matched across the architectures."""
import json
import re
import shutil

import pytest

from support import run_cli

pytestmark = pytest.mark.skipif(not (shutil.which("qemu-system-aarch64") and shutil.which("qemu-system-x86_64")),
                                reason="qemu-system-arm and qemu-system-x86 are not installed (make setup)")

XARCH = """
name = "xarch-tiny"
benchmarks = ["fault.anon.4k"]
cores = [1]
reps = 1
intervals = 3
tiny = true
profile = true
baseline = "x86_64"

[[variant]]
label = "x86_64"
target = "qemu:x86_64"

[[variant]]
label = "arm64"
target = "qemu:arm64"
cmdline = "init_on_free=1"
"""


@pytest.mark.long
def test_xarch_experiment_and_diff(tmp_path, home):
    f = tmp_path / "xarch.toml"
    f.write_text(XARCH)
    p = run_cli("run", f, "--no-progress", "--format", "json", timeout=900, check=0)
    out = json.loads(p.stdout)
    variants = {v["label"]: v for v in out["variants"]}
    assert variants["arm64"]["emulated"] and variants["x86_64"]["emulated"]
    cell = out["comparisons"][0]["cells"][0]
    assert cell["base"] > 0 and cell["new"] > 0

    shown = run_cli("show", "xarch-tiny/arm64", check=0).stdout
    assert "EMULATED" in shown and "arm64" in shown and "init_on_free=1" in shown

    d = run_cli("diff", "xarch-tiny/arm64:fault.anon.4k", "xarch-tiny/x86_64:fault.anon.4k", "--top", "10",
                "--format", "json", check=0)
    j = json.loads(d.stdout)
    common = [r["symbol"] for r in j["common"]]
    roles = [s for s in common if s.startswith("[")]
    assert any(s.startswith("[page fault entry]") for s in roles), common
    assert any(s == "clear_page" for s in common), common     # clear_page_erms | __pi_clear_page
    text = run_cli("diff", "xarch-tiny/arm64:fault.anon.4k", "xarch-tiny/x86_64:fault.anon.4k", check=0).stdout
    assert "Common kernel functions: top 10 of " in text
    assert re.search(r"\n *arm64 +x86_64 +delta +B/A  symbol\n", text)
