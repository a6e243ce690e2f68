"""A small client of LAVA's REST API (v0.2), and where the token comes from.

Only what kperfdiff needs: submit a job definition (``POST /api/v0.2/jobs/``), read a job's
state and health (``GET /api/v0.2/jobs/ID/``), fetch its log (``GET .../logs/``, the YAML log
the dispatcher sent) and cancel it (``GET .../cancel/``). Authentication is LAVA's token
header, ``Authorization: Token TOKEN``.

The token is read from the environment (``KPERFDIFF_LAVA_TOKEN``, or the variable a target
names with ``token_env=``), else from kperfdiff's own file
(``$XDG_CONFIG_HOME/kperfdiff/lava.toml``: ``[servers."HOST"] token = "..."``), else from
lavacli's identities (``$XDG_CONFIG_HOME/lavacli.yaml``: the identity a target names with
``identity=``, or the one whose ``uri`` is this server). It lives in this client's request
headers and nowhere else: never in a target specification, the store, a log line, a
report or an error message.

Every failure is a :class:`LavaError` of one sentence: the server refused the token (HTTP 401
or 403), refused the job (400, with LAVA's reason), could not be reached, or answered
something that is not LAVA's JSON. Reads are retried a few times over a minute, so a server
restarting under a long experiment does not fail it; a submission is never retried (it
could be queued twice).
"""
from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kperfdiff.core.errors import BenchError, InputError
from kperfdiff.core.files import read_toml, read_yaml

TOKEN_ENV = "KPERFDIFF_LAVA_TOKEN"
HTTP_TIMEOUT_S = 60.0
READ_RETRIES = (2.0, 5.0, 15.0, 40.0)    # seconds before each new attempt of a read
FINISHED_STATES = {"Finished"}


class LavaError(BenchError):
    """The LAVA server could not be used: unreachable, refused, or answering nonsense."""


class LavaAuthError(LavaError):
    """The server refused the token (or no token was found)."""

    exit_status = 2


@dataclass
class JobStatus:
    """What the server says of one job."""

    id: int
    state: str                  # Submitted, Scheduling, Scheduled, Running, Canceling, Finished
    health: str                 # Unknown, Complete, Incomplete, Canceled
    device: str | None          # the device it ran on (None until scheduled)
    device_type: str | None
    failure_comment: str
    submit_time: str | None
    start_time: str | None
    end_time: str | None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_STATES

    @classmethod
    def from_json(cls, d: dict) -> "JobStatus":
        def text(k):
            v = d.get(k)
            return None if v in (None, "") else str(v)
        try:
            jid = int(d["id"])
        except (KeyError, TypeError, ValueError):
            raise LavaError("the LAVA server answered a job request without a job id") from None
        return cls(id=jid, state=str(d.get("state") or "Unknown"), health=str(d.get("health") or "Unknown"),
                   device=text("actual_device"), device_type=text("requested_device_type"),
                   failure_comment=str(d.get("failure_comment") or "").strip(),
                   submit_time=text("submit_time"), start_time=text("start_time"), end_time=text("end_time"))


