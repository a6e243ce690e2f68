"""One probe of a bisection: build the commit checked out, boot or set it up on the target,
measure the benchmark into an ordinary run, and read back one value per repetition.

What a probe runs comes from a build:

- ``--build CMD`` runs ``sh -c CMD`` in the tree. Its standard output says what to boot, one
  ``key=value`` per line: ``image=PATH`` (the kernel image; a bare line naming an existing file
  means the same), ``append=ARGS`` (kernel command-line words), ``param=BENCH:KEY=VALUE`` (a
  benchmark parameter, for a target that boots nothing) and ``symbols=PATH`` (System.map or
  vmlinux of the image). Other lines are its log. A non-zero exit is a build failure: the commit
  is skipped, as ``git bisect run`` skips on exit 125.
- Without ``--build``, a kernel built in place from a minimal configuration for the target's
  architecture plus ``--config FRAGMENT`` (:mod:`kperfdiff.targets.kbuild`).

A probe's image is copied into its commit's folder, so a later step (or a resumed bisection) boots
the image of that commit even after the tree has moved on.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.bench import catalogue
from kperfdiff.core import stats
from kperfdiff.core.errors import BenchError, InputError, KperfdiffError, UsageError
from kperfdiff.core.records import Result, Run
from kperfdiff.measure.session import BenchOptions, run_bench
from kperfdiff.store import Store
from kperfdiff.targets import kbuild, parse_target_spec
from kperfdiff.targets.lava.spec import parse_spec as parse_lava_spec
from kperfdiff.targets.qemu import parse_spec

# Targets that boot the kernel a probe gives them (its image and command line in their specification).
BOOTING = ("qemu", "lava")

METRICS = ("time", "instructions")

# What one repetition contributes with --metric time: the 10th percentile of its intervals (the
# default: interference such as another task on the CPU, an interrupt or a migration only adds time,
# so a low quantile follows what the code costs and not how much of the repetition was disturbed;
# a repetition of a few hundred milliseconds that was slowed for half its intervals moves its median
# by tens of percent and its low decile by a few), or their median (a change in the slow part of the
# distribution, which the low decile does not see).
VALUES = ("p10", "median")


class BuildFailed(KperfdiffError):
    """The commit did not build: a probe that is skipped, not a failed bisection."""


@dataclass
class Build:
    """What one commit's build gave: the image to boot and how."""

    image: str | None = None
    append: str = ""
    params: list[str] = field(default_factory=list)
    symbols: str | None = None
    seconds: float = 0.0
    image_bytes: int | None = None

    def as_dict(self) -> dict:
        return {"image": self.image, "append": self.append, "params": self.params, "symbols": self.symbols,
                "seconds": round(self.seconds, 3), "image_bytes": self.image_bytes}


@dataclass(frozen=True)
class Plan:
    """Everything that makes two bisections the same one (a resumed one finds its probes by it)."""

    repo: str
    good: str
    bad: str
    bench: str
    cores: int
    target: str
    metric: str
    build: str | None
    config: str | None
    params: tuple[str, ...]

    @property
    def key(self) -> str:
        text = json.dumps([self.repo, self.good, self.bad, self.bench, self.cores, self.target, self.metric,
                           self.build, self.config, list(self.params)])
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def parse_bench(text: str) -> tuple[str, int]:
    """``NAME[@CORES]`` -> (name, cores); the name must be one benchmark of the catalogue."""
    name, _, cores = text.partition("@")
    try:
        n = int(cores) if cores else 1
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--bench {text!r}: the number after @ is the parallel copies, a whole number >= 1")
    names = [b.name for b in catalogue.load_catalogue()]
    if name not in names:
        raise UsageError(f"--bench {name!r} is not a benchmark; see kperfdiff bench --list")
    return name, n


def parse_build_output(text: str) -> Build:
    b = Build()
    for line in text.splitlines():
        line = line.strip()
        key, eq, value = line.partition("=")
        if eq and key in ("image", "append", "param", "symbols"):
            if key == "image":
                b.image = value
            elif key == "append":
                b.append = " ".join(filter(None, [b.append, value]))
            elif key == "param":
                b.params.append(value)
            else:
                b.symbols = value
        elif line.startswith("/") and os.path.isfile(line):
            b.image = line
    return b


