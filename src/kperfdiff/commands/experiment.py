"""`kperfdiff run`, `compare` and `report`: experiments, comparison tables and the report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kperfdiff.experiments import file as exp_file, matrix as exp_matrix, run as exp_run
from kperfdiff.analysis import bench_compare as cm
from kperfdiff.render import compare as rcompare
from kperfdiff.render import report as rreport
from kperfdiff.analysis.report_data import gather, load_comparison, top_mover_diff
from kperfdiff.bench.catalogue import operations
from kperfdiff.core.errors import InputError, UsageError
from kperfdiff.store import Store, default_location
from kperfdiff.store.backend import is_url
from kperfdiff.commands.common import STDOUT, command_line, open_store, write_file, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, percent


EXPLAIN_HELP = ("end the comparison with the method in full (the interval, the test, the signs); without it, "
                "a two-line legend")


def add_run(e: Parser) -> None:
    e.description = ("Run the whole matrix of an experiment file (TOML; see examples/), variants "
                     "interleaved, each cell stored at once. Running it again resumes it: finished "
                     "cells are never measured twice. Knobs are checked before anything runs and "
                     "restored afterwards, even on Ctrl-C. Prints the comparison table at the end.")
    e.add_argument("file", help="experiment file (TOML)")
    e.add_argument("--restart", action="store_true",
                   help="start the experiment again from zero (the old results stay in the store, marked "
                        "superseded); needed when the file changed after a partial run, or when the stored cells "
                        "were measured on another kernel, machine or kperfdiff version than this run's")
    e.add_argument("--name", metavar="NAME",
                   help="the experiment's name in the store instead of the file's name (e.g. one per commit in "
                        "CI: --name \"perf-gate-$CI_COMMIT_SHA\")")
    e.add_argument("--dry-run", action="store_true",
                   help="check the file, print the matrix and how many cells are stored and would be measured; "
                        "run nothing")
    e.add_argument("--allow-knob", action="append", metavar="PATH",
                   help="let the file set this knob although it is not one of the performance knobs kperfdiff "
                        "sets by default (repeatable; the always-refused ones stay refused)")
    e.add_argument("--report", metavar="HTML", help="also write the HTML report there, print the kperfdiff "
                                                    "table of the benchmark that moved most, and its path")
    add_format(e, "text", "markdown", "json", "csv", help="format of the comparison table (default: text)")
    add_output(e, what="the comparison table")
    e.add_argument("--explain", action="store_true", help=EXPLAIN_HELP)
    e.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    e.add_argument("--no-pin", action="store_true",
                   help="do not pin benchmark processes to CPUs (by default each repetition's copies are pinned, "
                        "the same CPUs for every variant of a round; see docs/benchmarks.md)")


def add_compare(c: Parser) -> None:
    c.description = ("For each benchmark and core count: the baseline's centre (geometric mean of "
                     "the per-repetition medians), each variant's, with the CV; then per variant the "
                     "change as a speed ratio (1.12x faster, 1.50x slower) and in % (positive = "
                     "better) with a two-level 95% confidence interval over the repetitions "
                     "(Kalibera & Jones; 3 repetitions per side at least), a significance mark "
                     "(Benjamini-Hochberg q <= 0.05 over the table's cells), a mark for disturbed "
                     "measurements, and the geometric means. Units say what one operation is (ns per "
                     "4 KB page, ns per fork). A short legend ends it; --explain gives the method.")
    c.add_argument("runs", nargs="*", metavar="RUN", help="run ids or labels; the first is the baseline")
    c.add_argument("--experiment", metavar="ID|NAME", help="compare the variants of an experiment")
    c.add_argument("--stack", action="store_true",
                   help="with RUNs: they form a patch stack; also compare each with the one before it")
    add_format(c, "text", "markdown", "json", "csv", "junit",
               help="text (default), markdown, json, csv, or junit (JUnit XML for CI: a testsuite per "
                    "table, a testcase per cell, a failure per cell that trips --fail-on-regression, an "
                    "error per cell it could not judge, skipped with --allow-unjudged)")
    add_output(c, what="the tables")
    c.add_argument("--explain", action="store_true", help=EXPLAIN_HELP)
    c.add_argument("--fail-on-regression", type=percent, default=None, metavar="PCT",
                   help="a CI gate: exit 1 when any cell is a significant slowdown (marked * by the table's "
                        "Benjamini-Hochberg test) of more than PCT%% (change below -PCT; the change is signed "
                        "so that negative is worse, times up or throughputs down), else 0; the cells that "
                        "tripped it are listed on stderr; cells measured while the machine was disturbed (!) "
                        "count, and say so. It fails closed: a cell it could not judge (no interval, a side "
                        "missing or failed, modes that cannot be compared, or a detectable change above PCT: "
                        "it could not have seen the slowdown) fails it too, listed with the reason, unless "
                        "--allow-unjudged; a "
                        "gate that judged no cell never passes. Runs of one experiment are judged with the "
                        "experiment's interval, as --experiment judges them")
    c.add_argument("--same-within", type=percent, default=None, metavar="PCT",
                   help="a change whose 95%% interval lies inside +-PCT%% is called same (default: 5); one whose "
                        "interval is neither significant nor inside it is unknown, with about how many repetitions "
                        "would decide it")
    c.add_argument("--allow-unjudged", action="store_true",
                   help="with --fail-on-regression: cells it could not judge do not fail it; it says how many "
                        "there were (a gate that judged no cell still fails)")
    c.add_argument("--skip-disturbed", action="store_true",
                   help="with --fail-on-regression: do not judge cells measured while the machine was disturbed "
                        "(!); they are listed as set aside, so noise cannot fail a build, nor catch a regression "
                        "(a gate left with no judged cell still fails)")


def add_report(r: Parser) -> None:
    r.description = ("One HTML file that works offline, the result first: the verdict in a few "
                     "sentences (what changed, by how much, how sure), comparison tables, "
                     "plots (change bars with confidence intervals, scaling curves, a heat map "
                     "whose colours are clipped at outliers), the kernel counters that explain "
                     "changes, the kperfdiff table and differential flame graph of each benchmark "
                     "that changed significantly; last, folded, the machine facts side by side.")
    r.add_argument("runs", nargs="*", metavar="RUN", help="run ids or labels; the first is the baseline")
    r.add_argument("--experiment", metavar="ID|NAME", help="report on the variants of an experiment")
    r.add_argument("--stack", action="store_true", help="with RUNs: they form a patch stack")
    add_format(r, "markdown", "html", default="html",
               help="html (default): one self-contained page; markdown: with its SVG plots written into "
                    "FILE's stem + '.files/' beside it, so it needs -o FILE (not -)")
    add_output(r, default="report.html", what="the report")
    r.add_argument("--no-profiles", action="store_true", help="leave out the profile diffs (faster)")


def check_report_output(output: str | Path, fmt: str) -> None:
    """Refuse a Markdown report to standard output: its plots are files beside it."""
    if str(output) == STDOUT and fmt != "html":
        raise InputError("a Markdown report writes its plots into files beside it, so it needs -o FILE, "
                         "not standard output (--format html is one self-contained page)")


def write_report(data, output: str | Path, fmt: str = "html") -> Path:
    """The report as one HTML file (to standard output for -), or Markdown with its SVG plots in
    FILE's stem + '.files/'."""
    check_report_output(output, fmt)
    if str(output) == STDOUT:
        write_output(STDOUT, rreport.to_html(data))
        return Path(STDOUT)
    out = Path(output)
    if fmt == "html":
        write_file(out, rreport.to_html(data), make_folder=True)
    else:
        files_dir = out.stem + ".files"
        md, files = rreport.to_markdown(data, files_dir)
        for name, svg in files.items():
            write_file(out.parent / files_dir / name, svg, make_folder=True)
        write_file(out, md, make_folder=True)
    return out


