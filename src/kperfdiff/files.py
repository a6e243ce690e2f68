"""Files a user names: one check before any of them is read, and one TOML loader.

Every reader of user-named input goes through :func:`check_input_file`, so a FIFO,
a socket or a device (/dev/zero) is refused before it can block or never end.
"""
from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from .errors import InputError


def check_input_file(path: Path, what: str = "profile") -> int:
    """A file kperfdiff reads must be a regular file: a FIFO would block and a device (/dev/zero)
    never end. Returns its size."""
    try:
        st = os.stat(path)
    except ValueError:
        raise InputError(f"{str(path)[:80]!r} has a NUL character in it; it names no file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path} is a directory, not a {what}; name the file inside it")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise InputError(f"{path} is {kind}, not a {what} file; kperfdiff reads regular files only "
                         f"(save the data to a file first)")
    return st.st_size


def read_toml(path: str | Path, what: str, error: type[InputError] = InputError) -> dict:
    """The one TOML loader: a user's (or the shipped) TOML file as a dict, every problem one
    sentence in one style naming ``what`` the file is and its path."""
    path = Path(path)
    if os.path.lexists(path):
        try:
            check_input_file(path, f"{what} file")
        except InputError as e:
            raise error(str(e)) from None
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error(f"the {what} {path} does not exist") from None
    except OSError as e:
        raise error(f"cannot read the {what} {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise error(f"the {what} {path} is not UTF-8 text") from None
    if not text.strip():
        raise error(f"the {what} {path} is empty")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"the {what} {path} is not valid TOML: {e}") from None
