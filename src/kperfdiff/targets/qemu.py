"""QEMU guests: run a job in an arm64 or x86_64 guest booted for it, on any kernel.

The kernel is a Debian kernel package (``kernel=6.1.0-56`` ABI name,
``kernel=6.1.192-2`` package version, ``kernel=6.12`` newest of a series,
or the host release's newest when omitted; fetched
with apt-get download through kperfdiff's own apt configuration for that
architecture) or the user's own image (``kernel=PATH`` plus ``modules=DIR``).

An initramfs is assembled per job from cached newc pieces (guest/initramfs.py): static busybox
and /init; the virtio modules the kernel needs (dependencies read from each
.ko's .modinfo, compressed modules decompressed on the host); the static
workers and kpd-run; perf with its shared libraries and loader (from
Debian's linux-perf of that architecture, NEEDED entries resolved by
reading the ELF files); and the job script. /init mounts proc, sys and
devtmpfs, loads the modules, runs the job, writes the results folder as a
tar onto a virtio disk (or, with no virtio_blk, base64 on the console),
then powers off. The host follows the serial console: markers with host
timestamps, a kernel panic or an early exit of QEMU (``-no-reboot`` and
``panic=-1``) becomes one clear error, and a guest silent past the timeout
is killed.
"""
from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.bench.build import cache_dir, host_arch
from kperfdiff.core.errors import BenchError, InputError, UsageError
from kperfdiff.targets.guest import counting, elf
from kperfdiff.targets.base import (
    Invocation,
    InvocationResult,
    Target,
    bundle_binaries,
    copy_from_results,
    facts_from_files,
    job_script,
    kallsyms_commands,
    read_fact_files,
    read_results,
)
from kperfdiff.targets.guest.debian import Apt
from kperfdiff.targets.guest.frame import decode as decode_frame, unpack as unpack_frame
from kperfdiff.targets.guest.initramfs import assemble, guest_pieces

ARCHES = {
    "arm64": {"qemu": "qemu-system-aarch64", "debian": "arm64", "gnu": "aarch64", "triplet": "aarch64-linux-gnu",
              "machine": ["-M", "virt"], "cpu": "neoverse-n1", "console": "ttyAMA0", "append": [],
              "apt_qemu": "qemu-system-arm"},
    "x86_64": {"qemu": "qemu-system-x86_64", "debian": "amd64", "gnu": "x86_64", "triplet": "x86_64-linux-gnu",
               "machine": ["-M", "q35"], "cpu": "max", "console": "ttyS0",
               "append": ["clocksource=tsc", "tsc=reliable"], "apt_qemu": "qemu-system-x86",
               # deterministic guests boot with qboot (QEMU's minimal firmware, in qemu-system-data),
               # not SeaBIOS: SeaBIOS drives the virtio disks, whose requests complete when the host
               # decides, and two boots then differed (docs/targets.md: deterministic instruction profiles)
               "deterministic_args": ["-bios", "qboot.rom"]},
}
ARCH_ALIASES = {"arm64": "arm64", "aarch64": "arm64", "x86_64": "x86_64", "amd64": "x86_64", "x86-64": "x86_64"}
# loaded before the job when it sets up swap (zram, its allocator and the compressors the kernel
# may default to: lzo-rle through the crypto API on 6.1, built into zram's backends on 6.12) or
# mounts a disk-backed directory (the disk driver and ext4, when not built in)
SWAP_MODULES = ["zram", "zsmalloc", "lzo_rle", "lzo", "lz4"]
DISK_MODULES = ["virtio_pci", "virtio_blk", "ext4", "crc32c_generic"]
DISK_DIR = "/kpd/disk"
DISK_BYTES = 256 << 20     # the ext4 image behind DISK_DIR (sparse)
MARK = "KPD"
RESULT_DISK_BYTES = 2 << 30   # sparse; holds the results tar
GRACE_AFTER_END_S = 5.0
KVM_PROBE_TIMEOUT_S = 30.0
MIN_JOB_TIMEOUT_S = 120.0
# A guest reaches /init in 1-5 s here under TCG (0.02-0.1 of this); one that has printed no /init by
# then is booted once more, with the kernel's messages on the console, and the retry is recorded.
BOOT_TIMEOUT_S = 150.0
# the retried job's first line: the kernel's messages stop at /init, as in a quiet boot
QUIET_CONSOLE = "echo 1 > /proc/sys/kernel/printk 2>/dev/null"

# -- target specification ------------------------------------------------------

