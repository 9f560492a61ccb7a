"""Shared by the recorder tests: a scripted feed for ``Recorder.record_virtual``."""

from __future__ import annotations


def scripted(script):
    """feed() that runs script[tick](rec) for the priming call (tick 0) and each later tick."""
    calls = {"n": 0}

    def feed(t0, t1, rec):
        step = script.get(calls["n"])
        if step is not None:
            step(rec)
        calls["n"] += 1
    return feed


def camera_fifo(path, parts, gates=(), release=None):
    """Start a camera that plays MPEG-TS ``parts`` (bytes) into the FIFO ``path``, as a thread:
    ``parts[0]`` at once, each later part once its gate (a ``threading.Event`` of ``gates``, one
    per later part) is set, then the FIFO stays open and silent (the reader blocks in its read)
    until ``release`` is set. A reader that went away (a failed run) ends it quietly; the test's
    assertions say why. Returns the started thread."""
    import os
    import threading

    assert len(gates) == len(parts) - 1

    def play():
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, parts[0])
            for gate, part in zip(gates, parts[1:]):
                gate.wait(60)
                os.write(fd, part)
            if release is not None:
                release.wait(60)
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread
