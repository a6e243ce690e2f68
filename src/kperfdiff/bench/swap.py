"""Temporary swap for benchmarks that page out anonymous memory (pageout.anon).

``temporary_swap(size_mb)`` is a context manager: when no swap is active it
sets up a zram device (the study's set-up: compressed RAM swap) or, failing
that, a swap file on a disk file system, and removes it on exit - normal
exit, exception or KeyboardInterrupt alike. When swap is already active it
does nothing. It needs root; it raises ``BenchError`` with one sentence when
it cannot do its job.

zram: a new device is always hot-added through /sys/class/zram-control (so
a zram device someone else set up is never touched), sized, formatted with
mkswap and enabled with swapon; on exit swapoff and hot_remove. When the
kernel has zram as a module that is not loaded, ``modprobe zram`` is tried.
"""

from __future__ import annotations

import contextlib
import sys
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

from kperfdiff.core.errors import BenchError

PROC_SWAPS = Path("/proc/swaps")
ZRAM_CONTROL = Path("/sys/class/zram-control")
# File systems a swap file cannot live on (or should not: RAM-backed).
_NO_SWAPFILE_FS = {"tmpfs", "ramfs", "overlay", "squashfs", "nfs", "nfs4", "fuse", "9p", "virtiofs"}


def active_swap() -> list[str]:
    """The swap areas in use (file or device names from /proc/swaps)."""
    try:
        lines = PROC_SWAPS.read_text().splitlines()
    except OSError:
        return []
    # Names with spaces are written with \040 in /proc/swaps.
    return [ln.split()[0].replace("\\040", " ") for ln in lines[1:] if ln.strip()]


def _run(argv: list[str]) -> None:
    """Run a command; raise OSError with its message when it fails."""
    exe = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/sbin:/sbin:/usr/bin:/bin")
    if exe is None:
        raise OSError(f"{argv[0]} is not installed")
    proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        raise OSError(f"{' '.join(argv)} failed: {msg[-1] if msg else proc.returncode}")


def _swapoff(name: str) -> None:
    """swapoff, retried briefly: it can fail with EBUSY while pages move back."""
    last: OSError | None = None
    for _ in range(5):
        try:
            _run(["swapoff", name])
            return
        except OSError as exc:
            last = exc
            if name not in active_swap():
                return
            time.sleep(0.2)
    if last is not None:
        raise last


def _mount_fstype(path: Path) -> str:
    """File system type of the mount holding path (longest mount-point prefix)."""
    best, fstype = "", ""
    real = str(path.resolve())
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return ""
    for ln in mounts:
        parts = ln.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype


# ----------------------------------------------------------------- zram


def _zram_setup(size_mb: int) -> tuple[str, int]:
    """Hot-add, size, mkswap and swapon a zram device: (device, number)."""
    if not ZRAM_CONTROL.is_dir():
        with contextlib.suppress(OSError):
            _run(["modprobe", "zram", "num_devices=0"])
    if not ZRAM_CONTROL.is_dir():
        raise OSError("zram is not available (no /sys/class/zram-control)")
    num = int((ZRAM_CONTROL / "hot_add").read_text().strip())
    dev = f"/dev/zram{num}"
    try:
        sysdir = Path(f"/sys/block/zram{num}")
        (sysdir / "disksize").write_text(f"{size_mb}M")
        for _ in range(50):  # udev/devtmpfs may take a moment
            if os.path.exists(dev):
                break
            time.sleep(0.02)
        if not os.path.exists(dev):
            raise OSError(f"{dev} did not appear")
        _run(["mkswap", dev])
        _run(["swapon", "-p", "100", dev])
    except BaseException:
        _zram_remove(num)
        raise
    return dev, num


def _zram_remove(num: int) -> None:
    sysdir = Path(f"/sys/block/zram{num}")
    with contextlib.suppress(OSError):
        (sysdir / "reset").write_text("1")
    for _ in range(10):
        try:
            (ZRAM_CONTROL / "hot_remove").write_text(str(num))
            return
        except OSError:
            time.sleep(0.1)  # EBUSY while the device is still being released


# ------------------------------------------------------------ swap file


def _swapfile_dirs() -> list[Path]:
    cands = [os.environ.get("KPERFDIFF_SWAPDIR", ""), "/var/tmp", "/var/lib", "/"]
    out: list[Path] = []
    for c in cands:
        if c and Path(c).is_dir() and _mount_fstype(Path(c)) not in _NO_SWAPFILE_FS:
            out.append(Path(c))
    return out


def _swapfile_setup(size_mb: int) -> str:
    errors = []
    for d in _swapfile_dirs():
        fd, path = tempfile.mkstemp(prefix="kperfdiff-swap-", dir=d)
        try:
            os.fchmod(fd, 0o600)
            # Written, not fallocated: some file systems refuse swap files
            # with unwritten extents.
            chunk = b"\0" * (1 << 20)
            for _ in range(size_mb):
                os.write(fd, chunk)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            _run(["mkswap", path])
            _run(["swapon", path])
            return path
        except OSError as exc:
            errors.append(f"{d}: {exc}")
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
    raise OSError("; ".join(errors) or "no directory on a disk file system")


# ---------------------------------------------------------------- API


@contextlib.contextmanager
def temporary_swap(size_mb: int = 256) -> Iterator[str | None]:
    """Make sure swap is active inside the block; undo what was set up.

    Yields the name of the swap area created, or None when swap was already
    active (nothing is created or removed then).
    """
    if size_mb < 1:
        raise BenchError(f"temporary swap size must be at least 1 MB, not {size_mb}.")
    if active_swap():
        yield None
        return
    if os.geteuid() != 0:
        raise BenchError("No swap is active and setting up a temporary one needs root; "
                         "run as root or enable swap first.")
    zram_num: int | None = None
    swapfile: str | None = None
    try:
        name, zram_num = _zram_setup(size_mb)
    except OSError as zerr:
        try:
            swapfile = name = _swapfile_setup(size_mb)
        except OSError as ferr:
            raise BenchError(f"Cannot set up temporary swap: zram failed ({zerr}) "
                             f"and a swap file failed ({ferr}).") from ferr
    try:
        yield name
    finally:
        problems = []
        try:
            _swapoff(name)
        except OSError as exc:
            problems.append(str(exc))
        if zram_num is not None:
            _zram_remove(zram_num)
        if swapfile is not None:
            with contextlib.suppress(OSError):
                os.unlink(swapfile)
        if problems:
            # Do not hide an exception already propagating from the body.
            if sys.exc_info()[0] is None:
                raise BenchError(f"Could not remove the temporary swap {name}: {problems[0]}.")