@dataclass
class QemuSpec:
    arch: str
    kernel: str | None = None          # Debian ABI/version, package name, or a path
    modules: str | None = None
    mem: str = "2G"
    cpus: int = 2
    deterministic: bool = False
    kvm: str = "auto"                  # auto | on | off
    flavour: str = "cloud"             # Debian kernel flavour: cloud or generic
    append: str = ""                   # extra kernel command line
    timeout: float | None = None       # whole-boot limit (default: from the job)
    boot_timeout: float | None = None  # QEMU start to /init (default BOOT_TIMEOUT_S)

    def text(self) -> str:
        parts = [f"qemu:{self.arch}"]
        for k in ("kernel", "modules"):
            if getattr(self, k):
                parts.append(f"{k}={getattr(self, k)}")
        parts += [f"mem={self.mem}", f"cpus={self.cpus}"]
        if self.deterministic:
            parts.append("deterministic")
        return ",".join(parts)


def parse_spec(spec: str) -> QemuSpec:
    """``qemu:ARCH[,kernel=VERSION|PATH][,modules=DIR][,mem=SIZE][,cpus=N][,deterministic]
    [,kvm=auto|on|off][,flavour=cloud|generic][,append=ARGS][,timeout=S][,boot_timeout=S]``; ``deterministic`` has one
    vCPU unless ``cpus=`` is given."""
    body = spec[len("qemu:"):] if spec.startswith("qemu:") else spec
    arch, *opts = body.split(",")
    if arch.strip() not in ARCH_ALIASES:
        raise UsageError(f"the target {spec!r} names no known guest architecture (use qemu:arm64 or qemu:x86_64)")
    s = QemuSpec(arch=ARCH_ALIASES[arch.strip()])
    cpus_given = False
    for o in opts:
        k, eq, v = o.partition("=")
        k = k.strip()
        if k == "deterministic" and not eq:
            s.deterministic = True
        elif k in ("kernel", "modules", "append", "flavour", "kvm") and eq:
            setattr(s, k, v)
        elif k == "mem" and eq:
            if not re.fullmatch(r"\d+[MGmg]?", v):
                raise UsageError(f"mem={v} in {spec!r} is not a size such as 512M or 4G")
            s.mem = v.upper()
        elif k in ("cpus", "smp") and eq and v.isdigit() and int(v) > 0:
            s.cpus = int(v)
            cpus_given = True
        elif k in ("timeout", "boot_timeout") and eq:
            try:
                seconds = float(v)
            except ValueError:
                seconds = -1.0
            if not seconds > 0:
                raise UsageError(f"{k}={v} in {spec!r} is not a positive number of seconds")
            setattr(s, k, seconds)
        else:
            raise UsageError(f"the option {o!r} of target {spec!r} is not understood (known: kernel=, modules=, "
                             f"mem=, cpus=, deterministic, kvm=, flavour=, append=, timeout=, boot_timeout=)")
    if s.kvm not in ("auto", "on", "off"):
        raise UsageError(f"kvm={s.kvm} in {spec!r}: use auto, on or off")
    if s.flavour not in ("cloud", "generic"):
        raise UsageError(f"flavour={s.flavour} in {spec!r}: use cloud or generic")
    if s.deterministic and s.arch == "x86_64" and s.cpus > 1 and cpus_given:
        # measured with QEMU 7.2: the second vCPU never comes up under -icount (SeaBIOS or qboot)
        raise UsageError(f"cpus={s.cpus} in {spec!r}: a deterministic x86_64 guest has one vCPU (under "
                         f"-icount QEMU does not bring up a second x86 CPU)")
    if s.deterministic and not cpus_given:
        s.cpus = 1      # one vCPU repeats best: kernel instructions per operation vary 1% between boots on two
    return s


def mem_mb(mem: str) -> int:
    m = re.fullmatch(r"(\d+)([MG]?)", mem.upper())
    if not m:
        raise UsageError(f"mem={mem} is not a size such as 512M or 4G")
    n = int(m.group(1))
    return n * 1024 if m.group(2) == "G" else n


# -- kernels ---------------------------------------------------------------

@dataclass
class Kernel:
    image: Path
    modules: Path | None        # lib/modules/<release> or the user's folder
    release: str
    source: str                 # "debian:<package>=<version>" or "path:<image>"


def _looks_like_path(v: str) -> bool:
    return "/" in v or v.startswith(".") or Path(v).exists()


