"""The argparse flavour every sub-command shares: the parser that reports a usage error as one
sentence, the global options, and the argument types. Light, as `kperfdiff --help` loads it."""
from __future__ import annotations

import argparse
import math

from kperfdiff.core import limits
from kperfdiff.core.errors import UsageError

# The one set of output formats, in the order every --format lists them: a command takes the
# subset that applies to it (add_format). html is a self-contained page, junit the gate's verdict.
OUTPUT_FORMATS = ("text", "markdown", "json", "csv", "html", "junit")
FORMATS = ["text", "markdown", "json", "csv"]       # a table command's subset
TOP = 10            # every --top's default: rows of a ranking (0 = all where a command allows it)
RUNS_PAGE = 50      # runs `kperfdiff runs` lists unless told otherwise


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one sentence and exit 2."""

    def error(self, message):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)


# Options that belong to kperfdiff itself, accepted before or after the sub-command
# (`kperfdiff --store S runs` and `kperfdiff runs --store S` are the same).
GLOBAL_OPTIONS = (
    (("--store",), dict(metavar="PATH|URL",
                        help="results store: an SQLite file, or a shared PostgreSQL database as "
                             "postgresql://USER@HOST/DB (see kperfdiff store --help); default $KPERFDIFF_STORE, "
                             "else $KPERFDIFF_HOME/kperfdiff.db or $XDG_DATA_HOME/kperfdiff/kperfdiff.db")),
    (("--debug",), dict(action="store_true", help="show tracebacks on errors")),
)


def accept_global_options(sub: argparse.ArgumentParser) -> None:
    """Give a sub-command (and each of its own sub-commands) the global options it does not define
    itself, defaulting to whatever was given before the sub-command."""
    taken = {o for a in sub._actions for o in a.option_strings}
    for flags, kw in GLOBAL_OPTIONS:
        if not taken.intersection(flags):
            sub.add_argument(*flags, **dict(kw, default=argparse.SUPPRESS))
    for action in sub._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subsub in dict.fromkeys(action.choices.values()):
                accept_global_options(subsub)


def copy_counts(text: str) -> list[int]:
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


def number(most: float):
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


def percent(text: str) -> float:
    """An argparse type: a percentage from 0 to below 100 (a slowdown of 100% or more cannot be)."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not 0 <= v < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage from 0 to below 100")
    return v


def whole(most: int, least: int = 1):
    """An argparse type: a whole number from ``least`` (1 unless told) to ``most``."""
    def parse(text: str) -> int:
        t = text.strip()
        if not t.isdigit() or len(t) > 12 or not least <= int(t) <= most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from {least} to {most}")
        return int(t)
    return parse


def add_format(p: argparse.ArgumentParser, *formats: str, default: str = "text", help: str | None = None) -> None:
    """--format with the subset of OUTPUT_FORMATS that applies to a command, in the set's order."""
    unknown = set(formats) - set(OUTPUT_FORMATS)
    assert not unknown, f"formats outside the set: {unknown}"
    choices = [f for f in OUTPUT_FORMATS if f in (formats or FORMATS)]
    p.add_argument("--format", choices=choices, default=default,
                   help=help or f"output format (default: {default})")


def add_output(p: argparse.ArgumentParser, *, default: str | None = None, metavar: str = "FILE",
               what: str = "the output") -> None:
    """-o/--output: a file to write whole, - for standard output (the default unless ``default``)."""
    p.add_argument("-o", "--output", metavar=metavar, default=default,
                   help=f"write {what} to {metavar} (whole, or nothing on error); - for standard output"
                        + (f" (default: {default})" if default else " (the default)"))


def add_top(p: argparse.ArgumentParser, what: str, *, all_zero: bool = True) -> None:
    """--top N with the one default (TOP)."""
    p.add_argument("--top", type=whole(100000, least=0 if all_zero else 1), default=TOP, metavar="N",
                   help=f"{what} (default: {TOP}" + ("; 0 = all)" if all_zero else ")"))
