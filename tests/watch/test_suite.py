"""The suite file of a watch: the examples parse; every field lands where the watch reads it."""
import pytest

from support import ROOT
from kperfdiff.watch import suite as suites


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "watch").glob("*.toml")), ids=lambda p: p.name)
def test_the_examples_parse(path):
    s = suites.parse(path)
    assert s.name and s.benches and s.targets


def test_every_field_is_read(tmp_path):
    (tmp_path / "guest.config").write_text("CONFIG_PREEMPT=y\n")
    f = tmp_path / "s.toml"
    f.write_text('name = "n"\nbenchmarks = ["proc.fork@2", "syscall.null"]\nparams = { "proc.fork:hello" = "/bin/true" }\n'
                 'targets = ["qemu:arm64,deterministic", "qemu:x86_64,deterministic"]\nmetric = "instructions"\n'
                 'reps = 2\nmax_reps = 1\nverify_reps = 4\nconfig = "guest.config"\nbuild_timeout = 60\ncommits = 5\n'
                 'improvements = true\nprofile = true\nbracket = false\n')
    s = suites.parse(f)
    fork, null = s.benches
    assert (fork.id, fork.param_args, null.id) == ("proc.fork@2 hello=/bin/true", ("proc.fork:hello=/bin/true",),
                                                   "syscall.null@1")
    assert s.targets == ("qemu:arm64,deterministic", "qemu:x86_64,deterministic") and s.metric == "instructions"
    assert (s.reps, s.max_reps, s.verify_reps, s.build, s.build_timeout) == (2, 2, 4, None, 60.0)
    assert s.config == str(tmp_path / "guest.config") and (s.every, s.newest_only, s.commits) == (5, False, "every 5")
    assert s.improvements and s.profile and not s.bracket
    f.write_text('name = "n"\nbenchmarks = ["syscall.null"]\ntargets = ["qemu:arm64"]\ncommits = "newest"\n')
    s = suites.parse(f)
    assert (s.newest_only, s.commits, s.build, s.config, s.reps, s.improvements, s.bracket) == (
        True, "newest", None, None, 5, False, True)


def test_a_build_folder_can_go_into_a_target_specification(tmp_path):
    """The image a build prints is kept in the commit's build folder and booted as kernel=PATH, inside a
    target specification that commas split: the folder's path has none (make test-sentinel once failed
    on 'builds/qemu:x86_64,deterministic/...')."""
    from kperfdiff.store import Store
    from kperfdiff.targets.qemu import parse_spec
    from kperfdiff.watch.run import build_folder
    f = tmp_path / "s.toml"
    f.write_text('name = "w"\nbenchmarks = ["proc.fork"]\ntargets = ["qemu:x86_64,deterministic"]\n'
                 'metric = "instructions"\n')
    suite = suites.parse(f)
    out = build_folder(Store.open(tmp_path / "k.db"), suite, suite.targets[0], "7d8a3a7a85683c41e415d2a32df244cd2854b665")
    assert "," not in str(out) and ":" not in out.name and out.name == "7d8a3a7a8568"
    assert parse_spec(f"{suite.targets[0]},kernel={out / 'bzImage'}").kernel == str(out / "bzImage")
