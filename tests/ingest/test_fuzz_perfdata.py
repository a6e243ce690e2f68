"""Every perf.data input the fuzzer (native/tests/fuzz/mod.rs; `cargo test` runs it bounded,
fuzz/fuzz_perfdata.py long) broke the reader or the load path after it with, read the way
kperfdiff reads it; and a bounded run of the fuzzer's inputs through the load path.

Each fixture is tests/data/perfdata/tiny.perf.data or tiny-group.perf.data with one edit
(tests/data/perfdata/fuzz/README.md); the comment says what kperfdiff did with it before.
The seeds are read from a folder of their own, as the fixtures are (fuzz/ has no kallsyms): the
kallsyms.gz beside the seeds is another boot's, which the reader refuses for them."""
import json
import os
import shutil

import pytest

from support import DATA, assert_one_sentence_error, run_cli
from fuzzing import _stderr_problem, diff_problem, fuzz_perfdata, perfdata_profile_problem, run_one_perfdata
from kperfdiff.core.errors import InputError
from kperfdiff.ingest.load import load, load_events

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


# -- the load path: what users call on these files (fuzz/fuzzing.py, run_one_perfdata) ------------

def test_fuzz_load_path(tmp_path, monkeypatch):
    """Inputs of the native fuzzer through load, load_events, diff and export (every 50th by the
    real CLI too); executions and seed from KPD_FUZZ_PERFDATA_EXECS / KPD_FUZZ_SEED (CI: 300, seed
    1). Before: the IndexError of an event without samples (load_events, diff, export), and
    exports of no samples written as empty files with exit status 0. Every input is read on
    several threads, as a large file is (the parts and their merge: native/src/parallel.rs)."""
    monkeypatch.setenv("HOME", str(tmp_path))   # no perf build-id cache: only what lies beside the input
    monkeypatch.setenv("KPERFDIFF_PARALLEL_MIN_BYTES", "0")
    n = int(os.environ.get("KPD_FUZZ_PERFDATA_EXECS", "300"))
    seed = int(os.environ.get("KPD_FUZZ_SEED", "1"))
    counts, examples = fuzz_perfdata(tmp_path, executions=n, seed=seed)
    print(f"perf.data load-path fuzz, seed {seed}: {dict(counts)}")
    assert sum(counts.values()) == n
    assert counts["ok"] > n // 2 and counts["error"] > 0
    assert not counts["crash"] and not counts["wrong"], examples


def test_load_path_oracle_catches_what_it_claims():
    prof = load(SEEDS / "tiny.perf.data")
    assert perfdata_profile_problem(prof) is None
    key = next(iter(prof.stacks))
    prof.stacks[key[:-1] + (None,)] = prof.stacks.pop(key)          # a frame of another event's symbol
    assert perfdata_profile_problem(prof) == "a stack frame names no symbol of this event"
    prof = load(SEEDS / "tiny.perf.data")
    prof.self_weight = prof.self_weight * 0.5
    assert "self weights add up to 50.0000%" in perfdata_profile_problem(prof)
    doc = {"common": [{"symbol": "f", "value_a": 60.0, "value_b": 1.0}], "only_a": [{"symbol": "g", "value_a": 30.0}],
           "only_b": []}
    assert diff_problem(doc) == "side A's shares add up to 90.0000%"
    doc["only_a"][0]["value_a"] = float("nan")
    assert "a share of nan" in diff_problem(doc)
    assert "'Traceback' on stderr" in _stderr_problem(1, "Traceback (most recent call last):\nIndexError: x\n")
    assert "exit status 1" in _stderr_problem(1, "kperfdiff: something\n")
    assert _stderr_problem(2, "kperfdiff: warning: w\nkperfdiff: x.perf.data holds no samples\n") is None


def test_event_without_samples_in_a_group_file(tmp_path):
    # tiny-group, first attribute's read_format 0x1c -> 0x7 (no GROUP bit): no event keeps a sample,
    # but their stacks were read. Before: IndexError in load (shared[remap[frames]]), and
    # `kperfdiff diff FILE plain.perf.data` printed the traceback and exited 1.
    f = FUZZ / "group-read-format-no-group.perf.data"
    prof = load(f)
    assert prof.samples == 0 and prof.total_weight == 0 and not prof.stacks
    with pytest.raises(InputError, match="holds no samples"):
        load_events(f)
    r = run_cli("diff", f, DATA / "perfdata" / "plain.perf.data", check=2)
    assert_one_sentence_error(r)
    assert "holds no samples" in r.stderr


