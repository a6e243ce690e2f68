"""Renderers: turn results into bytes. They never do I/O: commands/ writes their bytes (commands/common.py)."""
