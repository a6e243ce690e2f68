"""Knobs: the /proc/sys and /sys files an experiment may set, and putting them back.

An experiment file runs as root, so which files it may write is decided here,
not by the file:

* ``PERFORMANCE_KNOBS`` are allowed by default: the settings a kernel
  performance engineer flips (THP, huge pages, sched, vm, cpufreq, NUMA
  balancing, printk, watchdogs, perf limits, block queues, network buffers).
* Anything else needs ``kperfdiff run --allow-knob PATH`` (the person at the
  keyboard, not the file, says yes).
* ``DANGEROUS_KNOBS`` are refused always, even with ``--allow-knob``: files
  that make the kernel execute a program (core_pattern, modprobe, hotplug
  helpers, binfmt_misc, cgroup release agents), move processes between
  cgroups, bind drivers, load or lock out modules, or power the machine off.

The path is checked as written and after resolving symlinks; both must lie
under /sys or /proc/sys.

Pending restores live in one file per machine (``pending-knobs.json`` under
``$KPERFDIFF_STATE_DIR``, else /var/lib/kperfdiff as root, else
``$XDG_STATE_HOME/kperfdiff``), written before a knob is changed and emptied
once it is restored. Any kperfdiff command that finds an entry whose process
is gone puts that knob back first, whatever store it was given.

``kperfdiff system tune`` (:mod:`kperfdiff.measure.tune`) keeps its changes in
the same file: saved as its own while it applies them (so a kill -9 half-way
is repaired like any other), then *held* once the whole tune is applied, with
a note of what the tune is (``tuned``). Held entries are not repaired: they
stay until ``kperfdiff system reset`` restores them (:meth:`PendingRestores.release_held`),
or until a reboot, which undoes them anyway. Besides files (``kind`` "file"),
an entry may be a cgroup kperfdiff created (``kind`` "cgroup", ``original`` the
parent's tasks file): restoring it moves its tasks back to the parent and
removes it. Entries are restored newest first.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from kperfdiff.core.errors import BenchError, KperfdiffError
from kperfdiff.core.hosts import boot_id
from kperfdiff.core.state import PENDING_FILE, state_dir
from kperfdiff.bench.noise import stat_fields

KNOB_ROOTS = ("/sys/", "/proc/sys/")

# (pattern, what it is). ``*`` stays inside one path component, ``**`` crosses them.
PERFORMANCE_KNOBS: tuple[tuple[str, str], ...] = (
    ("/sys/kernel/mm/transparent_hugepage/*", "THP mode, defrag, zero page, shmem"),
    ("/sys/kernel/mm/transparent_hugepage/hugepages-*/*", "per-size (mTHP) modes"),
    ("/sys/kernel/mm/transparent_hugepage/khugepaged/*", "khugepaged scan rate and limits"),
    ("/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages", "huge page pool size"),
    ("/sys/kernel/mm/hugepages/hugepages-*/nr_overcommit_hugepages", "huge page overcommit"),
    ("/sys/devices/system/node/node*/hugepages/hugepages-*/nr_hugepages", "per-node huge page pool"),
    ("/sys/kernel/mm/ksm/*", "KSM (same-page merging)"),
    ("/sys/kernel/mm/lru_gen/enabled", "multi-gen LRU"),
    ("/sys/kernel/mm/numa/demotion_enabled", "memory tier demotion"),
    ("/proc/sys/vm/*", "vm: swappiness, dirty_*, drop_caches, compaction, overcommit, zone_reclaim_mode ..."),
    ("/proc/sys/kernel/sched_*", "scheduler sysctls"),
    ("/sys/kernel/debug/sched/**", "scheduler debugfs tunables (base_slice_ns, migration_cost_ns ...)"),
    ("/proc/sys/kernel/numa_balancing*", "automatic NUMA balancing"),
    ("/proc/sys/kernel/printk*", "console log level and rate limits (printk off)"),
    ("/proc/sys/kernel/nmi_watchdog", "NMI watchdog"),
    ("/proc/sys/kernel/watchdog*", "lockup watchdogs"),
    ("/proc/sys/kernel/soft_watchdog", "soft lockup watchdog"),
    ("/proc/sys/kernel/timer_migration", "timer migration"),
    ("/proc/sys/kernel/perf_*", "perf limits: paranoid, sample rate, mlock, stack depth"),
    ("/proc/sys/kernel/kptr_restrict", "kernel pointers for profilers"),
    ("/proc/sys/kernel/randomize_va_space", "address space randomisation"),
    ("/proc/sys/kernel/split_lock_mitigate", "split lock mitigation"),
    ("/proc/sys/kernel/task_delayacct", "delay accounting"),
    ("/proc/sys/fs/pipe-*", "pipe size limits"),
    ("/proc/sys/fs/file-max", "open file limit"),
    ("/proc/sys/fs/nr_open", "per-process file limit"),
    ("/proc/sys/fs/aio-max-nr", "AIO limit"),
    ("/proc/sys/net/core/*", "network core: buffers, busy polling, backlog"),
    ("/proc/sys/net/ipv4/tcp_*", "TCP buffers and behaviour"),
    ("/sys/devices/system/cpu/cpufreq/boost", "frequency boost"),
    ("/sys/devices/system/cpu/cpufreq/policy*/scaling_*", "cpufreq governor and min/max frequency"),
    ("/sys/devices/system/cpu/cpufreq/policy*/energy_performance_preference", "EPP"),
    ("/sys/devices/system/cpu/cpufreq/policy*/boost", "per-policy boost"),
    ("/sys/devices/system/cpu/cpu*/cpufreq/*", "cpufreq, through the per-CPU link"),
    ("/sys/devices/system/cpu/intel_pstate/*", "intel_pstate: no_turbo, min/max_perf_pct"),
    ("/sys/devices/system/cpu/amd_pstate/status", "amd_pstate mode"),
    ("/sys/devices/system/cpu/cpu*/cpuidle/state*/disable", "idle states"),
    ("/sys/devices/system/cpu/cpu*/online", "CPU online (hotplug)"),
    ("/sys/devices/system/cpu/smt/control", "SMT on/off"),
    ("/sys/block/*/queue/*", "block queue: scheduler, read_ahead_kb, nr_requests"),
    ("/sys/devices/**/block/*/queue/*", "block queue, through the device path"),
)

# Refused always: (pattern, why). Checked on the path as written and as resolved.
DANGEROUS_KNOBS: tuple[tuple[str, str], ...] = (
    ("/proc/sys/kernel/core_pattern", "a '|' value makes the kernel run a program as root"),
    ("/proc/sys/kernel/core_pipe_limit", "belongs to the core_pattern program"),
    ("/proc/sys/kernel/modprobe", "the kernel runs that program as root"),
    ("/proc/sys/kernel/hotplug", "the kernel runs that program as root"),
    ("/proc/sys/kernel/poweroff_cmd", "the kernel runs that program as root"),
    ("/proc/sys/kernel/usermodehelper/**", "controls the programs the kernel runs"),
    ("/proc/sys/kernel/modules_disabled", "cannot be undone until reboot"),
    ("/proc/sys/kernel/kexec*", "controls loading another kernel"),
    ("/proc/sys/kernel/sysrq", "enables the magic SysRq keys"),
    ("/proc/sys/kernel/panic*", "makes the machine panic"),
    ("/proc/sys/kernel/*panic*", "makes the machine panic"),
    ("/proc/sys/vm/panic_on_oom", "makes the machine panic"),
    ("/proc/sys/vm/mmap_min_addr", "a security boundary, not a performance setting"),
    ("/proc/sys/kernel/yama/**", "a security boundary, not a performance setting"),
    ("/proc/sys/kernel/unprivileged_*", "a security boundary, not a performance setting"),
    ("/proc/sys/fs/binfmt_misc/**", "registers interpreters the kernel runs"),
    ("/proc/sys/fs/suid_dumpable", "a security boundary, not a performance setting"),
    ("/proc/sys/fs/protected_*", "a security boundary, not a performance setting"),
    ("/sys/kernel/uevent_helper", "the kernel runs that program as root"),
    ("/sys/fs/cgroup/**", "moves processes and sets cgroup release agents"),
    ("/sys/kernel/security/**", "security modules"),
    ("/sys/kernel/debug/kprobe*", "inserts probes into the kernel"),
    ("/sys/kernel/debug/tracing/**", "kernel tracing, not a knob"),
    ("/sys/kernel/tracing/**", "kernel tracing, not a knob"),
    ("/sys/kernel/kexec*", "controls loading another kernel"),
    ("/sys/power/**", "suspends or powers off the machine"),
    ("/sys/firmware/**", "firmware variables"),
    ("/sys/module/**", "module parameters and loading"),
    ("/sys/bus/**", "binds and unbinds drivers"),
    ("/sys/class/firmware/**", "loads firmware"),
    ("/sys/**/release_agent", "the kernel runs that program as root"),
    ("/sys/**/uevent", "fakes hotplug events"),
    ("/sys/**/bind", "binds a driver"),
    ("/sys/**/unbind", "unbinds a driver"),
    ("/sys/**/new_id", "binds a driver"),
    ("/sys/**/remove", "removes a device"),
    ("/sys/**/rescan", "rescans a bus"),
    ("/sys/**/reset", "resets a device"),
)


def _pattern_re(pattern: str) -> re.Pattern:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


@cache
def _patterns() -> tuple[list, list]:
    """The allowed and the dangerous patterns, compiled when a knob is first checked (not when a
    command that sets no knob starts)."""
    return ([(_pattern_re(p), p) for p, _ in PERFORMANCE_KNOBS],
            [(_pattern_re(p), why) for p, why in DANGEROUS_KNOBS])


def _resolved(path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _dangerous(path: str) -> str | None:
    for rx, why in _patterns()[1]:
        if rx.match(path):
            return why
    return None


def check_knob_path(path: str, allowed: frozenset[str] | set[str] = frozenset()) -> str | None:
    """Why ``path`` may not be written, or None. ``allowed`` are the paths given with --allow-knob."""
    if any(c in path for c in "\0\n\r"):
        return "has a NUL or line break in it"
    if not path.startswith(KNOB_ROOTS) or ".." in path.split("/") or "//" in path:
        return "must be an absolute path under /sys/ or /proc/sys/"
    real = _resolved(path)
    if not real.startswith(KNOB_ROOTS):
        return f"resolves to {real}, which is not under /sys/ or /proc/sys/"
    for p in dict.fromkeys((path, real)):
        why = _dangerous(p)
        if why:
            return f"is never set by kperfdiff: {why}"
    if any(rx.match(p) for rx, _ in _patterns()[0] for p in (path, real)):
        return None
    if path in allowed or real in {_resolved(a) for a in allowed}:
        return None
    return ("is not one of the performance knobs kperfdiff sets by default (the table in docs/experiments.md, 'What an experiment file may do'); "
            "if you mean it, run with --allow-knob " + path)


# -- reading and writing ------------------------------------------------------

def _knob_value(text: str) -> str:
    """The current value of a sysfs/procfs file: the [selected] word of a choice list, else the stripped text."""
    m = re.search(r"\[([^\]\s]+)\]", text)
    if m:
        return m.group(1)
    return " ".join(text.split())


def read_knob(path: str) -> str:
    try:
        return _knob_value(Path(path).read_text())
    except FileNotFoundError:
        raise BenchError(f"the knob {path} does not exist on this machine") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise BenchError(f"cannot read the knob {path}: {getattr(e, 'strerror', None) or e}") from None


def write_knob(path: str, value: str) -> None:
    """Write a value and check the kernel kept it."""
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        raise BenchError(f"the knob {path} does not exist on this machine") from None
    except PermissionError:
        who = "" if os.geteuid() == 0 else " (kperfdiff is not running as root)"
        raise BenchError(f"cannot set the knob {path} to {value!r}: permission denied{who}") from None
    except OSError as e:
        raise BenchError(f"the kernel refused {value!r} for the knob {path}: {e.strerror}") from None
    except ValueError as e:
        raise BenchError(f"cannot set the knob {path}: {e}") from None
    now = read_knob(path)
    if now != " ".join(value.split()):
        raise BenchError(f"the knob {path} reads {now!r} after writing {value!r}; give the value the file "
                         f"reports")


# -- the machine's pending restores -----------------------------------------------

def _start_time(pid: int) -> str:
    """A process's start time in clock ticks since boot ('' if it is gone): tells a reused pid apart."""
    try:
        return stat_fields(Path(f"/proc/{pid}/stat").read_text())[19]
    except (OSError, IndexError):
        return ""


