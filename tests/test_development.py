"""The walk-throughs of docs/development.md hold: each is done as the page gives it, in a copy of the
package under tmp_path. The page marks each code block a walk-through uses with an HTML comment
(test_docs.STEP): a new file is written where the comment says, a change is applied as `git apply`
applies it (each hunk's old lines must be found exactly once in its file), and command lines are run
by sh, `kperfdiff` being this interpreter on the copy. Then each test checks what the commands
printed and stored: the toy benchmark family built, run, stored and shown; a benchmark run on the
toy target, stored and shown; runs listed in the toy format; the toy stage (coverage) within the import rules,
the architecture page's table saying so, and its command answering.

The copies keep their stores under tmp_path and build their workers into a cache of their own
(KPERFDIFF_CACHE, shared by the tests of this module): nothing depends on HOME."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import ROOT
from store.test_history import HOST, populate
from test_docs import STEP, import_rules, written
from kperfdiff.store import Store

PAGE = ROOT / "docs" / "development.md"
SRC = ROOT / "src" / "kperfdiff"


@dataclass
class Step:
    action: str          # write, apply or run
    path: str | None     # the file a write step makes, relative to the repository
    body: str


def steps(name: str) -> list[Step]:
    """The steps of one walk-through of the page, in the page's order."""
    found = [Step(m["action"], m["path"], m["body"]) for m in STEP.finditer(PAGE.read_text()) if m["name"] == name]
    assert found, f"docs/development.md has no walk-through {name!r}"
    return found


def apply_diff(diff: str, root: Path) -> None:
    """Apply a change as `git diff` prints it (``--- a/PATH``, ``+++ b/PATH``, hunks) to the files
    under ``root``, copying a file the copy lacks from the repository first. Each hunk's old lines
    (context and removed) must be found exactly once, as whole lines, and become its new lines
    (context and added); the line numbers of the hunk headers are not used."""
    files = re.split(r"^--- a/\S+\n\+\+\+ b/(\S+)\n", diff, flags=re.M)
    assert not files[0].strip() and len(files) > 1, f"not a change as git diff prints it:\n{diff[:300]}"
    for rel, hunks in zip(files[1::2], files[2::2]):
        path = root / rel
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, path)
        text = path.read_text()
        for hunk in re.split(r"^@@ [^\n]*\n", hunks, flags=re.M)[1:]:
            old, new = [], []
            for line in hunk.splitlines():
                tag, rest = line[:1], line[1:]
                if tag in (" ", ""):        # a blank context line may have lost its space
                    old.append(rest)
                    new.append(rest)
                elif tag == "-":
                    old.append(rest)
                elif tag == "+":
                    new.append(rest)
            before, after = "".join(f"{ln}\n" for ln in old), "".join(f"{ln}\n" for ln in new)
            at = [m.start() for m in re.finditer(re.escape(before), text) if m.start() == 0 or text[m.start() - 1] == "\n"]
            assert len(at) == 1, f"{rel}: a hunk of the page's change is found {len(at)} times, not once:\n{before}"
            text = text[:at[0]] + after + text[at[0] + len(before):]
        path.write_text(text)