class LavaClient:
    """The REST API of one server: ``base`` is its root URL (``https://lava.example.org``)."""

    def __init__(self, base: str, token: str | None, *, timeout: float = HTTP_TIMEOUT_S,
                 retries: tuple[float, ...] = READ_RETRIES):
        self.base = base.rstrip("/")
        self.host = urllib.parse.urlsplit(self.base).netloc or self.base
        self._token = token
        self.timeout = timeout
        self.retries = retries

    def __repr__(self) -> str:          # never the token
        return f"LavaClient({self.base!r})"

    # -- the calls --
    def submit(self, definition: str) -> int:
        """Queue one job definition (YAML text); returns its id."""
        body = json.dumps({"definition": definition}).encode()
        data = self._json("POST", "jobs/", body, what="the job submission", retry=False)
        ids = data.get("job_ids") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            raise LavaError(f"the LAVA server {self.host} accepted a job but named no job id "
                            f"({_short(data)})")
        return ids[0]

    def job(self, job_id: int) -> JobStatus:
        data = self._json("GET", f"jobs/{int(job_id)}/", what=f"job {job_id}")
        if not isinstance(data, dict):
            raise LavaError(f"the LAVA server {self.host} answered job {job_id} with {_short(data)}")
        return JobStatus.from_json(data)

    def logs(self, job_id: int, dest: Path) -> Path:
        """The job's YAML log, streamed into ``dest``."""
        def fetch():
            with self._open("GET", f"jobs/{int(job_id)}/logs/", None, f"the log of job {job_id}") as r, \
                    open(dest, "wb") as fh:
                shutil.copyfileobj(r, fh, 1 << 20)
        self._retrying(fetch, f"the log of job {job_id}")
        return dest

    def cancel(self, job_id: int) -> None:
        self._json("GET", f"jobs/{int(job_id)}/cancel/", what=f"canceling job {job_id}")

    def device_type_exists(self, name: str) -> bool:
        try:
            self._json("GET", f"devicetypes/{urllib.parse.quote(name, safe='')}/", what=f"device type {name}")
        except LavaError as e:
            if getattr(e, "status", None) == 404:
                return False
            raise
        return True

    # -- plumbing --
    def _json(self, method: str, path: str, body: bytes | None = None, *, what: str, retry: bool = True):
        def call():
            with self._open(method, path, body, what) as r:
                raw = r.read()
            try:
                return json.loads(raw.decode("utf-8")) if raw.strip() else {}
            except (UnicodeDecodeError, ValueError):
                raise LavaError(f"the LAVA server {self.host} answered {what} with something that is not "
                                f"JSON ({raw[:60]!r}); is {self.base} a LAVA server?") from None
        return self._retrying(call, what) if retry else call()

    def _retrying(self, call, what: str):
        for wait in (*self.retries, None):
            try:
                return call()
            except LavaError as e:
                if wait is None or not getattr(e, "transient", False):
                    raise
            time.sleep(wait)

    def _open(self, method: str, path: str, body: bytes | None, what: str):
        url = f"{self.base}/api/v0.2/{path}"
        headers = {"Accept": "application/json", "User-Agent": "kperfdiff"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Token {self._token}"
        req = urllib.request.Request(url, data=body, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raise self._http_error(e, what) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            err = LavaError(f"the LAVA server {self.host} cannot be reached for {what}: {reason}")
            err.transient = True
            raise err from None

    def _http_error(self, e: urllib.error.HTTPError, what: str) -> LavaError:
        try:
            detail = json.loads(e.read().decode("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            detail = None
        msg = ""
        if isinstance(detail, dict):
            msg = str(detail.get("detail") or detail.get("message") or "")
        if e.code in (401, 403):
            if self._token:
                err: LavaError = LavaAuthError(
                    f"the LAVA server {self.host} refused the token for {what} (HTTP {e.code}: "
                    f"{msg or e.reason}); check the token given in {TOKEN_ENV}, kperfdiff's lava.toml or "
                    f"lavacli.yaml for this server")
            else:
                err = LavaAuthError(f"the LAVA server {self.host} needs a token for {what} (HTTP {e.code}: "
                                    f"{msg or e.reason}); set {TOKEN_ENV} or see `kperfdiff lava --help`")
        elif e.code == 404:
            err = LavaError(f"the LAVA server {self.host} has no {what} (HTTP 404)")
        elif e.code == 400:
            err = LavaError(f"the LAVA server {self.host} refused {what}: {msg or e.reason}")
        else:
            err = LavaError(f"the LAVA server {self.host} failed {what} (HTTP {e.code}: {msg or e.reason})")
            err.transient = e.code in (429, 500, 502, 503, 504)
        err.status = e.code
        return err


def _short(data) -> str:
    text = json.dumps(data) if not isinstance(data, str) else data
    return text if len(text) <= 120 else text[:117] + "..."


# -- the token --------------------------------------------------------------------

def config_dir() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def find_token(host: str, *, env: str = TOKEN_ENV, identity: str | None = None) -> tuple[str | None, str]:
    """(token, where it came from) for a server ``host`` (``name`` or ``name:port``); (None, why) when
    no source has one. The description names a variable or a file, never the token."""
    if os.environ.get(env):
        return os.environ[env].strip(), f"the environment variable {env}"
    ours = config_dir() / "kperfdiff" / "lava.toml"
    if ours.exists():
        data = read_toml(ours, "kperfdiff LAVA configuration")
        servers = data.get("servers") if isinstance(data.get("servers"), dict) else {}
        entry = servers.get(host) or servers.get(host.split(":")[0])
        if isinstance(entry, dict) and isinstance(entry.get("token"), str) and entry["token"]:
            return entry["token"], str(ours)
    lavacli = config_dir() / "lavacli.yaml"
    if lavacli.exists():
        token = _lavacli_token(lavacli, host, identity)
        if token:
            return token, f"{lavacli} (identity {identity})" if identity else str(lavacli)
    elif identity:
        raise InputError(f"identity={identity} names a lavacli identity, but {lavacli} does not exist")
    return None, f"no token for {host} in {env}, {ours} or {lavacli}"


def _lavacli_token(path: Path, host: str, identity: str | None) -> str | None:
    """The token of a lavacli identity: the one named, else the first whose uri is on ``host``."""
    data = read_yaml(path, "lavacli configuration")
    if not isinstance(data, dict):
        return None
    if identity is not None:
        entry = data.get(identity)
        if not isinstance(entry, dict):
            raise InputError(f"{path} has no lavacli identity {identity!r} "
                             f"(it has: {', '.join(map(str, data)) or 'none'})")
        return _identity_token(entry)
    for entry in data.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("uri"), str):
            continue
        u = urllib.parse.urlsplit(entry["uri"])
        if u.hostname and (u.hostname == host.split(":")[0]) and (":" not in host or f"{u.hostname}:{u.port}" == host):
            token = _identity_token(entry)
            if token:
                return token
    return None


def _identity_token(entry: dict) -> str | None:
    if isinstance(entry.get("token"), str) and entry["token"]:
        return entry["token"]
    u = urllib.parse.urlsplit(str(entry.get("uri", "")))
    return urllib.parse.unquote(u.password) if u.password else None
