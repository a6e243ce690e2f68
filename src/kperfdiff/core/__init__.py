"""The foundation every stage stands on: errors, file checks, bounds, the data model of runs
and results, statistics, progress, architecture names, kernel counters and the native reader."""
