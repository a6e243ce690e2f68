"""Kernel builds a bisection step can afford: a git tree into an image a QEMU guest boots.

:func:`build_kernel` configures the tree for the guest of an architecture and builds it in
place, so that the next commit's build is an incremental one. The configuration is
``allnoconfig``, then kperfdiff's fragments (guest/kconfig-common and guest/kconfig-<arch>: what
the guests of targets/qemu.py need, built in, so no modules travel: the serial console, virtio
PCI disks, ext4, devtmpfs, the system calls the workers make, loopback TCP, perf events and
every symbol in kallsyms), then the user's fragment, merged with the tree's own
scripts/kconfig/merge_config.sh and completed by ``make olddefconfig``. arm64 is cross-compiled
(``CROSS_COMPILE=aarch64-linux-gnu-``). The image, ``vmlinux`` and ``System.map`` are copied into
the caller's folder for the commit, so a probe's symbols stay exact after the tree moves on.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.core.errors import BenchError, InputError, UsageError
from kperfdiff.targets.qemu import ARCH_ALIASES

GUEST_DIR = Path(__file__).parent / "guest"
KARCH = {
    "x86_64": {"ARCH": "x86_64", "cross": "", "image": "arch/x86/boot/bzImage", "target": "bzImage"},
    "arm64": {"ARCH": "arm64", "cross": "aarch64-linux-gnu-", "image": "arch/arm64/boot/Image", "target": "Image"},
}
# host tools a build of the guest configuration runs, with the Debian package that has each
HOST_TOOLS = {"make": "make", "bc": "bc", "flex": "flex", "bison": "bison", "perl": "perl-base"}
STAMP = ".kperfdiff-config"       # in the tree: the hash of the fragments its .config was made from
LOG = ".kperfdiff-build.log"      # in the tree: the last build's output
LOG_TAIL_LINES = 3


@dataclass
class BuiltKernel:
    arch: str
    image: Path             # bzImage (x86_64) or Image (arm64)
    vmlinux: Path
    system_map: Path
    config: Path
    release: str            # make kernelrelease
    seconds: float          # wall time of the configuration and the build
    image_bytes: int
    incremental: bool       # the tree held a build before (make rebuilt what the commit and the configuration changed)


def guest_fragments(arch: str) -> list[Path]:
    """kperfdiff's configuration fragments for the guest of ``arch``, in merge order."""
    return [GUEST_DIR / "kconfig-common", GUEST_DIR / f"kconfig-{arch}"]


def read_fragment(text: str) -> dict[str, str]:
    """CONFIG_ options a fragment or a .config sets: name -> value, ``n`` for ``# CONFIG_X is not set``."""
    out: dict[str, str] = {}
    for ln in text.splitlines():
        ln = ln.strip()
        m = re.fullmatch(r"# (CONFIG_\w+) is not set", ln)
        if m:
            out[m.group(1)] = "n"
            continue
        m = re.fullmatch(r"(CONFIG_\w+)=(.*)", ln)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def merged_wishes(fragments: list[Path]) -> dict[str, str]:
    """What the fragments ask for together, a later fragment winning (as merge_config.sh merges them)."""
    want: dict[str, str] = {}
    for f in fragments:
        want.update(read_fragment(f.read_text()))
    return want


def dropped(config_text: str, wishes: dict[str, str]) -> list[str]:
    """The options of ``wishes`` that the final .config does not hold as asked (a dependency is
    missing, or the tree has no such option), as ``CONFIG_X=asked (got)``."""
    have = read_fragment(config_text)
    out = []
    for k, v in wishes.items():
        got = have.get(k, "n")
        if got != v and not (v == "n" and k not in have):
            out.append(f"{k}={v} ({'unset' if k not in have else got})")
    return out


def check_tree(tree: Path) -> Path:
    tree = Path(tree).expanduser()
    if not tree.is_dir():
        raise InputError(f"the kernel tree {tree} is not a folder")
    if not all((tree / p).is_file() for p in ("Makefile", "Kconfig", "scripts/kconfig/merge_config.sh")):
        raise InputError(f"{tree} is not a Linux kernel tree (it needs a Makefile, a Kconfig and "
                         f"scripts/kconfig/merge_config.sh)")
    return tree


def check_tools(arch: str) -> None:
    """One sentence naming every tool a build for ``arch`` needs and this machine lacks."""
    cross = KARCH[arch]["cross"]
    missing = [f"{t} ({pkg})" for t, pkg in HOST_TOOLS.items() if shutil.which(t) is None]
    cc = f"{cross}gcc"
    if shutil.which(cc) is None:
        missing.append(f"{cc} ({'gcc-aarch64-linux-gnu' if cross else 'gcc'})")
    if "gcc" not in " ".join(missing) and arch == "x86_64" and not _has_libelf():
        missing.append("libelf's headers, for objtool (libelf-dev)")
    if missing:
        raise BenchError(f"building an {arch} kernel needs {', '.join(missing)}: install them "
                         f"(make test-bisect's set-up does)")


