"""Facts about the machine a run was made on, so results can be read elsewhere.

Architecture, CPU model, cores, kernel release, build id and command line, page size,
transparent-huge-page mode, clocksource, virtualisation (none / kvm /
hypervisor name / emulated) and which perf events work. A fingerprint of
the stable facts lets the store keep one row per machine configuration.

:func:`identity` is the part of the facts an experiment's cells must share to be
compared with each other (see :mod:`kperfdiff.experiments.run`, "Identity").
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import struct
import subprocess
from pathlib import Path

from kperfdiff import __version__
from kperfdiff.core.arch import normalise_arch
from kperfdiff.core.monitors import snapshot_from_text

KERNEL_NOTES = "/sys/kernel/notes"     # the running kernel's ELF notes (root only on some systems)
UNKNOWN = "unknown"

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


def build_id_from_notes(data: bytes) -> str | None:
    """The GNU build id (hex) in a kernel's ELF notes (the bytes of /sys/kernel/notes), in either
    byte order; None if they hold none."""
    for order in "<>":
        i = 0
        while i + 12 <= len(data):
            namesz, descsz, kind = struct.unpack_from(order + "III", data, i)
            if namesz > 256 or descsz > 4096:
                break
            name_end = i + 12 + (namesz + 3) // 4 * 4
            desc = data[name_end:name_end + descsz]
            if kind == 3 and data[i + 12:i + 12 + namesz].rstrip(b"\0") == b"GNU" and len(desc) == descsz and desc:
                return desc.hex()
            i = name_end + (descsz + 3) // 4 * 4
    return None


def kernel_build_id(path: str = KERNEL_NOTES) -> str:
    """The running kernel's build id, or "unknown" where its notes cannot be read (hidden on some
    CI runners and containers)."""
    try:
        return build_id_from_notes(Path(path).read_bytes()) or UNKNOWN
    except OSError:
        return UNKNOWN


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
        "kernel_build_id": kernel_build_id(),
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


# What an experiment's cells must share to be compared (:func:`identity`); the machine's part
# leaves out what a variant changes (THP modes, swap: knobs and allow_swap_setup), what differs
# from boot to boot of one configuration (boot id, host name, clocksource) and perf's event probe.
IDENTITY_KERNEL = (("kernel_release", "kernel release"), ("kernel_build_id", "kernel build id"),
                   ("kernel_version", "kernel version (uname -v)"), ("kernel_cmdline", "kernel command line"))
IDENTITY_MACHINE = ("arch", "cpu_model", "cpus", "memory_gib", "page_size", "virtualisation", "emulated")


def identity(f: dict) -> dict:
    """What a cell was measured on, from machine facts (this machine's or a target's): the kernel
    (release, build id, uname -v, command line), a fingerprint of the machine (arch, CPU model,
    cores, memory to 0.1 GiB, page size, virtualisation) and the kperfdiff version."""
    mem = f.get("mem_total_kb")
    return {"kernel_release": f.get("kernel_release") or UNKNOWN,
            "kernel_build_id": f.get("kernel_build_id") or UNKNOWN,
            "kernel_version": f.get("kernel_version") or UNKNOWN,
            "kernel_cmdline": f.get("cmdline") or "",
            "machine": {"arch": f.get("arch"), "cpu_model": f.get("cpu_model"), "cpus": f.get("cpus"),
                        "memory_gib": round(mem / 1048576, 1) if mem else None, "page_size": f.get("page_size"),
                        "virtualisation": f.get("virtualisation"), "emulated": bool(f.get("emulated"))},
            "kperfdiff": __version__}


def _shown(v) -> str:
    t = repr(v) if isinstance(v, str) else str(v)
    return t if len(t) <= 60 else t[:56] + "...'"


def identity_difference(stored: dict | None, now: dict) -> str | None:
    """How a cell's stored identity differs from ``now`` ("kernel release 6.1.0, now 6.2.0"), or
    None if it does not. A build id "unknown" on either side is not compared (the release, uname -v
    and the rest still are); a cell stored without an identity (by a kperfdiff before it kept one)
    differs from every identity."""
    if not stored:
        return "no identity (stored by a kperfdiff that did not record what its cells ran on)"
    out = []
    for key, words in IDENTITY_KERNEL:
        a, b = stored.get(key), now.get(key)
        if key == "kernel_build_id" and UNKNOWN in (a, b):
            continue
        if a != b:
            out.append(f"{words} {_shown(a)}, now {_shown(b)}")
    ma, mb = stored.get("machine") or {}, now.get("machine") or {}
    moved = [f"{k} {_shown(ma.get(k))}, now {_shown(mb.get(k))}" for k in IDENTITY_MACHINE if ma.get(k) != mb.get(k)]
    if moved:
        out.append("machine (" + "; ".join(moved) + ")")
    if stored.get("kperfdiff") != now.get("kperfdiff"):
        out.append(f"kperfdiff version {stored.get('kperfdiff')}, now {now.get('kperfdiff')}")
    return "; ".join(out) or None


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
    """This machine's kernel counters now (see :mod:`kperfdiff.core.monitors`)."""
    return snapshot_from_text(*counter_texts(proc))
