"""The LAVA target: a job runs on a device of a LAVA lab, which owns the boards, their power,
deployment, boot and queue.

For each batch of invocations (a variant's cells of one repetition) kperfdiff writes a job
definition (:mod:`.jobs`) that deploys the variant's kernel and kperfdiff's ramdisk (the
initramfs QEMU guests boot, :mod:`kperfdiff.targets.guest.initramfs`, with /init in its LAVA
shell mode) or the user's, boots, and runs the benchmark job in LAVA's test shell. It
submits the jobs through LAVA's REST API (:mod:`.api`) and keeps up to ``jobs=N`` of a server
in flight (:func:`run_lava_jobs`), so a matrix runs in parallel on the lab's devices. When a
job finishes its log is fetched and its results frame decoded (:mod:`.log`) into the results
folder every guest and board leaves, read by the same code
(:func:`kperfdiff.targets.base.read_results`).

A job LAVA marks Incomplete or Canceled, one that waits in the queue past ``queue_timeout``
(canceled then), and one whose results frame did not come back whole give failed results
with the reason (LAVA's own failure comment or error when it has one); an experiment then
measures those cells again on its next run, like any failed cell. Every result is labelled
with the job, the device and the device type it ran on.
"""
from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from kperfdiff import __version__
from kperfdiff.core.errors import BenchError, KperfdiffError
from kperfdiff.targets.base import (
    Invocation,
    InvocationResult,
    Target,
    bundle_binaries,
    copy_from_results,
    facts_from_files,
    job_script,
    read_fact_files,
    read_results,
)
from kperfdiff.targets.guest.initramfs import assemble, guest_pieces
from kperfdiff.targets.qemu import ARCHES, Kernel, SWAP_MODULES, perf_bundle, perf_command, resolve_kernel
from kperfdiff.targets.lava import artefacts, jobs, log as joblog
from kperfdiff.targets.lava.api import JobStatus, LavaAuthError, LavaClient, LavaError, find_token
from kperfdiff.targets.lava.spec import LavaSpec, check_cmdline, parse_spec

DEPLOY_TIMEOUT_S = 900        # downloading the kernel and ramdisk, adding LAVA's overlay
BOOT_TIMEOUT_S = 900          # power on to the shell prompt (an emulated x86_64 boot takes minutes)
FRAME_S_PER_MB = 120          # sending the results back on a 115200-baud console: ~90 s a MB, base64
TEST_MARGIN_S = 300
GRACE_S = 3600                # a job still unfinished this long after its own timeout is given up


@dataclass
class PlannedJob:
    """One job to run: the target (a variant), its invocations, a name and metadata for LAVA."""

    key: object
    target: "LavaTarget"
    invocations: list[Invocation]
    name: str
    metadata: dict = field(default_factory=dict)


@dataclass
class JobOutcome:
    """What came back of one planned job: one result per invocation (failed ones carry the reason),
    the device's facts (None when the job failed) and the labels every result gets."""

    key: object
    results: list[InvocationResult]
    facts: dict | None
    labels: dict
    error: str | None = None


