"""Analysis: the kperfdiff ranking of two profiles (with inferred twins), benchmark
comparison tables and gates, and the report's data gathered from the store."""