def resolve_kernel(s: QemuSpec) -> Kernel:
    cfg = ARCHES[s.arch]
    if s.kernel and _looks_like_path(s.kernel):
        image = Path(s.kernel).expanduser()
        if not image.is_file():
            raise InputError(f"the kernel image {image} does not exist")
        mods = Path(s.modules).expanduser() if s.modules else None
        if mods is not None and not mods.is_dir():
            raise InputError(f"the modules folder {mods} does not exist")
        if mods is not None and not list(mods.rglob("*.ko*")):
            sub = [d for d in mods.glob("lib/modules/*") if d.is_dir()]
            if sub:
                mods = sub[0]
        release = mods.name if mods else image.name
        return Kernel(image, mods, release, f"path:{image}")
    apt = Apt(cfg["debian"])
    deb_arch = cfg["debian"]
    flav = f"cloud-{deb_arch}" if s.flavour == "cloud" else deb_arch
    meta = f"linux-image-{flav}"
    pkg = _kernel_package(apt, meta, flav, s.kernel)
    if pkg is None and s.kernel and apt.list_neighbours():     # a kernel of the release before or after
        pkg = _kernel_package(apt, meta, flav, s.kernel)
    if not pkg or not apt.versions(pkg):
        avail = ", ".join(apt.versions(meta)[:5]) or "none"
        raise InputError(f"no Debian {s.flavour} kernel package for {deb_arch} matches kernel={s.kernel} "
                         f"(give a series such as 6.12, an ABI such as 6.1.0-56 or a version of {meta}: {avail}; or a kernel image path)")
    tree = apt.fetch(pkg)
    images = sorted((tree / "boot").glob("vmlinuz-*")) or sorted((tree / "boot").glob("vmlinux-*"))
    if not images:
        raise BenchError(f"the Debian package {pkg} holds no kernel image in /boot")
    release = images[0].name.split("-", 1)[1]
    mods = next((d for d in (tree / "lib/modules" / release, tree / "usr/lib/modules" / release) if d.is_dir()),
                None)       # trixie's packages install under /usr (merged /usr)
    return Kernel(images[0], mods, release, f"debian:{pkg}")


def _kernel_package(apt: Apt, meta: str, flav: str, v: str | None) -> str | None:
    """The linux-image package a kernel= value names in the listed releases, or None."""
    pkg = None
    if v is None:
        deps = apt.depends(meta)
        pkg = next((d for d in deps if d.startswith("linux-image-")), None)
    elif v.startswith("linux-image-"):
        pkg = v
    elif re.fullmatch(r"\d+\.\d+\.\d+[-+][\w.+]+", v) and apt.versions(f"linux-image-{v}-{flav}"):
        pkg = f"linux-image-{v}-{flav}"     # an ABI: 6.1.0-56, 6.12.118+deb13
    else:
        metas = apt.versions(meta)
        if re.fullmatch(r"\d+\.\d+", v):    # a series: the newest version of it in any listed release
            v = next((m for m in metas if m.startswith(v + ".")), v)
        if v in metas:
            deps = apt.depends(meta, v)
            pkg = next((d for d in deps if d.startswith("linux-image-")), None)
    return pkg if pkg and apt.versions(pkg) else None


# -- perf for the guest's architecture -------------------------------------------

def _is_lib_package(name: str) -> bool:
    """Debian packages that ship shared libraries (libfoo1, zlib1g), not interpreters or tools."""
    return (name.startswith("lib") or name.startswith("zlib")) and not name.endswith(("-bin", "-dev", "-common"))


