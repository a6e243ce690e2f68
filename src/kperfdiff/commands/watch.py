"""`kperfdiff watch`: the sentinel over the branches of a git tree: each new commit built and measured
on each target of a suite, the change points of each series found and bisected, each culprit verified
and attached to its change point; `--status` shows the queue and the change points without measuring."""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from kperfdiff.bisect import git
from kperfdiff.core.errors import UsageError
from kperfdiff.render import watch as render
from kperfdiff.render import watchsite
from kperfdiff.watch import publish, report, suite as suites
from kperfdiff.watch.queue import LEASE_S
from kperfdiff.watch.run import Options, look
from kperfdiff.commands.common import open_store, write_file, write_output
from kperfdiff.commands.parsing import Parser, add_format, add_output, number

INTERVAL_S = 300.0      # --follow: seconds between looks
MAX_WAIT_S = 7 * 86400


def add_watch(p: Parser) -> None:
    p.description = (
        "Watch branches of a git tree: each new commit on a branch's first-parent line is built (the suite's build "
        "command, or a kernel for a guest) in a work tree of kperfdiff's own under the store's artefact folder, "
        "and each benchmark of the suite is measured on it on each target, into an ordinary stored run. After "
        "each measurement, the change points of the series it fed (branch, target, benchmark, in commit order) "
        "are found again; each new regression (and improvement, if the suite says so) is bisected between the "
        "last commit measured before it and the first after it, verified against its parent, and its culprit "
        "attached to the change point. The work is a queue in the store with leases, so several watch processes "
        "on one store share it. A commit that does not build is recorded and skipped; a second look with no new "
        "commit measures nothing and says so in one line. Ctrl-C puts the work in progress back in the queue.")
    p.add_argument("suite", nargs="?", metavar="SUITE",
                   help="the suite file (TOML: name, benchmarks, targets, metric, reps, build or config, commits, "
                        "improvements; see docs/watch.md); with --status, the watch to show (default: every one)")
    p.add_argument("--repo", metavar="DIR", help="the git tree whose branches are watched")
    p.add_argument("--branch", action="append", default=[], metavar="BRANCH",
                   help="a branch (or any revision) to follow; repeat for several")
    p.add_argument("--since", metavar="REV",
                   help="start the watch at this commit of the branch (default: where it started before; the "
                        "first time, the branch's tip)")
    p.add_argument("--follow", action="store_true",
                   help="keep looking: after each look, wait --interval seconds and look again, until Ctrl-C")
    p.add_argument("--interval", type=number(MAX_WAIT_S), default=INTERVAL_S, metavar="S",
                   help=f"seconds between two looks with --follow (default: {INTERVAL_S:g})")
    p.add_argument("--lease", type=number(MAX_WAIT_S), default=LEASE_S, metavar="S",
                   help=f"how long a claimed item is held without renewal before another watch process may take it "
                        f"(renewed every third of it while the work goes on; default: {LEASE_S:g})")
    p.add_argument("--status", action="store_true",
                   help="measure nothing: print the queue and the change points with their culprits, from the store")
    p.add_argument("--publish", metavar="DIR",
                   help="after each look (or with --status, from the store alone), write a static site there: "
                        "index.html (each series' history plot, its change points marked and linked), a page per "
                        "change point (culprit, change and interval, verification, what explains it, how to "
                        "reproduce it) and feed.json (schema watch-feed); self-contained, nothing fetched")
    p.add_argument("--notify", metavar="CMD",
                   help="after each look, for each culprit not notified yet, run CMD (sh -c) with a plain-text report "
                        "on its standard input (commit, subject, author, benchmark, target, the change and its "
                        "interval, the verification, how to reproduce it); a culprit is notified once, and one "
                        "whose command fails is reported in a line and notified again at the next look")
    add_format(p, "text", "json")
    add_output(p, what="what the look did (with --follow, the last look's)")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")


