"""Files a user names: one check before any of them is read, one TOML loader and one YAML loader.

Every reader of user-named input goes through :func:`check_input_file`, so a FIFO,
a socket or a device (/dev/zero) is refused before it can block or never end.
"""
from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from kperfdiff.core.errors import InputError


def check_input_file(path: Path, what: str = "profile") -> int:
    """A file kperfdiff reads must be a regular file: a FIFO would block and a device (/dev/zero)
    never end. Returns its size. ``what`` names the kind of file ("perf.data", "experiment"); the
    refusals say "not a perf.data file", "not an experiment file"."""
    what = what.removesuffix(" file")
    kind_of_file = f"{'an' if what[:1].lower() in 'aeiou' else 'a'} {what} file"
    try:
        st = os.stat(path)
    except ValueError:
        raise InputError(f"{str(path)[:80]!r} has a NUL character in it; it names no file") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path} is a directory, not {kind_of_file}; name the file inside it")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise InputError(f"{path} is {kind}, not {kind_of_file}; kperfdiff reads regular files only "
                         f"(save the data to a file first)")
    return st.st_size


def read_toml(path: str | Path, what: str, error: type[InputError] = InputError) -> dict:
    """The one TOML loader: a user's (or the shipped) TOML file as a dict, every problem one
    sentence in one style naming ``what`` the file is and its path."""
    path, text = _read_text(path, what, error)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"the {what} {path} is not valid TOML: {e}") from None


def read_yaml(path: str | Path, what: str, error: type[InputError] = InputError) -> object:
    """The one YAML loader (safe: plain data only), for files such as LAVA job templates and lavacli's
    configuration; problems as :func:`read_toml`'s."""
    path, text = _read_text(path, what, error)
    return load_yaml(text, f"the {what} {path}", error)


def load_yaml(text: str, what: str, error: type[InputError] = InputError) -> object:
    """YAML text (``what`` names it in errors, e.g. "the LAVA job template x.yaml") as plain data."""
    import yaml     # heavy, and only LAVA needs it
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise error(f"{what} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:
        raise error(f"{what} nests too deeply to read") from None


def _read_text(path: str | Path, what: str, error: type[InputError]) -> tuple[Path, str]:
    path = Path(path)
    if os.path.lexists(path):
        try:
            check_input_file(path, what)
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
    return path, text
