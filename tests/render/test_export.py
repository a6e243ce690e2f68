"""`kperfdiff export`: profiles in speedscope, pprof, Firefox Profiler and folded form, checked
against the formats' own rules and, where the tool is installed, the tool itself."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from support import DATA, ROOT, assert_one_sentence_error, run_cli
from kperfdiff.ingest.load import load
from kperfdiff.render.export import pprof_message_class

PERFDATA = DATA / "perfdata" / "plain.perf.data"        # cpu-clock, 3652 samples, kallsyms beside it
GROUP = DATA / "perfdata" / "group.perf.data"           # cpu-clock and task-clock
SCRIPT = DATA / "text" / "forkexec.script"              # perf script: comm sh, true, seq
COMM = DATA / "perfdata" / "comm" / "comm.perf.data"     # sh, seq, a forked subshell, perl renamed by prctl, dd
COMM_SAMPLES = {"sh": 41, "renamed": 35, "dd": 25, "seq": 20, "perl": 1}   # perf script -F comm, counted
FOLDED = DATA / "text" / "forkexec.folded"
REPORT = DATA / "text" / "forkexec.report"
# Debian's go (golang-go) ships pprof prebuilt; a newer go builds it on first use (a minute)
GO = "/usr/bin/go" if Path("/usr/bin/go").exists() else shutil.which("go")
SCHEMA = json.loads((DATA / "export" / "speedscope-file-format-schema.json").read_text())


def export(tmp_path, profile, fmt, *args, check=0):
    out = tmp_path / f"out.{fmt}"
    p = run_cli("export", profile, "--to", fmt, "-o", out, *args, check=check)
    return out, p


def top_self(prof):
    i = int(prof.self_weight.argmax())
    return prof.symbols[i].name, prof.self_weight[i]


# -- speedscope ------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile", [PERFDATA, GROUP, SCRIPT, FOLDED, REPORT])
def test_speedscope_validates_against_its_schema(tmp_path, profile):
    out, p = export(tmp_path, profile, "speedscope")
    doc = json.loads(out.read_text())
    jsonschema.validate(doc, SCHEMA)
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = doc["shared"]["frames"]
    for prof in doc["profiles"]:
        assert len(prof["samples"]) == len(prof["weights"])
        assert all(0 <= i < len(frames) for st in prof["samples"] for i in st)
        assert prof["endValue"] == sum(prof["weights"])
    assert "wrote" in p.stderr


def test_speedscope_one_profile_per_event_in_nanoseconds(tmp_path):
    out, _ = export(tmp_path, GROUP, "speedscope")
    doc = json.loads(out.read_text())
    names = [p["name"].rsplit(": ", 1)[1] for p in doc["profiles"]]
    assert names == ["cpu-clock", "task-clock"]
    for prof, event in zip(doc["profiles"], names):
        ref = load(GROUP, event=event)
        assert prof["unit"] == "nanoseconds"
        # every sample has a stack here, so the weights are the whole event
        assert prof["endValue"] == pytest.approx(ref.total_weight, rel=1e-9)
    # stacks are root first: the leaf of the heaviest stack is the heaviest self symbol's frame
    plain = json.loads(export(tmp_path, PERFDATA, "speedscope")[0].read_text())
    prof = plain["profiles"][0]
    leaf_weight = Counter()
    for st, w in zip(prof["samples"], prof["weights"]):
        leaf_weight[plain["shared"]["frames"][st[-1]]["name"]] += w
    name, weight = top_self(load(PERFDATA))
    kname = name + "_[k]"
    assert leaf_weight.most_common(1)[0] == (kname, pytest.approx(weight))
    # --unit samples: the same stacks counted in samples
    out, _ = export(tmp_path, PERFDATA, "speedscope", "--unit", "samples")
    counted = json.loads(out.read_text())["profiles"][0]
    assert counted["unit"] == "none" and counted["endValue"] == load(PERFDATA).samples


# -- pprof -----------------------------------------------------------------------------------------

def decode_pprof(path: Path):
    msg = pprof_message_class()()
    msg.ParseFromString(gzip.decompress(path.read_bytes()))
    return msg


def test_pprof_structure(tmp_path):
    out, _ = export(tmp_path, PERFDATA, "pprof")
    msg = decode_pprof(out)
    st = list(msg.string_table)
    assert st[0] == ""
    assert [(st[t.type], st[t.unit]) for t in msg.sample_type] == [("samples", "count"), ("cpu", "nanoseconds")]
    prof = load(PERFDATA)
    assert sum(s.value[0] for s in msg.sample) == prof.samples
    assert sum(s.value[1] for s in msg.sample) == pytest.approx(prof.total_weight, abs=len(msg.sample))
    ids = {loc.id for loc in msg.location}
    funcs = {f.id: st[f.name] for f in msg.function}
    maps = {m.id: st[m.filename] for m in msg.mapping}
    assert all(i in ids for s in msg.sample for i in s.location_id)
    kernel = {funcs[loc.line[0].function_id] for loc in msg.location if maps[loc.mapping_id] == "[kernel.kallsyms]"}
    assert "read_zero" in kernel and "do_syscall_64" in kernel
    # the first location of a sample is its leaf
    leaf = Counter()
    locs = {loc.id: loc for loc in msg.location}
    for s in msg.sample:
        leaf[funcs[locs[s.location_id[0]].line[0].function_id]] += s.value[1]
    name, weight = top_self(prof)
    assert leaf.most_common(1)[0] == (name, pytest.approx(weight, abs=len(msg.sample)))
    # every sample carries its process's name
    comms = Counter()
    for s in msg.sample:
        (comm,) = [st[lb.str] for lb in s.label if st[lb.key] == "comm"]
        comms[comm] += s.value[0]
    assert comms == {"dd": prof.samples}


def test_pprof_of_perf_data_labels_processes(tmp_path):
    out, _ = export(tmp_path, COMM, "pprof")
    msg = decode_pprof(out)
    st = list(msg.string_table)
    comms = Counter()
    for s in msg.sample:
        (comm,) = [st[lb.str] for lb in s.label if st[lb.key] == "comm"]
        comms[comm] += s.value[0]
    assert comms == COMM_SAMPLES


@pytest.mark.skipif(GO is None, reason="go is not installed (Debian package golang-go)")
def test_go_tool_pprof_tags_show_the_processes(tmp_path):
    out, _ = export(tmp_path, COMM, "pprof")
    p = subprocess.run([GO, "tool", "pprof", "-sample_index=samples", "-tags", str(out)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path), "PPROF_TMPDIR": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert re.search(r"comm: Total 122(\.0)?\b", p.stdout), p.stdout
    got = {m[1]: float(m[0]) for m in re.findall(r"^\s+([\d.]+) \(\s*[\d.]+%\): (\S+)$", p.stdout, re.M)}
    assert got == COMM_SAMPLES


def test_pprof_of_perf_script_labels_processes_and_counts_periods(tmp_path):
    out, _ = export(tmp_path, SCRIPT, "pprof")
    msg = decode_pprof(out)
    st = list(msg.string_table)
    comms = Counter(st[lb.str] for s in msg.sample for lb in s.label if st[lb.key] == "comm")
    assert set(comms) == {"sh", "true", "seq"}
    out, _ = export(tmp_path, FOLDED, "pprof")
    msg = decode_pprof(out)
    assert [(msg.string_table[t.type], msg.string_table[t.unit]) for t in msg.sample_type] == [("samples", "count")]


@pytest.mark.skipif(GO is None, reason="go is not installed (Debian package golang-go)")
def test_go_tool_pprof_reads_it(tmp_path):
    """go tool pprof -top shows the top function with its self time and samples, as kperfdiff counts them."""
    out, _ = export(tmp_path, PERFDATA, "pprof")
    prof = load(PERFDATA)
    name, weight = top_self(prof)
    env_home = {"HOME": str(tmp_path), "PPROF_TMPDIR": str(tmp_path)}

    def top(*args):
        p = subprocess.run([GO, "tool", "pprof", "-top", "-nodecount=5", *args, str(out)], capture_output=True,
                           text=True, timeout=300, env={**os.environ, **env_home})
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        head = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["flat", "flat%"])
        return p.stdout, [ln.split() for ln in lines[head + 1:] if ln.strip()]

    text, rows = top("-unit=ns")
    assert "Type: cpu" in text
    assert rows[0][-1] == name and rows[0][0] == f"{int(round(weight))}ns"
    text, rows = top("-sample_index=samples")
    assert rows[0][-1] == name and int(rows[0][0]) == int(prof.meta["self_count"][int(prof.self_weight.argmax())])


def test_an_export_of_several_repetitions_spans_them_all(tmp_path):
    """Repetitions (comma-separated, or a store reference's) were recorded one after another: an
    export holding 3 spans 3 recordings. pprof's duration_nanos (go tool pprof's 'Duration') is the
    sum of theirs, not the first's; speedscope's endValue and the Firefox timeline, which count the
    samples' weight and number, triple too."""
    three = ",".join([str(PERFDATA)] * 3)
    (tmp_path / "1").mkdir()
    one_pb, _ = export(tmp_path / "1", PERFDATA, "pprof")
    three_pb, _ = export(tmp_path, three, "pprof")
    one, many = decode_pprof(one_pb), decode_pprof(three_pb)
    assert one.duration_nanos > 0 and many.duration_nanos == 3 * one.duration_nanos
    assert sum(s.value[1] for s in many.sample) == 3 * sum(s.value[1] for s in one.sample)
    if GO:
        p = subprocess.run([GO, "tool", "pprof", "-top", "-nodecount=1", str(three_pb)], capture_output=True,
                           text=True, timeout=300, env={**os.environ, "HOME": str(tmp_path)})
        shown = re.search(r"Duration: ([\d.]+)(m?s)", p.stdout)
        assert shown and float(shown[1]) * (1e-3 if shown[2] == "ms" else 1) == pytest.approx(
            3 * one.duration_nanos / 1e9, rel=0.01), p.stdout
    ss = [json.loads(export(tmp_path / d, f, "speedscope")[0].read_text())["profiles"][0]
          for d, f in (("1", PERFDATA), (".", three))]
    assert ss[1]["endValue"] - ss[1]["startValue"] == 3 * (ss[0]["endValue"] - ss[0]["startValue"])
    ff = [json.loads(export(tmp_path / d, f, "firefox")[0].read_text())["threads"]
          for d, f in (("1", PERFDATA), (".", three))]
    ends = [sum(len(t["samples"]["data"]) for t in threads) for threads in ff]
    assert ends[1] == 3 * ends[0]
    last = [max(t["samples"]["data"][-1][1] for t in threads) for threads in ff]
    assert last[1] > 2.9 * last[0]


