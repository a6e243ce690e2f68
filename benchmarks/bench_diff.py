#!/usr/bin/env python3
"""Time `kperfdiff diff A B --children` against `perf diff A B` on two large
perf.data files (about 1.4M samples each, with call chains), and `kperfdiff diff`
with 10 profiles a side (the same two files named ten times each) against one.

The files are recorded once (perf record -e cpu-clock -F 20000 -g -a around a
busy two-CPU workload for about 35 s each) and cached in /tmp/kperfdiff-bench/
with a kallsyms snapshot beside each. Each command runs --repeat times (default
3) in a fresh wrapper process so its peak RSS (getrusage of children) is its
own; the harness prints the median and best wall time, the ratio, and peak
memory, each against its target (kperfdiff at most 0.4x perf diff's time, under
150 MB; ten profiles a side take at most ten times one). Not a pass/fail test.

    .venv/bin/python benchmarks/bench_diff.py [--repeat N] [--seconds S] [--rerecord] [--replicates 10]
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

ROOT = Path(__file__).resolve().parents[1]
KPERFDIFF = Path(sys.executable).with_name("kperfdiff")
CACHE = Path("/tmp/kperfdiff-bench")

# Two different busy workloads, one copy per CPU, so the profiles differ.
WORKLOADS = {
    "a": "while :; do dd if=/dev/zero of=/dev/null bs=64k count=20000 2>/dev/null; "
         "for i in 1 2 3 4 5 6 7 8; do /bin/true; done; done",
    "b": "while :; do head -c 4000000 /dev/urandom > /dev/null; "
         "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do /bin/true; done; done",
}

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


def record(name: str, seconds: int, rerecord: bool) -> Path:
    out = CACHE / f"{name}.perf.data"
    if out.exists() and not rerecord:
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    ncpu = os.cpu_count() or 2
    loops = " & ".join([f"( {WORKLOADS[name]} )"] * ncpu)
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000", "-g", "-a", "-o", str(out), "--",
           "timeout", str(seconds), "sh", "-c", f"{loops} & wait"]
    print(f"recording {out} ({seconds} s, {ncpu} CPUs)...", file=sys.stderr)
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    shutil.copyfile("/proc/kallsyms", CACHE / f"{name}.kallsyms")
    return out


def samples(path: Path) -> int:
    p = subprocess.run(["perf", "report", "-i", str(path), "--stats"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if "SAMPLE events:" in line:
            return int(line.split(":")[1].split()[0])
    return -1


def measure(cmd: list[str], repeat: int) -> tuple[list[float], int]:
    times, rss = [], 0
    for _ in range(repeat):
        p = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
        t, m = p.stdout.split()
        times.append(float(t))
        rss = max(rss, int(m))
    return times, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=35)
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--replicates", type=int, default=10, help="profiles a side in the many-profiles row")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="another kperfdiff checkout (built with make setup) to time beside this one")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    a = record("a", args.seconds, args.rerecord)
    b = record("b", args.seconds, args.rerecord)
    na, nb = samples(a), samples(b)
    print(f"A: {a} {na} samples ({a.stat().st_size / 1e6:.0f} MB); B: {b} {nb} samples "
          f"({b.stat().st_size / 1e6:.0f} MB)")
    # warm the page cache
    for f in (a, b):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    kd = [str(KPERFDIFF), "diff", str(a), str(b), "--children"]
    pd = ["perf", "diff", str(a), str(b)]
    many = [str(KPERFDIFF), "diff", ",".join([str(a)] * args.replicates), ",".join([str(b)] * args.replicates),
            "--children"]
    load_before = os.getloadavg()
    runs = {
        "kperfdiff diff --children": measure(kd, args.repeat),
        "kperfdiff diff --children -j 1": measure(kd + ["-j", "1"], args.repeat),
        "perf diff": measure(pd, args.repeat),
        f"kperfdiff diff --children, {args.replicates} a side": measure(many, max(1, args.repeat // 2)),
    }
    if args.before:
        before = str(args.before / ".venv" / "bin" / "kperfdiff")
        runs["before: kperfdiff diff --children"] = measure([before, *kd[1:]], args.repeat)
        runs[f"before: {args.replicates} a side"] = measure([before, *many[1:]], max(1, args.repeat // 2))
    load_after = os.getloadavg()
    print(f"load average (1 min) {load_before[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} CPUs")
    print(f"{'command':42} {'median s':>9} {'best s':>8} {'x perf diff':>12} {'peak RSS MB':>12}")
    pm = statistics.median(runs["perf diff"][0])
    for name, (times, rss) in runs.items():
        med = statistics.median(times)
        print(f"{name:42} {med:9.2f} {min(times):8.2f} {med / pm:12.2f} {rss / 1024:12.1f}")
    k_times, k_rss = runs["kperfdiff diff --children"]
    km = statistics.median(k_times)
    mm = statistics.median(runs[f"kperfdiff diff --children, {args.replicates} a side"][0])
    print(f"target: kperfdiff diff --children at most 0.4x perf diff: {km / pm:.2f}x (median); "
          f"peak memory under 150 MB: {k_rss / 1024:.0f} MB (with -j 1: {runs['kperfdiff diff --children -j 1'][1] / 1024:.0f} MB)")
    print(f"target: {args.replicates} profiles a side scale linearly: {mm / km:.1f}x the time of one a side "
          f"({mm / (2 * args.replicates):.2f} s a profile against {km / 2:.2f} s a profile with one a side)")
    print(f"samples/s end to end: {(na + nb) / km / 1e6:.2f} M")
    print(json.dumps({"samples": [na, nb], **{name: {"seconds": t, "rss_kb": r} for name, (t, r) in runs.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
