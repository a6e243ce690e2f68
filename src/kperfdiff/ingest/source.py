"""Where a profile's bytes come from: a file as it is, standard input (``-``), or a
gzip-compressed file (``perf.data.gz``, ``out.folded.gz``, ``script.txt.gz``, told by its
first bytes, not its name).

The readers need a regular file (the native perf.data reader maps it), so standard input
and compressed files are copied to a temporary file first, which is removed once the
profile is read. What is copied is bounded by :data:`kperfdiff.core.limits.MAX_INPUT_BYTES`
(a gzip bomb, or a runaway pipe, stops with one sentence instead of filling the disk).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kperfdiff.core import limits
from kperfdiff.core.errors import InputError, KperfdiffError
from kperfdiff.core.files import check_input_file

STDIN = "-"
GZIP_MAGIC = b"\x1f\x8b"
CHUNK = 1 << 20


@dataclass(frozen=True)
class Local:
    """A profile input as a regular file: ``path`` to read, ``shown`` to name it by, and
    ``original`` (the file the user named; where its kallsyms and meta files lie)."""
    path: Path
    shown: str
    original: Path | None

    def as_given(self, text: str) -> str:
        """A message about ``path`` naming the input as the user gave it, not its temporary copy."""
        return text.replace(str(self.path), self.shown) if self.path != self.original else text


def _human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.0f} {unit}"
        n /= 1024
    return str(n)


def _copy(src: BinaryIO, dst: BinaryIO, shown: str, limit: int, inflate: bool) -> None:
    """Copy ``src`` to ``dst`` (gunzipping when ``inflate``), refusing more than ``limit`` bytes out."""
    d = zlib.decompressobj(wbits=31) if inflate else None
    written = 0
    while True:
        chunk = src.read(CHUNK)
        if not chunk:
            break
        while chunk:
            if d is None:
                out, chunk = chunk, b""
            else:
                try:
                    # at most what the limit still allows (+1 to tell "over" from "exactly at")
                    out = d.decompress(chunk, limit - written + 1)
                except zlib.error:
                    raise InputError(f"{shown} is not valid gzip data (it is damaged or truncated)") from None
                chunk = d.unconsumed_tail
                if d.eof and d.unused_data:
                    # concatenated gzip members (gzip -c a b > ab.gz): go on with the next one
                    chunk = d.unused_data + chunk
                    d = zlib.decompressobj(wbits=31)
            written += len(out)
            if written > limit:
                what = "decompresses to" if inflate else "is"
                raise InputError(f"{shown} {what} more than {_human(limit)}, the most kperfdiff reads from one "
                                 f"input; give it uncompressed as a file")
            dst.write(out)
    if d is not None and not d.eof:
        raise InputError(f"{shown} is truncated gzip data (its end is missing)")


def is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None


@contextmanager
def local(spec: str | Path, *, limit: int | None = None) -> Iterator[Local]:
    """The input ``spec`` as a regular file for the time of the ``with`` block: the file itself,
    or a temporary copy of standard input (``-``) or of a gzip file's content (see module doc)."""
    limit = limits.MAX_INPUT_BYTES if limit is None else limit
    stdin = str(spec) == STDIN
    if not stdin:
        path = Path(spec)
        check_input_file(path)
        if not is_gzip(path):
            yield Local(path, str(path), path)
            return
    folder = tempfile.mkdtemp(prefix="kperfdiff-input-")
    try:
        if stdin:
            shown, original = "standard input", None
            raw = Path(folder) / "stdin.raw"
            _spool(sys.stdin.buffer, raw, shown, limit, inflate=False)
            name = "stdin"
        else:
            shown, original, raw = str(path), path, path
            name = path.name.removesuffix(".gz") or "input"
        tmp = Path(folder) / name
        if is_gzip(raw):
            with open(raw, "rb") as src:
                _spool(src, tmp, shown, limit, inflate=True)
            if stdin:
                raw.unlink()
        else:
            raw.rename(tmp)
        if tmp.stat().st_size == 0:
            raise InputError(f"{shown} is empty; it holds no profile")
        src = Local(tmp, shown, original)
        try:
            yield src
        except KperfdiffError as e:      # an error about the copy names the input as given
            e.args = tuple(src.as_given(a) if isinstance(a, str) else a for a in e.args)
            raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _spool(src: BinaryIO, dst: Path, shown: str, limit: int, inflate: bool) -> None:
    try:
        with open(dst, "wb") as out:
            _copy(src, out, shown, limit, inflate)
    except OSError as e:
        raise InputError(f"cannot copy {shown} to a temporary file: {e.strerror}") from None
