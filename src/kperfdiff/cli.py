"""The command line: one sub-command per stage, each parsing its options and
calling one library function. Machine output goes to stdout, progress and
logs to stderr. Errors become one sentence and a non-zero exit status
(a traceback only with --debug)."""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from . import __version__, limits
from .errors import KperfdiffError, UsageError

FORMATS = ["text", "json", "csv", "markdown"]


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one sentence and exit 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)


# Options that belong to kperfdiff itself, accepted before or after the sub-command
# (`kperfdiff --store S runs` and `kperfdiff runs --store S` are the same).
GLOBAL_OPTIONS = (
    (("--store",), dict(metavar="PATH",
                        help="results store (SQLite file); default $KPERFDIFF_HOME/kperfdiff.db "
                             "or $XDG_DATA_HOME/kperfdiff/kperfdiff.db")),
    (("--debug",), dict(action="store_true", help="show tracebacks on errors")),
)


def _accept_global_options(parser: argparse.ArgumentParser) -> None:
    """Give every sub-command (and sub-sub-command) the global options, defaulting to
    whatever was given before the sub-command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                taken = {o for a in sub._actions for o in a.option_strings}
                for flags, kw in GLOBAL_OPTIONS:
                    if not taken.intersection(flags):
                        sub.add_argument(*flags, **dict(kw, default=argparse.SUPPRESS))
                _accept_global_options(sub)


def _copy_counts(text: str) -> list[int]:
    """-P: ``1,2`` or ``1-4``; each count from 1 to limits.MAX_COPIES, checked before a range is expanded."""
    out: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of core counts like 1,2 or 1-4")
        a, b = int(lo), int(hi or lo)
        if a < 1 or b > limits.MAX_COPIES or b < a:
            raise argparse.ArgumentTypeError(f"{text!r}: core counts run from 1 to {limits.MAX_COPIES}, "
                                             f"and a range from low to high")
        out.extend(range(a, b + 1))
        if len(out) > limits.MAX_CORE_COUNTS:
            raise argparse.ArgumentTypeError(f"{text!r} asks for more than {limits.MAX_CORE_COUNTS} core counts")
    return out


def _number(most: float):
    """An argparse type: a finite number above 0 and at most ``most``."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not limits.number_in_range(v, 0, most):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0 and at most {most:g}")
        return v
    return parse


