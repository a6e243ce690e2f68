"""LAVA job definitions: a template (targets/lava/templates/ or the user's) filled in for one
batch of benchmark invocations.

The batch's job script (the one QEMU guests and SSH boards run,
:func:`kperfdiff.targets.base.job_script`) and its test case names travel as two files LAVA
adds to the ramdisk (overlays: /kpd/job.sh, /kpd/cases; published beside the kernel, so
``kperfdiff lava jobs`` leaves them readable in its artefacts folder). The test action is an
inline Lava-Test definition, the same for every job: write the runner (:func:`runner_script`)
and run it. The runner silences the kernel console, runs /kpd/job.sh, reports every
invocation to LAVA as a test case (``lava-test-case`` with the median of the first copy's
intervals as its measurement, in the benchmark's unit: what LAVA's own pages show) and sends
the whole results folder back as a frame on the console (:mod:`kperfdiff.targets.guest.frame`),
which kperfdiff reads from the job's log. (LAVA keeps the inline definition with each result
and complains above 4 KB, so the per-job part stays out of it.) Placeholders: ``@NAME@`` in any string; a string that is one placeholder becomes the
value itself (a number, list or table), and a mapping key whose value becomes None is left
out.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kperfdiff import __version__
from kperfdiff.core.errors import InputError
from kperfdiff.core.files import load_yaml, read_yaml
from kperfdiff.targets.guest.frame import FRAME_SH
from kperfdiff.targets.lava.spec import LavaSpec

TEMPLATES = "templates"
PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")
TEST_NAME = "kperfdiff"
CASE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
JOB_FILE = "/kpd/job.sh"
CASES_FILE = "/kpd/cases"
RUNNER_FILE = "/tmp/kpd-lava.sh"
OUT_DIR = "/kpd/out"
BIN_DIR = "/kpd/bin"
CONSOLES = {"arm64": "ttyAMA0", "x86_64": "ttyS0"}
QEMU_CPUS = {"arm64": "neoverse-n1", "x86_64": "max"}
LAVA_ARCH = {"arm64": "arm64", "x86_64": "amd64"}
ARCH_CMDLINE = {"arm64": [], "x86_64": ["clocksource=tsc", "tsc=reliable"]}


class TemplateError(InputError):
    """A LAVA job template that cannot be used."""


@dataclass
class Published:
    """Where the devices fetch a job's files (URLs), with their SHA-256 sums."""

    kernel_url: str
    kernel_sha256: str
    ramdisk_url: str
    ramdisk_sha256: str | None
    ramdisk_compression: str | None
    job_url: str = ""                    # the job script (/kpd/job.sh)
    job_sha256: str = ""
    cases_url: str = ""                  # the test case names (/kpd/cases)
    cases_sha256: str = ""
    overlay_url: str | None = None       # the workers and perf as a tar, when booting the user's rootfs
    overlay_sha256: str | None = None


def template_text(spec: LavaSpec) -> tuple[str, object]:
    """(name, parsed template) for a target: the user's template= or the shipped one of its boot method."""
    if spec.template:
        path = Path(spec.template).expanduser()
        return str(path), read_yaml(path, "LAVA job template", TemplateError)
    name = f"{spec.boot}.yaml"
    text = resources.files(__package__).joinpath(TEMPLATES, name).read_text()
    return f"kperfdiff's {name}", load_yaml(text, f"the shipped LAVA job template {name}", TemplateError)


def shipped_template(boot: str) -> str:
    """The text of a shipped template (to copy and change)."""
    return resources.files(__package__).joinpath(TEMPLATES, f"{boot}.yaml").read_text()


