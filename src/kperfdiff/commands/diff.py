"""`kperfdiff diff A B`: load both sides (files or store references), rank, render, and write
any flame graph or folded files."""
from __future__ import annotations

import argparse
import gc
import math
import os
import sys
from pathlib import Path

from kperfdiff.analysis.profile_diff import DiffOptions, add_folded, diff_profiles, folded_sides
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.ingest import filters as sample_filters
from kperfdiff.ingest.load import ProfileRef, load_sides
from kperfdiff.render import diff as render
from kperfdiff.symbols.equivalence import load_roles
from kperfdiff.commands.common import ends_at_once, write_file, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, add_top, whole


def add_diff(d: Parser) -> None:
    d.description = ("Rank the functions whose share of samples differs between profile A and profile B: "
                     "functions found on both sides by |share A - share B| (percentage points), then those "
                     "found only in A, then only in B. A share is a function's weight over ALL samples of its "
                     "profile, as perf report computes it. Compiler suffixes (.isra.N, .constprop.N, .cold, "
                     "__pfx_...) are folded into one name; rules rename generic variants (__x64_sys_clone and "
                     "__arm64_sys_clone are sys_clone, memset_erms is memset); equivalent functions of different "
                     "architectures (page fault entry, syscall entry, interrupts off/on, TLB flush...) are compared "
                     "under a shared role; and between architectures, side-specific functions whose callers and "
                     "callees match are shown as inferred twins, with the evidence.")
    d.add_argument("a", help="profile A: perf.data, perf script text, perf report --stdio text, folded stacks "
                             "(any of them gzip-compressed; - reads one side from standard input), "
                             "several of them comma-separated (repeated runs: A1,A2,A3), "
                             "or a store reference RUN[:benchmark[@CORES]] (one profile per repetition, its "
                             "parallel copies added together)")
    d.add_argument("b", help="profile B, in any of the same forms")
    add_top(d, "rows per section")
    d.add_argument("--scope", choices=["kernel", "user", "all"], default="kernel",
                   help="which functions to rank (default: kernel); shares are still of all samples")
    d.add_argument("--labels", metavar="A,B", help="column names of the two sides "
                   "(default: their architectures, else their run labels or file names)")
    d.add_argument("--children", action="store_true",
                   help="inclusive shares (a function with its callees, once per sample), "
                        "so inlined work is attributed to its callers")
    d.add_argument("--per-op", action="store_true",
                   help="nanoseconds per benchmark operation (share x CPU time / operations) instead of shares")
    d.add_argument("--ops", metavar="N[,M]",
                   help="operation counts for --per-op when the profiles do not carry them (one for both sides, or A,B)")
    d.add_argument("--event", metavar="NAME",
                   help="which sampled event to rank by when the profiles carry several "
                        "(e.g. a cache- or TLB-miss event); default: the first. For store references of a "
                        "deterministic guest, 'instructions' picks the exact instruction counts per function "
                        "(used anyway when the run has no sampled profile)")
    d.add_argument("--compute", metavar="MODE", default="absdiff",
                   help="how common functions are scored and ranked: absdiff (|B-A| in points, the study's "
                        "%%diff; default), or perf diff's delta (B-A), ratio (B/A, ranked by |log ratio|) or "
                        "wdiff:WA,WB (WB*B - WA*A), all on shares (or ns/op with --per-op)")
    d.add_argument("--map", action="append", metavar="FILE",
                   help="your own equivalence table (TOML, the format of the shipped one), merged over it; repeatable")
    d.add_argument("--no-equivalence", action="store_true",
                   help="no rules and no roles: every name compared as it is (after compiler suffixes)")
    inf = d.add_mutually_exclusive_group()
    inf.add_argument("--infer", dest="infer", action="store_const", const="on", default="auto",
                     help="look for inferred twins even when both sides are one architecture (default: only "
                          "between architectures): side-specific functions whose callers and callees match, "
                          "shown in their own section with the evidence and a score")
    inf.add_argument("--no-infer", dest="infer", action="store_const", const="off", help="do not look for inferred twins")
    d.add_argument("--accept-inferred", action="store_true",
                   help="merge the accepted inferred twins into the common list (one row per pair)")
    d.add_argument("--inferred-map", metavar="FILE",
                   help="write the accepted inferred twins as an equivalence map (TOML) to review and pass back "
                        "with --map")
    d.add_argument("--no-normalise", action="store_true",
                   help="keep compiler suffixes (.isra.N, .constprop.N, .cold...) as separate names")
    d.add_argument("--folded-kernel", choices=["auto", "entry", "all", "none"], default="auto",
                   help="how to tell kernel frames in folded stacks: auto (the _[k] suffix when present, else "
                        "entry), entry (every frame from the first known kernel entry point to the leaf), "
                        "all, none (default: auto)")
    d.add_argument("--kallsyms", metavar="FILE",
                   help="kernel symbols for perf.data inputs of both sides: a kallsyms (as kperfdiff record keeps "
                        "beside its perf.data), System.map or vmlinux; default: the kallsyms beside each file, else "
                        "perf's build-id cache. Checked against the recording (build id, else kernel map and module "
                        "maps, and the share of kernel samples in a symbol): another kernel's is refused")
    d.add_argument("--kallsyms-a", metavar="FILE", help="--kallsyms for side A's perf.data")
    d.add_argument("--kallsyms-b", metavar="FILE", help="--kallsyms for side B's perf.data")
    d.add_argument("--kallsyms-unchecked", action="store_true",
                   help="use the kallsyms given or found even when the recording's kernel build id, kernel map "
                        "or module maps do not match it (refused otherwise); each side's line then says "
                        "'unchecked'")
    d.add_argument("--symfs", metavar="DIR", help="root to find user binaries in, for both sides")
    d.add_argument("--symfs-a", metavar="DIR", help="--symfs for side A")
    d.add_argument("--symfs-b", metavar="DIR", help="--symfs for side B")
    d.add_argument("--flamegraph", metavar="OUT.svg",
                   help="write a differential flame graph over both sides' stacks: width = the mean of a "
                        "frame's shares of A and B, red = larger share in B, blue = smaller, hatched = on one "
                        "side only; tooltips with both shares, search, click-to-zoom (self-contained SVG)")
    d.add_argument("--folded", metavar="PREFIX",
                   help="write PREFIX.a.folded and PREFIX.b.folded (stack count; the process name as the root "
                        "frame where the profile names it) and PREFIX.diff.folded (stack countA countB, as "
                        "FlameGraph's difffolded.pl -n: A's counts scaled to B's total, so that the colours of "
                        "flamegraph.pl or inferno-flamegraph show changes of share, not of raw counts)")
    d.add_argument("--unit", choices=["samples", "ns"], default="samples",
                   help="what --folded counts: samples (default) or ns, the nanoseconds of cpu-clock and "
                        "task-clock profiles")
    d.add_argument("--jobs", "-j", type=whole(256), metavar="N",
                   help="read up to N profile files at once (default: one per CPU); the result is the same "
                        "as one at a time")
    sample_filters.add_arguments(d)
    d.add_argument("--sort", choices=sample_filters.SORT_KEYS, default="sym",
                   help="what the rows are, as perf report --sort: sym (functions; default), dso (the DSO of the "
                        "sample's leaf function; --scope kernel keeps [kernel.kallsyms] and modules) or comm "
                        "(process names; --scope does not apply). Names are compared as they are")
    add_format(d, "text", "markdown", "json", "csv")
    add_output(d, what="the ranking")
    d.add_argument("--explain", action="store_true",
                   help="end the text output with the method: how shares, deltas and significance are computed "
                        "(Markdown and JSON always carry it)")