def run_build_command(cmd: str, tree: Path, log: Path, timeout: float | None = None) -> Build:
    """``sh -c CMD`` in the tree; its output parsed as above, its log kept in ``log``."""
    t0 = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as err:
        try:
            p = subprocess.run(["sh", "-c", cmd], cwd=tree, stdout=subprocess.PIPE, stderr=err,
                               stdin=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"the build command ran longer than {timeout:g} s (log: {log})") from None
    out = p.stdout.decode(errors="replace")
    with open(log, "a") as f:
        f.write(out)
    if p.returncode != 0:
        raise BuildFailed(f"the build command exited with status {p.returncode} (log: {log})")
    b = parse_build_output(out)
    b.seconds = time.monotonic() - t0
    return b


def build_probe(plan: Plan, tree: Path, out: Path, *, timeout: float | None = None, progress=None) -> Build:
    """Build the commit checked out in ``tree`` into ``out`` (its folder): by the build command,
    else a kernel of the target's architecture (:func:`kperfdiff.targets.kbuild.build_kernel`)."""
    kind, _ = parse_target_spec(plan.target)
    if plan.build:
        b = run_build_command(plan.build, tree, out / "build.log", timeout)
    else:
        if kind not in BOOTING:
            raise UsageError(f"without --build, a probe's kernel is built for a guest (qemu:ARCH) or a LAVA device "
                             f"type (lava://); the target {plan.target} needs --build CMD to say what each commit runs")
        arch = parse_spec(plan.target).arch if kind == "qemu" else parse_lava_spec(plan.target).arch
        try:
            k = kbuild.build_kernel(tree, arch, fragment=Path(plan.config) if plan.config else None, out=out,
                                    progress=progress)
        except BenchError as e:        # the commit does not build: skipped, as git bisect run skips
            raise BuildFailed(str(e)) from None
        b = Build(image=str(k.image), symbols=str(k.system_map) if k.system_map else None, seconds=k.seconds,
                  image_bytes=k.image_bytes)
    if b.image:
        if kind not in BOOTING:
            raise UsageError(f"the build printed a kernel image, but kperfdiff boots images only in guests "
                             f"(qemu:ARCH) and LAVA labs (lava://), not on {plan.target}: let the build command "
                             f"install and boot it itself and print no image= line")
        src = Path(b.image) if os.path.isabs(b.image) else tree / b.image
        if not src.is_file():
            raise BuildFailed(f"the build names the kernel image {b.image}, which does not exist")
        out.mkdir(parents=True, exist_ok=True)
        kept = out / src.name
        if src.resolve() != kept.resolve():
            shutil.copyfile(src, kept)
        b.image, b.image_bytes = str(kept), kept.stat().st_size
        if b.symbols:
            sym = Path(b.symbols) if os.path.isabs(b.symbols) else tree / b.symbols
            if sym.is_file() and sym.resolve() != (out / sym.name).resolve():
                shutil.copyfile(sym, out / sym.name)
                b.symbols = str(out / sym.name)
    if "," in b.append:
        raise BuildFailed(f"append={b.append!r}: kernel arguments with a comma cannot go into a target specification")
    return b


def probe_target(plan: Plan, build: Build) -> str:
    """The target specification a probe measures on: the plan's, with the built image in place of
    any kernel= it names, and the build's kernel arguments after any append= it has."""
    if parse_target_spec(plan.target)[0] not in BOOTING or not (build.image or build.append):
        return plan.target
    head, *opts = plan.target.split(",")
    append = " ".join([o.partition("=")[2] for o in opts if o.startswith("append=")] + ([build.append] if build.append
                                                                                        else []))
    keep = [o for o in opts if not o.startswith("append=") and not (build.image and o.startswith("kernel="))]
    if build.image:
        keep.append(f"kernel={build.image}")
    if append:
        keep.append(f"append={append}")
    return ",".join([head, *keep])


