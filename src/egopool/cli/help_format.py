"""``--help`` as the field's command lines print it: plain metavars and paragraphs that wrap.

Typer 0.2x shows ``<bool>`` beside every flag, ``<path>`` / ``<list[Path]>`` beside arguments,
``{TASK}`` for a required argument in the usage line and keeps a docstring's line breaks, so its
wrapped lines are ragged (issue 16 D). :func:`plain_help` turns a converted command tree into
click's classic style: ``Usage: egopool ls [OPTIONS] TASK``, ``validate TASK...``, ``[N]...``,
``--out PATH``, ``--stride INTEGER [x>=1]``, a flag alone, each paragraph one wrapped block.
Older Typer releases print that style themselves; the overrides below are then never called.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, overload

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

__all__ = ["plain_help", "plain_params", "reflow"]

#: Typer's type labels (``<int>``) -> click's classic metavars.
_TYPE_NAMES = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "path": "PATH", "bool": "BOOLEAN",
               "int range": "INTEGER", "float range": "FLOAT", "datetime": "DATETIME", "uuid": "UUID"}
_LIST = re.compile(r"^list\[(.*)\]$")


@overload
def reflow(text: str) -> str: ...


@overload
def reflow(text: None) -> None: ...


def reflow(text: str | None) -> str | None:
    """``text`` with each paragraph's single line breaks turned into spaces (the terminal wraps it).

    Paragraphs (separated by a blank line) stay apart; a paragraph starting with ``\\b`` (click's
    "do not rewrap" mark) is kept as written.
    """
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _classic(label: str | None) -> str | None:
    """``'<list[Path]>'`` -> ``'PATH'``, ``'<int range>'`` -> ``'INTEGER'``, ``'<a|b>'`` -> ``'[a|b]'``."""
    if not label:
        return label
    inner = label[1:-1] if label.startswith("<") and label.endswith(">") else label
    m = _LIST.match(inner)
    if m:
        inner = m.group(1)
    if "|" in inner:
        return f"[{inner}]"
    return _TYPE_NAMES.get(inner.lower(), inner.upper())


class _PlainArgument(TyperArgument):
    """An argument shown by its metavar (``TASK``) alone: ``TASK`` / ``[N]...`` / ``TASK...``."""

    @property
    def display_name_raw(self) -> str:
        return self.metavar or (self.name or "").upper()

    def _usage_display_name(self) -> str:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class _PlainOption(TyperOption):
    """An option shown with click's metavar (``PATH``, ``INTEGER``) or its own; a flag with none."""

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or getattr(self, "count", False):
            return None
        if self.metavar is not None:
            return self.metavar
        return _classic(self.display_type(ctx))


def plain_params(params: list[Any]) -> list[Any]:
    """``params`` (Typer's arguments and options), switched to the plain display; returns them."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = _PlainArgument
        elif type(param) is TyperOption:
            param.__class__ = _PlainOption
    return params


def _plain_get_params(self: Any, ctx: Any) -> list[Any]:
    """``get_params`` of a plain command: its parameters, ``--help`` too (made on first use), print plainly."""
    return plain_params(_PLAIN_BASES[type(self)].get_params(self, ctx))


#: command class -> its plain subclass (one base, nothing added but ``get_params``: the instance
#: layout is the same, so an existing command's class can be switched).
_PLAIN_CLASSES: dict[type, type] = {}
#: plain subclass -> the command class it extends (whose ``get_params`` it calls)
_PLAIN_BASES: dict[type, type[TyperCommand] | type[TyperGroup]] = {}


def _plain_class(cls: type[TyperCommand] | type[TyperGroup]) -> type:
    if cls in _PLAIN_BASES:
        return cls
    if cls not in _PLAIN_CLASSES:
        plain = type(f"Plain{cls.__name__}", (cls,), {"get_params": _plain_get_params, "__module__": __name__})
        _PLAIN_CLASSES[cls] = plain
        _PLAIN_BASES[plain] = cls
    return _PLAIN_CLASSES[cls]


def _plain_text(text: str | None, flow: bool = True) -> str | None:
    """A help text reflowed (``flow``), its brackets text unless they are egopool's own styles."""
    from .output import _only_our_styles  # a help text's [extra] is text, as in every other output

    if not text:
        return text
    return _only_our_styles(reflow(text) if flow else text)


def plain_help(cmd: Any) -> Any:
    """Give ``cmd`` (a converted Typer command or group) and everything under it the classic help.

    Help texts are reflowed (:func:`reflow`) and hold no Rich markup but egopool's styles
    (:data:`egopool.cli.output.STYLES`: a ``[server]`` stays text); parameters get plain metavars.
    Returns ``cmd``.
    """
    if isinstance(cmd, (TyperCommand, TyperGroup)):
        cmd.__class__ = _plain_class(type(cmd))
    cmd.help = _plain_text(cmd.help)
    cmd.short_help = _plain_text(cmd.short_help)
    for param in plain_params(cmd.params):
        param.help = _plain_text(getattr(param, "help", None), flow=False)
    for sub in getattr(cmd, "commands", {}).values():
        plain_help(sub)
    return cmd
