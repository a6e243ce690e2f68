"""Differential flame graph SVG: valid XML, names escaped, widths and colours."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kperfdiff.diff import DiffOptions, add_folded, diff_profiles
from kperfdiff.ingest.load import load
from kperfdiff.render.flamegraph import differential_svg

DATA = Path(__file__).resolve().parent / "data"
NS = "{http://www.w3.org/2000/svg}"
EVIL = '<script>alert("x")</script>&\'quoted\''


def _svg(tmp_path, a_text, b_text, **opts):
    pa, pb = tmp_path / "a.folded", tmp_path / "b.folded"
    pa.write_text(a_text)
    pb.write_text(b_text)
    a, b = load(pa), load(pb)
    res = add_folded(diff_profiles([a], [b], DiffOptions(**opts)), [a], [b])
    return differential_svg(res)


def test_svg_parses_and_escapes_names(tmp_path):
    svg = _svg(tmp_path,
               f"app;entry_SYSCALL_64_[k];{EVIL}_[k] 10\napp;main 90\n",
               f"app;entry_SYSCALL_64_[k];{EVIL}_[k] 30\napp;main 70\n", scope="all")
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    tags = {el.tag for el in root.iter()}
    assert NS + "script" not in tags and "script" not in tags
    titles = [el.text for el in root.iter(NS + "title")]
    mine = [t for t in titles if t.startswith(EVIL)]
    assert mine, titles
    # both shares and the change, in percent of each side's samples
    assert "a: 10.00%" in mine[0] and "b: 30.00%" in mine[0] and "+20.00 percentage points" in mine[0]
    assert "http://" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_widths_from_b_and_colours(tmp_path):
    svg = _svg(tmp_path,
               "k1_[k];grow_[k] 10\nk1_[k];shrink_[k] 40\nk1_[k];same_[k] 50\n",
               "k1_[k];grow_[k] 30\nk1_[k];shrink_[k] 20\nk1_[k];same_[k] 50\n")
    root = ET.fromstring(svg)
    frames = {}
    for g in root.iter(NS + "g"):
        t = g.find(NS + "title")
        r = g.find(NS + "rect")
        if t is not None and r is not None:
            frames[t.text.split("\n")[0]] = r
    w = {k: float(v.get("width")) for k, v in frames.items()}
    assert abs(w["grow"] / w["shrink"] - 1.5) < 0.01
    assert abs(w["same"] / w["shrink"] - 2.5) < 0.01

    def rgb(name):
        return tuple(int(x) for x in re.findall(r"\d+", frames[name].get("fill")))
    r, g, b = rgb("grow")
    assert r > g and r > b            # red: grew
    r, g, b = rgb("shrink")
    assert b > r and b > g            # blue: shrank
    r, g, b = rgb("same")
    assert r == g == b                # unchanged


def test_equivalent_frames_merge_in_flamegraph():
    a = load(DATA / "diff" / "arm64.folded")
    b = load(DATA / "diff" / "x86_64.folded")
    res = add_folded(diff_profiles([a], [b]), [a], [b])
    root = ET.fromstring(differential_svg(res))
    names = [el.text.split("\n")[0] for el in root.iter(NS + "title")]
    assert "[page fault entry]" in names and "clear_page" in names and "clear_page_erms" not in names
    assert "exc_page_fault" not in names
