"""Kernel symbol sources checked against the recording (ingest/symcheck.py): a kallsyms or System.map
of another kernel build is refused in one sentence naming both, unless --kallsyms-unchecked; every
diff output starts with a line per side saying which symbols were used and how they matched.

Fixtures (tests/data/perfdata/README.md): plain.perf.data and group.perf.data were recorded in the
boot kallsyms.gz was copied from; tiny.perf.data in another boot of another build (6.18.44-fc-v657:
its kernel map is 0x1209988 bytes long, kallsyms.gz's _text.._etext 0x1276508)."""
from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from support import DATA, assert_one_sentence_error, run_cli
from kperfdiff.core.errors import InputError
from kperfdiff.ingest import perfdata
from kperfdiff.targets.machine import UNKNOWN, kernel_build_id
from kperfdiff.schemas import schema_path

PD = DATA / "perfdata"
TINY, PLAIN, GROUP, KS = PD / "tiny.perf.data", PD / "plain.perf.data", PD / "group.perf.data", PD / "kallsyms.gz"
PLAIN_BID = "abf9ec0ec5946600c90641cf5db998472fac410b"     # perf buildid-list of plain.perf.data's kernel
TINY_BID = "48dc540c8b76393804ca8088dbfa7d42911a9444"


def alone(tmp_path: Path, *files: Path) -> list[Path]:
    """Copies of files in a folder of their own (no kallsyms beside them unless copied too)."""
    out = []
    for f in files:
        shutil.copy(f, tmp_path / f.name)
        out.append(tmp_path / f.name)
    return out


def test_kallsyms_of_another_build_is_refused():
    # before: the folder's kallsyms.gz was used for tiny.perf.data and ranked virtqueue_add_sgs 21%
    p = run_cli("diff", TINY, PLAIN, check=2)
    assert_one_sentence_error(p)
    err = p.stderr.strip()
    assert p.stdout == ""
    for word in ("kallsyms.gz", "tiny.perf.data", "6.18.44-fc-v657", "48dc540c8b76", "0x1209988", "0x1276508",
                 "--kallsyms-unchecked"):
        assert word in err, err
    # named explicitly, it is refused too, for that side only
    p = run_cli("diff", TINY, PLAIN, "--kallsyms-a", KS, check=2)
    assert "tiny.perf.data" in p.stderr and "virtqueue_add_sgs" not in p.stdout


def test_kallsyms_of_the_recorded_kernel_is_used_and_said_how():
    p = run_cli("diff", PLAIN, GROUP, check=0)
    lines = p.stdout.splitlines()
    assert lines[0] == ("A (plain): plain.perf.data, cpu-clock, 3,652 samples, 77% kernel, 23% user, symbols: kallsyms.gz "
                        "(kernel map = _text.._etext, 100% of kernel samples in a symbol)")
    assert lines[1].startswith("B (group): group.perf.data, cpu-clock, 2,439 samples, 77% kernel, 23% user, symbols: kallsyms.gz "
                               "(kernel map = _text.._etext")
    assert lines[3].startswith("Common kernel functions: top 10 of ")
    assert "read_zero" in p.stdout


def test_json_has_the_side_lines_and_validates():
    p = run_cli("diff", PLAIN, GROUP, "--format", "json", check=0)
    doc = json.loads(p.stdout)
    schema = json.loads(schema_path("diff").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(doc))
    assert list(doc)[:3] == ["version", "tool", "header"]
    assert doc["header"][0].startswith("A (plain): plain.perf.data, cpu-clock, 3,652 samples, 77% kernel")
    assert doc["header"][1] == doc["sides"]["b"]["line"]
    sym = doc["sides"]["a"]["symbols"][0]
    assert sym["matched"] == "kernel map" and sym["source"].endswith("kallsyms.gz") and sym["found"] == "beside the file"
    assert sym["kernel_samples"] == sym["in_symbol"] > 2000
    assert 0.7 < doc["sides"]["a"]["kernel_share"][0] < 0.8


