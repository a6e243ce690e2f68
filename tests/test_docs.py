"""The README and the manual behind it (docs/) stay true: the README opens with its title and the
two set-up commands and fits a few screens, every relative link leads to a file (and heading)
that exists, every `kperfdiff` command line they show names a sub-command and flags that
`--help` knows, every other long flag they quote exists somewhere, and the architecture page's
module table is exactly what the tree makes of it: every module, with its docstring's first sentence.

``python tests/test_docs.py --write`` regenerates that table (between the ``modules`` markers of
docs/architecture.md) from the tree: each module's first docstring sentence."""
import ast
import contextlib
import functools
import importlib
import io
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())   # wherever tests/ puts this file
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
SRC = ROOT / "src" / "kperfdiff"
NATIVE = ROOT / "native" / "src"
BEGIN, END = "<!-- modules:begin -->", "<!-- modules:end -->"
MAX_README_LINES = 300


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


# A step of a walk-through (docs/development.md): an HTML comment naming the walk-through and what the
# fenced block right after it is: a new file (write PATH), a change as `git diff` prints it (apply), or
# command lines (run). Those blocks are about the tree the walk-through makes, not this one:
# tests/test_development.py performs them in a copy, and the checks here leave them out.
STEP = re.compile(r"^<!-- walk-through (?P<name>[\w-]+): (?P<action>write|apply|run)(?: (?P<path>\S+))? -->\n"
                  r"(?P<fence>```|~~~)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*(?:\n|\Z)", re.M | re.S)


def written(page: Path) -> str:
    """A page's text as people wrote it about this tree: without the generated module table, whose
    text is the modules' own docstrings (test_architecture_page_lists_every_module_and_no_other checks
    it), and without the steps of walk-throughs (STEP), which tests/test_development.py performs."""
    text = page.read_text()
    if BEGIN in text and END in text:
        text = text.split(BEGIN, 1)[0] + text.split(END, 1)[1]
    return STEP.sub("", text)


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


# ---------------------------------------------------------------- markdown pieces

FENCE = re.compile(r"^\s*(```|~~~)")


def split_code(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, fenced code lines) of a Markdown text."""
    prose, code, inside = [], [], False
    for ln in text.splitlines():
        if FENCE.match(ln):
            inside = not inside
            continue
        (code if inside else prose).append(ln)
    return prose, code


def inline_code(prose: list[str]) -> list[str]:
    """The inline code spans of prose lines (single backticks, or double around a backtick), a span
    broken over two lines joined again."""
    spans = []
    for para in re.split(r"\n\s*\n", "\n".join(prose)):
        spans += [m.group(2) for m in re.finditer(r"(`+)(.+?)\1", para.replace("\n", " "))]
    return spans


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose, _ = split_code(text)
    seen: dict[str, int] = {}
    out = set()
    for ln in prose:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", ln)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(text: str) -> list[str]:
    """Targets of the Markdown links of a text's prose (inline code and code blocks left out)."""
    prose, _ = split_code(text)
    out = []
    for ln in prose:
        ln = re.sub(r"(`+).+?\1", "", ln)
        out += re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", ln)
    return out


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):     # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            bad.append(f"{target}: no heading #{anchor} in {_id(dest)}")
    return bad


# ---------------------------------------------------------------- commands and flags

GLOBAL_FLAGS = {"--store", "--debug", "--help", "--version"}
STOP = {"|", ">", ">>", "2>", "&", "&&", "||", ";", "#", "--", "<"}


def command_lines(text: str) -> list[str]:
    """Every `kperfdiff ...` invocation a page shows (code blocks and inline code), the text after
    `kperfdiff`, with backslash continuations joined."""
    prose, code = split_code(text)
    joined, buf = [], ""
    for ln in code:
        if ln.rstrip().endswith("\\"):
            buf += ln.rstrip()[:-1] + " "
            continue
        joined.append(buf + ln)
        buf = ""
    out = []
    for ln in joined + inline_code(prose):
        for m in re.finditer(r"(?:^|(?<=[\s;&|(\"'$]))(?:[\w./-]*/)?kperfdiff[ \t]+", ln):
            out.append(ln[m.end():])     # up to the line's end: _tokens stops at |, ;, >, # ...
    return out


