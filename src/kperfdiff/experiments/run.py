"""Experiments: a matrix of variants x benchmarks x core counts x repetitions.

An experiment file (TOML; commented examples in ``examples/``)::

    name = "superpages"                  # the experiment's name in the store
    description = "..."                  # free text (not part of the identity)
    baseline = "4k"                      # a variant label (default: the first variant)
    stack = ["PK1", "PK2"]               # optional ordered patch stack: each also
                                         # compared with the one before it
    benchmarks = ["gups.{pages}", "proc.fork", "fault.*"]
    cores = [1, 2]                       # copy counts (-P)
    reps = 3                             # fresh processes per cell
    precision = 3                        # optional: more repetitions (interleaved, all variants) until
                                         # every change's speed ratio is known to +-3% (95% interval)
    max_time = 300                       # optional: seconds of measuring for those (default 600)
    intervals = 5                        # optional: timed intervals per process
    min_batch_ms = 10                    # optional: minimum batch length
    timeout = 120                        # optional: per-process timeout (s)
    profile = true                       # perf record every process
    profile_freq = 999                   # optional sampling frequency (Hz)
    tiny = false                         # use the benchmarks' tiny parameters
    allow_swap_setup = false             # temporary swap for benchmarks that need it (this machine:
                                         # zram or a swap file; a guest or board: zram set up by its job)
    params = { "gups.*:log2_words" = 22 }   # overrides for every variant

    [[variant]]
    label = "4k"
    target = "local"                     # local, qemu:ARCH[,options], ssh://user@host[:port] or
                                         # lava://host/device-type[,options] (jobs on a LAVA lab)
    vars = { pages = "4k" }              # fills {pages} in benchmark names
    knobs = { "/sys/kernel/mm/transparent_hugepage/enabled" = "madvise" }   # local only
    cmdline = "..."                      # extra kernel command line (qemu and lava targets only)
    env = { MALLOC_ARENA_MAX = "1" }     # environment of the benchmark processes (local only)
    cpus = "0-1"                         # CPU list the benchmark processes run on (local only)
    params = { "proc.fork:hello" = "/bin/true" }

Running (:func:`run_experiment`):

* **Cells.** A cell is one variant x benchmark x core count x repetition,
  measured by one fresh set of worker processes and stored at once as its own
  result row with a unique key in the experiment. A benchmark name with
  ``{var}`` placeholders is one *column*: each variant runs the benchmark its
  ``vars`` name (``gups.{pages}`` is gups.4k in one variant and gups.huge in
  another), so they are compared with each other.
* **Order.** Repetition is the outermost loop; inside it every benchmark and
  core count is measured for every variant back to back, and the order of the
  variants is rotated from one cell to the next (A B, B A, A B ...), so slow
  drift of the machine (heat, memory fragmentation, background work) hits
  every variant alike and no variant always goes first. A variant on a guest
  or board measures all its cells of one repetition in one job (one boot of
  the guest), still alternating with the other variants repetition by
  repetition; its machine facts come from the target after the first job.
  The jobs of variants on LAVA targets (one per variant and repetition) are
  submitted together and run in parallel on the lab's devices
  (:mod:`kperfdiff.experiments.lava`).
* **Resume.** ``kperfdiff run FILE`` again continues an interrupted or crashed
  experiment of the same name: the cells already stored ok or skipped are
  never measured again; failed cells are measured again (the new attempt
  replaces the failed row in one transaction). The identity of an experiment
  is the hash of its parsed content (comments, layout and ``description`` do
  not count). If the file changed after a partial run, ``run`` refuses with a
  sentence saying so, unless ``--restart``: then the old experiment is kept
  in the store as ``superseded`` and a new one starts from zero.
* **Identity.** Each cell keeps what it was measured on
  (:func:`kperfdiff.targets.machine.identity`: kernel release, build id where readable,
  ``uname -v`` and command line, a machine fingerprint, the kperfdiff version);
  a guest's or board's cells the identity its job reported. A resume whose
  identity differs from a variant's stored cells refuses in one sentence naming
  the difference, before anything is measured and leaving the experiment as it
  was (``--restart`` measures afresh; ``--name`` gives another experiment). This
  machine's identity is checked before the run starts; a guest's or board's at
  its first job, before any of its cells is stored, or, when the whole experiment
  has nothing left to measure, by one empty job (a guest variant with nothing left
  while others still have cells is not asked). Cells stored before identities
  were kept (schema 5) have none and are never resumed onto.
* **Knobs.** Before anything is measured every knob of every variant is
  checked by writing its value and reading it back, then restoring the
  original; a knob that cannot be set (file absent, not root, value refused)
  stops the run with the reason. Only performance knobs are accepted without
  ``--allow-knob`` and dangerous files never (see :mod:`kperfdiff.measure.knobs`).
  The original values are written to the machine's pending-restore file
  before the first change and removed only once restored, and knobs are
  restored in a ``finally`` with SIGINT/SIGTERM/SIGHUP blocked, so Ctrl-C, a
  kill or a failing benchmark leaves the machine as it was; after a crash
  (SIGKILL) the next kperfdiff command of any kind restores them first.
"""
from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import math
import os
import re
import signal
import string
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kperfdiff.analysis import bench_compare as compare
from kperfdiff.measure import knobs as knobmod
from kperfdiff.core import limits, stats
from kperfdiff.targets import machine
from kperfdiff.bench import noise
from kperfdiff import targets
from kperfdiff.bench import build, catalogue
from kperfdiff.bench.swap import temporary_swap
from kperfdiff.core.files import read_toml
from kperfdiff.measure.session import (
    BenchOptions,
    measure,
    parse_param_overrides,
    store_target_profiles,
    unmet_requirement,
)
from kperfdiff.core.progress import Progress
from kperfdiff.core.records import StoredExperiment
from kperfdiff.targets.perf_record import BenchProfiler, require_perf
from kperfdiff.targets import validate_spec
from kperfdiff.targets.boot import ALL_BOOT_BENCHMARKS, measure_batch
from kperfdiff.bench import rounds
from kperfdiff.bench.measurement import Measurement, store_measurement
from kperfdiff.core.errors import InputError, KperfdiffError, StoreError
from kperfdiff.experiments.lava import LavaVariants, is_lava

# Environment variables that make a program load or run other code (the benchmarks run as root).
UNSAFE_ENV = {"PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "GCONV_PATH", "LOCPATH",
              "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "MALLOC_TRACE", "PYTHONPATH", "PYTHONHOME",
              "PYTHONSTARTUP", "PYTHONINSPECT", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT",
              "NODE_OPTIONS", "NODE_PATH"}
UNSAFE_ENV_PREFIXES = ("LD_",)
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")
TOP_KEYS = {"name", "description", "baseline", "stack", "benchmarks", "cores", "reps", "precision", "max_time",
            "intervals", "min_batch_ms",
            "timeout", "profile", "profile_freq", "tiny", "allow_swap_setup", "params", "variant", "variants", "study"}