# -- Firefox Profiler ------------------------------------------------------------------------------

def check_gecko(doc) -> None:
    """The structural rules the Firefox Profiler's Gecko-format import relies on."""
    meta = doc["meta"]
    assert isinstance(meta["version"], int) and 1 <= meta["version"] <= 36
    assert meta["interval"] > 0 and isinstance(meta["startTime"], (int, float))
    cats = meta["categories"]
    assert all(c["subcategories"] and c["name"] and c["color"] for c in cats)
    assert doc["processes"] == [] and doc["libs"] == [] and isinstance(doc["threads"], list) and doc["threads"]
    for th in doc["threads"]:
        assert th["name"] and isinstance(th["tid"], int) and isinstance(th["pid"], int)
        for table in ("samples", "stackTable", "frameTable", "markers"):
            schema, data = th[table]["schema"], th[table]["data"]
            assert sorted(schema.values()) == list(range(len(schema)))
            assert all(len(row) == len(schema) for row in data), table
        strings = th["stringTable"]
        fs, ss = th["frameTable"]["schema"], th["stackTable"]["schema"]
        frames, stacks = th["frameTable"]["data"], th["stackTable"]["data"]
        for f in frames:
            assert 0 <= f[fs["location"]] < len(strings)
            c, sub = f[fs["category"]], f[fs["subcategory"]]
            assert 0 <= c < len(cats) and 0 <= sub < len(cats[c]["subcategories"])
        for i, s in enumerate(stacks):
            prefix = s[ss["prefix"]]
            assert prefix is None or 0 <= prefix < i      # a prefix comes before its stack
            assert 0 <= s[ss["frame"]] < len(frames)
        times = [row[th["samples"]["schema"]["time"]] for row in th["samples"]["data"]]
        assert times == sorted(times)
        assert all(0 <= row[th["samples"]["schema"]["stack"]] < len(stacks) for row in th["samples"]["data"])


