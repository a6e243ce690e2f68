"""Run benchmark worker processes and read what they report.

The worker's line protocol is documented in ``families/kpd.h``. This module
spawns one process per copy (``-P``), starts the copies together, enforces
a timeout, and checks the shape of every record: a worker that crashes,
hangs, or prints something malformed becomes a failed :class:`WorkerOutput`
with the reason, never an exception that stops the suite.
"""
from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import noise as nz

PROTOCOL_VERSION = 1


@dataclass
class WorkerOutput:
    bench: str = ""
    unit: str = ""
    better: str = ""
    overhead: float | None = None
    intervals: list[tuple[float, int, int]] = field(default_factory=list)  # value, ops, ns
    info: dict[str, str] = field(default_factory=dict)
    skip: str | None = None
    error: str | None = None
    ops: int = 0
    cpu_user_ns: int = 0
    cpu_sys_ns: int = 0
    exit_status: int | None = None
    wall_s: float = 0.0
    stderr: str = ""
    declared_error: bool = False  # the error came from the worker's own `error` line
    noise: nz.ProcessNoise | None = None    # this copy's switches, migrations, run-queue wait
    rep_noise: nz.Noise | None = None       # the whole repetition's (run_copies with sampler=True)

    @property
    def status(self) -> str:
        if self.error:
            return "failed"
        if self.skip:
            return "skipped"
        return "ok"

    @property
    def values(self) -> list[float]:
        return [v for v, _, _ in self.intervals]


def parse_output(text: str, expect_bench: str | None = None) -> WorkerOutput:
    """Parse one worker's stdout. Problems set ``error``; nothing raises."""
    out = WorkerOutput()
    lines = text.splitlines()
    if not lines or not lines[0].startswith("kpd "):
        out.error = "the worker printed no kpd header"
        return out
    head = lines[0].split(maxsplit=2)
    if len(head) < 3 or head[1] != str(PROTOCOL_VERSION):
        out.error = f"the worker speaks an unknown protocol: {lines[0][:60]!r}"
        return out
    out.bench = head[2]
    ended = False
    for ln in lines[1:]:
        tag, _, rest = ln.partition(" ")
        try:
            if tag == "unit":
                unit, better = rest.split()
                if better not in ("lower", "higher"):
                    raise ValueError(better)
                out.unit, out.better = unit, better
            elif tag == "overhead":
                out.overhead = float(rest)
            elif tag == "interval":
                v, ops, ns = rest.split()
                val = float(v)
                if not math.isfinite(val):
                    raise ValueError(v)
                out.intervals.append((val, int(ops), int(ns)))
            elif tag == "info":
                k, _, v = rest.partition(" ")
                out.info[k] = v
            elif tag == "skip":
                out.skip = rest or "skipped without a reason"
            elif tag == "error":
                out.error = rest or "failed without a reason"
                out.declared_error = True
            elif tag == "end":
                ops, u, s = rest.split()
                out.ops, out.cpu_user_ns, out.cpu_sys_ns = int(ops), int(u), int(s)
                ended = True
            elif tag == "ready":
                pass
            else:
                raise ValueError(tag)
        except ValueError:
            out.error = out.error or f"the worker printed a malformed line: {ln[:80]!r}"
    if expect_bench and out.bench != expect_bench and not out.error:
        out.error = f"the worker answered for {out.bench!r}, not {expect_bench!r}"
    if out.error or out.skip:
        return out
    if not ended:
        out.error = "the worker stopped before its end record"
    elif not out.unit:
        out.error = "the worker declared no unit"
    elif not out.intervals:
        out.error = "the worker reported no interval"
    return out


def worker_argv(binary: Path, bench: str, params: dict[str, str], *, intervals: int | None = None,
                min_batch_ns: int | None = None, warmup: int | None = None, sync: bool = False) -> list[str]:
    argv = [str(binary), bench]
    if intervals is not None:
        argv += ["--intervals", str(intervals)]
    if warmup is not None:
        argv += ["--warmup", str(warmup)]
    if min_batch_ns is not None:
        argv += ["--min-batch-ns", str(int(min_batch_ns))]
    if sync:
        argv.append("--sync")
    argv += [f"{k}={v}" for k, v in params.items()]
    return argv


