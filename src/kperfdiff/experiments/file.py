"""The experiment file: its format, parsed and checked into an :class:`Experiment` (:func:`parse`).

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
    detect = 5                           # optional, instead of precision: more repetitions until every
                                         # change could detect 5% (80% power), or max_time runs out
    max_time = 300                       # optional: seconds of measuring for those (default 600)
    intervals = 5                        # optional: timed intervals per process
    min_batch_ms = 10                    # optional: minimum batch length
    timeout = 120                        # optional: per-process timeout (s)
    profile = true                       # perf record every process
    profile_freq = 999                   # optional sampling frequency (Hz)
    tiny = false                         # use the benchmarks' tiny parameters
    allow_swap_setup = false             # temporary swap for benchmarks that need it (this machine:
                                         # zram or a swap file; a guest or board: zram set up by its job)
    pin = true                           # pin each local benchmark process to a CPU (the same CPU for
                                         # every variant of a round; a variant's cpus wins)
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

Every problem with a file is one sentence naming the file and the field (:class:`ExperimentError`).
The identity of an experiment is the hash of its parsed content (:meth:`Experiment.file_hash`:
comments, layout and ``description`` do not count). What the file's matrix measures, cell by cell:
:mod:`kperfdiff.experiments.matrix`; how it is run: :mod:`kperfdiff.experiments.run`.
"""
from __future__ import annotations

import hashlib
import json
import re
import string
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.core.files import read_toml
from kperfdiff.measure import knobs as knobmod
from kperfdiff.targets import validate_spec

# Environment variables that make a program load or run other code (the benchmarks run as root).
UNSAFE_ENV = {"PATH", "IFS", "ENV", "BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "GCONV_PATH", "LOCPATH",
              "NLSPATH", "HOSTALIASES", "RESOLV_HOST_CONF", "MALLOC_TRACE", "PYTHONPATH", "PYTHONHOME",
              "PYTHONSTARTUP", "PYTHONINSPECT", "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYLIB", "RUBYOPT",
              "NODE_OPTIONS", "NODE_PATH"}
UNSAFE_ENV_PREFIXES = ("LD_",)
LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=-]*$")
TOP_KEYS = {"name", "description", "baseline", "stack", "benchmarks", "cores", "reps", "precision", "detect", "max_time",
            "intervals", "min_batch_ms",
            "timeout", "profile", "profile_freq", "tiny", "allow_swap_setup", "pin", "params", "variant", "variants", "study"}
VARIANT_KEYS = {"label", "target", "vars", "knobs", "cmdline", "env", "cpus", "params", "description"}


class ExperimentError(InputError):
    """An experiment file that cannot be used."""


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
    detect: float | None = None
    intervals: int | None = None
    min_batch_ms: float | None = None
    timeout: float | None = None
    profile: bool = False
    profile_freq: int | None = None
    tiny: bool = False
    allow_swap_setup: bool = False
    pin: bool = True
    params: dict[str, str] = field(default_factory=dict)
    description: str = ""
    study: dict = field(default_factory=dict)     # the [study] table (kperfdiff.studies reads it)

    def spec(self) -> dict:
        """The parsed content that defines the experiment (its identity)."""
        d = asdict(self)
        d.pop("path")
        d.pop("description")
        d.pop("study")
        if d["pin"]:        # the default: files written before `pin` existed keep their identity
            d.pop("pin")
        if d["detect"] is None:      # likewise for `detect`
            d.pop("detect")
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


def field_error(path, field_name: str, problem: str, error: type[InputError] = ExperimentError) -> InputError:
    """One sentence naming the file and the field (``error``: the class of the files of another format
    in this style, such as a watch's suite file)."""
    return error(f"{path}: {field_name} {problem}")


def _scalar_str(path, where: str, v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (str, int, float)):
        s = str(v)
        if "\0" in s:
            raise field_error(path, where, "has a NUL character in it")
        if len(s) > limits.MAX_VALUE_CHARS:
            raise field_error(path, where, f"is longer than {limits.MAX_VALUE_CHARS} characters")
        return s
    raise field_error(path, where, f"must be a string or a number, not {type(v).__name__}")


def _str_table(path, where: str, v) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise field_error(path, where, "must be a table of names to values, as in { KEY = \"value\" }")
    for k in v:
        if "\0" in str(k):
            raise field_error(path, where, f"key {str(k)!r} has a NUL character in it")
    return {str(k): _scalar_str(path, f"{where}.{k}", x) for k, x in v.items()}


