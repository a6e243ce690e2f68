"""The studies: their files, the [study] table, the sections and the report.

The sections are computed from real runs: a small local GUPS experiment
(the superpages study's kind, with tiny tables) and the recorded arm64 and
x86_64 profiles of tests/data/perfdata/xarch for the cross-architecture
ranking.
"""
from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys

import pytest

from kperfdiff.experiments import file as exp_file, matrix as exp_matrix
from kperfdiff import studies
from kperfdiff.analysis.profile_diff import DiffOptions, diff_profiles
from kperfdiff.core.errors import InputError
from kperfdiff.ingest.load import load
from kperfdiff.render import studies as rstudies
from kperfdiff.store import Store
from kperfdiff.studies import xarch
from support import DATA, ROOT

STUDY_FILES = sorted((ROOT / "examples/studies").glob("*.toml"))
XARCH = DATA / "perfdata/xarch"


def kperfdiff(*args, store=None):
    argv = [sys.executable, "-m", "kperfdiff"] + (["--store", str(store)] if store else []) + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


# -- the files ---------------------------------------------------------------------

def test_every_study_file_is_a_checked_experiment_with_its_study_told():
    assert len(STUDY_FILES) == 5, [p.name for p in STUDY_FILES]
    kinds, names = set(), set()
    for p in STUDY_FILES:
        exp, st = studies.load(p)
        assert st.title and st.source and st.measured and st.found and st.differs, p.name
        assert re.search(r"\d", st.found), f"{p.name}: the study's figures belong in found"
        kinds.add(st.kind)
        names.add(exp.name)
        exp_matrix.plan(exp)     # the matrix resolves (benchmarks, placeholders, parameters)
    assert kinds == set(studies.KINDS) and len(names) == 5


def test_the_study_table_is_not_part_of_an_experiments_identity(tmp_path):
    base = {"name": "s", "benchmarks": ["syscall.null"], "variant": [{"label": "a"}]}
    plain = exp_file.parse_data(base)
    told = exp_file.parse_data(dict(base, study={"kind": "superpages", "title": "T", "differs": ["x", "y"]}))
    assert told.study["differs"] == ["x", "y"]
    assert told.file_hash() == plain.file_hash()     # rewording a study never re-measures it


@pytest.mark.parametrize("study, message", [
    (None, "has no \\[study\\] table"),
    ({"kind": "nope", "title": "t"}, "study.kind must be one of"),
    ({"kind": "tcm", "colour": "red"}, "study.colour is not a study field"),
    ({"kind": "tcm", "title": ["a"]}, "study.title must be a string"),
])
def test_a_wrong_study_table_is_one_sentence(study, message):
    data = {"name": "s", "benchmarks": ["syscall.null"], "variant": [{"label": "a"}]}
    if study is not None:
        data["study"] = study
    exp = exp_file.parse_data(data, "f.toml")
    with pytest.raises(InputError, match=message):
        studies.study_of(exp)


def test_a_study_table_of_the_wrong_shape_is_refused_by_the_parser():
    data = {"name": "s", "benchmarks": ["syscall.null"], "variant": [{"label": "a"}]}
    with pytest.raises(exp_file.ExperimentError, match="study must be a table"):
        exp_file.parse_data(dict(data, study="x"), "f.toml")
    with pytest.raises(exp_file.ExperimentError, match="must be a string or a number"):
        exp_file.parse_data(dict(data, study={"found": {"a": 1}}), "f.toml")


def test_the_cli_refuses_a_plain_experiment_file_and_duplicate_names(tmp_path):
    r = kperfdiff("studies", "report", str(ROOT / "examples/superpages.toml"), store=tmp_path / "s.db")
    assert r.returncode != 0 and "has no [study] table" in r.stderr and "Traceback" not in r.stderr
    f = STUDY_FILES[0]
    r = kperfdiff("studies", "report", str(f), str(f), store=tmp_path / "s.db")
    assert r.returncode != 0 and "two study files name the experiment" in r.stderr


# -- a section from a real run ------------------------------------------------------

SUPERPAGES_TINY = """
name = "tiny-superpages"
benchmarks = ["gups.{pages}"]
cores = [1]
reps = 3
intervals = 3
tiny = true
baseline = "4k"
[study]
kind = "superpages"
title = "Superpages <tiny>"
source = "test"
measured = "GUPS"
found = "1.5x"
differs = ["tiny tables & no knobs"]
[[variant]]
label = "4k"
vars = { pages = "4k" }
[[variant]]
label = "huge"
vars = { pages = "huge" }
"""


@pytest.fixture(scope="module")
def superpages_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("studies")
    f = d / "tiny.toml"
    f.write_text(SUPERPAGES_TINY)
    r = kperfdiff("studies", "run", str(f), "-o", str(d / "r.html"), "--no-progress", store=d / "s.db")
    assert r.returncode == 0, r.stderr[-2000:]
    return d, f, r


