"""Bounds on what a command line or an experiment file may ask for.

Each is far beyond any real use and far below what would exhaust the
machine; a value outside one is refused with a sentence before anything is
expanded, started or allocated.
"""
from __future__ import annotations

import math

MAX_REPS = 1000                 # repetitions of a cell
MAX_COPIES = 1024               # parallel copies of a benchmark (-P, cores)
MAX_CORE_COUNTS = 64            # entries in a -P list or a cores list
MAX_CPU_ID = 8191               # highest CPU number (the kernel's NR_CPUS limit)
MAX_CELLS = 100_000             # cells of one experiment
MAX_INTERVALS = 1000            # timed intervals per process
MAX_PROFILE_FREQ = 100_000      # perf sampling frequency (Hz)
MAX_TIMEOUT_S = 7 * 86400       # per-process timeout, seconds of measuring
MAX_MIN_BATCH_MS = 60_000       # minimum batch length
MAX_PRECISION_PCT = 10_000          # precision target, percent (1000 means: stop on time)
MAX_BOOTS = 1000                # boots per memory size
MAX_VALUE_CHARS = 4096          # a parameter value, a knob value
MAX_LIST_ITEMS = 256            # items of a list in a [study] table
MAX_RUNS_LISTED = 10 ** 9       # runs in one page of `kperfdiff runs` (--limit, --offset)
MAX_INPUT_BYTES = 16 << 30      # a profile read from standard input or decompressed from gzip


def int_in_range(v: int, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def number_in_range(v: float, lo_exclusive: float, hi: float) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and lo_exclusive < v <= hi)


def parse_cpu_list(text: str, what: str = "CPU list") -> list[int]:
    """``0-3,6`` -> [0, 1, 2, 3, 6], with every number checked before a range is expanded."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()) or len(lo) > 6 or len(hi) > 6:
            raise ValueError(f"{text!r} is not a {what} like \"0\", \"0-3\" or \"0,2\"")
        a, b = int(lo), int(hi or lo)
        if b > MAX_CPU_ID:
            raise ValueError(f"{what} {text!r} names CPU {b}; no machine has more than {MAX_CPU_ID + 1} CPUs")
        if b < a:
            raise ValueError(f"{what} {text!r} has a range that runs backwards ({part})")
        out.extend(range(a, b + 1))
    return out

# Experiments on a shared (PostgreSQL) store. Another machine's process cannot be asked whether it
# is alive, so a running experiment's process says so itself: it refreshes ``experiment.updated``
# (the database server's clock, so the machines' clocks need not agree) every HEARTBEAT_S seconds
# from a thread of its own, whatever the cell it is measuring (a guest's batch of cells can take
# many minutes). EXPERIMENT_DEAD_S without one, and another machine's `kperfdiff run` takes the
# experiment over: twenty heartbeats missed, so a busy server, a slow network or a machine paused
# for a few minutes is not taken for dead, while a machine that died holds its experiment for
# ten minutes at most.
HEARTBEAT_S = 30.0
EXPERIMENT_DEAD_S = 600.0
