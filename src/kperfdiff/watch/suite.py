"""The suite file of a watch: which benchmarks to measure on each new commit of a branch, on which
targets, how each commit is built, which commits, and what to bisect (TOML, in the style of the
experiment files; every problem is one sentence naming the file and the field)::

    name = "select-sentinel"          # the watch's name in the store: its queue and change points
    benchmarks = ["select.file.100", "proc.fork@2"]   # NAME[@CORES] (parallel copies, default 1)
    params = { "proc.fork:hello" = "/bin/true" }      # BENCH:KEY = value, for every commit
    targets = ["local"]               # local, qemu:ARCH[,deterministic], ssh://..., lava://host/type
    metric = "time"                   # time (default) or instructions (a deterministic guest)
    reps = 5                          # repetitions per commit, and a bisection's first (default 5)
    max_reps = 15                     # a bisection probe's budget of repetitions (default 15)
    verify_reps = 5                   # a culprit's verification against its parent (default: reps)
    build = "./build.sh"              # run in the tree for each commit, as kperfdiff bisect --build
    config = "guest.config"           # or, without build: a kernel built for the guest with this
                                      # Kconfig fragment (relative to this file)
    build_timeout = 3600              # seconds a build may take before the commit is skipped
    commits = "all"                   # all, newest (the branch's tip at each invocation), or N:
                                      # every Nth commit after the first
    improvements = false              # bisect improvements too (regressions always are)
    profile = false                   # profile each measurement, so a culprit is explained
    bracket = true                    # a bisection measures GOOD and BAD around each probe repetition
                                      # (time metric; false: fewer jobs where each costs a boot)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.bench import catalogue
from kperfdiff.bisect.probe import METRICS
from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.core.files import read_toml
from kperfdiff.experiments.file import LABEL_RE, ExperimentError, field_error, params_table
from kperfdiff.targets import parse_target_spec, validate_spec

KEYS = {"name", "description", "benchmarks", "params", "targets", "metric", "reps", "max_reps", "verify_reps",
        "build", "config", "build_timeout", "commits", "improvements", "profile", "bracket"}
COMMITS = ("all", "newest")


class SuiteError(InputError):
    """A suite file that cannot be used."""


@dataclass(frozen=True)
class Bench:
    """One benchmark of a suite, with its parallel copies and the suite's parameters of it."""
    name: str
    cores: int
    params: tuple[tuple[str, str], ...] = ()

    @property
    def id(self) -> str:
        """How the queue and the change points name it: ``NAME@CORES`` and its parameters."""
        return f"{self.name}@{self.cores}" + "".join(f" {k}={v}" for k, v in self.params)

    @property
    def param_args(self) -> tuple[str, ...]:
        """Its parameters as a measurement takes them (``BENCH:KEY=VALUE``)."""
        return tuple(f"{self.name}:{k}={v}" for k, v in self.params)


@dataclass(frozen=True)
class Suite:
    name: str
    path: str
    benches: tuple[Bench, ...]
    targets: tuple[str, ...]
    metric: str = "time"
    reps: int = 5
    max_reps: int = 15
    verify_reps: int | None = None
    build: str | None = None
    config: str | None = None
    build_timeout: float | None = None
    every: int = 1                    # every Nth commit (1: all)
    newest_only: bool = False         # only the branch's tip at each invocation
    improvements: bool = False
    profile: bool = False
    bracket: bool = True
    description: str = field(default="", compare=False)

    @property
    def commits(self) -> str:
        """What ``commits`` says, as the output shows it."""
        return "newest" if self.newest_only else "all" if self.every == 1 else f"every {self.every}"


