"""Debian packages of any architecture, fetched with apt into the kperfdiff cache.

Each architecture gets its own apt configuration and list directory under
``<cache>/apt/<debian-arch>/`` (``APT::Architecture`` set to it, an empty
dpkg status file, the host's Debian sources for its own release), so this
never changes the host's dpkg architectures or its package lists. Packages
are fetched with ``apt-get download`` into ``<cache>/apt/<arch>/debs/`` and
unpacked with ``dpkg-deb -x`` into ``<cache>/apt/<arch>/root/<pkg>_<ver>/``;
a rerun finds them there and downloads nothing.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from kperfdiff.bench.build import cache_dir
from kperfdiff.core.errors import BenchError

DEBIAN_ARCH = {"arm64": "arm64", "aarch64": "arm64", "x86_64": "amd64", "amd64": "amd64"}
LIST_MAX_AGE_S = 7 * 24 * 3600
# Debian releases in order. When a kernel is asked for that the host's release
# lacks, the private configuration also lists the releases on either side of
# the host's, pinned low (priority 100): a package is taken from them only when
# asked for by version, so kernel=6.12 on a bookworm host boots trixie's kernel
# while every default stays the host release's. Their lists are fetched only then.
RELEASES = ("buster", "bullseye", "bookworm", "trixie", "forky")
NEIGHBOUR_PIN_PRIORITY = 100


def neighbour_releases(code: str) -> list[str]:
    """The Debian releases just before and after the codename (none when it is unknown)."""
    if code not in RELEASES:
        return []
    i = RELEASES.index(code)
    return [RELEASES[j] for j in (i - 1, i + 1) if 0 <= j < len(RELEASES)]


def with_neighbours(entries: list[dict], code: str) -> list[dict]:
    """The host's archive entries plus the same archives for the neighbouring releases."""
    out = list(entries)
    for other in neighbour_releases(code):
        for e in entries:
            suites = [other + s[len(code):] for s in e["suites"] if s.startswith(code)]
            if suites:
                out.append(dict(e, suites=suites))
    return out


def _host_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return ""
    m = re.search(r"^VERSION_CODENAME=\"?([\w-]+)", text, re.M)
    return m.group(1) if m else ""


def host_debian_sources() -> list[dict]:
    """The host's enabled Debian archive entries for its own release (deb822 or one-line)."""
    code = _host_codename()
    entries: list[dict] = []
    files = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        files += sorted(p for p in d.iterdir() if p.suffix in (".list", ".sources"))
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for ln in stanza.splitlines():
                    if ln.startswith("#") or ":" not in ln:
                        continue
                    k, _, v = ln.partition(":")
                    fields[k.strip().lower()] = v.strip()
                if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes") == "no":
                    continue
                for uri in fields.get("uris", "").split():
                    suites = [s for s in fields.get("suites", "").split() if not code or s.startswith(code)]
                    if suites:
                        entries.append({"uri": uri, "suites": suites,
                                        "components": fields.get("components", "main").split(),
                                        "signed_by": fields.get("signed-by", "")})
        else:
            for ln in text.splitlines():
                ln = ln.split("#", 1)[0].strip()
                if not ln.startswith("deb "):
                    continue
                words = ln.split()[1:]
                opts = ""
                if words and words[0].startswith("["):
                    while words and not words[0].endswith("]"):
                        opts += words.pop(0) + " "
                    opts += words.pop(0) if words else ""
                if len(words) < 2 or (code and not words[1].startswith(code)):
                    continue
                m = re.search(r"signed-by=(\S+?)\]?(\s|$)", opts)
                entries.append({"uri": words[0], "suites": [words[1]], "components": words[2:] or ["main"],
                                "signed_by": m.group(1) if m else ""})
    return entries


