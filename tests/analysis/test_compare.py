"""kperfdiff compare: numbers checked against hand-computed medians and intervals."""
import json
import math
import re

import pytest

from support import assert_one_sentence_error, run_cli
from kperfdiff.analysis import bench_compare as cm
from kperfdiff.core import stats
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


def make_store(path, *, emulated=False, label_b="B", p2_reps=1, extra_runs=0):
    """Two runs with known values.

    x.lat (lower is better), P=1, 3 reps per side:
      A reps [10,11,12] [10,10,14] [9,12,13]  -> per-rep medians 11, 10, 12
      B reps [8,9,10]   [8,8,9]    [9,10,11]  -> per-rep medians 9, 8, 10
      centres = geometric means 1320^(1/3) and 720^(1/3); change = A/B - 1 = (11/6)^(1/3) - 1;
      interval: Welch's t on the logarithms of the per-rep medians (checked by hand below).
    x.lat P=2, 1 rep per side: A [10..14] median 12, B [20..24] median 22: change 12/22 - 1,
      too few repetitions for an interval (``p2_reps``: that many copies of each rep, shifted by
      +0, +1, +2..., so the report has a significant mover).
    ``extra_runs``: that many more runs per machine with the same values (history for the
    run-level interval of separate runs; their labels are A.1, B.1, ...).
    y.tput (higher is better), P=1, 1 rep: A [1,2,3] median 2; B [3,4,5] median 4: +100 %.
    """
    s = st.Store.open(path)
    ma = s.add_machine({"arch": "x86_64", "cpus": 2, "thp_enabled": "madvise"})
    mb = s.add_machine({"arch": "arm64", "cpus": 2, "thp_enabled": "always", "emulated": emulated})
    ra = s.start_run(label="A", machine_id=ma)
    rb = s.start_run(label=label_b, machine_id=mb)
    add(s, ra.id, "x.lat", [[10, 11, 12], [10, 10, 14], [9, 12, 13]], monitors={"vmstat.thp_fault_alloc": 3})
    add(s, rb.id, "x.lat", [[8, 9, 10], [8, 8, 9], [9, 10, 11]], monitors={"vmstat.thp_fault_alloc": 300})
    add(s, ra.id, "x.lat", [[10 + k, 11 + k, 12 + k, 13 + k, 14 + k] for k in range(p2_reps)], copies=2)
    add(s, rb.id, "x.lat", [[20 + k, 21 + k, 22 + k, 23 + k, 24 + k] for k in range(p2_reps)], copies=2)
    add(s, ra.id, "y.tput", [[1, 2, 3]], unit="GUP/s", better="higher")
    add(s, rb.id, "y.tput", [[3, 4, 5]], unit="GUP/s", better="higher")
    for r in (ra, rb):
        s.finish_run(r.id, "complete")
    for i in range(extra_runs):
        for m, label, base in ((ma, "A", 10), (mb, "B", 20)):
            r = s.start_run(label=f"{label}.{i + 1}", machine_id=m)
            add(s, r.id, "x.lat", [[base + k, base + 1 + k, base + 2 + k, base + 3 + k, base + 4 + k]
                                   for k in range(p2_reps)], copies=2)
            s.finish_run(r.id, "complete")
    return s, ra, rb


def two_level(c):
    """The comparison of ``c``'s sides without the run history: the two-level path that
    experiments (variants interleaved in one run) take."""
    for side in c.sides:
        for smp in side.samples.values():
            smp.history = None
    return cm.compare(c.sides, [(b.variant, b.reference, b.kind) for b in c.blocks], title=c.title)


def hand_welch_log(a, b):
    """Welch's interval of mean(log b) - mean(log a), written out (95%)."""
    from scipy import stats as sst
    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ma, mb = sum(la) / len(la), sum(lb) / len(lb)
    va = sum((x - ma) ** 2 for x in la) / (len(la) - 1) / len(la)
    vb = sum((x - mb) ** 2 for x in lb) / (len(lb) - 1) / len(lb)
    df = (va + vb) ** 2 / (va ** 2 / (len(la) - 1) + vb ** 2 / (len(lb) - 1))
    t = sst.t.ppf(0.975, df)
    d = mb - ma
    return d, d - t * math.sqrt(va + vb), d + t * math.sqrt(va + vb), 2 * sst.t.sf(abs(d) / math.sqrt(va + vb), df)


