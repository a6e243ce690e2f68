"""Sensitivity: how small a slow-down does one comparison see on this machine, how often does it see
one that is not there, and how long does it measure?

Each trial is one experiment file of two variants of `select.file.100`: `base` at n = 100 and `test`
at n = N, where N makes `test` slower by the effect according to a calibration measured in the same
session (validation/harness.py: the benchmark at n = 100, 200 and 300, ``--calibrate`` interleaved
rounds, a least-squares line time = a + b*n). A null trial runs both variants at n = 100. Every
trial runs the real command line, `kperfdiff run FILE` (``--reps`` repetitions per variant), then
`kperfdiff compare --experiment NAME --format json`, into a temporary store (or ``--store-dir``).

Two versions of kperfdiff are compared: "after", this checkout's (the kperfdiff beside the Python
that runs this script, or ``--after CMD``), and "before", ``--before-rev REV`` checked out in a
temporary git worktree and run as `PYTHONPATH=WORKTREE/src PYTHON -m kperfdiff` with this
checkout's native module (or ``--before CMD``); each has its own store. The trials of all effects
and the null trials are run in turn (one of each, then the next), so that a change in the machine's
load falls on every effect alike, and each trial is run by both versions, their order alternating.

From each trial's cell it reads the change (%, positive = better: the injected slow-down must come
out negative), its interval, whether it is significant, and where the version's JSON has them its
`verdict` (different / same / unknown) and `detectable` (the smallest change, in %, the cell could
have seen at 80% power); without a verdict, a cell is "different" when significant, else "no
change". It prints a line per trial, then a row per version and effect: the detection rate
(significant with the right sign), false positives on the null trials (significant at all),
significant calls of the wrong sign, same/unknown verdicts, the median detectable change and the
median measuring time (wall seconds of `kperfdiff run`); ``--format json`` prints all of it as JSON.

    .venv/bin/python validation/sensitivity.py                   # 2, 5, 10% and null, 10 trials each
    .venv/bin/python validation/sensitivity.py --effects 5 --trials 3 --versions after
    .venv/bin/python validation/sensitivity.py --quick
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import BASE, BENCH, PARAM, HarnessError, Line, calibrate, effects_arg, kperfdiff, pct, table

ROOT = Path(__file__).resolve().parents[1]
# main's HEAD when this harness was written (issue 40): the version the verdicts are measured against
BEFORE_REV = "a807075cfc126fc55a871baaea0dd0eb9a12e591"
VERSIONS = ("before", "after")
QUICK_RUN = "intervals = 5\nmin_batch_ms = 2\n"           # tiny intervals, for --quick
QUICK_BENCH = ("--intervals", "5", "--min-batch-ms", "2")
HEAD = ["version", "effect", "expected", "trials", "detected", "false positives", "wrong sign", "same", "unknown",
        "change median [min, max]", "detectable median", "run s median"]


@dataclass
class Version:
    """One kperfdiff to measure with: its command prefix, environment and store."""
    name: str
    kpd: list[str]
    store: Path
    env: dict | None = None
    pythonpath: str | None = None

    def command(self) -> str:
        return (f"PYTHONPATH={self.pythonpath} " if self.pythonpath else "") + shlex.join(self.kpd)

    def kperfdiff(self, *args: str) -> subprocess.CompletedProcess:
        return kperfdiff(self.kpd, self.store, *args, env=self.env)


@dataclass
class Group:
    """An effect (None: null trials) and the parameter value that makes it."""
    name: str
    effect: float | None
    value: int
    trials: int
    expected: float | None = None           # the change the calibration predicts, in % (negative: slower)


def bench_arg(text: str) -> tuple[str, str, int]:
    m = re.fullmatch(r"([\w.-]+):(\w+)=(\d+)", text)
    if not m or int(m.group(3)) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give BENCH:PARAM=BASE, a benchmark, the parameter its time is "
                                         f"linear in and its base value ({BENCH}:{PARAM}={BASE})")
    return m.group(1), m.group(2), int(m.group(3))


def versions_arg(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out or len(set(out)) != len(out) or any(x not in VERSIONS for x in out):
        raise argparse.ArgumentTypeError(f"{text!r}: give before, after or both, comma-separated")
    return out


def checkout(rev: str, into: Path) -> tuple[Path, str]:
    """``rev`` of this repository in a new git worktree at ``into``, with this checkout's native module
    linked into its package (it is built, not tracked): the ``src`` folder to run it from, and the commit."""
    p = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(into), rev],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if p.returncode:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        raise HarnessError(f"--before-rev {rev}: cannot check it out of {ROOT} ({why})")
    try:
        spec = importlib.util.find_spec("kperfdiff.native")
    except (ImportError, ValueError):
        spec = None
    package = into / "src" / "kperfdiff"
    if spec and spec.origin and package.is_dir() and not (package / Path(spec.origin).name).exists():
        (package / Path(spec.origin).name).symlink_to(spec.origin)
    commit = subprocess.run(["git", "-C", str(into), "rev-parse", "HEAD"], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL).stdout.strip()
    return into / "src", commit


def remove_checkout(into: Path) -> None:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(into)], capture_output=True,
                   stdin=subprocess.DEVNULL)


def experiment_file(path: Path, name: str, bench: str, param: str, base: int, value: int, reps: int,
                    quick: bool, detect: float | None = None, budget: float = 120) -> Path:
    """The trial's experiment file; with ``detect``, its repetitions go on until the change could detect
    that percent or ``budget`` seconds of measuring are spent (the version must know `detect`)."""
    path.write_text(f'name = "{name}"\nbenchmarks = ["{bench}"]\nreps = {reps}\nbaseline = "base"\n'
                    + (QUICK_RUN if quick else "")
                    + (f"detect = {detect:g}\nmax_time = {budget:g}\n" if detect else "")
                    + "".join(f'\n[[variant]]\nlabel = "{label}"\nparams = {{ "{bench}:{param}" = "{v}" }}\n'
                              for label, v in (("base", base), ("test", value))))
    return path


def number(cell: dict, key: str) -> float | None:
    x = cell.get(key)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def read_cell(doc: dict, bench: str) -> dict:
    """The figures of ``test`` against ``base`` in `compare --format json`'s output."""
    cells = [c for b in doc.get("comparisons", []) if b.get("variant") == "test" and b.get("reference") == "base"
             for c in b.get("cells", []) if c.get("key") == bench]
    if not cells:
        raise HarnessError(f"kperfdiff compare gave no cell of {bench} for test against base")
    c = cells[0]
    significant = bool(c.get("significant"))
    return {"change": number(c, "change"), "low": number(c, "low"), "high": number(c, "high"),
            "significant": significant, "has_verdict": "verdict" in c,
            "verdict": c.get("verdict") or ("different" if significant else "no change"),
            "detectable": number(c, "detectable"), "disturbed": bool(c.get("disturbed"))}


