"""Console-script entry point (``egopool`` and ``python -m egopool``).

The CLI's modules (pyarrow, numpy, PyAV and every command, about half a second) load with Ctrl-C
held back: an interrupt while they load is acted on once they are in, as the same one line and
exit code 130 as an interrupt while a command runs. A KeyboardInterrupt raised inside an import
would surface as an import machinery traceback, or wrapped in another error, not as Ctrl-C.
"""

from __future__ import annotations

import signal
import sys


def entry() -> None:
    """Load the CLI, run it on ``sys.argv`` and exit with its code (130 after Ctrl-C)."""
    interrupted: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    except ValueError:  # not the main thread (embedded): nothing to hold back
        previous = None
    try:
        from .app import main, register_commands

        register_commands()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        print("egopool: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