def params_table(path, where: str, v) -> dict[str, str]:
    out = _str_table(path, where, v)
    for k in out:
        bench, colon, key = k.partition(":")
        if not colon or not bench or not key or "=" in key:
            raise field_error(path, f"{where} key {k!r}", "must be of the form \"BENCH_OR_PATTERN:KEY\"")
    return out


def placeholders(text: str) -> list[str]:
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
        raise field_error(p, where, "must be a table ([[variant]])")
    bad = sorted(set(rv) - VARIANT_KEYS)
    if bad:
        raise field_error(p, f"{where}.{bad[0]}", f"is not a variant field (known: {', '.join(sorted(VARIANT_KEYS))})")
    label = rv.get("label")
    if not isinstance(label, str) or not LABEL_RE.match(label):
        raise field_error(p, f"{where}.label", "must be a word of letters, digits and _.+=-")
    where = f"variant {label!r}"
    if any(v.label == label for v in variants):
        raise field_error(p, f"{where}.label", "is used twice; every variant needs its own label")
    target = rv.get("target", "local")
    if not isinstance(target, str):
        raise field_error(p, f"{where}.target", "must be a string: local, qemu:ARCH[,options] or ssh://user@host")
    try:
        kind = validate_spec(target)
    except KperfdiffError as e:
        raise field_error(p, f"{where}.target", str(e)) from None
    for fld in ("knobs", "env", "cpus"):
        if kind != "local" and rv.get(fld):
            raise field_error(p, f"{where}.{fld}", f"applies to this machine only, not to the target {target}; "
                                            f"for a guest give a kernel command line with cmdline")
    knobs = _str_table(p, f"{where}.knobs", rv.get("knobs"))
    for k in knobs:
        why = knobmod.check_knob_path(k, allow_knobs)
        if why:
            raise field_error(p, f"{where}.knobs key {k!r}", why)
    cmdline = rv.get("cmdline", "")
    if not isinstance(cmdline, str):
        raise field_error(p, f"{where}.cmdline", "must be a string (a kernel command line)")
    if cmdline and kind not in ("qemu", "lava"):
        raise field_error(p, f"{where}.cmdline", "needs a guest target (qemu:ARCH) or a LAVA target (lava://), which "
                                          "boot their kernel: the command line of a kernel already running "
                                          "cannot be changed by kperfdiff; remove it or set target")
    env = _str_table(p, f"{where}.env", rv.get("env"))
    for k in env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise field_error(p, f"{where}.env key {k!r}", "is not an environment variable name")
        if k in UNSAFE_ENV or k.startswith(UNSAFE_ENV_PREFIXES):
            raise field_error(p, f"{where}.env key {k!r}", "is never set by kperfdiff: it makes the benchmark "
                                                   "programs (run as root) load or run other code")
    cpus = rv.get("cpus", "")
    if isinstance(cpus, list):
        cpus = ",".join(str(c) for c in cpus)
    if not isinstance(cpus, str):
        raise field_error(p, f"{where}.cpus", f"{cpus!r} is not a CPU list like \"0\", \"0-3\" or \"0,2\"")
    if cpus:
        try:
            limits.parse_cpu_list(cpus)
        except ValueError as e:
            raise field_error(p, f"{where}.cpus", str(e)) from None
    return Variant(label=label, target=target, vars=_str_table(p, f"{where}.vars", rv.get("vars")),
                            knobs=knobs, cmdline=cmdline, env=env, cpus=cpus.replace(" ", ""),
                            params=params_table(p, f"{where}.params", rv.get("params")),
                            description=str(rv.get("description", "")))


def _parse_benchmarks(p, data: dict, variants: list[Variant]) -> list[str]:
    """The benchmark names or patterns, every {placeholder} defined by every variant."""
    benches = data.get("benchmarks")
    if isinstance(benches, str):
        benches = [b.strip() for b in benches.split(",") if b.strip()]
    if not isinstance(benches, list) or not benches or not all(isinstance(b, str) and b for b in benches):
        raise field_error(p, "benchmarks", "must be a non-empty list of benchmark names or patterns")
    for b in benches:
        for ph in placeholders(b):
            if not ph.isidentifier():
                raise field_error(p, "benchmarks", f"entry {b!r} has a malformed {{placeholder}}")
            for v in variants:
                if ph not in v.vars:
                    raise field_error(p, f"variant {v.label!r}.vars", f"has no {ph!r}, which benchmark {b!r} needs")
    return benches


