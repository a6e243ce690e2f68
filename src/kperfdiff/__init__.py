"""kperfdiff: kernel performance workbench."""
__version__ = "0.1.0"
