"""The shared store: PostgreSQL with the schema, migrations and answers of SQLite; two processes
writing one store at once; hosts; the URL and its password; store init. (store copy and compare
across back ends: test_store_copy.py.) A throwaway PostgreSQL cluster runs as nobody (conftest)."""
import dataclasses
import json
import os
import re
import sqlite3
import subprocess
import sys
import time

import pytest

from support import KPERFDIFF, assert_one_sentence_error, run_cli, two_variant_experiment
from kperfdiff.core import limits, stats
from kperfdiff import store as st
from kperfdiff.core.errors import InputError, StoreError
from kperfdiff.store import backend

TINY = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]


# -- the schema --------------------------------------------------------------------------
def _sqlite_schema(conn):
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
    cols = {t: [(r[1], r[2].upper(), bool(r[3]), r[4], r[5] > 0) for r in conn.execute(f"PRAGMA table_info({t})")]
            for t in tables}
    idx = {}
    for name, table, sql in conn.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type='index' "
                                         "AND sql IS NOT NULL"):
        idx[name] = (table, [r[2] for r in conn.execute(f"PRAGMA index_info({name})")],
                     " UNIQUE " in sql.upper(), " WHERE " in sql.upper())
    return cols, idx


PG_TYPES = {"bigint": "INTEGER", "double precision": "REAL", "text": "TEXT"}


def _pg_schema(conn):
    cols = {}
    pks = {(t, c) for t, c in conn.execute(
        "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu ON kcu.constraint_name = tc.constraint_name "
        "AND kcu.table_schema = tc.table_schema WHERE tc.constraint_type = 'PRIMARY KEY' "
        "AND tc.table_schema = current_schema()")}
    for t, c, typ, nullable, default in conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"):
        if default is not None:
            default = default.split("::")[0]          # '{}'::text -> '{}'
        cols.setdefault(t, []).append((c, PG_TYPES[typ], nullable == "NO" and (t, c) not in pks, default,
                                       (t, c) in pks))
    idx = {}
    for name, table, sql in conn.execute("SELECT indexname, tablename, indexdef FROM pg_indexes "
                                         "WHERE schemaname = current_schema() AND indexname NOT LIKE '%_pkey' "
                                         "AND indexname NOT LIKE '%_key'"):
        on = sql[sql.index("(") + 1:sql.index(")")]
        idx[name] = (table, [c.strip() for c in on.split(",")], " UNIQUE " in sql.upper(), " WHERE " in sql.upper())
    return cols, idx


def test_postgresql_schema_matches_sqlite_column_by_column(tmp_path, pg_url):
    lite = st.Store.open(tmp_path / "k.db")
    pg = st.Store.open(pg_url)
    lcols, lidx = _sqlite_schema(lite.conn)
    pcols, pidx = _pg_schema(pg.conn)
    # SQLite's INTEGER PRIMARY KEY is nullable in its pragma; both are keys
    lcols = {t: [(c, typ, nn and not pk, d, pk) for c, typ, nn, d, pk in cs] for t, cs in lcols.items()}
    assert sorted(lcols) == sorted(pcols)
    for t in lcols:
        assert lcols[t] == pcols[t], t
        assert lite.columns(t) == pg.columns(t) == [c[0] for c in lcols[t]]
    assert lidx == pidx
    assert "host" in lite.columns("run") and "host" in lite.columns("experiment")
    for s in (lite, pg):
        assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
            st.SCHEMA_VERSION)


def test_a_schema_4_sqlite_store_upgrades_and_keeps_judging_its_runs(tmp_path):
    db = tmp_path / "k.db"
    c = sqlite3.connect(db)
    for script in (st.SCHEMA, st.MIGRATIONS[1], st.MIGRATIONS[2], st.MIGRATIONS[3]):
        c.executescript(script)
    c.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    c.execute("INSERT INTO run (id, tool_version, started_at, state, pid, boot_id) "
              "VALUES (1, '0.1.0', 1.0, 'running', 4194000, 'old-boot')")
    c.commit()
    c.close()
    s = st.Store.open(db, create=False)
    assert s.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(st.SCHEMA_VERSION)
    # a run from before hosts were recorded is this machine's, judged as before: its process is gone
    assert s.get_run(1).state == "interrupted"
    assert s.conn.execute("SELECT host FROM run WHERE id=1").fetchone()[0] is None


