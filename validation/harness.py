"""What the validation harnesses that inject a change of known size share: the command line they
drive, the calibration that turns an effect into a parameter, and their tables.

An effect is injected through a benchmark parameter whose cost is linear: `select.file.100`'s n
(one more descriptor to scan per select()). :func:`calibrate` measures the benchmark at n = 1, 2
and 3 times its base value (100, 200, 300), ``rounds`` interleaved rounds of 3 repetitions each,
keeps the fastest timed interval of each run, and fits the least-squares line time = a + b*n
through the median of each n; :meth:`Line.value_for` is then the n such that
(a + b*n) / (a + b*base) = 1 + effect. Used by bisect_accuracy.py and sensitivity.py.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

BENCH = "select.file.100"
PARAM = "n"
BASE = 100


class HarnessError(Exception):
    """A command that failed, or a machine too noisy to calibrate: one sentence for the user."""


def kperfdiff(kpd: list[str], store: Path, *args: str, ok=(0,), env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``kpd --store STORE ARGS`` (kpd: the command prefix of one kperfdiff version); a failure is
    its last line of stderr (a traceback's is the exception)."""
    p = subprocess.run([*kpd, "--store", str(store), *args], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, env=env)
    if p.returncode not in ok:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1].strip()
        raise HarnessError(f"kperfdiff {' '.join(args)} failed ({p.returncode}): {last[-300:]}")
    return p


@dataclass
class Line:
    """time = a + b*value (ns per operation) of ``bench`` against its parameter ``param``."""
    bench: str
    param: str
    base: int
    rounds: int
    a: float
    b: float
    seen: dict[int, list[float]] = field(default_factory=dict)

    def at(self, value: float) -> float:
        return self.a + self.b * value

    def value_for(self, effect: float) -> int:
        """The parameter for which the line gives 1 + effect times the time at the base value."""
        return max(self.base + 1, round(self.base + effect * self.at(self.base) / self.b))

    def expected(self, value: float) -> float:
        """The slow-down the line predicts for ``value`` against the base value, as a fraction."""
        return self.at(value) / self.at(self.base) - 1

    def describe(self) -> str:
        return (f"calibration ({self.rounds} rounds, fastest interval of each): " + "; ".join(
            f"{self.param}={v}: {statistics.median(t):.0f} ns/op (fit {self.at(v):.0f})" for v, t in self.seen.items())
            + f"; time = {self.a:.0f} + {self.b:.2f}*{self.param} ns")

    def as_dict(self) -> dict:
        return {"bench": self.bench, "param": self.param, "base": self.base, "rounds": self.rounds, "a": self.a,
                "b": self.b, "seen": {str(v): t for v, t in self.seen.items()}}


def calibrate(kpd: list[str], store: Path, rounds: int, bench: str = BENCH, param: str = PARAM, base: int = BASE,
              extra: tuple[str, ...] = ()) -> Line:
    """Time per operation at base, 2*base and 3*base (interleaved rounds of 3 repetitions each, their
    fastest timed interval), and the least-squares line a + b*value through the median of each. The
    fastest of a run's intervals is the one other tasks disturbed least: on a busy machine the centre
    of one run moves by tens of percent, its minimum by a few. ``extra``: more `bench` options."""
    seen: dict[int, list[float]] = {v: [] for v in (base, 2 * base, 3 * base)}
    for _ in range(rounds):
        for v in seen:
            out = kperfdiff(kpd, store, "bench", "--only", bench, "--reps", "3", "--param", f"{bench}:{param}={v}",
                            "--label", f"calibrate-{param}{v}", "--format", "json", "--no-progress", *extra).stdout
            res = [r for r in json.loads(out)["results"] if r["benchmark"] == bench and r["status"] == "ok"]
            if not res:
                raise HarnessError(f"{bench} did not run at {param}={v}")
            seen[v].append(res[0]["summary"]["min"])
    xs = list(seen)
    ys = [statistics.median(seen[v]) for v in xs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    if not b > 0:
        raise HarnessError(f"{bench} did not get slower as {param} grew (slope {b:.3g} ns per unit of {param}): "
                           f"the machine is too noisy to calibrate")
    return Line(bench, param, base, rounds, my - b * mx, b, seen)


def effects_arg(text: str) -> list[float]:
    """--effects: percentages, comma-separated, as fractions."""
    try:
        out = [float(x) / 100 for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(not 0 < e <= 5 for e in out):
        raise argparse.ArgumentTypeError(f"{text!r}: give percentages between 0 and 500, comma-separated (5,10,50)")
    return out


def pct(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.0%})" if n else "-"


def table(head: list[str], rows: list[list[str]]) -> str:
    w = [max(len(x) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(c.ljust(k) if i == 0 else c.rjust(k) for i, (c, k) in enumerate(zip(cells, w)))
    return "\n".join([line(head), line(["-" * k for k in w]), *map(line, rows)])
