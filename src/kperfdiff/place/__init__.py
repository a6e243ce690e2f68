"""Placement planner: which kernel functions belong in a small fast memory.

One module per concern:

* :mod:`.inputs`   function sizes (System.map, kallsyms, vmlinux), the hardware
  model (TOML), exclusions and named groups;
* :mod:`.model`    the thesis's cost equations and the whole-profile predictor;
* :mod:`.optimise` the group method, greedy by density, the exact MILP, sweeps;
* :mod:`.simulate` a trace-driven instruction-cache + fast-memory simulator;
* :mod:`.emit`     linker-script fragment, annotations and ordering file.

The ``kperfdiff place`` sub-commands are in :mod:`kperfdiff.commands.place`, the
tables in :mod:`kperfdiff.render.place`.
"""