def _parse_labels(text: str | None):
    if not text:
        return None
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip() for p in parts):
        raise InputError(f"--labels takes two names separated by a comma, like ARM,x86, not {text!r}")
    return parts[0].strip(), parts[1].strip()


def _parse_ops(text: str | None):
    if not text:
        return (None, None)
    parts = text.split(",")
    try:
        vals = [float(p) for p in parts]
    except ValueError:
        vals = []
    if len(vals) not in (1, 2) or any(v <= 0 or math.isnan(v) for v in vals):
        raise InputError(f"--ops takes one or two positive operation counts (A,B), not {text!r}")
    return (vals[0], vals[-1])


def _parse_compute(text: str) -> tuple[str, tuple[float, float]]:
    mode, _, rest = text.partition(":")
    if mode in ("absdiff", "delta", "ratio") and not rest:
        return mode, (1.0, 1.0)
    if mode == "wdiff":
        try:
            wa, wb = (float(x) for x in rest.split(","))
        except ValueError:
            raise InputError(f"--compute wdiff takes two weights, like wdiff:1,2, not {text!r}") from None
        return mode, (wa, wb)
    raise InputError(f"--compute {text!r} is not one of absdiff, delta, ratio, wdiff:WA,WB")


def options(args: argparse.Namespace) -> DiffOptions:
    compute, weights = _parse_compute(args.compute or "absdiff")
    grouped = args.sort != "sym"    # DSOs or processes: no function rules, roles, twins
    return DiffOptions(top=args.top, sort=args.sort, scope="all" if args.sort == "comm" else args.scope,
                       labels=_parse_labels(args.labels), children=args.children,
                       per_op=args.per_op, equivalence=not (args.no_equivalence or grouped), maps=tuple(args.map or ()),
                       normalise=not (args.no_normalise or grouped), ops=_parse_ops(args.ops), compute=compute,
                       wdiff_weights=weights, infer="off" if grouped else args.infer,
                       accept_inferred=args.accept_inferred)