# -- the store's answers are the same in both back ends -----------------------------------------
def _scenario(location):
    """Every kind of write the store takes, and what it answers after (ids, values, experiments)."""
    s = st.Store.open(location)
    m = s.add_machine({"arch": "x86_64", "cpus": 2, "cpu_model": "X"})
    assert s.add_machine({"arch": "x86_64", "cpus": 2, "cpu_model": "X"}) == m
    m2 = s.add_machine({"arch": "aarch64", "cpus": 4, "emulated": True})
    out = {"machines": [m, m2, s.machine(m2), s.machine(None)]}
    runs = []
    for i in range(3):
        run = s.start_run(label=f"r{i}", variant="v", machine_id=m if i < 2 else m2, command=f"c{i}",
                          options={"reps": i})
        vals = [1.5 + i, 2.25, float(3 + i), 1e-9 * (i + 1), 123456789.125]
        raw = [(rep, 0, j, v, 10 + j, 10 ** 12 + j) for rep in range(2) for j, v in enumerate(vals)]
        rid = s.add_result(run.id, benchmark="a.b", params={"k": i % 2}, copies=1, status="ok", reason=None,
                           unit="ns/op", better="lower", summary=stats.summarize(vals).as_dict(), raw=raw,
                           monitors={"vmstat.pgfault": 3}, info=[{"rep": 0}], ops=2 ** 40, cpu_ns=3 * 10 ** 12,
                           noise=[{"steal": 0.5}], stop="fixed")
        s.add_result(run.id, benchmark="c.d", params={}, copies=2, status="failed", reason="exit 1", unit=None,
                     better=None, summary={"median": float("nan"), "stdev": float("nan")}, raw=[])
        s.add_result(run.id, benchmark="a.b", params={"k": i % 2}, copies=1, status="ok", reason=None, unit="ns/op",
                     better="lower", summary={"median": 9.0}, raw=[(0, 0, 0, 9.0, 1, 1)], replace=rid)
        s.add_profile(run_id=run.id, result_id=rid, benchmark="a.b", rep=0, path=f"{run.artefact_dir}/p.perf.data",
                      kallsyms=f"{run.artefact_dir}/kallsyms", event="cycles", samples=5, cpu_time_ns=7, ops=9,
                      meta={"copies": 1})
        s.finish_run(run.id, "complete" if i else "failed")
        runs.append(run.id)
    s.set_run_machine(runs[0], m2)
    eid = s.create_experiment(name="e", path="/x.toml", file_hash="h", spec={"a": [1, 2]}, cells=4)
    erun = s.start_run(label="e/a", variant="a", machine_id=m)
    s.link_run(erun.id, eid)
    for rep in range(2):
        s.add_cell_result(erun.id, experiment_id=eid, cell=f"a|a.b|P1|r{rep}", rep=rep, bench_key="a.b",
                          benchmark="a.b", params={}, copies=1, status="failed" if rep else "ok", reason=None,
                          unit="ns/op", better="lower", summary=None, raw=[(rep, 0, 0, 5.0 + rep, 1, 1)])
    s.add_cell_result(erun.id, experiment_id=eid, cell="a|a.b|P1|r1", rep=1, bench_key="a.b", benchmark="a.b",
                      params={}, copies=1, status="ok", reason=None, unit="ns/op", better="lower", summary=None,
                      raw=[(1, 0, 0, 6.5, 1, 1)], identity={"kernel_release": "6.1.0", "machine": {"cpus": 2}})
    with pytest.raises(StoreError, match="already stored"):
        s.add_cell_result(erun.id, experiment_id=eid, cell="a|a.b|P1|r1", rep=1, bench_key="a.b", benchmark="a.b",
                          params={}, copies=1, status="ok", reason=None, unit=None, better=None, summary=None, raw=[])
    s.set_cell_stop(eid, "a.b", 1, "2 repetitions")
    s.set_experiment_state(eid, "complete")
    with pytest.raises(InputError):
        s.find_run("nope")
    with pytest.raises(InputError):
        s.get_run(2 ** 70)

    def run_view(r):
        return (r.id, r.label, r.variant, r.state, r.machine_id, r.command, r.options,
                os.path.relpath(r.artefact_dir, s.artefact_root()))

    def result_view(r):
        d = dict(vars(r))
        return {k: v for k, v in d.items() if k not in ("started_at", "ended_at")}

    out["runs"] = [run_view(r) for r in s.list_runs()] + [run_view(r) for r in s.list_runs(limit=2, offset=1)]
    out["count"] = s.count_runs()
    out["find"] = run_view(s.find_run("r1"))
    out["results"] = [[result_view(r) for r in s.results(rid)] for rid in runs]
    # a failed cell measured again is a new row: SQLite gives it the id of the row it replaced (the largest
    # id, deleted, is used again), PostgreSQL the next of its sequence; nothing shows result ids
    out["cells"] = [{k: v for k, v in result_view(r).items() if k != "id"} for r in s.results(erun.id)]
    out["summaries"] = [[result_view(r) for r in s.results(rid, with_raw=False)] for rid in runs]
    out["history"] = [s.run_history(m, "a.b", {"k": 1}, 1), s.run_history(m2, "a.b", {"k": 0}, 1, min_reps=1)]
    out["profiles"] = [[(os.path.relpath(p.path, s.artefact_root()), p.event, p.samples, p.meta)
                        for p in s.profiles(rid)] for rid in runs]
    out["primary"] = [len(s.primary_profiles(rid)) for rid in runs]
    exp = s.find_experiment("e")
    out["experiment"] = {k: v for k, v in dataclasses.asdict(exp).items() if k not in ("created", "updated", "path")}
    out["experiments"] = [e.id for e in s.list_experiments()]
    out["cell_facts"] = [s.cell_states(eid), s.cell_stops(eid), [r.id for r in s.experiment_runs(eid)],
                    s.run_experiment_id(erun.id), s.run_experiment_id(runs[0]), s.cell_identities(eid)]
    return out


