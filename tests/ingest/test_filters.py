"""perf report's filters (--comms, --pid, --tid, --cpu, --dsos) and --sort dso/comm, checked against
perf report's own output run now on the fixtures (--percentage relative: shares of the kept samples),
the refusals, the parallel reader with a filter, and --exclude-idle on two system-wide recordings
made at test time."""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.ingest import filters as F
from kperfdiff.ingest import perfdata
from kperfdiff.ingest.load import load
import support

DATA = support.DATA / "perfdata"
needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
TOL = 0.011          # perf report prints two decimals


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Plain copies perf reads: the x86_64 shell fixture and its kallsyms, plain.perf.data's kallsyms."""
    d = tmp_path_factory.mktemp("filters")
    out = {"ks": d / "kallsyms", "shell": d / "shell" / "shell.perf.data", "shell_ks": d / "shell" / "kallsyms"}
    out["ks"].write_bytes(gzip.decompress((DATA / "kallsyms.gz").read_bytes()))
    out["shell"].parent.mkdir()
    x = DATA / "xarch" / "x86_64"
    out["shell"].write_bytes(gzip.decompress((x / "proc.shell.perf.data.gz").read_bytes()))
    out["shell_ks"].write_bytes(gzip.decompress((x / "kallsyms.gz").read_bytes()))
    return out


def perf(*args: str) -> str:
    return subprocess.run(["perf", *args], capture_output=True, text=True, timeout=120).stdout


def report_rows(path: Path, ks: Path, sort: str, *extra: str) -> dict[str, float]:
    """perf report --stdio --sort SORT --no-children -g none rows: name -> self share (resolved kernel
    symbols only for a sort ending in sym, their rows added up over the other keys). perf report
    filters its entries, not its samples: an entry of --sort sym merges samples of every process and
    is kept or dropped whole by the comm or thread of its first sample, so a sample filter is
    compared with --sort KEY,sym (each entry of one process, thread or CPU), as perf script agrees."""
    out = perf("report", "-i", str(path), "--kallsyms", str(ks), "--stdio", "--sort", sort, "-g", "none",
               "--no-children", "--percentage", "relative", *extra)
    rows: dict[str, float] = {}
    for line in out.splitlines():
        if sort.endswith("sym"):
            m = re.match(r"^\s+([\d.]+)%\s+(?:.*\s)?\[k\]\s+(\S+)\s*$", line)
            if m and not m.group(2).startswith("0x"):
                rows[m.group(2)] = rows.get(m.group(2), 0.0) + float(m.group(1))
        else:
            m = re.match(r"^\s+([\d.]+)%\s+(\S.*?)\s*$", line)
            if m:
                rows[m.group(2)] = rows.get(m.group(2), 0.0) + float(m.group(1))
    return rows


def kernel_shares(p) -> dict[str, float]:
    out: dict[str, float] = {}
    for s, w in zip(p.symbols, p.self_weight):
        if s.kernel and not s.name.startswith("[") and not s.name.startswith("0x"):
            out[s.name] = out.get(s.name, 0.0) + 100.0 * w / p.total_weight
    return out


def all_shares(p) -> dict[str, float]:
    out: dict[str, float] = {}
    for s, w in zip(p.symbols, p.self_weight):
        out[s.name] = out.get(s.name, 0.0) + 100.0 * w / p.total_weight
    return out


def assert_close(ours: dict[str, float], perfs: dict[str, float]) -> None:
    """Every row of perf's is ours within rounding; a kernel address with several names (memset and
    memset_orig) may be named otherwise by each, so rows of names only perf printed are left out,
    but they must be few."""
    assert perfs, "perf report printed no rows"
    for name, share in perfs.items():
        if name in ours:
            assert abs(ours[name] - share) <= TOL, (name, ours[name], share)
    assert sum(v for k, v in perfs.items() if k not in ours) < 1.0


def _shell_ids(path: Path) -> tuple[int, str]:
    """The pid and comm with the most samples in the shell fixture."""
    counts: dict[tuple[str, str], int] = {}
    for line in perf("script", "-i", str(path), "-F", "comm,pid").splitlines():
        parts = line.split()
        if len(parts) >= 2:
            key = (" ".join(parts[:-1]), parts[-1])
            counts[key] = counts.get(key, 0) + 1
    (comm, pid), _ = max(counts.items(), key=lambda kv: kv[1])
    return int(pid), comm


