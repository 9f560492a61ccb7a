"""``python -m egopool`` == the ``egopool`` console script."""

from .cli.app import entry

entry()