def measure(store: Store, plan: Plan, build: Build, *, commit: str, subject: str, role: str, reps: int,
            profile: bool, progress: bool = True, bracket_for: str | None = None,
            tagged: tuple[str, dict] | None = None) -> Run:
    """Measure the benchmark ``reps`` times on the probe's target, into a new run tagged with the
    bisection, the commit and the role (probe, verify, revert, or bracket: GOOD or BAD measured
    around the probe ``bracket_for``). ``tagged``: (the command, its tag) for a run another command
    measures this way (``("watch", {...})``: the sentinel's measurement of a commit)."""
    by, tag = tagged or ("bisect", {"key": plan.key, "commit": commit, "role": role, "build": build.as_dict()})
    if bracket_for:
        tag["for"] = bracket_for
    whose = f"bisection {plan.key}" if tagged is None else ", ".join(f"{k} {v}" for k, v in tag.items()
                                                                       if isinstance(v, str))
    opts = BenchOptions(only=plan.bench, parallel=[plan.cores], reps=reps, label=f"{by}-{commit[:12]}",
                        variant=role, params=list(plan.params) + list(build.params), target=probe_target(plan, build),
                        profile=profile, progress=progress,
                        command=f"kperfdiff {by} {plan.bench} ({role} {commit[:12]}, {whose})",
                        annotations={"commit": commit, "commit_subject": subject, by: tag})
    try:
        outcome = run_bench(store, opts)
    except BenchError as e:      # a kernel that does not boot or panics: this commit cannot be judged
        raise BuildFailed(f"{plan.bench} did not run on {commit[:12]}: {e}") from None
    res = _result(store, outcome.run.id, plan)
    if res is None or res.status != "ok":
        why = res.reason if res is not None else "no result"
        raise BuildFailed(f"{plan.bench} did not run on {commit[:12]}: {why}")
    return outcome.run


def _result(store: Store, run_id: int, plan: Plan) -> Result | None:
    for r in store.results(run_id):
        if r.benchmark == plan.bench and r.copies == plan.cores:
            return r
    return None


def stored_runs(store: Store, plan: Plan) -> list[Run]:
    """The complete runs of this bisection, oldest first (what a resumed bisection reuses)."""
    return [r for r in store.list_runs() if r.state == "complete"
            and (r.options.get("bisect") or {}).get("key") == plan.key]


def intervals(store: Store, plan: Plan, run: Run) -> list[list[float]]:
    """The run's timed intervals, one list per repetition (none when the benchmark did not run)."""
    res = _result(store, run.id, plan)
    if res is None or res.status != "ok":
        return []
    return [list(map(float, r)) for r in res.repetitions.values() if len(r)]


def values(store: Store, plan: Plan, run: Run, value: str = VALUES[0]) -> list[float]:
    """One value per repetition of the run's result (time): the low decile of its intervals
    (``value = "p10"``, see :data:`VALUES`) or their median; or its exact kernel instructions per
    operation (instructions: one value, a run of one repetition)."""
    res = _result(store, run.id, plan)
    if res is None or res.status != "ok":
        return []
    if plan.metric == "time":
        reps = list(res.repetitions.values())
        got = stats.repetition_medians(reps) if value == "median" else stats.repetition_quantiles(reps, 0.1)
        return [float(v) for v in got]
    counted = store.kernel_instructions_per_op(res.id)
    if counted is None:
        raise KperfdiffError(f"run {run.id} has no exact instruction counts: --metric instructions needs a "
                             f"deterministic guest (qemu:ARCH,deterministic)")
    return [counted]


def check_metric(plan: Plan) -> None:
    if plan.metric not in METRICS:
        raise UsageError(f"--metric {plan.metric!r} is not one of {', '.join(METRICS)}")
    if plan.metric == "instructions":
        kind, _ = parse_target_spec(plan.target)
        if kind != "qemu" or "deterministic" not in plan.target.split(","):
            raise UsageError(f"--metric instructions counts exact instructions in a deterministic guest: give "
                             f"--target qemu:ARCH,deterministic, not {plan.target}")


def require_clean(repo_dirty: list[str], path: Path) -> None:
    if repo_dirty:
        raise InputError(f"{path} has uncommitted changes ({', '.join(repo_dirty[:3])}"
                         f"{'...' if len(repo_dirty) > 3 else ''}): a bisection checks out other commits; "
                         f"commit or stash them first")
