"""kperfdiff place through the installed CLI, on a folded profile and a System.map."""
import json

import pytest

import support
from support import ROOT, assert_one_sentence_error, run_cli
from kperfdiff.place.emit import parse_linker_fragment

DATA = support.DATA / "place"
PROF = DATA / "forkexec.folded"
MAP = DATA / "System.map"
HW = ROOT / "examples/place/arm926-tcm.toml"
BASE = [PROF, "--sizes", MAP, "--hw", HW]


def test_plan_writes_build_outputs(tmp_path):
    ld, ann, order = tmp_path / "itcm.ld", tmp_path / "tcm.txt", tmp_path / "order.txt"
    p = run_cli("place", "plan", *BASE, "--capacity", "8K", "--linker-script", ld, "--annotations", ann,
                "--ordering", order, check=0)
    assert ">> Predicted gain, ITCM of 8192 bytes" in p.stdout
    assert "approximate" in p.stdout
    frag = parse_linker_fragment(ld.read_text())
    assert frag["capacity"] == 8192 and frag["functions"]
    # entry and noinstr code never placed
    assert not {"do_syscall_64", "exc_page_fault", "entry_SYSCALL_64_after_hwframe"} & set(frag["functions"])
    tags = dict(line.split("\t")[::-1] for line in ann.read_text().splitlines() if not line.startswith("#"))
    assert set(tags) == set(frag["functions"])
    rest = order.read_text().split()
    assert rest and not set(rest) & set(frag["functions"])


def test_plan_json_methods_agree_with_exact():
    p = run_cli("place", "plan", *BASE, "--capacity", "8K", "--format", "json", "--simulate", check=0)
    doc = json.loads(p.stdout)
    assert doc["version"] == 1 and doc["capacity"] == 8192
    m = doc["methods"]
    assert m["exact"]["prediction"]["gain"] >= m["greedy"]["prediction"]["gain"] - 1e-6
    assert m["exact"]["prediction"]["gain"] >= m["groups"]["prediction"]["gain"] - 1e-6
    assert m["exact"]["prediction"]["bytes"] <= 8192
    assert [r["label"] for r in doc["simulation"]][0] == "no placement"


def test_plan_markdown():
    p = run_cli("place", "plan", *BASE, "--method", "greedy", "--format", "markdown", check=0)
    assert p.stdout.startswith("### ") and "| greedy |" in p.stdout


def test_sweep_and_model_and_simulate(tmp_path):
    p = run_cli("place", "sweep", *BASE, "--capacities", "4K,16K", "--method", "all", check=0)
    assert "4K" in p.stdout and "16K" in p.stdout
    pl = tmp_path / "mine.txt"
    pl.write_text("# by hand\nclear_page_erms\ndo_anonymous_page\n")
    p = run_cli("place", "model", *BASE, "--placement", pl, "--format", "json", check=0)
    doc = json.loads(p.stdout)
    assert doc["placement"] == ["clear_page_erms", "do_anonymous_page"] and doc["fits"]
    p = run_cli("place", "simulate", *BASE, "--capacity", "4K", "--placement", pl, "--events", "3000", check=0)
    assert "file mine.txt" in p.stdout and "group fork" in p.stdout


@pytest.mark.parametrize("extra, words", [
    (["--capacity", "0"], "capacity must be above zero"),
    (["--capacity", "lots"], "not a size in bytes"),
])
def test_plan_bad_capacity(extra, words):
    p = run_cli("place", "plan", *BASE, *extra)
    assert_one_sentence_error(p)
    assert words in p.stderr


def test_bad_inputs_one_sentence(tmp_path):
    other = tmp_path / "System.map"
    other.write_text("ffffffff81000000 T unrelated_function\nffffffff81000100 T _etext\n")
    p = run_cli("place", "plan", PROF, "--sizes", other, "--hw", HW)
    assert_one_sentence_error(p)
    assert "is it the System.map" in p.stderr

    bad = tmp_path / "hw.toml"
    bad.write_text("[icache]\nsize = \n")
    p = run_cli("place", "plan", PROF, "--sizes", MAP, "--hw", bad)
    assert_one_sentence_error(p)
    assert "not valid TOML" in p.stderr

    g = tmp_path / "groups.toml"
    g.write_text('[groups.mine]\nfunctions = ["copy_process", "not_a_kernel_function"]\n')
    p = run_cli("place", "plan", *BASE, "--groups", g)
    assert_one_sentence_error(p)
    assert "not_a_kernel_function" in p.stderr

    pl = tmp_path / "pl.txt"
    pl.write_text("do_syscall_64\n")
    p = run_cli("place", "model", *BASE, "--placement", pl)
    assert_one_sentence_error(p)
    assert "excluded: noinstr" in p.stderr

    p = run_cli("place")
    assert_one_sentence_error(p)


def test_plan_exact_without_time_keeps_greedy_and_states_the_gap():
    p = run_cli("place", "plan", *BASE, "--capacity", "8K", "--method", "exact", "--time-limit", "0",
                "--format", "json", check=0)
    ex = json.loads(p.stdout)["methods"]["exact"]
    assert "greedy placement kept" in ex["status"]
    assert ex["prediction"]["bytes"] <= 8192 and ex["placed"]
    assert ex["gap"] is not None and ex["bound"] >= ex["prediction"]["gain"]
    full = json.loads(run_cli("place", "plan", *BASE, "--capacity", "8K", "--method", "exact", "--format", "json",
                              check=0).stdout)["methods"]["exact"]
    assert full["status"] == "optimal" and full["bound"] >= full["prediction"]["gain"] >= ex["prediction"]["gain"]


def test_negative_time_limit_is_one_sentence():
    assert_one_sentence_error(run_cli("place", "plan", *BASE, "--time-limit", "-1"))
