import math

import numpy as np
import pytest

from kperfdiff.core import stats


def test_summarize_hand_computed():
    s = stats.summarize([4, 1, 3, 2])
    assert s.n == 4
    assert s.median == 2.5
    assert (s.min, s.max) == (1, 4)
    # type 7 quartiles of 1,2,3,4: 1 + 0.75*(2-1) and 3 + 0.25*(4-3)
    assert s.q1 == pytest.approx(1.75)
    assert s.q3 == pytest.approx(3.25)
    assert s.mean == 2.5
    # sample sd: sqrt(((1.5^2+0.5^2)*2)/3) = sqrt(5/3)
    assert s.stdev == pytest.approx(math.sqrt(5 / 3))
    assert s.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_summarize_single_and_bad():
    s = stats.summarize([7.0])
    assert s.median == 7.0 and math.isnan(s.cv)
    with pytest.raises(ValueError):
        stats.summarize([])
    with pytest.raises(ValueError):
        stats.summarize([1.0, float("nan")])


def test_signed_change_direction():
    assert stats.signed_change(100, 80, "lower") == pytest.approx(25.0)     # 1.25x as fast
    assert stats.signed_change(100, 200, "lower") == pytest.approx(-50.0)   # half as fast
    assert stats.signed_change(100, 150, "higher") == pytest.approx(50.0)
    assert stats.signed_change(2, 1, "higher") == pytest.approx(-50.0)      # symmetric with lower
    assert stats.signed_change(100, 1e9, "lower") > -100
    assert math.isnan(stats.signed_change(0, 1, "lower"))
    with pytest.raises(ValueError):
        stats.signed_change(1, 2, "sideways")


def test_nested_change_direction_and_ends():
    base = [[100, 101, 99], [102, 100, 101], [98, 99, 100]]
    faster = [[v / 1.25 for v in r] for r in base]
    ch = stats.nested_change(base, faster, "lower")
    assert ch.change == pytest.approx(25.0)
    assert ch.low < 25.0 < ch.high and ch.p < 0.01 and ch.significant is False   # decided per table
    up = stats.nested_change(base, faster, "higher")          # the same numbers as a throughput
    assert up.change == pytest.approx(-20.0) and up.low < -20 < up.high


def test_nested_change_identical_repetitions():
    same = [[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]]
    ch = stats.nested_change(same, same, "lower")
    assert (ch.change, ch.low, ch.high, ch.p) == (0.0, 0.0, 0.0, 1.0)
    other = [[4.0, 4.0]] * 3
    ch = stats.nested_change(same, other, "lower")
    assert ch.change == pytest.approx(25.0) and ch.p == 0.0


def test_nested_change_refuses_bad_input():
    with pytest.raises(ValueError):
        stats.nested_change([[1.0]] * 3, [[1.0]] * 3, "sideways")
    ch = stats.nested_change([[0.0]] * 3, [[1.0]] * 3, "lower")
    assert math.isnan(ch.change) and "zero or negative" in ch.reason


def test_centre_half_width():
    reps = [[10.0], [11.0], [12.0]]
    lg = [math.log(x) for x in (10, 11, 12)]
    m = sum(lg) / 3
    se = math.sqrt(sum((x - m) ** 2 for x in lg) / 2 / 3)
    from scipy import stats as sst
    assert stats.centre_half_width(reps) == pytest.approx((math.exp(sst.t.ppf(0.975, 2) * se) - 1) * 100)
    assert math.isnan(stats.centre_half_width(reps[:2]))


def test_welch_against_hand_computation():
    a = [1.0, 2.0, 3.0, 4.0]
    b = [2.0, 4.0, 6.0, 8.0]
    d, lo, hi, p = stats.welch_interval(a, b)
    assert d == pytest.approx(2.5)
    # var a = 5/3, var b = 20/3; se = sqrt(5/12 + 20/12) = sqrt(25/12)
    se = math.sqrt(25 / 12)
    df = (25 / 12) ** 2 / ((5 / 12) ** 2 / 3 + (20 / 12) ** 2 / 3)
    from scipy import stats as sst
    t = sst.t.ppf(0.975, df)
    assert lo == pytest.approx(2.5 - t * se)
    assert hi == pytest.approx(2.5 + t * se)
    assert p == pytest.approx(2 * sst.t.sf(2.5 / se, df))


def test_fdr_significant_marks_by_q():
    q, sig = stats.fdr_significant([0.01, 0.04, 0.03, 0.20, float("nan")])
    assert list(sig) == [True, False, False, False, False]
    assert q[0] == pytest.approx(0.04)


