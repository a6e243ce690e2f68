"""This machine as a target: today's local behaviour behind the Target interface."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

from kperfdiff.targets import machine
from kperfdiff.bench import build, worker
from kperfdiff.bench.swap import temporary_swap
from kperfdiff.core.errors import BenchError, InputError
from kperfdiff.targets.perf_record import COPY, record_prefix, snapshot_kallsyms
from kperfdiff.targets.base import Invocation, InvocationResult, Target


class LocalTarget(Target):
    kind = "local"
    spec = "local"

    def __init__(self):
        self._bins: dict[str, Path] = {}
        self._facts: dict | None = None
        self._work = Path(tempfile.mkdtemp(prefix="kpd-local-"))

    def prepare(self, families: list[str] | None = None, profile: bool = False) -> None:
        bins = build.build_all(families)
        self._bins.update({("kpd-hello" if n == "hello" else f"kpd-{n}"): p for n, p in bins.items()})
        if profile and shutil.which("perf") is None:
            raise BenchError("perf is not installed; run `make setup` (Debian package linux-perf)")

    def _resolve(self, word: str) -> str:
        if word not in self._bins and word.startswith("kpd-") and word != "kpd-hello":
            self.prepare([word[len("kpd-"):]])
        if word not in self._bins:
            raise InputError(f"no program {word!r} among the benchmark binaries")
        return str(self._bins[word])

    def run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        # swap asked for (swap_mb): a temporary one for the job, the facts taken while it is active
        with temporary_swap(self.swap_mb) if self.swap_mb else contextlib.nullcontext():
            results = self._run_job(invocations)
            if self.swap_mb:
                self._facts = None
                self.facts()
        return results

    def _run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        results = []
        for n, inv in enumerate(invocations):
            argv = [self._resolve(inv.argv[0])]
            bin_dir = str(Path(argv[0]).parent)
            if "kpd-hello" in self._bins:
                bin_dir = str(self._bins["kpd-hello"].parent)
            argv += [w.replace("@BIN@", bin_dir) for w in inv.argv[1:]]
            prefix = None
            out_dir = self._work / f"i{n}"
            out_dir.mkdir(parents=True, exist_ok=True)
            if inv.profile:
                event = inv.perf_event or "cpu-clock"
                prefix = record_prefix(out_dir / f"{inv.profile}.c{COPY}.perf.data", event, inv.perf_freq, None, [])
            r = InvocationResult(inv)
            before_v, before_i = machine.counter_texts()
            t0 = time.monotonic()
            outs = worker.run_copies(argv, inv.copies, inv.timeout, prefix=prefix)
            r.wall_s = time.monotonic() - t0
            r.vmstat_before, r.interrupts_before = before_v, before_i
            r.vmstat_after, r.interrupts_after = machine.counter_texts()
            r.parsed = outs
            r.stderr = [o.stderr for o in outs]
            r.exit_status = [o.exit_status for o in outs]
            r.timed_out = any((o.error or "").startswith("timed out") for o in outs)
            if inv.profile:
                for c in range(inv.copies):
                    pd = out_dir / f"{inv.profile}.c{c}.perf.data"
                    if pd.exists():
                        r.files[pd.name] = pd
                ks = snapshot_kallsyms(self._work)
                if ks:
                    r.files["kallsyms"] = ks
            results.append(r)
        return results

    def facts(self) -> dict:
        if self._facts is None:
            self._facts = machine.facts()
            self._facts["target"] = "local"
        return dict(self._facts)

    def fetch(self, paths: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for p in paths:
            src = Path(p) if Path(p).is_absolute() else self._work / p
            if not src.exists():
                raise InputError(f"no file {p!r} to fetch")
            shutil.copy2(src, dest / src.name)
            out.append(dest / src.name)
        return out

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)
