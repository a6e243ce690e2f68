"""`kperfdiff history` and `changes`: a benchmark's stored results in time order, and the change
points in every stored series, with the ranking of the profiles on either side of each."""
from __future__ import annotations

import argparse
import sys

from kperfdiff.analysis import history as hist
from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
from kperfdiff.bench.catalogue import operations
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.ingest.load import load_sides
from kperfdiff.render import history as render
from kperfdiff.store.profiles import split_cores
from kperfdiff.commands.common import open_store, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, add_top, number, percent

LISTED = 12     # benchmark names an error lists at most


def _filters(p: Parser) -> None:
    p.add_argument("--machine", metavar="M",
                   help="only the series of one machine: a machine id or a fingerprint prefix of 4 digits or "
                        "more (as the history's machine column gives them), a host name or a target (e.g. "
                        "qemu:arm64)")
    p.add_argument("--since", metavar="DATE",
                   help="only runs started at DATE or later: 2026-11-26 or 2026-11-26T14:00 (local time)")


def add_history(h: Parser) -> None:
    h.description = ("A benchmark's stored results in the order their runs started, one row per run: time, run, "
                     "label, variant, machine (fingerprint), kernel release, the kernel commit when the run "
                     "recorded one, the centre (geometric mean of the per-repetition medians) with the "
                     "half-width of its 95% interval, the repetitions and intervals. Results of different "
                     "machines (host and target) are separate series, never mixed. --format html writes a page "
                     "with a plot of each series, its change points marked (kperfdiff changes).")
    h.add_argument("benchmark", metavar="BENCH[@CORES]",
                   help="a benchmark (kperfdiff bench --list), @CORES for one copy count only")
    _filters(h)
    add_format(h, "text", "markdown", "json", "csv", "html",
               help="text (default), markdown or csv (the same tables), json, or html (a self-contained page "
                    "with a plot per series)")
    add_output(h, what="the history")


def add_changes(c: Parser) -> None:
    c.description = ("Change points in every stored series (a benchmark, parameter set and copy count on one "
                     "machine; one point per run, its centre), found by Apache Otava's E-divisive with a "
                     "t-test: for each, the runs on either side, the centres before and after with their 95% "
                     "intervals, the change (positive = better) with its interval, the p-value and, when the "
                     "runs on either side both have profiles of the benchmark, the kperfdiff ranking between "
                     "them. A single outlier makes no change point. Each series' analysis is kept in the store, "
                     "so a series that gained a result is analysed again only at its tail.")
    c.add_argument("benchmarks", nargs="*", metavar="BENCH[@CORES]", help="benchmarks to look at (default: every one)")
    _filters(c)
    c.add_argument("--max-pvalue", type=number(0.5), default=hist.MAX_PVALUE, metavar="P",
                   help=f"largest p-value of a change point (default: {hist.MAX_PVALUE:g})")
    c.add_argument("--min-change", type=percent, default=hist.MIN_MAGNITUDE * 100, metavar="PCT",
                   help=f"smallest change of the mean, in percent (default: {hist.MIN_MAGNITUDE * 100:g})")
    add_top(c, "rows of each section of a change's profile ranking")
    add_format(c, "text", "json")
    add_output(c, what="the change points")


def _known(store, names: list[str]) -> None:
    stored = store.stored_benchmarks()
    for name in names:
        if name not in stored:
            shown = ", ".join(stored[:LISTED]) + (", ..." if len(stored) > LISTED else "")
            raise InputError(f"there is no stored result of {name!r} in the store {store.path}"
                             + (f"; it has results of {shown}" if stored else "; it has no results yet"))


def _series(store, refs: list[str] | None, args) -> list[hist.Series]:
    """The series of the benchmarks asked for (every one when ``refs`` is None)."""
    since = hist.parse_since(args.since)
    wanted = [split_cores(r) for r in refs] if refs is not None else None
    for name, _ in wanted or ():
        if not name:
            raise InputError("give a benchmark name before @, as in syscall.null@2")
    names = list(dict.fromkeys(n for n, _ in wanted)) if wanted else None
    if names:
        _known(store, names)
    results, runs, machines = store.history(names, since=since)
    series = hist.build_series(results, runs, machines, machine=args.machine)
    if wanted:
        series = [s for s in series if any(s.benchmark == n and c in (None, s.copies) for n, c in wanted)]
    if not series:
        what = ", ".join(refs) if refs else "any benchmark"
        why = [f"on a machine matching {args.machine!r}" if args.machine else "",
               f"since {args.since}" if args.since else "",
               "at that core count" if any(c for _, c in wanted or ()) else ""]
        raise InputError(f"there is no stored result of {what} {' '.join(w for w in why if w)}".rstrip()
                         + "; see kperfdiff history BENCH for what there is")
    return series


def _detect(store, series: list[hist.Series], settings: hist.Settings, since: str | None) -> list[hist.Detection]:
    """Each series' change points, from what the last analysis of it left in the store; what this
    one leaves is stored (a read-only store is analysed whole each time)."""
    out = []
    for s in series:
        key = s.key + (f"|since {since}" if since else "")
        d = hist.detect(s, store.change_cache(key), settings)
        try:
            store.save_change_cache(key, **d.analysed.as_dict())
        except KperfdiffError as e:
            print(f"kperfdiff: warning: the analysis is not kept: {e}", file=sys.stderr)
        out.append(d)
    return out


def _ranking(store, d: hist.Detection, c: hist.ChangePoint, top: int):
    """The kperfdiff ranking of the profiles of the runs just before and after a change (as
    `kperfdiff diff RUN_A:BENCH@CORES RUN_B:BENCH@CORES`), why there is none, or None when the two
    runs do not both have profiles of the benchmark."""
    s = d.series
    a, b = hist.point_of(d, c.index - 1).run, hist.point_of(d, c.index).run
    if not all(any(int(p.meta.get("copies") or 1) == s.copies for p in store.profiles(r.id, s.benchmark))
               for r in (a, b)):
        return None

    def lookup(ref: str):
        return [(list(paths), dict(meta)) for paths, meta in store.profile_refs(ref)]
    try:
        side_a, side_b = load_sides([f"{r.id}:{s.benchmark}@{s.copies}" for r in (a, b)], lookup,
                                    kallsyms=[None, None], symfs=[None, None])
        return diff_profiles(side_a, side_b, DiffOptions(top=top))
    except KperfdiffError as e:
        return f"cannot rank the profiles: {e}"


def history(args: argparse.Namespace) -> int:
    store = open_store(args, create=False)
    series = _series(store, [args.benchmark], args)
    detections = []
    if args.format == "html":
        try:
            detections = _detect(store, series, hist.Settings(), args.since)
        except InputError as e:      # Otava missing: the plot without change points
            print(f"kperfdiff: warning: no change points marked: {e}", file=sys.stderr)
    text = render.history(series, args.format, detections, ops=operations())
    write_output(args.output, text)
    return 0


def changes(args: argparse.Namespace) -> int:
    store = open_store(args, create=False)
    series = _series(store, args.benchmarks or None, args)
    settings = hist.Settings(max_pvalue=args.max_pvalue, min_magnitude=args.min_change / 100)
    detections = _detect(store, series, settings, args.since)
    rankings = {(d.series.key, c.index): _ranking(store, d, c, args.top) for d in detections for c in d.changes}
    write_output(args.output, render.changes(detections, args.format, rankings))
    return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"history": (add_history, history), "changes": (add_changes, changes)}
