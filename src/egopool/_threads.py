"""Thread naming for per-stage CPU accounting (Linux ``/proc/self/task/<tid>/comm``)."""

from __future__ import annotations

__all__ = ["name_thread"]


def name_thread(name: str) -> None:
    """Give the calling OS thread ``name`` (at most 15 bytes kept). Threads it starts afterwards
    (x264 / x265 worker pools) inherit the name, so their CPU time counts for the same stage.
    A no-op where ``prctl`` is missing: names only serve profiling."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - not Linux
        pass
