"""`kperfdiff history` and `changes` on a real SQLite store: the series per machine in time order
(text, JSON against its schema, an HTML page with the plot), the injected step found with the
ranking of the profiles on either side, the analysis kept in the store, and bad input refused in
one sentence."""
import json

import pytest

from support import assert_one_sentence_error, run_cli
from schemas.test_schemas import validate
from store.test_history import populate
from kperfdiff import store as st

pytest.importorskip("otava.analysis", reason="apache-otava is installed by make setup")


def add_profile(s, run, folder, hot):
    """A folded-stack profile of x.lat (one repetition) whose samples go mostly to ``hot``."""
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / f"x.lat.{run.id}.folded"
    f.write_text(f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];{hot}_[k] 900\n"
                 f"worker;entry_SYSCALL_64_[k];do_syscall_64_[k];clear_page_erms_[k] 100\n")
    s.add_profile(run_id=run.id, result_id=None, benchmark="x.lat", rep=0, path=str(f), kallsyms=None,
                  event="cpu-clock", samples=1000, cpu_time_ns=10 ** 9, ops=1000, meta={"copies": 1})


@pytest.fixture
def stored(tmp_path):
    """x.lat on host box: 24 runs, +10% from the 17th (index 16) on, one wild run (index 5); the runs
    either side of the step profiled. On host other: 6 flat runs. One run of y.tput."""
    path = tmp_path / "h.db"
    s = st.Store.open(path)
    values = [100.0] * 16 + [110.0] * 8
    values[5] = 180.0
    runs = populate(s, values, commit=True)
    add_profile(s, runs[15], tmp_path / "p", "unmap_vmas")
    add_profile(s, runs[16], tmp_path / "p", "zap_pte_range")
    populate(s, [50.0] * 6, facts={"hostname": "other"}, label="o", start=1_700_000_100.0)
    populate(s, [3.0], bench="y.tput", label="y")
    s.conn.close()
    return path, runs


def test_history_lists_each_machine_as_its_own_series(stored):
    path, runs = stored
    p = run_cli("--store", path, "history", "x.lat", check=0)
    assert "x.lat -P 1 on box: 24 results" in p.stdout and "x.lat -P 1 on other: 6 results" in p.stdout
    assert "2 machines (box, other)" in p.stdout and "never mixed" in p.stdout
    box = p.stdout.split("on other")[0]
    rows = [ln for ln in box.splitlines() if ln[:4].isdigit()]
    assert len(rows) == 24 and [int(r.split()[2]) for r in rows] == [r.id for r in runs]
    assert "6.1.0" in rows[0] and f"{0:012x} change 0" in rows[0] and "ns" in rows[0] and "%" in rows[0]
    doc = validate("history", run_cli("--store", path, "history", "x.lat@1", "--machine", "box", "--format", "json",
                                      check=0).stdout)
    assert [s["host"] for s in doc["series"]] == ["box"]
    pts = doc["series"][0]["points"]
    assert [q["run"] for q in pts] == [r.id for r in runs] and pts[0]["commit"] == f"{0:040x}"
    assert pts[0]["kernel"] == "6.1.0" and pts[0]["reps"] == 3 and pts[0]["n"] == 15
    assert pts[16]["centre"] == pytest.approx(110, rel=0.02) and 0 < pts[16]["half_width_pct"] < 5


def test_changes_finds_the_step_with_the_ranking_and_keeps_its_analysis(stored, tmp_path):
    path, runs = stored
    p = run_cli("--store", path, "changes", check=0)
    out = p.stdout
    assert "x.lat -P 1 on box: 1 change point in 24 points" in out
    assert f"outliers set aside: run {runs[5].id}" in out
    assert f"change between run {runs[15].id} (r15) and run {runs[16].id} (r16): -9." in out
    assert "ranking of the profiles" in out and "zap_pte_range" in out and "unmap_vmas" in out
    assert "x.lat -P 1 on other: no change point in 6 points" in out
    assert "y.tput -P 1 on box: no change point in 1 points" in out
    doc = validate("changes", run_cli("--store", path, "changes", "x.lat", "--machine", "box", "--format", "json",
                                      check=0).stdout)
    (series,) = doc["series"]
    (c,) = series["changes"]
    assert c["run_before"]["run"] == runs[15].id and c["run_after"]["run"] == runs[16].id
    assert c["before"]["points"] == 16 and c["before"]["measured"] == 15 and c["after"]["points"] == 8
    assert c["ranking"]["common"] and c["no_ranking"] is None and c["pvalue"] < 0.001
    assert series["outliers"] == [runs[5].id]
    # the second look found the analysis of the first: nothing new, nothing split again
    assert series["analysed_from"] == 24
    # a new result: the series is analysed again and the cache follows it
    s = st.Store.open(path)
    populate(s, [110.0], label="new", start=1_800_000_000.0)
    s.conn.close()
    doc = validate("changes", run_cli("--store", path, "changes", "x.lat@1", "--machine", "box", "--format", "json",
                                      check=0).stdout)
    assert doc["series"][0]["points"] == 25 and [c["index"] for c in doc["series"][0]["changes"]] == [16]
    s = st.Store.open(path)
    kept = [json.loads(r[0]) for r in s.conn.execute("SELECT weak FROM change_cache")]
    assert s.conn.execute("SELECT max(points) FROM change_cache").fetchone()[0] == 25
    assert 16 in [index for ws in kept for index, _qhat in ws]      # the step, a weak change point kept
    # the page: a plot with the change point marked and the outlier hollow
    page = tmp_path / "h.html"
    run_cli("--store", path, "history", "x.lat", "--machine", "box", "--format", "html", "-o", page, check=0)
    html = page.read_text()
    assert html.count("<svg") == 1 and html.count('class="change"') == 1 and "outlier, set aside" in html
    assert "1 change point in 25 points" in html and "<script" not in html


