"""`kperfdiff diff` prints and writes the same bytes as the code the goldens were taken from: every
output format, --children, scopes, compute modes, inference, several profiles a side, --folded and
--flamegraph files, on the perf.data and text fixtures. The goldens (tests/data/diff/golden.json,
one SHA-256 per case) guard speed work on the diff path against any change of output; when the
output is meant to change, rewrite them with

    PYTHONPATH=src python tests/analysis/test_diff_golden.py --write

and say why in the commit. Runs in-process (about 5 s for all cases)."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import DATA  # noqa: E402

GOLDEN = DATA / "diff" / "golden.json"
PD = DATA / "perfdata"
XA = PD / "xarch"
TEXT = DATA / "text"

# Sides of a diff (perf.data read with the kallsyms beside them, kernel scope only: user symbols
# depend on the binaries of the machine), then the option sets each pair is run with.
PAIRS = {
    "xarch-fork": (XA / "x86_64" / "proc.fork.perf.data.gz", XA / "arm64" / "proc.fork.perf.data.gz"),
    "x86-fault-shell": (XA / "x86_64" / "fault.anon.4k.perf.data.gz", XA / "x86_64" / "proc.shell.perf.data.gz"),
    "plain-group": (PD / "plain.perf.data", PD / "group.perf.data"),
    "arm64": (PD / "arm64" / "proc.fork.perf.data", PD / "arm64" / "fault.anon.4k.perf.data"),
    "reps": (",".join(str(XA / "x86_64" / f"{n}.perf.data.gz") for n in ("proc.fork", "proc.exec", "proc.shell")),
             ",".join(str(XA / "arm64" / f"{n}.perf.data.gz") for n in ("proc.fork", "proc.exec", "proc.shell"))),
    "folded": (DATA / "diff" / "x86_64.folded", DATA / "diff" / "arm64.folded"),
    "script": (TEXT / "mixed.script", TEXT / "forkexec.script"),
    "report": (TEXT / "mixed.children.report", TEXT / "forkexec.children.report"),
}
PERFDATA_OPTIONS = [
    (), ("--children",), ("--format", "json"), ("--children", "--format", "json", "--top", "0"),
    ("--format", "csv", "--top", "0"), ("--children", "--format", "markdown"),
    ("--children", "--compute", "ratio"), ("--compute", "wdiff:1,2", "--format", "json"),
    ("--children", "--no-equivalence", "--no-normalise", "--format", "json", "--top", "0"),
    ("--children", "--infer", "--format", "json"), ("--children", "--accept-inferred", "--top", "0"),
    ("--children", "--no-infer"),
    ("--children", "--folded", "{out}/f"), ("--children", "--flamegraph", "{out}/g.svg"),
    ("--folded", "{out}/f", "--unit", "ns"),
]
TEXT_OPTIONS = PERFDATA_OPTIONS + [
    ("--scope", "all", "--children", "--format", "json", "--top", "0"), ("--scope", "user", "--top", "0"),
    ("--scope", "all", "--folded", "{out}/f", "--flamegraph", "{out}/g.svg"),
]


def cases() -> list[tuple[str, list[str]]]:
    out = []
    for pair, (a, b) in PAIRS.items():
        text = pair in ("folded", "script", "report")
        for opts in TEXT_OPTIONS if text else PERFDATA_OPTIONS:
            if pair == "report" and "--children" not in opts or "--unit" in opts and text:
                continue    # a perf report's rows come with its Children column; text has no ns
            out.append((f"{pair} {' '.join(opts)}".strip(), [str(a), str(b), *opts]))
    return out


def run(args: list[str], out: Path) -> str:
    """One diff in this process: its stdout, stderr and written files, with the paths of this
    checkout, of ``out`` and of decompressed inputs replaced by placeholders."""
    from kperfdiff.commands import main
    args = [a.replace("{out}", str(out)) for a in args]
    # recordings made in guests find their user binaries under an empty root: a file of this machine
    # that has a guest's path (its /bin/busybox, where a package has put one here) is not theirs
    guest = []
    if any(f"{os.sep}xarch{os.sep}" in a or f"{os.sep}arm64{os.sep}" in a for a in args):
        guest = ["--symfs", str(out.parent / "empty-symfs")]
        (out.parent / "empty-symfs").mkdir(exist_ok=True)
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = main(["diff", *args, "--jobs", "2", *guest])
    parts = [f"exit {status}", stdout.getvalue(), stderr.getvalue()]
    for f in sorted(out.iterdir()):
        parts.append(f"== {f.name}\n{f.read_text()}")
        f.unlink()
    text = "\n".join(parts).replace(str(out), "OUT").replace(str(DATA), "DATA")
    return re.sub(r"\S*kperfdiff-input-\w+", "INPUT", text)   # where a .gz input was decompressed


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


@pytest.fixture(autouse=True)
def no_home(tmp_path, monkeypatch):
    """No build-id cache of this machine: the fixtures' kallsyms lie beside them."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PERF_BUILDID_DIR", raising=False)


@pytest.mark.parametrize("name,args", cases(), ids=[c[0] for c in cases()])
def test_diff_output_unchanged(name, args, golden, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    text = run(args, out)
    assert name in golden, f"no golden for {name!r}; write them (see the module text)"
    assert digest(text) == golden[name], f"the output of diff {name} changed:\n{text[:3000]}"


def write() -> None:
    import tempfile
    os.environ["HOME"] = tempfile.mkdtemp()
    os.environ.pop("PERF_BUILDID_DIR", None)
    found = {}
    for name, args in cases():
        with tempfile.TemporaryDirectory() as d:
            found[name] = digest(run(args, Path(d)))
    GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(found)} goldens to {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: {sys.argv[0]} --write")
    write()
