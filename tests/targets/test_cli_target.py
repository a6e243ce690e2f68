"""`kperfdiff target check` and `kperfdiff target boot` against a real QEMU guest."""
import shutil

import pytest

from support import assert_one_sentence_error, run_cli
from schemas.test_schemas import validate

needs_qemu = pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="qemu-system-x86 is not installed")


@needs_qemu
def test_check_prints_guest_facts(home):
    j = validate("target check", run_cli("target", "check", "qemu:x86_64", "--format", "json", check=0,
                                         timeout=300).stdout)
    f = j["facts"]
    assert f["arch"] == "x86_64" and f["emulated"] is True and f["kernel_release"]
    assert f["virtualisation"] in ("tcg", "kvm")


@needs_qemu
def test_boot_timing_is_stored_like_any_result(home):
    p = run_cli("target", "boot", "qemu:x86_64", "--mem", "1G,2G", "--boots", "2", "--label", "boot x86",
                "--format", "json", "--no-progress", check=0, timeout=600)
    res = validate("target boot", p.stdout)["results"]
    names = {(r["benchmark"], r["params"]["mem"]) for r in res}
    assert names == {(b, m) for b in ("boot.init", "boot.kernel", "boot.pre_kernel", "boot.initcalls")
                     for m in ("1G", "2G")}
    for r in res:
        assert r["status"] == "ok" and r["unit"] == "ms/op" and len(r["intervals"]) == 2
        assert all(i["value"] >= 0 for i in r["intervals"])
    init = {r["params"]["mem"]: r["summary"]["median"] for r in res if r["benchmark"] == "boot.init"}
    kern = {r["params"]["mem"]: r["summary"]["median"] for r in res if r["benchmark"] == "boot.kernel"}
    assert all(init[m] > kern[m] > 0 for m in init)  # the host sees more than the kernel's own clock
    assert "slowest_initcalls" in next(r for r in res if r["benchmark"] == "boot.initcalls")["info"][0]
    shown = run_cli("show", "boot x86", check=0).stdout
    assert "boot.init [mem=2G]" in shown and "EMULATED" in shown


def test_boot_needs_a_guest(home):
    p = run_cli("target", "boot", "local")
    assert_one_sentence_error(p)
    assert "needs a guest target" in p.stderr
    assert_one_sentence_error(run_cli("target", "check", "nowhere:x"))
