"""Differential flame graph SVG: valid XML, names escaped, widths and colours, the union of both
sides' stacks with one-sided frames marked, and the interactive script (driven in headless Chromium
here, through tests/support/chromium.py)."""
from __future__ import annotations

import gzip
import re
import xml.etree.ElementTree as ET

from support.chromium import Chrome, Page, needs_chromium
from support import DATA, run_cli
from kperfdiff.analysis.profile_diff import DiffOptions, add_folded, diff_profiles
from kperfdiff.ingest.load import load
from kperfdiff.render.flamegraph import differential_svg
from kperfdiff.render.flamescript import SCRIPT

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
    # the only script is the constant one; the evil name is text
    scripts = [el.text for el in root.iter() if el.tag in (NS + "script", "script")]
    assert scripts == [SCRIPT]
    titles = [el.text for el in root.iter(NS + "title")]
    mine = [t for t in titles if t.startswith(EVIL)]
    assert mine, titles
    # both shares and the change, in percent of each side's samples
    assert "a: 10.00%" in mine[0] and "b: 30.00%" in mine[0] and "+20.00 percentage points" in mine[0]
    assert "http://" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")


def _frames(svg):
    """name -> the frame's <g>, from the first line of its tooltip."""
    frames = {}
    for g in ET.fromstring(svg).iter(NS + "g"):
        t = g.find(NS + "title")
        if t is not None and g.find(NS + "rect") is not None:
            frames[t.text.split("\n")[0]] = g
    return frames


def test_widths_from_both_sides_and_colours(tmp_path):
    svg = _svg(tmp_path,
               "k1_[k];grow_[k] 10\nk1_[k];shrink_[k] 40\nk1_[k];same_[k] 50\n",
               "k1_[k];grow_[k] 30\nk1_[k];shrink_[k] 20\nk1_[k];same_[k] 50\n")
    g = _frames(svg)
    frames = {k: v.find(NS + "rect") for k, v in g.items()}
    w = {k: float(v.get("width")) for k, v in frames.items()}
    # the mean of both shares: grow (10+30)/2 = 20, shrink (40+20)/2 = 30, same 50 of 100
    assert abs(w["grow"] / w["shrink"] - 20 / 30) < 0.01
    assert abs(w["same"] / w["shrink"] - 50 / 30) < 0.01
    assert abs(w["k1"] - 1180) < 0.01

    def rgb(name):
        return tuple(int(x) for x in re.findall(r"\d+", frames[name].get("fill")))
    # the script's data: each side's share
    assert (g["grow"].get("data-a"), g["grow"].get("data-b")) == ("0.1", "0.3")
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


def test_one_sided_paths_are_drawn_and_marked(tmp_path):
    """A path absent from B is drawn (at half its share of A) and hatched, and so is one absent from A."""
    svg = _svg(tmp_path, "app;old 40\napp;main 60\n", "app;new 50\napp;main 50\n", scope="all")
    g = _frames(svg)
    w = {k: float(v.find(NS + "rect").get("width")) for k, v in g.items()}
    assert abs(w["old"] - 0.20 * 1180) < 0.01 and abs(w["new"] - 0.25 * 1180) < 0.01
    assert abs(w["main"] - 0.55 * 1180) < 0.01 and abs(w["app"] - 1180) < 0.01
    assert g["old"].find(NS + "rect").get("fill") == "url(#kpd-only-a)"
    assert g["new"].find(NS + "rect").get("fill") == "url(#kpd-only-b)"
    assert g["main"].find(NS + "rect").get("fill").startswith("rgb(")
    tip = g["old"].find(NS + "title").text
    assert "a: 40.00%" in tip and "b: 0.00%" in tip and "-40.00 percentage points" in tip and "only in a" in tip
    assert "only in b" in g["new"].find(NS + "title").text
    root = ET.fromstring(svg)
    ids = {el.get("id") for el in root.iter(NS + "pattern")}
    assert ids == {"kpd-only-a", "kpd-only-b"}
    legend = " ".join(el.text or "" for el in root.iter(NS + "text"))
    assert "width: the mean of a frame's shares of a's and of b's samples" in legend
    assert "only in a" in legend and "only in b" in legend
    assert "40.00% of a is on paths absent from b; 50.00% of b is on paths absent from a" in legend


def test_frames_nest_as_the_call_tree_and_add_up(tmp_path):
    """Callees sit in their caller's <g>, side by side from its left edge, never wider than it;
    data-a/data-b are the shares the tooltip prints."""
    svg = _svg(tmp_path,
               "m;a;x 10\nm;a;y 20\nm;b 30\nm 5\nm;only_a;deep 7\n",
               "m;a;x 25\nm;a;z 5\nm;b 10\nm;only_b 40\n", scope="all")
    root = ET.fromstring(svg)
    checked = 0
    for g in root.iter(NS + "g"):
        if g.get("class") != "f":
            continue
        r = g.find(NS + "rect")
        x, w = float(r.get("x")), float(r.get("width"))
        kids = [k for k in g.findall(NS + "g") if k.get("class") == "f"]
        cx = x
        for k in kids:
            kr = k.find(NS + "rect")
            assert abs(float(kr.get("x")) - cx) < 0.02 and int(kr.get("y")) == int(r.get("y")) - 16
            cx += float(kr.get("width"))
        assert cx <= x + w + 0.02
        tip = g.find(NS + "title").text.split("\n")
        assert f"{float(g.get('data-a')) * 100:.2f}%" in tip[1] and f"{float(g.get('data-b')) * 100:.2f}%" in tip[2]
        checked += 1
    assert checked == 10   # all, m, a, x, y, z, b, only_a, deep, only_b


