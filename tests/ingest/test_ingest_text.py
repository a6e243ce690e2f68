"""Text inputs (perf script, perf report --stdio, folded) recorded on this
machine: the three forms of one recording give the same profile."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.ingest import text
from kperfdiff.ingest.load import load, sniff
from kperfdiff.symbols.normalise import normalise
import support

DATA = support.DATA / "text"


def report_shares(path: Path, column: int = 0) -> dict[tuple[bool, str], float]:
    """Shares straight from perf report text, independently of kperfdiff:
    every `NN.NN%  [k] name` row (column 0 = first percentage)."""
    out: dict[tuple[bool, str], float] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s+((?:\d+\.\d+%\s+)+)\[([k.])\]\s+(.*\S)\s*$", line)
        if m:
            pcts = re.findall(r"(\d+\.\d+)%", m.group(1))
            key = (m.group(2) == "k", m.group(3))
            out[key] = out.get(key, 0.0) + float(pcts[column])
    return out


def shares(prof, children=False) -> dict[tuple[bool, str], float]:
    w = prof.children_weight if children else prof.self_weight
    out: dict = {}
    for s, v in zip(prof.symbols, w):
        out[(s.kernel, s.name)] = out.get((s.kernel, s.name), 0.0) + v / prof.total_weight * 100
    return out


def top_kernel(sh: dict, n: int) -> list[tuple[str, float]]:
    rows = sorted(((k[1], v) for k, v in sh.items() if k[0]), key=lambda kv: (-round(kv[1], 2), kv[0]))
    return rows[:n]


@pytest.mark.parametrize("name", ["forkexec", "mixed"])
def test_sniff(name):
    assert sniff(DATA / f"{name}.script") == "perf-script"
    assert sniff(DATA / f"{name}.report") == "perf-report"
    assert sniff(DATA / f"{name}.children.report") == "perf-report"
    assert sniff(DATA / f"{name}.folded") == "folded"


@pytest.mark.parametrize("name", ["forkexec", "mixed"])
def test_script_report_folded_same_ranking(name):
    script = load(DATA / f"{name}.script")
    report = load(DATA / f"{name}.report")
    folded = load(DATA / f"{name}.folded")
    dsosym = load(DATA / f"{name}.dsosym.report")
    assert script.event == report.event == "cpu-clock"
    assert script.weight_unit == "ns"          # cpu-clock periods
    assert script.samples == report.samples == folded.samples
    s, r, f, d = shares(script), shares(report), shares(folded), shares(dsosym)
    top = top_kernel(s, 12)
    assert [n for n, _ in top] == [n for n, _ in top_kernel(r, 12)]
    assert [n for n, _ in top] == [n for n, _ in top_kernel(f, 12)]
    for sym, v in top:
        assert abs(r[(True, sym)] - v) <= 0.006      # report rounds to 0.01%
        assert abs(d[(True, sym)] - v) <= 0.006
        assert abs(f[(True, sym)] - v) <= 1e-9       # fixed period: counts = periods
    # and the report matches independent parsing of its own text
    assert r == pytest.approx(report_shares(DATA / f"{name}.report"), abs=1e-9)


def test_children_match_perf_report_children():
    script = load(DATA / "forkexec.script")
    expected = report_shares(DATA / "forkexec.children.report", column=0)
    expected_self = report_shares(DATA / "forkexec.children.report", column=1)
    got = shares(script, children=True)
    got_self = shares(script)
    for key, v in sorted(expected.items(), key=lambda kv: -kv[1])[:25]:
        if not key[0] or re.fullmatch(r"(0x)?[0-9a-f]+", key[1]):
            continue   # perf report names unresolved addresses by number, perf script "[unknown]"
        assert abs(got[key] - v) <= 0.006, key
        assert abs(got_self.get(key, 0.0) - expected_self[key]) <= 0.006, key
    rep = load(DATA / "forkexec.children.report")
    assert rep.meta["has_children"] is True
    assert shares(rep, children=True)[(True, "do_syscall_64")] == pytest.approx(51.82)


def test_children_counted_once_per_sample():
    prof = load(DATA / "forkexec.script")
    # No symbol can be on more samples than there are.
    assert prof.children_weight.max() <= prof.total_weight + 1e-6
    assert np.all(prof.children_weight >= prof.self_weight - 1e-6)
    assert sum(prof.stacks.values()) == pytest.approx(prof.total_weight)
    for (a, b), w in prof.edges.items():
        assert w <= min(prof.children_weight[a], prof.children_weight[b]) + 1e-6


def test_report_with_call_graph_and_default_sort():
    plain = shares(load(DATA / "forkexec.report"))
    withcg = load(DATA / "forkexec.callgraph.report")
    assert not withcg.meta.get("warnings")
    assert shares(withcg) == pytest.approx(plain)
    default = load(DATA / "mixed.default.report")   # comm,dso,sym with children and call graphs
    assert not default.meta.get("warnings")
    flat = shares(load(DATA / "mixed.report"))
    d = shares(default)
    for key in [k for k, v in sorted(flat.items(), key=lambda kv: -kv[1])[:10] if k[0]]:
        assert abs(d[key] - flat[key]) <= 0.02     # several rows (one per comm), each rounded


def test_script_without_callchains_and_period():
    with_period = load(DATA / "flat.script")
    no_period = load(DATA / "flat.noperiod.script")
    report = report_shares(DATA / "flat.report")
    assert with_period.weight_unit == "ns"
    assert no_period.weight_unit == "samples"
    assert no_period.total_weight == no_period.samples == 368
    assert not with_period.has_callchains
    s = shares(with_period)
    assert s == pytest.approx(shares(no_period))     # fixed period
    assert abs(s[(True, "read_zero")] - report[(True, "read_zero")]) <= 0.006


def test_script_without_dso_detects_kernel_by_address():
    p = load(DATA / "mixed.nodso.script")
    full = load(DATA / "mixed.script")
    assert shares(p) .keys() >= {k for k in shares(full) if k[0]}
    assert shares(p)[(True, "chacha_permute")] == pytest.approx(shares(full)[(True, "chacha_permute")])


def test_multiple_events():
    a = load(DATA / "twoevents.script")
    assert a.event == "cpu-clock"
    assert a.meta["events"] == ["cpu-clock", "task-clock"]
    b = load(DATA / "twoevents.script", event="task-clock")
    assert b.event == "task-clock" and b.samples == 79
    r = load(DATA / "twoevents.report", event="task-clock")
    assert r.event == "task-clock"
    with pytest.raises(InputError, match="cycles.*cpu-clock, task-clock"):
        load(DATA / "twoevents.script", event="cycles")
    with pytest.raises(InputError, match="cycles"):
        load(DATA / "twoevents.report", event="cycles")


def test_folded_kernel_heuristic_matches_annotations():
    marked = load(DATA / "forkexec.folded")
    plain = load(DATA / "forkexec.plain.folded")
    assert marked.meta["kernel_frames"] == "annotated"
    assert plain.meta["kernel_frames"] == "entry"
    km = {k: v for k, v in shares(marked).items() if k[0]}
    kp = {k: v for k, v in shares(plain).items() if k[0]}
    assert kp == pytest.approx(km)
    none = text.load(DATA / "forkexec.plain.folded", "folded", kernel_frames="none")
    assert not any(s.kernel for s in none.symbols)


def test_truncated_and_garbled_lines_are_counted(tmp_path):
    src = (DATA / "forkexec.script").read_text().splitlines(keepends=True)
    cut = "".join(src[:200]) + src[200][:7] + "\n\x01garbage line\n" + "".join(src[201:260])
    p = tmp_path / "cut.script"
    p.write_text(cut)
    prof = load(p)
    assert prof.samples > 5
    assert any("skipped" in w for w in prof.meta["warnings"])
    f = tmp_path / "bad.folded"
    f.write_text("a;b 3\nthis line has no count\na;c 2\n")
    prof = load(f)
    assert prof.samples == 5
    assert "skipped 1 unreadable line" in prof.meta["warnings"][0]


@pytest.mark.parametrize("content,msg", [
    ("hello world\nthis is not a profile\n", "not a profile"),
    ("   \n\n", "blank"),
    ("# only\n# comments\n", "comment"),
])
def test_not_a_profile(tmp_path, content, msg):
    p = tmp_path / "x.txt"
    p.write_text(content)
    with pytest.raises(InputError, match=msg) as e:
        load(p)
    assert str(p) in str(e.value)


def test_differential_folded_rejected(tmp_path):
    p = tmp_path / "d.folded"
    p.write_text("a;b 3 4\na;c 2 0\n")
    with pytest.raises(InputError, match="differential"):
        load(p)


@pytest.mark.parametrize("raw,expected", [
    ("foo.isra.0", "foo"),
    ("foo.constprop.0", "foo"),
    ("foo.constprop.0.isra.0", "foo"),
    ("foo.isra.0.cold", "foo"),
    ("foo.part.3", "foo"),
    ("foo.cold", "foo"),
    ("foo.cold.12", "foo"),
    ("foo.llvm.123456789", "foo"),
    ("foo.lto_priv.0", "foo"),
    ("__pfx_foo", "foo"),
    ("__cfi_foo.constprop.1", "foo"),
    ("__pi_clear_page", "clear_page"),
    ("do_execveat_common.isra.0", "do_execveat_common"),
    ("finish_task_switch.isra.0", "finish_task_switch"),
    # kept verbatim
    ("foo.llvm.abc", "foo.llvm.abc"),
    ("foo.isra", "foo.isra"),
    ("foo.cold.x", "foo.cold.x"),
    ("__pfx_", "__pfx_"),
    (".cold", ".cold"),
    ("[unknown]", "[unknown]"),
    ("0xffffffff81234567", "0xffffffff81234567"),
    ("std::vector<int>::push_back(int const&)", "std::vector<int>::push_back(int const&)"),
    ("fopen@@GLIBC_2.2.5", "fopen@@GLIBC_2.2.5"),
    ("__x64_sys_read", "__x64_sys_read"),
    ("Foo.ISRA.0", "Foo.ISRA.0"),
])
def test_normalise(raw, expected):
    assert normalise(raw) == expected


def test_group_report_one_column_per_event():
    # perf report --children of tests/data/perfdata/group.perf.data ({cpu-clock,task-clock}:S)
    p = load(DATA / "group.children.report")
    assert p.meta["events"] == ["cpu-clock", "task-clock"]
    s, c = shares(p), shares(p, children=True)
    assert c[(True, "do_syscall_64")] == pytest.approx(72.53)
    assert s[(True, "do_syscall_64")] == pytest.approx(25.76)
    t = load(DATA / "group.children.report", event="task-clock")
    assert shares(t, children=True)[(True, "do_syscall_64")] == pytest.approx(72.58)
    assert shares(t)[(True, "read_zero")] == pytest.approx(17.60)