def test_unchecked_overrides_and_says_so():
    p = run_cli("diff", TINY, PLAIN, "--kallsyms-unchecked", check=0)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("A (tiny): tiny.perf.data, cpu-clock, 71 samples, 70% kernel, 30% user, symbols: kallsyms.gz "
                               "(unchecked: --kallsyms-unchecked"), lines[0]
    assert "unchecked" in lines[1]
    doc = json.loads(run_cli("diff", TINY, PLAIN, "--kallsyms-unchecked", "--format", "json", check=0).stdout)
    assert doc["sides"]["a"]["symbols"][0]["matched"] == "unchecked"
    # export reads the same way
    p = run_cli("export", TINY, "--to", "folded", "-o", "-", check=2)
    assert "tiny.perf.data" in p.stderr
    run_cli("export", TINY, "--to", "folded", "-o", "-", "--kallsyms-unchecked", check=0)


def test_without_kallsyms_the_line_says_none(tmp_path):
    (tiny,) = alone(tmp_path, TINY)
    # a HOME of its own: a `perf record` on this machine puts its kernel's kallsyms in ~/.debug, where
    # the reader would find them by build id (tiny.perf.data was recorded here)
    home = tmp_path / "home"
    home.mkdir()
    p = run_cli("diff", tiny, PLAIN, check=0, env={"HOME": str(home), "PERF_BUILDID_DIR": ""})
    assert p.stdout.splitlines()[0] == ("A (tiny): tiny.perf.data, cpu-clock, 71 samples, 70% kernel, 30% user, "
                                        "symbols: none, kernel addresses unresolved")


@pytest.mark.parametrize("recorded, ok", [(PLAIN_BID, True), (TINY_BID, False)])
def test_build_id_beside_a_kallsyms_decides(tmp_path, recorded, ok):
    plain, ks = alone(tmp_path, PLAIN, KS)
    (tmp_path / "kallsyms.buildid").write_text(recorded + "\n")
    if ok:
        p = perfdata.load(plain)
        assert p.meta["symbols"]["matched"] == "build id"
        assert p.meta["symbols"]["how"].startswith("build id abf9ec0ec594 match")
    else:
        # the kernel map agrees, but the build id says it is another build: refused
        with pytest.raises(InputError, match=r"its build id is 48dc540c8b76"):
            perfdata.load(plain)


def test_perf_build_id_cache_is_a_build_id_match(tmp_path):
    (plain,) = alone(tmp_path, PLAIN)
    cache = tmp_path / "debug" / "[kernel.kallsyms]" / PLAIN_BID
    cache.mkdir(parents=True)
    (cache / "kallsyms").write_bytes(gzip.decompress(KS.read_bytes()))
    p = run_cli("diff", plain, plain, "--format", "json", env={"PERF_BUILDID_DIR": str(tmp_path / "debug")}, check=0)
    sym = json.loads(p.stdout)["sides"]["a"]["symbols"][0]
    assert sym["matched"] == "build id" and sym["found"] == "perf's build-id cache"


def test_system_map_is_checked_too(tmp_path):
    text = gzip.decompress(KS.read_bytes()).decode()
    smap = tmp_path / "System.map"
    smap.write_text("".join(ln.split("\t")[0] + "\n" for ln in text.splitlines()))
    doc = json.loads(run_cli("diff", PLAIN, GROUP, "--kallsyms", smap, "--format", "json", check=0).stdout)
    assert doc["sides"]["a"]["symbols"][0]["matched"] == "kernel map"
    assert doc["header"][0].endswith("symbols: System.map (kernel map = _text.._etext, 100% of kernel samples in a symbol)")
    p = run_cli("diff", TINY, PLAIN, "--kallsyms", smap, check=2)
    assert "System.map" in p.stderr and "tiny.perf.data" in p.stderr


def _arm64_kallsyms(tmp_path: Path, edit) -> Path:
    """The arm64 fixture and its kallsyms, edited line by line, in a folder of their own."""
    alone(tmp_path, PD / "arm64" / "fault.anon.4k.perf.data")
    lines = gzip.decompress((PD / "arm64" / "kallsyms.gz").read_bytes()).decode().splitlines()
    (tmp_path / "kallsyms").write_text("".join(f"{ln}\n" for ln in edit(lines)))
    return tmp_path / "fault.anon.4k.perf.data"


def test_arm64_fixture_checks_its_modules(tmp_path):
    # perf records arm64's kernel map to the end of memory (no length to compare); the module maps are compared
    p = perfdata.load(PD / "arm64" / "fault.anon.4k.perf.data")
    assert p.meta["symbols"]["how"] == ("no kernel map length to compare, 6 module maps, "
                                        "100% of kernel samples in a symbol")


