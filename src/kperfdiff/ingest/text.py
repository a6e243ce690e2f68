"""Profiles made elsewhere, as text: ``perf script``, ``perf report --stdio``
and folded stacks.

perf script
    The default output of ``perf script`` (``comm pid[/tid] [cpu] time:
    [period] event:`` then, with call chains, one tab-indented ``addr
    sym+off (dso)`` line per frame, leaf first, and a blank line), also
    without call chains (the leaf frame on the header line) and with ``-F``
    field selections. A sample weighs its period when the output shows it,
    else 1. Several events: ``event`` picks one, else the first seen.
    A frame is kernel code when its DSO is ``[kernel.kallsyms]``, a module
    (``[ext4]``), a ``vmlinux`` or a ``.ko``; without a DSO column, when its
    address is a 64-bit ``ffff...`` one (x86_64 and arm64 kernel space).

perf report --stdio
    Flat output (call-graph lines are skipped), with ``--no-children`` or
    with the Children and Self columns, any ``--sort`` that includes
    ``sym`` (``sym``, ``dso,sym``, the default ``comm,dso,sym``). A row's
    weight is its percentage of the section's ``# Event count`` (else of its
    ``# Samples``); ``[k]``/``[g]`` mark kernel code, other marks user code.
    A group report (``-e '{cpu-clock,task-clock}:S'``) has one percentage
    per member event in each column; each member is an event to pick.
    There are no stacks; children weights are known only when the report
    has a Children column (``meta['has_children']``).

folded stacks
    ``root;...;leaf count`` lines (FlameGraph's stackcollapse, inferno,
    perf's stackcollapse.py). Kernel frames: the ``_[k]`` suffix those tools
    add (``--kernel``/``--all``) when the file has any; otherwise the
    ``kernel_frames`` heuristic (default ``"entry"``): scanning root to leaf,
    the first frame that is a known kernel entry point (syscall, exception
    and interrupt entries of x86, arm64 and arm, kernel-thread and idle
    roots, listed in ``KERNEL_ENTRY``), or a 64-bit ``0xffff...`` address,
    and every frame after it are kernel. ``"all"`` and ``"none"`` mark every
    frame kernel or user. Other annotations (``_[j]``, ``_[i]``, ``_[w]``)
    are removed. Counts are sample counts.

Unreadable lines are skipped and counted in ``meta['warnings']``, with the
first one's line number. A count or period must be a finite number from 0 to
2^64 (perf's counters are 64-bit) and a percentage at most 100; a line
breaking that is unreadable. A perf report whose self percentages add up to
more than 100% (beyond its rounding to 0.01% a row) is refused.
"""
from __future__ import annotations

import re
from pathlib import Path

from kperfdiff.core.errors import InputError
from kperfdiff.symbols.normalise import normalise
from kperfdiff.ingest.profile import Builder, Profile, Symbol

KIND_SCRIPT = "perf-script"
KIND_REPORT = "perf-report"
KIND_FOLDED = "folded"
MAX_COUNT = float(2 ** 64)      # a sample period, a count: perf's counters are 64-bit
ROUNDING_PCT = 0.005            # perf report prints percentages to 0.01

# -- perf script ---------------------------------------------------------------

_SCRIPT_HEADER = re.compile(
    r"^\s*(?P<comm>\S.*?)\s+(?P<pid>-?\d+)(?:/(?P<tid>-?\d+))?\s+"
    r"(?:\[(?P<cpu>\d+)\]\s+)?"
    r"(?P<time>\d+\.\d+):\s+"
    r"(?:(?P<period>\d+)\s+)?"
    r"(?P<event>[^\s:]\S*?):(?:\s+(?P<rest>.*?))?\s*$"
)
# addr, symbol (with optional +0xoff), optional (dso). A symbol may contain
# spaces and parentheses (C++), so the dso is the last parenthesised group.
_FRAME = re.compile(r"^\s*(?P<addr>[0-9a-fA-F]+)\s+(?P<sym>.*?)(?:\s+\((?P<dso>[^()]*)\))?\s*$")
_SYMOFF = re.compile(r"\+0x[0-9a-fA-F]+$")
_HEADER_FACT = re.compile(r"^#\s*(hostname|os release|arch|nrcpus online|nrcpus avail|perf version|cpudesc)\s*:\s*(.*?)\s*$")

