"""The cross-architecture diff on real profiles of one Debian 6.1 kernel on an arm64 and an x86_64
guest (tests/data/perfdata/xarch): no renamed twin is left in the architecture-specific lists,
inferred twins are found with their evidence, and architecture-only work stays unpaired."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from support import DATA, assert_one_sentence_error, run_cli
from fuzzing import fuzz_maps
from kperfdiff.analysis import twins
from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
from kperfdiff.ingest.load import load
from kperfdiff.render import diff as render
from kperfdiff.symbols.equivalence import load_roles
from kperfdiff.symbols.normalise import normalise

XARCH = DATA / "perfdata" / "xarch"
BENCHES = ("proc.fork", "proc.exec", "proc.shell", "fault.anon.4k")

# Names the study's readers took for architecture-only work, and the twins the table's rules
# and roles now pair (issue 12), plus the entry and IRQ paths of these profiles.
RENAMED = {"memset_erms", "memcpy_erms", "memmove_erms", "__memset", "__memcpy", "__memmove", "clear_page_erms",
           "__pi_clear_page", "flush_tlb_mm_range", "tlb_flush", "_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq",
           "_raw_write_unlock_irq", "arch_local_irq_restore", "arch_local_irq_enable", "arch_local_irq_save",
           "arch_local_irq_disable", "el0_svc", "el0_svc_common", "invoke_syscall", "do_el0_svc", "do_syscall_64",
           "el0_da", "do_mem_abort", "exc_page_fault", "do_user_addr_fault", "finish_task_switch"}
ARCH_ONLY = "read_sanitised_ftr_reg"     # arm64's emulation of ID-register reads from user space


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("xarch")
    for arch in ("arm64", "x86_64"):
        (out / arch).mkdir()
        for src in (XARCH / arch).glob("*.gz"):
            with gzip.open(src, "rb") as f, open(out / arch / src.name[:-3], "wb") as g:
                shutil.copyfileobj(f, g)
    return out


@pytest.fixture(scope="module")
def profiles(fixtures):
    return {(arch, b): load(fixtures / arch / f"{b}.perf.data", kallsyms=fixtures / arch / "kallsyms")
            for arch in ("arm64", "x86_64") for b in BENCHES}


TABLE = load_roles()


def _twin_key(name: str) -> str:
    return TABLE.role_of(name) or TABLE.canonical(name)


def _counterparts(prof) -> set[str]:
    """Role or renamed name of every kernel function on the profile's stacks."""
    return {_twin_key(normalise(s.name)) for s, w in zip(prof.symbols, prof.children_weight) if s.kernel and w > 0}


def _specific(res, min_share: float = 0.0) -> set[str]:
    """The names in the architecture-specific lists (rows of at least ``min_share`` %)."""
    names = set()
    for r in res.only_a + res.only_b:
        if max(r.value_a, r.value_b) >= min_share:
            names.add(r.symbol)
            names.update(r.names_a + r.names_b)
    return names


@pytest.mark.parametrize("children", [False, True])
def test_no_renamed_twin_left_in_the_specific_lists(profiles, children):
    for b in BENCHES:
        res = diff_profiles([profiles["arm64", b]], [profiles["x86_64", b]], DiffOptions(top=0, children=children))
        assert res.side_a.arch == "arm64" and res.side_b.arch == "x86_64"
        # A name of the list left in a specific list is a renamed twin only if the other side
        # runs its counterpart (same name after the rules, or same role). arm64's __memset in
        # fault.anon.4k is called from handle_mm_fault, and x86 calls no memset there at all.
        for rows, other in ((res.only_a, profiles["x86_64", b]), (res.only_b, profiles["arm64", b])):
            theirs = _counterparts(other)
            left = {r.symbol for r in rows if r.symbol in RENAMED and _twin_key(r.symbol) in theirs}
            assert not left, (b, left)
        # and they are compared, under a rule's name or a role
        common = {r.symbol for r in res.common}
        assert "[page fault entry]" in common and "clear_page" in common, (b, sorted(common)[:20])
    # Without the table the same lists are full of them: the test can fail.
    off = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]],
                        DiffOptions(top=0, equivalence=False, infer="off"))
    assert {"memset_erms", "el0_da", "exc_page_fault"} <= _specific(off)


def test_rules_show_the_names_they_merged(profiles):
    res = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]], DiffOptions(top=0))
    rows = {r.symbol: r for r in res.common}
    ms = rows["memset"]
    assert ms.names_a == ["__memset"] and "memset_erms" in ms.names_b
    assert set(ms.rules) == {"tuned string routine", "string routine alias"}
    ex = rows["sys_execve"]     # __arm64_sys_execve | __x64_sys_execve (children of the wrappers)
    assert ex.rules == ["syscall wrapper"]
    text = render.render(res, "text")
    assert "memset (arm64: __memset; x86_64: memset_erms" in text
    irq = rows["[interrupts off/on]"]
    assert "arch_local_irq_restore" in irq.members_a and "_raw_spin_unlock_irqrestore" in irq.members_b


