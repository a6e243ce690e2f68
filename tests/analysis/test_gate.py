"""kperfdiff compare --fail-on-regression and --format junit, on stored fixtures whose changes are
known: which cells trip the gate (significant slowdowns beyond the threshold, in each unit's bad
direction), which pass, which are not judged and why; the JUnit XML read back by xml.etree and by
junitparser (a reader CI plug-ins use)."""
import json
import xml.etree.ElementTree as ET

import junitparser
import pytest

from support import assert_one_sentence_error, run_cli, two_variant_experiment
from kperfdiff.analysis import bench_compare as cm
from kperfdiff.core import stats
from kperfdiff import store as st
from kperfdiff.render import compare as rc

REP_SHAPE = (-1.0, 0.0, 1.0, -0.5, 0.5)      # per-repetition offsets, in % of the centre


def reps_around(centre, spread_pct=1.0, shape=REP_SHAPE):
    """Five repetitions of five intervals whose medians sit ``spread_pct``*shape % around ``centre``."""
    return [[centre * (1 + spread_pct * j / 100) * (1 + 0.002 * k) for k in range(-2, 3)] for j in shape]


def add(s, run_id, bench, reps, *, unit="ns/op", better="lower", noise=None):
    raw = [(r, 0, i, v, 10, 100) for r, vals in enumerate(reps) for i, v in enumerate(vals)]
    return s.add_result(run_id, benchmark=bench, params={"size": "1m"}, copies=1, status="ok", reason=None,
                        unit=unit, better=better, summary=stats.summarize([x for r in reps for x in r]).as_dict(),
                        raw=raw, monitors={}, info=[], noise=noise)


# Column: (unit, better, old centre, new centre, rep spread %); the change is signed so that
# positive is better: x.lat 100 -> 130 ns is -23% (worse), y.tput 4 -> 3 GUP/s is -25% (worse),
# y2.tput 3 -> 4 GUP/s is +33% (better), z.lat 100 -> 103 ns is -2.9% (worse, within 10%),
# u.lat 100 -> 108 ns is -7.4% with repetitions 20% apart (not significant).
COLUMNS = {"x.lat": ("ns/op", "lower", 100, 130, 1), "y.tput": ("GUP/s", "higher", 4, 3, 1),
           "y2.tput": ("GUP/s", "higher", 3, 4, 1), "z.lat": ("ns/op", "lower", 100, 103, 0.3),
           "u.lat": ("ns/op", "lower", 100, 108, 20)}
DISTURBED = [{"rep": r, "disturbed": ["6.50 other runnable tasks on average (limit 0.5)"]} for r in range(5)]


def gate_store(path, label_new="new"):
    """Runs "old" (kernel 6.1, with three more runs there: the drift between runs) and "new"
    (kernel 6.2) of COLUMNS, plus w.lat in "old" only and d.lat 100 -> 150 ns measured while the
    machine was disturbed in "new"."""
    s = st.Store.open(path)
    m_old = s.add_machine({"arch": "x86_64", "cpus": 2, "kernel_release": "6.1"})
    m_new = s.add_machine({"arch": "x86_64", "cpus": 2, "kernel_release": "6.2"})
    runs = {}
    for label, machine, drift in (("old", m_old, 0), ("old.1", m_old, 0.3), ("old.2", m_old, -0.3),
                                  ("old.3", m_old, 0.15), (label_new, m_new, 0)):
        r = runs[label] = s.start_run(label=label, machine_id=machine)
        side = 3 if label == label_new else 2
        for bench, (unit, better, *centres, spread) in COLUMNS.items():
            add(s, r.id, bench, reps_around(centres[side - 2] * (1 + drift / 100), spread), unit=unit, better=better)
        if label == label_new:
            add(s, r.id, "d.lat", reps_around(150), noise=DISTURBED)
        else:
            add(s, r.id, "w.lat", reps_around(100))
            add(s, r.id, "d.lat", reps_around(100 * (1 + drift / 100)))
        s.finish_run(r.id, "complete")
    return s, runs


def verdicts(g):
    return {v.cell.key: (v.outcome, v.reason) for v in g.verdicts}


def test_gate_judges_each_cell_in_its_units_bad_direction(tmp_path):
    s, _ = gate_store(tmp_path / "k.db")
    c = cm.from_runs(s, ["old", "new"])
    got = verdicts(cm.gate(c, 10))
    assert got["x.lat"][0] == cm.FAIL and got["y.tput"][0] == cm.FAIL          # time up, throughput down
    assert got["y2.tput"] == (cm.PASS, "no slowdown")                          # throughput up
    assert got["z.lat"] == (cm.PASS, "significant slowdown within the 10% allowed")
    # u.lat's repetitions are 20% apart: it could not have seen a 10% slowdown, so it is not judged
    assert got["u.lat"][0] == cm.UNJUDGED and got["u.lat"][1].startswith("could not have seen a 10% slowdown: the "
                                                                         "smallest change it could detect is ")
    u = next(x for (k, _), x in c.blocks[0].cells.items() if k == "u.lat")
    assert u.detectable > 10 and u.verdict == "unknown" and u.more_reps > u.reps_base
    assert verdicts(cm.gate(c, u.detectable + 1))["u.lat"][0] == cm.PASS      # a gate it could have tripped
    assert "not significant" in verdicts(cm.gate(c, u.detectable + 1))["u.lat"][1]
    assert got["w.lat"] == (cm.UNJUDGED, "variant not measured")
    # a disturbed cell trips it like any other, and says it was disturbed
    assert got["d.lat"][0] == cm.FAIL and "measured while the machine was disturbed" in got["d.lat"][1]
    cells = c.blocks[0].cells
    assert cells[("z.lat", 1)].significant and not cells[("u.lat", 1)].significant
    # the cells that trip it are exactly the significant ones past -10% (the table's own marks)
    assert {k for (k, _), x in cells.items() if x.significant and x.change < -10} == {"x.lat", "y.tput", "d.lat"}
    skipped = verdicts(cm.gate(c, 10, skip_disturbed=True))["d.lat"]
    assert skipped[0] == cm.SKIP and "--skip-disturbed" in skipped[1]
    assert cm.gate(c, 10).exit_status == 1
    # a threshold above every slowdown: nothing trips (x.lat -23%, y.tput -25%, d.lat -33%), but w.lat
    # could not be judged, so the gate fails closed unless unjudged cells are allowed
    assert not cm.gate(c, 40).with_outcome(cm.FAIL) and cm.gate(c, 40).exit_status == 1
    assert cm.gate(c, 40, allow_unjudged=True).exit_status == 0
    assert [v.cell.key for v in cm.gate(c, 30).with_outcome(cm.FAIL)] == ["d.lat"]
    # reversed, only the throughput that went up (y2.tput) is now a slowdown
    back = cm.gate(cm.from_runs(s, ["new", "old"]), 10)
    assert [v.cell.key for v in back.with_outcome(cm.FAIL)] == ["y2.tput"]


