"""`kperfdiff place groups`: the TCM study's group-by-group table (place.grouptable), its
command line, store references as profiles and as --sizes, and the study's section."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.ingest.load import load
from kperfdiff.place import grouptable
from kperfdiff.place.inputs import load_groups, load_hw, load_sizes
from kperfdiff.place.optimise import by_groups
from kperfdiff.place.model import build_problem
from kperfdiff.render.place import groups_by_benchmark
from kperfdiff.render.table import to_text
import support
from support import ROOT

DATA = support.DATA / "place"
FOLDED, SMAP = DATA / "forkexec.folded", DATA / "System.map"
HW = ROOT / "examples" / "place" / "arm926-tcm.toml"

# two constructed benchmarks over functions of the System.map fixture: one spends its kernel
# time in the scheduler, the other in the buddy allocator (run with a 1 KB I-cache, so that their
# few kilobytes of code miss as a kernel's working set misses a 16 KB one)
SCHED = """\
pipe;read;do_syscall_64_[k];schedule_[k];__schedule_[k];pick_next_task_fair_[k] 1500
pipe;read;do_syscall_64_[k];schedule_[k];__schedule_[k] 2000
pipe;read;do_syscall_64_[k];schedule_[k];__schedule_[k];finish_task_switch.isra.0_[k] 1000
pipe;read;do_syscall_64_[k];__alloc_pages_noprof_[k];get_page_from_freelist_[k] 20
"""
BUDDY = """\
mm;touch;exc_page_fault_[k];handle_mm_fault_[k];__alloc_pages_noprof_[k];get_page_from_freelist_[k] 2500
mm;touch;exc_page_fault_[k];handle_mm_fault_[k];__alloc_pages_noprof_[k];get_page_from_freelist_[k];__rmqueue_pcplist_[k] 1500
mm;touch;exc_page_fault_[k];handle_mm_fault_[k];__alloc_pages_noprof_[k] 1000
mm;touch;do_syscall_64_[k];schedule_[k];__schedule_[k] 20
"""


def kperfdiff(*args):
    return subprocess.run([sys.executable, "-m", "kperfdiff", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def one_sentence(p):
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.fixture(scope="module")
def inputs():
    groups, ex = load_groups()
    return load_sizes(SMAP), load_hw(HW), groups, ex


@pytest.fixture(scope="module")
def fixture_table(inputs):
    sizes, hw, groups, ex = inputs
    return grouptable.build([("forkexec", load(FOLDED))], sizes, hw, 8192, groups=groups, excludes=ex)


def test_a_group_bigger_than_the_memory_is_trimmed_to_its_hottest_members(fixture_table, inputs):
    gt = fixture_table
    fork = gt.row("fork")
    assert fork.group_bytes > gt.usable            # 19,344 bytes of fork functions, 7,936 usable
    assert fork.trimmed and 0 < fork.placed_bytes <= gt.usable
    assert set(fork.placed) < set(grouptable.group_members(inputs[2]["fork"], inputs[0], inputs[3]))
    sched = gt.row("schedule")
    assert not sched.trimmed and sched.placed_bytes == sched.group_bytes <= gt.usable
    # groups with no function in this kernel rank last and have no figures
    assert gt.row("ramfs").members == 0 and not gt.row("ramfs").model
    assert all(r.members for r in gt.groups[:8]) and not any(r.members for r in gt.groups[8:])
    text = "\n".join(to_text(t) for t in groups_by_benchmark(gt))
    assert "trimmed to" in text and "no member" in text and "exact (all benchmarks)" in text


def test_each_group_alone_is_what_the_group_method_of_place_plan_computes(fixture_table, inputs):
    """One placement per group: the same prediction as `place plan --method groups`' group rows."""
    sizes, hw, groups, ex = inputs
    prob = build_problem(load(FOLDED), sizes, hw, groups=groups, excludes=ex, fills="measured")
    plan = {r["group"]: r["prediction"].gain_pct for r in by_groups(prob, 8192, pairs=False).details}
    for r in fixture_table.groups:
        if r.members:
            assert r.model["forkexec"] == pytest.approx(plan[r.label], abs=1e-9), r.label
    # simulated ranking as `place simulate` printed it for this fixture (README): exit and page fault first
    assert {fixture_table.groups[0].label, fixture_table.groups[1].label} == {"exit", "page_fault"}
    ex_row = fixture_table.row(grouptable.COMBINED)
    assert ex_row.sim["forkexec"] > max(r.sim["forkexec"] for r in fixture_table.groups if r.members)


def test_a_known_ordering_on_constructed_benchmarks(tmp_path, inputs):
    sizes, _, groups, ex = inputs
    hw = load_hw(HW)
    hw.icache_size = 1024
    (tmp_path / "sched.folded").write_text(SCHED)
    (tmp_path / "buddy.folded").write_text(BUDDY)
    profs = [("sched", load(tmp_path / "sched.folded")), ("buddy", load(tmp_path / "buddy.folded"))]
    gt = grouptable.build(profs, sizes, hw, 16384, groups=groups, excludes=ex, events=5000)
    s, b = gt.row("schedule"), gt.row("buddy")
    for which in ("model", "sim"):
        assert getattr(s, which)["sched"] > getattr(b, which)["sched"] > -1.0
        assert getattr(b, which)["buddy"] > getattr(s, which)["buddy"]
    # each benchmark's own exact placement is at least as good (model) as any group alone
    own = gt.row(grouptable.OWN)
    for col in ("sched", "buddy"):
        assert own.model[col] >= max(r.model.get(col, 0.0) for r in gt.groups) - 1e-6


