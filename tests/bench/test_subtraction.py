"""Subtraction benchmarks (ctx.*, signal.*, fault.file subtract an overhead they measure): a latency
at or below zero is never reported; the result says it is not resolvable, and bench, show and
compare carry that text instead of a number."""
import json
import math
import stat
import textwrap
import time

import pytest

from support import run_cli
from kperfdiff.analysis import bench_compare as cm
from kperfdiff.core import stats
from kperfdiff import store as st
from kperfdiff.bench import catalogue, worker
from kperfdiff.bench.measurement import aggregate, store_measurement
from kperfdiff.core.records import group_results, unresolvable
from kperfdiff.render.bench import group_summary


def _ctx():
    return catalogue.select("full", "ctx.2p.64k")[0]


def _output(values, overhead=1500.0, ops=1000):
    """A worker's record of intervals ``values`` (ns/op after subtracting ``overhead``), as the C
    harness prints it: interval <ns/op - overhead> <ops> <ns>."""
    lines = ["kpd 1 ctx.2p.64k", "unit ns/op lower", f"overhead {overhead:g}"]
    lines += [f"interval {v:g} {ops} {int((v + overhead) * ops)}" for v in values]
    lines.append(f"end {ops * len(values)} 1000 2000")
    return worker.parse_output("\n".join(lines) + "\n", "ctx.2p.64k")


def _aggregate(*reps):
    return aggregate(_ctx(), [(r, outs, {}, 0.1) for r, outs in enumerate(reps)], time.time())


@pytest.mark.parametrize("values", [
    [-300.0, -200.0, -250.0],              # the overhead is larger than every timing
    [11540.0, -1670.0, 11000.0],           # one batch no longer than the overhead: ctx.2p.64k's -1670 ns/op
    [0.0, 5.0, 7.0],                       # exactly the overhead: zero is no latency either
])
def test_a_difference_at_or_below_zero_is_not_resolvable(values):
    m = _aggregate([_output(values)])
    assert m.status == "failed" and unresolvable(m.reason), m.reason
    assert m.reason.startswith("not resolvable: repetition 1: ")
    assert f"of {len(values)} intervals at or below zero after subtracting the overhead of 1500 ns/op (lowest" in m.reason
    assert m.summary is None and m.raw == []            # no number is stored for it


def test_a_resolvable_difference_and_a_later_repetition():
    ok = _aggregate([_output([300.0, 310.0, 305.0])])
    assert ok.status == "ok" and ok.summary["median"] == 305.0 and ok.overhead == 1500.0
    # a later repetition that falls below zero makes the whole result not resolvable, naming it
    m = _aggregate([_output([300.0, 310.0, 305.0])], [_output([20.0, -130.0, 15.0]), _output([40.0, 50.0, 45.0])])
    assert m.status == "failed" and m.reason.startswith("not resolvable: repetition 2, copy 1: 1 of 3 intervals")
    assert "(lowest -130 ns/op)" in m.reason
    assert stats.unresolved_difference([1.0, 2.0], 10.0) is None


def test_a_real_worker_below_its_overhead_is_not_resolvable(tmp_path):
    """A worker process (run through kpd-run like every benchmark) whose batches took less than
    the overhead it announced: the path from its output to the stored result says so."""
    w = tmp_path / "w.sh"
    w.write_text("#!/bin/sh\n" + textwrap.dedent("""\
        echo "kpd 1 $1"
        echo "unit ns/op lower"
        echo "overhead 1500"
        echo "interval 200 1000 1700000"
        echo "interval -130 1000 1370000"
        echo "end 2000 0 0"
    """))
    w.chmod(w.stat().st_mode | stat.S_IEXEC)
    outs = worker.run_copies([str(w), "ctx.2p.64k"], 1, timeout=20)
    assert outs[0].status == "ok" and outs[0].overhead == 1500.0
    m = aggregate(_ctx(), [(0, outs, {}, 0.1)], time.time())
    assert m.status == "failed" and m.reason.startswith("not resolvable: repetition 1: 1 of 2 intervals")


def _stored(path):
    """Run A: ctx.2p.64k resolved (3 repetitions); run B: not resolvable."""
    s = st.Store.open(path)
    runs = {}
    for label, reps in (("A", [[_output([300.0 + i, 310.0, 305.0])] for i in range(3)]),
                        ("B", [[_output([300.0, 310.0, 305.0])], [_output([20.0, -130.0, 15.0])],
                               [_output([300.0, 305.0, 310.0])]])):
        run = s.start_run(label=label, machine_id=None)
        store_measurement(s, run.id, _aggregate(*reps))
        s.finish_run(run.id, "complete")
        runs[label] = run
    return s, runs


def test_show_and_compare_state_it_and_judge_no_number(home):
    s, runs = _stored(home / "kperfdiff.db")
    shown = run_cli("show", runs["B"].id, check=0).stdout
    row = next(ln for ln in shown.splitlines() if ln.startswith("ctx.2p.64k"))
    assert "not resolvable: repetition 2" in row and "-130" in row and "failed" in row
    j = json.loads(run_cli("show", runs["B"].id, "--format", "json", check=0).stdout)["results"][0]
    assert j["status"] == "failed" and j["centre"] is None and j["summary"]["median"] is None
    out = run_cli("compare", "A", "B", "--format", "json", check=0).stdout
    cell = json.loads(out)["comparisons"][0]["cells"][0]
    assert cell["significant"] is False and "not resolvable" in cell["note"]
    assert all(cell[k] is None or math.isnan(cell[k]) for k in ("change", "low", "high", "new"))
    text = run_cli("compare", "A", "B", check=0).stdout
    assert "not resolvable" in text


def test_one_unresolvable_repetition_leaves_its_sample_without_a_number(tmp_path):
    """An experiment stores each repetition as its own cell: the repetitions that resolved must not
    be pooled alone (they would give a number biased upwards), whichever order they come in."""
    s = st.Store.open(tmp_path / "k.db")
    a, b = s.start_run(label="A", machine_id=None), s.start_run(label="B", machine_id=None)
    for rep, values in enumerate(([300.0, 310.0, 305.0], [20.0, -130.0, 15.0], [300.0, 305.0, 310.0])):
        store_measurement(s, a.id, _aggregate([_output([300.0, 301.0, 302.0])]).as_repetition(rep))
        store_measurement(s, b.id, _aggregate([_output(values)]).as_repetition(rep))
    c = cm.from_runs(s, ["A", "B"])
    smp = c.side("B").samples[("ctx.2p.64k", 1)]
    assert smp.status == "failed" and unresolvable(smp.reason) and math.isnan(smp.centre)
    cell = c.blocks[0].cells[("ctx.2p.64k", 1)]
    assert not cell.significant and math.isnan(cell.change) and "not resolvable" in cell.note
    assert not math.isnan(c.side("A").samples[("ctx.2p.64k", 1)].centre)
    # show's summary of the same run judges it as compare does: no centre from the other two
    s.finish_run(b.id, "complete")
    row = group_summary(group_results(s.results(b.id))[0])
    assert row["status"] == "failed" and unresolvable(row["reason"]) and math.isnan(row["centre"])
    assert row["reps"] == 0 and row["no_interval"] == "a repetition is not resolvable"
