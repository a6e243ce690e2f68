"""A benchmark family file with a mistake stops every command that reads the catalogue in one sentence
naming the file and the benchmark (exit status 2), never a traceback: each mistake planted in turn."""
import pytest

from kperfdiff.bench import catalogue

GOOD = {"name": '"x.a"', "exercises": '"e"', "unit": '"ns/op"', "op": '"call"', "better": '"lower"'}


@pytest.mark.parametrize("change, words", [
    ({"name": '"y.a"'}, "'y.a' must start with x."),
    ({"better": '"faster"'}, "x.a: better must be lower or higher"),
    ({"exercises": None}, "x.a: says nothing of what it exercises"),
    ({"unit": None}, "x.a: no unit"),
    ({"unit": '"nanoseconds"'}, "x.a: unit 'nanoseconds' is not one of"),
    ({"op": None}, "x.a: no op"),
    ({"requires": '["gpu"]'}, "x.a: unknown requirement"),
    ({"suites": '["nightly"]'}, "x.a: unknown suite"),
    ({"options": '{ exit = "exit" }'}, "x.a: options must map each name to a list of the values it may take"),
    ({"options": '{ exit = [] }'}, "x.a: options must map each name to a list of the values it may take"),
    ({"options": '{ n = ["1"] }', "params": '{ n = 2 }'}, "x.a: an option is also a param (n)"),
])
def test_each_mistake_is_one_sentence(tmp_path, change, words):
    fields = {**GOOD, **change}
    (tmp_path / "x.c").write_text("")
    (tmp_path / "x.toml").write_text('family = "x"\n[[bench]]\n' + "".join(
        f"{k} = {v}\n" for k, v in fields.items() if v is not None))
    with pytest.raises(catalogue.CatalogueError) as e:
        catalogue.load_families(tmp_path)
    assert words in str(e.value) and str(tmp_path / "x.toml") in str(e.value)
    assert "\n" not in str(e.value) and e.value.exit_status == 2


def test_a_family_without_its_source_and_a_name_declared_twice(tmp_path):
    (tmp_path / "x.toml").write_text('family = "x"\n')
    with pytest.raises(catalogue.CatalogueError, match="no C source x.c"):
        catalogue.load_families(tmp_path)
    (tmp_path / "x.c").write_text("")
    one = "[[bench]]\n" + "".join(f"{k} = {v}\n" for k, v in GOOD.items())
    (tmp_path / "x.toml").write_text('family = "x"\n' + one + one)
    with pytest.raises(catalogue.CatalogueError, match="benchmark x.a declared twice"):
        catalogue.load_families(tmp_path)


def test_the_shipped_catalogue_loads_with_known_units():
    fams, benches = catalogue.load_families()
    assert fams and benches and {b.unit for b in benches} <= catalogue.UNITS