@needs_perf
@pytest.mark.parametrize("what", ["comm", "pid", "tid"])
def test_sample_filters_match_perf_report(files, what):
    pid, comm = _shell_ids(files["shell"])
    f, opt, val = {"comm": (F.Filters(comms=("kpd-hello",)), "--comms", "kpd-hello"),
                   "pid": (F.Filters(pids=(pid,)), "--pid", str(pid)),
                   "tid": (F.Filters(tids=(pid,)), "--tid", str(pid))}[what]
    key = {"comm": "comm", "pid": "pid", "tid": "pid"}[what]
    prof = load(files["shell"], kallsyms=files["shell_ks"], filters=f)
    full = load(files["shell"], kallsyms=files["shell_ks"])
    assert 0 < prof.samples < full.samples
    assert prof.meta["filtered"] == {"filters": f.asked(), "kept": prof.samples, "of": full.samples}
    assert_close(kernel_shares(prof), report_rows(files["shell"], files["shell_ks"], f"{key},sym", opt, val))


@needs_perf
def test_dso_filter_matches_perf_report(files):
    path = DATA / "plain.perf.data"
    for dso in ("[kernel.kallsyms]", "libc.so.6"):
        prof = load(path, kallsyms=files["ks"], filters=F.Filters(dsos=(dso,)))
        rows = report_rows(path, files["ks"], "dso", "--dsos", dso)
        assert set(rows) == {dso}
        assert {F.dso_name(s) for s, w in zip(prof.symbols, prof.self_weight) if w} == {dso}
    # the kernel's functions, of the kernel's samples only
    prof = load(path, kallsyms=files["ks"], filters=F.Filters(dsos=("[kernel.kallsyms]",)))
    assert_close(kernel_shares(prof), report_rows(path, files["ks"], "sym", "--dsos", "[kernel.kallsyms]"))


@needs_perf
@pytest.mark.parametrize("sort,path", [("dso", "plain.perf.data"), ("comm", "comm/comm.perf.data")])
def test_sort_matches_perf_report(files, sort, path):
    path = DATA / path
    prof = F.regroup(load(path, kallsyms=files["ks"] if sort == "dso" else None, by_process=True), sort, str(path))
    ks = files["ks"]
    assert_close(all_shares(prof), report_rows(path, ks, sort))


