"""Loading profiles: name a file's format by its first bytes, read it with the one reader of
that format, and turn store references (RUN[:benchmark[@CORES]]) into one profile per
repetition, its parallel copies merged.

Many files (both sides of a diff, every repetition of a side) are read at once, one per core:
the native perf.data reader releases the GIL, so threads scale. The profiles come back in the
order asked for and are the same as read one after another (``workers=1``). Fewer files than
cores share the rest: each file is read on its share of them (``perfdata.threads_per_file``)."""
from __future__ import annotations

import os
from collections.abc import Callable
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kperfdiff.core import nativecore
from kperfdiff.core.errors import InputError
from kperfdiff.core.files import check_input_file
from kperfdiff.ingest import filters as sample_filters, perfdata, source, text
from kperfdiff.ingest.filters import NONE, Filters
from kperfdiff.ingest.profile import Profile, merge

if TYPE_CHECKING:
    from kperfdiff.core.records import StoredProfile

HEAD_BYTES = 65536            # what sniffing reads, extended to the end of a longer first line
MAX_FIRST_LINE = 16 << 20     # ... up to this


def sniff(path: Path) -> str:
    """Name the format of a profile file: perf.data, perf-script, perf-report or folded."""
    size = check_input_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES) if size else b""
            # a long first line (a folded stack can be 100 KiB) is sniffed whole
            while len(head) < size and b"\n" not in head and len(head) < MAX_FIRST_LINE:
                more = f.read(HEAD_BYTES)
                if not more:
                    break
                head += more
            if b"\n" in head[HEAD_BYTES:]:
                head = head[:head.index(b"\n", HEAD_BYTES) + 1]
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if not head:
        raise InputError(f"{path} is empty; it holds no profile")
    if head.startswith(b"PERFILE2") or head.startswith(b"2ELIFREP"):
        return "perf.data"
    if head.startswith(b"PERFFILE"):
        raise InputError(f"{path} is a perf.data in the old version-1 format; convert it with a newer perf (perf inject)")
    if b"\0" in head:
        raise InputError(f"{path} is not a profile kperfdiff can read (perf.data, perf script, perf report --stdio or folded stacks)")
    return text.sniff_text(path, head.decode("utf-8", "replace"))


def _beside(src) -> Path | None:
    """Where a decompressed perf.data's kallsyms lies: beside the original, named after the
    uncompressed file (None when the file was read as it is, or from standard input)."""
    if src.original is not None and src.original != src.path:
        return src.original.with_name(src.path.name)
    return None


def _as_given(prof: Profile, src: source.Local) -> None:
    """A profile read from a temporary copy (standard input, a gzip file) named, in its source and
    its warnings, as the user gave it."""
    if src.path != src.original:
        prof.source = src.shown
        if prof.meta.get("warnings"):
            prof.meta["warnings"] = [src.as_given(w) for w in prof.meta["warnings"]]


def load(path: str | Path, *, kallsyms: str | Path | None = None, symfs: list[str] | None = None,
         event: str | None = None, label: str = "", folded_kernel: str = "auto", by_process: bool = False,
         kallsyms_unchecked: bool = False, filters: Filters = NONE) -> Profile:
    """Read one profile file of any supported format (one event of it), ``-`` for standard input, either
    possibly gzip-compressed (:mod:`kperfdiff.ingest.source`); ``kallsyms``, ``symfs`` and
    ``kallsyms_unchecked`` (use a kallsyms the recording does not match) serve perf.data,
    ``folded_kernel`` folded stacks. ``by_process`` has a perf.data's stacks counted per
    process name too (``Profile.process_stacks``, which perf script text always has). ``filters``:
    perf report's filters (:mod:`kperfdiff.ingest.filters`); the profile is then the kept samples."""
    with source.local(path) as src:
        fmt = sniff(src.path)
        sample_filters.refuse_unanswerable(filters, fmt, src.shown)
        if fmt == "perf.data":
            prof = perfdata.load(src.path, kallsyms=kallsyms, symfs=symfs, event=event, by_process=by_process,
                                 kallsyms_unchecked=kallsyms_unchecked, beside=_beside(src), filters=filters)
        else:
            prof = text.load(src.path, fmt, event=event, kernel_frames=folded_kernel, filters=filters)
        prof = _filtered(prof, filters, src.shown)
        _as_given(prof, src)
    if label:
        prof.label = label
    elif not prof.label:
        prof.label = prof.arch or (src.path.stem if src.original else "stdin")
    return prof


def _filtered(prof: Profile, filters: Filters, shown: str) -> Profile:
    """``prof`` with the filters the readers leave to its stacks applied (DSO, idle), and what was
    kept noted (a filter keeping nothing is refused)."""
    if not filters:
        return prof
    sample_filters.check_cpus(filters, prof.meta.get("event_attr"), shown)
    if "script_columns" in prof.meta:
        sample_filters.check_script_columns(filters, prof.meta.pop("script_columns"), shown)
    total = prof.meta.get("samples_before_filter", prof.samples)
    if prof.samples:
        prof = sample_filters.keep_stacks(prof, filters, shown)
    return sample_filters.record(prof, filters, total, shown)


