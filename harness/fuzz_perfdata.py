"""Harness (not a test): the perf.data reader's fuzzer, long runs.

Runs the seeded mutation fuzzer of the native reader (native/tests/fuzz/mod.rs,
built as ``native/examples/fuzz_perfdata.rs``) in child processes, so that an
execution that kills its process (an abort from a failed allocation, a stack
overflow, a hang) is counted and the run goes on after it. Each child gets an
address space of at most --memory GiB, so an allocation sized from a damaged
count fails at once instead of swapping the machine.

Prints the executions and the count per class: ok, error (a clean sentence),
panic, wrong (an invariant broken or an unclear error), abort (the child
died), hang (no progress for --timeout seconds), and harness (the fuzzer
failed to make an input); exit status 1 when any but ok and error occurred. The CI's bounded run is ``cargo test`` (tests/fuzz_perfdata.rs).

    python harness/fuzz_perfdata.py [--executions 16000 | --seconds 600] [--seed 1] [--save DIR]

Execution i of a seed is always the same input: reproduce one with
``native/target/release/examples/fuzz_perfdata --seed S --from I --count 1``
or write it out with ``--dump FILE`` in place of ``--count``.
"""
from __future__ import annotations

import argparse
import collections
import resource
import selectors
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "native"
BINARY = NATIVE / "target" / "release" / "examples" / "fuzz_perfdata"
CLASSES = ("ok", "error", "panic", "wrong", "abort", "hang", "harness")
FAILURES = ("panic", "wrong", "abort", "hang", "harness")


def build() -> None:
    subprocess.run(["cargo", "build", "--release", "-q", "--example", "fuzz_perfdata",
                    "--manifest-path", str(NATIVE / "Cargo.toml")], check=True)


def run_batch(seed: int, start: int, count: int, memory_gib: float, timeout: float):
    """Runs executions start.. of one child; yields (index, class, line) and stops where the child died."""
    limit = int(memory_gib * (1 << 30))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    p = subprocess.Popen([str(BINARY), "--seed", str(seed), "--from", str(start), "--count", str(count)],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=cap)
    last = start - 1
    done = False
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    while True:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            p.kill()
            p.wait()
            yield last + 1, "hang", f"{last + 1}\thang\tno result within {timeout:g} s"
            return
        line = p.stdout.readline()
        if not line:
            break
        deadline = time.monotonic() + timeout
        if line.startswith("done"):
            done = True
            continue
        idx, cls = line.split("\t", 2)[:2]
        last = int(idx)
        yield last, cls.strip(), line.rstrip("\n")
    status = p.wait()
    if not done and last + 1 < start + count:
        yield last + 1, "abort", f"{last + 1}\tabort\tthe child died (status {status})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executions", type=int, default=16000, help="how many inputs to run (default 16000)")
    ap.add_argument("--seconds", type=float, help="run for this long instead of a number of executions")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=2000, help="executions per child process")
    ap.add_argument("--memory", type=float, default=4.0, help="address space per child, GiB (default 4)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds without a result before a hang")
    ap.add_argument("--save", type=Path, help="write every failing input to this folder")
    ap.add_argument("--show", type=int, default=5, help="failures listed per class (default 5)")
    ap.add_argument("--no-build", action="store_true", help="use the fuzzer binary as it is")
    args = ap.parse_args(argv)
    if not args.no_build:
        build()
    counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    failed: list[int] = []
    t0 = time.monotonic()
    i = 0
    end = None if args.seconds else args.executions
    while (end is None and time.monotonic() - t0 < args.seconds) or (end is not None and i < end):
        count = args.batch if end is None else min(args.batch, end - i)
        for idx, cls, line in run_batch(args.seed, i, count, args.memory, args.timeout):
            counts[cls] += 1
            i = idx + 1
            if cls in FAILURES:
                failed.append(idx)
                if len(examples[cls]) < args.show:
                    examples[cls].append(line)
    dt = time.monotonic() - t0
    total = sum(counts.values())
    print(f"fuzz_perfdata: seed {args.seed}, {total} executions in {dt:.0f} s")
    print("  " + ", ".join(f"{c} {counts[c]}" for c in CLASSES))
    for cls in FAILURES:
        for line in examples[cls]:
            print(f"  {line}")
    if args.save and failed:
        args.save.mkdir(parents=True, exist_ok=True)
        for idx in failed:
            subprocess.run([str(BINARY), "--seed", str(args.seed), "--from", str(idx), "--dump",
                            str(args.save / f"seed{args.seed}-{idx}.perf.data")], check=True,
                           stdout=subprocess.DEVNULL)
        print(f"  {len(failed)} failing inputs written to {args.save}")
    return 1 if any(counts[c] for c in FAILURES) else 0


if __name__ == "__main__":
    sys.exit(main())