def _existing_store(args) -> Store | None:
    """The store of --store if there is one (a dry run makes none)."""
    where = getattr(args, "store", None) or default_location()
    if not is_url(where) and not Path(where).exists():
        return None
    return open_store(args, create=False)


def run(args: argparse.Namespace) -> int:
    """`kperfdiff run FILE`: run or resume, then print the comparison (and write the report)."""
    exp = exp_file.parse(args.file, frozenset(args.allow_knob or ()), name=args.name)
    if args.dry_run:
        sys.stdout.write(exp_matrix.describe_plan(exp_matrix.plan(exp)))
        sys.stdout.write(exp_run.describe_stored(_existing_store(args), exp, args.restart))
        return 0
    store = open_store(args)
    outcome = exp_run.run_experiment(store, exp, exp_run.RunOptions(
        restart=args.restart, progress=not args.no_progress, command=command_line(), pin=not args.no_pin))
    cmp = load_comparison(store, experiment=str(outcome.experiment.id), runs=[], profiles=bool(args.report),
                          ops=operations())
    text = rcompare.render(cmp, args.format, explain=args.explain)
    if args.report:
        text += "\n" + rreport.top_mover_text(top_mover_diff(cmp))
        out = write_report(gather(store, cmp), args.report, "html")
        text += f"\nreport: {out.resolve()}\n"
    write_output(args.output, text)
    if outcome.failed:
        print(f"kperfdiff: {outcome.failed} cells failed; run the same command again to retry them",
              file=sys.stderr)
    return outcome.exit_status


def compare(args: argparse.Namespace) -> int:
    """`kperfdiff compare RUN_A RUN_B ...` or `kperfdiff compare --experiment ID|NAME`; with
    --fail-on-regression, the gate's verdict on stderr and as the exit status."""
    for flag, given in (("--skip-disturbed", args.skip_disturbed), ("--allow-unjudged", args.allow_unjudged)):
        if given and args.fail_on_regression is None:
            raise UsageError(f"{flag} needs --fail-on-regression PCT", prog="kperfdiff compare")
    store = open_store(args, create=False)
    same = args.same_within if args.same_within is not None else cm.DEFAULT_SAME_WITHIN
    cmp = load_comparison(store, experiment=args.experiment, runs=args.runs, stack=args.stack, profiles=False,
                          ops=operations(), same_within=same)
    gate = cm.gate(cmp, args.fail_on_regression, skip_disturbed=args.skip_disturbed,
                   allow_unjudged=args.allow_unjudged)
    write_output(args.output, rcompare.render(cmp, args.format, gate, explain=args.explain))
    if args.fail_on_regression is None:
        return 0
    sys.stdout.flush()
    sys.stderr.write(rcompare.gate_text(gate))
    return gate.exit_status


def report(args: argparse.Namespace) -> int:
    check_report_output(args.output, args.format)      # before the work
    store = open_store(args, create=False)
    cmp = load_comparison(store, experiment=args.experiment, runs=args.runs, stack=args.stack,
                          profiles=not args.no_profiles, ops=operations())
    out = write_report(gather(store, cmp, profiles=not args.no_profiles), args.output, args.format)
    if args.output != STDOUT:
        print(f"kperfdiff: report written to {out}", file=sys.stderr)
        print(str(out))
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"run": (add_run, run), "compare": (add_compare, compare), "report": (add_report, report)}