def _whole(most: int):
    """An argparse type: a whole number from 1 to ``most``."""
    def parse(text: str) -> int:
        t = text.strip()
        if not t.isdigit() or len(t) > 12 or not 1 <= int(t) <= most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {most}")
        return int(t)
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kperfdiff",
                description="Kernel performance workbench: benchmark kernels, profile them, "
                            "and rank the kernel functions where one spends more time than another.")
    p.add_argument("--version", action="version", version=f"kperfdiff {__version__}")
    for flags, kw in GLOBAL_OPTIONS:
        p.add_argument(*flags, **kw)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    b = sub.add_parser("bench", help="run OS micro-benchmarks and store the results",
                       description="Run OS micro-benchmarks (lmbench-class latencies, page faults, "
                                   "GUPS, TLB shootdown, page-out) with kernel counters captured around "
                                   "each, store every raw interval, and print the result table.")
    b.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    b.add_argument("--suite", choices=["quick", "full"], default="quick",
                   help="which benchmarks to run (default: quick)")
    b.add_argument("--only", metavar="PATTERNS",
                   help="comma-separated names or shell patterns (syscall.*,fault.anon.*); "
                        "overrides --suite")
    b.add_argument("-P", dest="parallel", metavar="LIST", type=_copy_counts, default=[1],
                   help="run N copies in parallel processes and report the per-copy figure; "
                        "a list like 1,2 or 1-4 runs each (default: 1)")
    b.add_argument("--reps", type=_whole(limits.MAX_REPS), default=1,
                   help="repeat each benchmark in N fresh processes (default: 1)")
    b.add_argument("--precision", type=_number(limits.MAX_PRECISION_PCT), default=None, metavar="P",
                   help="after --reps, add repetitions (fresh processes, one round of every benchmark at a time) "
                        "until the 95%% interval of every benchmark's centre is within +-P%% of it, or --max-time "
                        "runs out; each result says which ended it")
    b.add_argument("--max-time", type=_number(limits.MAX_TIMEOUT_S), default=None, metavar="S",
                   help="with --precision: stop adding repetitions after S seconds of measuring (default: 600)")
    b.add_argument("--intervals", type=_whole(limits.MAX_INTERVALS), default=None,
                   help="timed intervals per process (default: 11, or the benchmark's own)")
    b.add_argument("--min-batch-ms", type=_number(limits.MAX_MIN_BATCH_MS), default=10.0,
                   help="minimum length of one timed batch in ms (default: 10)")
    b.add_argument("--label", default="", help="a label for this run (e.g. the kernel or patch)")
    b.add_argument("--param", action="append", default=[], metavar="BENCH:KEY=VALUE",
                   help="override a benchmark parameter (e.g. gups.4k:log2_words=20); "
                        "'*:dir=/mnt/x' applies to every benchmark that takes it")
    b.add_argument("--allow-swap-setup", action="store_true",
                   help="create a temporary zram device or swap file for benchmarks that need swap, "
                        "and remove it afterwards")
    b.add_argument("--timeout", type=_number(limits.MAX_TIMEOUT_S), default=None,
                   help="per-process timeout in seconds (default: the benchmark's own)")
    b.add_argument("--profile", action="store_true",
                   help="record every benchmark process with perf record -g (kernel and user) into the run's "
                        "artefact folder, with kallsyms, build ids and hardware counts where available")
    b.add_argument("--profile-freq", type=_whole(limits.MAX_PROFILE_FREQ), default=None, metavar="HZ",
                   help="sampling frequency for --profile (default: perf's, 4000 Hz)")
    b.add_argument("--target", default="local", metavar="SPEC",
                   help="where to run: local (default), qemu:arm64 or qemu:x86_64 (an emulated guest; options "
                        "kernel=VERSION|PATH, mem=, cpus=, deterministic), or ssh://user@host[:port]")
    b.add_argument("--format", choices=["text", "json"], default="text")
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    rc = sub.add_parser("record", help="profile any command with perf, keeping kallsyms and build ids beside it",
                        description="Profile a command with perf record -g (kernel and user) into DIR, with a "
                                    "kallsyms snapshot, build ids, hardware-event counts where the machine has "
                                    "them, and a meta file, so kperfdiff diff can read it anywhere.")
    rc.add_argument("-o", "--output", default="kperfdiff-record", metavar="DIR",
                    help="folder to write into (default: kperfdiff-record)")
    rc.add_argument("-e", "--event", default=None,
                    help="sampling event (default: cycles where the PMU counts it, else cpu-clock)")
    rc.add_argument("-F", "--freq", type=_whole(limits.MAX_PROFILE_FREQ), default=None, help="sampling frequency in Hz")
    rc.add_argument("--name", default="perf", help="file name stem (default: perf -> perf.perf.data)")
    rc.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")

    r = sub.add_parser("runs", help="list the runs in the store")
    r.add_argument("--format", choices=["text", "json"], default="text")

    s = sub.add_parser("show", help="show one run: machine facts, results, monitors")
    s.add_argument("run", help="run id (or a unique prefix of its label)")
    s.add_argument("--format", choices=["text", "json"], default="text")
    s.add_argument("--raw", action="store_true", help="also print every raw interval")

    t = sub.add_parser("target", help="check a target, or time a guest kernel's boot",
                       description="Work with a target directly. `check` boots the guest (or connects to the board) "
                                   "and prints what it is. `boot` measures the boot.* benchmarks of a guest kernel "
                                   "(QEMU start to /init, the kernel's own boot, the time before the first "
                                   "timestamped message, initcall time and the slowest initcalls) at several "
                                   "memory sizes, and stores them as a run that compare and report read.")
    tsub = t.add_subparsers(dest="target_command", metavar="ACTION", parser_class=_Parser, required=True)
    tc = tsub.add_parser("check", help="boot or connect, and print the target's facts")
    tc.add_argument("spec", help="qemu:arm64[,options], qemu:x86_64[,options] or ssh://user@host[:port]")
    tc.add_argument("--format", choices=["text", "json"], default="text")
    tb = tsub.add_parser("boot", help="time a guest kernel's boot at several memory sizes")
    tb.add_argument("spec", help="qemu:arm64[,kernel=...] or qemu:x86_64[,kernel=...]")
    tb.add_argument("--mem", default="1G,4G,16G", help="guest memory sizes (default: 1G,4G,16G)")
    tb.add_argument("--boots", type=_whole(limits.MAX_BOOTS), default=3, help="boots per memory size (default: 3)")
    tb.add_argument("--label", default="", help="a label for the run")
    tb.add_argument("--format", choices=["text", "json"], default="text")
    tb.add_argument("--no-progress", action="store_true")

    _add_diff_parser(sub)
    _add_place_parser(sub)
    _add_experiment_parsers(sub)
    _accept_global_options(p)
    return p