def test_benjamini_hochberg_hand_computed():
    p = [0.01, 0.04, 0.03, 0.20]
    # sorted 0.01,0.03,0.04,0.20 -> *4/rank = 0.04,0.06,0.0533,0.20 -> monotone 0.04,0.0533,0.0533,0.20
    q = stats.benjamini_hochberg(p)
    assert q == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.20])
    q2 = stats.benjamini_hochberg([0.5, float("nan")])
    assert q2[0] == pytest.approx(0.5) and math.isnan(q2[1])


def test_geometric_mean_change():
    # ratios 1.1 and 0.9 -> sqrt(0.99) - 1
    assert stats.geometric_mean_change([10, -10]) == pytest.approx((math.sqrt(0.99) - 1) * 100)
    assert math.isnan(stats.geometric_mean_change([]))


def test_ratio_half_width():
    # +700% [+600, +800]: ratios 7..9 around 8 -> sqrt(9/7) - 1
    assert stats.ratio_half_width(600, 800) == pytest.approx((math.sqrt(9 / 7) - 1) * 100)
    assert stats.ratio_half_width(-10, 10) == pytest.approx((math.sqrt(1.1 / 0.9) - 1) * 100)
    assert math.isnan(stats.ratio_half_width(float("nan"), 1)) and math.isnan(stats.ratio_half_width(-100, 5))


