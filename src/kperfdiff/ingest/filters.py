"""perf report's sample filters, applied where a profile is read: ``--comm``, ``--pid``, ``--tid``,
``--cpu`` (the sample's thread's comm at sample time as perf script names it, its pid, tid and
CPU), ``--dso`` (the DSO of the sample's leaf frame, by full path or base name; ``[kernel.kallsyms]``
for the kernel) and ``--exclude-idle`` (the idle loop's samples: :mod:`kperfdiff.symbols.idle`).

A filtered profile is its kept samples: its weights, stacks and sample count are theirs, so shares
are of the kept samples (perf report ``--percentage relative``). The sample filters run in the
native reader for perf.data (samples dropped before they are aggregated) and while perf script
text is parsed; the DSO and idle filters run on the profile's stacks (:func:`keep_stacks`). An
input that cannot answer a filter is refused, and so is a filter that keeps no sample, each with
one sentence naming the file (``meta["filtered"]`` says what was kept otherwise)."""
from __future__ import annotations

import os
from dataclasses import dataclass

from kperfdiff.core.errors import InputError
from kperfdiff.ingest.profile import Builder, Profile, Symbol
from kperfdiff.symbols.idle import idle_table, is_idle

SAMPLE_CPU = 1 << 7        # perf_event_attr.sample_type: samples carry their CPU


@dataclass(frozen=True)
class Filters:
    comms: tuple[str, ...] | None = None
    pids: tuple[int, ...] | None = None
    tids: tuple[int, ...] | None = None
    cpus: tuple[int, ...] | None = None
    dsos: tuple[str, ...] | None = None
    exclude_idle: bool = False

    def __bool__(self) -> bool:
        return any(v for v in (self.comms, self.pids, self.tids, self.cpus, self.dsos)) or self.exclude_idle

    def sample_kwargs(self) -> dict:
        """The native reader's keywords for the sample filters (none when there are none)."""
        return {k: list(v) for k, v in (("comms", self.comms), ("pids", self.pids), ("tids", self.tids),
                                        ("cpus", self.cpus)) if v}

    def asked(self) -> list[str]:
        """The filters given, as the options that gave them (``--comm dd``)."""
        out = []
        for opt, v in (("--comm", self.comms), ("--pid", self.pids), ("--tid", self.tids)):
            if v:
                out.append(f"{opt} {','.join(map(str, v))}")
        if self.cpus:
            out.append(f"--cpu {cpu_list_text(self.cpus)}")
        if self.dsos:
            out.append(f"--dso {','.join(self.dsos)}")
        if self.exclude_idle:
            out.append("--exclude-idle")
        return out

    def describe(self) -> str:
        return " ".join(self.asked())

    def keeps(self, comm: str, pid: int | None, tid: int | None, cpu: int | None) -> bool:
        """Whether a sample of these (perf script's columns; None: not shown) is kept."""
        return ((not self.comms or comm in self.comms) and (not self.pids or pid in self.pids)
                and (not self.tids or tid in self.tids) and (not self.cpus or cpu in self.cpus))


NONE = Filters()


def _names(text: str | None, what: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not all(names):
        raise InputError(f"{what} takes names separated by commas, not {text!r}")
    return names


def _ints(text: str | None, what: str) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        vals = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"{what} takes numbers separated by commas, like 1234,1235, not {text!r}") from None
    if any(v < -1 for v in vals):
        raise InputError(f"{what} takes ids of 0 or more, not {text!r}")
    return vals


def parse_cpu_list(text: str | None) -> tuple[int, ...] | None:
    """perf's CPU list (``0-2,5``) -> the CPUs, sorted."""
    if text is None:
        return None
    cpus: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise InputError(f"--cpu takes a CPU list such as 0-2,5, not {text!r}") from None
        if a < 0 or b < a or b - a > 65536:
            raise InputError(f"--cpu takes a CPU list such as 0-2,5, not {text!r}")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


def cpu_list_text(cpus) -> str:
    """The CPUs as perf writes a CPU list (``0-2,5``)."""
    out, cpus = [], sorted(cpus)
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def from_args(args) -> Filters:
    """The filters of a command's options (see :func:`add_arguments`)."""
    return Filters(comms=_names(args.comm, "--comm"), pids=_ints(args.pid, "--pid"), tids=_ints(args.tid, "--tid"),
                   cpus=parse_cpu_list(args.cpu), dsos=_names(args.dso, "--dso"), exclude_idle=args.exclude_idle)


