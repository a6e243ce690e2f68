"""Exact instruction counts per kernel function from deterministic arm64 and x86_64 guests.

The emulated PMU of a QEMU TCG arm64 guest counts instructions exactly, but perf cannot sample
on it: its overflow interrupt is only taken once the CPU is back in user space, so every
``perf record -e instructions`` sample of a kernel path lands on the user instruction after the
system call (docs/targets.md: deterministic instruction profiles); an x86_64 guest under TCG has
no PMU at all. kperfdiff counts in the emulator instead: a TCG
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

from kperfdiff.bench.build import build_program
from kperfdiff.core.errors import InputError
from kperfdiff.core.nativecore import core

PLUGIN_SOURCE = Path(__file__).with_name("insn_count.c")
WINDOW_PREFIX = "insn-window"      # the plugin writes <prefix>.0, <prefix>.1, ... in run order
USER_FRAME = "[user]"
MAX_WINDOW_BYTES = 512 << 20
BOOT_WINDOW = "insn-boot"          # the boot window: reset to the first user instruction
CALL_PREFIX = "insn-call"          # <prefix>.<function address hex>.<N>: the N-th call of a watched function
MAX_CALLS = 4                      # call= functions the plugin watches at once


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
    return [(r[0], r[1]) for r in read_counts(path)]


def read_counts(path: Path) -> list[tuple[int, ...]]:
    """(block address, instructions[, tlbi, dsb, isb]) of one window file: the marked windows have
    two columns, the boot and call windows five after a '#' header line; malformed lines are an error."""
    if path.stat().st_size > MAX_WINDOW_BYTES:
        raise InputError(f"{path} is larger than {MAX_WINDOW_BYTES >> 20} MB, not an instruction window")
    out = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.startswith("#"):
            continue
        parts = line.split()
        try:
            if len(parts) not in (2, 5):
                raise ValueError
            out.append((int(parts[0], 16), *(int(x) for x in parts[1:])))
        except ValueError:
            raise InputError(f"{path} line {n} is not '<hex address> <count>' nor "
                             f"'<hex address> <insns> <tlbi> <dsb> <isb>': {line[:60]!r}") from None
    return out


def boot_args(out: Path, calls: list[int]) -> list[str]:
    """The plugin's options for the boot window and the inclusive windows of calls to ``calls``."""
    if len(calls) > MAX_CALLS:
        raise InputError(f"the plugin watches at most {MAX_CALLS} functions, not {len(calls)}")
    args = [f"boot={out / BOOT_WINDOW}"]
    if calls:
        args.append(f"callout={out / CALL_PREFIX}")
        args += [f"call={a:x}" for a in calls]
    for a in map(str, args):
        if "," in a:
            raise InputError(f"the folder {out} has a comma in its path, which QEMU's -plugin option cannot carry")
    return args


def window_header(path: Path) -> dict[str, str]:
    """The key-value words of a window file's '#' header line (call windows: call, return, host_ns)."""
    with open(path, errors="replace") as fh:
        first = fh.readline()
    if not first.startswith("#"):
        return {}
    words = first[1:].split()
    return {k: v for k, v in zip(words[::2], words[1::2])}


def call_windows(folder: Path, addr: int) -> list[Path]:
    """The window files of the calls of the function at ``addr``, in call order."""
    found = []
    prefix = f"{CALL_PREFIX}.{addr:x}."
    for p in folder.glob(prefix + "*"):
        suffix = p.name[len(prefix):]
        if suffix.isdigit():
            found.append((int(suffix), p))
    return [p for _, p in sorted(found)]


class FunctionMap:
    """Kernel text addresses to function names, from a kallsyms file."""

    def __init__(self, kallsyms: Path):
        table = core().symbol_map(kallsyms.read_bytes())
        funcs = sorted((a, n) for a, t, n in zip(table["addrs"], table["types"], table["names"]) if t in "tTwW")
        self.by_name = {}
        for a, n in funcs:
            self.by_name.setdefault(n, a)
        # aliases at one address (6.1's create_kpti_ng_temp_pgd is __create_pgd_mapping_locked): the first
        # name in sort order, so every boot of a kernel names a block alike
        funcs = [f for i, f in enumerate(funcs) if i == 0 or funcs[i - 1][0] != f[0]]
        self.addrs = [a for a, _ in funcs]
        self.names = [n for _, n in funcs]

    def name(self, addr: int) -> str | None:
        """The function holding ``addr``, or None below the lowest kernel function."""
        if not self.addrs or addr < self.addrs[0]:
            return None
        return self.names[bisect_right(self.addrs, addr) - 1]


def per_function(rows: list[tuple[int, ...]], fmap: FunctionMap) -> dict[str, list[int]]:
    """Sum a window's five-column rows per function: name -> [insns, tlbi, dsb, isb]. Blocks below the
    kernel's text are ``[user]`` when under 0x40000000 (a static /init) and ``[early]`` otherwise (the
    kernel running at its physical addresses before and while it turns the MMU on, the idmap)."""
    out: dict[str, list[int]] = {}
    for addr, *counts in rows:
        counts = (list(counts) + [0, 0, 0])[:4]
        name = fmap.name(addr)
        if name is None:
            name = USER_FRAME if addr < 0x40000000 else "[early]"
        acc = out.setdefault(name, [0, 0, 0, 0])
        for i, c in enumerate(counts):
            acc[i] += c
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
