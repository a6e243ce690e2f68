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

across guest memory sizes (one cell per size, ``mem`` as its parameter),
several boots each; one value per boot, summarised with the same
statistics as every other benchmark. The slowest initcalls (median over the
boots) are kept in each result's info, so two kernels' boot costs compare
like any other result.
"""
from __future__ import annotations

import re
import statistics
import time

from .. import stats
from ..bench.catalogue import Benchmark
from ..bench.measurement import Measurement
from ..errors import BenchError
from .qemu import QemuTarget

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
INITCALL_RE = re.compile(r"initcall\s+(\S+?)(?:\+0x[0-9a-f]+/0x[0-9a-f]+)?(?:\s+\[\S+\])?\s+returned\s+-?\d+\s+"
                         r"after\s+(\d+)\s+usecs")
TS_RE = re.compile(r"^\[\s*(\d+\.\d+)\]")
DEFAULT_MEMS = ["1G", "4G", "16G"]


def parse_initcalls(dmesg: str) -> dict[str, float]:
    """initcall name -> microseconds, from initcall_debug lines."""
    out: dict[str, float] = {}
    for ln in dmesg.splitlines():
        m = INITCALL_RE.search(ln)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def first_timestamp(dmesg: str) -> float | None:
    for ln in dmesg.splitlines():
        m = TS_RE.match(ln.lstrip("<0123456789>"))
        if m:
            return float(m.group(1))
    return None


def measure_boots(target: QemuTarget, mems: list[str] | None = None, boots: int = 3,
                  timeout: float = 180.0, top: int = 10, progress=None) -> list[Measurement]:
    """Boot the target's kernel ``boots`` times at each memory size; one Measurement per (benchmark, mem),
    with ``params`` {"mem": SIZE}, one boot per repetition, the guest's ``facts`` (emulated,
    virtualisation) and the slowest initcalls in ``extra``.
    """
    mems = mems or DEFAULT_MEMS
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