def _kill(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


SAMPLE_EVERY = 0.1   # seconds between reads of the workers' /proc sched counters


def _wait4(p: subprocess.Popen, timeout: float, tracker: nz.TaskTracker):
    """Reap ``p`` with ``os.wait4`` within ``timeout`` seconds, reading its sched counters
    until it has exited (a zombie keeps them: waitid WNOWAIT sees the exit without reaping).
    Sets ``p.returncode`` as Popen would (negative signal number when killed; 0 on ECHILD,
    someone else reaped it) and returns the rusage, or None. Raises TimeoutExpired."""
    if p.returncode is not None:
        return None
    end = time.monotonic() + timeout
    while True:
        try:
            exited = os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            p.returncode = 0
            return None
        tracker.sample([p.pid])
        if exited is not None:
            break
        if time.monotonic() >= end:
            raise subprocess.TimeoutExpired(p.args, timeout)
        time.sleep(0.01)
    try:
        _, status, rusage = os.wait4(p.pid, 0)
    except ChildProcessError:
        p.returncode = 0
        return None
    p.returncode = os.waitstatus_to_exitcode(status)
    return rusage


def run_copies(argv: list[str], copies: int, timeout: float, *, env: dict | None = None,
               prefix=None, sampler: bool = True) -> list[WorkerOutput]:
    """Run ``copies`` workers at once and return their parsed outputs.

    With more than one copy each worker gets ``--sync``: it prints ``ready``
    after its set-up, and all are released together by one byte on stdin,
    so they measure concurrently (lmbench's -P). Each worker runs in its own
    process group, killed whole on timeout or Ctrl-C. ``prefix`` wraps the
    command (for example ``perf record ... --``): a list of words, or a
    function of the copy index returning one (one perf.data per copy).

    Every output carries its copy's :class:`~kperfdiff.noise.ProcessNoise` (``noise``);
    with ``sampler`` each also carries the repetition's :class:`~kperfdiff.noise.Noise`
    (``rep_noise``, the same object), see :func:`run_copies_with_noise`.
    """
    return run_copies_with_noise(argv, copies, timeout, env=env, prefix=prefix, sampler=sampler)[0]


def run_copies_with_noise(argv: list[str], copies: int, timeout: float, *, env: dict | None = None,
                          prefix=None, sampler: bool = True) -> tuple[list[WorkerOutput], nz.Noise | None]:
    """:func:`run_copies`, also returning the repetition's noise: with ``sampler``, system
    snapshots before and after and a :class:`~kperfdiff.noise.RunnableSampler` during the
    copies (None without). The copies' sched counters are read every ``SAMPLE_EVERY`` s."""
    bench = argv[1]
    sync = copies > 1
    cmd = list(argv) + (["--sync"] if sync and "--sync" not in argv else [])
    procs: list[subprocess.Popen] = []
    tracker = nz.TaskTracker()
    rusages: dict[int, object] = {}
    runnable = nz.RunnableSampler(lambda: [p.pid for p in procs if p.returncode is None])
    before = nz.system_snapshot() if sampler else None
    t0 = time.monotonic()
    deadline = t0 + timeout
    bufs: dict[int, list[bytes]] = {}
    errs: dict[int, list[bytes]] = {}
    timed_out = False
    try:
        for copy in range(copies):
            words = (prefix(copy) if callable(prefix) else prefix or []) + cmd
            p = subprocess.Popen(words, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True, env=env)
            procs.append(p)
            bufs[p.pid] = []
            errs[p.pid] = []
        if sampler:     # once every copy is known, lest a copy being forked count as other work
            runnable.__enter__()
        sel = selectors.DefaultSelector()
        for p in procs:
            sel.register(p.stdout, selectors.EVENT_READ, (p, bufs))
            sel.register(p.stderr, selectors.EVENT_READ, (p, errs))
        ready: set[int] = set()
        released = not sync
        open_streams = 2 * len(procs)
        sampled = 0.0
        while open_streams:
            now = time.monotonic()
            if now - sampled >= SAMPLE_EVERY:
                tracker.sample([p.pid for p in procs])
                sampled = now
            left = deadline - now
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(left, max(0.0, sampled + SAMPLE_EVERY - now))):
                p, store = key.data
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    if not released and store is bufs:
                        ready.add(p.pid)  # exited before ready: do not wait on it
                    continue
                store[p.pid].append(chunk)
                if not released and store is bufs and b"ready\n" in b"".join(store[p.pid]):
                    ready.add(p.pid)
            if not released and len(ready) == len(procs):
                released = True
                for p in procs:
                    try:
                        p.stdin.write(b"g")
                        p.stdin.flush()
                    except (BrokenPipeError, OSError):
                        pass
        sel.close()
        if timed_out:
            _kill(procs)
        for p in procs:
            try:
                rusages[p.pid] = _wait4(p, max(1.0, deadline - time.monotonic()), tracker)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(procs)
    except BaseException:
        _kill(procs)
        raise
    finally:
        if sampler:
            runnable.__exit__(None, None, None)
        for p in procs:
            for s in (p.stdin, p.stdout, p.stderr):
                try:
                    s.close()
                except OSError:
                    pass
    wall = time.monotonic() - t0
    outs = []
    for p in procs:
        o = parse_output(b"".join(bufs[p.pid]).decode("utf-8", "replace"), bench)
        o.exit_status = p.returncode
        o.wall_s = wall
        o.stderr = b"".join(errs[p.pid]).decode("utf-8", "replace")[-2000:]
        o.noise = tracker.process_noise(p.pid, rusages.get(p.pid))
        if timed_out:
            o.error = f"timed out after {timeout:g} s"
        elif p.returncode is not None and p.returncode < 0:
            o.error = f"crashed with signal {signal.Signals(-p.returncode).name}"
        elif p.returncode and not o.declared_error:
            last = o.stderr.strip().splitlines()[-1:] or ["no message"]
            o.error = f"exited with status {p.returncode}: {last[0][:200]}"
        outs.append(o)
    rep = None
    if sampler:
        rep = nz.system_noise(before, nz.system_snapshot(), runnable, [o.noise for o in outs])
        for o in outs:
            o.rep_noise = rep
    return outs, rep