def test_numbers_match_hand_computation(tmp_path):
    s, ra, rb = make_store(tmp_path / "k.db")
    c = two_level(cm.from_runs(s, [str(ra.id), str(rb.id)]))
    blk = c.blocks[0]
    a = blk.cells[("x.lat", 1)]
    assert a.base == pytest.approx(1320 ** (1 / 3)) and a.new == pytest.approx(720 ** (1 / 3))
    assert a.change == pytest.approx(((11 / 6) ** (1 / 3) - 1) * 100)
    assert a.method == "nested"
    d, lo, hi, p = hand_welch_log([11, 10, 12], [9, 8, 10])
    # lower is better: speed ratio = exp(-d), so the ends swap
    assert a.low == pytest.approx((math.exp(-hi) - 1) * 100)
    assert a.high == pytest.approx((math.exp(-lo) - 1) * 100)
    assert a.p == pytest.approx(p)
    # one cell has a test (the others have one repetition per side); BH over one p is p itself
    assert blk.tests == 1 and a.q == pytest.approx(p)
    assert a.significant is bool(p <= 0.05) and a.significant is False
    b = blk.cells[("x.lat", 2)]
    assert (b.base, b.new, b.method) == (12.0, 22.0, "")
    assert b.change == pytest.approx((12 / 22 - 1) * 100)
    assert math.isnan(b.low) and b.significant is False and "too few repetitions" in b.note
    y = blk.cells[("y.tput", 1)]
    assert (y.base, y.new, y.change) == (2.0, 4.0, 100.0)
    assert y.significant is False
    # CV of all intervals of the side (sample stdev / mean)
    vals = [10, 11, 12, 10, 10, 14, 9, 12, 13]
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    assert a.cv_base == pytest.approx(sd / mean)
    # geometric means through speed ratios: (11/6)^(1/3) (x.lat P1), 12/22 (x.lat P2), 4/2 (y.tput P1)
    r1 = (11 / 6) ** (1 / 3)
    assert blk.geomean_by_cores[1] == pytest.approx((math.sqrt(r1 * 2.0) - 1) * 100)
    assert blk.geomean_by_key["x.lat"] == pytest.approx((math.sqrt(r1 * 12 / 22) - 1) * 100)


def test_separate_runs_include_the_drift_between_runs(tmp_path):
    """Two separate runs: the interval also holds the drift between runs of the benchmark on
    that machine, estimated from every stored run of it there (three-level model)."""
    s = st.Store.open(tmp_path / "k.db")
    m = s.add_machine({"arch": "x86_64", "cpus": 2})
    centres = [10.0, 10.4, 9.8, 10.2]                 # four runs whose centres drift
    runs = []
    for i, c0 in enumerate(centres):
        r = s.start_run(label=f"r{i}", machine_id=m)
        add(s, r.id, "x.lat", [[c0 - 0.1], [c0], [c0 + 0.1]])
        s.finish_run(r.id, "complete")
        runs.append(r)
    c = cm.from_runs(s, ["r0", "r1"])
    x = c.blocks[0].cells[("x.lat", 1)]
    assert x.method == "runs" and x.runs == 4
    from scipy import stats as sst
    logs = [[math.log(c0 - 0.1), math.log(c0), math.log(c0 + 0.1)] for c0 in centres]
    cen = [sum(lg) / 3 for lg in logs]
    w = [sum((v - cc) ** 2 for v in lg) / 2 / 3 for lg, cc in zip(logs, cen)]
    grand = sum(cen) / 4
    run_var = max(0.0, sum((cc - grand) ** 2 for cc in cen) / 3 - sum(w) / 4)
    total = w[0] + w[1] + 2 * run_var
    df = total ** 2 / (w[0] ** 2 / 2 + w[1] ** 2 / 2 + (2 * run_var) ** 2 / 3)
    d = cen[1] - cen[0]
    t = sst.t.ppf(0.975, df)
    assert x.low == pytest.approx((math.exp(-(d + t * math.sqrt(total))) - 1) * 100)
    assert x.high == pytest.approx((math.exp(-(d - t * math.sqrt(total))) - 1) * 100)
    # the two-level interval of the same two runs is far narrower: the drift is what widens it
    narrow = two_level(c).blocks[0].cells[("x.lat", 1)]
    assert narrow.high - narrow.low < (x.high - x.low) / 3
    assert "drift between runs" in rc.render(c, "text")
    # one run per side, on two machines, nothing else stored: no interval, and why
    s2 = st.Store.open(tmp_path / "k2.db")
    for label, arch in (("a", "x86_64"), ("b", "arm64")):
        r = s2.start_run(label=label, machine_id=s2.add_machine({"arch": arch}))
        add(s2, r.id, "x.lat", [[1.0], [1.1], [1.2]])
    y = cm.from_runs(s2, ["a", "b"]).blocks[0].cells[("x.lat", 1)]
    assert math.isnan(y.low) and not y.significant and "drift between runs cannot be estimated" in y.note


