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
    code = main()
    _exit_past_native_clients(code)
    sys.exit(code)


def _exit_past_native_clients(code: int | None) -> None:
    """End the process without the native S3 clients' static destructors once a command reached a bucket.

    The AWS SDK (pyarrow.fs) and obstore's runtime each keep threads; torn down by C++ static destructors
    at exit they race and abort now and then ("terminate called without an active exception", exit -6,
    about 1 run in 20 of `stats check s3://...`). Everything egopool writes is flushed, synced and closed
    when ``main`` returns, so the process ends here with ``os._exit``. Not when Ray runs in this process
    (its shutdown is an exit handler).
    """
    from ..storage import _s3

    if not _s3.clients_made():
        return
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code or 0))