def test_module_loaded_elsewhere_is_refused(tmp_path):
    def move_virtio(lines):
        for ln in lines:
            if ln.endswith("[virtio]"):
                addr, rest = ln.split(" ", 1)
                ln = f"{int(addr, 16) + 0x100000:016x} {rest}"
            yield ln
    f = _arm64_kallsyms(tmp_path, move_virtio)
    with pytest.raises(InputError, match=r"module virtio was loaded at 0xffffd6660538d000\.\.0xffffd66605393000 when "
                                         r"recorded but kallsyms has its symbols at 0xffffd6660548d000"):
        perfdata.load(f)
    assert perfdata.load(f, kallsyms_unchecked=True).meta["symbols"]["matched"] == "unchecked"


def test_kernel_samples_outside_every_symbol_are_refused(tmp_path):
    # no map length to compare (arm64) and no modules: only the kernel samples' landing tells
    def first_page(lines):
        base = next(int(ln.split()[0], 16) for ln in lines if ln.endswith(" _stext"))
        return [ln for ln in lines if "[" not in ln and base <= int(ln.split()[0], 16) < base + 0x1000]
    f = _arm64_kallsyms(tmp_path, first_page)
    with pytest.raises(InputError, match=r"only \d+ of the 1515 kernel samples land in one of its symbols"):
        perfdata.load(f)


def test_record_keeps_the_kernel_build_id_with_its_kallsyms(tmp_path):
    out = tmp_path / "rec"
    run_cli("record", "-o", out, "-F", "999", "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=4k", "count=20000",
            check=0)
    bid = kernel_build_id()
    bid = None if bid == UNKNOWN else bid
    assert (out / "kallsyms.buildid").exists() == bool(bid)
    p = run_cli("diff", out / "perf.perf.data", out / "perf.perf.data", "--format", "json", check=0)
    sym = json.loads(p.stdout)["sides"]["a"]["symbols"][0]
    assert sym["source"] == str(out / "kallsyms")
    if bid:       # /sys/kernel/notes readable: the build id perf recorded is the one kept
        assert sym["matched"] == "build id" and bid[:12] in sym["how"]
    else:         # hidden (some CI containers): the kernel map decides
        assert sym["matched"] == "kernel map"


def test_kernel_build_id_reads_elf_notes(tmp_path):
    notes = tmp_path / "notes"
    # a Xen note first (another name and type), then the GNU build id
    xen = (4).to_bytes(4, "little") + (4).to_bytes(4, "little") + (6).to_bytes(4, "little") + b"Xen\0" + b"\1\2\3\4"
    gnu = (4).to_bytes(4, "little") + (20).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"GNU\0" + bytes(range(20))
    notes.write_bytes(xen + gnu)
    assert kernel_build_id(str(notes)) == bytes(range(20)).hex()
    notes.write_bytes(b"")
    assert kernel_build_id(str(notes)) == UNKNOWN
    assert kernel_build_id(str(tmp_path / "missing")) == UNKNOWN


VMLINUX_S = """
        .text
        .globl _text, _stext, read_zero, do_syscall_64
_text:
_stext:
        .type read_zero, @function
read_zero:
        .skip 0x100
        .size read_zero, 0x100
        .type do_syscall_64, @function
do_syscall_64:
        .skip 0x100
        .size do_syscall_64, 0x100
"""


