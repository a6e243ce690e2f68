"""`kperfdiff bisect`: from GOOD and BAD to the commit that made the benchmark move, verified
against its parent and explained by the kperfdiff ranking of culprit against parent."""
from __future__ import annotations

import argparse
import sys

from kperfdiff.analysis import culprit
from kperfdiff.analysis.culprit import Explanation
from kperfdiff.bisect import counters
from kperfdiff.bisect import run as bisect_run
from kperfdiff.bisect.probe import METRICS, VALUES, parse_bench
from kperfdiff.core import limits
from kperfdiff.render import bisect as render
from kperfdiff.commands.common import open_store, write_file, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, add_top, number, whole


def add_bisect(b: Parser) -> None:
    b.description = (
        "Find the commit between GOOD and BAD where a benchmark moved, by git bisect in a kernel tree: each probe "
        "commit is built, booted on the target and measured (an ordinary stored run); a probe is like GOOD, like "
        "BAD or undecided by its 95%% interval against the midpoint of GOOD and BAD, with repetitions added until "
        "it decides or its budget is spent (undecided probes are skipped). GOOD and BAD must differ significantly "
        "first, or nothing is blamed (exit status 3). The culprit is verified against its parent with fresh "
        "repetitions and explained by the kperfdiff ranking of culprit against parent. Running the same command "
        "again after Ctrl-C or a crash resumes: stored measurements are not repeated.")
    b.add_argument("--repo", required=True, metavar="DIR", help="the git tree to bisect (its tracked files clean)")
    b.add_argument("--good", required=True, metavar="REV", help="a commit where the benchmark is as expected")
    b.add_argument("--bad", required=True, metavar="REV", help="a later commit where it regressed")
    b.add_argument("--bench", required=True, metavar="NAME[@CORES]",
                   help="the benchmark that moved (kperfdiff bench --list), with its parallel copies")
    b.add_argument("--target", default="local", metavar="SPEC",
                   help="where each probe runs: qemu:x86_64 or qemu:arm64 (booting the probe's kernel; add "
                        ",deterministic for exact instruction counts), or local / ssh://... when --build "
                        "installs what a commit runs itself (default: local)")
    b.add_argument("--build", metavar="CMD",
                   help="run CMD (sh -c) in the tree for each probe; its output says what to run: image=PATH "
                        "(the kernel image, or a line that is a file's path), append=ARGS (kernel arguments), "
                        "param=BENCH:KEY=VALUE, symbols=PATH (System.map or vmlinux); a non-zero exit skips the "
                        "commit. Default: build the kernel in place from a minimal configuration for the guest")
    b.add_argument("--config", metavar="FRAGMENT",
                   help="a Kconfig fragment merged over the minimal guest configuration (default build only)")
    b.add_argument("--metric", choices=METRICS, default="time",
                   help="time: the benchmark's time per operation, repeated until decided (default); "
                        "instructions: exact kernel instructions per operation in a deterministic guest, one "
                        "repetition per probe")
    b.add_argument("--value", choices=VALUES, default=VALUES[0],
                   help="what each repetition contributes with --metric time: p10, the 10th percentile of its "
                        "intervals (default: interference only adds time, so a low quantile follows the code and "
                        "not the load), or median (a change in the slow part of the distribution, which p10 "
                        "does not see)")
    b.add_argument("--detect", type=number(limits.MAX_PRECISION_PCT), metavar="PCT",
                   help="GOOD against BAD, and the culprit against its parent, get repetitions (up to --max-reps) "
                        "until their test could detect PCT%% (80%% power); a refusal then says whether PCT%% "
                        "could have been seen")
    b.add_argument("--reps", type=whole(1000), metavar="N",
                   help="repetitions of each commit to start with (default: 5; 1 with --metric instructions)")
    b.add_argument("--max-reps", type=whole(1000), default=30, metavar="N",
                   help="a probe's budget: repetitions after which an undecided probe is skipped, and GOOD and "
                        "BAD's (default: 30; used only while the noise asks for it)")
    b.add_argument("--verify-reps", type=whole(1000), metavar="N",
                   help="fresh repetitions each of culprit and parent for the verification (default: --reps, at "
                        "least 5; 1 with --metric instructions)")
    b.add_argument("--no-bracket", action="store_true",
                   help="judge each probe against every value of GOOD and BAD (cheaper) instead of against GOOD and "
                        "BAD measured again around it (default with --metric time: drift of the machine's speed "
                        "during a long bisection then falls on both sides alike)")
    b.add_argument("--verify-revert", action="store_true",
                   help="also build BAD with the culprit reverted and check that it measures like GOOD")
    b.add_argument("--param", action="append", default=[], metavar="BENCH:KEY=VALUE",
                   help="a benchmark parameter for every probe (repeatable)")
    b.add_argument("--no-profile", action="store_true",
                   help="measure without profiles (no explanation; --metric instructions counts anyway)")
    b.add_argument("--build-timeout", type=float, metavar="S", help="stop a build after S seconds (skips the commit)")
    add_top(b, "rows of the explanation's ranking")
    add_format(b, "text", "json")
    add_output(b, what="the outcome")
    b.add_argument("--report", metavar="HTML", help="also write the HTML report (verdict, steps, ranking, "
                                                    "differential flame graph, kernel counters) there")
    b.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")


def explain(store, args, outcome) -> Explanation | None:
    """The ranking of culprit against parent (their verification runs), and the counters that moved."""
    if not (outcome.culprit_runs and outcome.parent_runs):
        return None
    plan = outcome.plan
    moved = counters.against_parent(store, outcome.parent_runs, outcome.culprit_runs, plan.bench, plan.cores)
    profiled = plan.metric == "instructions" or not args.no_profile
    return culprit.explain(store.profile_lookup, outcome.parent_runs, outcome.culprit_runs, plan.bench, plan.cores,
                           plan.metric, args.top, moved, "" if profiled else "no profiles were taken (--no-profile)")


def run(args: argparse.Namespace) -> int:
    bench, cores = parse_bench(args.bench)
    opts = bisect_run.Options(repo=args.repo, good=args.good, bad=args.bad, bench=bench, cores=cores,
                              target=args.target, metric=args.metric, value=args.value, detect=args.detect,
                              build=args.build, config=args.config,
                              params=tuple(args.param), reps=args.reps, max_reps=args.max_reps,
                              verify_reps=args.verify_reps, verify_revert=args.verify_revert,
                              bracket=not args.no_bracket,
                              # exact counts come with their own per-function profile; sampling with
                              # perf in the guest would add its own kernel work to the count
                              profile=not args.no_profile and args.metric != "instructions",
                              build_timeout=args.build_timeout, progress=not args.no_progress)
    store = open_store(args)
    note = (lambda text: None) if args.no_progress else (lambda text: print(f"kperfdiff: {text}", file=sys.stderr,
                                                                            flush=True))
    outcome = bisect_run.bisect(store, opts, note)
    outcome.unit = next((r.unit for s in outcome.steps for rid in s.runs[:1]
                         for r in store.results(rid, with_raw=False) if r.benchmark == bench and r.unit), "")
    ex = explain(store, args, outcome)
    if args.report:
        write_file(args.report, render.to_html_report(outcome, ex))
    write_output(args.output, render.to_json_report(outcome, ex) if args.format == "json"
                 else render.to_text_report(outcome, ex))
    if args.report and args.format == "text":
        print(f"report: {args.report}")
    if outcome.culprit is None:
        return 1
    return 0 if outcome.verified else 4


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"bisect": (add_bisect, run)}