def test_significance_is_controlled_over_the_table(tmp_path):
    """Three cells with p-values that pass alone but not after Benjamini-Hochberg."""
    s = st.Store.open(tmp_path / "k.db")
    ra = s.start_run(label="A", machine_id=None)
    rb = s.start_run(label="B", machine_id=None)
    a_reps = [[10.0], [10.4], [9.6], [10.2], [9.8]]
    shifted = [[v[0] * 0.99] for v in a_reps]          # 1% faster, tiny spread: p very small
    add(s, ra.id, "x.one", a_reps)
    add(s, rb.id, "x.one", [[10.1], [10.3], [9.9], [10.5], [9.7]])
    add(s, ra.id, "x.two", [[10.0], [10.1], [9.9], [10.0], [10.0]])
    add(s, rb.id, "x.two", [[v[0] * 0.9] for v in [[10.0], [10.1], [9.9], [10.0], [10.0]]])
    add(s, ra.id, "x.three", a_reps)
    add(s, rb.id, "x.three", shifted)
    c = two_level(cm.from_runs(s, ["A", "B"]))
    blk = c.blocks[0]
    ps = {k: x.p for (k, _c), x in blk.cells.items()}
    from scipy import stats as sst
    q = dict(zip(ps, sst.false_discovery_control(list(ps.values()))))
    for (k, _c), x in blk.cells.items():
        assert x.q == pytest.approx(q[k])
        assert x.significant is bool(q[k] <= 0.05)
    assert blk.tests == 3
    assert blk.cells[("x.two", 1)].significant and not blk.cells[("x.one", 1)].significant
    text = rc.render(c, "text")
    assert "false discoveries controlled over the 3" in text


def test_text_layout_and_formats(tmp_path):
    s, ra, rb = make_store(tmp_path / "k.db", emulated=True)
    c = two_level(cm.from_runs(s, [str(ra.id), str(rb.id)]))
    text = rc.render(c, "text")
    assert "POSITIVE = BETTER" not in text and "interval method" not in text     # the method: --explain
    assert "POSITIVE = BETTER" in rc.render(c, "text", explain=True)
    assert "Benjamini-Hochberg" in text
    assert "change: B (emulated) vs A (baseline)\n" in text
    lo, hi = c.blocks[0].cells[("x.lat", 1)].low, c.blocks[0].cells[("x.lat", 1)].high
    ch = ((11 / 6) ** (1 / 3) - 1) * 100
    rows = {tuple(line.split()[:2]): line for line in text.splitlines() if line[:1].isalpha()}
    x = c.blocks[0].cells[("x.lat", 1)]
    assert x.detectable > abs(ch) and x.verdict == "unknown" and x.more_reps > 3
    assert rows[("x.lat", "1")].split()[2:] == [f"{1 + ch / 100:.2f}x", "faster", f"{ch:+.1f}%",
                                                f"[{lo:+.1f},", f"{hi:+.1f}]", f"±{x.detectable:.1f}%", "unknown",
                                                f"(~{x.more_reps}", "reps)"]
    assert rows[("x.lat", "2")].split()[2:] == ["1.83x", "slower", "-45.5%", "[no", "interval]", "-"]
    assert rows[("y.tput", "1")].split()[2:5] == ["2.00x", "faster", "+100.0%"]
    assert "geomean" in text
    assert "too few repetitions for an interval (1 and 1; 3 per side are needed)" in text and "EMULATED" in text
    md = rc.render(c, "markdown")
    assert "| benchmark | P | change | % | interval | detectable | verdict | mark |" in md
    assert "| x.lat | 2 | 1.83x slower | -45.5% |" in md
    rows = rc.render(c, "csv").splitlines()
    assert rows[0].startswith("variant,reference,kind,column,cores") and ",speed_ratio,direction," in rows[0]
    assert len(rows) == 1 + 3
    j = json.loads(rc.render(c, "json"))
    cell = next(x for x in j["comparisons"][0]["cells"] if x["key"] == "x.lat" and x["cores"] == 1)
    assert cell["base"] == pytest.approx(1320 ** (1 / 3)) and cell["significant"] is bool(cell["q"] <= 0.05)
    assert cell["speed_ratio"] == pytest.approx(1 + cell["change"] / 100) and cell["direction"] == "faster"
    slower = next(x for x in j["comparisons"][0]["cells"] if x["key"] == "x.lat" and x["cores"] == 2)
    assert slower["direction"] == "slower" and slower["speed_ratio"] == pytest.approx(1 / (1 + slower["change"] / 100))
    assert j["variants"][1]["emulated"] is True and j["sign"] == "positive change = better"
    assert j["version"] == 3 and j["alpha"] == 0.05 and j["power"] == 0.8 and j["same_within"] == 5
    assert cell["detectable"] == pytest.approx(x.detectable) and cell["verdict"] == "unknown"


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


