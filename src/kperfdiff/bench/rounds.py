"""Repetitions in rounds: the one place that decides what is measured next.

``kperfdiff bench`` and ``kperfdiff run`` measure in rounds. A *group* is what
one repetition is decided for: a benchmark at one copy count in ``bench``; a
column at one core count, with all its variants, in an experiment. Round r
measures one repetition of every group still going, starting at a different
group each round (rotated by r), so slow drift of the machine (heat, memory
fragmentation, a neighbour's batch job) is spread over every group instead of
landing on the repetitions of one benchmark measured back to back.

How many rounds (:class:`RepetitionPolicy`):

* ``reps`` rounds are always measured (a fixed count).
* With ``precision`` P (percent), after those, a group goes on to further
  rounds while the half-width of its interval is above P: the interval of its
  centre in ``bench`` (:func:`kperfdiff.core.stats.centre_half_width`), the widest
  interval of its changes in an experiment. It stops when the half-width is at
  most P, when ``max_time`` seconds of measuring have passed, or at
  ``max_reps`` repetitions, and :func:`run_rounds` says which for every group.
  Stopping on precision (never on the change itself) keeps the intervals
  honest: the half-width does not depend on the sign or size of the change.
* With ``detect`` P (percent) instead, a group goes on while the smallest change it
  could detect is above P (:func:`kperfdiff.core.stats.detectable_change` at 80% power: of
  a comparison with a run like it in ``bench``, of its changes in an experiment), with
  the same limits. Like precision, it never looks at the change itself.
* A group whose repetition failed or was skipped is not measured again.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

DEFAULT_MAX_REPS = 50
DEFAULT_MAX_TIME = 600.0     # seconds of adaptive measuring when --precision has no --max-time


@dataclass(frozen=True)
class RepetitionPolicy:
    reps: int = 1
    precision: float | None = None     # percent half-width, or None for a fixed count
    max_time: float | None = None      # seconds for the whole loop (fixed rounds included)
    max_reps: int = DEFAULT_MAX_REPS
    detect: float | None = None        # percent detectable change, or None

    def __post_init__(self):
        if self.reps < 1:
            raise ValueError("reps must be 1 or more")
        if self.precision is not None and self.detect is not None:
            raise ValueError("precision and detect are two stopping rules: give one")
        for what, v in (("precision", self.precision), ("detect", self.detect)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"{what} must be a positive number of percent")
        if self.max_time is not None and not (math.isfinite(self.max_time) and self.max_time > 0):
            raise ValueError("max_time must be a positive number of seconds")

    @property
    def adaptive(self) -> bool:
        return self.precision is not None or self.detect is not None

    @property
    def target(self) -> float:
        """The percent the adaptive rule stops at (precision's half-width or detect's change)."""
        return self.precision if self.precision is not None else self.detect

    def shown(self, value: float) -> str:
        """A group's current figure as the rule states it: ``+-1.2%`` or ``detectable 1.2%``."""
        if self.detect is not None:
            return "nothing detectable yet" if math.isnan(value) else f"detectable {value:.1f}%"
        return "no interval yet" if math.isnan(value) else f"+-{value:.1f}%"

    @property
    def goal(self) -> str:
        return f"{self.detect:g}%" if self.detect is not None else f"+-{self.precision:g}%"

    @property
    def time_limit(self) -> float | None:
        """Seconds after which :func:`run_rounds` starts no further round: ``max_time``, else
        DEFAULT_MAX_TIME when adaptive, else none."""
        if self.max_time is not None:
            return self.max_time
        return DEFAULT_MAX_TIME if self.adaptive else None

    def describe(self) -> str:
        if not self.adaptive:
            return f"{self.reps} repetitions"
        until = f"every interval half-width is at most {self.precision:g}%" if self.detect is None else \
            f"every cell could detect a change of {self.detect:g}%"
        return (f"at least {self.reps} repetitions, more until {until} (at most {self.max_reps} repetitions, "
                f"{self.max_time or DEFAULT_MAX_TIME:g} s)")


def rotated(items: Sequence, k: int) -> list:
    """``items`` starting at position k (mod its length)."""
    if not items:
        return []
    k %= len(items)
    return list(items[k:]) + list(items[:k])


def run_rounds(groups: Sequence[Hashable], measure_round: Callable[[list, int], set],
               half_widths: Callable[[list], dict], policy: RepetitionPolicy, *, first: int = 0,
               clock: Callable[[], float] = time.monotonic) -> dict:
    """Measure ``groups`` in rounds; return why each group stopped (a sentence per group).

    ``measure_round(groups_in_order, r)`` measures repetition r of those groups and
    returns the set of groups that failed or were skipped (not measured again).
    ``half_widths(groups)`` gives each group's current figure in percent, the interval
    half-width (``policy.precision``) or the detectable change (``policy.detect``), nan when
    there is none yet; only called when the policy is adaptive.
    ``first``: the repetition to start at (an experiment's adaptive rounds follow
    the repetitions its matrix already measured).
    """
    t0 = clock()
    limit = policy.time_limit
    active = list(groups)
    why: dict = {}
    r = first
    while active:
        if r >= policy.reps:
            if not policy.adaptive:
                for g in active:
                    why[g] = f"{r} repetitions (fixed count)"
                break
            hw = half_widths(list(active))
            out_of_time = limit is not None and clock() - t0 >= limit
            reached = "precision reached" if policy.detect is None else "detectable change reached"
            for g in list(active):
                h = hw.get(g, math.nan)
                shown = policy.shown(h)
                if not math.isnan(h) and h <= policy.target:
                    why[g] = f"{reached}: {shown} <= {policy.goal} after {r} repetitions"
                elif r >= policy.max_reps:
                    why[g] = f"repetition limit: {shown} > {policy.goal} after {r} repetitions"
                elif out_of_time:
                    why[g] = f"time limit ({limit:g} s): {shown} > {policy.goal} after {r} repetitions"
                else:
                    continue
                active.remove(g)
            if not active:
                break
        stopped = measure_round(rotated(active, r), r) or set()
        r += 1
        for g in stopped:
            if g in active:
                active.remove(g)
                why[g] = f"stopped after {r} repetitions: the benchmark failed or was skipped"
    return why
