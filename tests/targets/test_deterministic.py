"""Deterministic instruction profiles from emulated arm64 guests (QEMU TCG, -icount shift=0).

The emulated PMU counts instructions exactly but cannot attribute kernel samples, so kperfdiff
counts per function with its own QEMU plugin (targets/guest/insn_count.c) between marks the
workers set around their timed intervals, and the workers count their own instructions with
the emulated PMU. Fast tests cover the pieces without a guest; the guest test runs proc.fork
twice in separate boots and needs the two rankings to agree."""
from __future__ import annotations

import gzip
import ctypes
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import DATA, run_cli
from kperfdiff.bench import build
from kperfdiff.bench.worker import parse_output
from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
from kperfdiff.core.errors import InputError, UsageError
from kperfdiff.ingest.load import load
from kperfdiff.render import bench as render_bench
from kperfdiff.store import COUNTED_EVENT, Store, kernel_instructions_per_op
from kperfdiff.targets.guest import counting
from kperfdiff.targets.qemu import DETERMINISTIC_CMDLINE, DETERMINISTIC_PERIOD, QemuTarget, parse_spec

ARM_KALLSYMS = DATA / "perfdata" / "xarch" / "arm64" / "kallsyms.gz"
need_arm = pytest.mark.skipif(not (shutil.which("qemu-system-aarch64") and shutil.which("aarch64-linux-gnu-gcc")),
                              reason="qemu-system-aarch64 or the aarch64 cross compiler is not installed")


def test_plugin_builds_and_exports_the_plugin_abi():
    so = counting.plugin()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    assert " qemu_plugin_install" in syms and " qemu_plugin_version" in syms
    assert counting.plugin() == so       # cached


@pytest.fixture
def kallsyms(tmp_path):
    p = tmp_path / "kallsyms"
    p.write_bytes(gzip.decompress(ARM_KALLSYMS.read_bytes()))
    return p


def _addr(kallsyms, name: str) -> int:
    for line in kallsyms.read_text().splitlines():
        a, _, n = line.split()[:3]
        if n == name:
            return int(a, 16)
    raise KeyError(name)


def test_window_becomes_a_profile_of_functions(tmp_path, kallsyms):
    cp = _addr(kallsyms, "copy_page")
    hm = _addr(kallsyms, "handle_mm_fault")
    w = tmp_path / f"{counting.WINDOW_PREFIX}.0"
    w.write_text(f"{cp:x} 600\n{cp + 0x40:x} 400\n{hm + 8:x} 250\n400b54 50\n")
    out = tmp_path / "x.insn.folded"
    assert counting.window_profile(w, kallsyms, out) == 1300
    assert out.read_text() == "copy_page_[k] 1000\nhandle_mm_fault_[k] 250\n[user] 50\n"
    prof = load(out)
    shares = {s.name: w for s, w in zip(prof.symbols, prof.self_weight)}
    assert shares == {"copy_page": 1000, "handle_mm_fault": 250, "[user]": 50}
    assert {s.name for s in prof.symbols if s.kernel} == {"copy_page", "handle_mm_fault"}
    (tmp_path / f"{counting.WINDOW_PREFIX}.10").write_text("")
    (tmp_path / f"{counting.WINDOW_PREFIX}.2").write_text("")
    (tmp_path / f"{counting.WINDOW_PREFIX}.x").write_text("")
    assert [p.name.split(".")[-1] for p in counting.windows(tmp_path)] == ["0", "2", "10"]
    w.write_text("ffff 12\nnot a line\n")
    with pytest.raises(InputError, match="line 2"):
        counting.window_profile(w, kallsyms, out)


def test_worker_count_option_on_this_machine():
    """--count on a machine without hardware counters: the reason, and the operations counted."""
    binary = build.build_family("proc")
    p = subprocess.run([str(binary), "proc.fork", "--intervals", "2", "--min-batch-ns", "1000000", "--count"],
                       capture_output=True, text=True, timeout=120)
    out = parse_output(p.stdout, "proc.fork")
    assert not out.error, out.error
    assert int(out.info["counted_ops"]) == sum(ops for _, ops, _ in out.intervals)
    if "count_error" in out.info:
        assert "perf_event_open" in out.info["count_error"]
    else:
        assert int(out.info["instructions_kernel"]) > 0
    # the window marks are NOPs on arm64 and x86_64 (kpd_mark), which say they marked
    assert out.info.get("marked") == ("1" if os.uname().machine in ("x86_64", "aarch64") else None)


