"""Profiles in the formats other tools load: speedscope, pprof, Firefox Profiler, folded stacks.

Every encoder takes profiles (:class:`kperfdiff.ingest.profile.Profile`) and returns the
file's bytes; none reads or writes a file. A profile's stacks are its rows
(``Profile.stack_rows``: process, stack root first, weight, samples), so every format shows
the same numbers: a stack's samples, and its weight where the event has one (``cpu-clock``
and ``task-clock`` periods are nanoseconds, other periods are event counts). The process is perf
script's comm column, or for perf.data the sample's thread's comm as perf script names it (when
read with ``by_process``, as ``kperfdiff export`` does).

speedscope
    The file format of speedscope (``$schema``
    https://www.speedscope.app/file-format-schema.json): the frames shared by all profiles
    (``name``, and the DSO as ``file``), one ``sampled`` profile per event, stacks root first,
    weighted in nanoseconds (unit ``nanoseconds``) or, with ``unit="samples"`` or an event
    without time, by their samples (unit ``none``).
pprof
    A gzip-compressed ``perftools.profiles.Profile`` protocol buffer, encoded by the protobuf
    library from a descriptor built here from the format's documented messages. Sample types:
    ``samples/count``, then ``cpu/nanoseconds`` (a time event) or ``EVENT/count`` (its period),
    the last being pprof's default. One mapping per DSO (``[kernel.kallsyms]`` for kernel
    code), one function and one location per symbol; a sample's process is its ``comm`` label.
firefox
    The Gecko profile format of the Firefox Profiler (``meta.version`` 29, which the
    profiler upgrades on load): one thread per process name (else one for the profile), the
    frames as presymbolicated label frames in a ``Kernel`` or ``User`` category. The format has
    no sample weights, so a stack appears once per sample, one sampling interval apart, grouped
    by stack: the call tree and flame graph are the recording's, the timeline is not.
folded
    ``frame;frame;frame COUNT`` lines (FlameGraph's and inferno's input), root first, the
    process name as the root frame when the profile knows it, kernel frames ending in ``_[k]``;
    counts are samples (``unit="samples"``) or nanoseconds (``unit="ns"``).
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kperfdiff.core.errors import InputError

FORMATS = ("speedscope", "pprof", "firefox", "folded")
UNITS = ("samples", "ns")
SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"
GECKO_VERSION = 29
MAX_FIREFOX_SAMPLES = 20_000_000   # the Gecko format lists every sample: beyond this, use speedscope or pprof
KERNEL_SUFFIX = "_[k]"


# -- what every format shares --------------------------------------------------------------------

def has_time(prof) -> bool:
    """True when the profile's weights are nanoseconds (cpu-clock, task-clock)."""
    return prof.weight_unit == "ns"


def check_unit(prof, unit: str) -> None:
    if unit not in UNITS:
        raise InputError(f"unit {unit!r} is not one of {', '.join(UNITS)}")
    if unit == "ns" and not has_time(prof):
        raise InputError(f"{prof.source}: its event {prof.event} is weighted in {prof.weight_unit}, not "
                         f"nanoseconds; use --unit samples")


def _value(weight: float, count: int, unit: str) -> int:
    return int(round(weight)) if unit == "ns" else int(count)


def held(merged, parts: list):
    """``merged`` (the profiles ``parts`` added together: repetitions recorded one after another)
    with its time span the sum of theirs, when every part has one: pprof's Duration of 9
    repetitions is 9 recordings' long, not the first's."""
    spans = [p.meta.get("duration_ns") for p in parts]
    if len(parts) > 1:
        merged.meta = {**merged.meta, "duration_ns": sum(spans) if all(spans) else None}
    return merged


def frame_label(sym) -> str:
    """A symbol as a folded-stack frame: its name, kernel code marked ``_[k]``."""
    return sym.name + KERNEL_SUFFIX if sym.kernel else sym.name


def folded(prof, unit: str = "samples") -> str:
    """Folded stacks of one profile (see module doc), sorted, zero counts left out."""
    check_unit(prof, unit)
    labels = [frame_label(s) for s in prof.symbols]
    out: dict[str, int] = defaultdict(int)
    for comm, stack, w, n in prof.stack_rows():
        frames = ([comm] if comm else []) + [labels[i] for i in stack]
        if frames:
            out[";".join(frames)] += _value(w, n, unit)
    lines = [f"{s} {c}" for s, c in sorted(out.items()) if c > 0]
    return "\n".join(lines) + ("\n" if lines else "")