def move_tasks(source: str, dest: str) -> int:
    """Move every task listed in the cgroup file ``source`` (tasks or cgroup.procs) into the cgroup
    of the file ``dest``, one at a time; tasks the kernel refuses to move (per-CPU kernel threads) or
    that have gone are left. Returns how many moved."""
    try:
        ids = Path(source).read_text().split()
    except OSError:
        return 0
    moved = 0
    fd = os.open(dest, os.O_WRONLY)
    try:
        for t in ids:
            try:
                os.write(fd, t.encode())
                moved += 1
            except OSError:
                continue
    finally:
        os.close(fd)
    return moved


def dissolve_cgroup(path: str, parent_tasks: str) -> None:
    """Move the tasks of the cgroup directory ``path`` into the cgroup of ``parent_tasks`` and
    remove it (nothing to do if it is gone)."""
    if not os.path.isdir(path):
        return
    name = "tasks" if os.path.exists(os.path.join(path, "tasks")) else "cgroup.procs"
    for _ in range(50):       # tasks forked meanwhile: move again until it is empty
        move_tasks(os.path.join(path, name), parent_tasks)
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            err = e
            time.sleep(0.02)
    raise BenchError(f"cannot remove the cgroup {path}: {err.strerror}")


@dataclass
class Pending:
    path: str
    original: str
    pid: int
    started: str
    boot_id: str
    saved_at: float
    kind: str = "file"        # file | cgroup
    held: bool = False        # kept by `system tune` until `system reset`

    def owner_alive(self) -> bool:
        return self.boot_id == boot_id() and self.started != "" and _start_time(self.pid) == self.started

    def restore(self) -> None:
        if self.kind == "cgroup":
            dissolve_cgroup(self.path, self.original)
        elif self.kind == "controller":      # a cgroup2 controller kperfdiff enabled: disable it again
            try:
                Path(self.path).write_text("-" + self.original)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise BenchError(f"cannot disable {self.original} in {self.path}: {e.strerror}") from None
        else:
            write_knob(self.path, self.original)