def fill(node, values: dict, where: str):
    """The template with every @NAME@ replaced (see the module docstring); an unknown name is an error."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            filled = fill(v, values, where)
            if filled is not None or v is None:
                out[k] = filled
        return out
    if isinstance(node, list):
        return [fill(v, values, where) for v in node]
    if not isinstance(node, str):
        return node
    whole = PLACEHOLDER.fullmatch(node)
    if whole:
        return _value(whole.group(1), values, where)
    return PLACEHOLDER.sub(lambda m: _text(_value(m.group(1), values, where)), node)


def _text(v) -> str:
    return "" if v is None else str(v)


def _value(name: str, values: dict, where: str):
    if name not in values:
        raise TemplateError(f"the LAVA job template {where} uses @{name}@, which kperfdiff does not fill in "
                            f"(known: {', '.join('@' + k + '@' for k in sorted(values))})")
    return values[name]


def case_name(invocation_label: str) -> str:
    return CASE_NAME.sub("_", invocation_label).strip("_")[:80] or "benchmark"


def cases_text(names: list[str]) -> str:
    """The test case name of each invocation (i0, i1, ...), one a line: /kpd/cases on the device."""
    return "".join(case_name(n) + "\n" for n in names)


def runner_script() -> str:
    """The LAVA side of every job (the same for all): run /kpd/job.sh, report each invocation's folder
    (i0, i1, ...) as the test case named on that line of /kpd/cases, send the results folder back."""
    lines = ["#!/bin/sh",
             "# kperfdiff on a LAVA device: run the benchmark job (/kpd/job.sh), report each benchmark to LAVA",
             "# as a test case (the median of its first copy), send the results folder back on the console",
             FRAME_SH.rstrip("\n"),
             "# one test case: pass with its median and unit, skip, or fail",
             "kpd_case() {",
             "  set -- \"$1\" \"$2\" $(awk '$1 == \"unit\" { u = $2 } $1 == \"skip\" { s = 1 } "
             "$1 == \"error\" { e = 1 } $1 == \"interval\" { v[n++] = $2 + 0 } "
             "END { if (e || (!n && !s)) { print \"fail\"; exit } if (s) { print \"skip\"; exit } "
             "for (i = 1; i < n; i++) { x = v[i]; j = i - 1; while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j-- } "
             "v[j + 1] = x } m = (n % 2) ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2; "
             "printf \"pass %.6g %s\\n\", m, u }' \"$1/c0.out\" 2>/dev/null)",
             "  r=${3:-fail}",
             "  grep -q '^copy 0 exit 0' \"$1/status\" 2>/dev/null || r=fail",
             "  if [ \"$r\" = pass ] && [ -n \"$4\" ]; then",
             "    lava-test-case \"$2\" --result pass --measurement \"$4\" --units \"$5\"",
             "  else",
             "    lava-test-case \"$2\" --result \"$r\"",
             "  fi",
             "}",
             "dmesg -n 1 2>/dev/null",
             f"mkdir -p {OUT_DIR}",
             "echo \"KPD-BEGIN $(cut -d' ' -f1 /proc/uptime)\"",
             f"sh {JOB_FILE}",
             "rc=$?",
             "echo \"KPD-JOB-END $rc $(cut -d' ' -f1 /proc/uptime)\"",
             "if command -v lava-test-case >/dev/null 2>&1; then",
             "  i=0",
             f"  while read -r name; do kpd_case {OUT_DIR}/i$i \"$name\"; i=$((i + 1)); done < {CASES_FILE}",
             "fi",
             f"dmesg > {OUT_DIR}/dmesg 2>/dev/null",
             f"kpd_frame {OUT_DIR}",
             "echo \"KPD-END $rc\"",
             "exit 0"]
    return "\n".join(lines) + "\n"


def _heredoc(path: str, text: str, marker: str) -> str:
    if any(line == marker for line in text.splitlines()):
        raise InputError(f"a generated LAVA script holds its own end marker {marker}")
    return f"cat > {path} <<'{marker}'\n{text.rstrip()}\n{marker}\n"


def test_definitions(description: str) -> list[dict]:
    """The inline Lava-Test definition that runs a job (see the module docstring): small and the same
    for every job, since LAVA keeps it with each result and refuses more than 4 KB there."""
    steps = [_heredoc(RUNNER_FILE, runner_script(), "KPD_LAVA_RUNNER"), f"sh {RUNNER_FILE}"]
    return [{"from": "inline", "name": TEST_NAME, "path": f"inline/{TEST_NAME}.yaml",
             "repository": {"metadata": {"format": "Lava-Test Test Definition 1.0", "name": TEST_NAME,
                                         "description": description},
                            "run": {"steps": steps}}}]


def kernel_cmdline(spec: LavaSpec, extra: str = "") -> str:
    """The whole command line of a kernel QEMU boots (the qemu template's -append)."""
    words = [f"console={CONSOLES[spec.arch]},115200", "rdinit=/init", *ARCH_CMDLINE[spec.arch]]
    words += spec.append.split() + extra.split()
    return " ".join(words)


def values(spec: LavaSpec, pub: Published, *, job_name: str, tests: list[dict], metadata: dict,
           test_timeout: float, boot_timeout: float, deploy_timeout: float, cmdline_extra: str = "") -> dict:
    """Every placeholder's value for one job."""
    job_timeout = int(deploy_timeout + boot_timeout + test_timeout + 300)
    overlays: dict = {"lava": True}
    if pub.overlay_url:
        overlays["kpd"] = {"url": pub.overlay_url, "format": "tar", "path": "/", "sha256sum": pub.overlay_sha256}
    overlays["job"] = {"url": pub.job_url, "format": "file", "path": JOB_FILE, "sha256sum": pub.job_sha256}
    overlays["cases"] = {"url": pub.cases_url, "format": "file", "path": CASES_FILE, "sha256sum": pub.cases_sha256}
    qemu_options = [f"-smp {spec.cpus}"]
    if spec.arch == "x86_64" and not spec.kvm:
        qemu_options.append("-cpu max")      # the device type sets -cpu only with KVM on x86
    mem = re.fullmatch(r"(\d+)([MG]?)", spec.mem)
    return {
        "JOB_NAME": job_name[:200], "DEVICE_TYPE": spec.device_type, "PRIORITY": spec.priority,
        "VISIBILITY": spec.visibility, "TAGS": list(spec.tags) or None, "METADATA": metadata,
        "JOB_TIMEOUT": job_timeout, "QUEUE_TIMEOUT": int(spec.queue_timeout),
        "DEPLOY_TIMEOUT": int(deploy_timeout), "BOOT_TIMEOUT": int(boot_timeout), "TEST_TIMEOUT": int(test_timeout),
        "LAVA_ARCH": LAVA_ARCH[spec.arch], "MEMORY_MB": int(mem.group(1)) * (1024 if mem.group(2) == "G" else 1),
        "QEMU_CPU": QEMU_CPUS[spec.arch], "NO_KVM": not spec.kvm, "QEMU_OPTIONS": qemu_options,
        "CMDLINE": kernel_cmdline(spec, cmdline_extra),
        "APPEND": " ".join(w for w in (spec.append, cmdline_extra) if w),
        "KERNEL_URL": pub.kernel_url, "KERNEL_SHA256": pub.kernel_sha256,
        "RAMDISK_URL": pub.ramdisk_url, "RAMDISK_SHA256": pub.ramdisk_sha256,
        "RAMDISK_COMPRESSION": pub.ramdisk_compression, "RAMDISK_OVERLAYS": overlays,
        "DTB": {"url": spec.dtb} if spec.dtb else None,
        "PROMPT": spec.prompt, "TEST_DEFINITIONS": tests,
        "KPERFDIFF_VERSION": __version__,
    }


def job_timeout_s(job: dict) -> float:
    """The job's own timeout in seconds (0 when it has none that kperfdiff can read)."""
    t = job.get("timeouts", {}).get("job") if isinstance(job.get("timeouts"), dict) else None
    if not isinstance(t, dict):
        return 0.0
    units = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}
    return float(sum(units[k] * v for k, v in t.items() if k in units and isinstance(v, (int, float))))