def test_both_back_ends_answer_the_same(tmp_path, pg_url):
    a = _scenario(tmp_path / "k.db")
    b = _scenario(pg_url)
    for key in a:
        assert a[key] == b[key], key


# -- hosts ---------------------------------------------------------------------------------
def test_only_its_own_host_marks_a_run_of_a_shared_store_interrupted(store_location):
    """In a shared (PostgreSQL) store; an SQLite file is written by one machine at a time, so a run another
    host left running in it (the store was copied mid-run) is over, as before hosts were recorded."""
    s = st.Store.open(store_location)
    mine, theirs, old = (s.start_run(label=x, machine_id=None) for x in ("mine", "theirs", "old"))
    dead = 2 ** 22 + 12345
    s.conn.execute("UPDATE run SET pid=? WHERE id IN (?, ?, ?)", (dead, mine.id, theirs.id, old.id))
    s.conn.execute("UPDATE run SET host='lab-board-7/0123456789ab', boot_id='another-boot' WHERE id=?", (theirs.id,))
    s.conn.execute("UPDATE run SET host=NULL WHERE id=?", (old.id,))
    s2 = st.Store.open(store_location)
    assert s2.get_run(mine.id).state == "interrupted"
    assert s2.get_run(old.id).state == "interrupted"      # written before hosts were recorded: this machine's
    assert s2.get_run(theirs.id).state == ("running" if s2.postgres else "interrupted")
    eid = s2.create_experiment(name="e", path="", file_hash="h", spec={}, cells=1)
    s2.conn.execute("UPDATE experiment SET pid=?, host='lab-board-7/0123456789ab' WHERE id=?", (dead, eid))
    assert s2.experiment_owner_alive(s2.get_experiment(eid)) == s2.postgres    # only its host can tell
    s2.conn.execute("UPDATE experiment SET host=? WHERE id=?", (st.host_id(), eid))
    assert not s2.experiment_owner_alive(s2.get_experiment(eid))


