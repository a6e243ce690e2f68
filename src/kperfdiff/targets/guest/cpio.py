"""Write initramfs pieces in the kernel's "newc" cpio format.

The kernel unpacks concatenated archives one after the other, so an
initramfs is assembled from cached pieces (busybox and init, modules,
workers, perf, the job) by concatenating their files.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


MAGIC = b"070701"
HEADER_BYTES = 110
TRAILER = b"TRAILER!!!\0"


def newc_header(fields: list[int]) -> bytes:
    """A newc header: the magic and its 13 fields (ino, mode, uid, gid, nlink, mtime, filesize,
    devmajor, devminor, rdevmajor, rdevminor, namesize, check) in 8 hex digits each."""
    return MAGIC + b"".join(f"{v:08x}".encode() for v in fields)


class CpioWriter:
    def __init__(self, fh):
        self.fh = fh
        self.ino = 1000
        self.seen: set[str] = set()

    def _header(self, name: str, mode: int, size: int, nlink: int = 1, rdev: tuple[int, int] = (0, 0)) -> None:
        self.ino += 1
        name_b = name.encode() + b"\0"
        hdr = newc_header([self.ino, mode, 0, 0, nlink, 0, size, 0, 0, *rdev, len(name_b), 0])
        self.fh.write(hdr + name_b)
        self._pad(len(hdr) + len(name_b))

    def _pad(self, n: int) -> None:
        if n % 4:
            self.fh.write(b"\0" * (4 - n % 4))

    def _parents(self, name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d and d not in self.seen:
                self.dir(d)

    def dir(self, name: str, mode: int = 0o755) -> None:
        name = name.strip("/")
        if name in self.seen:
            return
        self._parents(name)
        self.seen.add(name)
        self._header(name, stat.S_IFDIR | mode, 0, 2)

    def data(self, name: str, data: bytes, mode: int = 0o644) -> None:
        name = name.strip("/")
        self._parents(name)
        self.seen.add(name)
        self._header(name, stat.S_IFREG | mode, len(data))
        self.fh.write(data)
        self._pad(len(data))

    def file(self, name: str, src: Path, mode: int | None = None) -> None:
        real = Path(os.path.realpath(src))
        m = mode if mode is not None else (0o755 if os.access(real, os.X_OK) else 0o644)
        self.data(name, real.read_bytes(), m)

    def symlink(self, name: str, target: str) -> None:
        name = name.strip("/")
        self._parents(name)
        self.seen.add(name)
        t = target.encode()
        self._header(name, stat.S_IFLNK | 0o777, len(t))
        self.fh.write(t)
        self._pad(len(t))

    def node(self, name: str, mode: int, major: int, minor: int) -> None:
        name = name.strip("/")
        self._parents(name)
        self.seen.add(name)
        self._header(name, mode, 0, rdev=(major, minor))

    def close(self) -> None:
        self._header("TRAILER!!!", 0, 0)


def _padded(n: int) -> int:
    return (n + 3) & ~3


def merge(pieces: list[Path], fh) -> None:
    """Write the pieces as ONE newc archive (one trailer, inode numbers renumbered): the kernel reads
    concatenated archives, but the cpio tool (LAVA adds its overlay to a ramdisk with it) stops at the
    first trailer."""
    ino = 1
    for p in pieces:
        with open(p, "rb") as src:
            while True:
                hdr = src.read(HEADER_BYTES)
                if len(hdr) < HEADER_BYTES or hdr[:6] != MAGIC:
                    raise ValueError(f"{p} is not a newc archive")
                fields = [int(hdr[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
                name = src.read(_padded(HEADER_BYTES + fields[11]) - HEADER_BYTES)
                if name[:fields[11]] == TRAILER:
                    break
                fields[0] = ino
                ino += 1
                fh.write(newc_header(fields) + name)
                left = _padded(fields[6])
                while left:
                    chunk = src.read(min(left, 1 << 20))
                    if not chunk:
                        raise ValueError(f"{p} ends inside a file")
                    fh.write(chunk)
                    left -= len(chunk)
    w = CpioWriter(fh)
    w.close()
