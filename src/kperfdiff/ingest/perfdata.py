"""perf.data -> Profile, through the native reader (``kperfdiff.native``).

The Rust side reads the file, symbolises kernel addresses against a kallsyms
file and user addresses against ELF symbols, and aggregates samples per event
(self, children, call edges, unique stacks). It hands back compact data
(strings for the symbol table, ``bytes`` for numeric arrays) that this module
turns into :class:`kperfdiff.ingest.profile.Profile` objects with numpy arrays.

Symbol sources, per input:

* ``kallsyms``: a kallsyms file (plain or gzip'd), System.map or vmlinux. When not given, the first
  existing of ``<file>.kallsyms``, ``<stem>.kallsyms`` (``x.perf.data`` ->
  ``x.kallsyms``), ``kallsyms`` in the same folder (each also as ``.gz``) is
  used, else perf's build-id cache entry for the recorded kernel
  (``~/.debug/[kernel.kallsyms]/<build id>/kallsyms``). The host's
  ``/proc/kallsyms`` is read only when named explicitly, since a profile may
  come from another machine or architecture. Whichever is used is checked
  against the recording (:mod:`kperfdiff.ingest.symcheck`): one of another
  kernel is refused unless ``kallsyms_unchecked``; the profile's
  ``meta["symbols"]`` says what was used and how it matched.
* ``symfs``: folders prepended to recorded user paths, as ``perf report
  --symfs``; user files are otherwise found by build id in ``~/.debug`` (and
  ``$PERF_BUILDID_DIR``) or at their recorded path.

A large file is read on several threads (split at its FINISHED_ROUND records and merged
into exactly what one thread gives): on every core when it is read alone, on its share of
them when :func:`kperfdiff.ingest.load.load_many` reads several at once
(``threads_per_file``). Files read together also share the symbol tables of the ELF
files they all need (``symbol_share``): the two sides of a diff recorded on one machine parse
its libc, its python and the like once, not once each.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from kperfdiff.core.arch import normalise_arch
from kperfdiff.core.errors import InputError
from kperfdiff.core.files import check_input_file
from kperfdiff.core.nativecore import core
from kperfdiff.ingest import symcheck
from kperfdiff.ingest.filters import NONE, Filters
from kperfdiff.ingest.profile import Profile, StackTable, Symbol, shared_ints

_NS_EVENTS = {"cpu-clock", "task-clock"}

# Threads the native reader may read one file on; None: one per CPU (a file read alone).
# load.load_many sets it to each file's share of the CPUs while it reads several at once.
threads_per_file: int | None = None
# The native SymbolShare of the files read together now (load.load_many sets it); None: each
# read parses the symbol tables it needs itself.
symbol_share = None


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def reader_threads() -> int:
    """How many threads the native reader may read one file on now."""
    return threads_per_file if threads_per_file is not None else usable_cpus()


def read_meta(perf_data: Path) -> dict:
    """The meta file written beside a perf.data, or {} when there is none."""
    name = perf_data.name
    stem = name[:-len(".perf.data")] if name.endswith(".perf.data") else perf_data.stem
    p = perf_data.parent / f"{stem}.profile.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def _debug_dirs() -> list[str]:
    dirs = []
    env = os.environ.get("PERF_BUILDID_DIR")
    if env:
        dirs.append(env)
    home = Path.home() / ".debug"
    dirs.append(str(home))
    return dirs


def find_kallsyms(path: Path, build_ids: list | None = None) -> Path | None:
    """The kallsyms file recorded with ``path``, found beside it (see module doc)."""
    name = path.name
    stem = name[:-len(".perf.data")] if name.endswith(".perf.data") else path.stem
    folder = path.parent
    bases = [folder / f"{name}.kallsyms", folder / f"{stem}.kallsyms", folder / "kallsyms"]
    for b in bases:
        for c in (b, b.with_name(b.name + ".gz")):
            if c.is_file():
                return c
    for file, bid in build_ids or []:
        if file == "[kernel.kallsyms]":
            for d in _debug_dirs():
                c = Path(d) / "[kernel.kallsyms]" / bid / "kallsyms"
                if c.is_file():
                    return c
    return None


def _read(path: Path, kallsyms, symfs, by_process: bool = False, kallsyms_unchecked: bool = False,
          beside: Path | None = None, filters: Filters = NONE) -> tuple[dict, Path | None]:
    n = core()
    check_input_file(path, "perf.data")
    ks = Path(kallsyms) if kallsyms is not None else find_kallsyms(beside or path)
    found = "given" if kallsyms is not None else "beside the file"
    if ks is not None:
        if not os.path.lexists(ks):
            raise InputError(f"kallsyms file {ks} does not exist")
        check_input_file(ks, "kallsyms")
    if isinstance(symfs, (str, os.PathLike)):
        symfs = [symfs]

    def read(kallsyms_path: Path | None) -> dict:
        return n.read_perf_data(str(path), kallsyms=str(kallsyms_path) if kallsyms_path is not None else None,
                                symfs=[str(s) for s in symfs or []], debug_dirs=_debug_dirs(), by_process=by_process,
                                threads=reader_threads(), share=symbol_share, **filters.sample_kwargs())
    try:
        raw = read(ks)
    except n.PerfDataError as e:
        msg = str(e)
        if str(path) not in msg:
            msg = f"{path}: {msg}"
        raise InputError(msg) from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    if ks is None:
        # Nothing beside the file: try perf's build-id cache for the recorded kernel.
        cached = find_kallsyms(Path("/nonexistent/x"), raw["header"].get("build_ids"))
        if cached is not None and any("no kallsyms" in w for w in raw["warnings"]):
            try:
                raw = read(cached)
                ks, found = cached, "perf's build-id cache"
            except n.PerfDataError:
                pass
    raw["symbols"] = symcheck.check(path, ks, raw, found=found, unchecked=kallsyms_unchecked)
    return raw, ks


def _meta(raw: dict, path: Path, ks: Path | None) -> dict:
    h = raw["header"]
    meta: dict = {
        "format": "perf.data",
        "hostname": h.get("hostname"),
        "kernel_release": h.get("os_release"),
        "release": h.get("os_release"),
        "nr_cpus": h.get("nr_cpus_online"),
        "nr_cpus_avail": h.get("nr_cpus_available"),
        "perf_version": h.get("perf_version"),
        "arch": normalise_arch(h.get("arch")),
        "arch_raw": h.get("arch"),
        "cpu_desc": h.get("cpu_desc"),
        "cmdline": h.get("cmdline"),
        "build_ids": dict(h.get("build_ids") or []),
        "lost_events": h.get("lost_events", 0),
        "lost_samples": h.get("lost_samples", 0),
        "truncated": h.get("truncated", False),
        "kallsyms": str(ks) if ks is not None else None,
        "symbols": raw.get("symbols"),
        "record_counts": raw["record_counts"],
        "events": [e["name"] for e in raw["events"]],
        "warnings": list(raw["warnings"]),
    }
    if h.get("first_sample_time") is not None and h.get("last_sample_time") is not None:
        meta["duration_ns"] = h["last_sample_time"] - h["first_sample_time"]
    try:  # the meta file `kperfdiff record` writes beside its perf.data (cpu time, ops)
        extra = read_meta(path)
    except Exception:  # noqa: BLE001 - optional
        extra = {}
    for k, v in extra.items():
        if k not in meta or meta[k] is None:
            meta[k] = v
    return meta


def _deferred_stacks(table: StackTable):
    """Functions making Profile.stacks and Profile.stack_counts from ``table`` (both at once, once)."""
    made = functools.cache(table.dicts)
    return (lambda: made()[0]), (lambda: made()[1])


def _deferred_edges(pairs, weights, symbols: int):
    """A function making Profile.edges: (caller, callee) symbol pairs (-1: another event's) -> weight."""
    return lambda: dict(zip(map(tuple, shared_ints(symbols)[pairs].tolist()), weights.tolist()))


def _profiles(raw: dict, path: Path, meta: dict, wanted: list[int]) -> list[Profile]:
    import numpy as np   # here, not at import: the native read runs while numpy loads
    names = raw["sym_names"]
    sym_dso = np.frombuffer(raw["sym_dso"], dtype=np.uint32)
    sym_kernel = np.frombuffer(raw["sym_kernel"], dtype=np.uint8)
    dso_names = raw["dso_names"]
    frames = np.frombuffer(raw["stack_frames"], dtype=np.uint32)
    offsets = np.frombuffer(raw["stack_offsets"], dtype=np.uint64).astype(np.int64)
    out = []
    for i in wanted:
        ev = raw["events"][i]
        self_w = np.frombuffer(ev["self_weight"], dtype=np.float64)
        child_w = np.frombuffer(ev["children_weight"], dtype=np.float64)
        child_c = np.frombuffer(ev["children_count"], dtype=np.uint64)
        # Keep only the symbols this event's samples touch, renumbered densely.
        used = np.nonzero(child_c > 0)[0]
        remap = np.full(len(names), -1, dtype=np.int64)
        remap[used] = np.arange(len(used))
        symbols = [Symbol(names[j], dso_names[d], bool(k))
                   for j, d, k in zip(used.tolist(), sym_dso[used].tolist(), sym_kernel[used].tolist())]
        # The stacks stay the reader's arrays (the frames renumbered to this event's symbols; those
        # of other events' stacks may name symbols this event never touched: -1); the dicts of
        # stacks, counts and call edges are made when first read (Profile), most diffs never do.
        table = StackTable(frames=remap[frames], offsets=offsets,
                           ids=np.frombuffer(ev["stack_ids"], dtype=np.uint32).astype(np.int64),
                           weights=np.frombuffer(ev["stack_weight"], dtype=np.float64),
                           counts=np.frombuffer(ev["stack_count"], dtype=np.uint64), symbols=len(used))
        stacks, counts = _deferred_stacks(table)
        processes: dict[tuple[str, tuple[int, ...]], tuple[float, int]] = {}
        if raw.get("comm_names"):
            comms = raw["comm_names"]
            rframes = shared_ints(len(used))[table.frames].tolist()
            offs = offsets.tolist()
            for c, s, w, n in zip(np.frombuffer(ev["proc_comm"], dtype=np.uint32).tolist(),
                                  np.frombuffer(ev["proc_stack"], dtype=np.uint32).tolist(),
                                  np.frombuffer(ev["proc_weight"], dtype=np.float64).tolist(),
                                  np.frombuffer(ev["proc_count"], dtype=np.uint64).tolist()):
                key = (comms[c], tuple(rframes[offs[s]:offs[s + 1]]))
                w0, n0 = processes.get(key, (0.0, 0))
                processes[key] = (w0 + w, n0 + n)
        edges = _deferred_edges(remap[np.frombuffer(ev["edges"], dtype=np.uint32).reshape(-1, 2)],
                                np.frombuffer(ev["edge_weight"], dtype=np.float64), len(used))
        name = ev["name"]
        if ev["has_period"]:
            unit = "ns" if name.split(":")[0] in _NS_EVENTS else "period"
        else:
            unit = "samples"
        m = dict(meta)
        m["event_attr"] = {k: ev[k] for k in ("type", "config", "sample_type", "read_format", "freq",
                                              "period_or_freq")}
        m["self_count"] = np.frombuffer(ev["self_count"], dtype=np.uint64)[used]
        m["children_count"] = child_c[used]
        m["warnings"] = list(meta["warnings"])
        # the samples before the sample filters (perf report --comms, --pid, --tid, --cpu)
        m["samples_before_filter"] = int(ev["samples"]) + int(raw["header"].get("samples_filtered_out", 0))
        out.append(Profile(source=str(path), event=name, symbols=symbols, self_weight=self_w[used].copy(),
                           children_weight=child_w[used].copy(), total_weight=float(ev["total_weight"]),
                           samples=int(ev["samples"]), stacks=stacks, edges=edges, stack_counts=counts,
                           process_stacks=processes, stack_table=table, weight_unit=unit,
                           arch=meta.get("arch"), meta=m))
    return out


def _event_index(raw: dict, path: Path, event: str) -> int:
    names = [e["name"] for e in raw["events"]]
    if event in names:
        return names.index(event)
    base = [i for i, n in enumerate(names) if n.split(":")[0] == event.split(":")[0]]
    if len(base) == 1:
        return base[0]
    raise InputError(f"{path} has no event {event!r}; it has {', '.join(names)}")


def load_all(path: str | Path, *, kallsyms: str | Path | None = None,
             symfs: list[str] | str | None = None, by_process: bool = False,
             kallsyms_unchecked: bool = False, beside: Path | None = None,
             filters: Filters = NONE) -> list[Profile]:
    """Every event of a perf.data file, one Profile each, in the file's order (``by_process``,
    ``kallsyms_unchecked``, ``beside``, ``filters``: see :func:`load`)."""
    path = Path(path)
    raw, ks = _read(path, kallsyms, symfs, by_process, kallsyms_unchecked, beside, filters)
    meta = _meta(raw, path, ks)
    return _profiles(raw, path, meta, list(range(len(raw["events"]))))


def load(path: str | Path, *, kallsyms: str | Path | None = None, symfs: list[str] | str | None = None,
         event: str | None = None, by_process: bool = False, kallsyms_unchecked: bool = False,
         beside: Path | None = None, filters: Filters = NONE) -> Profile:
    """One event of a perf.data file (``event``, else the first event with samples). ``by_process``
    also fills ``process_stacks``: each stack per process name, the comm of the sample's thread as
    perf script names it (``:TID`` for a thread the file never names); off by default, since only
    exports and folded files need it and it costs the reader time. The kallsyms used is checked
    against the recording and refused when it is another kernel's, unless ``kallsyms_unchecked``.
    ``beside``: the name the kallsyms is looked for beside when none is given (a decompressed copy's
    original's, uncompressed); default ``path``. ``filters``: its sample filters (comm, pid, tid,
    cpu) drop samples before they are aggregated (:mod:`kperfdiff.ingest.filters`)."""
    path = Path(path)
    raw, ks = _read(path, kallsyms, symfs, by_process, kallsyms_unchecked, beside, filters)
    meta = _meta(raw, path, ks)
    if event is not None:
        i = _event_index(raw, path, event)
    else:
        with_samples = [i for i, e in enumerate(raw["events"]) if e["samples"]]
        i = with_samples[0] if with_samples else 0
    return _profiles(raw, path, meta, [i])[0]