def test_firefox_gecko_format(tmp_path):
    out, _ = export(tmp_path, PERFDATA, "firefox")
    doc = json.loads(out.read_text())
    check_gecko(doc)
    prof = load(PERFDATA)
    (th,) = doc["threads"]
    assert th["name"] == th["processName"] == "dd"       # the process, as perf script names it
    assert len(th["samples"]["data"]) == prof.samples
    assert doc["meta"]["interval"] == pytest.approx(prof.total_weight / prof.samples / 1e6)
    # the heaviest leaf frame is the heaviest self symbol, in the Kernel category
    fs, ss = th["frameTable"]["schema"], th["stackTable"]["schema"]
    leaf = Counter(th["stackTable"]["data"][row[0]][ss["frame"]] for row in th["samples"]["data"])
    f = th["frameTable"]["data"][leaf.most_common(1)[0][0]]
    assert th["stringTable"][f[fs["location"]]] == top_self(prof)[0] + " ([kernel.kallsyms])"
    assert doc["meta"]["categories"][f[fs["category"]]]["name"] == "Kernel"


def test_firefox_one_thread_per_process(tmp_path):
    out, _ = export(tmp_path, SCRIPT, "firefox")
    doc = json.loads(out.read_text())
    check_gecko(doc)
    prof = load(SCRIPT)
    by_comm = Counter()
    for (comm, _), (_, n) in prof.process_stacks.items():
        by_comm[comm] += n
    assert {t["name"]: len(t["samples"]["data"]) for t in doc["threads"]} == dict(by_comm)
    # perf.data: the same, the processes named by its COMM and FORK records
    out, _ = export(tmp_path, COMM, "firefox")
    doc = json.loads(out.read_text())
    check_gecko(doc)
    assert {t["name"]: len(t["samples"]["data"]) for t in doc["threads"]} == COMM_SAMPLES


