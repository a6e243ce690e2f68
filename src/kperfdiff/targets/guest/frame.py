"""The framed console transfer: a results folder crossing a serial console as text.

A guest without a virtio disk (and a LAVA device, whose console is the only way back
that needs nothing of the lab) prints its results folder as a gzip'd tar, base64, between
two marker lines::

    KPD-TAR-BEGIN <bytes> <sha256 of those bytes, or ->
    H4sIAAAAAAAAA+3...        (base64, any line length)
    KPD-TAR-END

:data:`FRAME_SH` is the POSIX shell function that prints it (busybox and coreutils
alike); :func:`decode` finds the last frame in the console lines and checks it
(only base64 inside, the byte count, the SHA-256), so a truncated or garbled console
becomes one sentence, never a half-read folder; :func:`unpack` writes it into a folder
without letting any member out of it. A bare ``KPD-TAR-BEGIN`` (no count, no sum: the
first version of the frame) is still read.
"""
from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import re
import tarfile
import zlib
from pathlib import Path
from typing import Iterable

from kperfdiff.core.errors import InputError

BEGIN = "KPD-TAR-BEGIN"
END = "KPD-TAR-END"
MAX_FRAME_BYTES = 1 << 31       # 2 GiB: more is not a results folder
_B64_LINE = re.compile(r"[A-Za-z0-9+/=]*")
_HEADER = re.compile(rf"{BEGIN}(?: (\d+) ([0-9a-f]{{64}}|-))?")

# kpd_frame DIR: print DIR as the frame (the tar.gz goes through a temporary file so that its size and
# SHA-256 can head the frame; TMPDIR or /tmp)
FRAME_SH = r"""kpd_frame() {
  kpd_f="${TMPDIR:-/tmp}/kpd-frame.$$.tgz"
  tar -c -C "$1" . | gzip -c > "$kpd_f"
  kpd_n=$(wc -c < "$kpd_f" | tr -d ' ')
  kpd_s=$(sha256sum "$kpd_f" 2>/dev/null | cut -d' ' -f1)
  echo "KPD-TAR-BEGIN $kpd_n ${kpd_s:--}"
  base64 "$kpd_f"
  echo "KPD-TAR-END"
  rm -f "$kpd_f"
}
"""


class FrameError(InputError):
    """A results frame that is missing, cut short or garbled."""


def decode(lines: Iterable[str], where: str) -> bytes:
    """The gzip'd tar of the last complete frame in ``lines`` (console lines, newlines
    stripped or not), checked. ``where`` names the console in errors ("the LAVA job 12's log")."""
    found: bytes | None = None
    inside = False
    header: re.Match | None = None
    chunks: list[str] = []
    size = 0
    start = 0
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith(BEGIN):
            header = _HEADER.fullmatch(line)
            if header is None:
                raise FrameError(f"the results frame in {where} has a malformed first line (line {n}): {line[:80]!r}")
            inside, chunks, size, start = True, [], 0, n
            continue
        if not inside:
            continue
        if line == END:
            found = _check(chunks, header, where, start)
            inside = False
            continue
        if not _B64_LINE.fullmatch(line):
            raise FrameError(f"the results frame in {where} (from line {start}) is broken at line {n} by a line "
                             f"that is not base64 ({line[:60]!r}): the transfer was cut short, or something else "
                             f"wrote to the console during it")
        size += len(line)
        if size > MAX_FRAME_BYTES * 4 // 3 + 4:
            raise FrameError(f"the results frame in {where} is larger than {MAX_FRAME_BYTES >> 20} MiB")
        chunks.append(line)
    if inside:
        raise FrameError(f"{where} ends inside the results frame that starts at line {start} "
                         f"(the transfer was cut short)")
    if found is None:
        raise FrameError(f"{where} holds no results frame ({BEGIN} ... {END}): the job did not get as far "
                         f"as sending its results")
    return found


def _check(chunks: list[str], header: re.Match, where: str, start: int) -> bytes:
    try:
        data = base64.b64decode("".join(chunks), validate=True)
    except (binascii.Error, ValueError):
        raise FrameError(f"the results frame at line {start} of {where} is not valid base64 "
                         f"(a line was lost or cut)") from None
    want_n, want_sum = header.group(1), header.group(2)
    if want_n is not None and int(want_n) != len(data):
        raise FrameError(f"the results frame at line {start} of {where} holds {len(data)} bytes, not the "
                         f"{int(want_n)} it announced (lines were lost)")
    if want_sum and want_sum != "-" and hashlib.sha256(data).hexdigest() != want_sum:
        raise FrameError(f"the results frame at line {start} of {where} does not match its SHA-256 "
                         f"(the console changed some characters)")
    return data


def unpack(data: bytes, out: Path, where: str) -> None:
    """Extract a frame's gzip'd tar into ``out``; members that would leave it, links and devices
    are refused by tarfile's ``data`` filter."""
    try:
        raw = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        raise FrameError(f"the results frame of {where} is not a gzip stream") from None
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tf:
            out.mkdir(parents=True, exist_ok=True)
            if hasattr(tarfile, "data_filter"):
                tf.extractall(out, filter="data")
            else:       # Python before 3.11.4: plain files and folders inside ``out`` only
                tf.extractall(out, members=[m for m in tf.getmembers() if (m.isfile() or m.isdir())
                                            and not m.name.startswith("/") and ".." not in Path(m.name).parts])
    except (tarfile.TarError, EOFError) as e:
        raise FrameError(f"the results frame of {where} is not a readable tar archive ({e})") from None