def load_events(path: str | Path, *, kallsyms: str | Path | None = None, symfs: list[str] | None = None,
                folded_kernel: str = "auto", by_process: bool = False,
                kallsyms_unchecked: bool = False, filters: Filters = NONE) -> list[Profile]:
    """Every event of one profile file (``-`` for standard input, gzip allowed), one Profile each, in
    the file's order: a perf.data's events, a perf script's or perf report's events; folded stacks
    have one. ``filters``: as for :func:`load`, on every event."""
    with source.local(path) as src:
        fmt = sniff(src.path)
        sample_filters.refuse_unanswerable(filters, fmt, src.shown)
        if fmt == "perf.data":
            profs = perfdata.load_all(src.path, kallsyms=kallsyms, symfs=symfs, by_process=by_process,
                                      kallsyms_unchecked=kallsyms_unchecked, beside=_beside(src), filters=filters)
            if filters and profs and not any(p.samples for p in profs):
                profs = [_filtered(profs[0], filters, src.shown)]    # refused: nothing kept
            profs = [_filtered(p, filters, src.shown) for p in profs if p.samples]
        else:
            first = text.load(src.path, fmt, kernel_frames=folded_kernel, filters=filters)
            rest = [text.load(src.path, fmt, event=ev, kernel_frames=folded_kernel, filters=filters)
                    for ev in first.meta.get("events", [])[1:]]
            profs = [_filtered(p, filters, src.shown) for p in [first] + [p for p in rest if p.event != first.event]]
        if not profs:
            raise InputError(f"{src.shown} holds no samples")
        for p in profs:
            _as_given(p, src)
            p.label = p.label or p.arch or (src.path.stem if src.original else "stdin")
    return profs


def default_jobs() -> int:
    """How many files are read at once: one per CPU this process may run on."""
    return perfdata.usable_cpus()


