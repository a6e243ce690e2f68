"""Raw data out: `show --format csv` (every raw interval, one row each) and `runs --format csv`,
read back with the csv module as a pandas-like consumer would (header row, one row per record,
RFC 4180 quoting)."""
import csv
import io
import json

from support import run_cli
from kperfdiff.core import stats
from kperfdiff import store as st

TINY = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]
AWKWARD = 'kernel "6.2", rc1\nsecond line'


def read_csv(text):
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_show_csv_holds_every_raw_interval_of_a_real_run(home):
    run_cli("bench", "--only", "syscall.null,fault.anon.4k", "-P", "1,2", "--reps", "3", "--label", AWKWARD,
            *TINY, check=0)
    doc = json.loads(run_cli("show", "1", "--format", "json", check=0).stdout)
    text = run_cli("show", "1", "--format", "csv", check=0).stdout
    assert text.splitlines()[0] == "run,label,result,benchmark,params,copies,rep,copy,seq,value,unit,better,ops,ns," \
                                   "disturbed"
    rows = read_csv(text)
    want = [(r["benchmark"], r["copies"], i["rep"], i["copy"], i["value"], i["ops"], i["ns"], r["unit"], r["params"])
            for r in doc["results"] for i in r["intervals"]]
    assert len(rows) == len(want) == sum(len(r["intervals"]) for r in doc["results"]) > 0
    got = [(r["benchmark"], int(r["copies"]), int(r["rep"]), int(r["copy"]), float(r["value"]), int(r["ops"]),
            int(r["ns"]), r["unit"], json.loads(r["params"])) for r in rows]
    assert got == want
    assert {r["label"] for r in rows} == {AWKWARD} and {r["run"] for r in rows} == {"1"}
    # three repetitions of each benchmark and copy count; with -P 2 both copies
    for bench in ("syscall.null", "fault.anon.4k"):
        assert {r["rep"] for r in rows if r["benchmark"] == bench} == {"1", "2", "3"}    # shown from 1
        assert {r["copy"] for r in rows if r["benchmark"] == bench and r["copies"] == "2"} == {"0", "1"}
    assert {r["better"] for r in rows} == {"lower"}


def test_show_csv_numbers_repetitions_across_results(tmp_path, home):
    """An experiment stores one result per repetition: their rows count the repetitions on (from 1,
    though the store numbers them from 0), and each row says whether its repetition was disturbed;
    a failed result has no rows."""
    s = st.Store.open(home / "kperfdiff.db")
    r = s.start_run(label="exp/A", machine_id=None)
    for rep, vals in enumerate(([1.0, 2.0], [3.0, 4.0])):
        s.add_result(r.id, benchmark="x.lat", params={"a": "1,2"}, copies=1, status="ok", reason=None,
                     unit="ns/op", better="lower", summary=stats.summarize(vals).as_dict(),
                     raw=[(0, 0, i, v, 1, 10) for i, v in enumerate(vals)], monitors={}, info=[], rep=rep,
                     noise=[{"rep": 0, "disturbed": ["steal 30%"]}] if rep else [])
    s.add_result(r.id, benchmark="y.lat", params={}, copies=1, status="failed", reason="broke", unit="ns/op",
                 better="lower", summary=None, raw=[], monitors={}, info=[])
    s.finish_run(r.id, "complete")
    rows = read_csv(run_cli("show", "exp/A", "--format", "csv", check=0).stdout)
    assert [(x["rep"], x["seq"], x["value"], x["disturbed"]) for x in rows] == \
        [("1", "0", "1.0", ""), ("1", "1", "2.0", ""), ("2", "0", "3.0", "steal 30%"), ("2", "1", "4.0", "steal 30%")]
    assert {x["params"] for x in rows} == {'{"a": "1,2"}'}


def test_runs_csv_round_trips_awkward_labels(home):
    s = st.Store.open(home / "kperfdiff.db")
    for label in (AWKWARD, "plain", ""):
        run = s.start_run(label=label, machine_id=None, command='kperfdiff bench --label "a, b"')
        s.finish_run(run.id, "complete")
    text = run_cli("runs", "--format", "csv", check=0).stdout
    rows = read_csv(text)
    assert list(rows[0]) == ["run", "label", "state", "target", "started", "command"]
    assert [(x["run"], x["label"], x["state"], x["command"]) for x in rows] == \
        [("1", AWKWARD, "complete", 'kperfdiff bench --label "a, b"'), ("2", "plain", "complete",
                                                                        'kperfdiff bench --label "a, b"'),
         ("3", "-", "complete", 'kperfdiff bench --label "a, b"')]
    assert f'"{AWKWARD.replace(chr(34), chr(34) * 2)}"' in text       # RFC 4180: quoted, quotes doubled
    # the same runs as the JSON list
    assert [str(r["id"]) for r in json.loads(run_cli("runs", "--format", "json", check=0).stdout)["runs"]] == \
        [x["run"] for x in rows]