def test_a_run_study_gets_a_section_with_intervals_counters_and_verdicts(superpages_store):
    d, f, r = superpages_store
    exp, _ = studies.load(f)
    sec = studies.section(Store.open(d / "s.db", create=False), exp)
    assert sec.complete and not sec.emulated
    gups, counters = sec.tables
    assert [row[0] for row in gups.rows] == ["4k", "huge"]
    assert all(re.fullmatch(r"[\d.]+ \[[\d.]+, [\d.]+\] GUP/s \(3 reps\)", row[2]) for row in gups.rows), gups.rows
    assert counters.rows[0][0].startswith("promotions at fault") and len(counters.rows) == 5
    assert sec.direction.agrees in ("yes", "partly", "no") and "1.50x" in sec.direction.text
    assert sec.mechanism.agrees != "unknown"
    assert "speed-up" in sec.paragraphs[0]
    assert "## 1. Superpages <tiny> (test)" in r.stdout


def test_the_report_escapes_what_files_say_and_fetches_nothing(superpages_store):
    d, f, r = superpages_store
    html = (d / "r.html").read_text()
    assert "Superpages &lt;tiny&gt;" in html and "tiny tables &amp; no knobs" in html
    assert "<tiny>" not in html
    assert "default-src 'none'" in html and "<script" not in html and "http" not in html.split("</head>")[1]
    assert html.count('class="badge"') == 2


def test_a_study_not_run_yet_says_how_to_run_it(tmp_path):
    f = tmp_path / "tiny.toml"
    f.write_text(SUPERPAGES_TINY)
    r = kperfdiff("studies", "report", str(f), "-o", str(tmp_path / "r.html"), store=tmp_path / "s.db")
    assert r.returncode != 0 and "there is no results store" in r.stderr     # report never creates one
    Store.open(tmp_path / "s.db").conn.close()
    r = kperfdiff("studies", "report", str(f), "-o", str(tmp_path / "r.html"), store=tmp_path / "s.db")
    assert r.returncode == 0, r.stderr
    assert "[incomplete]" in r.stdout and "Not run yet" in r.stdout
    html = (tmp_path / "r.html").read_text()
    assert "not known" in html and "kperfdiff studies run" in html


# -- the cross-architecture ranking on recorded profiles ------------------------------

@pytest.fixture(scope="module")
def xarch_fork(tmp_path_factory):
    out = tmp_path_factory.mktemp("xarch")
    profs = {}
    for arch in ("arm64", "x86_64"):
        for name in ("proc.fork.perf.data", "kallsyms"):
            with gzip.open(XARCH / arch / f"{name}.gz", "rb") as fi, open(out / f"{arch}.{name}", "wb") as fo:
                shutil.copyfileobj(fi, fo)
        profs[arch] = load(out / f"{arch}.proc.fork.perf.data", kallsyms=out / f"{arch}.kallsyms")
    return diff_profiles([profs["arm64"]], [profs["x86_64"]], DiffOptions(labels=("arm64", "x86_64"), top=5))


def test_memory_management_is_told_by_the_words_of_a_name():
    for name in ("unmap_page_range", "copy_pte_range", "[page fault entry]", "__flush_tlb_range", "el0_da",
                 "do_mem_abort", "caches_clean_inval_pou", "folio_unlock", "clear_page"):
        assert xarch.is_mm(name) or name == "el0_da", name
    for name in ("__set_task_comm", "schedule", "_raw_spin_lock", "do_syscall_64", "memset"):
        assert not xarch.is_mm(name), name


def test_arm_specific_memory_costs_rank_larger_arm_shares_first(xarch_fork):
    costs = xarch.arm_mm_costs(xarch_fork, arm_is_a=True, top=50)
    assert costs, "fork on arm64 has memory-management costs larger than on x86_64"
    diffs = [a - b for _, a, b, _ in costs]
    assert diffs == sorted(diffs, reverse=True) and all(d > 0 for d in diffs)
    assert all(xarch.is_mm(s) for s, *_ in costs)
    share_arm, share_x86 = xarch.mm_share(xarch_fork, True), xarch.mm_share(xarch_fork, False)
    assert 0 < share_arm <= 100 and 0 < share_x86 <= 100


def test_the_study_report_renders_rankings_in_the_studys_layout(xarch_fork):
    from kperfdiff.analysis.report_data import ProfileDiff
    st = studies.Study(kind="xarch", title="Cross", source="2011", measured="m", found="f 1", differs=["d"])
    pd = ProfileDiff("x86_64", "arm64", "proc.fork", 1, 0.0, result=xarch_fork, title="proc.fork")
    sec = studies.Section(st, "e", diffs=[pd], direction=studies.Verdict("partly", "p"), emulated=True)
    html = rstudies.to_html([sec], "now")
    assert "Common kernel functions: top 5 of " in html and "EMULATED" in html
    text = rstudies.to_text([sec])
    assert "Common kernel functions: top 5 of " in text and re.search(r"\n *arm64 +x86_64 +delta +B/A  symbol\n", text)
    with pytest.raises(ValueError):
        studies.Verdict("maybe", "x")


def test_a_study_centre_says_what_an_operation_is():
    """A study table's centre names the operation of its benchmark's ns/op (as compare does)."""
    from types import SimpleNamespace
    from kperfdiff.studies.study import centre_text
    reps = [[200.0, 201.0], [205.0], [210.0]]
    s = SimpleNamespace(status="ok", pooled=True, centre=205.0, reps=reps, unit="ns/op", benchmark="fault.anon.huge")
    text = centre_text(s)
    assert "ns per 4 KB page" in text and "ns/op" not in text, text
    assert "ns per fork" in centre_text(SimpleNamespace(**{**vars(s), "benchmark": "proc.fork"}))
