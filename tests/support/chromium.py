"""Headless Chromium (the Debian package) driven over the Chrome DevTools Protocol on
--remote-debugging-pipe: open a page, collect its console errors, evaluate JavaScript,
send real mouse and keyboard input and answer its dialogs. No browser is downloaded."""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import time

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian package chromium is not installed")


class Chrome:
    """Chromium with CDP on file descriptors 3 (commands in) and 4 (events out)."""

    def __init__(self, profile_dir):
        cmd_r, self.cmd_w = os.pipe()
        self.ev_r, ev_w = os.pipe()
        hi_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 100)
        hi_w = fcntl.fcntl(ev_w, fcntl.F_DUPFD, 100)

        def child():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-extensions", f"--user-data-dir={profile_dir}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=child, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (cmd_r, ev_w, hi_r, hi_w):
            os.close(fd)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.replies = {}

    def _read(self, timeout):
        r, _, _ = select.select([self.ev_r], [], [], timeout)
        if r:
            chunk = os.read(self.ev_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the devtools pipe")
            self.buf += chunk
        out = []
        while b"\0" in self.buf:
            msg, self.buf = self.buf.split(b"\0", 1)
            out.append(json.loads(msg))
        return out

    def _pump(self, timeout):
        for m in self._read(timeout):
            if "id" in m:
                self.replies[m["id"]] = m
            else:
                self.events.append(m)

    def post(self, method, params=None, session=None) -> int:
        """Send a command without waiting for its reply (see :meth:`reply`)."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        return self.next_id

    def reply(self, mid, timeout=30):
        deadline = time.time() + timeout
        while mid not in self.replies:
            if time.time() > deadline:
                raise TimeoutError(mid)
            self._pump(0.5)
        m = self.replies.pop(mid)
        if "error" in m:
            raise RuntimeError(m["error"])
        return m["result"]

    def send(self, method, params=None, session=None, timeout=30):
        return self.reply(self.post(method, params, session), timeout)

    def wait_event(self, name, timeout=30):
        """The first event called ``name`` not waited for yet (it is taken off the list)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for i, e in enumerate(self.events):
                if e.get("method") == name:
                    return self.events.pop(i)
            self._pump(0.5)
        raise TimeoutError(name)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.cmd_w)
        os.close(self.ev_r)


class Page:
    """One tab of a :class:`Chrome`, on a page loaded from a file."""

    def __init__(self, chrome: Chrome, path, *, javascript=True, width=None, height=900):
        self.ch = chrome
        target = chrome.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.sid = chrome.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        chrome.events = []
        for dom in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.send(dom)
        if width:
            self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False})
        if not javascript:
            self.send("Emulation.setScriptExecutionDisabled", {"value": True})
        self.send("Page.navigate", {"url": path.as_uri()})
        chrome.wait_event("Page.loadEventFired")
        time.sleep(0.3)

    def send(self, method, params=None, timeout=30):
        return self.ch.send(method, params, self.sid, timeout)

    def eval(self, expression):
        """The value of a JavaScript expression (JSON-serialisable)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"])
        return r["result"].get("value")

    def click(self, x, y, *, dialog_text=None):
        """A real left click at page coordinates; ``dialog_text``: the click opens a prompt, answer it."""
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        self.send("Input.dispatchMouseEvent", {"type": "mousePressed", "x": x, "y": y, "button": "left",
                                               "clickCount": 1})
        mid = self.ch.post("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": x, "y": y, "button": "left",
                                                        "clickCount": 1}, self.sid)
        if dialog_text is not None:
            self.ch.wait_event("Page.javascriptDialogOpening")
            self.send("Page.handleJavaScriptDialog", {"accept": True, "promptText": dialog_text})
        self.ch.reply(mid)

    def hover(self, x, y):
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})

    def key(self, key, code, keycode, *, dialog_text=None):
        """A real key press; ``dialog_text``: it opens a prompt, answer it."""
        params = {"key": key, "code": code, "windowsVirtualKeyCode": keycode}
        if len(key) == 1:
            params["text"] = key
        mid = self.ch.post("Input.dispatchKeyEvent", {"type": "keyDown", **params}, self.sid)
        if dialog_text is not None:
            self.ch.wait_event("Page.javascriptDialogOpening")
            self.send("Page.handleJavaScriptDialog", {"accept": True, "promptText": dialog_text})
        self.ch.reply(mid)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **params})

    def flame_frame(self, name, graph=0):
        """The frame called ``name`` in the page's ``graph``-th flame graph, scrolled into view: its box on screen
        (centre, width), its rect's width attribute, whether it is shown, its classes."""
        return self.eval("""(() => {
            const svg = document.querySelectorAll('svg.kpd-flame')[%d];
            const g = [...svg.querySelectorAll('g.f')].find(
                g => g.querySelector('title').textContent.split('\\n')[0] === %s);
            if (!g) return null;
            const r = g.querySelector('rect');
            r.scrollIntoView({block: 'center', inline: 'center'});
            const b = r.getBoundingClientRect();
            return {x: b.x + b.width / 2, y: b.y + b.height / 2, screen_w: b.width,
                    w: parseFloat(r.getAttribute('width')), shown: b.width > 0 && g.checkVisibility(),
                    cls: g.getAttribute('class'), fill: getComputedStyle(r).fill};
        })()""" % (graph, json.dumps(name)))

    def flame_control(self, cls, graph=0):
        """A control or line of a flame graph (k-search, k-zoom, k-details, k-matched), scrolled into
        view: centre, shown, text."""
        return self.eval("""(() => {
            const el = document.querySelectorAll('svg.kpd-flame')[%d].querySelector('.%s');
            el.scrollIntoView({block: 'center', inline: 'center'});
            const b = el.getBoundingClientRect();
            return {x: b.x + b.width / 2, y: b.y + b.height / 2, shown: getComputedStyle(el).display !== 'none',
                    text: el.textContent};
        })()""" % (graph, cls))

    def errors(self):
        """Console errors, uncaught exceptions and log errors (CSP violations among them) so far."""
        self.ch._pump(0.2)
        out = []
        for e in self.ch.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(("console", p.get("args")))
            elif m == "Runtime.exceptionThrown":
                out.append(("exception", p.get("exceptionDetails", {}).get("text")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(("log", p["entry"].get("text")))
        return out


def load_in_chromium(path, profile_dir):
    """Open a page; return (console and log errors, page facts)."""
    ch = Chrome(profile_dir)
    try:
        page = Page(ch, path)
        facts = page.eval("""JSON.stringify({
            tables: document.querySelectorAll('table').length,
            svgs: document.querySelectorAll('svg').length,
            drawn: [...document.querySelectorAll('svg')].filter(s => s.getBoundingClientRect().width > 50).length,
            scripts: document.querySelectorAll('script').length,
            title: document.title,
            text: document.body.innerText})""")
        return page.errors(), json.loads(facts)
    finally:
        ch.close()