def test_plugin_recognises_the_arm64_and_x86_64_marks():
    """insn_count_mark: the plugin's decoding of the window marks from instruction bytes."""
    mark = ctypes.CDLL(str(counting.plugin()), mode=os.RTLD_LAZY).insn_count_mark   # QEMU is not here
    mark.argtypes, mark.restype = [ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int

    def of(data: bytes) -> int:
        return mark(data, len(data))
    assert of((0xd503201f | 0x70 << 5).to_bytes(4, "little")) == 1      # hint #0x70
    assert of((0xd503201f | 0x71 << 5).to_bytes(4, "little")) == 2      # hint #0x71
    assert of((0xd503201f).to_bytes(4, "little")) == 0                  # nop
    assert of(bytes.fromhex("660f1f84007044504b")) == 1                 # nopw 0x4b504470(%rax,%rax,1)
    assert of(bytes.fromhex("660f1f84007144504b")) == 2
    assert of(bytes.fromhex("660f1f840000000000")) == 0                 # the padding NOP compilers emit
    assert of(bytes.fromhex("660f1f84007244504b")) == 0
    assert of(bytes.fromhex("0f1f8400000000")) == 0
    # the worker's marks are those bytes (kpd.h), in the worker built for x86_64 guests
    binary = build.build_family("proc")
    if os.uname().machine == "x86_64":
        text = binary.read_bytes()
        assert bytes.fromhex("660f1f84007044504b") in text and bytes.fromhex("660f1f84007144504b") in text


def test_deterministic_x86_64_spec(tmp_path, home):
    """qemu:x86_64,deterministic with a kernel image of one's own and append= (a bisection's probe)."""
    (tmp_path / "bzImage").write_bytes(b"MZ")
    t = QemuTarget(f"qemu:x86_64,deterministic,kernel={tmp_path / 'bzImage'},append=init_on_alloc=0")
    assert t.count_instructions and t.perf_period == DETERMINISTIC_PERIOD and t.qs.cpus == 1
    line = t.cmdline()
    assert set(DETERMINISTIC_CMDLINE) <= set(line)
    assert line[-1] == "init_on_alloc=0"         # append= after the deterministic options
    argv = t.qemu_argv(Path("initrd"), Path("disk"), [], accel="tcg")
    assert argv[argv.index("-icount") + 1] == "shift=0,sleep=off,align=off" and "-seed" in argv
    # qboot, not SeaBIOS: SeaBIOS's disk requests complete at host-timed moments
    assert argv[argv.index("-bios") + 1] == "qboot.rom"
    with pytest.raises(UsageError, match="one vCPU"):
        parse_spec("qemu:x86_64,deterministic,cpus=2")
    assert parse_spec("qemu:x86_64,deterministic,cpus=1").cpus == 1
    p = run_cli("bench", "--target", "qemu:x86_64,deterministic,cpus=2", "--only", "proc.fork")
    assert p.returncode != 0 and "one vCPU" in p.stderr and "Traceback" not in p.stderr
    for other in ("qemu:x86_64", "qemu:arm64,deterministic"):
        o = QemuTarget(f"{other},kernel={tmp_path / 'bzImage'}")
        assert "-bios" not in o.qemu_argv(Path("initrd"), Path("disk"), [], accel="tcg")


def test_kernel_instructions_per_op_of_a_stored_result(tmp_path):
    folded = tmp_path / "a.insn.folded"
    folded.write_text("clear_page_erms_[k] 6000\ncopy_page_range_[k] 2000\n[user] 500\n")
    st = Store.open(tmp_path / "s.db")
    mid = st.add_machine({"arch": "x86_64", "cpu_model": "x", "cpus": 1, "kernel_release": "6.1",
                          "time_unit": "instructions (QEMU -icount shift=0)"})
    run = st.start_run(label="r", machine_id=mid)
    rid = st.add_result(run.id, benchmark="proc.fork", params={}, copies=1, status="ok", reason=None,
                        unit="ns/op", better="lower", summary={"n": 1, "median": 5.0}, raw=[(0, 0, 0, 5.0, 40, 200)],
                        info=[{"rep": 0, "copy": 0, "counted_ops": "40"}])
    assert kernel_instructions_per_op(st, rid) is None        # no counted profile
    st.add_profile(run_id=run.id, result_id=rid, benchmark="proc.fork", rep=0, path=str(folded), kallsyms=None,
                   event="cpu-clock", samples=None, cpu_time_ns=10, ops=2, meta={"copies": 1})
    assert kernel_instructions_per_op(st, rid) is None        # sampled profiles do not count
    for _ in range(2):
        st.add_profile(run_id=run.id, result_id=rid, benchmark="proc.fork", rep=0, path=str(folded),
                       kallsyms=None, event=COUNTED_EVENT, samples=None, cpu_time_ns=8500, ops=40,
                       meta={"copies": 1})
    assert kernel_instructions_per_op(st, rid) == pytest.approx(200.0)    # (6000 + 2000) x 2 / 80; not [user]
    st.finish_run(run.id, "complete")
    text = run_cli("--store", str(tmp_path / "s.db"), "show", "r").stdout
    assert "kernel instructions per operation" in text and "proc.fork -P 1: 200.0" in text
    st.add_profile(run_id=run.id, result_id=rid, benchmark="proc.fork", rep=1, path=str(folded), kallsyms=None,
                   event=COUNTED_EVENT, samples=None, cpu_time_ns=8500, ops=None, meta={"copies": 1})
    assert kernel_instructions_per_op(st, rid) is None        # a window without its operations


def test_deterministic_spec_sets_counting_sampling_and_cmdline():
    t = QemuTarget("qemu:arm64,cpus=1,deterministic")
    assert t.count_instructions and t.perf_period == DETERMINISTIC_PERIOD
    assert set(DETERMINISTIC_CMDLINE) <= set(t.cmdline())
    plain = QemuTarget("qemu:arm64")
    assert not plain.count_instructions and plain.perf_period is None
    assert not set(DETERMINISTIC_CMDLINE) & set(plain.cmdline())
    # one vCPU unless asked; a fixed seed and a virtual-clock RTC, so two boots run alike
    assert parse_spec("qemu:arm64,deterministic").cpus == 1 and parse_spec("qemu:arm64,deterministic,cpus=2").cpus == 2
    assert parse_spec("qemu:arm64").cpus == 2
    argv = t.qemu_argv(Path("initrd"), Path("disk"), [], accel="tcg")
    assert argv[argv.index("-icount") + 1] == "shift=0,sleep=off,align=off" and "-seed" in argv
    assert "-icount" not in plain.qemu_argv(Path("initrd"), Path("disk"), [], accel="tcg")


def test_counted_note():
    info = [{"rep": 0, "copy": 0, "instructions_kernel": "1000000", "instructions_user": "3000", "counted_ops": "10"},
            {"rep": 1, "copy": 0, "instructions_kernel": "1010000", "instructions_user": "3000", "counted_ops": "10"}]
    note = render_bench.counted_note(info)
    assert "kernel 100,500, user 300" in note and "spread 1.00% over 2 processes" in note
    assert render_bench.counted_note([{"count_error": "perf_event_open of kernel instructions: No such file"}]) \
        .startswith("instructions not counted: perf_event_open")
    assert render_bench.counted_note([{"rep": 0}]) == ""


def test_store_picks_sampled_or_counted_profiles(tmp_path):
    folded = tmp_path / "a.folded"
    folded.write_text("copy_page_[k] 10\n")
    st = Store.open(tmp_path / "s.db")
    mid = st.add_machine({"arch": "arm64", "cpu_model": "x", "cpus": 1, "kernel_release": "6.1",
                          "time_unit": "instructions (QEMU -icount shift=0)"})
    run = st.start_run(label="r", machine_id=mid)
    st.add_profile(run_id=run.id, result_id=None, benchmark="proc.fork", rep=0, path=str(folded), kallsyms=None,
                   event=COUNTED_EVENT, samples=None, cpu_time_ns=10, ops=2, meta={"copies": 1})
    st.finish_run(run.id, "complete")
    (paths, meta), = st.profile_refs("r:proc.fork")
    assert meta["counted"] and meta["time_unit"].startswith("instructions")
    assert st.profile_refs("r:proc.fork", COUNTED_EVENT)[0][1]["counted"]
    st.add_profile(run_id=run.id, result_id=None, benchmark="proc.fork", rep=0, path=str(folded), kallsyms=None,
                   event="cpu-clock", samples=None, cpu_time_ns=10, ops=2, meta={"copies": 1})
    assert not st.profile_refs("r:proc.fork")[0][1]["counted"]          # sampled ones first
    assert [p.event for p in st.primary_profiles(run.id)] == ["cpu-clock"]   # (compare, report)
    assert st.profile_refs("r:proc.fork", COUNTED_EVENT)[0][1]["counted"]
    run2 = st.start_run(label="plain", machine_id=mid)
    st.add_profile(run_id=run2.id, result_id=None, benchmark="proc.fork", rep=0, path=str(folded), kallsyms=None,
                   event="cpu-clock", samples=None, cpu_time_ns=10, ops=2, meta={"copies": 1})
    with pytest.raises(InputError, match="no exact instruction counts"):
        st.profile_refs("plain:proc.fork", COUNTED_EVENT)


def test_diff_in_instructions_per_operation(tmp_path):
    a, b = tmp_path / "a.folded", tmp_path / "b.folded"
    a.write_text("copy_page_[k] 600\nmemset_[k] 400\n")
    b.write_text("copy_page_[k] 500\nmemset_[k] 500\n")
    pa, pb = load(a), load(b)
    for p in (pa, pb):
        p.meta.update({"time_unit": "instructions (QEMU -icount shift=0)", "cpu_time_ns": 1000, "ops": 10})
    res = diff_profiles([pa], [pb], DiffOptions(per_op=True))
    assert res.unit == "instructions/op"
    rows = {r.symbol: r for r in res.common}
    assert (rows["copy_page"].value_a, rows["copy_page"].value_b) == pytest.approx((60.0, 50.0))
    assert any("not real time" in w for w in res.warnings)


@need_arm
def test_two_deterministic_runs_rank_alike(tmp_path, home):
    """proc.fork twice on qemu:arm64,deterministic, each in its own boot: the exact instruction
    counts per function rank the same, and their totals agree."""
    for label in ("d1", "d2"):
        p = run_cli("bench", "--target", "qemu:arm64,deterministic", "--only", "proc.fork",
                    "--intervals", "40", "--label", label, "--no-progress", timeout=900, check=0)
        assert "instructions per operation, counted in the timed intervals" in p.stdout
    doc = json.loads(run_cli("diff", "d1:proc.fork", "d2:proc.fork", "--per-op", "--top", "0", "--format", "json",
                             check=0).stdout)
    assert doc["unit"] == "instructions/op" and doc["sides"]["a"]["events"] == ["instructions"]
    rows = doc["common"] + doc["only_a"] + doc["only_b"]
    rank_a = [r["symbol"] for r in sorted(rows, key=lambda r: (-r["value_a"], r["symbol"]))]
    rank_b = [r["symbol"] for r in sorted(rows, key=lambda r: (-r["value_b"], r["symbol"]))]
    same = next((i for i, (x, y) in enumerate(zip(rank_a, rank_b)) if x != y), len(rank_a))
    total_a = sum(r["value_a"] for r in rows)
    total_b = sum(r["value_b"] for r in rows)
    print(f"deterministic proc.fork: {total_a:,.1f} and {total_b:,.1f} instructions/op; the first {same} of "
          f"{len(rank_a)} functions rank alike: {rank_a[:5]}")
    # Measured: all functions alike and equal totals. Allow a near-tie to swap far down the list.
    assert same >= 50, (rank_a[:same + 2], rank_b[:same + 2])
    assert abs(total_a - total_b) / total_a < 1e-4, (total_a, total_b)
    text = run_cli("diff", "d1:proc.fork", "d2:proc.fork", "--per-op", check=0)
    assert "emulated instructions and cycles are not real time" in text.stderr


need_x86 = pytest.mark.skipif(not shutil.which("qemu-system-x86_64"), reason="qemu-system-x86_64 is not installed")


@need_x86
def test_x86_64_deterministic_guest_counts_kernel_functions(tmp_path, home):
    """proc.fork twice on qemu:x86_64,deterministic (about 10 s a boot here): the plugin sees the
    x86_64 marks, the exact instruction profile is stored and ranks kernel functions per operation,
    and the store gives kernel instructions per operation, the same in both boots."""
    got = []
    for label in ("x1", "x2"):
        p = run_cli("bench", "--target", "qemu:x86_64,deterministic", "--only", "proc.fork",
                    "--label", label, "--no-progress", timeout=600, check=0)
        assert p.returncode == 0, p.stderr
        text = run_cli("show", label).stdout
        assert "kernel instructions per operation" in text, text
        st = Store.open(home / "kperfdiff.db", create=False)
        run = st.find_run(label)
        (res,) = st.results(run.id)
        profs = [q for q in st.profiles(run.id) if q.event == COUNTED_EVENT]
        assert len(profs) == 1 and profs[0].ops == int(res.info[0]["counted_ops"]) > 0
        frames = dict(line.rsplit(" ", 1) for line in Path(profs[0].path).read_text().splitlines())
        assert sum(f.endswith("_[k]") for f in frames) > 100 and "copy_process_[k]" in frames
        got.append(kernel_instructions_per_op(st, res.id))
    doc = json.loads(run_cli("diff", "x1:proc.fork", "x2:proc.fork", "--per-op", "--top", "5", "--format", "json",
                             check=0).stdout)
    assert doc["unit"] == "instructions/op" and doc["sides"]["a"]["events"] == ["instructions"]
    print(f"x86_64 deterministic proc.fork: {got[0]:,.1f} and {got[1]:,.1f} kernel instructions/op")
    assert all(g and g > 10_000 for g in got)
    assert got[0] == got[1], got         # measured: identical (with SeaBIOS, 0.04-0.5% apart)
