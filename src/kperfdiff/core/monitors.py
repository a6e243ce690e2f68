"""Kernel counters read around every benchmark: /proc/vmstat and /proc/interrupts.

A snapshot is a flat dict of counter name -> value: ``vmstat.<name>`` for
every /proc/vmstat line and ``irq.<name>`` for every /proc/interrupts line,
summed over CPUs (``irq.TLB`` is "TLB shootdowns" on x86, ``irq.IPI3``-like
names on arm64). The delta of two snapshots keeps the counters that moved.
This module only parses; :func:`kperfdiff.targets.machine.counter_snapshot` reads this machine's.
"""
from __future__ import annotations

# Counters a kernel engineer looks at first, in the order `show` prints them.
RELEVANT = [
    "vmstat.pgfault", "vmstat.pgmajfault",
    "vmstat.thp_fault_alloc", "vmstat.thp_fault_fallback", "vmstat.thp_split_page",
    "vmstat.thp_collapse_alloc", "vmstat.thp_deferred_split_page",
    "vmstat.pswpin", "vmstat.pswpout", "vmstat.pgpgout",
    "vmstat.nr_tlb_remote_flush", "vmstat.nr_tlb_remote_flush_received",
    "vmstat.nr_tlb_local_flush_all", "vmstat.nr_tlb_local_flush_one",
    "vmstat.tlb_remote_flush", "irq.TLB", "irq.CAL", "irq.RES", "irq.LOC",
    "vmstat.pgmigrate_success", "vmstat.compact_stall",
]
# Descriptions for interrupt lines whose short names say little.
IRQ_NAMES = {"irq.TLB": "TLB shootdowns", "irq.CAL": "function call interrupts",
             "irq.RES": "rescheduling interrupts", "irq.LOC": "local timer interrupts"}


def parse_vmstat(text: str) -> dict[str, int]:
    """/proc/vmstat's ``name value`` lines as ``vmstat.<name>`` counters."""
    out = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[f"vmstat.{parts[0]}"] = int(parts[1])
    return out


def parse_interrupts(text: str) -> dict[str, int]:
    """Sum each /proc/interrupts line over the CPU columns."""
    lines = text.splitlines()
    if not lines:
        return {}
    ncpu = len(lines[0].split())
    out = {}
    for ln in lines[1:]:
        name, sep, rest = ln.partition(":")
        if not sep:
            continue
        total = 0
        for tok in rest.split()[:ncpu]:
            if not tok.isdigit():
                break
            total += int(tok)
        out[f"irq.{name.strip()}"] = total
    return out


def snapshot_from_text(vmstat: str, interrupts: str) -> dict[str, int]:
    """One snapshot from the texts of /proc/vmstat and /proc/interrupts (read here or on a target)."""
    snap = parse_vmstat(vmstat)
    snap.update(parse_interrupts(interrupts))
    return snap


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Counters that changed between two snapshots (after - before)."""
    out = {}
    for k, v in after.items():
        d = v - before.get(k, 0)
        if d:
            out[k] = d
    return out


def add(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    return total


def relevant(deltas: dict[str, int]) -> list[tuple[str, int]]:
    """The well-known counters that moved, in RELEVANT order."""
    return [(k, deltas[k]) for k in RELEVANT if deltas.get(k)]
