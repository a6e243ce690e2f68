#!/usr/bin/env python3
"""Time the commands that read the store (`runs`, `show`, `compare`, `report`) on a store at lab
scale: 10,000 runs and 10 million raw intervals, against the bare SELECT of the same rows.

The store is synthetic but shaped like real use: six machine configurations; bench runs (most
of them, the quick suite or a few benchmarks, 1-2 copies, 1-5 repetitions of 11 intervals) with
labels, options and commands like `kperfdiff bench` writes; experiments (about 40 names run
again and again, some superseded) with 2-4 variants whose cells are result rows keyed as
`kperfdiff run FILE` keys them (``variant|column|P<cores>|r<rep>``), some with profile rows;
one big experiment, ``lab-scale`` (4 variants forming a patch stack, 24 benchmarks, 1/2/4
cores, 10 repetitions, profiles), and two big bench runs, ``big-base`` and ``big-patched``
(the full suite at 1/2/4 cores, 10 repetitions) on the machine with the longest history.
Monitor deltas, worker info and noise records are real-sized JSON. The schema and its
migrations are the real ones (``Store.open``); the rows go in with plain SQL in one
transaction, the intervals generated inside SQLite. It is cached in /tmp/kperfdiff-bench/
(1.5 GB, under a minute to build; ``--rebuild`` makes it again). Before timing, the store
is opened once with this checkout's kperfdiff, so a schema migration runs then (and is timed
on its own line), not inside the first command.

Each command runs ``--repeat`` times (default 3) in a fresh child process, after the store
file has been read once into the page cache: wall time (median and best), CPU time (user +
system, median: what other work on a shared machine does not inflate) and peak RSS (getrusage
in a small wrapper process). The reference, in the same run, is a fresh Python child that opens
the file with ``sqlite3`` and fetches the rows the command shows (and nothing else): the floor for a
command written in Python, interpreter start-up included. ``kperfdiff --version`` is timed
too, the floor of any kperfdiff command. `runs` lists one page (the newest 50) and `runs --all`
every run; on a checkout from before `runs` had pages, both list every run. Not a pass/fail test.

    .venv/bin/python benchmarks/bench_store.py [--repeat N] [--rebuild] [--runs N] [--intervals N] [--only TEXT]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.bench.catalogue import load_catalogue
from kperfdiff.store import Store, fingerprint

KPERFDIFF = Path(sys.executable).with_name("kperfdiff")
CACHE = Path("/tmp/kperfdiff-bench")
GENERATOR = 1            # bump when the synthetic store changes shape: the cache is rebuilt
BIG_EXPERIMENT = "lab-scale"
BIG_RUNS = ("big-base", "big-patched")
YEAR = 365 * 86400.0
LIMIT_S = 1.0

# -- the synthetic store ---------------------------------------------------------------------

MACHINES = [
    {"arch": "x86_64", "cpu_model": "AMD EPYC 7763 64-Core Processor", "cpus": 128, "hostname": "lab-epyc",
     "kernel_release": "6.8.0-rc4", "page_size": 4096, "mem_total_kb": 527923616, "virtualisation": "none"},
    {"arch": "x86_64", "cpu_model": "AMD EPYC 7763 64-Core Processor", "cpus": 128, "hostname": "lab-epyc",
     "kernel_release": "6.9.0", "page_size": 4096, "mem_total_kb": 527923616, "virtualisation": "none"},
    {"arch": "x86_64", "cpu_model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "cpus": 64, "hostname": "lab-xeon",
     "kernel_release": "6.6.21", "page_size": 4096, "mem_total_kb": 263923616, "virtualisation": "none"},
    {"arch": "aarch64", "cpu_model": "Cortex-A76", "cpus": 4, "hostname": "rpi5", "kernel_release": "6.6.31+rpt",
     "page_size": 16384, "mem_total_kb": 8245264, "virtualisation": "none"},
    {"arch": "aarch64", "cpu_model": "cortex-a72", "cpus": 2, "hostname": "(guest)", "kernel_release": "6.9.0",
     "page_size": 4096, "mem_total_kb": 1012396, "virtualisation": "qemu-tcg", "emulated": True,
     "target": "qemu:arm64"},
    {"arch": "x86_64", "cpu_model": "11th Gen Intel(R) Core(TM) i7-1185G7", "cpus": 8, "hostname": "laptop",
     "kernel_release": "6.10.3-arch1-1", "page_size": 4096, "mem_total_kb": 32657812, "virtualisation": "none"},
]
MACHINE_WEIGHTS = [40, 20, 15, 10, 5, 10]
LABELS = ["", "", "", "baseline", "v6.9", "v6.10-rc1", "mm-unstable", "thp-defrag", "folio-fix", "nohz", "patched"]
EXPERIMENT_NAMES = ["superpages", "core-scaling", "cmdline", "xarch", "thp-defrag", "mitigations", "sched-eevdf",
                    "mglru", "zswap", "folios", "pcp-lists", "tlb-batch", "vmalloc", "rcu-lazy", "numa-balance",
                    "ksm", "slub-percpu", "page-cache", "writeback", "mmap-lock", "per-vma-locks", "swap-tier",
                    "hugetlb", "memcg", "io-uring", "preempt-rt", "idle-poll", "cpufreq", "nx-huge", "kpti",
                    "retbleed", "spectre-v2", "init-on-free", "lru-gen", "damon", "kfence", "kasan-off",
                    "lockdep-off", "hz-1000", "nohz-full"]


def _monitors(rng: random.Random) -> str:
    keys = ["irq.LOC", "irq.RES", "irq.CAL", "irq.TLB", "irq.IWI", "irq.36"] + [
        f"vmstat.{k}" for k in ("nr_active_file", "nr_anon_pages", "nr_dirtied", "nr_dirty", "nr_file_pages",
                                "nr_free_pages", "nr_inactive_anon", "nr_inactive_file", "nr_mapped",
                                "nr_page_table_pages", "nr_zone_active_file", "nr_zone_inactive_anon",
                                "nr_zone_inactive_file", "nr_zone_write_pending", "numa_hit", "numa_local",
                                "pgactivate", "pgalloc_normal", "pgfault", "pgfree", "pgmajfault", "pgpgin",
                                "pgreuse", "workingset_refault_file", "thp_fault_alloc", "nr_tlb_remote_flush")]
    return json.dumps({k: rng.randint(-2000, 20000) for k in keys}, sort_keys=True)


def _noise(reps: int, first: int, copies: int, disturbed: bool) -> str:
    out = []
    for r in range(first, first + reps):
        e = {"rep": r, "wall_s": 0.0377, "steal_pct": 0.0, "other_runnable_mean": 0.1, "other_runnable_max": 1,
             "nivcsw": 4, "nivcsw_per_s": 105.97, "migrations": 0, "run_delay_pct": 1.9, "cpu_mhz_min": None,
             "cpu_mhz_max": None, "copies": copies, "tasks_per_copy": 1, "own_runnable_max": copies, "reps": 1,
             "disturbed": []}
        if disturbed and r == first:
            e["other_runnable_mean"] = 3.0
            e["disturbed"] = [f"3.00 other runnable tasks on average (limit 0.5 with {copies} of 2 CPUs in use)"]
        out.append(e)
    return json.dumps(out)


def _info(reps: int, first: int, copies: int) -> str:
    return json.dumps([{"rep": r, "copy": c} for r in range(first, first + reps) for c in range(copies)])


@dataclass
class Plan:
    """Sizes of the store: what --runs and --intervals ask for."""
    runs: int
    intervals: int

    @property
    def path(self) -> Path:
        return CACHE / f"store-g{GENERATOR}-{self.runs}r-{self.intervals}i" / "kperfdiff.db"


class Builder:
    """Writes the rows; the intervals of each result are generated by SQLite from one spec row
    (repetitions, copies, intervals per process, centre and spread)."""

    def __init__(self, conn: sqlite3.Connection, rng: random.Random, benches):
        self.conn, self.rng, self.benches = conn, rng, benches
        self.result_id = self.run_id = self.exp_id = self.profile_id = 0
        self.results: list[tuple] = []
        self.specs: list[tuple] = []
        self.profiles: list[tuple] = []
        self.intervals = 0
        self.monitor_pool = [_monitors(rng) for _ in range(16)]
        self.centre = {}        # (machine, benchmark, copies) -> typical value

    def base_value(self, mid: int, b, copies: int) -> float:
        k = (mid, b.name, copies)
        if k not in self.centre:
            self.centre[k] = (0.05 if b.unit == "GUP/s" else 10 ** self.rng.uniform(2, 6)) * (
                1 + 0.3 * (copies - 1) * (-1 if b.better == "higher" else 1))
        return self.centre[k]

    def run_row(self, *, label, variant, machine_id, started, command, options, state="complete",
                experiment_id=None, experiment_hash=None, target="local") -> int:
        self.run_id += 1
        rid = self.run_id
        self.conn.execute(
            "INSERT INTO run (id, label, variant, target, machine_id, tool_version, started_at, ended_at, state, "
            "experiment_hash, command, options, pid, boot_id, artefact_dir, experiment_id) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (rid, label, variant, target, machine_id, "0.1.0", started, started + self.rng.uniform(60, 3600),
             state, experiment_hash, command, json.dumps(options), 1000 + rid % 30000,
             "f3db24ef-d527-4ef0-9102-710117553472", f"kperfdiff.artefacts/run-{rid}", experiment_id))
        return rid

    def result(self, run_id: int, mid: int, b, params: dict, copies: int, reps: int, per: int, started: float, *,
               effect: float = 1.0, first_rep: int = 0, experiment_id=None, cell=None, bench_key=None,
               profile: bool = False) -> None:
        self.result_id += 1
        rid = self.result_id
        rng = self.rng
        roll = rng.random()
        status, reason = ("ok", None)
        if roll < 0.01:
            status, reason = "failed", f"{b.name}: the worker exited with status 1: cannot map 16m"
        elif roll < 0.015:
            status, reason = "skipped", f"{b.name} needs swap; give --allow-swap-setup"
        base = self.base_value(mid, b, copies) * effect
        sd = rng.uniform(0.005, 0.05)
        n = reps * copies * per if status == "ok" else 0
        s = (n, base, base * (1 - 2 * sd), base * (1 + 4 * sd), base * (1 - sd / 2), base * (1 + sd / 2), base,
             base * sd, sd) if n else (None,) * 9
        self.results.append((
            rid, run_id, b.name, json.dumps(params, sort_keys=True), copies, status, reason, b.unit, b.better, *s,
            None, 1000 * n, int(base * 1000 * n), n * 0.01, rng.choice(self.monitor_pool),
            _info(reps, first_rep, copies), started, started + n * 0.01, experiment_id, cell,
            first_rep if cell else None, bench_key, _noise(reps, first_rep, copies, rng.random() < 0.05),
            f"{reps} repetitions (fixed count)" if cell is None else None))
        if n:
            self.specs.append((rid, first_rep, reps, copies, per, base, sd, 1000))
            self.intervals += n
            if profile:
                for r in range(first_rep, first_rep + reps):
                    for c in range(copies):
                        stem = f"{b.name}.P{copies}.r{r}.c{c}"
                        self.profiles.append((
                            rid, run_id, b.name, r, f"kperfdiff.artefacts/run-{run_id}/{stem}.perf.data",
                            f"kperfdiff.artefacts/run-{run_id}/kallsyms", "cycles", None, int(base * 1000),
                            1000, json.dumps({"copies": copies, "copy": c, "hw_events": {"cycles": 1234567}})))
        if len(self.results) >= 20000:
            self.flush()

    def flush(self) -> None:
        if self.results:
            self.conn.executemany(f"INSERT INTO result ({RESULT_COLUMNS}) VALUES ({', '.join('?' * 32)})",
                                  self.results)
        if self.specs:
            self.conn.executemany("INSERT INTO spec VALUES (?,?,?,?,?,?,?,?)", self.specs)
        if self.profiles:
            self.conn.executemany(
                "INSERT INTO profile (result_id, run_id, benchmark, rep, path, kallsyms, event, samples, "
                "cpu_time_ns, ops, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?)", self.profiles)
        self.results, self.specs, self.profiles = [], [], []

    # -- a bench run and an experiment, as the commands write them --------------------------
    def bench_run(self, started: float, mid: int, benches, copies: list[int], reps: int, label: str) -> None:
        only = ",".join(b.name for b in benches) if len(benches) < 20 else None
        opts = {"suite": "full" if len(benches) > 40 else "quick", "only": only, "parallel": copies, "reps": reps,
                "intervals": None, "params": [], "min_batch_ns": 10000000, "profile": False,
                "target": MACHINES[mid - 1].get("target", "local"), "precision": None, "max_time": None}
        cmd = "kperfdiff bench" + (f" --only {only}" if only else "") + f" -P {','.join(map(str, copies))}" + \
              (f" --reps {reps}" if reps > 1 else "") + (f" --label {label}" if label else "")
        state = self.rng.choices(["complete", "interrupted", "failed"], [96, 3, 1])[0]
        rid = self.run_row(label=label, variant="", machine_id=mid, started=started, command=cmd, options=opts,
                           state=state, target=opts["target"])
        for b in benches:
            for c in copies:
                self.result(rid, mid, b, b.params, c, reps, 11, started)

    def experiment(self, name: str, created: float, mid: int, columns, cores: list[int], reps: int,
                   variants: int, per: int, profile: bool, state: str, stack: bool = False) -> None:
        self.exp_id += 1
        eid = self.exp_id
        labels = (["base"] + [f"PK{i}" for i in range(1, variants)]) if stack else \
            ["4k", "huge", "thp-always", "nohz"][:variants]
        spec = {"allow_swap_setup": False, "baseline": labels[0], "benchmarks": [b.name for b in columns],
                "cores": cores, "intervals": per, "max_time": None, "min_batch_ms": 10.0, "name": name,
                "params": {}, "precision": None, "profile": profile, "profile_freq": None, "reps": reps,
                "stack": labels if stack else [], "timeout": None, "tiny": False,
                "variants": [{"cmdline": "", "cpus": "", "env": {}, "knobs": {}, "label": v, "params": {},
                              "target": "local", "vars": {}} for v in labels]}
        file_hash = f"{self.rng.getrandbits(64):016x}"
        cells = variants * len(columns) * len(cores) * reps
        self.conn.execute(
            "INSERT INTO experiment (id, name, path, file_hash, spec, state, cells, created, updated, pid, boot_id) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (eid, name, f"/home/lab/experiments/{name}.toml", file_hash, json.dumps(spec, sort_keys=True), state,
             cells, created, created + 3600, 4242, "f3db24ef-d527-4ef0-9102-710117553472"))
        runs = {}
        for v in labels:
            runs[v] = self.run_row(
                label=f"{name}/{v}", variant=v, machine_id=mid, started=created, experiment_id=eid,
                experiment_hash=file_hash, command=f"kperfdiff run {name}.toml",
                options={"experiment": name, "experiment_id": eid, "knobs": {}, "env": {}, "cpus": "", "vars": {},
                         "cmdline": "", "params": {}},
                state="complete" if state in ("complete", "superseded") else "interrupted")
        # the effect of each variant on each column: most nothing, some a few percent
        effect = {(v, b.name): (1.0 if i == 0 or self.rng.random() < 0.7 else self.rng.uniform(0.85, 1.15))
                  for i, v in enumerate(labels) for b in columns}
        slot = 0
        for rep in range(reps):             # the order kperfdiff run measures cells in
            for b in columns:
                for c in cores:
                    k = slot % len(labels)
                    for v in labels[k:] + labels[:k]:
                        self.result(runs[v], mid, b, b.params, c, 1, per, created + slot, effect=effect[v, b.name],
                                    first_rep=rep, experiment_id=eid, cell=f"{v}|{b.name}|P{c}|r{rep}",
                                    bench_key=b.name, profile=profile)
                    slot += 1


RESULT_COLUMNS = ("id, run_id, benchmark, params, copies, status, reason, unit, better, n, median, min, max, q1, q3, "
                  "mean, stdev, cv, overhead, ops, cpu_ns, wall_s, monitors, info, started_at, ended_at, "
                  "experiment_id, cell, rep, bench_key, noise, stop")

INTERVALS_SQL = """
INSERT INTO interval (result_id, rep, copy, seq, value, ops, ns)
SELECT s.rid, r.x, c.x, q.x,
       s.base * (1 + s.sd * ((random() % 1000000) + (random() % 1000000)) / 2e6
                 + s.sd * ((((s.rid * 7919 + r.x * 104729) % 1000) / 1000.0) - 0.5)),
       s.ops, CAST(s.base * s.ops AS INTEGER)
