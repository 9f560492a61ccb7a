"""Bulk review: one verdict on a selection of a task's episodes (docs/decisions.md P20).

``POST /api/v1/tasks/{task}/reviews`` takes ``{"verdict", "reason", "episodes": [{"episode": N,
"version": V}, ...], "all_or_none": false}``: every item still names its episode and the review version
the reviewer saw (P1), so a bulk verdict never judges an episode someone else judged meanwhile. The
items are recorded in one transaction: the fresh ones are recorded and the stale ones are reported,
each with what the episode is now (``all_or_none: true``: one stale item records nothing). Same scope
and CSRF guard as a single verdict (:func:`egopool.server.review.csrf_ok`).

``GET /api/v1/tasks/{task}/selection?<filters>&cursor=`` lists ``[N, version]`` of every episode
matching the task page's filters (keyset pages of :data:`MAX_SELECTION`): what "select all matching
the filter" sends.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UploadRejectedError
from .db import VERDICTS, ServerDB
from .review import MAX_BODY, parse_review
from .search import EpisodeQuery, _sql, encode_cursor

__all__ = ["MAX_BULK", "MAX_BULK_BODY", "MAX_SELECTION", "BulkVerdict", "parse_bulk", "record_bulk", "selection"]

#: items of one bulk request (the page sends a larger selection in several requests)
MAX_BULK = 1000
#: bytes of a bulk body: the reason of a single verdict plus ~64 bytes per item
MAX_BULK_BODY = MAX_BODY + MAX_BULK * 64
#: ``[N, version]`` pairs per selection page
MAX_SELECTION = 10000

_SHAPE = ('{"verdict": "accept"|"reject"|"flag", "reason": "...", "episodes": [{"episode": N, "version": V}, ...], '
          '"all_or_none": false}')


@dataclass(frozen=True)
class BulkVerdict:
    """One bulk request: ``verdict`` (no undo) and ``reason`` for every ``(N, version)`` of ``items``."""

    verdict: str
    reason: str
    items: tuple[tuple[int, int], ...]
    all_or_none: bool


def parse_bulk(body: bytes) -> BulkVerdict:
    """The :class:`BulkVerdict` of a request body (shape :data:`_SHAPE`).

    Raises
    ------
    UploadRejectedError
        400: not a JSON object, ``undo`` (take verdicts back one episode at a time), no or more than
        :data:`MAX_BULK` items, an item without a whole ``episode`` and ``version``, an episode named
        twice, and everything :func:`~egopool.server.review.parse_review` refuses in the verdict and reason.
    """
    try:
        doc: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise UploadRejectedError(400, "bad_request", "the bulk review body is not JSON", hint=f"send {_SHAPE}") from None
    if not isinstance(doc, dict):
        raise UploadRejectedError(400, "bad_request", "the bulk review body is not a JSON object", hint=f"send {_SHAPE}")
    if doc.get("verdict") == "undo":
        raise UploadRejectedError(400, "bad_request", "a bulk review cannot undo",
                                  hint="undo one episode at a time (its page, key u)")
    items = doc.get("episodes")
    if not isinstance(items, list) or not items:
        raise UploadRejectedError(400, "bad_request", "a bulk review names its episodes", hint=f"send {_SHAPE}")
    if len(items) > MAX_BULK:
        raise UploadRejectedError(400, "bad_request", f"a bulk review names at most {MAX_BULK} episodes, not "
                                                      f"{len(items)}", hint="send the selection in several requests")
    pairs: list[tuple[int, int]] = []
    for item in items:
        if not isinstance(item, dict):
            raise UploadRejectedError(400, "bad_request", f"a bulk item is not an object: {item!r:.60}",
                                      hint=f"send {_SHAPE}")
        # each item is checked as the single verdict it stands for (P1's whole numbers, the reason's rules)
        one = parse_review(json.dumps({"episode": item.get("episode"), "version": item.get("version"),
                                       "verdict": doc.get("verdict"), "reason": doc.get("reason", "")}).encode())
        pairs.append((one.episode, one.version))
    seen: set[int] = set()
    for n, _ in pairs:
        if n in seen:
            raise UploadRejectedError(400, "bad_request", f"episode {n} is named twice in one bulk review")
        seen.add(n)
    first = parse_review(json.dumps({"episode": pairs[0][0], "version": pairs[0][1], "verdict": doc.get("verdict"),
                                     "reason": doc.get("reason", "")}).encode())
    flag = doc.get("all_or_none", False)
    if not isinstance(flag, bool):
        raise UploadRejectedError(400, "bad_request", f"all_or_none is true or false, not {flag!r}")
    return BulkVerdict(first.verdict, first.reason, tuple(pairs), flag)


def record_bulk(db: ServerDB, task: str, bv: BulkVerdict, token_id: str | None) -> dict[str, Any]:
    """Record ``bv`` on ``task`` (:meth:`~egopool.server.db.ServerDB.add_reviews`, one transaction): the answer of
    ``POST .../reviews``: ``recorded`` (``episode``, the new ``version``, ``state``), ``stale`` (``episode``, the
    ``version`` sent, the episode's ``now`` version, its ``current`` verdict and a one-line ``message``),
    ``not_found`` (N without a pooled episode) and ``message`` (a sentence for the page).

    Raises
    ------
    UploadRejectedError
        409 with ``all_or_none`` when an item is stale or unknown (nothing recorded; the findings list them).
    """
    done, stale, unknown = db.add_reviews(task, bv.items, bv.verdict, bv.reason, token_id,
                                          all_or_none=bv.all_or_none)
    stale_out = [{"episode": n, "version": v, "now": exc.version,
                  "current": exc.current.to_dict() if exc.current else None, "message": str(exc)}
                 for n, v, exc in stale]
    if bv.all_or_none and (stale or unknown):
        raise UploadRejectedError(409, "conflict", f"{len(stale)} of {len(bv.items)} episodes were reviewed again "
                                                   f"since you looked and {len(unknown)} are not pooled episodes of "
                                                   f"{task!r}; nothing was recorded",
                                  hint="reload the task page to see their current reviews",
                                  findings=[*({"episode": str(n), "message": str(exc)} for n, _, exc in stale),
                                            *({"episode": str(n), "message": "no pooled episode"} for n in unknown)])
    state = VERDICTS[bv.verdict]
    bits = [f"{len(done)} {state}"]
    if stale:
        bits.append(f"{len(stale)} not recorded: reviewed again since you looked "
                    f"({', '.join(str(n) for n, _, _ in stale[:20])}{' …' if len(stale) > 20 else ''})")
    if unknown:
        bits.append(f"{len(unknown)} not pooled episodes ({', '.join(str(n) for n in unknown[:20])})")
    return {"task": task, "verdict": bv.verdict, "recorded": [{"episode": r.episode_index, "version": r.id,
                                                               "state": state} for r in done],
            "stale": stale_out, "not_found": unknown, "message": "; ".join(bits)}


def selection(db: ServerDB, q: EpisodeQuery, task: str) -> dict[str, Any]:
    """``{"episodes": [[N, version], ...], "next_cursor"}``: one keyset page (:data:`MAX_SELECTION`; ``q.limit`` is
    not used) of
    the pooled episodes of ``task`` matching ``q``'s filters, with the review version each verdict must answer.
    Episodes committed but not yet in ``server.db`` cannot be judged and are not listed.

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    one = replace(q, filters={**q.filters, "task": task}, limit=MAX_SELECTION + 1)
    sql, args = _sql(one, columns="e.task, e.episode_index, (SELECT MAX(v.id) FROM reviews AS v WHERE "
                                  "v.task = e.task AND v.episode_index = e.episode_index)")
    rows = db.select(sql, tuple(args))
    more = len(rows) > one.limit - 1
    rows = rows[:one.limit - 1]
    return {"task": task, "episodes": [[int(r[1]), int(r[2] or 0)] for r in rows],
            "next_cursor": encode_cursor((rows[-1][0], int(rows[-1][1]))) if more and rows else None}
