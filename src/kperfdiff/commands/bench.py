"""`kperfdiff bench`, `record` and `target`: measuring. (`runs` and `show`, looking at what was stored,
are in commands/runs.py.)"""
from __future__ import annotations

import argparse
from pathlib import Path

from kperfdiff.core import limits
from kperfdiff.core.errors import UsageError
from kperfdiff.bench.catalogue import load_catalogue, operations
from kperfdiff.measure.session import BenchOptions, run_bench, run_boot_timing
from kperfdiff.targets.perf_record import record_command
from kperfdiff.render import bench as rb
from kperfdiff.render.table import to_json
from kperfdiff.targets import open_target
from kperfdiff.commands.common import command_line, open_store, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, copy_counts, number, whole


def add_bench(b: Parser) -> None:
    b.description = ("Run OS micro-benchmarks (lmbench-class latencies, page faults, "
                     "GUPS, TLB shootdown, page-out) with kernel counters captured around "
                     "each, store every raw interval, and print the result table.")
    b.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    b.add_argument("--suite", choices=["quick", "full"], default="quick",
                   help="which benchmarks to run (default: quick)")
    b.add_argument("--only", metavar="PATTERNS",
                   help="comma-separated names or shell patterns (syscall.*,fault.anon.*); "
                        "overrides --suite")
    b.add_argument("-P", dest="parallel", metavar="LIST", type=copy_counts, default=[1],
                   help="run N copies in parallel processes and report the per-copy figure; "
                        "a list like 1,2 or 1-4 runs each (default: 1)")
    b.add_argument("--reps", type=whole(limits.MAX_REPS), default=1,
                   help="repeat each benchmark in N fresh processes (default: 1)")
    b.add_argument("--precision", type=number(limits.MAX_PRECISION_PCT), default=None, metavar="P",
                   help="after --reps, add repetitions (fresh processes, one round of every benchmark at a time) "
                        "until the 95%% interval of every benchmark's centre is within +-P%% of it, or --max-time "
                        "runs out; each result says which ended it")
    b.add_argument("--detect", type=number(limits.MAX_PRECISION_PCT), default=None, metavar="P",
                   help="after --reps, add repetitions until every benchmark could detect a change of P%% against a "
                        "run like it (80%% power), or --max-time runs out; each result says which ended it "
                        "(instead of --precision)")
    b.add_argument("--max-time", type=number(limits.MAX_TIMEOUT_S), default=None, metavar="S",
                   help="with --precision or --detect: stop adding repetitions after S seconds of measuring "
                        "(default: 600)")
    b.add_argument("--intervals", type=whole(limits.MAX_INTERVALS), default=None,
                   help="timed intervals per process (default: 11, or the benchmark's own)")
    b.add_argument("--min-batch-ms", type=number(limits.MAX_MIN_BATCH_MS), default=10.0,
                   help="minimum length of one timed batch in ms (default: 10)")
    b.add_argument("--label", default="", help="a label for this run (e.g. the kernel or patch)")
    b.add_argument("--param", action="append", default=[], metavar="BENCH:KEY=VALUE",
                   help="override a benchmark parameter (e.g. gups.4k:log2_words=20); "
                        "'*:dir=/mnt/x' applies to every benchmark that takes it")
    b.add_argument("--allow-swap-setup", action="store_true",
                   help="create a temporary zram device or swap file for benchmarks that need swap, "
                        "and remove it afterwards")
    b.add_argument("--timeout", type=number(limits.MAX_TIMEOUT_S), default=None,
                   help="per-process timeout in seconds (default: the benchmark's own)")
    b.add_argument("--profile", action="store_true",
                   help="record every benchmark process with perf record -g (kernel and user) into the run's "
                        "artefact folder, with kallsyms, build ids and hardware counts where available")
    b.add_argument("--profile-freq", type=whole(limits.MAX_PROFILE_FREQ), default=None, metavar="HZ",
                   help="sampling frequency for --profile (default: perf's, 4000 Hz)")
    pin = b.add_mutually_exclusive_group()
    pin.add_argument("--pin", choices=["last", "rotate"], default="last",
                     help="which CPU each repetition's processes are pinned to: the last CPUs, leaving CPU 0 "
                          "(default), or the next CPU each round; on a tuned machine, its isolated CPUs")
    pin.add_argument("--no-pin", dest="pin", action="store_const", const="off",
                     help="do not pin benchmark processes to CPUs")
    b.add_argument("--target", default="local", metavar="SPEC",
                   help="where to run: local (default), qemu:arm64 or qemu:x86_64 (an emulated guest; options "
                        "kernel=VERSION|PATH, mem=, cpus=, deterministic), ssh://user@host[:port], or "
                        "lava://HOST/DEVICE_TYPE (a LAVA lab's device; options arch=, kernel=, jobs=, ...; "
                        "see kperfdiff lava --help for the token)")
    add_format(b, "text", "markdown", "json")
    add_output(b, what="the results")
    b.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def add_record(rc: Parser) -> None:
    rc.description = ("Profile a command with perf record -g (kernel and user) into DIR, with a "
                      "kallsyms snapshot, build ids, hardware-event counts where the machine has "
                      "them, and a meta file, so kperfdiff diff can read it anywhere.")
    rc.add_argument("-o", "--output", default="kperfdiff-record", metavar="DIR",
                    help="folder to write into (default: kperfdiff-record)")
    rc.add_argument("-e", "--event", default=None,
                    help="sampling event (default: cycles where the PMU counts it, else cpu-clock)")
    rc.add_argument("-F", "--freq", type=whole(limits.MAX_PROFILE_FREQ), default=None, help="sampling frequency in Hz")
    rc.add_argument("--name", default="perf", help="file name stem (default: perf -> perf.perf.data)")
    rc.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")