# -- speedscope ------------------------------------------------------------------------------------

def speedscope(profiles: list, name: str, unit: str | None = None) -> bytes:
    """speedscope's JSON file: one sampled profile per profile (event), frames shared."""
    frames: list[dict] = []
    index: dict[tuple[str, str], int] = {}
    out = []
    for prof in profiles:
        u = unit or ("ns" if has_time(prof) else "samples")
        check_unit(prof, u)
        ids = []
        for s in prof.symbols:
            key = (frame_label(s), s.dso)
            i = index.get(key)
            if i is None:
                i = index[key] = len(frames)
                frames.append({"name": key[0], **({"file": s.dso} if s.dso else {})})
            ids.append(i)
        samples, weights = [], []
        for comm, stack, w, n in prof.stack_rows():
            v = _value(w, n, u)
            if v <= 0 or not stack:
                continue
            samples.append([ids[i] for i in stack])
            weights.append(v)
        total = sum(weights)
        out.append({"type": "sampled", "name": f"{prof.label or prof.source}: {prof.event}",
                    "unit": "nanoseconds" if u == "ns" else "none", "startValue": 0, "endValue": total,
                    "samples": samples, "weights": weights})
    doc = {"$schema": SPEEDSCOPE_SCHEMA, "name": name, "exporter": "kperfdiff", "activeProfileIndex": 0,
           "shared": {"frames": frames}, "profiles": out}
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8")


# -- pprof -----------------------------------------------------------------------------------------

# perftools.profiles (profile.proto, the pprof format): message -> (field, number, type, message type,
# repeated). Types are descriptor_pb2.FieldDescriptorProto's TYPE_* names.
_PPROF_MESSAGES = {
    "Profile": [("sample_type", 1, "MESSAGE", "ValueType", True), ("sample", 2, "MESSAGE", "Sample", True),
                ("mapping", 3, "MESSAGE", "Mapping", True), ("location", 4, "MESSAGE", "Location", True),
                ("function", 5, "MESSAGE", "Function", True), ("string_table", 6, "STRING", None, True),
                ("drop_frames", 7, "INT64", None, False), ("keep_frames", 8, "INT64", None, False),
                ("time_nanos", 9, "INT64", None, False), ("duration_nanos", 10, "INT64", None, False),
                ("period_type", 11, "MESSAGE", "ValueType", False), ("period", 12, "INT64", None, False),
                ("comment", 13, "INT64", None, True), ("default_sample_type", 14, "INT64", None, False),
                ("doc_url", 15, "INT64", None, False)],
    "ValueType": [("type", 1, "INT64", None, False), ("unit", 2, "INT64", None, False)],
    "Sample": [("location_id", 1, "UINT64", None, True), ("value", 2, "INT64", None, True),
               ("label", 3, "MESSAGE", "Label", True)],
    "Label": [("key", 1, "INT64", None, False), ("str", 2, "INT64", None, False),
              ("num", 3, "INT64", None, False), ("num_unit", 4, "INT64", None, False)],
    "Mapping": [("id", 1, "UINT64", None, False), ("memory_start", 2, "UINT64", None, False),
                ("memory_limit", 3, "UINT64", None, False), ("file_offset", 4, "UINT64", None, False),
                ("filename", 5, "INT64", None, False), ("build_id", 6, "INT64", None, False),
                ("has_functions", 7, "BOOL", None, False), ("has_filenames", 8, "BOOL", None, False),
                ("has_line_numbers", 9, "BOOL", None, False), ("has_inline_frames", 10, "BOOL", None, False)],
    "Location": [("id", 1, "UINT64", None, False), ("mapping_id", 2, "UINT64", None, False),
                 ("address", 3, "UINT64", None, False), ("line", 4, "MESSAGE", "Line", True),
                 ("is_folded", 5, "BOOL", None, False)],
    "Line": [("function_id", 1, "UINT64", None, False), ("line", 2, "INT64", None, False),
             ("column", 3, "INT64", None, False)],
    "Function": [("id", 1, "UINT64", None, False), ("name", 2, "INT64", None, False),
                 ("system_name", 3, "INT64", None, False), ("filename", 4, "INT64", None, False),
                 ("start_line", 5, "INT64", None, False)],
}
_PPROF_PACKAGE = "perftools.profiles"
_pprof_class = None


