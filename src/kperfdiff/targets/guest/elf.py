"""ELF facts for the targets: machine, interpreter, NEEDED libraries, and a section's bytes.

Enough to resolve a dynamically linked program's shared libraries for
another architecture (no readelf of that architecture needed) and to read a
kernel module's ``.modinfo`` (its ``depends=``), for modules stored plain or
compressed (``.ko.xz``, ``.ko.zst``, ``.ko.gz``). The ELF is parsed by the
native core (``kperfdiff.native.elf_info``), kperfdiff's one ELF reader.
"""
from __future__ import annotations

import gzip
import lzma
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kperfdiff.core.errors import InputError
from kperfdiff.core.nativecore import core


@dataclass
class Elf:
    machine: str
    bits: int
    interp: str | None = None
    needed: list[str] = field(default_factory=list)
    sections: dict[str, bytes] = field(default_factory=dict)


def decompress_module(path: Path) -> bytes:
    """The bytes of a kernel module, whatever its compression."""
    data = path.read_bytes()
    name = path.name
    try:
        if name.endswith(".xz"):
            return lzma.decompress(data)
        if name.endswith(".gz"):
            return gzip.decompress(data)
        if name.endswith(".zst"):
            if shutil.which("zstd") is None:
                raise InputError(f"{path} is zstd-compressed and the zstd program is not installed "
                                 f"(Debian package zstd)")
            r = subprocess.run(["zstd", "-dc", str(path)], capture_output=True)
            if r.returncode != 0:
                raise InputError(f"{path} could not be decompressed with zstd")
            return r.stdout
    except (lzma.LZMAError, OSError, EOFError) as e:
        raise InputError(f"{path} could not be decompressed: {e}") from None
    return data


def _info(data: bytes, want_sections: tuple[str, ...]) -> Elf:
    """The Elf of ``data``; ValueError (a short phrase) when it is not ELF or is damaged."""
    d = core().elf_info(bytes(data), list(want_sections))
    return Elf(machine=d["machine"], bits=d["bits"], interp=d["interp"], needed=d["needed"],
               sections=d["sections"])


def _unreadable(e: ValueError, path: Path | None = None) -> InputError:
    what = "not an ELF file" if str(e) == "not an ELF file" else f"not a readable ELF file ({e})"
    return InputError(f"{path} is {what}" if path else what)


def parse(data: bytes, want_sections: tuple[str, ...] = ()) -> Elf:
    try:
        return _info(data, want_sections)
    except ValueError as e:
        raise _unreadable(e) from None


def read(path: Path, want_sections: tuple[str, ...] = ()) -> Elf:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return _info(data, want_sections)
    except ValueError as e:
        raise _unreadable(e, path) from None


def modinfo(data: bytes) -> dict[str, str]:
    """A kernel module's .modinfo as a dict (name, depends, vermagic, ...)."""
    try:
        sec = _info(data, (".modinfo",)).sections.get(".modinfo", b"")
    except ValueError:
        return {}
    out: dict[str, str] = {}
    for item in sec.split(b"\0"):
        k, eq, v = item.decode(errors="replace").partition("=")
        if eq and k not in out:
            out[k] = v
    return out