def add_target(t: Parser) -> None:
    t.description = ("Work with a target directly. `check` boots the guest (or connects to the board) "
                     "and prints what it is. `boot` measures the boot.* benchmarks of a guest kernel "
                     "(QEMU start to /init, the kernel's own boot, the time before the first "
                     "timestamped message, initcall time and the slowest initcalls) at several "
                     "memory sizes, and stores them as a run that compare and report read.")
    tsub = t.add_subparsers(dest="target_command", metavar="ACTION", parser_class=Parser, required=True)
    tc = tsub.add_parser("check", help="boot or connect, and print the target's facts")
    tc.add_argument("spec", help="qemu:arm64[,options], qemu:x86_64[,options] or ssh://user@host[:port]")
    add_format(tc, "text", "json")
    add_output(tc, what="the facts")
    tb = tsub.add_parser("boot", help="time a guest kernel's boot at several memory sizes")
    tb.add_argument("spec", help="qemu:arm64[,kernel=...] or qemu:x86_64[,kernel=...]")
    tb.add_argument("--mem", default="1G,4G,16G", help="guest memory sizes (default: 1G,4G,16G)")
    tb.add_argument("--boots", type=whole(limits.MAX_BOOTS), default=3, help="boots per memory size (default: 3)")
    tb.add_argument("--label", default="", help="a label for the run")
    mp = tb.add_mutually_exclusive_group()
    mp.add_argument("--map", dest="map", action="store_true", default=None,
                    help="also count the kernel's mapping phase (boot.map_*: paging_init with map_mem, in "
                         "deterministic boots with the counting plugin; the default on arm64 guests)")
    mp.add_argument("--no-map", dest="map", action="store_false", help="host-clock boot.* benchmarks only")
    add_format(tb, "text", "markdown", "json")
    add_output(tb, what="the results")
    tb.add_argument("--no-progress", action="store_true")


def bench_options(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(suite=args.suite, only=args.only, parallel=args.parallel, reps=args.reps,
                        intervals=args.intervals,
                        min_batch_ns=int(args.min_batch_ms * 1e6) if args.min_batch_ms else None,
                        label=args.label, params=args.param, allow_swap_setup=args.allow_swap_setup,
                        timeout=args.timeout, progress=not args.no_progress,
                        profile=args.profile, profile_freq=args.profile_freq, target=args.target or "local",
                        precision=args.precision, detect=args.detect, max_time=args.max_time, pin=args.pin,
                        command=command_line())


def run_bench_command(args: argparse.Namespace) -> int:
    if args.list:
        write_output(args.output, rb.catalogue(load_catalogue(), args.format))
        return 0
    if args.precision is not None and args.detect is not None:
        raise UsageError("--precision and --detect are two rules for adding repetitions: give one")
    opts = bench_options(args)
    store = open_store(args)
    outcome = run_bench(store, opts)
    write_output(args.output, rb.results(outcome.run, outcome.results, args.format,
                                         machine=store.machine(outcome.run.machine_id).facts, ops=operations()))
    return outcome.exit_status


def record(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    rc, _ = record_command(Path(args.output), cmd, event=args.event, freq=args.freq, name=args.name)
    return rc


def target(args: argparse.Namespace) -> int:
    if args.target_command == "check":
        with open_target(args.spec) as t:
            facts = t.facts()
        if args.format == "json":
            write_output(args.output, to_json({"version": 1, "target": args.spec, "facts": facts}))
        else:
            write_output(args.output, rb.machine_facts(facts))
        return 0
    mems = [m.strip().upper() for m in args.mem.split(",") if m.strip()]
    store = open_store(args)
    out = run_boot_timing(store, args.spec, mems, args.boots, label=args.label,
                          command=command_line(), progress=not args.no_progress,
                          mapping=args.map)
    write_output(args.output, rb.results(out.run, out.results, args.format,
                                         machine=store.machine(out.run.machine_id).facts, ops=operations()))
    return out.exit_status


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"bench": (add_bench, run_bench_command), "record": (add_record, record), "target": (add_target, target)}
