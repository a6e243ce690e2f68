"""Harness (not a test): how fast kperfdiff reads the perf.data files users record, against ``cat`` and perf.

By default it times every recording shape of ``benchmarks/shapes.py`` (fork, shell, lsr,
threads, kernel; ``--shapes`` picks some), each recorded once into ``--dir`` and reused. Per shape, in
one run: the file at page-cache speed (``cat > /dev/null``, the floor), kperfdiff's native
ingest on one core (``native.read_perf_data`` in a fresh child process, timed by the child
itself, best of ``--repeat``), Msamples/s and the ratio to ``cat``, with the 1-minute load
average just before and after the shape's timings. When the native module takes ``threads``,
the same file is also read with ``threads=<CPUs>``: best time, speed-up over one thread, and
whether the returned dict is identical to the one-thread dict (every key; ``MISMATCH`` if not).
``--before DIR`` times another checkout's native ingest on the same files in the same run.
It ends with one line per shape against the targets (at least 10M samples/s on one core; one
file on 2 cores at least 1.7x one core).

    python benchmarks/bench_ingest.py [--shapes fork,shell,threads,kernel] [--dir /tmp/kpd-shapes] [--rerecord]
        [--seconds 30] [--freq 20000] [--repeat 9] [--threads N] [--before DIR]

The thread curve (``--curve``): one file read by ``native.read_perf_data(threads=N)`` for N = 1, 2,
4, ... up to the CPUs (and the CPU count itself; ``--curve-threads 1,2,4,8,16`` picks others, more
than the CPUs to see what oversubscription costs). ``--repeat`` interleaved rounds, each running
every N once in a fresh child process that times the read itself; per N the best and median
seconds, the speed-up over one thread, Msamples/s, the CPU time of all the child's threads over
the read (user + sys, and CPU/wall: how many threads were busy), voluntary context switches, and
whether the dict (plain and per process) is identical to the one of ``threads=1``. It exits 1 on
a mismatch. In the same rounds, the machine's ceiling: N one-thread reads in N processes started
together (as many as the CPUs when N is more), and N times the one-thread read over the slowest of
them, the most any reader of one file on N threads could reach on this machine; the header names
the CPUs as cores. The curve of a file needs no ``perf``. With ``--file`` the curve of that file,
else of each shape; ``--symfs DIR`` reads user-space symbols from DIR (a recording made on another
machine); ``--before DIR`` reads it with that checkout too, at each N in the same rounds:

    python benchmarks/bench_ingest.py --curve --file PERF.DATA --kallsyms KALLSYMS [--symfs DIR] [--repeat 5]
        [--before DIR]
    python benchmarks/bench_ingest.py --curve [--shapes ...] [--curve-threads 1,2,4,8,16]

With ``--file PERF.DATA --kallsyms FILE`` it times one file in detail instead: native ingest and
``ingest.perfdata.load`` (each also with ``by_process=True``, stacks per process name, as export
and diff --folded read), ``perf report --stdio --sort sym -g none --no-children``, ``perf script``,
``cat``, the one-file-on-all-cores figure, and two copies of the file read one after the other and
at once (``ingest.load.load_many`` with one worker and one per CPU); with samples per second,
the time as a multiple of the native ingest's and peak memory (max RSS of each child process). ``--full`` adds
``perf report`` with the call graph (slow: 16 s and 5 GB for a million samples).

The Rust reader alone, without Python (for profiling with ``perf record``; ``KPD_THREADS=N`` for N
threads), and where one read's time goes, phase by phase and thread by thread (any reader, the
Python module's too, with ``KPERFDIFF_TIMING=1`` in the environment: lines on stderr):

    cd native && cargo run --release --example ingest_time -- FILE KALLSYMS [REPEAT]
    KPERFDIFF_TIMING=1 KPD_THREADS=4 cargo run --release --example ingest_time -- FILE KALLSYMS 1
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shapes  # noqa: E402  (benchmarks/ is not a package)

ROOT = Path(__file__).resolve().parent.parent
TARGET_MSPS = 10.0      # Msamples/s with call chains on one core
TARGET_SPEEDUP = 1.7    # one file read on 2 cores against one


def timed(argv: list[str], stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """Wall seconds and max RSS (MiB) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(argv)}")
    return dt, ru.ru_maxrss / 1024.0


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[4])
from functools import partial
from kperfdiff import native
from kperfdiff.ingest import perfdata
path, ks, mode = sys.argv[1], sys.argv[2], sys.argv[3]
kw = {"symfs": [sys.argv[5]]} if len(sys.argv) > 5 and sys.argv[5] else {}


