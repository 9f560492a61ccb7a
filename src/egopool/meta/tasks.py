"""``meta/tasks.jsonl``: one complete JSON object per line, single line today (file_format.md §5)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, overload

from .._atomic import atomic_write_bytes
from .._safe_read import loads_json, read_text
from ..errors import FormatError
from ..storage import TaskPath, TaskPathLike, as_local_path, as_path

__all__ = ["read_tasks", "tasks_jsonl", "tasks_path", "write_tasks_if_missing"]


@overload
def tasks_path(task_dir: Path) -> Path: ...
@overload
def tasks_path(task_dir: TaskPathLike) -> TaskPath: ...
def tasks_path(task_dir: TaskPathLike) -> TaskPath:
    """``<task>/meta/tasks.jsonl`` (a local task's is a ``Path``)."""
    return as_path(task_dir) / "meta" / "tasks.jsonl"


def read_tasks(task_dir: TaskPathLike) -> list[dict[str, Any]]:
    """Parse every line with ``json.loads`` (checklist §12.5).

    Raises
    ------
    FormatError
        Missing or not a regular file (a FIFO is never opened), not UTF-8 (the line is
        named), or a line that is not a complete JSON object (e.g. a pretty-printed file).
    """
    path = tasks_path(task_dir)
    lines = read_text(path, what="meta/tasks.jsonl").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = loads_json(line, path=path, line=i,
                         hint="tasks.jsonl must hold one complete JSON object per line; re-write it on one line")
        if not isinstance(obj, dict):
            raise FormatError(f"line {i} is not a JSON object", path=path)
        out.append(obj)
    return out


#: Characters ``str.splitlines`` breaks a line at that ``json.dumps(ensure_ascii=False)`` leaves raw.
_RAW_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def tasks_jsonl(rows: list[dict[str, Any]]) -> bytes:
    """``rows`` as ``tasks.jsonl`` bytes (UTF-8): one JSON object per line (§5), non-ASCII text kept readable but
    every character a line reader splits at (U+0085, U+2028, U+2029; json escapes the rest) written escaped."""
    out = []
    for r in rows:
        line = json.dumps(r, ensure_ascii=False)
        for raw, esc in _RAW_LINE_BREAKS.items():
            line = line.replace(raw, esc)
        out.append(line + "\n")
    return "".join(out).encode("utf-8")


def write_tasks_if_missing(task_dir: str | os.PathLike[str], task_name: str) -> None:
    """Create ``tasks.jsonl`` with ``{"task_index": 0, "task": task_name}`` on one line, only if absent.

    Raises
    ------
    FormatError
        ``task_dir`` is an ``s3://`` location (a local task only, :func:`~egopool.storage.as_local_path`).
    """
    path = tasks_path(as_local_path(task_dir, what="writing meta/tasks.jsonl"))
    if path.exists():
        return
    line = json.dumps({"task_index": 0, "task": task_name}, ensure_ascii=False)
    atomic_write_bytes(path, (line + "\n").encode("utf-8"))
