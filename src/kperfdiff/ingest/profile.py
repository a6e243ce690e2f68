"""The Profile model: what every input format becomes and every analysis reads.

A Profile is one event's samples of one recording, aggregated per symbol:

* ``symbols[i]`` names symbol *i* (function name as recorded, its DSO, and
  whether it is kernel code);
* ``self_weight[i]`` is the weight of samples whose leaf frame is symbol *i*;
* ``children_weight[i]`` is the weight of samples with symbol *i* anywhere on
  the stack, counted once per sample (perf's "Children", inclusive time);
* ``stacks`` maps root-first tuples of symbol indices to weight (folded
  stacks, from which flame graphs and call edges are made);
* ``edges`` maps (caller, callee) symbol index pairs to the weight of samples
  whose stack contains that call (counted once per sample and pair);
* ``stack_counts`` maps the same stacks to their number of samples, where the
  input tells it (perf.data, perf script; folded stacks are counts already);
* ``process_stacks`` maps (process name, stack) to (weight, samples), where
  the input names each sample's process (``perf script``'s comm column; a
  perf.data read with ``by_process=True``: its thread's comm, as perf script
  names it). Empty otherwise: the default perf.data read skips it for speed.
* ``stack_table`` (perf.data): the same stacks as the reader's arrays
  (:class:`StackTable`). A perf.data profile makes ``stacks``,
  ``stack_counts`` and ``edges`` from the reader's arrays when they are first
  read (each of these fields may be given as a function making it), and
  weights per group of symbols come from the table without them: a diff
  that needs neither (most) never makes the dicts.

Weight is the sample period where the input carries it (for ``cpu-clock``
that is nanoseconds, so shares equal perf report's) and the sample count
otherwise; ``weight_unit`` says which. ``total_weight`` includes samples
that could not be symbolised. Inputs: perf.data (native reader, in
:mod:`kperfdiff.ingest.perfdata`), ``perf script`` text, ``perf report
--stdio`` text and folded stacks (:mod:`kperfdiff.ingest.text`).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kperfdiff.core.errors import InputError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Symbol:
    name: str
    dso: str = ""
    kernel: bool = False


def shared_ints(n: int):
    """0..n-1 as an object array with None last: indexing it with symbol indices (-1: None) gives
    lists whose items refer to one int object per symbol, not one per frame (a file's millions of
    frames would otherwise each hold an int of their own)."""
    import numpy as np
    shared = np.empty(n + 1, dtype=object)
    shared[:-1] = range(n)
    return shared


class _Deferred:
    """A dict field of Profile that may be given as a function of no argument making it: made when
    first read, then kept (so a perf.data's stack and edge dicts cost nothing unless read)."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return None                      # the field's default: an empty dict (see __set__)
        value = obj.__dict__[self.slot]
        if callable(value):
            value = obj.__dict__[self.slot] = value()
        return value

    def __set__(self, obj, value) -> None:
        obj.__dict__[self.slot] = {} if value is None else value


@dataclass(frozen=True, eq=False)
class StackTable:
    """One event's stacks as the perf.data reader hands them over, arrays rather than dicts: stack
    ``j`` is ``frames[offsets[ids[j]]:offsets[ids[j] + 1]]`` (symbol indices, root first; -1 for a
    symbol only other events of the file have, which this event's stacks never hold), of
    ``weights[j]`` and ``counts[j]`` samples. The reader keeps each stack once, in its order."""

    frames: np.ndarray      # int64, every stack of the file, one after the other
    offsets: np.ndarray     # int64, where each stack of the file starts (and, last, where they end)
    ids: np.ndarray         # int64, this event's stacks
    weights: np.ndarray     # float64
    counts: np.ndarray      # uint64
    symbols: int            # the profile's number of symbols

    def dicts(self) -> tuple[dict[tuple[int, ...], float], dict[tuple[int, ...], int]]:
        """``Profile.stacks`` and ``Profile.stack_counts`` of these stacks, in their order."""
        # One vectorised lookup of every frame, then plain list slices per stack.
        rframes = shared_ints(self.symbols)[self.frames].tolist()
        keys = [tuple(rframes[a:b]) for a, b in zip(self.offsets[self.ids].tolist(),
                                                     self.offsets[self.ids + 1].tolist())]
        weights, counts = self.weights.tolist(), self.counts.tolist()
        stacks = dict(zip(keys, weights))
        samples = dict(zip(keys, counts))
        if len(stacks) < len(keys):   # were two the same, add them up, in order
            stacks, samples = {}, {}
            for key, w, c in zip(keys, weights, counts):
                stacks[key] = stacks.get(key, 0.0) + w
                samples[key] = samples.get(key, 0) + c
        return stacks, samples

    def union_weights(self, groups: dict) -> dict:
        """Per group (a set of symbol indices), the weight of the stacks that hold any of its
        symbols, each stack once: the same sum, added in the same order, as over ``Profile.stacks``."""
        import numpy as np
        out = {g: 0.0 for g in groups}
        label = np.full(self.symbols + 1, -1, dtype=np.int64)     # symbol -> its group (the last: none)
        for n, ix in enumerate(groups.values()):
            ix = sorted(ix)
            if (label[ix] >= 0).any():
                return self._overlapping_union_weights(groups)
            label[ix] = n
        if not len(self.ids):
            return out
        # one pass over the frames: the (group, stack) pairs they hold, each once, sorted by group
        # and then by the stacks' order, whose weights are then added in that order
        group = label[self.frames]
        at = np.flatnonzero(group >= 0)
        where = np.full(len(self.offsets) - 1, -1, dtype=np.int64)    # a stack of the file -> this event's
        where[self.ids] = np.arange(len(self.ids))
        stack = where[np.searchsorted(self.offsets, at, side="right") - 1]
        held = stack >= 0
        pairs = np.sort(group[at][held] * len(self.ids) + stack[held])
        # each once (np.unique does the same, but first imports numpy.ma: 10-15 ms of a diff)
        pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))] if len(pairs) else pairs
        names, weights = list(groups), self.weights.tolist()
        for n, j in zip((pairs // len(self.ids)).tolist(), (pairs % len(self.ids)).tolist()):
            out[names[n]] += weights[j]
        return out

    def _overlapping_union_weights(self, groups: dict) -> dict:
        """:meth:`union_weights` of groups that share symbols: one pass over the frames per group."""
        import numpy as np
        starts, ends = self.offsets[:-1], self.offsets[1:]
        out = {}
        for g, ix in groups.items():
            mark = np.zeros(self.symbols + 1, dtype=bool)       # (the last: another event's symbol)
            mark[sorted(ix)] = True
            held = np.concatenate(([0], np.cumsum(mark[self.frames])))
            total = 0.0
            for w in self.weights[(held[ends] > held[starts])[self.ids]].tolist():
                total += w
            out[g] = total
        return out


@dataclass
class Profile:
    source: str
    event: str
    symbols: list[Symbol]
    self_weight: np.ndarray
    children_weight: np.ndarray
    total_weight: float
    samples: int
    stacks: dict[tuple[int, ...], float] = _Deferred()
    edges: dict[tuple[int, int], float] = _Deferred()
    weight_unit: str = "samples"
    label: str = ""
    arch: str | None = None
    # Facts carried with the recording: hostname, kernel release, nr_cpus,
    # perf version, cpu_time_ns and ops (for per-op cost), emulated, warnings.
    meta: dict = field(default_factory=dict)
    # (after meta: fields are also given by position)
    stack_counts: dict[tuple[int, ...], int] = _Deferred()
    process_stacks: dict[tuple[str, tuple[int, ...]], tuple[float, int]] = field(default_factory=dict)
    stack_table: StackTable | None = None

    def __post_init__(self) -> None:
        import numpy as np   # here, not at import: a diff starts reading its files before numpy loads
        self.self_weight = np.asarray(self.self_weight, dtype=np.float64)
        self.children_weight = np.asarray(self.children_weight, dtype=np.float64)
        n = len(self.symbols)
        if self.self_weight.shape != (n,) or self.children_weight.shape != (n,):
            raise ValueError("profile arrays do not match the symbol table")

    @property
    def has_stacks(self) -> bool:
        """Does the profile have stacks (without making a perf.data's stack dicts to tell)?"""
        return len(self.stack_table.ids) > 0 if self.stack_table is not None else bool(self.stacks)

    @property
    def has_callchains(self) -> bool:
        return any(len(s) > 1 for s in self.stacks)

    @property
    def kernel_weight(self) -> float:
        """The self weight of the profile's kernel symbols."""
        import numpy as np
        kernel = np.fromiter((s.kernel for s in self.symbols), dtype=bool, count=len(self.symbols))
        return float(self.self_weight[kernel].sum())

    def index(self) -> dict[Symbol, int]:
        return {s: i for i, s in enumerate(self.symbols)}

    def stack_count(self, stack: tuple[int, ...], weight: float) -> int:
        """The number of samples of ``stack`` (of ``weight``): as the input counted them, the weight
        itself when weights are sample counts, else estimated from the profile's mean weight per
        sample (perf report text has shares only)."""
        n = self.stack_counts.get(stack)
        if n is not None:
            return n
        if self.weight_unit == "samples":
            return int(round(weight))
        return int(round(weight * self.samples / self.total_weight)) if self.total_weight > 0 else 0

    def stack_rows(self) -> list[tuple[str, tuple[int, ...], float, int]]:
        """Every stack as (process name or "", stack root first, weight, samples); a flat profile's
        stacks are its symbols' self weights."""
        if self.process_stacks:
            return [(comm, st, w, n) for (comm, st), (w, n) in self.process_stacks.items()]
        stacks = self.stacks or {(i,): float(w) for i, w in enumerate(self.self_weight) if w > 0}
        return [("", st, w, self.stack_count(st, w)) for st, w in stacks.items()]

    def folded(self) -> list[tuple[str, float]]:
        """Folded stacks (``a;b;c weight``), root first, as FlameGraph reads them."""
        names = [s.name for s in self.symbols]
        return [(";".join(names[i] for i in stack), w) for stack, w in self.stacks.items()]


def merge(profiles: list[Profile], source: str) -> Profile:
    """One profile of several recorded side by side (the parallel copies of one repetition): weights,
    samples, stacks and edges add up; operations and CPU time add up where every part has them.
    Repetitions stay separate profiles: they, not copies, are a diff's replicates."""
    import numpy as np
    if len(profiles) == 1:
        return profiles[0]
    if not profiles:
        raise InputError(f"{source}: no profiles to merge")
    first = profiles[0]
    for p in profiles[1:]:
        if p.weight_unit != first.weight_unit or p.event != first.event:
            raise InputError(f"{source}: its parts sample different events ({first.event} in "
                             f"{first.weight_unit}, {p.event} in {p.weight_unit}), so they cannot be added")
    index: dict[Symbol, int] = {}
    symbols: list[Symbol] = []
    for p in profiles:
        for s in p.symbols:
            if s not in index:
                index[s] = len(symbols)
                symbols.append(s)
    self_w = np.zeros(len(symbols))
    children_w = np.zeros(len(symbols))
    stacks: dict[tuple[int, ...], float] = {}
    edges: dict[tuple[int, int], float] = {}
    counts: dict[tuple[int, ...], int] = {}
    processes: dict[tuple[str, tuple[int, ...]], tuple[float, int]] = {}
    all_counted = all(p.stack_counts or not p.stacks for p in profiles)
    all_named = all(p.process_stacks or not p.stacks for p in profiles)
    for p in profiles:
        m = np.array([index[s] for s in p.symbols], dtype=np.int64)
        if len(m):
            np.add.at(self_w, m, p.self_weight)
            np.add.at(children_w, m, p.children_weight)
        for st, w in p.stacks.items():
            k = tuple(int(m[i]) for i in st)
            stacks[k] = stacks.get(k, 0.0) + w
            if all_counted:
                counts[k] = counts.get(k, 0) + p.stack_count(st, w)
        if all_named:
            for (comm, st), (w, n) in p.process_stacks.items():
                k = (comm, tuple(int(m[i]) for i in st))
                w0, n0 = processes.get(k, (0.0, 0))
                processes[k] = (w0 + w, n0 + n)
        for (a, b), w in p.edges.items():
            k = (int(m[a]), int(m[b]))
            edges[k] = edges.get(k, 0.0) + w
    meta = dict(first.meta)
    meta["warnings"] = [w for p in profiles for w in p.meta.get("warnings", [])]
    meta["merged_from"] = len(profiles)
    if all(p.meta.get("filtered") for p in profiles):       # kept of how many, over the parts
        meta["filtered"] = dict(first.meta["filtered"], kept=sum(p.meta["filtered"]["kept"] for p in profiles),
                                of=sum(p.meta["filtered"]["of"] for p in profiles))
    for key in ("ops", "cpu_time_ns"):
        vals = [p.meta.get(key) for p in profiles]
        meta[key] = sum(vals) if all(vals) else None
    if any(p.meta.get("has_children") is False for p in profiles):
        meta["has_children"] = False
    return Profile(source=source, event=first.event, symbols=symbols, self_weight=self_w,
                   children_weight=children_w, total_weight=sum(p.total_weight for p in profiles),
                   samples=sum(p.samples for p in profiles), stacks=stacks, edges=edges,
                   stack_counts=counts, process_stacks=processes, weight_unit=first.weight_unit, label=first.label, arch=first.arch, meta=meta)


# -- building a Profile from stacks -------------------------------------------

class Builder:
    """Interns symbols and aggregates identical stacks, then derives self,
    children (once per sample) and edges (once per sample and pair)."""

    def __init__(self):
        self.index: dict[Symbol, int] = {}
        self.symbols: list[Symbol] = []
        self.stacks: dict[tuple[int, ...], float] = defaultdict(float)
        self.counts: dict[tuple[int, ...], int] = defaultdict(int)
        self.processes: dict[tuple[str, tuple[int, ...]], list] = {}
        self.samples = 0
        self.total = 0.0

    def sym(self, s: Symbol) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.symbols)
            self.symbols.append(s)
        return i

    def add(self, stack_root_first: tuple[int, ...], weight: float, count: int = 1, comm: str | None = None) -> None:
        self.samples += count
        self.total += weight
        if stack_root_first:
            self.stacks[stack_root_first] += weight
            self.counts[stack_root_first] += count
            if comm is not None:
                acc = self.processes.setdefault((comm, stack_root_first), [0.0, 0])
                acc[0] += weight
                acc[1] += count

    def build(self, source: str, event: str, weight_unit: str, meta: dict) -> Profile:
        n = len(self.symbols)
        import numpy as np
        self_w = np.zeros(n)
        child_w = np.zeros(n)
        edges: dict[tuple[int, int], float] = defaultdict(float)
        for stack, w in self.stacks.items():
            self_w[stack[-1]] += w
            if len(stack) == 1:
                child_w[stack[0]] += w
                continue
            for i in set(stack):
                child_w[i] += w
            for e in set(zip(stack, stack[1:])):
                edges[e] += w
        return Profile(source=source, event=event, symbols=self.symbols, self_weight=self_w,
                       children_weight=child_w, total_weight=float(self.total), samples=self.samples,
                       stacks=dict(self.stacks), edges=dict(edges), stack_counts=dict(self.counts),
                       process_stacks={k: (w, n) for k, (w, n) in self.processes.items()}, weight_unit=weight_unit,
                       arch=meta.get("arch"), meta=meta)
