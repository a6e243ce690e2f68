"""What the sub-commands that read or write share: opening the store, the command line a run
records, and writing an output file. (The argparse flavour and argument types are in parsing.)"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from kperfdiff.core.errors import InputError

if TYPE_CHECKING:
    from kperfdiff.store import Store


def open_store(args, create: bool = True) -> Store:
    """The store of --store (or $KPERFDIFF_STORE, or the default file); commands that only read pass
    create=False. Each command opens it once, here."""
    from kperfdiff.store import Store   # here: a command that needs no store (diff of files) starts without it
    return Store.open(getattr(args, "store", None), create=create)


def command_line() -> str:
    """This command line as a run records it, with any PostgreSQL password masked."""
    from kperfdiff.store.backend import mask
    return mask(shlex.join(["kperfdiff", *sys.argv[1:]]))


# Whether the command run last said (by :func:`ends_at_once`) that it leaves nothing to tear down.
ENDS_AT_ONCE = False


def ends_at_once() -> None:
    """Called by a command that, once it returns, holds nothing that needs tearing down: no store, no
    temporary files, no thread of its own, every output file closed. The console script
    (:func:`kperfdiff.commands.cli`) then ends the process as soon as stdout and stderr are flushed,
    rather than have the interpreter collect and free every object the command made, one by one
    (10-25 ms of CPU after a diff of two files of a million samples)."""
    global ENDS_AT_ONCE
    ENDS_AT_ONCE = True


STDOUT = "-"        # -o - : standard output


def write_output(output: str | None, data: str | bytes) -> None:
    """Write a command's output: to standard output when ``output`` is None or -, else to that
    file whole (write_file: nothing is left behind on error)."""
    if output is None or output == STDOUT:
        if isinstance(data, bytes):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(data)
        return
    write_file(output, data)


def write_file(path: str | Path, data: str | bytes, *, make_folder: bool = False) -> Path:
    """Write an output file whole (through a temporary beside it); its folder is made only when
    ``make_folder`` (a report's side folder of plots), else a missing folder is an error. A path
    that is there but is no regular file (/dev/stdout, /dev/null, a FIFO) is written into: replacing
    it would put a regular file in its place (as root, in /dev)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    try:
        if path.exists() and not path.is_file():
            path.write_bytes(raw)
            return path
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(raw)
        tmp.replace(path)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror}") from None
    return path
