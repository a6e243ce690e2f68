"""One `kperfdiff bench` session on a target (choose, build, run, measure, store), and the
knobs an experiment may set on the machine and put back."""
