"""Record profiles with perf, with what is needed to read them elsewhere.

A recording folder holds:

* ``<name>.perf.data`` (or ``perf.data``): ``perf record -g`` of the work,
  kernel and user, on ``cycles`` where the machine counts it and
  ``cpu-clock`` otherwise;
* ``kallsyms``: a snapshot of /proc/kallsyms taken with the recording, so
  kernel addresses resolve on any machine later, and ``kallsyms.buildid``, the
  running kernel's build id (from /sys/kernel/notes, when readable), which a
  read checks against the build id perf recorded;
* ``<name>.buildids``: ``perf buildid-list`` of the recording;
* ``<name>.hwstat.json``: ``perf stat`` counts of hardware events (cycles,
  instructions, cache and TLB misses) over the same work where the machine
  has them, or which are unavailable and why;
* ``<name>.profile.json``: the command, event, machine facts and, for a
  benchmark, its operation count and CPU time, so a share of the profile
  becomes nanoseconds per operation.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.targets import machine
from kperfdiff.core.errors import BenchError, InputError
from kperfdiff.core.records import rep_stem

HW_EVENTS = ["cycles", "instructions", "cache-misses", "dTLB-load-misses", "iTLB-load-misses"]
PROFILE_META_VERSION = 1

COPY = "@COPY@"    # in command words: kpd-run puts each copy's index there


def require_perf() -> str:
    perf = shutil.which("perf")
    if not perf:
        raise BenchError("perf is not installed; run `make setup` (Debian package linux-perf)")
    return perf


def sampling_event(facts: dict) -> str:
    """cycles when the PMU counts it here, else the cpu-clock software timer."""
    return "cycles" if (facts.get("perf_events") or {}).get("cycles") else "cpu-clock"


def available_hw_events(facts: dict) -> list[str]:
    ev = facts.get("perf_events") or {}
    return [e for e in HW_EVENTS if ev.get(e)]


def hw_status(facts: dict) -> dict:
    have = available_hw_events(facts)
    missing = [e for e in HW_EVENTS if e not in have]
    return {"available": have, "unavailable": missing,
            "reason": "" if not missing else
            "perf stat reports these events as not supported on this machine (no hardware PMU exposed, "
            "as in most virtual machines)"}


# arm64 modules call the kernel through PLT veneers placed after their last function, which kallsyms
# does not list: without a symbol of their own their samples would go to that function (often the
# module's exit function, cleanup_module). One symbol per module, at its .plt section, marks them.
MODULE_PLT = "module_plt_veneers"


def module_plt_lines(sys_module: Path = Path("/sys/module")) -> str:
    """kallsyms lines marking each loaded module's PLT veneers ("" where modules have none, as on x86)."""
    out = []
    for f in sorted(sys_module.glob("*/sections/.plt")):
        try:
            addr = f.read_text().strip()
        except OSError:
            continue
        if addr:
            out.append(f"{addr.removeprefix('0x')} t {MODULE_PLT}\t[{f.parent.parent.name}]\n")
    return "".join(out)


def snapshot_kallsyms(folder: Path) -> Path | None:
    """Copy /proc/kallsyms (with the modules' PLT symbols) into the folder (once), with the kernel's
    build id beside it (``kallsyms.buildid``) when it can be read; None when addresses are hidden."""
    out = folder / "kallsyms"
    if out.exists():
        return out
    try:
        text = Path("/proc/kallsyms").read_text()
    except OSError:
        return None
    first = text.split(None, 1)[0] if text else ""
    if not first or set(first) == {"0"}:
        return None  # kptr_restrict hides addresses: a snapshot would mislead
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text + module_plt_lines())
    bid = machine.kernel_build_id()
    if bid != machine.UNKNOWN:
        (folder / "kallsyms.buildid").write_text(bid + "\n")
    os.replace(tmp, out)
    return out


def record_prefix(perf_data: Path, event: str, freq: int | None, hwstat: Path | None,
                  hw_events: list[str]) -> list[str]:
    """The command words that wrap a worker: perf record (and perf stat inside it)."""
    perf = require_perf()
    argv = [perf, "record", "-q", "-g", "-e", event, "-o", str(perf_data)]
    if freq:
        argv += ["-F", str(freq)]
    argv.append("--")
    if hwstat is not None and hw_events:
        argv += [perf, "stat", "-x", ",", "-o", str(hwstat), "-e", ",".join(hw_events), "--"]
    return argv


def parse_perf_stat_csv(text: str) -> dict[str, float | None]:
    """perf stat -x, output -> {event: count or None when not counted}."""
    out: dict[str, float | None] = {}
    for ln in text.splitlines():
        if not ln or ln.startswith("#"):
            continue
        f = ln.split(",")
        if len(f) < 3:
            continue
        name = f[2].split(":")[0]
        try:
            out[name] = float(f[0])
        except ValueError:
            out[name] = None
    return out


