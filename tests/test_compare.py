"""kperfdiff compare: numbers checked against hand-computed medians and intervals."""
import json
import math

import pytest

from conftest import assert_one_sentence_error, run_cli
from kperfdiff import compare as cm
from kperfdiff import stats
from kperfdiff import store as st
from kperfdiff.render import compare as rc


def add(s, run_id, bench, reps, *, copies=1, unit="ns/op", better="lower", status="ok", monitors=None):
    """One result whose raw intervals are ``reps`` (a list of value lists, one per repetition)."""
    raw = [(r, 0, i, v, 10, 100) for r, vals in enumerate(reps) for i, v in enumerate(vals)]
    vals = [x for r in reps for x in r]
    return s.add_result(run_id, benchmark=bench, params={}, copies=copies, status=status,
                        reason=None if status == "ok" else "it broke", unit=unit, better=better,
                        summary=stats.summarize(vals).as_dict() if vals else None, raw=raw,
                        monitors=monitors or {}, info=[])


def make_store(path, *, emulated=False, label_b="B"):
    """Two runs with known values.

    x.lat (lower is better), P=1, 3 reps per side:
      A reps [10,11,12] [10,10,14] [9,12,13]  -> per-rep medians 11, 10, 12 -> median 11
      B reps [8,9,10]   [8,8,9]    [9,10,11]  -> per-rep medians 9, 8, 10   -> median 9
      change = 11/9 - 1 = +22.22 %; bootstrap of the per-rep medians: the
      resampled median is the smallest/middle/largest value with probability
      7/27, 13/27, 7/27, so the 2.5th and 97.5th percentiles of the change are
      its extremes: 10/10 - 1 = 0 and 12/8 - 1 = +50 -> [0, +50], not significant.
    x.lat P=2, 1 rep per side (pooled intervals):
      A [10..14] median 12, B [20..24] median 22: change 12/22 - 1 = -45.45 %;
      every resampled change lies in [10/24 - 1, 14/20 - 1] = [-58.33, -30]: significant.
    y.tput (higher is better), P=1, 1 rep: A [1,2,3] median 2; B [3,4,5] median 4: +100 %.
    """
    s = st.Store.open(path)
    ma = s.add_machine({"arch": "x86_64", "cpus": 2, "thp_enabled": "madvise"})
    mb = s.add_machine({"arch": "arm64", "cpus": 2, "thp_enabled": "always", "emulated": emulated})
    ra = s.start_run(label="A", machine_id=ma)
    rb = s.start_run(label=label_b, machine_id=mb)
    add(s, ra.id, "x.lat", [[10, 11, 12], [10, 10, 14], [9, 12, 13]], monitors={"vmstat.thp_fault_alloc": 3})
    add(s, rb.id, "x.lat", [[8, 9, 10], [8, 8, 9], [9, 10, 11]], monitors={"vmstat.thp_fault_alloc": 300})
    add(s, ra.id, "x.lat", [[10, 11, 12, 13, 14]], copies=2)
    add(s, rb.id, "x.lat", [[20, 21, 22, 23, 24]], copies=2)
    add(s, ra.id, "y.tput", [[1, 2, 3]], unit="GUP/s", better="higher")
    add(s, rb.id, "y.tput", [[3, 4, 5]], unit="GUP/s", better="higher")
    for r in (ra, rb):
        s.finish_run(r.id, "complete")
    return s, ra, rb


