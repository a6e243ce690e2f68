"""The one interface every target implements, and what crosses it.

A target is "somewhere benchmarks run": this machine, an emulated guest
booted for the job, or a board over SSH. The host hands a target a *job*,
a list of :class:`Invocation` (one benchmark worker call each: argv words
relative to the target's bin dir, copies, timeout, optional perf record),
and gets back one :class:`InvocationResult` per invocation. A job is
batched so that a guest boots once for many invocations.

Guest and SSH targets run the same generated POSIX shell script (see
:func:`job_script`) on the target: it snapshots /proc/vmstat and
/proc/interrupts around each invocation, starts the copies with the small
static ``kpd-run``, the copy runner this machine uses too (start barrier,
timeout, one process group per copy; see :func:`kperfdiff.bench.worker.run_copies`) and leaves everything in one
results folder that the host reads back with :func:`read_results`. Every
word of that script is quoted with shlex.quote; nothing the user typed is
ever interpolated into a shell unquoted.
"""
from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core import monitors
from kperfdiff.core.arch import normalise_arch
from kperfdiff.core.errors import BenchError
from kperfdiff.targets.machine import KERNEL_NOTES, UNKNOWN, build_id_from_notes
from kperfdiff.bench import build, catalogue
from kperfdiff.bench.worker import STDERR_TAIL, WorkerOutput, copy_output, parse_status
from kperfdiff.targets.perf_record import MODULE_PLT
from kperfdiff.targets.guest import counting

FACT_FILES = {
    "cmdline": "/proc/cmdline", "meminfo": "/proc/meminfo", "cpuinfo": "/proc/cpuinfo",
    "online": "/sys/devices/system/cpu/online", "version": "/proc/version",
    "thp": "/sys/kernel/mm/transparent_hugepage/enabled",
    "thp_defrag": "/sys/kernel/mm/transparent_hugepage/defrag",
    "clocksource": "/sys/devices/system/clocksource/clocksource0/current_clocksource",
    "swaps": "/proc/swaps", "boot_id": "/proc/sys/kernel/random/boot_id", "osrelease": "/proc/sys/kernel/osrelease",
    "hostname": "/proc/sys/kernel/hostname", "kptr_restrict": "/proc/sys/kernel/kptr_restrict",
}

EARLY_CLOCKSOURCE_WAIT = 20  # seconds a job waits for x86's boot clocksource to be replaced
SWAP_MB = 256                # the zram swap a job sets up when asked (allow_swap_setup)

# A zram swap set up by the job itself when none is active (the guest's or board's own side of
# kperfdiff.bench.swap.temporary_swap): a new device hot-added (one someone else set up is never
# touched), sized, mkswap and swapon; removed again when the script exits. What happened is one
# line in facts/swap_setup ("zram /dev/zramN", "active" when swap was already on, or why not).
# Busybox and util-linux alike. @SIZE@ and @OUT@ are substituted (quoted).
SWAP_SETUP = r"""kpd_zram=""
kpd_swap_down() {
  [ -n "$kpd_zram" ] || return 0
  swapoff "/dev/zram$kpd_zram" 2>/dev/null
  echo 1 > "/sys/block/zram$kpd_zram/reset" 2>/dev/null
  echo "$kpd_zram" > /sys/class/zram-control/hot_remove 2>/dev/null
  kpd_zram=""
}
kpd_swap_up() {
  if [ -n "$(sed 1d /proc/swaps 2>/dev/null)" ]; then echo active; return 0; fi
  [ -d /sys/class/zram-control ] || modprobe zram num_devices=0 >/dev/null 2>&1
  if [ ! -d /sys/class/zram-control ]; then echo "zram is not available (no /sys/class/zram-control)"; return 1; fi
  n=$(cat /sys/class/zram-control/hot_add 2>/dev/null)
  if [ -z "$n" ]; then echo "zram hot_add failed (not root?)"; return 1; fi
  kpd_zram=$n
  if ! echo @SIZE@ > "/sys/block/zram$n/disksize" 2>/dev/null; then
    # the default compressor may be a module that is not there: take another the kernel offers
    for a in lzo-rle lzo lz4 zstd deflate; do
      echo "$a" > "/sys/block/zram$n/comp_algorithm" 2>/dev/null && echo @SIZE@ > "/sys/block/zram$n/disksize" 2>/dev/null && break
    done
  fi
  if [ "$(cat /sys/block/zram$n/disksize 2>/dev/null)" = 0 ]; then echo "zram$n could not be sized (no compressor?)"; return 1; fi
  w=0
  while [ ! -b "/dev/zram$n" ] && [ $w -lt 50 ]; do sleep 0.1; w=$((w + 1)); done
  m=$(mkswap "/dev/zram$n" 2>&1) || { echo "mkswap /dev/zram$n failed: $m" | tail -n 1; return 1; }
  # a priority above any other swap where swapon takes one (busybox may not)
  swapon -p 100 "/dev/zram$n" >/dev/null 2>&1 || m=$(swapon "/dev/zram$n" 2>&1) || {
    echo "swapon /dev/zram$n failed: $m" | tail -n 1; return 1; }
  echo "zram /dev/zram$n $(sed -n 's/.*\[\([^]]*\)\].*/\1/p' /sys/block/zram$n/comp_algorithm 2>/dev/null)"
}
trap 'kpd_swap_down' EXIT
trap 'kpd_swap_down; exit 130' INT TERM HUP
mkdir -p @OUT@/facts
kpd_swap_up > @OUT@/facts/swap_setup 2>&1 || kpd_swap_down
"""