def _tokens(rest: str) -> list[str]:
    toks = []
    for t in rest.split():
        if t in STOP or t.startswith("#") or t.startswith(">"):
            break
        toks.append(t.strip("[](){}\"'`,"))
    return toks


@functools.cache
def help_text(path: tuple[str, ...]) -> str:
    """What `kperfdiff PATH --help` prints, from `python -m kperfdiff` run in this process."""
    out, argv, columns = io.StringIO(), sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = ["kperfdiff", *path, "--help"], "200"
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit:
            runpy.run_module("kperfdiff", run_name="__main__", alter_sys=False)
    finally:
        sys.argv = argv
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    assert exit.value.code in (0, None), f"kperfdiff {' '.join(path)} --help exited {exit.value.code}"
    return out.getvalue()


def subcommands(path: tuple[str, ...]) -> set[str]:
    """The sub-commands `kperfdiff PATH --help` lists (argparse indents each by four spaces)."""
    return set(re.findall(r"^    (\w+)\s", help_text(path), re.M)) if len(path) < 3 else set()


def command_path(toks: list[str]) -> tuple[tuple[str, ...], list[str]]:
    path: tuple[str, ...] = ()
    while toks and toks[0] in subcommands(path):
        path, toks = (*path, toks[0]), toks[1:]
    return path, toks


def has_flag(help: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help) is not None


def flag_problems(page: Path) -> list[str]:
    bad = []
    for rest in command_lines(written(page)):
        toks = _tokens(rest)
        if not toks or toks[0].startswith("-") and toks[0] not in GLOBAL_FLAGS:
            continue
        while toks and toks[0] in GLOBAL_FLAGS:          # kperfdiff --store S runs
            toks = toks[2:] if toks[0] == "--store" else toks[1:]
        if not toks or not re.fullmatch(r"[a-z][a-z-]*", toks[0]):   # output ("kperfdiff lab-thp/4k rep 1"), RUN
            continue
        path, args = command_path(toks)
        if not path:
            bad.append(f"kperfdiff {rest.strip()}: no sub-command {toks[0]!r}")
            continue
        help = help_text(path)
        for a in args:
            flag = a.split("=", 1)[0]
            if re.fullmatch(r"--[a-z][a-z0-9-]*", flag) and flag not in GLOBAL_FLAGS and not has_flag(help, flag):
                bad.append(f"kperfdiff {' '.join(path)}: no option {flag} (in `kperfdiff {rest.strip()}`)")
    return bad


# Long options of other programs the pages quote (perf, the linker, valgrind, pip, pytest ...).
OTHER_PROGRAMS_FLAGS = {"--stdio", "--symbol-ordering-file", "--tool", "--no-children", "--durations", "--release",
                        "--example", "--manifest-path", "--call-graph"}


@functools.cache
def known_flags() -> str:
    """Every kperfdiff --help text, and the source of every script the pages name (benchmarks, validation, fuzzers, tests)."""
    helps = []
    todo = [()]
    while todo:
        path = todo.pop()
        helps.append(help_text(path))
        todo += [(*path, s) for s in subcommands(path)]
    scripts = [p.read_text() for d in ("benchmarks", "validation", "fuzz", "tests")
               for p in sorted((ROOT / d).rglob("*.py"))]
    return "\n".join(helps + scripts)


def quoted_flags(page: Path) -> set[str]:
    prose, code = split_code(written(page))
    flags = set()
    for span in inline_code(prose) + code:
        flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", span))
    return flags


REPO_PATH = re.compile(r"(?<![\w./-])((?:src|tests|harness|benchmarks|validation|fuzz|examples|native|docs)/[\w./-]*\w/?)")


def missing_paths(page: Path) -> list[str]:
    """Repository paths a page quotes (in code) that do not exist; paths with placeholders
    (``<family>``, ``*``, ``{a,b}``) are left alone."""
    prose, code = split_code(written(page))
    bad = set()
    for span in inline_code(prose) + code:
        for m in REPO_PATH.finditer(span):
            end = span[m.end():m.end() + 1]
            if end in ("<", "*", "{", "@") or "..." in m.group(1):
                continue
            if not (ROOT / m.group(1)).exists():
                bad.add(m.group(1))
    for span in inline_code(prose):         # `store/backend.py`: a module named by its path in the package
        if re.fullmatch(r"(?:\w+/)+\w+\.(?:py|toml|rs)", span) and not REPO_PATH.match(span) \
                and not (SRC / span).exists() and not (ROOT / span).exists():
            bad.add(span)
    return sorted(bad)