def parse(path: str | Path) -> Suite:
    """Read and check a suite file (see the module docstring)."""
    p = Path(path)
    data = read_toml(p, "suite file", SuiteError)
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise _error(p, unknown[0], f"is not a suite field (known: {', '.join(sorted(KEYS))})")
    name = data.get("name")
    if not isinstance(name, str) or not LABEL_RE.match(name):
        raise _error(p, "name", "must be a word of letters, digits and _.+=- (it names the watch in the store)")
    benches = _benches(p, data)
    targets = _targets(p, data.get("targets", ["local"]))
    metric = data.get("metric", "time")
    if metric not in METRICS:
        raise _error(p, "metric", f"must be one of {', '.join(METRICS)}")
    if metric == "instructions":
        for t in targets:
            if parse_target_spec(t)[0] != "qemu" or "deterministic" not in t.split(","):
                raise _error(p, "metric", f"instructions counts exact instructions in a deterministic guest "
                                          f"(qemu:ARCH,deterministic), which the target {t} is not")
    build, config = data.get("build"), data.get("config")
    if build is not None and (not isinstance(build, str) or not build.strip()):
        raise _error(p, "build", "must be a command line (run by sh -c in the tree of each commit)")
    if config is not None:
        if build is not None:
            raise _error(p, "config", "is for the kernel kperfdiff builds itself; with build, the build command "
                                      "says what each commit runs: give one of them")
        if not isinstance(config, str) or not (p.parent / config).is_file():
            raise _error(p, "config", f"must name a Kconfig fragment (relative to {p.parent}) that exists")
        config = str((p.parent / config).resolve())
    if build is None:
        for t in targets:
            if parse_target_spec(t)[0] not in ("qemu", "lava"):
                raise _error(p, "build", f"is needed for the target {t}: kperfdiff builds a kernel itself only "
                                         f"for a guest (qemu:ARCH) or a LAVA device type (lava://)")
    every, newest = _commits(p, data.get("commits", "all"))
    reps = _whole(p, data, "reps", 5, limits.MAX_REPS)
    desc = data.get("description", "")
    return Suite(name=name, path=str(p), benches=benches, targets=targets, metric=metric, reps=reps,
                 max_reps=max(reps, _whole(p, data, "max_reps", 15, limits.MAX_REPS)),
                 verify_reps=_whole(p, data, "verify_reps", None, limits.MAX_REPS), build=build, config=config,
                 build_timeout=_seconds(p, data, "build_timeout"), every=every, newest_only=newest,
                 improvements=_flag(p, data, "improvements"), profile=_flag(p, data, "profile"),
                 bracket=_flag(p, data, "bracket", True),
                 description=desc if isinstance(desc, str) else "")


def _error(p, where: str, problem: str) -> SuiteError:
    return field_error(p, where, problem, SuiteError)


def _benches(p: Path, data: dict) -> tuple[Bench, ...]:
    entries = data.get("benchmarks")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, str) and e for e in entries):
        raise _error(p, "benchmarks", "must be a non-empty list of benchmark names, as in [\"select.file.100\", "
                                      "\"proc.fork@2\"]")
    try:
        params = params_table(p, "params", data.get("params"))
    except ExperimentError as e:
        raise SuiteError(str(e)) from None
    known = {b.name for b in catalogue.load_catalogue()}
    out = []
    for entry in entries:
        name, at, cores = entry.partition("@")
        if name not in known:
            raise _error(p, "benchmarks", f"entry {entry!r}: {name!r} is not a benchmark (kperfdiff bench --list)")
        if at and not (cores.isdigit() and 1 <= int(cores) <= limits.MAX_COPIES):
            raise _error(p, "benchmarks", f"entry {entry!r}: after @ comes the parallel copies, a whole number "
                                          f"from 1 to {limits.MAX_COPIES}")
        mine = tuple(sorted((k.partition(":")[2], v) for k, v in params.items() if k.partition(":")[0] == name))
        out.append(Bench(name, int(cores) if at else 1, mine))
    for k in params:
        if k.partition(":")[0] not in {b.name for b in out}:
            raise _error(p, f"params key {k!r}", "names no benchmark of the suite's benchmarks")
    if len({b.id for b in out}) != len(out):
        raise _error(p, "benchmarks", "names one benchmark twice")
    return tuple(out)


def _targets(p: Path, targets) -> tuple[str, ...]:
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise _error(p, "targets", "must be a non-empty list of targets, as in [\"local\", \"qemu:arm64\"]")
    for t in targets:
        try:
            validate_spec(t)
        except KperfdiffError as e:
            raise _error(p, "targets", f"entry {t!r}: {e}") from None
    if len(set(targets)) != len(targets):
        raise _error(p, "targets", "names one target twice")
    return tuple(targets)


def _commits(p: Path, v) -> tuple[int, bool]:
    """(every Nth, only the newest) from ``commits``."""
    if v in COMMITS:
        return 1, v == "newest"
    if limits.int_in_range(v, 1, 10 ** 6):
        return int(v), False
    raise _error(p, "commits", "must be \"all\", \"newest\" or a whole number N (every Nth commit)")


def _whole(p: Path, data: dict, key: str, default, most: int):
    v = data.get(key, default)
    if v is not None and not limits.int_in_range(v, 1, most):
        raise _error(p, key, f"must be a whole number from 1 to {most}")
    return v


def _seconds(p: Path, data: dict, key: str) -> float | None:
    v = data.get(key)
    if v is not None and not limits.number_in_range(v, 0, limits.MAX_TIMEOUT_S):
        raise _error(p, key, f"must be a number of seconds above 0 and at most {limits.MAX_TIMEOUT_S}")
    return None if v is None else float(v)


def _flag(p: Path, data: dict, key: str, default: bool = False) -> bool:
    v = data.get(key, default)
    if not isinstance(v, bool):
        raise _error(p, key, "must be true or false")
    return v
