"""Command-line parameter parsers shared by the commands."""

from __future__ import annotations

import re

import typer

__all__ = ["parse_episode_n"]

_WHOLE = re.compile(r"[+-]?[0-9]+")


def parse_episode_n(value: str | int) -> int:
    """A global episode number N written as a whole number (``3``; never ``3.0``, ``1e3``, ``0x3``).

    The sign is kept so that ``-1`` reaches the command's own 1-based refusal.

    Raises
    ------
    typer.BadParameter
        Anything else (exit 2 with a one-line usage error).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if not _WHOLE.fullmatch(text):
        raise typer.BadParameter(f"{value!r} is not an episode number: write N as a whole number, as `egopool ls` "
                                 "shows it")
    return int(text)
