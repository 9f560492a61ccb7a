"""What third-party C/C++ code prints, kept off the user's terminal unless asked for.

Native libraries write to file descriptors 1 and 2 below anything Python can redirect:
MediaPipe's ``W0000 ... inference_feedback_manager.cc:114] Feedback manager requires ...`` and
TensorFlow Lite's ``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.`` on every
``keypoints extract`` (issue 16 D). :func:`native_output` points both descriptors at a temporary
file for a stretch of code and logs each line it caught at INFO on the caller's logger; a
command's ``--verbose`` attaches a stderr handler to that logger (:func:`show_log`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["native_output", "show_log"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@contextlib.contextmanager
def native_output(log: logging.Logger, prefix: str = "") -> Iterator[list[str]]:
    """Collect what is written on file descriptors 1 and 2 inside, instead of showing it.

    The yielded list holds the lines (ANSI codes and blank lines dropped) once the block is left;
    each is also logged at INFO on ``log`` (after ``prefix``, e.g. ``"projectaria-tools: "``). Short stretches only (a model's start, its first
    frame): everything the process writes there, from any thread, is caught.
    """
    lines: list[str] = []
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(OSError, ValueError):
                    stream.flush()
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            lines += [ln for ln in (_ANSI.sub("", raw).strip() for raw in text.splitlines()) if ln]
            for ln in lines:
                log.info("%s%s", prefix, ln)


@contextlib.contextmanager
def show_log(log: logging.Logger, verbose: bool) -> Iterator[None]:
    """With ``verbose``, ``log``'s INFO lines (what :func:`native_output` caught) go to stderr as they are."""
    if not verbose:
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
