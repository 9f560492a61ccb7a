"""Shared output helpers for CLI commands: JSON for scripts, Rich for people.

Text printed through :data:`console` / :data:`err_console` (and the tables and progress bars drawn
on them) keeps every bracket it holds: only the styles the commands write themselves
(:data:`STYLES`, e.g. ``[bold]...[/bold]``) are Rich markup. A path, task name, message or note
holding ``[devices]`` or ``[abc]`` is printed as it is (issue 16 D: ``pip install 'egopool[devices]'``
used to lose its extra), whether or not the command escaped it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

#: The Rich styles egopool's commands mark text with; any other ``[tag]`` is text.
STYLES = frozenset({"bold", "dim", "italic", "red", "green", "yellow", "cyan", "blue", "magenta",
                    "progress.description", "progress.percentage", "progress.remaining"})
#: A Rich markup tag with the backslashes before it (rich.markup's own pattern).
_TAG = re.compile(r"(\\*)(\[([a-z#/@][^[]*?)])")


def _only_our_styles(text: str) -> str:
    """``text`` with every markup tag that is not one of :data:`STYLES` (or its closing tag) escaped."""

    def fix(m: re.Match[str]) -> str:
        backslashes, tag, inner = m.group(1), m.group(2), m.group(3)
        if len(backslashes) % 2 or inner.lstrip("/") in STYLES or inner == "/":
            return m.group(0)  # already escaped, or ours
        return backslashes + escape(tag)

    return _TAG.sub(fix, text)


class _Console(Console):
    """A Rich console whose markup is :data:`STYLES` only (see the module's docstring)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        markup = kwargs.get("markup")
        if markup or (markup is None and self._markup):
            text = _only_our_styles(text)
        return super().render_str(text, **kwargs)


console = _Console()
err_console = _Console(stderr=True)


#: Where print_json writes while :func:`stdout_only_json` holds file descriptor 1 (else sys.stdout).
_json_out: TextIO | None = None


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON on stdout (UTF-8, non-ASCII kept, paths as strings)."""
    out = _json_out or sys.stdout
    out.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")
    out.flush()


@contextlib.contextmanager
def stdout_only_json(active: bool) -> Iterator[None]:
    """With ``--json``, file descriptor 1 carries nothing but :func:`print_json`'s document.

    Libraries print on stdout from C/C++ (projectaria-tools' ``Loaded #...`` lines, FFmpeg, SDK
    loggers), below anything Python can redirect: fd 1 is pointed at stderr for the command, and
    print_json writes to a duplicate of the real stdout. Python-level prints go to stderr too.
    Nothing changes when sys.stdout is not the process's fd 1 (a test's captured stream).
    """
    global _json_out
    try:
        fd = sys.stdout.fileno() if active else -1
    except (AttributeError, OSError, ValueError):
        fd = -1
    if fd != 1:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    _json_out = open(saved, "w", encoding="utf-8", closefd=True)  # noqa: SIM115 - closed below
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            sys.stdout.flush()
        os.dup2(saved, 1)
        out, _json_out = _json_out, None
        with contextlib.suppress(OSError):  # a closed pipe: nothing more to say
            out.close()


def human_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


@contextlib.contextmanager
def changed_values_to_stderr() -> Iterator[None]:
    """Print each :class:`~egopool.errors.ValueChangedWarning` raised inside as one line on stderr.

    ``egopool: warning: episode N: ...`` says what the writer stored otherwise than given and
    the lossless way out (e.g. ``--depth-codec ffv1``); the counts are in ``drop_stats``
    (docs/decisions.md #22). Printed even with ``--json`` (stdout stays JSON).
    """
    from ..errors import ValueChangedWarning

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ValueChangedWarning)
            yield
    finally:
        seen: set[str] = set()
        for w in caught:
            text = str(w.message)
            if issubclass(w.category, ValueChangedWarning):
                if text not in seen:
                    seen.add(text)
                    print(f"egopool: warning: {text}", file=sys.stderr)
            else:  # anything else keeps Python's own handling, outside the recording context
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@contextlib.contextmanager
def progress_bar(label: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A Rich progress bar on stderr, driven by ``tick(done, total)``; hidden for --json or a non-terminal."""
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True, disable=quiet or not err_console.is_terminal) as bar:
        job = bar.add_task(label, total=None)

        def tick(done: int, total: int) -> None:
            bar.update(job, completed=done, total=total)

        yield tick
