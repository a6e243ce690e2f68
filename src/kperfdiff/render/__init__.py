"""Renderers: turn results into bytes. They never do I/O (see output.py)."""
