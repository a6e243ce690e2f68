"""One set of conventions over every command (docs/conventions.md): --format from one set, in one
order; -o FILE with - for standard output wherever output is written; one --top default."""
import argparse
import gzip
import re

from support import DATA, assert_one_sentence_error, run_cli
from store.test_history import populate
from kperfdiff import store as st
from kperfdiff.commands import build_parser
from kperfdiff.commands.parsing import OUTPUT_FORMATS, TOP

FOLDED = DATA / "diff"


def parsers(p: argparse.ArgumentParser, name: str = "kperfdiff"):
    """Every (sub-)command's parser, by its full name."""
    yield name, p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub, sp in a.choices.items():
                yield from parsers(sp, f"{name} {sub}")


def option(p: argparse.ArgumentParser, flag: str):
    return next((a for a in p._actions if flag in a.option_strings), None)


def test_every_format_is_a_subset_of_the_one_set_in_its_order():
    seen = 0
    for name, p in parsers(build_parser()):
        fmt = option(p, "--format")
        if fmt is None:
            continue
        seen += 1
        assert list(fmt.choices) == [f for f in OUTPUT_FORMATS if f in fmt.choices], name
        assert fmt.default in fmt.choices, name
        out = option(p, "-o")
        assert out is not None and "--output" in out.option_strings, f"{name} has --format but no -o"
        assert "- for standard output" in out.help or "- for" in out.help, name
    assert seen >= 14


def test_every_top_has_the_one_default():
    tops = {name: option(p, "--top").default for name, p in parsers(build_parser()) if option(p, "--top")}
    assert set(tops) >= {"kperfdiff diff", "kperfdiff changes", "kperfdiff bisect", "kperfdiff place plan"}
    assert set(tops.values()) == {TOP} == {10}


def test_diff_writes_to_standard_output_or_a_file_alike(tmp_path):
    a, b = FOLDED / "x86_64.folded", FOLDED / "arm64.folded"
    plain = run_cli("diff", a, b, "--format", "markdown", check=0).stdout
    assert run_cli("diff", a, b, "--format", "markdown", "-o", "-", check=0).stdout == plain
    out = tmp_path / "d.md"
    p = run_cli("diff", a, b, "--format", "markdown", "-o", out, check=0)
    assert p.stdout == "" and out.read_text() == plain
    assert not (tmp_path / "-").exists()


def test_a_failed_write_leaves_no_file(tmp_path):
    p = run_cli("diff", FOLDED / "x86_64.folded", FOLDED / "arm64.folded", "-o", tmp_path / "no" / "d.txt")
    assert_one_sentence_error(p)
    assert "cannot write" in p.stderr and not (tmp_path / "no").exists()


def test_report_to_standard_output(tmp_path):
    """-o - is standard output: the HTML page there, no file named '-'; Markdown (plots in files
    beside it) is refused in one sentence before any work."""
    s = st.Store.open(tmp_path / "s.db")
    runs = populate(s, [100.0, 90.0])
    s.conn.close()
    p = run_cli("--store", tmp_path / "s.db", "report", *(r.id for r in runs), "-o", "-", cwd=tmp_path, check=0)
    assert p.stdout.startswith("<!DOCTYPE html>") and p.stdout.rstrip().endswith("</html>")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["s.db"]
    p = run_cli("--store", tmp_path / "s.db", "report", *(r.id for r in runs), "--format", "markdown", "-o", "-",
                cwd=tmp_path)
    assert_one_sentence_error(p)
    assert "needs -o FILE" in p.stderr and sorted(f.name for f in tmp_path.iterdir()) == ["s.db"]


def test_messages_name_the_files_the_user_gave(tmp_path):
    """A gzip input is read from a temporary copy; its warnings and errors name the .gz file given,
    never the copy in /tmp/kperfdiff-input-*."""
    gz = DATA / "perfdata" / "xarch" / "x86_64" / "proc.fork.perf.data.gz"
    p = run_cli("diff", gz, gz, check=0)
    warnings = [ln for ln in p.stderr.splitlines() if "warning" in ln]
    assert warnings and all(f"warning: {gz}: " in ln for ln in warnings), p.stderr
    cut = tmp_path / "cut.perf.data.gz"
    cut.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes())[:3000]))
    p = run_cli("diff", cut, gz, check=0)
    assert f"warning: {cut} is truncated" in p.stderr and "kperfdiff-input" not in p.stderr
    bad = tmp_path / "bad.perf.data.gz"
    bad.write_bytes(gzip.compress(b"PERFILE2garbage"))
    p = run_cli("diff", bad, gz)
    assert_one_sentence_error(p)
    assert p.stderr.startswith(f"kperfdiff: {bad} is cut short") and "kperfdiff-input" not in p.stderr


def test_the_docs_table_is_the_commands():
    """docs/conventions.md's table of formats is what the commands take, default in bold."""
    from support import ROOT
    rows = {}
    for ln in (ROOT / "docs" / "conventions.md").read_text().splitlines():
        m = re.match(r"\| `(kperfdiff [a-z ]+)`[^|]*\|(.*)\|$", ln)
        if m:
            cells = [c.strip() for c in m[2].split("|")]
            rows[m[1]] = ([f for f, c in zip(OUTPUT_FORMATS, cells) if c], next(
                f for f, c in zip(OUTPUT_FORMATS, cells) if c == "**x**"))
    want = {name: (list(option(p, "--format").choices), option(p, "--format").default)
            for name, p in parsers(build_parser()) if option(p, "--format")}
    assert rows == want


def test_bench_catalogue_in_markdown():
    md = run_cli("bench", "--list", "--format", "markdown", check=0).stdout
    assert md.startswith("| benchmark | unit | better | suite | exercises |\n|:---|")
