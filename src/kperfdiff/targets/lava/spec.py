"""The LAVA target specification.

``lava://HOST[:PORT][/PREFIX]/DEVICE_TYPE[,option...]`` names a LAVA server (its REST API
at ``https://HOST[:PORT][/PREFIX]/api/v0.2/``) and a device type of that server; LAVA picks
the devices. Options (comma-separated, as for qemu: targets):

``arch=arm64|x86_64``
    the devices' architecture; optional for the ``qemu`` device type (this machine's then).
``kernel=VERSION|PATH``, ``modules=DIR``, ``flavour=cloud|generic``, ``append=ARGS``
    the kernel each job deploys, as for qemu: (a Debian kernel, or an image of the user's).
``mem=SIZE``, ``cpus=N``, ``kvm=on|off``
    the ``qemu`` device type's guest (default 2G, 2, off: TCG).
``rootfs=URL``
    boot the user's ramdisk (cpio.newc, gz/xz/zst by its name) instead of kperfdiff's; the
    workers and perf are added to it as an overlay under /kpd.
``prompt=TEXT``
    the shell prompt LAVA waits for (kperfdiff's ramdisk: ``kpd-lava#``; default with
    ``rootfs=``: ``/ #``).
``dtb=URL``
    a device tree for a U-Boot board.
``boot=qemu|u-boot``, ``template=PATH``
    the job template: the shipped one for the boot method (qemu for the ``qemu`` device type,
    u-boot otherwise) or the user's own (see targets/lava/templates/).
``tags=TAG+TAG``, ``priority=low|medium|high|0-100``, ``visibility=public|personal``
    passed to LAVA as they are.
``jobs=N``
    at most N jobs of this server in flight at once (default 4).
``timeout=S``, ``queue_timeout=S``
    the test action's limit (default: from the benchmarks' own timeouts) and how long a job
    may wait in the queue before it is canceled and its cells fail (default 6 h).
``poll=S``
    seconds between two looks at the jobs in flight (default 10; 0.1 to 3600).
``token_env=NAME``, ``identity=NAME``
    where the token is: an environment variable (default KPERFDIFF_LAVA_TOKEN), a lavacli
    identity (see targets/lava/api.py). The token itself is never part of a specification.
``http``
    plain HTTP to the server (default HTTPS).
``artefacts=DIR``, ``artefacts_url=URL``, ``serve=[HOST][:PORT]``
    how the devices get the kernel and ramdisk: copied into DIR, which the lab sees at URL
    (default ``file://DIR``: a folder the dispatchers share); or, by default, served by
    kperfdiff itself over HTTP for the run, at HOST (default: this machine's address
    towards the server) and PORT (default: any free one).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from kperfdiff.core.arch import normalise_arch
from kperfdiff.bench.build import host_arch
from kperfdiff.core.errors import UsageError

DEFAULT_JOBS = 4
DEFAULT_QUEUE_TIMEOUT_S = 6 * 3600
DEFAULT_POLL_S = 10.0               # a look every 10 s: cheap for the server, small beside a job's minutes
DEFAULT_PROMPT = "kpd-lava# "
ROOTFS_PROMPT = "/ #"
ARCHES = ("arm64", "x86_64")
BOOT_METHODS = ("qemu", "u-boot")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*)(?::(\d{1,5}))?")
VALUED = {"arch", "kernel", "modules", "flavour", "append", "mem", "cpus", "kvm", "rootfs", "prompt", "dtb",
          "boot", "template", "tags", "priority", "visibility", "jobs", "timeout", "queue_timeout", "poll",
          "token_env", "identity", "artefacts", "artefacts_url", "serve"}
FLAGS = {"http"}


@dataclass
class LavaSpec:
    server: str                        # HOST[:PORT]
    prefix: str                        # URL path before /api/ ("" or "/lava")
    device_type: str
    arch: str
    kernel: str | None = None
    modules: str | None = None
    flavour: str = "cloud"
    append: str = ""
    mem: str = "2G"
    cpus: int = 2
    kvm: bool = False
    rootfs: str | None = None
    prompt: str = DEFAULT_PROMPT
    dtb: str | None = None
    boot: str = "qemu"
    template: str | None = None
    tags: list[str] = field(default_factory=list)
    priority: str | int = "medium"
    visibility: str = "public"
    jobs: int = DEFAULT_JOBS
    timeout: float | None = None
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT_S
    poll: float = DEFAULT_POLL_S
    token_env: str = "KPERFDIFF_LAVA_TOKEN"
    identity: str | None = None
    http: bool = False
    artefacts: str | None = None
    artefacts_url: str | None = None
    serve: str | None = None
    text: str = ""                     # the specification as given

    @property
    def url(self) -> str:
        return f"{'http' if self.http else 'https'}://{self.server}{self.prefix}"

    @property
    def emulated(self) -> bool:
        return self.device_type == "qemu"


def parse_spec(spec: str) -> LavaSpec:
    """Check a ``lava://`` specification (UsageError, one sentence, when wrong)."""
    if not spec.startswith("lava://"):
        raise UsageError(f"the target {spec!r} is not a lava:// address")
    body, *opts = spec[len("lava://"):].split(",")
    host, _, path = body.partition("/")
    m = _HOST.fullmatch(host)
    parts = [p for p in path.split("/") if p]
    if not m or not parts or (m.group(2) and not 0 < int(m.group(2)) < 65536):
        raise UsageError(f"the target {spec!r} is not of the form lava://HOST[:PORT]/DEVICE_TYPE")
    if not all(_NAME.fullmatch(p) for p in parts):
        raise UsageError(f"the device type or path of {spec!r} has characters LAVA does not use in names")
    s = LavaSpec(server=host, prefix="".join("/" + p for p in parts[:-1]), device_type=parts[-1], arch="",
                 text=spec)
    given = set()
    for o in opts:
        k, eq, v = o.partition("=")
        k = k.strip()
        if k in FLAGS and not eq:
            setattr(s, k, True)
        elif k in VALUED and eq and v:
            _set_option(s, spec, k, v)
        else:
            raise UsageError(f"the option {o!r} of target {spec!r} is not understood (known: "
                             f"{', '.join(sorted(k + '=' for k in VALUED))}, http)")
        if k in given:
            raise UsageError(f"the option {k} is given twice in {spec!r}")
        given.add(k)
    if not s.arch:
        if not s.emulated:
            raise UsageError(f"the target {spec!r} needs arch=arm64 or arch=x86_64 (the architecture of the "
                             f"{s.device_type} devices)")
        s.arch = normalise_arch(host_arch())
    if "boot" not in given:
        s.boot = "qemu" if s.emulated else "u-boot"
    if s.rootfs and "prompt" not in given:
        s.prompt = ROOTFS_PROMPT
    if s.artefacts_url and not s.artefacts:
        raise UsageError(f"artefacts_url= in {spec!r} needs artefacts=DIR (the folder published at that URL)")
    if s.serve and s.artefacts:
        raise UsageError(f"the target {spec!r} gives both serve= and artefacts=; choose one way to publish "
                         f"the kernel and ramdisk")
    return s


