"""Reading a LAVA job log: what the device printed, and why LAVA failed the job.

A LAVA log is YAML, one record a line, as the dispatcher writes it (``lava-run`` prints
``{"dt": ..., "lvl": ..., "msg": ...}`` lines; the server's ``/logs/`` keeps them as a list,
each line starting with ``- ``). ``lvl`` is ``target`` for a line of the device's console,
``results`` for a test result (a mapping), ``error`` for an error, and so on. Console lines
are read with one regular expression (they are most of a log: the results frame), anything
else with the YAML loader, one line at a time; a line that is neither is counted, never
fatal: the frame's own checks (:mod:`kperfdiff.targets.guest.frame`) decide whether the
results came back whole.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from kperfdiff.core.errors import InputError
from kperfdiff.targets.guest.frame import decode, unpack

MAX_LINE = 10 ** 7           # the dispatcher cuts its own lines at 10**6 characters
_TARGET = re.compile(r'(?:- )?\{"dt": "[^"\\]*", "lvl": "(target|feedback)", "msg": "((?:[^"\\]|\\.)*)"'
                     r'(?:, "ns": "[^"\\]*")?\}\s*')


@dataclass
class JobLog:
    """What kperfdiff needs of one job's log."""

    console: list[str] = field(default_factory=list)    # the device's console lines (lvl target)
    errors: list[str] = field(default_factory=list)     # error records and failed LAVA actions
    cases: list[dict] = field(default_factory=list)     # the kperfdiff test cases LAVA recorded
    unreadable: int = 0                                  # lines that were not a log record

    def reason(self) -> str:
        """LAVA's own account of a failure, last error first."""
        return self.errors[-1] if self.errors else ""


def records(path: Path) -> Iterator[tuple[str, object]]:
    """(lvl, msg) of each record of a log file; an unreadable line gives ("?", the line)."""
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            m = _TARGET.fullmatch(line)
            if m:
                msg = m.group(2)
                yield m.group(1), (msg if "\\" not in msg else _unescape(msg))
                continue
            yield _record(line)


def _unescape(msg: str) -> str:
    import yaml     # heavy, and only a LAVA job's log needs it
    try:
        v = yaml.load(f'"{msg}"', Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return msg
    return v if isinstance(v, str) else msg


def _record(line: str) -> tuple[str, object]:
    import yaml
    text = line[2:] if line.startswith("- ") else line
    try:
        rec = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (yaml.YAMLError, RecursionError, ValueError):
        return "?", line
    if not isinstance(rec, dict) or "lvl" not in rec:
        return "?", line
    return str(rec.get("lvl")), rec.get("msg")


def read(path: Path) -> JobLog:
    """Read one job log file."""
    log = JobLog()
    for lvl, msg in records(path):
        if lvl == "target":
            log.console.append(msg if isinstance(msg, str) else str(msg))
        elif lvl == "error" and msg:
            log.errors.append(_one_line(msg))
        elif lvl == "results" and isinstance(msg, dict):
            if msg.get("definition") == "lava" and msg.get("result") == "fail" and msg.get("error_msg"):
                log.errors.append(_one_line(msg["error_msg"]))
            elif str(msg.get("definition", "")).endswith("kperfdiff"):
                log.cases.append(msg)
        elif lvl == "?":
            log.unreadable += 1
    return log


def _one_line(msg) -> str:
    text = " ".join(str(msg).split())
    return text if len(text) <= 300 else text[:297] + "..."


def results_folder(log: JobLog, out: Path, where: str) -> Path:
    """Decode the results frame on the job's console into ``out`` (the folder job_script leaves on a
    target: facts/, i0/, i1/, ..., kallsyms); a missing or damaged frame is a FrameError."""
    unpack(decode(log.console, where), out, where)
    return out


def read_results(path: Path, out: Path, where: str) -> JobLog:
    """Read a job log and decode its results into ``out``; every problem is one sentence."""
    try:
        log = read(path)
    except OSError as e:
        raise InputError(f"cannot read {where}: {e.strerror}") from None
    results_folder(log, out, where)
    return log