def store_lookup(store_path: str | None, event: str | None = None):
    """RUN[:benchmark[@CORES]] -> one (paths, meta) per repetition, from the store (opened once,
    and only when a side names something that is not a file)."""
    opened: list = []

    def refs(ref: str) -> list[ProfileRef]:
        from kperfdiff.store import Store, default_location, is_url   # only for a store reference
        location = store_path or default_location()
        if not is_url(location) and not Path(location).exists():
            raise InputError(f"{ref}: no such file, and there is no results store at {location} to look it up in")
        try:
            if not opened:
                opened.append(Store.open(location, create=False))
            found = opened[0].profile_refs(ref, event)
        except KperfdiffError as e:
            raise InputError(f"{ref} is not a file, and {str(e)[:1].lower()}{str(e)[1:]}") from None
        if not found:
            raise InputError(f"{ref} is neither a file nor a run with profiles in the store")
        return [(list(paths), dict(m or {})) for paths, m in found]
    refs.opened = opened    # the store, once a side named a run in it
    return refs


def _while_reading() -> None:
    """What the command does while its files are read (the native reader runs without the GIL): load
    numpy, which turning the reader's arrays into profiles needs next."""
    import numpy
    del numpy


def run(args: argparse.Namespace) -> int:
    """The command, with the cyclic garbage collector off: reading two profiles makes hundreds of
    thousands of tuples, lists and dicts and no reference cycle, so collecting every few hundred
    allocations would only cost time (about 5% of a diff). It is on again after. A diff does no
    linear algebra, so numpy's OpenBLAS starts no threads of its own (unless the user asks for them):
    they spin while they start, 10-40 ms of CPU taken from the reading threads."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    was = gc.isenabled()
    gc.disable()
    try:
        return _run(args)
    finally:
        if was:
            gc.enable()


def _run(args: argparse.Namespace) -> int:
    opts = options(args)
    if opts.maps:
        load_roles(opts.maps)   # report a bad map before reading profiles
    lookup = store_lookup(args.store, args.event)
    side_a, side_b = load_sides([args.a, args.b], lookup,
                                kallsyms=[args.kallsyms_a or args.kallsyms, args.kallsyms_b or args.kallsyms],
                                symfs=[args.symfs_a or args.symfs, args.symfs_b or args.symfs], event=args.event,
                                folded_kernel=args.folded_kernel, workers=args.jobs,
                                # --folded puts each stack under its process; --sort comm ranks processes
                                by_process=bool(args.folded) or args.sort == "comm",
                                kallsyms_unchecked=args.kallsyms_unchecked, meanwhile=_while_reading,
                                filters=sample_filters.from_args(args))
    if args.sort != "sym":
        side_a, side_b = ([sample_filters.regroup(p, args.sort, p.source) for p in side] for side in (side_a, side_b))
    result = diff_profiles(side_a, side_b, opts)
    for w in result.warnings:
        print(f"kperfdiff: warning: {w}", file=sys.stderr)
    if args.flamegraph or args.folded:
        from kperfdiff.render import flamegraph
    if args.flamegraph:
        add_folded(result, side_a, side_b)
        write_file(args.flamegraph, flamegraph.differential_svg(result))
    if args.folded:
        if args.unit == "ns":
            for p in side_a + side_b:
                if p.weight_unit != "ns":
                    raise InputError(f"--unit ns: {p.source} is weighted in {p.weight_unit} ({p.event}), not "
                                     f"nanoseconds; use --unit samples")
        sides = folded_sides(result, side_a, side_b, unit="samples" if args.unit == "samples" else "weight",
                             processes=True)
        for suffix, text in flamegraph.folded_files(*sides).items():
            write_file(f"{args.folded}.{suffix}", text)
    if args.inferred_map:
        write_file(args.inferred_map, render.twins_map(result))
    write_output(args.output, render.render(result, args.format, explain=args.explain))
    if not lookup.opened:
        ends_at_once()      # two files read, outputs written and closed: nothing left to tear down
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"diff": (add_diff, run)}