FROM spec s JOIN nums r ON r.x >= s.first_rep AND r.x < s.first_rep + s.reps
            JOIN nums c ON c.x < s.copies JOIN nums q ON q.x < s.per
"""


def build(plan: Plan) -> dict:
    """Make the synthetic store at plan.path (through a temporary name: a half-built store is
    never taken for a cached one)."""
    folder = plan.path.parent
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    tmp = folder / "building.db"
    t0 = time.perf_counter()
    Store.open(tmp).conn.close()               # the real schema and migrations
    conn = sqlite3.connect(tmp, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")
    conn.execute("BEGIN")
    conn.execute("CREATE TEMP TABLE spec (rid INTEGER PRIMARY KEY, first_rep INT, reps INT, copies INT, per INT, "
                 "base REAL, sd REAL, ops INT)")
    conn.execute("CREATE TEMP TABLE nums (x INTEGER PRIMARY KEY)")
    conn.executemany("INSERT INTO temp.nums VALUES (?)", [(i,) for i in range(64)])
    for m in MACHINES:
        facts = dict(m, clocksource="tsc", thp_enabled="madvise", thp_defrag="madvise", swap_active=False,
                     cmdline="root=/dev/nvme0n1p2 ro quiet", perf_events={"cpu-clock": True, "cycles": True})
        conn.execute("INSERT INTO machine (fingerprint, arch, cpu_model, cpus, kernel_release, emulated, facts) "
                     "VALUES (?,?,?,?,?,?,?)", (fingerprint(facts), facts["arch"], facts["cpu_model"], facts["cpus"],
                                                facts["kernel_release"], int(bool(facts.get("emulated"))),
                                                json.dumps(facts, sort_keys=True)))
    rng = random.Random(20240611)
    benches = list(load_catalogue())
    quick = [b for b in benches if "quick" in b.suites]
    bld = Builder(conn, rng, benches)
    now = time.time() - 3600
    start = now - 2 * YEAR

    # Decide what each run is, then write them in time order (ids grow with time, as in a real store).
    n_exp_runs = plan.runs // 9                      # ~11% of the runs belong to experiments
    events: list[tuple[float, str, dict]] = []
    exp_runs = 0
    while exp_runs < n_exp_runs:
        variants = rng.choice([2, 2, 3, 4])
        cols = rng.sample(benches, rng.randint(2, 6))
        events.append((rng.uniform(start, now - 86400), "experiment", dict(
            name=rng.choice(EXPERIMENT_NAMES), mid=rng.choices(range(1, 7), MACHINE_WEIGHTS)[0], columns=cols,
            cores=rng.choice([[1], [1, 2], [1, 2]]), reps=rng.randint(3, 5), variants=variants,
            per=rng.choice([5, 11]), profile=rng.random() < 0.2,
            state=rng.choices(["complete", "superseded", "interrupted"], [85, 10, 5])[0])))
        exp_runs += variants
    # the big experiment, the newest of its name; two big bench runs on the busiest machine
    events.append((now - 7200, "experiment", dict(
        name=BIG_EXPERIMENT, mid=1, columns=rng.sample(quick, 24), cores=[1, 2, 4], reps=10, variants=4, per=11,
        profile=True, state="complete", stack=True)))
    events.append((now - 1800, "big", dict(label=BIG_RUNS[0])))
    events.append((now - 900, "big", dict(label=BIG_RUNS[1])))
    exp_intervals = sum(len(e["columns"]) * sum(e["cores"]) * e["reps"] * e["variants"] * e["per"]
                        for _, kind, e in events if kind == "experiment")
    big_intervals = 2 * len(benches) * 7 * 10 * 11
    n_bench = plan.runs - exp_runs - 4 - 2
    budget = plan.intervals - exp_intervals - big_intervals
    for i in range(n_bench):
        events.append((start + (now - 2 * 3600 - start) * i / n_bench + rng.uniform(0, 600), "bench", {}))
    events.sort(key=lambda e: e[0])

    left_runs, left = n_bench, budget
    for when, kind, e in events:
        if kind == "experiment":
            bld.experiment(e.pop("name"), when, **e)
        elif kind == "big":
            bld.bench_run(when, 1, benches, [1, 2, 4], 10, e["label"])
        else:
            mid = rng.choices(range(1, 7), MACHINE_WEIGHTS)[0]
            copies = rng.choice([[1], [1], [1, 2], [2]])
            reps = rng.choice([1, 3, 3, 5])
            target = left / max(left_runs, 1)
            k = max(1, min(len(benches), round(target / (11 * reps * sum(copies)) * rng.uniform(0.8, 1.2))))
            chosen = quick[:k] if k <= len(quick) and rng.random() < 0.6 else rng.sample(benches, k)
            before = bld.intervals
            bld.bench_run(when, mid, chosen, copies, reps, rng.choice(LABELS))
            left -= bld.intervals - before
            left_runs -= 1
    bld.flush()
    t_rows = time.perf_counter()
    conn.execute(INTERVALS_SQL)
    conn.execute("DROP TABLE temp.spec")
    conn.execute("COMMIT")
    t_int = time.perf_counter()
    conn.execute("PRAGMA journal_mode = WAL")      # as kperfdiff leaves it; no ANALYZE (kperfdiff runs none)
    conn.close()
    tmp.replace(plan.path)
    counts = counts_of(plan.path)
    print(f"built {plan.path}: rows in {t_rows - t0:.0f} s, {counts['interval']} intervals in {t_int - t_rows:.0f} s",
          file=sys.stderr)
    return counts


def counts_of(path: Path) -> dict:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("machine", "run", "result", "interval", "experiment", "profile")}
    finally:
        conn.close()


# -- timing ----------------------------------------------------------------------------------

# Runs one command and prints its wall time, CPU time (user + system) and peak RSS: the wrapper is
# a small process, so the peak RSS of its child is the command's own, whatever the size of this harness.
WRAPPER = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
dt = time.perf_counter() - t
if p.returncode:
    sys.stderr.write(p.stderr.decode(errors="replace")[-3000:])
    sys.exit(p.returncode)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(dt, ru.ru_utime + ru.ru_stime, ru.ru_maxrss)
"""


