"""The native ELF and symbol-map readers (kperfdiff.native.elf_info / elf_functions / symbol_map),
kperfdiff's one parser of each format, seen through kperfdiff.targets.guest.elf and place.inputs.load_sizes:
what they read agrees with readelf and with the symbol-map grammar; damaged files are one sentence;
a bounded run of the size-file mutation fuzzer (fuzz/fuzzing.py, fuzz_sizes).

The ELF fixtures (tests/data/elf, see its README) cover both classes, both byte orders, a Thumb
object, a shared library, a dynamic arm64 program and a stripped one."""
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import DATA, ROOT, assert_one_sentence_error, run_cli
from fuzzing import fuzz_sizes, map_reading
from kperfdiff import native
from kperfdiff.core.errors import InputError
from kperfdiff.place import inputs
from kperfdiff.targets.guest import elf

ELF = DATA / "elf"
FIXTURES = ["t64.o", "t32.o", "t-s390x.o", "t-thumbeb.o", "libt.so.1", "hello-arm64", "hello-arm64-stripped"]
need_readelf = pytest.mark.skipif(not shutil.which("readelf"), reason="needs readelf (binutils)")
# readelf -h's Machine line -> the names of kperfdiff.targets.guest.elf
READELF_MACHINES = {"Advanced Micro Devices X86-64": "x86_64", "AArch64": "aarch64", "Intel 80386": "i386",
                    "ARM": "arm", "IBM S/390": "s390", "RISC-V": "riscv64", "PowerPC64": "ppc64"}


def readelf(*args) -> str:
    return subprocess.run(["readelf", "-W", *map(str, args)], capture_output=True, text=True, check=True,
                          env={**os.environ, "LC_ALL": "C"}).stdout


