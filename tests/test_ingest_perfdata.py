"""The native perf.data reader against perf itself, on fixtures recorded here.

Counts are checked against ``perf report --stats`` / ``perf script``; shares
against ``perf report --stdio`` run now on the same files with the recorded
kallsyms (see tests/data/perfdata/README.md for how each fixture was made).
"""
from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kperfdiff.errors import InputError
from kperfdiff.ingest import perfdata

DATA = Path(__file__).parent / "data" / "perfdata"
PLAIN = DATA / "plain.perf.data"
GROUP = DATA / "group.perf.data"
TRUNC = DATA / "truncated.perf.data"

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")


@pytest.fixture(scope="module")
def kallsyms_txt(tmp_path_factory) -> Path:
    """perf wants a plain kallsyms file; the fixture keeps it gzip'd."""
    out = tmp_path_factory.mktemp("ks") / "kallsyms"
    out.write_bytes(gzip.decompress((DATA / "kallsyms.gz").read_bytes()))
    return out


def perf(*args: str) -> str:
    r = subprocess.run(["perf", *args], capture_output=True, text=True, timeout=120)
    return r.stdout + r.stderr


def perf_report_rows(path: Path, ks: Path, *extra: str) -> dict[str, tuple[float, ...]]:
    """`perf report --stdio --sort sym` rows: kernel symbol -> percentages."""
    out = perf("report", "-i", str(path), "--kallsyms", str(ks), "--stdio", "--sort", "sym", "-g", "none", *extra)
    rows: dict[str, tuple[float, ...]] = {}
    for line in out.splitlines():
        m = re.match(r"^\s+((?:[\d.]+%\s+)+)\[k\]\s+(\S+)\s*$", line)
        if m and not m.group(2).startswith("0x"):  # unresolved addresses: perf keeps one row each
            rows[m.group(2)] = tuple(float(x) for x in re.findall(r"([\d.]+)%", m.group(1)))
    return rows


def shares(p, weights) -> dict[str, float]:
    out: dict[str, float] = {}
    for s, w in zip(p.symbols, weights):
        if s.kernel:
            out[s.name] = out.get(s.name, 0.0) + 100.0 * w / p.total_weight
    return out


# -- counts --------------------------------------------------------------------------------------

@needs_perf
def test_plain_counts_match_perf():
    p = perfdata.load(PLAIN)
    stats = perf("report", "--stats", "-i", str(PLAIN))
    n = int(re.search(r"SAMPLE events:\s+(\d+)", stats).group(1))
    assert p.samples == n
    script = perf("script", "-i", str(PLAIN), "-F", "period")
    periods = [int(x) for x in script.split()]
    assert len(periods) == n
    assert p.total_weight == pytest.approx(sum(periods))
    assert p.weight_unit == "ns" and p.event == "cpu-clock"
    assert p.has_callchains


def test_header_facts():
    p = perfdata.load(PLAIN)
    m = p.meta
    assert p.arch == "x86_64" and m["arch"] == "x86_64"
    assert m["hostname"] and m["kernel_release"] and m["perf_version"]
    assert m["nr_cpus"] >= 1
    assert m["lost_events"] == 0 and m["warnings"] == []
    assert "[kernel.kallsyms]" in m["build_ids"]
    assert m["kallsyms"].endswith("kallsyms.gz")  # found beside the file without being named
    assert m["cmdline"][:2] == ["/usr/bin/perf", "record"]


@needs_perf
def test_group_sampled_file_is_read(kallsyms_txt):
    """{cpu-clock,task-clock}:S: linux-perf-event-reader 0.10.2 mis-parses these samples."""
    from kperfdiff import _native
    assert _native.crate_sample_read_defect() in (True, False)
    profs = perfdata.load_all(GROUP)
    assert [p.event for p in profs] == ["cpu-clock", "task-clock"]
    stats = perf("report", "--stats", "-i", str(GROUP))
    total = int(re.search(r"SAMPLE events:\s+(\d+)", stats).group(1))
    per_event = dict(re.findall(r"(\S+) stats:\s+SAMPLE events:\s+(\d+)", stats))
    assert total > 1000
    for p in profs:
        assert p.samples == int(per_event[p.event])
    lines = perf("script", "-i", str(GROUP), "-F", "event,period").splitlines()
    for p in profs:
        periods = [int(l.split()[0]) for l in lines if l.strip().endswith(p.event + ":")]
        assert p.samples == len(periods)
        assert p.total_weight == pytest.approx(sum(periods))
    # The leader's shares agree with perf report for that event.
    mine = shares(profs[0], profs[0].self_weight)
    rows = perf_report_rows(GROUP, kallsyms_txt, "--no-children", "--group")
    assert rows
    top = sorted(rows.items(), key=lambda kv: -kv[1][0])[:5]
    for name, pct in top:
        assert mine.get(name, 0.0) == pytest.approx(pct[0], abs=0.02), name