def test_cpu_list_syntax():
    assert F.parse_cpu_list("0-2,5") == (0, 1, 2, 5)
    assert F.cpu_list_text((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    for bad in ("a", "3-1", "-1", "1,,2"):
        with pytest.raises(InputError):
            F.parse_cpu_list(bad)


def test_refusals():
    folded = support.DATA / "folded"
    comm = DATA / "comm" / "comm.perf.data"
    cases = [
        (["diff", str(DATA / "comm" / "comm.perf.data"), str(comm), "--cpu", "0"], "PERF_SAMPLE_CPU"),
        (["diff", str(comm), str(comm), "--comm", "nosuch"], "--comm nosuch keeps no sample of"),
        (["export", str(comm), "--to", "folded", "-o", "-", "--sort", "dso"], "does not apply to export"),
    ]
    fold = next(iter(sorted(folded.glob("*.folded"))), None) if folded.is_dir() else None
    if fold is not None:
        cases.append((["diff", str(fold), str(fold), "--pid", "1"], "folded stacks"))
    for args, words in cases:
        p = support.run_cli(*args)
        assert p.returncode != 0
        support.assert_one_sentence_error(p)
        assert words in p.stderr, p.stderr


def test_folded_refuses_pid(tmp_path):
    f = tmp_path / "x.folded"
    f.write_text("main;foo 3\nmain;bar 1\n")
    with pytest.raises(InputError, match=r"--pid 1: .*x\.folded is folded stacks"):
        load(f, filters=F.Filters(pids=(1,)))


def test_parallel_reader_gives_the_same_filtered_profile(monkeypatch):
    path = DATA / "comm" / "comm.perf.data"
    f = F.Filters(comms=("sh", "dd"))
    monkeypatch.setenv("KPERFDIFF_PARALLEL_MIN_BYTES", "0")
    out = []
    for threads in (1, 3):
        monkeypatch.setattr(perfdata, "threads_per_file", threads)
        p = load(path, filters=f, by_process=True)
        out.append((p.samples, p.total_weight, [(s.name, s.dso, s.kernel) for s in p.symbols], p.self_weight.tolist(),
                    sorted(p.process_stacks.items()), p.meta["filtered"]))
    assert out[0] == out[1]
    assert out[0][0] == 66 and out[0][-1]["of"] == 122     # perf script -F comm: sh 41 + dd 25


def test_perf_script_text_answers_its_columns(tmp_path):
    s = tmp_path / "s.txt"
    s.write_text("dd  101/102 [001] 1.000: 1000 cpu-clock:\n\tffffffff81000000 foo ([kernel.kallsyms])\n\n"
                 "sh  201/201 [000] 1.001: 1000 cpu-clock:\n\tffffffff81000010 bar ([kernel.kallsyms])\n\n")
    p = load(s, filters=F.Filters(cpus=(1,)))
    assert [x.name for x in p.symbols] == ["foo"] and p.meta["filtered"]["of"] == 2
    assert load(s, filters=F.Filters(pids=(201,))).samples == 1
    t = tmp_path / "t.txt"
    t.write_text("dd  102 1.000: 1000 cpu-clock:\n\tffffffff81000000 foo ([kernel.kallsyms])\n\n")
    with pytest.raises(InputError, match="without a cpu column"):
        load(t, filters=F.Filters(cpus=(0,)))


# -- --exclude-idle and --cpu on system-wide recordings made now -----------------------------

@pytest.fixture(scope="module")
def system_wide(tmp_path_factory) -> list[Path]:
    if shutil.which("perf") is None:
        pytest.skip("perf is not installed")
    d = tmp_path_factory.mktemp("idle")
    out = []
    # dd on CPU 0 (kernel work there on both sides, whatever else the machine runs: the --cpu 0 test
    # needs kernel rows on that CPU), the other CPUs mostly idle
    for name, count in (("a", 100000), ("b", 200000)):
        work = f"taskset -c 0 dd if=/dev/zero of=/dev/null bs=4k count={count}; sleep 0.5"
        path = d / f"{name}.perf.data"
        r = subprocess.run(["perf", "record", "-q", "-a", "-g", "-e", "cpu-clock", "-F", "999", "-o", str(path),
                            "--", "sh", "-c", work], capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or not path.exists():
            pytest.skip(f"perf cannot record system-wide here: {r.stderr.strip()[:200]}")
        out.append(path)
    if not os.access("/proc/kallsyms", os.R_OK):
        pytest.skip("/proc/kallsyms is not readable")
    return out


def test_exclude_idle_puts_work_first(system_wide):
    from kperfdiff.symbols.idle import idle_table
    a, b = system_wide
    args = ["diff", str(a), str(b), "--kallsyms", "/proc/kallsyms", "--kallsyms-unchecked", "--top", "0",
            "--format", "json"]
    import json
    plain = json.loads(support.run_cli(*args, check=0).stdout)
    idle = json.loads(support.run_cli(*args, "--exclude-idle", check=0).stdout)
    table = idle_table(plain.get("side_a", {}).get("arch") or None)

    def names(d):
        return [r["symbol"] for r in d["common"]] + [r["symbol"] for r in d.get("only_a", []) + d.get("only_b", [])]
    if not any(table.is_leaf(n) for n in names(plain)):
        pytest.skip("no CPU was idle while recording (a machine busy with other work)")
    assert names(idle) and not any(table.is_leaf(n) for n in names(idle))
    if idle["common"]:
        assert not table.is_leaf(idle["common"][0]["symbol"])
    kept = [s for s in idle["header"] if "kept by --exclude-idle" in s]
    assert len(kept) == 2, idle["header"]


def test_cpu_filter_matches_perf_report(system_wide, tmp_path):
    a = system_wide[1]
    ks = Path("/proc/kallsyms")
    prof = load(a, kallsyms=ks, kallsyms_unchecked=True, filters=F.Filters(cpus=(0,)))
    full = load(a, kallsyms=ks, kallsyms_unchecked=True)
    assert 0 < prof.samples <= full.samples
    assert_close(kernel_shares(prof), report_rows(a, ks, "cpu,sym", "--cpu", "0"))


def test_diff_says_what_its_rows_are_and_what_was_filtered():
    """--sort dso rows are DSOs named as perf names them (no [k]/[.] function marks) under titles that
    say DSOs; --sort comm rows are process names; JSON carries the sort and each side's filters and
    kept/of counts (null when unfiltered)."""
    import json
    plain = str(DATA / "plain.perf.data")
    ks = str(DATA / "kallsyms.gz")
    r = support.run_cli("diff", plain, plain, "--kallsyms", ks, "--sort", "dso", "--scope", "all", check=0)
    assert "Common DSOs: all 3," in r.stdout and re.search(r"B/A +dso\n", r.stdout), r.stdout
    assert "[k] " not in r.stdout and "[.] " not in r.stdout
    comm = str(DATA / "comm" / "comm.perf.data")
    r = support.run_cli("diff", comm, comm, "--sort", "comm", "--comm", "dd,seq", "--format", "json", check=0)
    doc = json.loads(r.stdout)
    assert doc["options"]["sort"] == "comm"
    assert sorted(row["symbol"] for row in doc["common"]) == ["dd", "seq"]
    assert doc["sides"]["a"]["filters"] and doc["sides"]["a"]["kept"] == {"kept": 45, "of": 122}
    r = support.run_cli("diff", plain, plain, "--kallsyms", ks, "--format", "json", check=0)
    assert json.loads(r.stdout)["sides"]["b"]["kept"] is None
    r = support.run_cli("diff", comm, comm, "--comm", "dd", check=0)
    assert "(% of the kept samples)" in r.stdout and "share of the kept samples (%)" in r.stdout, r.stdout
    assert "of all samples" not in r.stdout