def perf_bundle(arch: str) -> dict[str, Path]:
    """Debian's perf for arch with every shared library it needs and the dynamic loader.

    Returns {"perf": path, "ld.so": path, "lib/<soname>": path, ...}. Libraries
    are resolved by reading DT_NEEDED from the ELF files and searching the
    unpacked Debian packages (linux-perf's dependencies, breadth first).
    """
    cfg = ARCHES[arch]
    apt = Apt(cfg["debian"])
    cache = cache_dir() / "qemu" / "perf" / f"{cfg['debian']}.json"
    if cache.exists():
        try:
            saved = {k: Path(v) for k, v in json.loads(cache.read_text()).items()}
            if all(p.exists() for p in saved.values()):
                return saved
        except ValueError:
            pass
    trees = [apt.fetch("linux-perf")]
    perf = None
    for p in sorted((trees[0] / "usr/bin").glob("perf*")):
        if p.is_file() and p.read_bytes()[:4] == b"\x7fELF":
            perf = p
            break
    if perf is None:
        raise BenchError(f"the Debian package linux-perf ({cfg['debian']}) holds no perf binary")
    queue = [d for d in apt.depends("linux-perf") if _is_lib_package(d)]
    fetched = {"linux-perf"}
    if "libc6" not in queue:
        queue.insert(0, "libc6")

    def lookup(soname: str) -> Path | None:
        for t in trees:
            for d in (f"lib/{cfg['triplet']}", f"usr/lib/{cfg['triplet']}", "lib", "usr/lib"):
                c = t / d / soname
                if c.exists():
                    return c
        return None

    needed = {}
    pending = list(elf.read(perf).needed)
    interp = elf.read(perf).interp
    out: dict[str, Path] = {"perf": perf}
    rounds = 0
    while True:
        progress = True
        while pending and progress:
            progress = False
            for so in list(pending):
                p = lookup(so)
                if p is not None:
                    pending.remove(so)
                    needed[so] = p
                    progress = True
                    for dep in elf.read(Path(os.path.realpath(p))).needed:
                        if dep not in needed and dep not in pending:
                            pending.append(dep)
        ld = lookup(Path(interp).name) if interp else None
        if not pending and ld is not None:
            break
        if not queue or rounds > 6:
            raise BenchError(f"could not find the {cfg['debian']} libraries perf needs: "
                             f"{', '.join(pending) or Path(interp or '').name}")
        rounds += 1
        layer, queue = queue, []
        for pkg in layer:
            if pkg in fetched:
                continue
            fetched.add(pkg)
            try:
                trees.append(apt.fetch(pkg))
            except BenchError:
                continue
            queue += [d for d in apt.depends(pkg) if _is_lib_package(d) and d not in fetched]
    out["ld.so"] = Path(os.path.realpath(ld))
    for so, p in needed.items():
        out[f"lib/{so}"] = Path(os.path.realpath(p))
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({k: str(v) for k, v in out.items()}, indent=1))
    return out


def perf_command(bundle_dir: str) -> list[str]:
    """Words that start the bundled perf through its own loader (no ld.so.cache needed)."""
    return [f"{bundle_dir}/ld.so", "--library-path", f"{bundle_dir}/lib", f"{bundle_dir}/perf"]


def make_ext4(path: Path, size: int) -> None:
    """A sparse image of size bytes holding an empty ext4 file system (mke2fs, e2fsprogs)."""
    exe = shutil.which("mke2fs") or "/sbin/mke2fs"
    with open(path, "wb") as fh:
        fh.truncate(size)
    try:
        subprocess.run([exe, "-q", "-F", "-t", "ext4", "-L", "kpddisk", str(path)], check=True,
                       capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise BenchError(f"the guest's disk image could not be formatted with mke2fs: "
                         f"{getattr(e, 'stderr', b'') or e}") from None


# -- KVM verdict -----------------------------------------------------------------

def kvm_verdict_path() -> Path:
    return cache_dir() / "qemu" / "kvm-verdict.json"


def _kvm_key() -> str:
    try:
        qv = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True, text=True,
                            timeout=10).stdout.split("\n")[0]
    except (OSError, subprocess.TimeoutExpired):
        qv = ""
    return f"{os.uname().release}|{qv}"


# -- the target ------------------------------------------------------------------

class BootStalled(BenchError):
    """A boot printed no /init line within its boot timeout (QemuTarget._boot boots it again once)."""

    def __init__(self, last: str):
        super().__init__(f"no /init line within the boot timeout (last console line {last[:160]!r})")
        self.last = last


