"""A trace-driven simulator of an instruction cache plus a fast memory.

The machine
    A set-associative I-cache with LRU replacement (``icache.size``,
    ``icache.line``, ``icache.ways``) in front of main memory, and a fast
    memory beside it. Code in fast memory costs ``fast_memory.fetch_cycles``
    per instruction and never fills a line; code in main memory costs
    ``icache.fetch_cycles`` per instruction plus ``main_memory.line_fill_cycles``
    per line that misses. A call between the two memories adds
    ``calls.veneer_cycles``. Straight-line fetch: a body of n instructions at
    address A touches the lines from A to A + n*instruction_bytes - 1 in order.

The layout
    Main-memory functions keep the link order of the size file's addresses;
    with the placed functions moved out, the rest is packed again
    (``relink=True``, what relinking the kernel does) or left at its old
    addresses (``relink=False``). Functions the size file lacks are laid out
    after the others, in name order.

The trace (how a profile becomes a sequence of executed code)
    Only the kernel part of each sampled stack is used (from its first kernel
    frame), and only stacks whose leaf function has a size. A stack S of
    weight w with leaf j of n_j instructions stands for w / n_j executions of
    j's body (so each function's share of executed instructions equals its
    share of self samples). The counts are scaled to about ``events``
    executions in all (rounded by largest remainder, at least one for each
    stack that got any weight) and shuffled with a fixed seed, so different
    paths interleave as they do when the kernel runs many tasks. One
    execution of S = (..., i, j) is: a call i -> j, the whole body of j from
    its first instruction, and the return into i, which fetches one
    instruction at a return site inside i (at a fixed offset derived from
    j's name). A stack of one frame is the body alone.

:func:`executions` is the one definition of "which kernel stacks ran, and
how many times": the trace uses it, and so does the cost model
(:mod:`.model`) for its call counts and per-function fills.

:func:`run` takes any trace of ``("call", caller, callee)``,
``("body", fn, first_instr, n_instr)`` steps, so the worked examples and
hand-counted tests drive the same code.
"""
from __future__ import annotations

import zlib
from collections import defaultdict
from itertools import chain
from dataclasses import dataclass, field

import numpy as np

from kperfdiff.ingest.profile import Profile
from kperfdiff.place.inputs import HwModel, SizeTable


