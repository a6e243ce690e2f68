"""Harness (not a test): the perf.data fuzzer, long runs, through the native reader and through
the paths users take.

Runs the seeded mutation fuzzer of the native reader (native/tests/fuzz/mod.rs,
built as ``native/examples/fuzz_perfdata.rs``) in child processes, so that an
execution that kills its process (an abort from a failed allocation, a stack
overflow, a hang) is counted and the run goes on after it. Each child gets an
address space of at most --memory GiB, so an allocation sized from a damaged
count fails at once instead of swapping the machine.

Then each input goes through what users call, in a Python child process of its
own (the same limits): ``load``, ``load_events``, ``kperfdiff diff FILE
plain.perf.data`` and ``kperfdiff export`` by the CLI's entry point, and every
--cli-every-th input (and each that crashed) by the real CLI in a subprocess
(fuzz/fuzzing.py, ``run_one_perfdata``, has the oracle: sane shares, or an
InputError of one sentence and exit status 2). The inputs lie in a temporary
folder with no kallsyms beside them. --reader-only skips this step.

Prints the executions and the count per class. The reader: ok, error (a clean
sentence), panic, wrong (an invariant broken or an unclear error), abort (the
child died), hang (no progress for --timeout seconds), and harness (the fuzzer
failed to make an input). The load path: ok, error, crash (a traceback, an
exception or an exit status other than 0 and 2), wrong (shares not sane),
abort, hang. Exit status 1 when any failure occurred. The CI's bounded runs are
``cargo test`` (tests/fuzz_perfdata.rs) and tests/ingest/test_fuzz_perfdata.py.

    python fuzz/fuzz_perfdata.py [--executions 16000 | --seconds 600] [--seed 1] [--save DIR]

Execution i of a seed is always the same input (for the same fixtures):
reproduce one with ``native/target/testing/examples/fuzz_perfdata --seed S
--from I --count 1`` or write it out with ``--dump FILE`` in place of ``--count``.
"""
from __future__ import annotations

import argparse
import collections
import os
import resource
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLASSES = ("ok", "error", "panic", "wrong", "abort", "hang", "harness")
FAILURES = ("panic", "wrong", "abort", "hang", "harness")
LOAD_CLASSES = ("ok", "error", "crash", "wrong", "abort", "hang")
LOAD_FAILURES = ("crash", "wrong", "abort", "hang")
from fuzzing import FUZZ_BINARY as BINARY, FUZZ_BUILD, fuzz_line  # noqa: E402 - beside this script: the load path and its oracle


def build() -> None:
    subprocess.run(FUZZ_BUILD, check=True)


def capped(memory_gib: float):
    """A child's set-up: at most ``memory_gib`` of address space, no core file."""
    limit = int(memory_gib * (1 << 30))

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return cap


def results(p: subprocess.Popen, expected: list[int], timeout: float):
    """A child's lines ``INDEX<TAB>CLASS...`` for the executions ``expected`` (in order): yields
    (index, class, line) and stops where the child died (abort) or went silent (hang)."""
    pos = {idx: k for k, idx in enumerate(expected)}
    k = -1
    done = False
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    while True:
        if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
            p.kill()
            p.wait()
            if k + 1 < len(expected):
                yield expected[k + 1], "hang", f"{expected[k + 1]}\thang\tno result within {timeout:g} s"
            return
        line = p.stdout.readline()
        if not line:
            break
        deadline = time.monotonic() + timeout
        if line.startswith("done"):
            done = True
            continue
        idx, cls = line.split("\t", 2)[:2]
        k = pos[int(idx)]
        yield int(idx), cls.strip(), line.rstrip("\n")
    status = p.wait()
    if not done and k + 1 < len(expected):
        yield expected[k + 1], "abort", f"{expected[k + 1]}\tabort\tthe child died (status {status})"


def run_batch(seed: int, start: int, count: int, memory_gib: float, timeout: float, dump_dir: Path | None = None):
    """Runs executions start.. of one child; yields (index, class, line) and stops where the child died.
    ``dump_dir``: the child also writes each input there, as INDEX.perf.data."""
    dump = ["--dump-dir", str(dump_dir)] if dump_dir else []
    p = subprocess.Popen([str(BINARY), "--seed", str(seed), "--from", str(start), "--count", str(count), *dump],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=capped(memory_gib))
    yield from results(p, list(range(start, start + count)), timeout)


