"""Bisection accuracy: how often does `kperfdiff bisect` name exactly the commit that made a
benchmark slower, how many probes does it spend, and does it refuse when nothing changed?

Builds small git series (tests/support/bisect_repo.py): a base commit (GOOD) and ``--commits``
commits after it, one of which, at a random position (``--seed``), switches the build command's
output from ``param=select.file.100:n=100`` to ``n=N_BAD``. `select.file.100`'s time per
operation grows linearly with n (one more descriptor to scan per select()), so N_BAD is chosen
for each effect from a calibration measured in the same session (validation/harness.py, shared
with sensitivity.py): the benchmark at n = 100, 200 and 300, ``--calibrate`` interleaved rounds,
a least-squares line time = a + b*n, and N_BAD such that (a + b*N_BAD) / (a + b*100) = 1 + effect.
Null series change nothing a probe runs: their bisection must be refused (exit status 3), and any
culprit named on one is a false culprit.

    .venv/bin/python validation/bisect_accuracy.py --series 10 --null 10
    .venv/bin/python validation/bisect_accuracy.py --quick
    .venv/bin/python validation/bisect_accuracy.py --effects 5 --values median,p10

With ``--load steady:N`` or ``--load bursts:N`` the harness keeps N processes of its own busy while
it bisects (steady: spinning all the time; bursts: spinning and sleeping by turns, each for 0.05 to
2 s drawn at random), as a test suite on the other CPUs does: the null series then measure the
reference's level under that load, which is the condition of `make test` on a 2-CPU machine.
With ``--series 0`` there is no effect to inject, so no calibration either.

    .venv/bin/python validation/bisect_accuracy.py --series 0 --null 40 --commits 4 --reps 3 --max-reps 6 --load bursts:1

With ``--values A,B`` every series is bisected once per ``--value`` (what a repetition contributes:
the median or the 10th percentile of its intervals), one right after the other and in alternating
order, each into its own store, so the two are compared on the same series in the same hour.

Every bisection runs the real command line (`kperfdiff bisect ... --target local --no-profile
--format json`) into a temporary store (or ``--store``, kept for inspection); the series of all
effects and the null series are run in turn (one of each, then the next), so that a change in
the machine's load falls on every effect alike. It prints a line per bisection, then per effect:
bisections, the exact-culprit rate, probes measured (mean/max, against ceil(log2 commits) + 2),
verified, wrong culprits, refused, no culprit, the effect measured (BAD against GOOD) and wall time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.bisect_repo import make_series  # noqa: E402
from harness import BASE as N_GOOD, BENCH, HarnessError, calibrate, effects_arg, pct, table  # noqa: E402

KPD = [str(Path(sys.executable).with_name("kperfdiff"))]


def bisect(store: Path, series, extra: list[str]) -> dict:
    t0 = time.monotonic()
    p = subprocess.run(KPD + ["--store", str(store), "bisect", "--repo", str(series.path), "--good",
                              series.commits[0], "--bad", series.commits[-1], "--bench", BENCH, "--build",
                              "./build.sh", "--target", "local", "--no-profile", "--no-progress",
                              "--format", "json", *extra], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    row = {"exit": p.returncode, "seconds": time.monotonic() - t0, "culprit": None, "verified": False,
           "probes": None, "ratio": None, "error": None}
    if p.returncode == 3:
        m = re.search(r"\(([+-]\d+(?:\.\d+)?)%", p.stderr)
        row["ratio"] = 1 + float(m.group(1)) / 100 if m else None
    elif p.returncode in (0, 1, 4) and p.stdout.strip():
        out = json.loads(p.stdout)
        row.update(culprit=(out["culprit"] or {}).get("hash"), verified=bool(out["verified"]),
                   probes=out["measured_probes"], ratio=(out["reference"] or {}).get("ratio"))
    else:
        row["error"] = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][-200:]
    return row


LOAD = r"""
import random, sys, time
pattern, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
while True:
    end = time.monotonic() + (rng.uniform(0.05, 2.0) if pattern == "bursts" else 3600)
    while time.monotonic() < end:
        pass
    if pattern == "bursts":
        time.sleep(rng.uniform(0.05, 2.0))