def test_static_fallback_and_embedding(tmp_path):
    """Controls are hidden until the script runs; the script is the constant, last, and safe to
    embed (no CDATA end, no end tag); the report's form has no script and prefixed ids."""
    a, b = "app;old 40\napp;main 60\n", "app;new 50\napp;main 50\n"
    svg = _svg(tmp_path, a, b)
    root = ET.fromstring(svg)
    assert root.get("class") == "kpd-flame" and root.get("data-la") == "a" and root.get("data-span") == "1180"
    ctl = {el.get("class"): el for el in root.iter(NS + "text") if el.get("class")}
    assert ctl["kb k-zoom"].get("display") == "none" and ctl["kb k-search"].get("display") == "none"
    assert not ctl["k-details"].text and not ctl["k-matched"].text
    assert list(root)[-1].tag == NS + "script" and f"<![CDATA[{SCRIPT}]]>" in svg
    for bad in ("]]>", "</script", "<!--", "http"):
        assert bad not in SCRIPT, bad
    pa, pb = tmp_path / "a.folded", tmp_path / "b.folded"
    res = add_folded(diff_profiles([load(pa)], [load(pb)], DiffOptions()), [load(pa)], [load(pb)])
    inline = differential_svg(res, script=False, id_prefix="f3-")
    assert "<script" not in inline and 'id="f3-kpd-only-a"' in inline and "url(#f3-kpd-only-b)" in inline
    assert 'id="kpd-only' not in inline and "url(#kpd-only" not in inline


def test_size_on_a_large_real_profile(tmp_path):
    """proc.shell across architectures (tests/data/perfdata/xarch): the union of both sides'
    stacks stays under 300 bytes a frame."""
    xarch = DATA / "perfdata" / "xarch"
    side = []
    for arch in ("arm64", "x86_64"):
        (tmp_path / arch).mkdir()
        for name in ("proc.shell.perf.data", "kallsyms"):
            with gzip.open(xarch / arch / f"{name}.gz", "rb") as f:
                (tmp_path / arch / name).write_bytes(f.read())
        side.append([load(tmp_path / arch / "proc.shell.perf.data", kallsyms=tmp_path / arch / "kallsyms")])
    res = add_folded(diff_profiles(side[0], side[1], DiffOptions(scope="all")), side[0], side[1])
    svg = differential_svg(res)
    frames = svg.count('<g class="f"')
    assert frames > 2000 and "only in arm64" in svg and "only in x86_64" in svg
    assert len(svg.encode()) / frames < 300, (len(svg), frames)


@needs_chromium
def test_standalone_svg_is_interactive_in_headless_chromium(tmp_path):
    """`diff --flamegraph` written by the CLI, opened in Chromium and driven with real mouse and
    key input: the details line gives both sides, a click zooms the frame to the full width (its
    callers full width too, everything else hidden), Search (a prompt) highlights the matches and
    gives their share of each side, Escape and Reset zoom go back."""
    pa, pb, svg = tmp_path / "a.folded", tmp_path / "b.folded", tmp_path / "d.svg"
    pa.write_text("app;k1;grow 10\napp;k1;shrink 40\napp;k1;same 50\napp;old;deep 30\n")
    pb.write_text("app;k1;grow 30\napp;k1;shrink 20\napp;k1;same 50\napp;new 20\n")
    run_cli("diff", pa, pb, "--scope", "all", "--flamegraph", svg, check=0)
    ch = Chrome(tmp_path / "chrome")
    try:
        page = Page(ch, svg, width=1300)
        assert page.flame_control("k-search")["shown"] and not page.flame_control("k-zoom")["shown"]
        grow = page.flame_frame("grow")
        assert 0 < grow["w"] < 300 and grow["shown"]

        page.hover(grow["x"], grow["y"])
        assert page.flame_control("k-details")["text"] == "grow: a 7.69%, b 25.00%, change +17.31 pp"
        page.hover(page.flame_frame("deep")["x"], page.flame_frame("deep")["y"])
        assert page.flame_control("k-details")["text"].endswith("(only in a)")

        page.click(grow["x"], grow["y"])
        zoomed = page.flame_frame("grow")
        assert zoomed["w"] == 1180 and abs(zoomed["screen_w"] - 1180) < 1
        k1 = page.flame_frame("k1")
        assert k1["w"] == 1180 and "anc" in k1["cls"]
        assert not page.flame_frame("shrink")["shown"] and not page.flame_frame("old")["shown"]
        reset = page.flame_control("k-zoom")
        assert reset["shown"]
        page.click(reset["x"], reset["y"])
        assert page.flame_frame("grow")["w"] == grow["w"] and page.flame_frame("shrink")["shown"]

        search = page.flame_control("k-search")
        page.click(search["x"], search["y"], dialog_text="shr")
        assert page.flame_frame("shrink")["fill"] == "rgb(230, 0, 230)"
        assert page.flame_frame("grow")["fill"] != "rgb(230, 0, 230)"
        assert page.flame_control("k-matched")["text"] == "1 frame match /shr/: a 30.77%, b 16.67%, change -14.10 pp"
        assert page.flame_control("k-search")["text"] == "Clear search"

        page.key("/", "Slash", 191, dialog_text="^(grow|same)$")
        assert page.flame_control("k-matched")["text"].startswith("2 frames match /^(grow|same)$/: a 46.15%, b 66.67%")
        page.click(*(page.flame_frame("old")[k] for k in ("x", "y")))
        assert page.flame_frame("old")["w"] == 1180
        page.key("Escape", "Escape", 27)
        assert page.flame_control("k-matched")["text"] == "" and page.flame_frame("old")["w"] < 1180
        assert page.errors() == []
    finally:
        ch.close()
