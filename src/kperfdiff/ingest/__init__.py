"""Ingest: every profile format a user names (perf.data through the native reader, perf script,
perf report, folded text, store references) becomes one Profile, with its kernel symbols
checked against the recording."""
