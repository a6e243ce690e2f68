"""Experiments: a matrix of variants x benchmarks x core counts x repetitions, run
interleaved on local, QEMU, SSH and LAVA targets."""