class PendingRestores:
    """The file of knobs changed by running (or crashed) kperfdiff processes, one per machine."""

    def __init__(self, directory: Path | None = None):
        self.dir = directory or state_dir()
        self.file = self.dir / PENDING_FILE

    @contextlib.contextmanager
    def _locked(self):
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / "pending-knobs.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise BenchError(f"cannot keep the knobs' original values in {self.dir}: {e.strerror}; set "
                             f"KPERFDIFF_STATE_DIR to a writable directory") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> tuple[list[Pending], dict | None]:
        try:
            data = json.loads(self.file.read_text())
            return [Pending(**e) for e in data["pending"]], data.get("tuned")
        except FileNotFoundError:
            return [], None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BenchError(f"{self.file} is damaged ({e}); check the knobs it names by hand, then delete "
                             f"it") from None

    def entries(self) -> list[Pending]:
        return self._read()[0]

    def tuned(self) -> dict | None:
        """The note of the tune held now (``system tune``), or None; a tune from before the last
        boot does not count."""
        t = self._read()[1]
        return t if t and t.get("boot_id") == boot_id() else None

    def _write(self, entries: list[Pending], tuned: dict | None | bool = False) -> None:
        """Write ``entries`` and the tune note (``tuned`` False: keep the one the file has)."""
        if tuned is False:
            tuned = self._read()[1] if self.file.exists() else None
        if not entries and not tuned:
            with contextlib.suppress(FileNotFoundError):
                self.file.unlink()
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_name(self.file.name + f".{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump({"pending": [e.__dict__ for e in entries], **({"tuned": tuned} if tuned else {})}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.file)
        dfd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def remember(self, path: str, original: str, kind: str = "file") -> None:
        """Before ``path`` changes: save its original, or refuse if another live process has it changed
        (or a tune holds it)."""
        me = os.getpid()
        with self._locked():
            entries = self.entries()
            for e in entries:
                if e.path == path:
                    if e.held and e.boot_id == boot_id():
                        raise BenchError(f"the knob {path} is held by kperfdiff system tune; run kperfdiff "
                                         f"system reset first")
                    if e.pid == me:
                        return
                    if e.owner_alive():
                        raise BenchError(f"the knob {path} is set by kperfdiff process {e.pid} now; wait for "
                                         f"it to finish")
            entries = [e for e in entries if e.path != path]
            entries.append(Pending(path, original, me, _start_time(me), boot_id(), time.time(), kind))
            self._write(entries)

    def hold_mine(self, tuned: dict) -> None:
        """Make this process's entries held (kept until ``system reset``) and note the tune."""
        me = os.getpid()
        with self._locked():
            entries = self.entries()
            for e in entries:
                if e.pid == me and not e.held:
                    e.held = True
            self._write(entries, {**tuned, "boot_id": boot_id()})

    def release_held(self, log) -> list[str]:
        """Restore every held entry, newest first, and drop the tune note; returns the problems (the
        entries that could not be restored stay)."""
        problems = []
        with self._locked():
            entries = self.entries()
            keep = [e for e in entries if not e.held]
            failed = []
            for e in reversed([e for e in entries if e.held]):
                if e.boot_id != boot_id():
                    continue
                try:
                    e.restore()
                except KperfdiffError as err:
                    problems.append(f"{e.path} cannot be restored ({err}); set it to {e.original!r} by hand")
                    failed.append(e)
                    continue
                log(f"kperfdiff: restored {e.path}" + ("" if e.kind == "cgroup" else f" to {e.original!r}"))
            self._write(keep + failed[::-1], None)
        return problems

    def forget(self, path: str) -> None:
        me = os.getpid()
        with self._locked():
            self._write([e for e in self.entries() if not (e.path == path and e.pid == me)])

    def repair(self, log) -> list[str]:
        """Put back every knob whose process is gone; returns the ones that could not be put back."""
        if not self.file.exists():
            return []
        problems = []
        with self._locked():
            keep = []
            for e in reversed(self.entries()):      # newest first: a cgroup before its parent's files
                if e.held and e.boot_id == boot_id():
                    keep.append(e)
                elif e.owner_alive():
                    keep.append(e)
                elif e.boot_id != boot_id():
                    log(f"kperfdiff: {e.path} was changed by a kperfdiff process before the machine rebooted; "
                        f"it has its boot value now (it was {e.original!r} before)")
                else:
                    try:
                        e.restore()
                    except KperfdiffError as err:
                        problems.append(f"{e.path} was left changed by kperfdiff process {e.pid}, which stopped "
                                        f"without restoring it, and cannot be restored now ({err}); set it to "
                                        f"{e.original!r} by hand")
                        keep.append(e)
                        continue
                    log(f"kperfdiff: restored {e.path}" + ("" if e.kind == "cgroup" else f" to {e.original!r}")
                        + f" (left changed by kperfdiff process {e.pid}, which stopped without restoring it)")
            self._write(keep[::-1])
        return problems


def repair_pending(log, strict: bool) -> None:
    """Any command's first step: put back knobs a killed kperfdiff left changed. ``strict`` (a run
    about to change knobs) makes a knob that cannot be put back an error; otherwise a warning."""
    pr = PendingRestores()
    try:
        problems = pr.repair(log)
    except BenchError as e:
        if strict:
            raise
        log(f"kperfdiff: warning: {e}")
        return
    if problems:
        if strict:
            raise BenchError(problems[0])
        for p in problems:
            log(f"kperfdiff: warning: {p}")


@contextlib.contextmanager
def signals_blocked():
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    except (ValueError, OSError):
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class KnobGuard:
    """Applies variants' knobs and puts every changed file back.

    The original of a file is saved in the machine's pending-restore file
    before its first change and forgotten only after it is restored, so a
    kill -9 is repaired by the next kperfdiff command.
    """

    def __init__(self, pending: PendingRestores | None = None):
        self.pending = pending or PendingRestores()
        self.original: dict[str, str] = {}
        self.current: dict[str, str] = {}

    def apply(self, knobs: dict[str, str]) -> None:
        # files set by the previous variant but not by this one go back first
        for path in [p for p in self.current if p not in knobs]:
            write_knob(path, self.original[path])
            del self.current[path]
        for path, value in knobs.items():
            if path not in self.original:
                orig = read_knob(path)
                self.pending.remember(path, orig)
                self.original[path] = orig
            if self.current.get(path) != value:
                write_knob(path, value)
                self.current[path] = value

    def restore(self) -> list[str]:
        """Put every file back (signals blocked meanwhile); returns the problems."""
        problems = []
        with signals_blocked():
            for path, orig in self.original.items():
                try:
                    write_knob(path, orig)
                    self.pending.forget(path)
                except KperfdiffError as e:
                    problems.append(str(e))
            self.original.clear()
            self.current.clear()
        return problems