def test_exact_counts_compare_without_a_warning(recwarn):
    # Deterministic guests repeat instruction counts exactly: no scipy precision warning reaches the
    # user, equal counts are no change, different ones a certain one with a zero-width interval.
    same = stats.nested_change([[160510312.0]] * 3, [[160510312.0]] * 3, "lower")
    assert same.change == 0 and same.low == same.high == 0 and same.p == 1.0
    fewer = stats.nested_change([[160510312.0]] * 3, [[67228227.0]] * 3, "lower")
    assert fewer.low == fewer.high == pytest.approx(fewer.change) and fewer.p == 0.0 and fewer.change > 100
    nearly = stats.nested_change([[5e6]] * 3, [[5e6], [5e6], [5e6 + 1]], "lower")   # scipy warned here
    assert not math.isnan(nearly.p) and abs(nearly.change) < 1e-4
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_benjamini_hochberg_and_welch_agree_with_scipy_stats():
    from scipy import stats as sst
    rng = np.random.default_rng(7)
    for m in (1, 2, 5, 40, 300):
        p = rng.uniform(0, 1, m) ** 3
        p[rng.integers(0, m, m // 5)] = p[0]            # ties
        assert stats.benjamini_hochberg(p) == pytest.approx(sst.false_discovery_control(p, method="bh"), rel=1e-12)
    for _ in range(50):
        a, b = rng.normal(10, 2, rng.integers(2, 12)), rng.normal(11, 3, rng.integers(2, 12))
        d, lo, hi, p = stats.welch_interval(a, b, confidence=0.9)
        t = sst.ttest_ind(b, a, equal_var=False)
        assert p == pytest.approx(t.pvalue, rel=1e-9)
        ci = t.confidence_interval(0.9)
        assert (lo, hi) == (pytest.approx(ci.low, rel=1e-9), pytest.approx(ci.high, rel=1e-9))


def test_nested_change_and_t_equal_scipy_stats():
    # The two-level interval goes through welch_interval and scipy.special (scipy.stats costs 0.7 s
    # to import): it gives ttest_ind's interval and p-value on the log repetition medians.
    from scipy import stats as sst
    rng = np.random.default_rng(7)
    for n_a, n_b in ((3, 3), (3, 9), (12, 5)):
        reps_a = [list(rng.lognormal(5.0, 0.05, 11)) for _ in range(n_a)]
        reps_b = [list(rng.lognormal(5.02, 0.2, 11)) for _ in range(n_b)]
        ch = stats.nested_change(reps_a, reps_b, "higher")
        la = np.log([np.median(r) for r in reps_a])
        lb = np.log([np.median(r) for r in reps_b])
        res = sst.ttest_ind(lb, la, equal_var=False)
        ci = res.confidence_interval(0.95)
        assert ch.p == pytest.approx(res.pvalue, rel=1e-9)
        assert (ch.low, ch.high) == pytest.approx(((math.exp(ci.low) - 1) * 100, (math.exp(ci.high) - 1) * 100),
                                                  rel=1e-9)
    assert stats.t_quantile(0.975, 7.5) == pytest.approx(sst.t.ppf(0.975, 7.5), rel=1e-12)
    assert stats.t_two_sided_p(-2.1, 4.2) == pytest.approx(2 * sst.t.sf(2.1, 4.2), rel=1e-12)


def test_repetition_medians_equal_numpy():
    reps = [[3.0, 1.0, 2.0], [4.0, 1.0, 2.0, 3.0], [7], [1.0, float("nan"), 2.0], [2.5, 2.5]]
    got = stats.repetition_medians(reps)
    want = [np.median(r) for r in reps]
    assert list(got[:3]) == want[:3] and got[4] == want[4] and math.isnan(got[3])


def test_statistics_of_a_comparison_do_not_import_scipy_stats():
    # scipy.stats takes ~0.7 s to import: more than every other part of `show` or `compare`.
    import subprocess
    import sys
    code = ("import sys; from kperfdiff.core import stats; r = [[1.0, 1.1], [1.2], [0.9, 1.0], [1.05]]; "
            "stats.nested_change(r, r[::-1], 'lower'); stats.centre_half_width(r); stats.fdr_significant([0.1]); "
            "stats.run_level_change(r, r[::-1], 'lower', [[r, r[::-1], r]]); stats.welch_interval([1, 2], [2, 4]); "
            "print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_repetition_quantiles_match_numpy():
    rng = np.random.default_rng(3)
    reps = [list(rng.lognormal(7, 0.1, n)) for n in (1, 2, 11, 40)] + [[]]
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        got = stats.repetition_quantiles(reps, q)
        assert got.tolist() == pytest.approx([float(np.percentile(r, q * 100)) for r in reps if r], rel=1e-12)
    assert stats.repetition_quantiles(reps, 0.5).tolist() == pytest.approx(stats.repetition_medians(reps).tolist())
    # half of a repetition slowed by 30% moves its median, hardly its low decile
    calm = [1000.0 + i for i in range(11)]
    hit = calm[:5] + [v * 1.3 for v in calm[5:]]
    assert stats.repetition_medians([hit])[0] / stats.repetition_medians([calm])[0] > 1.25
    assert stats.repetition_quantiles([hit], 0.1)[0] == stats.repetition_quantiles([calm], 0.1)[0]
    with pytest.raises(ValueError):
        stats.repetition_quantiles(reps, 1.5)


def test_trimmed_mean_interval_keeps_its_level_and_cuts_a_value_far_out():
    rng = np.random.default_rng(11)
    # under 5 values nothing is cut: Student's interval of the mean
    x = [0.01, -0.02, 0.03, 0.00]
    assert stats.trimmed_mean_interval(x) == pytest.approx(stats.mean_interval(x))
    # its level on normal null samples of 5 to 15 values: near 5% (binomial sd ~0.5 points over 2,000)
    for n in (5, 9, 15):
        rejected = sum(stats.trimmed_mean_interval(rng.normal(0, 1, n))[3] < 0.05 for _ in range(2000))
        assert 0.03 <= rejected / 2000 <= 0.075, (n, rejected)
    # one round far out (a whole process slowed by half): Student's t loses the shift, the trimmed mean not
    d = [0.05, 0.047, 0.052, 0.049, 0.051, 0.048, 0.05, 0.053, 0.046, -0.49]
    m, lo, hi, p, se, df = stats.trimmed_mean_interval(d)
    assert 0.045 < m < 0.055 and lo > 0 and p < 0.001 and df == 5
    assert stats.mean_interval(d)[3] > 0.5


def test_sequential_levels_keep_the_overall_level_over_every_look_and_most_of_it_for_the_last():
    looks = tuple(range(5, 30, 2)) + (30,)           # bisect's reference with --reps 5 --max-reps 30
    interim, final = stats.sequential_levels(looks, 0.02)
    assert interim == stats.INTERIM_ALPHA
    # Bonferroni would test each of the 14 looks at 0.0014; the last keeps most of the 2% here
    assert 0.015 < final < 0.02
    assert stats.sequential_levels((5,), 0.02) == (stats.INTERIM_ALPHA, 0.02)
    # the whole sequential test (Yuen's trimmed interval at each look, stop at the first crossing)
    # on null samples, normal and with t3 tails: about 2% called different in all
    rng = np.random.default_rng(3)
    for draw in (lambda: rng.normal(0, 1, 30), lambda: rng.standard_t(3, 30)):
        rejected = 0
        for _ in range(1500):
            x = draw()
            rejected += any(stats.trimmed_mean_interval(x[:n])[3] < (final if n == looks[-1] else interim)
                            for n in looks)
        assert 0.01 <= rejected / 1500 <= 0.03, rejected
    # a shift of half a standard deviation, 30 values: found by the last look far more often than at
    # Bonferroni's level
    hits = [0, 0]
    for _ in range(400):
        x = rng.normal(0.5, 1, 30)
        p = stats.trimmed_mean_interval(x)[3]
        hits[0] += p < final
        hits[1] += p < 0.02 / len(looks)
    assert hits[0] > hits[1] * 1.3, hits
    for bad in ((), (5, 5), (7, 5)):
        with pytest.raises(ValueError):
            stats.sequential_levels(bad, 0.02)
    with pytest.raises(ValueError):
        stats.sequential_levels((5, 7), 0.0005)
