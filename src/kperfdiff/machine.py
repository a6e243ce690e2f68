"""Facts about the machine a run was made on, so results can be read elsewhere.

Architecture, CPU model, cores, kernel release and command line, page size,
transparent-huge-page mode, clocksource, virtualisation (none / kvm /
hypervisor name / emulated) and which perf events work. A fingerprint of
the stable facts lets the store keep one row per machine configuration.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path

from .arch import normalise_arch
from .monitors import snapshot_from_text

PROBE_EVENTS = ["cpu-clock", "task-clock", "cycles", "instructions", "cache-misses",
                "dTLB-load-misses", "iTLB-load-misses", "branch-misses"]


def _read(path: str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _bracketed(text: str) -> str:
    m = re.search(r"\[(\w+)\]", text)
    return m.group(1) if m else text


def cpu_model() -> str:
    info = _read("/proc/cpuinfo")
    for key in ("model name", "Model", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", info, re.M)
        if m:
            return m.group(1).strip()
    parts = re.findall(r"^CPU part\s*:\s*(\S+)$", info, re.M)
    return f"CPU part {parts[0]}" if parts else platform.processor() or "unknown"


def virtualisation() -> str:
    if shutil.which("systemd-detect-virt"):
        try:
            r = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, timeout=5)
            v = r.stdout.strip()
            if v:
                return "none" if v == "none" else v
        except (OSError, subprocess.TimeoutExpired):
            pass
    flags = _read("/proc/cpuinfo")
    return "hypervisor" if re.search(r"^flags\s*:.*\bhypervisor\b", flags, re.M) else "none"


def perf_events(timeout: float = 20.0) -> dict[str, bool]:
    """Which events perf can count here (one `perf stat` of `true`)."""
    if not shutil.which("perf"):
        return {e: False for e in PROBE_EVENTS}
    cmd = ["perf", "stat", "-x", ",", "-e", ",".join(PROBE_EVENTS), "true"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return {e: False for e in PROBE_EVENTS}
    return parse_perf_stat_support(r.stderr)


def parse_perf_stat_support(text: str) -> dict[str, bool]:
    out = {e: False for e in PROBE_EVENTS}
    for ln in text.splitlines():
        f = ln.split(",")
        if len(f) >= 3:
            ev = f[2].split(":")[0]
            if ev in out:
                out[ev] = not f[0].startswith("<not")
    return out


def facts(probe_perf: bool = True) -> dict:
    u = os.uname()
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    swaps = [ln for ln in _read("/proc/swaps").splitlines()[1:] if ln.strip()]
    mem = re.search(r"^MemTotal:\s+(\d+)", _read("/proc/meminfo"), re.M)
    return {
        "arch": normalise_arch(u.machine),
        "machine": u.machine,
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count() or 1,
        "cpus_online": _read("/sys/devices/system/cpu/online"),
        "kernel_release": u.release,
        "kernel_version": u.version,
        "cmdline": _read("/proc/cmdline"),
        "hostname": socket.gethostname(),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "mem_total_kb": int(mem.group(1)) if mem else None,
        "thp_enabled": _bracketed(thp) if thp else "unavailable",
        "thp_defrag": _bracketed(_read("/sys/kernel/mm/transparent_hugepage/defrag", "unavailable")),
        "clocksource": _read("/sys/devices/system/clocksource/clocksource0/current_clocksource", "unknown"),
        "virtualisation": virtualisation(),
        "emulated": False,
        "swap_active": bool(swaps),
        "perf_events": perf_events() if probe_perf else {},
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
    }


def counter_texts(proc: Path = Path("/proc")) -> tuple[str, str]:
    """The texts of /proc/vmstat and /proc/interrupts now ("" for one that cannot be read)."""
    texts = []
    for name in ("vmstat", "interrupts"):
        try:
            texts.append((proc / name).read_text())
        except OSError:
            texts.append("")
    return texts[0], texts[1]


def counter_snapshot(proc: Path = Path("/proc")) -> dict[str, int]:
    """This machine's kernel counters now (see :mod:`kperfdiff.monitors`)."""
    return snapshot_from_text(*counter_texts(proc))