def _add_diff_parser(sub) -> None:
    d = sub.add_parser(
        "diff", help="rank the kernel functions whose share of time differs between two profiles",
        description="Rank the functions whose share of samples differs between profile A and profile B: "
                    "functions found on both sides by |share A - share B| (percentage points), then those "
                    "found only in A, then only in B. A share is a function's weight over ALL samples of its "
                    "profile, as perf report computes it. Compiler suffixes (.isra.N, .constprop.N, .cold, "
                    "__pfx_...) are folded into one name, and equivalent functions of different architectures "
                    "(page fault entry, syscall entry, clear page...) are compared under a shared role.")
    d.add_argument("a", help="profile A: perf.data, perf script text, perf report --stdio text, folded stacks, "
                             "several of them comma-separated (repeated runs: A1,A2,A3), "
                             "or a store reference RUN[:benchmark[@CORES]] (one profile per repetition, its "
                             "parallel copies added together)")
    d.add_argument("b", help="profile B, in any of the same forms")
    d.add_argument("--top", type=int, default=5, metavar="N",
                   help="rows per section (default: 5, as the original kperfdiff tables; 0 = all)")
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
                        "(e.g. a cache- or TLB-miss event); default: the first")
    d.add_argument("--compute", metavar="MODE", default="absdiff",
                   help="how common functions are scored and ranked: absdiff (|B-A| in points, the study's "
                        "%%diff; default), or perf diff's delta (B-A), ratio (B/A, ranked by |log ratio|) or "
                        "wdiff:WA,WB (WB*B - WA*A), all on shares (or ns/op with --per-op)")
    d.add_argument("--map", action="append", metavar="FILE",
                   help="your own equivalence table (TOML, the format of the shipped one), merged over it; repeatable")
    d.add_argument("--no-equivalence", action="store_true", help="do not group equivalent functions into roles")
    d.add_argument("--no-normalise", action="store_true",
                   help="keep compiler suffixes (.isra.N, .constprop.N, .cold...) as separate names")
    d.add_argument("--folded-kernel", choices=["auto", "entry", "all", "none"], default="auto",
                   help="how to tell kernel frames in folded stacks: auto (the _[k] suffix when present, else "
                        "entry), entry (every frame from the first known kernel entry point to the leaf), "
                        "all, none (default: auto)")
    d.add_argument("--kallsyms", metavar="FILE", help="kallsyms for perf.data inputs of both sides")
    d.add_argument("--kallsyms-a", metavar="FILE", help="kallsyms for side A's perf.data")
    d.add_argument("--kallsyms-b", metavar="FILE", help="kallsyms for side B's perf.data")
    d.add_argument("--symfs", metavar="DIR", help="root to find user binaries in, for both sides")
    d.add_argument("--symfs-a", metavar="DIR", help="--symfs for side A")
    d.add_argument("--symfs-b", metavar="DIR", help="--symfs for side B")
    d.add_argument("--flamegraph", metavar="OUT.svg",
                   help="write a differential flame graph: widths from B, red = larger share in B, "
                        "blue = smaller, tooltips with both shares")
    d.add_argument("--folded", metavar="PREFIX",
                   help="write PREFIX.a.folded and PREFIX.b.folded (stack count) and PREFIX.diff.folded "
                        "(stack countA countB, as FlameGraph's difffolded.pl), for flamegraph.pl or inferno")
    d.add_argument("--format", choices=FORMATS, default="text")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])  # before or after the sub-command
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        from .knobs import repair_pending
        repair_pending(lambda m: print(m, file=sys.stderr, flush=True), strict=False)
        return COMMANDS[args.command](args)
    except KperfdiffError as e:
        if debug:
            raise
        print(f"{getattr(e, 'prog', 'kperfdiff')}: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("kperfdiff: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (| head): not an error worth a message.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0


def _open_store(args, create: bool = True):
    """The store of --store (or the default); commands that only read pass create=False."""
    from .store import Store
    return Store.open(args.store, create=create)


def _cmd_bench(args) -> int:
    from .bench import session
    if args.list:
        from .bench.catalogue import load_catalogue
        from .render import bench as rb
        sys.stdout.write(rb.catalogue(load_catalogue(), args.format))
        return 0
    opts = session.BenchOptions.from_args(args)
    store = _open_store(args)
    outcome = session.run_bench(store, opts)
    from .render import bench as rb
    sys.stdout.write(rb.results(outcome.run, outcome.results, args.format,
                                machine=store.machine(outcome.run.machine_id)))
    return outcome.exit_status


def _cmd_runs(args) -> int:
    from .render import bench as rb
    store = _open_store(args, create=False)
    sys.stdout.write(rb.run_list(store.list_runs(), args.format))
    return 0


def _cmd_show(args) -> int:
    from .render import bench as rb
    store = _open_store(args, create=False)
    run = store.find_run(args.run)
    sys.stdout.write(rb.show(run, store.machine(run.machine_id), store.results(run.id), args.format,
                             raw=args.raw))
    return 0


def _cmd_record(args) -> int:
    from .record import record_command
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    rc, _ = record_command(Path(args.output), cmd, event=args.event, freq=args.freq, name=args.name)
    return rc


def _cmd_target(args) -> int:
    from .render import bench as rb
    if args.target_command == "check":
        from .render.table import to_json
        from .targets import open_target
        with open_target(args.spec) as t:
            facts = t.facts()
        if args.format == "json":
            sys.stdout.write(to_json({"version": 1, "target": args.spec, "facts": facts}))
        else:
            sys.stdout.write(rb.machine_facts(facts))
        return 0
    from .bench.session import run_boot_timing
    mems = [m.strip().upper() for m in args.mem.split(",") if m.strip()]
    store = _open_store(args)
    out = run_boot_timing(store, args.spec, mems, args.boots, label=args.label,
                          command=" ".join(["kperfdiff", *sys.argv[1:]]), progress=not args.no_progress)
    sys.stdout.write(rb.results(out.run, out.results, args.format, machine=store.machine(out.run.machine_id)))
    return out.exit_status


def _cmd_diff(args) -> int:
    from . import diff
    return diff.run_cli(args)


def _add_experiment_parsers(sub) -> None:
    """`run`, `compare` and `report` (experiments, comparison tables, the HTML report)."""
    e = sub.add_parser("run", help="run an experiment file: variants x benchmarks x core counts x repetitions",
                       description="Run the whole matrix of an experiment file (TOML; see examples/), variants "
                                   "interleaved, each cell stored at once. Running it again resumes it: finished "
                                   "cells are never measured twice. Knobs are checked before anything runs and "
                                   "restored afterwards, even on Ctrl-C. Prints the comparison table at the end.")
    e.add_argument("file", help="experiment file (TOML)")
    e.add_argument("--restart", action="store_true",
                   help="start the experiment again from zero (the old results stay in the store, marked "
                        "superseded); needed when the file changed after a partial run")
    e.add_argument("--dry-run", action="store_true", help="check the file and print the matrix; run nothing")
    e.add_argument("--allow-knob", action="append", metavar="PATH",
                   help="let the file set this knob although it is not one of the performance knobs kperfdiff "
                        "sets by default (repeatable; the always-refused ones stay refused)")
    e.add_argument("--report", metavar="HTML", help="also write the HTML report there, print the kperfdiff "
                                                    "table of the benchmark that moved most, and its path")
    e.add_argument("--format", choices=FORMATS, default="text", help="format of the comparison table")
    e.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    c = sub.add_parser("compare", help="compare benchmark results of runs or of an experiment's variants",
                       description="For each benchmark and core count: the baseline's centre (geometric mean of "
                                   "the per-repetition medians), each variant's, the change in % (positive = "
                                   "better) with a two-level 95% confidence interval over the repetitions "
                                   "(Kalibera & Jones; 3 repetitions per side at least), a significance mark "
                                   "(Benjamini-Hochberg q <= 0.05 over the table's cells), a mark for disturbed "
                                   "measurements and the CV; one block per variant, a geometric-mean row.")
    c.add_argument("runs", nargs="*", metavar="RUN", help="run ids or labels; the first is the baseline")
    c.add_argument("--experiment", metavar="ID|NAME", help="compare the variants of an experiment")
    c.add_argument("--stack", action="store_true",
                   help="with RUNs: they form a patch stack; also compare each with the one before it")
    c.add_argument("--format", choices=FORMATS, default="text")

    r = sub.add_parser("report", help="write a self-contained HTML report (or Markdown) of an experiment or runs",
                       description="One HTML file that works offline: machine facts side by side, comparison "
                                   "tables, plots (bars with intervals, scaling curves, heat map), the kperfdiff "
                                   "table and differential flame graph of each benchmark that changed "
                                   "significantly, and the kernel counters that explain changes.")
    r.add_argument("runs", nargs="*", metavar="RUN", help="run ids or labels; the first is the baseline")
    r.add_argument("--experiment", metavar="ID|NAME", help="report on the variants of an experiment")
    r.add_argument("--stack", action="store_true", help="with RUNs: they form a patch stack")
    r.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="output file (default: report.html); with --format markdown, SVG plots are written "
                        "into FILE's stem + '.files/' beside it")
    r.add_argument("--format", choices=["html", "markdown"], default="html")
    r.add_argument("--no-profiles", action="store_true", help="leave out the profile diffs (faster)")


def _cmd_run(args) -> int:
    from . import experiment
    return experiment.run_cli(args)


def _cmd_compare(args) -> int:
    from . import compare
    return compare.run_cli(args)


def _cmd_report(args) -> int:
    from .render import report
    return report.run_cli(args)


def _add_place_parser(sub) -> None:
    """kperfdiff place plan|sweep|model|simulate (options in kperfdiff.place.cli)."""
    from .place.cli import add_parser
    add_parser(sub)


def _cmd_place(args) -> int:
    from .place.cli import run
    return run(args)


COMMANDS = {
    "run": _cmd_run,
    "compare": _cmd_compare,
    "report": _cmd_report,
    "bench": _cmd_bench,
    "runs": _cmd_runs,
    "show": _cmd_show,
    "record": _cmd_record,
    "target": _cmd_target,
    "diff": _cmd_diff,
    "place": _cmd_place,
}


if __name__ == "__main__":
    raise SystemExit(main())
