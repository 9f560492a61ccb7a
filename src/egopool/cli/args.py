"""Command-line values every command parses the same way: the global episode number N, and TASK.

Every command that takes N (``show TASK N``, ``delete TASK N...``, ``pack TASK N...``,
``upload TASK [N...]``, ``audit-gaps --episode N``, ``export lerobot|rerun|tum``, ``view``, ``plot``,
``keypoints extract|backfill``,
and any new one) declares it with :func:`episode_argument` / :func:`episode_option`, or calls
:func:`parse_episode_n` on the text, so that ``1.0``, ``+1``, ``1e3``, ``01``, `` 1``, ``١``
(non-ASCII digits) and ``0`` are refused while the command line is parsed, before anything
happens (issue 12 D).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import typer

from ..errors import EgopoolError, FormatError, LayoutError

__all__ = ["MAX_EPISODE_N", "episode_argument", "episode_option", "parse_episode_n", "parse_lerobot_index",
           "lerobot_index_option", "parse_task_location", "task_argument"]

#: What a reading command's TASK help says about object storage.
TASK_HELP = "Task directory (holds data/, videos/, meta/), or s3://BUCKET/PREFIX/TASK."


def parse_task_location(value: str) -> Any:
    """TASK of a reading command: a local directory (``pathlib.Path``) or ``s3://bucket/prefix/task``
    (:class:`~egopool.storage.ObjectPath`, reached with the AWS environment variables).

    Raises
    ------
    typer.BadParameter
        Empty text (an unset shell variable must not mean the current directory), or an ``s3://``
        URI without a bucket or with ``.``/``..``/empty components.
    """
    from ..storage import as_path

    if not value.strip():
        raise typer.BadParameter("TASK is empty; pass the task directory (`.` for the current one) or s3://BUCKET/TASK")
    try:
        return as_path(value)
    except EgopoolError as exc:
        raise typer.BadParameter(exc.one_line()) from None


def task_argument(help: str = TASK_HELP) -> Any:
    """A Typer ``Argument`` for the TASK of a command that only reads: a path or an ``s3://`` URI
    (declare the parameter as ``Path``; it receives a ``Path`` or an ``ObjectPath``)."""
    return typer.Argument(..., metavar="TASK", parser=parse_task_location, help=help)

#: Largest N accepted: ``episode_index`` is an int64 column (file_format.md §7.1).
MAX_EPISODE_N = 2**63 - 1

_PLAIN_N = re.compile(r"[1-9][0-9]*")
_PLAIN_INDEX = re.compile(r"0|[1-9][0-9]*")
_HINT = "global N is 1-based: episode-000 is N=1; `egopool ls TASK` lists them"


def parse_episode_n(text: str) -> int:
    """The global 1-based episode number N from command-line text.

    Only a plain positive decimal integer of ASCII digits without sign, spaces, leading
    zeros, ``_``, fraction or exponent is N: ``1.0`` or ``01`` could be read as another
    episode (``episode-001`` is N=2), so they are refused rather than guessed.

    Parameters
    ----------
    text:
        The argument as typed (an ``int`` is accepted too, for callers that already have one).

    Returns
    -------
    int
        N, ``1 <= N <= 2**63 - 1``.

    Raises
    ------
    LayoutError
        Anything else; the CLI prints it as one line and exits 1 before the command runs.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not _PLAIN_N.fullmatch(text) or int(text) > MAX_EPISODE_N:
        raise LayoutError(f"episode number N must be a plain positive decimal integer (1, 2, 3, ...), got {text!r}",
                          hint=_HINT)
    return int(text)


def episode_argument(help: str = "Global 1-based episode number N (as `egopool ls` shows).", *,
                     required: bool = True) -> Any:
    """A Typer ``Argument`` for N, parsed by :func:`parse_episode_n`.

    Declare the parameter as ``int`` (``list[int]`` for ``N...``; ``list[int] | None`` with
    ``required=False``) and give the command ``context_settings={"ignore_unknown_options": True}``
    so that ``-1`` reaches the parser.
    """
    return typer.Argument(... if required else None, metavar="N", parser=parse_episode_n, help=help)


def episode_option(*names: str, help: str = "Only these global N (repeatable).") -> Any:
    """A Typer ``Option`` for N (repeatable when declared ``list[int] | None``), parsed by :func:`parse_episode_n`."""
    return typer.Option(None, *names, metavar="N", parser=parse_episode_n, help=help)


def parse_lerobot_index(text: str) -> int:
    """A LeRobot ``episode_index`` E (0-based) from command-line text: ``0`` or a plain N.

    Raises
    ------
    LayoutError
        ``1.0``, ``01``, ``-1``, ``+1``, more than ``2**63 - 1`` and anything else that is not a plain
        non-negative decimal integer.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not _PLAIN_INDEX.fullmatch(text) or int(text) > MAX_EPISODE_N:
        raise LayoutError(f"LeRobot episode_index E must be a plain non-negative decimal integer (0, 1, 2, ...), "
                          f"got {text!r}", hint="E is 0-based as in the dataset's meta/episodes")
    return int(text)


def lerobot_index_option(*names: str, help: str) -> Any:
    """A repeatable Typer ``Option`` for a LeRobot episode_index E, parsed by :func:`parse_lerobot_index`."""
    return typer.Option(None, *names, metavar="E", parser=parse_lerobot_index, help=help)


#: Row rates ``record`` and ``simulate`` take (Hz): a live rig or its simulation.
RECORD_FPS = (1.0, 1000.0)


def parse_record_fps(text: str) -> float:
    """``--fps`` of ``record`` / ``simulate``: a finite number of rows per second in :data:`RECORD_FPS`.

    Raises
    ------
    typer.BadParameter
        Not a number, not finite (``nan`` used to be told "should be <= 1000"), or out of range.
    """
    try:
        fps = float(text)
    except (TypeError, ValueError):
        raise typer.BadParameter(f"{text!r} is not a number of rows per second (e.g. 30)") from None
    lo, hi = RECORD_FPS
    if not math.isfinite(fps) or not lo <= fps <= hi:
        raise typer.BadParameter(f"{text} rows per second: give a finite rate from {lo:g} to {hi:g}")
    return fps


def record_fps_option(default: float = 30.0) -> Any:
    """The ``--fps`` Typer option of ``record`` / ``simulate`` (parsed by :func:`parse_record_fps`)."""
    return typer.Option(default, "--fps", metavar="HZ", parser=parse_record_fps,
                        help="Task frame rate (rows per second).")


def local_source(path: Path | None, what: str) -> Path | None:
    """An import's source as given, refused in one line when it names a bucket (``s3://...``).

    Typer has made the text a ``Path`` (``s3://b/x`` reads ``s3:/b/x``); the URI is named as typed. An import
    reads a local copy: the fix (copy it down first) is named.

    Raises
    ------
    FormatError
        ``path`` starts with ``s3:``.
    """
    if path is None or str(path)[:3].lower() != "s3:":
        return path
    uri = "s3://" + str(path)[3:].lstrip("/")
    raise FormatError(f"{what} is read from a local copy; an import does not read from a bucket", path=uri,
                      hint=f"copy it down first (`aws s3 cp --recursive {uri} ./{Path(uri[5:]).name}`; a single "
                           "file without --recursive), then import the local copy; --out may be s3://")