# -- many writers ---------------------------------------------------------------------------
WRITER = """
import sys
from kperfdiff.store import Store
s = Store.open(sys.argv[1])
m = s.add_machine({"arch": "x86_64", "cpus": 2, "cpu_model": "same"})
run = s.start_run(label="w" + sys.argv[2], machine_id=m)
print(m, flush=True)
sys.stdin.readline()           # everyone is connected: go
for i in range(60):
    s.add_result(run.id, benchmark="a.b", params={"i": i}, copies=1, status="ok", reason=None, unit="ns",
                 better="lower", summary={"median": 1.0}, raw=[(0, 0, j, float(j), 1, 1) for j in range(20)])
s.finish_run(run.id, "complete")
"""


def test_four_processes_write_one_postgresql_store_at_once(pg_url):
    st.Store.open(pg_url).conn.close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, pg_url, str(i)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    machines = {p.stdout.readline().strip() for p in procs}
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    s = st.Store.open(pg_url)
    assert len(machines) == 1 and s.conn.execute("SELECT count(*) FROM machine").fetchone()[0] == 1
    runs = s.list_runs()
    assert sorted(r.label for r in runs) == ["w0", "w1", "w2", "w3"] and {r.state for r in runs} == {"complete"}
    for r in runs:
        res = s.results(r.id)
        assert len(res) == 60 and all(x.values == [float(j) for j in range(20)] for x in res)


def _shared_experiment(path, **settings):
    """The experiment file these tests run: two variants of syscall.null, 2 reps of 2 tiny intervals."""
    return two_variant_experiment(path, "shared", **{"reps": 2, "intervals": 2, "min_batch_ms": 1, "tiny": True,
                                                     **settings})