VARIANT_KEYS = {"label", "target", "vars", "knobs", "cmdline", "env", "cpus", "params", "description"}


class ExperimentError(InputError):
    """An experiment file that cannot be used."""


class StaleCells(InputError):
    """A resumed experiment's stored cells were measured on another kernel, machine or kperfdiff."""


@dataclass
class Variant:
    label: str
    target: str = "local"
    vars: dict[str, str] = field(default_factory=dict)
    knobs: dict[str, str] = field(default_factory=dict)
    cmdline: str = ""
    env: dict[str, str] = field(default_factory=dict)
    cpus: str = ""
    params: dict[str, str] = field(default_factory=dict)   # "BENCH:KEY" -> value
    description: str = ""


@dataclass
class Experiment:
    name: str
    path: str
    variants: list[Variant]
    baseline: str
    benchmarks: list[str]
    cores: list[int]
    reps: int = 3
    stack: list[str] = field(default_factory=list)
    precision: float | None = None
    max_time: float | None = None
    intervals: int | None = None
    min_batch_ms: float | None = None
    timeout: float | None = None
    profile: bool = False
    profile_freq: int | None = None
    tiny: bool = False
    allow_swap_setup: bool = False
    params: dict[str, str] = field(default_factory=dict)
    description: str = ""
    study: dict = field(default_factory=dict)     # the [study] table (kperfdiff.studies reads it)

    def spec(self) -> dict:
        """The parsed content that defines the experiment (its identity)."""
        d = asdict(self)
        d.pop("path")
        d.pop("description")
        d.pop("study")
        for v in d["variants"]:
            v.pop("description")
        return d

    def file_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.spec(), sort_keys=True).encode()).hexdigest()[:16]

    def variant(self, label: str) -> Variant:
        for v in self.variants:
            if v.label == label:
                return v
        raise KeyError(label)

    def comparisons(self) -> list[tuple[str, str, str]]:
        """(variant, reference, kind) pairs: every variant vs the baseline, and
        each member of the patch stack vs the one before it."""
        out = [(v.label, self.baseline, "baseline") for v in self.variants if v.label != self.baseline]
        prev = None
        for label in self.stack:
            if prev is not None and prev != self.baseline and label != self.baseline:
                out.append((label, prev, "previous"))
            prev = label
        return out


# -- parsing ---------------------------------------------------------------------

def _err(path, field_name: str, problem: str) -> ExperimentError:
    return ExperimentError(f"{path}: {field_name} {problem}")


def _scalar_str(path, where: str, v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (str, int, float)):
        s = str(v)
        if "\0" in s:
            raise _err(path, where, "has a NUL character in it")
        if len(s) > limits.MAX_VALUE_CHARS:
            raise _err(path, where, f"is longer than {limits.MAX_VALUE_CHARS} characters")
        return s
    raise _err(path, where, f"must be a string or a number, not {type(v).__name__}")


def _str_table(path, where: str, v) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _err(path, where, "must be a table of names to values, as in { KEY = \"value\" }")
    for k in v:
        if "\0" in str(k):
            raise _err(path, where, f"key {str(k)!r} has a NUL character in it")
    return {str(k): _scalar_str(path, f"{where}.{k}", x) for k, x in v.items()}


def _params_table(path, where: str, v) -> dict[str, str]:
    out = _str_table(path, where, v)
    for k in out:
        bench, colon, key = k.partition(":")
        if not colon or not bench or not key or "=" in key:
            raise _err(path, f"{where} key {k!r}", "must be of the form \"BENCH_OR_PATTERN:KEY\"")
    return out


