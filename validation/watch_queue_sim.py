"""The watch's queue at scale: the paper arithmetic (``--paper``) or a discrete-event simulation of the
real queue (:mod:`kperfdiff.watch.simulate`); docs/watch-scale.md shows its output."""
from __future__ import annotations

import argparse
import sys

from kperfdiff.watch.simulate import Costs, Scenario, paper, report, simulate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--paper", action="store_true", help="print the arithmetic only")
    p.add_argument("--commits", type=float, default=100.0, help="commits a day")
    p.add_argument("--benchmarks", type=int, default=30)
    p.add_argument("--targets", type=int, default=3)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--days", type=float, default=2.0)
    p.add_argument("--changes", type=float, default=10.0, help="change points found a day")
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--measure-first", action="store_true",
                   help="claim measurements before bisections (the queue claims bisections first)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    if a.paper:
        print("\n".join(paper(Costs(), commits_per_day=int(a.commits), benchmarks=a.benchmarks, types=a.targets,
                              bisections_per_day=a.changes, every=max(a.every, 10))))
        return 0
    sc = Scenario(commits_per_day=a.commits, benchmarks=a.benchmarks, targets=a.targets, workers=a.workers,
                  days=a.days, changes_per_day=a.changes, every=a.every, bisect_first=not a.measure_first, seed=a.seed)
    print("\n".join(report(sc, simulate(sc))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
