"""Run benchmark worker processes and read what they report.

The worker's line protocol is documented in ``families/kpd.h``. This module
runs the copies (``-P``) through kpd-run (``families/kpd-run.c``, the copy runner
every target uses too), which starts them together and enforces a timeout, reads
their scheduler counters while they run, and checks the shape of every record: a worker that crashes,
hangs, or prints something malformed becomes a failed :class:`WorkerOutput`
with the reason, never an exception that stops the suite.
"""
from __future__ import annotations

import math
import os
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.bench import noise as nz
from kperfdiff.core.errors import BenchError
from kperfdiff.bench.build import build_runner

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


# -- running copies through kpd-run ------------------------------------------------------

SAMPLE_EVERY = 0.1   # seconds between reads of the copies' /proc sched counters
RUNNER_GRACE = 30.0  # seconds kpd-run may take beyond the timeout before it is killed itself
STDERR_TAIL = 2000   # characters of each copy's stderr kept


@dataclass
class RunnerStatus:
    """What kpd-run wrote in OUTDIR/status."""
    exit: dict[int, int | None] = field(default_factory=dict)    # >=0 exit, <0 -signal, None timed out
    rusage: dict[int, tuple[int, int, int]] = field(default_factory=dict)   # nvcsw, nivcsw, maxrss_kb
    wall_s: float = 0.0
    timed_out: bool = False


def parse_status(text: str) -> RunnerStatus:
    """kpd-run's status file (from this machine or fetched from a target); lines that do not
    parse are ignored, so a damaged file leaves copies without a status (failed), never raises."""
    st = RunnerStatus()
    for ln in text.splitlines():
        w = ln.split()
        try:
            if len(w) >= 3 and w[0] == "copy":
                c = int(w[1])
                if w[2] == "exit" and len(w) > 3:
                    st.exit[c] = int(w[3])
                elif w[2] == "signal" and len(w) > 3:
                    st.exit[c] = -int(w[3])
                elif w[2] == "timeout":
                    st.exit[c] = None
                    st.timed_out = True
            elif len(w) == 5 and w[0] == "rusage":
                st.rusage[int(w[1])] = (int(w[2]), int(w[3]), int(w[4]))
            elif len(w) == 2 and w[0] == "wall_ns":
                st.wall_s = int(w[1]) / 1e9
        except ValueError:
            continue
    return st


def copy_output(text: str, stderr: str, rc: int | None, *, bench: str | None, wall_s: float, timed_out: bool,
                timeout: float, error: str | None = None) -> WorkerOutput:
    """One copy's parsed output with its failure (timeout, signal, exit status) set, the same
    way for copies run here and on a target."""
    o = parse_output(text, bench or None)
    o.wall_s = wall_s
    o.stderr = stderr[-STDERR_TAIL:]
    o.exit_status = rc
    if error:
        o.error = error
    elif timed_out or rc is None:
        o.error = f"timed out after {timeout:g} s"
    elif rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        o.error = f"crashed with signal {name}"
    elif rc and not o.declared_error:
        last = o.stderr.strip().splitlines()[-1:] or ["no message"]
        o.error = f"exited with status {rc}: {last[0][:200]}"
    return o


