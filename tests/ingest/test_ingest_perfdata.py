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

from kperfdiff.core.errors import InputError
from kperfdiff.ingest import perfdata
import support

DATA = support.DATA / "perfdata"
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


def perf(*args: str, stdout_only: bool = False) -> str:
    """perf's output; ``stdout_only`` leaves out its warnings (on a machine whose kernel is not the
    one that recorded the fixture, perf says on stderr that no kallsyms with its build id was found)."""
    r = subprocess.run(["perf", *args], capture_output=True, text=True, timeout=120)
    return r.stdout if stdout_only else r.stdout + r.stderr


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
    script = perf("script", "-i", str(PLAIN), "-F", "period", stdout_only=True)
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
    from kperfdiff import native
    assert native.crate_sample_read_defect() in (True, False)
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


def test_stack_dicts_are_made_when_read_and_groups_weighed_without_them(monkeypatch):
    """A perf.data profile keeps its stacks as the reader's arrays (stack_table): the dicts of
    stacks, counts and edges are made when first read, and the weight of the samples holding any of
    a group of symbols (what diff --children needs when names merge) comes from the arrays, to the
    last bit the same as over the dicts, without making them."""
    from kperfdiff.analysis import profile_diff
    from kperfdiff.ingest.profile import StackTable
    made = []
    dicts = StackTable.dicts
    monkeypatch.setattr(StackTable, "dicts", lambda self: made.append(1) or dicts(self))
    for name in ("plain.perf.data", "arm64/proc.fork.perf.data", "group.perf.data"):
        made.clear()
        p = perfdata.load(DATA / name)
        assert p.stack_table is not None and p.has_stacks
        n = len(p.symbols)
        kernel = {i for i, s in enumerate(p.symbols) if s.kernel}
        disjoint = {"even": set(range(0, n, 2)), "odd": set(range(1, n, 2)), "none": set()}
        overlapping = {"kernel": kernel, "first": {0}, "all": set(range(n))}
        fast = [profile_diff._union_weights(p, groups) for groups in (disjoint, overlapping)]
        assert made == []
        for groups, got in zip((disjoint, overlapping), fast):
            slow = {g: sum(w for st, w in p.stacks.items() if ix & set(st)) for g, ix in groups.items()}
            exact = {}
            for g, ix in groups.items():    # the order of the stacks, the one a plain loop adds them in
                exact[g] = 0.0
                for st, w in p.stacks.items():
                    if ix & set(st):
                        exact[g] += w
            assert got == exact and got == pytest.approx(slow)
        assert fast[1]["all"] == pytest.approx(p.total_weight)
        assert sum(p.stack_counts.values()) == p.samples and p.edges and made == [1]


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


def _refusals(d: Path) -> dict[str, tuple[str, str | None, str]]:
    """Files the native reader refuses (name -> (perf.data, kallsyms, its sentence with D for `d`))."""
    def put(name, data):
        (d / name).write_bytes(data)
        return str(d / name)
    plain = PLAIN.read_bytes()
    no_attr_size = plain[:16] + bytes(8) + plain[24:]
    (d / "adir").mkdir()
    good = put("plain.perf.data", plain)
    return {
        "directory": (str(d / "adir"), None, "D/adir is a directory, not a perf.data file"),
        "missing": (str(d / "nope.perf.data"), None, "cannot open D/nope.perf.data: No such file or directory (os error 2)"),
        "empty": (put("empty.perf.data", b""), None, "D/empty.perf.data is empty; perf record wrote nothing to it"),
        "short": (put("short.perf.data", b"PERF"), None, "D/short.perf.data is not a perf.data file (too short)"),
        "version 1": (put("v1.perf.data", b"PERFFILE" + bytes(200)), None,
                      "D/v1.perf.data is a perf.data in the old version-1 format, which is not supported"),
        "magic": (put("magic.perf.data", b"NOTPERF!" + bytes(200)), None,
                  "D/magic.perf.data is not a perf.data file (it does not start with the PERFILE2 magic)"),
        "header cut": (put("cut50.perf.data", plain[:50]), None,
                       "D/cut50.perf.data is cut short inside the perf.data header (50 bytes)"),
        "cut before records": (put("cut200.perf.data", plain[:200]), None,
                               "D/cut200.perf.data is cut short before its first record (the file has 200 bytes)"),
        "damaged header": (put("attr0.perf.data", no_attr_size), None, "D/attr0.perf.data has a damaged perf.data header"),
        "no kallsyms": (good, str(d / "nope.kallsyms"),
                        "cannot read kallsyms file D/nope.kallsyms: No such file or directory (os error 2)"),
        "kallsyms garbage": (good, put("k1", b"hello world\nfoo\n"),
                             "D/k1 is not a kallsyms file: no line has the form ADDRESS TYPE NAME"),
        "kallsyms blank": (good, put("k2", b"\n\n"), "D/k2 is not a kallsyms file: it lists no symbols"),
        "kallsyms zeros": (good, put("k3", b"0000000000000000 T foo\n0000000000000000 T bar\n"),
                           "D/k3 is not a kallsyms file: every address is zero (copied without root or with "
                           "kptr_restrict set); copy it as root"),
        "vmlinux damaged": (good, put("k4", b"\x7fELF" + bytes(60)),
                            "D/k4 is a vmlinux kperfdiff cannot use: unknown class or byte order"),
    }


