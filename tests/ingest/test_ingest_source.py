"""Profile inputs from standard input (`-`) and gzip files, read like the files they hold."""
from __future__ import annotations

import gzip
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from support import DATA, KPERFDIFF, assert_one_sentence_error
from kperfdiff.core.errors import InputError
from kperfdiff.ingest import source
from kperfdiff.ingest.load import load, load_events

SCRIPT = DATA / "text" / "forkexec.script"
FOLDED = DATA / "text" / "forkexec.folded"
PERFDATA = DATA / "perfdata" / "plain.perf.data"


def cli(*args, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([str(KPERFDIFF), *map(str, args)], input=stdin, capture_output=True, timeout=300)


def same_profile(a, b) -> None:
    assert a.event == b.event and a.weight_unit == b.weight_unit and a.samples == b.samples
    assert a.total_weight == b.total_weight and a.symbols == b.symbols
    np.testing.assert_array_equal(a.self_weight, b.self_weight)
    assert a.stacks == b.stacks and a.stack_counts == b.stack_counts


@pytest.mark.parametrize("path", [SCRIPT, FOLDED, DATA / "text" / "forkexec.report"])
def test_gzip_text_reads_as_the_plain_file(tmp_path, path):
    gz = tmp_path / (path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    prof = load(gz)
    same_profile(prof, load(path))
    assert prof.source == str(gz) and prof.label == path.stem


def test_gzip_perfdata_finds_its_kallsyms_and_leaves_no_temporary(tmp_path):
    """plain.perf.data.gz beside kallsyms.gz symbolises as the plain file does; the copy is gone after."""
    gz = tmp_path / "plain.perf.data.gz"
    gz.write_bytes(gzip.compress(PERFDATA.read_bytes(), 1))
    (tmp_path / "kallsyms.gz").write_bytes((DATA / "perfdata" / "kallsyms.gz").read_bytes())
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kperfdiff-input-*"))
    prof = load(gz)
    same_profile(prof, load(PERFDATA))
    assert any(s.name == "read_zero" and s.kernel for s in prof.symbols)
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("kperfdiff-input-*")) == before


def test_gzip_perfdata_says_its_kallsyms_was_found_beside_it(tmp_path):
    """The kallsyms beside a perf.data.gz is reported as found beside the file, as for the plain file."""
    gz = tmp_path / "plain.perf.data.gz"
    gz.write_bytes(gzip.compress(PERFDATA.read_bytes(), 1))
    (tmp_path / "kallsyms.gz").write_bytes((DATA / "perfdata" / "kallsyms.gz").read_bytes())
    for prof in [load(gz), *load_events(gz)]:
        assert prof.meta["symbols"]["found"] == "beside the file"
        assert prof.meta["symbols"]["source"] == str(tmp_path / "kallsyms.gz")


def test_stdin_profiles_in_diff_and_export():
    """`-` reads standard input: plain or gzip'd text, and perf.data (spooled to a file for the reader)."""
    p = cli("diff", SCRIPT, "-", "--format", "json", stdin=SCRIPT.read_bytes())
    assert p.returncode == 0, p.stderr
    assert b'"b": "stdin"' in p.stdout
    p = cli("export", "-", "--to", "folded", "-o", "-", stdin=gzip.compress(FOLDED.read_bytes()))
    assert p.returncode == 0, p.stderr
    assert sum(int(ln.rsplit(None, 1)[1]) for ln in p.stdout.decode().splitlines()) == load(FOLDED).samples
    p = cli("export", "-", "--to", "folded", "-o", "-", "--kallsyms", DATA / "perfdata" / "kallsyms.gz",
            stdin=PERFDATA.read_bytes())
    assert p.returncode == 0, p.stderr
    assert b"read_zero_[k] " in p.stdout


@pytest.mark.parametrize("stdin, message", [
    (b"", "standard input is empty"),
    (gzip.compress(SCRIPT.read_bytes())[:300], "standard input is truncated gzip data"),
    (b"\x1f\x8b" + b"\0" * 30, "standard input is not valid gzip data"),
])
def test_bad_stdin_is_one_sentence(stdin, message):
    p = cli("export", "-", "--to", "folded", "-o", "-", stdin=stdin)
    assert_one_sentence_error(subprocess.CompletedProcess(p.args, p.returncode, p.stdout.decode(),
                                                          p.stderr.decode()))
    assert message in p.stderr.decode()


def test_stdin_read_once():
    p = cli("diff", "-", "-", stdin=SCRIPT.read_bytes())
    assert p.returncode == 2 and b"standard input (-) can be read only once" in p.stderr


def test_decompression_bomb_is_refused(tmp_path):
    """A gzip that inflates past the limit stops at the limit, with one sentence, and leaves nothing."""
    bomb = tmp_path / "bomb.folded.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb.write_bytes(c.compress(b"a;b 1\n" * (8 << 20)) + c.flush())   # 48 MiB of text in ~50 KiB
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(InputError, match=r"bomb\.folded\.gz decompresses to more than 16 MiB, the most"):
        with source.local(bomb, limit=16 << 20):
            pass
    with source.local(bomb, limit=64 << 20) as src:     # under the limit: read whole
        assert src.path.stat().st_size == 48 << 20 and src.path.name == "bomb.folded"
        folder = src.path.parent
    assert not folder.exists()


def test_concatenated_gzip_members(tmp_path):
    text = FOLDED.read_bytes()
    half = text.index(b"\n", len(text) // 2) + 1
    gz = tmp_path / "two.folded.gz"
    gz.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    same_profile(load(gz), load(FOLDED))
