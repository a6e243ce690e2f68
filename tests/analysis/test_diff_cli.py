"""`kperfdiff diff` end to end through the installed command."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from support import DATA, KPERFDIFF, ROOT, assert_one_sentence_error, run_cli

A = DATA / "text" / "forkexec.script"
B = DATA / "text" / "mixed.script"


def test_diff_three_sections():
    p = run_cli("diff", A, B, check=0)
    lines = p.stdout.splitlines()
    # a line per side first: file, event, samples, kernel share, symbols (text input: as named in it)
    assert lines[0] == ("A (forkexec): forkexec.script, cpu-clock, 274 samples, 78% kernel, 22% user, "
                        "symbols: as named in the file"), lines[0]
    assert lines[1].startswith("B (mixed): mixed.script, ") and lines[1].endswith("symbols: as named in the file")
    assert lines[3] == "Common kernel functions: top 10 of 75, ranked by the size of the delta (% of all samples)"
    assert lines[4].split() == ["forkexec", "mixed", "delta", "B/A", "symbol"]
    assert "Kernel functions only in forkexec: top 10 of 68 (% of all samples)" in lines
    assert "Kernel functions only in mixed: top 10 of 41 (% of all samples)" in lines
    assert lines[-1].startswith("columns: forkexec (A), mixed (B)")
    assert "method:" not in p.stdout
    explained = run_cli("diff", A, B, "--explain", check=0).stdout.splitlines()
    assert explained[:-1] == lines and explained[-1].startswith("method: share = weight / all samples")


def test_diff_mixed_forms_and_repeats(tmp_path):
    # report vs folded vs script of the same recordings, three of each per side
    a = ",".join(str(DATA / "text" / f"forkexec.{x}") for x in ("script", "report", "folded"))
    b = ",".join(str(DATA / "text" / f"mixed.{x}") for x in ("script", "report", "folded"))
    p = run_cli("diff", a, b, "--format", "json", "--top", "3", "--labels", "fork,mixed", check=0)
    doc = json.loads(p.stdout)
    assert doc["version"] == 1 and doc["labels"] == {"a": "fork", "b": "mixed"}
    assert doc["significance_tested"] is True
    assert len(doc["common"][0]["shares_a"]) == 3
    assert doc["only_b"][0]["symbol"] == "chacha_permute"


def test_diff_outputs(tmp_path):
    svg = tmp_path / "d.svg"
    prefix = tmp_path / "st"
    p = run_cli("diff", A, B, "--children", "--flamegraph", svg, "--folded", prefix, "--format", "markdown",
                check=0)
    assert p.stdout.startswith("- A (forkexec): forkexec.script, cpu-clock, 274 samples")
    assert "\n- B (mixed): mixed.script, " in p.stdout
    assert "\n\n### Common kernel functions (children): top 10 of " in p.stdout
    assert "\n| forkexec | mixed | delta | B/A | symbol |\n" in p.stdout
    ET.parse(svg)
    for suffix in ("a.folded", "b.folded", "diff.folded"):
        assert (tmp_path / f"st.{suffix}").stat().st_size > 0
    p = run_cli("diff", A, B, "--format", "csv", check=0)
    assert p.stdout.splitlines()[0].startswith("section,symbol,")
    p = run_cli("diff", A, B, "--per-op", "--ops", "22,7", "--scope", "all", check=0)
    assert p.stdout.splitlines()[3].startswith("Common functions (ns per operation): top 10 of ")


@pytest.mark.parametrize("make,args", [
    ("missing", []),
    ("empty", []),
    ("garbage", []),
    ("text", []),
    (None, ["--scope", "kernal"]),
    (None, ["--labels", "onlyone"]),
    (None, ["--event", "cycles"]),
    (None, ["--per-op"]),
    (None, ["--map", "/nonexistent/map.toml"]),
    (None, ["--top", "x"]),
])
def test_bad_inputs_one_sentence(tmp_path, make, args):
    a = A
    if make == "missing":
        a = tmp_path / "nope.data"
    elif make == "empty":
        a = tmp_path / "empty.script"
        a.write_bytes(b"")
    elif make == "garbage":
        a = tmp_path / "garbage.bin"
        a.write_bytes(os.urandom(4096) + b"\0\0")
    elif make == "text":
        a = tmp_path / "notes.txt"
        a.write_text("dear diary\n")
    p = run_cli("diff", a, B, *args)
    assert_one_sentence_error(p)
    if make:
        assert str(a) in p.stderr


def test_store_references(tmp_path):
    """RUN[:benchmark] sides: files, labels, arch and ops come from the store."""
    from kperfdiff.store import Store
    db = tmp_path / "k.db"
    st = Store.open(db)
    ids = []
    for label, arch, name, ops in (("base", "arm64", "forkexec", 22), ("patched", "x86_64", "mixed", 7)):
        mid = st.add_machine({"arch": arch, "cpu_model": f"test {arch}", "cpus": 2, "kernel_release": "6.18"})
        run = st.start_run(label=label, machine_id=mid)
        for rep in range(2):
            st.add_profile(run_id=run.id, result_id=None, benchmark="proc.fork", rep=rep,
                           path=str(DATA / "text" / f"{name}.script"), kallsyms=None, event="cpu-clock",
                           samples=None, cpu_time_ns=None, ops=ops)
        st.finish_run(run.id, "complete")
        ids.append(run.id)
    p = run_cli("--store", db, "diff", f"{ids[0]}:proc.fork", "patched", "--per-op", "--format", "json", check=0)
    doc = json.loads(p.stdout)
    assert doc["labels"] == {"a": "arm64", "b": "x86_64"}
    assert len(doc["sides"]["a"]["sources"]) == 2
    # (both scripts are x86 recordings; stored as arm64 and x86_64 runs, the syscall entry role groups them)
    row = next(r for r in doc["common"] if r["symbol"] == "[syscall entry]")
    # share x CPU time (cpu-clock periods) / ops, ops from the store
    assert row["value_a"] == pytest.approx(row["shares_a"][0] / 100 * 13_700_000 / 22)
    p = run_cli("--store", db, "diff", "nosuchrun", "patched")
    assert_one_sentence_error(p)
    assert "nosuchrun" in p.stderr


def _inferno(name: str) -> str | None:
    local = ROOT / ".tools" / "bin" / name
    return shutil.which(name) or (str(local) if local.exists() else None)


def _folded(path: Path) -> dict[str, list[int]]:
    out = {}
    for ln in path.read_text().splitlines():
        parts = ln.rsplit(" ", 2) if path.name.endswith(".diff.folded") else ln.rsplit(" ", 1)
        out[parts[0]] = [int(x) for x in parts[1:]]
    return out


def test_folded_counts_samples_under_their_process(tmp_path):
    """--folded counts samples by default (ns with --unit ns), each stack under its process name."""
    from kperfdiff.ingest.load import load
    a, b = load(A), load(B)
    run_cli("diff", A, B, "--scope", "all", "--folded", tmp_path / "s", check=0)
    fa = _folded(tmp_path / "s.a.folded")
    assert sum(v[0] for v in fa.values()) == a.samples
    assert {k.split(";", 1)[0] for k in fa} == {comm for comm, _ in a.process_stacks}
    run_cli("diff", A, B, "--scope", "all", "--folded", tmp_path / "n", "--unit", "ns", check=0)
    assert sum(v[0] for v in _folded(tmp_path / "n.b.folded").values()) == pytest.approx(b.total_weight, rel=1e-3)
    # perf.data sides: the processes their COMM and FORK records name, as perf script does
    run_cli("diff", DATA / "perfdata" / "comm" / "comm.perf.data", DATA / "perfdata" / "plain.perf.data", "--scope",
            "all", "--folded", tmp_path / "pd", check=0)
    roots = [Counter(), Counter()]
    for r, side in zip(roots, "ab"):
        for stack, (n,) in _folded(tmp_path / f"pd.{side}.folded").items():
            r[stack.split(";", 1)[0]] += n
    assert roots == [{"sh": 41, "renamed": 35, "dd": 25, "seq": 20, "perl": 1}, {"dd": 3652}]
    p = run_cli("diff", DATA / "diff" / "arm64.folded", DATA / "diff" / "x86_64.folded", "--folded",
                tmp_path / "x", "--unit", "ns")
    assert_one_sentence_error(p)
    assert "not nanoseconds; use --unit samples" in p.stderr


def test_diff_folded_compares_shares(tmp_path):
    """diff.folded scales A to B's total (difffolded.pl -n): a function whose count stayed while the
    total grew has a smaller share, and inferno colours it blue."""
    (tmp_path / "a.folded").write_text("app;x_[k] 100\napp;y_[k] 100\n")
    (tmp_path / "b.folded").write_text("app;x_[k] 300\napp;y_[k] 100\n")
    run_cli("diff", tmp_path / "a.folded", tmp_path / "b.folded", "--scope", "all", "--folded", tmp_path / "st",
            check=0)
    diff = _folded(tmp_path / "st.diff.folded")
    assert diff == {"app;x_[k]": [200, 300], "app;y_[k]": [200, 100]}
    assert "scaled to B's total" in run_cli("diff", "--help", check=0).stdout.replace("\n", " ").replace("  ", " ")
    tool = _inferno("inferno-diff-folded")
    if tool is None:
        pytest.skip("inferno is not installed (make setup installs it into .tools/bin)")
    p = subprocess.run([tool, "-n", str(tmp_path / "a.folded"), str(tmp_path / "b.folded")], capture_output=True,
                       text=True, timeout=60, check=True)
    assert sorted(p.stdout.splitlines()) == sorted((tmp_path / "st.diff.folded").read_text().splitlines())
    svg = subprocess.run([_inferno("inferno-flamegraph"), str(tmp_path / "st.diff.folded")], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    fills = dict(re.findall(r"<title>([xy]) \([^<]*</title><rect [^>]*fill=\"(rgb\([^\"]*\))\"", svg))
    red, blue = (tuple(map(int, re.findall(r"\d+", fills[k]))) for k in ("x", "y"))
    assert red[0] > red[2] and blue[2] > blue[0], fills


def test_the_process_ends_at_once_with_every_output_written(tmp_path):
    """A diff of two files ends its process as soon as its outputs are written (commands.cli): what
    reaches a pipe is whole, the same as the -o file and a flame graph written beside it, and a reader
    that stops after a few bytes gets no traceback and exit status 0."""
    args = ["diff", A, B, "--top", "100000", "--format", "json"]
    piped = run_cli(*args, "--flamegraph", tmp_path / "d.svg", check=0)
    run_cli(*args, "-o", tmp_path / "d.json", check=0)
    assert len(piped.stdout) > 65536                       # more than a pipe holds at once
    assert piped.stdout == (tmp_path / "d.json").read_text()
    assert json.loads(piped.stdout)["common"]
    assert (tmp_path / "d.svg").read_text().rstrip().endswith("</svg>")
    p = subprocess.Popen([str(KPERFDIFF), *map(str, args)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert p.stdout.read(10) == b'{\n  "versi'
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=60) == 0 and "Traceback" not in err and "Exception" not in err, err
