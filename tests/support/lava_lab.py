"""A real LAVA lab on this machine, for `make test-lab` (tests/targets/test_lava_lab.py) and for recording the
API responses the fast tests replay (tests/data/lava/).

Debian bookworm's lava-server and lava-dispatcher (2023.01), run from their packages without their
services: a private PostgreSQL cluster (initdb as the postgres user in a temporary folder, a Unix
socket only, no TCP), the server's settings through LAVA_JSON_SETTINGS (the database, media,
device dictionaries and an empty health-check folder, so nothing of /etc/lava-server is used or
changed), gunicorn on 127.0.0.1 on a free port, the scheduler, and one worker with the qemu devices
(the standard `qemu` device type, TCG: this machine has no usable KVM). Every process is started
here and stopped by its pid.

    .venv/bin/python tests/support/lava_lab.py --record tests/data/lava     # bring it up, record the fixtures
    .venv/bin/python tests/support/lava_lab.py --keep                        # bring it up and wait (Ctrl-C)
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

PG_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
TOOLS = ("lava-server", "lava-worker", "lava-run", "gunicorn3", "qemu-system-x86_64", "runuser")
DEVICE_DICT = """{% extends 'qemu.jinja2' %}
{% set mac_addr = '52:54:00:12:34:@N@' %}
{% set memory = 1024 %}
{% set netdevice = 'user' %}
"""


def missing_tools() -> list[str]:
    miss = [t for t in TOOLS if shutil.which(t) is None]
    if not PG_BIN:
        miss.append("postgresql (initdb)")
    return miss


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A LAVA server, scheduler and worker with ``devices`` qemu devices, in ``work`` (a fresh folder)."""

    def __init__(self, work: Path, devices: int = 2, log=print):
        self.work = Path(work)
        self.devices = [f"qemu-{i + 1:02d}" for i in range(devices)]
        self.log = log
        self.procs: list[subprocess.Popen] = []
        self.port = free_port()
        self.pg_port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = ""
        self.worker_token = ""
        self.env = dict(os.environ)

    # -- bring-up --
    def start(self) -> "Lab":
        t0 = time.monotonic()
        self.work.mkdir(parents=True, exist_ok=True)
        self._postgres()
        for d in ("media", "devices", "health-checks", "worker"):
            (self.work / d).mkdir(exist_ok=True)
        settings = {
            "DATABASES": {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "lavaserver",
                                      "USER": "lavaserver", "PASSWORD": "", "HOST": str(self.pg_dir / "sock"),
                                      "PORT": str(self.pg_port)}},
            "SECRET_KEY": base64.b64encode(os.urandom(30)).decode(),
            "MEDIA_ROOT": str(self.work / "media"), "DEVICES_PATH": str(self.work / "devices"),
            "HEALTH_CHECKS_PATH": str(self.work / "health-checks"), "ALLOWED_HOSTS": ["*"],
        }
        self.env["LAVA_JSON_SETTINGS"] = base64.b64encode(json.dumps(settings).encode()).decode()
        self.manage("migrate", "--noinput")
        self.manage("users", "add", "kpd", "--superuser", "--staff", "--passwd", base64.b32encode(os.urandom(10)).decode())
        self.token = self.manage("tokens", "add", "--user", "kpd").strip().splitlines()[-1].strip()
        out = self.manage("workers", "add", "lab-worker")
        self.worker_token = re.search(r"Token:\s*(\S+)", out).group(1)
        self.manage("device-types", "add", "qemu")
        for i, d in enumerate(self.devices):
            self.manage("devices", "add", "--device-type", "qemu", "--worker", "lab-worker", d)
            (self.work / "devices" / f"{d}.jinja2").write_text(DEVICE_DICT.replace("@N@", f"{0x60 + i:02x}"))
        self._spawn("gunicorn", ["gunicorn3", "lava_server.wsgi", "--log-level", "info", "--log-file",
                                 str(self.work / "gunicorn.log"), "--worker-class", "eventlet", "--workers", "2",
                                 "--bind", f"127.0.0.1:{self.port}"])
        # as root, like gunicorn here (it drops to lavaserver by default, which cannot reach a private folder)
        self._spawn("scheduler", ["lava-server", "manage", "lava-scheduler", "--level", "DEBUG", "--log-file",
                                  str(self.work / "scheduler.log"), "--user", "root", "--group", "root"])
        self._spawn("worker", ["lava-worker", "--name", "lab-worker", "--url", self.url + "/", "--token",
                               self.worker_token, "--worker-dir", str(self.work / "worker"), "--log-file",
                               str(self.work / "worker.log"), "--level", "DEBUG"])
        self._wait_online()
        self.log(f"lava lab up at {self.url} in {time.monotonic() - t0:.1f} s ({len(self.devices)} qemu devices)")
        return self

    def _postgres(self) -> None:
        # a folder of its own that the postgres user can reach (test folders are private to root)
        self.pg_dir = Path(tempfile.mkdtemp(prefix="kpd-lava-pg-"))
        os.chmod(self.pg_dir, 0o755)
        pg = self.pg_dir / "data"
        sock = self.pg_dir / "sock"
        pw = pwd.getpwnam("postgres")
        for d in (pg, sock):
            d.mkdir()
            os.chown(d, pw.pw_uid, pw.pw_gid)
        bin_dir = PG_BIN[-1]
        self._run(["runuser", "-u", "postgres", "--", str(bin_dir / "initdb"), "-D", str(pg), "-A", "trust", "-U",
                   "postgres", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"])
        self._run(["runuser", "-u", "postgres", "--", str(bin_dir / "pg_ctl"), "-D", str(pg), "-l",
                   str(sock / "pg.log"), "-o", f"-k {sock} -p {self.pg_port} -c listen_addresses='' -c fsync=off",
                   "-w", "start"])
        self.pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(pg)]
        for sql in ("CREATE ROLE lavaserver LOGIN", "CREATE DATABASE lavaserver OWNER lavaserver"):
            self._run(["psql", "-h", str(sock), "-p", str(self.pg_port), "-U", "postgres", "-q", "-c", sql])

    def _run(self, argv: list[str], env=None) -> str:
        r = subprocess.run(argv, capture_output=True, text=True, env=env or self.env, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} failed ({r.returncode}): {r.stderr.strip()[-800:]}")
        return r.stdout

    def manage(self, *args: str) -> str:
        return self._run(["lava-server", "manage", *args])

    def _spawn(self, name: str, argv: list[str]) -> None:
        out = open(self.work / f"{name}.out", "wb")
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def _wait_online(self, timeout: float = 120) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} stopped with status {p.returncode}; see {self.work}")
            with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                with urllib.request.urlopen(f"{self.url}/api/v0.2/workers/lab-worker/", timeout=5) as r:
                    if json.load(r).get("state") == "Online":
                        return
            time.sleep(1)
        raise RuntimeError(f"the LAVA worker did not come online within {timeout:g} s; see {self.work}")

    # -- use --
    def api(self, method: str, path: str, body: dict | None = None, token: str | None = "default"):
        """(status, body text) of one REST call (token: the lab user's by default, None: none)."""
        token = self.token if token == "default" else token
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Token {token}"
        req = urllib.request.Request(f"{self.url}/api/v0.2/{path}", method=method, headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_job(self, job_id: int, states=("Finished",), timeout: float = 1800) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            _, body = self.api("GET", f"jobs/{job_id}/")
            d = json.loads(body)
            if d["state"] in states:
                return d
            time.sleep(2)
        raise RuntimeError(f"LAVA job {job_id} did not reach {states} within {timeout:g} s")

    def set_health(self, health: str) -> None:
        for d in self.devices:
            self.manage("devices", "update", "--health", health, d)

    # -- tear-down --
    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        self.procs.clear()
        self._stop_jobs()
        if getattr(self, "pg_ctl", None):
            subprocess.run(["runuser", "-u", "postgres", "--", *self.pg_ctl, "-m", "fast", "-w", "stop"],
                           capture_output=True, timeout=120)
            self.pg_ctl = None
        if getattr(self, "pg_dir", None):
            shutil.rmtree(self.pg_dir, ignore_errors=True)
            self.pg_dir = None

    def _stop_jobs(self) -> None:
        """Kill what the worker's jobs left running: lava-worker starts each job's lava-run in a session of
        its own, which outlives the worker (a stray lava-run and its QEMU once ran here for 37 minutes).
        They are known by the job folder under this lab's worker dir on their command line."""
        mine = str(self.work / "worker")
        for pid in [int(d) for d in os.listdir("/proc") if d.isdigit()]:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace")
            except OSError:
                continue
            if mine in argv and pid != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


# -- recording the fixtures of tests/targets/test_lava_api.py ---------------------------------------------------

def _save(out: Path, name: str, status: int, body: str) -> None:
    try:
        data = json.loads(body)
    except ValueError:
        data = body
    if isinstance(data, dict):
        for k in ("token",):           # the job's own token (the worker's), never needed by a test
            if k in data:
                data[k] = "REDACTED"
    (out / f"{name}.json").write_text(json.dumps({"status": status, "body": data}, indent=1, sort_keys=True) + "\n")


def record(lab: Lab, out: Path, job: dict, to_yaml) -> None:
    """Record the responses the API tests replay: auth failures, a submission, a job refused, queued,
    canceled, incomplete and complete (with their logs). ``job``: a real kperfdiff job definition."""
    out.mkdir(parents=True, exist_ok=True)
    text = to_yaml(job)
    broken = json.loads(json.dumps(job))
    kernel = broken["actions"][0]["deploy"]["images"]["kernel"]
    kernel["url"] = "http://127.0.0.1:9/nothing/vmlinuz"       # nothing listens there: the download fails
    kernel.pop("sha256sum", None)
    _save(out, "auth-invalid-token", *lab.api("POST", "jobs/", {"definition": text}, token="wrong"))
    _save(out, "auth-no-token", *lab.api("POST", "jobs/", {"definition": text}, token=None))
    _save(out, "submit-invalid", *lab.api("POST", "jobs/", {"definition": "job_name: x\nactions: []\n"}))
    # queued: every device in maintenance, so the job stays Submitted; then canceled
    lab.set_health("MAINTENANCE")
    status, body = lab.api("POST", "jobs/", {"definition": text})
    _save(out, "submit-ok", status, body)
    queued = json.loads(body)["job_ids"][0]
    time.sleep(5)
    _save(out, "job-submitted", *lab.api("GET", f"jobs/{queued}/"))
    _save(out, "cancel", *lab.api("GET", f"jobs/{queued}/cancel/"))
    lab.wait_job(queued)
    _save(out, "job-canceled", *lab.api("GET", f"jobs/{queued}/"))
    lab.set_health("GOOD")
    # incomplete: the kernel cannot be downloaded
    status, body = lab.api("POST", "jobs/", {"definition": to_yaml(broken)})
    bad = json.loads(body)["job_ids"][0]
    lab.wait_job(bad)
    _save(out, "job-incomplete", *lab.api("GET", f"jobs/{bad}/"))
    (out / "job-incomplete.log").write_text(lab.api("GET", f"jobs/{bad}/logs/")[1])
    # complete
    status, body = lab.api("POST", "jobs/", {"definition": text})
    good = json.loads(body)["job_ids"][0]
    running = lab.wait_job(good, states=("Running", "Finished"))
    _save(out, "job-running", 200, json.dumps(running))
    lab.wait_job(good)
    _save(out, "job-complete", *lab.api("GET", f"jobs/{good}/"))
    (out / "job-complete.log").write_text(lab.api("GET", f"jobs/{good}/logs/")[1])
    _save(out, "job-complete-tests", *lab.api("GET", f"jobs/{good}/tests/"))


def _complete_job(lab: Lab):
    """A real kperfdiff job (two small benchmarks, one profiled) for the lab: (definition, to_yaml, target);
    the target serves the kernel and ramdisk until closed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from kperfdiff.bench import catalogue
    from kperfdiff.measure.session import BenchOptions
    from kperfdiff.targets import Cell, plan_benchmarks
    from kperfdiff.targets.lava.jobs import to_yaml
    from kperfdiff.targets.lava.target import LavaTarget
    t = LavaTarget(f"lava://127.0.0.1:{lab.port}/qemu,http")
    benches = {b.name: b for b in catalogue.select("full", "fault.anon.4k,syscall.null")}
    cells = [Cell(benches["fault.anon.4k"], 1), Cell(benches["syscall.null"], 1)]
    plan = plan_benchmarks(t, cells, BenchOptions(reps=1, intervals=3, tiny=True, profile=True))
    plan.invocations[1].profile = None          # one profiled, one not
    job, _ = t.definition(plan.invocations, name="kperfdiff fixture job", metadata={"kperfdiff.fixture": "1"})
    return job, to_yaml, t


def main() -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, help="record the API fixtures into this folder")
    ap.add_argument("--keep", action="store_true", help="keep the lab up until Ctrl-C")
    ap.add_argument("--work", type=Path, help="the lab's folder (kept; default: a temporary one)")
    a = ap.parse_args()
    miss = missing_tools()
    if miss:
        print(f"missing: {', '.join(miss)} (make test-lab installs them)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kpd-lava-lab-") as d, Lab(a.work or Path(d) / "lab") as lab:
        if a.record:
            job, to_yaml, target = _complete_job(lab)
            try:
                record(lab, a.record, job, to_yaml)
            finally:
                target.close()
            print(f"recorded into {a.record}")
        if a.keep:
            print(f"LAVA at {lab.url}, token in {Path(d) / 'token'}; Ctrl-C (or kill {os.getpid()}) to stop",
                  flush=True)
            (Path(d) / "token").write_text(lab.token)

            def stop(*_):
                raise KeyboardInterrupt
            signal.signal(signal.SIGTERM, stop)          # kill PID stops it cleanly too
            signal.signal(signal.SIGINT, stop)           # even when started in the background
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