def test_one_event_without_samples_beside_one_with(tmp_path):
    # tiny-group, first attribute's sample_type 0x157 -> 0: the samples carry no id, address or
    # read values any more, so all 72 go to cpu-clock (counted, no period) and task-clock has none.
    # Before: IndexError in load_events (export --to speedscope): the empty event's profile
    # remapped the other event's stacks.
    f = FUZZ / "group-sample-type-0.perf.data"
    profs = load_events(f)
    assert [(p.event, p.samples) for p in profs] == [("cpu-clock", 72)]
    assert perfdata_profile_problem(profs[0]) is None
    r = run_cli("export", f, "--to", "speedscope", "-o", tmp_path / "x.json", check=0)
    assert "Traceback" not in r.stderr
    doc = json.loads((tmp_path / "x.json").read_text())
    assert [p["name"] for p in doc["profiles"]] == ["x86_64: cpu-clock"]
    r = run_cli("diff", f, DATA / "perfdata" / "plain.perf.data", "--format", "json", "--scope", "all", "--top", "0",
                check=0)
    assert diff_problem(json.loads(r.stdout)) is None


@pytest.mark.parametrize("to", ["folded", "pprof", "firefox", "speedscope"])
def test_export_of_no_samples_is_refused(tmp_path, to):
    # tiny, header data size 0x1da0 -> 1: the records are cut off, no sample is read. Before:
    # export --to folded, pprof and firefox wrote an empty profile and exited 0 (speedscope refused).
    out = tmp_path / "x"
    r = run_cli("export", FUZZ / "data-size-1.perf.data", "--to", to, "-o", out)
    assert r.returncode == 2
    assert_one_sentence_error(r)
    assert "holds no samples" in r.stderr and not out.exists()


def test_pprof_of_a_period_beyond_its_signed_values_is_refused(tmp_path):
    # tiny, the period of the middle sample 500000 -> 2^63 (the reader's 64 unsigned bits hold the
    # total). Before: export --to pprof raised ValueError "Value out of range" (a traceback, exit 1).
    f = FUZZ / "period-2e63.perf.data"
    r = run_cli("export", f, "--to", "pprof", "-o", tmp_path / "x.pb.gz")
    assert r.returncode == 2
    assert_one_sentence_error(r)
    assert "more than pprof's 64-bit values hold" in r.stderr and not (tmp_path / "x.pb.gz").exists()
    run_cli("export", f, "--to", "folded", "-o", tmp_path / "x.folded", check=0)


def test_samples_that_weigh_nothing_are_no_profile(tmp_path):
    # compressed/tiny.z, u64 at byte 840 (in the zstd frame) = 0x7f: one sample of period 0 is left.
    # Before: the load-path oracle called the profile wrong (a total weight of 0; it now passes: no
    # share to judge), and export wrote it with exit status 0 while diff refused it.
    f = FUZZ / "z-period-0.perf.data"
    prof = load(f)
    assert (prof.samples, prof.total_weight) == (1, 0.0)
    assert perfdata_profile_problem(prof) is None
    r = run_cli("diff", f, DATA / "perfdata" / "plain.perf.data", check=2)
    assert "holds no samples" in r.stderr
    r = run_cli("export", f, "--to", "speedscope", "-o", tmp_path / "x.json", check=2)
    assert_one_sentence_error(r)
    assert "holds no samples of any weight" in r.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("name", ["group-read-format-no-group", "group-sample-type-0", "data-size-1",
                                  "period-2e63", "z-period-0"])
def test_the_load_path_fixtures_pass_the_oracle(tmp_path, name):
    outcome, detail = run_one_perfdata(FUZZ / f"{name}.perf.data", "tiny-group.perf.data", 0, tmp_path, cli=True)
    assert outcome in ("ok", "error"), detail
