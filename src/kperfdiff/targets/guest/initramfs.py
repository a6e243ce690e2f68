"""The initramfs of a guest or a LAVA device, assembled from cached newc pieces.

The pieces: static busybox and /init (:data:`INIT`); the kernel modules the job needs with
their dependencies (read from each .ko's .modinfo, compressed modules decompressed here);
the static workers and kpd-run; perf with its libraries and loader. They are concatenated
(the kernel reads a series of newc archives as one) with a last small piece holding the job.

/init mounts proc, sys and devtmpfs and loads the modules. Then, in a QEMU guest
(targets/qemu.py), it runs /kpd/job.sh, writes the results folder as a tar onto a virtio disk
(or, with no virtio_blk, as a frame on the console: :mod:`.frame`) and powers off; on a LAVA
device (/kpd/lava holds the shell prompt; targets/lava/target.py) it starts a shell on the console
for LAVA's test shell, which runs the job and sends the frame itself.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import tempfile
from pathlib import Path

from kperfdiff.bench.build import cache_dir
from kperfdiff.core.errors import BenchError
from kperfdiff.targets.guest import elf
from kperfdiff.targets.guest.cpio import CpioWriter, merge
from kperfdiff.targets.guest.debian import Apt
from kperfdiff.targets.guest.frame import FRAME_SH

WANTED_MODULES = ["virtio_pci", "virtio_blk"]

INIT = r"""#!/bin/busybox sh
@FRAME_SH@/bin/busybox mkdir -p /proc /sys /dev /tmp /var/tmp /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
echo "KPD-INIT $(cut -d' ' -f1 /proc/uptime)"
load_modules() {
  if [ -f "/kpd/$1" ]; then
    while read m; do insmod "/kpd/modules/$m.ko" 2>/dev/null || echo "KPD-WARN insmod $m failed"; done < "/kpd/$1"
  fi
}
# the virtio disk whose serial is $1 (vda when none says)
disk_of() {
  for s in /sys/block/vd*/serial; do [ "$(cat "$s" 2>/dev/null)" = "$1" ] && { s=${s%/serial}; echo "/dev/${s##*/}"; return; }; done
}
# what the job asked for (zram and its compressor; the disk and its file system) is loaded before it
load_modules modules.early
# a deterministic job loads the disk driver after the job: its first reads complete at host-timed moments
[ -f /kpd/modules.late ] || load_modules modules.order
mkdir -p /kpd/out
# a disk-backed directory for the job (pageout.file): the ext4 virtio disk whose serial is kpddisk
if [ -f /kpd/disk.want ]; then
  mkdir -p /kpd/disk
  n=0; d=""
  while [ -z "$d" ] && [ $n -lt 50 ]; do d=$(disk_of kpddisk); [ -n "$d" ] || { sleep 0.1; n=$((n+1)); }; done
  if [ -n "$d" ] && mount -t ext4 "$d" /kpd/disk; then echo "KPD-DISK $d"
  else echo "KPD-WARN the disk for /kpd/disk did not mount"; fi
fi
# a LAVA device: a shell on the console for LAVA's test shell, which runs the job (targets/lava.py)
if [ -f /kpd/lava ]; then
  echo "KPD-LAVA-SHELL $(cut -d' ' -f1 /proc/uptime)"
  export PS1="$(cat /kpd/lava)"
  # /init stays PID 1: the shell is its child, in a session of its own with the console as its terminal
  while true; do setsid cttyhack sh; done
fi
echo "KPD-BEGIN $(cut -d' ' -f1 /proc/uptime)"
sh /kpd/job.sh
rc=$?
echo "KPD-JOB-END $rc $(cut -d' ' -f1 /proc/uptime)"
[ -f /kpd/disk.want ] && umount /kpd/disk 2>/dev/null
[ -f /kpd/modules.late ] && load_modules modules.order
dmesg > /kpd/out/dmesg 2>/dev/null
n=0
while [ ! -b /dev/vda ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n+1)); done
out=$(disk_of kpdout); out=${out:-/dev/vda}
if [ -b "$out" ]; then
  tar -c -f "$out" -C /kpd/out . && sync && echo "KPD-RESULTS disk"
else
  kpd_frame /kpd/out
fi
echo "KPD-END $rc"
poweroff -f
sleep 5
echo "KPD-POWEROFF-FAILED"
""".replace("@FRAME_SH@", FRAME_SH)


def modules_needed(mod_dir: Path | None, wanted: list[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name, file) in load order for the wanted modules and their dependencies; and the names
    found neither as modules nor built in."""
    if mod_dir is None:
        return [], []
    builtin: set[str] = set()
    bfile = mod_dir / "modules.builtin"
    if bfile.exists():
        for ln in bfile.read_text().splitlines():
            builtin.add(Path(ln.strip()).name.split(".ko")[0].replace("-", "_"))
    index: dict[str, Path] = {}
    for p in mod_dir.rglob("*.ko*"):
        if re.search(r"\.ko(\.(xz|zst|gz))?$", p.name):
            index.setdefault(p.name.split(".ko")[0].replace("-", "_"), p)
    order: list[tuple[str, Path]] = []
    missing: list[str] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        name = name.replace("-", "_")
        if name in seen or name in builtin or name in chain:
            return
        if name not in index:
            missing.append(name)
            seen.add(name)
            return
        info = elf.modinfo(elf.decompress_module(index[name]))
        for dep in filter(None, info.get("depends", "").split(",")):
            visit(dep, chain + (name,))
        seen.add(name)
        order.append((name, index[name]))

    for w in wanted:
        visit(w, ())
    return order, missing


