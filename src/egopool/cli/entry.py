"""Console-script entry point (``egopool`` and ``python -m egopool``).

The CLI (Typer) loads with Ctrl-C held back, and so do the modules of the command named
(pyarrow, numpy, PyAV, ...; ``egopool.cli.app``): an interrupt while they load is acted on
once they are in, as the same one line and exit code 130 as an interrupt while a command runs.
A KeyboardInterrupt raised inside an import would surface as an import machinery traceback, or
wrapped in another error, not as Ctrl-C. SIGTERM is handled as Ctrl-C (a killed ``simulate`` left
115 MB of temp files and its reservation, issue 16 E).
"""

from __future__ import annotations

import sys

from .._sigint import loading_seam, sigint_deferred, sigterm_as_interrupt


def entry() -> None:
    """Load the CLI, run it on ``sys.argv`` and exit with its code (130 after Ctrl-C or SIGTERM, handled alike)."""
    sigterm_as_interrupt()
    with sigint_deferred() as interrupted:
        loading_seam("start")
        from .app import main
    if interrupted:
        print("egopool: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