def test_architecture_only_work_stays_specific_and_unpaired(profiles):
    for children in (False, True):
        for equivalence in (True, False):
            for b in ("proc.exec", "proc.shell"):
                res = diff_profiles([profiles["arm64", b]], [profiles["x86_64", b]],
                                    DiffOptions(top=0, children=children, equivalence=equivalence))
                assert ARCH_ONLY in {r.symbol for r in res.only_a}
                paired = [t for t in res.twins if t.accepted and (ARCH_ONLY in t.a or ARCH_ONLY in t.b)]
                assert not paired, paired
                # nor taken for code x86 inlined (its caller do_set_pte runs on both)
                assert not [i for i in res.inlined if ARCH_ONLY in i.function], res.inlined


def test_functions_the_other_side_inlined(profiles):
    """A side-specific function whose shared caller, on the other side, calls its callee directly:
    x86 keeps do_fault out of line, arm64 compiles it into __handle_mm_fault."""
    res = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]], DiffOptions(top=0))
    found = {(i.function, i.side): i for i in res.inlined}
    df = found["do_fault", "b"]
    assert df.caller == "__handle_mm_fault" and df.caller_fraction > 0.9 and df.callee == "filemap_map_pages"
    assert "do_fault" in {r.symbol for r in res.only_b}     # still listed: the hint explains it
    fa = diff_profiles([profiles["arm64", "fault.anon.4k"]], [profiles["x86_64", "fault.anon.4k"]], DiffOptions())
    az = next(i for i in fa.inlined if i.function == "alloc_zeroed_user_highpage_movable")
    assert az.side == "a" and az.caller == "__handle_mm_fault" and az.callee == "vma_alloc_folio"
    text = render.render(fa, "text")
    assert "x86_64 calls vma_alloc_folio from __handle_mm_fault directly" in text


def _accepted(res) -> set[tuple[str, str]]:
    return {(t.a, t.b) for t in res.twins if t.accepted}


def test_inference_finds_the_known_twins_without_the_table(profiles):
    """With rules and roles off, the call graph alone pairs the syscall wrappers and the
    page-fault entry paths of the two architectures."""
    opts = DiffOptions(top=0, children=True, equivalence=False)
    exec_ = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]], opts)
    found = _accepted(exec_)
    for pair in (("__arm64_sys_execve", "__x64_sys_execve"), ("__arm64_sys_mprotect", "__x64_sys_mprotect")):
        assert pair in found, sorted(found)
    tw = next(t for t in exec_.twins if (t.a, t.b) == ("__arm64_sys_execve", "__x64_sys_execve"))
    assert tw.score >= 0.5 and any(e.relation == "callee" and e.context == "do_execveat_common" for e in tw.evidence)
    fault = _accepted(diff_profiles([profiles["arm64", "fault.anon.4k"]], [profiles["x86_64", "fault.anon.4k"]], opts))
    assert any("do_mem_abort" in a and "exc_page_fault" in b for a, b in fault), sorted(fault)
    assert any("__arm64_sys_munmap" in a and "__x64_sys_munmap" in b for a, b in fault), sorted(fault)
    # Every accepted pair is one arm64 and one x86 path, each function used once.
    for res in (exec_,):
        used = [n for t in res.twins if t.accepted for n in (t.a, t.b)]
        assert len(used) == len(set(used))


def test_inference_beyond_the_table(profiles):
    """With the table on, what is left for inference is what no rule knows: arm64 has no
    readlink system call, so glibc's readlink() is readlinkat there."""
    res = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]],
                        DiffOptions(top=0, children=True))
    assert res.inferred and _accepted(res) == {("__arm64_sys_readlinkat", "__x64_sys_readlink")}
    acc = diff_profiles([profiles["arm64", "proc.exec"]], [profiles["x86_64", "proc.exec"]],
                        DiffOptions(top=0, children=True, accept_inferred=True))
    row = next(r for r in acc.common if r.role == "inferred")
    assert row.symbol == "__arm64_sys_readlinkat \u2248 __x64_sys_readlink"
    assert row.members_a == ["__arm64_sys_readlinkat"] and row.members_b == ["__x64_sys_readlink"]
    assert "__x64_sys_readlink" not in {r.symbol for r in acc.only_b}
    assert "__x64_sys_readlink" in {r.symbol for r in res.only_b}
    # Same architecture on both sides: no inference unless asked for.
    same = diff_profiles([profiles["x86_64", "proc.exec"]], [profiles["x86_64", "proc.shell"]], DiffOptions())
    assert not same.inferred and not same.twins