class ICache:
    """Set-associative, LRU, counting fills."""

    def __init__(self, size: int, line: int, ways: int):
        self.line = line
        self.ways = ways
        self.nsets = max(1, size // (line * ways))
        self.sets: list[list[int]] = [[] for _ in range(self.nsets)]
        self.fills = 0
        self.hits = 0

    def access(self, line_no: int) -> bool:
        hits = self.hits
        self.access_all((line_no,))
        return self.hits > hits

    def access_all(self, lines) -> None:
        """:meth:`access` each line in turn (one call for a body's lines: the simulator's hot loop)."""
        sets, nsets, ways = self.sets, self.nsets, self.ways
        hits = 0
        for line_no in lines:
            s = sets[line_no % nsets]
            if s and s[-1] == line_no:          # most recent: the common case
                hits += 1
                continue
            if line_no in s:
                s.remove(line_no)
                hits += 1
            elif len(s) >= ways:
                s.pop(0)
            s.append(line_no)
        self.hits += hits
        self.fills += len(lines) - hits


class AttributingICache(ICache):
    """The same cache (same hits and fills), also saying whose placement would
    have avoided each miss. Each set keeps an LRU stack deeper than its ways
    (``depth`` lines, default 4 x ways), each line tagged with the function
    that touched it last. A miss on a line that is still in the stack at
    position p (p other lines touched since, p >= ways) would have been a hit
    had p - ways + 1 of those lines never been fetched: every other function
    owning that many of them could avoid the miss alone by leaving main
    memory. The miss is shared equally among them (their Shapley values in
    the game "is the miss avoided"; a function the miss's own line belongs to
    is not among them, as its own fills are counted whole). Misses only a
    combination of functions could avoid, and lines deeper than the stack,
    are credited to no one."""

    def __init__(self, size: int, line: int, ways: int, depth: int | None = None):
        super().__init__(size, line, ways)
        self.depth = max(ways, depth or 4 * ways)
        self.owner: dict[int, str] = {}
        self.relief: dict[str, float] = defaultdict(float)

    def touch(self, line_no: int, fn: str) -> bool:
        hits = self.hits
        self.touch_all((line_no,), fn)
        return self.hits > hits

    def touch_all(self, lines, fn: str) -> None:
        """:meth:`touch` each line in turn for ``fn`` (one call for a body's lines)."""
        sets, nsets, ways, depth = self.sets, self.nsets, self.ways, self.depth
        owner, relief = self.owner, self.relief
        hits = 0
        for line_no in lines:
            s = sets[line_no % nsets]          # least recent first
            if s and s[-1] == line_no:
                hits += 1
                owner[line_no] = fn
                continue
            if line_no in s:
                k = s.index(line_no)
                if len(s) - 1 - k < ways:
                    hits += 1
                else:
                    need = len(s) - k - ways
                    counts: dict[str, int] = {}
                    for other in s[k + 1:]:
                        g = owner[other]
                        counts[g] = counts.get(g, 0) + 1
                    savers = [g for g, c in counts.items() if c >= need and g != fn]
                    for g in savers:
                        relief[g] += 1.0 / len(savers)
                del s[k]
            elif len(s) >= depth:
                del owner[s.pop(0)]
            s.append(line_no)
            owner[line_no] = fn
        self.hits += hits
        self.fills += len(lines) - hits


@dataclass
class SimResult:
    label: str
    fills: int
    fast_instr: int
    cached_instr: int
    calls: int
    crossing_calls: int
    cycles: float
    placed_bytes: int = 0
    # with run(..., attribute=True): fills and main-memory instructions per function (the
    # function whose line missed), and calls per (caller, callee)
    fn_fills: dict = field(default_factory=dict)
    fn_instr: dict = field(default_factory=dict)
    edge_calls: dict = field(default_factory=dict)
    fn_relief: dict = field(default_factory=dict)       # others' fills each could avoid (AttributingICache)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not isinstance(v, dict)}


def layout(names_in_order: list[str], sizes: dict[str, int], addrs: dict[str, int], fast: set[str], hw: HwModel,
           *, relink: bool = True) -> dict[str, int]:
    """Byte address of every main-memory function."""
    known = sorted((n for n in names_in_order if n in addrs), key=lambda n: (addrs[n], n))
    unknown = sorted(n for n in names_in_order if n not in addrs)
    out: dict[str, int] = {}
    base = min((addrs[n] for n in known), default=0)
    base -= base % hw.line_size
    if relink:
        cur = base
        for n in known + unknown:
            if n in fast:
                continue
            out[n] = cur
            cur += hw.aligned(sizes[n])
    else:
        end = base
        for n in known:
            if n not in fast:
                out[n] = addrs[n]
            end = max(end, addrs[n] + sizes[n])
        cur = end
        for n in unknown:
            if n not in fast:
                out[n] = cur
                cur += hw.aligned(sizes[n])
    return out


def run(trace, sizes: dict[str, int], addr: dict[str, int], fast: set[str], hw: HwModel,
        label: str = "", cache: ICache | None = None, *, attribute: bool = False) -> SimResult:
    """Execute a trace; ``sizes`` in bytes, ``addr`` byte addresses of main-memory code.
    ``attribute`` also counts fills and instructions per function and calls per edge."""
    ic = cache or (AttributingICache if attribute else ICache)(hw.icache_size, hw.line_size, hw.ways)
    ib, lsz = hw.instruction_bytes, hw.line_size
    fast_i = cached_i = calls = cross = 0
    lines_of: dict[tuple, range] = {}
    fn_fills: dict[str, int] = defaultdict(int)
    fn_instr: dict[str, int] = defaultdict(int)
    edge_calls: dict[tuple[str, str], int] = defaultdict(int)
    for step in trace:
        if step[0] == "call":
            calls += 1
            if (step[1] in fast) != (step[2] in fast):
                cross += 1
            if attribute:
                edge_calls[(step[1], step[2])] += 1
            continue
        _, fn, first, n = step
        if n <= 0:
            continue
        if fn in fast:
            fast_i += n
            continue
        cached_i += n
        key = (fn, first, n)
        rng = lines_of.get(key)
        if rng is None:
            a = addr[fn] + first * ib
            rng = lines_of[key] = range(a // lsz, (a + n * ib - 1) // lsz + 1)
        if attribute:
            before = ic.fills
            if isinstance(ic, AttributingICache):
                ic.touch_all(rng, fn)
            else:
                ic.access_all(rng)
            fn_fills[fn] += ic.fills - before
            fn_instr[fn] += n
        else:
            ic.access_all(rng)
    cycles = fast_i * hw.t_fast + cached_i * hw.t_cache + ic.fills * hw.t_fill + cross * hw.veneer_cycles
    return SimResult(label, ic.fills, fast_i, cached_i, calls, cross, cycles, 0, dict(fn_fills), dict(fn_instr),
                     dict(edge_calls), dict(getattr(ic, "relief", {})))


@dataclass
class Trace:
    steps: list
    names: list[str]                # every function the trace executes
    sizes: dict[str, int]           # bytes
    instructions: int
    executions: int
    notes: list[str] = field(default_factory=list)


def executions(profile: Profile, sizes: SizeTable, hw: HwModel) -> tuple[list[tuple[str, ...]], list[float]]:
    """The kernel stacks the trace is made of, and how many executions of each
    leaf's body a stack's weight stands for (weight / leaf instructions, in
    profile weight units). Only the kernel part of a stack (from its first
    kernel frame), and only stacks whose leaf the size file sizes."""
    names = [s.name for s in profile.symbols]
    kern = [s.kernel for s in profile.symbols]
    if not any(kern):
        kern = [True] * len(kern)
    ib = hw.instruction_bytes
    sized = sizes.sizes
    stacks: list[tuple[str, ...]] = []
    weights: list[float] = []
    if profile.stacks:
        items = profile.stacks.items()
    else:
        items = (((k,), w) for k, w in enumerate(profile.self_weight) if w > 0)
    for st, w in items:
        first = next((p for p, k in enumerate(st) if kern[k]), None)
        if first is None or w <= 0:
            continue
        ks = tuple(names[k] for k in st[first:])
        if ks[-1] not in sized:
            continue
        stacks.append(ks)
        weights.append(w / max(1, sized[ks[-1]] // ib))
    return stacks, weights


def reconstruct(profile: Profile, sizes: SizeTable, hw: HwModel, *, events: int = 20000, seed: int = 1) -> Trace:
    """The profile's kernel stacks as a sequence of executed code (module docstring)."""
    ib = hw.instruction_bytes
    sized = sizes.sizes
    stacks, weights = executions(profile, sizes, hw)
    if not stacks:
        return Trace([], [], {}, 0, 0, ["no kernel stack ends in a function the size file sizes"])
    w = np.array(weights)
    want = w / w.sum() * events
    cnt = np.floor(want).astype(int)
    rem = int(events - cnt.sum())
    if rem > 0:
        order = np.argsort(-(want - cnt), kind="stable")
        cnt[order[:rem]] += 1
    cnt[cnt == 0] = 1
    seq = np.repeat(np.arange(len(stacks)), cnt)
    np.random.default_rng(seed).shuffle(seq)
    med = int(np.median(list(sized.values())))
    fsizes: dict[str, int] = {}
    step_of = {}
    for k in range(len(stacks)):
        st = stacks[k]
        leaf = st[-1]
        n = max(1, sized[leaf] // ib)
        fsizes[leaf] = sized[leaf]
        body = ("body", leaf, 0, n)
        if len(st) >= 2:
            caller = st[-2]
            fsizes.setdefault(caller, sized.get(caller, med))
            nc = max(1, fsizes[caller] // ib)
            ret = ("body", caller, zlib.crc32(leaf.encode()) % nc, 1)
            step_of[k] = (("call", caller, leaf), body, ret)
        else:
            step_of[k] = (body,)
    steps = list(chain.from_iterable(map(step_of.__getitem__, seq.tolist())))
    instr = int(np.dot(cnt, [sum(s[3] for s in step_of[k] if s[0] == "body") for k in range(len(stacks))]))
    notes = [f"trace: {len(seq)} executions of {len(stacks)} kernel stacks, {instr} instructions (seed {seed})"]
    if any(n not in sized for n in fsizes):
        notes.append("callers without a size are simulated with the median function size")
    return Trace(steps, sorted(fsizes), fsizes, instr, len(seq), notes)


def simulate_placements(trace: Trace, sizes: SizeTable, hw: HwModel, placements: list[tuple[str, set[str]]],
                        *, relink: bool = True, attribute: bool = False) -> list[SimResult]:
    """Run the trace with no placement first (with ``attribute``, its fills,
    instructions and calls attributed per function and edge, as the cost model
    needs; the attributing cache is the slower), then with each (label, functions)."""
    out = []
    for label, fast in [("no placement", set())] + list(placements):
        fast = set(fast)
        addr = layout(trace.names, trace.sizes, sizes.addrs, fast, hw, relink=relink)
        r = run(trace.steps, trace.sizes, addr, fast, hw, label, attribute=attribute and not fast)
        r.placed_bytes = sum(hw.aligned(trace.sizes.get(f, sizes.sizes.get(f, 0))) for f in fast)
        out.append(r)
    return out
