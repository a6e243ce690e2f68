"""Targets: where benchmarks run (this machine, a QEMU guest, an SSH board).

Target specifications (``--target SPEC``, ``target = "SPEC"`` in experiment files):

``local``
    this machine (the default).
``qemu:ARCH[,kernel=VERSION|PATH][,modules=DIR][,mem=SIZE][,cpus=N][,deterministic]``
``[,kvm=auto|on|off][,flavour=cloud|generic][,append=ARGS][,timeout=S][,boot_timeout=S]``
    an emulated guest booted for each job; ARCH is ``arm64`` or ``x86_64``.
    ``kernel=`` is a Debian kernel ABI (``6.1.0-56``), a version of the
    ``linux-image-[cloud-]ARCH`` package (``6.1.192-2``), a package name, or
    the path of a kernel image (with ``modules=DIR`` for its modules);
    omitted, the newest Debian kernel. ``mem`` defaults to 2G, ``cpus`` to 2.
    ``deterministic`` (arm64) counts instructions instead of time, on one vCPU
    unless ``cpus=`` is given, with exact counts per kernel function from a
    QEMU plugin (:mod:`kperfdiff.targets.guest.counting`).
``ssh://[USER@]HOST[:PORT][,identity=KEYFILE][,dir=REMOTE_TMP]``
    a board reached with the system ssh client and key authentication.
``lava://HOST[:PORT]/DEVICE_TYPE[,arch=ARCH][,kernel=...][,jobs=N][,...]``
    devices of a LAVA lab: each job is a LAVA job on a device of that type, which LAVA
    picks, deploys and boots (options: :mod:`kperfdiff.targets.lava.spec`).

Options are separated by commas, so paths given in a spec cannot contain
one. Use :func:`open_target` to get a :class:`Target` and
:func:`run_benchmarks` to measure catalogue benchmarks on it.
"""
from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.bench.measurement import Measurement, aggregate
from kperfdiff.core.errors import UsageError
from kperfdiff.core.records import rep_stem
from kperfdiff.targets import qemu, ssh
from kperfdiff.targets.guest import counting
from kperfdiff.targets.base import SWAP_MB, Invocation, InvocationResult, Target
from kperfdiff.targets.lava import spec as lava_spec
from kperfdiff.targets.lava.target import LavaTarget
from kperfdiff.targets.local import LocalTarget
from kperfdiff.targets.qemu import QemuTarget
from kperfdiff.targets.ssh import SshTarget

__all__ = ["Target", "Invocation", "InvocationResult", "open_target", "run_benchmarks", "Cell", "parse_target_spec",
           "plan_benchmarks", "measurements", "BenchmarkJob", "LavaTarget"]


def parse_target_spec(spec: str) -> tuple[str, str]:
    """(kind, spec) for a target specification; raises UsageError when unknown."""
    s = (spec or "local").strip()
    if s == "local":
        return "local", s
    if s.startswith("qemu:"):
        return "qemu", s
    if s.startswith("ssh://"):
        return "ssh", s
    if s.startswith("lava://"):
        return "lava", s
    raise UsageError(f"the target {spec!r} is not understood; use local, qemu:arm64, qemu:x86_64, "
                     f"ssh://user@host[:port] or lava://host/device-type")


def validate_spec(spec: str) -> str:
    """Check a whole specification, options included (UsageError if wrong); returns its kind."""
    kind, s = parse_target_spec(spec)
    if kind == "qemu":
        qemu.parse_spec(s)
    elif kind == "ssh":
        ssh.parse_spec(s)
    elif kind == "lava":
        lava_spec.parse_spec(s)
    return kind


def open_target(spec: str | None, *, cmdline: str = "") -> Target:
    """A Target for a specification (see the module docstring). Nothing boots or connects yet.

    ``cmdline`` adds kernel command-line words for a guest (an experiment
    variant's ``cmdline``); other targets run the kernel they have.
    """
    kind, s = parse_target_spec(spec or "local")
    if cmdline and kind not in ("qemu", "lava"):
        raise UsageError(f"a kernel command line needs a guest target (qemu:ARCH) or a LAVA target (lava://), "
                         f"which boot their kernel, not {spec!r}")
    if kind == "local":
        return LocalTarget()
    if kind == "qemu":
        qs = qemu.parse_spec(s)
        if cmdline:
            qs.append = " ".join(w for w in (qs.append, cmdline) if w)
        return QemuTarget(qs)
    if kind == "lava":
        return LavaTarget(s, cmdline=cmdline)
    return SshTarget(s)


@dataclass
class Cell:
    """One benchmark at one copy count, with its parameters (catalogue defaults if None)."""

    bench: object            # catalogue.Benchmark
    copies: int = 1
    params: dict | None = None