def _parse_cores(p, data: dict) -> list[int]:
    cores = data.get("cores", [1])
    if isinstance(cores, int) and not isinstance(cores, bool):
        cores = [cores]
    if (not isinstance(cores, list) or not cores or len(cores) > limits.MAX_CORE_COUNTS
            or not all(limits.int_in_range(c, 1, limits.MAX_COPIES) for c in cores)):
        raise field_error(p, "cores", f"must be a list of at most {limits.MAX_CORE_COUNTS} copy counts from 1 to "
                               f"{limits.MAX_COPIES}, like [1, 2, 4]")
    if len(set(cores)) != len(cores):
        raise field_error(p, "cores", "lists a core count twice")
    return cores


def parse_data(data: dict, p: Path | str = "<experiment>", allow_knobs=frozenset()) -> Experiment:
    """Check parsed TOML; ``allow_knobs`` are the paths given with ``--allow-knob``."""
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise field_error(p, unknown[0], f"is not an experiment field (known: {', '.join(sorted(TOP_KEYS))})")
    name = data.get("name")
    if not isinstance(name, str) or not LABEL_RE.match(name or ""):
        raise field_error(p, "name", "must be a word of letters, digits and _.+=- (it names the experiment in the store)")
    raw_variants = data.get("variant", data.get("variants"))
    if not isinstance(raw_variants, list) or not raw_variants:
        raise field_error(p, "variant", "is missing: declare at least one [[variant]] table with a label")
    variants: list[Variant] = []
    for i, rv in enumerate(raw_variants):
        variants.append(_parse_variant(p, i, rv, variants, allow_knobs))
    labels = [v.label for v in variants]
    baseline = data.get("baseline", labels[0])
    if baseline not in labels:
        raise field_error(p, "baseline", f"{baseline!r} is not a variant label ({', '.join(labels)})")
    stack = data.get("stack", [])
    if not isinstance(stack, list) or any(s not in labels for s in stack) or len(set(stack)) != len(stack):
        raise field_error(p, "stack", f"must be a list of distinct variant labels ({', '.join(labels)}) in patch order")
    benches = _parse_benchmarks(p, data, variants)
    cores = _parse_cores(p, data)

    def pos_int(key, default, most):
        v = data.get(key, default)
        if v is None:
            return None
        if not limits.int_in_range(v, 1, most):
            raise field_error(p, key, f"must be a whole number from 1 to {most}")
        return v

    def pos_num(key, most):
        v = data.get(key)
        if v is None:
            return None
        if not limits.number_in_range(v, 0, most):
            raise field_error(p, key, f"must be a number above 0 and at most {most}")
        return float(v)

    def flag(key, default=False):
        v = data.get(key, default)
        if not isinstance(v, bool):
            raise field_error(p, key, "must be true or false")
        return v

    desc = data.get("description", "")
    detect = pos_num("detect", limits.MAX_PRECISION_PCT)
    if detect is not None and data.get("precision") is not None:
        raise field_error(p, "detect", "and precision are two rules for adding repetitions: give one")
    return Experiment(name=name, path=str(p), variants=variants, baseline=baseline, benchmarks=list(benches),
                      cores=list(cores), reps=pos_int("reps", 3, limits.MAX_REPS), stack=list(stack),
                      precision=pos_num("precision", limits.MAX_PRECISION_PCT),
                      max_time=pos_num("max_time", limits.MAX_TIMEOUT_S),
                      detect=detect,
                      intervals=pos_int("intervals", None, limits.MAX_INTERVALS),
                      min_batch_ms=pos_num("min_batch_ms", limits.MAX_MIN_BATCH_MS),
                      timeout=pos_num("timeout", limits.MAX_TIMEOUT_S), profile=flag("profile"),
                      profile_freq=pos_int("profile_freq", None, limits.MAX_PROFILE_FREQ), tiny=flag("tiny"),
                      allow_swap_setup=flag("allow_swap_setup"), pin=flag("pin", True),
                      params=params_table(p, "params", data.get("params")),
                      description=desc if isinstance(desc, str) else "", study=_study_table(p, data.get("study")))


def _study_table(p, v) -> dict:
    """The [study] table: text about the study a file reproduces; names to strings, numbers, booleans or
    lists of strings (kperfdiff.studies checks which keys it knows)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise field_error(p, "study", "must be a table ([study])")
    out: dict = {}
    for k, x in v.items():
        if isinstance(x, list):
            if len(x) > limits.MAX_LIST_ITEMS:
                raise field_error(p, f"study.{k}", f"has more than {limits.MAX_LIST_ITEMS} items")
            out[str(k)] = [_scalar_str(p, f"study.{k}", i) for i in x]
        else:
            out[str(k)] = _scalar_str(p, f"study.{k}", x)
    return out
