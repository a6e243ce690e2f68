"""render/table.percent: the one percentage formatter of the renderers and studies, in each form they print."""
import math

import pytest

from kperfdiff.render.table import percent


@pytest.mark.parametrize("args, kwargs, want", [
    # a change in percent, as compare and place print it: signed, one digit, '%' added by the caller
    ((12.345,), dict(signed=True), "+12.3"),
    ((-0.04,), dict(signed=True), "-0.0"),
    ((0.0,), dict(signed=True), "+0.0"),
    # a CV kept as a fraction (bench show): one digit and a '%'
    ((0.0314,), dict(fraction=True, mark=True), "3.1%"),
    # a share of samples as a fraction (flame graph), and its change in percentage points
    ((0.05,), dict(digits=2, fraction=True, mark=True), "5.00%"),
    ((-0.1,), dict(digits=2, signed=True, fraction=True), "-10.00"),
    # a share already in percent (shootdown study)
    ((16.0, 2), {}, "16.00"),
    # a growth ratio - 1 (linear-map study): no digits, signed, '%'
    ((0.5, 0), dict(signed=True, fraction=True, mark=True), "+50%"),
    ((-1.0, 0), dict(signed=True, fraction=True, mark=True), "-100%"),
    # large and integer values keep every digit
    ((123456789,), {}, "123456789.0"),
    ((7,), dict(signed=True), "+7.0"),
])
def test_percent_forms(args, kwargs, want):
    assert percent(*args, **kwargs) == want


@pytest.mark.parametrize("v", [None, math.nan, float("nan")])
def test_percent_of_nothing_is_a_dash_without_the_mark(v):
    assert percent(v) == "-"
    assert percent(v, 2, signed=True, fraction=True, mark=True) == "-"


def test_markdown_text_has_no_html_entities_and_still_cannot_open_a_tag():
    from kperfdiff.render.table import md_escape
    prose = "significant = q <= 0.05, a > b, 1<2"
    assert md_escape(prose) == prose                       # plain text reads as written in a mail
    assert "&" not in md_escape("<script>x</script> <!-- c --> <?php")
    # every '<' that CommonMark would read as the start of a tag is escaped with a backslash
    assert md_escape("<script>x</script>") == "\\<script>x\\</script>"
    assert md_escape("a|b") == "a\\|b"
