"""The store: schema, results with raw values, interrupted runs, bad files."""
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from support import KPERFDIFF, assert_one_sentence_error, run_cli
from kperfdiff.core import records
from kperfdiff import store as st
from kperfdiff.core.errors import StoreError


def _result(s, run_id, name="a.b", values=(1.0, 2.0, 3.0)):
    from kperfdiff.core import stats
    raw = [(0, 0, i, v, 10, 100) for i, v in enumerate(values)]
    return s.add_result(run_id, benchmark=name, params={"k": "1"}, copies=1, status="ok", reason=None,
                        unit="ns/op", better="lower", summary=stats.summarize(values).as_dict(), raw=raw,
                        monitors={"vmstat.pgfault": 3}, info=[{"rep": 0}])


def test_roundtrip_and_wal(store_location):
    s = st.Store.open(store_location)
    if not s.postgres:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    mid = s.add_machine({"arch": "x86_64", "cpus": 2})
    assert s.add_machine({"arch": "x86_64", "cpus": 2}) == mid  # one row per configuration
    run = s.start_run(label="base", machine_id=mid, command="kperfdiff bench")
    assert run.state == "running"
    _result(s, run.id)
    s.finish_run(run.id, "complete")
    s2 = st.Store.open(store_location)
    r = s2.results(run.id)[0]
    assert r.values == [1.0, 2.0, 3.0] and r.median == 2.0 and r.monitors == {"vmstat.pgfault": 3}
    assert s2.get_run(run.id).state == "complete"
    assert s2.find_run("base").id == run.id
    assert s2.machine(mid).facts["cpus"] == 2


def test_machines_profiles_and_experiments_come_back_typed(store_location):
    """Like runs and results, a machine, a profile and an experiment come back as records with attributes."""
    s = st.Store.open(store_location)
    mid = s.add_machine({"arch": "aarch64", "cpus": 4, "emulated": True})
    m = s.machine(mid)
    assert isinstance(m, records.Machine)
    assert (m.id, m.arch, m.emulated, m.facts["cpus"], m.fingerprint) == (mid, "aarch64", True, 4, st.fingerprint(m.facts))
    assert s.machine(None) == records.Machine() and s.machine(None).facts == {}    # a run of no known machine
    run = s.start_run(label="p", machine_id=mid)
    rid = _result(s, run.id)
    pid = s.add_profile(run_id=run.id, result_id=rid, benchmark="a.b", rep=0, path=f"{run.artefact_dir}/perf.data",
                        kallsyms=None, event="cpu-clock", samples=5, cpu_time_ns=7, ops=3, meta={"copies": 1})
    (p,) = s.profiles(run.id)
    assert isinstance(p, records.StoredProfile) and p.path.endswith("/perf.data")
    assert (p.id, p.result_id, p.run_id, p.benchmark, p.rep, p.event, p.samples, p.cpu_time_ns, p.ops, p.meta) == \
        (pid, rid, run.id, "a.b", 0, "cpu-clock", 5, 7, 3, {"copies": 1})
    assert s.primary_profiles(run.id) == [p]
    eid = s.create_experiment(name="e", path="/x/e.toml", file_hash="h", spec={"variants": []}, cells=4)
    e = s.find_experiment("e")
    assert isinstance(e, records.StoredExperiment)
    assert (e.id, e.name, e.path, e.file_hash, e.spec, e.state, e.cells, e.pid) == \
        (eid, "e", "/x/e.toml", "h", {"variants": []}, "running", 4, os.getpid())
    assert s.get_experiment(eid) == e and s.list_experiments() == [e] and s.latest_experiment("e") == e
    assert not s.experiment_owner_alive(e)      # this process runs it


def test_dead_running_run_marked_interrupted(store_location):
    s = st.Store.open(store_location)
    run = s.start_run(machine_id=None)
    _result(s, run.id)
    # pretend the process that owned it died
    s.conn.execute("UPDATE run SET pid=? WHERE id=?", (2 ** 22 + 12345, run.id))
    s2 = st.Store.open(store_location)
    assert s2.get_run(run.id).state == "interrupted"
    assert len(s2.results(run.id)) == 1


def test_newer_schema_refused(store_location):
    s = st.Store.open(store_location)
    s.conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="newer kperfdiff"):
        st.Store.open(store_location)


def test_older_schema_without_migration_says_what_to_do(store_location):
    s = st.Store.open(store_location)
    s.conn.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    with pytest.raises(StoreError, match="start a new store"):
        st.Store.open(store_location)


def test_not_a_store(tmp_path):
    p = tmp_path / "x.db"
    p.write_text("hello, not sqlite")
    with pytest.raises(StoreError, match="not a kperfdiff store"):
        st.Store.open(p)
    q = tmp_path / "other.db"
    c = sqlite3.connect(q)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(StoreError, match="not a kperfdiff store"):
        st.Store.open(q)
    assert p.read_text() == "hello, not sqlite"  # untouched


def test_unwritable_store_one_sentence(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    p = run_cli("--store", "/proc/no/such/k.db", "runs")
    assert_one_sentence_error(p)
    p = run_cli("--store", str(d), "runs")
    assert_one_sentence_error(p)
    assert "directory" in p.stderr


def _count_results(db):
    try:
        c = sqlite3.connect(db, timeout=5)
        n = c.execute("SELECT count(*) FROM result").fetchone()[0]
        c.close()
        return n
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_half_way_leaves_consistent_store(tmp_path, sig):
    db = tmp_path / "k.db"
    proc = subprocess.Popen([str(KPERFDIFF), "--store", str(db), "bench", "--only", "syscall", "--intervals", "40",
                             "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while _count_results(db) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the suite finished before it could be interrupted"
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
    proc.wait(timeout=60)
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert b"Traceback" not in proc.stderr.read()
    s = st.Store.open(db)
    run = s.list_runs()[-1]
    assert run.state == "interrupted"
    results = s.results(run.id)
    assert 2 <= len(results) < 6
    for r in results:
        assert r.status == "ok" and r.n == len(r.values) == 40
        assert r.median == pytest.approx(sorted(r.values)[19] / 2 + sorted(r.values)[20] / 2)


def test_result_names_show_only_the_parameters_that_vary():
    def r(name, copies, params):
        return records.Result(id=0, run_id=0, benchmark=name, params=params, copies=copies, status="ok", reason=None,
                         unit="ns/op", better="lower", n=1, median=1.0, min=1.0, max=1.0, q1=1.0, q3=1.0,
                         mean=1.0, stdev=None, cv=None, overhead=None, ops=1, cpu_ns=1, wall_s=1.0, monitors={},
                         info=[])
    rs = [r("boot.init", 1, {"mem": "1G", "x": "a"}), r("boot.init", 1, {"mem": "4G", "x": "a"}),
          r("syscall.null", 1, {"k": "1"}), r("syscall.null", 2, {"k": "2"})]
    assert records.result_names(rs) == ["boot.init [mem=1G]", "boot.init [mem=4G]", "syscall.null", "syscall.null"]
