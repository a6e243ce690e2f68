"""The architecture holds: stages import one way, no cycles (function-level imports counted),
renderers reach no I/O, no private names cross modules, argparse stays in commands/, and each
file format has one parser. The rules live in harness/architecture.py, which also prints the
figures; here they must come out empty, and each detector must catch a planted violation."""
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kperfdiff"


def _harness():
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "harness" / "architecture.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


arch = _harness()
MODS = arch.load_modules(ROOT)
MAX_FUNCTION_LINES = 120


def test_no_import_cycle_between_modules_or_packages():
    assert arch.cycles(arch.graph(MODS)) == []
    assert arch.cycles(arch.package_graph(MODS)) == []


def test_no_function_level_imports_but_slow_optional_ones():
    assert arch.function_level_imports(MODS) == []


def test_no_private_name_crosses_modules():
    assert arch.private_imports(MODS) == []


def test_stages_import_one_way():
    assert arch.stage_violations(MODS) == []


def test_renderers_reach_no_file_process_or_store():
    assert arch.render_io(MODS) == []
    # and the detector knows I/O when it sees it
    assert MODS["kperfdiff.store"].does_io and MODS["kperfdiff.ingest.load"].does_io
    assert not MODS["kperfdiff.render.table"].does_io


def test_only_commands_know_argparse():
    assert arch.argparse_outside_commands(MODS) == []
    for m in MODS.values():
        if arch.stage_of(m.short) != "commands" and m.path.suffix == ".py":
            assert "args.store" not in m.path.read_text(), m.short


def test_no_long_functions():
    long_py = [(n, f) for n, f in arch.python_functions(MODS) if n > MAX_FUNCTION_LINES]
    long_rs = [(n, f) for n, f in arch.rust_functions(ROOT) if n > MAX_FUNCTION_LINES]
    assert long_py == [] and long_rs == []


def _sources(suffix=".py"):
    return {p: p.read_text() for p in SRC.rglob(f"*{suffix}")}


def test_one_parser_per_format():
    src = _sources()
    # TOML: one loader
    assert [p.name for p, t in src.items() if "import tomllib" in t] == ["files.py"]
    # ELF: only the native module reads ELF structures (no struct unpacking of ELF in Python)
    assert [p for p, t in src.items() if "\\x7fELF" in t and "struct.unpack" in t] == []
    # /proc/vmstat: one parser
    assert [p.name for p, t in src.items() if "def parse_vmstat" in t or "def read_vmstat" in t] == ["monitors.py"]
    # kallsyms / System.map lines: one parser, native/src/kallsyms.rs (the profile reader and place)
    assert [p for p, t in src.items() if "_MAP_LINE" in t] == []
    rust = {p.name: p.read_text() for p in (ROOT / "native" / "src").glob("*.rs")}
    assert [n for n, t in rust.items() if "fn parse_line" in t] == ["kallsyms.rs"]
    # ELF: read through the object crate only, by the file-facts reader and the user-symbol reader
    assert sorted(n for n, t in rust.items() if "object::" in t) == ["elf.rs", "elfsyms.rs"]
    # the copy runner: one, in C, used here and on every target
    assert [p.name for p in SRC.rglob("*.c") if "run N" in p.read_text() or "copies" in p.read_text()[:400]] \
        == ["kpd-run.c"]
    assert "Popen" not in (SRC / "bench" / "worker.py").read_text().split("def run_copies_with_noise")[0]


def test_every_module_sits_in_a_stage_folder():
    assert arch.misplaced_modules(MODS) == []
    assert {arch.stage_of(m.short) for m in MODS.values()} <= set(arch.ALLOWED)


@pytest.fixture
def planted(tmp_path):
    """A tiny package with one of each violation."""
    pkg = tmp_path / "src" / "kperfdiff"
    for d in ("render", "store", "analysis", "core", "extras"):
        (pkg / d).mkdir(parents=True)
    (tmp_path / "native" / "src").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "store/__init__.py": "import sqlite3\nfrom kperfdiff.analysis import diff\n",
        "analysis/__init__.py": "",
        "analysis/diff.py": "def f():\n    from kperfdiff import store\n    from kperfdiff.core.stats import _private\n",
        "core/__init__.py": "",
        "core/stats.py": "_private = 1\n",
        "render/__init__.py": "",
        "render/table.py": "from kperfdiff import store\nimport argparse\n",
        "loose.py": "",
        "extras/__init__.py": "",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    (tmp_path / "native" / "src" / "lib.rs").write_text("fn big() {\n" + "    x();\n" * 130 + "}\n")
    return arch.load_modules(tmp_path), tmp_path


def test_each_detector_catches_a_planted_violation(planted):
    mods, root = planted
    assert arch.cycles(arch.graph(mods)) == [["kperfdiff.analysis.diff", "kperfdiff.store"]]
    assert any("analysis.diff:2 imports kperfdiff.store inside a function" in f
               for f in arch.function_level_imports(mods))
    assert any("_private" in f for f in arch.private_imports(mods))
    assert any(f.startswith("render.table -> store") for f in arch.render_io(mods))
    assert any("render.table" in f for f in arch.argparse_outside_commands(mods))
    assert any("store (store) imports kperfdiff.analysis.diff (analysis)" in f for f in arch.stage_violations(mods))
    assert sorted(arch.misplaced_modules(mods)) == [
        "extras is in the folder extras/, which no stage rule names",
        "loose sits at the top of the package, outside every stage folder"]
    assert arch.rust_functions(root)[0] == (132, "lib.rs:big")


def test_pyflakes_finds_nothing_in_the_code_the_project_ships_or_runs():
    """Unused imports, undefined names and shadowed definitions fail here, not in review. Planted:
    a file importing a module it never uses must be reported."""
    dirs = [str(ROOT / d) for d in ("src", "tests", "benchmarks", "harness", "fuzz", "validation")]
    out = subprocess.run([sys.executable, "-m", "pyflakes", *dirs], capture_output=True, text=True)
    assert out.stdout == "" and out.returncode == 0, out.stdout + out.stderr


def test_pyflakes_reports_a_planted_unused_import(tmp_path):
    (tmp_path / "planted.py").write_text("import os\n")
    out = subprocess.run([sys.executable, "-m", "pyflakes", str(tmp_path)], capture_output=True, text=True)
    assert "'os' imported but unused" in out.stdout and out.returncode == 1