def test_gate_on_runs_exit_status_and_stderr(tmp_path, home):
    s, runs = gate_store(home / "kperfdiff.db")
    p = run_cli("compare", "old", "new", "--fail-on-regression", "10", check=1)
    plain = run_cli("compare", "old", "new", check=0)
    assert p.stdout == plain.stdout                     # the table is unchanged; the verdict is on stderr
    err = p.stderr.splitlines()
    assert err[0] == ("regression gate (significant slowdown beyond 10%): FAILED: 3 of 5 judged cells tripped it; "
                      "2 of 7 cells could not be judged (below; --allow-unjudged lets them pass)")
    x = next(ln for ln in err if "REGRESSION x.lat" in ln)
    cell = cm.from_runs(s, ["old", "new"]).blocks[0].cells[("x.lat", 1)]
    assert x == (f"  REGRESSION x.lat [size=1m] -P 1: new vs old: {cell.change:+.1f}% [{cell.low:+.1f}, "
                 f"{cell.high:+.1f}], p = {cell.p:.3g}, q = {cell.q:.3g}, detectable ±{cell.detectable:.1f}% (x.lat, "
                 f"ns/op, lower is better)")
    assert any("REGRESSION y.tput" in ln and "higher is better" in ln for ln in err)
    assert "  not judged: w.lat [size=1m] -P 1: new vs old: variant not measured" in err
    assert sum("REGRESSION" in ln for ln in err) == 3
    d = next(ln for ln in err if "REGRESSION d.lat" in ln)
    assert "lower is better); ! measured while the machine was disturbed: " in d and "6.50 other runnable" in d
    run_cli("compare", "old", "new", "--fail-on-regression", "10", "--skip-disturbed", check=1)
    assert "FAILED: 2 of 4" in run_cli("compare", "old", "new", "--fail-on-regression", "10",
                                       "--skip-disturbed").stderr
    # nothing trips at 40%, but w.lat could not be judged: the gate fails closed
    closed = run_cli("compare", "old", "new", "--fail-on-regression", "40", check=1)
    assert closed.stderr.splitlines()[0] == ("regression gate (significant slowdown beyond 40%): FAILED: 1 of 7 "
                                             "cells could not be judged (below; --allow-unjudged lets them pass)")
    ok = run_cli("compare", "old", "new", "--fail-on-regression", "40", "--allow-unjudged", check=0)
    assert ok.stderr.splitlines() == [
        "regression gate (significant slowdown beyond 40%): passed: none of 6 judged cells tripped it; 1 not "
        "judged, allowed by --allow-unjudged (below)", "  not judged: w.lat [size=1m] -P 1: new vs old: variant not measured"]
    # A/A: two runs of the same kernel (w.lat measured on both)
    run_cli("compare", "old", "old.1", "--fail-on-regression", "0", check=0)
    # --skip-disturbed sets the disturbed slowdown aside, without failing closed on it
    aside = run_cli("compare", "old", "new", "--fail-on-regression", "30", "--skip-disturbed", "--allow-unjudged",
                    check=0).stderr
    assert aside.splitlines()[0].endswith("2 not judged, allowed by --allow-unjudged (below); 1 set aside by "
                                          "--skip-disturbed (below)")
    assert "  set aside: d.lat [size=1m] -P 1: new vs old: significant slowdown beyond 30%, but" in aside


@pytest.mark.parametrize("argv", [["--fail-on-regression", "-1"], ["--fail-on-regression", "100"],
                                  ["--fail-on-regression", "ten"], ["--skip-disturbed"],
                                  ["--allow-unjudged"],
                                  ["--format", "junit", "--fail-on-regression", "nan"]])
def test_gate_bad_arguments_one_sentence(home, argv):
    gate_store(home / "kperfdiff.db")
    p = run_cli("compare", "old", "new", *argv)
    assert p.returncode == 2
    assert_one_sentence_error(p)


def junit_counts(el):
    return {k: int(el.get(k)) for k in ("tests", "failures", "errors", "skipped")}