def system_files() -> list[Path]:
    """/bin/sh and the C library it loads (found through readelf, not through the reader under test)."""
    sh = Path("/bin/sh").resolve()
    out = [sh]
    libc = re.search(r"\[(libc\.so[^\]]*)\]", readelf("-d", sh))
    if libc:
        for d in ("/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
                  "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
            p = Path(d) / libc.group(1)
            if p.exists():
                out.append(p.resolve())
                break
    return out


@need_readelf
@pytest.mark.parametrize("path", [ELF / f for f in FIXTURES] + (system_files() if shutil.which("readelf") else []),
                         ids=lambda p: p.name)
def test_elf_info_agrees_with_readelf(path):
    e = elf.read(path, (".text", ".interp", ".comment"))
    head = readelf("-h", path)
    assert e.bits == (64 if "ELF64" in re.search(r"Class:\s+(\S+)", head).group(1) else 32)
    machine = re.search(r"Machine:\s+(.+)", head).group(1).strip()
    assert e.machine == READELF_MACHINES[machine]
    interp = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", readelf("-l", path))
    assert e.interp == (interp.group(1) if interp else None)
    assert e.needed == re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", path))
    # sections: the sizes readelf -S gives (NOBITS sections have no bytes in the file)
    for name, typ, size in re.findall(r"\]\s+(\.text|\.interp|\.comment)\s+(\S+)\s+\S+\s+\S+\s+(\S+)",
                                      readelf("-S", path)):
        assert len(e.sections[name]) == (0 if typ == "NOBITS" else int(size, 16)), name
    assert set(e.sections) <= {".text", ".interp", ".comment"}
    if e.interp:
        assert e.sections[".interp"].rstrip(b"\0").decode() == e.interp


@need_readelf
@pytest.mark.parametrize("name", [f for f in FIXTURES if "stripped" not in f])
def test_elf_function_sizes_agree_with_readelf(name):
    path = ELF / name
    want_sizes: dict[str, int] = {}
    want_addrs: dict[str, int] = {}
    table = None
    for line in readelf("-s", path).splitlines():
        m = re.match(r"Symbol table '([^']+)'", line)
        if m:
            table = m.group(1)
            continue
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name, of .symtab (not .dynsym)
        if table == ".symtab" and len(f) == 8 and f[3] == "FUNC" and int(f[2], 0):
            size, value = int(f[2], 0), int(f[1], 16) & ~1
            want_sizes[f[7]] = want_sizes.get(f[7], 0) + size
            want_addrs[f[7]] = min(value, want_addrs.get(f[7], value))
    st = inputs.load_sizes(path)
    assert not st.approximate and st.kind == "vmlinux"
    assert want_sizes and st.sizes == want_sizes
    assert st.addrs == want_addrs
    if name.endswith(".o"):
        assert st.excluded == {"boot_only": "__init"}      # in .init.text


def test_thumb_bit_is_cleared_and_big_endian_is_read():
    st = inputs.load_sizes(ELF / "t-thumbeb.o")
    assert st.addrs == {"small": 0, "big": 4, "boot_only": 0}       # readelf says 1, 5, 1
    assert st.sizes == {"small": 4, "big": 12, "boot_only": 6}
    st = inputs.load_sizes(ELF / "t-s390x.o")
    assert st.sizes == {"small": 6, "big": 12, "boot_only": 6}


def test_stripped_elf_is_one_sentence():
    with pytest.raises(InputError, match=r"has no symbol table \(stripped\); use an unstripped vmlinux") as e:
        inputs.load_sizes(ELF / "hello-arm64-stripped")
    assert "\n" not in str(e.value)
    assert elf.read(ELF / "hello-arm64-stripped").needed == ["libm.so.6", "libc.so.6"]


def _damaged() -> list[tuple[str, bytes]]:
    t64 = (ELF / "t64.o").read_bytes()
    arm = (ELF / "hello-arm64").read_bytes()
    out = [("empty", b""), ("magic only", b"\x7fELF"), ("garbage", b"\x7fELF" + random.Random(1).randbytes(300)),
           ("not elf", b"MZ\x90\0" + bytes(100)),
           ("class 0", t64[:4] + b"\0" + t64[5:]), ("class 3", t64[:4] + b"\3" + t64[5:]),
           ("wrong class", t64[:4] + b"\1" + t64[5:]), ("byte order 3", t64[:5] + b"\3" + t64[6:]),
           ("wrong byte order", t64[:5] + b"\2" + t64[6:]), ("version 0", t64[:6] + b"\0" + t64[7:])]
    for n in (5, 16, 40, 63, 64, len(t64) // 2, len(t64) - 1):
        out.append((f"t64.o cut at {n}", t64[:n]))
    for n in (64, 120, 400, 600, len(arm) // 2, len(arm) - 1):
        out.append((f"hello-arm64 cut at {n}", arm[:n]))
    huge = bytearray(t64)
    huge[40:48] = (1 << 63).to_bytes(8, "little")                     # e_shoff far outside the file
    out.append(("shoff 2^63", bytes(huge)))
    many = bytearray(arm)
    many[56:58] = (0xffff).to_bytes(2, "little")                      # e_phnum 65535
    out.append(("phnum 65535", bytes(many)))
    return out


@pytest.mark.parametrize("name, data", _damaged(), ids=[n for n, _ in _damaged()])
def test_damaged_elf_is_one_sentence(tmp_path, name, data):
    f = tmp_path / "bad.elf"
    f.write_bytes(data)
    for call in (lambda: elf.read(f, (".text", ".modinfo")), lambda: elf.parse(data), lambda: inputs.load_sizes(f)):
        try:
            call()
        except InputError as e:
            msg = str(e)
            assert msg and "\n" not in msg and "internal error" not in msg, msg
    assert elf.modinfo(data) == {}


def test_damaged_elf_messages(tmp_path):
    t64 = (ELF / "t64.o").read_bytes()
    with pytest.raises(InputError, match=r"^not an ELF file$"):
        elf.parse(b"")
    with pytest.raises(InputError, match=r"^not a readable ELF file \(unknown class or byte order\)$"):
        elf.parse(t64[:4] + b"\3" + t64[5:])
    f = tmp_path / "cut.o"
    f.write_bytes(t64[:100])
    with pytest.raises(InputError, match=r"cut.o is not a readable ELF file \(section headers out of range\)$"):
        elf.read(f, (".text",))
    with pytest.raises(InputError, match=r"cut.o is a damaged ELF file \(section headers out of range\)$"):
        inputs.load_sizes(f)
    with pytest.raises(ValueError, match=r"^truncated header$"):
        native.elf_info(t64[:40], [])
    with pytest.raises(ValueError, match=r"^no symbol table \(stripped\)$"):
        native.elf_functions((ELF / "hello-arm64-stripped").read_bytes())


def test_cli_refuses_a_damaged_vmlinux_in_one_sentence(tmp_path):
    bad = tmp_path / "vmlinux"
    bad.write_bytes((ELF / "t64.o").read_bytes()[:300])
    p = run_cli("place", "plan", DATA / "place" / "forkexec.folded", "--sizes", bad,
                "--hw", ROOT / "examples/place/arm926-tcm.toml", "--capacity", "8K")
    assert_one_sentence_error(p)
    assert "is a damaged ELF file (section headers out of range)" in p.stderr


def test_modinfo_of_a_module_and_sections_of_an_object():
    t64 = (ELF / "t64.o").read_bytes()
    e = elf.parse(t64, (".init.text", ".nothere"))
    assert e.machine == "x86_64" and e.bits == 64 and e.interp is None and e.needed == []
    assert set(e.sections) == {".init.text"} and len(e.sections[".init.text"]) == 4
    assert elf.modinfo(t64) == {}                                      # no .modinfo: nothing


# -- symbol maps -----------------------------------------------------------------------------------

def test_symbol_map_follows_the_line_grammar():
    """Random lines made of the characters the grammar cares about: the native reader (the one
    kallsyms/System.map parser, shared with the profile reader) and the grammar stated in Python read
    the same entries and count the same bad lines."""
    rng = random.Random(5)
    pieces = ["ffffffff81000000", "c0008000", "abc", "12345", "0" * 17, "DEAD", " ", "  ", "\t", "\xa0", "\u2003",
              "\x1c", "\x1f", "\x85", "\u2028", "\x0b", "\r", "T", "t", "w", "?", "1", "_", "name", "é", "[ext4]",
              "[", "]", "[]", "[a]b]", "\ufffd", "+"]
    lines = []
    for _ in range(4000):
        lines.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 9))))
        if rng.random() < 0.5:                                         # and many nearly good lines
            lines.append(rng.choice(["ffffffff81000000", "c000", "12345678"]) + rng.choice(pieces[6:12]) +
                         rng.choice("TtW?x1") + rng.choice(pieces[6:12]) + rng.choice(["f", "a]", "[m]", "é"]) +
                         rng.choice(["", " [m]", "\t[ext4]", " x", " [m] ", " []", "\x1f"]))
    data = "\n".join(lines).encode("utf-8") + b"\xff\xfe\n\xc3"
    got = native.symbol_map(data)
    want = map_reading(data)
    assert (got["addrs"], got["types"], got["names"], got["modules"], got["bad"]) == want
    assert len(want[0]) > 500 and want[4] > 1000


