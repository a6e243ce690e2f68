"""Benchmarks: the catalogue (one C worker and one TOML file per family), their build for the
host and for aarch64, the worker protocol, the one measurement type, repetitions in rounds,
temporary swap and the noise recorded around each repetition."""
