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
