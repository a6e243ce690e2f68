"""The script and style that make a differential flame graph interactive.

Both are constants: the HTML report allows its one inline script by the
SHA-256 of this exact text in its Content-Security-Policy, so the text must
not depend on the data. The script reads everything it needs from the SVG it
finds (``svg.kpd-flame``): the labels and geometry on the ``<svg>`` element,
and per frame (``g.f``, nested as the call tree) the two shares ``data-a`` and
``data-b``, the name (first line of its ``<title>``) and its ``<rect>``.

What it adds to the static graph:

- hovering a frame writes its name, both sides' shares and the change on the
  details line at the bottom;
- clicking a frame zooms into it: the frame and its callees are laid out again
  across the full width from their shares, its callers are drawn full width
  and faded, everything else is hidden; "Reset zoom" (or a click on the root,
  or Escape in a standalone SVG) goes back;
- "Search" (or Ctrl+F or / in a standalone SVG) asks for a regular expression
  (plain text when it does not compile), highlights the frames whose name
  matches, and writes how many matched and their share of each side (a match
  inside another match counted once); "Clear search", an empty answer or
  Escape (standalone) clears it. In an HTML page the keys stay the browser's.

Controls are hidden in the static SVG (``display="none"``) and shown by the
script, so without JavaScript the graph is the plain static one.
"""
from __future__ import annotations

