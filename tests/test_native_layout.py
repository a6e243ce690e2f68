"""The native crate's modules import one way: the `use crate::X` / `crate::X::` / `super::`
graph of native/src has no cycle, lib.rs is its top (no module reaches into it) and reader.rs
is the driver (it runs the stages; no module imports from it). Pure parsing, no cargo."""
import re
from pathlib import Path

from support import architecture as arch

HERE = Path(__file__).resolve()
ROOT = next(p for p in HERE.parents if (p / "native" / "Cargo.toml").is_file())
NATIVE_SRC = ROOT / "native" / "src"

# What is not code: comments, strings (raw, byte, plain) and char literals, in one pass so a
# "//" in a string or a quote in a comment is read as what it is.
_NOT_CODE = re.compile(
    r'//[^\n]*'
    r'|/\*.*?\*/'
    r'|b?r(#*)".*?"\1'
    r'|b?"(?:\\.|[^"\\])*"'
    r"|b?'(?:\\.|[^'\\\n])'",
    re.S,
)
_MOD_BLOCK = re.compile(r"\bmod\s+\w+\s*\{")
_CRATE = re.compile(r"(?<![\w:])crate::(\{|\w+)")
_SUPER = re.compile(r"(?<![\w:])((?:super::)+)(\{|\w+|\*)")
_BARE = re.compile(r"(?<![\w:])(\w+)::")


def _code(text):
    return _NOT_CODE.sub(lambda m: " " * len(m.group(0)), text)


def _mod_depths(code):
    """For each position of `code`, how many inline `mod x { ... }` blocks enclose it."""
    depths = [0] * (len(code) + 1)
    stack, depth, i = [], 0, 0
    opens = {m.end() - 1 for m in _MOD_BLOCK.finditer(code)}
    for i, c in enumerate(code):
        if c == "{":
            stack.append(i in opens)
            depth += i in opens
        elif c == "}" and stack:
            depth -= stack.pop()
        depths[i + 1] = depth
    return depths


def _group_heads(code, brace):
    """The first path segment of each item of the `{...}` group opening at `brace`."""
    level, start, heads = 0, brace + 1, []
    for i in range(brace, len(code)):
        c = code[i]
        if c == "{":
            level += 1
        elif c == "}":
            level -= 1
            if level == 0:
                heads.append(code[start:i])
                break
        elif c == "," and level == 1:
            heads.append(code[start:i])
            start = i + 1
    return [h.strip().split("::")[0].strip() for h in heads if h.strip()]


def module_graph(src=NATIVE_SRC):
    """{module: set of modules it refers to}, "lib" being the crate root (lib.rs): an item
    reached as `crate::name` that is no module's file is lib.rs's."""
    files = {p.stem: p for p in sorted(Path(src).glob("*.rs"))}
    mods = set(files) - {"lib"}
    graph = {}

    def target(head):
        return head if head in mods else "lib"

    for name, path in files.items():
        code = _code(path.read_text())
        depths = _mod_depths(code)
        refs = set()
        for m in _CRATE.finditer(code):
            heads = _group_heads(code, m.start(1)) if m.group(1) == "{" else [m.group(1)]
            refs |= {target(h) for h in heads if h != "self"}
        for m in _SUPER.finditer(code):
            up = m.group(1).count("super::")
            if name == "lib" or up <= depths[m.start()]:
                continue  # super of an inline module (tests): the file itself
            heads = _group_heads(code, m.start(2)) if m.group(2) == "{" else [m.group(2)]
            refs |= {target(h) for h in heads if h not in ("self", "*")} | ({"lib"} if "*" in heads else set())
        if name == "lib":
            # the root names its modules without `crate::`
            refs |= {m.group(1) for m in _BARE.finditer(code) if m.group(1) in mods}
        refs.discard(name)
        graph[name] = refs
    return graph


def cycles(graph):
    """One cycle per strongly connected part of more than one module (the architecture test's
    cycles()), as a path from its first module (by name) back to it."""
    found = []
    for part in sorted((set(c) for c in arch.cycles(graph)), key=min):
        start = min(part)
        path, seen = [start], {start}
        while True:  # inside a strongly connected part every walk can go on: go to the first
            nxt = sorted(w for w in graph[path[-1]] if w in part)
            if start in nxt:
                break
            w = next((w for w in nxt if w not in seen), None)
            if w is None:  # only back into the path: cut it there
                w = nxt[0]
                path = path[path.index(w):]
                start = w
                break
            path.append(w)
            seen.add(w)
        found.append(" -> ".join(path + [start]))
    return found


def layout_problems(src=NATIVE_SRC):
    graph = module_graph(src)
    problems = [f"import cycle: {c}" for c in cycles(graph)]
    problems += [f"{m}.rs imports from lib.rs, the crate's top" for m in sorted(graph) if m != "lib" and "lib" in graph[m]]
    problems += [f"{m}.rs imports from reader.rs, the driver that runs the stages"
                 for m in sorted(graph) if m not in ("lib", "reader") and "reader" in graph[m]]
    return problems


def test_native_modules_import_one_way():
    assert layout_problems() == []


def test_the_graph_is_read():
    """The parser sees the imports it is there to see (a broken one would find no cycle)."""
    graph = module_graph()
    assert {"aggregate", "decode", "header", "layout", "order", "symbolize", "warnings"} <= graph["reader"]
    assert "reader" in graph["lib"] and "elf" in graph["kallsyms"]
    assert sum(map(len, graph.values())) >= 30


def test_each_rule_catches_a_planted_violation(tmp_path):
    files = {
        "lib.rs": "mod a;\nmod b;\npub mod reader;\npyo3::create_exception!(native, E, X);\nfn f() { reader::read() }\n",
        "reader.rs": "use crate::a::A;\nuse crate::{b::{self, B}, a};\n",
        "a.rs": "// use crate::reader::Fact; (a comment)\nconst S: &str = \"crate::reader::Fact\";\n"
                "use crate::b;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        "b.rs": "pub struct B;\n",
    }
    for n, t in files.items():
        (tmp_path / n).write_text(t)
    assert layout_problems(tmp_path) == []
    assert module_graph(tmp_path) == {"lib": {"reader"}, "reader": {"a", "b"}, "a": {"b"}, "b": set()}
    (tmp_path / "b.rs").write_text("use crate::reader::Output;\n")
    assert layout_problems(tmp_path) == [
        "import cycle: a -> b -> reader -> a", "b.rs imports from reader.rs, the driver that runs the stages"]
    (tmp_path / "b.rs").write_text("fn f() -> bool { super::a::g() && crate::E::x() }\n")
    assert layout_problems(tmp_path) == ["import cycle: a -> b -> a", "b.rs imports from lib.rs, the crate's top"]
