"""The perf recordings of a store's results, and the references (``RUN:BENCH@CORES``) that name them."""
from __future__ import annotations

import json
from pathlib import Path

from kperfdiff.core.errors import InputError
from kperfdiff.core.records import StoredProfile
from kperfdiff.store.machines import Machines
from kperfdiff.store.runs import Runs


COUNTED_EVENT = "instructions"   # the event of exact instruction-count profiles (deterministic guests)


def _of_kind(profs: list[StoredProfile], event: str | None, run_id: int) -> list[StoredProfile]:
    """The sampled profiles of a run, or its exact instruction counts (see Store.profile_refs)."""
    counted = [p for p in profs if p.event == COUNTED_EVENT]
    sampled = [p for p in profs if p.event != COUNTED_EVENT]
    if event == COUNTED_EVENT:
        if profs and not counted:
            raise InputError(f"run {run_id} has no exact instruction counts; a deterministic guest "
                             f"(qemu:arm64,deterministic or qemu:x86_64,deterministic) counts them")
        return counted
    return sampled or counted


def _sum_counts(parts: list) -> dict | None:
    """The exact instruction counts of a repetition's parallel copies added up (None unless every
    copy has them)."""
    if not parts or not all(isinstance(c, dict) for c in parts):
        return None
    return {k: sum(int(c.get(k) or 0) for c in parts) for k in ("kernel", "user", "ops")}


def split_cores(text: str, whole: str | None = None, before: str = "") -> tuple[str, int | None]:
    """``BENCH@CORES`` -> (BENCH, CORES), ``BENCH`` -> (BENCH, None); a bad core count is refused in one
    sentence naming ``whole`` (the argument it came from) with an example written ``before`` BENCH@2."""
    bench, at, cores = text.partition("@")
    if not at:
        return bench, None
    if not (cores.isdigit() and len(cores) < 6 and int(cores) >= 1):
        raise InputError(f"{(whole or text)!r}: @ takes a core count, as in {before}{bench or 'BENCHMARK'}@2")
    return bench, int(cores)


def kernel_instructions(folded: Path) -> int:
    """The instructions a counted profile (folded stacks, targets/guest/counting.py) gives to kernel
    functions: the weights of stacks whose leaf frame ends in ``_[k]``."""
    total = 0
    with open(folded, errors="replace") as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack.rpartition(";")[2].endswith("_[k]"):
                try:
                    total += int(count)
                except ValueError:
                    raise InputError(f"{folded} is not a counted profile (its line {line[:60]!r} has no count)") from None
    return total


def kernel_instructions_per_op(store: "Profiles", result_id: int) -> float | None:
    """Exact kernel instructions per operation of a stored result (see Profiles.kernel_instructions_per_op)."""
    return store.kernel_instructions_per_op(result_id)