def pprof_message_class():
    """The protobuf class of ``perftools.profiles.Profile``, built once from :data:`_PPROF_MESSAGES`
    (in a pool of its own, so it never clashes with another copy of profile.proto)."""
    global _pprof_class
    if _pprof_class is None:
        f = descriptor_pb2.FileDescriptorProto(name="kperfdiff/profile.proto", package=_PPROF_PACKAGE,
                                               syntax="proto3")
        F = descriptor_pb2.FieldDescriptorProto
        for msg, fields in _PPROF_MESSAGES.items():
            m = f.message_type.add(name=msg)
            for name, number, typ, ref, repeated in fields:
                fd = m.field.add(name=name, number=number, type=getattr(F, "TYPE_" + typ),
                                 label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
                if ref:
                    fd.type_name = f".{_PPROF_PACKAGE}.{ref}"
        pool = descriptor_pool.DescriptorPool()
        pool.Add(f)
        _pprof_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PPROF_PACKAGE}.Profile"))
    return _pprof_class


def pprof(prof) -> bytes:
    """The profile as gzip-compressed profile.proto (see module doc)."""
    strings: dict[str, int] = {"": 0}

    def s(text: str) -> int:
        i = strings.get(text)
        if i is None:
            i = strings[text] = len(strings)
        return i

    msg = pprof_message_class()()
    event = prof.event.split(":")[0] or "event"
    types = [("samples", "count")]
    if has_time(prof):
        types.append(("cpu", "nanoseconds"))
    elif prof.weight_unit != "samples":
        types.append((event, "count"))
    for t, u in types:
        msg.sample_type.add(type=s(t), unit=s(u))
    weighted = len(types) == 2
    if weighted and prof.total_weight >= 2.0 ** 63:
        # a damaged period (perf.data keeps 64 unsigned bits) that pprof's signed values cannot hold
        raise InputError(f"{prof.source}: its {types[-1][0]} total of {prof.total_weight:.4g} {types[-1][1]} is more "
                         f"than pprof's 64-bit values hold (is a sample period damaged?); --to speedscope or "
                         f"folded can write it")
    if prof.samples:
        msg.period_type.type, msg.period_type.unit = s(types[-1][0]), s(types[-1][1])
        msg.period = int(round(prof.total_weight / prof.samples)) if weighted else 1
    mappings: dict[str, int] = {}
    for sym in prof.symbols:
        dso = sym.dso or ("[kernel.kallsyms]" if sym.kernel else "[unknown]")
        if dso not in mappings:
            mappings[dso] = len(mappings) + 1
            msg.mapping.add(id=mappings[dso], filename=s(dso), has_functions=True)
    for i, sym in enumerate(prof.symbols, 1):
        dso = sym.dso or ("[kernel.kallsyms]" if sym.kernel else "[unknown]")
        msg.function.add(id=i, name=s(sym.name), system_name=s(sym.name), filename=s(dso))
        loc = msg.location.add(id=i, mapping_id=mappings[dso])
        loc.line.add(function_id=i)
    comm_key = s("comm") if prof.process_stacks else 0
    for comm, stack, w, n in prof.stack_rows():
        if not stack or (n <= 0 and w <= 0):
            continue
        sample = msg.sample.add(location_id=[i + 1 for i in reversed(stack)],
                                value=[int(n)] + ([int(round(w))] if weighted else []))
        if comm_key and comm:
            sample.label.add(key=comm_key, str=s(comm))
    duration = prof.meta.get("duration_ns")
    if duration and 0 < duration < 1 << 63:
        msg.duration_nanos = int(duration)
    msg.string_table.extend(strings)
    return gzip.compress(msg.SerializeToString(), mtime=0)


# -- Firefox Profiler (Gecko format) ---------------------------------------------------------------

