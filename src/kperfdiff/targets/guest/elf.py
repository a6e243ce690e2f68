"""A small ELF reader: machine, interpreter, NEEDED libraries, and a section's bytes.

Enough to resolve a dynamically linked program's shared libraries for
another architecture (no readelf of that architecture needed) and to read a
kernel module's ``.modinfo`` (its ``depends=``), for modules stored plain or
compressed (``.ko.xz``, ``.ko.zst``, ``.ko.gz``).
"""
from __future__ import annotations

import gzip
import lzma
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError

MACHINES = {3: "i386", 40: "arm", 62: "x86_64", 183: "aarch64", 243: "riscv64", 21: "ppc64", 22: "s390"}
DT_NEEDED, DT_STRTAB, DT_STRSZ = 1, 5, 10
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3


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


def parse(data: bytes, want_sections: tuple[str, ...] = ()) -> Elf:
    if data[:4] != b"\x7fELF":
        raise InputError("not an ELF file")
    bits = 64 if data[4] == 2 else 32
    end = "<" if data[5] == 1 else ">"
    if bits == 64:
        (e_type, e_machine, _v, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum,
         shstrndx) = struct.unpack_from(end + "HHIQQQIHHHHHH", data, 16)
    else:
        (e_type, e_machine, _v, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize, shnum,
         shstrndx) = struct.unpack_from(end + "HHIIIIIHHHHHH", data, 16)
    elf = Elf(machine=MACHINES.get(e_machine, str(e_machine)), bits=bits)
    # program headers: interpreter and dynamic segment
    loads: list[tuple[int, int, int]] = []  # vaddr, offset, filesz
    dyn = None
    for i in range(phnum):
        off = phoff + i * phentsize
        if bits == 64:
            p_type, _f, p_off, p_vaddr, _pa, p_filesz, _ms, _al = struct.unpack_from(end + "IIQQQQQQ", data, off)
        else:
            p_type, p_off, p_vaddr, _pa, p_filesz, _ms, _f, _al = struct.unpack_from(end + "IIIIIIII", data, off)
        if p_type == PT_INTERP:
            elf.interp = data[p_off:p_off + p_filesz].split(b"\0")[0].decode()
        elif p_type == PT_LOAD:
            loads.append((p_vaddr, p_off, p_filesz))
        elif p_type == PT_DYNAMIC:
            dyn = (p_off, p_filesz)

    def v2o(vaddr: int) -> int | None:
        for va, off, sz in loads:
            if va <= vaddr < va + sz:
                return off + (vaddr - va)
        return None

    if dyn:
        entsize = 16 if bits == 64 else 8
        fmt = end + ("qQ" if bits == 64 else "iI")
        needed_offs, strtab = [], None
        for j in range(dyn[1] // entsize):
            tag, val = struct.unpack_from(fmt, data, dyn[0] + j * entsize)
            if tag == 0:
                break
            if tag == DT_NEEDED:
                needed_offs.append(val)
            elif tag == DT_STRTAB:
                strtab = v2o(val)
        if strtab is not None:
            for o in needed_offs:
                s = data[strtab + o:data.index(b"\0", strtab + o)]
                elf.needed.append(s.decode())
    if want_sections and shoff and shnum:
        heads = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if bits == 64:
                name, _t, _fl, _a, s_off, s_size = struct.unpack_from(end + "IIQQQQ", data, off)
            else:
                name, _t, _fl, _a, s_off, s_size = struct.unpack_from(end + "IIIIII", data, off)
            heads.append((name, s_off, s_size))
        if shstrndx < len(heads):
            strs = heads[shstrndx]
            for name, s_off, s_size in heads:
                n = data[strs[1] + name:data.index(b"\0", strs[1] + name)].decode(errors="replace")
                if n in want_sections:
                    elf.sections[n] = data[s_off:s_off + s_size]
    return elf


def read(path: Path, want_sections: tuple[str, ...] = ()) -> Elf:
    try:
        return parse(path.read_bytes(), want_sections)
    except (struct.error, ValueError, IndexError) as e:
        raise InputError(f"{path} is not a readable ELF file ({e})") from None


def modinfo(data: bytes) -> dict[str, str]:
    """A kernel module's .modinfo as a dict (name, depends, vermagic, ...)."""
    try:
        sec = parse(data, (".modinfo",)).sections.get(".modinfo", b"")
    except (struct.error, ValueError, IndexError):
        return {}
    out: dict[str, str] = {}
    for item in sec.split(b"\0"):
        k, eq, v = item.decode(errors="replace").partition("=")
        if eq and k not in out:
            out[k] = v
    return out
