"""The JSON Schemas shipped in kperfdiff/schemas: each is valid draft 2020-12 and describes every
field; every command with a JSON output has one (found by walking the argparse tree, so a new
--format json without a schema fails here); real outputs of each command validate against theirs
(`target check` and `target boot` in test_cli_target.py, where a guest is booted anyway)."""
import argparse
import gzip
import json

import pytest
from jsonschema import Draft202012Validator

from support import DATA, ROOT, run_cli, two_variant_experiment
from kperfdiff.commands import build_parser
from kperfdiff.schemas import DIR, OUTPUTS, schema_path

TINY = ["--intervals", "3", "--min-batch-ms", "1", "--no-progress"]
# documents chosen by an option rather than by the command: (command, option)
SELECTED_BY_OPTION = {"bench --list": ("bench", "--list"), "watch --publish": ("watch", "--publish")}
# tests/targets/test_cli_target.py; tests/commands/test_history.py (a store with a history to show);
# tests/bisection/test_bisect_local.py (a real bisection); tests/watch/test_publish.py (the watch's feed)
VALIDATED_ELSEWHERE = {"target check", "target boot", "history", "changes", "bisect", "watch", "watch --publish"}


def validate(command: str, text: str) -> dict:
    """Parse one command's stdout and check it against the command's schema."""
    doc = json.loads(text)
    schema = json.loads(schema_path(OUTPUTS[command]).read_text())
    errors = sorted(Draft202012Validator(schema).iter_errors(doc), key=lambda e: e.json_path)
    assert not errors, f"{command}: " + "; ".join(f"{e.json_path}: {e.message[:200]}" for e in errors[:5])
    return doc


