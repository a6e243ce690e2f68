#!/usr/bin/env python3
"""Agreement of kperfdiff's benchmarks with lmbench 3 (a harness, not a test).

For every catalogue benchmark with an ``lmbench`` field, runs kperfdiff (its
real CLI, one fresh process per round) and the equivalent lmbench command
(its own binaries), alternating, for several rounds on this machine, then
prints per benchmark: the median over rounds of each side (ns per op), the
ratio kperfdiff/lmbench, the coefficient of variation of each side's round
results, and a verdict:

    agree                  ratio within 0.8-1.2
    differs: <reason>      outside, and the benchmark's ``differences`` field
                           states why (a clause beginning "vs lmbench:")
    DISAGREES              outside, with no stated reason
    failed: <why>          one side gave no number

    LMBENCH_BIN=/work/lmbench-src/bin/x86_64 .venv/bin/python validation/vs_lmbench.py \
        [--rounds 5] [--only PATTERNS] [--param BENCH:KEY=VALUE] [--format text|json|markdown]

lmbench prints its results on stderr; the parsers below read each tool's
format and convert to ns per operation (lat_fs prints files per second,
lat_mmap "<size MB> <microseconds>", lat_ctx "<procs> <microseconds>").
kperfdiff is the ``kperfdiff`` beside the Python running this script, given
only parameters its catalogue declares (checked before anything runs).
lmbench runs with ENOUGH set (--enough-us, default kperfdiff's 10 ms batch),
as its own run script sets it: unset, a busy machine makes lmbench time 1 s
batches, and lat_fs then creates and deletes hundreds of thousands of files.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KPERFDIFF = Path(sys.executable).with_name("kperfdiff")
AGREE = (0.8, 1.2)
HOW_TO_BUILD = ("set LMBENCH_BIN (or --lmbench-bin) to the bin directory of an lmbench 3 build, "
                "made outside this repository, e.g. from github.com/intel/lmbench: cd src && mkdir -p ../bin/x86_64 && "
                "make all O=../bin/x86_64 CC=gcc LDLIBS='-ltirpc -lm' CFLAGS='-O2 -I/usr/include/tirpc -DHAVE_uint=1 "
                "-std=gnu89 -fcommon -Wno-implicit-int -Wno-implicit-function-declaration'")
SERVERS = {"lat_tcp", "lat_udp", "lat_connect"}  # need `tool -s` before, `tool -S host` after
ENOUGH_US = 10000  # lmbench's batch length, as kperfdiff's default --min-batch-ms 10
FS_SETTLE_S = 35   # see settle()


class ParseError(ValueError):
    pass


# ---------------------------------------------------------------- parsers
_MICRO = re.compile(r"^(?P<label>[^\n:]+):\s+(?P<v>[0-9.]+(?:e[-+]?\d+)?)\s+microseconds\s*$", re.M)


def parse_micro(text: str, label: str | None = None) -> float:
    """lmbench's micro() line, "<label>: <x> microseconds" -> ns. With label, the line
    whose label starts with it (lat_syscall "Simple syscall", lat_pagefault "Pagefaults on")."""
    for m in _MICRO.finditer(text):
        if label is None or m["label"].strip().startswith(label):
            return float(m["v"]) * 1000.0
    raise ParseError(f"no '{label or '...'}: X microseconds' line in lmbench's output: {text.strip()[:200]!r}")


def parse_lat_mmap(text: str) -> float:
    """lat_mmap prints "<size in MB> <microseconds per mapping>" -> ns."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                float(parts[0])
                return float(parts[1]) * 1000.0
            except ValueError:
                continue
    raise ParseError(f"no '<MB> <microseconds>' line in lat_mmap's output: {text.strip()[:200]!r}")


