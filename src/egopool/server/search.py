"""Search and filter the pooled episodes of ``server.db`` (docs/decisions.md Q12, Q13).

``GET /api/v1/episodes`` and the task page take the same filters (:data:`FILTERS`); the
query runs on ``server.db`` alone (never the task directories), so a page costs the same at
100,000 episodes as at 100. Results are ordered by ``(task, episode_index)`` and paged by
*keyset* (seek): the cursor is the last ``(task, N)`` a page showed and the next page is
``WHERE (task, episode_index) > (cursor) ORDER BY task, episode_index LIMIT n``, answered
from the ``episodes`` primary-key index (no OFFSET: page 2,000 costs what page 1 does). An
episode imported while someone pages is never shown twice and never makes another one be
skipped: it lands after every row it sorts after.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import math
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import UploadRejectedError
from .db import VERDICTS, EpisodeRow, ServerDB

__all__ = ["FILTERS", "MAX_LIMIT", "EpisodeQuery", "encode_cursor", "episode_neighbours", "explain", "parse_query",
           "missing_facts", "next_unreviewed", "preview_url", "search_episodes", "thumbnail_url"]

MAX_LIMIT = 500
_DEFAULT_LIMIT = 50
_STATES = (*VERDICTS.values(), "unreviewed")


def _bad(name: str, value: str, expected: str) -> UploadRejectedError:
    return UploadRejectedError(400, "bad_request", f"filter {name}={value!r} is not {expected}",
                               hint="see GET /api/v1/episodes in README's Curation section")


def _time(name: str, value: str) -> float:
    """Unix s, or an ISO 8601 date / date-time (UTC unless it names its zone)."""
    try:
        x = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(x):
            raise _bad(name, value, "a finite time")
        return x
    try:
        t = _dt.datetime.fromisoformat(value)
    except ValueError:
        raise _bad(name, value, "a date (2026-05-01), a date-time (2026-05-01T12:00) or unix seconds") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def _number(name: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise _bad(name, value, "a number") from None
    if not math.isfinite(x):
        raise _bad(name, value, "a finite number")
    return x


def _bool(name: str, value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "yes"):
        return True
    if low in ("0", "false", "no"):
        return False
    raise _bad(name, value, "true or false")


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        if value not in choices:
            raise _bad(name, value, " or ".join(choices))
        return value
    return parse


def _text(name: str, value: str) -> str:
    return value


#: filter -> (parser, SQL condition with one ``?``, or None when handled specially). The quality
#: conditions read the ``quality`` table (``q.``, :mod:`egopool.curation.quality`): an episode
#: whose facts are not computed yet (NULL) matches none of them. Their unary ``+`` keeps SQLite from
#: driving the query by a quality index (``quality_duration``), which would need a sort per page.
FILTERS: dict[str, tuple[Callable[[str, str], Any], str | None]] = {
    "task": (_text, "e.task = ?"),
    "host": (_text, "e.client_hostname = ?"),
    "since": (_time, "e.imported_at >= ?"),
    "until": (_time, "e.imported_at < ?"),
    "min_duration": (_number, "+q.duration_s >= ?"),
    "max_duration": (_number, "+q.duration_s <= ?"),
    "validation": (_choice("passed", "failed"), None),
    "review": (_choice(*_STATES), None),
    "max_idle_fraction": (_number, "+q.idle_fraction <= ?"),
    "max_blur_outliers": (_number, "+q.blur_outliers <= ?"),
    "has_gaps": (_bool, None),
    "has_frozen": (_bool, None),
    # an episode with at least one reviewer's event of this label (docs/decisions.md P15)
    "event": (_text, "EXISTS (SELECT 1 FROM events AS ev WHERE ev.label = ? AND ev.task = e.task "
                     "AND ev.episode_index = e.episode_index)"),
}
#: quality filter -> the SQL of its fact (NULL: the episode has no value for it; P8)
FACT_OF_FILTER = {"min_duration": "q.duration_s", "max_duration": "q.duration_s",
                  "max_idle_fraction": "q.idle_fraction", "max_blur_outliers": "q.blur_outliers",
                  "has_gaps": "q.gap_total", "has_frozen": "json_extract(q.facts, '$.frozen_frames')"}


@dataclass(frozen=True)
class EpisodeQuery:
    """Parsed filters of one search.

    Attributes
    ----------
    filters:
        Filter name (:data:`FILTERS`) -> parsed value (times in unix s, durations in s).
    limit:
        Episodes per page, 1..:data:`MAX_LIMIT`.
    after:
        The cursor: the last ``(task, N)`` of the previous page, or None for the first page.
    """

    filters: dict[str, Any] = field(default_factory=dict)
    limit: int = _DEFAULT_LIMIT
    after: tuple[str, int] | None = None

    def params(self, *, cursor: bool = False) -> dict[str, str]:
        """The filters as query-string parameters (what :func:`parse_query` reads back)."""
        out = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in self.filters.items()}
        if cursor and self.after is not None:
            out["cursor"] = encode_cursor(self.after)
        return out


def encode_cursor(key: tuple[str, int]) -> str:
    """An opaque cursor for ``(task, N)``."""
    return base64.urlsafe_b64encode(json.dumps([key[0], key[1]]).encode("utf-8")).decode("ascii").rstrip("=")


def _decode_cursor(value: str) -> tuple[str, int]:
    try:
        task, n = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        if not isinstance(task, str) or type(n) is not int or not 0 <= n < 1 << 63:
            raise ValueError
        task.encode("utf-8")  # a lone surrogate would fail in SQLite
        return task, n
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise _bad("cursor", value, "a next_cursor this server gave") from None


def parse_query(params: Mapping[str, str]) -> EpisodeQuery:
    """Parse query-string parameters; empty values are ignored (an HTML form sends every field).

    Raises
    ------
    UploadRejectedError
        400 for an unknown parameter or a malformed value (one line naming it, docs/decisions.md Q20).
    """
    filters: dict[str, Any] = {}
    limit, after = _DEFAULT_LIMIT, None
    for name, value in params.items():
        if value == "":
            continue
        if name == "limit":
            if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_LIMIT:  # not "²"
                raise _bad(name, value, f"an integer 1..{MAX_LIMIT}")
            limit = int(value)
        elif name == "cursor":
            after = _decode_cursor(value)
        elif name in FILTERS:
            filters[name] = FILTERS[name][0](name, value)
        else:
            raise UploadRejectedError(400, "bad_request", f"unknown filter {name!r}",
                                      hint=f"filters: {', '.join(FILTERS)}, limit, cursor")
    return EpisodeQuery(filters, limit, after)


_COLUMNS = ("e.task, e.episode_index, e.client_host_id, e.client_hostname, e.client_episode_index, e.upload_id, "
            "e.token_id, e.imported_at, e.length, e.streams, e.validation, r.id, r.verdict, r.reason, r.token_id, r.at, "
            "q.duration_s, q.size_bytes, q.gap_total, q.drop_total, q.idle_fraction, q.blur_outliers, "
            "q.exposure_outliers, p.state, p.manifest, json_extract(q.facts, '$.frozen_frames'), "
            # the review version a verdict on it answers (P1): reviews_episode's last id, one index seek
            "(SELECT MAX(v.id) FROM reviews AS v WHERE v.task = e.task AND v.episode_index = e.episode_index)")
#: the quality columns a result carries as its ``quality`` summary (the full facts: the episode API)
_SUMMARY = ("gap_total", "drop_total", "idle_fraction", "blur_outliers", "exposure_outliers")


def _sql(q: EpisodeQuery, *, reverse: bool = False, columns: str = _COLUMNS) -> tuple[str, list[Any]]:
    # A verdict filter walks review_state's (verdict, task, N) index in key order; every other
    # search walks the episodes primary key (task, N). Either way: no sort, no OFFSET.
    k = "s" if q.filters.get("review") in VERDICTS.values() else "e"
    where: list[str] = []
    args: list[Any] = []
    for name, value in q.filters.items():
        cond = FILTERS[name][1]
        if name == "task":
            cond = f"{k}.task = ?"
        if cond is not None:
            where.append(cond)
            args.append(value)
        elif name == "validation":
            where.append("json_extract(e.validation, '$.ok') = ?")
            args.append(1 if value == "passed" else 0)
        elif name == "review":
            where.append("s.verdict IS NULL" if value == "unreviewed" else "s.verdict = ?")
            args += [] if value == "unreviewed" else [value]
        elif name == "has_gaps":
            where.append("+q.gap_total > 0" if value else "+q.gap_total = 0")
        elif name == "has_frozen":
            where.append(f"{FACT_OF_FILTER[name]} {'>' if value else '='} 0")
    cmp = "<" if reverse else ">"
    task = q.filters.get("task")
    if q.after is not None and task is not None:  # one task: seek on N alone (the index's equality prefix)
        if q.after[0] == task:
            where.append(f"{k}.episode_index {cmp} ?")
            args.append(q.after[1])
        elif (q.after[0] > task) != reverse:  # the cursor is past every episode of the task
            where.append("0")
    elif q.after is not None:
        where.append(f"({k}.task, {k}.episode_index) {cmp} (?, ?)")
        args += [q.after[0], q.after[1]]
    order = "DESC" if reverse else "ASC"
    states = ("review_state AS s CROSS JOIN episodes AS e" if k == "s" else
              "episodes AS e LEFT JOIN review_state AS s") + " ON s.task = e.task AND s.episode_index = e.episode_index "
    sql = (f"SELECT {columns} FROM {states}"
           "LEFT JOIN reviews AS r ON r.id = s.review_id "
           + "LEFT JOIN quality AS q ON q.task = e.task AND q.episode_index = e.episode_index "
           + "LEFT JOIN previews AS p ON p.task = e.task AND p.episode_index = e.episode_index "
           + (f"WHERE {' AND '.join(where)} " if where else "")
           + f"ORDER BY {k}.task {order}, {k}.episode_index {order} LIMIT ?")
    return sql, [*args, q.limit]


def preview_url(task: str, index: int, name: str) -> str:
    """The URL path of preview file ``name`` of ``(task, N)`` (the route of :mod:`egopool.server.previews`)."""
    return (f"/api/v1/tasks/{urllib.parse.quote(task, safe='')}/episodes/{index}/preview/"
            f"{urllib.parse.quote(name)}")


def thumbnail_url(task: str, index: int, state: str | None, manifest: str | None) -> str | None:
    """The thumbnail of a built preview (the first RGB stream that moves, else any), else None."""
    if state != "ready" or not manifest:
        return None
    streams = json.loads(manifest).get("streams") or []
    # a camera that moves first (a frozen one shows the same picture for every episode, P7), then RGB
    for s in sorted(streams, key=lambda s: (s.get("moves") is False, s.get("kind") != "rgb")):
        if s.get("thumbnail"):
            return preview_url(task, index, s["thumbnail"])
    return None


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    review = None
    if r[11] is not None:
        review = {"id": r[11], "verdict": r[12], "state": VERDICTS[r[12]], "reason": r[13], "token_id": r[14],
                  "at": r[15]}
    computed = r[16] is not None or r[17] is not None
    return {"task": r[0], "episode_index": r[1], "length": r[8], "streams": json.loads(r[9]),
            "validation": json.loads(r[10]), "review": review, "review_version": int(r[26] or 0),
            "duration_s": r[16], "size_bytes": r[17],
            "quality": {**dict(zip(_SUMMARY, r[18:23], strict=True)), "frozen_frames": r[25]} if computed else None,
            "preview_state": r[23], "thumbnail": thumbnail_url(r[0], r[1], r[23], r[24]),
            "uploaded_by": {"client_host_id": r[2], "client_hostname": r[3], "client_episode_index": r[4],
                            "upload_id": r[5], "token_id": r[6], "imported_at": r[7]}}


def _pending_matches(row: EpisodeRow, q: EpisodeQuery) -> bool:
    """``q``'s filters on an episode that committed but has no ``server.db`` row yet: no verdict, no
    quality facts (so a quality filter never matches, as for a NULL fact)."""
    for name, value in q.filters.items():
        if not _pending_filter(row, name, value):
            return False
    return q.after is None or (row.task, row.episode_index) > q.after


def _pending_filter(row: EpisodeRow, name: str, value: Any) -> bool:
    """One filter of :func:`_pending_matches` (an unknown one, e.g. a quality fact, never matches)."""
    if name == "task":
        return bool(row.task == value)
    if name == "host":
        return bool(row.client_hostname == value)
    if name == "since":
        return bool(row.imported_at >= value)
    if name == "until":
        return bool(row.imported_at < value)
    if name == "validation":
        return bool(row.validation.get("ok")) == (value == "passed")
    if name == "review":
        return bool(value == "unreviewed")
    return False


def _pending_dict(r: EpisodeRow) -> dict[str, Any]:
    return {"task": r.task, "episode_index": r.episode_index, "length": r.length, "streams": r.streams,
            "validation": r.validation, "review": None, "review_version": 0,
            "duration_s": None, "size_bytes": None, "quality": None,
            "preview_state": None, "thumbnail": None,
            "uploaded_by": {"client_host_id": r.client_host_id, "client_hostname": r.client_hostname,
                            "client_episode_index": r.client_episode_index, "upload_id": r.upload_id,
                            "token_id": r.token_id, "imported_at": r.imported_at}}


def search_episodes(db: ServerDB, q: EpisodeQuery, pending: Mapping[tuple[str, int], EpisodeRow] | None = None
                    ) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the episodes matching ``q`` and the cursor of the next page (None on the last).

    ``pending``: episodes that committed a moment before their ``server.db`` row
    (:func:`~egopool.server.catalog.pending_rows`, read *before* this call), merged in so that the
    search, like every reader, lists an episode from its commit on (docs/decisions.md U5).

    Each episode: ``task``, ``episode_index``, ``length`` (rows), ``streams``, ``validation``,
    ``review`` (the current verdict or None), ``review_version`` (what a verdict answers, P1),
    ``duration_s`` (s), ``size_bytes``, ``quality``
    (``gap_total``, ``drop_total``, ``idle_fraction``, ``blur_outliers``, ``exposure_outliers``;
    None before the facts are computed), ``preview_state``, ``thumbnail`` (URL or None),
    ``uploaded_by`` (host, its N, upload, token, ``imported_at`` unix s).

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    sql, args = _sql(replace(q, limit=q.limit + 1))
    rows = [_row(r) for r in db.select(sql, tuple(args))]
    extra = [_pending_dict(r) for key, r in (pending or {}).items() if _pending_matches(r, q)]
    if extra:
        have = {(r["task"], r["episode_index"]) for r in rows}
        rows = sorted(rows + [r for r in extra if (r["task"], r["episode_index"]) not in have],
                      key=lambda r: (r["task"], r["episode_index"]))
    more = len(rows) > q.limit
    rows = rows[:q.limit]
    nxt = encode_cursor((rows[-1]["task"], rows[-1]["episode_index"])) if more and rows else None
    return rows, nxt


def episode_neighbours(db: ServerDB, q: EpisodeQuery, task: str, index: int) -> tuple[int | None, int | None]:
    """The previous and next episode N of ``task`` around ``index`` among those matching ``q``
    (the episode page's j / k); None at either end."""
    one = replace(q, filters={**q.filters, "task": task}, limit=1, after=(task, index))
    found: list[int | None] = []
    for reverse in (True, False):
        sql, args = _sql(one, reverse=reverse, columns="e.episode_index")
        rows = db.select(sql, tuple(args))
        found.append(int(rows[0][0]) if rows else None)
    return found[0], found[1]


def missing_facts(db: ServerDB, q: EpisodeQuery, task: str) -> dict[str, int]:
    """Quality filter of ``q`` -> how many pooled episodes of ``task`` have no value for its fact (not
    computed yet, or a fact the rig cannot have: idle without a trajectory or gripper). Those episodes
    never match the filter; the task page says how many there are instead of hiding them silently (P8).
    One COUNT over the task's episodes per active quality filter."""
    out: dict[str, int] = {}
    for name in q.filters:
        if name in FACT_OF_FILTER:
            sql = ("SELECT COUNT(*) FROM episodes AS e LEFT JOIN quality AS q ON q.task = e.task AND "
                   f"q.episode_index = e.episode_index WHERE e.task = ? AND {FACT_OF_FILTER[name]} IS NULL")
            out[name] = int(db.select(sql, (task,))[0][0])
    return out


def next_unreviewed(db: ServerDB, q: EpisodeQuery, task: str, index: int) -> int | None:
    """The next N of ``task`` after ``index`` under ``q``'s filters that has no verdict (auto-advance, P4)."""
    return episode_neighbours(db, replace(q, filters={**q.filters, "review": "unreviewed"}), task, index)[1]


def explain(db: ServerDB, q: EpisodeQuery) -> list[str]:
    """SQLite's ``EXPLAIN QUERY PLAN`` of the page query of ``q`` (one line per step)."""
    sql, args = _sql(q)
    return [str(r[-1]) for r in db.select("EXPLAIN QUERY PLAN " + sql, tuple(args))]
