"""A board over SSH: ``ssh://[USER@]HOST[:PORT][,identity=KEYFILE][,dir=REMOTE_TMP]``.

Uses the system ssh client with key authentication only (BatchMode=yes)
and one ControlMaster connection shared by every command. prepare() reads
the board's architecture (uname -m), makes a private temporary folder there
and copies the static workers (cross-compiled when the architectures
differ), kpd-run and, when the board has no perf and Debian has one for its
architecture, perf with its libraries. A job is one generated script (every
word shlex-quoted) run over one ssh command; its results folder comes back
as a tar stream. close() removes the remote folder and the master connection.

Every remote command is built from words with shlex.quote: no user-supplied
text (labels, file names, parameters) reaches a remote shell unquoted.
"""
from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from kperfdiff.core.arch import normalise_arch
from kperfdiff.core.errors import BenchError, InputError, UsageError
from kperfdiff.targets.qemu import perf_bundle, perf_command
from kperfdiff.targets.base import (
    Invocation,
    InvocationResult,
    Target,
    bundle_binaries,
    facts_from_files,
    job_script,
    read_fact_files,
    read_results,
)

CONNECT_TIMEOUT_S = 15
GNU_ARCH = {"arm64": "aarch64", "x86_64": "x86_64"}


def parse_spec(spec: str) -> dict:
    if not spec.startswith("ssh://"):
        raise UsageError(f"the target {spec!r} is not an ssh:// address")
    body, *opts = spec[len("ssh://"):].split(",")
    m = re.fullmatch(r"(?:([^@/\s]+)@)?(\[[^\]]+\]|[^:@/\s]+)(?::(\d+))?/?", body)
    if not m:
        raise UsageError(f"the target {spec!r} is not of the form ssh://user@host[:port]")
    out = {"user": m.group(1), "host": m.group(2).strip("[]"), "port": int(m.group(3)) if m.group(3) else None,
           "identity": None, "dir": None}
    for o in opts:
        k, eq, v = o.partition("=")
        if k in ("identity", "dir") and eq and v:
            out[k] = v
        else:
            raise UsageError(f"the option {o!r} of target {spec!r} is not understood (known: identity=, dir=)")
    return out


