"""The one check of a file a user names, and the one TOML loader: refusals in one sentence that
says what the file should have been."""
import os
import re

import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.core.files import check_input_file, read_toml


@pytest.mark.parametrize("what, said", [
    ("profile", "a profile file"),
    ("perf.data", "a perf.data file"),
    ("experiment file", "an experiment file"),
    ("equivalence map", "an equivalence map file"),
    ("hardware model", "a hardware model file"),
])
def test_a_device_and_a_directory_are_refused_naming_the_file_wanted(tmp_path, what, said):
    for path, kind in [("/dev/null", "a device"), (tmp_path, "a directory")]:
        with pytest.raises(InputError) as e:
            check_input_file(path, what)
        assert f"is {kind}, not {said}" in str(e.value)
        assert not re.search(r"\bfile file\b", str(e.value))


def test_the_toml_loader_refuses_a_fifo_in_one_sentence(tmp_path):
    fifo = tmp_path / "exp.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as e:
        read_toml(fifo, "experiment file")
    assert str(e.value) == (f"{fifo} is a FIFO, not an experiment file; kperfdiff reads regular files only "
                            "(save the data to a file first)")


def test_a_regular_file_gives_its_size(tmp_path):
    f = tmp_path / "a.toml"
    f.write_text("x = 1\n")
    assert check_input_file(f, "experiment") == 6
    assert read_toml(f, "experiment file") == {"x": 1}
