#!/usr/bin/env python3
"""Stability and cost of kperfdiff's own benchmarks (a harness, not a test).

Runs a suite several times into a scratch store and prints, per benchmark:
the median of the run medians, the CV inside a run (median over runs), the
CV of the medians from run to run, and the wall time of one run. Then the
whole suite's time, and reference figures measured in the same session by
`perf bench` (getppid loop, pipe ping-pong) beside kperfdiff's equivalents,
as ratios.

    .venv/bin/python validation/bench_stability.py [--suite quick|full] [--runs 3] [--only PATTERNS]
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kperfdiff.measure.session import BenchOptions, run_bench
from kperfdiff.store import Store

CV_TARGET = 0.05
# kperfdiff benchmark -> (perf bench command, how to read usecs/op, what it measures)
REFERENCES = {
    "syscall.null": (["perf", "bench", "syscall", "basic", "-l", "3000000"], "getppid() loop"),
    "ipc.pipe": (["perf", "bench", "sched", "pipe", "-l", "200000"], "pipe round trip between two processes"),
}


def perf_bench_ns(cmd: list[str]) -> float | None:
    if not shutil.which("perf"):
        return None
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    m = re.search(r"([\d.]+)\s+usecs/op", r.stdout)
    return float(m.group(1)) * 1000 if m else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="quick", choices=["quick", "full"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=None)
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="kperfdiff-stability-") as d:
        store = Store.open(Path(d) / "k.db")
        per: dict[str, dict] = {}
        suite_times = []
        for i in range(a.runs):
            t0 = time.monotonic()
            out = run_bench(store, BenchOptions(suite=a.suite, only=a.only, progress=True,
                                                command=f"bench_stability run {i + 1}"))
            suite_times.append(time.monotonic() - t0)
            for r in out.results:
                e = per.setdefault(r.benchmark, {"unit": r.unit, "medians": [], "cvs": [], "walls": [],
                                                 "status": set()})
                e["status"].add(r.status if r.status == "ok" else f"{r.status}: {r.reason}")
                if r.status == "ok":
                    e["medians"].append(r.median)
                    e["cvs"].append(r.cv or 0.0)
                    e["walls"].append(r.wall_s or 0.0)

    print(f"{'benchmark':24} {'unit':7} {'median':>11} {'CV in run':>10} {'CV runs':>8} {'wall s':>7}  note")
    over = []
    for name, e in per.items():
        if not e["medians"]:
            print(f"{name:24} {e['unit']:7} {'-':>11} {'-':>10} {'-':>8} {'-':>7}  {'; '.join(e['status'])}")
            continue
        med = statistics.median(e["medians"])
        cv_in = statistics.median(e["cvs"])
        cv_runs = (statistics.stdev(e["medians"]) / statistics.mean(e["medians"])) if len(e["medians"]) > 1 else 0
        wall = statistics.median(e["walls"])
        note = ""
        if cv_in > CV_TARGET:
            note = f"CV over {CV_TARGET:.0%}"
            over.append(name)
        print(f"{name:24} {e['unit']:7} {med:11.4g} {cv_in:10.1%} {cv_runs:8.1%} {wall:7.2f}  {note}")
    print(f"\nsuite {a.suite}: {len(per)} benchmarks, {statistics.median(suite_times):.1f} s per run "
          f"(runs: {', '.join(f'{t:.1f}' for t in suite_times)})")
    print(f"CV above {CV_TARGET:.0%} inside a run: {', '.join(over) if over else 'none'}")

    print("\nreference (perf bench, same session):")
    for name, (cmd, what) in REFERENCES.items():
        ours = per.get(name, {}).get("medians")
        ref = perf_bench_ns(cmd)
        if not ours or ref is None:
            print(f"  {name}: not measured")
            continue
        m = statistics.median(ours)
        print(f"  {name:14} {m:9.1f} ns/op   {' '.join(cmd[1:4]):22} {ref:9.1f} ns/op   ratio {m / ref:.2f}  ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
