"""The kernel counters of a bisection's explanation (kperfdiff.bisect.counters), on synthetic stored
runs shaped as a deterministic guest's: each repetition lasts the same virtual time, so the culprit,
dearer per operation, does 2.04% fewer operations in it. The counters with the same count per
repetition (timer and rescheduling interrupts) moved +2.08% per operation with the operation count
alone: they are left out of the table and named, on every output; a counter that moved with the
kernel stays, and one that follows the operations did not move."""
import math
from types import SimpleNamespace

from kperfdiff import store as st
from kperfdiff.analysis.culprit import Explanation
from kperfdiff.bisect import counters
from kperfdiff.commands import bisect as command
from kperfdiff.render import bisect as render
from render.test_bisect_render import outcome
from schemas.test_schemas import validate

PARENT_OPS, CULPRIT_OPS = 49_000, 48_000     # operations per repetition: 2.04% fewer in the culprit


def stored_side(s, ops: int, counts, runs: int = 2) -> list[int]:
    """``runs`` runs of select.file.100, one repetition each, ``ops`` operations and ``counts`` (a
    function of the operations) counted in it."""
    ids = []
    machine = s.add_machine({"arch": "x86_64", "hostname": "guest", "kernel_release": "6.1.0"})
    for i in range(runs):
        run = s.start_run(label=f"side{ops}-{i}", machine_id=machine)
        s.add_result(run.id, benchmark="select.file.100", params={}, copies=1, status="ok", reason=None, unit="ns",
                     better="lower", summary={"n": 1}, raw=[(0, 0, 0, 1000.0, ops, 10 ** 9)], ops=ops,
                     monitors={**counts(ops), "vmstat.nr_free_pages": 5000 + i}, info=[{"rep": 0, "copy": 0}])
        s.finish_run(run.id, "complete")
        ids.append(run.id)
    return ids


def guest(ops: int, culprit: bool) -> dict:
    return {"irq.LOC": 250, "irq.RES": 12,                 # per repetition: they follow its virtual time
            "vmstat.pgfault": 130 * ops,                   # per operation: they follow the operations
            "vmstat.pgalloc_normal": (44 if culprit else 40) * ops,     # per operation, moved by the culprit: +10%
            "irq.CAL": 255 if culprit else 250}            # per repetition, moved by the culprit: +2%


def test_counters_that_follow_the_operation_count_are_left_out_and_named(tmp_path):
    s = st.Store.open(tmp_path / "k.db")
    parent = stored_side(s, PARENT_OPS, lambda n: guest(n, False))
    culprit = stored_side(s, CULPRIT_OPS, lambda n: guest(n, True))
    o = outcome()
    o.parent_runs, o.culprit_runs = parent, culprit
    args = SimpleNamespace(top=10, no_profile=True, store=str(tmp_path / "k.db"))
    ex = command.explain(s, args, o)
    assert ex.counters_left_out == ["irq.LOC", "irq.RES"]
    assert ex.ops_ratio == CULPRIT_OPS / PARENT_OPS
    # pgalloc moved 10% per operation; irq.CAL 2% more per repetition is +4.13% per operation, not +2.08%
    assert [name for name, _, _ in ex.counters] == ["vmstat.pgalloc_normal", "irq.CAL"]
    assert ex.counters[0][1:] == (40, 44)

    text = render.to_text_report(o, ex)
    assert ("left out: 2 counters with the same count per repetition in parent and culprit (irq.LOC, irq.RES): "
            "per operation they moved +2.08% only because the culprit did 2.04% fewer operations per repetition"
            in text)
    table = text[text.index("counter (per operation)"):]
    assert "vmstat.pgalloc_normal" in table and "+10.00%" in table and "+4.13%" in table
    assert "irq.LOC " not in table and "+2.08%  " not in table
    doc = validate("bisect", render.to_json_report(o, ex))
    assert doc["explanation"]["counters_left_out"] == ["irq.LOC", "irq.RES"]
    assert [c["name"] for c in doc["explanation"]["counters"]] == ["vmstat.pgalloc_normal", "irq.CAL"]
    assert doc["explanation"]["ops_per_repetition_ratio"] == CULPRIT_OPS / PARENT_OPS
    page = render.to_html_report(o, ex)
    assert "left out: 2 counters with the same count per repetition" in page and "vmstat.pgalloc_normal" in page


def test_when_every_moved_counter_follows_the_operation_count_the_table_goes_and_the_note_stays():
    """Every counter at +2.08%, as a deterministic guest's culprit showed them: no table, one note."""
    per_rep = {f"irq.{n}": 100 + n for n in range(12)}
    a = counters.Totals(ops=PARENT_OPS * 3, reps=3, counts={k: 3 * v for k, v in per_rep.items()})
    b = counters.Totals(ops=CULPRIT_OPS * 2, reps=2, counts={k: 2 * v for k, v in per_rep.items()})
    ch = counters.compare(a, b)
    assert ch.moved == [] and ch.only_ops == sorted(per_rep)
    ex = Explanation(command="kperfdiff diff ...", counters_left_out=ch.only_ops, ops_ratio=ch.ops_ratio,
                            error="no profiles were taken (--no-profile)")
    assert render.counters_table(ex) is None
    note = render.counters_note(ex)
    assert note.startswith("left out: 12 counters with the same count per repetition") and " and 4 more)" in note
    assert "No other kernel counter moved." in render.to_html_report(outcome(), ex)


def test_the_same_operations_per_repetition_leave_nothing_out():
    """With as many operations per repetition on both sides, a counter that moved per operation moved
    per repetition too: it stays, and a side without operations gives no counters at all."""
    a = counters.Totals(ops=1000, reps=1, counts={"irq.LOC": 250, "vmstat.pgfault": 1000})
    b = counters.Totals(ops=1000, reps=1, counts={"irq.LOC": 260, "vmstat.pgfault": 1000})
    ch = counters.compare(a, b)
    assert ch.moved == [("irq.LOC", 0.25, 0.26)] and ch.only_ops == [] and ch.ops_ratio == 1
    none = counters.compare(counters.Totals(), b)
    assert none.moved == [] and none.only_ops == [] and math.isnan(none.ops_ratio)
    assert render.counters_note(Explanation()) == ""