def _placeholders(text: str) -> list[str]:
    """The ``{names}`` in a benchmark entry; a conversion or format spec (``{x!r}``, ``{x:>9}``)
    gives "?" (malformed): placeholders only substitute a variant's vars."""
    try:
        return [f if not spec and not conv else "?"
                for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
    except ValueError:
        return ["?"]


def parse(path: str | Path, allow_knobs=frozenset(), name: str | None = None) -> Experiment:
    """Read and check an experiment file; every problem is one sentence naming the file and field.
    ``name`` (``run --name``) replaces the file's ``name``."""
    p = Path(path)
    data = read_toml(p, "experiment file", ExperimentError)
    if name is not None:
        if not LABEL_RE.match(name):
            raise ExperimentError(f"--name {name[:80]!r} must be a word of letters, digits and _.+=- (it names the "
                                  f"experiment in the store)")
        data = {**data, "name": name}
    return parse_data(data, p, allow_knobs)


def _parse_variant(p, i: int, rv, variants: list[Variant], allow_knobs) -> Variant:
    """One [[variant]] table, checked (``variants`` are the ones before it)."""
    where = f"variant[{i}]"
    if not isinstance(rv, dict):
        raise _err(p, where, "must be a table ([[variant]])")
    bad = sorted(set(rv) - VARIANT_KEYS)
    if bad:
        raise _err(p, f"{where}.{bad[0]}", f"is not a variant field (known: {', '.join(sorted(VARIANT_KEYS))})")
    label = rv.get("label")
    if not isinstance(label, str) or not LABEL_RE.match(label):
        raise _err(p, f"{where}.label", "must be a word of letters, digits and _.+=-")
    where = f"variant {label!r}"
    if any(v.label == label for v in variants):
        raise _err(p, f"{where}.label", "is used twice; every variant needs its own label")
    target = rv.get("target", "local")
    if not isinstance(target, str):
        raise _err(p, f"{where}.target", "must be a string: local, qemu:ARCH[,options] or ssh://user@host")
    try:
        kind = validate_spec(target)
    except KperfdiffError as e:
        raise _err(p, f"{where}.target", str(e)) from None
    for fld in ("knobs", "env", "cpus"):
        if kind != "local" and rv.get(fld):
            raise _err(p, f"{where}.{fld}", f"applies to this machine only, not to the target {target}; "
                                            f"for a guest give a kernel command line with cmdline")
    knobs = _str_table(p, f"{where}.knobs", rv.get("knobs"))
    for k in knobs:
        why = knobmod.check_knob_path(k, allow_knobs)
        if why:
            raise _err(p, f"{where}.knobs key {k!r}", why)
    cmdline = rv.get("cmdline", "")
    if not isinstance(cmdline, str):
        raise _err(p, f"{where}.cmdline", "must be a string (a kernel command line)")
    if cmdline and kind not in ("qemu", "lava"):
        raise _err(p, f"{where}.cmdline", "needs a guest target (qemu:ARCH) or a LAVA target (lava://), which "
                                          "boot their kernel: the command line of a kernel already running "
                                          "cannot be changed by kperfdiff; remove it or set target")
    env = _str_table(p, f"{where}.env", rv.get("env"))
    for k in env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise _err(p, f"{where}.env key {k!r}", "is not an environment variable name")
        if k in UNSAFE_ENV or k.startswith(UNSAFE_ENV_PREFIXES):
            raise _err(p, f"{where}.env key {k!r}", "is never set by kperfdiff: it makes the benchmark "
                                                   "programs (run as root) load or run other code")
    cpus = rv.get("cpus", "")
    if isinstance(cpus, list):
        cpus = ",".join(str(c) for c in cpus)
    if not isinstance(cpus, str):
        raise _err(p, f"{where}.cpus", f"{cpus!r} is not a CPU list like \"0\", \"0-3\" or \"0,2\"")
    if cpus:
        try:
            limits.parse_cpu_list(cpus)
        except ValueError as e:
            raise _err(p, f"{where}.cpus", str(e)) from None
    return Variant(label=label, target=target, vars=_str_table(p, f"{where}.vars", rv.get("vars")),
                            knobs=knobs, cmdline=cmdline, env=env, cpus=cpus.replace(" ", ""),
                            params=_params_table(p, f"{where}.params", rv.get("params")),
                            description=str(rv.get("description", "")))


def _parse_benchmarks(p, data: dict, variants: list[Variant]) -> list[str]:
    """The benchmark names or patterns, every {placeholder} defined by every variant."""
    benches = data.get("benchmarks")
    if isinstance(benches, str):
        benches = [b.strip() for b in benches.split(",") if b.strip()]
    if not isinstance(benches, list) or not benches or not all(isinstance(b, str) and b for b in benches):
        raise _err(p, "benchmarks", "must be a non-empty list of benchmark names or patterns")
    for b in benches:
        for ph in _placeholders(b):
            if not ph.isidentifier():
                raise _err(p, "benchmarks", f"entry {b!r} has a malformed {{placeholder}}")
            for v in variants:
                if ph not in v.vars:
                    raise _err(p, f"variant {v.label!r}.vars", f"has no {ph!r}, which benchmark {b!r} needs")
    return benches


def _parse_cores(p, data: dict) -> list[int]:
    cores = data.get("cores", [1])
    if isinstance(cores, int) and not isinstance(cores, bool):
        cores = [cores]
    if (not isinstance(cores, list) or not cores or len(cores) > limits.MAX_CORE_COUNTS
            or not all(limits.int_in_range(c, 1, limits.MAX_COPIES) for c in cores)):
        raise _err(p, "cores", f"must be a list of at most {limits.MAX_CORE_COUNTS} copy counts from 1 to "
                               f"{limits.MAX_COPIES}, like [1, 2, 4]")
    if len(set(cores)) != len(cores):
        raise _err(p, "cores", "lists a core count twice")
    return cores


def parse_data(data: dict, p: Path | str = "<experiment>", allow_knobs=frozenset()) -> Experiment:
    """Check parsed TOML; ``allow_knobs`` are the paths given with ``--allow-knob``."""
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise _err(p, unknown[0], f"is not an experiment field (known: {', '.join(sorted(TOP_KEYS))})")
    name = data.get("name")
    if not isinstance(name, str) or not LABEL_RE.match(name or ""):
        raise _err(p, "name", "must be a word of letters, digits and _.+=- (it names the experiment in the store)")
    raw_variants = data.get("variant", data.get("variants"))
    if not isinstance(raw_variants, list) or not raw_variants:
        raise _err(p, "variant", "is missing: declare at least one [[variant]] table with a label")
    variants: list[Variant] = []
    for i, rv in enumerate(raw_variants):
        variants.append(_parse_variant(p, i, rv, variants, allow_knobs))
    labels = [v.label for v in variants]
    baseline = data.get("baseline", labels[0])
    if baseline not in labels:
        raise _err(p, "baseline", f"{baseline!r} is not a variant label ({', '.join(labels)})")
    stack = data.get("stack", [])
    if not isinstance(stack, list) or any(s not in labels for s in stack) or len(set(stack)) != len(stack):
        raise _err(p, "stack", f"must be a list of distinct variant labels ({', '.join(labels)}) in patch order")
    benches = _parse_benchmarks(p, data, variants)
    cores = _parse_cores(p, data)

    def pos_int(key, default, most):
        v = data.get(key, default)
        if v is None:
            return None
        if not limits.int_in_range(v, 1, most):
            raise _err(p, key, f"must be a whole number from 1 to {most}")
        return v

    def pos_num(key, most):
        v = data.get(key)
        if v is None:
            return None
        if not limits.number_in_range(v, 0, most):
            raise _err(p, key, f"must be a number above 0 and at most {most}")
        return float(v)

    def flag(key):
        v = data.get(key, False)
        if not isinstance(v, bool):
            raise _err(p, key, "must be true or false")
        return v

    desc = data.get("description", "")
    return Experiment(name=name, path=str(p), variants=variants, baseline=baseline, benchmarks=list(benches),
                      cores=list(cores), reps=pos_int("reps", 3, limits.MAX_REPS), stack=list(stack),
                      precision=pos_num("precision", limits.MAX_PRECISION_PCT),
                      max_time=pos_num("max_time", limits.MAX_TIMEOUT_S),
                      intervals=pos_int("intervals", None, limits.MAX_INTERVALS),
                      min_batch_ms=pos_num("min_batch_ms", limits.MAX_MIN_BATCH_MS),
                      timeout=pos_num("timeout", limits.MAX_TIMEOUT_S), profile=flag("profile"),
                      profile_freq=pos_int("profile_freq", None, limits.MAX_PROFILE_FREQ), tiny=flag("tiny"),
                      allow_swap_setup=flag("allow_swap_setup"),
                      params=_params_table(p, "params", data.get("params")),
                      description=desc if isinstance(desc, str) else "", study=_study_table(p, data.get("study")))


def _study_table(p, v) -> dict:
    """The [study] table: text about the study a file reproduces; names to strings, numbers, booleans or
    lists of strings (kperfdiff.studies checks which keys it knows)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise _err(p, "study", "must be a table ([study])")
    out: dict = {}
    for k, x in v.items():
        if isinstance(x, list):
            if len(x) > limits.MAX_LIST_ITEMS:
                raise _err(p, f"study.{k}", f"has more than {limits.MAX_LIST_ITEMS} items")
            out[str(k)] = [_scalar_str(p, f"study.{k}", i) for i in x]
        else:
            out[str(k)] = _scalar_str(p, f"study.{k}", x)
    return out


# -- the matrix -------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    variant: str
    key: str          # column: the benchmark entry (a name, or a template like gups.{pages})
    benchmark: str    # the benchmark this variant runs for that column
    cores: int
    rep: int

    @property
    def id(self) -> str:
        return f"{self.variant}|{self.key}|P{self.cores}|r{self.rep}"


def resolve(exp: Experiment) -> dict[str, list[tuple[str, object]]]:
    """variant label -> [(column key, Benchmark)], in the file's order.

    A plain entry (name, pattern or family) gives one column per benchmark it
    matches; an entry with ``{placeholders}`` is one column whose benchmark
    each variant names through its ``vars`` (it must name exactly one).
    """
    out: dict[str, list[tuple[str, object]]] = {}
    for v in exp.variants:
        cols: list[tuple[str, object]] = []
        for entry in exp.benchmarks:
            templated = bool(_placeholders(entry))
            name = entry.format(**v.vars) if templated else entry
            try:
                hits = catalogue.select("full", name)
            except KperfdiffError:
                hits = _boot_benchmarks(exp, name, v)    # boot.*: a guest's boot, at the target's mem=
                if not hits:
                    raise _err(exp.path, "benchmarks", f"entry {entry!r} ({name!r} for variant {v.label!r}) matches "
                                                       f"no benchmark; see kperfdiff bench --list") from None
            if templated:
                if len(hits) != 1:
                    raise _err(exp.path, "benchmarks", f"entry {entry!r} must name exactly one benchmark per "
                                                       f"variant, but {name!r} matches {len(hits)}")
                cols.append((entry, hits[0]))
            else:
                cols.extend((h.name, h) for h in hits)
        keys = [k for k, _ in cols]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup:
            raise _err(exp.path, "benchmarks", f"name {dup} twice (two entries match it)")
        out[v.label] = cols
    first = [k for k, _ in out[exp.variants[0].label]]
    for v in exp.variants[1:]:
        if [k for k, _ in out[v.label]] != first:
            raise _err(exp.path, "benchmarks", f"resolve to different columns for variant {v.label!r}")
    return out


def _boot_benchmarks(exp: Experiment, name: str, v: Variant) -> list:
    """The boot.* benchmarks (targets/boot.py) a name or pattern matches; they run on guest targets only,
    one boot per memory size (the variant's target says mem=)."""
    hits = [b for b in ALL_BOOT_BENCHMARKS if fnmatch.fnmatchcase(b.name, name) or b.family == name]
    if hits and not v.target.startswith("qemu:"):
        raise _err(exp.path, f"variant {v.label!r}.target",
                   f"must be a qemu guest for the boot benchmarks ({name}), not {v.target!r}")
    return hits


def cells(exp: Experiment, columns: dict[str, list[tuple[str, object]]]) -> list[Cell]:
    """Every cell in run order: repetition outermost, variants interleaved and rotated."""
    labels = [v.label for v in exp.variants]
    n = len(labels) * len(columns[labels[0]]) * len(exp.cores) * exp.reps
    if n > limits.MAX_CELLS:
        raise _err(exp.path, "reps", f"x variants x benchmarks x cores make {n} cells, more than the "
                                     f"{limits.MAX_CELLS} one experiment may have")
    out = []
    slot = 0
    for rep in range(exp.reps):
        for i, (key, _) in enumerate(columns[labels[0]]):
            for cores in exp.cores:
                k = slot % len(labels)
                for label in labels[k:] + labels[:k]:
                    bench = dict(columns[label])[key]
                    out.append(Cell(label, key, bench.name, cores, rep))
                slot += 1
    return out


def variant_params(exp: Experiment, v: Variant, benches: list) -> dict[str, dict[str, str]]:
    """Per-benchmark parameter overrides of one variant: the experiment's, then the variant's own.

    An override that applies to none of this variant's benchmarks (it names
    another variant's benchmark) is left out here; :func:`check_params`
    rejects one that applies to no benchmark of the experiment at all.
    """
    out: dict[str, dict[str, str]] = {}
    for table in (exp.params, v.params):
        for k, val in table.items():
            try:
                ov = parse_param_overrides([f"{k}={val}"], benches)
            except KperfdiffError:
                continue
            for b, kv in ov.items():
                out.setdefault(b, {}).update(kv)
    return out


def benchmarks_by_name(columns) -> dict:
    """Every benchmark of the experiment's columns (any variant), by name."""
    return {b.name: b for cols in columns.values() for _, b in cols}


def check_params(exp: Experiment, columns) -> dict[str, dict[str, dict[str, str]]]:
    """variant -> benchmark -> overrides; an override that applies to no benchmark of the experiment is an error."""
    allb = benchmarks_by_name(columns)
    for where, table in [("params", exp.params)] + [(f"variant {v.label!r}.params", v.params)
                                                     for v in exp.variants]:
        for k, val in table.items():
            try:
                parse_param_overrides([f"{k}={val}"], list(allb.values()))
            except KperfdiffError:
                raise _err(exp.path, f"{where} key {k!r}", "applies to no benchmark of the experiment "
                                                          "(or that benchmark has no such parameter)") from None
    return {v.label: variant_params(exp, v, [b for _, b in columns[v.label]]) for v in exp.variants}


@dataclass
class Matrix:
    """An experiment's matrix, resolved and checked (:func:`matrix`)."""

    columns: dict[str, list[tuple[str, object]]]        # variant -> its benchmark columns (:func:`resolve`)
    overrides: dict[str, dict[str, dict[str, str]]]     # variant -> benchmark -> parameters (:func:`check_params`)
    cells: list[Cell]                                   # every cell (:func:`cells`)
    bench_by_name: dict                                 # every benchmark of the columns, by name


def matrix(exp: Experiment) -> Matrix:
    """What running ``exp`` measures: its columns and cells, its parameter overrides checked."""
    columns = resolve(exp)
    overrides = check_params(exp, columns)
    return Matrix(columns, overrides, cells(exp, columns), benchmarks_by_name(columns))


@contextlib.contextmanager
def _term_as_interrupt():
    """SIGTERM and SIGHUP stop the run like Ctrl-C, so the finally clauses run."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    old = {}
    for s in (signal.SIGTERM, signal.SIGHUP):
        try:
            old[s] = signal.signal(s, handler)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# -- running ---------------------------------------------------------------------

@dataclass
class RunOptions:
    restart: bool = False
    progress: bool = True
    command: str = ""


@dataclass
class RunOutcome:
    experiment: StoredExperiment
    measured: int
    total: int
    failed: int
    exit_status: int


def _open_or_create(store, exp: Experiment, total: int, restart: bool, log=None,
                    identities: dict[str, dict] | None = None) -> tuple[StoredExperiment, str | None]:
    """The experiment to run (a new one, or the one to resume) and the state a resumed one had before
    (None: a new one). One process at a time decides, per name (two machines starting one experiment
    on a shared store at once: the second finds the first running it). ``identities``: this machine's
    identity for each variant measured here (:func:`local_identities`), which their stored cells must
    have to be resumed."""
    with store.exclusive(f"experiment {exp.name}"):
        return _open_or_create_now(store, exp, total, restart, log or (lambda m: None), identities)


def _ago(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 120:
        return f"{s} s"
    return f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60} min"


def _heartbeat_words(store, old: StoredExperiment) -> tuple[str, float | None]:
    """'its heartbeat was last seen 42 s ago (at 2024-06-11 14:03:12)', and that age in seconds."""
    age = store.heartbeat_age(old.id)
    if age is None:
        return "it has no heartbeat", None
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - age))
    return f"its heartbeat was last seen {_ago(age)} ago (at {at})", age


def _busy(store, exp: Experiment, old: StoredExperiment) -> InputError:
    """The refusal to run an experiment another live process is running."""
    if not store.of_another_host(old):
        return InputError(f"experiment {exp.name} (id {old.id}) is being run now by process {old.pid}; "
                          f"wait for it or stop it first")
    seen, _ = _heartbeat_words(store, old)
    return InputError(f"experiment {exp.name} (id {old.id}) is being run now by process {old.pid} on "
                      f"{old.host}: {seen}; wait for it or stop it there (if that machine is dead, kperfdiff run "
                      f"takes the experiment over once its heartbeat is {_ago(limits.EXPERIMENT_DEAD_S)} old)")


def local_identities(exp: Experiment) -> dict[str, dict]:
    """variant label -> this machine's identity now (:func:`machine.identity`), for the variants
    measured here (none: no facts are read)."""
    local = [v.label for v in exp.variants if v.target == "local"]
    here = machine.identity(machine.facts(probe_perf=False)) if local else None
    return {label: here for label in local}


def stale_cells(exp: Experiment, stored: dict[str, dict[str, int]], identities: dict[str, dict]) -> str | None:
    """What differs between the identity of an experiment's stored cells (``stored``: variant ->
    {identity JSON: cells}, Store.cell_identities) and ``identities`` (variant label -> its identity
    now, for the variants whose identity is known), as words naming the variant, how many cells and
    the difference; None if nothing does."""
    for v in exp.variants:
        now = identities.get(v.label)
        if now is None:
            continue
        for text, n in sorted(stored.get(v.label, {}).items()):
            diff = machine.identity_difference(json.loads(text) if text else None, now)
            if diff:
                return f"{n} stored cells of variant {v.label} have {diff}" if not text else \
                    f"{n} stored cells of variant {v.label} were measured on {diff}"
    return None


def stale_refusal(exp: Experiment, old: StoredExperiment, what: str) -> StaleCells:
    """The one sentence that refuses to add cells to an experiment whose stored ones differ."""
    return StaleCells(f"experiment {exp.name} (id {old.id}) was measured on another kernel, machine or "
                      f"kperfdiff than this run's ({what}); kperfdiff does not mix them: run with --restart to "
                      f"measure it afresh (the stored cells stay in the store, marked superseded) or give the "
                      f"experiment another name (--name NAME)")


def _open_or_create_now(store, exp: Experiment, total: int, restart: bool, log,
                        identities: dict[str, dict] | None = None) -> tuple[StoredExperiment, str | None]:
    old = store.latest_experiment(exp.name)
    h = exp.file_hash()
    if old is not None and store.experiment_owner_alive(old):
        raise _busy(store, exp, old)
    if old is not None and old.state == "running" and store.of_another_host(old):
        # a shared store's experiment whose machine stopped saying it is alive: take it over, if no other
        # machine does first and its process does not speak up meanwhile
        seen, _ = _heartbeat_words(store, old)
        if not store.take_over_experiment(old.id):
            raise _busy(store, exp, store.get_experiment(old.id))
        log(f"kperfdiff: experiment {exp.name} (id {old.id}) was left running by process {old.pid} on "
            f"{old.host}, and {seen}: taking it over (that process, if it comes back, stops)")
        old = store.get_experiment(old.id)
    if old is not None and (restart or old.file_hash != h):
        # nothing measured yet (it stopped before its first cell, e.g. on a knob): nothing to protect
        if not restart and store.cell_states(old.id):
            done = sum(1 for s in store.cell_states(old.id).values() if s in ("ok", "skipped"))
            raise InputError(f"{exp.path} changed since experiment {exp.name} (id {old.id}) started, "
                             f"{done} of {old.cells} cells done; rerun with --restart to start it again "
                             f"(the old results stay in the store), or give the experiment another name")
        store.set_experiment_state(old.id, "superseded")
        old = None
    if old is None:
        eid = store.create_experiment(name=exp.name, path=str(Path(exp.path).resolve()), file_hash=h,
                                      spec=exp.spec(), cells=total)
        return store.get_experiment(eid), None
    if identities:
        what = stale_cells(exp, store.cell_identities(old.id), identities)
        if what:
            raise stale_refusal(exp, old, what)
    store.set_experiment_state(old.id, "running", claim=True)
    return store.get_experiment(old.id), old.state


def _prefix_words(v: Variant) -> list[str]:
    words: list[str] = []
    if v.env:
        words += ["env"] + [f"{k}={val}" for k, val in v.env.items()]
    if v.cpus:
        words += ["taskset", "-c", v.cpus]
    return words


def _check_cpus(exp: Experiment) -> None:
    allowed = os.sched_getaffinity(0)
    for v in exp.variants:
        if not v.cpus:
            continue
        want = set(limits.parse_cpu_list(v.cpus))
        missing = sorted(want - allowed)
        if missing:
            raise InputError(f"{exp.path}: variant {v.label!r}.cpus names CPU {missing[0]}, which this machine "
                             f"does not have or does not allow (allowed: {len(allowed)} CPUs)")


def plan(exp: Experiment) -> dict:
    """What ``run`` would do, without touching the machine: columns and cells."""
    m = matrix(exp)
    return {"name": exp.name, "hash": exp.file_hash(), "variants": [v.label for v in exp.variants],
            "baseline": exp.baseline, "stack": exp.stack,
            "columns": {label: [(k, b.name) for k, b in cols] for label, cols in m.columns.items()},
            "cores": exp.cores, "reps": exp.reps, "cells": len(m.cells), "comparisons": exp.comparisons()}


def run_experiment(store, exp: Experiment, opts: RunOptions, log=None) -> RunOutcome:
    """Run (or resume) the whole matrix of ``exp`` into ``store``."""
    return _MatrixRun(store, exp, opts, log or (lambda m: print(m, file=sys.stderr, flush=True))).run()


class _MatrixRun:
    """One run of an experiment's matrix: the cells still to measure, the variants' runs in the
    store, the knob guard, and what has been measured so far."""

    def __init__(self, store, exp: Experiment, opts: RunOptions, log):
        self.store, self.exp, self.opts, self.log = store, exp, opts, log
        _check_cpus(exp)
        m = matrix(exp)
        self.columns, self.overrides, self.all_cells = m.columns, m.overrides, m.cells
        self.bench_by_name = m.bench_by_name
        knobmod.repair_pending(log, strict=True)
        if exp.profile:
            require_perf()
        expr, self.state_before = _open_or_create(store, exp, len(self.all_cells), opts.restart, log,
                                                  local_identities(exp))
        self.resumed = self.state_before is not None
        self.eid = expr.id
        self.expr = expr
        # variant -> {identity JSON: cells}: what the stored cells were measured on (a guest's are
        # compared with its first job's facts, before anything of that job is stored)
        self.identities = store.cell_identities(self.eid)
        self.heartbeat = _Heartbeat(store, self.eid)
        states = store.cell_states(self.eid)
        self.todo = [c for c in self.all_cells if states.get(c.id) not in ("ok", "skipped")]
        self.guard = knobmod.KnobGuard()
        self.swap = contextlib.ExitStack()
        self.runs: dict[str, object] = {}
        self.facts: dict[str, dict | None] = {}
        self.finished: set[str] = set()
        self.measured = self.failed = 0
        self.binaries: dict = {}
        self.profilers: dict = {}
        self.progress: Progress | None = None
        self.lava = LavaVariants(exp, self.bench_by_name, self.overrides)

    def run(self) -> RunOutcome:
        exp, store, eid = self.exp, self.store, self.eid
        done_before = len(self.all_cells) - len(self.todo)
        if self.resumed:
            self.log(f"kperfdiff: resuming experiment {exp.name} (id {eid}): {done_before} of "
                     f"{len(self.all_cells)} cells already stored")
        state = "failed"
        self.heartbeat.start()
        try:
            with _term_as_interrupt():
                self.facts = self._knobs_and_facts()
                self._probe_finished_targets()
                self.runs = self._variant_runs()
                self._prepare(done_before)
                try:
                    self.measure_cells(self.todo)
                    if exp.precision:
                        self.binaries = self.binaries or self._build()
                        for (key, cores), text in _adaptive_rounds(store, exp, eid, self.columns, self.measure_cells,
                                                                   self.progress, self.log).items():
                            store.set_cell_stop(eid, key, cores, text)
                finally:
                    self.progress.close()
                remaining_failed = sum(1 for s in store.cell_states(eid).values() if s == "failed")
                state = "failed" if remaining_failed else "complete"
        except StaleCells:
            # refused before a cell of the mismatching variant was stored: the experiment keeps its state
            before = self.state_before
            state = before if before in ("complete", "failed") else "interrupted"
            raise
        except KeyboardInterrupt:
            state = "interrupted"
            self.log(f"kperfdiff: experiment {exp.name} interrupted after {self.measured} cells; run the same "
                     f"command again to resume it")
            raise
        finally:
            self._finish(state)
        return RunOutcome(store.get_experiment(eid), self.measured, len(self.all_cells), self.failed,
                          1 if self.failed else 0)

    def _knobs_and_facts(self) -> dict[str, dict | None]:
        """Every knob of every variant can be set (checked before anything is measured), and the
        machine facts each variant runs with (a guest or board says what it is after its first job)."""
        facts: dict[str, dict | None] = {}
        for v in self.exp.variants:
            if v.target == "local":
                self.guard.apply(v.knobs)
                facts[v.label] = machine.facts()
            else:
                facts[v.label] = None
        self.guard.apply({})
        return facts

    def _probe_finished_targets(self) -> None:
        """A finished experiment run again, with variants on guests or boards: one empty job per such
        variant says what it runs now, so the stored cells are not taken as measured on the kernel it
        runs now when they were not. (With cells left to measure, a variant's first job says it, and
        a variant with none left is not asked: rerunning failed jobs costs no more jobs.)"""
        if not self.resumed or self.todo:
            return
        for v in self.exp.variants:
            if v.target == "local" or not self.identities.get(v.label):
                continue
            self.log(f"kperfdiff: {v.label}: asking {v.target} what it runs now (one empty job), to check the "
                     f"stored cells were measured on it")
            with targets.open_target(v.target, cmdline=v.cmdline) as t:
                self.facts[v.label] = t.facts() or None
            self._check_identity(v.label, self.facts[v.label])

    def _check_identity(self, label: str, facts: dict | None) -> dict | None:
        """The identity of a variant's cell measured with ``facts``; refuses (StaleCells) if the variant's
        stored cells have another."""
        if not facts:
            return None
        ident = machine.identity(facts)
        what = stale_cells(self.exp, self.identities, {label: ident})
        if what:
            raise stale_refusal(self.exp, self.expr, what)
        return ident

    def target_said(self, label: str, facts: dict | None) -> None:
        """A guest's or board's job said what it runs (``facts``): the first time, checked against the
        variant's stored cells (refused, StaleCells, before the run records a machine its cells were
        not measured on), then kept as the variant's facts and its run's machine."""
        if not facts or self.facts.get(label) is not None:
            return
        self._check_identity(label, facts)
        self.facts[label] = facts
        self.store.set_run_machine(self.runs[label].id, self.store.add_machine(facts))

    def _variant_runs(self) -> dict[str, object]:
        """One run per variant, reused when resuming."""
        exp, store = self.exp, self.store
        existing = {r.variant: r for r in store.experiment_runs(self.eid)}
        runs: dict[str, object] = {}
        for v in exp.variants:
            mid = store.add_machine(self.facts[v.label]) if self.facts[v.label] else None
            if v.label in existing:
                runs[v.label] = store.reopen_run(existing[v.label].id)
                continue
            r = store.start_run(label=f"{exp.name}/{v.label}", variant=v.label, target=v.target,
                                machine_id=mid, command=self.opts.command, experiment_hash=exp.file_hash(),
                                options={"experiment": exp.name, "experiment_id": self.eid,
                                         "knobs": v.knobs, "env": v.env, "cpus": v.cpus,
                                         "vars": v.vars, "cmdline": v.cmdline, "params": v.params})
            store.link_run(r.id, self.eid)
            runs[v.label] = r
        return runs

    def _build(self) -> dict:
        return build.build_all(sorted({b.family for b in self.bench_by_name.values()} - {"boot"}))

    def _prepare(self, done_before: int) -> None:
        exp, todo = self.exp, self.todo
        self.binaries = self._build() if todo else {}
        self.bopts = BenchOptions(intervals=exp.intervals,
                                  min_batch_ns=int(exp.min_batch_ms * 1e6) if exp.min_batch_ms else None,
                                  timeout=exp.timeout, progress=self.opts.progress)
        if exp.profile:
            self.profilers = {label: BenchProfiler(f, freq=exp.profile_freq) for label, f in self.facts.items() if f}
        self.swap_ready = {label: (f or {}).get("swap_active", False) for label, f in self.facts.items()}
        if todo and any(v.target == "local" for v in exp.variants):
            busy = noise.busy_check()
            if busy:
                self.log(busy)
        self.progress = Progress(len(todo), enabled=self.opts.progress)
        if todo:
            self.log(f"kperfdiff: experiment {exp.name} (id {self.eid}): {len(todo)} cells to measure "
                     f"({len(exp.variants)} variants x {len(self.columns[exp.variants[0].label])} benchmarks x "
                     f"{len(exp.cores)} core counts x {exp.reps} reps"
                     + (f", {done_before} done before" if done_before else "") + ")")

    def stored(self, c: Cell, m: Measurement, profile_store) -> None:
        """One measured cell into the store at once (so a rerun resumes after it), with the identity of
        what it was measured on (refused if the variant's stored cells have another)."""
        facts = m.facts or self.facts.get(c.variant)
        ident = self._check_identity(c.variant, facts) if m.status != "failed" else \
            (machine.identity(facts) if facts else None)
        rid = store_measurement(self.store, self.runs[c.variant].id, m, experiment_id=self.eid, cell=c.id,
                                rep=c.rep, bench_key=c.key, identity=ident)
        if ident is not None and m.status != "failed":
            key = json.dumps(ident, sort_keys=True)
            counts = self.identities.setdefault(c.variant, {})
            counts[key] = counts.get(key, 0) + 1
        if m.ok:
            profile_store(rid)
        self.finished.add(c.id)
        self.measured += 1
        self.heartbeat.check(self.exp.name)
        if m.status == "failed":
            self.failed += 1
            self.progress.note(f"kperfdiff: {c.variant}: {m.benchmark} -P {c.cores} rep {c.rep + 1} failed: "
                               f"{m.reason}")
        elif m.status == "skipped" and c.rep == 0:
            self.progress.note(f"kperfdiff: {c.variant}: {m.benchmark} skipped: {m.reason}")
        self.progress.advance()

    def measure_cells(self, batch_cells: list[Cell]) -> None:
        exp = self.exp
        for c in batch_cells:
            if c.id in self.finished:
                continue
            v = exp.variant(c.variant)
            eta = self.progress.eta_words()
            if is_lava(v.target):
                # every LAVA variant's cells still to measure, as jobs in flight on the lab's devices
                batch = [x for x in batch_cells if is_lava(exp.variant(x.variant).target) and x.id not in self.finished]
                self.progress.step(f"{len(batch)} cells as LAVA jobs ({len({(x.variant, x.rep) for x in batch})} "
                                   f"jobs){eta}")
                for x, m, keep in self.lava.measure(batch, self.runs, self.store, self.target_said, self.progress.note):
                    self.stored(x, m, keep)
                continue
            if v.target != "local":
                # a guest boots (or a board connects) once for all of this variant's cells of this rep
                batch = [x for x in batch_cells
                         if x.variant == c.variant and x.rep == c.rep and x.id not in self.finished]
                self.progress.step(f"{c.variant}: {len(batch)} cells on {v.target}, {self.progress.rep_words(c.rep, exp.reps)}{eta}")
                for x, m, keep in _measure_remote(exp, v, batch, self.bench_by_name, self.overrides,
                                                  self.runs[v.label], self.store, self.target_said):
                    self.stored(x, m, keep)
                continue
            b = self.bench_by_name[c.benchmark]
            self.progress.step(f"{c.variant}: {c.benchmark} -P {c.cores} {self.progress.rep_words(c.rep, exp.reps)}{eta}")
            self.guard.apply(v.knobs)
            m = _measure_cell(exp, v, c, b, self.binaries, self.overrides, self.facts, self.swap_ready, self.swap,
                              self.profilers, self.runs[v.label], self.bopts, measure, unmet_requirement)
            prof = self.profilers.get(v.label)
            self.stored(c, m, (lambda rid, c=c, b=b, m=m, prof=prof: prof.collect(
                self.store, self.runs[c.variant], rid, b, c.cores, m)) if prof else (lambda rid: None))

    def _finish(self, state: str) -> None:
        """Knobs restored, swap removed, runs and the experiment closed, even on Ctrl-C."""
        problems = self.guard.restore()
        self.heartbeat.stop()
        self.lava.close()
        try:
            self.swap.close()
        finally:
            # unless another machine took the experiment over: its runs are that one's now
            with knobmod.signals_blocked():
                if not self.heartbeat.lost and self.store.owns_experiment(self.eid):
                    for r in self.runs.values():
                        self.store.finish_run(r.id, "complete" if state == "complete" else
                                              ("failed" if state == "failed" else "interrupted"))
                    self.store.set_experiment_state(self.eid, state)
        for pr in problems:
            self.log(f"kperfdiff: warning: {pr}; the original value is kept in the store and the next kperfdiff "
                     f"run tries again")


class _Heartbeat:
    """While an experiment runs on a PostgreSQL store, its heartbeat every limits.HEARTBEAT_S seconds
    (Store.heartbeat), from a thread with a connection of its own, so it goes on while a cell is measured
    (a guest's batch of cells can take many minutes): another machine judges by it whether this process
    is alive. An SQLite store's experiments are judged by their pid: no thread. ``lost``: the experiment
    is no longer this process's (another machine took it over while this one was not heard from)."""

    def __init__(self, store, eid: int):
        self.store, self.eid = store, eid
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.store.postgres and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="kperfdiff-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        own = None
        try:
            while not self._stop.wait(limits.HEARTBEAT_S):
                try:
                    own = own or self.store.reopen()
                    if not own.heartbeat(self.eid):
                        self.lost = True
                        return
                except KperfdiffError:
                    # the server out of reach for now: the next beat tries again, on a new connection
                    if own is not None:
                        own.conn.close()
                    own = None
        finally:
            if own is not None:
                own.conn.close()

    def check(self, name: str) -> None:
        """Stop (after the cell just stored) if another machine took the experiment over."""
        if self.lost:
            raise StoreError(f"experiment {name} (id {self.eid}) was taken over by another machine while this "
                             f"process's heartbeat did not reach the store; this process stops (the cells it "
                             f"stored are kept)")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def _adaptive_rounds(store, exp: Experiment, eid: int, columns, measure_cells, progress, log) -> dict:
    """After the matrix: more repetitions of the (column, core count) groups whose changes are not
    yet known to +-``exp.precision`` percent of their speed ratio (:func:`kperfdiff.core.stats.ratio_half_width`
    of the 95% interval), one round of every such group at a time, all variants
    interleaved and rotated (:func:`kperfdiff.bench.rounds.run_rounds`). Returns why each group stopped."""
    labels = [v.label for v in exp.variants]
    ended = store.cell_stops(eid)      # a run that finished (or a rerun of a complete one) measures no more
    groups = [(key, cores) for key, _ in columns[labels[0]] for cores in exp.cores if (key, cores) not in ended]

    def cells_of(g, r: int) -> list[Cell]:
        key, cores = g
        return [Cell(label, key, dict(columns[label])[key].name, cores, r)
                for label in rounds.rotated(labels, r + groups.index(g))]

    def measure_round(order, r):
        states = store.cell_states(eid)
        batch = [c for g in order for c in cells_of(g, r) if states.get(c.id) not in ("ok", "skipped")]
        progress.adaptive_round(len(batch))
        measure_cells(batch)
        states = store.cell_states(eid)
        return {g for g in order if any(states.get(c.id) != "ok" for c in cells_of(g, r))}

    def half_widths(gs):
        cmp = compare.from_experiment(store, str(eid))
        out = {}
        for g in gs:
            hw = [stats.ratio_half_width(x.low, x.high) for blk in cmp.blocks for k, x in blk.cells.items() if k == g]
            out[g] = max(hw) if hw and not any(math.isnan(h) for h in hw) else math.nan
        return out

    policy = rounds.RepetitionPolicy(reps=exp.reps, precision=exp.precision, max_time=exp.max_time)
    progress.set_time_limit(policy.time_limit)
    why = rounds.run_rounds(groups, measure_round, half_widths, policy, first=exp.reps) if groups else {}
    progress.close()        # the bar's line cleared before the notes below
    for (key, cores), text in why.items():
        log(f"kperfdiff: {key} -P {cores}: {text}")
    return why


def _measure_cell(exp, v, c, b, binaries, overrides, facts, swap_ready, swap, profilers, run, bopts, measure,
                  unmet_requirement) -> Measurement:
    params = b.run_params(tiny=exp.tiny, overrides=overrides[v.label].get(b.name),
                          hello=str(binaries["hello"]) if "hello" in binaries else None)
    if "swap" in b.requires and not swap_ready[v.label] and exp.allow_swap_setup:
        # this machine's swap, for this machine's variants; a guest or board sets up its own in its
        # job (targets.run_benchmarks with allow_swap_setup)
        swap.enter_context(temporary_swap())
        for other in exp.variants:
            if other.target == "local":
                swap_ready[other.label] = True
    reason = unmet_requirement(b, facts[v.label], swap_ready[v.label])
    if reason:
        return Measurement.skipped(b, reason, params=params, copies=c.cores)
    words = _prefix_words(v)
    prof = profilers.get(v.label)
    rep = c.rep

    def prefix_for_rep(_ignored):
        if prof is None:
            return list(words) or None
        return words + prof.prefix_for(run, b, c.cores)(rep)

    return measure(b, binaries[b.family], params, c.cores, 1, bopts, prefix_for_rep).as_repetition(rep)


def _measure_remote(exp, v, batch, bench_by_name, overrides, run, store, said):
    """Measure a batch of one variant's cells (one rep) in one job on its target.

    Yields (cell, measurement, profile-storing function) per cell.
    Each job also says what machine the target is: ``said(label, facts)``
    (_MatrixRun.target_said) before its cells are yielded.
    """
    opts = BenchOptions(reps=1, intervals=exp.intervals, tiny=exp.tiny,
                        min_batch_ns=int(exp.min_batch_ms * 1e6) if exp.min_batch_ms else None,
                        timeout=exp.timeout, profile=exp.profile, profile_freq=exp.profile_freq,
                        allow_swap_setup=exp.allow_swap_setup)
    if any(bench_by_name[x.benchmark].family == "boot" for x in batch):
        # boot.*: the guest's own boots measure them (targets/boot.py), not a job in one boot
        boots = [x for x in batch if bench_by_name[x.benchmark].family == "boot"]
        with targets.open_target(v.target, cmdline=v.cmdline) as t:
            ms = measure_batch(t, [x.benchmark for x in boots])
        said(v.label, ms[0].facts if ms else None)
        for x, m in zip(boots, ms):
            yield x, m.as_repetition(x.rep), (lambda rid: None)
        batch = [x for x in batch if bench_by_name[x.benchmark].family != "boot"]
        if not batch:
            return
    cells = [targets.Cell(bench_by_name[x.benchmark], x.cores, overrides[v.label].get(x.benchmark)) for x in batch]
    with targets.open_target(v.target, cmdline=v.cmdline) as t:
        ms = targets.run_benchmarks(t, cells, opts, artefact_dir=run.artefact_dir, first_rep=batch[0].rep)
        event = getattr(t, "perf_event", None) or "cpu-clock"
    said(v.label, ms[0].facts if ms else None)
    for x, tc, m in zip(batch, cells, ms):
        def keep(rid, tc=tc, m=m):
            if m.profiles or m.counted:
                store_target_profiles(store, run, rid, tc.bench, tc.copies, m, m.facts or {}, event)
        yield x, m, keep


def describe_stored(store, exp: Experiment, restart: bool = False) -> str:
    """What ``run`` would do with what the store holds of the experiment (``run --dry-run``): how many
    cells are stored, whether they can be resumed (the same file; measured on the identity this machine
    has now) and how many would be measured. ``store`` None: there is no store yet."""
    total = len(matrix(exp).cells)
    old = store.latest_experiment(exp.name) if store is not None else None
    states = store.cell_states(old.id) if old is not None else {}
    if old is None or not states:
        return f"stored: none; run would measure all {total} cells\n"
    done = sum(1 for x in states.values() if x in ("ok", "skipped"))
    head = f"stored: {done} of {total} cells, in experiment {exp.name} (id {old.id}, {old.state})"
    afresh = f"--restart (or another --name) measures all {total} cells afresh"
    if restart:
        return f"{head}; with --restart run keeps them (marked superseded) and measures all {total} cells afresh\n"
    if old.file_hash != exp.file_hash():
        return f"{head}, made from another version of the file: run refuses to resume it; {afresh}\n"
    what = stale_cells(exp, store.cell_identities(old.id), local_identities(exp))
    if what:
        return f"{head}, but {what}: run refuses to mix them; {afresh}\n"
    out = f"{head}, measured on this machine's kernel as it is now; run would measure {total - done}"
    remote = [v.label for v in exp.variants if v.target != "local"]
    if remote:
        out += (f" (the stored cells of {', '.join(remote)} are checked against what their target runs at its "
                f"first job)")
    return out + "\n"


def describe_plan(pl: dict) -> str:
    out = [f"experiment {pl['name']} (hash {pl['hash']}): {pl['cells']} cells = {len(pl['variants'])} variants x "
           f"{len(next(iter(pl['columns'].values())))} benchmarks x {len(pl['cores'])} core counts x "
           f"{pl['reps']} reps", f"baseline: {pl['baseline']}"]
    if pl["stack"]:
        out.append("patch stack: " + " -> ".join(pl["stack"]))
    for label, cols in pl["columns"].items():
        out.append(f"variant {label}: " + ", ".join(n if k == n else f"{k}={n}" for k, n in cols))
    out.append("comparisons: " + "; ".join(f"{a} vs {b}" for a, b, _ in pl["comparisons"]))
    return "\n".join(out) + "\n"