class Copy:
    """A copy of the package (``src/kperfdiff``) under ``tmp``, and `kperfdiff` run on it: this
    interpreter with the copy first on its path, a store in ``tmp/home``, workers built into ``cache``."""

    def __init__(self, tmp: Path, cache: Path):
        self.root = tmp / "tree"
        shutil.copytree(SRC, self.root / "src" / "kperfdiff", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self.home = tmp / "home"
        self.home.mkdir()
        bin_dir = tmp / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "kperfdiff"
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m kperfdiff "$@"\n')
        wrapper.chmod(0o755)
        self.env = {**os.environ, "PYTHONPATH": str(self.root / "src"), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    "KPERFDIFF_HOME": str(self.home), "KPERFDIFF_STORE": "", "KPERFDIFF_CACHE": str(cache)}

    def sh(self, line: str) -> str:
        p = subprocess.run(["sh", "-c", line], cwd=self.root, env=self.env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=300)
        assert p.returncode == 0, f"`{line}` exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
        return p.stdout

    def perform(self, name: str) -> list[str]:
        """Do the walk-through ``name``; what each of its command lines printed, in order."""
        printed = []
        for step in steps(name):
            if step.action == "write":
                path = self.root / step.path
                assert not path.exists(), f"{step.path} is there already: the walk-through would overwrite it"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(step.body)
            elif step.action == "apply":
                apply_diff(step.body, self.root)
            else:
                printed += [self.sh(line) for line in step.body.splitlines() if line.strip()]
        return printed

    def store(self) -> Store:
        return Store.open(self.home / "kperfdiff.db")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One build cache for this module's copies (keyed by content: they share kpd-run and kpd-hello)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def copy(tmp_path, cache) -> Copy:
    return Copy(tmp_path, cache)


def test_a_benchmark_family_is_added_built_run_and_shown(copy, cache):
    listed, measured, shown = copy.perform("family")
    assert re.search(r"^toy\.uname +ns per uname\(\) call +lower +full +uname\(\): ", listed, re.M), listed
    assert re.search(r"^toy\.uname +1 +[\d.]+ +[nµm]?s per uname\(\) call ", measured, re.M), measured
    assert re.search(r"^run 1 \(toy-first\): complete", shown, re.M) and "toy.uname" in shown, shown
    assert len(list((cache / "bin").rglob("kpd-toy"))) == 1
    [r] = json.loads(copy.sh("kperfdiff show toy-first --format json"))["results"]
    assert (r["benchmark"], r["status"], r["unit"], r["better"], r["reps"]) == ("toy.uname", "ok", "ns/op", "lower", 3)
    assert len(r["intervals"]) == 3 * 11 and all(i["value"] > 0 for i in r["intervals"])


def test_a_target_is_added_and_a_benchmark_runs_on_it(copy):
    checked, measured, shown = copy.perform("target")
    assert re.search(rf"^  kernel_release +{re.escape(os.uname().release)}$", checked, re.M), checked
    assert re.search(r"^syscall\.null +1 +[\d.]+ +[nµm]?s per getppid\(\) call ", measured, re.M), measured
    assert re.search(r"^run 1 \(on-shell\) on shell: complete", shown, re.M), shown
    doc = json.loads(copy.sh("kperfdiff show on-shell --format json"))
    assert doc["run"]["target"] == "shell" and doc["machine"]["target"] == "shell"
    [r] = doc["results"]
    assert (r["benchmark"], r["status"], r["reps"]) == ("syscall.null", "ok", 3) and r["monitors"]


def test_an_output_format_is_registered_and_rendered(copy):
    s = copy.store()
    populate(s, [100.0, 90.0])
    s.conn.close()
    listed, helped = copy.perform("format")
    rows = [ln.split("\t") for ln in listed.splitlines()]
    assert rows[0] == ["run", "label", "state", "target", "started", "command"]
    assert [r[:4] for r in rows[1:]] == [["1", "r0", "complete", "local"], ["2", "r1", "complete", "local"]]
    assert "--format {text,markdown,json,csv,tsv}" in helped
    assert "--format {text,markdown,json,csv}" in copy.sh("kperfdiff show --help")    # only where it was added


def _architecture(root: Path):
    """The copy's tests/support/architecture.py (the rules, as the walk-through changed them), loaded."""
    spec = importlib.util.spec_from_file_location("copied_architecture", root / "tests" / "support" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_a_stage_is_added_within_the_import_rules(copy):
    s = copy.store()
    run = s.start_run(label="c2", machine_id=s.add_machine(HOST), options={"commit": "2222222"})
    s.add_result(run.id, benchmark="syscall.null", params={}, copies=1, status="ok", reason=None, unit="ns/op",
                 better="lower", summary={"n": 3}, raw=[(0, 0, k, 100.0, 100, 1000) for k in range(3)])
    s.finish_run(run.id, "complete")
    s.conn.close()
    helped, unmeasured = copy.perform("stage")
    assert "BENCHMARK" in helped and "COMMIT" in helped
    assert unmeasured == "1111111\n3333333\n"

    arch = _architecture(copy.root)
    mods = arch.load_modules(copy.root)
    assert {"kperfdiff.coverage", "kperfdiff.commands.coverage"} <= set(mods)
    assert arch.misplaced_modules(mods) == [] and arch.stage_violations(mods) == []
    assert arch.hidden_imports(mods) == [] and arch.private_imports(mods) == []
    assert arch.cycles(arch.graph(mods)) == [] and arch.cycles(arch.package_graph(mods)) == []
    # the dispatcher loads the command's module by name, and tests/test_architecture.py lists it
    loaded = {i.target for i in mods["kperfdiff.commands"].imports if i.by_name}
    listed = re.search(r"for m in\s*\((.*?)\)\}", (copy.root / "tests" / "test_architecture.py").read_text(), re.S)
    assert "kperfdiff.commands.coverage" in loaded
    assert {f"kperfdiff.commands.{m}" for m in re.findall(r'"(\w+)"', listed[1])} == loaded
    # the architecture page states the changed rules, and has a section on the new folder
    page = written(copy.root / "docs" / "architecture.md")
    assert import_rules(page) == {stage: set(allowed) - {stage, "core"} for stage, allowed in arch.ALLOWED.items()}
    assert re.search(r"^### `coverage/`$", page, re.M)
    # and the rules hold the new stage to them
    with open(copy.root / "src" / "kperfdiff" / "coverage" / "__init__.py", "a") as f:
        f.write("from kperfdiff.measure import session  # noqa: F401\n")
    assert arch.stage_violations(arch.load_modules(copy.root)) == [
        "coverage (coverage) imports kperfdiff.measure.session (measure)"]


def test_apply_diff_changes_whole_lines_found_exactly_once(tmp_path):
    f = tmp_path / "f.txt"

    def change(hunk):
        apply_diff(f"--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n{hunk}", tmp_path)
    f.write_text("ab\nb\nc\nc\n")
    change(" ab\n-b\n+B\n")
    assert f.read_text() == "ab\nB\nc\nc\n"
    for hunk in ("-x\n", "-c\n", "-b\n"):    # not there; there twice; only as the tail of a line ("ab")
        with pytest.raises(AssertionError, match="times, not once"):
            change(hunk)