class SshTarget(Target):
    kind = "ssh"

    def __init__(self, spec: str, ssh_options: list[str] | None = None):
        self.spec = spec
        self.addr = parse_spec(spec)
        self.extra = list(ssh_options or [])
        self._sock_dir = Path(tempfile.mkdtemp(prefix="kpd-ssh-"))
        self._local = Path(tempfile.mkdtemp(prefix="kpd-sshres-"))
        self.remote_dir: str | None = None
        self.arch: str | None = None
        self._bins: dict[str, Path] = {}
        self._perf: list[str] | None = None
        self._facts: dict | None = None
        self._virt = "unknown"
        self.perf_event = "cpu-clock"
        self._last_out: Path | None = None
        if shutil.which("ssh") is None:
            raise BenchError("the ssh client is not installed (Debian package openssh-client)")

    # -- plumbing --
    def ssh_argv(self) -> list[str]:
        a = ["ssh", "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
             "-o", f"ControlPath={self._sock_dir}/cm", "-o", "ControlPersist=120",
             "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", "-o", "StrictHostKeyChecking=accept-new",
             "-o", "LogLevel=ERROR", *self.extra]
        if self.addr["port"]:
            a += ["-p", str(self.addr["port"])]
        if self.addr["identity"]:
            a += ["-i", str(Path(self.addr["identity"]).expanduser()), "-o", "IdentitiesOnly=yes"]
        dest = f"{self.addr['user']}@{self.addr['host']}" if self.addr["user"] else self.addr["host"]
        return a + ["--", dest]

    def remote(self, words: list[str], *, stdin: bytes | None = None, timeout: float = 120,
               check: bool = True, what: str = "") -> subprocess.CompletedProcess:
        """Run one remote command given as words; each word is shell-quoted here."""
        cmd = " ".join(shlex.quote(str(w)) for w in words)
        return self.remote_sh(cmd, stdin=stdin, timeout=timeout, check=check, what=what or words[0])

    def remote_sh(self, command: str, *, stdin: bytes | None = None, timeout: float = 120, check: bool = True,
                  what: str = "") -> subprocess.CompletedProcess:
        """Run an already-quoted command line (built only from shlex.quote'd words)."""
        try:
            r = subprocess.run(self.ssh_argv() + [command], input=stdin if stdin is not None else b"",
                               capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{what or 'a command'} on {self.addr['host']} did not finish within {timeout:g} s") \
                from None
        if r.returncode == 255:
            msg = r.stderr.decode(errors="replace").strip().splitlines()
            raise BenchError(f"ssh to {self.addr['host']} failed: {(msg[-1] if msg else 'no message')[:200]} "
                             f"(key authentication only: is the key in the board's authorized_keys?)")
        if check and r.returncode != 0:
            msg = r.stderr.decode(errors="replace").strip().splitlines()
            raise BenchError(f"{what or 'a command'} on {self.addr['host']} failed with status {r.returncode}: "
                             f"{(msg[-1] if msg else 'no message')[:200]}")
        return r

    def _put_tree(self, files: dict[str, Path | bytes], dest: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name, src in sorted(files.items()):
                if isinstance(src, bytes):
                    ti = tarfile.TarInfo(name)
                    ti.size = len(src)
                    ti.mode = 0o755
                    tf.addfile(ti, io.BytesIO(src))
                else:
                    tf.add(str(Path(src).resolve()), arcname=name)
        q = shlex.quote
        self.remote_sh(f"mkdir -p {q(dest)} && tar -x -f - -C {q(dest)}", stdin=buf.getvalue(), timeout=600,
                       what="copying files")

    # -- Target --
    def connect(self) -> None:
        if self.remote_dir:
            return
        r = self.remote(["uname", "-m"], what="uname -m", timeout=CONNECT_TIMEOUT_S + 30)
        self.arch = normalise_arch(r.stdout.decode().strip())
        base = self.addr["dir"] or "/tmp"
        r = self.remote(["mktemp", "-d", f"{base}/kperfdiff.XXXXXXXX"], what="mktemp")
        self.remote_dir = r.stdout.decode().strip()
        if not self.remote_dir.startswith(base):
            raise BenchError(f"mktemp on {self.addr['host']} answered {self.remote_dir!r}")
        v = self.remote_sh("systemd-detect-virt 2>/dev/null || true", check=False)
        self._virt = v.stdout.decode().strip() or "unknown"

    def prepare(self, families: list[str] | None = None, profile: bool = False) -> None:
        self.connect()
        gnu = GNU_ARCH.get(self.arch or "")
        if gnu is None:
            raise BenchError(f"the board {self.addr['host']} is {self.arch}; kperfdiff builds workers for "
                             f"arm64 and x86_64 only")
        want = set(families or []) - {n[len("kpd-"):] for n in self._bins}
        if not self._bins or want:
            bins = bundle_binaries(gnu, sorted(want) if want else None)
            self._put_tree(bins, f"{self.remote_dir}/bin")
            self._bins.update(bins)
        if profile and self._perf is None:
            r = self.remote_sh("command -v perf", check=False)
            path = r.stdout.decode().strip()
            if r.returncode == 0 and path:
                probe = self.remote([path, "stat", "-e", "cycles", "true"], check=False)
                self._perf = [path]
                if probe.returncode == 0 and b"not supported" not in probe.stderr:
                    self.perf_event = "cycles"
            else:
                bundle = perf_bundle(self.arch)
                self._put_tree(dict(bundle), f"{self.remote_dir}/perf")
                self._perf = perf_command(f"{self.remote_dir}/perf")

    def run_job(self, invocations: list[Invocation]) -> list[InvocationResult]:
        fams = sorted({i.argv[0][4:] for i in invocations if i.argv and i.argv[0].startswith("kpd-")}
                      - {"run", "hello"})
        self.prepare(fams, profile=any(i.profile for i in invocations))
        rd = self.remote_dir
        out = f"{rd}/out"
        # allow_swap_setup: the job hot-adds a zram swap when none is active (needs root and zram on the
        # board) and removes it when it exits; facts/swap_setup says why not otherwise
        script = job_script(invocations, f"{rd}/bin", out, perf=self._perf, swap_mb=self.swap_mb)
        q = shlex.quote
        self.remote_sh(f"rm -rf {q(out)} && cat > {q(rd + '/job.sh')}", stdin=script.encode(), what="sending the job")
        limit = 60 + sum(i.timeout + 10 for i in invocations)
        self.remote(["sh", f"{rd}/job.sh"], timeout=limit, check=False, what="the job")
        r = self.remote(["tar", "-c", "-f", "-", "-C", out, "."], timeout=600, what="fetching results")
        local = Path(tempfile.mkdtemp(prefix="job-", dir=self._local))
        with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
            try:
                tf.extractall(local, filter="data")
            except TypeError:
                tf.extractall(local)
        self._last_out = local
        self._facts = facts_from_files(read_fact_files(local / "facts"), emulated=False,
                                       virtualisation=self._virt, extra={"target": self.spec})
        return read_results(invocations, local)

    def binaries(self) -> dict[str, Path]:
        return {f"{self.remote_dir}/bin/{n}": p for n, p in self._bins.items()} if self.remote_dir else {}

    def facts(self) -> dict:
        if self._facts is None:
            self.run_job([])
        return dict(self._facts or {})

    def fetch(self, paths: list[str], dest: Path) -> list[Path]:
        """Copy remote files (absolute, or relative to the remote temp folder) into dest."""
        self.connect()
        dest.mkdir(parents=True, exist_ok=True)
        got = []
        for p in paths:
            src = p if p.startswith("/") else f"{self.remote_dir}/{p}"
            r = self.remote(["cat", src], check=False, timeout=600, what=f"reading {p}")
            if r.returncode != 0:
                raise InputError(f"the board {self.addr['host']} has no readable file {p!r}")
            out = dest / Path(p).name
            out.write_bytes(r.stdout)
            got.append(out)
        return got

    def close(self) -> None:
        try:
            if self.remote_dir:
                self.remote(["rm", "-rf", self.remote_dir], check=False, timeout=60)
                self.remote_dir = None
        except BenchError:
            pass
        finally:
            try:
                subprocess.run(self.ssh_argv()[:-2] + ["-O", "exit", self.ssh_argv()[-1]], capture_output=True,
                               timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            shutil.rmtree(self._local, ignore_errors=True)