DOTTED = re.compile(r"(?<![\w/.-])kperfdiff(?:\.[A-Za-z_]\w*)+")
NOT_CODE = {"db", "artefacts"}          # kperfdiff.db, kperfdiff.artefacts/: the store's files


def resolves(dotted: str) -> bool:
    """Whether ``kperfdiff.a.b.c`` names a module, or an attribute of one."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        try:
            for attr in parts[n:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def stale_names(page: Path) -> list[str]:
    """The ``kperfdiff.module.name`` references of a page that name nothing."""
    text = written(page)
    names = {m.group(0) for m in DOTTED.finditer(text) if m.group(0).split(".")[1] not in NOT_CODE}
    return sorted(n for n in names if not resolves(n))


# ---------------------------------------------------------------- the module table

def first_sentence(doc: str) -> str:
    para = " ".join(doc.strip().split("\n\n", 1)[0].split())
    m = re.match(r"(.+?\.)(\s|$)", para)
    s = (m.group(1) if m else para).replace("|", "\\|") or "(no docstring)"
    return s if len(s) <= 160 else s[:157].rstrip() + "..."


def python_modules() -> dict[str, str]:
    """Every module of the package (relative path -> its first docstring sentence), packages by
    their __init__.py; the package's own __init__ and __main__ are the entry, not a stage."""
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC).as_posix()
        if rel in ("__init__.py", "__main__.py"):
            continue
        out[rel] = first_sentence(ast.get_docstring(ast.parse(p.read_text())) or "")
    return out


def rust_modules() -> dict[str, str]:
    out = {}
    for p in sorted(NATIVE.glob("*.rs")):
        doc = "\n".join(ln[3:].strip() for ln in p.read_text().splitlines() if ln.startswith("//!"))
        out[p.name] = first_sentence(doc)
    return out


def top_folders() -> list[str]:
    return sorted(p.name for p in SRC.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))


def module_table() -> str:
    mods = python_modules()
    by_stage: dict[str, list[str]] = {}
    for rel in mods:
        by_stage.setdefault(rel.split("/", 1)[0] if "/" in rel else "(top level)", []).append(rel)
    lines = ["| stage | module (`src/kperfdiff/`) | what it is |", "|---|---|---|"]
    for stage in sorted(by_stage, key=lambda s: (s == "(top level)", s)):
        for rel in by_stage[stage]:
            lines.append(f"| {stage} | `{rel}` | {mods[rel]} |")
    lines += ["", "| native module (`native/src/`) | what it is |", "|---|---|"]
    lines += [f"| `{name}` | {doc} |" for name, doc in rust_modules().items()]
    return "\n".join(lines)


def written_block(text: str) -> str:
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{_id(ARCHITECTURE)} needs one {BEGIN} and one {END}"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def write_module_table() -> None:
    text = ARCHITECTURE.read_text()
    head, rest = text.split(BEGIN, 1)
    ARCHITECTURE.write_text(f"{head}{BEGIN}\n{module_table()}\n{END}{rest.split(END, 1)[1]}")


def named_modules(block: str) -> tuple[set[str], set[str]]:
    """The Python and Rust files the table names (first backticked path of each row)."""
    py, rs = set(), set()
    for ln in block.splitlines():
        m = re.match(r"^\|(?:[^|`]*\|)?\s*`([^`]+)`\s*\|", ln)
        if m:
            (rs if m.group(1).endswith(".rs") else py).add(m.group(1))
    return py, rs


# ---------------------------------------------------------------- tests

def test_readme_starts_with_its_title_then_exactly_the_two_commands():
    lines = README.read_text().splitlines()
    assert lines[0] == "# kperfdiff", "the README's first line is its title"
    body = [ln for ln in lines[1:8] if ln.strip()]
    assert body[:4] == ["```", "make demo", "make test", "```"], \
        "right after the title, the README's first block is exactly `make demo` and `make test`"