@dataclass
class Invocation:
    """One benchmark worker call on a target.

    ``argv[0]`` names a program in the target's bin dir (``kpd-fault``);
    the other words are passed as they are (a word may contain ``@BIN@``,
    replaced by the bin dir). ``profile`` names the perf.data to record
    (``<profile>.c<copy>.perf.data``, perf record -g), or None.
    """

    argv: list[str]
    copies: int = 1
    timeout: float = 120.0
    profile: str | None = None
    perf_event: str | None = None
    perf_freq: int | None = None
    perf_period: int | None = None   # perf record -c: a sample every N events (instead of -F)
    label: str = ""

    @property
    def bench(self) -> str:
        return self.argv[1] if len(self.argv) > 1 else ""


@dataclass
class InvocationResult:
    invocation: Invocation
    stdout: list[str] = field(default_factory=list)          # one text per copy
    stderr: list[str] = field(default_factory=list)          # tail per copy
    exit_status: list[int | None] = field(default_factory=list)  # >=0 exit, <0 -signal, None timed out
    timed_out: bool = False
    wall_s: float = 0.0
    vmstat_before: str = ""
    vmstat_after: str = ""
    interrupts_before: str = ""
    interrupts_after: str = ""
    files: dict[str, Path] = field(default_factory=dict)     # fetched files by name (perf.data, kallsyms)
    error: str | None = None                                  # the job did not reach this invocation
    parsed: list[WorkerOutput] | None = None                  # already parsed (local target)

    def monitors_before(self) -> dict[str, int]:
        return monitors.snapshot_from_text(self.vmstat_before, self.interrupts_before)

    def monitors_after(self) -> dict[str, int]:
        return monitors.snapshot_from_text(self.vmstat_after, self.interrupts_after)

    def monitor_delta(self) -> dict[str, int]:
        return monitors.delta(self.monitors_before(), self.monitors_after())

    def outputs(self) -> list[WorkerOutput]:
        """Each copy's parsed worker output, with failures set as run_copies sets them."""
        if self.parsed is not None:
            return list(self.parsed)
        return [copy_output(self.stdout[i] if i < len(self.stdout) else "",
                            self.stderr[i] if i < len(self.stderr) else "",
                            self.exit_status[i] if i < len(self.exit_status) else None,
                            bench=self.invocation.bench, wall_s=self.wall_s, timed_out=self.timed_out,
                            timeout=self.invocation.timeout, error=self.error)
                for i in range(max(len(self.stdout), self.invocation.copies))]


