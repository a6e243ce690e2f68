"""The LAVA side of experiments: variants whose target is ``lava://``.

A variant on a LAVA target measures its cells of one repetition in one LAVA job, like a guest
measures them in one boot; but the jobs of every such variant and repetition are submitted
together and run in parallel on the lab's devices (up to ``jobs=N`` of a server in flight,
:func:`kperfdiff.targets.lava.target.run_lava_jobs`), and each cell is stored as soon as its
job comes back. A job that failed (Incomplete, Canceled, a queue timeout, a results frame
that did not come back whole) gives failed cells with the reason, which the next run of the
experiment measures again. Every result is labelled with its LAVA job, device, device type
and server (in the result's info, one entry per process; the run's machine facts name the
device type and the first device).

:func:`write_job_files` writes the same job definitions without submitting them
(``kperfdiff lava jobs``), with the kernel and ramdisk copied beside them.
"""
from __future__ import annotations

from pathlib import Path

from kperfdiff import targets
from kperfdiff.bench.measurement import Measurement
from kperfdiff.core.errors import InputError
from kperfdiff.core.records import shown_rep
from kperfdiff.measure.session import BenchOptions, store_target_profiles
from kperfdiff.targets.lava import jobs as lava_jobs
from kperfdiff.targets.lava.target import LavaTarget, PlannedJob, run_lava_jobs


def is_lava(target: str) -> bool:
    return targets.parse_target_spec(target)[0] == "lava"


def batch_options(exp) -> BenchOptions:
    """The options of one job: one repetition of each cell (a job per repetition)."""
    return BenchOptions(reps=1, intervals=exp.intervals, tiny=exp.tiny,
                        min_batch_ns=int(exp.min_batch_ms * 1e6) if exp.min_batch_ms else None,
                        timeout=exp.timeout, profile=exp.profile, profile_freq=exp.profile_freq,
                        allow_swap_setup=exp.allow_swap_setup)


class LavaVariants:
    """The LAVA targets of one experiment run: one per variant, so that its kernel and ramdisk are
    built and published once for all its jobs."""

    def __init__(self, exp, bench_by_name: dict, overrides: dict):
        self.exp, self.bench_by_name, self.overrides = exp, bench_by_name, overrides
        self.targets: dict[str, LavaTarget] = {}

    def target(self, label: str) -> LavaTarget:
        if label not in self.targets:
            v = self.exp.variant(label)
            self.targets[label] = LavaTarget(v.target, cmdline=v.cmdline)
        return self.targets[label]

    def plan(self, label: str, rep: int, cells: list) -> PlannedJob:
        """The job of one variant's cells of one repetition."""
        t = self.target(label)
        tcells = [targets.Cell(self.bench_by_name[c.benchmark], c.cores, self.overrides[label].get(c.benchmark))
                  for c in cells]
        job = targets.plan_benchmarks(t, tcells, batch_options(self.exp), first_rep=rep)
        meta = {"kperfdiff.experiment": self.exp.name, "kperfdiff.variant": label, "kperfdiff.rep": str(shown_rep(rep))}
        return PlannedJob((label, rep, cells, job), t, job.invocations,
                          f"kperfdiff {self.exp.name}/{label} rep {shown_rep(rep)}", meta)

    def measure(self, cells: list, runs: dict, store, said, note):
        """Measure ``cells`` (of LAVA variants, any repetitions) as LAVA jobs in flight; yields
        (cell, Measurement, profile-storing function) per cell as jobs finish, each job's after
        ``said(label, facts)`` (what the board runs: _MatrixRun.target_said)."""
        groups: dict[tuple[str, int], list] = {}
        for c in cells:
            groups.setdefault((c.variant, c.rep), []).append(c)
        planned = [self.plan(label, rep, cs) for (label, rep), cs in groups.items()]
        for outcome in run_lava_jobs(planned, note=lambda m: note(f"kperfdiff: {m}")):
            label, rep, cs, job = outcome.key
            t = self.targets[label]
            ms = targets.measurements(t, job, outcome.results, outcome.facts or {}, runs[label].artefact_dir)
            said(label, outcome.facts)
            for c, tc, m in zip(cs, job.cells, ms):
                labelled(m, outcome.labels, rep)

                def keep(rid, tc=tc, m=m, run=runs[label]):
                    if m.profiles:
                        store_target_profiles(store, run, rid, tc.bench, tc.copies, m, m.facts or {}, t.perf_event)
                yield c, m, keep

    def close(self) -> None:
        for t in self.targets.values():
            t.close()
        self.targets.clear()


def labelled(m: Measurement, labels: dict, rep: int) -> Measurement:
    """Every info entry of ``m`` (one per process) names the LAVA job, device, device type and server."""
    lab = {k: v for k, v in labels.items() if v is not None}
    m.info = [{**i, **lab} for i in m.info] if m.info else [{"rep": rep, **lab}]
    return m


def write_job_files(exp, matrix, out_dir: Path, artefacts_url: str | None = None) -> list[Path]:
    """The job definition of every LAVA variant's repetition of ``exp`` (``matrix``: its
    :class:`kperfdiff.experiments.matrix.Matrix`), written into ``out_dir`` (named
    ``EXPERIMENT.VARIANT.rN.yaml``) with the kernels and ramdisks in ``out_dir/artefacts`` (which the
    lab must see at ``artefacts_url``; default: that folder as a file:// URL)."""
    labels = [v.label for v in exp.variants if is_lava(v.target)]
    if not labels:
        raise InputError(f"{exp.path}: no variant of experiment {exp.name} has a lava:// target")
    lv = LavaVariants(exp, matrix.bench_by_name, matrix.overrides)
    written = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for label in labels:
            t = lv.target(label)
            t.ls.artefacts, t.ls.artefacts_url, t.ls.serve = str(out_dir / "artefacts"), artefacts_url, None
            for rep in range(exp.reps):
                p = lv.plan(label, rep, [c for c in matrix.cells if c.variant == label and c.rep == rep])
                _, text = t.definition(p.invocations, name=p.name, metadata=p.metadata)
                path = out_dir / f"{exp.name}.{label}.r{shown_rep(rep)}.yaml"
                path.write_text(text)
                written.append(path)
    except OSError as e:
        raise InputError(f"cannot write the LAVA jobs into {out_dir}: {e.strerror}") from None
    finally:
        lv.close()
    return written


def validate_job_files(paths: list[Path]) -> tuple[str, dict[Path, str]]:
    """LAVA's own schema on written job files (lava-common): (its version, problems by file)."""
    return lava_jobs.validate_files(paths)
