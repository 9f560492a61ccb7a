"""Reviewers' events: labelled time ranges ``[t0, t1)`` of a pooled episode (issue 26; docs/decisions.md P11-P19).

An event names its task, episode (server N), ``t0 < t1`` in seconds from the episode's start (the page's
clock: frame ``i`` starts at ``i / fps``), both within the episode's duration, a label (what it is:
``grasp``, ``slip``, ``occluded``) and a free note. ``server.db``'s ``events`` table (schema 6) keeps who
made it (``token_id``, the token's id, as a verdict records its reviewer) and who edited it last
(``updated_by``), when, and a ``version`` that each edit raises: an edit or delete names the version it
answers, and one answering an older version is refused (409) like a stale verdict (P1, P12).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
import unicodedata
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import UploadRejectedError
from .db import ServerDB

__all__ = ["DELETE_FIELDS", "MAX_EVENTS_PAGE", "MAX_ID", "MAX_LABEL", "MAX_NOTE", "PATCH_FIELDS", "POST_FIELDS",
           "EventEdit", "EventRow", "add_event", "delete_event",
           "find_events", "get_event", "parse_event", "update_event"]

MAX_LABEL = 200  # characters
MAX_NOTE = 2000
MAX_EVENTS_PAGE = 1000
#: the largest id, episode N or version SQLite holds (a signed 64-bit integer)
MAX_ID = (1 << 63) - 1
#: the fields a request body may hold: a new event, an edit (``episode`` only to say it cannot change), a delete
POST_FIELDS = frozenset({"episode", "t0", "t1", "label", "note"})
PATCH_FIELDS = frozenset({"version", "episode", "t0", "t1", "label", "note"})
DELETE_FIELDS = frozenset({"version"})
_COLUMNS = "id, task, episode_index, t0, t1, label, note, token_id, updated_by, created_at, updated_at, version"
_SHAPE = '{"episode": N, "t0": s, "t1": s, "label": "...", "note": "..."} (an edit or delete adds "version": V)'


@dataclass(frozen=True)
class EventRow:
    """One event (``events`` row).

    Attributes
    ----------
    id:
        Ascending in creation order.
    task, episode_index:
        The episode (server N).
    t0, t1:
        Seconds from the episode's start, ``0 <= t0 < t1 <= duration``: the range ``[t0, t1)``.
    label, note:
        Stripped text (the label is not empty).
    token_id, updated_by:
        The token that made it and the one that edited it last (None on a server without tokens).
    created_at, updated_at:
        Unix s.
    version:
        1 when made, +1 per edit: what the next edit or delete must name.
    """

    id: int
    task: str
    episode_index: int
    t0: float
    t1: float
    label: str
    note: str
    token_id: str | None
    updated_by: str | None
    created_at: float
    updated_at: float
    version: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


@dataclass(frozen=True)
class EventEdit:
    """A parsed event request body: the fields given (None: not given; PATCH keeps the stored value).

    Attributes
    ----------
    episode:
        The server N the reviewer looked at (a POST must name it and it must equal the URL's N).
    version:
        The event's version the edit or delete answers (required for PATCH and DELETE).
    t0, t1:
        Seconds (finite, ``>= 0``).
    label, note:
        Stripped text.
    """

    episode: int | None = None
    version: int | None = None
    t0: float | None = None
    t1: float | None = None
    label: str | None = None
    note: str | None = None


def _bad(message: str) -> UploadRejectedError:
    return UploadRejectedError(400, "bad_request", message, hint=f"send {_SHAPE}")


def _text(doc: dict[str, Any], name: str, limit: int) -> str | None:
    v = doc.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise _bad(f"an event's {name} must be a string, not {type(v).__name__}")
    v = v.strip()
    if len(v) > limit:
        raise _bad(f"the {name} has {len(v)} characters, more than {limit}")
    ok = "\t\n" if name == "note" else ""
    bad = next((c for c in v if c not in ok and unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:
        raise _bad(f"the {name} holds the character U+{ord(bad):04X} (a control character or a lone surrogate)")
    return v


def _seconds(doc: dict[str, Any], name: str) -> float | None:
    v = doc.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise _bad(f"an event's {name} is seconds from the episode's start (a finite number >= 0), not {v!r}")
    return float(v)


def _whole(doc: dict[str, Any], name: str, low: int) -> int | None:
    v = doc.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= MAX_ID:
        raise _bad(f"an event's {name} must be a whole number from {low} to {MAX_ID}, not {v!r}")
    return v


def parse_event(body: bytes, fields: frozenset[str] = PATCH_FIELDS | POST_FIELDS) -> EventEdit:
    """The :class:`EventEdit` of a request body (``_SHAPE``) that may hold ``fields`` (:data:`POST_FIELDS`,
    :data:`PATCH_FIELDS` or :data:`DELETE_FIELDS`).

    ``"note": null`` clears the note (as ``""`` does); any other field given as null is refused (leave it
    out to keep the stored value).

    Raises
    ------
    UploadRejectedError
        400: not a JSON object; a field not in ``fields`` (all named); a null field other than the note; a
        time that is not a finite number ``>= 0``; a label over :data:`MAX_LABEL` or a note over
        :data:`MAX_NOTE` characters, or one holding a control character (the note may hold tabs and line
        breaks) or a lone surrogate; an episode or version that is not a whole number from 1 to :data:`MAX_ID`.
    """
    try:
        doc: Any = json.loads(body) if body.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise _bad("the event body is not JSON") from None
    if not isinstance(doc, dict):
        raise _bad("the event body is not a JSON object")
    unknown = sorted(set(doc) - fields)
    if unknown:
        raise UploadRejectedError(400, "bad_request", f"unknown event field(s) {unknown}; nothing was changed",
                                  hint=f"fields here: {', '.join(sorted(fields))}")
    nulls = sorted(k for k, v in doc.items() if v is None and k != "note")
    if nulls:
        raise _bad(f"an event's {', '.join(nulls)} cannot be null (leave a field out to keep it; only the note "
                   "is cleared by null)")
    if "note" in doc and doc["note"] is None:
        doc["note"] = ""
    return EventEdit(_whole(doc, "episode", 1), _whole(doc, "version", 1), _seconds(doc, "t0"), _seconds(doc, "t1"),
                     _text(doc, "label", MAX_LABEL), _text(doc, "note", MAX_NOTE))


def _check_range(t0: float, t1: float, duration: float | None, where: str) -> None:
    if not t0 < t1:
        raise UploadRejectedError(400, "bad_request", f"an event is the range [t0, t1) with t0 < t1; {where} got "
                                                      f"t0={t0:g} s, t1={t1:g} s",
                                  hint="mark the start before the end")
    if duration is not None and t1 > duration + 1e-6:
        raise UploadRejectedError(400, "bad_request", f"{where} lasts {duration:g} s; an event cannot end at "
                                                      f"t1={t1:g} s", hint=f"give 0 <= t0 < t1 <= {duration:g}")


def _row(r: tuple[Any, ...]) -> EventRow:
    return EventRow(int(r[0]), r[1], int(r[2]), float(r[3]), float(r[4]), r[5], r[6], r[7], r[8], float(r[9]),
                    float(r[10]), int(r[11]))


def add_event(db: ServerDB, task: str, index: int, e: EventEdit, duration: float | None,
              who: str | None) -> EventRow:
    """Record a new event on episode ``index`` of ``task`` (which exists: the caller checked) lasting
    ``duration`` s (None: unknown, only ``t0 < t1`` is checked).

    Raises
    ------
    UploadRejectedError
        400: no ``t0``, ``t1`` or label, ``t0 >= t1``, ``t1`` after the episode's end; 409: the body names
        another episode than the URL (the page moved on; nothing recorded).
    """
    where = f"episode {index} of task {task!r}"
    if e.episode is None:
        raise _bad("an event names the episode it marks: \"episode\" is missing")
    if e.episode != index:
        raise UploadRejectedError(409, "conflict", f"this event names episode {e.episode} but was sent to {where}; "
                                                   "nothing was recorded")
    if e.t0 is None or e.t1 is None or not e.label:
        raise _bad("a new event needs t0, t1 and a label")
    _check_range(e.t0, e.t1, duration, where)
    now = time.time()
    with db.writing() as con:
        cur = con.execute("INSERT INTO events (task, episode_index, t0, t1, label, note, token_id, updated_by, "
                          "created_at, updated_at, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                          (task, index, e.t0, e.t1, e.label, e.note or "", who, who, now, now))
        return EventRow(int(cur.lastrowid or 0), task, index, e.t0, e.t1, e.label, e.note or "", who, who, now, now, 1)


def get_event(db: ServerDB, event_id: int) -> EventRow | None:
    """Event ``event_id``, or None (also for an id SQLite cannot hold)."""
    if not 0 <= event_id <= MAX_ID:
        return None
    rows = db.select(f"SELECT {_COLUMNS} FROM events WHERE id = ?", (event_id,))
    return _row(rows[0]) if rows else None


def _current(con: sqlite3.Connection, event_id: int, version: int | None) -> EventRow:
    """The stored event that an edit or delete naming ``version`` may change (raises 400 / 404 / 409)."""
    if version is None:
        raise _bad("an edit or delete names the version of the event it answers: \"version\" is missing")
    r = con.execute(f"SELECT {_COLUMNS} FROM events WHERE id = ?", (event_id,)).fetchone() \
        if 0 <= event_id <= MAX_ID else None  # 2**63: no such event, not an OverflowError
    if r is None:
        raise UploadRejectedError(404, "not_found", f"no event {event_id} (deleted, or never made)")
    row = _row(r)
    if row.version != version:
        by = f" by {row.updated_by}" if row.updated_by else ""
        raise UploadRejectedError(409, "conflict", f"event {event_id} was edited since version {version} (now "
                                                   f"{row.version}{by}: {row.label!r} {row.t0:g}-{row.t1:g} s); "
                                                   "nothing was changed", hint="reload the episode to see it")
    return row


def update_event(db: ServerDB, event_id: int, e: EventEdit, duration_of: Callable[[str, int], float | None],
                 who: str | None) -> EventRow:
    """Change the given fields of event ``event_id`` if it is still at ``e.version``; its version is raised.
    An edit that changes nothing returns the stored event as it is (same version, ``updated_at``).

    ``duration_of(task, index)`` gives the episode's length in s (None: unknown).

    Raises
    ------
    UploadRejectedError
        400: no version, an empty label, the range that results is not ``t0 < t1 <= duration``;
        404: no such event; 409: the event is at another version (nothing changed).
    """
    seen = get_event(db, event_id)  # the episode's length is read outside the write transaction
    duration = duration_of(seen.task, seen.episode_index) if seen is not None else None
    with db.writing() as con:
        old = _current(con, event_id, e.version)
        if e.label == "":
            raise _bad("an event's label cannot be empty")
        new = EventRow(old.id, old.task, old.episode_index, old.t0 if e.t0 is None else e.t0,
                       old.t1 if e.t1 is None else e.t1, old.label if e.label is None else e.label,
                       old.note if e.note is None else e.note, old.token_id, who, old.created_at, time.time(),
                       old.version + 1)
        if (new.t0, new.t1, new.label, new.note) == (old.t0, old.t1, old.label, old.note):
            return old  # nothing changes: no new version, no new updated_at / updated_by (P30)
        _check_range(new.t0, new.t1, duration, f"episode {old.episode_index} of task {old.task!r}")
        con.execute("UPDATE events SET t0 = ?, t1 = ?, label = ?, note = ?, updated_by = ?, updated_at = ?, "
                    "version = ? WHERE id = ?", (new.t0, new.t1, new.label, new.note, who, new.updated_at,
                                                 new.version, event_id))
    return new


def delete_event(db: ServerDB, event_id: int, version: int | None) -> EventRow:
    """Delete event ``event_id`` if it is still at ``version``; return what was deleted.

    Raises
    ------
    UploadRejectedError
        400: no version; 404: no such event; 409: the event was edited since (nothing deleted).
    """
    with db.writing() as con:
        old = _current(con, event_id, version)
        con.execute("DELETE FROM events WHERE id = ?", (event_id,))
    return old


def find_events(db: ServerDB, *, task: str | None = None, episode: int | None = None, label: str | None = None,
                text: str | None = None, reviewer: str | None = None, after: int = 0,
                limit: int = MAX_EVENTS_PAGE) -> list[EventRow]:
    """Events matching every filter given, ascending id from ``after`` (exclusive; keyset paging).

    Parameters
    ----------
    task, episode:
        The task, and server N within it.
    label:
        The exact label.
    text:
        A substring (case-insensitive for ASCII) of the label or the note.
    reviewer:
        The token id that made or last edited it.
    after, limit:
        The last id of the previous page; rows at most.
    """
    where, args = ["id > ?"], list[Any]([after])
    for sql, value in (("task = ?", task), ("episode_index = ?", episode), ("label = ?", label)):
        if value is not None:
            where.append(sql)
            args.append(value)
    if reviewer is not None:
        where.append("(token_id = ? OR updated_by = ?)")
        args += [reviewer, reviewer]
    if text:
        pat = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append("(label LIKE ? ESCAPE '\\' OR note LIKE ? ESCAPE '\\')")
        args += [pat, pat]
    rows = db.select(f"SELECT {_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY id LIMIT ?",
                     (*args, int(limit)))
    return [_row(r) for r in rows]