def test_changes_in_six_stored_runs(tmp_path):
    """Stored series of 6 runs, 3 either side of a 20% step with 1% noise from run to run (seed 3: a
    level of one point took the step with it in Otava's merge), and null series of 6 runs (seed
    544: a point's stand-in made a change): the step at the 4th run, nothing in the null series."""
    import random
    path = tmp_path / "six.db"
    s = st.Store.open(path)
    steps = {}
    for seed in (0, 1, 2, 3):
        rng = random.Random(seed)
        values = [100 * (1 + rng.gauss(0, 0.01)) * (1.2 if i >= 3 else 1) for i in range(6)]
        steps[f"step{seed}.lat"] = populate(s, values, bench=f"step{seed}.lat", spread=0.0)
    for seed in (1, 544):
        rng = random.Random(seed)
        populate(s, [100 * (1 + rng.gauss(0, 0.01)) for _ in range(6)], bench=f"null{seed}.lat", spread=0.0)
    s.conn.close()
    out = run_cli("--store", path, "changes", check=0).stdout
    for bench, runs in steps.items():
        assert f"{bench} -P 1 on box: 1 change point in 6 points: before run {runs[3].id}" in out, out
    assert "null1.lat -P 1 on box: no change point in 6 points" in out and "null544.lat" in out
    doc = validate("changes", run_cli("--store", path, "changes", "--format", "json", check=0).stdout)
    found = {d["benchmark"]: [c["run_after"]["run"] for c in d["changes"]] for d in doc["series"]}
    assert found == {**{b: [runs[3].id] for b, runs in steps.items()}, "null1.lat": [], "null544.lat": []}


@pytest.mark.parametrize("argv, words", [
    (["history", "nope"], "no stored result of 'nope'"),
    (["history", "x.lat@two"], "@ takes a core count"),
    (["history", "x.lat@4", "--since", "2020-01-01"], "at that core count"),
    (["history", "x.lat", "--since", "last week"], "is not a date"),
    (["changes", "x.lat", "--machine", "nowhere"], "on a machine matching 'nowhere'"),
])
def test_bad_input_is_one_sentence(stored, argv, words):
    path, _ = stored
    p = run_cli("--store", path, *argv)
    assert_one_sentence_error(p)
    assert words in p.stderr


def test_history_table_and_plot_say_one_unit(tmp_path):
    """A series of 600000 ns figures reads in µs in its table and on its plot's axis alike."""
    import re
    path = tmp_path / "u.db"
    s = st.Store.open(path)
    populate(s, [600_000.0, 610_000.0, 605_000.0], bench="proc.fork")
    s.conn.close()
    text = run_cli("--store", path, "history", "proc.fork", check=0).stdout
    rows = [line for line in text.splitlines() if line[:1].isdigit()]
    assert len(rows) == 3 and all(" µs " in r and " ns " not in r for r in rows), text
    page = run_cli("--store", path, "history", "proc.fork", "--format", "html", "-o", tmp_path / "h.html",
                   check=0)
    html = (tmp_path / "h.html").read_text() if (tmp_path / "h.html").exists() else page.stdout
    axis = re.findall(r'class="axis">([^<]*)<', html)
    assert axis == ["µs"], axis
    assert re.search(r"<td[^>]*>6\d\d\.\d</td><td[^>]*>µs</td>", html), html[html.find("<table"):][:600]


def test_history_as_markdown_and_csv_to_a_file(stored, tmp_path):
    """The table formats of the one set: Markdown (one table per series) and CSV (one table, the
    series in its first column), written whole with -o."""
    path, runs = stored
    md = run_cli("--store", path, "history", "x.lat", "--format", "markdown", check=0).stdout
    assert md.count("### x.lat -P 1 on ") == 2 and "| time | run |" in md
    out = tmp_path / "h.csv"
    assert run_cli("--store", path, "history", "x.lat", "--format", "csv", "-o", out, check=0).stdout == ""
    lines = out.read_text().splitlines()
    assert lines[0].startswith("series,time,run,label") and len(lines) == 1 + 24 + 6
    assert lines[1].startswith("x.lat -P 1 on box,") and lines[-1].startswith("x.lat -P 1 on other,")
