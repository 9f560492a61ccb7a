"""Console-script entry point (``egopool`` and ``python -m egopool``).

The CLI's modules (pyarrow, numpy, PyAV and every command, about half a second) load with Ctrl-C
held back: an interrupt while they load is acted on once they are in, as the same one line and
exit code 130 as an interrupt while a command runs. A KeyboardInterrupt raised inside an import
would surface as an import machinery traceback, or wrapped in another error, not as Ctrl-C.
"""

from __future__ import annotations

import os
import sys

from .._sigint import sigint_deferred

#: Test seam: ``<point>:<write fd>:<read fd>`` makes the start-up stop at ``point`` (``start``: no CLI
#: module loaded yet, ``commands``: the app loaded, its commands not), write one byte to the first fd and
#: wait for one byte on the second, so a test can send Ctrl-C at a known point. Unset in production.
SEAM_ENV = "EGOPOOL_LOADING_SEAM"


def _seam(point: str) -> None:
    spec = os.environ.get(SEAM_ENV, "")
    name, _, fds = spec.partition(":")
    if name != point:
        return
    wfd, _, rfd = fds.partition(":")
    os.write(int(wfd), b"!")
    os.read(int(rfd), 1)


def entry() -> None:
    """Load the CLI, run it on ``sys.argv`` and exit with its code (130 after Ctrl-C)."""
    with sigint_deferred() as interrupted:
        _seam("start")
        from .app import main, register_commands

        _seam("commands")
        register_commands()
    if interrupted:
        print("egopool: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())