def test_junit_counts_and_structure(tmp_path, home):
    gate_store(home / "kperfdiff.db")
    p = run_cli("compare", "old", "new", "--format", "junit", "--fail-on-regression", "10", check=1)
    root = ET.fromstring(p.stdout)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["new vs old (baseline)"]
    cases = suites[0].findall("testcase")
    assert len(cases) == 7 == junit_counts(suites[0])["tests"]
    assert junit_counts(root) == junit_counts(suites[0]) == {"tests": 7, "failures": 3, "errors": 2, "skipped": 0}
    failed = {c.get("classname") for c in cases if c.find("failure") is not None}
    assert failed == {"x.lat", "y.tput", "d.lat"}
    # the cells it could not judge are errors, not skipped: CI shows them red
    assert {c.get("classname") for c in cases if c.find("error") is not None} == {"w.lat", "u.lat"}
    w = next(c for c in cases if c.get("classname") == "w.lat").find("error")
    assert (w.get("type"), w.get("message")) == ("unjudged", "could not be judged: variant not measured")
    assert not any(c.find("skipped") is not None for c in cases)
    x = next(c for c in cases if c.get("classname") == "x.lat")
    assert x.get("name") == "x.lat [size=1m] -P 1: new vs old"
    assert x.find("failure").get("message").startswith("significant slowdown beyond 10%: -23.")
    assert "baseline x.lat: 100.0 ns/op (5 reps)" in x.find("system-out").text
    props = {q.get("name"): q.get("value") for q in suites[0].find("properties")}
    assert props["threshold_pct"] == "10" and props["reference"] == "old"
    # a reader CI plug-ins use agrees
    xml = junitparser.JUnitXml.fromstring(p.stdout)
    total = [(s.tests, s.failures, s.errors, s.skipped) for s in xml]
    assert total == [(7, 3, 2, 0)]
    # with --allow-unjudged it is skipped, and says why
    allowed = ET.fromstring(run_cli("compare", "old", "new", "--format", "junit", "--fail-on-regression", "10",
                                    "--allow-unjudged", check=1).stdout)
    assert junit_counts(allowed) == {"tests": 7, "failures": 3, "errors": 0, "skipped": 2}
    w = next(c for c in allowed.iter("testcase") if c.get("classname") == "w.lat").find("skipped")
    assert w.get("message") == "not judged, allowed by --allow-unjudged: variant not measured"
    # without a threshold every cell passes, the figures still there
    q = run_cli("compare", "old", "new", "--format", "junit", check=0)
    root = ET.fromstring(q.stdout)
    assert junit_counts(root) == {"tests": 7, "failures": 0, "errors": 0, "skipped": 0}
    assert all(c.find("system-out").text.startswith("change: ") for c in root.iter("testcase"))
    assert next(root.iter("property")).get("name") == "variant"
    assert {q.get("name"): q.get("value") for q in root.iter("property")}["threshold_pct"] == "none"


def test_junit_escapes_everything(tmp_path):
    """Labels and benchmark names with markup and control characters still give well-formed XML
    holding the same text (control characters, which XML 1.0 cannot hold, replaced)."""
    s, runs = gate_store(tmp_path / "k.db", label_new='new <b>&"kernel\'\x01')
    add(s, runs['new <b>&"kernel\'\x01'].id, "a<&>\"'.lat", reps_around(100))
    add(s, runs["old"].id, "a<&>\"'.lat", reps_around(100))
    c = cm.from_runs(s, ["old", 'new <b>&"kernel\'\x01'])
    text = rc.render(c, "junit", cm.gate(c, 10))
    root = ET.fromstring(text)
    assert root.find("testsuite").get("name") == 'new <b>&"kernel\'\ufffd vs old (baseline)'
    assert "a<&>\"'.lat" in {t.get("classname") for t in root.iter("testcase")}
    assert junit_counts(root)["tests"] == 8


def test_gate_on_an_experiment_and_stack(tmp_path):
    """The gate reads the tables compare prints: a patch stack's step against the previous variant too."""
    s = st.Store.open(tmp_path / "k.db")
    runs = [s.start_run(label=f"PK{i}", machine_id=None) for i in range(3)]
    for r, centre in zip(runs, (100, 100, 140)):
        add(s, r.id, "x.lat", reps_around(centre))
    c = cm.from_runs(s, ["PK0", "PK1", "PK2"], stack=True)
    for side in c.sides:                       # as inside one experiment: no drift between runs
        for smp in side.samples.values():
            smp.history = None
    c = cm.compare(c.sides, [(b.variant, b.reference, b.kind) for b in c.blocks])
    g = cm.gate(c, 5)
    assert [(v.variant, v.reference, v.kind) for v in g.with_outcome(cm.FAIL)] == \
        [("PK2", "PK0", "baseline"), ("PK2", "PK1", "previous")]
    assert "x.lat [size=1m] -P 1: PK2 vs PK1 (previous)" in rc.gate_text(g)


