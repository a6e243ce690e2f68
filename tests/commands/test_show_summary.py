"""`kperfdiff show RUN` summarises: one row per benchmark and core count over all its repetitions
(an experiment stores one result per repetition), with their number, the centre's 95% interval and
the CV; each note once; --reps lists the repetitions; text, Markdown, JSON and CSV agree."""
import csv
import io
import math
import re

from support import run_cli, two_variant_experiment
from kperfdiff.core import stats
from kperfdiff.store import Store
from schemas.test_schemas import validate


def rows_of(text: str, *first: str) -> list[list[str]]:
    """The rows of the aligned table whose header starts with the words ``first``, split where two
    spaces part its columns (a unit such as "ns per getppid() call" is one cell)."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:len(first)] == list(first))
    out = []
    for ln in lines[head + 2:]:
        if not ln or ln.startswith(" "):
            break
        out.append(re.split(r"  +", ln.strip()))
    return out


def test_show_of_an_experiment_run_is_one_row_per_benchmark_over_its_repetitions(tmp_path, home):
    # precision = 1000: every column stops after the matrix's 4 repetitions, "precision reached",
    # a note kept with every one of the 4 results of a variant
    exp = two_variant_experiment(tmp_path / "e.toml", "summ", reps=4, precision=1000, max_time=60)
    run_cli("run", exp, "--no-progress", check=0)
    db = Store.open(home / "kperfdiff.db")
    run = db.find_run("summ/A")
    results = db.results(run.id)
    assert len(results) == 4 and {r.rep for r in results} == {0, 1, 2, 3}
    reps = [[x[3] for x in r.raw] for r in results]      # one repetition each

    text = run_cli("show", "summ/A", check=0).stdout
    rows = rows_of(text, "benchmark")
    assert len(rows) == 1, text
    name, cores, centre, unit, hw, detect, n_reps = rows[0][:7]
    assert (name, cores, unit, n_reps) == ("syscall.null", "1", "ns per getppid() call", "4")
    assert float(centre) == float(f"{stats.nested_centre(reps):#.4g}")
    assert hw == f"{stats.centre_half_width(reps):.1f}%"
    assert detect == f"{stats.sample_detectable(reps):.1f}%"
    assert text.count("precision reached") == 1, text
    assert "--reps" not in text.split("kernel counters")[0].split("centre:")[0]   # no advice to pass --reps

    listed = run_cli("show", "summ/A", "--reps", check=0).stdout
    per_rep = rows_of(listed, "benchmark", "P", "rep")
    assert [(r[0], r[1], r[2]) for r in per_rep] == [("syscall.null", "1", str(i)) for i in (1, 2, 3, 4)]
    assert [r[9] for r in per_rep] == [str(r.id) for r in results]          # the result holding each
    assert [float(r[3]) for r in per_rep] == [float(f"{m:#.4g}") for m in stats.repetition_medians(reps)]

    doc = validate("show", run_cli("show", "summ/A", "--format", "json", check=0).stdout)
    (s,) = doc["summary"]
    assert s["reps"] == 4 and s["results"] == [r["id"] for r in doc["results"]]
    assert math.isclose(s["centre"], stats.nested_centre(reps)) and s["no_interval"] is None
    assert [x["rep"] for x in s["repetitions"]] == [1, 2, 3, 4]     # as the text, from 1
    # the CSV numbers the same repetitions (from 1), the Markdown has the same one row
    csv_reps = {(r["result"], r["rep"]) for r in csv.DictReader(io.StringIO(
        run_cli("show", "summ/A", "--format", "csv", check=0).stdout))}
    assert csv_reps == {(str(x["result"]), str(x["rep"])) for x in s["repetitions"]}
    md = run_cli("show", "summ/A", "--format", "markdown", check=0).stdout
    assert sum(1 for ln in md.splitlines() if ln.startswith("| syscall.null |")) == 1


def test_too_few_repetitions_give_no_interval_and_say_why(tmp_path, home):
    exp = two_variant_experiment(tmp_path / "e.toml", "two", reps=2)
    run_cli("run", exp, "--no-progress", check=0)
    text = run_cli("show", "two/B", check=0).stdout
    (row,) = rows_of(text, "benchmark")
    assert row[4:7] == ["-", "-", "2"]
    assert "syscall.null -P 1 (2 repetitions; an interval needs 3 or more)" in text
    doc = validate("show", run_cli("show", "two/B", "--format", "json", check=0).stdout)
    assert doc["summary"][0]["half_width_pct"] is None and "needs 3" in doc["summary"][0]["no_interval"]
    assert doc["summary"][0]["detectable_pct"] is None


def test_failed_and_skipped_repetitions_are_counted_in_their_row(home):
    """A repetition that failed leaves its benchmark's row measured over the others, saying so; a
    benchmark skipped in every repetition is one row with the reason once."""
    s = Store.open(home / "kperfdiff.db")
    r = s.start_run(label="mix/A", machine_id=None)
    for rep in range(3):
        vals = [1.0 + rep, 2.0 + rep]
        s.add_result(r.id, benchmark="x.lat", params={}, copies=1, status="ok", reason=None, unit="ns/op",
                     better="lower", summary=stats.summarize(vals).as_dict(), monitors={}, info=[], rep=rep,
                     raw=[(0, 0, i, v, 1, 10) for i, v in enumerate(vals)])
    s.add_result(r.id, benchmark="x.lat", params={}, copies=1, status="failed", reason="broke", unit="ns/op",
                 better="lower", summary=None, raw=[], monitors={}, info=[], rep=3)
    for rep in range(2):
        s.add_result(r.id, benchmark="y.lat", params={}, copies=1, status="skipped", reason="no swap", unit="ns/op",
                     better="lower", summary=None, raw=[], monitors={}, info=[], rep=rep)
    s.finish_run(r.id, "complete")
    text = run_cli("show", "mix/A", check=0).stdout
    rows = rows_of(text, "benchmark")
    assert [x[:7] for x in rows] == [["x.lat", "1", "2.359", "ns/op", rows[0][4], rows[0][5], "3"],
                                     ["y.lat", "1", "-", "ns/op", "-", "-", "0"]]
    assert "1 repetition failed: broke" in text and text.count("no swap") == 1
    doc = validate("show", run_cli("show", "mix/A", "--format", "json", check=0).stdout)
    assert [(x["status"], x["reps"], len(x["unmeasured"])) for x in doc["summary"]] == [("ok", 3, 1), ("skipped", 0, 0)]


def test_units_say_the_operation_and_a_deterministic_guest_counts_instructions(home):
    """show prints each unit with the operation it counts (the catalogue's op), and a deterministic
    guest's virtual ns (one per instruction) as instructions, never as ns/op."""
    from analysis.test_compare import add
    db = Store.open(home / "kperfdiff.db")
    for label, facts in (("timed", {"arch": "x86_64"}), ("counted", {"arch": "arm64", "deterministic": True})):
        run = db.start_run(label=label, machine_id=db.add_machine(facts))
        add(db, run.id, "proc.fork", [[90_000.0, 91_000.0], [92_000.0, 90_500.0], [91_500.0, 90_000.0]])
        add(db, run.id, "fault.anon.huge", [[200.0, 210.0], [205.0, 203.0], [201.0, 202.0]])
        db.finish_run(run.id, "complete")
    units = {label: {r[0]: r[3] for r in rows_of(run_cli("show", label, check=0).stdout, "benchmark")}
             for label in ("timed", "counted")}
    assert units["timed"] == {"proc.fork": "µs per fork", "fault.anon.huge": "ns per 4 KB page"}
    assert units["counted"] == {"proc.fork": "instructions per fork", "fault.anon.huge": "instructions per 4 KB page"}