def _has_libelf() -> bool:
    try:
        r = subprocess.run(["gcc", "-E", "-x", "c", "-"], input="#include <gelf.h>\n", capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _make(tree: Path, arch: str, args: list[str], log, what: str, capture: bool = False) -> str:
    """Run make in the tree for arch, its output appended to the open ``log`` as it comes (so a long
    build can be followed there); with ``capture``, also returned. A failure is one sentence with
    the compiler's errors (or the last lines) and the log's path."""
    cfg = KARCH[arch]
    argv = ["make", "-C", str(tree), f"ARCH={cfg['ARCH']}"]
    if cfg["cross"]:
        argv.append(f"CROSS_COMPILE={cfg['cross']}")
    env = dict(os.environ, LC_ALL="C")
    log.write(f"$ {' '.join(argv + args)}\n")
    log.flush()
    start = log.tell()
    try:
        r = subprocess.run(argv + args, stdout=subprocess.PIPE if capture else log, stderr=subprocess.STDOUT,
                           text=True, errors="replace", env=env)
    except OSError as e:
        raise BenchError(f"make could not be started for {what}: {e.strerror}") from None
    if capture:
        log.write(r.stdout)
        log.flush()
    if r.returncode != 0:
        with open(log.name, errors="replace") as fh:
            fh.seek(start)
            lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.search(r"\berror\b|\*\*\*", ln, re.I) and not ln.startswith("make")]
        tail = (errors or lines)[-LOG_TAIL_LINES:]
        raise BenchError(f"{what} failed in {tree} (make {' '.join(args)}, exit {r.returncode}): "
                         f"{' | '.join(tail) or 'no output'}; the whole log is {log.name}")
    return r.stdout or ""


def configure(tree: Path, arch: str, fragment: Path | None, log, progress=None) -> bool:
    """Make the tree's .config for the guest: allnoconfig, kperfdiff's fragments, the user's, then
    olddefconfig. Returns True when the tree already held this configuration (only olddefconfig
    runs, for the commit's own Kconfig changes)."""
    frags = guest_fragments(arch) + ([fragment] if fragment else [])
    h = hashlib.sha256(arch.encode())
    for f in frags:
        h.update(f.read_bytes())
    key = h.hexdigest()
    stamp = tree / STAMP
    same = (tree / ".config").is_file() and stamp.is_file() and stamp.read_text().strip() == key
    if not same:
        stamp.unlink(missing_ok=True)
        _make(tree, arch, ["allnoconfig"], log, "allnoconfig")
        env = dict(os.environ, ARCH=KARCH[arch]["ARCH"], LC_ALL="C")
        argv = ["sh", str(tree / "scripts/kconfig/merge_config.sh"), "-m", "-O", str(tree), str(tree / ".config"),
                *map(str, frags)]
        log.write(f"$ {' '.join(argv)}\n")
        r = subprocess.run(argv, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", env=env)
        log.write(r.stdout)
        if r.returncode != 0:
            raise BenchError(f"merging the configuration fragments failed in {tree} (exit {r.returncode}); "
                             f"the whole log is {log.name}")
    _make(tree, arch, ["olddefconfig"], log, "make olddefconfig")
    lost = dropped((tree / ".config").read_text(), merged_wishes(frags))
    if lost and progress:
        progress(f"the kernel's configuration lacks {len(lost)} option(s) the fragments ask for: {', '.join(lost)}")
    stamp.write_text(key + "\n")
    return same


def build_kernel(tree: Path, arch: str, *, fragment: Path | None = None, jobs: int | None = None,
                 progress=None, out: Path | None = None) -> BuiltKernel:
    """Configure and build the kernel in ``tree`` for the QEMU guest of ``arch`` (x86_64 or arm64),
    in place. With ``out``, the image, vmlinux, System.map and .config are copied there and the
    result names the copies. Errors are one sentence (BenchError, InputError)."""
    arch = ARCH_ALIASES.get(arch, arch)
    if arch not in KARCH:
        raise UsageError(f"kperfdiff builds kernels for x86_64 and arm64 guests, not {arch!r}")
    tree = check_tree(tree)
    if fragment is not None:
        fragment = Path(fragment).expanduser()
        if not fragment.is_file():
            raise InputError(f"the configuration fragment {fragment} does not exist")
        if not read_fragment(fragment.read_text()):
            raise InputError(f"the configuration fragment {fragment} sets no CONFIG_ option "
                             f"(lines such as CONFIG_FOO=y or '# CONFIG_FOO is not set')")
        fragment = fragment.resolve()
    check_tools(arch)
    jobs = jobs or os.cpu_count() or 1
    cfg = KARCH[arch]
    t0 = time.monotonic()
    with open(tree / LOG, "w") as log:
        incremental = (tree / cfg["image"]).is_file()
        configure(tree, arch, fragment, log, progress)
        if progress:
            progress(f"building {arch} kernel in {tree} ({'incremental' if incremental else 'full'} build, "
                     f"{jobs} jobs; log: {tree / LOG})")
        _make(tree, arch, [f"-j{jobs}", cfg["target"]], log, f"the {arch} kernel build")
        release = _make(tree, arch, ["-s", "kernelrelease"], log, "make kernelrelease",
                        capture=True).strip().splitlines()
    seconds = time.monotonic() - t0
    files = {"image": tree / cfg["image"], "vmlinux": tree / "vmlinux", "system_map": tree / "System.map",
             "config": tree / ".config"}
    for name, p in files.items():
        if not p.is_file():
            raise BenchError(f"the {arch} kernel build in {tree} left no {p.relative_to(tree)}; "
                             f"the whole log is {tree / LOG}")
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        for name, p in files.items():
            dest = out / p.name
            shutil.copyfile(p, dest)
            files[name] = dest
    built = BuiltKernel(arch=arch, release=release[-1] if release else "", seconds=seconds,
                        image_bytes=files["image"].stat().st_size, incremental=incremental, **files)
    if progress:
        progress(f"built {arch} kernel {built.release} in {seconds:.0f} s "
                 f"({'incremental' if incremental else 'full'}): {files['image'].name} "
                 f"{built.image_bytes / 1e6:.1f} MB")
    return built