def _cells(cells) -> list[Cell]:
    out = []
    for c in cells:
        if isinstance(c, Cell):
            out.append(c)
        elif isinstance(c, tuple):
            out.append(Cell(*c))
        else:
            out.append(Cell(c))
    return out


def unmet_on_target(b, facts: dict) -> str | None:
    """Why a benchmark cannot run on the target (its facts), or None."""
    for req in b.requires:
        if req == "swap" and not facts.get("swap_active"):
            why = facts.get("swap_setup")
            if why and not why.startswith(("zram /dev/", "active")):
                return f"needs active swap and the target's own zram set-up failed: {why}"
            return ("needs active swap and the target has none configured (--allow-swap-setup, or "
                    "allow_swap_setup = true in an experiment, has the job set up zram swap)")
        if req == "thp" and facts.get("thp_enabled") not in ("always", "madvise"):
            return f"needs transparent huge pages (mode is {facts.get('thp_enabled')})"
        if req == "root" and facts.get("root") is False:
            return "needs root on the target"
        if req == "smp" and (facts.get("cpus") or 1) < 2:
            return "needs at least 2 CPUs"
    return None


@dataclass
class BenchmarkJob:
    """The invocations of one job for some cells, and which cell and repetition each serves."""

    cells: list[Cell]
    invocations: list[Invocation]
    owners: list[tuple[int, int]]       # (cell index, rep) per invocation
    started: float = 0.0


def run_benchmarks(target: Target, cells, opts, artefact_dir=None, first_rep: int = 0) -> list[Measurement]:
    """Measure each cell on target, all in one job; one Measurement per cell.

    ``cells``: Cell, (Benchmark, copies[, params]) or Benchmark items. ``opts``:
    a measure.BenchOptions (reps, intervals, min_batch_ns, timeout,
    tiny, profile, profile_freq). Each cell gets ``reps`` invocations; with
    ``opts.profile`` every copy is recorded with perf record -g and the measurement
    carries ``profiles`` [(rep, copy, local perf.data path)] and ``kallsyms``.
    Every one also carries ``facts`` (the target's), so results from an
    emulated guest are labelled emulated. Profiles live in the target's
    temporary folder until close(); give ``artefact_dir`` to have them (and
    kallsyms) copied there, named ``<bench>.P<copies>.r<rep>.c<copy>.perf.data``.
    Repetitions are numbered from ``first_rep`` (an experiment's rep).
    """
    job = plan_benchmarks(target, cells, opts, first_rep)
    job.started = time.time()
    results = target.run_job(job.invocations) if job.invocations else []
    return measurements(target, job, results, target.facts(), artefact_dir)


def plan_benchmarks(target: Target, cells, opts, first_rep: int = 0) -> BenchmarkJob:
    """The job that measures ``cells`` on ``target`` (see :func:`run_benchmarks`), with the target
    prepared for it (workers, perf, swap, a disk directory); nothing runs yet."""
    cells = _cells(cells)
    reps = max(1, getattr(opts, "reps", 1) or 1)
    profile = bool(getattr(opts, "profile", False))
    fams = sorted({c.bench.family for c in cells})
    target.prepare(fams, profile=profile)
    # the target's own swap (a guest's or board's job sets up zram) when allowed and needed, and a
    # disk-backed directory for the benchmarks that need one
    wants_swap = bool(getattr(opts, "allow_swap_setup", False)) and any("swap" in c.bench.requires for c in cells)
    target.swap_mb = SWAP_MB if wants_swap else None
    disk_dir = target.disk_dir() if any("disk" in c.bench.requires for c in cells) else None
    invs: list[Invocation] = []
    owners: list[tuple[int, int]] = []
    for ci, c in enumerate(cells):
        b = c.bench
        # kpd-hello lies in the target's bin dir, which the job script substitutes for @BIN@
        c.params = params = b.run_params(tiny=getattr(opts, "tiny", False), overrides=c.params,
                                         hello="@BIN@/kpd-hello")
        if disk_dir and "disk" in b.requires:
            params.setdefault("dir", disk_dir)
        argv = [f"kpd-{b.family}", b.name]
        intervals = getattr(opts, "intervals", None) or b.intervals
        if intervals is not None:
            argv += ["--intervals", str(intervals)]
        if getattr(opts, "min_batch_ns", None):
            argv += ["--min-batch-ns", str(int(opts.min_batch_ns))]
        if getattr(target, "count_instructions", False):
            argv.append("--count")
        argv += [f"{k}={v}" for k, v in params.items()]
        timeout = getattr(opts, "timeout", None) or b.timeout
        period = getattr(target, "perf_period", None)
        for rep in range(first_rep, first_rep + reps):
            invs.append(Invocation(argv, c.copies, timeout,
                                   profile=rep_stem(b.name, c.copies, rep) if profile else None,
                                   perf_freq=None if period else getattr(opts, "profile_freq", None),
                                   perf_period=period, perf_event=getattr(target, "perf_event", None),
                                   label=rep_stem(b.name, c.copies, rep)))
            owners.append((ci, rep))
    return BenchmarkJob(cells, invs, owners, time.time())


