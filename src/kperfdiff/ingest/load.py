"""Loading profiles: name a file's format by its first bytes, read it with the one reader of
that format, and turn store references (RUN[:benchmark[@CORES]]) into one profile per
repetition, its parallel copies merged."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..files import check_input_file
from . import perfdata, text
from .profile import Profile, merge

HEAD_BYTES = 65536            # what sniffing reads, extended to the end of a longer first line
MAX_FIRST_LINE = 16 << 20     # ... up to this


def sniff(path: Path) -> str:
    """Name the format of a profile file: perf.data, perf-script, perf-report or folded."""
    size = check_input_file(path)
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES) if size else b""
            # a long first line (a folded stack can be 100 KiB) is sniffed whole
            while len(head) < size and b"\n" not in head and len(head) < MAX_FIRST_LINE:
                more = f.read(HEAD_BYTES)
                if not more:
                    break
                head += more
            if b"\n" in head[HEAD_BYTES:]:
                head = head[:head.index(b"\n", HEAD_BYTES) + 1]
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if not head:
        raise InputError(f"{path} is empty; it holds no profile")
    if head.startswith(b"PERFILE2") or head.startswith(b"2ELIFREP"):
        return "perf.data"
    if head.startswith(b"PERFFILE"):
        raise InputError(f"{path} is a perf.data in the old version-1 format; convert it with a newer perf (perf inject)")
    if b"\0" in head:
        raise InputError(f"{path} is not a profile kperfdiff can read (perf.data, perf script, perf report --stdio or folded stacks)")
    return text.sniff_text(path, head.decode("utf-8", "replace"))


def load(path: str | Path, *, kallsyms: str | Path | None = None, symfs: list[str] | None = None,
         event: str | None = None, label: str = "") -> Profile:
    """Read one profile file of any supported format (one event of it)."""
    path = Path(path)
    fmt = sniff(path)
    if fmt == "perf.data":
        prof = perfdata.load(path, kallsyms=kallsyms, symfs=symfs, event=event)
    else:
        prof = text.load(path, fmt, event=event)
    if label:
        prof.label = label
    elif not prof.label:
        prof.label = prof.arch or path.stem
    return prof
