"""The five studies kperfdiff comes from, reproduced: one experiment file each.

A study file (``examples/studies/*.toml``) is an ordinary experiment file with
a ``[study]`` table that the experiment runner ignores::

    [study]
    kind = "superpages"          # the module below that analyses it
    title = "Superpages"
    source = "FreeBSD on ARMv7, 2013"
    measured = "..."             # what the study measured
    found = "..."                # what it found, with its figures
    differs = ["...", "..."]     # what differs here, said plainly

Each kind is a module of this package with ``section(store, exp) ->
Section``, which reads the experiment's results from the store and states
what kperfdiff measured and whether it agrees with the study, and optionally
``run(store, exp, log)`` when the study is more than running its matrix
(the default runs the experiment, resuming what is stored).

Data flows one way: experiment files -> runs in the store -> sections
(here) -> ``render/studies.py``.
"""
from __future__ import annotations

import importlib
from pathlib import Path

from kperfdiff.experiments import file as exp_file, run as exp_run
from kperfdiff.studies import study
from kperfdiff.studies.study import VERDICTS, Section, Study, Verdict

__all__ = ["KINDS", "VERDICTS", "Section", "Study", "Verdict", "study_of", "load", "run", "section"]

# kind -> module of this package
KINDS = {
    "xarch": "xarch",
    "superpages": "superpages",
    "tlb-shootdown": "shootdown",
    "linear-map": "linearmap",
    "tcm": "tcm",
}


def study_of(exp: exp_file.Experiment) -> Study:
    """The checked [study] table of an experiment, whose kind must be one of KINDS."""
    return study.study_of(exp, KINDS)


def load(path: str | Path) -> tuple[exp_file.Experiment, Study]:
    exp = exp_file.parse(path)
    return exp, study_of(exp)


def _module(kind: str):
    return importlib.import_module(f"{__name__}.{KINDS[kind]}")


def run(store, exp: exp_file.Experiment, log, progress: bool = True, restart: bool = False) -> int:
    """Run (or resume) one study (``restart``: afresh); the exit status of its experiment run."""
    mod = _module(study_of(exp).kind)
    if hasattr(mod, "run"):
        return mod.run(store, exp, log)
    outcome = exp_run.run_experiment(store, exp, exp_run.RunOptions(progress=progress, restart=restart,
                                                                      command=f"kperfdiff studies run {exp.path}"),
                                  log=log)
    return outcome.exit_status


def section(store, exp: exp_file.Experiment) -> Section:
    """The report section of one study, from what the store holds (an empty one when nothing ran yet)."""
    st = study_of(exp)
    if store.latest_experiment(exp.name) is None:
        return Section(st, exp.name, paragraphs=[f"Not run yet: `kperfdiff studies run {exp.path}`."],
                       complete=False, file=exp.path)
    sec = _module(st.kind).section(store, exp)
    sec.file = exp.path
    return sec
