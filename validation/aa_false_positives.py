"""A/A harness: how often does kperfdiff call a change significant when nothing changed?

Runs the same benchmarks as two separate `kperfdiff bench` runs (a1, then a2),
``--tables`` times, on this machine, compares each pair with `kperfdiff compare
--format json`, and prints per table the cells called significant, then the
false-positive rate: the share of tables with at least one significant cell.
kperfdiff's claim (issue 9) is that this rate is at most 5%.

    .venv/bin/python validation/aa_false_positives.py --tables 20
    .venv/bin/python validation/aa_false_positives.py --tables 20 --precision 3

Every run goes through the real command line into a temporary store (or
``--store``, kept for inspection). Runs are independent pairs: table i compares
runs 2i and 2i+1, so no run is used twice. `compare` of separate runs estimates
the drift between runs from the runs stored so far, so the store grows as a
user's would: table 1 has only its own two runs to go by.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHES = "syscall.null,syscall.stat,signal.catch,proc.fork,fault.anon.4k,mmap.1m,select.file.100,ctx.2p.0k"
KPD = [str(Path(sys.executable).with_name("kperfdiff"))]


def kperfdiff(store: Path, *args: str) -> str:
    p = subprocess.run(KPD + ["--store", str(store), *args], capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"aa_false_positives: kperfdiff {' '.join(args)} failed: {p.stderr.strip()[-300:]}")
    return p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=int, default=20, help="A/A tables (pairs of runs) to make (default 20)")
    ap.add_argument("--only", default=BENCHES, help=f"benchmarks (default: {BENCHES})")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per benchmark and run (default 5)")
    ap.add_argument("--precision", type=float, default=None, help="pass --precision P to bench")
    ap.add_argument("--max-time", type=float, default=None, help="pass --max-time S to bench")
    ap.add_argument("--store", type=Path, default=None, help="keep the runs in this store")
    ap.add_argument("--json", action="store_true", help="print the tables as JSON at the end")
    a = ap.parse_args()
    if a.tables < 1 or a.reps < 1:
        print("aa_false_positives: --tables and --reps must be 1 or more", file=sys.stderr)
        return 2
    tmp = tempfile.TemporaryDirectory(prefix="kpd-aa-")
    store = a.store or Path(tmp.name) / "aa.db"
    extra = ["--reps", str(a.reps)]
    if a.precision:
        extra += ["--precision", str(a.precision)]
    if a.max_time:
        extra += ["--max-time", str(a.max_time)]
    tables = []
    t0 = time.monotonic()
    for i in range(a.tables):
        labels = []
        for side in ("a1", "a2"):
            label = f"aa{i}-{side}"
            kperfdiff(store, "bench", "--only", a.only, *extra, "--label", label, "--no-progress")
            labels.append(label)
        cmp = json.loads(kperfdiff(store, "compare", *labels, "--format", "json"))
        cells = cmp["comparisons"][0]["cells"]
        sig = [f"{c['key']} {c['change']:+.1f}% [{c['low']:+.1f}, {c['high']:+.1f}] q={c['q']:.3f}"
               for c in cells if c["significant"]]
        widths = [(c["high"] - c["low"]) / 2 for c in cells if c["low"] is not None and not math.isnan(c["low"])]
        dist = sum(1 for c in cells if c.get("disturbed"))
        tables.append({"table": i, "cells": len(cells), "tested": cmp["comparisons"][0]["tests"],
                       "significant": sig, "disturbed_cells": dist,
                       "median_half_width_pct": sorted(widths)[len(widths) // 2] if widths else None})
        print(f"table {i + 1:2}/{a.tables}: {len(sig)} of {len(cells)} cells significant"
              + (f" ({'; '.join(sig)})" if sig else "") + (f"; {dist} cells disturbed" if dist else "")
              + f"  [{time.monotonic() - t0:.0f} s]", flush=True)
    fp = sum(1 for t in tables if t["significant"])
    cells = sum(t["cells"] for t in tables)
    fpc = sum(len(t["significant"]) for t in tables)
    print(f"\nA/A false-positive rate: {fp} of {len(tables)} tables ({fp / len(tables):.1%}) had a significant "
          f"cell; {fpc} of {cells} cells ({fpc / max(cells, 1):.1%}); target: at most 5% of tables")
    print(f"benchmarks: {a.only}; {a.reps} repetitions" + (f", --precision {a.precision}" if a.precision else "")
          + f"; {time.monotonic() - t0:.0f} s")
    if a.json:
        print(json.dumps(tables, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
