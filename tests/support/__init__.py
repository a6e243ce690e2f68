"""What the tests share: where things are (the repository, its test data, the installed CLI) and
how a test runs the CLI and checks what it says. The fixtures are in tests/conftest.py; the helper
modules beside this one (a fake LAVA server, a throwaway PostgreSQL cluster, headless Chromium, ...)
are imported as ``support.<module>``."""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KPERFDIFF = Path(sys.executable).with_name("kperfdiff")
DATA = ROOT / "tests" / "data"


def run_cli(*args, env=None, check=None, timeout=600, **kw) -> subprocess.CompletedProcess:
    """Run the installed `kperfdiff` with the given arguments."""
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run([str(KPERFDIFF), *map(str, args)], capture_output=True, text=True, env=e,
                       timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def two_variant_experiment(path: Path, name: str, **settings) -> Path:
    """A small real experiment file at ``path``: syscall.null on one core, variants A and B of the
    same kernel, 3 repetitions of 3 intervals each unless ``settings`` (top-level keys such as
    ``reps=2, min_batch_ms=1, tiny=True``) say otherwise."""
    top = {"reps": 3, "intervals": 3, **settings}
    lines = "".join(f"{k} = {str(v).lower() if isinstance(v, bool) else v}\n" for k, v in top.items())
    path.write_text(f"""
name = "{name}"
benchmarks = ["syscall.null"]
cores = [1]
{lines}[[variant]]
label = "A"
[[variant]]
label = "B"
""")
    return path


def assert_one_sentence_error(p: subprocess.CompletedProcess) -> None:
    """A user error: non-zero exit, no traceback, one line on stderr starting with the
    command it was given to (`kperfdiff: ` or, for a bad flag, `kperfdiff bench: `)."""
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines and re.match(r"kperfdiff( [a-z][a-z-]*)*: (?!kperfdiff)", lines[-1]), p.stderr


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session sid: what a worker left behind, if anything."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(d))
    return pids


@contextlib.contextmanager
def machine_lock(how: int = fcntl.LOCK_SH):
    """The machine-state lock (tests/conftest.py:machine_state_lock): machine_state tests hold it alone,
    stable_machine tests shared; a fixture of a wider scope holds it shared while it measures, so that no
    test changes the machine's state (THP, swap, sysctls) meanwhile."""
    with open(Path(tempfile.gettempdir()) / "kperfdiff-tests-machine-state.lock", "a") as lock:
        fcntl.flock(lock, how)
        yield