def test_native_refusals_are_these_sentences(tmp_path):
    """What the reader's typed errors say at the Python boundary, word for word: the sentences it
    gave when its errors were strings (checked against the native module of 716680c)."""
    from kperfdiff import native
    got, want = {}, {}
    for case, (path, kallsyms, sentence) in _refusals(tmp_path).items():
        with pytest.raises(native.PerfDataError) as e:
            native.read_perf_data(path, kallsyms=kallsyms)
        got[case], want[case] = str(e.value), sentence.replace("D/", f"{tmp_path}/")
    assert got == want


def test_missing_file():
    with pytest.raises(InputError):
        perfdata.load(DATA / "nope.perf.data")


def test_unknown_event_lists_events():
    with pytest.raises(InputError) as e:
        perfdata.load(GROUP, event="cycles")
    assert "cpu-clock" in str(e.value) and "task-clock" in str(e.value)
    assert perfdata.load(GROUP, event="task-clock").event == "task-clock"


def test_profile_load_dispatches_here():
    from kperfdiff.ingest.load import load
    p = load(PLAIN)
    assert p.event == "cpu-clock" and p.samples > 1000


# -- aggregates pinned across reader optimisations ----------------------------------------------

# Recorded with the reader as first committed (before the speed work on the native
# reader); only kernel symbols, which come from the fixtures' own kallsyms and so
# do not depend on the binaries of the machine running the tests. Per file:
# samples, total weight, kernel symbols, weight of kernel->kernel edges, and the
# six kernel symbols with the most children weight as (name, self, children).
PINNED = {
    "plain.perf.data": (3652, 913000000.0, 30, 1747000000.0, [
        ("do_syscall_64", 239000000.0, 662750000.0), ("entry_SYSCALL_64_after_hwframe", 0.0, 662750000.0),
        ("ksys_read", 13000000.0, 272750000.0), ("vfs_read", 52250000.0, 246000000.0),
        ("read_zero", 167500000.0, 167750000.0), ("ksys_write", 10500000.0, 136000000.0)]),
    "truncated.perf.data": (2155, 538750000.0, 29, 1044250000.0, [
        ("do_syscall_64", 140750000.0, 394250000.0), ("entry_SYSCALL_64_after_hwframe", 0.0, 394250000.0),
        ("ksys_read", 7750000.0, 159750000.0), ("vfs_read", 30500000.0, 144000000.0),
        ("read_zero", 98500000.0, 98500000.0), ("ksys_write", 6000000.0, 82250000.0)]),
    "arm64/fault.anon.4k.perf.data": (1869, 1874623821.0, 185, 10889668713.0, [
        ("el0t_64_sync", 0.0, 1513540581.0), ("el0t_64_sync_handler", 0.0, 1513540581.0),
        ("el0_da", 338014033.0, 1427281807.0), ("do_translation_fault", 21063189.0, 1086258747.0),
        ("do_mem_abort", 13039117.0, 1082246711.0), ("do_page_fault", 7021063.0, 1043129360.0)]),
    "arm64/proc.fork.perf.data": (31, 31093279.0, 41, 145436305.0, [
        ("el0t_64_sync", 0.0, 16048144.0), ("el0t_64_sync_handler", 0.0, 16048144.0),
        ("__handle_mm_fault", 1003009.0, 8024072.0), ("el0_da", 1003009.0, 8024072.0),
        ("do_mem_abort", 0.0, 8024072.0), ("do_page_fault", 0.0, 8024072.0)]),
    "group.perf.data:cpu-clock": (2439, 609763706.0, 27, 1171046275.0, [
        ("do_syscall_64", 157099691.0, 442260651.0), ("entry_SYSCALL_64_after_hwframe", 0.0, 442260651.0),
        ("ksys_read", 6997730.0, 178187065.0), ("vfs_read", 37746987.0, 162189821.0),
        ("read_zero", 107183242.0, 107183242.0), ("ksys_write", 8484985.0, 99495103.0)]),
    "group.perf.data:task-clock": (2439, 609764868.0, 27, 1172466875.0, [
        ("do_syscall_64", 157054481.0, 442593075.0), ("entry_SYSCALL_64_after_hwframe", 0.0, 442593075.0),
        ("ksys_read", 6997813.0, 178419082.0), ("vfs_read", 37776101.0, 162413067.0),
        ("read_zero", 107343578.0, 107343578.0), ("ksys_write", 8490627.0, 99624470.0)]),
}


def _kernel_summary(p):
    k = [i for i, s in enumerate(p.symbols) if s.kernel]
    rows = sorted(((p.symbols[i].name, float(p.self_weight[i]), float(p.children_weight[i])) for i in k),
                  key=lambda r: (-r[2], -r[1], r[0]))
    kset = set(k)
    kk = sum(w for (a, b), w in p.edges.items() if a in kset and b in kset)
    return p.samples, float(p.total_weight), len(k), float(kk), rows[:6]


@pytest.mark.parametrize("key", sorted(PINNED))
def test_aggregates_unchanged(key):
    name, _, event = key.partition(":")
    p = perfdata.load(DATA / name, event=event) if event else perfdata.load(DATA / name)
    samples, total, nkernel, kk, top = _kernel_summary(p)
    want = PINNED[key]
    assert (samples, nkernel) == (want[0], want[2])
    assert total == pytest.approx(want[1], rel=1e-12)
    assert float(np.sum(p.self_weight)) == pytest.approx(want[1], rel=1e-12)
    assert kk == pytest.approx(want[3], rel=1e-12)
    assert [r[0] for r in top] == [r[0] for r in want[4]]
    for got, exp in zip(top, want[4]):
        assert got[1:] == pytest.approx(exp[1:], rel=1e-12), got[0]
