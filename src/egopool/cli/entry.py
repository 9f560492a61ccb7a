"""Console-script entry point (``egopool`` and ``python -m egopool``).

The CLI's modules (pyarrow, numpy, PyAV and every command, about half a second) load with Ctrl-C
held back: an interrupt while they load is acted on once they are in, as the same one line and
exit code 130 as an interrupt while a command runs. SIGTERM is handled as Ctrl-C (a killed ``simulate`` left
115 MB of temp files and its reservation, issue 16 E). A KeyboardInterrupt raised inside an import
would surface as an import machinery traceback, or wrapped in another error, not as Ctrl-C.
"""

from __future__ import annotations

import sys

from .._sigint import sigint_deferred, sigterm_as_interrupt


def entry() -> None:
    """Load the CLI, run it on ``sys.argv`` and exit with its code (130 after Ctrl-C or SIGTERM, handled alike)."""
    sigterm_as_interrupt()
    with sigint_deferred() as interrupted:
        from .app import main, register_commands

        register_commands()
    if interrupted:
        print("egopool: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
