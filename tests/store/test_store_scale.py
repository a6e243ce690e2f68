"""The store at lab scale: the schema-4 indexes and their migration, the query plans of the
hot queries, and `kperfdiff runs` pages. Small stores; benchmarks/bench_store.py times a big one."""
import contextlib
import json
import re
import sqlite3

import pytest

from support import run_cli
from kperfdiff.analysis import bench_compare as compare
from kperfdiff import store as st

NEW_INDEXES = {"result_history", "run_label", "run_running", "profile_run", "profile_result"}
BIG_TABLES = ("result", "interval", "run", "profile", "experiment")


def _add(s, run_id, bench="a.b", copies=1, reps=3, **kw):
    raw = [(r, 0, i, 100.0 + r + i / 10, 10, 1000) for r in range(reps) for i in range(4)]
    return s.add_result(run_id, benchmark=bench, params={"k": "1"}, copies=copies, status="ok", reason=None,
                        unit="ns/op", better="lower", summary={"n": len(raw), "median": 100.0}, raw=raw, **kw)


def _v3_store(path):
    """A store as schema 3 made it: SCHEMA and the migrations before 3 -> 4, with data in it."""
    c = sqlite3.connect(path)
    for script in (st.SCHEMA, st.MIGRATIONS[1], st.MIGRATIONS[2]):
        c.executescript(script)
    c.execute("INSERT INTO meta VALUES ('schema_version', '3')")
    c.execute("INSERT INTO machine (fingerprint, arch, facts) VALUES ('f', 'x86_64', '{}')")
    c.execute("INSERT INTO run (id, label, machine_id, tool_version, started_at, state, artefact_dir) "
              "VALUES (1, 'base', 1, '0.1.0', 1.0, 'complete', 'k.artefacts/run-1')")
    c.execute("INSERT INTO result (id, run_id, benchmark, params, copies, status, unit, better, median) "
              "VALUES (1, 1, 'a.b', '{}', 1, 'ok', 'ns/op', 'lower', 2.0)")
    c.executemany("INSERT INTO interval VALUES (1, ?, 0, ?, ?, 10, 100)",
                  [(r, i, 1.0 + r + i) for r in range(3) for i in range(2)])
    c.execute("INSERT INTO profile (result_id, run_id, benchmark, path) VALUES (1, 1, 'a.b', 'k.artefacts/run-1/p')")
    c.commit()
    c.close()


def _indexes(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}


def test_schema_3_store_migrates_to_4_with_its_data_and_the_new_indexes(tmp_path):
    db = tmp_path / "k.db"
    _v3_store(db)
    before = sqlite3.connect(db)
    assert not NEW_INDEXES & _indexes(before)
    before.close()
    s = st.Store.open(db, create=False)
    assert st.SCHEMA_VERSION >= 4   # through 4, and on to the current version
    assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(st.SCHEMA_VERSION)
    assert NEW_INDEXES <= _indexes(s.conn)
    (r,) = s.results(1)
    assert r.median == 2.0 and r.values == [1.0, 2.0, 2.0, 3.0, 3.0, 4.0]
    assert s.find_run("base").id == 1 and len(s.profiles(1)) == 1
    assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # a new store has the same schema as a migrated one
    fresh = st.Store.open(tmp_path / "new.db")
    assert _indexes(fresh.conn) == _indexes(s.conn)