# -- folded ----------------------------------------------------------------------------------------

def folded_lines(path: Path) -> dict[str, int]:
    out = {}
    for ln in path.read_text().splitlines():
        stack, count = ln.rsplit(" ", 1)
        out[stack] = int(count)
    return out


def test_folded_samples_by_default_and_ns_on_request(tmp_path):
    prof = load(PERFDATA)
    out, _ = export(tmp_path, PERFDATA, "folded")
    lines = folded_lines(out)
    assert sum(lines.values()) == prof.samples == 3652
    (tmp_path / "ns").mkdir()
    ns, _ = export(tmp_path / "ns", PERFDATA, "folded", "--unit", "ns")
    assert sum(folded_lines(ns).values()) == pytest.approx(prof.total_weight, abs=len(lines))
    # read back by kperfdiff: the same kernel symbols with the same sample counts
    back = load(out)
    name, _ = top_self(prof)
    i = next(i for i, s in enumerate(back.symbols) if s.name == name)
    assert back.symbols[i].kernel
    assert back.self_weight[i] == prof.meta["self_count"][int(prof.self_weight.argmax())]


def test_folded_process_is_the_root_frame(tmp_path):
    out, _ = export(tmp_path, SCRIPT, "folded")
    lines = folded_lines(out)
    roots = Counter()
    for stack, n in lines.items():
        roots[stack.split(";", 1)[0]] += n
    prof = load(SCRIPT)
    by_comm = Counter()
    for (comm, _), (_, n) in prof.process_stacks.items():
        by_comm[comm] += n
    assert roots == by_comm
    assert set(roots) == {"sh", "true", "seq"} and sum(roots.values()) == prof.samples


def test_folded_of_perf_data_starts_with_the_process(tmp_path):
    """perf.data: each stack's root frame is the sample's process, as perf script names it (its
    thread's comm: exec, a fork's inherited name, a prctl rename)."""
    out, _ = export(tmp_path, COMM, "folded")
    roots = Counter()
    for stack, n in folded_lines(out).items():
        roots[stack.split(";", 1)[0]] += n
    assert roots == COMM_SAMPLES
    out, _ = export(tmp_path, PERFDATA, "folded")
    assert all(stack.startswith("dd;") for stack in folded_lines(out))


def _inferno_tool(name: str) -> str | None:
    local = ROOT / ".tools" / "bin" / name
    return shutil.which(name) or (str(local) if local.exists() else None)


@pytest.mark.skipif(shutil.which("perf") is None or _inferno_tool("inferno-collapse-perf") is None,
                    reason="perf or inferno-collapse-perf is not installed")