SCRIPT = r"""
(function () {
  'use strict';

  function pct(x) { return (x * 100).toFixed(2) + '%'; }
  function points(x) { return (x >= 0 ? '+' : '') + (x * 100).toFixed(2) + ' pp'; }

  function child(g, tag) {
    for (var c = g.firstElementChild; c; c = c.nextElementSibling) {
      if (c.localName === tag) { return c; }
    }
    return null;
  }

  function init(svg) {
    var pad = parseFloat(svg.getAttribute('data-pad'));
    var span = parseFloat(svg.getAttribute('data-span'));
    var charW = parseFloat(svg.getAttribute('data-charw'));
    var la = svg.getAttribute('data-la'), lb = svg.getAttribute('data-lb');
    var byG = new Map(), root = null;
    svg.querySelectorAll('g.f').forEach(function (g) {
      var t = child(g, 'title');
      var f = {g: g, rect: child(g, 'rect'), text: child(g, 'text'), kids: [], parent: null,
               a: parseFloat(g.getAttribute('data-a')) || 0, b: parseFloat(g.getAttribute('data-b')) || 0,
               name: t ? t.textContent.split('\n')[0] : ''};
      byG.set(g, f);
      var p = byG.get(g.parentNode);
      if (p) { f.parent = p; p.kids.push(f); } else if (!root) { root = f; }
    });
    if (!root) { return; }
    var ctl = {};
    ['zoom', 'search', 'details', 'matched'].forEach(function (k) {
      ctl[k] = svg.querySelector('.k-' + k);
    });
    ctl.search.removeAttribute('display');

    function label(f, x, w) {
      var n = Math.floor((w - 6) / charW);
      if (n < 3) {
        if (f.text) { f.text.setAttribute('display', 'none'); }
        return;
      }
      if (!f.text) {
        f.text = document.createElementNS(svg.namespaceURI, 'text');
        var r = f.rect;
        f.text.setAttribute('y', parseFloat(r.getAttribute('y')) + parseFloat(r.getAttribute('height')) - 3);
        r.parentNode.insertBefore(f.text, r.nextSibling);
      }
      f.text.removeAttribute('display');
      f.text.setAttribute('x', (x + 3).toFixed(2));
      f.text.textContent = f.name.length > n ? f.name.slice(0, n - 2) + '..' : f.name;
    }

    function place(f, x, w) {
      f.rect.setAttribute('x', x.toFixed(2));
      f.rect.setAttribute('width', w.toFixed(2));
      label(f, x, w);
      var total = f.a + f.b, cx = x;
      f.kids.forEach(function (k) {
        var kw = total > 0 ? w * (k.a + k.b) / total : 0;
        place(k, cx, kw);
        cx += kw;
      });
    }

    function zoom(f) {
      byG.forEach(function (o) {
        o.g.removeAttribute('display');
        o.g.classList.remove('anc');
      });
      if (!f || f === root) {
        place(root, pad, span);
        ctl.zoom.setAttribute('display', 'none');
        return;
      }
      for (var c = f; c.parent; c = c.parent) {
        var p = c.parent;
        p.kids.forEach(function (k) {
          if (k !== c) { k.g.setAttribute('display', 'none'); }
        });
        p.g.classList.add('anc');
        p.rect.setAttribute('x', pad.toFixed(2));
        p.rect.setAttribute('width', span.toFixed(2));
        label(p, pad, span);
      }
      place(f, pad, span);
      ctl.zoom.removeAttribute('display');
    }

    var lastTerm = '';
    function search(term) {
      byG.forEach(function (o) { o.g.classList.remove('m'); });
      lastTerm = term || '';
      if (!lastTerm) {
        ctl.matched.textContent = '';
        ctl.search.textContent = 'Search';
        return;
      }
      var re = null;
      try { re = new RegExp(lastTerm); } catch (e) { re = null; }
      var hits = 0, sa = 0, sb = 0;
      (function walk(f, inside) {
        var hit = re ? re.test(f.name) : f.name.indexOf(lastTerm) >= 0;
        if (hit) {
          f.g.classList.add('m');
          hits += 1;
          if (!inside) { sa += f.a; sb += f.b; }
        }
        f.kids.forEach(function (k) { walk(k, inside || hit); });
      })(root, false);
      ctl.matched.textContent = hits + ' frame' + (hits === 1 ? '' : 's') + ' match /' + lastTerm + '/: ' +
        la + ' ' + pct(sa) + ', ' + lb + ' ' + pct(sb) + ', change ' + points(sb - sa);
      ctl.search.textContent = 'Clear search';
    }

    function ask() {
      var term = window.prompt('Search frames (regular expression):', lastTerm);
      if (term !== null) { search(term); }
    }

    function describe(f) {
      var side = f.a === 0 ? ' (only in ' + lb + ')' : f.b === 0 ? ' (only in ' + la + ')' : '';
      return f.name + ': ' + la + ' ' + pct(f.a) + ', ' + lb + ' ' + pct(f.b) + ', change ' +
        points(f.b - f.a) + side;
    }

    svg.addEventListener('click', function (e) {
      var t = e.target;
      if (t === ctl.zoom) { zoom(null); return; }
      if (t === ctl.search) {
        if (lastTerm) { search(''); } else { ask(); }
        return;
      }
      var g = t.closest ? t.closest('g.f') : null;
      if (g && byG.has(g)) { zoom(byG.get(g)); }
    });
    svg.addEventListener('mouseover', function (e) {
      var g = e.target.closest ? e.target.closest('g.f') : null;
      ctl.details.textContent = g && byG.has(g) ? describe(byG.get(g)) : '';
    });
    svg.addEventListener('mouseleave', function () { ctl.details.textContent = ''; });
    if (svg === document.documentElement) {
      document.addEventListener('keydown', function (e) {
        if ((e.ctrlKey || e.metaKey) && e.key === 'f' || e.key === '/') {
          e.preventDefault();
          ask();
        } else if (e.key === 'Escape') {
          search('');
          zoom(null);
        }
      });
    }
  }

  document.querySelectorAll('svg.kpd-flame').forEach(init);
})();
"""

# Scoped to flame graphs, so it can sit in an HTML page beside other SVGs.
STYLE = (
    ".kpd-flame .f>rect{stroke:rgb(200,200,200);stroke-width:.3;cursor:pointer}"
    ".kpd-flame .f>rect:hover{stroke:rgb(0,0,0);stroke-width:1}"
    ".kpd-flame .f>text{pointer-events:none}"
    ".kpd-flame .m>rect{fill:rgb(230,0,230)}"
    ".kpd-flame .anc>rect{opacity:.55}"
    ".kpd-flame .kb{cursor:pointer;fill:rgb(30,60,170);text-decoration:underline}"
)

