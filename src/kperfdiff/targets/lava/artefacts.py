"""Publishing a job's files (kernel, ramdisk, overlay) where LAVA's dispatchers can fetch them.

Files are named by their content (``<sha256[:16]>-<name>``), so a kernel or ramdisk shared
by many jobs is published once and a job definition always names exactly the bytes it was
written for (its ``sha256sum`` is checked by LAVA after the download).

:class:`Folder` copies them into a folder the lab reaches at a URL (``artefacts=DIR``,
``artefacts_url=URL``; a ``file://`` URL when the dispatchers share the folder).
:class:`Server` serves them from this machine over HTTP for as long as the run lasts (the
default): read-only, only the files published, no listing, on the address this machine uses
to reach the LAVA server unless ``serve=`` says otherwise.
"""
from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import socket
import threading
import urllib.parse
from pathlib import Path

from kperfdiff.core.errors import BenchError, InputError


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def published_name(path: Path, digest: str) -> str:
    return f"{digest[:16]}-{path.name}"


class Folder:
    """Publish by copying into ``folder``, which the lab sees at ``url`` (default ``file://folder/``)."""

    def __init__(self, folder: str | Path, url: str | None = None):
        self.folder = Path(folder).expanduser().resolve()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot make the artefact folder {self.folder}: {e.strerror}") from None
        self.url = (url or self.folder.as_uri()).rstrip("/") + "/"

    def publish(self, path: Path) -> tuple[str, str]:
        """(URL, sha256) of ``path`` once copied."""
        digest = sha256_of(path)
        name = published_name(path, digest)
        dst = self.folder / name
        if not dst.exists():
            tmp = dst.with_name(dst.name + ".tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, dst)
        return self.url + urllib.parse.quote(name), digest

    def close(self) -> None:
        pass


class Server:
    """Publish by serving from this machine (``serve=[HOST][:PORT]``) while the run lasts."""

    def __init__(self, lava_host: str, serve: str | None = None):
        host, _, port = (serve or "").rpartition(":") if serve and ":" in serve else (serve or "", "", "")
        try:
            self.port = int(port) if port else 0
        except ValueError:
            raise InputError(f"serve={serve} is not HOST:PORT") from None
        self.host = host or address_towards(lava_host)
        self.files: dict[str, Path] = {}
        files = self.files

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):          # noqa: N802 - http.server's name
                self._send(body=True)

            def do_HEAD(self):         # noqa: N802
                self._send(body=False)

            def _send(self, body: bool):
                name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.lstrip("/"))
                path = files.get(name)
                if path is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(path.stat().st_size))
                self.end_headers()
                if body:
                    with open(path, "rb") as fh:
                        shutil.copyfileobj(fh, self.wfile, 1 << 20)

            def log_message(self, *args):
                pass

        try:     # on every interface unless serve= names the address
            self.httpd = http.server.ThreadingHTTPServer((host.strip("[]") if host else "", self.port), Handler)
        except OSError as e:
            raise BenchError(f"kperfdiff cannot serve the kernel and ramdisk on port {self.port}: {e.strerror} "
                             f"(give serve=HOST:PORT, or artefacts=DIR)") from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://{self.host}:{self.port}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="kperfdiff-lava-artefacts",
                                       daemon=True)
        self.thread.start()

    def publish(self, path: Path) -> tuple[str, str]:
        digest = sha256_of(path)
        name = published_name(path, digest)
        self.files[name] = path
        return self.url + urllib.parse.quote(name), digest

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def address_towards(host: str) -> str:
    """This machine's address on the route to ``host`` (``name`` or ``name:port``); no packet is sent."""
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") == 1 or host.startswith("[") else host
    try:
        infos = socket.getaddrinfo(name, 80, proto=socket.IPPROTO_UDP)
    except socket.gaierror as e:
        raise BenchError(f"the LAVA server {host} has no address here ({e.strerror}); give serve=HOST:PORT "
                         f"with an address its dispatchers reach") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        mine = s.getsockname()[0]
    return f"[{mine}]" if ":" in mine else mine