def piece(kind: str, key_parts: list, write) -> Path:
    """A cached newc piece, named by ``kind`` and a hash of ``key_parts`` (paths by size and time), written by
    ``write(CpioWriter)`` when missing."""
    h = hashlib.sha256(kind.encode())
    for part in key_parts:
        if isinstance(part, Path):
            st = part.stat()
            h.update(f"{part}:{st.st_size}:{st.st_mtime_ns}".encode())
        else:
            h.update(str(part).encode())
    out = cache_dir() / "qemu" / "initrd" / f"{kind}-{h.hexdigest()[:16]}.cpio"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name, dir=out.parent)
    with os.fdopen(fd, "wb") as fh:
        w = CpioWriter(fh)
        write(w)
        w.close()
    os.replace(tmp, out)
    return out


def busybox_piece(debian_arch: str) -> Path:
    """The base: static busybox, /init (:data:`INIT`) and the folders, for a Debian architecture."""
    apt = Apt(debian_arch)
    tree = apt.fetch("busybox-static")
    bb = tree / "bin/busybox"
    if not bb.exists():
        raise BenchError("the Debian package busybox-static holds no bin/busybox")

    def write(w: CpioWriter):
        for d in ("dev", "proc", "sys", "tmp", "bin", "sbin", "kpd", "kpd/bin", "kpd/out", "root"):
            w.dir(d)
        w.node("dev/console", 0o020600, 5, 1)
        w.node("dev/null", 0o020666, 1, 3)
        w.file("bin/busybox", bb, 0o755)
        w.symlink("bin/sh", "busybox")
        w.data("init", INIT.encode(), 0o755)
    return piece("base", [bb, INIT], write)


def modules_piece(kernel, early: list[str] | None = None) -> tuple[Path | None, list[str], list[str]]:
    """For a kernel (a targets.qemu.Kernel: its ``modules`` folder), the virtio modules (kpd/modules.order: loaded before the job, or after it when deterministic)
    and the ``early`` ones with their dependencies (kpd/modules.early: always before the job, first);
    returns (piece, names, names found neither as modules nor built in)."""
    first, missing = modules_needed(kernel.modules, list(early or []))
    mods, missing_virtio = modules_needed(kernel.modules, WANTED_MODULES)
    late = [(n, p) for n, p in mods if n not in {m for m, _ in first}]
    missing = sorted(set(missing) | set(missing_virtio))
    everything = first + late
    if not everything:
        return None, [], missing

    def write(w: CpioWriter):
        for name, p in everything:
            w.data(f"kpd/modules/{name}.ko", elf.decompress_module(p), 0o644)
        w.data("kpd/modules.order", "".join(n + "\n" for n, _ in late).encode())
        if first:
            w.data("kpd/modules.early", "".join(n + "\n" for n, _ in first).encode())
    return (piece("modules", [p for _, p in everything] + ["early:" + ",".join(n for n, _ in first)], write),
            [n for n, _ in everything], missing)


def files_piece(kind: str, files: dict[str, Path]) -> Path:
    """Executables at the given paths inside the initramfs."""
    def write(w: CpioWriter):
        for name, p in sorted(files.items()):
            w.file(name, p, 0o755)
    return piece(kind, sorted((k, str(v), v.stat().st_size, v.stat().st_mtime_ns) for k, v in files.items()), write)


def guest_pieces(debian_arch: str, kernel, early: list[str], bins: dict[str, Path],
                 perf: dict[str, Path] | None) -> tuple[list[Path], list[str], list[str]]:
    """The cached pieces of a guest's or a LAVA device's initramfs, all but the job: busybox and
    /init, the modules (``early`` ones first, see :func:`modules_piece`), the workers ``bins`` under
    kpd/bin, perf under kpd/perf; with the names of the modules it holds and of those found nowhere."""
    pieces = [busybox_piece(debian_arch)]
    mp, loaded, missing = modules_piece(kernel, early)
    if mp:
        pieces.append(mp)
    if bins:
        pieces.append(files_piece("bin", {f"kpd/bin/{k}": v for k, v in bins.items()}))
    if perf:
        pieces.append(files_piece("perf", {f"kpd/perf/{k}": v for k, v in perf.items()}))
    return pieces, loaded, missing


def assemble(out: Path, pieces: list[Path], job: str | None, extra_files: dict[str, bytes], *,
             single: bool = False) -> Path:
    """Concatenate the pieces and a last one holding /kpd/job.sh (when given) and ``extra_files``
    (path -> bytes) into ``out``. ``single``: one archive, gzip'd (a LAVA ramdisk: it travels over the
    network and LAVA unpacks it with the cpio tool, which stops at the first archive's end)."""
    buf = io.BytesIO()
    w = CpioWriter(buf)
    if job is not None:
        w.data("kpd/job.sh", job.encode(), 0o755)
    for name, data in extra_files.items():
        w.data(name, data, 0o644)
    w.close()
    tmp = out.with_name(out.name + ".tmp")
    if single:
        last = tmp.with_name(tmp.name + ".last")
        last.write_bytes(buf.getvalue())
        try:
            with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as fh:
                merge([*pieces, last], fh)
        finally:
            last.unlink(missing_ok=True)
    else:
        with open(tmp, "wb") as fh:
            for p in pieces:
                with open(p, "rb") as src:
                    shutil.copyfileobj(src, fh, 1 << 20)
            fh.write(buf.getvalue())
    os.replace(tmp, out)
    return out