def definition(spec: LavaSpec, vals: dict) -> dict:
    """The filled-in job (a dict) for one job's placeholder values."""
    where, template = template_text(spec)
    if not isinstance(template, dict) or not isinstance(template.get("actions"), list):
        raise TemplateError(f"the LAVA job template {where} is not a job definition (a table with actions)")
    job = fill(template, vals, where)
    if "@TEST_DEFINITIONS@" not in json.dumps(template):
        raise TemplateError(f"the LAVA job template {where} has no @TEST_DEFINITIONS@: nothing would run "
                            f"the benchmarks")
    return job


def _str(dumper, s: str):
    style = "|" if "\n" in s and not any(line != line.rstrip() for line in s.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


def to_yaml(job: dict, header: str = "") -> str:
    """A job definition as the YAML LAVA reads and people review (scripts as literal blocks)."""
    import yaml     # heavy, and only writing a job needs it

    class Dumper(yaml.SafeDumper):
        pass
    Dumper.add_representer(str, _str)
    body = yaml.dump(job, Dumper=Dumper, sort_keys=False, width=110, allow_unicode=True, default_flow_style=False)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + body


# -- LAVA's own schema ----------------------------------------------------------------------------

VALIDATOR = r"""
import sys, yaml
from voluptuous import Invalid
from lava_common.schemas import validate
from lava_common.version import __version__
bad = 0
for path in sys.argv[1:]:
    try:
        validate(yaml.safe_load(open(path, encoding="utf-8")), strict=True)
        print("ok", path)
    except Invalid as e:
        bad += 1
        print("invalid", path, str(e).replace("\n", " "))
print("lava-common", __version__)
sys.exit(1 if bad else 0)
"""


def lava_python() -> str | None:
    """A Python that can import LAVA's lava_common (Debian's python3 with lava-common), or None."""
    for exe in ("/usr/bin/python3", shutil.which("python3")):
        if exe and Path(exe).exists():
            r = subprocess.run([exe, "-c", "import lava_common.schemas"], capture_output=True, timeout=60)
            if r.returncode == 0:
                return exe
    return None


def validate_files(paths: list[Path]) -> tuple[str, dict[Path, str]]:
    """Check job files with lava_common's schema (strict, as the server does on submission):
    (lava-common version, path -> problem for each invalid one)."""
    exe = lava_python()
    if exe is None:
        raise InputError("LAVA's schema is not installed here: validating needs Debian's lava-common "
                         "(apt-get install lava-common)")
    r = subprocess.run([exe, "-c", VALIDATOR, *map(str, paths)], capture_output=True, text=True, timeout=600)
    bad: dict[Path, str] = {}
    version = ""
    for line in r.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word == "invalid":
            path, _, why = rest.partition(" ")
            bad[Path(path)] = why
        elif word == "lava-common":
            version = rest
    if r.returncode not in (0, 1) or not version:
        raise InputError(f"LAVA's schema validator failed: {(r.stderr.strip().splitlines() or ['no message'])[-1]}")
    return version, bad
