"""The kernel's mapping phase at boot (boot.map_*): the counting plugin's boot window and call
windows (targets/guest/insn_count.c), their files, and the linear-map study's arithmetic; real
deterministic arm64 boots of Debian's kernel count paging_init (map_mem) at two memory sizes."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.studies import linearmap
from kperfdiff.targets import boot
from kperfdiff.targets.guest import counting
from kperfdiff.targets.qemu import QemuTarget

need_arm = pytest.mark.skipif(not (shutil.which("qemu-system-aarch64") and shutil.which("aarch64-linux-gnu-gcc")),
                              reason="qemu-system-aarch64 or the aarch64 cross compiler is not installed")


def test_plugin_builds_with_the_boot_and_call_windows():
    so = counting.plugin()
    syms = subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True).stdout
    assert " qemu_plugin_install" in syms and "qemu_plugin_insn_vaddr" in syms and "clock_gettime" in syms


def test_tlb_maintenance_encodings_match_the_plugin():
    """The masks the plugin uses, on instructions assembled by the cross assembler."""
    src = open(counting.PLUGIN_SOURCE).read()
    assert "0xFFF8F000u) == 0xD5088000u" in src and "0xFFFFF0FFu) == 0xD503309Fu" in src and "0xD5033FDFu" in src
    words = {"tlbi vaae1is, x0": None, "tlbi vmalle1": None, "tlbi vale1is, x3": None, "dsb ishst": None,
             "dsb sy": None, "isb": None, "bl .+8": None, "nop": None}
    if not shutil.which("aarch64-linux-gnu-as"):
        pytest.skip("no aarch64 assembler")
    import tempfile, pathlib
    d = pathlib.Path(tempfile.mkdtemp())
    (d / "a.s").write_text("".join(f"{w}\n" for w in words))
    subprocess.run(["aarch64-linux-gnu-as", "-o", str(d / "a.o"), str(d / "a.s")], check=True)
    subprocess.run(["aarch64-linux-gnu-objcopy", "-O", "binary", "-j", ".text", str(d / "a.o"), str(d / "a.bin")],
                   check=True)
    data = (d / "a.bin").read_bytes()
    ws = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
    tlbi = [(w & 0xFFF8F000) == 0xD5088000 for w in ws]
    dsb = [(w & 0xFFFFF0FF) == 0xD503309F for w in ws]
    isb = [w == 0xD5033FDF for w in ws]
    bl = [(w & 0xFC000000) == 0x94000000 for w in ws]
    assert tlbi == [True, True, True, False, False, False, False, False]
    assert dsb == [False, False, False, True, True, False, False, False]
    assert isb == [False] * 5 + [True, False, False]
    assert bl == [False] * 6 + [True, False]
    off = ((ws[6] & 0x03FFFFFF) << 38)
    off = (off - (1 << 64) if off >> 63 else off) >> 36      # the plugin's sign extension of imm26 * 4
    assert off == 8


def test_window_files_with_tlb_columns(tmp_path):
    w = tmp_path / "insn-call.ffff800009399dec.0"
    w.write_text("# call ffff800009399dec return ffff800009394000 host_ns 2500000\n"
                 "ffff800009399dec 100 0 2 1\nffff80000803a630 900 7 40 30\n40201000 5 0 0 0\n400b54 3 0 0 0\n")
    assert counting.window_header(w) == {"call": "ffff800009399dec", "return": "ffff800009394000",
                                         "host_ns": "2500000"}
    rows = counting.read_counts(w)
    assert rows[1] == (0xffff80000803a630, 900, 7, 40, 30)
    assert counting.read_window(w)[0] == (0xffff800009399dec, 100)
    ks = tmp_path / "kallsyms"
    ks.write_text("ffff800008010000 T _stext\nffff80000803a630 t __create_pgd_mapping_locked\n"
                  "ffff80000803ad64 t __create_pgd_mapping\nffff800009399dec T paging_init\n"
                  "ffff80000939a3fc T fixmap_remap_fdt\n")
    fm = counting.FunctionMap(ks)
    per = counting.per_function(rows, fm)
    assert per == {"paging_init": [100, 0, 2, 1], "__create_pgd_mapping_locked": [900, 7, 40, 30],
                   "[early]": [5, 0, 0, 0], "[user]": [3, 0, 0, 0]}
    assert [p.name for p in counting.call_windows(tmp_path, 0xffff800009399dec)] == [w.name]
    w.write_text("ffff 1 2 3\n")
    with pytest.raises(InputError, match="line 1"):
        counting.read_counts(w)
    assert "call=ffff800009399dec" in counting.boot_args(tmp_path, [0xffff800009399dec])
    with pytest.raises(InputError):
        counting.boot_args(tmp_path, [1, 2, 3, 4, 5])


def test_growth_per_gb_and_layout():
    assert linearmap.slope_per_gb([(1, 10.0), (4, 40.0), (16, 160.0)]) == pytest.approx(10.0)
    assert linearmap.slope_per_gb([(1, 10.0)]) != linearmap.slope_per_gb([(1, 10.0)])    # nan

    class V:
        def __init__(self, label, target):
            self.label, self.target = label, target

    class E:
        variants = [V("a", "qemu:arm64,kernel=6.1,mem=16G"), V("b", "qemu:arm64,kernel=6.1,mem=1G"),
                    V("c", "qemu:arm64,kernel=6.12,mem=1G")]
    kernels, mems, by = linearmap.layout(E())
    assert kernels == ["6.1", "6.12"] and mems == ["1G", "16G"] and by[("6.12", "1G")] == "c"


@need_arm
def test_mapping_phase_counted_in_a_deterministic_boot():
    """One counted boot at 1 GB (a few seconds): paging_init's window, its TLB maintenance, the boot window."""
    with QemuTarget("qemu:arm64") as t:
        ms = {m.benchmark: m for m in boot.measure_mapping(t, ["1G"], boots=1)}
    assert {m.status for m in ms.values()} == {"ok"}, [m.reason for m in ms.values()]
    insns = ms["boot.map_insns"].summary["median"]
    assert 1e6 < insns < ms["boot.to_init_insns"].summary["median"]
    assert ms["boot.map_tlbi"].summary["median"] > 0 and ms["boot.map_dsb"].summary["median"] > 0
    info = ms["boot.map_insns"].info[0]
    assert "__create_pgd_mapping_locked" in info["top_insns"] and info["rodata_full_default"] == "y"


@pytest.mark.slow
@need_arm
def test_mapping_phase_grows_with_memory():
    """map_mem builds the linear map page by page (rodata=full): 4 GB costs about four times 1 GB."""
    with QemuTarget("qemu:arm64") as t:
        ms = boot.measure_mapping(t, ["1G", "4G"], boots=2)
    got = {(m.benchmark, m.params["mem"]): m for m in ms}
    one, four = got[("boot.map_insns", "1G")], got[("boot.map_insns", "4G")]
    assert one.raw[0][3] == one.raw[1][3]          # deterministic: two boots count alike
    assert 3.0 < four.summary["median"] / one.summary["median"] < 4.5
    assert got[("boot.map_tlbi", "4G")].summary["median"] > 3 * got[("boot.map_tlbi", "1G")].summary["median"]
