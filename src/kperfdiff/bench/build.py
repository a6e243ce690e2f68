"""Compile the C benchmark workers, for this machine or cross for aarch64.

Binaries go to a cache keyed by a hash of the sources, flags and compiler,
so a second build is free and a changed source is rebuilt:
``$KPERFDIFF_CACHE`` or ``$XDG_CACHE_HOME/kperfdiff`` (``~/.cache/kperfdiff``)
``/bin/<arch>/<hash>/kpd-<family>``. Cross builds are static, so they run on
a target that has a shell and little else.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

from kperfdiff.core.errors import BenchError
from kperfdiff.bench.catalogue import FAMILIES_DIR, Family, families

HEADER = FAMILIES_DIR / "kpd.h"
HELLO = FAMILIES_DIR / "hello.c"
RUNNER = FAMILIES_DIR / "kpd-run.c"     # the one copy runner, here and on every target
CFLAGS = ("-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-std=gnu11")
COMPILERS = {"x86_64": "x86_64-linux-gnu-gcc", "aarch64": "aarch64-linux-gnu-gcc"}


def cache_dir() -> Path:
    if os.environ.get("KPERFDIFF_CACHE"):
        return Path(os.environ["KPERFDIFF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kperfdiff"


def host_arch() -> str:
    return os.uname().machine


def compiler_for(arch: str) -> str:
    """The C compiler for an architecture: the host cc natively, else a cross gcc."""
    if arch in ("host", host_arch()):
        cc = os.environ.get("CC", "cc")
    else:
        cc = COMPILERS.get(arch)
        if cc is None:
            raise BenchError(f"no cross compiler known for architecture {arch!r} (known: {', '.join(COMPILERS)})")
    if shutil.which(cc) is None:
        raise BenchError(f"the C compiler {cc} is not installed; run `make setup` (Debian: "
                         f"{'gcc' if arch in ('host', host_arch()) else 'gcc-aarch64-linux-gnu'})")
    return cc


def _digest(paths: list[Path], flags: list[str], cc: str) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    h.update("\0".join(flags).encode())
    try:
        h.update(subprocess.run([cc, "--version"], capture_output=True, timeout=30).stdout)
    except (OSError, subprocess.TimeoutExpired):
        h.update(cc.encode())
    return h.hexdigest()[:16]


def _compile(cc: str, source: Path, out: Path, flags: list[str]) -> Path:
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", dir=out.parent)
    os.close(fd)
    cmd = [cc, *CFLAGS, f"-I{FAMILIES_DIR}", "-o", tmp, str(source), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        os.unlink(tmp)
        first = (proc.stderr.strip().splitlines() or ["(no message)"])[0]
        raise BenchError(f"compiling {source.name} with {cc} failed: {first}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    return out


def build_program(source: Path, name: str, arch: str = "host", *, static: bool = False,
                  flags: tuple[str, ...] = (), deps: tuple[Path, ...] = ()) -> Path:
    """Compile one C program into the cache and return the binary's path.

    The cache key covers the source, ``deps`` (headers), the flags and the
    compiler's identity. Cross builds (``arch`` not this machine's) are
    always static, so they run on a target with little more than a shell.
    """
    cc = compiler_for(arch)
    cross = arch not in ("host", host_arch())
    words = list(flags)
    if cross or static:
        words.append("-static")
    key = _digest([source, *deps], words, cc)
    out = cache_dir() / "bin" / (arch if cross else host_arch()) / key / name
    return _compile(cc, source, out, words)


def build_family(name: str, arch: str = "host", *, static: bool = False) -> Path:
    """Build one family's worker and return the path of the binary."""
    fams = families()
    if name not in fams:
        raise BenchError(f"no benchmark family {name!r}")
    fam: Family = fams[name]
    return build_program(fam.source, f"kpd-{name}", arch, static=static or fam.static,
                         flags=fam.cflags + fam.ldflags, deps=(HEADER,))


@lru_cache(maxsize=None)
def build_runner(arch: str = "host") -> Path:
    """kpd-run, static (a target has little more than a shell), cached by content (and, in one
    process, by architecture: every repetition runs it)."""
    return build_program(RUNNER, "kpd-run", arch, static=True)


def build_hello(arch: str = "host") -> Path:
    """The tiny static program that proc.exec and proc.shell start."""
    return build_program(HELLO, "kpd-hello", arch, static=True)


def build_all(names: list[str] | None = None, arch: str = "host", *, static: bool = False) -> dict[str, Path]:
    """Build the named families (default all) and the hello program."""
    out = {n: build_family(n, arch, static=static) for n in (names or sorted(families()))}
    if HELLO.exists():
        out["hello"] = build_hello(arch)
    return out
