"""Emitted build outputs, parsed back."""
import pytest

from kperfdiff.core.errors import InputError
from kperfdiff.place import emit
from kperfdiff.place.inputs import HwModel


def test_linker_fragment_round_trip():
    hw = HwModel(function_align=4)
    sizes = {"copy_page_range": 1534, "dup_mmap": 1200, "clear_page_erms": 16}
    text = emit.linker_fragment(list(sizes), sizes, hw, 4096)
    back = emit.parse_linker_fragment(text)
    assert back == {"section": ".text_itcm", "functions": list(sizes), "capacity": 4096}
    assert "*(.tcm.text)" in text
    # the comment's byte count is the aligned total
    assert f"{1536 + 1200 + 16} of 4096 bytes" in text


def test_linker_fragment_other_region():
    hw = HwModel(fast_name="HOTTEXT", fast_section=".text.hot", function_align=16, line_size=64)
    text = emit.linker_fragment(["a.constprop.0"], {"a.constprop.0": 40}, hw, 65536)
    back = emit.parse_linker_fragment(text)
    assert back == {"section": ".text.hot", "functions": ["a.constprop.0"], "capacity": 65536}


def test_linker_fragment_refuses_overflow():
    with pytest.raises(InputError, match="needs 8192 bytes but ITCM holds 4096"):
        emit.linker_fragment(["big"], {"big": 8192}, HwModel(), 4096)


def test_parse_rejects_other_text():
    with pytest.raises(InputError):
        emit.parse_linker_fragment("SECTIONS { .text : { *(.text) } }")


def test_annotations_local_only_when_all_callers_placed():
    calls = {("a", "b"): 10.0, ("a", "c"): 5.0, ("x", "c"): 1.0, ("b", "d"): 2.0}
    ann = dict(emit.annotations(["a", "b", "c"], calls))
    assert ann == {"a": "__tcmfunc", "b": "__tcmlocalfunc", "c": "__tcmfunc"}
    text = emit.annotations_text(list(ann.items()))
    assert "__tcmlocalfunc\tb" in text


def test_ordering_clusters_callers_with_callees():
    selfc = {"hot": 100.0, "callee": 50.0, "cold": 1.0, "other": 30.0}
    sizes = {"hot": 100, "callee": 100, "cold": 1000, "other": 50}
    calls = {("hot", "callee"): 10.0, ("other", "cold"): 0.1}
    order = emit.ordering(list(sizes), selfc, sizes, calls, exclude={"other"})
    assert order[:2] == ["hot", "callee"]
    assert "other" not in order
    assert order == ["hot", "callee", "cold"]
