"""The runs of a store: one ``kperfdiff bench`` or one variant of an experiment each."""
from __future__ import annotations

import json
import os
import time

from kperfdiff import __version__
from kperfdiff.core.errors import InputError
from kperfdiff.core.records import Run
from kperfdiff.store import backend
from kperfdiff.store.artefacts import Artefacts
from kperfdiff.store.connection import sql_int
from kperfdiff.core.hosts import boot_id, host_id, pid_alive

RUN_STATES = ("running", "complete", "interrupted", "failed")


class Runs(Artefacts):
    """The run table."""

    def start_run(self, *, label: str = "", variant: str = "", target: str = "local", machine_id: int | None,
                  command: str = "", options: dict | None = None, experiment_hash: str | None = None) -> Run:
        now = time.time()

        def w():
            cur = self.conn.execute(
                "INSERT INTO run (label, variant, target, machine_id, tool_version, started_at, state, command, "
                "options, pid, boot_id, experiment_hash, host) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (label, variant, target, machine_id, __version__, now, "running", backend.mask(command),
                 json.dumps(options or {}), os.getpid(), boot_id(), experiment_hash, host_id()))
            rid = cur.lastrowid
            adir = self.artefact_root() / f"run-{rid}"
            self.conn.execute("UPDATE run SET artefact_dir=? WHERE id=?", (self.stored_path(adir), rid))
            return rid
        rid = self._write(w)
        return self.get_run(rid)

    def set_run_machine(self, run_id: int, machine_id: int) -> None:
        """Attach the machine a run measured on, once a remote target has said what it is."""
        self._write(lambda: self.conn.execute("UPDATE run SET machine_id=? WHERE id=?", (machine_id, run_id)))

    def finish_run(self, run_id: int, state: str) -> None:
        if state not in RUN_STATES:
            raise ValueError(state)
        self._write(lambda: self.conn.execute("UPDATE run SET state=?, ended_at=? WHERE id=?",
                                              (state, time.time(), run_id)))

    def _run(self, row, folders: dict[str, str] | None = None) -> Run:
        """A run from its row; ``folders``: the folder cache of a listing (see _artefact_text)."""
        adir = row["artefact_dir"]
        if adir:
            adir = self._artefact_text(adir, folders) if folders is not None else str(self.artefact_path(adir))
        return Run(id=row["id"], label=row["label"], variant=row["variant"], target=row["target"],
                   machine_id=row["machine_id"], tool_version=row["tool_version"], started_at=row["started_at"],
                   ended_at=row["ended_at"], state=row["state"], command=row["command"],
                   options=json.loads(row["options"] or "{}"), artefact_dir=adir or None,
                   experiment_hash=row["experiment_hash"])

    def get_run(self, run_id: int) -> Run:
        row = self.conn.execute("SELECT * FROM run WHERE id=?", (run_id,)).fetchone() if sql_int(run_id) else None
        if not row:
            raise InputError(f"there is no run {run_id} in the store {self.path}")
        return self._run(row)

    def list_runs(self, limit: int | None = None, offset: int = 0) -> list[Run]:
        """Runs, oldest first: every run, or with ``limit`` the newest ``limit`` of them after
        leaving out the newest ``offset`` (a page counted back from the newest run)."""
        folders: dict[str, str] = {}
        if limit is None and not offset:
            rows = self.conn.execute("SELECT * FROM run ORDER BY id")
        else:
            rows = self.conn.execute("SELECT * FROM (SELECT * FROM run ORDER BY id DESC LIMIT ? OFFSET ?) AS page "
                                     "ORDER BY id", (2 ** 62 if limit is None else limit, offset))
        return [self._run(r, folders) for r in rows]

    def count_runs(self) -> int:
        return self.conn.execute("SELECT count(*) FROM run").fetchone()[0]

    def find_run(self, ref: str) -> Run:
        """A run by id, or by a label that names exactly one run."""
        ref = ref.strip()
        if ref.isdigit():
            return self.get_run(int(ref))
        rows = self.conn.execute("SELECT * FROM run WHERE label=? ORDER BY id", (ref,)).fetchall()
        if len(rows) == 1:
            return self._run(rows[0])
        if len(rows) > 1:
            ids = ", ".join(str(r["id"]) for r in rows)
            raise InputError(f"the label {ref!r} names several runs ({ids}); give a run id")
        raise InputError(f"there is no run {ref!r} in the store {self.path}; see kperfdiff runs")

    def _mark_dead_runs(self) -> None:
        """Mark interrupted the runs left running by a process that is gone (or of a boot that is
        over). In a PostgreSQL store, only this host's: another host's runs are that host's to judge.
        An SQLite file is written by one machine at a time, so a run another host left running in it
        (a store copied mid-run) is over."""
        boot, host = boot_id(), host_id()
        rows = self.conn.execute("SELECT id, pid, boot_id, host FROM run WHERE state='running'").fetchall()
        for r in rows:
            if self.postgres and r["host"] and r["host"] != host:
                continue
            if r["boot_id"] != boot or not pid_alive(r["pid"]) or r["pid"] == os.getpid():
                self.finish_run(r["id"], "interrupted")

    def link_run(self, run_id: int, exp_id: int) -> None:
        self._write(lambda: self.conn.execute("UPDATE run SET experiment_id=? WHERE id=?", (exp_id, run_id)))

    def reopen_run(self, run_id: int) -> Run:
        """Mark a run running again, owned by this process (a resumed experiment)."""
        self._write(lambda: self.conn.execute(
            "UPDATE run SET state='running', ended_at=NULL, pid=?, boot_id=?, host=? WHERE id=?",
            (os.getpid(), boot_id(), host_id(), run_id)))
        return self.get_run(run_id)

    def experiment_runs(self, exp_id: int) -> list[Run]:
        return [self._run(r) for r in self.conn.execute(
            "SELECT * FROM run WHERE experiment_id=? ORDER BY id", (exp_id,))]

    def run_experiment_id(self, run_id: int) -> int | None:
        row = self.conn.execute("SELECT experiment_id FROM run WHERE id=?", (run_id,)).fetchone()
        return row[0] if row else None