def _check(args: argparse.Namespace) -> None:
    if args.status:
        extra = [o for o, v in (("--repo", args.repo), ("--branch", args.branch), ("--since", args.since),
                                ("--follow", args.follow)) if v]
        if args.notify:
            extra.append("--notify")
        if extra:
            raise UsageError(f"--status only reads the store; {extra[0]} is for a look at the branches", "kperfdiff watch")
        return
    missing = [o for o, v in (("SUITE", args.suite), ("--repo", args.repo), ("--branch", args.branch)) if not v]
    if missing:
        raise UsageError(f"a look at the branches needs {', '.join(missing)} (or --status, to read the store only)",
                         "kperfdiff watch")


def _write(args: argparse.Namespace, doc: dict) -> None:
    write_output(args.output, render.to_json_doc(doc) if args.format == "json" else render.to_text_doc(doc))
    sys.stdout.flush()


def _publish(store, args: argparse.Namespace, names: list[str]) -> None:
    folder = Path(args.publish)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--publish {args.publish} is a file; it needs a folder (made when missing)", "kperfdiff watch")
    folder.mkdir(parents=True, exist_ok=True)
    feed = publish.feed(store, names)
    for name, text in watchsite.site(feed, publish.culprit_diffs(store, feed)).items():
        write_file(folder / name, text)


def _notify(store, cmd: str, name: str) -> None:
    """Send each culprit not notified yet to CMD; one that fails is released for the next look."""
    pending = publish.to_notify(store, name)
    if not pending:
        return
    [w] = publish.feed(store, [name])["watches"]
    by_id = {c["id"]: c for c in w["changes"]}
    for cid in pending:
        if not store.claim_notice(cid):
            continue                                  # another watch process notified it
        c = by_id[cid]
        try:
            r = subprocess.run(["sh", "-c", cmd], input=render.notice(c, name), text=True, stdout=sys.stderr,
                               stderr=subprocess.PIPE)
            failed = f"exited with status {r.returncode}" if r.returncode else ""
            tail = (r.stderr.strip().splitlines() or [""])[-1]
        except OSError as e:
            failed, tail = f"could not run: {e}", ""
        if failed:
            store.release_notice(cid)
            print(f"kperfdiff: --notify {failed} for culprit {c['culprit']['hash'][:12]} of {c['benchmark']} on "
                  f"{c['target']}" + (f" ({tail})" if tail else "") + "; it is notified again at the next look",
                  file=sys.stderr, flush=True)


def watch(args: argparse.Namespace) -> int:
    _check(args)
    suite = suites.parse(args.suite) if args.suite and not args.status else None
    if args.status:
        store = open_store(args, create=False)
        name = suites.parse(args.suite).name if args.suite else None
        names = [name] if name else store.watch_names()
        _write(args, report.document(store, names))
        if args.publish:
            _publish(store, args, names)
        return 0
    repo = git.Repo(args.repo)          # the tree and its branches checked before a store is made
    for rev, what in [(b, "--branch") for b in args.branch] + ([(args.since, "--since")] if args.since else []):
        repo.resolve(rev, what)
    store = open_store(args)
    note = (lambda text: None) if args.no_progress else (
        lambda text: print(f"kperfdiff: {text}", file=sys.stderr, flush=True))
    opts = Options(repo=args.repo, branches=tuple(args.branch), since=args.since, lease_s=args.lease,
                   progress=not args.no_progress)
    while True:
        done = look(store, suite, opts, note)
        _write(args, report.document(store, [suite.name], {suite.name: done}))
        if args.notify:
            _notify(store, args.notify, suite.name)
        if args.publish:
            _publish(store, args, [suite.name])
        if not args.follow:
            return 0
        opts.since = None        # the base is in the store from now on
        note(f"next look in {args.interval:g} s (Ctrl-C to stop)")
        try:
            time.sleep(args.interval)
        except KeyboardInterrupt:
            note("stopped between two looks; nothing was being measured")
            return 0


# the commands this module defines: name -> (fill in its parser, run it)
DEFINES = {"watch": (add_watch, watch)}
