"""The benchmark catalogue: one TOML file per family beside its C source.

Each ``families/<family>.toml`` declares the family's benchmarks; this
module reads and checks them, so the CLI, the runner and the docs all list
the same names, units and directions.
"""
from __future__ import annotations

import fnmatch

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from kperfdiff.core.errors import InputError, UsageError
from kperfdiff.core.files import read_toml

FAMILIES_DIR = Path(__file__).with_name("families")
UNITS = {"ns/op", "us/op", "ms/op", "GUP/s", "ops/s", "MB/s", "ns/page", "ns/loop", "s"}
REQUIREMENTS = {"swap", "thp", "loopback", "root", "smp", "disk"}   # disk: a dir= on a disk file system

@dataclass(frozen=True)
class Benchmark:
    name: str
    family: str
    exercises: str
    unit: str
    better: str
    suites: tuple[str, ...]
    timeout: float = 120.0
    params: dict = field(default_factory=dict)
    tiny_params: dict = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    intervals: int | None = None
    lmbench: str = ""
    differences: str = ""
    op: str = ""                   # what one operation of a per-operation unit is: "4 KB page", "fork"
    options: dict = field(default_factory=dict)   # parameters an override may set, not set by default: name -> values

    @property
    def unit_label(self) -> str:
        """The unit as tables and plots print it: "ns per 4 KB page" for ns/op of a 4 KB page."""
        head, sep, tail = self.unit.partition("/")
        return f"{head} per {self.op}" if sep and tail == "op" and self.op else self.unit

    @property
    def param_names(self) -> set[str]:
        """The parameters an override may set: its params, its options (proc.* also take ``hello``, the
        program they start)."""
        return (set(self.params) | set(self.tiny_params) | set(self.options)
                | ({"hello"} if self.family == "proc" else set()))

    def run_params(self, *, tiny: bool = False, overrides: dict[str, str] | None = None,
                   hello: str | None = None) -> dict[str, str]:
        """The parameters a worker is given: the catalogue's, then the small ones when ``tiny``
        (tests), then ``overrides``; proc.* also learn where the tiny program they start is
        (``hello``), unless an override already says."""
        params = dict(self.params)
        if tiny:
            params.update(self.tiny_params)
        params.update(overrides or {})
        if self.family == "proc" and hello:
            params.setdefault("hello", hello)
        return params

@dataclass(frozen=True)
class Family:
    name: str
    source: Path
    ldflags: tuple[str, ...] = ()
    cflags: tuple[str, ...] = ()
    static: bool = False

class CatalogueError(InputError):
    """A benchmark family's TOML file is wrong: every command that reads the catalogue stops on it,
    in one sentence that names the file (exit status 2)."""


def _check(cond: bool, path: Path, msg: str) -> None:
    if not cond:
        raise CatalogueError(f"the benchmark family file {path}: {msg}")

@lru_cache(maxsize=None)
def load_families(directory: Path = FAMILIES_DIR) -> tuple[dict[str, Family], tuple[Benchmark, ...]]:
    families: dict[str, Family] = {}
    benches: list[Benchmark] = []
    seen: set[str] = set()
    for toml_path in sorted(directory.glob("*.toml")):
        data = read_toml(toml_path, "benchmark family")
        fam = data.get("family", toml_path.stem)
        src = toml_path.with_suffix(".c")
        _check(src.exists(), toml_path, f"no C source {src.name}")
        families[fam] = Family(fam, src, tuple(data.get("ldflags", ())), tuple(data.get("cflags", ())),
                               bool(data.get("static", False)))
        for b in data.get("bench", []):
            name = b.get("name", "")
            _check(name.startswith(fam + "."), toml_path, f"benchmark {name!r} must start with {fam}.")
            _check(name not in seen, toml_path, f"benchmark {name} declared twice")
            seen.add(name)
            _check(b.get("better") in ("lower", "higher"), toml_path, f"{name}: better must be lower or higher")
            _check(bool(b.get("exercises")), toml_path, f"{name}: says nothing of what it exercises")
            _check(b.get("unit") in UNITS, toml_path,
                   f"{name}: unit {b.get('unit')!r} is not one of {', '.join(sorted(UNITS))}" if b.get("unit")
                   else f"{name}: no unit")
            _check(bool(b.get("op")), toml_path, f"{name}: no op (what one operation of its unit is)")
            req = tuple(b.get("requires", ()))
            _check(set(req) <= REQUIREMENTS, toml_path, f"{name}: unknown requirement in {req}")
            options = b.get("options", {})
            _check(isinstance(options, dict) and all(isinstance(v, list) and v and all(isinstance(x, str) for x in v)
                                                     for v in options.values()), toml_path,
                   f"{name}: options must map each name to a list of the values it may take")
            both = sorted(set(options) & set(b.get("params", {})))
            _check(not both, toml_path, f"{name}: an option is also a param ({', '.join(both)})")
            suites = tuple(b.get("suites", ("full",)))
            _check(set(suites) <= {"quick", "full"}, toml_path, f"{name}: unknown suite in {suites}")
            benches.append(Benchmark(
                name=name, family=fam, exercises=b["exercises"], unit=b["unit"], better=b["better"],
                suites=suites, timeout=float(b.get("timeout", 120)),
                params={k: str(v) for k, v in b.get("params", {}).items()},
                tiny_params={k: str(v) for k, v in b.get("tiny_params", {}).items()},
                requires=req, intervals=b.get("intervals"), lmbench=b.get("lmbench", ""),
                differences=b.get("differences", ""), op=b["op"],
                options={k: tuple(v) for k, v in options.items()}))
    return families, tuple(benches)

def load_catalogue() -> tuple[Benchmark, ...]:
    return load_families()[1]

def operations() -> dict[str, str]:
    """Benchmark name -> what one operation of its unit is ("fault.anon.huge": "4 KB page"), for
    the tables and plots that print units (:class:`kperfdiff.analysis.bench_compare.Comparison`)."""
    return {b.name: b.op for b in load_catalogue()}

def families() -> dict[str, Family]:
    return load_families()[0]

def get(name: str) -> Benchmark:
    for b in load_catalogue():
        if b.name == name:
            return b
    raise UsageError(f"no benchmark is named {name!r}; see kperfdiff bench --list")

def select(suite: str = "quick", only: str | None = None) -> list[Benchmark]:
    """Benchmarks of a suite, or those matching comma-separated names/patterns.

    A pattern is a shell glob (``fault.*``) or a family name (``fault``) or
    an exact name; each must match something, so a typo is an error.
    """
    cat = load_catalogue()
    if not only:
        return [b for b in cat if suite in b.suites]
    chosen: list[Benchmark] = []
    for pat in (p.strip() for p in only.split(",")):
        if not pat:
            continue
        hits = [b for b in cat if fnmatch.fnmatchcase(b.name, pat) or b.family == pat]
        if not hits:
            raise UsageError(f"no benchmark matches {pat!r}; see kperfdiff bench --list")
        chosen.extend(h for h in hits if h not in chosen)
    if not chosen:
        raise UsageError("--only names no benchmark")
    return chosen
