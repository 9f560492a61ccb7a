"""The review stack of ``server.db``: appending one verdict inside a write transaction, the verdicts in
force, and the conflict a stale verdict raises (docs/decisions.md Q11, P1, P2, P20)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .db_rows import UNDO, VERDICTS, ReviewRow

__all__ = ["ReviewConflict", "append_review", "describe", "in_force"]


class ReviewConflict(ValueError):
    """A verdict that answers an outdated review version, or an undo with nothing to undo (HTTP 409).

    Attributes
    ----------
    current:
        The verdict in force (None: unreviewed).
    version:
        The episode's review version now.
    """

    def __init__(self, message: str, current: ReviewRow | None, version: int) -> None:
        super().__init__(message)
        self.current, self.version = current, version


def append_review(con: sqlite3.Connection, task: str, index: int, verdict: str, reason: str,
                   token_id: str | None, version: int | None, at: float) -> tuple[ReviewRow, ReviewRow | None]:
    """Append one verdict inside the caller's write transaction (:meth:`~egopool.server.db.ServerDB.add_review`); raises
    :class:`ReviewConflict` (nothing written) when ``version`` is not the episode's review version."""
    rows = [ReviewRow(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5], float(r[6])) for r in con.execute(
        "SELECT id, task, episode_index, verdict, reason, token_id, at FROM reviews "
        "WHERE task = ? AND episode_index = ? ORDER BY id", (task, index)).fetchall()]
    stack = in_force(rows)
    latest = rows[-1].id if rows else 0
    if version is not None and version > latest:
        raise ReviewConflict(f"episode {index} of task {task!r} has no review version {version} (the latest is "
                             f"{latest}): {describe(stack[-1] if stack else None)}; nothing was recorded",
                             stack[-1] if stack else None, latest)
    if version is not None and version != latest:
        raise ReviewConflict(f"episode {index} of task {task!r} was reviewed again since review version "
                             f"{version} (now {rows[-1].id if rows else 0}): "
                             f"{describe(stack[-1] if stack else None)}; nothing was recorded",
                             stack[-1] if stack else None, rows[-1].id if rows else 0)
    if verdict == UNDO:
        if not stack:
            raise ReviewConflict(f"episode {index} of task {task!r} has no verdict to undo", None,
                                 rows[-1].id if rows else 0)
        reason = reason or f"undo of review #{stack[-1].id} ({stack[-1].state})"
    cur = con.execute("INSERT INTO reviews (task, episode_index, verdict, reason, token_id, at) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (task, index, verdict, reason, token_id, at))
    row = ReviewRow(int(cur.lastrowid or 0), task, index, verdict, reason, token_id, at)
    stack = in_force([*rows, row])
    if stack:
        con.execute("INSERT OR REPLACE INTO review_state VALUES (?, ?, ?, ?)",
                    (task, index, stack[-1].id, VERDICTS[stack[-1].verdict]))
    else:
        con.execute("DELETE FROM review_state WHERE task = ? AND episode_index = ?", (task, index))
    return row, (stack[-1] if stack else None)


def in_force(rows: Sequence[ReviewRow]) -> list[ReviewRow]:
    """The verdicts still in force, oldest first, of an episode's review rows in id order: a verdict is
    pushed, an ``undo`` pops the last one (docs/decisions.md P2)."""
    stack: list[ReviewRow] = []
    for r in rows:
        if r.verdict == UNDO:
            if stack:
                stack.pop()
        else:
            stack.append(r)
    return stack


def describe(r: ReviewRow | None) -> str:
    if r is None:
        return "it is unreviewed now"
    by = f" by {r.token_id}" if r.token_id else ""
    why = f" {r.reason!r}" if r.reason else ""
    return f"it is {r.state}{why}{by} now"
