"""A benchmark's history in the store (Store.history, in the order the runs started) and the
change-point cache (schema 7): kept per series, replaced, and read back, in SQLite and PostgreSQL."""
import json
import random

from kperfdiff import store as st

HOST = {"arch": "x86_64", "cpu_model": "Test CPU", "cpus": 4, "hostname": "box"}


def populate(s, values, *, bench="x.lat", copies=1, facts=None, start=1_700_000_000.0, reps=3, label="r",
             commit=False, spread=0.01, seed=0):
    """One run per value (its centre), ``reps`` repetitions of 5 intervals each around it, the runs an
    hour apart from ``start``; the kernel release changes at each run whose centre differs from the one
    before (a new kernel), each run with a commit when ``commit`` (the commits given, when a list).
    Returns the runs."""
    rng = random.Random(seed)
    runs = []
    for i, v in enumerate(values):
        kernel = f"6.1.{sum(1 for a, b in zip(values, values[1:i + 1]) if a != b)}"
        m = s.add_machine({**HOST, "kernel_release": kernel, **(facts or {})})
        options = {"commit": commit[i] if isinstance(commit, list) else f"{i:040x}",
                   "commit_subject": f"change {i}"} if commit else {}
        run = s.start_run(label=f"{label}{i}", machine_id=m, options=options)
        raw = [(rep, 0, k, v * (1 + rng.gauss(0, spread)), 100, 1000) for rep in range(reps) for k in range(5)]
        s.add_result(run.id, benchmark=bench, params={}, copies=copies, status="ok", reason=None, unit="ns",
                     better="lower", summary={"n": len(raw)}, raw=raw)
        s.finish_run(run.id, "complete")
        s._write(lambda: s.conn.execute("UPDATE run SET started_at=? WHERE id=?", (start + 3600 * i, run.id)))
        runs.append(run)
    return runs


def test_history_is_in_run_start_order_with_intervals(store_location):
    s = st.Store.open(store_location)
    a = populate(s, [100, 101, 99], start=2_000_000_000.0)
    b = populate(s, [50, 51], start=1_000_000_000.0, label="early")     # stored later, ran earlier
    populate(s, [7], bench="other")
    results, runs, machines = s.history(["x.lat"])
    assert [r.run_id for r in results] == [r.id for r in b + a]
    assert all(len(r.repetitions) == 3 and len(r.values) == 15 for r in results)
    assert {runs[r.run_id].machine_id for r in results} <= set(machines)
    assert s.history(["x.lat"], since=1_500_000_000.0)[0] == results[2:]
    assert s.history(["x.lat"], copies=2)[0] == []
    assert s.stored_benchmarks() == ["other", "x.lat"]
    assert [r.benchmark for r in s.history()[0]].count("other") == 1


def test_change_cache_is_kept_and_replaced(store_location):
    s = st.Store.open(store_location)
    assert s.change_cache("k") is None
    s.save_change_cache("k", settings={"window": 50}, points=10, last_result=7, digest="d1", weak=[[4, 1.5]])
    s.save_change_cache("k", settings={"window": 50}, points=11, last_result=8, digest="d2", weak=[[4, 1.5], [9, 2.0]])
    assert s.change_cache("k") == {"settings": {"window": 50}, "points": 11, "last_result": 8, "digest": "d2",
                                   "weak": [[4, 1.5], [9, 2.0]]}
    assert s.conn.execute("SELECT count(*) FROM change_cache").fetchone()[0] == 1


def test_a_store_of_schema_6_gains_the_cache(tmp_path):
    """The migration 6 -> 7 adds the table to a store made before it, keeping its results."""
    s = st.Store.open(tmp_path / "s.db")
    populate(s, [100, 100])
    for table in ("change_cache", "watch_change", "watch_item"):     # what schema 6 did not have
        s.conn.execute(f"DROP TABLE {table}")
    s.conn.execute("UPDATE meta SET value='6' WHERE key='schema_version'")
    s.conn.commit()
    s.conn.close()
    s = st.Store.open(tmp_path / "s.db")
    assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(st.SCHEMA_VERSION)
    assert len(s.history(["x.lat"])[0]) == 2
    s.save_change_cache("k", settings={}, points=2, last_result=2, digest="d", weak=[])
    assert json.loads(json.dumps(s.change_cache("k")))["points"] == 2
