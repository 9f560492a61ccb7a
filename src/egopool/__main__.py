"""``python -m egopool`` == the ``egopool`` console script."""

from .cli.entry import entry

entry()
