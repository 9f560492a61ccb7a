"""The ``egopool`` command line (thin: one library call per command, STYLE habit 15).

:func:`egopool.cli.app.main` runs it in-process; :func:`egopool.cli.entry.entry` is the console script.
"""
