"""Every perf.data input the fuzzer (native/tests/fuzz/mod.rs; `cargo test` runs it bounded,
harness/fuzz_perfdata.py long) broke the reader with, read the way kperfdiff reads it.

Each fixture is tests/data/perfdata/tiny.perf.data or tiny-group.perf.data with one edit
(tests/data/perfdata/fuzz/README.md); the comment says what the reader did with it before.
The seeds are read from a folder of their own, as the fixtures are (fuzz/ has no kallsyms): the
kallsyms.gz beside the seeds is another boot's, which the reader refuses for them."""
import shutil

import pytest

from conftest import DATA, run_cli
from kperfdiff.ingest.load import load

FUZZ = DATA / "perfdata" / "fuzz"
SEEDS = None      # the seeds, copied alone into a temporary folder (_seeds)


@pytest.fixture(scope="module", autouse=True)
def _seeds(tmp_path_factory):
    global SEEDS
    SEEDS = tmp_path_factory.mktemp("seeds")
    for name in ("tiny.perf.data", "tiny-group.perf.data"):
        shutil.copy(DATA / "perfdata" / name, SEEDS / name)


def samples(path, event=None):
    p = load(path, event=event)
    return p.samples, p.total_weight, p.meta.get("warnings", [])


@pytest.mark.parametrize("name, warning", [
    ("cmdline-count", "its command line section is damaged and was ignored"),           # abort: 64 GiB asked for
    ("event-desc-count", "its event description section is damaged and was ignored"),   # abort: 704 GiB
    ("event-desc-ids", "its event description section is damaged and was ignored"),     # abort: 32 GiB
    ("event-types-2e56", "are missing or lie outside the file"),                         # abort: 58 PiB
    ("event-types-size", "are missing or lie outside the file"),                         # panic: capacity overflow
    ("mmap2-build-id-len", "1 mapping records were malformed and skipped"),             # panic: build_id_len <= 20
])
def test_damaged_sections_are_dropped_and_the_samples_kept(name, warning):
    n, total, warnings = samples(FUZZ / f"{name}.perf.data")
    n0, total0, _ = samples(SEEDS / "tiny.perf.data")
    assert (n, total) == (n0, total0)
    assert any(warning in w for w in warnings), warnings


def test_period_that_would_overflow_is_skipped_not_wrapped():
    # before: the 64-bit total wrapped (a share of 6e13%)
    n, total, warnings = samples(FUZZ / "period-max.perf.data")
    n0, total0, _ = samples(SEEDS / "tiny.perf.data")
    assert n == n0 - 1 and total == total0 - total0 / n0       # one cpu-clock sample of 500000 ns
    assert any("1 samples were skipped because their period would overflow" in w for w in warnings)


def test_group_read_value_going_backwards_is_skipped_not_wrapped():
    # before: the delta wrapped to ~2^64 and the event's shares went above 100%
    # (the edit lowered the cpu-clock value of one sample; the task-clock values are untouched)
    n, total, warnings = samples(FUZZ / "group-read-backwards.perf.data", "cpu-clock")
    n0, total0, _ = samples(SEEDS / "tiny-group.perf.data", "cpu-clock")
    assert n0 - 3 <= n < n0 and 0.9 * total0 < total < total0
    assert any("1 read values were below the event's previous value" in w for w in warnings)
    tc = samples(FUZZ / "group-read-backwards.perf.data", "task-clock")[:2]
    assert tc == samples(SEEDS / "tiny-group.perf.data", "task-clock")[:2]


def test_group_file_without_feature_sections_keeps_both_events():
    # before: the event ids came only from the lost EVENT_DESC section, so every sample went to the
    # first event (or none, for a group read): "holds no samples"
    for ev in ("cpu-clock", "task-clock"):
        n, total, _ = samples(FUZZ / "group-cut-after-data.perf.data", ev)
        assert (n, total) == samples(SEEDS / "tiny-group.perf.data", ev)[:2]


def test_cli_reads_them_with_warnings_and_no_panic_text():
    for name in ("event-desc-count", "group-read-backwards"):
        f = FUZZ / f"{name}.perf.data"
        r = run_cli("diff", f, f, "--format", "json", check=0)
        for word in ("panicked", "assertion", "capacity overflow", "Traceback"):
            assert word not in r.stderr
        assert "kperfdiff: warning:" in r.stderr