def test_numbers_match_hand_computation(tmp_path):
    s, ra, rb = make_store(tmp_path / "k.db")
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    blk = c.blocks[0]
    a = blk.cells[("x.lat", 1)]
    assert (a.base, a.new) == (11.0, 9.0)
    assert a.change == pytest.approx(200 / 9)
    assert a.method == "per-rep"
    assert a.low == pytest.approx(0.0) and a.high == pytest.approx(50.0)
    assert a.significant is False
    b = blk.cells[("x.lat", 2)]
    assert (b.base, b.new, b.method) == (12.0, 22.0, "pooled")
    assert b.change == pytest.approx((12 / 22 - 1) * 100)
    assert (10 / 24 - 1) * 100 - 1e-9 <= b.low <= b.high <= -30 + 1e-9
    assert b.significant is True
    y = blk.cells[("y.tput", 1)]
    assert (y.base, y.new, y.change) == (2.0, 4.0, 100.0)
    # CV of all intervals of the side (sample stdev / mean)
    vals = [10, 11, 12, 10, 10, 14, 9, 12, 13]
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    assert a.cv_base == pytest.approx(sd / mean)
    # geometric means through speed ratios: 11/9 (x.lat P1), 12/22 (x.lat P2), 4/2 (y.tput P1)
    assert blk.geomean_by_cores[1] == pytest.approx((math.sqrt(11 / 9 * 2.0) - 1) * 100)
    assert blk.geomean_by_key["x.lat"] == pytest.approx((math.sqrt(11 / 9 * 12 / 22) - 1) * 100)


def test_text_layout_and_formats(tmp_path):
    s, ra, rb = make_store(tmp_path / "k.db", emulated=True)
    c = cm.from_runs(s, [str(ra.id), str(rb.id)])
    text = rc.render(c, "text")
    assert "POSITIVE = BETTER" in text and "interval method: bootstrap" in text
    assert ">> change: B (emulated) vs A (baseline), % (positive = better)" in text
    assert "P | x.lat | y.tput | geomean" in text
    assert "1 | +22.2% [+0.0, +50.0] | +100.0% [" in text
    assert "2 | -45.5% [" in text and "] * | - |" in text
    assert "geomean |" in text
    assert "interval over pooled intervals" in text and "EMULATED" in text
    md = rc.render(c, "markdown")
    assert "| P | x.lat | y.tput | geomean |" in md
    rows = rc.render(c, "csv").splitlines()
    assert rows[0].startswith("variant,reference,kind,column,cores")
    assert len(rows) == 1 + 3
    j = json.loads(rc.render(c, "json"))
    cell = next(x for x in j["comparisons"][0]["cells"] if x["key"] == "x.lat" and x["cores"] == 1)
    assert cell["base"] == 11.0 and cell["significant"] is False
    assert j["variants"][1]["emulated"] is True and j["sign"] == "positive change = better"


def test_failed_side_is_never_significant(tmp_path):
    s = st.Store.open(tmp_path / "k.db")
    ra = s.start_run(label="A", machine_id=None)
    rb = s.start_run(label="B", machine_id=None)
    add(s, ra.id, "x.lat", [[1, 2, 3]])
    add(s, rb.id, "x.lat", [], status="failed")
    c = cm.from_runs(s, ["A", "B"])
    x = c.blocks[0].cells[("x.lat", 1)]
    assert x.significant is False and math.isnan(x.change) and "failed" in x.note
    assert "n/a" in rc.render(c, "text")


def test_stack_compares_with_previous(tmp_path):
    s = st.Store.open(tmp_path / "k.db")
    runs = [s.start_run(label=f"PK{i}", machine_id=None) for i in range(3)]
    for i, r in enumerate(runs):
        add(s, r.id, "x.lat", [[10 - i, 10 - i, 10 - i]])
    c = cm.from_runs(s, ["PK0", "PK1", "PK2"], stack=True)
    kinds = [(b.variant, b.reference, b.kind) for b in c.blocks]
    assert kinds == [("PK1", "PK0", "baseline"), ("PK2", "PK0", "baseline"), ("PK2", "PK1", "previous")]
    assert c.blocks[2].cells[("x.lat", 1)].change == pytest.approx(100 / 8)


def test_cli_compare(tmp_path, home):
    s, ra, rb = make_store(home / "kperfdiff.db")
    p = run_cli("compare", ra.id, rb.id, "--format", "json", check=0)
    assert json.loads(p.stdout)["baseline"] == "A"
    assert_one_sentence_error(run_cli("compare", ra.id))
    assert_one_sentence_error(run_cli("compare", "--experiment", "nope"))
    assert_one_sentence_error(run_cli("compare", "99", "98"))
