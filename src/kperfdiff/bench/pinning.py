"""Which CPU each benchmark process runs on (:class:`Placement`).

Every repetition's copies are pinned, one CPU each, before they start (kpd-run ``-c``), and the CPU
is kept in each copy's info (``cpu``). The CPUs come from a pool: the CPUs this process may use, or
the isolated CPUs of an active ``kperfdiff system tune`` (whose cpuset the copies then join, kpd-run
``-g``). The choice depends only on the pool, the copy count and the round, so every variant of one
round of an experiment gets the same CPUs.

Policies: ``last`` (the default) takes the last CPUs of the pool, and leaves CPU 0 (which takes most
interrupts and housekeeping) out whenever the pool has more CPUs than copies; ``rotate`` moves to the
next CPU each round (CPU 0 left out alike); ``off`` pins nothing (the scheduler places the copies).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

PIN_POLICIES = ("last", "rotate", "off")


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Placement:
    policy: str = "last"
    pool: tuple[int, ...] = field(default_factory=tuple)   # empty: the CPUs this process may use
    cgroup: str | None = None        # a tuned cpuset's tasks file the copies join first
    first_round: int = 0             # the round of repetition 0 (an experiment's cell: its rep)

    def __post_init__(self):
        if self.policy not in PIN_POLICIES:
            raise ValueError(f"pinning policy must be one of {', '.join(PIN_POLICIES)}")

    @property
    def pins(self) -> bool:
        return self.policy != "off"

    def cpus(self, copies: int, round_: int) -> list[int] | None:
        """The CPU of each copy in round ``round_`` (None: not pinned). With more copies than CPUs in
        the pool, CPUs are shared in turn."""
        if not self.pins:
            return None
        pool = list(self.pool) or allowed_cpus()
        quiet = [c for c in pool if c != 0]
        if len(pool) > 1 and copies <= len(quiet) and quiet:
            pool = quiet
        start = len(pool) - min(copies, len(pool)) if self.policy == "last" else \
            (self.first_round + round_) % len(pool)
        return [pool[(start + i) % len(pool)] for i in range(copies)]