@pytest.fixture
def busy_store(store_location):
    """Two machines, bench runs, an experiment with cells and profiles (in SQLite, then in PostgreSQL)."""
    s = st.Store.open(store_location)
    m1, m2 = s.add_machine({"arch": "x86_64", "cpus": 2}), s.add_machine({"arch": "aarch64", "cpus": 4})
    runs = []
    for i in range(6):
        run = s.start_run(label=f"r{i}", machine_id=m1 if i % 3 else m2)
        rid = _add(s, run.id)
        _add(s, run.id, copies=2)
        s.add_profile(run_id=run.id, result_id=rid, benchmark="a.b", rep=0, path=f"{run.artefact_dir}/p.perf.data",
                      kallsyms=None, event="cycles", samples=None, cpu_time_ns=None, ops=None)
        s.finish_run(run.id, "complete")
        runs.append(run.id)
    eid = s.create_experiment(name="e", path="", file_hash="h", spec={}, cells=2)
    run = s.start_run(label="e/a", variant="a", machine_id=m1)
    s.link_run(run.id, eid)
    for rep in range(2):
        s.add_cell_result(run.id, experiment_id=eid, cell=f"a|a.b|P1|r{rep}", rep=rep, bench_key="a.b",
                          benchmark="a.b", params={"k": "1"}, copies=1, status="ok", reason=None, unit="ns/op",
                          better="lower", summary=None, raw=[(rep, 0, 0, 5.0, 1, 1)])
    return s, m1, runs, eid, run.id


def _plans(s, calls) -> dict[str, list[str]]:
    """statement -> its query plan, for every SELECT, UPDATE and DELETE the calls make."""
    seen: list[str] = []
    s.conn.set_trace_callback(seen.append)
    try:
        for call in calls:
            call()
    finally:
        s.conn.set_trace_callback(None)
    stmts = [q for q in seen if re.match(r"\s*(SELECT|UPDATE|DELETE)\b", q, re.I)]
    return {q: [r[3] for r in s.conn.execute("EXPLAIN QUERY PLAN " + q)] for q in stmts}


def test_hot_queries_search_an_index_and_scan_no_table(busy_store):
    s, m1, runs, eid, erun = busy_store
    if s.postgres:
        pytest.skip("SQLite's query plans (PostgreSQL plans a table this small with sequential scans)")
    plans = _plans(s, [
        lambda: s.results(runs[1]),                            # show, compare: a run's results and raw values
        lambda: s.results(runs[1], with_raw=False),
        lambda: s.run_history(m1, "a.b", {"k": "1"}, 1),       # compare of separate runs
        lambda: s.find_run("r2"),                              # a run named by its label
        lambda: s.get_run(runs[0]),
        lambda: s.profiles(runs[1]), lambda: s.profiles(runs[1], "a.b"), lambda: s.primary_profiles(erun),
        lambda: s.find_experiment("e"), lambda: s.experiment_runs(eid),   # compare/report --experiment
        lambda: s.cell_states(eid), lambda: s.cell_stops(eid),          # kperfdiff run, resuming
        lambda: s.set_cell_stop(eid, "a.b", 1, "3 repetitions (fixed count)"),
        lambda: s.machine(m1),
        s._mark_dead_runs,                                     # every open
    ])
    assert len(plans) >= 14
    for q, plan in plans.items():
        scans = [p for p in plan if re.match(rf"SCAN ({'|'.join(BIG_TABLES)})\b", p)]
        assert not scans, f"{q}\n  reads a whole table: {plan}"
    history = next(p for q, p in plans.items() if "result.benchmark=" in q)
    assert any("USING INDEX result_history" in p for p in history), history
    assert any("run_label" in p for q, plan in plans.items() if "label=" in q for p in plan)


def test_run_history_newest_bench_runs_of_the_machine_only(busy_store):
    s, m1, runs, eid, erun = busy_store
    hist = s.run_history(m1, "a.b", {"k": "1"}, 1)
    assert len(hist) == 4                    # runs 2, 3, 5, 6 are on m1; the experiment cells are not
    assert hist[0] == [[100.0, 100.1, 100.2, 100.3], [101.0, 101.1, 101.2, 101.3], [102.0, 102.1, 102.2, 102.3]]
    assert len(s.run_history(m1, "a.b", {"k": "1"}, 1, limit=2)) == 2
    one = s.start_run(label="one", machine_id=m1)
    _add(s, one.id, reps=1)
    assert len(s.run_history(m1, "a.b", {"k": "1"}, 1)) == 5
    assert s.run_history(m1, "a.b", {"k": "1"}, 1, min_reps=3) == hist      # the newest, of one repetition, left out
    assert s.run_history(m1, "a.b", {"k": "2"}, 1) == [] and s.run_history(None, "a.b", {"k": "1"}, 1) == []