def test_readme_fits_a_few_screens():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; at most {MAX_README_LINES}, the rest belongs in docs/"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README.read_text())}
    missing = [_id(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_readme_names_every_sub_command():
    named = {rest.split()[0] for rest in command_lines(README.read_text()) if rest.split()}
    missing = sorted(subcommands(()) - named)
    assert not missing, f"`kperfdiff --help` lists sub-commands the README never names: {missing}"


@pytest.mark.parametrize("page", pages(), ids=_id)
def test_relative_links_resolve(page):
    assert not broken_links(page)


@pytest.mark.parametrize("page", pages(), ids=_id)
def test_commands_name_real_sub_commands_and_flags(page):
    assert not flag_problems(page)


@pytest.mark.parametrize("page", pages(), ids=_id)
def test_every_quoted_long_option_exists(page):
    known = known_flags()
    unknown = sorted(f for f in quoted_flags(page) if f not in OTHER_PROGRAMS_FLAGS and not has_flag(known, f))
    assert not unknown, f"{_id(page)} quotes options no kperfdiff command or script has: {unknown}"


@pytest.mark.parametrize("page", pages(), ids=_id)
def test_quoted_repository_paths_exist(page):
    missing = missing_paths(page)
    assert not missing, f"{_id(page)} names files or folders the repository does not have: {missing}"


@pytest.mark.parametrize("page", pages(), ids=_id)
def test_quoted_python_names_exist(page):
    stale = stale_names(page)
    assert not stale, f"{_id(page)} names modules or functions kperfdiff does not have: {stale}"


@pytest.mark.parametrize("schema", sorted((SRC / "schemas").glob("*.json")), ids=_id)
def test_json_schemas_name_real_modules(schema):
    """The schemas shipped with the package are documentation too: their descriptions name modules."""
    stale = stale_names(schema)
    assert not stale, f"{_id(schema)} names modules or functions kperfdiff does not have: {stale}"


def test_architecture_page_lists_every_module_and_no_other():
    py, rs = named_modules(written_block(ARCHITECTURE.read_text()))
    tree_py, tree_rs = set(python_modules()), set(rust_modules())
    problems = [f"names {m}, which does not exist" for m in sorted(py - tree_py)]
    problems += [f"misses {m}" for m in sorted(tree_py - py)]
    problems += [f"names native/src/{m}, which does not exist" for m in sorted(rs - tree_rs)]
    problems += [f"misses native/src/{m}" for m in sorted(tree_rs - rs)]
    assert not problems, (f"docs/architecture.md's module table {'; '.join(problems)}: "
                          "regenerate it with `python tests/test_docs.py --write`")


def test_architecture_module_table_is_what_write_makes():
    """The table's words are the modules' docstrings: a docstring changed, or a module moved to
    another stage, leaves the page stale until it is regenerated."""
    written, made = written_block(ARCHITECTURE.read_text()).strip(), module_table().strip()
    stale = [ln for ln in made.splitlines() if ln not in written.splitlines()]
    assert written == made, (
        f"docs/architecture.md's module table differs from the tree's docstrings (first: {stale[:3]}): "
        "regenerate it with `python tests/test_docs.py --write`")


def test_architecture_page_has_a_section_per_top_level_folder():
    text = ARCHITECTURE.read_text()
    missing = [d for d in top_folders() if not re.search(rf"^#{{2,4}} .*`{re.escape(d)}/`", text, re.M)]
    assert not missing, f"docs/architecture.md has no section on the folder(s) {missing}"


# ---------------------------------------------------------------- the checks catch what they are for

def test_checks_catch_planted_mistakes(tmp_path):
    nowhere = "--quoted-" + "nowhere"      # spelt apart, or this file would be where it is found
    page = tmp_path / "p.md"
    (tmp_path / "there.md").write_text("# A heading\n")
    page.write_text("see [x](there.md), [y](gone.md), [z](there.md#a-heading), [w](there.md#nope)\n"
                    "`[no](not-a-link.md)`\n```\n[no](code.md)\n```\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert [b.split(":")[0] for b in broken_links(page)] == ["gone.md", "there.md#nope"]
    finally:
        ROOT = saved
    page.write_text("```\n$ kperfdiff diff a b --children --no-such-flag \\\n    --top 3\n"
                    "kperfdiff --store s.db runs --all\nkperfdiff nosuch\nkperfdiff: a message\n```\n"
                    "`kperfdiff place plan P --capacity 16K --bogus`, `%s`\n" % nowhere)
    assert sorted(flag_problems(page)) == sorted([
        "kperfdiff diff: no option --no-such-flag (in `kperfdiff diff a b --children --no-such-flag      --top 3`)",
        "kperfdiff nosuch: no sub-command 'nosuch'",
        "kperfdiff place plan: no option --bogus (in `kperfdiff place plan P --capacity 16K --bogus`)"])
    assert nowhere in quoted_flags(page) and not has_flag(known_flags(), nowhere)
    page.write_text("`tests/data/perfdata/README.md`, `harness/no_such.py --x`\n```\nexamples/nosuch.toml\n```\n"
                    "`src/kperfdiff/bench/families/<family>.toml`\n")
    assert missing_paths(page) == ["examples/nosuch.toml", "harness/no_such.py"]
    page.write_text("`store/backend.py`, `store/nosuch.py`, `bench/families/fs.toml`\n")
    assert missing_paths(page) == ["store/nosuch.py"]
    page.write_text("`kperfdiff.ingest.profile.Profile`, `kperfdiff.profile.Profile`, `kperfdiff.ingest.nosuch`, "
                    "`demo-out/kperfdiff.db`, `kperfdiff.artefacts/`\n")
    assert stale_names(page) == ["kperfdiff.ingest.nosuch", "kperfdiff.profile.Profile"]
    step = "<!-- walk-through toy: {} -->\n```\nkperfdiff nosuch --bogus\nexamples/nosuch.toml kperfdiff.nosuch\n```\n"
    page.write_text(step.format("write src/kperfdiff/nosuch.py") + step.format("run"))
    assert flag_problems(page) == missing_paths(page) == stale_names(page) == []
    page.write_text(step.format("run").replace("<!-- walk-through toy: run -->\n", ""))
    assert flag_problems(page) and missing_paths(page) and stale_names(page)
    block = written_block(f"x\n{BEGIN}\n| s | `nosuch.py` | x |\n| `nosuch.rs` | x |\n{END}\n")
    assert named_modules(block) == ({"nosuch.py"}, {"nosuch.rs"})


def import_rules(text: str) -> dict[str, set[str]]:
    """The 'Which stage may import which' table of the architecture page: stage -> the stages its row
    names (besides itself and core); 'every stage' and 'every stage but commands' spelled out."""
    section = text.split("## Which stage may import which", 1)[1].split("\n## ", 1)[0]
    rows = [r.strip().strip("|").split("|") for r in section.splitlines() if r.startswith("| ")][1:]
    stages = [r[0].strip() for r in rows]
    def named(said: str) -> set[str]:
        return {s for s in stages if re.search(rf"(?<![\w/]){re.escape(s)}(?![\w/])", said)}
    out = {}
    for stage, said in ((r[0].strip(), r[1]) for r in rows):
        if "every stage" in said:
            out[stage] = set(stages) - named(said.split("every stage but", 1)[1] if "every stage but" in said else "")
        else:
            out[stage] = named(said)
        out[stage] -= {stage, "core"}
    return out


def test_architecture_page_states_the_import_rules_the_tests_hold():
    """The page's table of which stage may import which is the rule tests/support/architecture.py
    enforces, stage by stage (a stage added to the rules, or a rule changed, fails here until the page says so)."""
    from support import architecture as arch
    rules = {s: set(allowed) - {s, "core"} for s, allowed in arch.ALLOWED.items()}
    assert import_rules(written(ARCHITECTURE)) == rules


def test_import_rules_are_read_as_written():
    table = ("## Which stage may import which\n\n| stage | may import |\n|---|---|\n| core | nothing |\n"
             "| store | |\n| render | store (its names), never core |\n| studies | every stage but render and commands |\n"
             "| commands | every stage |\n\n## Next\n| x | y |\n")
    assert import_rules(table) == {"core": set(), "store": set(), "render": {"store"},
                                   "studies": {"store"}, "commands": {"store", "render", "studies"}}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_docs.py --write   (regenerates docs/architecture.md's module table)")
    write_module_table()
    print(f"wrote the module table of {_id(ARCHITECTURE)}: {len(python_modules())} modules, "
          f"{len(rust_modules())} native modules")
