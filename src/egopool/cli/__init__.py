"""The ``egopool`` command line (thin: one library call per command, STYLE habit 15)."""

from .app import app, main

__all__ = ["app", "main"]