def parse_lat_ctx(text: str, procs: int) -> float:
    """lat_ctx prints '"size=<k>k ovr=<us>' then "<procs> <microseconds per switch>" -> ns."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == str(procs):
            return float(parts[1]) * 1000.0
    raise ParseError(f"no '{procs} <microseconds>' line in lat_ctx's output: {text.strip()[:200]!r}")


def parse_lat_fs(text: str, size_k: int, which: str) -> float:
    """lat_fs prints "<size>k <files> <creates/s> <deletes/s>" per size -> ns per file."""
    col = {"create": 2, "delete": 3}[which]
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == f"{size_k}k":
            rate = float(parts[col])
            if rate <= 0:
                raise ParseError(f"lat_fs gave no {which} rate for {size_k}k: {line!r}")
            return 1e9 / rate
    raise ParseError(f"no '{size_k}k <n> <create/s> <delete/s>' line in lat_fs's output: {text.strip()[:200]!r}")


def parse_lmbench(tool: str, args: list[str], bench: str, text: str) -> float:
    """ns per operation from one lmbench run's stderr, for kperfdiff benchmark ``bench``."""
    if tool == "lat_mmap":
        return parse_lat_mmap(text)
    if tool == "lat_ctx":
        return parse_lat_ctx(text, int(args[-1]))
    if tool == "lat_fs":
        size = args[args.index("-s") + 1] if "-s" in args else "0"
        size_k = int(re.sub(r"[kK]$", "", size)) if size != "0" else 0
        return parse_lat_fs(text, size_k, "delete" if ".delete." in bench else "create")
    return parse_micro(text)


# ---------------------------------------------------------------- running
@dataclass
class Pair:
    name: str
    lmbench: str
    params: dict[str, str]
    differences: str
    kpd: list[float] = field(default_factory=list)
    lmb: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    fs_dir: str | None = None  # fs.*: the directory both sides create their files in


def stated_reason(differences: str) -> str | None:
    """The clause of a differences field beginning "vs lmbench:", up to the next sentence."""
    m = re.search(r"vs lmbench:\s*(.+?)(?:\.\s+(?=[A-Z])|\.?$)", differences, re.S)
    return m.group(1).strip().rstrip(".") if m else None


def file_size(spec: str) -> int | None:
    """The size of the file an lmbench command maps (its FILE word), or None."""
    words = shlex.split(spec)
    if "FILE" not in words:
        return None
    return _bytes(words[1]) if words[0] == "lat_mmap" else 16 << 20


def lmbench_argv(spec: str, file: Path | None = None) -> tuple[str, list[str]]:
    words = shlex.split(spec)
    tool, args = words[0], words[1:]
    return tool, [str(file) if a == "FILE" else a for a in args]


def fresh_file(directory: Path, size: int) -> Path:
    """A file of size bytes written and synced as kperfdiff's workers write their own (64 KB
    writes, fsync), for one lmbench run: both sides map a file just written, whose page-cache
    state (folio sizes, clean) is the same; a file kept across rounds ages into another one."""
    fd, name = tempfile.mkstemp(prefix="lmb-", dir=directory)
    with os.fdopen(fd, "wb") as fh:
        chunk = b"m" * 65536
        for done in range(0, size, len(chunk)):
            fh.write(chunk[:size - done])
        fh.flush()
        os.fsync(fh.fileno())
    return Path(name)


def _bytes(s: str) -> int:
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", s)
    if not m:
        raise ValueError(f"not a size: {s}")
    return int(m[1]) << {"": 0, "k": 10, "m": 20, "g": 30}[m[2].lower()]


