"""boot.* benchmarks: how long a guest kernel takes to boot, and where the time goes.

Each boot of a QEMU guest (empty job, ``initcall_debug``, printk
timestamps, a large log buffer, quiet console) gives, with host
timestamps on the serial markers:

``boot.init``        host time from QEMU start to the guest's /init (ms)
``boot.kernel``      the guest kernel's own uptime when /init started (ms)
``boot.pre_kernel``  boot.init - boot.kernel: QEMU start, firmware, kernel
                     decompression and the early boot before the kernel's
                     clock runs, i.e. the interval before the first
                     timestamped message (ms)
``boot.initcalls``   the sum of every initcall's time from initcall_debug (ms)

With ``mapping`` (arm64 guests), the kernel's mapping phase, measured in
deterministic boots of the same kernel (``-icount shift=0``, one vCPU) by the
instruction-counting plugin (guest/insn_count.c), which counts everything the
CPU executes while ``paging_init`` is on the stack (from the ``bl paging_init``
in setup_arch to its return address) and the boot window from reset to /init:

``boot.map_insns``   instructions executed in paging_init and all it calls:
                     map_mem, which creates the linear map of all RAM (and in
                     kernels before 6.9 also map_kernel, which maps the kernel
                     image; later kernels do that in the early position-
                     independent code before start_kernel)
``boot.map_tlbi``    TLBI instructions executed there (TLB invalidations)
``boot.map_dsb``     DSB barriers executed there (ISB in the result's info)
``boot.map_host``    host time the mapping phase took under emulation (ms);
                     the plugin's own bookkeeping is outside it
``boot.to_init_insns``  instructions from reset to the first user instruction

These run early in setup_arch, before the arm64 timer, printk timestamps,
ftrace and initcall_debug exist, so only the emulator can see them.

across guest memory sizes (one cell per size, ``mem`` as its parameter),
several boots each; one value per boot, summarised with the same
statistics as every other benchmark. The slowest initcalls (median over the
boots) are kept in each result's info, so two kernels' boot costs compare
like any other result.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from kperfdiff.core import stats
from kperfdiff.bench.build import cache_dir
from kperfdiff.bench.catalogue import Benchmark
from kperfdiff.bench.measurement import Measurement
from kperfdiff.core.errors import BenchError
from kperfdiff.targets.guest import counting
from kperfdiff.targets.qemu import QemuTarget

UNIT = "ms/op"   # one op = one boot
BOOT_BENCHMARKS = [
    Benchmark("boot.init", "boot", "QEMU start to the guest's /init, host clock (one op = one boot)", UNIT,
              "lower", ("boot",)),
    Benchmark("boot.kernel", "boot", "guest kernel uptime when /init starts: the kernel's own boot", UNIT,
              "lower", ("boot",)),
    Benchmark("boot.pre_kernel", "boot", "QEMU start to the kernel clock's zero: firmware, decompression, "
              "early boot before the first timestamped message", UNIT, "lower", ("boot",)),
    Benchmark("boot.initcalls", "boot", "sum of initcall durations (initcall_debug)", UNIT, "lower", ("boot",)),
]
MAP_BENCHMARKS = [
    Benchmark("boot.map_insns", "boot", "instructions executed in paging_init and its callees (map_mem: the "
              "linear map of RAM), counted by the emulator (one op = one boot)", "insns/op", "lower", ("boot",)),
    Benchmark("boot.map_tlbi", "boot", "TLBI instructions executed in paging_init and its callees",
              "tlbi/op", "lower", ("boot",)),
    Benchmark("boot.map_dsb", "boot", "DSB barriers executed in paging_init and its callees",
              "dsb/op", "lower", ("boot",)),
    Benchmark("boot.map_host", "boot", "host time paging_init and its callees took under emulation "
              "(deterministic TCG guest with the counting plugin)", UNIT, "lower", ("boot",)),
    Benchmark("boot.to_init_insns", "boot", "instructions from reset to the first user instruction (/init)",
              "insns/op", "lower", ("boot",)),
]
ALL_BOOT_BENCHMARKS = BOOT_BENCHMARKS + MAP_BENCHMARKS
MAP_FUNCTION = "paging_init"          # the mapping phase: this function and all it calls
LINEAR_MAP_FUNCTION = "__create_pgd_mapping"   # its calls inside paging_init, one per region mapped
MAP_TOP = 12                          # functions kept in each result's info
INITCALL_RE = re.compile(r"initcall\s+(\S+?)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)?(?:\s+\[\S+\])?\s+returned\s+-?\d+\s+"
                         r"after\s+(\d+)\s+usecs")
DEFAULT_MEMS = ["1G", "4G", "16G"]


def parse_initcalls(dmesg: str) -> dict[str, float]:
    """initcall name -> microseconds, from initcall_debug lines."""
    out: dict[str, float] = {}
    for ln in dmesg.splitlines():
        m = INITCALL_RE.search(ln)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def measure_boots(target: QemuTarget, mems: list[str] | None = None, boots: int = 3,
                  timeout: float = 180.0, top: int = 10, progress=None, mapping: bool = False) -> list[Measurement]:
    """Boot the target's kernel ``boots`` times at each memory size; one Measurement per (benchmark, mem),
    with ``params`` {"mem": SIZE}, one boot per repetition, the guest's ``facts`` (emulated,
    virtualisation) and the slowest initcalls in ``extra``. With ``mapping`` (arm64), also the boot.map_*
    benchmarks from ``boots`` deterministic boots per size (:func:`measure_mapping`).
    """
    mems = mems or DEFAULT_MEMS
    results = measure_host_boots(target, mems, boots, timeout, top, progress)
    if mapping:
        results += measure_mapping(target, mems, boots, max(timeout, 300.0), progress)
    return results


def measure_host_boots(target: QemuTarget, mems: list[str], boots: int = 3, timeout: float = 180.0,
                       top: int = 10, progress=None) -> list[Measurement]:
    """The host-clock boot.* benchmarks (BOOT_BENCHMARKS) at each memory size."""
    target.prepare([])
    results = []
    for mem in mems:
        per: dict[str, list[tuple[float, float]]] = {b.name: [] for b in BOOT_BENCHMARKS}
        initcalls: list[dict[str, float]] = []
        started = time.time()
        error = None
        for rep in range(boots):
            if progress:
                progress(f"boot {rep + 1}/{boots} with mem={mem}")
            try:
                rec = target._boot([], timeout=timeout, boot_debug=True, mem=mem)
            except BenchError as e:
                error = str(e)
                break
            if rec.init_s is None or rec.init_uptime_s is None:
                error = "the guest never reached /init"
                break
            calls = parse_initcalls(rec.dmesg)
            initcalls.append(calls)
            init_ms = rec.init_s * 1000
            kern_ms = rec.init_uptime_s * 1000
            per["boot.init"].append((init_ms, rec.total_s))
            per["boot.kernel"].append((kern_ms, rec.total_s))
            per["boot.pre_kernel"].append((max(0.0, init_ms - kern_ms), rec.total_s))
            per["boot.initcalls"].append((sum(calls.values()) / 1000, rec.total_s))
        facts = dict(target._facts or {})
        if not facts:
            facts = {"emulated": True, "virtualisation": target.accel(), "arch": target.qs.arch,
                     "target": target.spec, "kernel_source": target.kernel.source}
        slow = slowest_initcalls(initcalls, top)
        for b in BOOT_BENCHMARKS:
            vals = per[b.name]
            m = Measurement("ok", b.name, UNIT, "lower", params={"mem": mem}, copies=1, facts=facts,
                            started_at=started)
            if error or not vals:
                m.status, m.reason = "failed", error or "no boot completed"
                results.append(m)
                continue
            m.raw = [(rep, 0, 0, v, 1, int(total * 1e9)) for rep, (v, total) in enumerate(vals)]
            m.info = [{"rep": 0, "copy": 0, "mem": mem, "boots": str(len(vals)),
                       "slowest_initcalls": "; ".join(f"{n} {us / 1000:.2f} ms" for n, us in slow)}]
            m.summary = stats.summarize([r[3] for r in m.raw]).as_dict()
            m.ops, m.cpu_ns, m.wall_s = len(vals), 0, sum(t for _, t in vals)
            m.extra = {"initcalls": slow}
            results.append(m)
    return results


def slowest_initcalls(per_boot: list[dict[str, float]], top: int = 10) -> list[tuple[str, float]]:
    """The initcalls with the largest median time over the boots (name, microseconds)."""
    names = set().union(*per_boot) if per_boot else set()
    med = {n: statistics.median([b.get(n, 0.0) for b in per_boot]) for n in names}
    return sorted(med.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


# -- the mapping phase (deterministic boots, the counting plugin) -------------------------------------

def rodata_full(target: QemuTarget) -> str | None:
    """'y' or 'n': whether the kernel's configuration maps its linear map at page granularity by default
    (CONFIG_RODATA_FULL_DEFAULT_ENABLED, which makes can_set_direct_map() true on arm64), read from the
    config file beside a Debian kernel image; None when there is none."""
    k = target.kernel
    cfg = k.image.parent / f"config-{k.release}"
    try:
        text = cfg.read_text(errors="replace")
    except OSError:
        return None
    return "y" if re.search(r"^CONFIG_RODATA_FULL_DEFAULT_ENABLED=y", text, re.M) else "n"


def _kallsyms_cache(target: QemuTarget) -> Path:
    key = hashlib.sha256(f"{target.kernel.source}|{' '.join(target.cmdline(True))}".encode()).hexdigest()[:16]
    return cache_dir() / "qemu" / "kallsyms" / f"{key}.txt"


def deterministic_twin(target: QemuTarget) -> QemuTarget:
    """The same kernel as a deterministic guest (one vCPU, -icount shift=0, fixed layout)."""
    qs = dataclasses.replace(target.qs, deterministic=True, cpus=1, kvm="off")
    twin = QemuTarget(qs)
    twin._kernel = target.kernel
    return twin


def guest_kallsyms(det: QemuTarget, mem: str, timeout: float) -> counting.FunctionMap:
    """The deterministic guest's kallsyms (its addresses are fixed: nokaslr), cached per kernel; the
    first time, one boot writes them back."""
    path = _kallsyms_cache(det)
    if not path.exists():
        det.boot_calls = None
        out = Path(tempfile.mkdtemp(prefix="kpd-ksyms-"))
        try:
            det._boot([], timeout=timeout, boot_debug=True, mem=mem, out_dir=out, kallsyms=True)
            got = out / "kallsyms"
            if not got.exists() or got.stat().st_size == 0:
                raise BenchError("the deterministic guest wrote no /proc/kallsyms back")
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(got, path)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return counting.FunctionMap(path)


def _top(per_fn: dict[str, list[int]], col: int, n: int = MAP_TOP) -> list[tuple[str, int]]:
    return sorted(((k, v[col]) for k, v in per_fn.items() if v[col]), key=lambda kv: (-kv[1], kv[0]))[:n]


def mapping_phase(out: Path, fmap: counting.FunctionMap) -> dict:
    """What one deterministic boot's plugin windows say about the mapping phase: totals (insns, tlbi,
    dsb, isb, host_ms), the functions that executed them, the linear-map calls inside it, and the boot
    window's total. Raises BenchError when paging_init's call was not seen."""
    pi = fmap.by_name[MAP_FUNCTION]
    wins = counting.call_windows(out, pi)
    if len(wins) != 1:
        raise BenchError(f"the counting plugin saw {len(wins)} calls of {MAP_FUNCTION} (one expected): it is "
                         f"called through a register or a tail call in this kernel, or the guest did not boot")
    rows = counting.read_counts(wins[0])
    per_fn = counting.per_function(rows, fmap)
    tot = [sum(v[i] for v in per_fn.values()) for i in range(4)]
    hdr = counting.window_header(wins[0])
    pi_end = next((a for a in fmap.addrs if a > pi), pi + 1)
    calls = []
    if LINEAR_MAP_FUNCTION in fmap.by_name:
        for w in counting.call_windows(out, fmap.by_name[LINEAR_MAP_FUNCTION]):
            h = counting.window_header(w)
            if pi <= int(h.get("return", "0"), 16) < pi_end:
                r = counting.read_counts(w)
                calls.append((sum(x[1] for x in r), sum(x[2] for x in r)))
    boot = out / counting.BOOT_WINDOW
    to_init = None
    boot_tlbi_top: list[tuple[str, int]] = []
    if boot.exists():
        brow = counting.read_counts(boot)
        to_init = sum(r[1] for r in brow)
        boot_tlbi_top = _top(counting.per_function(brow, fmap), 1, 8)
    return {"insns": tot[0], "tlbi": tot[1], "dsb": tot[2], "isb": tot[3],
            "host_ms": int(hdr.get("host_ns", "0")) / 1e6, "to_init": to_init,
            "top_insns": _top(per_fn, 0), "top_tlbi": _top(per_fn, 1), "top_dsb": _top(per_fn, 2),
            "linear_calls": calls, "boot_tlbi_top": boot_tlbi_top}


def measure_mapping(target: QemuTarget, mems: list[str], boots: int = 1, timeout: float = 300.0,
                    progress=None, skip: set[str] | frozenset = frozenset()) -> list[Measurement]:
    """The boot.map_* benchmarks and boot.to_init_insns at each memory size (not in ``skip``), from
    ``boots`` deterministic boots of the target's kernel each; one Measurement per (benchmark, mem)."""
    if target.qs.arch != "arm64":
        raise BenchError("the mapping phase is counted on arm64 guests only (the counting plugin decodes "
                         "AArch64 instructions)")
    target.prepare([])
    det = deterministic_twin(target)
    results = []
    try:
        det.prepare([])
        todo = [m for m in mems if m not in skip]
        fmap = guest_kallsyms(det, todo[0], timeout) if todo else None
        if fmap is not None:
            missing = [f for f in (MAP_FUNCTION,) if f not in fmap.by_name]
            if missing:
                raise BenchError(f"the guest kernel has no function {missing[0]} in its kallsyms")
            det.boot_calls = [fmap.by_name[MAP_FUNCTION]] + (
                [fmap.by_name[LINEAR_MAP_FUNCTION]] if LINEAR_MAP_FUNCTION in fmap.by_name else [])
        rofull = rodata_full(target)
        for mem in todo:
            got: list[dict] = []
            started = time.time()
            error = None
            for rep in range(boots):
                if progress:
                    progress(f"counted boot {rep + 1}/{boots} with mem={mem}")
                out = Path(tempfile.mkdtemp(prefix="kpd-map-"))
                try:
                    rec = det._boot([], timeout=timeout, boot_debug=True, mem=mem, out_dir=out, kallsyms=True)
                    ks = out / "kallsyms"
                    if ks.exists() and counting.FunctionMap(ks).by_name.get(MAP_FUNCTION) != fmap.by_name[MAP_FUNCTION]:
                        raise BenchError(f"{MAP_FUNCTION} moved between boots of the same kernel (is KASLR on?)")
                    ph = mapping_phase(out, fmap)
                    ph["total_s"] = rec.total_s
                    got.append(ph)
                except BenchError as e:
                    error = str(e)
                    break
                finally:
                    shutil.rmtree(out, ignore_errors=True)
            facts = {"emulated": True, "virtualisation": "tcg", "arch": det.qs.arch, "target": det.spec,
                     "kernel_source": det.kernel.source, "deterministic": True}
            values = {"boot.map_insns": "insns", "boot.map_tlbi": "tlbi", "boot.map_dsb": "dsb",
                      "boot.map_host": "host_ms", "boot.to_init_insns": "to_init"}
            for b in MAP_BENCHMARKS:
                m = Measurement("ok", b.name, b.unit, b.better, params={"mem": mem}, copies=1, facts=facts,
                                started_at=started)
                vals = [(g[values[b.name]], g["total_s"]) for g in got if g.get(values[b.name]) is not None]
                if error or not vals:
                    m.status, m.reason = "failed", error or "no counted boot completed"
                    results.append(m)
                    continue
                last = got[-1]
                m.raw = [(rep, 0, 0, float(v), 1, int(t * 1e9)) for rep, (v, t) in enumerate(vals)]
                info = {"rep": 0, "copy": 0, "mem": mem, "boots": str(len(vals)), "phase": MAP_FUNCTION + " and callees",
                        "isb": str(last["isb"]), "rodata_full_default": rofull or "unknown",
                        "linear_map_calls": "; ".join(f"{i} insns {t} tlbi" for i, t in last["linear_calls"]),
                        "top_insns": "; ".join(f"{n} {v}" for n, v in last["top_insns"]),
                        "top_tlbi": "; ".join(f"{n} {v}" for n, v in last["top_tlbi"]),
                        "top_dsb": "; ".join(f"{n} {v}" for n, v in last["top_dsb"]),
                        "boot_top_tlbi": "; ".join(f"{n} {v}" for n, v in last["boot_tlbi_top"])}
                m.info = [info]
                m.summary = stats.summarize([r[3] for r in m.raw]).as_dict()
                m.ops, m.cpu_ns, m.wall_s = len(vals), 0, sum(t for _, t in vals)
                results.append(m)
    finally:
        det.close()
    return results


def measure_batch(target: QemuTarget, names: list[str], timeout: float = 300.0) -> list[Measurement]:
    """One repetition of the named boot.* benchmarks at the target's own memory size (an experiment's
    cells: ``target = "qemu:arm64,kernel=6.12,mem=16G"``): one host-clock boot for the boot.init/kernel/
    pre_kernel/initcalls among them, one deterministic counted boot for the boot.map_* and
    boot.to_init_insns among them; a Measurement per name, in order."""
    mem = target.qs.mem
    host = {b.name for b in BOOT_BENCHMARKS}
    got: dict[str, Measurement] = {}
    if host & set(names):
        got.update({m.benchmark: m for m in measure_host_boots(target, [mem], 1, timeout)})
    if set(names) - host:
        if target.qs.arch != "arm64":
            for n in set(names) - host:
                b = next(x for x in MAP_BENCHMARKS if x.name == n)
                got[n] = Measurement("skipped", n, b.unit, b.better, reason="the mapping phase is counted on "
                                     "arm64 guests only", params={"mem": mem})
        else:
            got.update({m.benchmark: m for m in measure_mapping(target, [mem], 1, timeout)})
    return [got[n] for n in names]