def test_symbol_map_lines():
    got = native.symbol_map(b"ffffffff81000000 T _stext\r\nffffffffc0a01000 t ext4_fn\t[ext4]\n\n  \nnot a line\n")
    assert got == {"addrs": [0xffffffff81000000, 0xffffffffc0a01000], "types": "Tt", "names": ["_stext", "ext4_fn"],
                   "modules": True, "bad": 1}


def test_kallsyms_with_modules():
    st = inputs.load_sizes(DATA / "place" / "modules.kallsyms")
    assert st.kind == "kallsyms" and st.approximate
    assert st.sizes["ext4_map_blocks"] == 0x4c0 and st.sizes["virtio_queue_rq"] == 0x500
    assert "ext4_fs_type" not in st.sizes and "virtblk_wq" not in st.sizes        # data, bss
    assert st.excluded == {"__entry_text_start": "entry", "entry_SYSCALL_64": "entry"}


def test_no_struct_parsing_left_in_python():
    for f in ("src/kperfdiff/targets/guest/elf.py", "src/kperfdiff/place/inputs.py"):
        text = (ROOT / f).read_text()
        assert "import struct" not in text and "_MAP_LINE" not in text, f


# -- fuzzing -----------------------------------------------------------------------------------------

def test_fuzz_size_file_readers(tmp_path):
    """Executions and seed from KPD_FUZZ_SIZES_EXECS / KPD_FUZZ_SEED (CI: 4000, seed 1; ~2 s)."""
    n = int(os.environ.get("KPD_FUZZ_SIZES_EXECS", "4000"))
    seed = int(os.environ.get("KPD_FUZZ_SEED", "1"))
    counts, examples = fuzz_sizes(tmp_path, executions=n, seed=seed)
    print(f"size-file fuzz, seed {seed}: {dict(counts)}")
    assert sum(counts.values()) == n
    assert counts["ok"] > n // 10 and counts["error"] > n // 10        # the mutations reach the readers and hurt
    assert not counts["crash"] and not counts["wrong"], examples