def test_two_kperfdiff_processes_write_one_postgresql_store_at_once(tmp_path, pg_url):
    """`kperfdiff run` of an experiment and `kperfdiff bench`, started together on one store."""
    exp = _shared_experiment(tmp_path / "e.toml")
    env = dict(os.environ, KPERFDIFF_STORE=pg_url)
    procs = [subprocess.Popen([str(KPERFDIFF), "run", str(exp), "--no-progress"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL),
             subprocess.Popen([str(KPERFDIFF), "bench", "--only", "syscall.null,syscall.stat", "--reps", "2",
                               "--label", "side", *TINY], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    s = st.Store.open(pg_url, create=False)
    runs = {r.label: r for r in s.list_runs()}
    assert set(runs) == {"shared/A", "shared/B", "side"} and {r.state for r in runs.values()} == {"complete"}
    exp_row = s.find_experiment("shared")
    assert exp_row.state == "complete" and len(s.cell_states(exp_row.id)) == 4
    assert sorted(r.benchmark for r in s.results(runs["side"].id)) == ["syscall.null", "syscall.stat"]
    assert all(len(r.values) == 2 * 3 for r in s.results(runs["side"].id))
    assert s.conn.execute("SELECT count(*) FROM machine").fetchone()[0] == 1
    assert {r[0] for r in s.conn.execute("SELECT host FROM run")} == {st.host_id()}
    cmp = run_cli("compare", "--experiment", "shared", env={"KPERFDIFF_STORE": pg_url}, check=0)
    assert "experiment shared" in cmp.stdout and "complete" in cmp.stdout


# -- URLs, passwords, configuration -----------------------------------------------------------
def test_the_password_of_a_url_is_never_shown():
    for url in ("postgresql://me:hunter2@db.lab:5432/k?sslmode=require", "postgres://me:hunter2@db/k",
                "postgresql://me@db/k?password=hunter2&sslmode=require"):
        shown = backend.mask(f"kperfdiff --store {url} runs")
        assert "hunter2" not in shown and "***" in shown and "db" in shown
    assert backend.mask("postgresql://me@db/k") == "postgresql://me@db/k"
    assert backend.split_url("postgresql://me@/k?host=/run/pg&artefacts=/lab/art") == (
        "postgresql://me@/k?host=/run/pg", "/lab/art")


def test_a_run_recorded_through_a_url_with_a_password_keeps_it_masked(pg_cluster, tmp_path):
    pg_cluster.psql("CREATE DATABASE masked")
    url = pg_cluster.tcp_url("masked") + f"?artefacts={tmp_path / 'art'}"
    p = run_cli("--store", url, "bench", "--only", "syscall.null", *TINY, check=0)
    assert "s3cret" not in p.stderr + p.stdout
    listed = run_cli("--store", url, "runs", "--format", "json", check=0).stdout
    assert "s3cret" not in listed and "kperfdiff:***@127.0.0.1" in listed
    s = st.Store.open(url)
    assert "s3cret" not in s.get_run(1).command and "s3cret" not in str(s.path)


@pytest.mark.parametrize("url, words", [
    ("postgresql://kperfdiff:wrong-pw@127.0.0.1:{port}/postgres", "password authentication failed"),
    ("postgresql://kperfdiff:wrong-pw@127.0.0.1:1/postgres", "cannot connect"),
    ("postgresql://kperfdiff:wrong-pw@127.0.0.1:notaport/postgres", "postgresql://kperfdiff:***@"),
    ("postgresql://kperfdiff@/postgres?host={sock}&port={port}&nosuchparam=1", "nosuchparam"),
    ("postgresql://kperfdiff@/nosuchdb?host={sock}&port={port}", "nosuchdb"),
])
def test_a_bad_url_unreachable_server_or_wrong_password_is_one_sentence(pg_cluster, url, words):
    url = url.format(port=pg_cluster.port, sock=pg_cluster.sock)
    for args in (["--store", url, "runs"], ["--store", url, "bench", "--only", "syscall.null", *TINY]):
        p = run_cli(*args, timeout=60)
        assert_one_sentence_error(p)
        assert p.returncode == 2 and words in p.stderr and "wrong-pw" not in p.stderr, p.stderr


def test_an_empty_database_says_how_to_make_a_store(pg_cluster, tmp_path):
    pg_cluster.psql("CREATE DATABASE empty1")
    url = pg_cluster.url("empty1")
    p = run_cli("--store", url, "runs")
    assert_one_sentence_error(p)
    assert "no results store" in p.stderr and "store init" in p.stderr
    p = run_cli("--store", url, "bench", "--only", "syscall.null", *TINY)
    assert_one_sentence_error(p)
    assert "needs a folder for its artefacts" in p.stderr
    for bad, words in (("relative/dir", "not an absolute path"), ("s3://bucket/k", "s3:// is not implemented"),
                       ("file://otherhost/x", "another host")):
        p = run_cli("store", "init", url, "--artefacts", bad)
        assert_one_sentence_error(p)
        assert words in p.stderr
    pg_cluster.psql("CREATE TABLE other (x int)", "empty1")
    p = run_cli("store", "init", url, "--artefacts", tmp_path)
    assert_one_sentence_error(p)
    assert "has tables but no kperfdiff store" in p.stderr


def test_store_init_records_the_artefact_folder_and_a_url_overrides_it(pg_cluster, tmp_path):
    pg_cluster.psql("CREATE DATABASE init1")
    url = pg_cluster.url("init1")
    p = run_cli("store", "init", url, "--artefacts", (tmp_path / "a").as_uri(), check=0)
    assert f"artefacts in {tmp_path / 'a'}" in p.stderr and "schema" in p.stderr
    assert st.Store.open(url).artefact_root() == tmp_path / "a"
    run_cli("store", "init", url, "--artefacts", tmp_path / "b", check=0)     # again: only the folder changes
    assert st.Store.open(url).artefact_root() == tmp_path / "b"
    here = st.Store.open(url + f"&artefacts={tmp_path / 'mount'}")           # this machine mounts it elsewhere
    run = here.start_run(machine_id=None)
    assert run.artefact_dir == str(tmp_path / "mount" / "run-1")
    assert here.conn.execute("SELECT artefact_dir FROM run").fetchone()[0] == "run-1"   # stored relative
    # an SQLite store: init makes it; --artefacts is not for it
    run_cli("store", "init", tmp_path / "k.db", check=0)
    assert (tmp_path / "k.db").exists()
    assert_one_sentence_error(run_cli("store", "init", tmp_path / "k.db", "--artefacts", tmp_path))


def test_kperfdiff_store_names_the_store_of_every_command(pg_url, tmp_path):
    env = {"KPERFDIFF_STORE": pg_url}
    run_cli("bench", "--only", "syscall.null", "--label", "env", *TINY, env=env, check=0)
    assert "env" in run_cli("runs", env=env, check=0).stdout
    assert json.loads(run_cli("show", "env", "--format", "json", env=env, check=0).stdout)
    # --store wins over it
    assert "env" not in run_cli("--store", tmp_path / "other.db", "runs", env=env).stdout


def test_one_experiment_started_twice_at_once_is_run_once(tmp_path, pg_url):
    """Two `kperfdiff run` of one file on one store at once: one runs it, the other finds it running (or,
    if it came late, complete): never two experiments of one name, never a cell twice."""
    exp = _shared_experiment(tmp_path / "e.toml")
    env = dict(os.environ, KPERFDIFF_STORE=pg_url)
    procs = [subprocess.Popen([str(KPERFDIFF), "run", str(exp), "--no-progress"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
    outs = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert sorted(rc for *_, rc in outs)[0] == 0, outs
    for out, err, rc in outs:
        assert rc == 0 or "is being run now by process" in err, err
    s = st.Store.open(pg_url, create=False)
    assert [e.name for e in s.list_experiments()] == ["shared"]
    assert len(s.cell_states(s.find_experiment("shared").id)) == 4 and s.count_runs() == 2


def test_exclusive_lets_one_process_at_a_time_in(pg_url):
    """The lock around deciding which experiment to run (the test above rarely meets the race it closes)."""
    import threading
    import time
    a, b = st.Store.open(pg_url), st.Store.open(pg_url)
    order = []

    def other():
        with b.exclusive("experiment shared"):
            order.append("b")
    with a.exclusive("experiment shared"):
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.3)
        order.append("a")
    t.join(10)
    assert order == ["a", "b"]
    with a.exclusive("experiment other"), b.exclusive("experiment shared"):   # other names do not wait
        pass


def test_a_transaction_postgresql_undid_is_run_again(pg_url, monkeypatch):
    s = st.Store.open(pg_url)
    monkeypatch.setattr("kperfdiff.store.connection.time.sleep", lambda _s: None)
    tries = []

    def flaky():
        tries.append(1)
        s.conn.execute("INSERT INTO meta VALUES (?, 'x')", (f"k{len(tries)}",))
        if len(tries) < 3:
            raise backend.PgRetry("PostgreSQL: could not serialize access due to concurrent update", "40001")
        return "done"
    assert s._write(flaky) == "done" and len(tries) == 3
    # the undone attempts left nothing
    assert [r[0] for r in s.conn.execute("SELECT key FROM meta WHERE key LIKE 'k%' ORDER BY key")] == ["k3"]

    def never():
        raise backend.PgRetry("PostgreSQL: deadlock detected", "40P01")
    with pytest.raises(StoreError, match="other writers kept it busy"):
        s._write(never)


def test_a_connection_lost_in_the_middle_is_one_sentence(pg_url):
    s, other = st.Store.open(pg_url), st.Store.open(pg_url)
    other.conn.execute("SELECT pg_terminate_backend(?)", (s.conn.raw.info.backend_pid,))
    with pytest.raises(StoreError, match="PostgreSQL: .*terminat"):
        s.list_runs()
    with pytest.raises(StoreError, match="cannot write the store postgresql://"):
        s.start_run(machine_id=None)


# -- heartbeats: another machine's experiment ------------------------------------------------
DEAD_HOST = "lab-board-7/0123456789ab"
TAKE_OVER = """
import sys
from kperfdiff.store import Store
s = Store.open(sys.argv[1])
sys.stdin.readline()           # everyone is connected: go
print(s.take_over_experiment(int(sys.argv[2])), flush=True)
"""


def _left_by_another_host(s, eid: int, age_s: float) -> None:
    """Make the experiment (and its runs) look as if a process of another machine ran it, its last
    heartbeat age_s seconds ago by the store's clock."""
    s.conn.execute("UPDATE experiment SET state='running', host=?, pid=4194001, boot_id='their-boot', "
                   "updated=extract(epoch from clock_timestamp()) - ? WHERE id=?", (DEAD_HOST, age_s, eid))
    s.conn.execute("UPDATE run SET state='running', host=?, pid=4194001, boot_id='their-boot' "
                   "WHERE experiment_id=?", (DEAD_HOST, eid))


def test_a_heartbeat_says_an_experiment_of_another_host_is_alive_until_it_is_too_old(pg_url):
    s = st.Store.open(pg_url)
    eid = s.create_experiment(name="e", path="", file_hash="h", spec={}, cells=1)
    assert s.owns_experiment(eid) and s.heartbeat(eid) and 0 <= s.heartbeat_age(eid) < 5
    _left_by_another_host(s, eid, limits.EXPERIMENT_DEAD_S - 60)
    assert s.experiment_owner_alive(s.get_experiment(eid)) and not s.take_over_experiment(eid)
    assert not s.heartbeat(eid) and not s.owns_experiment(eid)      # it is not this process's
    _left_by_another_host(s, eid, limits.EXPERIMENT_DEAD_S + 60)
    assert not s.experiment_owner_alive(s.get_experiment(eid))
    assert s.take_over_experiment(eid) and not s.take_over_experiment(eid)
    assert s.get_experiment(eid).state == "interrupted"
    # claimed by this process again: judged, on its own host, by its pid (as every experiment of an SQLite store)
    s.set_experiment_state(eid, "running", claim=True)
    assert s.owns_experiment(eid) and not s.experiment_owner_alive(s.get_experiment(eid))


def test_of_machines_taking_over_one_dead_experiment_at_once_one_wins(pg_url):
    s = st.Store.open(pg_url)
    eid = s.create_experiment(name="e", path="", file_hash="h", spec={}, cells=1)
    run = s.start_run(label="e/a", variant="a", machine_id=None)
    s.link_run(run.id, eid)
    _left_by_another_host(s, eid, limits.EXPERIMENT_DEAD_S + 1)
    procs = [subprocess.Popen([sys.executable, "-c", TAKE_OVER, pg_url, str(eid)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate("go\n", timeout=120) for p in procs]
    assert sorted(out.strip() for out, _ in outs) == ["False", "False", "False", "True"], outs
    assert s.get_experiment(eid).state == "interrupted" and s.get_run(run.id).state == "interrupted"


def _stored_shared_experiment(tmp_path, pg_url):
    """The experiment file run once to the end on the store, then variant B's cells removed (something left
    to measure) and the experiment made another machine's."""
    exp = _shared_experiment(tmp_path / "e.toml")
    run_cli("run", str(exp), "--no-progress", env={"KPERFDIFF_STORE": pg_url}, check=0)
    s = st.Store.open(pg_url, create=False)
    eid = s.find_experiment("shared").id
    s.conn.execute("DELETE FROM result WHERE experiment_id=? AND cell LIKE 'B|%'", (eid,))
    return exp, s, eid


def test_an_experiment_of_a_dead_machine_is_taken_over_and_a_live_one_refused(tmp_path, pg_url):
    exp, s, eid = _stored_shared_experiment(tmp_path, pg_url)
    env = {"KPERFDIFF_STORE": pg_url}
    _left_by_another_host(s, eid, 42)
    p = run_cli("run", str(exp), "--no-progress", env=env)
    assert_one_sentence_error(p)
    assert re.search(rf"kperfdiff: experiment shared \(id {eid}\) is being run now by process 4194001 on {DEAD_HOST}: "
                     r"its heartbeat was last seen (4[2-9]|[5-9]\d) s ago \(at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\); wait for it or "
                     r"stop it there \(if that machine is dead, kperfdiff run takes the experiment over once its "
                     r"heartbeat is 10 min old\)$", p.stderr.strip()), p.stderr
    assert s.get_experiment(eid).host == DEAD_HOST and len(s.cell_states(eid)) == 2      # nothing changed
    _left_by_another_host(s, eid, limits.EXPERIMENT_DEAD_S + 125)
    p = run_cli("run", str(exp), "--no-progress", env=env, check=0)
    assert re.search(rf"kperfdiff: experiment shared \(id {eid}\) was left running by process 4194001 on {DEAD_HOST}, "
                     r"and its heartbeat was last seen 1[23] min ago \(at [-\d: ]+\): taking it over \(that process, if "
                     r"it comes back, stops\)\n", p.stderr), p.stderr
    assert f"resuming experiment shared (id {eid}): 2 of 4 cells already stored" in p.stderr
    e = s.get_experiment(eid)
    assert (e.state, e.host, len(s.cell_states(eid))) == ("complete", st.host_id(), 4)
    assert {(r.state, r.id) for r in s.experiment_runs(eid)} == {("complete", r.id) for r in s.experiment_runs(eid)}
    assert s.count_runs() == 2 and [x.id for x in s.list_experiments()] == [eid]


def test_two_machines_resuming_a_dead_ones_experiment_at_once_take_it_over_once(tmp_path, pg_url):
    exp, s, eid = _stored_shared_experiment(tmp_path, pg_url)
    _left_by_another_host(s, eid, limits.EXPERIMENT_DEAD_S + 1)
    env = dict(os.environ, KPERFDIFF_STORE=pg_url)
    procs = [subprocess.Popen([str(KPERFDIFF), "run", str(exp), "--no-progress"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
    outs = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert sum("taking it over" in err for _, err, _ in outs) == 1, outs
    for _, err, rc in outs:
        assert rc == 0 or "is being run now by process" in err, err
    assert s.get_experiment(eid).state == "complete" and len(s.cell_states(eid)) == 4 and s.count_runs() == 2


HEARTBEAT_FAST = """
import runpy, sys
from kperfdiff.core import limits
limits.HEARTBEAT_S = 0.2
sys.argv = ["kperfdiff", *sys.argv[1:]]
runpy.run_module("kperfdiff", run_name="__main__")
"""


def test_the_heartbeat_advances_while_kperfdiff_run_measures(tmp_path, pg_url):
    """A real `kperfdiff run` on PostgreSQL (its heartbeat every 0.2 s instead of 30 s): the experiment's
    heartbeat moves on while its cells are measured, from its own thread."""
    exp = _shared_experiment(tmp_path / "e.toml", reps=6, min_batch_ms=40)
    p = subprocess.Popen([sys.executable, "-c", HEARTBEAT_FAST, "run", str(exp), "--no-progress"],
                         env=dict(os.environ, KPERFDIFF_STORE=pg_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL)
    beats: set[float] = set()
    s = None
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        try:
            s = s or st.Store.open(pg_url, create=False)
            row = s.conn.execute("SELECT state, updated FROM experiment").fetchone()
        except StoreError:
            row = None            # not made yet
        if row and row[0] == "running":
            beats.add(row[1])
        time.sleep(0.05)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert len(beats) >= 4, beats
    assert s.find_experiment("shared").state == "complete"


def test_a_process_whose_experiment_another_machine_took_over_stops(pg_url, monkeypatch):
    from kperfdiff.experiments import run as experiment
    monkeypatch.setattr(limits, "HEARTBEAT_S", 0.05)
    s = st.Store.open(pg_url)
    eid = s.create_experiment(name="e", path="", file_hash="h", spec={}, cells=1)
    s.conn.execute("UPDATE experiment SET updated=updated - 100 WHERE id=?", (eid,))
    beat = experiment._Heartbeat(s, eid)
    beat.start()
    try:
        deadline = time.monotonic() + 30
        while s.heartbeat_age(eid) > 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.heartbeat_age(eid) < 50 and not beat.lost
        beat.check("e")
        _left_by_another_host(s, eid, 0)           # another machine's now (it took the experiment over)
        while not beat.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(StoreError, match=r"^experiment e \(id 1\) was taken over by another machine while this "
                                             r"process's heartbeat did not reach the store; this process stops"):
            beat.check("e")
    finally:
        beat.stop()
    assert s.get_experiment(eid).host == DEAD_HOST
