"""A fake LAVA REST API that replays the responses recorded from a real server (tests/data/lava/).

Each submitted job follows a script: the recorded job states it goes through, one per look
(``["job-submitted", "job-running", "job-complete"]``; the last one repeats), and the recorded
log it serves. The recorded bodies are sent as they are, with the job's own id put in. A request
whose token is not the expected one gets the recorded 403. Every request and every submitted
definition is kept, so a test can check what kperfdiff sent (and that no token is in it).
"""
from __future__ import annotations

import copy
import http.server
import json
import re
import threading
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "lava"
COMPLETE = ["job-submitted", "job-running", "job-complete"]


def recorded(name: str) -> tuple[int, object]:
    d = json.loads((DATA / f"{name}.json").read_text())
    return d["status"], d["body"]


class FakeLava:
    def __init__(self, token: str, scripts: list[dict] | None = None, default: dict | None = None):
        """``scripts``: for the 1st, 2nd, ... submitted job, {"states": [...], "log": "job-complete.log"};
        jobs past the list follow ``default`` (a complete job)."""
        self.token = token
        self.scripts = list(scripts or [])
        self.default = default or {"states": COMPLETE, "log": "job-complete.log"}
        self.jobs: dict[int, dict] = {}
        self.requests: list[tuple[str, str, str | None]] = []     # (method, path, Authorization)
        self.definitions: list[str] = []
        self.canceled: list[int] = []
        self.max_in_flight = 0          # most jobs submitted and not yet seen finished, at any moment
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):      # noqa: N802
                fake.handle(self, "GET")

            def do_POST(self):     # noqa: N802
                fake.handle(self, "POST")

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the API --
    def handle(self, h, method: str) -> None:
        auth = h.headers.get("Authorization")
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0)) if method == "POST" else b""
        with self.lock:
            self.requests.append((method, h.path, auth))
            if auth != f"Token {self.token}":
                return self.send(h, *recorded("auth-invalid-token" if auth else "auth-no-token"))
            m = re.fullmatch(r"/api/v0\.2/jobs/(?:(\d+)/(?:(logs|cancel)/)?)?", h.path)
            if not m:
                return self.send(h, 404, {"detail": "Not found."})
            if method == "POST" and m.group(1) is None:
                return self.submit(h, body)
            jid = int(m.group(1) or 0)
            job = self.jobs.get(jid)
            if job is None:
                return self.send(h, 404, {"detail": "Not found."})
            if m.group(2) == "cancel":
                self.canceled.append(jid)
                job["states"] = ["job-canceled"]
                job["seen"] = 0
                return self.send(h, *recorded("cancel"))
            if m.group(2) == "logs":
                if not job.get("log"):
                    return self.send(h, 404, {"detail": "Not found."})
                data = (DATA / job["log"]).read_bytes() if not isinstance(job["log"], bytes) else job["log"]
                h.send_response(200)
                h.send_header("Content-Type", "application/yaml")
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
                return None
            return self.look(h, jid, job)

    def submit(self, h, body: bytes) -> None:
        definition = json.loads(body)["definition"]
        self.definitions.append(definition)
        if "REFUSE" in definition:          # a definition LAVA's schema refuses
            return self.send(h, *recorded("submit-invalid"))
        jid = len(self.jobs) + 1
        script = self.scripts[jid - 1] if jid - 1 < len(self.scripts) else self.default
        self.jobs[jid] = {"states": list(script["states"]), "log": script.get("log"), "seen": 0, "done": False}
        self.max_in_flight = max(self.max_in_flight, sum(1 for j in self.jobs.values() if not j["done"]))
        status, data = recorded("submit-ok")
        data = dict(data, job_ids=[jid])
        return self.send(h, status, data)

    def look(self, h, jid: int, job: dict) -> None:
        i = min(job["seen"], len(job["states"]) - 1)
        job["seen"] += 1
        status, data = recorded(job["states"][i])
        data = copy.deepcopy(data)
        data["id"] = jid
        job["done"] = job["done"] or data.get("state") == "Finished"
        return self.send(h, status, data)

    @staticmethod
    def send(h, status: int, data) -> None:
        raw = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)
