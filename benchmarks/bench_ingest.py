"""Harness (not a test): how fast kperfdiff reads a large perf.data, against perf.

Records once (cached in a temp folder) a system-wide profile with call chains
and at least ~1M samples, then times in one run:

* kperfdiff's native ingest (``native.read_perf_data``) and the full
  ``ingest.perfdata.load`` (native + building the Profile), each also with
  ``by_process=True`` (stacks per process name, as export and diff --folded read);
* ``perf report --stdio --sort sym`` with the call graph and with ``-g none
  --no-children``;
* ``perf script > /dev/null``;
* reading the file at page-cache speed (``cat > /dev/null``), the floor;
* two copies of the file read one after the other and at once (``ingest.load.load_many``
  with one worker and with one per CPU): how reading scales with cores.

Prints samples per second, ratios against kperfdiff and peak memory (max RSS
of each child process; kperfdiff runs in a child too, so the numbers compare),
with the load average before and after: on a shared machine, quote the load
with the figures (the best of --repeat runs is the least disturbed one).

    python benchmarks/bench_ingest.py [--seconds 30] [--freq 20000] [--dir DIR] [--rerecord] [--repeat 5]
        [--file PERF.DATA --kallsyms FILE]   (time a file of your own instead of recording one)
        [--before DIR]   (also time another checkout of kperfdiff, built with make setup, in the same run)

The Rust reader alone, without Python (for profiling with ``perf record``):

    cd native && cargo run --release --example ingest_time -- FILE KALLSYMS [REPEAT]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def record(folder: Path, seconds: int, freq: int) -> Path:
    data = folder / "big.perf.data"
    if data.exists():
        return data
    ncpu = os.cpu_count() or 2
    # One busy syscall loop per CPU: enters the kernel, deep-ish call chains.
    work = " & ".join([f"timeout {seconds} dd if=/dev/zero of=/dev/null bs=4k"] * ncpu) + " & wait"
    print(f"recording {seconds}s system-wide at {freq} Hz on {ncpu} CPUs into {data} ...", file=sys.stderr)
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-g", "-a", "-o", str(data),
                    "--", "sh", "-c", work], check=True, stdout=subprocess.DEVNULL)
    shutil.copy("/proc/kallsyms", folder / "kallsyms")
    return data


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
import json, sys, time
sys.path.insert(0, sys.argv[4])
from functools import partial
from kperfdiff import native
from kperfdiff.ingest import perfdata
path, ks, mode = sys.argv[1], sys.argv[2], sys.argv[3]
t = time.perf_counter()
if mode == "native":
    d = native.read_perf_data(path, kallsyms=ks)
    n = sum(e["samples"] for e in d["events"])
    extra = {"stacks": len(d["stack_offsets"]) // 8 - 1, "symbols": len(d["sym_names"])}
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


def child(data: Path, ks: Path, mode: str, root: Path = ROOT) -> list[str]:
    """The command that reads ``data`` with the kperfdiff checkout at ``root`` (its own venv)."""
    return [str(root / ".venv" / "bin" / "python"), "-c", CHILD, str(data), str(ks), mode, str(root / "src")]


def kperfdiff_run(data: Path, ks: Path, mode: str, root: Path = ROOT) -> dict:
    """Time kperfdiff's ingest inside a fresh child (its own timer, without interpreter start-up)."""
    p = subprocess.run(child(data, ks, mode, root), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"kperfdiff ingest failed: {p.stderr}")
    return json.loads(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--freq", type=int, default=20000)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "kperfdiff-bench-ingest")
    ap.add_argument("--rerecord", action="store_true")
    ap.add_argument("--repeat", type=int, default=5, help="runs of kperfdiff ingest (best is reported)")
    ap.add_argument("--file", type=Path, help="a perf.data to time instead of recording one")
    ap.add_argument("--kallsyms", type=Path, help="the kallsyms of --file")
    ap.add_argument("--before", type=Path, metavar="DIR",
                    help="another kperfdiff checkout (built with make setup) to time beside this one")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    if args.file:
        if not args.kallsyms:
            raise SystemExit("--file needs --kallsyms")
        data, ks = args.file, args.kallsyms
    else:
        args.dir.mkdir(parents=True, exist_ok=True)
        if args.rerecord:
            (args.dir / "big.perf.data").unlink(missing_ok=True)
        data = record(args.dir, args.seconds, args.freq)
        ks = args.dir / "kallsyms"
    size_mb = data.stat().st_size / 1e6

    load_before = os.getloadavg()
    cat_s, _ = timed(["cat", str(data)])  # warms the page cache too
    cat_s = min(timed(["cat", str(data)])[0] for _ in range(args.repeat))

    rows = []
    best = min((kperfdiff_run(data, ks, "native") for _ in range(args.repeat)), key=lambda i: i["seconds"])
    samples = best["samples"]
    t_native = best["seconds"]
    # Peak memory of the whole child (interpreter + numpy + ingest), from wait4.
    _, rss_native = timed(child(data, ks, "native"))
    info_load = kperfdiff_run(data, ks, "load")
    _, rss_load = timed(child(data, ks, "load"))
    rows.append(("kperfdiff native ingest", t_native, rss_native))
    rows.append(("kperfdiff ingest.perfdata.load", info_load["seconds"], rss_load))
    # per process name (export and diff --folded ask for it): what it costs over the default
    by_proc = min((kperfdiff_run(data, ks, "native-by-process") for _ in range(args.repeat)),
                  key=lambda i: i["seconds"])
    rows.append(("kperfdiff native ingest, by_process=True", by_proc["seconds"],
                 timed(child(data, ks, "native-by-process"))[1]))
    info_proc = kperfdiff_run(data, ks, "load-by-process")
    rows.append(("kperfdiff ingest.perfdata.load(by_process=True)", info_proc["seconds"],
                 timed(child(data, ks, "load-by-process"))[1]))
    if args.before:
        old = min((kperfdiff_run(data, ks, "native", args.before) for _ in range(args.repeat)),
                  key=lambda i: i["seconds"])
        rows.append(("before: kperfdiff native ingest", old["seconds"], timed(child(data, ks, "native", args.before))[1]))
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
    print(f"file: {data} ({size_mb:.1f} MB, {samples} samples, {best['stacks']} unique stacks, "
          f"{best['symbols']} symbols)")
    print(f"load average (1/5/15 min) before {'/'.join(f'{x:.2f}' for x in load_before)}, "
          f"after {'/'.join(f'{x:.2f}' for x in load_after)} on {os.cpu_count()} CPUs; "
          f"kperfdiff native best of {args.repeat}")
    print(f"{'what':55s} {'seconds':>9s} {'Msamples/s':>11s} {'x kperfdiff':>12s} {'max RSS MiB':>12s}")
    for name, sec, rss in rows:
        print(f"{name:55s} {sec:9.3f} {samples / sec / 1e6:11.2f} {sec / t_native:12.1f} {rss:12.1f}")
    print(f"target: >= 10 Msamples/s with call chains on one core; native ingest reads "
          f"{samples / t_native / 1e6:.2f} Msamples/s, {size_mb / t_native:.0f} MB/s vs page cache "
          f"{size_mb / cat_s:.0f} MB/s ({t_native / cat_s:.1f}x the time of cat)")
    print(f"two copies of the file, ingest.perfdata.load: {pair[1]:.3f} s one after the other, {pair[ncpu]:.3f} s "
          f"with {ncpu} at once ({pair[1] / pair[ncpu]:.2f}x; {2 * samples / pair[ncpu] / 1e6:.2f} Msamples/s)")


if __name__ == "__main__":
    main()