def timed(argv: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one fresh child process; its output is thrown away."""
    p = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"failed: {' '.join(argv)}\n{p.stderr}")
    t, cpu, rss = p.stdout.split()
    return float(t), float(cpu), int(rss) / 1024.0


# The reference: a fresh Python child fetching, with sqlite3, the rows a command shows.
REFERENCE = r"""
import sqlite3, sys
conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
n = 0
for q in sys.argv[2:]:
    n += len(conn.execute(q).fetchall())
print(n)
"""


def reference(db: Path, queries: list[str], repeat: int) -> tuple[float, int]:
    """Median wall time of the reference child, and the rows it fetched."""
    rows = int(subprocess.run([sys.executable, "-c", REFERENCE, str(db), *queries], capture_output=True,
                              text=True, check=True).stdout)
    return statistics.median(timed([sys.executable, "-c", REFERENCE, str(db), *queries])[0]
                             for _ in range(repeat)), rows


def history_queries(conn: sqlite3.Connection, run_ids: list[int]) -> list[str]:
    """The rows a comparison of separate runs needs beyond the runs themselves: the repetitions of
    the newest 100 bench results of each benchmark, parameter set and copy count on the run's machine."""
    out, seen = [], set()
    for rid in run_ids:
        mid = conn.execute("SELECT machine_id FROM run WHERE id=?", (rid,)).fetchone()[0]
        keys = conn.execute("SELECT DISTINCT benchmark, params, copies FROM result WHERE run_id=? AND status='ok'",
                            (rid,)).fetchall()
        for b, p, c in keys:
            if (mid, b, p, c) in seen:      # one lookup per machine and benchmark (compare makes them in one query)
                continue
            seen.add((mid, b, p, c))
            sub = (f"SELECT result.id FROM result JOIN run ON run.id = result.run_id WHERE run.machine_id={mid} "
                   f"AND result.benchmark={q(b)} AND result.params={q(p)} AND result.copies={c} AND "
                   f"result.status='ok' AND result.experiment_id IS NULL ORDER BY result.run_id DESC, result.id DESC LIMIT 100")
            out.append(f"SELECT result_id, rep, value FROM interval WHERE result_id IN ({sub})")
    return out


def q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def run_rows(ids: str) -> list[str]:
    """A run's results, raw intervals, profiles and machine (ids: an SQL list of run ids)."""
    return [f"SELECT * FROM run WHERE id IN ({ids})",
            f"SELECT machine.* FROM machine JOIN run ON run.machine_id = machine.id WHERE run.id IN ({ids})",
            f"SELECT * FROM result WHERE run_id IN ({ids}) ORDER BY id",
            f"SELECT interval.* FROM interval JOIN result ON result.id = interval.result_id "
            f"WHERE result.run_id IN ({ids}) ORDER BY interval.result_id, rep, copy, seq",
            f"SELECT * FROM profile WHERE run_id IN ({ids})"]


def cases(db: Path, out: Path, runs_help: str) -> list[tuple[str, list[str], list[str]]]:
    """(name, kperfdiff arguments, reference queries) of every command timed."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids = {lab: conn.execute("SELECT id FROM run WHERE label=?", (lab,)).fetchone()[0] for lab in BIG_RUNS}
    a, b = ids[BIG_RUNS[0]], ids[BIG_RUNS[1]]
    eid = conn.execute("SELECT id FROM experiment WHERE name=? AND state!='superseded' ORDER BY id DESC LIMIT 1",
                       (BIG_EXPERIMENT,)).fetchone()[0]
    exp_runs = ",".join(str(r) for (r,) in conn.execute("SELECT id FROM run WHERE experiment_id=?", (eid,)))
    exp_run = int(exp_runs.split(",")[0])
    history = history_queries(conn, [a, b])
    conn.close()
    experiment = [f"SELECT * FROM experiment WHERE name={q(BIG_EXPERIMENT)} AND state!='superseded' "
                  f"ORDER BY id DESC LIMIT 1"] + run_rows(exp_runs)
    paged = "--all" in runs_help          # this checkout's `runs` pages; the one before listed every run
    store = ["--store", str(db)]
    return [
        ("--version (start-up floor)", ["--version"], ["SELECT 1"]),
        ("runs", [*store, "runs"],
         ["SELECT * FROM run ORDER BY id DESC LIMIT 50", "SELECT count(*) FROM run"] if paged
         else ["SELECT * FROM run ORDER BY id"]),
        ("runs --format json", [*store, "runs", "--format", "json"],
         ["SELECT * FROM run ORDER BY id DESC LIMIT 50", "SELECT count(*) FROM run"] if paged
         else ["SELECT * FROM run ORDER BY id"]),
        ("runs --all", [*store, "runs", *(["--all"] if paged else [])], ["SELECT * FROM run ORDER BY id"]),
        (f"show {BIG_RUNS[0]}", [*store, "show", str(a)], run_rows(str(a))),
        (f"show {BIG_RUNS[0]} --format json", [*store, "show", str(a), "--format", "json"], run_rows(str(a))),
        (f"show {BIG_EXPERIMENT}/base", [*store, "show", str(exp_run)], run_rows(str(exp_run))),
        ("compare big-base big-patched", [*store, "compare", str(a), str(b)], run_rows(f"{a},{b}") + history),
        ("compare A B --format json", [*store, "compare", str(a), str(b), "--format", "json"],
         run_rows(f"{a},{b}") + history),
        (f"compare --experiment {BIG_EXPERIMENT}", [*store, "compare", "--experiment", BIG_EXPERIMENT], experiment),
        (f"report --experiment {BIG_EXPERIMENT}",
         [*store, "report", "--experiment", BIG_EXPERIMENT, "-o", str(out / "r.html")], experiment),
        (f"report --experiment {BIG_EXPERIMENT} --format markdown",
         [*store, "report", "--experiment", BIG_EXPERIMENT, "--format", "markdown", "-o", str(out / "r.md")],
         experiment),
        ("report big-base big-patched", [*store, "report", str(a), str(b), "-o", str(out / "ab.html")],
         run_rows(f"{a},{b}") + history),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (default 3)")
    ap.add_argument("--rebuild", action="store_true", help="make the synthetic store again")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--intervals", type=int, default=10_000_000)
    ap.add_argument("--only", metavar="TEXT", help="time only the commands whose name contains TEXT")
    args = ap.parse_args()
    plan = Plan(args.runs, args.intervals)
    if args.rebuild or not plan.path.exists():
        build(plan)
    db = plan.path
    counts = counts_of(db)
    t0 = time.perf_counter()
    Store.open(db, create=False).conn.close()        # migrate now (if this checkout's schema is newer)
    t_open = time.perf_counter() - t0
    with open(db, "rb") as f:                        # warm the page cache
        while f.read(1 << 24):
            pass
    runs_help = subprocess.run([str(KPERFDIFF), "runs", "--help"], capture_output=True, text=True).stdout
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kperfdiff-bench-store-") as out:
        for name, argv, queries in cases(db, Path(out), runs_help):
            if args.only and args.only not in name:
                continue
            times, cpus, rss = [], [], 0.0
            for _ in range(args.repeat):
                t, cpu, m = timed([str(KPERFDIFF), *argv])
                times.append(t)
                cpus.append(cpu)
                rss = max(rss, m)
            ref, nrows = reference(db, queries, args.repeat)
            rows.append((name, statistics.median(times), min(times), statistics.median(cpus), rss, ref, nrows))
    load_after = os.getloadavg()
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 1e9
    print(f"store: {db} ({size:.2f} GB): {counts['run']} runs, {counts['result']} results, "
          f"{counts['interval']} intervals, {counts['experiment']} experiments, {counts['profile']} profiles, "
          f"{counts['machine']} machines; opened (and migrated if needed) in {t_open:.2f} s")
    print(f"load average before {'/'.join(f'{x:.2f}' for x in load_before)}, after "
          f"{'/'.join(f'{x:.2f}' for x in load_after)} on {os.cpu_count()} CPUs; {args.repeat} runs each; "
          f"reference = python sqlite3 child fetching the same rows (median of {args.repeat})")
    print(f"{'command':48} {'median s':>9} {'best s':>7} {'CPU s':>6} {'RSS MB':>7} {'ref s':>6} {'ref rows':>9} "
          f"{'x ref':>6} {'< 1 s':>6}")
    for name, med, best, cpu, rss, ref, nrows in rows:
        print(f"{name:48} {med:9.3f} {best:7.3f} {cpu:6.3f} {rss:7.1f} {ref:6.3f} {nrows:9d} {med / ref:6.1f} "
              f"{'yes' if med < LIMIT_S else 'NO':>6}")
    print(json.dumps({"counts": counts, "open_s": t_open,
                      "commands": {n: {"median_s": m, "best_s": b, "cpu_s": c, "rss_mb": r, "ref_s": f, "ref_rows": k}
                                   for n, m, b, c, r, f, k in rows}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