def buildids(perf_data: Path) -> str:
    try:
        r = subprocess.run([require_perf(), "buildid-list", "-i", str(perf_data)], capture_output=True,
                           text=True, timeout=120)
        return r.stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def finish_recording(perf_data: Path, facts: dict, meta: dict) -> dict:
    """Write build ids, hardware counts and the meta file beside a perf.data."""
    stem = perf_data.name[:-len(".perf.data")] if perf_data.name.endswith(".perf.data") else perf_data.stem
    folder = perf_data.parent
    (folder / f"{stem}.buildids").write_text(buildids(perf_data))
    hw = hw_status(facts)
    statfile = folder / f"{stem}.hwstat.csv"
    if statfile.exists():
        hw["counts"] = parse_perf_stat_csv(statfile.read_text())
    (folder / f"{stem}.hwstat.json").write_text(json.dumps(hw, indent=2) + "\n")
    full = {"version": PROFILE_META_VERSION, "perf_data": perf_data.name,
            "kallsyms": "kallsyms" if (folder / "kallsyms").exists() else None,
            "arch": facts.get("arch"), "emulated": bool(facts.get("emulated")), "hw_events": hw,
            "machine": facts, **meta}
    (folder / f"{stem}.profile.json").write_text(json.dumps(full, indent=2) + "\n")
    return full


@dataclass
class BenchProfiler:
    """Profiles every process of a `kperfdiff bench --profile` session."""

    facts: dict
    freq: int | None = None
    event: str = ""
    hw_events: list[str] = field(default_factory=list)

    def __post_init__(self):
        require_perf()
        self.event = self.event or sampling_event(self.facts)
        self.hw_events = available_hw_events(self.facts)

    @staticmethod
    def stem(bench: str, copies: int, rep: int, copy: int | str) -> str:
        return f"{rep_stem(bench, copies, rep)}.c{copy}"

    def prefix_for(self, run, bench, copies: int):
        folder = Path(run.artefact_dir)
        folder.mkdir(parents=True, exist_ok=True)
        snapshot_kallsyms(folder)

        def for_rep(rep: int) -> list[str]:
            """The perf words of one repetition; @COPY@ becomes each copy's index (kpd-run)."""
            s = self.stem(bench.name, copies, rep, COPY)
            return record_prefix(folder / f"{s}.perf.data", self.event, self.freq,
                                 folder / f"{s}.hwstat.csv", self.hw_events)
        return for_rep

    def collect(self, store, run, result_id: int, bench, copies: int, m) -> None:
        """Store the profiles of the processes of measurement ``m`` (a bench.measurement.Measurement)."""
        folder = Path(run.artefact_dir)
        for rep, copy, ops, cpu_ns in m.procs:
            s = self.stem(bench.name, copies, rep, copy)
            pd = folder / f"{s}.perf.data"
            if not pd.exists():
                continue
            meta = finish_recording(pd, self.facts, {
                "command": f"kperfdiff worker {bench.name}", "benchmark": bench.name, "copies": copies,
                "rep": rep, "copy": copy, "event": self.event, "ops": ops, "cpu_time_ns": cpu_ns,
                "run_id": run.id, "label": run.label})
            store.add_profile(run_id=run.id, result_id=result_id, benchmark=bench.name, rep=rep, path=str(pd),
                              kallsyms=str(folder / "kallsyms") if (folder / "kallsyms").exists() else None,
                              event=self.event, samples=None, cpu_time_ns=cpu_ns, ops=ops,
                              meta={"copies": copies, "copy": copy, "hw_events": meta["hw_events"]})


def record_command(outdir: Path, cmd: list[str], *, event: str | None = None, freq: int | None = None,
                   name: str = "perf") -> tuple[int, Path]:
    """`kperfdiff record -o DIR -- CMD`: profile any command into DIR."""
    if not cmd:
        raise InputError("no command to record; give one after --, as in kperfdiff record -o out -- ls")
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        raise InputError(f"the command {cmd[0]!r} was not found")
    try:
        outdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the folder {outdir}: {e.strerror}") from None
    facts = machine.facts()
    ev = event or sampling_event(facts)
    hw = available_hw_events(facts)
    pd = outdir / f"{name}.perf.data"
    snapshot_kallsyms(outdir)
    prefix = record_prefix(pd, ev, freq, outdir / f"{name}.hwstat.csv", hw)
    t0 = time.time()
    before = os.times()
    try:
        rc = subprocess.call(prefix + list(cmd))
    except KeyboardInterrupt:
        rc = 130
    after = os.times()
    cpu_ns = int(((after.children_user - before.children_user) + (after.children_system - before.children_system))
                 * 1e9)
    if not pd.exists() or pd.stat().st_size == 0:
        raise BenchError(f"perf record wrote no profile for {cmd[0]} (exit status {rc})")
    finish_recording(pd, facts, {"command": " ".join(cmd), "event": ev, "exit_status": rc,
                                 "started_at": t0, "cpu_time_ns": cpu_ns, "ops": None})
    print(f"kperfdiff: recorded {pd} ({ev}); kallsyms, build ids and hardware counts beside it",
          file=sys.stderr)
    return rc, pd