_USER_SPECIAL_DSOS = {"[unknown]", "[vdso]", "[vdso32]", "[vdsox32]", "[vsyscall]", "[vectors]", "[heap]",
                      "[stack]", "[anon]", "[jit]", "[uprobes]", "[sigpage]", "[vvar]", "[vvar_vclock]",
                      "[kernel.kallsyms]_text"}
_NS_EVENTS = {"cpu-clock", "task-clock"}


def _dso_is_kernel(dso: str) -> bool | None:
    """True/False when the DSO says, None when it does not."""
    if not dso or dso == "[unknown]":
        return None
    if dso.startswith("[kernel") or dso.startswith("[guest.kernel"):
        return True
    if dso.startswith("[") and dso.endswith("]"):
        return dso not in _USER_SPECIAL_DSOS
    base = dso.rsplit("/", 1)[-1]
    if base.startswith("vmlinux") or ".ko" in base or "/lib/modules/" in dso:
        return True
    return False


def _addr_is_kernel(addr: str) -> bool:
    # 64-bit kernels live at the top of the address space (x86_64 0xffff8...,
    # arm64 0xffff...); other upper-half values are unwinding garbage.
    return len(addr) == 16 and addr[:4].lower() == "ffff"


# -- folded ------------------------------------------------------------------

# Frames that start kernel code on a stack (root to leaf), for folded input
# without _[k] annotations. Names are compared after normalisation.
KERNEL_ENTRY = frozenset("""
entry_SYSCALL_64 entry_SYSCALL_64_after_hwframe entry_SYSCALL_64_safe_stack entry_SYSCALL_compat
entry_SYSENTER_compat entry_SYSENTER_compat_after_hwframe entry_INT80_compat system_call
do_syscall_64 do_fast_syscall_32 page_fault async_page_fault
asm_common_interrupt common_interrupt ret_from_intr apic_timer_interrupt
ret_from_fork ret_from_fork_asm kthread secondary_startup_64 secondary_startup_64_no_verify common_startup_64
x86_64_start_kernel x86_64_start_reservations start_kernel rest_init cpu_startup_entry cpu_idle do_idle
start_secondary secondary_start_kernel __secondary_switched __primary_switched
el0t_64_sync el0t_64_irq el0t_64_fiq el0t_64_error el0t_32_sync el0t_32_irq
el1h_64_sync el1h_64_irq el1h_64_fiq el1h_64_error el0_sync el0_irq el1_sync el1_irq
el0_svc el0_da el0_ia el0_sync_handler el0t_64_sync_handler el0_irq_naked
vector_swi __dabt_usr __dabt_svc __pabt_usr __pabt_svc __irq_usr __irq_svc __und_usr __und_svc
ret_fast_syscall ret_from_fork_asm
""".split())
_KERNEL_ENTRY_PREFIXES = ("asm_exc_", "asm_sysvec_", "asm_common_", "entry_SYSCALL", "entry_INT80",
                          "el0t_", "el1h_", "el1t_")
_ANNOTATION = re.compile(r"_\[([kjiw])\]$")


def _is_entry(name: str) -> bool:
    n = normalise(name)
    return n in KERNEL_ENTRY or n.startswith(_KERNEL_ENTRY_PREFIXES)


# -- sniffing ----------------------------------------------------------------