def measurements(target: Target, job: BenchmarkJob, results: list[InvocationResult], facts: dict,
                 artefact_dir=None) -> list[Measurement]:
    """One Measurement per cell of ``job`` from the job's results (see :func:`run_benchmarks`)."""
    per_cell: dict[int, list[tuple[int, InvocationResult]]] = {}
    for (ci, rep), r in zip(job.owners, results):
        per_cell.setdefault(ci, []).append((rep, r))
    out = []
    for ci, c in enumerate(job.cells):
        reason = unmet_on_target(c.bench, facts)
        if reason:
            m = Measurement.skipped(c.bench, reason, params=c.params, copies=c.copies, started_at=job.started)
            m.facts = facts
            out.append(m)
            continue
        m = _measure_cell(c, per_cell.get(ci, []), job.started)
        m.facts = facts
        if artefact_dir is not None and (m.profiles or m.counted):
            _keep_profiles(m, Path(artefact_dir), target.binaries(), target.symbol_files())
        out.append(m)
    return out


def _keep_profiles(m: Measurement, folder: Path, binaries: dict[str, Path],
                   symbols: dict[str, Path] | None = None) -> None:
    """Copy a cell's profiles, the kallsyms, the benchmark binaries (as a symfs) and the kernel's own
    symbol files (a System.map beside a kernel the user built) into folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in (symbols or {}).items():
        if not (folder / name).exists():
            shutil.copy2(src, folder / name)
    if binaries:
        symfs = folder / "symfs"
        for remote, local in binaries.items():
            dst = symfs / remote.lstrip("/")
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(local, dst)
        m.symfs = str(symfs)
    kept = []
    for rep, copy, path in m.profiles:
        dst = folder / Path(path).name
        shutil.copy2(path, dst)
        kept.append((rep, copy, str(dst)))
    m.profiles = kept
    counted = []
    for rep, copy, path, total in m.counted:
        dst = folder / Path(path).name
        shutil.copy2(path, dst)
        counted.append((rep, copy, str(dst), total))
    m.counted = counted
    if m.kallsyms:
        m.kallsyms = str(_keep_kallsyms(Path(m.kallsyms), folder))


def _keep_kallsyms(src: Path, folder: Path) -> Path:
    """The folder's copy of a boot's kallsyms: ``kallsyms`` for the first, and one named by its content
    for each boot that differs. Every boot of a guest loads its modules at other addresses (the kernel
    image's move is undone from perf.data, a module's is not), so each profile needs its own boot's.
    The kernel's build id kept beside it (``<name>.buildid``, see record.snapshot_kallsyms) goes along."""
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "kallsyms"
    data = src.read_bytes()
    if not first.exists() or first.read_bytes() == data:
        dst = first
    else:
        dst = folder / f"kallsyms.{hashlib.sha256(data).hexdigest()[:12]}"
    if not dst.exists():
        shutil.copy2(src, dst)
        bid = src.with_name(src.name + ".buildid")
        if bid.is_file():
            shutil.copy2(bid, dst.with_name(dst.name + ".buildid"))
    return dst


def _measure_cell(c: Cell, runs: list[tuple[int, InvocationResult]], started: float) -> Measurement:
    reps = [(rep, r.outputs(), r.monitor_delta(), r.wall_s) for rep, r in runs]
    m = aggregate(c.bench, reps, started, params=c.params, copies=c.copies)
    if not m.ok:
        return m
    profiles: list[tuple[int, int, str]] = []
    kallsyms = None
    for rep, r in runs:
        if r.invocation.profile:
            for copy in range(len(r.outputs())):
                pd = r.files.get(f"{r.invocation.profile}.c{copy}.perf.data")
                if pd:
                    profiles.append((rep, copy, str(pd)))
        if "kallsyms" in r.files:
            kallsyms = str(r.files["kallsyms"])
        for copy in range(len(r.outputs())):
            w = r.files.get(f"insn.c{copy}")
            if w and "kallsyms" in r.files:
                out = Path(w).with_name(f"{rep_stem(c.bench.name, c.copies, rep)}.c{copy}.insn.folded")
                total = counting.window_profile(Path(w), Path(r.files["kallsyms"]), out)
                m.counted.append((rep, copy, str(out), total))
    m.profiles = profiles
    m.kallsyms = kallsyms
    return m