def run_load_path(folder: Path, items: list[tuple[int, str]], memory_gib: float, timeout: float, cli_every: int,
                  env: dict):
    """The load path over folder/INDEX.perf.data for ``items`` (index, seed fixture), in worker
    processes (a new one after one dies); yields (index, class, line)."""
    while items:
        (folder / "items.txt").write_text("".join(f"{i}\t{f}\n" for i, f in items))
        p = subprocess.Popen([sys.executable, __file__, "--worker", str(folder), "--cli-every", str(cli_every)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                             preexec_fn=capped(memory_gib))
        last = None
        for idx, cls, line in results(p, [i for i, _ in items], timeout):
            last = idx
            yield idx, cls, line
        if last is None:
            return
        items = items[[i for i, _ in items].index(last) + 1:]


def worker(folder: Path, cli_every: int) -> int:
    """The load path's child: reads folder/items.txt, prints ``INDEX<TAB>CLASS<TAB>DETAIL`` each, then ``done N``."""
    from fuzzing import run_one_perfdata
    items = [line.split("\t") for line in (folder / "items.txt").read_text().splitlines()]
    work = folder / "work"
    work.mkdir(exist_ok=True)
    for idx, fixture in items:
        i = int(idx)
        outcome, detail = run_one_perfdata(folder / f"{i}.perf.data", fixture, i, work,
                                           cli=bool(cli_every) and i % cli_every == 0)
        detail = detail.replace("\t", " ").replace("\n", " ")
        print(f"{i}\t{outcome}\t{detail}\t{fixture}", flush=True)
    print(f"done {len(items)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--executions", type=int, default=16000, help="how many inputs to run (default 16000)")
    ap.add_argument("--seconds", type=float, help="run for this long instead of a number of executions")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, help="executions per child process (default 2000; 250 with the load path, "
                                              "whose inputs are written out)")
    ap.add_argument("--memory", type=float, default=4.0, help="address space per child, GiB (default 4)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds without a result before a hang")
    ap.add_argument("--save", type=Path, help="write every failing input to this folder")
    ap.add_argument("--show", type=int, default=5, help="failures listed per class (default 5)")
    ap.add_argument("--no-build", action="store_true", help="use the fuzzer binary as it is")
    ap.add_argument("--reader-only", action="store_true", help="fuzz the native reader only, not the load path")
    ap.add_argument("--cli-every", type=int, default=50, metavar="N",
                    help="run every N-th input through the real CLI too, a subprocess (default 50; 0: none)")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.cli_every)
    if not args.no_build:
        build()
    load_path = not args.reader_only
    batch = args.batch or (250 if load_path else 2000)
    counts: collections.Counter[str] = collections.Counter()
    load_counts: collections.Counter[str] = collections.Counter()
    examples: dict[str, list[str]] = collections.defaultdict(list)
    load_examples: dict[str, list[str]] = collections.defaultdict(list)
    failed: list[int] = []
    load_failed = 0
    t0 = time.monotonic()
    i = 0
    end = None if args.seconds else args.executions
    with tempfile.TemporaryDirectory(prefix="kpd-fuzz-perfdata-") as tmp:
        folder = Path(tmp) / "inputs"      # no kallsyms beside the inputs
        home = Path(tmp) / "home"          # no perf build-id cache either
        home.mkdir()
        env = dict(os.environ, HOME=str(home), KPERFDIFF_STATE_DIR=str(Path(tmp) / "state"))
        while (end is None and time.monotonic() - t0 < args.seconds) or (end is not None and i < end):
            count = batch if end is None else min(batch, end - i)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            items = []
            for idx, cls, line in run_batch(args.seed, i, count, args.memory, args.timeout,
                                            folder if load_path else None):
                counts[cls] += 1
                i = idx + 1
                if cls in FAILURES:
                    failed.append(idx)
                    if len(examples[cls]) < args.show:
                        examples[cls].append(line)
                elif load_path:
                    items.append(fuzz_line(line)[:2])
            if load_path:
                for idx, cls, line in run_load_path(folder, items, args.memory, args.timeout, args.cli_every, env):
                    load_counts[cls] += 1
                    if cls in LOAD_FAILURES:
                        load_failed += 1
                        if len(load_examples[cls]) < args.show:
                            load_examples[cls].append(line)
                        if args.save:
                            args.save.mkdir(parents=True, exist_ok=True)
                            shutil.copy(folder / f"{idx}.perf.data", args.save / f"load-seed{args.seed}-{idx}.perf.data")
    dt = time.monotonic() - t0
    total = sum(counts.values())
    print(f"fuzz_perfdata: seed {args.seed}, {total} executions in {dt:.0f} s")
    print("  reader: " + ", ".join(f"{c} {counts[c]}" for c in CLASSES))
    for cls in FAILURES:
        for line in examples[cls]:
            print(f"  {line}")
    if load_path:
        print(f"  load path ({sum(load_counts.values())} inputs the reader read or refused cleanly; "
              f"every {args.cli_every}th also by the CLI): " + ", ".join(f"{c} {load_counts[c]}" for c in LOAD_CLASSES))
        for cls in LOAD_FAILURES:
            for line in load_examples[cls]:
                print(f"  {line}")
    if args.save and failed:
        args.save.mkdir(parents=True, exist_ok=True)
        for idx in failed:
            subprocess.run([str(BINARY), "--seed", str(args.seed), "--from", str(idx), "--dump",
                            str(args.save / f"seed{args.seed}-{idx}.perf.data")], check=True,
                           stdout=subprocess.DEVNULL)
    if args.save and (failed or load_failed):
        print(f"  {len(failed) + load_failed} failing inputs written to {args.save}")
    return 1 if any(counts[c] for c in FAILURES) or load_failed else 0


if __name__ == "__main__":
    sys.exit(main())
