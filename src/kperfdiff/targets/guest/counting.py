"""Exact instruction counts per kernel function from deterministic arm64 guests.

The emulated PMU of a QEMU TCG arm64 guest counts instructions exactly, but perf cannot sample
on it: its overflow interrupt is only taken once the CPU is back in user space, so every
``perf record -e instructions`` sample of a kernel path lands on the user instruction after the
system call (README: deterministic guests). kperfdiff counts in the emulator instead: a TCG
plugin (``insn_count.c``, built here for the host's QEMU) adds each translation block's
instruction count every time the block runs, between the two marks a worker run with
``--count`` executes around its timed intervals, and writes one window file per marked run.

This module builds the plugin, reads its window files and turns one into a profile: folded
stacks of one frame, ``function_[k] instructions`` for kernel functions (addresses resolved
with the guest's kallsyms) and ``[user] instructions`` for all user space, which every profile
reader of kperfdiff reads.
"""
from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from ...bench.build import build_program
from ...errors import InputError
from ...nativecore import core

PLUGIN_SOURCE = Path(__file__).with_name("insn_count.c")
WINDOW_PREFIX = "insn-window"      # the plugin writes <prefix>.0, <prefix>.1, ... in run order
USER_FRAME = "[user]"
MAX_WINDOW_BYTES = 512 << 20


def plugin() -> Path:
    """The plugin built for this host (cached like the workers)."""
    return build_program(PLUGIN_SOURCE, "insn_count.so", "host", flags=("-shared", "-fPIC"))


def windows(folder: Path) -> list[Path]:
    """The window files the plugin wrote into ``folder``, in the order they were written."""
    found = []
    for p in folder.glob(WINDOW_PREFIX + ".*"):
        suffix = p.name[len(WINDOW_PREFIX) + 1:]
        if suffix.isdigit():
            found.append((int(suffix), p))
    return [p for _, p in sorted(found)]


def read_window(path: Path) -> list[tuple[int, int]]:
    """(block address, instructions) pairs of one window file; malformed lines are an error."""
    if path.stat().st_size > MAX_WINDOW_BYTES:
        raise InputError(f"{path} is larger than {MAX_WINDOW_BYTES >> 20} MB, not an instruction window")
    out = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            out.append((int(parts[0], 16), int(parts[1])))
        except ValueError:
            raise InputError(f"{path} line {n} is not '<hex address> <count>': {line[:60]!r}") from None
    return out


def window_profile(window: Path, kallsyms: Path, out: Path) -> int:
    """Write the folded profile of one window to ``out``; return its total instructions."""
    table = core().symbol_map(kallsyms.read_bytes())
    funcs = sorted((a, n) for a, t, n in zip(table["addrs"], table["types"], table["names"]) if t in "tTwW")
    addrs = [a for a, _ in funcs]
    lowest = addrs[0] if addrs else None
    by_frame: dict[str, int] = {}
    total = 0
    for addr, count in read_window(window):
        total += count
        if lowest is not None and addr >= lowest:
            frame = funcs[bisect_right(addrs, addr) - 1][1] + "_[k]"
        else:
            frame = USER_FRAME
        by_frame[frame] = by_frame.get(frame, 0) + count
    out.write_text("".join(f"{f} {c}\n" for f, c in sorted(by_frame.items(), key=lambda kv: (-kv[1], kv[0]))))
    return total