class Apt:
    """apt-get for one Debian architecture, with its own configuration and lists."""

    def __init__(self, arch: str, root: Path | None = None):
        if arch not in DEBIAN_ARCH:
            raise BenchError(f"no Debian architecture is known for {arch!r}")
        self.arch = DEBIAN_ARCH[arch]
        self.root = (root or cache_dir() / "apt") / self.arch
        self.conf = self.root / "apt.conf"
        self.debs = self.root / "debs"
        self.trees = self.root / "root"

    # -- configuration -------------------------------------------------
    def neighbours_listed(self) -> bool:
        """Whether the neighbouring releases are in this configuration (once asked for, they stay)."""
        return (self.root / "neighbours").exists()

    def list_neighbours(self) -> bool:
        """Add the neighbouring releases (pinned low) and update the lists; False when already there."""
        if self.neighbours_listed():
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "neighbours").touch()
        self.ensure_lists()       # the sources changed, so the lists are fetched again
        return True

    def _write_config(self) -> None:
        for sub in ("lists/partial", "archives/partial", "etc/sources.list.d", "etc/preferences.d",
                    "etc/apt.conf.d", "debs", "root"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        status = self.root / "status"
        if not status.exists():
            status.write_text("")
        code = _host_codename()
        sources = host_debian_sources()
        if sources and self.neighbours_listed():
            sources = with_neighbours(sources, code)
        if not sources:
            raise BenchError("no Debian archive is configured in /etc/apt (sources.list or sources.list.d), "
                             "so kernel and perf packages cannot be fetched")
        stanzas = []
        for e in sources:
            s = (f"Types: deb\nURIs: {e['uri']}\nSuites: {' '.join(e['suites'])}\n"
                 f"Components: {' '.join(e['components'])}\nArchitectures: {self.arch}\n")
            if e["signed_by"]:
                s += f"Signed-By: {e['signed_by']}\n"
            stanzas.append(s)
        src = self.root / "etc/sources.list.d/kperfdiff.sources"
        new = "\n".join(stanzas)
        if not src.exists() or src.read_text() != new:
            src.write_text(new)
            (self.root / "lists/.updated").unlink(missing_ok=True)    # the lists no longer match the sources
        pins = "\n".join(f"Package: *\nPin: release n={other}{suffix}\nPin-Priority: {NEIGHBOUR_PIN_PRIORITY}\n"
                         for other in neighbour_releases(code) for suffix in ("", "-updates", "-security"))
        pref = self.root / "etc/preferences.d/kperfdiff-neighbours.pref"
        if not pref.exists() or pref.read_text() != pins:
            pref.write_text(pins)
        r = self.root
        conf = "\n".join([
            f'APT::Architecture "{self.arch}";',
            f'APT::Architectures {{ "{self.arch}"; }};',
            f'Dir::State "{r}";',
            f'Dir::State::Lists "{r}/lists";',
            f'Dir::State::status "{r}/status";',
            f'Dir::Cache "{r}";',
            f'Dir::Cache::archives "{r}/archives";',
            f'Dir::Etc::SourceList "{r}/etc/sources.list";',
            f'Dir::Etc::SourceParts "{r}/etc/sources.list.d";',
            f'Dir::Etc::Preferences "{r}/etc/preferences";',
            f'Dir::Etc::PreferencesParts "{r}/etc/preferences.d";',
            f'Dir::Etc::Parts "{r}/etc/apt.conf.d";',
            'APT::Get::AllowUnauthenticated "false";',
            'Acquire::Languages "none";',
            'Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";',
            'Debug::NoLocking "true";',
            "",
        ])
        if not self.conf.exists() or self.conf.read_text() != conf:
            self.conf.write_text(conf)
        (self.root / "etc/sources.list").touch()

    def _env(self) -> dict:
        env = dict(os.environ)
        env["APT_CONFIG"] = str(self.conf)
        env["DEBIAN_FRONTEND"] = "noninteractive"
        env["LC_ALL"] = "C"
        return env

    @contextmanager
    def _lock(self):
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _run(self, argv: list[str], what: str, timeout: float = 600, cwd: Path | None = None) -> str:
        if shutil.which(argv[0]) is None:
            raise BenchError(f"{argv[0]} is not installed; kperfdiff needs Debian's apt to fetch {what}")
        try:
            r = subprocess.run(argv, capture_output=True, text=True, env=self._env(), timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{what} took longer than {timeout:g} s (is the Debian archive reachable?)") from None
        if r.returncode != 0:
            msg = [ln for ln in r.stderr.splitlines() if ln.startswith("E:")] or r.stderr.strip().splitlines()[-1:]
            raise BenchError(f"{what} failed: {(msg or ['no message'])[0][:300]}")
        return r.stdout

    def ensure_lists(self, max_age: float = LIST_MAX_AGE_S) -> None:
        """apt-get update into the private list directory, unless recent lists exist."""
        with self._lock():
            self._write_config()
            stamp = self.root / "lists/.updated"
            if stamp.exists() and time.time() - stamp.stat().st_mtime < max_age:
                return
            self._run(["apt-get", "update", "-qq"], f"apt-get update for {self.arch}")
            stamp.touch()

    # -- queries ---------------------------------------------------------
    def _ask(self, *argv: str) -> str:
        """The output of an apt-cache query on the current lists; "" when apt-cache fails (unknown name)."""
        self.ensure_lists()
        try:
            return self._run(list(argv), " ".join(argv))
        except BenchError:
            return ""

    def versions(self, package: str) -> list[str]:
        """Available versions of a package (newest first); [] when unknown."""
        vers = []
        for ln in self._ask("apt-cache", "madison", package).splitlines():
            parts = [p.strip() for p in ln.split("|")]
            if len(parts) >= 2 and parts[0] == package and parts[1] not in vers:
                vers.append(parts[1])
        return vers

    def candidate(self, package: str) -> str | None:
        """The version apt would install (the host release's, the neighbours being pinned low); None."""
        m = re.search(r"^\s*Candidate:\s*(\S+)", self._ask("apt-cache", "policy", package), re.M)
        return m.group(1) if m and m.group(1) != "(none)" else None

    def search_names(self, pattern: str) -> list[str]:
        self.ensure_lists()
        out = self._run(["apt-cache", "pkgnames"], "apt-cache pkgnames")
        rx = re.compile(pattern)
        return sorted(n for n in out.split() if rx.fullmatch(n))

    def depends(self, package: str, version: str | None = None) -> list[str]:
        """Direct Depends/Pre-Depends of a package (first alternative of each)."""
        self.ensure_lists()
        spec = f"{package}={version}" if version else package
        out = self._run(["apt-cache", "show", "--no-all-versions", spec], f"apt-cache show {spec}")
        deps: list[str] = []
        for ln in out.splitlines():
            if ln.startswith(("Depends:", "Pre-Depends:")):
                for alt in ln.partition(":")[2].split(","):
                    name = alt.split("|")[0].strip().split()[0] if alt.strip() else ""
                    name = name.split(":")[0]
                    if name and name not in deps:
                        deps.append(name)
            if ln == "" and deps:
                break
        return deps

    # -- fetching --------------------------------------------------------
    def download(self, package: str, version: str | None = None) -> Path:
        """The .deb of package (at version, default the candidate), downloaded once."""
        if version:
            hits = sorted(self.debs.glob(f"{package}_{_deb_version(version)}_*.deb"))
            if hits:
                return hits[0]
        self.ensure_lists()
        if not version:
            version = self.candidate(package)
            if not version:
                raise BenchError(f"the Debian package {package} ({self.arch}) does not exist in the "
                                 f"configured archive")
            hits = sorted(self.debs.glob(f"{package}_{_deb_version(version)}_*.deb"))
            if hits:
                return hits[0]
        with self._lock():
            self.debs.mkdir(parents=True, exist_ok=True)
            self._run(["apt-get", "download", "-qq", f"{package}={version}"],
                      f"apt-get download {package}={version} ({self.arch})", cwd=self.debs)
        hits = sorted(self.debs.glob(f"{package}_{_deb_version(version)}_*.deb"))
        if not hits:
            raise BenchError(f"apt-get download {package}={version} left no .deb in {self.debs}")
        return hits[0]

    def unpack(self, deb: Path) -> Path:
        """dpkg-deb -x the package once; return the tree."""
        out = self.trees / deb.stem
        if (out / ".done").exists():
            return out
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            r = subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], capture_output=True, text=True)
        except FileNotFoundError:
            raise BenchError("dpkg-deb is not installed (Debian package dpkg)") from None
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BenchError(f"unpacking {deb.name} failed: {r.stderr.strip()[:200]}")
        (tmp / ".done").touch()
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
        return out

    def fetch(self, package: str, version: str | None = None) -> Path:
        return self.unpack(self.download(package, version))


def _deb_version(version: str) -> str:
    """apt-get download file names drop the epoch ("1:1.35" -> "1%3a1.35")."""
    return version.replace(":", "%3a")
