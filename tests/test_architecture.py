"""The architecture holds: stages import one way, no cycles (imports inside functions and loads
by name counted), no import hidden in a function without a declared reason, the command line
starts without heavy libraries, renderers reach no I/O, no private names cross modules, argparse
stays in commands/, and each file format has one parser. The rules live in
tests/support/architecture.py, which also prints the figures; here they must come out empty, and
each detector must catch a planted violation."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support import architecture as arch

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "kperfdiff"
MODS = arch.load_modules(ROOT)
MAX_FUNCTION_LINES = 120


def test_no_import_cycle_between_modules_or_packages():
    assert arch.cycles(arch.graph(MODS)) == []
    assert arch.cycles(arch.package_graph(MODS)) == []


def test_no_import_hidden_without_a_declared_reason():
    """Inside a function only a HEAVY library; by name only a loader's table (the dispatcher's commands)."""
    assert arch.hidden_imports(MODS) == []
    loaded = {i.target for i in MODS["kperfdiff.commands"].imports if i.by_name}
    assert loaded == {f"kperfdiff.commands.{m}" for m in
                      ("bench", "runs", "diff", "export", "place", "experiment", "studies", "store", "lava",
                       "history", "bisect", "system", "watch")}


def test_every_command_is_defined_where_the_dispatcher_looks():
    """COMMANDS names each command's module; that module defines exactly its commands (DEFINES)."""
    from kperfdiff import commands
    defined = {}
    for module in sorted(set(commands.MODULE_OF.values())):
        for name in __import__(f"kperfdiff.commands.{module}", fromlist=["DEFINES"]).DEFINES:
            defined[name] = module
    assert defined == commands.MODULE_OF


def test_a_command_parsed_lazily_has_its_whole_parser(capsys):
    """main fills in only the chosen command's parser: every command's --help (and its sub-commands')
    is the one of the complete parser, and the top-level --help lists every command."""
    import argparse
    from kperfdiff import commands

    def paths(p, path=()):
        yield path
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    yield from paths(sub, path + (name,))

    def help_of(path):
        with pytest.raises(SystemExit):
            commands.main([*path, "--help"])
        return capsys.readouterr().out

    complete = commands.build_parser()
    every = list(paths(complete))
    assert len(every) > len(commands.COMMANDS)
    for path in every:
        p = complete
        for name in path:
            p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        assert help_of(path) == p.format_help(), path
    assert all(f"    {name}" in help_of(()) for name, _, _ in commands.COMMANDS)


def test_the_command_line_starts_without_heavy_libraries_or_other_commands():
    """`kperfdiff --help`, `runs` and `bench --list` import no numpy, scipy, protobuf, yaml or psycopg,
    and no command module but their own (what they import is read from sys.modules; nothing is timed)."""
    found = arch.startup_check(MODS)
    assert {args: rc for args, (rc, _, _) in found.items()} == {args: 0 for args in arch.STARTUP}
    assert [v for _, _, bad in found.values() for v in bad] == []
    # the check sees what it looks for: a command module and the commands' shared parsing are imported
    assert {"kperfdiff.commands.runs", "kperfdiff.commands.parsing"} <= found[("runs",)][1]
    assert "kperfdiff.commands.bench" in found[("bench", "--list")][1]


def test_a_diff_of_two_files_opens_no_store_and_writes_no_flame_graph():
    """`kperfdiff diff A B` of two profile files imports neither the store (SQLite, hashlib, socket)
    nor the flame graph writer (xml.sax pulls in urllib, http.client and ssl): they are DEFERRED to
    the paths that need them (a stored run, --flamegraph or --folded)."""
    data = ROOT / "tests" / "data" / "diff"
    rc, imported = arch.startup_modules(("diff", str(data / "x86_64.folded"), str(data / "arm64.folded")))
    assert rc == 0
    assert not {"kperfdiff.store", "sqlite3", "kperfdiff.render.flamegraph", "xml.sax", "ssl"} & imported
    rc, imported = arch.startup_modules(("diff", str(data / "x86_64.folded"), str(data / "arm64.folded"),
                                         "--flamegraph", "/dev/null"))
    assert rc == 0 and "kperfdiff.render.flamegraph" in imported


def test_the_start_up_check_catches_a_planted_heavy_import(tmp_path):
    """A heavy library imported at the top of a module on the path of `runs`, and a command module
    imported by another, are caught."""
    pkg = tmp_path / "kperfdiff"
    shutil.copytree(SRC, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(pkg / "render" / "bench.py", "a") as f:
        f.write("\nimport numpy  # planted\n")
    with open(pkg / "commands" / "runs.py", "a") as f:
        f.write("\nfrom kperfdiff.commands import diff  # noqa: F401 planted\n")
    found = arch.startup_check(MODS, pythonpath=str(tmp_path))
    assert found[("--help",)][2] == []
    for args in (("runs",), ("runs", "--help")):
        rc, imported, bad = found[args]
        assert "numpy" in imported
        assert f"{' '.join(args)} imports numpy" in bad
        assert f"{' '.join(args)} imports the command module kperfdiff.commands.diff" in bad


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
    for d in ("render", "store", "analysis", "core", "extras", "commands"):
        (pkg / d).mkdir(parents=True)
    (tmp_path / "native" / "src").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "store/__init__.py": "import sqlite3\nfrom kperfdiff.analysis import diff\n",
        "analysis/__init__.py": "",
        "analysis/diff.py": "def f():\n    from kperfdiff import store\n    from kperfdiff.core.stats import _private\n",
        "core/__init__.py": "",
        "core/stats.py": "_private = 1\n"
                         "def g():\n    import numpy\n    import scipy.special\n    import json\n"
                         "    import importlib\n    return importlib.import_module('kperfdiff.store')\n",
        "commands/__init__.py": "import importlib\nCOMMANDS = (('go', 'help', 'go'),)\n"
                                "def load(name):\n    return importlib.import_module(f'kperfdiff.commands.{name}')\n",
        "commands/go.py": "from kperfdiff.commands import load\n",
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
    # the dispatcher's load by name counts: commands <-> commands.go
    assert arch.cycles(arch.graph(mods)) == [["kperfdiff.analysis.diff", "kperfdiff.store"],
                                             ["kperfdiff.commands", "kperfdiff.commands.go"]]
    # inside a function: a kperfdiff module or json is hidden, numpy and scipy (HEAVY) and the store
    # (DEFERRED) are declared; by name: only in a loader
    assert sorted(arch.hidden_imports(mods)) == [
        "analysis.diff:3 imports kperfdiff.core.stats inside a function",
        "core.stats:5 imports json inside a function",
        "core.stats:6 imports importlib inside a function",
        "core.stats:7 loads a module by name outside a declared loader (LOADERS)"]
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
    dirs = [str(ROOT / d) for d in ("src", "tests", "benchmarks", "fuzz", "validation") if (ROOT / d).is_dir()]
    out = subprocess.run([sys.executable, "-m", "pyflakes", *dirs], capture_output=True, text=True)
    assert out.stdout == "" and out.returncode == 0, out.stdout + out.stderr


def test_pyflakes_reports_a_planted_unused_import(tmp_path):
    (tmp_path / "planted.py").write_text("import os\n")
    out = subprocess.run([sys.executable, "-m", "pyflakes", str(tmp_path)], capture_output=True, text=True)
    assert "'os' imported but unused" in out.stdout and out.returncode == 1