_CATEGORIES = [{"name": "Other", "color": "grey", "subcategories": ["Other"]},
               {"name": "Kernel", "color": "orange", "subcategories": ["Other"]},
               {"name": "User", "color": "blue", "subcategories": ["Other"]}]
_MARKER_SCHEMA = {"name": 0, "startTime": 1, "endTime": 2, "phase": 3, "category": 4, "data": 5}


def firefox(prof, start_time_ms: float = 0.0) -> bytes:
    """The profile in the Firefox Profiler's Gecko format (see module doc)."""
    rows = prof.stack_rows()
    total = sum(n for _, _, _, n in rows)
    if total > MAX_FIREFOX_SAMPLES:
        raise InputError(f"{prof.source} has {total:,} samples; the Firefox Profiler's format lists each one, and "
                         f"kperfdiff writes at most {MAX_FIREFOX_SAMPLES:,}: export to speedscope or pprof instead")
    interval_ms = (prof.total_weight / prof.samples / 1e6) if has_time(prof) and prof.samples else 1.0
    by_thread: dict[str, list] = defaultdict(list)
    for comm, stack, w, n in rows:
        by_thread[comm].append((stack, n))
    threads = []
    for tid, (comm, stacks) in enumerate(sorted(by_thread.items()), 1):
        strings: list[str] = []
        string_ids: dict[str, int] = {}
        frame_ids: dict[int, int] = {}
        frame_data: list[list] = []
        stack_ids: dict[tuple[int, int | None], int] = {}
        stack_data: list[list] = []
        sample_data: list[list] = []
        t = 0.0

        def frame(sym_index: int) -> int:
            f = frame_ids.get(sym_index)
            if f is None:
                sym = prof.symbols[sym_index]
                name = sym.name + (f" ({sym.dso})" if sym.dso else "")
                sid = string_ids.get(name)
                if sid is None:
                    sid = string_ids[name] = len(strings)
                    strings.append(name)
                f = frame_ids[sym_index] = len(frame_data)
                # location, relevantForJS, innerWindowID, implementation, line, column, category, subcategory
                frame_data.append([sid, False, 0, None, None, None, 1 if sym.kernel else 2, 0])
            return f

        for stack, n in sorted(stacks):
            if not stack or n <= 0:
                continue
            prefix = None
            for i in stack:
                key = (frame(i), prefix)
                st = stack_ids.get(key)
                if st is None:
                    st = stack_ids[key] = len(stack_data)
                    stack_data.append([prefix, key[0]])
                prefix = st
            for _ in range(int(n)):
                sample_data.append([prefix, round(t, 6), 0.0])
                t += interval_ms
        name = comm or prof.label or prof.event
        threads.append({
            "name": name, "processName": name, "processType": "default", "registerTime": 0,
            "unregisterTime": None, "tid": tid, "pid": tid,
            "markers": {"schema": dict(_MARKER_SCHEMA), "data": []},
            "samples": {"schema": {"stack": 0, "time": 1, "eventDelay": 2}, "data": sample_data},
            "frameTable": {"schema": {"location": 0, "relevantForJS": 1, "innerWindowID": 2, "implementation": 3,
                                      "line": 4, "column": 5, "category": 6, "subcategory": 7},
                           "data": frame_data},
            "stackTable": {"schema": {"prefix": 0, "frame": 1}, "data": stack_data},
            "stringTable": strings,
        })
    meta = {"version": GECKO_VERSION, "startTime": start_time_ms, "shutdownTime": None,
            "interval": interval_ms, "stackwalk": 1, "debug": 0, "gcpoison": 0, "asyncstack": 0,
            "processType": 0, "presymbolicated": True, "product": f"kperfdiff: {prof.label or prof.source} ({prof.event})",
            "categories": _CATEGORIES, "markerSchema": []}
    if prof.meta.get("arch"):
        meta["abi"] = prof.meta["arch"]
    if prof.meta.get("nr_cpus"):
        try:
            meta["logicalCPUs"] = int(prof.meta["nr_cpus"])
        except (TypeError, ValueError):
            pass
    doc = {"meta": meta, "libs": [], "pausedRanges": [], "processes": [], "threads": threads}
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode("utf-8")
