"""The recording shapes the speed harnesses time (`bench_ingest.py`, `bench_diff.py`).

Each shape is a way kernel engineers record, on this machine's CPUs, with call chains
at 20 kHz for about 30 s (at least 800,000 samples on 2 CPUs):

* ``fork``: system-wide while one process per CPU forks and reaps children in a loop
  (a C program compiled here): short-lived processes that share one binary's mappings;
* ``shell``: system-wide while one shell loop per CPU runs ``ls -R`` over each folder of
  ``/usr/share/doc``: thousands of short-lived processes, each mapping the same libraries
  at new addresses (address-space randomisation);
* ``lsr``: system-wide while one shell loop per CPU runs ``ls -R /usr`` (output to ``/dev/null``):
  a few long-lived processes deep in the kernel's directory and stat paths, with deep call chains;
* ``threads``: one long-running multi-threaded program (``xz -T<CPUs>`` compressing the
  system's libraries), recorded by command, user frames in shared libraries;
* ``kernel``: system-wide, kernel samples only (``cpu-clock:k``), one ``dd`` per CPU
  copying ``/dev/zero`` to ``/dev/null`` in 64 KB blocks (an idle CPU takes no samples
  here, so a single copy leaves the recording at ~470,000 samples).

Each shape is recorded twice (``a`` and ``b``, the two sides of a diff) into
``DIR/<shape>-<side>.perf.data`` with ``DIR/kallsyms`` beside them, and reused while
they exist (``--rerecord`` to start again). Not a test: the harnesses use it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

SHAPES = ("fork", "shell", "lsr", "threads", "kernel")
MIN_SAMPLES = 800_000

FORK_C = r"""
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    for (;;) {
        pid_t p = fork();
        if (p == 0) _exit(0);
        if (p > 0) waitpid(p, 0, 0);
    }
}
"""


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _fork_program(folder: Path) -> Path:
    exe = folder / "forkloop"
    if not exe.exists():
        src = folder / "forkloop.c"
        src.write_text(FORK_C)
        subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def _xz_input(folder: Path) -> Path:
    data = folder / "xz-input.bin"
    if not data.exists():
        with data.open("wb") as out:
            libs = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("*.so*"))
            for lib in libs:
                if lib.is_file() and out.tell() < 400 << 20:
                    out.write(lib.read_bytes())
    return data


def record_argv(shape: str, folder: Path, out: Path, seconds: int, freq: int) -> list[str]:
    """The perf record command line of one shape."""
    n = _cpus()
    common = ["perf", "record", "-q", "-F", str(freq), "-g", "-o", str(out)]
    if shape == "fork":
        exe = _fork_program(folder)
        loops = " & ".join([f"timeout {seconds} {exe}"] * n)
        return common + ["-e", "cpu-clock", "-a", "--", "sh", "-c", f"{loops}; wait"]
    if shape == "shell":
        loop = ("while :; do for d in /usr/share/doc/*; do ls -R \"$d\" > /dev/null; done; done")
        loops = " & ".join([f"timeout {seconds} sh -c '{loop}'"] * n)
        return common + ["-e", "cpu-clock", "-a", "--", "sh", "-c", f"{loops}; wait"]
    if shape == "lsr":
        loop = "while :; do ls -R /usr > /dev/null; done"
        loops = " & ".join([f"timeout {seconds} sh -c '{loop}'"] * n)
        return common + ["-e", "cpu-clock", "-a", "--", "sh", "-c", f"{loops}; wait"]
    if shape == "threads":
        data = _xz_input(folder)
        work = f"while :; do xz -T{n} -6 -c < {data} > /dev/null; done"
        return common + ["-e", "cpu-clock", "--", "sh", "-c", f"timeout {seconds} sh -c '{work}'; true"]
    if shape == "kernel":
        # a third longer: only the kernel's share of each CPU's time is sampled
        copies = " & ".join([f"timeout {seconds * 4 // 3} dd if=/dev/zero of=/dev/null bs=64k 2>/dev/null"] * n)
        return common + ["-e", "cpu-clock:k", "-a", "--", "sh", "-c", f"{copies}; wait; true"]
    raise ValueError(f"unknown shape {shape!r}; the shapes are {', '.join(SHAPES)}")


def recordings(folder: Path, shapes=SHAPES, sides=("a",), seconds: int = 30, freq: int = 20000,
               rerecord: bool = False) -> dict[tuple[str, str], Path]:
    """Each (shape, side)'s perf.data in ``folder``, recorded when missing, and ``folder/kallsyms``."""
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for shape in shapes:
        for side in sides:
            out = folder / f"{shape}-{side}.perf.data"
            if rerecord or not out.exists():
                print(f"recording shape {shape} ({side}): {seconds} s at {freq} Hz into {out} ...", file=sys.stderr)
                tmp = out.with_suffix(".part")
                subprocess.run(record_argv(shape, folder, tmp, seconds, freq), check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                tmp.rename(out)
            files[(shape, side)] = out
    ks = folder / "kallsyms"
    if rerecord or not ks.exists():
        shutil.copy("/proc/kallsyms", ks)
    return files


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options both harnesses take to choose and record the shapes."""
    ap.add_argument("--shapes", default=",".join(SHAPES),
                    help=f"comma-separated recording shapes to time (default: all of {','.join(SHAPES)})")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kpd-shapes"),
                    help="where the shapes' recordings and kallsyms are kept (default: /tmp/kpd-shapes)")
    ap.add_argument("--rerecord", action="store_true", help="record the shapes again")
    ap.add_argument("--seconds", type=int, default=30, help="length of a recording")
    ap.add_argument("--freq", type=int, default=20000, help="sampling frequency of a recording")
