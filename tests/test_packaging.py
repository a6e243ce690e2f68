"""kperfdiff installs like a Python tool: `python -m build` makes an sdist and, from that sdist
alone, a wheel (what `pip install kperfdiff-0.1.0.tar.gz` does); both hold the native core's
sources or module and every file the package reads beside its own modules; the wheel installed
into a fresh virtualenv (or with pipx) runs from a temporary directory with the repository's
src/ nowhere on sys.path.

The build compiles the native core from scratch (about 1.5 minutes here), once for the module.
Cargo comes from PATH; when that is rustup's proxy and HOME has no toolchain (the tests run
with an empty HOME), the toolchain and crate cache are the ones beside the proxy
(``<dir>/.cargo/bin/cargo`` -> ``<dir>/.rustup``), so the build reads crates from that cache.
The isolated build environment gets maturin from PyPI and the fresh virtualenv numpy and scipy,
as a user's install would.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from support import DATA, ROOT

pytestmark = pytest.mark.slow
PACKAGE = ROOT / "src" / "kperfdiff"
SKIP_PARTS = {"__pycache__"}


def shipped_files() -> list[str]:
    """Every file of the package in the repository (relative to src/), build products left out."""
    out = []
    for p in sorted(PACKAGE.rglob("*")):
        rel = p.relative_to(ROOT / "src")
        if p.is_file() and not SKIP_PARTS & set(rel.parts) and p.suffix not in (".so", ".pyc"):
            out.append(rel.as_posix())
    return out


def data_files() -> list[str]:
    """What the code reads relative to its own files: everything but the modules."""
    return [f for f in shipped_files() if not f.endswith(".py")]


def working_cargo_env() -> dict | None:
    """The environment in which `cargo --version` works, or None when there is no Rust toolchain."""
    env = dict(os.environ)

    def works(e):
        try:
            return subprocess.run(["cargo", "--version"], env=e, capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False
    if shutil.which("cargo") is None:
        return None
    if works(env):
        return env
    proxy = Path(shutil.which("cargo"))
    if proxy.resolve().name == "rustup" and proxy.parent.name == "bin":
        cargo_home = proxy.parent.parent
        env.update(CARGO_HOME=str(cargo_home), RUSTUP_HOME=str(cargo_home.with_name(".rustup")))
        if works(env):
            return env
    return None


def clean_env(tmp: Path, **extra) -> dict:
    """The environment of a user's shell: no project virtualenv, no PYTHONPATH, private kperfdiff state."""
    dev_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if d and d != dev_bin)
    env.update(KPERFDIFF_HOME=str(tmp / "kphome"), KPERFDIFF_CACHE=str(tmp / "kpcache"),
               KPERFDIFF_STATE_DIR=str(tmp / "kpstate"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(extra)
    return env


def run(cmd, *, cwd, env, timeout=900) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout[-4000:]}\nstderr:\n{p.stderr[-4000:]}"
    return p


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """`python -m build`: the sdist, then a wheel built from the unpacked sdist alone."""
    env = working_cargo_env()
    if env is None:
        pytest.skip("no working Rust toolchain (cargo) to build the native core")
    out = tmp_path_factory.mktemp("dist")
    env.pop("PYTHONPATH", None)
    run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=out, env=env)
    sdists, wheels = list(out.glob("kperfdiff-*.tar.gz")), list(out.glob("kperfdiff-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return sdists[0], wheels[0]


def test_sdist_holds_sources_data_and_metadata(dist):
    sdist, _ = dist
    with tarfile.open(sdist) as t:
        top = sdist.name[:-len(".tar.gz")]
        names = {n[len(top) + 1:] for n in t.getnames() if n.startswith(top + "/")}
        pkg_info = t.extractfile(f"{top}/PKG-INFO").read().decode()
    missing = [f"src/{f}" for f in shipped_files() if f"src/{f}" not in names]
    assert missing == [], f"the sdist lacks {missing}"
    for f in ("pyproject.toml", "README.md", "LICENSE", "native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs"):
        assert f in names, f
    assert not [n for n in names if n.endswith(".so") or "__pycache__" in n or n.startswith("native/target")]
    assert "License-Expression: MIT" in pkg_info and "License-File: LICENSE" in pkg_info
    assert "Requires-Dist: numpy" in pkg_info and "Requires-Dist: scipy" in pkg_info
    assert "Description-Content-Type: text/markdown" in pkg_info and "# kperfdiff" in pkg_info


def test_wheel_holds_native_module_and_data(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = z.read(info).decode()
    natives = [n for n in names if n.startswith("kperfdiff/native") and n.endswith(".so")]
    assert natives, "no native module in the wheel"
    missing = [f for f in shipped_files() if f not in names]
    assert missing == [], f"the wheel lacks {missing}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "kperfdiff=kperfdiff.commands:cli" in entry_points.replace(" ", "")
    assert len(data_files()) >= 30   # bench families (C and TOML), symbol rules, groups, the guest plugin


def check_installed(kperfdiff: Path, python: Path, tmp: Path, env: dict) -> None:
    """The installed command on real inputs, from a directory outside the repository."""
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    where = run([python, "-c", "import kperfdiff, kperfdiff.native, sys; print(kperfdiff.__file__); "
                 "print(kperfdiff.native.__file__); print(sys.path)"], cwd=cwd, env=env).stdout.splitlines()
    assert all(str(ROOT) not in line for line in where), where
    assert where[0].startswith(str(python.parent.parent)) and where[1].endswith(".so"), where
    assert "usage: kperfdiff" in run([kperfdiff, "--help"], cwd=cwd, env=env).stdout
    listed = json.loads(run([kperfdiff, "bench", "--list", "--format", "json"], cwd=cwd, env=env).stdout)
    assert {"syscall.null", "fault.anon.4k", "gups.4k"} <= {b["name"] for b in listed["benchmarks"]}
    # perf.data through the native reader (kallsyms.gz beside the files, of the boot both were recorded in)
    pd = DATA / "perfdata"
    out = run([kperfdiff, "diff", pd / "plain.perf.data", pd / "group.perf.data", "--top", "3"], cwd=cwd, env=env).stdout
    lines = out.splitlines()
    assert lines[0].startswith("A (plain): plain.perf.data, cpu-clock, 3,652 samples, 77% kernel, 23% user, symbols: "
                               "kallsyms.gz (kernel map = _text.._etext"), out
    assert lines[3].startswith("Common kernel functions: top 3 of "), out
    # the shipped equivalence rules (symbols/equivalence.toml) pair arm64's and x86_64's entry points
    out = run([kperfdiff, "diff", DATA / "diff" / "arm64.folded", DATA / "diff" / "x86_64.folded"],
              cwd=cwd, env=env).stdout
    assert "[page fault entry]" in out, out
    # a benchmark built from the shipped C sources, stored, then reported
    for _ in range(2):
        run([kperfdiff, "bench", "--only", "syscall.null", "--intervals", "3", "--min-batch-ms", "1",
             "--no-progress"], cwd=cwd, env=env)
    run([kperfdiff, "report", "1", "2", "-o", cwd / "r.html"], cwd=cwd, env=env)
    assert "syscall.null" in (cwd / "r.html").read_text()


def test_wheel_runs_in_a_fresh_venv(dist, tmp_path):
    _, wheel = dist
    env = clean_env(tmp_path)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path, env=env)
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], cwd=tmp_path, env=env)
    check_installed(venv / "bin" / "kperfdiff", venv / "bin" / "python", tmp_path, env)


@pytest.mark.skipif(shutil.which("pipx") is None, reason="pipx is not installed (Debian package pipx)")
def test_pipx_installs_the_wheel(dist, tmp_path):
    _, wheel = dist
    bindir = tmp_path / "pipx-bin"
    env = clean_env(tmp_path, PIPX_HOME=str(tmp_path / "pipx-home"), PIPX_BIN_DIR=str(bindir),
                    PIPX_MAN_DIR=str(tmp_path / "pipx-man"))
    run(["pipx", "install", wheel], cwd=tmp_path, env=env)
    check_installed(bindir / "kperfdiff", tmp_path / "pipx-home" / "venvs" / "kperfdiff" / "bin" / "python",
                    tmp_path, env)