def test_folded_roots_agree_with_inferno_collapse_perf(tmp_path):
    """inferno-collapse-perf folds perf script's output of the same file under the same processes
    (weighted by period: cpu-clock's 1 ms per sample here)."""
    script = subprocess.run(["perf", "script", "-i", str(COMM)], capture_output=True, timeout=120)
    assert script.returncode == 0
    p = subprocess.run([_inferno_tool("inferno-collapse-perf")], input=script.stdout, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    theirs = Counter()
    for ln in p.stdout.decode().splitlines():
        stack, n = ln.rsplit(" ", 1)
        theirs[stack.split(";", 1)[0]] += int(n)
    out, _ = export(tmp_path, COMM, "folded", "--unit", "ns")
    ours = Counter()
    for stack, n in folded_lines(out).items():
        ours[stack.split(";", 1)[0]] += n
    assert set(theirs) == set(ours) == set(COMM_SAMPLES)
    assert all(theirs[c] == pytest.approx(ours[c], rel=0.01) for c in ours)


@pytest.mark.skipif(not (shutil.which("inferno-flamegraph") or (ROOT / ".tools/bin/inferno-flamegraph").exists()),
                    reason="inferno-flamegraph is not installed (make setup installs it into .tools/bin)")
def test_inferno_draws_the_folded_export(tmp_path):
    out, _ = export(tmp_path, SCRIPT, "folded")
    exe = shutil.which("inferno-flamegraph") or str(ROOT / ".tools/bin/inferno-flamegraph")
    p = subprocess.run([exe, str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.lstrip().startswith("<?xml") and "<svg" in p.stdout
    prof = load(SCRIPT)
    assert f"<title>all ({prof.samples} samples, 100%)</title>" in p.stdout
    sh = sum(n for (comm, _), (_, n) in prof.process_stacks.items() if comm == "sh")
    assert f"<title>sh ({sh} samples, {100 * sh / prof.samples:.2f}%)</title>" in p.stdout


# -- store references and errors -------------------------------------------------------------------

def test_store_reference(tmp_path):
    from kperfdiff.store import Store
    db = tmp_path / "k.db"
    st = Store.open(db)
    mid = st.add_machine({"arch": "x86_64", "cpu_model": "test", "cpus": 2, "kernel_release": "6.18"})
    run = st.start_run(label="base", machine_id=mid)
    for rep in range(2):
        st.add_profile(run_id=run.id, result_id=None, benchmark="proc.fork", rep=rep, path=str(SCRIPT),
                       kallsyms=None, event="cpu-clock", samples=None, cpu_time_ns=None, ops=22)
    st.finish_run(run.id, "complete")
    out = tmp_path / "r.folded"
    run_cli("--store", db, "export", f"{run.id}:proc.fork", "--to", "folded", "-o", out, check=0)
    assert sum(folded_lines(out).values()) == 2 * load(SCRIPT).samples     # two repetitions added together
    p = run_cli("--store", db, "export", f"{run.id}:no.such.bench", "--to", "folded", "-o", out)
    assert_one_sentence_error(p)
    assert "no profile of no.such.bench" in p.stderr
    p = run_cli("--store", db, "export", "999:proc.fork", "--to", "folded", "-o", out)
    assert_one_sentence_error(p)


@pytest.mark.parametrize("args, message", [
    (["--to", "svg"], "invalid choice: 'svg'"),
    (["--to", "folded", "-o", "/nonexistent-dir/x.folded"], "cannot write /nonexistent-dir/x.folded"),
    (["--to", "folded", "--unit", "ns"], "weighted in samples, not nanoseconds"),
    (["--to", "pprof", "--unit", "ns"], "--unit ns does not apply to pprof"),
])
def test_bad_options_are_one_sentence(tmp_path, args, message):
    if "-o" not in args:
        args = [*args, "-o", tmp_path / "x"]
    p = run_cli("export", FOLDED, *args)
    assert_one_sentence_error(p)
    assert message in p.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name, message", [
    ("empty.perf.data", "is empty"),
    ("truncated.perf.data", None),
    ("garbage.perf.data", None),
    ("missing.perf.data", "missing.perf.data"),
])
def test_bad_inputs_are_one_sentence(tmp_path, name, message):
    p = run_cli("export", DATA / "perfdata" / name, "--to", "pprof", "-o", tmp_path / "x.pb.gz")
    if name == "truncated.perf.data":
        # what precedes the cut is a profile: it is exported, with the reader's warning
        assert p.returncode == 0 and (tmp_path / "x.pb.gz").exists()
        return
    assert_one_sentence_error(p)
    if message:
        assert message in p.stderr
    if name == "missing.perf.data":
        # diff's sentence: "no such file" when there is no store to look the name up in,
        # "is not a file" when there is one and it holds no such run
        assert "no such file" in p.stderr or "is not a file" in p.stderr, p.stderr