class Profiles(Runs, Machines):
    """The profile table."""

    def add_profile(self, *, run_id: int, result_id: int | None, benchmark: str, rep: int, path: str,
                    kallsyms: str | None, event: str | None, samples: int | None, cpu_time_ns: int | None,
                    ops: int | None, meta: dict | None = None) -> int:
        def w():
            return self.conn.execute(
                "INSERT INTO profile (result_id, run_id, benchmark, rep, path, kallsyms, event, samples, "
                "cpu_time_ns, ops, meta) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (result_id, run_id, benchmark, rep, self.stored_path(path),
                 self.stored_path(kallsyms) if kallsyms else None, event, samples, cpu_time_ns, ops,
                 json.dumps(meta or {}))).lastrowid
        return self._write(w)

    def profiles(self, run_id: int, benchmark: str | None = None) -> list[StoredProfile]:
        q = "SELECT * FROM profile WHERE run_id=?"
        args: list = [run_id]
        if benchmark:
            q += " AND benchmark=?"
            args.append(benchmark)
        out = []
        folders: dict[str, str] = {}
        for r in self.conn.execute(q + " ORDER BY id", args):
            meta = json.loads(r["meta"] or "{}")
            if meta.get("symfs"):
                meta["symfs"] = self._artefact_text(meta["symfs"], folders)
            out.append(StoredProfile(
                id=r["id"], result_id=r["result_id"], run_id=r["run_id"], benchmark=r["benchmark"], rep=r["rep"],
                path=self._artefact_text(r["path"], folders),
                kallsyms=self._artefact_text(r["kallsyms"], folders) if r["kallsyms"] else None, event=r["event"],
                samples=r["samples"], cpu_time_ns=r["cpu_time_ns"], ops=r["ops"], meta=meta))
        return out

    def kernel_instructions_per_op(self, result_id: int) -> float | None:
        """Exact kernel instructions per operation of a stored result from a deterministic guest: the
        instructions its counted profiles (event COUNTED_EVENT, one per repetition and copy) give to
        kernel functions (``_[k]`` frames; not ``[user]``), over the operations of their counted
        windows. None when the result has no counted profile or one lacks its operations or its file."""
        folders: dict[str, str] = {}
        kernel = ops = 0
        rows = list(self.conn.execute("SELECT path, ops FROM profile WHERE result_id=? AND event=? ORDER BY id",
                                      (result_id, COUNTED_EVENT)))
        for r in rows:
            if not r["ops"]:
                return None
            try:
                kernel += kernel_instructions(Path(self._artefact_text(r["path"], folders)))
            except OSError:
                return None
            ops += int(r["ops"])
        return kernel / ops if rows else None

    def primary_profiles(self, run_id: int) -> list[StoredProfile]:
        """A run's profiles, one kind per benchmark: the sampled ones, else the exact counts."""
        by_bench: dict[str, list[StoredProfile]] = {}
        for p in self.profiles(run_id):
            by_bench.setdefault(p.benchmark, []).append(p)
        return [p for ps in by_bench.values() for p in _of_kind(ps, None, run_id)]

    def profile_refs(self, spec: str, event: str | None = None) -> list[tuple[list[Path], dict]]:
        """Resolve ``RUN``, ``RUN:BENCH``, ``RUN:BENCH@CORES`` or ``R1,R2:BENCH`` to the profile files of
        each repetition and their facts.

        A run with profiles of several benchmarks needs the benchmark named, and one with several
        core counts needs ``@CORES``. The parallel copies of one repetition come back together (one
        replicate, to be merged); repetitions are the replicates. A run of a deterministic guest may
        also hold exact instruction counts (event COUNTED_EVENT): ``event="instructions"`` picks
        them; otherwise they are used only when the run has no sampled profile.
        """
        out: list[tuple[list[Path], dict]] = []
        for part in spec.split(","):
            ref, _, bench = part.strip().partition(":")
            bench, cores = split_cores(bench, part.strip(), f"{ref}:")
            run = self.find_run(ref)
            profs = _of_kind(self.profiles(run.id, bench or None), event, run.id)
            if not profs:
                what = f"of {bench} " if bench else ""
                raise InputError(f"run {run.id} has no profile {what}in the store; record one with "
                                 f"kperfdiff bench --profile")
            benches = sorted({p.benchmark for p in profs})
            if len(benches) > 1:
                raise InputError(f"run {run.id} has profiles of several benchmarks ({', '.join(benches)}); "
                                 f"name one as {run.id}:BENCHMARK")

            def cores_of(p):
                return int(p.meta.get("copies") or 1)
            counts = sorted({cores_of(p) for p in profs})
            if cores is not None:
                profs = [p for p in profs if cores_of(p) == cores]
                if not profs:
                    raise InputError(f"run {run.id} has no profile of {benches[0]} at {cores} cores "
                                     f"(it has {', '.join(map(str, counts))})")
            elif len(counts) > 1:
                raise InputError(f"run {run.id} has profiles of {benches[0]} at {', '.join(map(str, counts))} "
                                 f"cores; choose one as {run.id}:{benches[0]}@N")
            machine = self.machine(run.machine_id)
            by_rep: dict[int, list[StoredProfile]] = {}
            for p in profs:
                by_rep.setdefault(p.rep, []).append(p)
            for rep, ps in sorted(by_rep.items()):
                ops = [p.ops for p in ps]
                cpu = [p.cpu_time_ns for p in ps]
                out.append(([Path(p.path) for p in ps], {
                    "label": run.label or f"run {run.id}", "arch": machine.arch,
                    "ops": sum(ops) if all(ops) else None, "cpu_time_ns": sum(cpu) if all(cpu) else None,
                    "kallsyms": ps[0].kallsyms, "run_id": run.id, "rep": rep, "cores": cores_of(ps[0]),
                    "benchmark": ps[0].benchmark, "emulated": machine.emulated,
                    "symfs": ps[0].meta.get("symfs"), "time_unit": machine.facts.get("time_unit"),
                    "counted": ps[0].event == COUNTED_EVENT,
                    "instructions": _sum_counts([p.meta.get("instructions") for p in ps])}))
        return out

    def profile_lookup(self, event: str | None = None):
        """A run reference (``RUN:BENCH``, as :meth:`profile_refs` takes it) -> its repetitions' profiles:
        what :func:`kperfdiff.ingest.load.load_sides` asks of a side that is not a file."""
        def refs(ref: str) -> list[tuple[list[Path], dict]]:
            found = self.profile_refs(ref, event)
            if not found:
                raise InputError(f"{ref} is not a run with profiles in the store")
            return found
        return refs
