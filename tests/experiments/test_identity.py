"""Experiments know what they measured: each cell keeps the identity of the kernel, machine and
kperfdiff it ran on; a resume onto cells of another identity is refused (--restart, --name), the
dry run counts what is stored, and the manual's CI snippets (docs/ci.md, docs/lab.md) gate each commit's own cells."""
import json
import os
import re
import sqlite3
import struct
import subprocess
from pathlib import Path

from support import KPERFDIFF, ROOT, assert_one_sentence_error, run_cli
from kperfdiff.experiments import file as exp_file, run as ex
from kperfdiff.targets import machine
from kperfdiff import store as st
from kperfdiff.targets.base import facts_from_files

EXP = """
name = "{name}"
benchmarks = ["syscall.null"]
cores = [1]
reps = {reps}
intervals = 2
min_batch_ms = 1
tiny = true
[[variant]]
label = "base"
[[variant]]
label = "patch"
"""

# A kernel of another release, as this machine would report it: os.uname() of every kperfdiff process
# (PYTHONPATH's sitecustomize) says $KPD_FAKE_RELEASE; nothing in kperfdiff knows.
SITECUSTOMIZE = """
import os
_uname = os.uname
def _fake():
    u = _uname()
    return os.uname_result((u.sysname, u.nodename, os.environ.get("KPD_FAKE_RELEASE") or u.release, u.version,
                            u.machine))
os.uname = _fake
"""