def test_results_with_raw_keep_each_results_intervals_in_order(busy_store):
    s, _m1, runs, _eid, _erun = busy_store
    s.add_result(runs[0], benchmark="c.d", params={}, copies=1, status="failed", reason="exit 1", unit=None,
                 better=None, summary=None, raw=[])
    _add(s, runs[0], bench="e.f", reps=1)
    a, b, failed, e = s.results(runs[0])
    assert (a.copies, b.copies, failed.status, e.benchmark) == (1, 2, "failed", "e.f")
    assert a.raw == sorted(a.raw) and a.raw[0] == (0, 0, 0, 100.0, 10, 1000) and len(a.raw) == 12
    assert a.values == [x[3] for x in a.raw] and failed.raw == failed.values == []
    assert e.values == [100.0, 100.1, 100.2, 100.3]
    assert [r.raw for r in s.results(runs[0], with_raw=False)] == [[], [], [], []]


def test_a_comparison_reads_what_it_uses(busy_store):
    # the table reads no profiles (the report does), and a side of too few repetitions for an
    # interval no history
    s, _m1, runs, _eid, _erun = busy_store
    few = s.start_run(label="few", machine_id=s.get_run(runs[1]).machine_id)
    _add(s, few.id, reps=1)
    table = compare.from_runs(s, [str(runs[1]), str(runs[2]), "few"], profiles=False)
    assert all(not side.profiles for side in table.sides)
    assert table.sides[0].samples["a.b", 1].history and table.sides[2].samples["a.b", 1].history is None
    report = compare.from_runs(s, [str(runs[1]), str(runs[2])])
    assert report.sides[0].profiles[("a.b", 1)][0].path.endswith("p.perf.data")


@contextlib.contextmanager
def _statements(s):
    """Every statement the store sends inside (SQLite's trace callback; PostgreSQL's cursor)."""
    seen: list[str] = []
    if not s.postgres:
        s.conn.set_trace_callback(seen.append)
        try:
            yield seen
        finally:
            s.conn.set_trace_callback(None)
        return
    send = st.backend.PgCursor.execute

    def counted(cur, sql, params=()):
        seen.append(sql)
        return send(cur, sql, params)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(st.backend.PgCursor, "execute", counted)
        yield seen


def test_a_comparison_sends_as_many_statements_for_many_cells_as_for_few(store_location):
    """The history of every cell (each benchmark, parameter set and copy count on its machine) is read
    in one go: to a PostgreSQL server on the network each statement is a round trip."""
    s = st.Store.open(store_location)
    m1, m2 = s.add_machine({"arch": "x86_64", "cpus": 2}), s.add_machine({"arch": "aarch64", "cpus": 4})
    refs: dict[int, list[str]] = {}
    for n in (2, 12):
        for i in range(5):
            run = s.start_run(label=f"n{n}-{i}", machine_id=m2 if i == 4 else m1)
            for b in range(n):
                _add(s, run.id, bench=f"b{n}.{b}", copies=1 + b % 2)
            s.finish_run(run.id, "complete")
            refs.setdefault(n, []).append(str(run.id))
    sent = {}
    for n in (2, 12):
        with _statements(s) as seen:
            table = compare.from_runs(s, refs[n][2:], profiles=False)       # two runs on m1, one on m2
        assert sum(len(side.samples) for side in table.sides) == 3 * n
        sent[n] = seen
        for side in table.sides:
            mid = s.get_run(side.run_ids[0]).machine_id
            for (_k, copies), smp in side.samples.items():
                assert smp.history == s.run_history(mid, smp.benchmark, smp.params, copies,
                                                    min_reps=compare.MIN_REPS)
        assert len(table.sides[0].samples[f"b{n}.0", 1].history) == 4       # runs 1-4 (of m1), not run 5 (m2)
        assert len(table.sides[2].samples[f"b{n}.0", 1].history) == 1
    assert len(sent[2]) == len(sent[12]), (sent[2], sent[12])
    # the histories of 2 * 12 keys on two machines: their result ids, the sizes of their repetitions, their values
    assert len([q for q in sent[12] if "result.benchmark" in q or "FROM interval WHERE result_id IN (SELECT value"
                in q or "= ANY(" in q]) == 3