class Target:
    """Somewhere benchmarks run. Subclasses: LocalTarget, QemuTarget, SshTarget."""

    kind = "abstract"
    spec = ""
    # MB of zram swap the next job sets up when none is active (allow_swap_setup); None: none.
    # Guests and boards do it in the job script (SWAP_SETUP), this machine with temporary_swap.
    swap_mb: int | None = None

    def disk_dir(self) -> str | None:
        """A directory on a disk file system for benchmarks that need one (requires "disk",
        given as their dir=), made available to the next job; None: the worker's default."""
        return None

    def prepare(self, families: list[str] | None = None, profile: bool = False) -> None:
        """Make the benchmark workers (for the target's architecture) and perf available."""
        raise NotImplementedError

    def run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        raise NotImplementedError

    def facts(self) -> dict:
        """machine.facts()-shaped facts of the target (arch, kernel, cpus, emulated, ...)."""
        raise NotImplementedError

    def fetch(self, paths: list[str], dest: Path) -> list[Path]:
        """Copy files from the target (or the last job's results) into dest."""
        raise NotImplementedError

    def binaries(self) -> dict[str, Path]:
        """Where each benchmark binary lives on the target -> its local copy, so user frames of the
        profiles brought back can be symbolised here (a symfs). Empty when paths are local."""
        return {}

    def symbol_files(self) -> dict[str, Path]:
        """Files naming the kernel's symbols exactly, beside a kernel the user built (System.map), by
        the name they are kept under with the profiles. Empty when there is none."""
        return {}

    def close(self) -> None:
        pass

    def run_command(self, argv: list[str], timeout: float = 60.0) -> InvocationResult:
        """Run one program of the bin dir once (no barrier, no parsing)."""
        return self.run_job([Invocation(list(argv), 1, timeout)])[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the kpd-run helper ------------------------------------------------------

def static_family(name: str, arch: str) -> Path:
    """A family's worker built static for arch (a guest or board has no libc to offer)."""
    return build.build_family(name, arch, static=True)


def bundle_binaries(arch: str, families: list[str] | None = None) -> dict[str, Path]:
    """name in bin dir -> local path: the static workers, kpd-hello and kpd-run for arch."""
    names = families or sorted(catalogue.families())
    out = {f"kpd-{n}": static_family(n, arch) for n in names}
    out["kpd-hello"] = build.build_hello(arch)  # always static
    out["kpd-run"] = build.build_runner(arch)
    return out


# -- the job script (guest and SSH targets) -----------------------------------

def _q(word: str) -> str:
    return shlex.quote(word)


def job_script(invocations: list[Invocation], bin_dir: str, out_dir: str, *, perf: list[str] | None = None,
               marker: str = "", facts: bool = True, swap_mb: int | None = None) -> str:
    """A POSIX sh script that runs the job and leaves its results in out_dir.

    ``perf`` is the command words that start perf on the target (None: no
    perf available; a profiled invocation then fails with that reason).
    ``marker`` lines (``<marker> inv N start|done``) go to stdout so a
    console reader can follow progress. ``swap_mb``: set up a zram swap of that size first when
    none is active (:data:`SWAP_SETUP`), removed when the script exits.
    """
    q = _q
    lines = ["#!/bin/sh", "# generated by kperfdiff: every word is shell-quoted", "umask 022",
             f"mkdir -p {q(out_dir)}"]
    # x86 boots on "tsc-early" and replaces it about a second later, once the
    # TSC is calibrated again (later still under emulation): measure after the
    # switch, not across it. Bounded, so a kernel that keeps it goes on.
    cs = q(FACT_FILES["clocksource"])
    lines += ["waited=0", f"while [ \"$(cat {cs} 2>/dev/null)\" = tsc-early ]", "do",
              f"  [ $waited -lt {EARLY_CLOCKSOURCE_WAIT} ] || break", "  sleep 1", "  waited=$((waited + 1))", "done"]
    if swap_mb:
        lines.append(SWAP_SETUP.replace("@SIZE@", q(f"{int(swap_mb)}M")).replace("@OUT@", q(out_dir)).rstrip("\n"))
    if facts:
        lines.append(f"mkdir -p {q(out_dir + '/facts')}")
        for name, path in FACT_FILES.items():
            lines.append(f"cat {q(path)} > {q(out_dir + '/facts/' + name)} 2>/dev/null")
        lines.append(f"uname -m > {q(out_dir + '/facts/machine')}")
        lines.append(f"uname -r > {q(out_dir + '/facts/release')}")
        lines.append(f"uname -v > {q(out_dir + '/facts/kversion')}")
        lines.append(f"id -u > {q(out_dir + '/facts/uid')}")
        # the kernel's ELF notes (its build id) in hex: text, whatever carries the folder back
        lines.append(f"od -An -v -tx1 {q(KERNEL_NOTES)} > {q(out_dir + '/facts/notes')} 2>/dev/null")
        lines.append(f"grep -m1 KernelPageSize /proc/self/smaps > {q(out_dir + '/facts/pagesize')} 2>/dev/null")
    need_kallsyms = False
    for i, inv in enumerate(invocations):
        d = f"{out_dir}/i{i}"
        lines.append(f"mkdir -p {q(d)}")
        if marker:
            lines.append(f"echo {q(f'{marker} inv {i} start')}")
        lines.append(f"cat /proc/vmstat > {q(d + '/vmstat.before')} 2>/dev/null")
        lines.append(f"cat /proc/interrupts > {q(d + '/interrupts.before')} 2>/dev/null")
        words = [f"{bin_dir}/{inv.argv[0]}"] + [w.replace("@BIN@", bin_dir) for w in inv.argv[1:]]
        if inv.copies > 1 and "--sync" not in words:
            words.append("--sync")
        prefix: list[str] = []
        if "--count" in inv.argv:
            need_kallsyms = True    # to name the functions of exact instruction counts
        if inv.profile:
            if perf is None:
                lines.append(f"echo {q('error perf is not available on this target')} > {q(d + '/c0.out')}")
                lines.append(f"echo {q('copy 0 exit 1')} > {q(d + '/status')}")
                continue
            need_kallsyms = True
            prefix = list(perf) + ["record", "-q", "-g", "-e", inv.perf_event or "cpu-clock",
                                   "-o", f"{d}/{inv.profile}.c@COPY@.perf.data"]
            if inv.perf_period:
                prefix += ["-c", str(inv.perf_period)]
            elif inv.perf_freq:
                prefix += ["-F", str(inv.perf_freq)]
            prefix.append("--")
        runner = [f"{bin_dir}/kpd-run", "-o", d, "-n", str(inv.copies), "-t", f"{inv.timeout:g}"]
        if inv.copies > 1:
            runner.append("-s")
        lines.append(" ".join(q(w) for w in runner + ["--"] + prefix + words))
        lines.append(f"cat /proc/vmstat > {q(d + '/vmstat.after')} 2>/dev/null")
        lines.append(f"cat /proc/interrupts > {q(d + '/interrupts.after')} 2>/dev/null")
        if marker:
            lines.append(f"echo {q(f'{marker} inv {i} done')}")
    if need_kallsyms:
        lines += kallsyms_commands(out_dir)
    lines.append(f"echo done > {q(out_dir + '/complete')}")
    return "\n".join(lines) + "\n"


SYS_MODULE = "/sys/module"      # on the target


def kallsyms_commands(out_dir: str) -> list[str]:
    """Shell lines that leave the target's /proc/kallsyms in out_dir/kallsyms, with a symbol at each
    module's PLT veneers (record.module_plt_lines does the same for this machine)."""
    ks = _q(out_dir + "/kallsyms")
    return [f"cat /proc/kallsyms > {ks} 2>/dev/null",
            f"for f in {SYS_MODULE}/*/sections/.plt; do [ -r \"$f\" ] || continue; m=${{f#{SYS_MODULE}/}}; "
            f"a=$(cat \"$f\"); printf '%s t {MODULE_PLT}\\t[%s]\\n' \"${{a#0x}}\" \"${{m%%/*}}\"; "
            f"done >> {ks} 2>/dev/null"]


def _text(p: Path, limit: int | None = None) -> str:
    try:
        t = p.read_text(errors="replace")
    except OSError:
        return ""
    return t[-limit:] if limit else t


def copy_from_results(results: Path | None, paths: list[str], dest: Path, *, where: str) -> list[Path]:
    """Copy files named as the job named them (``/kpd/out/x`` or ``x``) out of the folder a job's
    results were unpacked into (``results``, None before any job finished) into dest. A name that
    leads outside that folder, or to no file, is refused in one sentence naming ``where`` (the
    guest, the LAVA job)."""
    if results is None:
        raise BenchError("nothing to fetch: no job has finished yet")
    root = results.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    got = []
    for p in paths:
        src = (root / p.lstrip("/")).resolve()
        if not src.is_relative_to(root) or not src.is_file():
            raise BenchError(f"{where} left no file {p!r} in its results")
        shutil.copy2(src, dest / src.name)
        got.append(dest / src.name)
    return got


def read_results(invocations: list[Invocation], out_dir: Path) -> list[InvocationResult]:
    """Read what job_script left in out_dir (fetched back to this machine)."""
    results = []
    kallsyms = out_dir / "kallsyms"
    bid = _notes_build_id(_text(out_dir / "facts" / "notes"))
    if kallsyms.is_file() and bid != UNKNOWN:
        # the kernel's build id beside its kallsyms, as record.snapshot_kallsyms keeps this machine's:
        # the profile's symbol check matches them by it (targets._keep_kallsyms carries it along)
        kallsyms.with_name(kallsyms.name + ".buildid").write_text(bid + "\n")
    # Instruction-count windows (guest/counting.py), in run order: one per copy that marked one.
    windows = counting.windows(out_dir)
    unclaimed = iter(windows)
    for i, inv in enumerate(invocations):
        d = out_dir / f"i{i}"
        r = InvocationResult(inv)
        status = _text(d / "status")
        if not d.is_dir() or not status:
            r.error = ("the job stopped before this benchmark finished" if d.is_dir()
                       else "the job stopped before this benchmark started")
            results.append(r)
            continue
        runner = parse_status(status)
        st = runner.exit
        r.timed_out, r.wall_s = runner.timed_out, runner.wall_s
        for c in range(inv.copies):
            r.stdout.append(_text(d / f"c{c}.out"))
            r.stderr.append(_text(d / f"c{c}.err", STDERR_TAIL))
            r.exit_status.append(st.get(c, None))
            if inv.profile:
                pd = d / f"{inv.profile}.c{c}.perf.data"
                if pd.exists():
                    r.files[pd.name] = pd
        if windows:
            for c, o in enumerate(r.outputs()):
                w = next(unclaimed, None) if o.info.get("marked") == "1" else None
                if w is not None:
                    r.files[f"insn.c{c}"] = w
        if kallsyms.exists() and (inv.profile or any(k.startswith("insn.") for k in r.files)):
            r.files["kallsyms"] = kallsyms
        r.vmstat_before = _text(d / "vmstat.before")
        r.vmstat_after = _text(d / "vmstat.after")
        r.interrupts_before = _text(d / "interrupts.before")
        r.interrupts_after = _text(d / "interrupts.after")
        results.append(r)
    return results


def facts_from_files(files: dict[str, str], *, emulated: bool, virtualisation: str, extra: dict | None = None) -> dict:
    """machine.facts()-shaped dict from the texts job_script gathered on a target."""
    g = lambda k: (files.get(k) or "").strip()  # noqa: E731
    cpuinfo = g("cpuinfo")
    model = None
    for key in ("model name", "Model", "cpu model", "Processor"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            model = m.group(1).strip()
            break
    if model is None:
        parts = re.findall(r"^CPU part\s*:\s*(\S+)$", cpuinfo, re.M)
        model = f"CPU part {parts[0]}" if parts else "unknown"
    cpus = len(re.findall(r"^processor\s*:", cpuinfo, re.M)) or None
    if cpus is None and g("online"):
        cpus = _count_cpulist(g("online"))
    mem = re.search(r"^MemTotal:\s+(\d+)", g("meminfo"), re.M)
    swaps = [ln for ln in g("swaps").splitlines()[1:] if ln.strip()]
    thp = g("thp")
    bracket = lambda t: (re.search(r"\[(\w+)\]", t).group(1) if re.search(r"\[(\w+)\]", t) else t)  # noqa: E731
    m = re.search(r"(\d+)\s*kB", g("pagesize"))
    page = int(m.group(1)) * 1024 if m else None
    f = {
        "arch": normalise_arch(g("machine")),
        "machine": g("machine"),
        "cpu_model": model,
        "cpus": cpus or 1,
        "cpus_online": g("online"),
        "kernel_release": g("release") or g("osrelease"),
        "kernel_version": g("kversion"),
        "kernel_build_id": _notes_build_id(g("notes")),
        "cmdline": g("cmdline"),
        "hostname": g("hostname"),
        "page_size": page,
        "mem_total_kb": int(mem.group(1)) if mem else None,
        "thp_enabled": bracket(thp) if thp else "unavailable",
        "thp_defrag": bracket(g("thp_defrag")) if g("thp_defrag") else "unavailable",
        "clocksource": g("clocksource") or "unknown",
        "virtualisation": virtualisation,
        "emulated": emulated,
        "swap_active": bool(swaps),
        "perf_events": {},
        "boot_id": g("boot_id"),
        "root": g("uid") == "0",
    }
    if g("swap_setup"):
        f["swap_setup"] = g("swap_setup").splitlines()[-1]   # what the job's own swap set-up did
    if extra:
        f.update(extra)
    return f


def _notes_build_id(hex_text: str) -> str:
    """The build id in a target's kernel notes as ``od -An -tx1`` printed them ("unknown" if none)."""
    try:
        data = bytes.fromhex("".join(hex_text.split()))
    except ValueError:
        return UNKNOWN
    return build_id_from_notes(data) or UNKNOWN


def read_fact_files(folder: Path) -> dict[str, str]:
    if not folder.is_dir():
        return {}
    return {p.name: _text(p) for p in folder.iterdir() if p.is_file()}


def _count_cpulist(text: str) -> int:
    n = 0
    for part in text.split(","):
        a, _, b = part.partition("-")
        try:
            n += (int(b) - int(a) + 1) if b else 1
        except ValueError:
            pass
    return n