def test_two_profiles_of_one_label_are_refused(inputs):
    sizes, hw, groups, ex = inputs
    p = load(FOLDED)
    with pytest.raises(InputError, match="both labelled"):
        grouptable.build([("a", p), ("a", p)], sizes, hw, 8192, groups=groups, excludes=ex)


def test_the_command_in_json(tmp_path):
    (tmp_path / "sched.folded").write_text(SCHED)
    p = kperfdiff("place", "groups", FOLDED, tmp_path / "sched.folded", "--sizes", SMAP, "--hw", HW,
                  "--capacity", "8K", "--format", "json", "--no-own")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["kind"] == "place-groups" and doc["columns"] == ["forkexec", "sched"]
    fork = next(r for r in doc["groups"] if r["label"] == "fork")
    assert fork["trimmed"] and fork["placed_bytes"] <= doc["usable_bytes"]
    assert [r["label"] for r in doc["others"]][-1] == grouptable.COMBINED


@pytest.mark.parametrize("extra, message", [
    (["--capacity", "0"], "above zero"),
    (["--capacity", "lots"], "not a size"),
    (["--events", "0"], "--events"),
    (["--calibrate"], "calibrate"),
])
def test_bad_input_is_one_sentence(extra, message):
    p = kperfdiff("place", "groups", FOLDED, "--sizes", SMAP, "--hw", HW, *extra)
    one_sentence(p)
    assert message in p.stderr


def test_missing_inputs_are_one_sentence(tmp_path):
    p = kperfdiff("place", "groups", FOLDED, "--hw", HW)
    one_sentence(p)
    assert "--sizes is needed" in p.stderr
    p = kperfdiff("--store", tmp_path / "none.db", "place", "groups", "7:proc.fork", "--sizes", SMAP, "--hw", HW)
    one_sentence(p)
    p = kperfdiff("place", "groups", FOLDED, FOLDED, "--sizes", SMAP, "--hw", HW)
    one_sentence(p)
    assert "both labelled" in p.stderr


def test_store_references_give_profiles_and_their_kallsyms_give_sizes(tmp_path):
    from kperfdiff.store import Store
    db = tmp_path / "k.db"
    st = Store.open(db)
    mid = st.add_machine({"arch": "arm64", "cpu_model": "test", "cpus": 1, "kernel_release": "6.1"})
    run = st.start_run(label="guest", machine_id=mid)
    (tmp_path / "sched.folded").write_text(SCHED)
    for bench, path in (("proc.fork", FOLDED), ("ipc.pipe", tmp_path / "sched.folded")):
        for rep in range(2):
            st.add_profile(run_id=run.id, result_id=None, benchmark=bench, rep=rep, path=str(path),
                           kallsyms=str(SMAP), event="cpu-clock", samples=None, cpu_time_ns=None, ops=None)
    st.add_profile(run_id=run.id, result_id=None, benchmark="proc.exec", rep=0, path=str(FOLDED),
                   kallsyms=None, event="cpu-clock", samples=None, cpu_time_ns=None, ops=None)
    st.finish_run(run.id, "complete")
    refs = [f"{run.id}:proc.fork", f"{run.id}:ipc.pipe"]
    p = kperfdiff("--store", db, "place", "groups", *refs, "--hw", HW, "--capacity", "8K", "--format", "json",
                  "--no-own")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["columns"] == ["proc.fork", "ipc.pipe"] and doc["sizes"].endswith("System.map")
    # two repetitions added up: the same shares, so the same figures as the file alone
    one = json.loads(kperfdiff("place", "groups", FOLDED, "--sizes", SMAP, "--hw", HW, "--capacity", "8K",
                               "--format", "json", "--no-own").stdout)
    get = {r["label"]: r for r in doc["groups"]}
    for r in one["groups"]:
        if r["members"]:
            assert get[r["label"]]["model_gain_pct"]["proc.fork"] == pytest.approx(r["model_gain_pct"]["forkexec"])
    # --sizes as a store reference, for a profile file; and a run without kallsyms
    p = kperfdiff("--store", db, "place", "plan", FOLDED, "--sizes", f"{run.id}:ipc.pipe", "--hw", HW,
                  "--method", "greedy")
    assert p.returncode == 0, p.stderr
    p = kperfdiff("--store", db, "place", "groups", f"{run.id}:proc.exec", "--hw", HW)
    one_sentence(p)
    assert "--sizes is needed" in p.stderr


@pytest.mark.slow
def test_the_study_section_from_a_real_guest_run(tmp_path):
    """examples/studies/5-tcm.toml in an arm64 guest (about 2 minutes), then its section."""
    from kperfdiff import studies
    from kperfdiff.store import Store
    study = ROOT / "examples" / "studies" / "5-tcm.toml"
    p = kperfdiff("--store", tmp_path / "k.db", "studies", "run", study, "-o", tmp_path / "s.html")
    assert p.returncode == 0, p.stderr[-2000:]
    exp, _ = studies.load(study)
    sec = studies.section(Store.open(tmp_path / "k.db", create=False), exp)
    assert sec.complete and sec.emulated
    titles = [t.title for t in sec.tables]
    assert any("Each thesis group alone" in t for t in titles)
    groups = next(t for t in sec.tables if "Each thesis group alone" in t.title)
    assert len(groups.rows) == 15 and groups.columns[3:-1] == exp.benchmarks
    assert sec.direction.agrees != "unknown" and sec.mechanism.agrees != "unknown"
    assert "Each thesis group" in (tmp_path / "s.html").read_text()
