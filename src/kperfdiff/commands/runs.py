"""`kperfdiff runs` and `show`: looking at what was stored. (Measuring is in commands/bench.py.)"""
from __future__ import annotations

import argparse
import sys

from kperfdiff.core import limits
from kperfdiff.bench.catalogue import operations
from kperfdiff.render import bench as rb
from kperfdiff.commands.common import open_store, write_output
from kperfdiff.commands.parsing import RUNS_PAGE, Parser, add_format, add_output, whole


def add_runs(r: Parser) -> None:
    r.description = (f"List the runs in the store, oldest first. By default only the newest "
                     f"{RUNS_PAGE} are listed, and a line on stderr says how many were left out; "
                     f"--limit N lists the newest N, --offset N pages back past the newest N, "
                     f"--all lists every run. Every --format lists the same runs.")
    page = r.add_mutually_exclusive_group()
    page.add_argument("-n", "--limit", type=whole(limits.MAX_RUNS_LISTED), default=RUNS_PAGE, metavar="N",
                      help=f"list the newest N runs (default: {RUNS_PAGE})")
    page.add_argument("--all", action="store_true", help="list every run")
    r.add_argument("--offset", type=whole(limits.MAX_RUNS_LISTED, least=0), default=0, metavar="N",
                   help=f"leave out the newest N runs first, to page back: --offset {RUNS_PAGE} lists the "
                        f"{RUNS_PAGE} before the newest {RUNS_PAGE} (default: 0)")
    add_format(r, "text", "markdown", "json", "csv")
    add_output(r, what="the list")


def add_show(s: Parser) -> None:
    s.description = ("Show one run: the machine it ran on, then one row per benchmark and core "
                     "count (and parameter set) over all its repetitions: the centre (geometric "
                     "mean of the per-repetition medians), the number of repetitions, the "
                     "half-width of the centre's 95% interval and the CV; each note once under "
                     "the table. --reps lists the repetitions themselves.")
    s.add_argument("run", help="run id (or a unique prefix of its label)")
    add_format(s, "text", "markdown", "json", "csv",
               help="text (default); markdown: the tables as Markdown; json: everything stored, raw "
                    "intervals included, and the summary (one entry per benchmark and core count, with "
                    "its repetitions); csv: every raw interval, one row each (run, label, result, "
                    "benchmark, params as JSON, copies, rep, copy, seq, value, unit, better, ops, ns, "
                    "disturbed)")
    add_output(s, what="the run")
    s.add_argument("--reps", action="store_true",
                   help="also list every repetition: one row each, numbered in the order measured")
    s.add_argument("--raw", action="store_true", help="also print every raw interval, by repetition")


def runs(args: argparse.Namespace) -> int:
    """`kperfdiff runs`: one page of runs (the newest --limit after --offset), or --all."""
    store = open_store(args, create=False)
    listed = store.list_runs(limit=None if args.all else args.limit, offset=args.offset)
    total = store.count_runs()
    write_output(args.output, rb.run_list(listed, args.format, total=total, offset=args.offset))
    note = rb.runs_left_out(len(listed), total, args.offset)
    if note:
        print(f"kperfdiff: {note}", file=sys.stderr)
    return 0


def show(args: argparse.Namespace) -> int:
    store = open_store(args, create=False)
    run = store.find_run(args.run)
    results = store.results(run.id)
    insns = {r.id: store.kernel_instructions_per_op(r.id) for r in results} if args.format == "text" else {}
    write_output(args.output, rb.show(run, store.machine(run.machine_id).facts, results, args.format,
                             raw=args.raw, reps=args.reps,
                             kernel_insns={k: v for k, v in insns.items() if v is not None}, ops=operations()))
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"runs": (add_runs, runs), "show": (add_show, show)}