def first_difference(a, b, where="dict"):
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} against {type(b).__name__}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{where}: keys {sorted(set(a) ^ set(b)) or 'in another order'}"
        for k in a:
            d = first_difference(a[k], b[k], f"{where}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: differs"


if mode.startswith("together-"):
    # one of a batch started together (the machine's ceiling): ready once imported, then the word
    mode = mode[len("together-"):]
    print("ready", flush=True)
    sys.stdin.readline()
t = time.perf_counter()
if mode == "native":
    d = native.read_perf_data(path, kallsyms=ks, **kw)
    n = sum(e["samples"] for e in d["events"])
    extra = {"stacks": len(d["stack_offsets"]) // 8 - 1, "symbols": len(d["sym_names"])}
elif mode.startswith("threads"):
    d = native.read_perf_data(path, kallsyms=ks, threads=int(mode[7:]), **kw)
    n = sum(e["samples"] for e in d["events"])
    extra = {}
elif mode.startswith("curve"):
    # the read alone, with the CPU time of every thread of the process over it
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    d = native.read_perf_data(path, kallsyms=ks, threads=int(mode[5:]), **kw)
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    n = sum(e["samples"] for e in d["events"])
    extra = {"seconds": t1 - t, "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
             "vcsw": r1.ru_nvcsw - r0.ru_nvcsw, "minflt": r1.ru_minflt - r0.ru_minflt}
elif mode.startswith("compare"):
    # the whole dict, plain and per process; but for the count of chain parts each thread's
    # caches missed, the one per-thread figure (a fact, not part of the profile)
    diff = None
    for by_process in (False, True):
        one = native.read_perf_data(path, kallsyms=ks, threads=1, by_process=by_process, **kw)
        many = native.read_perf_data(path, kallsyms=ks, threads=int(mode[7:]), by_process=by_process, **kw)
        for d in (one, many):
            d["header"].pop("symbolized_chain_parts", None)
        diff = diff or first_difference(one, many, f"by_process={by_process}")
    n = sum(e["samples"] for e in one["events"])
    extra = {"difference": diff}
elif mode == "native-by-process":
    d = native.read_perf_data(path, kallsyms=ks, by_process=True)
    n = sum(e["samples"] for e in d["events"])
    extra = {"processes": len(d["comm_names"]), "process_stacks": sum(len(e["proc_count"]) // 8 for e in d["events"])}
elif mode == "load-by-process":
    p = perfdata.load(path, kallsyms=ks, by_process=True)
    n = p.samples
    extra = {"processes": len({c for c, _ in p.process_stacks}), "process_stacks": len(p.process_stacks)}
elif mode.startswith("pair"):
    from kperfdiff.ingest.load import load_many   # not in checkouts before it (--before)
    workers = int(mode[4:])
    ps = load_many([partial(perfdata.load, path, kallsyms=ks)] * 2, workers)
    n = sum(p.samples for p in ps)
    extra = {}
else:
    p = perfdata.load(path, kallsyms=ks)
    n = p.samples
    extra = {"stacks": len(p.stacks), "symbols": len(p.symbols)}
print(json.dumps({"seconds": time.perf_counter() - t, "samples": n, **extra}))
"""


def child(data: Path, ks: Path, mode: str, root: Path = ROOT, symfs: Path | None = None) -> list[str]:
    """The command that reads ``data`` with the kperfdiff checkout at ``root``: this one with this
    interpreter, another with its own venv (``make setup``); native reads with ``symfs`` when given."""
    python = sys.executable if root == ROOT else str(root / ".venv" / "bin" / "python")
    return [python, "-c", CHILD, str(data), str(ks), mode, str(root / "src"), str(symfs or "")]


def kperfdiff_run(data: Path, ks: Path, mode: str, root: Path = ROOT, symfs: Path | None = None) -> dict:
    """Time kperfdiff's ingest inside a fresh child (its own timer, without interpreter start-up)."""
    p = subprocess.run(child(data, ks, mode, root, symfs), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"kperfdiff ingest failed ({mode}, {root}): {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def best(data: Path, ks: Path, mode: str, repeat: int, root: Path = ROOT) -> dict:
    return min((kperfdiff_run(data, ks, mode, root) for _ in range(repeat)), key=lambda i: i["seconds"])


def has_threads(root: Path = ROOT) -> bool:
    """Whether the checkout's native reader takes ``threads`` (reads one file on several threads)."""
    probe = "from kperfdiff import native; print('threads' in (native.read_perf_data.__text_signature__ or ''))"
    python = sys.executable if root == ROOT else str(root / ".venv" / "bin" / "python")
    p = subprocess.run([python, "-c", f"import sys; sys.path.insert(0, {str(root / 'src')!r}); {probe}"],
                       capture_output=True, text=True)
    return p.stdout.strip() == "True"


def cat_seconds(data: Path, repeat: int) -> float:
    timed(["cat", str(data)])  # warms the page cache
    return min(timed(["cat", str(data)])[0] for _ in range(repeat))


def threads_figure(data: Path, ks: Path, n: int, repeat: int) -> dict:
    """One file read with ``threads=n``: best seconds, and the first difference from ``threads=1`` (None)."""
    fig = best(data, ks, f"threads{n}", repeat)
    fig["difference"] = kperfdiff_run(data, ks, f"compare{n}")["difference"]
    return fig


def load1() -> float:
    return os.getloadavg()[0]


def time_shape(shape: str, data: Path, ks: Path, args, threads: int | None) -> dict:
    """Every figure of one shape, with the load average around them."""
    r = {"shape": shape, "file": str(data), "mb": data.stat().st_size / 1e6, "load_before": load1()}
    r["cat"] = cat_seconds(data, args.repeat)
    one = best(data, ks, "native", args.repeat)
    r.update(samples=one["samples"], stacks=one["stacks"], native=one["seconds"])
    if args.before:
        r["before"] = best(data, ks, "native", args.repeat, args.before)["seconds"]
    if threads:
        fig = threads_figure(data, ks, threads, args.repeat)
        r.update(threads=threads, threaded=fig["seconds"], difference=fig["difference"])
    r["load_after"] = load1()
    return r


def msps(samples: int, seconds: float) -> float:
    return samples / seconds / 1e6


def print_shapes(rows: list[dict], args, threads: int | None) -> None:
    ncpu = len(os.sched_getaffinity(0))
    print(f"native ingest, one core: best of {args.repeat} in a fresh process (its own timer); "
          f"cat: best of {args.repeat} from the page cache; {ncpu} CPUs")
    head = f"{'shape':8} {'samples':>9} {'MB':>6} {'stacks':>8} {'cat s':>7} {'native s':>9} {'Msamples/s':>11} {'x cat':>6}"
    if args.before:
        head += f" {'before s':>9} {'before Ms/s':>11} {'speed-up':>9}"
    print(head + f"  {'load 1m before/after':>20}")
    for r in rows:
        line = (f"{r['shape']:8} {r['samples']:9d} {r['mb']:6.1f} {r['stacks']:8d} {r['cat']:7.3f} {r['native']:9.3f} "
                f"{msps(r['samples'], r['native']):11.2f} {r['native'] / r['cat']:6.1f}")
        if args.before:
            line += f" {r['before']:9.3f} {msps(r['samples'], r['before']):11.2f} {r['before'] / r['native']:8.2f}x"
        print(line + f"  {r['load_before']:9.2f}/{r['load_after']:.2f}")
    if threads:
        print(f"one file on {threads} threads (native.read_perf_data(threads={threads}), best of {args.repeat}):")
        print(f"{'shape':8} {'threads':>7} {'best s':>8} {'Msamples/s':>11} {'speed-up':>9}  dict vs threads=1")
        for r in rows:
            same = "identical" if r["difference"] is None else f"MISMATCH: {r['difference']}"
            print(f"{r['shape']:8} {threads:7d} {r['threaded']:8.3f} {msps(r['samples'], r['threaded']):11.2f} "
                  f"{r['native'] / r['threaded']:8.2f}x  {same}")
    else:
        print("one file on several threads: not measured (this checkout's native.read_perf_data takes no `threads`)")
    for r in rows:
        got = msps(r["samples"], r["native"])
        print(f"target >= {TARGET_MSPS:g} Msamples/s on one core: {r['shape']} {got:.2f} Msamples/s, "
              f"{'met' if got >= TARGET_MSPS else 'NOT met'} ({got / TARGET_MSPS:.2f} of target)")
    if threads:
        ups = ", ".join(f"{r['shape']} {r['native'] / r['threaded']:.2f}x" for r in rows)
        met = all(r["native"] / r["threaded"] >= TARGET_SPEEDUP for r in rows)
        print(f"target one file on 2 cores >= {TARGET_SPEEDUP}x one core: {ups} on {threads} threads: "
              f"{'met' if met else 'NOT met'}")
    else:
        print(f"target one file on 2 cores >= {TARGET_SPEEDUP}x one core: not measured (no `threads`)")
    mismatches = [r["shape"] for r in rows if threads and r["difference"] is not None]
    if mismatches:
        print(f"MISMATCH: threads={threads} returned a different dict from threads=1 for {', '.join(mismatches)}")
    print(json.dumps({"shapes": rows}))
    if mismatches:
        raise SystemExit(1)


def curve_counts(ncpu: int) -> list[int]:
    """1, 2, 4, ... up to the CPUs, and the CPUs themselves."""
    counts = [1]
    while counts[-1] * 2 <= ncpu:
        counts.append(counts[-1] * 2)
    if counts[-1] != ncpu:
        counts.append(ncpu)
    return counts


def together(data: Path, ks: Path, n: int, symfs: Path | None = None) -> float:
    """``n`` one-thread reads of ``data`` in ``n`` fresh processes started together (each waits,
    imported, for the word): the seconds of the slowest read."""
    procs = [subprocess.Popen(child(data, ks, "together-curve1", symfs=symfs), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    try:
        for p in procs:
            if p.stdout.readline() != "ready\n":
                raise SystemExit(f"a batch read of {data} did not start: {p.communicate()[1].strip()[-2000:]}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [(p.stdout.read(), p.stderr.read()) for p in procs]
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finally:
        for p in procs:
            p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
    bad = [err for p, (_, err) in zip(procs, outs) if p.returncode != 0]
    if bad:
        raise SystemExit(f"a batch read of {data} failed: {bad[0].strip()[-2000:]}")
    return max(json.loads(out)["seconds"] for out, _ in outs)


def thread_curve(data: Path, ks: Path, counts: list[int], repeat: int, symfs: Path | None = None,
                 before: Path | None = None) -> list[dict]:
    """One file read by ``native.read_perf_data(threads=N)`` for each N of ``counts``: ``repeat``
    interleaved rounds (each runs every N once, in a rotated order), each a fresh child timing the
    read itself; per N the best round (its CPU time: user + sys of every thread over the read),
    the median, and the first difference of the dict from the one of ``threads=1`` (None).
    In the same rounds, the machine's ceiling for N: one-thread reads in N processes at once (as many
    as the CPUs when N is more: N threads cannot use more), the best round's slowest read
    (``together``, seconds; ``at_once``, how many). With ``before`` (another checkout), its read
    at N threads too, in the same rounds (``before``: the best round's seconds; ``before_vcsw``)."""
    ncpu = len(os.sched_getaffinity(0))
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    batches: dict[int, list[float]] = {n: [] for n in counts}
    old: dict[int, list[dict]] = {n: [] for n in counts}
    for r in range(repeat):
        k = r % len(counts)
        for n in counts[k:] + counts[:k]:
            runs[n].append(kperfdiff_run(data, ks, f"curve{n}", symfs=symfs))
            if before:
                old[n].append(kperfdiff_run(data, ks, f"curve{n}", before, symfs))
            m = min(n, ncpu)
            batches[n].append(together(data, ks, m, symfs) if m > 1 else runs[n][-1]["seconds"])
    rows = []
    for n in counts:
        b = min(runs[n], key=lambda i: i["seconds"])
        b.update(threads=n, median=statistics.median(i["seconds"] for i in runs[n]), together=min(batches[n]),
                 at_once=min(n, ncpu),
                 difference=None if n == 1 else kperfdiff_run(data, ks, f"compare{n}", symfs=symfs)["difference"])
        if before:
            o = min(old[n], key=lambda i: i["seconds"])
            b.update(before=o["seconds"], before_vcsw=o["vcsw"])
        rows.append(b)
    return rows


def topology() -> str:
    """The allowed CPUs as cores: "16 CPUs on 8 cores (2 threads a core)", from sysfs (what the
    ceiling depends on: two threads of one core share its units and caches)."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = set()
    for c in cpus:
        try:
            cores.add(Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read_text().strip())
        except OSError:
            return f"{len(cpus)} CPUs (cores unknown: no sysfs topology)"
    per = len(cpus) / len(cores)
    return f"{len(cpus)} CPUs on {len(cores)} cores ({per:g} thread{'s' if per != 1 else ''} a core)"


def print_curve(data: Path, rows: list[dict], repeat: int) -> bool:
    """The curve's table; False when a thread count's dict differs from one thread's."""
    base = next((r["seconds"] for r in rows if r["threads"] == 1), None)
    before = "before" in rows[0]
    print(f"one file on 1..N threads: {data} ({data.stat().st_size / 1e6:.1f} MB, {rows[0]['samples']} samples); "
          f"native.read_perf_data(threads=N), best of {repeat} interleaved rounds, each a fresh child process "
          f"timing the read; {topology()}; load 1m {load1():.2f}")
    print(f"{'threads':>7} {'best s':>8} {'median s':>9} {'speed-up':>9} {'Msamples/s':>11} {'CPU s':>7} "
          f"{'CPU/wall':>8} {'usr s':>7} {'sys s':>7} {'vcsw':>6} {'N at once s':>11} {'ceiling':>8} "
          f"{'of ceil.':>8}" + (f" {'before s':>8} {'vcsw':>6} {'gain':>8}" if before else "")
          + "  dict vs threads=1")
    same = True
    for r in rows:
        cpu = r["user"] + r["sys"]
        up = f"{base / r['seconds']:8.2f}x" if base else f"{'':>9}"
        ceiling = r["at_once"] * base / r["together"] if base else None
        ceil = f"{ceiling:7.2f}x {base / r['seconds'] / ceiling:8.2f}" if base else f"{'':>8} {'':>8}"
        if r["threads"] == 1:
            ident = "(the reference)"
        elif r["difference"] is None:
            ident = "identical"
        else:
            ident, same = f"MISMATCH: {r['difference']}", False
        old = f" {r['before']:8.3f} {r['before_vcsw']:6d} {r['before'] / r['seconds']:7.2f}x" if before else ""
        print(f"{r['threads']:7d} {r['seconds']:8.3f} {r['median']:9.3f} {up} {msps(r['samples'], r['seconds']):11.2f} "
              f"{cpu:7.3f} {cpu / r['seconds']:8.2f} {r['user']:7.3f} {r['sys']:7.3f} {r['vcsw']:6d} "
              f"{r['together']:11.3f} {ceil}{old}  {ident}")
    print("  speed-up: best of threads=1 / best of threads=N; CPU: user+sys of the child's threads over the read; "
          "CPU/wall near N: N threads busy; vcsw: voluntary context switches (blocking) over the read")
    print("  N at once: the slowest of N one-thread reads in N processes started together (best round; as many "
          "as the CPUs when N is more); ceiling: their count x threads=1 / that, the reads a second this machine "
          "does on N CPUs against one read alone, the most any reader of one file on N threads could reach here; "
          "of ceil.: speed-up / ceiling" + ("; before: the other checkout's best read at N threads in the same "
                                            "rounds, its vcsw, and its time / this one's" if before else ""))
    return same


def single_file(data: Path, ks: Path, args, threads: int | None) -> None:
    """The detailed rows of one file (--file)."""
    size_mb = data.stat().st_size / 1e6
    load_before = os.getloadavg()
    cat_s = cat_seconds(data, args.repeat)

    rows = []
    one = best(data, ks, "native", args.repeat)
    samples = one["samples"]
    t_native = one["seconds"]
    # Peak memory of the whole child (interpreter + numpy + ingest), from wait4.
    _, rss_native = timed(child(data, ks, "native"))
    info_load = kperfdiff_run(data, ks, "load")
    _, rss_load = timed(child(data, ks, "load"))
    rows.append(("native ingest (native.read_perf_data)", t_native, rss_native))
    rows.append(("ingest.perfdata.load (native + Profile)", info_load["seconds"], rss_load))
    # per process name (export and diff --folded ask for it): what it costs over the default
    by_proc = best(data, ks, "native-by-process", args.repeat)
    rows.append(("native ingest, by_process=True", by_proc["seconds"],
                 timed(child(data, ks, "native-by-process"))[1]))
    info_proc = kperfdiff_run(data, ks, "load-by-process")
    rows.append(("ingest.perfdata.load(by_process=True)", info_proc["seconds"],
                 timed(child(data, ks, "load-by-process"))[1]))
    if args.before:
        old = best(data, ks, "native", args.repeat, args.before)
        rows.append(("before: native ingest", old["seconds"], timed(child(data, ks, "native", args.before))[1]))
    fig = None
    if threads:
        fig = threads_figure(data, ks, threads, args.repeat)
        rows.append((f"native ingest, threads={threads}", fig["seconds"],
                     timed(child(data, ks, f"threads{threads}"))[1]))
    if args.full:
        perf_g, rss_g = timed(["perf", "report", "-i", str(data), "--kallsyms", str(ks), "--stdio", "--sort", "sym"])
        rows.append(("perf report --stdio --sort sym (call graph)", perf_g, rss_g))
    perf_ng, rss_ng = timed(["perf", "report", "-i", str(data), "--kallsyms", str(ks), "--stdio", "--sort", "sym",
                             "-g", "none", "--no-children"])
    rows.append(("perf report --stdio --sort sym -g none --no-children", perf_ng, rss_ng))
    perf_s, rss_s = timed(["perf", "script", "-i", str(data), "--kallsyms", str(ks)])
    rows.append(("perf script > /dev/null", perf_s, rss_s))
    rows.append(("cat perf.data > /dev/null (page cache)", cat_s, 0.0))
    ncpu = len(os.sched_getaffinity(0))
    pair = {w: min(kperfdiff_run(data, ks, f"pair{w}")["seconds"] for _ in range(max(1, args.repeat // 2)))
            for w in (1, ncpu)}

    load_after = os.getloadavg()
    print(f"file: {data} ({size_mb:.1f} MB, {samples} samples, {one['stacks']} unique stacks, "
          f"{one['symbols']} symbols)")
    print(f"load average (1/5/15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in load_after)} on {ncpu} CPUs; "
          f"native ingest best of {args.repeat}")
    print(f"{'what':55s} {'seconds':>9s} {'Msamples/s':>11s} {'x native':>12s} {'max RSS MiB':>12s}")
    for name, sec, rss in rows:
        print(f"{name:55s} {sec:9.3f} {msps(samples, sec):11.2f} {sec / t_native:12.1f} {rss:12.1f}")
    print(f"target: >= {TARGET_MSPS:g} Msamples/s with call chains on one core; native ingest reads "
          f"{msps(samples, t_native):.2f} Msamples/s, {size_mb / t_native:.0f} MB/s vs page cache "
          f"{size_mb / cat_s:.0f} MB/s ({t_native / cat_s:.1f}x the time of cat)")
    if fig:
        same = "identical" if fig["difference"] is None else f"MISMATCH: {fig['difference']}"
        print(f"target: one file on 2 cores >= {TARGET_SPEEDUP}x one core: threads={threads} "
              f"{t_native / fig['seconds']:.2f}x; dict against threads=1: {same}")
    else:
        print(f"target: one file on 2 cores >= {TARGET_SPEEDUP}x one core: not measured "
              f"(this checkout's native.read_perf_data takes no `threads`)")
    print(f"two copies of the file, ingest.perfdata.load: {pair[1]:.3f} s one after the other, {pair[ncpu]:.3f} s "
          f"with {ncpu} at once ({pair[1] / pair[ncpu]:.2f}x; {2 * samples / pair[ncpu] / 1e6:.2f} Msamples/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shapes.add_arguments(ap)
    ap.add_argument("--repeat", type=int, default=9, help="runs of each timing (best is reported)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads of the one-file-on-all-cores figure (default: the CPUs)")
    ap.add_argument("--file", type=Path, help="time this perf.data in detail instead of the shapes")
    ap.add_argument("--kallsyms", type=Path, help="the kallsyms of --file")
    ap.add_argument("--full", action="store_true", help="with --file: add perf report with the call graph (slow)")
    ap.add_argument("--curve", action="store_true",
                    help="only the thread curve: the file (--file) or each shape read on 1, 2, 4, ... threads up to "
                         "the CPUs (--curve-threads), with speed-up, CPU time and the dict against one thread")
    ap.add_argument("--curve-threads", metavar="LIST",
                    help="the thread counts of --curve, comma-separated (default: 1, 2, 4, ... up to the CPUs)")
    ap.add_argument("--symfs", type=Path, help="with --curve: read user-space symbols from this folder")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="another kperfdiff checkout (built with make setup) to time beside this one")
    args = ap.parse_args()
    if shutil.which("perf") is None and not (args.curve and args.file):    # the curve of a file reads it alone
        raise SystemExit("perf is not installed")
    if args.repeat < 1 or args.threads < 1:
        raise SystemExit("--repeat and --threads must be at least 1")
    if args.before and not (args.before / ".venv" / "bin" / "python").exists():
        raise SystemExit(f"--before {args.before}: no .venv/bin/python there (run make setup in it)")
    threads = args.threads if has_threads() else None
    if args.curve:
        if not threads:
            raise SystemExit("--curve: this checkout's native.read_perf_data takes no `threads`")
        counts = ([int(x) for x in args.curve_threads.split(",") if x] if args.curve_threads
                  else curve_counts(len(os.sched_getaffinity(0))))
        if 1 not in counts:
            counts.insert(0, 1)
        if args.file:
            if not args.kallsyms:
                raise SystemExit("--file needs --kallsyms")
            todo = [(args.file, args.kallsyms)]
        else:
            picked = [s for s in args.shapes.split(",") if s]
            files = shapes.recordings(args.dir, picked, sides=("a",), seconds=args.seconds, freq=args.freq,
                                      rerecord=args.rerecord)
            todo = [(files[(s, "a")], args.dir / "kallsyms") for s in picked]
        ok = True
        for data, ks in todo:
            with open(data, "rb") as f:                   # into the page cache
                while f.read(1 << 20):
                    pass
            ok &= print_curve(data, thread_curve(data, ks, counts, args.repeat, args.symfs, args.before), args.repeat)
        if not ok:
            raise SystemExit(1)
        return
    if args.file:
        if not args.kallsyms:
            raise SystemExit("--file needs --kallsyms")
        for f in (args.file, args.kallsyms):
            if not f.is_file():
                raise SystemExit(f"{f}: no such file")
        single_file(args.file, args.kallsyms, args, threads)
        return
    picked = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in picked if s not in shapes.SHAPES]
    if unknown or not picked:
        raise SystemExit(f"--shapes {args.shapes}: the shapes are {', '.join(shapes.SHAPES)}")
    files = shapes.recordings(args.dir, picked, sides=("a",), seconds=args.seconds, freq=args.freq,
                              rerecord=args.rerecord)
    ks = args.dir / "kallsyms"
    rows = [time_shape(s, files[(s, "a")], ks, args, threads) for s in picked]
    print_shapes(rows, args, threads)


if __name__ == "__main__":
    main()
