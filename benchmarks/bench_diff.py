#!/usr/bin/env python3
"""Time `kperfdiff diff A B --children` against `perf diff A B` on the recording shapes of
``benchmarks/shapes.py`` (fork, shell, lsr, threads, kernel; ``--shapes`` picks some): per shape, two
files of that shape (sides a and b, about 1.2M samples each with call chains) recorded once
into ``--dir`` and reused, with the kallsyms beside them passed explicitly to both tools.

Each command runs end to end (``kperfdiff`` is the entry point beside this interpreter, start-up
included) --repeat times, each in a fresh wrapper process so its peak RSS (getrusage of
children) is its own, the commands of a shape in turns (one run of each per round, so that a
burst of the machine's other work falls on all of them alike); the harness prints per shape the median and best wall time of each, the
ratio (medians) and peak memory against the targets (kperfdiff at most 0.4x perf diff's time,
under 150 MB), with the 1-minute load average before and after the shape. For one shape
(``--detail``, default fork) it also times `kperfdiff diff --children -j 1` and 10 profiles a
side (the same two files named ten times each; they should take at most ten times one).
Not a pass/fail test.

    .venv/bin/python benchmarks/bench_diff.py [--shapes fork,shell,lsr,threads,kernel] [--dir /tmp/kpd-shapes]
        [--rerecord] [--seconds 30] [--repeat 5] [--detail fork|none] [--replicates 10]
        [--before DIR]   (also time another checkout of kperfdiff, built with make setup, in the same run)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shapes  # noqa: E402  (benchmarks/ is not a package)

KPERFDIFF = Path(sys.executable).with_name("kperfdiff")
TARGET_RATIO = 0.4      # kperfdiff diff --children against perf diff (medians)
TARGET_MB = 150         # kperfdiff's peak RSS

WRAPPER = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
dt = time.perf_counter() - t
if p.returncode:
    sys.stderr.write(p.stderr.decode(errors="replace")[-2000:])
    sys.exit(p.returncode)
print(dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def samples(path: Path) -> int:
    p = subprocess.run(["perf", "report", "-i", str(path), "--stats"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if "SAMPLE events:" in line:
            return int(line.split(":")[1].split()[0])
    return -1


def measure_once(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run of ``cmd``, in a fresh wrapper process."""
    p = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    t, m = p.stdout.split()
    return float(t), int(m)


def measure_in_turns(cmds: dict[str, tuple[list[str], int]]) -> dict[str, tuple[list[float], int]]:
    """Each named command (argv, runs) run in turns, one run of each per round, so that a burst of
    the machine's other work falls on all of them alike: name -> (wall seconds of each run, the
    largest peak RSS in KiB)."""
    out: dict[str, tuple[list[float], int]] = {name: ([], 0) for name in cmds}
    for turn in range(max(n for _, n in cmds.values())):
        for name, (cmd, n) in cmds.items():
            if turn < n:
                t, m = measure_once(cmd)
                times, rss = out[name]
                out[name] = (times + [t], max(rss, m))
    return out


