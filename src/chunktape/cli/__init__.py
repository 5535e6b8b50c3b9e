"""The ``chunktape`` command line: thin faces over the library (see ``chunktape --help``)."""

from chunktape.cli._app import app, main

__all__ = ["app", "main"]