def trial(v: Version, path: Path, name: str, bench: str) -> dict:
    """Run one experiment file with version ``v`` and read its comparison."""
    t0 = time.monotonic()
    v.kperfdiff("run", str(path), "--no-progress")
    seconds = time.monotonic() - t0
    out = v.kperfdiff("compare", "--experiment", name, "--format", "json").stdout
    try:
        doc = json.loads(out)
    except ValueError:
        raise HarnessError(f"kperfdiff compare --experiment {name} --format json ({v.name}) printed no JSON")
    return {"seconds": seconds, **read_cell(doc, bench)}


def figures(r: dict) -> str:
    if r["change"] is None:
        return "no change computed"
    return f"{r['change']:+.1f}%" + (f" [{r['low']:+.1f}, {r['high']:+.1f}]" if r["low"] is not None else
                                     " [no interval]")


def summary(version: str, g: Group, rows: list[dict]) -> dict:
    """Counts and medians of one version's trials of one group."""
    sig = [r for r in rows if r["significant"]]
    verdicts = [r["verdict"] for r in rows] if rows and all(r["has_verdict"] for r in rows) else None
    changes = [r["change"] for r in rows if r["change"] is not None]
    detectable = [r["detectable"] for r in rows if r["detectable"] is not None]
    effect = g.effect is not None
    return {"version": version, "group": g.name, "expected_pct": g.expected, "trials": len(rows),
            "detected": sum(1 for r in sig if (r["change"] or 0) < 0) if effect else None,
            "false_positives": None if effect else len(sig),
            "wrong_sign": sum(1 for r in sig if (r["change"] or 0) > 0) if effect else None,
            "same": verdicts.count("same") if verdicts is not None else None,
            "unknown": verdicts.count("unknown") if verdicts is not None else None,
            "changes": len(changes), "change_median": statistics.median(changes) if changes else None,
            "change_min": min(changes, default=None), "change_max": max(changes, default=None),
            "detectable_median": statistics.median(detectable) if detectable else None,
            "run_seconds_median": statistics.median(r["seconds"] for r in rows) if rows else None,
            "disturbed": sum(1 for r in rows if r["disturbed"])}


