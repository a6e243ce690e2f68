"""`kperfdiff diff` end to end through the installed command."""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import assert_one_sentence_error, run_cli

DATA = Path(__file__).resolve().parent / "data"
A = DATA / "text" / "forkexec.script"
B = DATA / "text" / "mixed.script"


def test_diff_three_sections():
    p = run_cli("diff", A, B, check=0)
    lines = p.stdout.splitlines()
    assert lines[0] == ">> Top 5 candidates among common kernel functions"
    assert lines[1] == "%diff | symbol | forkexec | mixed"
    assert ">> Top 5 candidates among forkexec specific kernel functions" in lines
    assert ">> Top 5 candidates among mixed specific kernel functions" in lines
    assert sum(1 for ln in lines if ln == "-----") == 3


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
    assert p.stdout.startswith("### Top 5 candidates among common kernel functions (children)")
    ET.parse(svg)
    for suffix in ("a.folded", "b.folded", "diff.folded"):
        assert (tmp_path / f"st.{suffix}").stat().st_size > 0
    p = run_cli("diff", A, B, "--format", "csv", check=0)
    assert p.stdout.splitlines()[0].startswith("section,symbol,")
    p = run_cli("diff", A, B, "--per-op", "--ops", "22,7", "--scope", "all", check=0)
    assert p.stdout.splitlines()[1].startswith("ns/op diff | symbol")


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