def test_run_histories_answers_as_run_history_key_by_key(busy_store):
    s, m1, runs, _eid, _erun = busy_store
    one = s.start_run(label="one", machine_id=m1)
    _add(s, one.id, reps=1)
    p = json.dumps({"k": "1"})
    keys = [(m1, "a.b", p, 1), (m1, "a.b", p, 2), (m1, "a.b", json.dumps({"k": "2"}), 1), (None, "a.b", p, 1),
            (m1 + 99, "a.b", p, 1), (2 ** 70, "a.b", p, 1), (m1, "a.b", p, 1)]
    for limit, min_reps in ((100, 0), (2, 0), (100, 3), (1, 3)):
        got = s.run_histories(keys, limit=limit, min_reps=min_reps)
        assert list(got) == list(dict.fromkeys(keys))
        for k in keys:
            want = [] if k[0] == 2 ** 70 else s.run_history(k[0], k[1], json.loads(k[2]), k[3], limit=limit,
                                                             min_reps=min_reps)
            assert got[k] == want, (k, limit, min_reps)
    assert len(s.run_histories(keys)[keys[0]]) == 5 and len(s.run_histories(keys, min_reps=3)[keys[0]]) == 4
    assert s.run_histories([]) == {}


@pytest.fixture
def runs_store(store_location):
    s = st.Store.open(store_location)
    for i in range(55):
        s.finish_run(s.start_run(label=f"r{i + 1}", machine_id=None).id, "complete")
    return store_location


def _ids(text: str) -> list[int]:
    return [int(line.split()[0]) for line in text.splitlines()[2:] if line.strip()]


def test_runs_lists_the_newest_50_and_says_what_it_left_out(runs_store):
    p = run_cli("--store", runs_store, "runs", check=0)
    assert _ids(p.stdout) == list(range(6, 56))
    assert "the newest 50 of 55 runs (5 older not listed)" in p.stderr and "--offset 50" in p.stderr
    assert "--all" in p.stderr and len(p.stderr.splitlines()) == 1


def test_runs_pages_with_limit_and_offset(runs_store):
    p = run_cli("--store", runs_store, "runs", "-n", "3", "--offset", "3", check=0)
    assert _ids(p.stdout) == [50, 51, 52]
    assert "runs 4-6 of 55" in p.stderr and "49 older and 3 newer" in p.stderr and "--offset 6" in p.stderr
    p = run_cli("--store", runs_store, "runs", "--all", check=0)
    assert _ids(p.stdout) == list(range(1, 56)) and p.stderr == ""
    p = run_cli("--store", runs_store, "runs", "--limit", "60", check=0)
    assert len(_ids(p.stdout)) == 55 and p.stderr == ""
    p = run_cli("--store", runs_store, "runs", "--offset", "55", check=0)
    assert _ids(p.stdout) == [] and "leaves out every run" in p.stderr


def test_runs_formats_list_the_same_page(runs_store):
    js = json.loads(run_cli("--store", runs_store, "runs", "-n", "2", "--format", "json", check=0).stdout)
    assert [r["id"] for r in js["runs"]] == [54, 55] and js["total"] == 55 and js["offset"] == 0
    csv = run_cli("--store", runs_store, "runs", "-n", "2", "--format", "csv", check=0).stdout.splitlines()
    assert csv[0] == "run,label,state,target,started,command" and [x.split(",")[0] for x in csv[1:]] == ["54", "55"]
    md = run_cli("--store", runs_store, "runs", "-n", "2", "--format", "markdown", check=0).stdout.splitlines()
    assert md[0].startswith("| run | label |") and [x.split("|")[1].strip() for x in md[2:]] == ["54", "55"]


@pytest.mark.parametrize("args", [["--all", "-n", "3"], ["-n", "0"], ["--offset", "-1"], ["-n", "x"]])
def test_runs_bad_page_options_are_usage_errors(runs_store, args):
    p = run_cli("--store", runs_store, "runs", *args)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
