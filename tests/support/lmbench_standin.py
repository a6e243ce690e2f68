#!/usr/bin/env python3
"""A stand-in for lmbench 3's lat_* programs, for tests of validation/vs_lmbench.py.

Installed under each tool's name (tests make ``lat_fs`` etc. run this script with
the tool's name as its first argument). It checks its arguments as the tool's
getopt and usage do, and prints on stderr what the tool prints, in its exact
format (lmbench's micro(): "<label>: <x.xxxx> microseconds"; lat_fs:
"<size>k\\t<files>\\t<creates/s>\\t<deletes/s>" per size, every size when -s 0;
lat_fs -s 0 then takes an hour over the other sizes; lat_mmap: "<MB> <us>"; lat_ctx: '\\n"size=<k>k ovr=<us>' then "<procs> <us>").
Each call is appended to $STANDIN_LOG as one JSON line (tool, args, ENOUGH,
whether a FILE argument existed), so a test can see what the harness asked for.
"""
import json
import os
import sys
import time

US = 2.0  # every latency printed, in microseconds (lat_fs: 1e6 / US files per second)


def usage(tool: str, why: str) -> None:
    print(f"{tool}: {why}", file=sys.stderr)
    sys.exit(1)


def micro(label: str) -> None:
    print(f"{label}: {US:.4f} microseconds", file=sys.stderr)


def opts(tool: str, args: list[str], letters: str) -> tuple[dict[str, str], list[str]]:
    """getopt for single-letter options that all take a value."""
    out, rest = {}, list(args)
    while rest and rest[0].startswith("-") and len(rest[0]) == 2:
        if rest[0][1] not in letters or len(rest) < 2:
            usage(tool, f"usage: bad option {rest[0]}")
        out[rest[0][1]] = rest[1]
        rest = rest[2:]
    return out, rest


def size_bytes(s: str) -> int:
    mult = {"k": 1 << 10, "m": 1 << 20}.get(s[-1:].lower(), 1)
    return int(s.rstrip("kKmM")) * mult


def main() -> None:
    tool, args = os.path.basename(sys.argv[1]), sys.argv[2:]
    if os.environ.get("STANDIN_LOG"):
        with open(os.environ["STANDIN_LOG"], "a") as f:
            f.write(json.dumps({"tool": tool, "args": args, "enough": os.environ.get("ENOUGH"),
                                "files": [a for a in args if a.startswith("/") and os.path.isfile(a)]}) + "\n")
    if tool in ("lat_tcp", "lat_udp", "lat_connect") and args[:1] in (["-s"], ["-S"]):
        return  # start or stop the server
    if tool == "lat_syscall":
        labels = {"null": "Simple syscall", "read": "Simple read", "write": "Simple write",
                  "stat": "Simple stat", "fstat": "Simple fstat", "open": "Simple open/close"}
        if not args or args[0] not in labels:
            usage(tool, "usage: lat_syscall null|read|write|stat|fstat|open [file]")
        micro(labels[args[0]])
    elif tool == "lat_pagefault":
        if len(args) != 1 or not os.path.isfile(args[0]):
            usage(tool, "usage: lat_pagefault file")
        micro(f"Pagefaults on {args[0]}")
    elif tool == "lat_mmap":
        if len(args) != 2 or not os.path.isfile(args[1]) or os.path.getsize(args[1]) < size_bytes(args[0]):
            usage(tool, "usage: lat_mmap size file (Input file too small)")
        print(f"{size_bytes(args[0]) / 1e6:.6f} {US:.0f}", file=sys.stderr)
    elif tool == "lat_fs":
        o, rest = opts(tool, args, "snPWN")
        if len(rest) > 1 or (rest and not os.path.isdir(rest[0])):
            usage(tool, "usage: lat_fs [-s <file size>] [-n <max files per dir>] ... [<dir>]")
        if not os.environ.get("ENOUGH"):
            # lmbench's batch length on a busy machine is then 1 s: lat_fs would run for hours
            usage(tool, "ENOUGH is not set: this run would not end")
        size = size_bytes(o.get("s", "0"))
        for s in ([size] if size else [0, 1024, 4096, 10240]):
            print(f"{s >> 10}k\t{1000}\t{1e6 / US:.0f}\t{1e6 / US:.0f}", file=sys.stderr, flush=True)
            if not size:
                time.sleep(3600)  # as the real one: minutes of 1k, 4k, 10k files after the 0k line
    elif tool == "lat_proc":
        labels = {"fork": "Process fork+exit", "exec": "Process fork+execve",
                  "shell": "Process fork+/bin/sh -c"}
        if not args or args[0] not in labels:
            usage(tool, "usage: lat_proc procedure|fork|exec|shell")
        micro(labels[args[0]])
    elif tool == "lat_ctx":
        o, rest = opts(tool, args, "sPWN")
        if len(rest) != 1 or "s" not in o:
            usage(tool, "usage: lat_ctx [-s kbytes] processes [processes ...]")
        print(f'\n"size={o["s"]}k ovr=1.05', file=sys.stderr)
        print(f"{rest[0]} {US:.2f}", file=sys.stderr)
    elif tool in ("lat_pipe", "lat_unix"):
        micro("Pipe latency" if tool == "lat_pipe" else "AF_UNIX sock stream latency")
    elif tool in ("lat_tcp", "lat_udp", "lat_connect"):
        what = {"lat_tcp": "TCP latency using", "lat_udp": "UDP latency using",
                "lat_connect": "TCP/IP connection cost to"}[tool]
        micro(f"{what} {args[-1]}")
    elif tool == "lat_select":
        o, rest = opts(tool, args, "nPWN")
        if rest not in (["file"], ["tcp"]):
            usage(tool, "usage: lat_select [-n <#descriptors>] file|tcp")
        micro(f"Select on {o.get('n', '200')} {'tcp ' if rest == ['tcp'] else ''}fd's")
    elif tool == "lat_sig":
        labels = {"install": "Signal handler installation", "catch": "Signal handler overhead",
                  "prot": "Protection fault"}
        if not args or args[0] not in labels or (args[0] == "prot" and
                                                 (len(args) != 2 or not os.path.isfile(args[1]))):
            usage(tool, "usage: lat_sig install|catch|prot [file]")
        micro(labels[args[0]])
    else:
        usage(tool, "not an lmbench program this stand-in knows")


if __name__ == "__main__":
    main()
