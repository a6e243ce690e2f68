"""The machine configurations of a store: the facts of each, found again by their fingerprint."""
from __future__ import annotations

import hashlib
import json

from kperfdiff.core.records import Machine
from kperfdiff.store.connection import Connection

# The machine row's identity: facts that stay the same across boots of one configuration.
STABLE_KEYS = ("arch", "cpu_model", "cpus", "kernel_release", "kernel_version", "cmdline", "hostname",
               "page_size", "mem_total_kb", "thp_enabled", "thp_defrag", "clocksource", "virtualisation",
               "emulated", "perf_events", "swap_active")   # swap on or off changes what paging measures


def fingerprint(f: dict) -> str:
    stable = {k: f.get(k) for k in STABLE_KEYS}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]


class Machines(Connection):
    """The machine table."""

    def add_machine(self, facts: dict) -> int:
        fp = fingerprint(facts)

        def w():
            row = self.conn.execute("SELECT id FROM machine WHERE fingerprint=?", (fp,)).fetchone()
            if row:
                return row[0]
            # another machine of a shared store may be adding the same configuration now: the first
            # row wins, and both use it
            self.conn.execute(
                "INSERT INTO machine (fingerprint, arch, cpu_model, cpus, kernel_release, emulated, facts) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (fingerprint) DO NOTHING",
                (fp, facts.get("arch"), facts.get("cpu_model"), facts.get("cpus"), facts.get("kernel_release"),
                 int(bool(facts.get("emulated"))), json.dumps(facts, sort_keys=True)))
            return self.conn.execute("SELECT id FROM machine WHERE fingerprint=?", (fp,)).fetchone()[0]
        return self._write(w)

    def machine(self, machine_id: int | None) -> Machine:
        """A machine configuration by id; one of no id and no facts when the id is None or names none."""
        if machine_id is None:
            return Machine()
        row = self.conn.execute("SELECT id, fingerprint, facts FROM machine WHERE id=?", (machine_id,)).fetchone()
        return Machine(row[0], row[1], json.loads(row[2])) if row else Machine()
