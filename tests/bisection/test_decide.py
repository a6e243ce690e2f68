"""The verdicts of a bisection from values alone: differ or not, like GOOD or like BAD or
undecided, with the pooled interval; exact counts decide with one value."""
import math

import pytest

from kperfdiff.bisect.decide import BAD, GOOD, UNDECIDED, Sample, classify, classify_in_rounds, difference, same_direction


def noisy(centre, spread, n, seed):
    import random
    r = random.Random(seed)
    return Sample(tuple(centre * math.exp(r.gauss(0, spread)) for _ in range(n)))


def test_exact_counts_decide_with_one_value():
    good, bad = Sample((1000.0,), exact=True), Sample((1100.0,), exact=True)
    assert difference(good, bad).significant
    assert classify(Sample((1000.0,), exact=True), good, bad).verdict == GOOD
    assert classify(Sample((1100.0,), exact=True), good, bad).verdict == BAD
    assert classify(Sample((1001.0,), exact=True), good, bad).verdict == GOOD     # nearer GOOD
    assert not difference(good, Sample((1000.0,), exact=True)).significant


def test_noisy_probes_decide_by_the_midpoint_and_wait_when_unsure():
    good, bad = noisy(100, 0.02, 8, 1), noisy(110, 0.02, 8, 2)
    assert difference(good, bad).significant
    assert classify(noisy(100, 0.02, 3, 3), good, bad).verdict == GOOD
    assert classify(noisy(110, 0.02, 3, 4), good, bad).verdict == BAD
    # a probe at the midpoint is not forced either way
    mid = Sample((math.sqrt(100 * 110),) * 3)
    assert classify(mid, good, bad).verdict == UNDECIDED
    # a regression that goes down (higher is better, or faster BAD) decides the same way
    assert classify(noisy(90, 0.02, 3, 5), noisy(100, 0.02, 8, 6), noisy(90, 0.02, 8, 7)).verdict == BAD


def test_no_difference_is_not_significant_and_too_few_repetitions_say_so():
    a, b = noisy(100, 0.05, 6, 8), noisy(100, 0.05, 6, 9)
    assert not difference(a, b).significant
    d = difference(Sample((1.0, 2.0)), Sample((3.0, 4.0)))
    assert not d.significant and "too few repetitions" in d.reason


def test_values_at_or_below_zero_are_refused():
    with pytest.raises(ValueError):
        difference(Sample((0.0, 1.0, 2.0)), Sample((1.0, 2.0, 3.0)))


def test_direction():
    up = difference(Sample((1.0,), True), Sample((2.0,), True))
    down = difference(Sample((2.0,), True), Sample((1.0,), True))
    assert same_direction(up, up) and not same_direction(up, down)


def test_a_probes_target_carries_its_image_and_arguments():
    from kperfdiff.bisect.probe import Build, Plan, probe_target
    plan = Plan("r", "g", "b", "proc.fork", 1, "qemu:x86_64,kernel=6.1,append=quiet,mem=1G", "time", None, None, ())
    assert probe_target(plan, Build(image="/k/bzImage", append="init_on_alloc=1")) == \
        "qemu:x86_64,mem=1G,kernel=/k/bzImage,append=quiet init_on_alloc=1"
    assert probe_target(plan, Build(append="x=1")) == "qemu:x86_64,kernel=6.1,mem=1G,append=quiet x=1"
    local = Plan("r", "g", "b", "proc.fork", 1, "local", "time", None, None, ())
    assert probe_target(local, Build(params=["proc.fork:intervals=5"])) == "local"


def test_the_build_commands_output_says_what_a_probe_runs(tmp_path):
    from kperfdiff.bisect.probe import parse_build_output
    img = tmp_path / "bzImage"
    img.write_bytes(b"k")
    b = parse_build_output(f"  CC kernel/fork.o\n{img}\nappend=a=1\nappend=b\nparam=proc.fork:intervals=5\n"
                           "symbols=System.map\nnot=a key\n")
    assert (b.image, b.append, b.params, b.symbols) == (str(img), "a=1 b", ["proc.fork:intervals=5"], "System.map")


