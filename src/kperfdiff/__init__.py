"""kperfdiff: kernel performance workbench."""
import os

__version__ = "0.1.0"

# kperfdiff's numerics are many small arrays and no linear algebra, so OpenBLAS's thread pool,
# started when numpy is imported, buys nothing and costs every command 0.1-0.2 s of CPU, most of
# it when the machine is busy. Set before anything imports numpy; a value given by the user stays.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
