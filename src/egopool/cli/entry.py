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
    try:
        code = main()
    except Exception as exc:  # a bug: reported as Python reports it (sys.excepthook, exit 1), then the same way out
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    _exit_past_native_threads(code)
    sys.exit(code)


#: Native libraries with threads of their own (Arrow's CPU and I/O pools, FFmpeg's codec threads, obstore's
#: runtime) that may still hold Python objects when ``main`` returns.
_THREADED_NATIVE = ("pyarrow", "av", "obstore")


def _exit_past_native_threads(code: int | None) -> None:
    """End the process with ``os._exit(code)`` past the interpreter's finalization once a native library with
    threads of its own is loaded (docs/decisions.md A2).

    Such threads race the finalization: an Arrow pool thread dropping the last reference to a Python
    buffer takes the GIL, which ends the thread during finalization with a forced unwind through a
    ``noexcept`` destructor; the AWS SDK's and obstore's clients are torn down by C++ static
    destructors while their threads run. Either aborts now and then ("terminate called without an
    active exception", exit -6) after the command printed its last line. Everything egopool writes is
    flushed, synced and closed when ``main`` returns; stdout and stderr are flushed here, and the exit
    code is ``code`` (None: 0), as ``sys.exit`` gives it. Not when Python would still wait for
    something at a normal exit: Ray running in this process (its shutdown is an exit handler), a
    non-daemon thread alive, a child process of :mod:`multiprocessing` alive.
    """
    from ..storage import _s3

    if not _s3.clients_made() and not any(name in sys.modules for name in _THREADED_NATIVE):
        return
    if _still_running():
        return
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (egopool ls | head) or a closed stream: nothing to write to
            pass
    os._exit(int(code or 0))


def _still_running() -> bool:
    """True when a normal exit would still wait for something: Ray, a non-daemon thread, a child process."""
    import threading

    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        return True
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return True
    mp = sys.modules.get("multiprocessing")
    return mp is not None and bool(mp.active_children())