def _read_text(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""


def _kill_groups(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class _Rusage:
    """The part of a copy's rusage kpd-run reports, shaped as os.wait4's."""

    def __init__(self, nvcsw: int, nivcsw: int, maxrss: int):
        self.ru_nvcsw, self.ru_nivcsw, self.ru_maxrss = nvcsw, nivcsw, maxrss


def run_copies(argv: list[str], copies: int, timeout: float, *, env: dict | None = None,
               prefix: list[str] | None = None, sampler: bool = True, cpus: list[int] | None = None,
               cgroup: str | None = None) -> list[WorkerOutput]:
    """Run ``copies`` workers at once (through kpd-run, the copy runner targets use too) and
    return their parsed outputs.

    With more than one copy each worker gets ``--sync``: it prints ``ready`` after its set-up,
    and all are released together by one byte on stdin, so they measure concurrently (lmbench's
    -P). Each worker runs in its own process group, killed whole on timeout or Ctrl-C.
    ``prefix`` wraps the command (for example ``perf record ... --``); a word holding
    ``@COPY@`` gets the copy index (one perf.data per copy).

    Every output carries its copy's :class:`~kperfdiff.bench.noise.ProcessNoise` (``noise``);
    with ``sampler`` each also carries the repetition's :class:`~kperfdiff.bench.noise.Noise`
    (``rep_noise``, the same object), see :func:`run_copies_with_noise`.
    ``cpus``: pin copy i to ``cpus[i]`` before it starts (its info then says ``cpu``); ``cgroup``: a
    cgroup's tasks (or cgroup.procs) file every copy joins first (a tuned machine's isolated cpuset).
    """
    return run_copies_with_noise(argv, copies, timeout, env=env, prefix=prefix, sampler=sampler, cpus=cpus,
                                 cgroup=cgroup)[0]


def run_copies_with_noise(argv: list[str], copies: int, timeout: float, *, env: dict | None = None,
                          prefix: list[str] | None = None, sampler: bool = True, cpus: list[int] | None = None,
                          cgroup: str | None = None) -> tuple[list[WorkerOutput], nz.Noise | None]:
    """:func:`run_copies`, also returning the repetition's noise: with ``sampler``, system
    snapshots before and after and a :class:`~kperfdiff.bench.noise.RunnableSampler` during the
    copies (None without). The copies' sched counters are read every ``SAMPLE_EVERY`` s, and
    once more when each has exited (kpd-run -w holds it unreaped until then)."""
    bench = argv[1]
    cmd = list(argv) + (["--sync"] if copies > 1 and "--sync" not in argv else [])
    with tempfile.TemporaryDirectory(prefix="kpd-copies-") as out:
        runner = [str(build_runner()), "-o", out, "-n", str(copies), "-t", f"{timeout:g}", "-w"]
        runner += (["-s"] if copies > 1 else [])
        runner += (["-c", ",".join(str(c) for c in cpus)] if cpus else []) + (["-g", cgroup] if cgroup else [])
        runner += ["--"] + list(prefix or []) + cmd
        tracker = nz.TaskTracker()
        pids: dict[int, int] = {}
        proc = subprocess.Popen(runner, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env=env)
        runnable = nz.RunnableSampler(lambda: list(pids.values()) + [proc.pid], runner=proc.pid)
        before = nz.system_snapshot() if sampler else None
        try:
            _follow(proc, copies, timeout, tracker, pids, runnable if sampler else None)
        except BaseException:
            _kill_groups([*pids.values(), proc.pid])
            raise
        finally:
            if sampler:
                runnable.__exit__(None, None, None)
            for s in (proc.stdin, proc.stdout):
                try:
                    s.close()
                except OSError:
                    pass
        own_err = proc.stderr.read().decode("utf-8", "replace")
        proc.stderr.close()
        st = parse_status(_read_text(Path(out) / "status"))
        if proc.returncode != 0 and not st.exit:
            raise BenchError(f"the copy runner kpd-run failed: {own_err.strip()[-300:] or proc.returncode}")
        outs = []
        for c in range(copies):
            o = copy_output(_read_text(Path(out) / f"c{c}.out"), _read_text(Path(out) / f"c{c}.err"),
                            st.exit.get(c), bench=bench, wall_s=st.wall_s, timed_out=st.timed_out, timeout=timeout)
            ru = st.rusage.get(c)
            o.noise = tracker.process_noise(pids.get(c, -1), _Rusage(*ru) if ru else None)
            if cpus:
                o.info["cpu"] = str(cpus[c % len(cpus)])
            outs.append(o)
    rep = None
    if sampler:
        rep = nz.system_noise(before, nz.system_snapshot(), runnable, [o.noise for o in outs])
        for o in outs:
            o.rep_noise = rep
    return outs, rep


def _follow(proc: subprocess.Popen, copies: int, timeout: float, tracker: nz.TaskTracker, pids: dict[int, int],
            runnable) -> None:
    """Read kpd-run's ``pid``/``exited`` lines until it ends: sample the copies' counters every
    SAMPLE_EVERY s and at each exit (then let kpd-run reap it)."""
    deadline = time.monotonic() + timeout + RUNNER_GRACE
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    sampled = 0.0
    try:
        while True:
            now = time.monotonic()
            if pids and now - sampled >= SAMPLE_EVERY:
                tracker.sample(list(pids.values()))
                sampled = now
            if now > deadline:
                _kill_groups([*pids.values(), proc.pid])
                break
            if not sel.select(timeout=SAMPLE_EVERY):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                w = line.split()
                if len(w) == 3 and w[0] == b"pid":
                    pids[int(w[1])] = int(w[2])
                    if runnable is not None and len(pids) == copies:
                        runnable.__enter__()    # once every copy is known, lest one being forked count as other work
                elif len(w) == 2 and w[0] == b"exited" and int(w[1]) in pids:
                    tracker.sample([pids[int(w[1])]])
                    proc.stdin.write(b"r")
                    proc.stdin.flush()
    finally:
        sel.close()
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_groups([proc.pid])
        proc.wait()