class LavaTarget(Target):
    kind = "lava"

    def __init__(self, spec: str | LavaSpec, *, cmdline: str = ""):
        self.ls = parse_spec(spec) if isinstance(spec, str) else spec
        self.spec = self.ls.text
        check_cmdline(cmdline, "the kernel command line of a LAVA target")
        self.cmdline = cmdline              # an experiment variant's kernel command line
        self.arch = self.ls.arch
        self.cfg = ARCHES[self.arch]
        self._kernel: Kernel | None = None
        self._bins: dict[str, Path] = {}
        self._perf: dict[str, Path] | None = None
        self._facts: dict | None = None
        self._work = Path(tempfile.mkdtemp(prefix="kpd-lava-"))
        self._ramdisks: dict[tuple, Path] = {}
        self._client: LavaClient | None = None
        self._last_out: Path | None = None
        self.publisher: artefacts.Folder | artefacts.Server | None = None
        self.perf_event = "cpu-clock"
        self.poll_s = self.ls.poll

    # -- set-up --
    @property
    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = resolve_kernel(self.ls)
        return self._kernel

    def prepare(self, families: list[str] | None = None, profile: bool = False) -> None:
        self._kernel = self._kernel or resolve_kernel(self.ls)
        missing = set(families or []) - {k[len("kpd-"):] for k in self._bins}
        if not self._bins or missing:
            self._bins.update(bundle_binaries(self.cfg["gnu"], sorted(set(families or []) | {
                k[len("kpd-"):] for k in self._bins if k not in ("kpd-run", "kpd-hello")}) or None))
        if profile and self._perf is None:
            self._perf = perf_bundle(self.arch)

    def client(self) -> LavaClient:
        """The server's REST client, with the token from the environment or a configuration file."""
        if self._client is None:
            token, where = find_token(self.ls.server, env=self.ls.token_env, identity=self.ls.identity)
            if token is None:
                raise LavaAuthError(f"no token for the LAVA server {self.ls.server}: set {self.ls.token_env}, or "
                                    f"add it to kperfdiff's lava.toml or to lavacli.yaml ({where})")
            self._client = LavaClient(self.ls.url, token)
        return self._client

    def publish(self, path: Path) -> tuple[str, str]:
        if self.publisher is None:
            self.publisher = (artefacts.Folder(self.ls.artefacts, self.ls.artefacts_url) if self.ls.artefacts
                              else artefacts.Server(self.ls.server, self.ls.serve))
        return self.publisher.publish(path)

    def ramdisk(self) -> Path:
        """kperfdiff's ramdisk for this target (gzip'd newc): busybox with /init in LAVA shell mode, the
        modules the job needs, the workers, perf; built once per content."""
        pieces, _, _ = guest_pieces(self.cfg["debian"], self.kernel, SWAP_MODULES if self.swap_mb else [],
                                    self._bins, self._perf)
        key = (tuple(pieces), self.ls.prompt)
        if key not in self._ramdisks:
            out = self._work / f"kperfdiff-ramdisk-{len(self._ramdisks)}.cpio.gz"
            self._ramdisks[key] = assemble(out, pieces, None, {"kpd/lava": self.ls.prompt.encode()}, single=True)
        return self._ramdisks[key]

    def overlay(self) -> Path:
        """The workers and perf as a tar.gz under /kpd, for the user's own ramdisk (rootfs=)."""
        out = self._work / "kperfdiff-overlay.tar.gz"
        files = {f"kpd/bin/{k}": v for k, v in self._bins.items()}
        files.update({f"kpd/perf/{k}": v for k, v in (self._perf or {}).items()})
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT) as tf:
            for name, src in sorted(files.items()):
                ti = tf.gettarinfo(str(src), arcname=name)
                ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname, ti.mode = 0, 0, 0, "root", "root", 0o755
                with open(src, "rb") as fh:
                    tf.addfile(ti, fh)
        out.write_bytes(buf.getvalue())
        return out

    def published(self, script: str, cases: str) -> jobs.Published:
        """Publish the kernel, the ramdisk (or the overlay for the user's), the job script and the case
        names of the next job, and say where they are."""
        kurl, ksum = self.publish(self.kernel.image)
        files = []
        for name, text in (("kpd-job.sh", script), ("kpd-cases", cases)):
            path = self.scratch("file-") / name
            path.write_text(text)
            files += self.publish(path)
        if self.ls.rootfs:
            ourl, osum = self.publish(self.overlay())
            name = self.ls.rootfs.rsplit("/", 1)[-1]
            comp = next((c for ext, c in ((".gz", "gz"), (".xz", "xz"), (".zst", "zstd"), (".bz2", "bz2"))
                         if name.endswith(ext)), None)
            return jobs.Published(kurl, ksum, self.ls.rootfs, None, comp, *files, ourl, osum)
        rurl, rsum = self.publish(self.ramdisk())
        return jobs.Published(kurl, ksum, rurl, rsum, "gz", *files)

    # -- the job --
    def definition(self, invocations: list[Invocation], *, name: str, metadata: dict) -> tuple[dict, str]:
        """(job definition, its YAML) for a batch of invocations."""
        perf = perf_command("/kpd/perf") if self._perf else None
        script = job_script(invocations, jobs.BIN_DIR, jobs.OUT_DIR, perf=perf, marker="KPD-MARK",
                            swap_mb=self.swap_mb)
        cases = [inv.label or f"{inv.bench}.{i}" for i, inv in enumerate(invocations)]
        tests = jobs.test_definitions(f"kperfdiff {__version__}: {len(cases)} benchmark runs")
        test_timeout = self.ls.timeout or (TEST_MARGIN_S + sum(i.timeout for i in invocations) * 1.5
                                           + FRAME_S_PER_MB * (4 + 8 * sum(1 for i in invocations if i.profile)))
        vals = jobs.values(self.ls, self.published(script, jobs.cases_text(cases)), job_name=name, tests=tests,
                           metadata={"kperfdiff.version": __version__, **metadata}, test_timeout=test_timeout,
                           boot_timeout=BOOT_TIMEOUT_S, deploy_timeout=DEPLOY_TIMEOUT_S, cmdline_extra=self.cmdline)
        job = jobs.definition(self.ls, vals)
        header = (f"generated by kperfdiff {__version__} for {self.ls.text}\n{name}\n"
                  f"kernel: {self.kernel.source}")
        return job, jobs.to_yaml(job, header)

    def run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        fams = sorted({i.argv[0][len("kpd-"):] for i in invocations if i.argv and i.argv[0].startswith("kpd-")}
                      - {"run", "hello"})
        self.prepare(fams, profile=any(i.profile for i in invocations))
        outcome = next(run_lava_jobs([PlannedJob(0, self, invocations, f"kperfdiff on {self.ls.device_type}")]))
        if outcome.error:
            raise BenchError(outcome.error)
        return outcome.results

    def outcome(self, planned: PlannedJob, status: JobStatus, log_path: Path | None) -> JobOutcome:
        """Read a finished job: its results when it completed and its frame decodes, else failed results."""
        labels = _labels(planned, status)
        where = f"the log of LAVA job {status.id}"
        error = None
        log = None
        if log_path is not None:
            try:
                log = joblog.read(log_path)
            except OSError as e:
                error = f"the log of LAVA job {status.id} could not be read: {e.strerror}"
        if status.health != "Complete":
            why = status.failure_comment or (log.reason() if log else "") or "LAVA gave no reason"
            error = f"LAVA job {status.id} {_on(status)}was {status.health.lower()}: {why}"
        elif log is not None and error is None:
            out = self.scratch(f"job{status.id}-") / "out"
            try:
                joblog.results_folder(log, out, where)
            except KperfdiffError as e:
                error = f"LAVA job {status.id} {_on(status)}completed but {e}"
            else:
                self._last_out = out
                facts = self.facts_of(out, status)
                return JobOutcome(planned.key, read_results(planned.invocations, out), facts, labels)
        return failed_outcome(planned, error or f"LAVA job {status.id} left no log", labels)

    def facts_of(self, out: Path, status: JobStatus) -> dict:
        virt = ("kvm" if self.ls.kvm else "tcg") if self.ls.emulated else "none"
        extra = {"target": self.spec, "kernel_source": self.kernel.source, "lava_server": self.ls.server,
                 "lava_device_type": self.ls.device_type, "lava_device": status.device,
                 "perf_events": {"cpu-clock": True, "task-clock": True}}
        self._facts = facts_from_files(read_fact_files(out / "facts"), emulated=self.ls.emulated,
                                       virtualisation=virt, extra=extra)
        return dict(self._facts)

    def scratch(self, prefix: str) -> Path:
        """A new folder in this target's temporary folder (removed by close())."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=self._work))

    def binaries(self) -> dict[str, Path]:
        return {f"{jobs.BIN_DIR}/{n}": p for n, p in self._bins.items()}

    def facts(self) -> dict:
        if self._facts is None:
            self.run_job([])
        return dict(self._facts or {})

    def fetch(self, paths: list[str], dest: Path) -> list[Path]:
        return copy_from_results(self._last_out, paths, dest, where="the LAVA job")

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
        shutil.rmtree(self._work, ignore_errors=True)


def _on(status: JobStatus) -> str:
    return f"on {status.device} " if status.device else ""


def failed_outcome(planned: PlannedJob, error: str, labels: dict) -> JobOutcome:
    return JobOutcome(planned.key, [InvocationResult(inv, error=error) for inv in planned.invocations], None,
                      labels, error)


# -- several jobs in flight ---------------------------------------------------------------------------

@dataclass
class _InFlight:
    planned: PlannedJob
    job_id: int
    submitted: float
    timeout_s: float
    started: bool = False


def run_lava_jobs(planned: list[PlannedJob], *, note: Callable[[str], None] | None = None) -> Iterator[JobOutcome]:
    """Run the planned jobs, at most ``jobs=N`` of a server in flight at once, and yield each one's
    outcome as it finishes (in the order they finish). A job waiting in the queue longer than its
    target's ``queue_timeout`` is canceled and fails. Jobs still in flight when the caller stops
    (Ctrl-C, an error) are canceled."""
    note = note or (lambda _m: None)
    waiting = list(planned)
    flying: list[_InFlight] = []
    try:
        while waiting or flying:
            for p in list(waiting):
                server = p.target.ls.server
                limit = min(x.target.ls.jobs for x in planned if x.target.ls.server == server)
                if sum(1 for f in flying if f.planned.target.ls.server == server) >= limit:
                    continue
                waiting.remove(p)
                job, text = p.target.definition(p.invocations, name=p.name, metadata=p.metadata)
                try:
                    jid = p.target.client().submit(text)
                except LavaAuthError:
                    raise
                except LavaError as e:
                    yield failed_outcome(p, f"LAVA refused the job: {e}", _labels(p, None))
                    continue
                flying.append(_InFlight(p, jid, time.monotonic(), jobs.job_timeout_s(job)))
                note(f"LAVA job {jid} submitted to {server} ({p.name})")
            if not flying:
                continue
            time.sleep(min(f.planned.target.poll_s for f in flying))
            for f in list(flying):
                done = _look(f, note)
                if done is not None:
                    flying.remove(f)
                    yield done
    finally:
        canceled = []
        for f in flying:            # every job first, then one note (a second Ctrl-C cannot skip a job)
            try:
                f.planned.target.client().cancel(f.job_id)
                canceled.append(str(f.job_id))
            except LavaError:
                pass
        if canceled:
            note(f"LAVA jobs canceled: {', '.join(canceled)}")


def _labels(p: PlannedJob, status: JobStatus | None) -> dict:
    return {"lava_job": status.id if status else None, "lava_device": status.device if status else None,
            "lava_device_type": p.target.ls.device_type, "lava_server": p.target.ls.server}


def _look(f: _InFlight, note) -> JobOutcome | None:
    """The outcome of a job in flight once it finished (or was given up), else None."""
    t = f.planned.target
    status = t.client().job(f.job_id)
    waited = time.monotonic() - f.submitted
    if status.state == "Submitted" and waited > t.ls.queue_timeout:
        t.client().cancel(f.job_id)
        note(f"LAVA job {f.job_id} canceled: still queued after {t.ls.queue_timeout:g} s")
        return failed_outcome(f.planned, f"LAVA queue timeout after {t.ls.queue_timeout:g} s (job {f.job_id} "
                                         f"was canceled)", _labels(f.planned, status))
    if status.state in ("Running", "Scheduled") and not f.started:
        f.started = True
        note(f"LAVA job {f.job_id} {status.state.lower()} on {status.device or status.device_type}")
    if not status.finished:
        if f.started and waited > t.ls.queue_timeout + f.timeout_s + GRACE_S:
            t.client().cancel(f.job_id)
            return failed_outcome(f.planned, f"LAVA job {f.job_id} did not finish within its own timeout "
                                             f"({f.timeout_s:g} s) and was canceled", _labels(f.planned, status))
        return None
    log_path = None
    if status.health == "Complete" or status.start_time:
        log_path = t.scratch(f"job{f.job_id}-") / "job.log"
        try:
            t.client().logs(f.job_id, log_path)
        except LavaError as e:
            if status.health == "Complete":
                return failed_outcome(f.planned, f"LAVA job {f.job_id} completed but its log could not be "
                                                 f"fetched: {e}", _labels(f.planned, status))
            log_path = None
    note(f"LAVA job {f.job_id} {status.health.lower()}" + (f" on {status.device}" if status.device else ""))
    return t.outcome(f.planned, status, log_path)