def summary_row(s: dict) -> list[str]:
    n = s["trials"]
    dash = lambda x, f=str: "-" if x is None else f(x)
    return [s["version"], s["group"], dash(s["expected_pct"], lambda x: f"{x:+.1f}%"), str(n),
            dash(s["detected"], lambda k: pct(k, n)), dash(s["false_positives"], lambda k: pct(k, n)),
            dash(s["wrong_sign"]), dash(s["same"]), dash(s["unknown"]),
            "-" if s["change_median"] is None else
            f"{s['change_median']:+.1f}% [{s['change_min']:+.1f}, {s['change_max']:+.1f}]"
            + (f" ({s['changes']} of {n})" if s["changes"] < n else ""),
            dash(s["detectable_median"], lambda x: f"{x:.1f}%"), dash(s["run_seconds_median"], lambda x: f"{x:.1f}")]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--effects", type=effects_arg, default=None, metavar="PCT,...",
                    help="slow-downs of the test variant, in percent (default 2,5,10)")
    ap.add_argument("--trials", type=int, default=10, help="trials per effect (default 10)")
    ap.add_argument("--null", type=int, default=None, help="null trials, nothing changed (default: --trials)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions per variant and trial (default 10)")
    ap.add_argument("--calibrate", type=int, default=5, metavar="ROUNDS",
                    help="interleaved calibration rounds at 1, 2 and 3 times the base value (default 5)")
    ap.add_argument("--bench", type=bench_arg, default=(BENCH, PARAM, BASE), metavar="BENCH:PARAM=BASE",
                    help=f"the benchmark, the parameter its time is linear in, and its base value "
                         f"(default {BENCH}:{PARAM}={BASE}; select.tcp.100:n=100 also fits)")
    ap.add_argument("--versions", type=versions_arg, default=list(VERSIONS), metavar="before,after",
                    help="which versions to measure with (default both)")
    ap.add_argument("--before-rev", default=BEFORE_REV, metavar="REV",
                    help=f"the revision of this repository that is 'before' (default {BEFORE_REV[:12]}, main's "
                         f"head when the harness was written)")
    ap.add_argument("--before", default=None, metavar="CMD", help="run 'before' as this command instead")
    ap.add_argument("--after", default=None, metavar="CMD",
                    help="run 'after' as this command (default: the kperfdiff beside this Python)")
    ap.add_argument("--store-dir", type=Path, default=None, metavar="DIR",
                    help="keep the stores (one per version) and the experiment files there")
    ap.add_argument("--quick", action="store_true",
                    help="a small check of the harness: one 10%% trial and one null trial, one calibration "
                         "round, --reps 3 and 5 intervals of 2 ms per process unless given")
    ap.add_argument("--detect", type=float, default=None, metavar="P",
                    help="'after' adds repetitions until each trial's change could detect P%% (its experiment "
                         "file's detect = P), within --budget seconds of measuring; 'before' has no such rule")
    ap.add_argument("--budget", type=float, default=120, metavar="S",
                    help="with --detect: the seconds of measuring a trial may spend (default 120)")
    ap.add_argument("--format", choices=("text", "json"), default="text",
                    help="json: the whole result on stdout, the lines per trial on stderr")
    a = ap.parse_args()
    if a.quick:
        a.trials, a.null, a.calibrate = 1, 1, 1
        a.effects = a.effects or [0.10]
        a.reps = a.reps or 3
    a.effects = a.effects or [0.02, 0.05, 0.10]
    a.reps = a.reps or 10
    a.null = a.trials if a.null is None else a.null
    if a.trials < 1 or a.null < 0 or a.reps < 3 or a.calibrate < 1:
        ap.exit(2, "sensitivity: --trials and --calibrate must be 1 or more, --null 0 or more, --reps 3 or more "
                   "(with fewer, compare gives no interval)\n")
    return a