def warm(*files: Path) -> None:
    """Read the files once, so every timing reads them from the page cache."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass


def time_shape(shape: str, a: Path, b: Path, ks: Path, args, detail: bool) -> dict:
    """Every run of one shape, with the load average around them."""
    warm(a, b)
    kd = [str(KPERFDIFF), "diff", str(a), str(b), "--children", "--kallsyms", str(ks)]
    pd = ["perf", "diff", "--kallsyms", str(ks), str(a), str(b)]
    load_before = os.getloadavg()[0]
    cmds = {"kperfdiff diff --children": (kd, args.repeat), "perf diff": (pd, args.repeat)}
    if args.before:
        before = str(args.before / ".venv" / "bin" / "kperfdiff")
        cmds["before: kperfdiff diff --children"] = ([before, *kd[1:]], args.repeat)
    if detail:
        many = [str(KPERFDIFF), "diff", ",".join([str(a)] * args.replicates),
                ",".join([str(b)] * args.replicates), "--children", "--kallsyms", str(ks)]
        cmds["kperfdiff diff --children -j 1"] = (kd + ["-j", "1"], args.repeat)
        cmds[f"kperfdiff diff --children, {args.replicates} a side"] = (many, max(1, args.repeat // 2))
        if args.before:
            cmds[f"before: {args.replicates} a side"] = ([before, *many[1:]], max(1, args.repeat // 2))
    runs = measure_in_turns(cmds)
    return {"shape": shape, "samples": [samples(a), samples(b)], "mb": [a.stat().st_size / 1e6, b.stat().st_size / 1e6],
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "runs": {name: {"seconds": t, "rss_kb": r} for name, (t, r) in runs.items()}}


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shapes.add_arguments(ap)
    ap.add_argument("--repeat", type=int, default=5, help="runs of each command (best and median are reported)")
    ap.add_argument("--detail", default="fork", metavar="SHAPE",
                    help="the shape that also gets -j 1 and the many-profiles row (default: fork; none: no shape)")
    ap.add_argument("--replicates", type=int, default=10, help="profiles a side in the many-profiles row")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="another kperfdiff checkout (built with make setup) to time beside this one")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    if not KPERFDIFF.exists():
        raise SystemExit(f"{KPERFDIFF}: no kperfdiff entry point beside this interpreter (run with .venv/bin/python)")
    if args.repeat < 1 or args.replicates < 1:
        raise SystemExit("--repeat and --replicates must be at least 1")
    if args.before and not (args.before / ".venv" / "bin" / "kperfdiff").exists():
        raise SystemExit(f"--before {args.before}: no .venv/bin/kperfdiff there (run make setup in it)")
    picked = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in picked if s not in shapes.SHAPES]
    if unknown or not picked:
        raise SystemExit(f"--shapes {args.shapes}: the shapes are {', '.join(shapes.SHAPES)}")
    if args.detail not in (*shapes.SHAPES, "none"):
        raise SystemExit(f"--detail {args.detail}: a shape ({', '.join(shapes.SHAPES)}) or none")
    files = shapes.recordings(args.dir, picked, sides=("a", "b"), seconds=args.seconds, freq=args.freq,
                              rerecord=args.rerecord)
    ks = args.dir / "kallsyms"
    results = [time_shape(s, files[(s, "a")], files[(s, "b")], ks, args, s == args.detail) for s in picked]

    print(f"end to end, each run a fresh process; median and best of {args.repeat} "
          f"(many-profiles rows: of {max(1, args.repeat // 2)}); {len(os.sched_getaffinity(0))} CPUs; "
          f"kallsyms {ks}")
    print(f"{'shape':8} {'command':42} {'median s':>9} {'best s':>8} {'x perf diff':>12} {'peak RSS MB':>12}")
    for r in results:
        na, nb = r["samples"]
        print(f"{r['shape']}: A {na} samples ({r['mb'][0]:.0f} MB), B {nb} samples ({r['mb'][1]:.0f} MB); "
              f"load average (1 min) {r['load_before']:.2f} before, {r['load_after']:.2f} after")
        pm = statistics.median(r["runs"]["perf diff"]["seconds"])
        for name, run in r["runs"].items():
            med = statistics.median(run["seconds"])
            print(f"{r['shape']:8} {name:42} {med:9.2f} {min(run['seconds']):8.2f} {med / pm:12.2f} "
                  f"{run['rss_kb'] / 1024:12.1f}")
    for r in results:
        runs = r["runs"]
        km = statistics.median(runs["kperfdiff diff --children"]["seconds"])
        pm = statistics.median(runs["perf diff"]["seconds"])
        mb = runs["kperfdiff diff --children"]["rss_kb"] / 1024
        print(f"target {r['shape']}: kperfdiff diff --children at most {TARGET_RATIO}x perf diff: {km / pm:.2f}x "
              f"(median), {verdict(km / pm <= TARGET_RATIO)}; under {TARGET_MB} MB: {mb:.0f} MB, "
              f"{verdict(mb < TARGET_MB)}; {sum(r['samples']) / km / 1e6:.2f}M samples/s end to end")
        many = runs.get(f"kperfdiff diff --children, {args.replicates} a side")
        if many:
            mm = statistics.median(many["seconds"])
            print(f"target {r['shape']}: {args.replicates} profiles a side scale linearly: {mm / km:.1f}x the time "
                  f"of one a side ({mm / (2 * args.replicates):.2f} s a profile against {km / 2:.2f} s a profile "
                  f"with one a side); -j 1: {runs['kperfdiff diff --children -j 1']['rss_kb'] / 1024:.0f} MB")
    print(json.dumps({"shapes": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
