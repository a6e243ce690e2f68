"""A bisection's text, JSON and HTML name what each repetition contributed and, when GOOD's and BAD's
intervals fall into several modes, the modes (an outcome built by hand: rendering is pure)."""
import json
import math

from kperfdiff.bisect import decide, git
from kperfdiff.bisect.probe import Plan
from kperfdiff.bisect.run import Outcome, Step
from kperfdiff.core.modes import Modes
from kperfdiff.render import bisect as render
from schemas.test_schemas import validate


def outcome(value="p10", modes=None) -> Outcome:
    plan = Plan(repo="/r", good="a" * 40, bad="b" * 40, bench="select.file.100", cores=1, target="local",
                metric="time", build="./build.sh", config=None, params=())
    ref = decide.Difference(1.05, 1.03, 1.07, 0.001, True, se=0.01, df=9)
    g = git.Commit("a" * 40, "base", "A U Thor")
    b = git.Commit("b" * 40, "slower", "A U Thor")
    out = Outcome(plan=plan, commits=4, reference=ref, value=value, modes=modes, unit="ns")
    out.steps = [Step(g, "good", [700.0, 702.0, 701.0], [1]), Step(b, "bad", [735.0, 737.0, 736.0], [2])]
    return out


def test_value_and_modes_are_named_on_every_output():
    two = Modes((702.0, 1210.0), (0.45, 0.55), (950.0,))
    o = outcome(modes=two)
    text = render.to_text_report(o, None)
    assert "the 10th percentile of each repetition's intervals" in text
    assert "modes of GOOD and BAD: 2 modes: 702 ns (45%), 1210 ns (55%)" in text
    assert "follows the fastest mode" in text
    doc = validate("bisect", render.to_json_report(o, None))
    assert doc["value"] == "p10"
    assert doc["modes"] == [{"centre": 702.0, "share": 0.45}, {"centre": 1210.0, "share": 0.55}]
    assert "2 modes: 702 ns (45%)" in render.to_html_report(o, None)


def test_one_mode_and_the_median_say_so():
    o = outcome(value="median")
    text = render.to_text_report(o, None)
    assert "the median of each repetition's intervals" in text and "modes" not in text
    doc = json.loads(render.to_json_report(o, None))
    assert doc["value"] == "median" and doc["modes"] == []
    m = outcome(value="median", modes=Modes((702.0, 1210.0), (0.45, 0.55), (950.0,)))
    assert "repetition medians follow the mix of modes" in render.to_text_report(m, None)
    assert not math.isnan(o.reference.detectable)
