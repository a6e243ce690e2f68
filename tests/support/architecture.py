"""The shape of kperfdiff's code, measured from its own source: stages, imports, cycles,
function sizes, and what the command line imports to start. Prints the figures;
tests/test_architecture.py holds the rules to them.

    .venv/bin/python tests/support/architecture.py [REPO]

Every import statement counts, wherever it is (module top, inside a function, under
``if TYPE_CHECKING``): a cycle hidden in a function is still a cycle. So does a module a
loader imports by name (``importlib.import_module``) from its table (LOADERS). Only the
import-time graph (no ``TYPE_CHECKING`` imports) decides what a module pulls in at run time.

An import inside a function hides a dependency from the top of the file, so it needs a declared
reason: a library slow to import that only some paths need (HEAVY), one of kperfdiff's own
modules likewise (DEFERRED), or a loader's table. The
start-up check runs the real entry point and looks at what it imported (sys.modules): the
commands that must start at once (STARTUP) may import no HEAVY library and no command module
but their own.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "kperfdiff"

# A module's stage is the first folder of its path under src/kperfdiff (the package's
# own __init__/__main__ and the native module count as core and commands). The flow of data
# is targets -> store -> ingest -> analysis -> render; experiments and studies run the
# matrix and read it back; commands wire them. Which stages a stage may import (its own
# included):
ALLOWED = {
    "core": {"core"},
    "store": {"core", "store"},
    "bench": {"core", "bench"},
    "targets": {"core", "bench", "targets"},
    "measure": {"core", "store", "bench", "targets", "measure"},
    "symbols": {"core", "symbols"},
    "ingest": {"core", "symbols", "ingest"},
    "place": {"core", "ingest", "place"},
    "analysis": {"core", "symbols", "ingest", "analysis"},
    "experiments": {"core", "store", "bench", "targets", "measure", "analysis", "experiments"},
    # git bisect driven by measured probes: builds and targets, runs in the store, verdicts from core.stats
    "bisect": {"core", "store", "bench", "targets", "measure", "bisect"},
    # the sentinel: branches followed, commits built and measured as probes are, change points found and
    # bisected; bench, targets and experiments for its suite file (the catalogue, target specifications,
    # the experiment files' field checks)
    "watch": {"core", "store", "bench", "targets", "analysis", "experiments", "bisect", "watch"},
    # analysis: result types, never its I/O (see render_io); bench: the catalogue's names
    "render": {"core", "bench", "analysis", "place", "render"},
    # a study runs experiments and reads their results; its sections hold tables (render.table's model)
    "studies": {"core", "store", "bench", "targets", "measure", "symbols", "ingest", "place", "analysis",
                "experiments", "render", "studies"},
    "commands": set(),   # every stage: commands wire them (filled below)
}
ALLOWED["schemas"] = {"core", "schemas"}
ALLOWED["commands"] = set(ALLOWED)
ROOT_STAGES = {"": "core", "native": "core", "__main__": "commands"}
# Libraries slow to import that only some paths need: the one reason a module may import something
# inside a function (so the commands that need none start without it), and what the commands of
# STARTUP must not import.
HEAVY = {
    "numpy": "arrays for statistics, profiles and placement: ~30 ms",
    "scipy": "Student's t, the exact placement's MILP: scipy.special ~0.1 s, scipy.stats ~0.7 s",
    "google.protobuf": "pprof export only",
    "yaml": "LAVA jobs, their logs and lavacli's configuration only",
    "psycopg": "a PostgreSQL store only (an optional dependency)",
    "otava": "change points (kperfdiff changes, history --format html) only: scipy.stats with it, ~0.9 s",
}
# kperfdiff's own modules slow to import (with what they pull in) that only some paths of a command
# need: a function of such a path may import them, so that the others start without them.
DEFERRED = {
    f"{PACKAGE}.store": "the results store (sqlite3, hashlib, socket: ~10 ms): a diff, export or placement "
                        "of profile files never opens it, only one naming a stored run does",
    f"{PACKAGE}.render.flamegraph": "flame graphs and folded files (xml.sax.saxutils pulls in urllib, "
                                    "http.client and ssl: ~14 ms): a diff writes them only when asked to",
    f"{PACKAGE}.measure.knobs": "the knobs and their pending restores (socket, urllib, the noise monitor: "
                                "~15 ms): every command repairs pending restores, but imports it only when "
                                "a pending-restore file exists",
}
# Modules that import modules of their own package by name, from a table: module -> the table
# (a dict whose values name the modules, or a tuple of tuples whose last item does).
LOADERS = {
    f"{PACKAGE}.commands": "COMMANDS",     # the dispatcher: a command's module when it is parsed
    f"{PACKAGE}.studies": "KINDS",         # a study's kind
}
# Command lines that must start at once: none of them imports a HEAVY library or a command
# module other than the one of its own command.
STARTUP = (("--help",), ("runs", "--help"), ("runs",), ("bench", "--list"))
# What marks a module as reading or writing files, processes or the store.
IO_MODULES = {"subprocess", "sqlite3", "shutil", "tempfile", "socket", "selectors", "tomllib", "mmap"}
IO_CALLS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob",
            "mkdir", "unlink", "listdir", "scandir", "Popen", "read_perf_data"}


@dataclass
class Import:
    target: str          # the kperfdiff module imported (longest existing prefix)
    names: list[str]     # names taken from it (from X import a, b)
    line: int
    in_function: bool
    type_only: bool      # under `if TYPE_CHECKING:`
    external: str = ""   # a module outside kperfdiff (standard library or third party), dotted
    by_name: bool = False    # loaded by a loader from its table (LOADERS), not by an import statement


@dataclass
class Module:
    name: str            # kperfdiff.x.y
    path: Path
    tree: ast.Module
    imports: list[Import] = field(default_factory=list)
    does_io: list[str] = field(default_factory=list)
    loads_by_name: list[int] = field(default_factory=list)   # lines of importlib.import_module / __import__ calls

    @property
    def short(self) -> str:
        return self.name[len(PACKAGE) + 1:] or "__init__"


def stage_of(short: str) -> str:
    """The stage of a module, by its dotted name under the package: its first folder."""
    first = short.split(".")[0]
    return ROOT_STAGES.get(first, first) if short != "__init__" else "core"


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def load_modules(repo: Path = REPO) -> dict[str, Module]:
    root = repo / "src" / PACKAGE
    mods: dict[str, Module] = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = Module(".".join(parts), p, ast.parse(p.read_text(), str(p)))
    for so in root.glob("native*.so"):
        mods.setdefault(f"{PACKAGE}.native", Module(f"{PACKAGE}.native", so, ast.Module(body=[], type_ignores=[])))
    for m in mods.values():
        _scan(m, mods)
    for loader in LOADERS:
        if loader in mods:
            mods[loader].imports += [Import(t, [], line, True, False, by_name=True)
                                     for t, line in table(mods, loader).values() if t in mods]
    return mods


def table(mods: dict[str, Module], loader: str) -> dict[str, tuple[str, int]]:
    """A loader's table: name -> (the module it loads, the line of its entry)."""
    out = {}
    for node in mods[loader].tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == LOADERS[loader]
                                                for t in node.targets):
            v = node.value
            pairs = list(zip(v.keys, v.values)) if isinstance(v, ast.Dict) else \
                [(e.elts[0], e.elts[-1]) for e in v.elts if isinstance(e, ast.Tuple)]
            for k, val in pairs:
                if isinstance(k, ast.Constant) and isinstance(val, ast.Constant):
                    out[k.value] = (f"{loader}.{val.value}", val.lineno)
    return out