@pytest.mark.parametrize("change,text", [
    (0.0, "1.00x (same)"), (0.4, "1.00x (same)"), (-0.4, "1.00x (same)"), (0.6, "1.01x faster"),
    (12.0, "1.12x faster"), (-100 / 3, "1.50x slower"), (-50.0, "2.00x slower"), (650.0, "7.50x faster"),
    (900.0, "10.0x faster"), (1802.5, "19.0x faster"), (-95.0, "20.0x slower"), (math.nan, "-"),
])
def test_change_as_pyperf_says_it(change, text):
    """A change in % (positive = better) read as a speed ratio: +654.5% is 7.5x faster; 1.0x is 'same'."""
    assert rc.ratio_text(change) == text


def test_tables_are_aligned_and_the_legend_is_said_once(tmp_path):
    """Aligned columns with the numbers right-aligned (no ' | ' rows, no '-----' rule), the short legend
    once at the end however many tables (a patch stack has three), the method only with --explain."""
    s, ra, rb = make_store(tmp_path / "k.db", extra_runs=1)
    c = two_level(cm.from_runs(s, ["A", "B", "A.1"], stack=True))
    assert len(c.blocks) == 3
    text = rc.render(c, "text")
    assert " | " not in text and "-----\n" not in text and ">>" not in text
    for block in text.split("\n\n"):
        lines = block.splitlines()
        rule = next((i for i, line in enumerate(lines) if set(line) <= {"-", " "} and "--" in line), None)
        if rule is None:
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", lines[rule])]
        head = lines[rule - 1]
        names = [head[a:b].strip() for a, b in spans]
        assert all(names), head                         # every header sits over its column
        for row in lines[rule + 1:]:
            if row.startswith("  "):                    # the notes under a table
                break
            for (a, b), name in zip(spans, names):
                if name in ("P", "%", "cv", "reps"):    # numbers: right-aligned, ending at the rule's end
                    assert not row[a:b].strip() or row[b - 1] != " " and row[b:b + 1] in ("", " "), (name, row)
    assert text.count("--explain for the method") == 1 and text.rstrip().endswith("--explain for the method")
    explained = rc.render(c, "text", explain=True)
    assert explained.count("interval method: paired rounds") == 1
    assert explained.index("--explain for the method") < explained.index("interval method")
    md = rc.render(c, "markdown", explain=True)
    assert md.count("interval method") == 1 and "&lt;" not in md and "&gt;" not in md and "&amp;" not in md
    assert "q <= 0.05" in md


def test_plain_column_names_units_per_operation_and_instructions(tmp_path):
    """A template column prints as its plain name (the expansion said once in the legend); the unit says
    what one operation is (the catalogue's op); a deterministic guest's virtual ns are instructions."""
    s = st.Store.open(tmp_path / "k.db")
    ma = s.add_machine({"arch": "arm64", "deterministic": True})
    mb = s.add_machine({"arch": "arm64", "deterministic": True, "thp_enabled": "always"})
    ra, rb = s.start_run(label="4k", machine_id=ma), s.start_run(label="huge", machine_id=mb)
    for r, bench, k in ((ra, "fault.anon.4k", 1.0), (rb, "fault.anon.huge", 0.05)):
        s.add_result(r.id, benchmark=bench, params={}, copies=1, status="ok", reason=None, unit="ns/op",
                     better="lower", summary=None, raw=[(i, 0, 0, 1000.0 * k * (1 + i / 100), 10, 100)
                                                         for i in range(3)], bench_key="fault.anon.{pages}")
        s.add_result(r.id, benchmark="proc.fork", params={}, copies=1, status="ok", reason=None, unit="ns/op",
                     better="lower", summary=None, raw=[(i, 0, 0, 9000.0 + i, 10, 100) for i in range(3)])
        s.finish_run(r.id, "complete")
    c = cm.from_runs(s, ["4k", "huge"])
    c.ops = {"fault.anon.4k": "4 KB page", "fault.anon.huge": "4 KB page", "proc.fork": "fork"}
    text = rc.render(c, "text")
    assert "{" not in text.split("fault.anon: 4k runs")[0], text        # no template in any header or row
    assert "fault.anon: 4k runs fault.anon.4k, huge runs fault.anon.huge" in text
    centres = text.split("change: huge vs 4k")[0].splitlines()
    assert any(line.startswith("fault.anon ") and "instructions per 4 KB page" in line for line in centres)
    assert any(line.startswith("proc.fork ") and "instructions per fork" in line for line in centres)
    assert "ns/op" not in text
    j = json.loads(rc.render(c, "json"))
    assert j["units"] == {"fault.anon.{pages}": "instructions per 4 KB page", "proc.fork": "instructions per fork"}
    assert j["column_names"]["fault.anon.{pages}"] == "fault.anon"
    c.sides[1].facts = {"arch": "arm64"}                 # one side timed for real: ns, per its operation
    assert rc.column_unit(c, "proc.fork").title == "µs per fork"