def add_arguments(p) -> None:
    """perf report's filters as options of a command (diff, export)."""
    p.add_argument("--comm", "--comms", dest="comm", metavar="NAME[,NAME...]",
                   help="keep only the samples of these process names (the sample's thread's comm at the time of "
                        "the sample, as perf script names it), as perf report --comms")
    p.add_argument("--pid", metavar="PID[,PID...]", help="keep only the samples of these processes, as perf report --pid")
    p.add_argument("--tid", metavar="TID[,TID...]", help="keep only the samples of these threads, as perf report --tid")
    p.add_argument("--cpu", metavar="LIST", help="keep only the samples taken on these CPUs (a CPU list: 0-2,5), "
                                                 "as perf report --cpu; the recording must carry CPUs "
                                                 "(perf record -a or --sample-cpu)")
    p.add_argument("--dso", "--dsos", dest="dso", metavar="NAME[,NAME...]",
                   help="keep only the samples whose leaf function is in these DSOs (full path or base name; "
                        "[kernel.kallsyms] for the kernel), as perf report --dsos")
    p.add_argument("--exclude-idle", action="store_true",
                   help="drop the samples of the kernel's idle loop (a leaf idle function of the profile's "
                        "architecture, or a stack of the idle loop only); interrupts taken in idle are kept")


# -- what an input can answer -------------------------------------------------------

# what a text input without per-sample facts is, as a refusal names it
_NO_SAMPLE_FACTS = {"perf-report": "perf report text, which has no per-sample process, thread, CPU or DSO to filter on",
                    "folded": "folded stacks, which carry no process, thread, CPU or DSO per sample"}


def refuse_unanswerable(f: Filters, fmt: str, shown: str) -> None:
    """Refuse the filters an input of format ``fmt`` cannot answer (one sentence)."""
    what = _NO_SAMPLE_FACTS.get(fmt)
    asked = [a for a in f.asked() if a != "--exclude-idle"] if what else []
    if asked:
        raise InputError(f"{asked[0]}: {shown} is {what}; give the perf.data or perf script output")


def check_cpus(f: Filters, event_attr: dict | None, shown: str) -> None:
    """``--cpu`` on a perf.data whose samples carry no CPU is refused."""
    if f.cpus and event_attr is not None and not event_attr.get("sample_type", 0) & SAMPLE_CPU:
        raise InputError(f"--cpu: {shown} was recorded without the samples' CPUs (PERF_SAMPLE_CPU); record with "
                         f"perf record -a or --sample-cpu")


def check_script_columns(f: Filters, seen: dict, shown: str) -> None:
    """``--pid``, ``--tid``, ``--cpu`` on perf script text without those columns are refused."""
    for opt, key, vals in (("--pid", "pid", f.pids), ("--tid", "tid", f.tids), ("--cpu", "cpu", f.cpus)):
        if vals and not seen.get(key):
            raise InputError(f"{opt}: {shown} is perf script text without a {key} column; print it with "
                             f"perf script -F comm,{'tid,pid' if key != 'cpu' else 'tid,cpu'},...")


# -- the filters on stacks -------------------------------------------------------

def _kernel_image(dso: str, kernel: bool) -> bool:
    """Whether a symbol of this DSO is in the kernel image itself (perf's ``[kernel.kallsyms]``)."""
    return kernel and (not dso or dso in ("[kernel]", "[kernel.kallsyms]", "kernel", "vmlinux"))


def _dso_matches(dso: str, wanted: tuple[str, ...], kernel: bool) -> bool:
    names = {dso, os.path.basename(dso)}
    if _kernel_image(dso, kernel):
        names.add("[kernel.kallsyms]")
    if dso.startswith("[") and dso.endswith("]"):
        names.add(dso[1:-1])
    return any(w in names for w in wanted)


