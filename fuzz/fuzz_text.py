"""Long runs of the text-reader fuzzer (fuzz/fuzzing.py): executions and the count of each outcome.

    .venv/bin/python fuzz/fuzz_text.py --executions 20000 --seed 1 [--save DIR]
    .venv/bin/python fuzz/fuzz_text.py --seconds 600
    .venv/bin/python fuzz/fuzz_text.py --sizes --seconds 600   # the ELF and symbol-map readers
    .venv/bin/python fuzz/fuzz_text.py --maps --seconds 600    # equivalence maps (diff --map)
    .venv/bin/python fuzz/fuzz_text.py --lava --seconds 600    # LAVA job logs and their results frame

Exit status 1 if any input crashed a reader or gave a Profile that breaks an invariant; --save keeps
those inputs (minimise one into tests/data/text/fuzz/ with a test).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from fuzzing import fuzz, fuzz_lava, fuzz_maps, fuzz_sizes  # beside this script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executions", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--save", type=Path, default=None, help="keep failing inputs in this folder")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--sizes", action="store_true",
                       help="fuzz the size-file readers (ELF, System.map, kallsyms) instead of the profile readers")
    which.add_argument("--maps", action="store_true",
                       help="fuzz the equivalence-map reader (diff --map: roles, rules, dispatch)")
    which.add_argument("--lava", action="store_true",
                       help="fuzz the LAVA job-log reader and the results frame decoder (lava:// targets)")
    a = ap.parse_args()
    if a.executions is None and a.seconds is None:
        a.executions = 20000
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        run = fuzz_sizes if a.sizes else fuzz_maps if a.maps else fuzz_lava if a.lava else fuzz
        counts, examples = run(Path(d), executions=a.executions, seconds=a.seconds, seed=a.seed, save=a.save)
    n = sum(counts.values())
    dt = time.monotonic() - t0
    what = "size-file" if a.sizes else "equivalence-map" if a.maps else "LAVA job-log" if a.lava else "text"
    print(f"{what} readers: {n} mutated files in {dt:.0f} s (seed {a.seed}): " +
          ", ".join(f"{counts[k]} {k}" for k in ("ok", "error", "crash", "wrong")))
    for outcome, ex in examples.items():
        for name, detail in ex:
            print(f"  {outcome}: from {name}: {detail[:160]}")
    return 1 if counts["crash"] or counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
