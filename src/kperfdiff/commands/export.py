"""`kperfdiff export PROFILE --to FORMAT -o FILE`: one profile (any input diff reads, or a store
reference) written in a format another tool loads."""
from __future__ import annotations

import argparse
import os
import sys

from kperfdiff.core.errors import InputError
from kperfdiff.ingest import filters as sample_filters
from kperfdiff.ingest.load import load_events, load_side
from kperfdiff.ingest.profile import merge
from kperfdiff.ingest.source import STDIN
from kperfdiff.render import export
from kperfdiff.commands.common import write_file
from kperfdiff.commands.diff import store_lookup
from kperfdiff.commands.parsing import Parser


def add_export(e: Parser) -> None:
    e.description = ("Write one profile in a format other tools load. speedscope: its JSON file format, one "
                     "sampled profile per event of the input (nanoseconds for cpu-clock and task-clock, else "
                     "sample counts); open it at speedscope.app or with the speedscope command. pprof: "
                     "gzip-compressed profile.proto with sample types samples/count and cpu/nanoseconds (or "
                     "EVENT/count for a sampled event's period), kernel functions in the [kernel.kallsyms] "
                     "mapping; read it with go tool pprof. firefox: the Firefox Profiler's Gecko format, one "
                     "thread per process when the input names processes; that format has no sample weights, so "
                     "each sample is listed (grouped by stack, one interval apart: the call tree and flame graph "
                     "are the recording's, the timeline is not). folded: stack-collapsed lines "
                     "(root;...;leaf COUNT) with the process as the root frame when the input names it and "
                     "kernel frames ending in _[k], for flamegraph.pl or inferno-flamegraph.")
    e.add_argument("profile", metavar="PROFILE",
                   help="perf.data, perf script text, perf report --stdio text or folded stacks (any of them "
                        "gzip-compressed; - reads standard input), or a store reference RUN[:benchmark[@CORES]] "
                        "(its repetitions and parallel copies added together)")
    e.add_argument("--to", required=True, choices=export.FORMATS, metavar="FORMAT",
                   help="speedscope, pprof, firefox or folded")
    e.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write; - for standard output")
    e.add_argument("--unit", choices=export.UNITS,
                   help="what a stack's number counts: samples, or ns (the nanoseconds of cpu-clock or "
                        "task-clock samples). folded: default samples, so flame graphs show sample counts; "
                        "speedscope: default ns where the event has time, else samples. pprof always holds "
                        "both, and firefox only samples")
    e.add_argument("--event", metavar="NAME",
                   help="the event to export when the input has several (default: the first; speedscope: "
                        "every event of a file, one profile each)")
    e.add_argument("--kallsyms", metavar="FILE",
                   help="kallsyms, System.map or vmlinux for a perf.data input (checked against it, as for diff)")
    e.add_argument("--symfs", metavar="DIR", help="root to find user binaries in, for a perf.data input")
    e.add_argument("--kallsyms-unchecked", action="store_true",
                   help="use the kallsyms even when the recording's kernel does not match it (as for diff)")
    e.add_argument("--folded-kernel", choices=["auto", "entry", "all", "none"], default="auto",
                   help="how to tell kernel frames in folded-stack input (as for diff; default: auto)")
    sample_filters.add_arguments(e)
    e.add_argument("--sort", choices=sample_filters.SORT_KEYS, default="sym",
                   help="only sym (the default): an export keeps every frame of every stack, so ranking DSOs or "
                        "processes does not apply (diff --sort does)")


def _profiles(args: argparse.Namespace) -> list:
    """The profiles to write: every event of a file for speedscope (unless --event), else one
    profile (a store reference's repetitions and copies merged)."""
    symfs = [args.symfs] if args.symfs else None
    filters = sample_filters.from_args(args)
    if args.to == "speedscope" and args.event is None and (args.profile == STDIN or os.path.exists(args.profile)):
        return load_events(args.profile, kallsyms=args.kallsyms, symfs=symfs, folded_kernel=args.folded_kernel,
                           kallsyms_unchecked=args.kallsyms_unchecked, filters=filters)
    # folded, pprof and firefox name each sample's process (speedscope's format has no place for it)
    reps = load_side(args.profile, store_lookup(args.store, args.event), kallsyms=args.kallsyms, symfs=args.symfs,
                     event=args.event, folded_kernel=args.folded_kernel, workers=1,
                     by_process=args.to in ("folded", "pprof", "firefox"), kallsyms_unchecked=args.kallsyms_unchecked,
                     filters=filters)
    return [export.held(merge(reps, args.profile), reps)]


def run(args: argparse.Namespace) -> int:
    if args.sort != "sym":
        raise InputError(f"--sort {args.sort} does not apply to export, which writes every frame of every stack; "
                         f"use diff --sort {args.sort} to rank {'DSOs' if args.sort == 'dso' else 'processes'}")
    if args.unit == "ns" and args.to in ("pprof", "firefox"):
        raise InputError(f"--unit ns does not apply to {args.to}: "
                         + ("pprof holds both samples and nanoseconds" if args.to == "pprof"
                            else "the Firefox Profiler's format counts samples only"))
    if args.output == STDIN and args.to == "pprof" and sys.stdout.isatty():
        raise InputError("pprof output is binary; give -o FILE rather than writing it to a terminal")
    profiles = _profiles(args)
    if not any(p.samples and p.total_weight > 0 for p in profiles):
        # as diff says: an empty file written with exit status 0 would pass for a profile
        raise InputError(f"{args.profile} holds no samples" + (" of any weight" if any(p.samples for p in profiles)
                                                                else "") + "; there is nothing to export")
    first = profiles[0]
    if args.to == "speedscope":
        data = export.speedscope(profiles, name=first.label or first.source, unit=args.unit)
    elif args.to == "pprof":
        data = export.pprof(first)
    elif args.to == "firefox":
        data = export.firefox(first)
    else:
        data = export.folded(first, args.unit or "samples").encode("utf-8")
    if args.output == STDIN:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        write_file(args.output, data)
        rows = sum(len(p.stack_rows()) for p in profiles)
        print(f"kperfdiff: wrote {args.output} ({args.to}: {len(profiles)} event{'s' if len(profiles) != 1 else ''}, "
              f"{sum(p.samples for p in profiles):,} samples, {rows:,} stacks)", file=sys.stderr)
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"export": (add_export, run)}