def load_many(jobs: list[Callable[[], Profile]], workers: int | None = None,
              meanwhile: Callable[[], object] | None = None) -> list[Profile]:
    """Run profile loads, up to ``workers`` at once (default: one per CPU), and return their
    profiles in order. When loads fail, the first failing one in order raises, as it would have
    read one after another. ``meanwhile`` is run once by the calling thread while the files are
    read (work that needs no profile, such as imports; before the loads when there is one worker).
    perf.data files read by one call share the ELF symbol tables they all need (parsed once)."""
    cores = default_jobs()
    workers = min(len(jobs), workers or cores)
    before = perfdata.threads_per_file, perfdata.symbol_share
    perfdata.threads_per_file = max(1, cores // max(1, workers))
    native = nativecore.available()
    if len(jobs) > 1 and native is not None:
        perfdata.symbol_share = native.SymbolShare()
    try:
        if workers <= 1:
            if meanwhile is not None:
                meanwhile()
            return [job() for job in jobs]
        return _in_threads(jobs, workers, meanwhile)
    finally:
        perfdata.threads_per_file, perfdata.symbol_share = before


def _in_threads(jobs: list[Callable[[], Profile]], workers: int,
                meanwhile: Callable[[], object] | None) -> list[Profile]:
    """The jobs on ``workers`` threads, each taking the next job not yet taken; their results in
    order, or the first failure in order raised. (Plain threads: concurrent.futures would import
    logging, a few ms of every diff's start-up.)"""
    results: list = [None] * len(jobs)
    failed: list = [None] * len(jobs)
    todo = iter(range(len(jobs)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                results[i] = jobs[i]()
            except BaseException as e:   # noqa: BLE001 - raised in the calling thread, in order
                failed[i] = e

    threads = [threading.Thread(target=work, name=f"kperfdiff-load-{n}") for n in range(workers)]
    for t in threads:
        t.start()
    if meanwhile is not None:
        meanwhile()
    for t in threads:
        t.join()
    first = next((e for e in failed if e is not None), None)
    if first is not None:
        raise first
    return results


# -- sides of a diff: files or store references -----------------------------------

ProfileRef = tuple[list[Path], dict]   # the parallel copies of one repetition, and what the store knows


def resolve_side(spec: str, lookup: Callable[[str], list[ProfileRef]]) -> list[ProfileRef]:
    """Files (comma-separated allowed) or store references -> one (paths, meta) per replicate; the
    paths of one replicate are the parallel copies of one repetition, merged when loaded.
    ``lookup`` turns a store reference into its replicates."""
    if os.path.exists(spec) or spec == source.STDIN:
        return [([Path(spec)], {})]
    out = []
    for part in [s.strip() for s in spec.split(",")] if "," in spec else [spec]:
        if not part:
            raise InputError(f"{spec!r} has an empty entry between commas")
        if os.path.exists(part):
            out.append(([Path(part)], {}))
            continue
        out.extend(lookup(part))
    return out


def _check_copy(path: Path, meta: dict) -> None:
    if str(path) == source.STDIN:
        return
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a profile; name the perf.data inside it")
    if not path.exists():
        raise InputError(f"{path} is missing (named by run {meta.get('run_id')} in the store; was the "
                         f"store's .artefacts folder moved without it?)")


def _replicate(paths: list[Path], meta: dict, copies: list[Profile]) -> Profile:
    """One replicate of a side: its parallel copies merged, with what the store knows of it."""
    prof = merge(copies, f"{paths[0]}" + (f" (+{len(paths) - 1} parallel copies)" if len(paths) > 1 else ""))
    if meta.get("counted"):
        prof.event, prof.weight_unit = "instructions", "instructions"
    for key in ("ops", "cpu_time_ns", "time_unit", "instructions"):
        if meta.get(key):
            prof.meta[key] = meta[key]
    if meta.get("arch"):
        prof.arch = meta["arch"]
    if meta.get("label"):
        prof.label = meta["label"]
    return prof


def load_sides(specs: list[str], lookup: Callable[[str], list[ProfileRef]], *, kallsyms: list[str | None],
               symfs: list[str | None], event: str | None = None, folded_kernel: str = "auto",
               workers: int | None = None, by_process: bool = False,
               kallsyms_unchecked: bool = False, meanwhile: Callable[[], object] | None = None,
               filters: Filters = NONE) -> list[list[Profile]]:
    """One profile per replicate of each side (``specs[i]``, read with ``kallsyms[i]`` and
    ``symfs[i]``; each replicate's parallel copies merged), every file of every side read at once
    (``by_process``, ``kallsyms_unchecked``, ``filters``: as for :func:`load`, ``filters`` on
    every side; ``meanwhile``: as for :func:`load_many`)."""
    sides = [resolve_side(spec, lookup) for spec in specs]
    if sum(str(p) == source.STDIN for refs in sides for paths, _ in refs for p in paths) > 1:
        raise InputError("standard input (-) can be read only once; give at most one profile as -")
    jobs = []
    for refs, ks, fs in zip(sides, kallsyms, symfs):
        for paths, meta in refs:
            for path in paths:
                _check_copy(path, meta)
                copy_fs = fs or meta.get("symfs")
                # exact instruction counts are folded stacks of one event, which the store names
                jobs.append(partial(load, path, kallsyms=ks or meta.get("kallsyms"),
                                    symfs=[copy_fs] if copy_fs else None,
                                    event=None if meta.get("counted") else event, folded_kernel=folded_kernel,
                                    by_process=by_process, kallsyms_unchecked=kallsyms_unchecked,
                                    filters=filters))
    loaded = iter(load_many(jobs, workers, meanwhile))
    return [[_replicate(paths, meta, [next(loaded) for _ in paths]) for paths, meta in refs] for refs in sides]


def load_side(spec: str, lookup: Callable[[str], list[ProfileRef]], *, kallsyms: str | None = None,
              symfs: str | None = None, event: str | None = None, folded_kernel: str = "auto",
              workers: int | None = None, by_process: bool = False, kallsyms_unchecked: bool = False,
              filters: Filters = NONE) -> list[Profile]:
    """One profile per replicate of a diff side (its parallel copies merged)."""
    return load_sides([spec], lookup, kallsyms=[kallsyms], symfs=[symfs], event=event,
                      folded_kernel=folded_kernel, workers=workers, by_process=by_process,
                      kallsyms_unchecked=kallsyms_unchecked, filters=filters)[0]


def load_stored(entries: list[StoredProfile], label: str) -> list[Profile]:
    """The profiles of one comparison cell as the store lists them (path, kallsyms, run_id, rep, ops,
    cpu_time_ns): one per repetition (its parallel copies merged), every stored repetition, as
    ``kperfdiff diff RUN:BENCHMARK`` reads them; a missing file is an error naming it, never a
    silently smaller side."""
    by_rep: dict = {}
    for p in entries:
        by_rep.setdefault((p.run_id or 0, p.rep or 0), []).append(p)
    reps = [by_rep[rep] for rep in sorted(by_rep)]
    for p in (p for rep in reps for p in rep):
        if not Path(p.path).exists():
            raise InputError(f"the profile {p.path} is missing from the store's artefact folder")
    loaded = iter(load_many([partial(load, p.path, kallsyms=p.kallsyms, label=label)
                             for rep in reps for p in rep]))
    out = []
    for rep in reps:
        copies = []
        for p in rep:
            prof = next(loaded)
            if p.ops:
                prof.meta["ops"] = p.ops
            if p.cpu_time_ns:
                prof.meta["cpu_time_ns"] = p.cpu_time_ns
            copies.append(prof)
        prof = merge(copies, rep[0].path)
        prof.label = label
        out.append(prof)
    return out