def json_commands(parser: argparse.ArgumentParser, path: tuple = ()) -> set[str]:
    """Every (sub-)command whose --format offers json, as typed after `kperfdiff`."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= json_commands(sub, path + (name,))
        elif "--format" in action.option_strings and "json" in (action.choices or ()):
            found.add(" ".join(path))
    return found


def undescribed(schema, where="$") -> list[str]:
    """The places in a schema where a field (or a $defs entry) has no description."""
    out = []
    if isinstance(schema, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if not (isinstance(sub, dict) and (sub.get("description") or "$ref" in sub)):
                out.append(f"{where}.{name}")
        for name, sub in (schema.get("$defs") or {}).items():
            if not sub.get("description"):
                out.append(f"{where}.$defs.{name}")
        for k, v in schema.items():
            out += undescribed(v, f"{where}.{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            out += undescribed(v, f"{where}[{i}]")
    return out


def test_every_json_output_has_a_schema():
    commands = json_commands(build_parser())
    assert commands, "no --format json found: the walk is broken"
    assert commands - set(OUTPUTS) == set(), "a command prints JSON without a schema in kperfdiff.schemas.OUTPUTS"
    for key, (command, option) in SELECTED_BY_OPTION.items():
        assert command in commands and key in OUTPUTS
        sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
        assert any(option in a.option_strings for a in sub._actions)
    assert set(OUTPUTS) == commands | set(SELECTED_BY_OPTION), "OUTPUTS names a command with no JSON output"
    shipped = {p.name for p in DIR.glob("*.schema.json")}
    assert shipped == {f"{k}.schema.json" for k in OUTPUTS.values()}


@pytest.mark.parametrize("kind", sorted(set(OUTPUTS.values())))
def test_schema_is_valid_and_describes_every_field(kind):
    schema = json.loads(schema_path(kind).read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith(f"/{kind}.schema.json") and schema["title"] and schema["description"]
    assert undescribed(schema) == []
    assert schema["additionalProperties"] is False        # a new top-level field must be documented


def test_the_wheel_ships_the_schemas():
    text = (ROOT / "pyproject.toml").read_text()
    assert '{ path = "src/kperfdiff/schemas/*.schema.json", format = ["sdist", "wheel"] }' in text


def test_a_field_the_schema_does_not_know_fails():
    """The validation has teeth: a stray or mistyped field is caught."""
    schema = json.loads(schema_path("runs").read_text())
    good = {"version": 1, "runs": [], "total": 0, "offset": 0}
    assert Draft202012Validator(schema).is_valid(good)
    assert not Draft202012Validator(schema).is_valid(good | {"extra": 1})
    assert not Draft202012Validator(schema).is_valid(good | {"total": "0"})


def test_real_outputs_validate(tmp_path, home):
    done = set()

    def js(command, *argv):
        done.add(command)
        return validate(command, run_cli(*argv, check=0).stdout)

    js("bench --list", "bench", "--list", "--format", "json")
    js("bench", "bench", "--only", "syscall.null,fault.anon.4k", "-P", "1,2", "--reps", "3", "--label", "a",
       "--format", "json", *TINY)
    js("bench", "bench", "--only", "syscall.null,fault.anon.4k", "--reps", "3", "--label", "b", "--format", "json",
       *TINY)
    js("runs", "runs", "--format", "json")
    js("show", "show", "a", "--format", "json")
    doc = js("compare", "compare", "a", "b", "--format", "json")
    assert {c["method"] for c in doc["comparisons"][0]["cells"]} >= {"runs"}
    exp = two_variant_experiment(tmp_path / "e.toml", "schemas")
    js("run", "run", exp, "--no-progress", "--format", "json")
    js("compare", "compare", "--experiment", "schemas", "--format", "json")

    # diff: perf.data with kallsyms; three text forms per side (intervals and tests); two architectures (twins)
    pd = DATA / "perfdata"
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_bytes(gzip.decompress((pd / "kallsyms.gz").read_bytes()))
    js("diff", "diff", pd / "plain.perf.data", pd / "group.perf.data", "--kallsyms", kallsyms, "--format", "json")
    text = DATA / "text"
    sides = [",".join(str(text / f"{w}.{x}") for x in ("script", "report", "folded")) for w in ("forkexec", "mixed")]
    assert js("diff", "diff", *sides, "--format", "json")["significance_tested"] is True
    x = {}
    for arch in ("x86_64", "arm64"):
        for name in ("proc.fork.perf.data", "kallsyms"):
            x[arch, name] = tmp_path / f"{arch}.{name}"
            x[arch, name].write_bytes(gzip.decompress((pd / "xarch" / arch / f"{name}.gz").read_bytes()))
    doc = js("diff", "diff", x["x86_64", "proc.fork.perf.data"], x["arm64", "proc.fork.perf.data"],
             "--kallsyms-a", x["x86_64", "kallsyms"], "--kallsyms-b", x["arm64", "kallsyms"], "--format", "json")
    assert doc["twins"] and doc["inlined"]

    # place, on the arm64 profiles the TCM study's model is for
    arm = pd / "arm64"
    sizes = tmp_path / "arm64.kallsyms"
    sizes.write_bytes(gzip.decompress((arm / "kallsyms.gz").read_bytes()))
    prof, hw = arm / "fault.anon.4k.perf.data", ROOT / "examples" / "place" / "arm926-tcm.toml"
    common = ["--sizes", sizes, "--hw", hw, "--format", "json"]
    plan = js("place plan", "place", "plan", prof, *common)
    placement = tmp_path / "placement.txt"
    placement.write_text("\n".join(plan["methods"]["greedy"]["placed"][:5]) + "\n")
    js("place sweep", "place", "sweep", prof, *common, "--capacities", "4K,8K")
    js("place model", "place", "model", prof, *common, "--placement", placement)
    js("place simulate", "place", "simulate", prof, *common, "--events", "2000")
    js("place groups", "place", "groups", prof, arm / "proc.fork.perf.data", *common, "--events", "2000")
    js("system show", "system", "show", "--format", "json")

    assert done | VALIDATED_ELSEWHERE == set(OUTPUTS)