def _resolve(m: Module, node: ast.ImportFrom | ast.Import, mods: dict[str, Module]) -> list[tuple[str, str | None]]:
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    pkg = m.name.split(".")
    if m.path.name != "__init__.py":
        pkg = pkg[:-1]
    if node.level:
        base = pkg[:len(pkg) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [(f"{target}.{a.name}", None) if f"{target}.{a.name}" in mods else (target, a.name) for a in node.names]


def _scan(m: Module, mods: dict[str, Module]) -> None:
    def visit(node, in_function: bool, type_only: bool):
        for child in ast.iter_child_nodes(node):
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            tc = type_only or (isinstance(child, ast.If) and _is_type_checking(child))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                by_target: dict[str, list[str]] = defaultdict(list)
                for target, name in _resolve(m, child, mods):
                    by_target[target].extend([name] if name else [])
                for target, names in by_target.items():
                    if target == PACKAGE or target.startswith(PACKAGE + "."):
                        t = target
                        while t not in mods and "." in t:
                            t = t.rsplit(".", 1)[0]
                        if t != m.name:
                            m.imports.append(Import(t, names, child.lineno, in_function, type_only))
                    else:
                        m.imports.append(Import("", names, child.lineno, in_function, type_only, external=target))
                        top = target.split(".")[0]
                        if top in IO_MODULES and not type_only:
                            m.does_io.append(f"imports {top}")
            elif isinstance(child, ast.Call):
                f = child.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in IO_CALLS:
                    m.does_io.append(f"calls {name}() at line {child.lineno}")
                if name in ("import_module", "__import__"):
                    m.loads_by_name.append(child.lineno)
            visit(child, fn, tc)
    visit(m.tree, False, False)


def graph(mods: dict[str, Module], *, runtime_only: bool = False) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {name: set() for name in mods}
    for m in mods.values():
        for i in m.imports:
            if i.target and not (runtime_only and i.type_only):
                g[m.name].add(i.target)
                # importing a.b.c runs a/__init__ and a/b/__init__ first
                parts = i.target.split(".")
                for k in range(2, len(parts)):
                    parent = ".".join(parts[:k])
                    if parent in mods and parent != m.name and not m.name.startswith(parent + "."):
                        g[m.name].add(parent)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in g:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def package_graph(mods: dict[str, Module]) -> dict[str, set[str]]:
    """The same imports between top-level units (a package, or a top-level module)."""
    def unit(name: str) -> str:
        return ".".join(name.split(".")[:2])
    g: dict[str, set[str]] = defaultdict(set)
    for a, bs in graph(mods).items():
        g[unit(a)]
        for b in bs:
            if unit(b) != unit(a) and unit(b) != PACKAGE:
                g[unit(a)].add(unit(b))
    return dict(g)


def closure(g: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        v = todo.pop()
        for w in g.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


# -- the rules ------------------------------------------------------------------------

def heavy(module: str) -> str | None:
    """The HEAVY library a dotted module name belongs to, if any."""
    return next((h for h in HEAVY if module == h or module.startswith(h + ".")), None)


def hidden_imports(mods) -> list[str]:
    """Imports a reader of a module's top does not see, without a declared reason: one inside a
    function, of anything but a HEAVY library or a DEFERRED module; a module loaded by name outside a
    loader (LOADERS)."""
    out = [f"{m.short}:{i.line} imports {i.target or i.external} inside a function"
           for m in mods.values() for i in m.imports
           if i.in_function and not i.by_name and not (i.external and heavy(i.external))
           and not any(i.target == d or (i.target or "").startswith(d + ".") for d in DEFERRED)]
    out += [f"{m.short}:{line} loads a module by name outside a declared loader (LOADERS)"
            for m in mods.values() if m.name not in LOADERS for line in m.loads_by_name]
    return out


def startup_modules(args, *, pythonpath: str | None = None, env: dict | None = None) -> tuple[int, set[str]]:
    """Run the real entry point (kperfdiff.commands:main, which the `kperfdiff` script's cli calls) with
    ``args`` in a fresh interpreter; its exit status and every module imported by the time it
    returned. Times nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "modules"
        code = ("import sys\n"
                "out, args = sys.argv[1], sys.argv[2:]\n"
                "sys.argv = ['kperfdiff', *args]\n"
                "from kperfdiff.commands import main\n"
                "try:\n    rc = main()\nexcept SystemExit as e:\n    rc = e.code or 0\n"
                "open(out, 'w').write('\\n'.join(sorted(sys.modules)))\n"
                "sys.exit(rc)\n")
        e = dict(os.environ, **(env or {}))
        if pythonpath:
            e["PYTHONPATH"] = pythonpath + os.pathsep + e.get("PYTHONPATH", "")
        p = subprocess.run([sys.executable, "-c", code, str(out), *args], env=e, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=120)
        mods = set(out.read_text().split("\n")) if out.exists() else set()
    return p.returncode, mods


def startup_violations(args, imported: set[str], mods) -> list[str]:
    """What the command line ``args`` should not have imported to start: a HEAVY library, or a
    command module other than its own command's."""
    commands = table(mods, f"{PACKAGE}.commands")
    own = next((commands[a][0] for a in args if a in commands), None)
    out = sorted({f"{' '.join(args)} imports {heavy(n)}" for n in imported if heavy(n)})
    out += [f"{' '.join(args)} imports the command module {n}" for n in sorted(imported)
            if n in {t for t, _ in commands.values()} and n != own]
    return out


def startup_check(mods, *, pythonpath: str | None = None) -> dict[tuple[str, ...], tuple[int, set[str], list[str]]]:
    """Each command line of STARTUP run on an empty store of its own: its exit status, the modules it
    imported, and what it should not have imported (:func:`startup_violations`)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {"KPERFDIFF_HOME": tmp, "KPERFDIFF_STATE_DIR": str(Path(tmp) / "state"), "KPERFDIFF_STORE": ""}
        rc, _ = startup_modules(("store", "init"), pythonpath=pythonpath, env=env)
        assert rc == 0, "kperfdiff store init failed: no empty store to start on"
        out = {}
        for args in STARTUP:
            rc, imported = startup_modules(args, pythonpath=pythonpath, env=env)
            out[args] = rc, imported, startup_violations(args, imported, mods)
    return out


def private_imports(mods) -> list[str]:
    out = []
    for m in mods.values():
        for i in m.imports:
            if not i.target:
                continue
            last = i.target.rsplit(".", 1)[-1]
            if last.startswith("_") and not last.startswith("__"):
                out.append(f"{m.short}:{i.line} imports the private module {i.target}")
            out += [f"{m.short}:{i.line} imports the private name {i.target}.{n}"
                    for n in i.names if n.startswith("_") and not n.startswith("__")]
    return out


def misplaced_modules(mods) -> list[str]:
    """Modules whose stage cannot be read off their path: a module at the top of the package
    (but __init__, __main__ and the native module), or a folder no rule places."""
    out = []
    for m in mods.values():
        if m.path.suffix == ".py" and "." not in m.short and m.short not in ("__init__", "__main__") \
                and m.path.name != "__init__.py":
            out.append(f"{m.short} sits at the top of the package, outside every stage folder")
        elif stage_of(m.short) not in ALLOWED:
            out.append(f"{m.short} is in the folder {stage_of(m.short)}/, which no stage rule names")
    return out


def stage_violations(mods) -> list[str]:
    out = []
    for m in mods.values():
        s = stage_of(m.short)
        if s not in ALLOWED:
            continue
        for i in m.imports:
            if i.target and not i.type_only:
                t = stage_of(i.target[len(PACKAGE) + 1:] or "__init__")
                if t not in ALLOWED[s]:
                    out.append(f"{m.short} ({s}) imports {i.target} ({t})")
    return out


def render_io(mods) -> list[str]:
    """Modules that do I/O which a renderer pulls in at run time (itself included)."""
    g = graph(mods, runtime_only=True)
    out = []
    for m in mods.values():
        if not m.name.startswith(f"{PACKAGE}.render"):
            continue
        for dep in sorted({m.name} | closure(g, m.name)):
            if mods[dep].does_io:
                out.append(f"{m.short} -> {mods[dep].short}: {mods[dep].does_io[0]}")
    return out


def argparse_outside_commands(mods) -> list[str]:
    return [f"{m.short}:{i.line} imports argparse" for m in mods.values() for i in m.imports
            if i.external == "argparse" and stage_of(m.short) != "commands"]


# -- figures -----------------------------------------------------------------------------

def python_functions(mods) -> list[tuple[int, str]]:
    rows = []
    for m in mods.values():
        for n in ast.walk(m.tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                rows.append((n.end_lineno - n.lineno + 1, f"{m.short}.{n.name}"))
    return sorted(rows, reverse=True)


def rust_functions(repo: Path = REPO) -> list[tuple[int, str]]:
    """Lines of every `fn` in native/src (brace counting; good enough for rustfmt'd code)."""
    rows = []
    for p in sorted((repo / "native" / "src").glob("*.rs")):
        lines = p.read_text().splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"\s*(pub(\([a-z]+\))? )?(unsafe )?fn (\w+)", line)
            if not m or line.rstrip().endswith(";"):
                continue
            depth, started = 0, False
            for j in range(i, len(lines)):
                depth += lines[j].count("{") - lines[j].count("}")
                started = started or "{" in lines[j]
                if started and depth <= 0:
                    break
            rows.append((j - i + 1, f"{p.name}:{m.group(4)}"))
    return sorted(rows, reverse=True)


def lines_per_stage(mods) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for m in mods.values():
        if m.path.suffix == ".py":
            out[stage_of(m.short)] += len(m.path.read_text().splitlines())
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main(argv: list[str]) -> int:
    repo = Path(argv[0]).resolve() if argv else REPO
    mods = load_modules(repo)
    print(f"kperfdiff architecture ({repo})")
    print(f"  modules: {len(mods)}; import statements of kperfdiff modules: "
          f"{sum(1 for m in mods.values() for i in m.imports if i.target)}")
    print(f"  import cycles between modules (every import counted): {len(cycles(graph(mods)))}")
    for c in cycles(graph(mods)):
        print("    " + " <-> ".join(x[len(PACKAGE) + 1:] for x in c))
    print(f"  import cycles between packages: {len(cycles(package_graph(mods)))}")
    for c in cycles(package_graph(mods)):
        print("    " + " <-> ".join(x[len(PACKAGE) + 1:] for x in c))
    for title, found in (("imports inside a function or by name, undeclared", hidden_imports(mods)),
                         ("private names imported across modules", private_imports(mods)),
                         ("modules outside a stage folder", misplaced_modules(mods)),
                         ("imports against the stage order", stage_violations(mods)),
                         ("I/O reachable from render/", render_io(mods)),
                         ("argparse outside commands/", argparse_outside_commands(mods))):
        print(f"  {title}: {len(found)}")
        for f in found[:12]:
            print(f"    {f}")
    for args, (rc, imported, found) in startup_check(mods, pythonpath=str(repo / "src")).items():
        ours = sum(1 for n in imported if n == PACKAGE or n.startswith(PACKAGE + "."))
        print(f"  kperfdiff {' '.join(args)}: exit {rc}, {len(imported)} modules imported ({ours} of kperfdiff), "
              f"{', '.join(found) if found else 'no heavy library, no other command module'}")
    print("  lines per stage: " + ", ".join(f"{k} {v}" for k, v in lines_per_stage(mods).items()))
    print("  longest Python functions: " + ", ".join(f"{n} {k}" for k, n in python_functions(mods)[:6]))
    print("  longest Rust functions: " + ", ".join(f"{n} {k}" for k, n in rust_functions(repo)[:6]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