def _set_option(s: LavaSpec, spec: str, k: str, v: str) -> None:
    if k == "arch":
        a = normalise_arch(v)
        if a not in ARCHES:
            raise UsageError(f"arch={v} in {spec!r}: use arm64 or x86_64")
        s.arch = a
    elif k in ("jobs", "cpus"):
        if not v.isdigit() or not 1 <= int(v) <= 256:
            raise UsageError(f"{k}={v} in {spec!r} is not a whole number from 1 to 256")
        setattr(s, k, int(v))
    elif k in ("timeout", "queue_timeout"):
        setattr(s, k, _seconds(spec, k, v, 1, 7 * 86400, "1 to a week"))
    elif k == "poll":
        s.poll = _seconds(spec, k, v, 0.1, 3600, "0.1 to 3600")
    elif k == "mem":
        if not re.fullmatch(r"\d+[MGmg]?", v):
            raise UsageError(f"mem={v} in {spec!r} is not a size such as 512M or 4G")
        s.mem = v.upper()
    elif k == "kvm":
        if v not in ("on", "off"):
            raise UsageError(f"kvm={v} in {spec!r}: use on or off")
        s.kvm = v == "on"
    elif k == "flavour":
        if v not in ("cloud", "generic"):
            raise UsageError(f"flavour={v} in {spec!r}: use cloud or generic")
        s.flavour = v
    elif k == "boot":
        if v not in BOOT_METHODS:
            raise UsageError(f"boot={v} in {spec!r}: use {' or '.join(BOOT_METHODS)} (or template=PATH)")
        s.boot = v
    elif k == "tags":
        s.tags = [t for t in v.split("+") if t]
        if not all(_NAME.fullmatch(t) for t in s.tags):
            raise UsageError(f"tags={v} in {spec!r}: tags are names joined with +")
    elif k == "priority":
        if v not in ("low", "medium", "high") and not (v.isdigit() and int(v) <= 100):
            raise UsageError(f"priority={v} in {spec!r}: use low, medium, high or 0 to 100")
        s.priority = int(v) if v.isdigit() else v
    elif k == "visibility":
        if v not in ("public", "personal"):
            raise UsageError(f"visibility={v} in {spec!r}: use public or personal")
        s.visibility = v
    elif k in ("token_env", "identity"):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", v):
            raise UsageError(f"{k}={v} in {spec!r} is not a name")
        setattr(s, k, v)
    else:       # kernel, modules, append, rootfs, prompt, dtb, template, artefacts, artefacts_url, serve
        if k == "append":
            check_cmdline(v, f"append={v} in {spec!r}")
        setattr(s, k, v)


def check_cmdline(words: str, where: str) -> None:
    """Refuse kernel arguments that keep the kernel's ``Linux version`` line off the console (``quiet``,
    ``loglevel`` 5 or less: the line is a KERN_NOTICE): LAVA's boot action waits for that line, and a job
    that never prints it hangs until the boot timeout (seen here: 15 minutes, then Incomplete)."""
    for w in words.split():
        level = w.partition("=")[2] if w.startswith("loglevel=") else None
        if w == "quiet" or (level is not None and level.isdigit() and int(level) <= 5):
            raise UsageError(f"{where}: {w} keeps the kernel's 'Linux version' line off the console, and LAVA's "
                             f"boot action waits for that line until its timeout; leave {w} out of a LAVA job's "
                             f"command line")


def _seconds(spec: str, k: str, v: str, lo: float, hi: float, span: str) -> float:
    """The value of a seconds option, from ``lo`` to ``hi`` (``span`` says so in the error)."""
    try:
        t = float(v)
    except ValueError:
        t = math.nan
    if not lo <= t <= hi:
        raise UsageError(f"{k}={v} in {spec!r} is not a number of seconds from {span}")
    return t
