"""Placeholder module; commands are added by their issue."""

from .app import app  # noqa: F401
