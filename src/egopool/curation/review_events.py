"""Reviewers' events for an export: what ``--events-from`` reads (docs/decisions.md P16).

The export runs on a task directory, the events live in the pooling server's ``server.db``: the export reads
them from the server's answer to ``GET /api/v1/events`` (the same JSON saved to a file, or its ``http(s)://``
URL fetched with the token in ``$EGOPOOL_TOKEN`` and every ``next_cursor`` page followed), like
``--episodes-from`` reads a selection (:mod:`egopool.curation.selection`). A plain JSON list of event
objects is read too. An event is kept as the server gave it: task, server N (the task directory's N), the
range ``[t0, t1)`` in seconds from the episode's start, label, note, who and when.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import EgopoolError
from .selection import TOKEN_ENV

__all__ = ["ReviewEvent", "events_by_episode", "read_events"]



@dataclass(frozen=True)
class ReviewEvent:
    """One reviewer's event (the server's ``GET /api/v1/events`` row).

    Attributes
    ----------
    task, episode_index:
        Server task name and N (the N of the task directory it was pooled into).
    t0, t1:
        Seconds from the episode's start (frame ``i`` starts at ``i / fps``), ``t0 < t1``.
    label, note:
        Text.
    token_id, updated_by:
        Who made it and who edited it last (None on a server without tokens).
    created_at, updated_at:
        Unix s.
    id:
        The server's event id.
    """

    task: str
    episode_index: int
    t0: float
    t1: float
    label: str
    note: str = ""
    token_id: str | None = None
    updated_by: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    id: int | None = None

    def frames(self, fps: float, length: int) -> tuple[int, int]:
        """``[f0, f1)`` rows of an episode of ``length`` rows at ``fps`` that the range covers (a frame is in
        when its start is in ``[t0, t1)``), clipped to the episode (``f0 <= f1``)."""
        f0 = min(length, max(0, math.ceil(self.t0 * fps - 1e-6)))
        f1 = min(length, max(f0, math.ceil(self.t1 * fps - 1e-6)))
        return f0, f1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def _event(e: Any, where: str) -> ReviewEvent:
    if not isinstance(e, dict):
        raise EgopoolError(f"{where}: an event is a JSON object, not {type(e).__name__}")
    try:
        task, n, t0, t1, label = e["task"], e["episode_index"], e["t0"], e["t1"], e["label"]
    except KeyError as exc:
        raise EgopoolError(f"{where}: an event without {exc.args[0]!r}",
                           hint="give the server's answer to GET /api/v1/events") from None
    ok = (isinstance(task, str) and isinstance(n, int) and not isinstance(n, bool) and isinstance(label, str)
          and all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) for t in (t0, t1)))
    if not ok or not 0 <= t0 < t1:
        raise EgopoolError(f"{where}: not an event of the server's API: {json.dumps(e)[:200]}",
                           hint="task (text), episode_index (N), 0 <= t0 < t1 (s), label (text)")
    note = e.get("note")
    return ReviewEvent(task, n, float(t0), float(t1), label, note if isinstance(note, str) else "",
                       e.get("token_id"), e.get("updated_by"), e.get("created_at"), e.get("updated_at"), e.get("id"))


def _from_json(doc: Any, where: str) -> tuple[list[ReviewEvent], Any]:
    if isinstance(doc, list):
        return [_event(e, where) for e in doc], None
    if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
        raise EgopoolError(f"{where}: not a list of events (the server's answer to GET /api/v1/events)")
    return [_event(e, where) for e in doc["events"]], doc.get("next_cursor")


def _fetch(url: str, token: str | None, timeout: float) -> list[ReviewEvent]:
    from .selection import fetch_pages

    return fetch_pages(url, "the events", "give the URL of GET /api/v1/events", _from_json, token=token,
                       timeout=timeout)


def read_events(source: str | Path, *, token: str | None = None, timeout: float = 60.0) -> list[ReviewEvent]:
    """Every event of a file or a server URL (module docstring), in the order given.

    Raises
    ------
    EgopoolError
        A missing or malformed file, an event without its fields or with ``t0 >= t1``, a refused or failed
        request.
    """
    text = str(source)
    if text.startswith(("http://", "https://")):
        return _fetch(text, token or os.environ.get(TOKEN_ENV), timeout)
    path = Path(source)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise EgopoolError(f"cannot read the events: {exc}", path=path,
                           hint="the server's JSON answer to GET /api/v1/events, or its URL") from exc
    events, cursor = _from_json(doc, str(path))
    if cursor not in (None, ""):
        warnings.warn(f"{path} is one page of a longer answer (next_cursor {cursor!r}): only its {len(events)} "
                      "event(s) are carried; give the URL instead to follow every page", UserWarning, stacklevel=2)
    return events


def events_by_episode(events: list[ReviewEvent], task: str, *aliases: str) -> dict[int, list[ReviewEvent]]:
    """``{N: events ordered by (t0, t1, id)}`` of the events of ``task`` (or one of its ``aliases``, e.g.
    ``info.json``'s ``task_name``). Events of other tasks are left out with one warning naming them (events
    are matched by task name: a renamed copy of a task matches none)."""
    names = {task, *aliases}
    out: dict[int, list[ReviewEvent]] = {}
    others: dict[str, int] = {}
    for e in events:
        if e.task in names:
            out.setdefault(e.episode_index, []).append(e)
        else:
            others[e.task] = others.get(e.task, 0) + 1
    if others:
        shown = ", ".join(f"{t!r} ({k})" for t, k in sorted(others.items())[:5]) + (" ..." if len(others) > 5 else "")
        warnings.warn(f"{sum(others.values())} event(s) name other tasks than {task!r}, not carried: {shown} "
                      "(events are matched by task name)", UserWarning, stacklevel=2)
    for v in out.values():
        v.sort(key=lambda e: (e.t0, e.t1, e.id or 0))
    return out
