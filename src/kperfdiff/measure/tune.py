"""Tuning the machine for benchmarks: ``kperfdiff system tune``, ``show`` and ``reset``.

:func:`tune` isolates the benchmark CPUs and sets what the machine exposes:

* a cpuset for the benchmark CPUs: a cgroup v2 partition (``cpuset.cpus.partition``) where
  cgroup2 has the cpuset controller, otherwise the v1 cpuset hierarchy: one cpuset for the
  benchmark CPUs and one for the rest, into which every task of the root cpuset is moved
  (per-CPU kernel threads cannot move and stay); benchmark processes join the benchmark
  cpuset (:func:`placement`, kpd-run ``-g``);
* movable IRQs (``/proc/irq/*/smp_affinity_list``, ``default_smp_affinity``) to the other CPUs;
* the cpufreq governor of the benchmark CPUs to ``performance`` and their minimum frequency to
  their maximum; turbo/boost off (``intel_pstate/no_turbo``, ``cpufreq/boost``);
* the NMI watchdog off.

Left alone on purpose: ``perf_event_max_sample_rate`` (``kperfdiff bench --profile`` samples at
4000 Hz) and ASLR (a security setting; ``system show`` says its state).

Every change goes through the knob journal (:mod:`kperfdiff.measure.knobs`): saved as this
process's while the tune is applied (a kill -9 half-way is undone by the next kperfdiff
command), then held until :func:`reset`. What the machine does not have is reported, never an
error, and kept in the tune's note, which every run measured while tuned keeps in its machine
facts (:func:`fact`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.bench.pinning import Placement
from kperfdiff.core import limits
from kperfdiff.core.errors import BenchError, InputError, KperfdiffError
from kperfdiff.measure.knobs import PendingRestores, move_tasks, read_knob, write_knob

CPU_SYS = "/sys/devices/system/cpu"
BENCH_CGROUP = "kperfdiff-bench"
REST_CGROUP = "kperfdiff-rest"


@dataclass
class Step:
    what: str          # "cpufreq governor (CPU 1)"
    detail: str        # what was done, or why it could not be
    changed: bool      # False: nothing to change, or not possible here
    possible: bool = True


@dataclass
class Report:
    cpus: list[int]
    steps: list[Step]

    @property
    def not_tuned(self) -> list[str]:
        return [f"{s.what}: {s.detail}" for s in self.steps if not s.possible]


def online_cpus() -> list[int]:
    try:
        return limits.parse_cpu_list(Path(CPU_SYS, "online").read_text().strip())
    except (OSError, KperfdiffError):
        return list(range(os.cpu_count() or 1))


def default_cpus(online: list[int] | None = None) -> list[int]:
    """The last half of the online CPUs (at least one), leaving CPU 0 and the first half for the rest."""
    online = online or online_cpus()
    if len(online) < 2:
        return list(online)
    return online[len(online) - max(1, len(online) // 2):]


def choose_cpus(text: str | None) -> list[int]:
    online = online_cpus()
    if not text:
        return default_cpus(online)
    cpus = sorted(set(limits.parse_cpu_list(text, "--cpus")))
    missing = [c for c in cpus if c not in online]
    if missing:
        raise InputError(f"--cpus names CPU {missing[0]}, which is not online here (online: "
                         f"{','.join(map(str, online))})")
    if len(online) > 1 and set(cpus) >= set(online):
        raise InputError("--cpus names every online CPU; leave at least one for the rest of the machine")
    return cpus


def _cpu_list(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


class _Tuner:
    """Applies one tune: each change saved in the journal before it is made."""

    def __init__(self, cpus: list[int], pending: PendingRestores):
        self.cpus, self.pending = cpus, pending
        self.rest = [c for c in online_cpus() if c not in cpus]
        self.steps: list[Step] = []
        self.cgroup: str | None = None
        self.cpuset_kind = ""

    def note(self, what, detail, changed=False, possible=True):
        self.steps.append(Step(what, detail, changed, possible))

    def set(self, path: str, value: str) -> bool:
        """Set one file (saving its original first); False if it had that value already."""
        before = read_knob(path)
        if before == value:
            return False
        self.pending.remember(path, before)
        try:
            write_knob(path, value)
        except KperfdiffError:
            if read_knob(path) == before:      # nothing changed: nothing to restore
                self.pending.forget(path)
            raise
        return True

    def knob(self, what: str, path: str, value: str, missing_why: str) -> None:
        if not os.path.exists(path):
            self.note(what, missing_why, possible=False)
            return
        try:
            changed = self.set(path, value)
        except KperfdiffError as e:
            self.note(what, str(e), possible=False)
            return
        self.note(what, f"{path} = {value}" + ("" if changed else " (already)"), changed)

    # -- the cpuset ---------------------------------------------------------------------------
    def cpuset(self) -> None:
        if not self.rest:
            self.note("cpuset", "one CPU online: nothing to isolate", possible=False)
            return
        v2, v1 = cgroup2_root(), cpuset_v1_root()
        try:
            if v2 and "cpuset" in _read(os.path.join(v2, "cgroup.controllers")).split():
                self._cpuset_v2(v2)
            elif v1:
                self._cpuset_v1(v1)
            else:
                self.note("cpuset", "no cpuset controller is mounted (cgroup2 without cpuset and no v1 cpuset "
                                    "hierarchy)", possible=False)
        except (OSError, KperfdiffError) as e:
            why = getattr(e, "strerror", None) or str(e)
            self.note("cpuset", f"cannot isolate CPUs {_cpu_list(self.cpus)}: {why}", possible=False)

    def _mkdir(self, path: str, parent_tasks: str) -> None:
        if os.path.exists(path):
            raise BenchError(f"{path} exists already (another tune? run kperfdiff system reset)")
        self.pending.remember(path, parent_tasks, kind="cgroup")
        os.mkdir(path)

    def _cpuset_v1(self, root: str) -> None:
        mems = _read(os.path.join(root, "cpuset.mems")).strip()
        rest, bench = os.path.join(root, REST_CGROUP), os.path.join(root, BENCH_CGROUP)
        self._mkdir(rest, os.path.join(root, "tasks"))
        Path(rest, "cpuset.cpus").write_text(_cpu_list(self.rest))
        Path(rest, "cpuset.mems").write_text(mems)
        self._mkdir(bench, os.path.join(root, "tasks"))
        Path(bench, "cpuset.cpus").write_text(_cpu_list(self.cpus))
        Path(bench, "cpuset.mems").write_text(mems)
        total = len(_read(os.path.join(root, "tasks")).split())
        moved = move_tasks(os.path.join(root, "tasks"), os.path.join(rest, "tasks"))
        self.cgroup = os.path.join(bench, "tasks")
        self.cpuset_kind = "cgroup v1 cpuset"
        self.note("cpuset", f"CPUs {_cpu_list(self.cpus)} isolated ({self.cpuset_kind} {bench}); {moved} of {total} "
                            f"tasks moved to CPUs {_cpu_list(self.rest)} ({REST_CGROUP}; the others are per-CPU "
                            f"kernel threads)", True)

    def _cpuset_v2(self, root: str) -> None:
        ctl = os.path.join(root, "cgroup.subtree_control")
        if "cpuset" not in _read(ctl).split():
            self.pending.remember(ctl, "cpuset", kind="controller")
            Path(ctl).write_text("+cpuset")
        bench = os.path.join(root, BENCH_CGROUP)
        self._mkdir(bench, os.path.join(root, "cgroup.procs"))
        Path(bench, "cpuset.cpus").write_text(_cpu_list(self.cpus))
        for mode in ("isolated", "root"):
            try:
                Path(bench, "cpuset.cpus.partition").write_text(mode)
            except OSError:
                continue
            if _read(os.path.join(bench, "cpuset.cpus.partition")).split()[:1] == [mode]:
                break
        else:
            raise BenchError("the kernel refused to make it a cpuset partition")
        self.cgroup = os.path.join(bench, "cgroup.procs")
        self.cpuset_kind = f"cgroup v2 partition ({mode})"
        self.note("cpuset", f"CPUs {_cpu_list(self.cpus)} isolated ({self.cpuset_kind} {bench}): other tasks "
                            f"leave them", True)

    # -- IRQs ---------------------------------------------------------------------------------
    def irqs(self) -> None:
        if not self.rest:
            self.note("IRQ affinity", "one CPU online: nowhere to move IRQs", possible=False)
            return
        moved, refused, already = 0, 0, 0
        mine = set(self.cpus)
        for d in sorted(Path("/proc/irq").glob("[0-9]*"), key=lambda p: int(p.name)):
            f = d / "smp_affinity_list"
            try:
                now = set(limits.parse_cpu_list(read_knob(str(f))))
            except (KperfdiffError, OSError):
                continue
            if not now & mine:
                already += 1
                continue
            try:
                self.set(str(f), _cpu_list(sorted(now - mine) or self.rest))
                moved += 1
            except KperfdiffError:
                refused += 1
        default = "/proc/irq/default_smp_affinity"
        if os.path.exists(default):
            try:
                width = len(read_knob(default))
                self.set(default, format(sum(1 << c for c in self.rest), "x").zfill(width))
            except KperfdiffError:
                refused += 1
        if moved + refused + already == 0:
            self.note("IRQ affinity", "no /proc/irq/*/smp_affinity_list here", possible=False)
            return
        words = f"{moved} IRQs moved to CPUs {_cpu_list(self.rest)}"
        if already:
            words += f", {already} off CPUs {_cpu_list(self.cpus)} already"
        if refused:
            words += f"; {refused} cannot be moved (managed or per-CPU)"
        if any(_comm(p) == "irqbalance" for p in Path("/proc").glob("[0-9]*")):
            words += "; irqbalance is running and may move them back: stop it while measuring"
        self.note("IRQ affinity", words, moved > 0)

    # -- frequency ----------------------------------------------------------------------------
    def frequency(self) -> None:
        no_cpufreq = "no cpufreq here (no {}: the hypervisor or firmware sets the frequency)"
        for c in self.cpus:
            d = f"{CPU_SYS}/cpu{c}/cpufreq"
            if not os.path.isdir(d):
                self.note(f"cpufreq governor (CPU {c})", no_cpufreq.format(d), possible=False)
                continue
            govs = _read(f"{d}/scaling_available_governors").split()
            if "performance" in govs:
                self.knob(f"cpufreq governor (CPU {c})", f"{d}/scaling_governor", "performance", "")
            else:
                self.note(f"cpufreq governor (CPU {c})", "no performance governor (available: "
                          f"{' '.join(govs) or 'none'})", possible=False)
            top = _read(f"{d}/scaling_max_freq").strip()
            if top:
                self.knob(f"minimum frequency (CPU {c})", f"{d}/scaling_min_freq", top, "")
        turbo = [(f"{CPU_SYS}/intel_pstate/no_turbo", "1"), (f"{CPU_SYS}/cpufreq/boost", "0")]
        present = [(p, v) for p, v in turbo if os.path.exists(p)]
        if not present:
            self.note("turbo/boost", "neither intel_pstate/no_turbo nor cpufreq/boost exists here", possible=False)
        for p, v in present:
            self.knob("turbo/boost", p, v, "")


def tune(cpus: list[int], log=None, pending: PendingRestores | None = None) -> Report:
    """Tune the machine for benchmarks on ``cpus`` and hold the changes until :func:`reset`."""
    pending = pending or PendingRestores()
    held = pending.tuned()
    if held:
        raise InputError(f"the machine is tuned already (CPUs {_cpu_list(held['cpus'])}, since "
                         f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(held['since']))}); run kperfdiff "
                         f"system reset first")
    if os.geteuid() != 0:
        raise InputError("kperfdiff system tune changes cgroups, IRQs and kernel settings: run it as root")
    t = _Tuner(cpus, pending)
    t.cpuset()
    t.irqs()
    t.frequency()
    t.knob("NMI watchdog", "/proc/sys/kernel/nmi_watchdog", "0", "no /proc/sys/kernel/nmi_watchdog here")
    report = Report(cpus, t.steps)
    pending.hold_mine({"cpus": cpus, "rest": t.rest, "cgroup": t.cgroup, "cpuset": t.cpuset_kind,
                       "not_tuned": report.not_tuned, "since": time.time()})
    return report


def reset(log, pending: PendingRestores | None = None) -> tuple[bool, list[str]]:
    """Undo the held tune: (whether there was one, the problems)."""
    pending = pending or PendingRestores()
    was = pending.tuned() is not None or any(e.held for e in pending.entries())
    return was, pending.release_held(log)


def tuned() -> dict | None:
    """The tune held now, or None."""
    try:
        return PendingRestores().tuned()
    except KperfdiffError:
        return None


def placement(policy: str = "last") -> Placement:
    """Where benchmark copies run: the tuned CPUs (and their cpuset) while a tune is held, else any
    CPU this process may use."""
    t = tuned()
    if t and t.get("cpus"):
        return Placement(policy, tuple(t["cpus"]), t.get("cgroup"))
    return Placement(policy)


def fact() -> str:
    """The machine fact 'tuned': whether the machine is tuned now, and what could not be."""
    t = tuned()
    if not t:
        return "no (kperfdiff system tune was not run)"
    out = f"yes: CPUs {_cpu_list(t['cpus'])} for benchmarks" + (f" ({t['cpuset']})" if t.get("cpuset") else "")
    if t.get("not_tuned"):
        out += "; not tunable here: " + "; ".join(t["not_tuned"])
    return out


def state() -> list[tuple[str, str, str]]:
    """``system show``: (setting, its value now, tuned or not) for each setting a tune touches."""
    t = tuned()
    held = {e.path for e in PendingRestores().entries() if e.held}
    rows: list[tuple[str, str, str]] = []

    def word(path):
        return "tuned" if path in held else "as booted"

    cg = (t or {}).get("cgroup")
    rows.append(("cpuset", f"CPUs {_cpu_list(t['cpus'])} isolated ({t.get('cpuset') or 'no cpuset'})" if t
                 else f"none (cgroup2 cpuset: {'yes' if _v2_cpuset() else 'no'}, v1 cpuset: "
                      f"{cpuset_v1_root() or 'not mounted'})", "tuned" if cg else "as booted"))
    irq = [p for p in Path("/proc/irq").glob("[0-9]*/smp_affinity_list")]
    moved = [p for p in irq if str(p) in held]
    rows.append(("IRQ affinity", f"{len(irq)} IRQs, {len(moved)} moved off the benchmark CPUs",
                 "tuned" if moved else "as booted"))
    for c in online_cpus():
        d = f"{CPU_SYS}/cpu{c}/cpufreq"
        if os.path.isdir(d):
            for name in ("scaling_governor", "scaling_min_freq"):
                rows.append((f"{name} (CPU {c})", _read(f"{d}/{name}").strip(), word(f"{d}/{name}")))
        else:
            rows.append((f"cpufreq (CPU {c})", "not present", "not tunable"))
    for p in (f"{CPU_SYS}/intel_pstate/no_turbo", f"{CPU_SYS}/cpufreq/boost", "/proc/sys/kernel/nmi_watchdog"):
        rows.append((p, _read(p).strip() if os.path.exists(p) else "not present",
                     word(p) if os.path.exists(p) else "not tunable"))
    for p, why in (("/proc/sys/kernel/perf_event_max_sample_rate", "left: kperfdiff --profile samples at 4000 Hz"),
                   ("/proc/sys/kernel/randomize_va_space", "left: ASLR is a security setting")):
        rows.append((p, _read(p).strip() or "not present", why))
    return rows


# -- the machine's cgroup mounts ------------------------------------------------------------

def _mounts() -> list[list[str]]:
    return [ln.split() for ln in _read("/proc/mounts").splitlines() if len(ln.split()) >= 4]


def cgroup2_root() -> str | None:
    for w in _mounts():
        if w[2] == "cgroup2":
            return w[1]
    return None


def cpuset_v1_root() -> str | None:
    for w in _mounts():
        if w[2] == "cgroup" and "cpuset" in w[3].split(","):
            return w[1]
    return None


def _v2_cpuset() -> bool:
    r = cgroup2_root()
    return bool(r) and "cpuset" in _read(os.path.join(r, "cgroup.controllers")).split()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _comm(proc: Path) -> str:
    return _read(str(proc / "comm")).strip()
