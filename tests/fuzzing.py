"""A seeded mutation fuzzer over the text profile readers (perf script, perf report --stdio, folded
stacks), shared by tests/test_fuzz_text.py (bounded, in CI) and harness/fuzz_text.py (long runs).

Each execution mutates a seed taken from tests/data/text, writes it to a file and reads it the way
`kperfdiff diff` does (sniff, then load). The outcome is one of:

* ``ok``: a Profile that keeps every invariant below;
* ``error``: a KperfdiffError (one sentence for the user);
* ``crash``: any other exception (a traceback for the user: a bug);
* ``wrong``: a Profile that breaks an invariant (a number the user would trust: a bug).

Invariants (the oracle): the total weight is finite and above 0; every self and children weight and
every stack weight is finite and not negative; no function's self or children share is above 100%;
the self shares add up to at most 100% (plus 0.005% a row: perf report rounds each to 0.01%); the
sample count is a whole number >= 0.
"""
from __future__ import annotations

import math
import random
import re
import time
from collections import Counter
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
TEXT_SEEDS = DATA / "text"
SEED_BYTES = 6000      # seeds are the fixtures' first lines, so an execution takes milliseconds

INTERESTING = [b"0", b"-1", b"1e308", b"1e999", b"nan", b"inf", b"-inf", b"9" * 400, b"18446744073709551615",
               b"18446744073709551616", b"999.99", b"100.01", b"-0.5", b"0x10", b"1.7976931348623157e308",
               b"4294967295", b"", b"00000000000000000000000001"]
NUMBER = re.compile(rb"\d+(?:\.\d+)?")
PERCENT = re.compile(rb"\d+\.\d+%")


def seeds() -> list[tuple[str, bytes]]:
    out = []
    for p in sorted(TEXT_SEEDS.iterdir()):
        if p.name == "README" or not p.is_file():
            continue
        data = p.read_bytes()
        if len(data) > SEED_BYTES:
            cut = data.rfind(b"\n", 0, SEED_BYTES)
            data = data[:cut + 1]
        out.append((p.name, data))
    return out


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits of the kinds that break text readers."""
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(11)
        if kind == 0 or kind == 1:                     # a number becomes an interesting one
            nums = list(NUMBER.finditer(data))
            if nums:
                m = rng.choice(nums)
                data = data[:m.start()] + rng.choice(INTERESTING) + data[m.end():]
        elif kind == 2:                                # a percentage above 100
            pcts = list(PERCENT.finditer(data))
            if pcts:
                m = rng.choice(pcts)
                data = data[:m.start()] + rng.choice([b"999.99%", b"100.01%", b"1e3%", b"-5.00%"]) + data[m.end():]
        elif kind == 3:                                # duplicate a line (many times)
            ls = _lines(data)
            i = rng.randrange(len(ls))
            ls[i:i] = [ls[i]] * rng.choice([1, 2, 50])
            data = b"\n".join(ls)
        elif kind == 4:                                # delete a line
            ls = _lines(data)
            del ls[rng.randrange(len(ls))]
            data = b"\n".join(ls)
        elif kind == 5:                                # truncate
            data = data[:rng.randrange(len(data) + 1)]
        elif kind == 6:                                # flip bytes
            b = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                if b:
                    b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        elif kind == 7:                                # insert NUL or invalid UTF-8
            i = rng.randrange(len(data) + 1)
            data = data[:i] + rng.choice([b"\0", b"\xff\xfe", b"\xc3", b"\r"]) + data[i:]
        elif kind == 8:                                # a very long line
            i = data.find(b"\n", rng.randrange(len(data) + 1))
            i = len(data) if i < 0 else i + 1
            data = data[:i] + b"a;" * rng.choice([100, 40000]) + b"b 1\n" + data[i:]
        elif kind == 9:                                # swap two lines
            ls = _lines(data)
            i, j = rng.randrange(len(ls)), rng.randrange(len(ls))
            ls[i], ls[j] = ls[j], ls[i]
            data = b"\n".join(ls)
        else:                                          # splice a piece of the data elsewhere
            if data:
                a = rng.randrange(len(data))
                b2 = min(len(data), a + rng.randint(1, 400))
                i = rng.randrange(len(data) + 1)
                data = data[:i] + data[a:b2] + data[i:]
    return data


def invariant_problem(prof) -> str | None:
    """What is wrong with a Profile a reader returned, or None (see the module text)."""
    import numpy as np
    t = prof.total_weight
    if not (isinstance(t, float) and math.isfinite(t) and t > 0):
        return f"total weight {t!r}"
    for name, arr in (("self", prof.self_weight), ("children", prof.children_weight)):
        if len(arr) and (not np.all(np.isfinite(arr)) or np.any(arr < 0)):
            return f"a {name} weight is negative or not finite"
    for name, arr in (("self", prof.self_weight), ("children", prof.children_weight)):
        if len(arr) and arr.max() > t * (1 + 1e-9):
            return f"a {name} share of {100 * arr.max() / t:.2f}%"
    # perf report prints shares rounded to 0.01%: each row may be up to 0.005% high
    if prof.self_weight.sum() > t * (1 + 0.00005 * len(prof.symbols) + 1e-9):
        return f"self weights add up to {100 * prof.self_weight.sum() / t:.2f}% of the total"
    if any(not math.isfinite(w) or w < 0 for w in prof.stacks.values()):
        return "a stack weight is negative or not finite"
    if not isinstance(prof.samples, int) or prof.samples < 0:
        return f"sample count {prof.samples!r}"
    return None


def run_one(path: Path) -> tuple[str, str]:
    """Read ``path`` as `kperfdiff diff` does; (outcome, detail)."""
    from kperfdiff.errors import KperfdiffError
    from kperfdiff.ingest.load import load
    try:
        prof = load(path)
    except KperfdiffError as e:
        return "error", str(e)
    except Exception as e:   # noqa: BLE001 - classifying every failure is the point
        return "crash", f"{type(e).__name__}: {e}"
    problem = invariant_problem(prof)
    return ("wrong", problem) if problem else ("ok", "")


def fuzz(workdir: Path, *, executions: int | None = None, seconds: float | None = None, seed: int = 1,
         save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """Run the fuzzer; returns counts per outcome and up to 5 (seed name, detail) examples per failure
    outcome. ``save`` keeps every failing input there."""
    rng = random.Random(seed)
    corpus = seeds()
    counts: Counter = Counter()
    examples: dict[str, list[tuple[str, str]]] = {}
    deadline = time.monotonic() + seconds if seconds else None
    path = workdir / "input"
    n = 0
    while (executions is None or n < executions) and (deadline is None or time.monotonic() < deadline):
        name, data = rng.choice(corpus)
        mutated = mutate(data, rng)
        path.write_bytes(mutated)
        outcome, detail = run_one(path)
        counts[outcome] += 1
        if outcome in ("crash", "wrong"):
            ex = examples.setdefault(outcome, [])
            if len(ex) < 5:
                ex.append((name, detail))
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                (save / f"{outcome}-{n}-{name}").write_bytes(mutated)
        n += 1
    return counts, examples