@dataclass
class BootRecord:
    """What the console showed during one boot, with host timestamps (s since QEMU start)."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    init_s: float | None = None        # host time of the KPD-INIT line
    init_uptime_s: float | None = None  # guest uptime printed by /init
    end_s: float | None = None
    total_s: float = 0.0
    exit_code: int | None = None
    job_rc: int | None = None
    dmesg: str = ""

    def console(self, last: int = 40) -> str:
        return "\n".join(ln for _, ln in self.lines[-last:])


# Profiles of a deterministic guest sample cpu-clock every this many virtual nanoseconds, which
# under -icount shift=0 are instructions. A prime, so that a benchmark loop of a fixed instruction
# count is not sampled at the same point of every pass (a stroboscope). The emulated PMU's own
# instructions event counts exactly but cannot attribute kernel samples (docs/targets.md: deterministic instruction profiles).
DETERMINISTIC_PERIOD = 99991
DETERMINISTIC_CMDLINE = ["nokaslr", "norandmaps", "randomize_kstack_offset=off"]
# QEMU's side of it: instruction counting, the same random seed and a virtual-clock RTC every boot.
DETERMINISTIC_ARGS = ["-icount", "shift=0,sleep=off,align=off", "-seed", "1",
                      "-rtc", "base=2024-01-01T00:00:00,clock=vm"]


class QemuTarget(Target):
    kind = "qemu"

    def __init__(self, spec: str | QemuSpec):
        self.qs = parse_spec(spec) if isinstance(spec, str) else spec
        self.spec = self.qs.text()
        self.cfg = ARCHES[self.qs.arch]
        self._kernel: Kernel | None = None
        self._bins: dict[str, Path] = {}
        self._perf: dict[str, Path] | None = None
        self._facts: dict | None = None
        self._accel: str | None = None
        self._work = Path(tempfile.mkdtemp(prefix="kpd-qemu-"))
        self._last_out: Path | None = None
        self.last_boot: BootRecord | None = None
        self.modules_loaded: list[str] = []
        self.modules_missing: list[str] = []
        # Deterministic guests: latency workers count their instructions (kpd --count) and
        # profiles sample every DETERMINISTIC_PERIOD instructions.
        self.count_instructions = self.qs.deterministic
        # boot.map_* (targets/boot.py): kernel function addresses whose calls the plugin counts
        # inclusively, with the boot window (reset to /init); None: neither
        self.boot_calls: list[int] | None = None
        self.perf_period = DETERMINISTIC_PERIOD if self.qs.deterministic else None
        self._disk = False          # the next jobs mount an ext4 virtio disk at DISK_DIR
        self.boot_retries: list[str] = []   # boots that stalled before /init and were booted again

    def disk_dir(self) -> str | None:
        """An ext4 file system on a virtio disk of its own (formatted here with mke2fs), mounted at
        /kpd/disk before the job: the guest's /var/tmp is the initramfs (tmpfs)."""
        if shutil.which("mke2fs") is None and not Path("/sbin/mke2fs").exists():
            return None     # the worker then says why it skips (dir= on tmpfs)
        self._disk = True
        return DISK_DIR

    # -- set-up --
    def _require_qemu(self) -> str:
        exe = shutil.which(self.cfg["qemu"])
        if exe is None:
            raise BenchError(f"{self.cfg['qemu']} is not installed; run `make setup` "
                             f"(Debian package {self.cfg['apt_qemu']})")
        return exe

    def prepare(self, families: list[str] | None = None, profile: bool = False) -> None:
        self._require_qemu()
        if self._kernel is None:
            self._kernel = resolve_kernel(self.qs)
        missing = set(families or []) - {k[len("kpd-"):] for k in self._bins}
        if not self._bins or missing:
            self._bins.update(bundle_binaries(self.cfg["gnu"], sorted(set(families or []) | {
                k[len("kpd-"):] for k in self._bins if k not in ("kpd-run", "kpd-hello")}) or None))
        if profile and self._perf is None:
            self._perf = perf_bundle(self.qs.arch)

    @property
    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = resolve_kernel(self.qs)
        return self._kernel

    def accel(self) -> str:
        """'kvm' only when the guest is the host's architecture and a KVM test boot succeeded."""
        if self._accel:
            return self._accel
        native = self.qs.arch == ("arm64" if host_arch() == "aarch64" else host_arch())
        if self.qs.kvm == "off" or not native or self.qs.deterministic or not os.access("/dev/kvm", os.R_OK | os.W_OK):
            if self.qs.kvm == "on":
                raise BenchError(f"kvm=on was asked but KVM cannot run a {self.qs.arch} guest here "
                                 f"(needs /dev/kvm, the host's architecture and no deterministic mode)")
            self._accel = "tcg"
            return self._accel
        if self.qs.kvm == "on":
            self._accel = "kvm"
            return self._accel
        path = kvm_verdict_path()
        key = _kvm_key() + "|" + self.kernel.source
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            saved = {}
        if key in saved:
            self._accel = saved[key]
            return self._accel
        self._accel = "kvm"
        try:
            rec = self._boot([], timeout=KVM_PROBE_TIMEOUT_S, probe=True)
            verdict = "kvm" if rec.job_rc == 0 else "tcg"
        except BenchError:
            verdict = "tcg"
        self._accel = verdict
        saved[key] = verdict
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved, indent=1))
        return verdict

    # -- running --
    def _early_modules(self) -> list[str]:
        return (SWAP_MODULES if self.swap_mb else []) + (DISK_MODULES if self._disk else [])

    def _initrd(self, job: str, extra_files: dict[str, bytes]) -> Path:
        return assemble(self._work / "initrd.cpio", self.initrd_pieces(), job, extra_files)

    def initrd_pieces(self) -> list[Path]:
        """The cached pieces of the initramfs (all but the job): busybox and /init, the modules, the
        workers, perf (when prepared with a profile)."""
        pieces, self.modules_loaded, self.modules_missing = guest_pieces(
            self.cfg["debian"], self.kernel, self._early_modules(), self._bins, self._perf)
        return pieces

    def qemu_argv(self, initrd: Path, disk: Path, append: list[str], mem: str | None = None,
                  accel: str | None = None, scratch: Path | None = None) -> list[str]:
        accel = accel or self.accel()
        q = self.qs
        argv = [self._require_qemu(), "-nodefaults", "-no-user-config", "-display", "none",
                *self.cfg["machine"], "-m", str(mem_mb(mem or q.mem)), "-smp", str(q.cpus),
                "-kernel", str(self.kernel.image), "-initrd", str(initrd),
                "-append", " ".join(append), "-serial", "stdio", "-monitor", "none", "-no-reboot",
                "-drive", f"file={disk},format=raw,if=none,id=kpdout,cache=unsafe",
                "-device", "virtio-blk-pci,drive=kpdout,serial=kpdout"]
        if scratch is not None:     # the disk-backed directory's file system (DISK_DIR)
            argv += ["-drive", f"file={scratch},format=raw,if=none,id=kpddisk,cache=unsafe",
                     "-device", "virtio-blk-pci,drive=kpddisk,serial=kpddisk"]
        if accel == "kvm":
            argv += ["-accel", "kvm", "-cpu", "host"]
        else:
            argv += ["-accel", "tcg", "-cpu", self.cfg["cpu"]]
            if q.deterministic:
                argv += DETERMINISTIC_ARGS + self.cfg.get("deterministic_args", [])
        return argv

    def cmdline(self, boot_debug: bool = False, verbose: bool = False) -> list[str]:
        """The kernel's command line; ``verbose``: its messages on the console until /init quiets it."""
        a = [f"console={self.cfg['console']}", "panic=-1", "rdinit=/init", "printk.time=1",
             *self.cfg["append"]]
        if boot_debug:
            a += ["initcall_debug", "log_buf_len=8M", "loglevel=1"]
        else:
            a += ["loglevel=7"] if verbose else ["quiet", "loglevel=1"]
        if self.qs.deterministic:
            # The same work on every boot: no randomised kernel or process layout, no random
            # kernel stack offset per system call.
            a += DETERMINISTIC_CMDLINE
        if self.qs.append:
            a += self.qs.append.split()
        return a

    def _boot(self, invocations: list[Invocation], *, timeout: float, probe: bool = False,
              boot_debug: bool = False, mem: str | None = None, out_dir: Path | None = None,
              accel: str | None = None, kallsyms: bool = False) -> BootRecord:
        """One job in one boot. A guest that prints no /init within the boot timeout is booted once
        more (a TCG guest on a starved host can stall before /init); the retry is in the facts."""
        perf = perf_command("/kpd/perf") if self._perf else None
        script = job_script(invocations, "/kpd/bin", "/kpd/out", perf=perf, marker=MARK + "-MARK",
                            facts=not probe, swap_mb=None if probe else self.swap_mb)
        if kallsyms:
            script += "\n".join(kallsyms_commands("/kpd/out")) + "\n"
        boot_timeout = None if probe else min(timeout, self.qs.boot_timeout or BOOT_TIMEOUT_S)
        once = dict(timeout=timeout, boot_timeout=boot_timeout, probe=probe, boot_debug=boot_debug, mem=mem,
                    out_dir=out_dir, accel=accel)
        try:
            return self._boot_script(script, **once)
        except BootStalled:
            pass
        # the second boot shows the kernel's messages until /init, where the job quiets the console
        # again; a deterministic guest keeps its command line, so its boot counts the same work
        verbose = not self.qs.deterministic
        print(f"kperfdiff: the {self.qs.arch} guest printed nothing past the kernel within {boot_timeout:g} s "
              f"(it reaches /init in seconds when well); booting it once more"
              + (", with the kernel's messages on the console" if verbose else ""), file=sys.stderr)
        self.boot_retries.append(f"a boot did not reach /init within {boot_timeout:g} s and was booted again")
        head, _, rest = script.partition("\n")
        try:
            return self._boot_script(f"{head}\n{QUIET_CONSOLE}\n{rest}" if verbose else script,
                                     verbose=verbose, **once)
        except BootStalled as again:
            raise BenchError(f"the {self.qs.arch} guest did not reach /init within {boot_timeout:g} s, twice "
                             f"(boot_timeout= in the target sets that limit); the second boot's last console "
                             f"line: {again.last[:160]!r}") from None

    def _boot_script(self, script: str, *, timeout: float, boot_timeout: float | None, probe: bool,
                     boot_debug: bool, mem: str | None, out_dir: Path | None, accel: str | None,
                     verbose: bool = False) -> BootRecord:
        work = Path(tempfile.mkdtemp(prefix="boot-", dir=self._work))
        extra = {"kpd/modules.late": b""} if self.qs.deterministic else {}
        scratch = None
        if self._disk and not probe:
            extra["kpd/disk.want"] = b""
            scratch = work / "disk.img"
            make_ext4(scratch, DISK_BYTES)
        initrd = self._initrd(script, extra)
        disk = work / "out.img"
        with open(disk, "wb") as fh:
            fh.truncate(RESULT_DISK_BYTES)
        argv = self.qemu_argv(initrd, disk, self.cmdline(boot_debug, verbose=verbose), mem=mem, accel=accel,
                              scratch=scratch)
        out = out_dir or (work / "out")
        out.mkdir(parents=True, exist_ok=True)
        if self.count_instructions and not probe and (accel or self.accel()) == "tcg":
            # exact instruction counts per block between the workers' marks (guest/counting.py);
            # boot.map_*: also the boot window and the calls of the functions in self.boot_calls
            argv += ["-plugin", ",".join([str(counting.plugin()), f"out={out / counting.WINDOW_PREFIX}",
                                          *(counting.boot_args(out, self.boot_calls)
                                            if self.boot_calls is not None else [])])]
        try:
            rec = self._run_console(argv, timeout, boot_timeout)
            got = self._extract(disk, rec, out)
        finally:
            for f in (initrd, disk, scratch):
                if f is not None:
                    f.unlink(missing_ok=True)
        if not got and rec.job_rc is not None:
            raise BenchError(f"the {self.qs.arch} guest ran the job but its results could not be read back "
                             f"(no tar on the virtio disk nor on the console)")
        dm = out / "dmesg"
        if dm.exists():
            rec.dmesg = dm.read_text(errors="replace")
        self._last_out = out
        return rec

    def _run_console(self, argv: list[str], timeout: float, boot_timeout: float | None = None) -> BootRecord:
        """Follow the console until the job's end marker. ``boot_timeout`` (below ``timeout``): a boot
        with no /init line by then raises :class:`BootStalled`."""
        rec = BootRecord()
        t0 = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
        except OSError as e:
            raise BenchError(f"{argv[0]} could not be started: {e.strerror}") from None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        partial = b""
        err = b""
        panic = None
        end_at = None
        streams = 2
        try:
            while streams:
                now = time.monotonic()
                limit = t0 + timeout if end_at is None else min(t0 + timeout, end_at + GRACE_AFTER_END_S)
                if boot_timeout is not None and rec.init_s is None:
                    limit = min(limit, t0 + boot_timeout)
                if now >= limit:
                    break
                for key, _ in sel.select(timeout=min(0.5, limit - now)):
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        streams -= 1
                        continue
                    if key.data == "err":
                        err += chunk
                        continue
                    ts = time.monotonic() - t0
                    partial += chunk
                    *whole, partial = partial.split(b"\n")
                    for raw in whole:
                        ln = raw.decode("utf-8", "replace").rstrip("\r")
                        rec.lines.append((ts, ln))
                        if ln.startswith("KPD-INIT") and rec.init_s is None:
                            rec.init_s = ts
                            try:
                                rec.init_uptime_s = float(ln.split()[1])
                            except (IndexError, ValueError):
                                pass
                        elif ln.startswith("KPD-JOB-END"):
                            try:
                                rec.job_rc = int(ln.split()[1])
                            except (IndexError, ValueError):
                                rec.job_rc = -1
                        elif ln.startswith("KPD-END"):
                            rec.end_s = ts
                            end_at = time.monotonic()
                        m = re.search(r"Kernel panic - not syncing: (.*)", ln)
                        if m and panic is None:
                            panic = m.group(1).strip()
        finally:
            sel.close()
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, 9)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for s in (proc.stdout, proc.stderr):
                s.close()
        if partial:
            rec.lines.append((time.monotonic() - t0, partial.decode("utf-8", "replace")))
        rec.total_s = time.monotonic() - t0
        rec.exit_code = proc.returncode
        if panic is not None:
            raise BenchError(f"the {self.qs.arch} guest kernel panicked: {panic}")
        if rec.end_s is None:
            last = next((ln for _, ln in reversed(rec.lines) if ln.strip()), "")
            if proc.returncode not in (None, -9) and rec.total_s < timeout:
                msg = err.decode(errors="replace").strip().splitlines()
                raise BenchError(f"QEMU ({Path(argv[0]).name}) stopped with status {proc.returncode} before the "
                                 f"job ended: {(msg[-1] if msg else last)[:200] or 'no message'}")
            if rec.init_s is None and boot_timeout is not None and boot_timeout < timeout:
                raise BootStalled(last)
            where = "before reaching /init" if rec.init_s is None else "during the job"
            raise BenchError(f"the {self.qs.arch} guest did not finish within {timeout:g} s (stopped {where}; "
                             f"last console line: {last[:160]!r})")
        return rec

    def _extract(self, disk: Path, rec: BootRecord, out: Path) -> bool:
        text = [ln for _, ln in rec.lines]
        if any(ln.startswith("KPD-TAR-BEGIN") for ln in text):
            unpack_frame(decode_frame(text, f"the {self.qs.arch} guest's console"), out,
                         f"the {self.qs.arch} guest's console")
            return True
        try:
            tf = tarfile.open(disk, "r:")
        except tarfile.TarError:
            return False
        with tf:
            try:
                tf.extractall(out, filter="data")
            except TypeError:
                tf.extractall(out)
        return True

    def job_timeout(self, invocations: list[Invocation]) -> float:
        if self.qs.timeout:
            return self.qs.timeout
        return MIN_JOB_TIMEOUT_S + sum(i.timeout for i in invocations) * (1.5 if self.accel() == "tcg" else 1.1)

    def run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        fams = sorted({i.argv[0][len("kpd-"):] for i in invocations if i.argv and i.argv[0].startswith("kpd-")}
                      - {"run", "hello"})
        self.prepare(fams, profile=any(i.profile for i in invocations))
        out = Path(tempfile.mkdtemp(prefix="job-", dir=self._work)) / "out"
        rec = self._boot(invocations, timeout=self.job_timeout(invocations), out_dir=out)
        self.last_boot = rec
        self._facts = self._make_facts(read_fact_files(out / "facts"))
        results = read_results(invocations, out)
        return results

    def _make_facts(self, files: dict[str, str]) -> dict:
        accel = self.accel()
        extra = {"target": self.spec, "kernel_source": self.kernel.source, "qemu_cpu": (
                 "host" if accel == "kvm" else self.cfg["cpu"]), "deterministic": self.qs.deterministic,
                 "perf_events": {"cpu-clock": True, "task-clock": True}}
        if self.qs.deterministic:
            extra["time_unit"] = "instructions (QEMU -icount shift=0: one virtual ns per guest instruction)"
            extra["profile_sampling"] = (f"cpu-clock every {DETERMINISTIC_PERIOD} virtual ns, which are "
                                         f"instructions; emulated instructions and cycles are not real time")
        if self.boot_retries:
            extra["boot_retries"] = f"{len(self.boot_retries)}: {self.boot_retries[-1]}"
        return facts_from_files(files, emulated=True, virtualisation=accel, extra=extra)

    def binaries(self) -> dict[str, Path]:
        return {f"/kpd/bin/{n}": p for n, p in self._bins.items()}

    def facts(self) -> dict:
        if self._facts is None:
            self.run_job([])
        return dict(self._facts or {})

    def symbol_files(self) -> dict[str, Path]:
        """The System.map beside a kernel=PATH image (targets/kbuild.py leaves one with each image)."""
        if not self.kernel.source.startswith("path:"):
            return {}
        smap = self.kernel.image.parent / "System.map"
        return {"System.map": smap} if smap.is_file() else {}

    def fetch(self, paths: list[str], dest: Path) -> list[Path]:
        return copy_from_results(self._last_out, paths, dest, where="the guest")

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)
