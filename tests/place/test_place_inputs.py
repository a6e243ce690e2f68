"""Size files, hardware models and groups; bad input is one sentence."""
import shutil
import subprocess

import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.place import inputs
from kperfdiff.place.model import build_problem
from kperfdiff.ingest.load import load
import support
from support import ROOT

DATA = support.DATA / "place"


def test_system_map_sizes_and_exclusions():
    st = inputs.load_sizes(DATA / "System.map")
    assert st.approximate and st.kind == "System.map"
    assert st.sizes["clear_page_erms"] == 16
    assert st.sizes["copy_process"] > 1000
    # two load_elf_binary (binfmt_elf and compat_binfmt_elf): sizes summed
    assert st.sizes["load_elf_binary"] > 0
    assert st.excluded["do_syscall_64"] == "noinstr"
    assert st.excluded["exc_page_fault"] == "noinstr"
    assert st.excluded["entry_SYSCALL_64_after_hwframe"] == "entry"
    assert "copy_process" not in st.excluded
    assert "approximate" in st.note()


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc to make a real ELF object")
def test_elf_symbol_sizes(tmp_path):
    src = tmp_path / "t.c"
    src.write_text("int small(int x){return x+1;}\n"
                   "int big(int *p,int n){int s=0;for(int i=0;i<n;i++)s+=p[i]*p[i]^i;return s;}\n")
    for flags, name in ((["-m64"], "t64.o"), (["-m32"], "t32.o")):
        obj = tmp_path / name
        r = subprocess.run(["gcc", "-O1", "-c", *flags, str(src), "-o", str(obj)], capture_output=True)
        if r.returncode:
            continue
        nm = subprocess.run(["nm", "-S", str(obj)], capture_output=True, text=True).stdout
        want = {p[3]: int(p[1], 16) for p in (l.split() for l in nm.splitlines()) if len(p) == 4}
        st = inputs.load_sizes(obj)
        assert not st.approximate and st.kind == "vmlinux"
        assert st.sizes == {k: v for k, v in want.items() if k in ("small", "big")}


def test_hw_examples_load():
    a = inputs.load_hw(ROOT / "examples/place/arm926-tcm.toml")
    assert (a.fast_size, a.line_size, a.t_fill, a.line_instr) == (16384, 32, 25.0, 8)
    b = inputs.load_hw(ROOT / "examples/place/modern-core.toml")
    assert b.fast_section == ".text.hot"


@pytest.mark.parametrize("text, words", [
    ("[icache\nsize = 1", "not valid TOML"),
    ("[icache]\nsize = -4", "icache.size"),
    ("[icache]\nlinesize = 32", "unknown key 'icache.linesize'"),
    ("[icache]\nsize = 1000\nline = 32\nways = 4", "multiple of line x ways"),
    ("[main_memory]\nline_fill_cycles = \"slow\"", "is not a number"),
])
def test_bad_hw_model(tmp_path, text, words):
    f = tmp_path / "hw.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=words) as e:
        inputs.load_hw(f)
    assert "\n" not in str(e.value)


def test_groups_shipped_match_real_names():
    groups, ex = inputs.load_groups()
    assert set(groups) >= {"fork", "exec", "exit", "schedule", "context_switch", "thread", "tlb", "vmalloc",
                           "buddy", "slub", "page_fault", "page_reclamation", "irq", "ramfs", "timer"}
    st = inputs.load_sizes(DATA / "System.map")
    assert "copy_process" in inputs.resolve_group(groups["fork"], st.sizes)
    assert "__schedule" in inputs.resolve_group(groups["schedule"], st.sizes)
    assert inputs.match_any("entry_SYSCALL_64_after_hwframe", ex)


def test_user_group_naming_unknown_function(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[groups.mine]\nfunctions = ["copy_process", "no_such_function_xyz"]\n')
    groups, _ = inputs.load_groups([f])
    st = inputs.load_sizes(DATA / "System.map")
    with pytest.raises(InputError, match="names 'no_such_function_xyz', which is not a function in the size file"):
        inputs.resolve_group(groups["mine"], st.sizes)


def test_malformed_group_file(tmp_path):
    f = tmp_path / "g.toml"
    f.write_text('[groups.mine]\nfunctions = "copy_process"\n')
    with pytest.raises(InputError, match="needs a non-empty 'functions' list"):
        inputs.load_groups([f])


def test_size_file_that_does_not_match_the_profile(tmp_path):
    other = tmp_path / "System.map"
    other.write_text("ffffffff81000000 T some_other_kernel\nffffffff81000100 T another_function\n"
                     "ffffffff81000200 T _etext\n")
    prof = load(DATA / "forkexec.folded")
    hw = inputs.load_hw(ROOT / "examples/place/arm926-tcm.toml")
    with pytest.raises(InputError, match=r"sizes only 0% of the kernel samples .* is it the System.map"):
        build_problem(prof, inputs.load_sizes(other), hw)


def test_zero_addresses_and_garbage(tmp_path):
    z = tmp_path / "kallsyms"
    z.write_text("0000000000000000 T a\n0000000000000000 T b\n")
    with pytest.raises(InputError, match="kptr_restrict"):
        inputs.load_sizes(z)
    g = tmp_path / "junk"
    g.write_text("hello world\nthis is not a map\n")
    with pytest.raises(InputError, match="not a System.map or kallsyms"):
        inputs.load_sizes(g)


def test_parse_bytes():
    assert inputs.parse_bytes("16K") == 16384
    assert inputs.parse_bytes("16KiB") == 16384
    assert inputs.parse_bytes("1M") == 1 << 20
    assert inputs.parse_bytes("0") == 0
    with pytest.raises(InputError):
        inputs.parse_bytes("lots")