# -- shares --------------------------------------------------------------------------------------

@needs_perf
def test_self_shares_match_perf_report(kallsyms_txt):
    p = perfdata.load(PLAIN, kallsyms=kallsyms_txt)
    rows = perf_report_rows(PLAIN, kallsyms_txt, "--no-children")
    mine = shares(p, p.self_weight)
    top = sorted(rows.items(), key=lambda kv: -kv[1][0])[:10]
    assert len(top) == 10
    for name, (pct,) in top:
        assert mine.get(name, 0.0) == pytest.approx(pct, abs=0.02), name


@needs_perf
def test_children_match_perf_report(kallsyms_txt):
    p = perfdata.load(PLAIN)
    rows = perf_report_rows(PLAIN, kallsyms_txt, "--children")
    mine_c = shares(p, p.children_weight)
    mine_s = shares(p, p.self_weight)
    top = sorted(rows.items(), key=lambda kv: -kv[1][0])[:10]
    for name, (children, self_) in top:
        assert mine_c.get(name, 0.0) == pytest.approx(children, abs=0.02), name
        assert mine_s.get(name, 0.0) == pytest.approx(self_, abs=0.02), name


def test_stacks_edges_consistent():
    p = perfdata.load(PLAIN)
    # Stacks carry every sample's weight; self = weight of stacks ending there.
    assert sum(p.stacks.values()) == pytest.approx(p.total_weight)
    leaf = np.zeros(len(p.symbols))
    for st, w in p.stacks.items():
        leaf[st[-1]] += w
    assert np.allclose(leaf, p.self_weight)
    assert np.all(p.children_weight >= p.self_weight - 1e-6)
    idx = {s.name: i for i, s in enumerate(p.symbols) if s.kernel}
    # A syscall path seen by perf: entry -> do_syscall_64.
    e = p.edges.get((idx["entry_SYSCALL_64_after_hwframe"], idx["do_syscall_64"]), 0.0)
    assert e > 0.3 * p.total_weight
    assert all(w <= p.total_weight + 1e-6 for w in p.edges.values())
    folded = dict(p.folded())
    assert any(k.endswith("read_zero") for k in folded)


def test_kallsyms_argument_and_missing():
    p = perfdata.load(PLAIN, kallsyms=DATA / "kallsyms.gz")
    assert any(s.name == "read_zero" for s in p.symbols)


def test_host_kallsyms_not_consulted(tmp_path):
    """Without a kallsyms beside the file, kernel frames stay [unknown] unless asked (no /proc/kallsyms)."""
    import os
    copy = tmp_path / "x.perf.data"
    shutil.copy(PLAIN, copy)
    env_home = os.environ.get("HOME")
    os.environ["HOME"] = str(tmp_path)  # no ~/.debug build-id cache either
    try:
        p = perfdata.load(copy)
    finally:
        if env_home is not None:
            os.environ["HOME"] = env_home
    kernel = [s for s in p.symbols if s.kernel]
    assert [s.name for s in kernel] == ["[unknown]"]
    assert any("kallsyms" in w for w in p.meta["warnings"])
    assert p.samples == perfdata.load(PLAIN).samples


# -- damaged input ------------------------------------------------------------------------------

def test_truncated_gives_samples_and_warning():
    p = perfdata.load(TRUNC)
    full = perfdata.load(PLAIN)
    assert 0 < p.samples < full.samples
    w = " ".join(p.meta["warnings"])
    assert "truncated" in w and f"read {p.samples} samples" in w
    assert p.meta["truncated"]
    assert any(s.name == "read_zero" for s in p.symbols)


@pytest.mark.parametrize("name", ["garbage.perf.data", "empty.perf.data"])
def test_bad_files_one_sentence(name):
    with pytest.raises(InputError) as e:
        perfdata.load(DATA / name)
    msg = str(e.value)
    assert name in msg and "\n" not in msg and msg.count(". ") == 0


def test_missing_file():
    with pytest.raises(InputError):
        perfdata.load(DATA / "nope.perf.data")


def test_unknown_event_lists_events():
    with pytest.raises(InputError) as e:
        perfdata.load(GROUP, event="cycles")
    assert "cpu-clock" in str(e.value) and "task-clock" in str(e.value)
    assert perfdata.load(GROUP, event="task-clock").event == "task-clock"


def test_profile_load_dispatches_here():
    from kperfdiff.profile import load
    p = load(PLAIN)
    assert p.event == "cpu-clock" and p.samples > 1000