def _parse_count(tok: str) -> float | None:
    """A count or period: a finite number from 0 to 2^64, else None."""
    if len(tok) > 40:
        return None
    try:
        v = float(tok)
    except ValueError:
        return None
    if not 0 <= v <= MAX_COUNT:       # also refuses nan
        return None
    return v


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def sniff_text(path, head_text: str) -> str:
    """Which text profile format ``head_text`` (the start of ``path``) is.

    Returns ``"perf-script"``, ``"perf-report"`` or ``"folded"``; raises
    :class:`InputError` for anything else.
    """
    lines = head_text.splitlines()
    # The last line of the head may be cut mid-way.
    if len(head_text) >= 65536 and len(lines) > 1:
        lines = lines[:-1]
    nonblank = [ln for ln in lines if ln.strip()]
    if not nonblank:
        raise InputError(f"{path} holds only blank lines; it is not a profile")
    for ln in nonblank[:400]:
        if ln.startswith("#") and (re.match(r"#\s*Samples:", ln) or re.match(r"#\s*(Overhead|Children)\s", ln)):
            return KIND_REPORT
    report_rows = sum(1 for ln in nonblank[:200] if re.match(r"^\s+\d+\.\d+%\s", ln))
    data = [ln for ln in nonblank if not ln.startswith("#")][:200]
    if not data:
        raise InputError(f"{path} holds only comment lines; it is not a profile")
    headers = sum(1 for ln in data if not ln.startswith("\t") and _SCRIPT_HEADER.match(ln))
    if headers and headers * 20 >= len([ln for ln in data if not ln.startswith("\t")]):
        return KIND_SCRIPT
    if report_rows >= max(1, len(data) // 2):
        return KIND_REPORT
    folded = 0
    for ln in data:
        parts = ln.rsplit(None, 1)
        if len(parts) == 2 and not ln[:1].isspace() and _is_number(parts[1]):
            folded += 1     # a count out of range still makes a folded line (the loader says which)
    if folded >= max(1, int(0.9 * len(data))):
        return KIND_FOLDED
    raise InputError(f"{path} is not a profile kperfdiff can read: expected perf.data, `perf script` output, "
                     f"`perf report --stdio` output or folded stacks")


def _skip_warning(meta: dict, path, skipped: int, first: int | None) -> None:
    if skipped:
        meta.setdefault("warnings", []).append(
            f"{path}: skipped {skipped} unreadable line{'s' if skipped != 1 else ''} (first at line {first})")


def _header_facts(line: str, meta: dict) -> None:
    m = _HEADER_FACT.match(line)
    if m:
        key = {"os release": "kernel_release", "nrcpus online": "nr_cpus", "nrcpus avail": "nr_cpus_avail",
               "perf version": "perf_version"}.get(m.group(1), m.group(1))
        meta[key] = m.group(2)


def _pick_event(path, events: list[str], wanted: str | None) -> str:
    if not events:
        raise InputError(f"{path} holds no samples")
    if wanted is None:
        return events[0]
    if wanted in events:
        return wanted
    base = [e for e in events if e.split(":")[0] == wanted.split(":")[0]]
    if len(base) == 1:
        return base[0]
    raise InputError(f"{path} has no samples of event {wanted!r}; it has {', '.join(events)}")


# -- perf script -----------------------------------------------------------------

def _script_ids(m: re.Match, seen: dict) -> tuple[int | None, int, int | None]:
    """A perf script sample line's pid, tid and CPU (None: not printed), noting in ``seen`` which
    it had: perf script prints "pid/tid" with -F pid,tid, else the tid alone, and [cpu] when asked
    or system-wide."""
    if m.group("tid") is not None:
        pid, tid = int(m.group("pid")), int(m.group("tid"))
    else:
        pid, tid = None, int(m.group("pid"))
    cpu = int(m.group("cpu")) if m.group("cpu") is not None else None
    seen["pid"] = seen["pid"] or pid is not None
    seen["tid"] = True
    seen["cpu"] = seen["cpu"] or cpu is not None
    return pid, tid, cpu


def _load_script(path: Path, event: str | None, filters=None) -> Profile:
    meta: dict = {"format": KIND_SCRIPT}
    before: dict[str, int] = {}          # samples per event before the filters
    seen = {"pid": False, "tid": False, "cpu": False}   # the columns the text has
    builders: dict[str, Builder] = {}
    periods_seen: dict[str, bool] = {}
    events: list[str] = []
    skipped = 0
    first_bad = None
    cur_event = None      # event of the sample being read
    cur_frames: list[tuple[str, str, str]] = []
    cur_weight = 1.0
    cur_rest = None
    cur_comm = ""
    sym_caches: dict[str, dict[tuple[str, str, bool], int]] = {}

    def finish():
        nonlocal cur_event
        if cur_event is None:
            return
        b = builders[cur_event]
        sym_cache = sym_caches.setdefault(cur_event, {})
        frames = cur_frames
        if not frames and cur_rest:
            m = _FRAME.match(cur_rest)
            if m and m.group("sym"):
                frames = [(m.group("addr"), m.group("sym"), m.group("dso") or "")]
        ids = []
        prev_k = False
        for addr, sym, dso in reversed(frames):
            name = _SYMOFF.sub("", sym.strip()) or "[unknown]"
            if dso == "inlined":
                # perf script --inline: an inlined function at its caller's address
                k = _addr_is_kernel(addr) or prev_k
                dso = ""
            else:
                k = _dso_is_kernel(dso)
                if k is None:
                    k = _addr_is_kernel(addr)
            prev_k = k
            key = (name, dso, k)
            i = sym_cache.get(key)
            if i is None:
                i = sym_cache[key] = b.sym(Symbol(name, "" if dso == "[unknown]" else dso, k))
            ids.append(i)
        # perf script prints the leaf first; the loop above went root first
        b.add(tuple(ids), cur_weight, 1, cur_comm)
        cur_event = None

    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    with f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                finish()
                continue
            if line.startswith("#"):
                _header_facts(line, meta)
                continue
            if line.startswith("\t") or (cur_event is not None and line[:1] == " " and not _SCRIPT_HEADER.match(line)):
                if cur_event is None:
                    skipped += 1
                    first_bad = first_bad or lineno
                    continue
                m = _FRAME.match(line)
                if m and m.group("sym"):
                    cur_frames.append((m.group("addr"), m.group("sym"), m.group("dso") or ""))
                else:
                    skipped += 1
                    first_bad = first_bad or lineno
                continue
            m = _SCRIPT_HEADER.match(line)
            if not m:
                finish()
                skipped += 1
                first_bad = first_bad or lineno
                continue
            finish()
            ev = m.group("event")
            if ev not in builders:
                builders[ev] = Builder()
                events.append(ev)
                periods_seen[ev] = False
            cur_event = ev
            cur_frames = []
            cur_rest = m.group("rest")
            cur_comm = m.group("comm").strip()
            before[ev] = before.get(ev, 0) + 1
            if filters and not filters.keeps(cur_comm, *_script_ids(m, seen)):
                cur_event = None
                continue
            p = m.group("period")
            if p is not None:
                w = _parse_count(p)
                if w is None:          # a period no 64-bit counter can hold: this sample is unreadable
                    cur_event = None
                    skipped += 1
                    first_bad = first_bad or lineno
                    continue
                cur_weight = w
                periods_seen[ev] = True
            else:
                cur_weight = 1.0
        finish()
    ev = _pick_event(path, events, event)
    _skip_warning(meta, path, skipped, first_bad)
    meta["events"] = events
    if periods_seen[ev]:
        unit = "ns" if ev.split(":")[0] in _NS_EVENTS else "period"
    else:
        unit = "samples"
    if filters:
        meta["script_columns"] = seen        # what the filters could be answered from (ingest.filters)
        meta["samples_before_filter"] = before.get(ev, 0)
    return builders[ev].build(str(path), ev, unit, meta)


# -- perf report -----------------------------------------------------------------

_ROW_START = re.compile(r"^\s*\d+(?:\.\d+)?%")
_SAMPLES = re.compile(r"^#\s*Samples:\s*([\d.]+)\s*([KMGT]?)\s+of events?\s+'(.*)'")
_GROUP = re.compile(r"^(?:anon group\s*)?\{\s*(.*?)\s*\}(?::\S*)?$")
_EVCOUNT = re.compile(r"^#\s*Event count \(approx\.\):\s*(\d+)")
_MARK = re.compile(r"\[([kgu.H])\]\s")
_UNIT = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


class _ReportSection:
    def __init__(self, event: str, samples: float):
        self.event = event
        # A group report ("anon group { cpu-clock, task-clock }") shows one
        # percentage per member event in each column.
        g = _GROUP.match(event)
        self.members = [e.strip() for e in g.group(1).split(",")] if g else [event]
        self.samples = samples
        self.event_count: float | None = None
        self.columns: list[tuple[str, int]] = []   # (name, start col)
        # symbol -> [self % per member..., children % per member...]
        self.rows: dict[Symbol, list[float]] = {}


def _columns(header: str, dots: str) -> list[tuple[str, int]]:
    spans = [(m.start(), m.end()) for m in re.finditer(r"\.+", dots)]
    cols = []
    for i, (s, e) in enumerate(spans):
        end = spans[i + 1][0] if i + 1 < len(spans) else len(header)
        cols.append((header[s:end].strip(), s))
    return cols


def _load_report(path: Path, event: str | None) -> Profile:
    meta: dict = {"format": KIND_REPORT}
    sections: list[_ReportSection] = []
    cur: _ReportSection | None = None
    pending_header: str | None = None
    skipped = 0
    first_bad = None
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            if line.startswith("#"):
                m = _SAMPLES.match(line)
                if m:
                    n = _parse_count(m.group(1))
                    n = n * _UNIT[m.group(2)] if n is not None else None
                    if n is None or n > MAX_COUNT:
                        n = 0.0
                        skipped += 1
                        first_bad = first_bad or lineno
                    cur = _ReportSection(m.group(3), n)
                    sections.append(cur)
                    continue
                m = _EVCOUNT.match(line)
                if m and cur is not None:
                    cur.event_count = _parse_count(m.group(1))
                    if cur.event_count is None:
                        skipped += 1
                        first_bad = first_bad or lineno
                    continue
                if re.match(r"^#\s*\.+", line) and pending_header is not None and cur is not None:
                    cur.columns = _columns(pending_header, line)
                    pending_header = None
                    continue
                if re.match(r"^#\s*(Overhead|Children)\s", line):
                    pending_header = line
                    continue
                _header_facts(line, meta)
                continue
            if not _ROW_START.match(line):
                s = line.strip()
                # call-graph lines under an entry
                if s.startswith(("|", "---", "--")) or re.match(r"^[\w.@$<>:~\[\]()*&, +-]+$", s) and line[:1].isspace():
                    continue
                skipped += 1
                first_bad = first_bad or lineno
                continue
            if cur is None or not cur.columns:
                if cur is None:
                    cur = _ReportSection("unknown", 0)
                    sections.append(cur)
                if not cur.columns:
                    cur.columns = [("Overhead", 0), ("Symbol", -1)]
            if not _parse_report_row(cur, line):
                skipped += 1
                first_bad = first_bad or lineno
    sections = [s for s in sections if s.rows or s.samples]
    choices = [(sec, j) for sec in sections for j in range(len(sec.members))]
    events = [sec.members[j] for sec, j in choices]
    ev = _pick_event(path, events, event)
    sec, col = choices[events.index(ev)]
    _skip_warning(meta, path, skipped, first_bad)
    meta["events"] = events
    names = [c for c, _ in sec.columns]
    has_children = "Children" in names
    meta["has_children"] = has_children
    if "Symbol" not in names and sec.rows == {}:
        raise InputError(f"{path} is a perf report without a Symbol column; make it with --sort sym (or dso,sym)")
    if sec.event_count:
        total, unit = sec.event_count, ("ns" if ev.split(":")[0] in _NS_EVENTS else "period")
    else:
        total, unit = (sec.samples or 100.0), "samples"
    nm = len(sec.members)
    syms = list(sec.rows)
    self_sum = sum(sec.rows[s][col] for s in syms)
    if self_sum > 100 + ROUNDING_PCT * len(syms):
        raise InputError(f"{path}: the self percentages of {ev} add up to {self_sum:.2f}%, more than 100%; it "
                         f"is not one perf report --stdio (are two pasted together?)")
    import numpy as np
    selfw = np.array([sec.rows[s][col] for s in syms]) / 100.0 * total
    childw = np.array([sec.rows[s][nm + col] for s in syms]) / 100.0 * total
    return Profile(source=str(path), event=ev, symbols=syms, self_weight=selfw, children_weight=childw,
                   total_weight=float(total), samples=int(round(sec.samples)), weight_unit=unit,
                   arch=meta.get("arch"), meta=meta)


def _parse_report_row(sec: _ReportSection, line: str) -> bool:
    cols = sec.columns
    m = None
    sym_col = next((s for n, s in cols if n == "Symbol"), None)
    if sym_col is not None and sym_col >= 0:
        m = _MARK.match(line, sym_col) if len(line) > sym_col else None
    if m is None:
        # Misaligned row: the first kernel/user mark after the percentages.
        m = _MARK.search(line)
        if m is None:
            return False
    name = line[m.end():].strip()
    if not name:
        return False
    kernel = m.group(1) in "kg"
    before = line[:m.start()]
    cells: dict[str, str] = {}
    starts = [s for _, s in cols]
    for i, (n, s) in enumerate(cols):
        if n == "Symbol":
            continue
        lo = 0 if i == 0 else s
        hi = starts[i + 1] if i + 1 < len(cols) and starts[i + 1] >= 0 else len(before)
        cells[n] = before[lo:min(hi, len(before))].strip()
    pcts = [float(x) for x in re.findall(r"(\d{1,3}(?:\.\d+)?)%", before)]
    if any(not 0 <= p <= 100 for p in pcts) or re.search(r"(?:\d{4,}|-\d+)(?:\.\d+)?%", before):
        return False               # no share is above 100%
    n = len(sec.members)
    has_children = "Children" in cells and "Self" in cells
    if len(pcts) < (2 * n if has_children else n):
        return False
    if has_children:
        child, selfp = pcts[:n], pcts[n:2 * n]
    else:
        selfp = pcts[:n]
        child = selfp
    dso = cells.get("Shared Object", "")
    if dso and _dso_is_kernel(dso) is not None:
        pass
    sym = Symbol(name, dso if dso else ("[kernel.kallsyms]" if kernel else ""), kernel)
    acc = sec.rows.setdefault(sym, [0.0] * (2 * n))
    if any(acc[j] + selfp[j] > 100 + ROUNDING_PCT or acc[n + j] + child[j] > 100 + ROUNDING_PCT
           for j in range(n)):
        return False               # the same function again, past 100%: unreadable, not added
    for j in range(n):
        acc[j] += selfp[j]
        acc[n + j] += child[j]
    return True


# -- folded -------------------------------------------------------------------------

def _load_folded(path: Path, kernel_frames: str) -> Profile:
    if kernel_frames not in ("auto", "entry", "all", "none"):
        raise InputError(f"kernel frame rule {kernel_frames!r} is not one of auto, entry, all, none")
    meta: dict = {"format": KIND_FOLDED}
    lines: list[tuple[list[str], float]] = []
    skipped = 0
    first_bad = None
    annotated = False
    two_counts = 0
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rsplit(None, 1)
            count = _parse_count(parts[1]) if len(parts) == 2 else None
            if count is None or line[:1].isspace():
                skipped += 1
                first_bad = first_bad or lineno
                continue
            stack = parts[0]
            p2 = stack.rsplit(None, 1)
            if len(p2) == 2 and _parse_count(p2[1]) is not None and ";" not in p2[1]:
                two_counts += 1
            frames = stack.split(";")
            if "_[k]" in stack:
                annotated = True
            lines.append((frames, count))
    if lines and two_counts >= 0.9 * len(lines):
        raise InputError(f"{path} is a differential folded file (two counts per line); give each side as its own folded file")
    rule = kernel_frames
    if rule == "auto":
        rule = "annotated" if annotated else "entry"
    meta["kernel_frames"] = rule
    b = Builder()
    cache: dict[tuple[str, bool], int] = {}
    for frames, count in lines:
        ids = []
        in_kernel = rule == "all"
        for fr in frames:
            k = False
            m = _ANNOTATION.search(fr)
            if m:
                k = m.group(1) == "k"
                fr = fr[:m.start()]
            if rule == "entry":
                if not in_kernel and (_is_entry(fr) or (fr.startswith("0x") and _addr_is_kernel(fr[2:].rjust(16, "0")))):
                    in_kernel = True
                k = in_kernel
            elif rule in ("all", "none"):
                k = rule == "all"
            if not fr:
                fr = "[unknown]"
            key = (fr, k)
            i = cache.get(key)
            if i is None:
                i = cache[key] = b.sym(Symbol(fr, "[kernel.kallsyms]" if k else "", k))
            ids.append(i)
        b.add(tuple(ids), count, max(int(round(count)), 1))
    _skip_warning(meta, path, skipped, first_bad)
    if not lines:
        raise InputError(f"{path} holds no folded stacks")
    meta["events"] = []
    return b.build(str(path), "unknown", "samples", meta)


# -- entry point --------------------------------------------------------------------------

def load(path, fmt: str, event: str | None = None, *, kernel_frames: str = "auto",
         filters=None) -> Profile:
    """Read a text profile of format ``fmt`` (from :func:`sniff_text`) into a Profile.

    ``event`` picks one event of a multi-event ``perf script``/``perf
    report`` (default: the first). ``kernel_frames`` is the folded-stack
    kernel rule (``auto``, ``entry``, ``all``, ``none``; see the module
    documentation). ``filters``: an :class:`kperfdiff.ingest.filters.Filters`, whose sample filters
    perf script's columns answer (comm, pid and tid, cpu), applied to perf script text as it is read
    (``meta["script_columns"]`` says which columns it had).
    """
    path = Path(path)
    if fmt == KIND_SCRIPT:
        return _load_script(path, event, filters)
    if fmt == KIND_REPORT:
        return _load_report(path, event)
    if fmt == KIND_FOLDED:
        if event is not None:
            raise InputError(f"{path} is folded stacks, which carry no event names; leave out --event")
        return _load_folded(path, kernel_frames)
    raise InputError(f"{path}: unknown text profile format {fmt!r}")
