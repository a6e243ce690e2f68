"""`kperfdiff system tune|show|reset`: the machine set up for quiet benchmarks, and put back."""
from __future__ import annotations

import argparse
import sys

from kperfdiff.measure import tune as tm
from kperfdiff.render import system as rs
from kperfdiff.commands.common import write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output


def add_system(s: Parser) -> None:
    s.description = ("Tune this machine for benchmarks, show its state, or put it back. `tune` isolates the "
                     "benchmark CPUs in a cpuset (other tasks and movable IRQs leave them), sets the cpufreq "
                     "governor to performance and turns turbo/boost and the NMI watchdog off, as far as the "
                     "machine has them, and says in one line each what it changed and what it could not. The "
                     "changes are held until `reset` (or a reboot); benchmarks measured meanwhile run on the "
                     "isolated CPUs and their runs say the machine was tuned.")
    sub = s.add_subparsers(dest="system_command", metavar="ACTION", parser_class=Parser, required=True)
    t = sub.add_parser("tune", help="isolate the benchmark CPUs and quiet the machine (as root)")
    t.add_argument("--cpus", metavar="LIST", default=None,
                   help="the benchmark CPUs, like 1 or 2-3 (default: the last half of the online CPUs, at least "
                        "one, leaving CPU 0 for the rest)")
    sh = sub.add_parser("show", help="each setting a tune touches: its value now, and whether it is tuned")
    add_format(sh, "text", "json")
    add_output(sh, what="the settings")
    sub.add_parser("reset", help="put back everything the tune changed")


def system(args: argparse.Namespace) -> int:
    def log(m):
        print(m, file=sys.stderr, flush=True)

    if args.system_command == "tune":
        report = tm.tune(tm.choose_cpus(args.cpus), log)
        write_output(None, rs.tune_lines([(s.what, s.detail, s.changed, s.possible) for s in report.steps],
                                         report.cpus))
        return 0
    if args.system_command == "show":
        write_output(args.output, rs.state(tm.state(), args.format, tm.tuned()))
        return 0
    was, problems = tm.reset(log)
    for p in problems:
        log(f"kperfdiff: {p}")
    if not was:
        log("kperfdiff: the machine is not tuned; nothing to reset")
    return 1 if problems else 0


DEFINES = {"system": (add_system, system)}