def test_twins_cli_sections_map_and_json(fixtures, tmp_path):
    a = fixtures / "arm64" / "proc.exec.perf.data"
    b = fixtures / "x86_64" / "proc.exec.perf.data"
    common = ["--kallsyms-a", fixtures / "arm64" / "kallsyms", "--kallsyms-b", fixtures / "x86_64" / "kallsyms",
              "--children"]
    text = run_cli("diff", a, b, *common, check=0).stdout
    assert "\nInferred twins among the side-specific functions" in text
    line = next(ln for ln in text.splitlines() if "__arm64_sys_readlinkat" in ln and "accepted" in ln)
    assert "callee do_readlinkat 100%/100%" in line
    doc = json.loads(run_cli("diff", a, b, *common, "--format", "json", "--top", "0", check=0).stdout)
    acc = [t for t in doc["twins"] if t["accepted"]]
    assert [(t["a"], t["b"]) for t in acc] == [("__arm64_sys_readlinkat", "__x64_sys_readlink")]
    assert acc[0]["evidence"][0]["relation"] in ("caller", "callee") and 0.5 <= acc[0]["score"] <= 1
    assert any(not t["accepted"] for t in doc["twins"])      # ambiguous ones are listed in JSON
    # The written map is an equivalence map: passed back with --map, the pair is one role row.
    m = tmp_path / "twins.toml"
    run_cli("diff", a, b, *common, "--inferred-map", m, check=0)
    table = load_roles([m])
    assert table.role_of("__x64_sys_readlink") == table.role_of("__arm64_sys_readlinkat") is not None
    mapped = json.loads(run_cli("diff", a, b, *common, "--map", m, "--format", "json", "--top", "0",
                                check=0).stdout)
    row = next(r for r in mapped["common"] if r.get("role") == "__arm64_sys_readlinkat / __x64_sys_readlink")
    assert row["members_a"] == ["__arm64_sys_readlinkat"] and row["members_b"] == ["__x64_sys_readlink"]
    none = run_cli("diff", a, b, *common, "--no-infer", check=0).stdout
    assert "Inferred twins" not in none
    p = run_cli("diff", a, b, *common, "--infer", "--no-infer")
    assert_one_sentence_error(p)


def test_inference_on_synthetic_stacks():
    """The pairing rules on stacks small enough to check by hand: a reciprocal best match with
    specific evidence is accepted; two helpers under one shared caller are not; entry code alone
    is no evidence."""
    def side(stacks, names, samples=1000):
        frame = {i: n for i, n in enumerate(names)}
        total = float(sum(stacks.values()))
        return twins.SideStacks(stacks=stacks, frame=frame, total=total, samples=samples)
    # A: entry -> disp -> f -> work ; entry -> disp -> h1 ; B: entry -> disp -> g -> work ; disp -> h2
    a = side({(0, 1, 2, 3): 50.0, (0, 1, 4): 30.0, (0, 1, 5): 20.0}, ["entry", "disp", "f_a", "work", "h1", "k1"])
    b = side({(0, 1, 2, 3): 50.0, (0, 1, 4): 30.0, (0, 1, 5): 20.0}, ["entry", "disp", "g_b", "work", "h2", "k2"])
    found = twins.infer_twins([a], [b], {"f_a", "h1", "k1"}, {"g_b", "h2", "k2"}, {"entry", "disp", "work"})
    acc = {(t.a, t.b) for t in found if t.accepted}
    assert acc == {(("f_a",), ("g_b",))}
    tw = next(t for t in found if t.accepted)
    assert tw.score == pytest.approx(1.0) and tw.callee_score == pytest.approx(1.0)
    # h1/k1 and h2/k2 are leaves under one caller: they match each other, ambiguously
    amb = [t for t in found if not t.accepted]
    assert amb and all(t.runner_up for t in amb)
    # A chain of one-side-only frames is one group, named in call order.
    c = side({(0, 1, 2, 3): 100.0}, ["entry", "x1", "x2", "work"])
    d = side({(0, 1, 2): 100.0}, ["entry", "y1", "work"])
    found = twins.infer_twins([c], [d], {"x1", "x2"}, {"y1"}, {"work"})
    assert [(t.a, t.b, t.accepted) for t in found] == [(("x1", "x2"), ("y1",), True)]
    # Entry code alone (no shared callee) is no evidence.
    e = side({(0,): 100.0}, ["only_a"])
    f = side({(0,): 100.0}, ["only_b"])
    found = twins.infer_twins([e], [f], {"only_a"}, {"only_b"}, set())
    assert not any(t.accepted for t in found)
    # Too few samples: evidence, not a match.
    g = side({(0, 1, 2, 3): 100.0}, ["entry", "x1", "x2", "work"], samples=5)
    found = twins.infer_twins([g], [d], {"x1", "x2"}, {"y1"}, {"work"})
    assert found and not found[0].accepted


def test_fuzz_equivalence_maps(tmp_path):
    """Hostile --map files: a bounded run of the map fuzzer (fuzz/fuzzing.py fuzz_maps) ends in a
    table or one InputError, never a crash or an empty renamed name."""
    counts, examples = fuzz_maps(tmp_path, executions=400, seed=12)
    assert not examples, examples
    assert counts["ok"] > 0 and counts["error"] > 0, counts