def run_group(argv: list[str], timeout: float, env: dict | None = None, until: str | None = None,
              **kw) -> subprocess.CompletedProcess:
    """Run argv in a session of its own; on timeout kill the whole session (lmbench's benchmp
    forks its timing child, which outlives a killed parent and goes on deleting files). With
    ``until`` (a regular expression), the run ends, killed, once a stderr line matches it."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env, **kw)
    if until is None:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.communicate()
            raise
        return subprocess.CompletedProcess(argv, p.returncode, out, err)
    lines: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        for line in p.stderr:
            lines.append(line)
            if re.fullmatch(until, line.rstrip("\n")):
                seen.set()
        seen.set()  # end of output

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    ended = seen.wait(timeout)
    if p.poll() is None:
        os.killpg(p.pid, 9)
    out = p.stdout.read()
    p.wait()
    reader.join(10)
    if not ended:
        raise subprocess.TimeoutExpired(argv, timeout)
    matched = any(re.fullmatch(until, x.rstrip("\n")) for x in lines)
    return subprocess.CompletedProcess(argv, 0 if matched else p.returncode, out, "".join(lines))


def lat_fs_line(args: list[str]) -> str:
    """The line of lat_fs's output the harness reads: lat_fs -s 0 goes on to 1k, 4k and 10k
    files after its 0k line (and on a journal-less ext4, minutes of creating and deleting)."""
    size = args[args.index("-s") + 1] if "-s" in args else "0"
    return (f"{_bytes(size) >> 10}k" if size != "0" else "0k") + r"\t\S+\t\S+\t\S+"


def run_lmbench(bin_dir: Path, tool: str, args: list[str], timeout: float, enough_us: int) -> str:
    """One lmbench run's output. lat_fs works in a directory of its own made inside the one it
    is given (on the same file system), removed afterwards, and is stopped after the line read."""
    if tool == "lat_fs":
        own = Path(tempfile.mkdtemp(prefix="kpd-lat_fs-", dir=args[-1]))
        try:
            return _run_lmbench(bin_dir, tool, [*args[:-1], str(own)], timeout, enough_us,
                                until=lat_fs_line(args))
        finally:
            shutil.rmtree(own, ignore_errors=True)
    return _run_lmbench(bin_dir, tool, args, timeout, enough_us)


def _run_lmbench(bin_dir: Path, tool: str, args: list[str], timeout: float, enough_us: int,
                 until: str | None = None) -> str:
    exe = bin_dir / tool
    env = {**os.environ, "ENOUGH": str(enough_us)}
    if tool in SERVERS:
        # The server forks itself into the background: give it no pipe to hold open.
        subprocess.run([str(exe), "-s"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=False, env=env)
        time.sleep(0.2)
    try:
        r = run_group([str(exe), *args], timeout, env=env, until=until, cwd=tempfile.gettempdir())
    finally:
        if tool in SERVERS:
            subprocess.run([str(exe), "-S", "localhost"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
    if r.returncode != 0 and not r.stderr.strip():
        raise ParseError(f"{tool} exited with status {r.returncode} and no output")
    return r.stderr + r.stdout


def settle(directory: str, seconds: float) -> None:
    """Before each side of an fs.* pair: sync the file system and wait, so neither side pays for
    the files the other just deleted. ext4 without a journal never reuses an inode deleted in
    the last 30 s (5 min while its inode-table block is dirty), and each create scans past all
    of them (find_inode_bit -> recently_deleted), so a create costs what the preceding minutes
    deleted; lat_fs -s 0 also creates and deletes its 1k, 4k and 10k files after the 0k ones."""
    if seconds > 0:
        subprocess.run(["sync", "-f", directory], stdin=subprocess.DEVNULL, check=False, timeout=120)
        time.sleep(seconds)


def run_kperfdiff(store: Path, name: str, params: dict[str, str], timeout: float,
                  extra: list[str] = ()) -> float:
    cmd = [str(KPERFDIFF), "--store", str(store), "bench", "--only", name, "--reps", "1",
           "--format", "json", "--no-progress", *extra]
    for k, v in params.items():
        cmd += ["--param", f"{name}:{k}={v}"]
    r = run_group(cmd, timeout)
    if r.returncode != 0:
        raise ParseError(f"kperfdiff failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    res = [x for x in json.loads(r.stdout)["results"] if x["benchmark"] == name]
    if not res or res[0]["status"] != "ok":
        raise ParseError(f"kperfdiff gave no result: {res[0].get('reason') if res else 'none'}")
    unit, med = res[0]["unit"], res[0]["summary"]["median"]
    scale = {"ns/op": 1.0, "us/op": 1e3, "ms/op": 1e6}.get(unit)
    if scale is None:
        raise ParseError(f"unit {unit} cannot be compared with lmbench's microseconds")
    return med * scale


def cv(xs: list[float]) -> float | None:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) >= 2 and statistics.mean(xs) else None


def summarise(p: Pair) -> dict:
    k = statistics.median(p.kpd) if p.kpd else None
    m = statistics.median(p.lmb) if p.lmb else None
    ratio = k / m if k and m else None
    if ratio is None:
        verdict = "failed: " + (p.errors[0] if p.errors else "no result")
    elif AGREE[0] <= ratio <= AGREE[1]:
        verdict = "agree"
    elif (why := stated_reason(p.differences)):
        verdict = "differs: " + why
    else:
        verdict = "DISAGREES"
    return {"benchmark": p.name + "".join(f" {k}={v}" for k, v in p.params.items()),
            "lmbench": p.lmbench, "kperfdiff_ns": k, "lmbench_ns": m, "ratio": ratio,
            "kperfdiff_cv": cv(p.kpd), "lmbench_cv": cv(p.lmb), "rounds": len(p.kpd),
            "kperfdiff_rounds": p.kpd, "lmbench_rounds": p.lmb, "verdict": verdict,
            "errors": p.errors}


# ---------------------------------------------------------------- output
def _f(x: float | None, pct: bool = False) -> str:
    if x is None:
        return "-"
    if pct:
        return f"{100 * x:.0f}%"
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def render(rows: list[dict], fmt: str, meta: dict) -> str:
    if fmt == "json":
        return json.dumps({"version": 1, **meta, "results": rows}, indent=2)
    head = ["benchmark", "kperfdiff ns", "lmbench ns", "ratio", "CV kpd", "CV lmb", "verdict"]
    body = [[r["benchmark"], _f(r["kperfdiff_ns"]), _f(r["lmbench_ns"]),
             f"{r['ratio']:.2f}" if r["ratio"] else "-", _f(r["kperfdiff_cv"], True),
             _f(r["lmbench_cv"], True), r["verdict"]] for r in rows]
    if fmt == "markdown":
        out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
        return "\n".join(out)
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) for i in range(len(head) - 1)]
    fmt_row = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]
    return "\n".join([fmt_row(head)] + [fmt_row(b) for b in body])


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lmbench-bin", default=os.environ.get("LMBENCH_BIN"),
                    help="lmbench's bin directory (default: $LMBENCH_BIN)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default: 5)")
    ap.add_argument("--only", help="comma-separated kperfdiff names or shell patterns")
    ap.add_argument("--param", action="append", default=[], metavar="BENCH:KEY=VALUE",
                    help="run kperfdiff's BENCH with KEY=VALUE (repeatable; BENCH may be a pattern)")
    ap.add_argument("--fs-dir", help="run fs.* (kperfdiff dir=) and lat_fs in this directory "
                    "instead of the catalogue's (e.g. a tmpfs, to leave the file system's own "
                    "state out of the comparison)")
    ap.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    ap.add_argument("--render", metavar="JSON", help="only print a table saved with --format json, "
                    "in --format (measures nothing)")
    ap.add_argument("--timeout", type=float, default=300, help="per process, seconds (default: 300)")
    ap.add_argument("--enough-us", type=int, default=ENOUGH_US,
                    help=f"lmbench's ENOUGH, its batch length in us (default: {ENOUGH_US}, kperfdiff's)")
    ap.add_argument("--fs-settle", type=float, default=FS_SETTLE_S, metavar="S",
                    help="before each side of an fs.* pair, sync its directory's file system and "
                    f"wait S seconds (default: {FS_SETTLE_S}; see settle() in this script)")
    ap.add_argument("--kperfdiff-args", default="", metavar="ARGS",
                    help="more arguments for every `kperfdiff bench` (e.g. '--intervals 3')")
    a = ap.parse_args(argv)

    if a.render:
        try:
            saved = json.loads(Path(a.render).read_text())
            rows = saved.pop("results")
        except (OSError, ValueError, KeyError) as e:
            print(f"vs_lmbench: cannot read the saved table {a.render}: {e}", file=sys.stderr)
            return 2
        from kperfdiff.bench import catalogue
        stated = {b.name: stated_reason(b.differences) for b in catalogue.load_catalogue()}
        for r in rows:
            r["benchmark"] = re.sub(r" file=\S+", "", r["benchmark"])
            # the verdict under today's catalogue (a reason may have been stated since)
            why = stated.get(r["benchmark"].split()[0])
            if r["ratio"] and not AGREE[0] <= r["ratio"] <= AGREE[1]:
                r["verdict"] = f"differs: {why}" if why else "DISAGREES"
        print(render(rows, a.format, saved))
        return 0
    if not a.lmbench_bin:
        print(f"vs_lmbench: no lmbench binaries: {HOW_TO_BUILD}.", file=sys.stderr)
        return 2
    bin_dir = Path(a.lmbench_bin)
    if not (bin_dir / "lat_syscall").is_file():
        print(f"vs_lmbench: {bin_dir} holds no lmbench lat_syscall binary: {HOW_TO_BUILD}.", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print("vs_lmbench: --rounds must be at least 1.", file=sys.stderr)
        return 2
    if not KPERFDIFF.exists():
        print(f"vs_lmbench: {KPERFDIFF} is missing: run this script with the Python of "
              f"kperfdiff's environment (make setup; .venv/bin/python).", file=sys.stderr)
        return 2
    if a.enough_us < 1000:
        print("vs_lmbench: --enough-us must be at least 1000.", file=sys.stderr)
        return 2
    if a.fs_settle < 0:
        print("vs_lmbench: --fs-settle must not be negative.", file=sys.stderr)
        return 2

    from kperfdiff.bench import catalogue
    from kperfdiff.core.errors import UsageError
    from kperfdiff.measure.session import parse_param_overrides
    try:
        chosen = [b for b in catalogue.select("full", a.only) if b.lmbench]
        if not chosen:
            raise UsageError("none of the chosen benchmarks has an lmbench equivalent")
        if a.fs_dir and not Path(a.fs_dir).is_dir():
            raise UsageError(f"--fs-dir {a.fs_dir} is not a directory")
        fs_dir = [f"{b.name}:dir={a.fs_dir}" for b in chosen if a.fs_dir and b.family == "fs"]
        # the check `kperfdiff bench --param` makes, before anything runs
        params = parse_param_overrides(fs_dir + a.param, chosen)
        extra = shlex.split(a.kperfdiff_args)
    except (UsageError, ValueError) as e:  # a pattern matching nothing, an unknown parameter
        print(f"vs_lmbench: {e}.", file=sys.stderr)
        return 2
    pairs = [Pair(b.name, b.lmbench, params.get(b.name, {}), b.differences) for b in chosen]
    for p, b in zip(pairs, chosen):
        if b.family == "fs":
            if "dir" in p.params:  # lat_fs in the same directory
                p.lmbench = shlex.join(shlex.split(p.lmbench)[:-1] + [p.params["dir"]])
            p.fs_dir = shlex.split(p.lmbench)[-1]

    work = Path(tempfile.mkdtemp(prefix="kpd-vs-lmbench-", dir="/var/tmp"))
    try:
        hello = bin_dir / "hello"
        if any(b.lmbench.startswith("lat_proc") for b in chosen) and hello.exists():
            # lat_proc exec and shell run /tmp/hello (lmbench's own script copies it there).
            if not Path("/tmp/hello").exists():
                shutil.copy2(hello, "/tmp/hello")
        store = work / "store.db"
        try:
            measure(pairs, bin_dir, work, store, a.rounds, a.timeout, a.enough_us, extra, a.fs_settle)
        except KeyboardInterrupt:  # keep what was measured
            print("vs_lmbench: interrupted; the table holds the rounds done so far.", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = [summarise(p) for p in pairs]
    meta = {"rounds": a.rounds, "fs_dir": a.fs_dir, "fs_settle_s": a.fs_settle, "enough_us": a.enough_us, "lmbench_bin": str(bin_dir),
            "kernel": os.uname().release, "cpus": os.cpu_count()}
    print(render(rows, a.format, meta))
    return 0


def measure(pairs: list[Pair], bin_dir: Path, work: Path, store: Path, rounds: int,
            timeout: float, enough_us: int = ENOUGH_US, extra: list[str] = (),
            fs_settle: float = FS_SETTLE_S) -> None:
    """Both sides of every pair, alternating which goes first, round after round."""
    for rnd in range(rounds):
        for i, p in enumerate(pairs):
            print(f"[round {rnd + 1}/{rounds}] {p.name} ~ {p.lmbench}", file=sys.stderr)
            sides = ["kpd", "lmb"] if (rnd + i) % 2 == 0 else ["lmb", "kpd"]
            for side in sides:
                file = None
                try:
                    if p.fs_dir:
                        settle(p.fs_dir, fs_settle)
                    if side == "kpd":
                        p.kpd.append(run_kperfdiff(store, p.name, p.params, timeout, extra))
                    else:
                        size = file_size(p.lmbench)
                        file = fresh_file(work, size) if size else None
                        tool, args = lmbench_argv(p.lmbench, file)
                        p.lmb.append(parse_lmbench(tool, args, p.name,
                                                   run_lmbench(bin_dir, tool, args, timeout, enough_us)))
                except (ParseError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
                    p.errors.append(f"{side}: {e}")
                    print(f"  {side}: {e}", file=sys.stderr)
                finally:
                    if file:
                        file.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
