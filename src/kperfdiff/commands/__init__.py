"""The command line, and the only code that knows argparse: one module per group of
sub-commands, each parsing its options into the library's typed options, opening the store
once, and calling library functions. Machine output goes to stdout, progress and logs to
stderr. Errors become one sentence and a non-zero exit status (a traceback only with --debug).

Commands are registered by name in COMMANDS: the name, the line `kperfdiff --help` shows, and
the module (under kperfdiff.commands) that defines the command. That module is imported only
when its command is parsed (to run it, for its own --help, or to report an error in its
options), so `kperfdiff --help` or `kperfdiff runs` never waits for numpy or for a stage it does
not use. Each command module's DEFINES maps the names of its commands to two functions: one
fills in the command's parser, the other runs the parsed command.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import threading

from kperfdiff import __version__
from kperfdiff.core.errors import KperfdiffError
from kperfdiff.core.state import PENDING_FILE, state_dir
from kperfdiff.commands import common
from kperfdiff.commands.parsing import GLOBAL_OPTIONS, RUNS_PAGE, Parser, accept_global_options

# (name, its line in `kperfdiff --help`, the module of kperfdiff.commands that defines it), in
# the order --help lists them.
COMMANDS = (
    ("bench", "run OS micro-benchmarks and store the results", "bench"),
    ("record", "profile any command with perf, keeping kallsyms and build ids beside it", "bench"),
    ("runs", f"list the runs in the store (the newest {RUNS_PAGE}; --all for every one)", "runs"),
    ("show", "show one run: machine facts, results, monitors", "runs"),
    ("history", "a benchmark's stored results in time order, per machine (text, JSON, a plot)", "history"),
    ("changes", "change points in the stored series of benchmarks, and the ranking across each", "history"),
    ("system", "tune this machine for benchmarks (isolated CPUs, governor, IRQs), show it, reset it", "system"),
    ("target", "check a target, or time a guest kernel's boot", "bench"),
    ("diff", "rank the kernel functions whose share of time differs between two profiles", "diff"),
    ("export", "write a profile in a format other tools load (speedscope, pprof, Firefox Profiler, folded)",
     "export"),
    ("place", "choose kernel functions for a small fast memory (TCM) from a profile", "place"),
    ("run", "run an experiment file: variants x benchmarks x core counts x repetitions", "experiment"),
    ("compare", "compare benchmark results of runs or of an experiment's variants", "experiment"),
    ("report", "write a self-contained HTML report (or Markdown) of an experiment or runs", "experiment"),
    ("bisect", "find the commit that made a benchmark move (git bisect), verified and explained", "bisect"),
    ("watch", "follow branches: measure each new commit, bisect each change point, keep the culprits", "watch"),
    ("studies", "run the study files (examples/studies/) and write one report", "studies"),
    ("store", "make a shared PostgreSQL store; copy a store between SQLite and PostgreSQL", "store"),
    ("lava", "write the LAVA job definitions of an experiment, or show a job template", "lava"),
)
MODULE_OF = {name: module for name, _, module in COMMANDS}


def command_module(name: str):
    """The module that defines the command ``name``, imported now (the dispatcher's one import)."""
    return importlib.import_module(f"{__name__}.{MODULE_OF[name]}")


class _CommandChoice(argparse._SubParsersAction):
    """The COMMAND argument: completes the chosen command's parser (importing its module) just
    before argparse parses the rest of the line with it."""

    def __call__(self, parser, namespace, values, option_string=None):
        complete_parser(self.choices[values[0]], values[0])
        super().__call__(parser, namespace, values, option_string)


def complete_parser(sub: argparse.ArgumentParser, name: str) -> None:
    """Fill in the parser registered for the command ``name`` (once), then give it the global options."""
    if getattr(sub, "completed", False):
        return
    fill, _ = command_module(name).DEFINES[name]
    fill(sub)
    accept_global_options(sub)
    sub.completed = True


def build_parser(*, lazy: bool = False) -> argparse.ArgumentParser:
    """kperfdiff's parser; every command's parser is complete unless ``lazy``, where each is
    filled in when its command is chosen (what main does)."""
    p = Parser(prog="kperfdiff",
               description="Kernel performance workbench: benchmark kernels, profile them, "
                           "and rank the kernel functions where one spends more time than another.")
    p.add_argument("--version", action="version", version=f"kperfdiff {__version__}")
    for flags, kw in GLOBAL_OPTIONS:
        p.add_argument(*flags, **kw)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser, action=_CommandChoice)
    for name, help_line, _ in COMMANDS:
        s = sub.add_parser(name, help=help_line)
        if not lazy:
            complete_parser(s, name)
    return p


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line, with the cyclic garbage collector off while it is parsed: parsing
    imports the command's module and the stages it uses, which make many objects and no cycle
    worth collecting (a collection every few hundred allocations is ~7% of a diff's imports)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return parser.parse_args(argv)
    finally:
        if was:
            gc.enable()


def _repair_pending_knobs() -> None:
    """Put back knobs a killed kperfdiff left changed (a warning, not an error, when one cannot be).
    Without a pending-restore file there is nothing to do, and the knobs' module (with the
    socket, URL and noise modules it brings, 15-30 ms) is not imported."""
    if not (state_dir() / PENDING_FILE).exists():
        return
    from kperfdiff.measure.knobs import repair_pending
    repair_pending(lambda m: print(m, file=sys.stderr, flush=True), strict=False)


def cli() -> int:
    """The console script `kperfdiff`: :func:`main` on sys.argv, and the process's end."""
    rc = main()
    if common.ENDS_AT_ONCE and threading.active_count() == 1:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):     # a closed pipe: what was left unwritten is lost either way
                pass
        os._exit(rc)
    return rc


def main(argv: list[str] | None = None) -> int:
    common.ENDS_AT_ONCE = False
    parser = build_parser(lazy=True)
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])  # before or after the sub-command
    try:
        args = _parse(parser, argv)
        if not args.command:
            parser.print_help(sys.stderr)
            return 2
        _repair_pending_knobs()
        _, run = command_module(args.command).DEFINES[args.command]
        return run(args)
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