def keep_stacks(prof: Profile, f: Filters, shown: str) -> Profile:
    """The profile of the samples of ``prof`` that ``--dso`` and ``--exclude-idle`` keep (the
    profile itself when neither is given). Samples without a stack (unresolved) have no leaf: a
    DSO filter drops them, the idle one keeps them."""
    if not (f.dsos or f.exclude_idle):
        return prof
    syms = prof.symbols
    names = [s.name for s in syms]
    kern = [s.kernel for s in syms]
    table = idle_table(prof.arch) if f.exclude_idle else None
    leaf_ok = [_dso_matches(s.dso, f.dsos, s.kernel) for s in syms] if f.dsos else None
    verdict: dict[tuple[int, ...], bool] = {}

    def keeps(stack: tuple[int, ...]) -> bool:
        v = verdict.get(stack)
        if v is None:
            if not stack:                   # no leaf: no DSO to match, not the idle loop
                v = not f.dsos
            else:
                v = leaf_ok is None or leaf_ok[stack[-1]]
                if v and table is not None:
                    v = not is_idle([names[i] for i in stack], [kern[i] for i in stack], table)
            verdict[stack] = v
        return v

    b = Builder()
    index = [b.sym(s) for s in syms]
    rows = prof.stack_rows()
    named = bool(prof.process_stacks)
    seen_w, seen_n = 0.0, 0
    for comm, st, w, n in rows:
        seen_w += w
        seen_n += n
        if keeps(st):
            b.add(tuple(index[i] for i in st), w, n, comm if named else None)
    if not f.dsos and prof.samples - seen_n > 0:      # the unresolved samples, kept
        b.add((), max(0.0, prof.total_weight - seen_w), prof.samples - seen_n)
    out = _rebuilt(prof, b)
    out.symbols = list(out.symbols)
    if not prof.has_stacks:        # a flat profile stays flat
        out.stacks, out.stack_counts, out.edges = {}, {}, {}
    return out


def record(prof: Profile, f: Filters, total: int, shown: str) -> Profile:
    """Note on ``prof`` what was filtered and how many of ``total`` samples were kept; refuse a
    filter that kept none."""
    if not f:
        return prof
    if prof.samples <= 0:
        raise InputError(f"{f.describe()} keeps no sample of {shown} ({total} samples)")
    prof.meta["filtered"] = {"filters": f.asked(), "kept": int(prof.samples), "of": int(total)}
    return prof


# -- perf report --sort dso / comm -------------------------------------------------

SORT_KEYS = ("sym", "dso", "comm")


def dso_name(s) -> str:
    """A symbol's DSO as perf report --sort dso names it: the base name of its file,
    ``[kernel.kallsyms]`` for the kernel, ``[unknown]`` when none is known."""
    if _kernel_image(s.dso, s.kernel):
        return "[kernel.kallsyms]"
    if not s.dso:
        return "[unknown]"
    return s.dso if s.dso.startswith("[") else os.path.basename(s.dso)


def regroup(prof: Profile, key: str, shown: str) -> Profile:
    """The profile with DSOs (``key`` "dso") or process names ("comm") in place of functions, as
    perf report --sort dso / --sort comm ranks them: a row's self share is its samples' (the
    leaf frame's DSO, the sample's comm), its children share the samples it is anywhere on."""
    if key == "sym":
        return prof
    b = Builder()
    seen_w, seen_n = 0.0, 0
    if key == "dso":
        index = [b.sym(Symbol(dso_name(s), s.dso, s.kernel)) for s in prof.symbols]
        named = bool(prof.process_stacks)
        for comm, st, w, n in prof.stack_rows():
            seen_w += w
            seen_n += n
            frames: list[int] = []
            for i in st:
                d = index[i]
                if not frames or frames[-1] != d:
                    frames.append(d)
            b.add(tuple(frames), w, n, comm if named else None)
    else:
        if not prof.process_stacks:
            raise InputError(f"--sort comm: {shown} names no process per sample (folded stacks or perf report "
                             f"text); give the perf.data or perf script output")
        for (comm, st), (w, n) in prof.process_stacks.items():
            seen_w += w
            seen_n += n
            b.add((b.sym(Symbol(comm, "", False)),), w, n, comm)
    if prof.samples - seen_n > 0:       # samples without a stack stay in the total
        b.add((), max(0.0, prof.total_weight - seen_w), prof.samples - seen_n)
    return _rebuilt(prof, b)


def _rebuilt(prof: Profile, b: Builder) -> Profile:
    """The profile ``b`` built of ``prof``'s samples (some, or regrouped): its source, event, unit,
    label, architecture and facts, but not the per-symbol counts that were ``prof``'s own."""
    meta = dict(prof.meta)
    for k in ("self_count", "children_count"):
        meta.pop(k, None)
    out = b.build(prof.source, prof.event, prof.weight_unit, meta)
    out.label, out.arch = prof.label, prof.arch
    return out