def small_vmlinux(tmp_path: Path, build_id: str | None) -> Path:
    """A small ELF with two functions, _text.._etext as long as plain.perf.data's kernel map
    (0x1276508 bytes) and the given GNU build id (or none)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed")
    src, out = tmp_path / "k.S", tmp_path / f"vmlinux-{build_id or 'none'}"
    src.write_text(VMLINUX_S)
    subprocess.run([gcc, "-nostdlib", "-static", "-Wl,-e,_text", f"-Wl,--build-id={'0x' + build_id if build_id else 'none'}",
                    "-Wl,--defsym=_etext=_text+0x1276508", "-o", str(out), str(src)], check=True)
    return out


def test_vmlinux_build_id_note_decides(tmp_path):
    vml = small_vmlinux(tmp_path, PLAIN_BID)
    doc = json.loads(run_cli("diff", PLAIN, GROUP, "--kallsyms", vml, "--format", "json", check=0).stdout)
    assert doc["header"][0].startswith(f"A (plain): plain.perf.data, cpu-clock, 3,652 samples, 77% kernel, 23% user, "
                                       f"symbols: {vml.name} (build id abf9ec0ec594 match")
    assert doc["sides"]["b"]["symbols"][0]["matched"] == "build id"
    p = run_cli("diff", TINY, PLAIN, "--kallsyms", vml, check=2)
    assert_one_sentence_error(p)
    assert f"{vml} is not the kernel tiny.perf.data (kernel 6.18.44-fc-v657, build id 48dc540c8b76) was recorded on: " \
           "its build id is abf9ec0ec594" in p.stderr


def test_vmlinux_without_build_id_whose_samples_miss_its_symbols_is_refused(tmp_path):
    # its _text.._etext matches plain's kernel map, but almost no kernel sample lands in its two functions
    vml = small_vmlinux(tmp_path, None)
    p = run_cli("diff", PLAIN, GROUP, "--kallsyms", vml, check=2)
    assert_one_sentence_error(p)
    assert re.search(r"is probably not the kernel plain\.perf\.data .* only \d+ of the 2826 kernel samples land in one "
                     r"of its symbols", p.stderr), p.stderr
    p = run_cli("diff", PLAIN, GROUP, "--kallsyms", vml, "--kallsyms-unchecked", check=0)
    assert p.stdout.startswith(f"A (plain): plain.perf.data, cpu-clock, 3,652 samples, 77% kernel, 23% user, symbols: {vml.name} "
                               f"(unchecked: --kallsyms-unchecked, 0% of kernel samples in a symbol)")


def test_a_targets_kallsyms_keeps_its_build_id_in_the_store_folder(tmp_path):
    from kperfdiff.targets import _keep_kallsyms
    work, store = tmp_path / "work", tmp_path / "run-1"
    work.mkdir()
    (work / "kallsyms").write_bytes(gzip.decompress(KS.read_bytes()))
    (work / "kallsyms.buildid").write_text(PLAIN_BID + "\n")
    kept = _keep_kallsyms(work / "kallsyms", store)
    assert kept == store / "kallsyms" and (store / "kallsyms.buildid").read_text() == PLAIN_BID + "\n"
    (plain,) = alone(store, PLAIN)
    assert perfdata.load(plain, kallsyms=kept).meta["symbols"]["matched"] == "build id"
    # another boot's kallsyms is kept under its own name, with its own build id
    (work / "kallsyms").write_text("ffffffff81000000 T _text\n")
    (work / "kallsyms.buildid").write_text(TINY_BID + "\n")
    other = _keep_kallsyms(work / "kallsyms", store)
    assert other.name.startswith("kallsyms.") and other.with_name(other.name + ".buildid").read_text() == TINY_BID + "\n"


def test_a_targets_job_leaves_its_kernels_build_id_beside_its_kallsyms(tmp_path):
    # a guest's or board's job leaves its kernel notes in facts/notes (as od prints them) and /proc/kallsyms;
    # read back on this machine, the kallsyms gets the build id beside it, so the run folder's copy
    # (_keep_kallsyms) is matched by build id, as a kallsyms kperfdiff record snapshots here is
    import struct
    from kperfdiff.targets import _keep_kallsyms
    from kperfdiff.targets.base import Invocation, read_results
    out = tmp_path / "out"
    (out / "facts").mkdir(parents=True)
    (out / "i0").mkdir()
    (out / "kallsyms").write_bytes(gzip.decompress(KS.read_bytes()))
    notes = tmp_path / "notes"
    notes.write_bytes(struct.pack("<III", 4, 20, 3) + b"GNU\0" + bytes.fromhex(PLAIN_BID))
    (out / "facts" / "notes").write_text(subprocess.run(["od", "-An", "-v", "-tx1", str(notes)], capture_output=True,
                                                        text=True, check=True).stdout)
    (out / "i0" / "status").write_text("copy 0 exit 0\n")
    shutil.copy(PLAIN, out / "i0" / "prof.c0.perf.data")
    (r,) = read_results([Invocation(["kpd-x"], profile="prof")], out)
    kept = _keep_kallsyms(r.files["kallsyms"], tmp_path / "run-1")
    assert kept.with_name("kallsyms.buildid").read_text() == PLAIN_BID + "\n"
    (plain,) = alone(tmp_path, PLAIN)
    assert perfdata.load(plain, kallsyms=kept).meta["symbols"]["matched"] == "build id"