def measure(a: argparse.Namespace, work: Path, versions: list[Version], say) -> dict:
    bench, param, base = a.bench
    extra = QUICK_BENCH if a.quick else ()
    cal_version = next((v for v in versions if v.name == "after"), versions[0])
    line: Line = calibrate(cal_version.kpd, work / "calibrate.db", a.calibrate, bench, param, base, extra)
    say(line.describe())
    groups = []
    for e in a.effects:
        value = line.value_for(e)
        groups.append(Group(f"{e * 100:g}%", e, value, a.trials, (1 / (1 + line.expected(value)) - 1) * 100))
        say(f"  {e * 100:g}%: {param} = {base} -> {value} (slower by {line.expected(value) * 100:+.1f}%: expected "
            f"change {groups[-1].expected:+.1f}%)")
    if a.null:
        groups.append(Group("null", None, base, a.null))

    schedule = [(gi, g, i) for i in range(max(g.trials for g in groups)) for gi, g in enumerate(groups)
                if i < g.trials]
    rows: list[dict] = []
    say(f"\n{len(schedule)} trials, each run by {' and '.join(v.name for v in versions)}")
    done = 0
    for gi, g, i in schedule:
        name = f"sens-{g.name.replace('%', 'pct')}-{i + 1}"
        for v in (versions if (i + gi) % 2 == 0 else versions[::-1]):
            detect = a.detect if v.name == "after" else None
            path = experiment_file(work / f"{name}.{v.name}.toml", name, bench, param, base, g.value, a.reps,
                                   a.quick, detect, a.budget)
            row = {"version": v.name, "group": g.name, "trial": i + 1, "value": g.value, **trial(v, path, name, bench)}
            rows.append(row)
            done += 1
            verdict = row["verdict"] + (f", detectable {row['detectable']:.1f}%" if row["detectable"] else "")
            say(f"{done:3}/{len(schedule) * len(versions)} {v.name:>6} {g.name:>5} #{i + 1}: {param} = {g.value}; "
                f"change {figures(row)} ({verdict}){', disturbed' if row['disturbed'] else ''}; "
                f"run {row['seconds']:.1f} s")
    summaries = [summary(v.name, g, [r for r in rows if r["version"] == v.name and r["group"] == g.name])
                 for v in versions for g in groups]
    return {"calibration": line.as_dict(), "groups": [g.__dict__ for g in groups], "trials": rows,
            "summary": summaries}


def main() -> int:
    a = parse_args()
    bench, param, base = a.bench
    tmp = tempfile.TemporaryDirectory(prefix="kpd-sensitivity-")
    work = a.store_dir or Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(text, file=sys.stderr if a.format == "json" else sys.stdout, flush=True)
    checkout_dir = None
    t0 = time.monotonic()
    load0 = os.getloadavg()
    try:
        versions = []
        for name in a.versions:
            store = work / f"{name}.db"
            given = a.before if name == "before" else a.after
            if given:
                versions.append(Version(name, shlex.split(given), store))
            elif name == "after":
                versions.append(Version(name, [str(Path(sys.executable).with_name("kperfdiff"))], store))
            else:
                checkout_dir = Path(tmp.name) / "before"
                src, a.before_rev = checkout(a.before_rev, checkout_dir)
                versions.append(Version(name, [sys.executable, "-m", "kperfdiff"], store,
                                        {**os.environ, "PYTHONPATH": str(src)}, str(src)))
        say(f"sensitivity: {bench} ({param} = {base} against more) on the local target, {a.reps} repetitions per "
            f"variant, {a.trials} trials per effect and {a.null} null; "
            + "; ".join(f"{v.name}: {v.command()}" + (f" ({a.before_rev[:12]})" if v.pythonpath else "")
                        for v in versions)
            + f"; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs")
        result = measure(a, work, versions, say)
    except HarnessError as e:
        print(f"sensitivity: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sensitivity: interrupted", file=sys.stderr)
        return 130
    finally:
        if checkout_dir is not None:
            remove_checkout(checkout_dir)
    load1 = os.getloadavg()
    seconds = time.monotonic() - t0
    if a.format == "json":
        print(json.dumps({"version": 1, "bench": bench, "param": param, "base": base, "reps": a.reps,
                          "quick": a.quick, "before_rev": a.before_rev if checkout_dir else None,
                          "versions": {v.name: v.command() for v in versions}, **result,
                          "load_average_start": load0, "load_average_end": load1, "seconds": seconds}, indent=1))
        return 0
    print("\n" + table(HEAD, [summary_row(s) for s in result["summary"]]))
    print("\nexpected: the change the calibration predicts (negative: slower); detected: significant and "
          "negative; false positives: significant on a null trial; same, unknown: verdicts, where the version "
          "gives them; change: over the trials with a change computed (k of n where some had none); "
          "detectable: the smallest change the cell could have seen at 80% power, where given; run s: wall time of "
          "kperfdiff run")
    print(f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; {seconds:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