def test_gate_that_judged_nothing_fails(home):
    """Two lone runs on two kernels, no other stored run to estimate the drift between runs from:
    no cell has an interval. The gate fails closed and lists them; --allow-unjudged lets them pass,
    but a gate that judged no cell still fails, in its text and in its JUnit XML."""
    s = st.Store.open(home / "kperfdiff.db")
    for label, centre, kernel in (("a", 100, "6.1"), ("b", 300, "6.2")):
        m = s.add_machine({"arch": "x86_64", "cpus": 2, "kernel_release": kernel})
        r = s.start_run(label=label, machine_id=m)
        add(s, r.id, "x.lat", reps_around(centre))
        add(s, r.id, "z.lat", reps_around(centre))
        s.finish_run(r.id, "complete")
    p = run_cli("compare", "a", "b", "--fail-on-regression", "5", check=1)
    err = p.stderr.splitlines()
    assert err[0] == ("regression gate (significant slowdown beyond 5%): FAILED: 2 of 2 cells could not be judged "
                      "(below; --allow-unjudged lets them pass)")
    assert [ln.split(":")[0] for ln in err[1:]] == ["  not judged"] * 2
    assert "the drift between runs cannot be estimated" in err[1]
    q = run_cli("compare", "a", "b", "--fail-on-regression", "5", "--allow-unjudged", check=1)
    assert q.stderr.splitlines()[0] == ("regression gate (significant slowdown beyond 5%): FAILED: it judged no "
                                        "cell, so it checked nothing; 2 not judged, allowed by --allow-unjudged (below)")
    for extra, counts in (([], {"tests": 2, "failures": 0, "errors": 2, "skipped": 0}),
                          (["--allow-unjudged"], {"tests": 3, "failures": 0, "errors": 1, "skipped": 2})):
        root = ET.fromstring(run_cli("compare", "a", "b", "--format", "junit", "--fail-on-regression", "5", *extra,
                                     check=1).stdout)
        assert junit_counts(root) == counts, extra
        assert (root.find("testsuite[@name='regression gate']") is not None) == bool(extra)
        assert junitparser.JUnitXml.fromstring(ET.tostring(root, encoding="unicode")).errors == counts["errors"]


def test_runs_of_an_experiment_get_its_interval(tmp_path, home):
    """A real experiment (variants A and B interleaved): its runs named one by one are compared with
    the experiment's interval, the same figures as --experiment gives, not "[no interval]" for want
    of a drift estimate; so the gate judges them."""
    f = two_variant_experiment(tmp_path / "e.toml", "ab", min_batch_ms=1)
    run_cli("run", f, "--no-progress", check=0)
    by_runs = json.loads(run_cli("compare", "ab/A", "ab/B", "--format", "json", check=0).stdout)
    by_exp = json.loads(run_cli("compare", "--experiment", "ab", "--format", "json", check=0).stdout)
    (a,), (b,) = by_runs["comparisons"][0]["cells"], by_exp["comparisons"][0]["cells"]
    fields = ("change", "low", "high", "p", "q", "significant", "method", "reps_base", "reps_new")
    assert a["method"] == "paired" and a["low"] is not None and a["p"] is not None, a
    assert {k: a[k] for k in fields} == {k: b[k] for k in fields}
    assert by_runs["experiment"]["name"] == "ab"
    text = run_cli("compare", "ab/A", "ab/B", check=0).stdout
    assert "[no interval]" not in text and "(interleaved in experiment ab, id " in text.splitlines()[0]
    # the gate judges the cell with that interval; on a machine busy enough that three pairs could not
    # have seen even 99% (CI, beside the parallel tests, once at 50%), it says so, never "no interval"
    g = run_cli("compare", "ab/A", "ab/B", "--fail-on-regression", "99").stderr
    assert "no interval" not in g and "drift" not in g, g
    assert "of 1 judged cells tripped it" in g.splitlines()[0] or "could not have seen a 99% slowdown" in g, g
