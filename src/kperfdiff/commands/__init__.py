"""The command line, and the only code that knows argparse: one module per group of
sub-commands, each parsing its options into the library's typed options, opening the store
once, and calling library functions. Machine output goes to stdout, progress and logs to
stderr. Errors become one sentence and a non-zero exit status (a traceback only with --debug).
"""
from __future__ import annotations

import argparse
import os
import sys

from kperfdiff import __version__
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.measure.knobs import repair_pending
from kperfdiff.commands import bench, diff, experiment, export, lava, place, store, studies
from kperfdiff.commands.common import GLOBAL_OPTIONS, Parser, accept_global_options


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kperfdiff",
                description="Kernel performance workbench: benchmark kernels, profile them, "
                            "and rank the kernel functions where one spends more time than another.")
    p.add_argument("--version", action="version", version=f"kperfdiff {__version__}")
    for flags, kw in GLOBAL_OPTIONS:
        p.add_argument(*flags, **kw)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    bench.add_parsers(sub)
    diff.add_parser(sub)
    export.add_parser(sub)
    place.add_parser(sub)
    experiment.add_parsers(sub)
    studies.add_parser(sub)
    store.add_parser(sub)
    lava.add_parser(sub)
    accept_global_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])  # before or after the sub-command
    try:
        args = parser.parse_args(argv)
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
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


COMMANDS = {
    "run": experiment.run,
    "compare": experiment.compare,
    "report": experiment.report,
    "bench": bench.run_bench_command,
    "runs": bench.runs,
    "show": bench.show,
    "record": bench.record,
    "target": bench.target,
    "diff": diff.run,
    "export": export.run,
    "place": place.run,
    "studies": studies.run,
    "store": store.run,
    "lava": lava.run,
}
