"""A seeded mutation fuzzer over the text profile readers (perf script, perf report --stdio, folded
stacks), shared by tests/ingest/test_fuzz_text.py (bounded, in CI) and fuzz/fuzz_text.py (long runs).

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

import json
import math
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
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
    from kperfdiff.core.errors import KperfdiffError
    from kperfdiff.ingest.load import load
    try:
        prof = load(path)
    except KperfdiffError as e:
        return "error", str(e)
    except Exception as e:   # noqa: BLE001 - classifying every failure is the point
        return "crash", f"{type(e).__name__}: {e}"
    problem = invariant_problem(prof)
    return ("wrong", problem) if problem else ("ok", "")


def _fuzz_loop(corpus, one, *, executions, seconds, seed, save) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """The loop every fuzzer here shares: pick a seed, let ``one(name, data, rng)`` mutate and read it
    (returning the mutated bytes, the outcome and its detail), count, keep examples and failing inputs."""
    rng = random.Random(seed)
    counts: Counter = Counter()
    examples: dict[str, list[tuple[str, str]]] = {}
    deadline = time.monotonic() + seconds if seconds else None
    n = 0
    while (executions is None or n < executions) and (deadline is None or time.monotonic() < deadline):
        name, data = rng.choice(corpus)
        mutated, outcome, detail = one(name, data, rng)
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


def fuzz(workdir: Path, *, executions: int | None = None, seconds: float | None = None, seed: int = 1,
         save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """Run the fuzzer; returns counts per outcome and up to 5 (seed name, detail) examples per failure
    outcome. ``save`` keeps every failing input there."""
    return _fuzz_text_files(seeds(), workdir / "input", run_one, executions=executions, seconds=seconds,
                            seed=seed, save=save)


def _fuzz_text_files(corpus, path: Path, read, **loop) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """The loop over text files: mutate a seed with the text edits, write it to ``path``, ``read(path)``."""
    def one(_name, data, rng):
        mutated = mutate(data, rng)
        path.write_bytes(mutated)
        return (mutated, *read(path))
    return _fuzz_loop(corpus, one, **loop)


# -- size files: ELF and System.map/kallsyms (the native readers behind `kperfdiff place --sizes`
# and kperfdiff.targets.guest.elf) ------------------------------------------------------------------
#
# Seeds: the ELF files of tests/data/elf (objects of four architectures and both byte orders, a
# shared library, a dynamic arm64 program, stripped and not) and the symbol maps of tests/data/place.
# An ELF seed gets one to four ELF-aware edits (a header, program header, section header, symbol or
# dynamic entry field set to an interesting value in the file's byte order, bytes flipped, a cut
# anywhere or at a structure's start, a splice); a map seed the text edits above. Each input is read
# by kperfdiff.targets.guest.elf (parse with sections, modinfo) and by load_sizes. Outcomes as above:
# ``crash`` is any exception but a KperfdiffError, or an "internal error" (a caught native panic);
# ``wrong`` is an error that is not one line, a result that breaks an invariant (bits 32/64, str
# names, sections no longer than the file, sizes above 0, addresses in 0..2^64) or, for text, a
# native symbol map that differs from map_reading's (the line grammar, stated again in Python).

ELF_SEEDS = DATA / "elf"
MAP_SEEDS = [DATA / "place" / "System.map", DATA / "place" / "modules.kallsyms"]
# The kallsyms/System.map line grammar of native/src/kallsyms.rs, stated again as the oracle:
# fields split at ASCII whitespace; an optional '+' and hex digits up to 2^64; the type is the first
# byte of the second field; a fourth field starting with '[' names a module.
MAP_SPACE = re.compile(r"[ \t\n\x0c\r]+")
HEX_DIGITS = set("0123456789abcdefABCDEF")
ELF_WANT = (".text", ".modinfo", ".symtab", ".init.text")


def size_seeds() -> list[tuple[str, bytes]]:
    out = []
    for d in (ELF_SEEDS, ELF_SEEDS / "fuzz"):
        if d.is_dir():
            for p in sorted(d.iterdir()):
                if p.is_file() and p.read_bytes()[:4] == b"\x7fELF":
                    out.append((p.name, p.read_bytes()))
    out += [(p.name, p.read_bytes()) for p in MAP_SEEDS]
    return out


def elf_fields(b: bytes) -> list[tuple[int, int]]:
    """(offset, width) of the fields an ELF reader trusts: header, program and section headers, the
    first symbols of each symbol table and the first dynamic entries (the fuzzer's own map of the file)."""
    import struct
    if len(b) < 52 or b[:4] != b"\x7fELF" or b[4] not in (1, 2) or b[5] not in (1, 2):
        return [(4, 1), (5, 1)]
    is64, e = b[4] == 2, "<" if b[5] == 1 else ">"
    w = 8 if is64 else 4
    out = [(4, 1), (5, 1), (6, 1), (16, 2), (18, 2)]
    try:
        if is64:
            out += [(32, 8), (40, 8), (54, 2), (56, 2), (58, 2), (60, 2), (62, 2)]
            phoff, shoff = struct.unpack_from(e + "QQ", b, 32)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", b, 54)
            ph = [(0, 4), (8, 8), (16, 8), (32, 8)]                 # type, offset, vaddr, filesz
            sh = [(0, 4), (4, 4), (24, 8), (32, 8), (40, 4)]        # name, type, offset, size, link
            sym = [(0, 4), (4, 1), (6, 2), (8, 8), (16, 8)]         # name, info, shndx, value, size
        else:
            out += [(28, 4), (32, 4), (42, 2), (44, 2), (46, 2), (48, 2), (50, 2)]
            phoff, shoff = struct.unpack_from(e + "II", b, 28)
            phentsize, phnum, shentsize, shnum = struct.unpack_from(e + "HHHH", b, 42)
            ph = [(0, 4), (4, 4), (8, 4), (16, 4)]
            sh = [(0, 4), (4, 4), (16, 4), (20, 4), (24, 4)]
            sym = [(0, 4), (4, 4), (8, 4), (12, 1), (14, 2)]
        for i in range(min(phnum, 32)):
            base = phoff + i * phentsize
            out += [(base + o, n) for o, n in ph]
            p_type, = struct.unpack_from(e + "I", b, base)
            if p_type == 2:                                        # PT_DYNAMIC: its first entries
                off = struct.unpack_from(e + ("Q" if is64 else "I"), b, base + ph[1][0])[0]
                out += [(off + j * w, w) for j in range(32)]
        for i in range(min(shnum, 64)):
            base = shoff + i * shentsize
            out += [(base + o, n) for o, n in sh]
            s_type, = struct.unpack_from(e + "I", b, base + 4)
            if s_type in (2, 11):                                  # SHT_SYMTAB, SHT_DYNSYM
                off = struct.unpack_from(e + ("Q" if is64 else "I"), b, base + sh[2][0])[0]
                size = 24 if is64 else 16
                out += [(off + j * size + o, n) for j in range(1, 48) for o, n in sym]
    except (struct.error, OverflowError):           # the file's own offsets lie outside it
        pass
    return [(o, n) for o, n in out if 0 <= o and o + n <= len(b)]


def mutate_elf(data: bytes, rng: random.Random) -> bytes:
    """One to four ELF-aware edits (see the section text)."""
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        kind = rng.randrange(8)
        if kind <= 3:                                  # a field the reader trusts = an interesting value
            fields = elf_fields(data)
            if fields:
                off, n = rng.choice(fields)
                v = rng.choice([0, 1, 2, 3, 7, 8, 0x7f, 0x80, 0xff, 0xffff, 0xfff0, 0x7fffffff, 0x80000000,
                                0xffffffff, 1 << 32, 1 << 63, (1 << 64) - 1, len(data), len(data) + 1,
                                len(data) - 1, rng.randrange(len(data) + 1)]) & ((1 << (8 * n)) - 1)
                big = len(data) > 5 and data[5] == 2
                data = data[:off] + v.to_bytes(n, "big" if big else "little") + data[off + n:]
        elif kind == 4:                                # flip bytes
            b = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            data = bytes(b)
        elif kind == 5:                                # cut anywhere
            data = data[:rng.randrange(len(data) + 1)]
        elif kind == 6:                                # cut where a structure starts (or inside it)
            fields = elf_fields(data)
            if fields:
                off, n = rng.choice(fields)
                data = data[:off + rng.randrange(n + 1)]
        else:                                          # splice a piece of the file elsewhere
            a = rng.randrange(len(data))
            piece = data[a:a + rng.randint(1, 256)]
            i = rng.randrange(len(data) + 1)
            data = data[:i] + piece + data[i + (len(piece) if rng.randrange(2) else 0):]
    return data


def map_reading(data: bytes) -> tuple:
    """What the line grammar reads in a symbol map: (addrs, types, names, any module, bad lines)."""
    addrs, types, names, modules, bad = [], [], [], False, 0
    for line in data.decode("utf-8", "replace").split("\n"):
        fields = [x for x in MAP_SPACE.split(line) if x]
        if not fields:
            continue
        a = fields[0][1:] if fields[0].startswith("+") else fields[0]
        if len(fields) < 3 or not a or not set(a) <= HEX_DIGITS or int(a, 16) >= 1 << 64:
            bad += 1
            continue
        modules = modules or (len(fields) > 3 and fields[3].startswith("["))
        addrs.append(int(a, 16))
        types.append(chr(fields[1].encode("utf-8")[0]))
        names.append(fields[2])
    return addrs, "".join(types), names, modules, bad


def _one_line(e: Exception) -> str | None:
    msg = str(e)
    if not msg.strip() or "\n" in msg:
        return f"an error that is not one line: {msg!r}"
    if "internal error" in msg or "panicked" in msg:
        return "crash:" + msg
    return None


def size_problem(st, data: bytes) -> str | None:
    """What is wrong with a SizeTable a reader returned, or None."""
    if st.kind not in ("vmlinux", "System.map", "kallsyms") or not st.sizes:
        return f"kind {st.kind!r} with {len(st.sizes)} sizes"
    for name, size in st.sizes.items():
        if not isinstance(name, str) or not isinstance(size, int) or size <= 0:
            return f"size {size!r} of {name!r}"
        a = st.addrs.get(name)
        if not isinstance(a, int) or not 0 <= a < 1 << 64:
            return f"address {a!r} of {name!r}"
    if not set(st.excluded) <= set(st.sizes):
        return "an excluded function without a size"
    return None


def run_one_size(path: Path, data: bytes) -> tuple[str, str]:
    """Read ``data`` (also at ``path``) as kperfdiff does: targets.guest.elf and load_sizes; (outcome, detail)."""
    from kperfdiff import native
    from kperfdiff.core.errors import KperfdiffError
    from kperfdiff.place.inputs import load_sizes
    from kperfdiff.targets.guest import elf
    steps = [("load_sizes", lambda: load_sizes(path))]
    if data[:4] == b"\x7fELF":
        steps += [("elf.parse", lambda: elf.parse(data, ELF_WANT)), ("elf.modinfo", lambda: elf.modinfo(data))]
    else:
        steps.append(("symbol_map", lambda: native.symbol_map(data)))
    outcome = "ok"
    for what, step in steps:
        try:
            got = step()
        except KperfdiffError as e:
            problem = _one_line(e)
            if problem:
                return ("crash", f"{what}: {problem[6:]}") if problem.startswith("crash:") else ("wrong", f"{what}: {problem}")
            outcome = "error"
            continue
        except Exception as e:   # noqa: BLE001 - classifying every failure is the point
            return "crash", f"{what}: {type(e).__name__}: {e}"
        if what == "load_sizes":
            problem = size_problem(got, data)
        elif what == "elf.parse":
            ok = (got.bits in (32, 64) and isinstance(got.machine, str) and got.machine
                  and all(isinstance(n, str) for n in got.needed) and (got.interp is None or isinstance(got.interp, str))
                  and set(got.sections) <= set(ELF_WANT) and all(len(s) <= len(data) for s in got.sections.values()))
            problem = None if ok else f"an Elf that breaks an invariant: {got!r:.200}"
        elif what == "elf.modinfo":
            problem = None if isinstance(got, dict) else f"modinfo {got!r:.100}"
        else:
            want = map_reading(data)
            have = (got["addrs"], got["types"], got["names"], got["modules"], got["bad"])
            problem = None if have == want else "the native symbol map differs from map_reading's"
        if problem:
            return "wrong", f"{what}: {problem}"
    return outcome, ""


def fuzz_sizes(workdir: Path, *, executions: int | None = None, seconds: float | None = None, seed: int = 1,
               save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """The size-file fuzzer (see the section text); as ``fuzz``."""
    def one(name, data, rng):
        mutated = mutate_elf(data, rng) if data[:4] == b"\x7fELF" else mutate(data, rng)
        path = workdir / (name if data[:4] != b"\x7fELF" else "input")   # a map's name tells its kind
        path.write_bytes(mutated)
        return (mutated, *run_one_size(path, mutated))
    return _fuzz_loop(size_seeds(), one, executions=executions, seconds=seconds, seed=seed, save=save)


# -- equivalence maps (`kperfdiff diff --map FILE`): TOML with [[role]], [[rule]] and [dispatch] ---
#
# Seeds: the shipped table and a small map with every kind of table. Mutations: the text edits
# above. A map is read as `diff --map` reads it (merged over the shipped table); the outcome is
# ok, a one-sentence InputError, or a crash. "wrong": a rule that renames a name to "" or a
# renaming that changes on a second application (rules are applied once, in order, so the
# result must be stable for the role lookup that applies them again).

MAP_FILE_SEEDS = [ROOT / "src" / "kperfdiff" / "symbols" / "equivalence.toml"]
SMALL_MAP = b"""version = 1
[dispatch]
arm64 = ["el0t_64_sync"]
[[rule]]
name = "mine"
prefixes = ["__my_", "__x64_sys_"]
suffixes = ["_fast"]
becomes = "my_"
only = ["my_clone"]
[[role]]
name = "getpid"
note = "a role"
arm64 = ["invoke_syscall"]
x86_64 = ["do_syscall_64"]
"""
PROBES = ["__x64_sys_clone", "__arm64_sys_clone", "memset_erms", "__memmove", "__my_clone", "clone_fast",
          "el0t_64_sync", "do_syscall_64", "", "x", "__", "_erms"]


def map_seeds() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in MAP_FILE_SEEDS] + [("small.toml", SMALL_MAP)]


def run_map(path: Path) -> tuple[str, str]:
    from kperfdiff.core.errors import KperfdiffError
    from kperfdiff.symbols.equivalence import load_roles
    try:
        table = load_roles([path])
        for name in PROBES:
            once = table.canonical(name)
            if name and not once:
                return "wrong", f"{name!r} renamed to an empty name"
            table.role_of(name)
    except KperfdiffError as e:
        return "error", str(e)
    except Exception as e:   # noqa: BLE001 - classifying every failure is the point
        return "crash", f"{type(e).__name__}: {e}"
    return "ok", ""


def fuzz_maps(workdir: Path, *, executions: int | None = None, seconds: float | None = None, seed: int = 1,
              save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    return _fuzz_text_files(map_seeds(), workdir / "map.toml", run_map, executions=executions, seconds=seconds,
                            seed=seed, save=save)


# -- LAVA job logs (`kperfdiff run` on lava:// targets): the log reader and the results frame ---------
#
# Seeds: the recorded log of an incomplete job, and a complete job's log cut down to a few kilobytes:
# its first and last records as LAVA wrote them around a small results frame (a real results folder
# of the recorded job, facts and one benchmark, framed as the device frames it, one record a line).
# Mutations: the text edits above. Each input is read as kperfdiff reads a finished job's log
# (targets.lava.log: records, then the frame decoded and unpacked). Outcomes as above; ``wrong`` is
# an error that is not one line, or a results folder holding anything but files and folders inside it.

LAVA_DATA = DATA / "lava"


def _lava_record(msg: str) -> bytes:
    return ('- {"dt": "2026-01-01T00:00:00.000000", "lvl": "target", "msg": ' + json.dumps(msg) + "}\n").encode()


def lava_seeds() -> list[tuple[str, bytes]]:
    import base64
    import gzip
    import hashlib
    import io
    import tarfile
    from kperfdiff.targets.lava import log as joblog
    lines = (LAVA_DATA / "job-complete.log").read_bytes().splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if b"KPD-TAR-BEGIN" in ln)
    end = next(i for i, ln in enumerate(lines) if b"KPD-TAR-END" in ln)
    with tempfile.TemporaryDirectory() as d:
        out = joblog.results_folder(joblog.read(LAVA_DATA / "job-complete.log"), Path(d) / "out", "seed")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name in ("facts/machine", "facts/release", "facts/thp", "i1/status", "i1/c0.out"):
                tf.add(out / name, arcname=f"./{name}")
    gz = gzip.compress(buf.getvalue(), mtime=0)
    frame = [_lava_record(f"KPD-TAR-BEGIN {len(gz)} {hashlib.sha256(gz).hexdigest()}")]
    frame += [_lava_record(ln) for ln in base64.encodebytes(gz).decode().splitlines()]
    small = b"".join(lines[:12] + lines[start - 6:start] + frame + lines[end:end + 12])
    return [("job-incomplete.log", (LAVA_DATA / "job-incomplete.log").read_bytes()), ("job-complete-small.log", small)]


def run_one_lava(path: Path, workdir: Path) -> tuple[str, str]:
    """Read a job log as kperfdiff reads a finished job's; (outcome, detail)."""
    from kperfdiff.core.errors import KperfdiffError
    from kperfdiff.targets.lava import log as joblog
    out = workdir / "out"
    shutil.rmtree(out, ignore_errors=True)
    try:
        log = joblog.read(path)
        if "\n" in log.reason():
            return "wrong", f"a reason of several lines: {log.reason()[:80]!r}"
        joblog.results_folder(log, out, "the fuzzed log")
    except KperfdiffError as e:
        problem = _one_line(e)
        return ("wrong", problem) if problem else ("error", str(e))
    except Exception as e:   # noqa: BLE001 - classifying every failure is the point
        return "crash", f"{type(e).__name__}: {e}"
    root = out.resolve()
    for p in out.rglob("*"):
        if p.is_symlink() or not (p.is_file() or p.is_dir()) or root not in p.resolve().parents:
            return "wrong", f"the results folder holds {p.relative_to(out)}, not a plain file or folder inside it"
    return "ok", ""


def fuzz_lava(workdir: Path, *, executions: int | None = None, seconds: float | None = None, seed: int = 1,
              save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """The LAVA job-log fuzzer (see the section text); as ``fuzz``."""
    return _fuzz_text_files(lava_seeds(), workdir / "job.log", lambda p: run_one_lava(p, workdir),
                            executions=executions, seconds=seconds, seed=seed, save=save)


# -- perf.data through the paths users take: load, load_events, diff and export --------------------
#
# Inputs: the native reader's mutation fuzzer (native/tests/fuzz/mod.rs: one to four edits of a
# recording of tests/data/perfdata: bits, bytes, header, attribute and feature-section fields,
# records, cuts, splices), written out by its program (native/examples/fuzz_perfdata.rs --dump-dir)
# into a folder of their own, with no kallsyms beside them. The seeds recorded in the boot of the
# folder's kallsyms.gz (SAME_BOOT) are read with it on even executions, so that symbolisation is
# fuzzed too; the others never are (it belongs to another kernel, and a refusal for that would
# hide what the input does further on). Each input is read as users read it:
#
# * ``load`` and ``load_events`` (kperfdiff.ingest.load): a Profile per event;
# * ``kperfdiff diff FILE plain.perf.data --format json --scope all --top 0``, by the CLI's own
#   entry point (kperfdiff.commands.main) in this process;
# * ``kperfdiff export FILE --to FORMAT`` the same way, the format taking turns;
# * every ``cli_every``-th input, and each that crashed in this process (to tell what the user
#   sees of it), by the real CLI in a subprocess (`kperfdiff diff FILE plain.perf.data`).
#
# Outcomes: ``ok``; ``error``: some step refused with an InputError (one sentence, exit status 2);
# ``crash``: any other exception, a traceback or an exception's name on stderr, an exit status
# other than 0 and 2, an error of several lines; ``wrong``: a profile or a diff whose shares are not
# sane: the profile's (invariant_problem), its self weights and stacks not adding up to its total,
# a stack naming a symbol of another event, an empty profile with weight (samples that all weigh
# 0, as periods of 0, are no shares to judge, and pass); a diff share that is
# negative, not finite or above 100%, or side A's shares not adding up to 100%.

PERFDATA = DATA / "perfdata"
PLAIN = PERFDATA / "plain.perf.data"
FOLDER_KALLSYMS = PERFDATA / "kallsyms.gz"
SAME_BOOT = {"plain.perf.data", "truncated.perf.data", "group.perf.data"}   # tests/data/perfdata/README.md
EXPORTS = ("speedscope", "pprof", "firefox", "folded")
NATIVE = ROOT / "native"
# the tests' build (native/Cargo.toml's `testing` profile: `make test-native` builds it too)
FUZZ_BINARY = NATIVE / "target" / "testing" / "examples" / "fuzz_perfdata"
FUZZ_BUILD = ["cargo", "build", "--profile", "testing", "-q", "--example", "fuzz_perfdata",
              "--manifest-path", str(NATIVE / "Cargo.toml")]
CLI = Path(sys.executable).with_name("kperfdiff")


def build_fuzz_binary() -> Path:
    """The native fuzzer's program (`make test-native` builds it too); built when missing or
    older than its source."""
    sources = [NATIVE / "examples" / "fuzz_perfdata.rs", NATIVE / "tests" / "fuzz" / "mod.rs"]
    if not FUZZ_BINARY.exists() or FUZZ_BINARY.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        built = subprocess.run(FUZZ_BUILD, capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"cargo could not build {FUZZ_BINARY} (exit {built.returncode}):\n{built.stderr}")
    return FUZZ_BINARY


def perfdata_inputs(folder: Path, seed: int, start: int, count: int) -> list[tuple[int, str, str]]:
    """Executions start.. of the native fuzzer written to folder/INDEX.perf.data: (index, seed
    fixture, mutations) each, in order."""
    out = subprocess.run([str(build_fuzz_binary()), "--seed", str(seed), "--from", str(start), "--count", str(count),
                          "--dump-dir", str(folder)], capture_output=True, text=True, check=True, timeout=600).stdout
    inputs = [fuzz_line(line) for line in out.splitlines() if not line.startswith("done")]
    if len(inputs) != count or not all((folder / f"{i}.perf.data").is_file() for i, _, _ in inputs):
        raise RuntimeError(f"{FUZZ_BINARY} wrote {len(inputs)} of {count} inputs to {folder}; rebuild it "
                           f"({' '.join(FUZZ_BUILD)})")
    return inputs


def fuzz_line(line: str) -> tuple[int, str, str]:
    """(index, seed fixture, mutations) of a line of the native fuzzer's --dump-dir output."""
    fields = line.rstrip("\n").split("\t")
    desc = fields[3] if len(fields) > 3 else ""
    return int(fields[0]), desc.split(": ", 1)[0], desc


def perfdata_profile_problem(prof) -> str | None:
    """What is wrong with a Profile read from a perf.data, or None (see the section text)."""
    t = prof.total_weight
    if prof.samples == 0:
        return None if t == 0 and not prof.stacks else f"no samples, but a weight of {t!r} in {len(prof.stacks)} stacks"
    if t == 0 and not (prof.self_weight.any() or prof.children_weight.any() or any(prof.stacks.values())):
        return None   # samples of period 0: no share to judge (diff refuses it, as perf report shows nothing)
    problem = invariant_problem(prof)
    if problem:
        return problem
    if abs(float(prof.self_weight.sum()) - t) > 1e-6 * t:
        return f"self weights add up to {100 * prof.self_weight.sum() / t:.4f}% of the total"
    if abs(sum(prof.stacks.values()) - t) > 1e-6 * t:
        return f"stacks weigh {100 * sum(prof.stacks.values()) / t:.4f}% of the total"
    if sum(prof.stack_counts.values()) != prof.samples:
        return f"{prof.samples} samples, but its stacks count {sum(prof.stack_counts.values())}"
    n = len(prof.symbols)
    if any(not isinstance(f, int) or not 0 <= f < n for key in prof.stacks for f in key):
        return "a stack frame names no symbol of this event"
    return None


def diff_problem(doc: dict) -> str | None:
    """What is wrong with `diff --format json --scope all --top 0` output, or None."""
    total = 0.0
    for section in ("common", "only_a", "only_b"):
        for row in doc[section]:
            for side in ("a", "b"):
                v = row.get(f"value_{side}", 0.0)
                if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 100 + 1e-6):
                    return f"{section} row {row['symbol']!r}: a share of {v!r} on side {side}"
            if section != "only_b":
                total += row.get("value_a", 0.0)
    if abs(total - 100) > 0.01:
        return f"side A's shares add up to {total:.4f}%"
    return None


def _error_problem(e: Exception) -> str | None:
    from kperfdiff.core.errors import InputError
    if not isinstance(e, InputError):
        return f"{type(e).__name__} (exit status {e.exit_status}), not an InputError: {e}"
    problem = _one_line(e)
    return problem[6:] if problem and problem.startswith("crash:") else problem


def _stderr_problem(rc: int, stderr: str) -> str | None:
    """A CLI run's exit status and stderr: 0, or 2 with one `kperfdiff: ` sentence last; no traceback."""
    for word in ("Traceback", "Error:", "panicked", "internal error"):
        if word in stderr:
            return f"{word!r} on stderr: {stderr.strip().splitlines()[-1][:200] if stderr.strip() else ''}"
    if rc not in (0, 2):
        return f"exit status {rc}: {stderr.strip()[-200:]}"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if rc == 2 and not (lines and re.match(r"kperfdiff( [a-z][a-z-]*)*: (?!warning:)", lines[-1])):
        return f"exit status 2 without a one-sentence error last: {stderr[-200:]!r}"
    return None


def _main(argv: list[str]) -> tuple[int, str, str]:
    """The CLI's entry point in this process: (exit status, stdout, stderr)."""
    import contextlib
    import io
    from kperfdiff.commands import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def run_cli_diff(path: Path, kallsyms: Path | None, env: dict | None = None) -> str | None:
    """`kperfdiff diff FILE plain.perf.data` in a subprocess: what is wrong with its outcome, or None."""
    args = [str(CLI), "diff", str(path), str(PLAIN)] + (["--kallsyms-a", str(kallsyms)] if kallsyms else [])
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return "the CLI ran for more than 300 s"
    problem = _stderr_problem(p.returncode, p.stderr)
    return f"CLI diff: {problem}" if problem else None


def run_one_perfdata(path: Path, fixture: str, index: int, workdir: Path, *, cli: bool = False,
                     env: dict | None = None) -> tuple[str, str]:
    """Read ``path`` (made from ``fixture``) through every path users take (see the section
    text); (outcome, detail). ``cli``: also through the real CLI (a subprocess, ``env``)."""
    from kperfdiff.core.errors import KperfdiffError
    from kperfdiff.ingest.load import load, load_events
    ks = FOLDER_KALLSYMS if fixture in SAME_BOOT and index % 2 == 0 else None
    fmt = EXPORTS[index // 2 % len(EXPORTS)]     # every format with and without the kallsyms
    out = workdir / f"export.{fmt}"
    ks_args = ["--kallsyms-a", str(ks)] if ks else []

    def step_load():
        return [load(path, kallsyms=ks)]

    def step_events():
        return load_events(path, kallsyms=ks)

    # perf report's filters on a third of the inputs each (a filter keeping nothing is an error)
    filters = ([], ["--comm", "dd,sh", "--exclude-idle"], ["--dso", "[kernel.kallsyms],libc.so.6", "--sort", "dso"])

    def step_diff():
        return _main(["diff", str(path), str(PLAIN), "--format", "json", "--scope", "all", "--top", "0", *ks_args,
                      *filters[index % 3]])

    def step_export():
        out.unlink(missing_ok=True)
        return _main(["export", str(path), "--to", fmt, "-o", str(out),
                      *(["--kallsyms", str(ks)] if ks else [])])

    outcome = "ok"
    for what, step in (("load", step_load), ("load_events", step_events), ("diff", step_diff),
                       (f"export --to {fmt}", step_export)):
        try:
            got = step()
        except KperfdiffError as e:
            problem = _error_problem(e)
            if problem:
                return "crash", f"{what}: {problem}"
            outcome = "error"
            continue
        except BaseException as e:   # noqa: BLE001 - classifying every failure is the point (a PanicException too)
            if isinstance(e, KeyboardInterrupt):
                raise
            # and what the user sees of it
            cli_problem = run_cli_diff(path, ks, env) or "the CLI diff ends cleanly"
            return "crash", f"{what}: {type(e).__name__}: {e} [{cli_problem}]"
        if what.startswith("load"):
            for prof in got:
                problem = perfdata_profile_problem(prof)
                if problem:
                    return "wrong", f"{what} ({prof.event}): {problem}"
            continue
        rc, stdout, stderr = got
        problem = _stderr_problem(rc, stderr)
        if problem:
            return "crash", f"{what}: {problem}"
        if rc == 2:
            outcome = "error"
        elif what == "diff":
            problem = diff_problem(json.loads(stdout))
            if problem:
                return "wrong", f"diff: {problem}"
        elif not out.is_file() or not out.stat().st_size:
            return "wrong", f"{what}: exit status 0 but no output file"
    if cli:
        problem = run_cli_diff(path, ks, env)
        if problem:
            return "crash", problem
    return outcome, ""


def fuzz_perfdata(workdir: Path, *, executions: int, seed: int = 1, start: int = 0, cli_every: int = 50,
                  save: Path | None = None) -> tuple[Counter, dict[str, list[tuple[str, str]]]]:
    """Executions start.. of the native fuzzer through the load path (see the section text), in
    this process; as ``fuzz``. The long-run driver (fuzz/fuzz_perfdata.py) runs them in a child process."""
    folder = workdir / "inputs"
    folder.mkdir(parents=True, exist_ok=True)
    counts: Counter = Counter()
    examples: dict[str, list[tuple[str, str]]] = {}
    for index, fixture, desc in perfdata_inputs(folder, seed, start, executions):
        path = folder / f"{index}.perf.data"
        outcome, detail = run_one_perfdata(path, fixture, index, workdir,
                                           cli=bool(cli_every) and index % cli_every == 0)
        counts[outcome] += 1
        if outcome in ("crash", "wrong"):
            ex = examples.setdefault(outcome, [])
            if len(ex) < 5:
                ex.append((f"#{index} {desc}", detail))
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, save / f"{outcome}-seed{seed}-{index}.perf.data")
        path.unlink()
    return counts, examples
