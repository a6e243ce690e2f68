"""LAVA labs as a target: job definitions (jobs), the REST client (api), job logs (log), publishing
the kernel and ramdisk (artefacts), and the target that runs jobs in flight (target). See
:mod:`kperfdiff.targets.lava.target` for the whole flow and :mod:`.spec` for the options."""