def fake_kernel_env(tmp_path: Path, release: str) -> dict:
    d = tmp_path / "fake-uname"
    d.mkdir(exist_ok=True)
    (d / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": f"{d}:{os.environ.get('PYTHONPATH', '')}", "KPD_FAKE_RELEASE": release}


def _note(order: str, name: bytes, kind: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack(order + "III", len(name), len(desc), kind) + pad(name) + pad(desc)


def test_build_id_is_read_from_kernel_notes_in_either_byte_order_and_else_unknown(tmp_path):
    bid = bytes(range(1, 21))
    for order in "<>":
        notes = _note(order, b"Xen\0", 6, b"\0\0\0\1" * 3) + _note(order, b"GNU\0", 3, bid)
        assert machine.build_id_from_notes(notes) == bid.hex()
    assert machine.build_id_from_notes(_note("<", b"Linux\0", 3, b"6.1")) is None
    assert machine.build_id_from_notes(b"\xff" * 40) is None and machine.build_id_from_notes(b"") is None
    assert machine.kernel_build_id(str(tmp_path / "hidden")) == "unknown"     # e.g. a CI runner
    p = tmp_path / "notes"
    p.write_bytes(_note("<", b"GNU\0", 3, bid))
    assert machine.kernel_build_id(str(p)) == bid.hex()
    # a guest's or board's: its job leaves the notes as `od -An -v -tx1` prints them
    od = subprocess.run(["od", "-An", "-v", "-tx1", str(p)], capture_output=True, text=True, check=True).stdout
    f = facts_from_files({"release": "6.9.0-guest", "notes": od, "machine": "aarch64"}, emulated=True,
                         virtualisation="tcg")
    assert f["kernel_build_id"] == bid.hex() and f["kernel_release"] == "6.9.0-guest"
    assert facts_from_files({}, emulated=True, virtualisation="tcg")["kernel_build_id"] == "unknown"
    assert "od -An -v -tx1 /sys/kernel/notes" in ex.targets.base.job_script([], "/b", "/o", facts=True)


def test_identity_difference_names_what_differs():
    f = {"kernel_release": "6.1.0", "kernel_build_id": "ab" * 20, "kernel_version": "#1 SMP", "cmdline": "quiet",
         "arch": "x86_64", "cpu_model": "X", "cpus": 4, "mem_total_kb": 16 * 1048576, "page_size": 4096,
         "virtualisation": "none", "thp_enabled": "always", "hostname": "a", "boot_id": "1"}
    now = machine.identity(f)
    # what a variant or a reboot changes is not part of it
    assert machine.identity_difference(now, machine.identity(f | {"thp_enabled": "never", "hostname": "b",
                                                                   "boot_id": "2", "swap_active": True})) is None
    assert machine.identity_difference(now, machine.identity(f | {"kernel_release": "6.2.0"})) == \
        "kernel release '6.1.0', now '6.2.0'"
    assert "kernel build id" in machine.identity_difference(now, machine.identity(f | {"kernel_build_id": "cd" * 20}))
    # an unreadable build id is not compared; the release, uname -v and command line still are
    assert machine.identity_difference(now, machine.identity(f | {"kernel_build_id": "unknown"})) is None
    assert "kernel command line 'quiet', now 'quiet mitigations=off'" in machine.identity_difference(
        now, machine.identity(f | {"cmdline": "quiet mitigations=off"}))
    assert machine.identity_difference(now, machine.identity(f | {"cpus": 8})) == "machine (cpus 4, now 8)"
    assert machine.identity_difference(now, now | {"kperfdiff": "9.9"}).startswith("kperfdiff version")
    assert "no identity" in machine.identity_difference(None, now)


def _db_rows(db: Path, sql: str, args=()) -> list:
    c = sqlite3.connect(db)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def test_resume_onto_cells_of_another_kernel_is_refused_and_restart_measures_afresh(tmp_path, home):
    p = tmp_path / "e.toml"
    p.write_text(EXP.format(name="idexp", reps=2))
    db = home / "kperfdiff.db"
    r = run_cli("run", p, "--dry-run", check=0)
    assert "stored: none; run would measure all 4 cells" in r.stdout
    run_cli("run", p, "--no-progress", check=0)
    release = os.uname().release
    idents = [json.loads(x) for (x,) in _db_rows(db, "SELECT identity FROM result")]
    assert len(idents) == 4 and all(i == machine.identity(machine.facts(probe_perf=False)) for i in idents)
    assert idents[0]["kernel_release"] == release and idents[0]["kperfdiff"]
    r = run_cli("run", p, "--dry-run", check=0)
    assert "stored: 4 of 4 cells, in experiment idexp (id 1, complete), measured on this machine's kernel as it " \
           "is now; run would measure 0" in r.stdout
    # the same experiment, its cells measured on another kernel: this machine's is not theirs
    c = sqlite3.connect(db)
    c.execute("UPDATE result SET identity=json_set(identity, '$.kernel_release', '6.1.0-old') "
              "WHERE cell LIKE 'patch|%'")
    c.commit()
    c.close()
    before = _db_rows(db, "SELECT id, state FROM run UNION ALL SELECT id, state FROM experiment")
    r = run_cli("run", p, "--dry-run", check=0)
    assert f"2 stored cells of variant patch were measured on kernel release '6.1.0-old', now '{release}': run " \
           f"refuses to mix them; --restart (or another --name) measures all 4 cells afresh" in r.stdout
    r = run_cli("run", p, "--no-progress")
    assert r.returncode == 2
    assert_one_sentence_error(r)
    assert (f"experiment idexp (id 1) was measured on another kernel, machine or kperfdiff than this run's (2 stored "
            f"cells of variant patch were measured on kernel release '6.1.0-old', now '{release}')") in r.stderr
    assert "--restart" in r.stderr and "--name NAME" in r.stderr and "cells to measure" not in r.stderr
    # refused before anything was measured or marked
    assert _db_rows(db, "SELECT id, state FROM run UNION ALL SELECT id, state FROM experiment") == before
    assert _db_rows(db, "SELECT count(*) FROM result") == [(4,)]
    r = run_cli("run", p, "--dry-run", "--restart", check=0)
    assert "with --restart run keeps them (marked superseded) and measures all 4 cells afresh" in r.stdout
    r = run_cli("run", p, "--no-progress", "--restart", check=0)
    assert "4 cells to measure" in r.stderr
    s = st.Store.open(db)
    assert [(e.id, e.state) for e in s.list_experiments()] == [(1, "superseded"), (2, "complete")]
    assert s.find_experiment("idexp").id == 2
    old = _db_rows(db, "SELECT count(*) FROM result WHERE experiment_id=1 AND status='ok'")
    assert old == [(4,)]                                     # the old cells are kept as they were
    assert {json.loads(x)["kernel_release"] for (x,) in
            _db_rows(db, "SELECT identity FROM result WHERE experiment_id=2")} == {release}
    # an unreadable build id on either side is not a difference: the resume goes on
    c = sqlite3.connect(db)
    c.execute("UPDATE result SET identity=json_set(identity, '$.kernel_build_id', 'unknown') WHERE experiment_id=2")
    c.commit()
    c.close()
    r = run_cli("run", p, "--no-progress", check=0)
    assert "resuming experiment idexp (id 2): 4 of 4 cells already stored" in r.stderr
    # another build of the same release is refused, by its build id
    c = sqlite3.connect(db)
    c.execute("UPDATE result SET identity=json_set(identity, '$.kernel_build_id', '00ff') WHERE experiment_id=2")
    c.commit()
    c.close()
    now_bid = machine.kernel_build_id()
    r = run_cli("run", p, "--no-progress")
    if now_bid != "unknown":
        assert r.returncode == 2 and f"kernel build id '00ff', now '{now_bid}'" in r.stderr
    else:
        assert r.returncode == 0


def test_a_changed_kernel_release_is_seen_by_a_real_run(tmp_path, home):
    """The identity a run stores and checks is the one this machine reports (os.uname, not the store)."""
    p = tmp_path / "e.toml"
    p.write_text(EXP.format(name="kern", reps=1))
    run_cli("run", p, "--no-progress", check=0, env=fake_kernel_env(tmp_path, "6.1.0-base"))
    r = run_cli("run", p, "--no-progress", env=fake_kernel_env(tmp_path, "6.2.0-next"))
    assert r.returncode == 2 and "kernel release '6.1.0-base', now '6.2.0-next'" in r.stderr
    r = run_cli("run", p, "--no-progress", "--name", "kern-next", check=0, env=fake_kernel_env(tmp_path, "6.2.0-next"))
    assert "2 cells to measure" in r.stderr
    db = home / "kperfdiff.db"
    got = _db_rows(db, "SELECT e.name, json_extract(r.identity, '$.kernel_release') FROM result r "
                       "JOIN experiment e ON e.id = r.experiment_id ORDER BY r.id")
    assert got == [("kern", "6.1.0-base")] * 2 + [("kern-next", "6.2.0-next")] * 2
    r = run_cli("run", p, "--name", "no/such name", "--dry-run")
    assert r.returncode == 2 and "--name 'no/such name' must be a word" in r.stderr


def test_cells_of_a_schema_5_store_have_no_identity_and_are_not_resumed_onto(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text(EXP.format(name="old", reps=1))
    e = exp_file.parse(p)
    db = tmp_path / "old.db"
    c = sqlite3.connect(db)
    for script in (st.SCHEMA, st.MIGRATIONS[1], st.MIGRATIONS[2], st.MIGRATIONS[3], st.MIGRATIONS[4]):
        c.executescript(script)
    c.execute("INSERT INTO meta VALUES ('schema_version', '5')")
    c.execute("INSERT INTO experiment (id, name, file_hash, state, cells, created) VALUES (1, 'old', ?, 'complete', "
              "2, 1.0)", (e.file_hash(),))
    for i, v in enumerate(("base", "patch"), 1):
        c.execute("INSERT INTO run (id, label, variant, tool_version, started_at, state, experiment_id) "
                  "VALUES (?, ?, ?, '0.1.0', 1.0, 'complete', 1)", (i, f"old/{v}", v))
        c.execute("INSERT INTO result (run_id, benchmark, status, median, experiment_id, cell, rep, bench_key) "
                  "VALUES (?, 'syscall.null', 'ok', 50.0, 1, ?, 0, 'syscall.null')", (i, f"{v}|syscall.null|P1|r0"))
    c.commit()
    c.close()
    r = run_cli("run", p, "--store", db, "--dry-run", check=0)
    assert "1 stored cells of variant base have no identity (stored by a kperfdiff that did not record what its " \
           "cells ran on): run refuses to mix them" in r.stdout
    assert _db_rows(db, "SELECT value FROM meta WHERE key='schema_version'") == [(str(st.SCHEMA_VERSION),)]
    r = run_cli("run", p, "--store", db, "--no-progress")
    assert r.returncode == 2 and "have no identity" in r.stderr and "--restart" in r.stderr
    r = run_cli("run", p, "--store", db, "--no-progress", "--restart", check=0)
    assert "2 cells to measure" in r.stderr
    assert _db_rows(db, "SELECT experiment_id, identity IS NULL, count(*) FROM result GROUP BY 1, 2") == \
        [(1, 1, 2), (2, 0, 2)]


def test_dry_run_counts_what_is_stored_and_what_is_left(tmp_path, home):
    p = tmp_path / "e.toml"
    p.write_text(EXP.format(name="part", reps=2))
    run_cli("run", p, "--no-progress", check=0)
    c = sqlite3.connect(home / "kperfdiff.db")
    c.execute("DELETE FROM result WHERE cell='patch|syscall.null|P1|r1'")
    c.execute("UPDATE experiment SET state='interrupted'")
    c.commit()
    c.close()
    r = run_cli("run", p, "--dry-run", check=0)
    assert "stored: 3 of 4 cells, in experiment part (id 1, interrupted), measured on this machine's kernel as it " \
           "is now; run would measure 1" in r.stdout
    p.write_text(EXP.format(name="part", reps=3))
    r = run_cli("run", p, "--dry-run", check=0)
    assert "stored: 3 of 6 cells, in experiment part (id 1, interrupted), made from another version of the file: " \
           "run refuses to resume it; --restart (or another --name) measures all 6 cells afresh" in r.stdout


def _snippet(page: str, title: str) -> list[str]:
    """The shell lines of one of the manual's CI snippets (the yaml block after ``title`` in docs/``page``)."""
    text = (ROOT / "docs" / page).read_text()
    block = text.split(title, 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    lines = []
    for ln in block.splitlines():
        ln = ln.strip()
        ln = ln[2:] if ln.startswith("- ") else ln
        if ln.startswith("kperfdiff ") or ln.startswith("export "):
            lines.append(ln)
    return lines


def test_readme_ci_snippet_run_twice_on_one_store_gates_each_commits_own_cells(tmp_path, home):
    """Two pipelines of the README's GitHub Actions snippet on a runner that keeps its store, the second
    on a new kernel: the second measures and gates its own cells, never the first one's."""
    lines = _snippet("ci.md", "GitHub Actions:")
    assert len(lines) == 2 and lines[0].startswith("kperfdiff run perf-gate.toml")
    (tmp_path / "perf-gate.toml").write_text(EXP.format(name="perf-gate", reps=3))
    script = "set -e\n" + "\n".join(lines) + "\n"
    db = home / "kperfdiff.db"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kperfdiff").symlink_to(KPERFDIFF)

    def pipeline(sha, release):
        env = dict(os.environ) | fake_kernel_env(tmp_path, release) | {
            "GITHUB_SHA": sha, "PATH": f"{bindir}:{os.environ['PATH']}"}
        r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode in (0, 1), r.stderr            # the gate's verdict, not a refusal or an error
        return r, (tmp_path / "perf-gate.xml").read_text()

    first, xml1 = pipeline("c0ffee1", "6.1.0-base")
    second, xml2 = pipeline("c0ffee2", "6.2.0-next")
    assert "6 cells to measure" in first.stderr and "6 cells to measure" in second.stderr
    assert "resuming" not in second.stderr
    cells = _db_rows(db, "SELECT e.name, json_extract(r.identity, '$.kernel_release'), count(*) FROM result r "
                         "JOIN experiment e ON e.id = r.experiment_id GROUP BY 1, 2 ORDER BY 1")
    assert cells == [("perf-gate-c0ffee1", "6.1.0-base", 6), ("perf-gate-c0ffee2", "6.2.0-next", 6)]
    # the second gate judged the second pipeline's cells: its JUnit report is of its own experiment
    assert "perf-gate-c0ffee2" in xml2 and "perf-gate-c0ffee1" not in xml2
    # the same pipeline with the experiment's fixed name: the second is refused, never gates the first's cells
    (tmp_path / "fixed.toml").write_text(EXP.format(name="fixed", reps=3))
    run_cli("run", tmp_path / "fixed.toml", "--no-progress", check=0, env=fake_kernel_env(tmp_path, "6.1.0-base"))
    r = run_cli("run", tmp_path / "fixed.toml", "--no-progress", env=fake_kernel_env(tmp_path, "6.2.0-next"))
    assert r.returncode == 2 and "now '6.2.0-next'" in r.stderr


def test_readme_ci_snippets_name_the_experiment_per_commit():
    gitlab = _snippet("ci.md", "GitLab CI:")
    assert gitlab[0] == 'kperfdiff run perf-gate.toml --name "perf-gate-$CI_COMMIT_SHA"'
    assert gitlab[1].startswith('kperfdiff compare --experiment "perf-gate-$CI_COMMIT_SHA" --fail-on-regression')
    lab = _snippet("lab.md", "## Every patch, on the lab, gated")
    assert 'export GATE="patch-$CI_COMMIT_SHORT_SHA"' in lab
    assert all('--name "$GATE"' in x for x in lab if x.startswith("kperfdiff run"))
    assert re.search(r'kperfdiff compare --experiment "\$GATE" --fail-on-regression', "\n".join(lab))


def test_lava_variants_cells_keep_the_guests_identity_and_a_finished_rerun_checks_it(tmp_path, home, monkeypatch):
    """A board's cells keep the identity its job reported (the guest's kernel, not this machine's); a
    finished experiment run again asks each board variant what it runs now (one empty job) and refuses
    when its stored cells were measured on another kernel, leaving the experiment as it was."""
    from support.lava_fake import FakeLava
    from targets.test_lava import EXPERIMENT, TOKEN
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    kernel = tmp_path / "vmlinuz-test"
    kernel.write_bytes(os.urandom(4096))
    server = FakeLava(TOKEN)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(host=server.host, kernel=kernel))
    env = {"KPERFDIFF_LAVA_TOKEN": TOKEN}
    db = home / "kperfdiff.db"
    try:
        run_cli("run", exp, "--no-progress", env=env, timeout=900, check=0)
        assert len(server.definitions) == 2
        s = st.Store.open(db)
        for run in s.experiment_runs(1):
            facts = s.machine(run.machine_id).facts
            got = {x for (x,) in _db_rows(db, "SELECT identity FROM result WHERE run_id=?", (run.id,))}
            assert [json.loads(x) for x in got] == [machine.identity(facts)]
            assert facts["lava_device_type"] == "qemu"
        release = json.loads(got.pop())["kernel_release"]
        r = run_cli("run", exp, "--no-progress", env=env, timeout=900, check=0)   # the same kernels: goes on
        assert "asking lava://" in r.stderr and len(server.definitions) == 4
        c = sqlite3.connect(db)
        c.execute("UPDATE result SET identity=json_set(identity, '$.kernel_release', '5.0-old') WHERE cell LIKE "
                  "'nothp|%'")
        c.commit()
        c.close()
        r = run_cli("run", exp, "--no-progress", env=env, timeout=900)
        assert r.returncode == 2, r.stderr
        assert f"cells of variant nothp were measured on kernel release '5.0-old', now '{release}'" in r.stderr
        assert _db_rows(db, "SELECT state FROM experiment") == [("complete",)]
        assert {x for (x,) in _db_rows(db, "SELECT state FROM run")} == {"complete"}
    finally:
        server.close()


def test_a_resumed_lava_variant_is_checked_at_its_first_job_before_its_cells_are_stored(tmp_path, home,
                                                                                       monkeypatch):
    from support.lava_fake import COMPLETE, FakeLava
    from targets.test_lava import EXPERIMENT, TOKEN
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    kernel = tmp_path / "vmlinuz-test"
    kernel.write_bytes(os.urandom(4096))
    bad = {"states": ["job-submitted", "job-incomplete"], "log": "job-incomplete.log"}
    good = {"states": COMPLETE, "log": "job-complete.log"}
    server = FakeLava(TOKEN, scripts=[good, good, bad, bad])       # repetition 1 fails on both variants
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(host=server.host, kernel=kernel).replace("reps = 1", "reps = 2"))
    env = {"KPERFDIFF_LAVA_TOKEN": TOKEN}
    db = home / "kperfdiff.db"
    try:
        r = run_cli("run", exp, "--no-progress", env=env, timeout=900)
        assert r.returncode == 1, r.stderr
        before = _db_rows(db, "SELECT cell, status FROM result ORDER BY cell")
        assert [s for _, s in before].count("ok") == 4 and [s for _, s in before].count("failed") == 4
        c = sqlite3.connect(db)
        c.execute("UPDATE result SET identity=json_set(identity, '$.kernel_release', '5.0-old') WHERE status='ok'")
        c.commit()
        c.close()
        # the runs' machine as it was then (another kernel release): the refused job does not replace it
        s = st.Store.open(db)
        for run in s.experiment_runs(1):
            s.set_run_machine(run.id, s.add_machine(s.machine(run.machine_id).facts | {"kernel_release": "5.0-old"}))
        machines = _db_rows(db, "SELECT id, machine_id FROM run ORDER BY id")
        s.conn.close()
        r = run_cli("run", exp, "--no-progress", env=env, timeout=900)
        assert r.returncode == 2, r.stderr
        assert "measured on kernel release '5.0-old', now" in r.stderr and "--restart" in r.stderr
        assert len(server.definitions) > 4                            # it asked the lab: a job ran
        assert _db_rows(db, "SELECT cell, status FROM result ORDER BY cell") == before   # nothing stored
        assert _db_rows(db, "SELECT id, machine_id FROM run ORDER BY id") == machines
        assert _db_rows(db, "SELECT state FROM experiment") == [("failed",)]
        r = run_cli("run", exp, "--no-progress", "--restart", env=env, timeout=900, check=0)
        assert "8 cells" in r.stderr
    finally:
        server.close()


def test_studies_run_refuses_stale_cells_too_and_restarts(tmp_path):
    from studies.test_studies import SUPERPAGES_TINY
    f = tmp_path / "tiny.toml"
    f.write_text(SUPERPAGES_TINY)
    db = tmp_path / "s.db"
    run_cli("--store", db, "studies", "run", f, "--no-progress", check=0)
    c = sqlite3.connect(db)
    c.execute("UPDATE result SET identity=json_set(identity, '$.machine.cpu_model', 'Other CPU')")
    c.commit()
    c.close()
    r = run_cli("--store", db, "studies", "run", f, "--no-progress")
    assert r.returncode == 2 and "machine (cpu_model 'Other CPU', now" in r.stderr and "--restart" in r.stderr
    run_cli("--store", db, "studies", "run", f, "--no-progress", "--restart", check=0)
    assert _db_rows(db, "SELECT state FROM experiment ORDER BY id") == [("superseded",), ("complete",)]