def test_a_lava_probe_deploys_its_own_kernel_and_arguments(tmp_path):
    """A LAVA device type boots each probe's image: its kernel= and append= go into the
    specification the jobs are made from. (No job is submitted here: the fake LAVA's recorded log
    answers for two benchmarks, and a bisection measures one.)"""
    from kperfdiff.bisect.probe import Build, Plan, probe_target
    from kperfdiff.targets import validate_spec
    from kperfdiff.targets.lava.spec import parse_spec
    img = tmp_path / "bzImage"
    img.write_bytes(b"k")
    plan = Plan("r", "g", "b", "proc.fork", 1, "lava://lab.example.org/qemu,arch=x86_64,jobs=2", "time", None, None, ())
    spec = probe_target(plan, Build(image=str(img), append="init_on_alloc=1"))
    validate_spec(spec)
    ls = parse_spec(spec)
    assert (ls.kernel, ls.append, ls.arch) == (str(img), "init_on_alloc=1", "x86_64")


def test_paired_difference_sees_through_level_shifts():
    """GOOD and BAD measured one after the other, the machine's level moving 10% between rounds: the
    paired test finds BAD's 3% slowdown that Welch's test on the same values does not, and two
    equal commits measured that way stay not significant."""
    levels = [1.00, 1.10, 0.95, 1.08, 0.92, 1.05]
    good = Sample(tuple(1000 * x for x in levels))
    bad = Sample(tuple(1030 * x * (1 + 0.002 * (-1) ** i) for i, x in enumerate(levels)))
    paired = difference(good, bad, paired=True)
    assert paired.significant and paired.ratio == pytest.approx(1.03, abs=0.002) and paired.low > 1
    assert not difference(good, bad).significant
    same = Sample(tuple(1000 * x * (1 + 0.002 * (-1) ** i) for i, x in enumerate(levels)))
    assert not difference(good, same, paired=True).significant
    # unequal counts (a resumed side): the unpaired test
    assert difference(good, Sample(bad.values[:5]), paired=True).p == difference(good, Sample(bad.values[:5])).p


def test_a_probe_in_rounds_is_judged_against_its_own_good_and_bad():
    """GOOD, the probe and BAD measured one after the other in each round while the machine's level
    moves 10% between rounds: the rounds decide a probe at BAD's level (5% above GOOD) and one at
    GOOD's level in 5 rounds, where the pooled interval over the same values cannot; a probe half-way
    stays undecided; exact counts decide on their values."""
    levels = [1.00, 1.10, 0.95, 1.08, 0.92]
    jitter = [1.002, 0.998, 1.001, 0.999, 1.0]
    good = Sample(tuple(1000 * x * j for x, j in zip(levels, jitter)))
    bad = Sample(tuple(1050 * x * j for x, j in zip(levels, jitter[::-1])))
    like_bad = Sample(tuple(1050 * x * j for x, j in zip(levels, jitter[1:] + jitter[:1])))
    like_good = Sample(tuple(1000 * x * j for x, j in zip(levels, jitter[2:] + jitter[:2])))
    v = classify_in_rounds(like_bad, good, bad)
    assert v.verdict == BAD and v.ratio == pytest.approx(1.05, abs=0.005) and v.low > v.midpoint
    assert v.midpoint == pytest.approx(math.sqrt(1.05), abs=0.003)
    assert classify_in_rounds(like_good, good, bad).verdict == GOOD
    assert classify(like_bad, good, bad).verdict == UNDECIDED          # the pooled interval: shifts are noise
    half = Sample(tuple(1000 * math.sqrt(1.05) * x for x in levels))
    assert classify_in_rounds(half, good, bad).verdict == UNDECIDED
    assert classify_in_rounds(Sample((2.0, 2.0), True), Sample((1.0, 1.0), True), Sample((2.0, 2.0), True)).verdict == BAD
    with pytest.raises(ValueError):
        classify_in_rounds(Sample((1.0, 2.0, 3.0)), Sample((1.0, 2.0)), Sample((1.0, 2.0)))


def test_a_difference_states_what_it_could_detect():
    levels = [1.00, 1.10, 0.95, 1.08, 0.92, 1.05]
    good = Sample(tuple(1000 * x for x in levels))
    bad = Sample(tuple(1030 * x * (1 + 0.002 * (-1) ** i) for i, x in enumerate(levels)))
    paired, welch = difference(good, bad, paired=True), difference(good, bad)
    assert 0 < paired.detectable < 3 < welch.detectable and paired.df == 3      # 6 pairs, 1 cut from each end
    assert difference(Sample((1.0,), True), Sample((2.0,), True)).detectable == 0