"""


def load_arg(text: str) -> tuple[str, int]:
    """--load steady:N or bursts:N."""
    pattern, _, n = text.partition(":")
    if pattern not in ("steady", "bursts") or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"--load takes steady:N or bursts:N with N 1 or more, not {text!r}")
    return pattern, int(n)


def start_load(load: tuple[str, int] | None, seed: int) -> list[subprocess.Popen]:
    """The --load processes, started (none without --load)."""
    if load is None:
        return []
    return [subprocess.Popen([sys.executable, "-c", LOAD, load[0], str(seed * 1000 + i)], stdin=subprocess.DEVNULL)
            for i in range(load[1])]


def position(series, commit: str | None) -> str:
    return "-" if commit is None else str(series.commits.index(commit)) if commit in series.commits else "?"


def summary(group: str, rows: list[dict], bound: int) -> list[str]:
    n = len(rows)
    probes = [r["probes"] for r in rows if r["probes"] is not None]
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    named = [r for r in rows if r["culprit"]]
    exact = sum(1 for r in named if r["culprit"] == r["truth"])
    return [group, str(n),
            "-" if group.startswith("null") else pct(exact, n),
            f"{statistics.fmean(probes):.1f} / {max(probes)}" if probes else "-", str(bound),
            pct(sum(1 for r in rows if r["verified"]), n),
            str(len(named) - exact) if not group.startswith("null") else pct(len(named), n),
            pct(sum(1 for r in rows if r["exit"] == 3), n),
            str(sum(1 for r in rows if r["exit"] == 1)),
            str(sum(1 for r in rows if r["error"])),
            (f"{(statistics.fmean(ratios) - 1) * 100:+.1f}% [{(min(ratios) - 1) * 100:+.1f}, "
             f"{(max(ratios) - 1) * 100:+.1f}]") if ratios else "-",
            f"{sum(r['seconds'] for r in rows):.0f}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--series", type=int, default=10, help="bisections per effect (default 10)")
    ap.add_argument("--effects", type=effects_arg, default=None, metavar="PCT,...",
                    help="slow-downs of the culprit, in percent (default 5,10,50)")
    ap.add_argument("--null", type=int, default=None, help="null series, nothing changes (default: --series)")
    ap.add_argument("--commits", type=int, default=16, help="commits after GOOD in each series (default 16)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the culprits' positions (default 1)")
    ap.add_argument("--calibrate", type=int, default=5, metavar="ROUNDS",
                    help="interleaved calibration rounds at n = 100, 200, 300 (default 5)")
    ap.add_argument("--reps", type=int, default=None, help="pass --reps N to bisect (default: its own, 5)")
    ap.add_argument("--max-reps", type=int, default=None, help="pass --max-reps N to bisect (default: its own, 15)")
    ap.add_argument("--verify-reps", type=int, default=None, help="pass --verify-reps N to bisect")
    ap.add_argument("--values", default=None, metavar="V,...",
                    help="bisect every series with each of these --value settings (p10, median), interleaved "
                         "(default: bisect's own)")
    ap.add_argument("--store", type=Path, default=None,
                    help="keep the runs in this store (with --values, one store per value: FILE.VALUE)")
    ap.add_argument("--quick", action="store_true",
                    help="a small check of the harness: 8 commits, one 50%% series and one null series, one "
                         "calibration round, --reps 3 --max-reps 9 --verify-reps 3 unless given")
    ap.add_argument("--load", type=load_arg, default=None, metavar="steady:N|bursts:N",
                    help="keep N processes busy while bisecting (steady, or in random bursts)")
    ap.add_argument("--json", action="store_true", help="print every bisection as JSON at the end")
    a = ap.parse_args()
    if a.quick:
        a.series, a.null, a.commits, a.calibrate = 1, 1, 8, 1
        a.effects = a.effects or [0.5]
        a.reps, a.max_reps, a.verify_reps = a.reps or 3, a.max_reps or 9, a.verify_reps or 3
    a.effects = a.effects or [0.05, 0.10, 0.50]
    a.null = a.series if a.null is None else a.null
    values = a.values.split(",") if a.values else [None]
    if any(v not in (None, "p10", "median") for v in values) or len(set(values)) != len(values):
        print("bisect_accuracy: --values takes distinct names among p10 and median", file=sys.stderr)
        return 2
    if a.series < 0 or a.null < 0 or a.commits < 2 or a.calibrate < 1:
        print("bisect_accuracy: --series and --null must be 0 or more, --commits 2 or more, --calibrate 1 or more",
              file=sys.stderr)
        return 2
    extra = [x for flag, v in (("--reps", a.reps), ("--max-reps", a.max_reps), ("--verify-reps", a.verify_reps))
             if v is not None for x in (flag, str(v))]
    tmp = tempfile.TemporaryDirectory(prefix="kpd-bisect-acc-")
    work = Path(tmp.name)
    store = a.store or work / "acc.db"
    stores = {v: store if v is None else store.with_name(f"{store.name}.{v}") for v in values}
    load0 = os.getloadavg()
    t0 = time.monotonic()
    print(f"bisect accuracy: {BENCH} on the local target, {a.commits} commits per series, seed {a.seed}; "
          f"bisect {' '.join(extra) or 'with its default repetitions'}; "
          f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs", flush=True)

    groups = []                       # (name, effect or None, n_bad or None)
    if a.series:                      # effects to inject: calibrated first (null series need none)
        try:
            line = calibrate(KPD, store, a.calibrate)
        except HarnessError as e:
            raise SystemExit(f"bisect_accuracy: {e}")
        print(line.describe(), flush=True)
        for e in a.effects:
            nb = line.value_for(e)
            groups.append((f"{e * 100:g}%", e, nb, a.series))
            print(f"  {e * 100:g}%: n = {N_GOOD} -> {nb} (expected {line.expected(nb) * 100:+.1f}%)")
    if a.null:
        groups.append(("null", None, None, a.null))
    if not groups:
        print("bisect_accuracy: nothing to bisect (--series 0 and --null 0)", file=sys.stderr)
        return 2

    # one of each group in turn, positions drawn in that order
    rng = random.Random(a.seed)
    schedule = [(g, i, rng.randint(1, a.commits)) for i in range(max(c for *_, c in groups))
                for g in groups if i < g[3]]
    label = (lambda name, v: name) if values == [None] else (lambda name, v: f"{name} {v}")
    rows = {label(g[0], v): [] for g in groups for v in values}
    busy_text = f", with {a.load[1]} process(es) of its own kept busy ({a.load[0]})" if a.load else ""
    print(f"\n{len(schedule) * len(values)} bisections{busy_text}", flush=True)
    busy = start_load(a.load, a.seed)
    try:
        k = 0
        for j, ((name, effect, nb, _), i, at) in enumerate(schedule):
            good = [f"param={BENCH}:n={N_GOOD}"]
            series = make_series(work / f"{name.rstrip('%')}-{i}", a.commits, at if effect else None, good=good,
                                 bad=[f"param={BENCH}:n={nb}"] if effect else [])
            for v in values if j % 2 == 0 else values[::-1]:
                k += 1
                row = bisect(stores[v], series, extra + (["--value", v] if v else []))
                row.update(group=label(name, v), value=v, series=i, truth=series.culprit, at=at if effect else None,
                           found=position(series, row["culprit"]))
                rows[label(name, v)].append(row)
                verdict = ("ERROR " + row["error"] if row["error"] else "refused" if row["exit"] == 3
                           else "no culprit" if row["culprit"] is None
                           else "exact" if row["culprit"] == series.culprit else "WRONG" if effect else "FALSE CULPRIT")
                print(f"{k:3}/{len(schedule) * len(values)} {label(name, v):>5} #{i + 1}: culprit at {row['at'] or '-':>2}, "
                      f"found {row['found']:>2} ({verdict}{', verified' if row['verified'] else ''}); BAD/GOOD "
                      + (f"{(row['ratio'] - 1) * 100:+.1f}%" if row["ratio"] else "n/a")
                      + (f"; {row['probes']} probes" if row["probes"] is not None else "")
                      + f"; {row['seconds']:.0f} s", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    load1 = os.getloadavg()
    bound = math.ceil(math.log2(a.commits)) + 2
    head = ["effect", "bisections", "exact culprit", "probes mean/max", "bound", "verified", "wrong/false",
            "refused", "no culprit", "errors", "measured BAD/GOOD [min, max]", "wall s"]
    print("\n" + table(head, [summary(label(g[0], v), rows[label(g[0], v)], bound) for g in groups for v in values]))
    print(f"\nbound: ceil(log2 {a.commits}) + 2 probes; wrong/false: a culprit other than the one that changed "
          f"(for null series: any culprit, as a share); verified: culprit significantly slower than its parent")
    print(f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; {time.monotonic() - t0:.0f} s in all")
    if a.json:
        print(json.dumps([r for g in rows.values() for r in g], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
