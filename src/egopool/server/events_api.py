"""The routes and the episode-page section of reviewers' events (:mod:`egopool.server.events`; P11-P19).

* ``POST /api/v1/tasks/{task}/episodes/{n}/events`` — ``{"episode", "t0", "t1", "label", "note"}``: a new
  event (200 with the row);
* ``PATCH /api/v1/events/{id}`` — ``{"version", ...fields}``: change it (409 when the event moved on);
* ``DELETE /api/v1/events/{id}`` — ``{"version"}`` (in the JSON body, not the URL): delete it (same 409);

A body holding a field its route does not take is refused (400, naming it); ``"note": null`` clears the
note, any other null is refused; an edit that changes nothing answers the event as it is (P30).
* ``GET /api/v1/events?task=&episode=&label=&q=&reviewer=&limit=&cursor=`` — the events matching every
  filter, ascending id, keyset pages (``next_cursor``), scope ``read``.

The three writes take the ``review`` scope with the verdicts' CSRF protection (a JSON body; a browser's
cookie only with the same-origin ``X-Egopool-CSRF`` header: the ``require_review`` of
:mod:`egopool.server.app`). The page section is static HTML; ``static/events.js`` fills it with
``textContent`` (a label or note is never markup).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request

from ..errors import UploadRejectedError
from ..meta.info import read_info
from .db import ServerDB
from .events import (DELETE_FIELDS, MAX_EVENTS_PAGE, MAX_ID, MAX_LABEL, MAX_NOTE, PATCH_FIELDS, POST_FIELDS, EventRow,
                     add_event, delete_event, find_events, parse_event, update_event)
from .review import MAX_BODY
from .store import ServerStore
from .tokens import Token

__all__ = ["EventRoutes", "add_event_routes", "events_section"]


@dataclass(frozen=True)
class EventRoutes:
    """What the event routes take from the application (:func:`egopool.server.app.create_app`).

    Attributes
    ----------
    store:
        The running store (its ``server.db``, and where a task is read from: ``meta/info.json`` gives ``fps``).
    require_read, require_review:
        The app's checks (401 / 403 / 415 raised as :class:`UploadRejectedError`); the token or None.
    task:
        The task name when the store has it (else 404).
    """

    store: Callable[[], ServerStore]
    require_read: Callable[[Request], Token | None]
    require_review: Callable[[Request], Token | None]
    task: Callable[[str], str]

    def db(self) -> ServerDB:
        """The running store's ``server.db``."""
        return self.store().db


async def _body(request: Request) -> bytes:
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise UploadRejectedError(413, "too_large", f"an event body is at most {MAX_BODY // 1024} KiB")
    return body


def _int(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise UploadRejectedError(400, "bad_request", f"filter {name}={raw!r} is not a whole number") from None
    if not low <= v <= high:
        raise UploadRejectedError(400, "bad_request", f"filter {name}={raw!r} is not in {low}..{high}")
    return v


def add_event_routes(app: FastAPI, deps: EventRoutes) -> None:
    """Register the event routes (module docstring) on ``app``."""

    def duration(task: str, index: int) -> float | None:
        """Seconds of episode ``index`` (rows / fps); 404 when the server has no such pooled episode."""
        row = deps.db().episode(task, index)
        if row is None:
            raise UploadRejectedError(404, "not_found", f"no pooled episode {index} in task {task!r}")
        fps: Any = None
        with contextlib.suppress(Exception):  # no readable info.json: only t0 < t1 is checked
            fps = read_info(deps.store().task_location(task)).get("fps")
        ok = isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0
        return row.length / float(fps) if ok else None

    def who(tok: Token | None) -> str | None:
        return tok.id if tok else None

    @app.post("/api/v1/tasks/{task}/episodes/{index}/events")
    async def event_add_api(task: str, index: int, request: Request) -> dict[str, Any]:
        tok = deps.require_review(request)
        e = parse_event(await _body(request), POST_FIELDS)

        def run() -> EventRow:
            name = deps.task(task)
            if not 0 <= index <= MAX_ID:
                raise UploadRejectedError(404, "not_found", f"no pooled episode {index} in task {task!r}")
            return add_event(deps.db(), name, index, e, duration(name, index), who(tok))
        return (await anyio.to_thread.run_sync(run)).to_dict()

    @app.patch("/api/v1/events/{event_id}")
    async def event_edit_api(event_id: int, request: Request) -> dict[str, Any]:
        tok = deps.require_review(request)
        e = parse_event(await _body(request), PATCH_FIELDS)
        if e.episode is not None:
            raise UploadRejectedError(400, "bad_request", "an event stays on its episode; make a new one there")
        row = await anyio.to_thread.run_sync(lambda: update_event(deps.db(), event_id, e, duration, who(tok)))
        return row.to_dict()

    @app.delete("/api/v1/events/{event_id}")
    async def event_delete_api(event_id: int, request: Request) -> dict[str, Any]:
        if "version" in request.query_params:
            raise UploadRejectedError(400, "bad_request", "a delete names the event's version in its JSON body, "
                                                          "not in the URL", hint="send {\"version\": V}")
        deps.require_review(request)
        e = parse_event(await _body(request), DELETE_FIELDS)
        row = await anyio.to_thread.run_sync(lambda: delete_event(deps.db(), event_id, e.version))
        return {"deleted": row.to_dict()}

    @app.get("/api/v1/events")
    async def events_api(request: Request) -> dict[str, Any]:
        deps.require_read(request)
        p = dict(request.query_params)
        known = {"task", "episode", "label", "q", "reviewer", "limit", "cursor"}
        unknown = sorted(set(p) - known)
        if unknown:
            raise UploadRejectedError(400, "bad_request", f"unknown event filter(s) {unknown}",
                                      hint=f"filters: {', '.join(sorted(known))}")
        limit = _int(p, "limit", MAX_EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
        episode = _int(p, "episode", -1, 0, (1 << 63) - 1) if p.get("episode") else None
        after = _int(p, "cursor", 0, 0, (1 << 63) - 1)
        rows = await anyio.to_thread.run_sync(lambda: find_events(
            deps.db(), task=p.get("task") or None, episode=episode, label=p.get("label") or None,
            text=p.get("q") or None, reviewer=p.get("reviewer") or None, after=after, limit=limit))
        return {"events": [r.to_dict() for r in rows],
                "next_cursor": str(rows[-1].id) if len(rows) == limit else None}


def events_section(*, can_review: bool) -> str:
    """The episode page's events: the list (filled by ``static/events.js`` from ``GET /api/v1/events``) and,
    for a token with the ``review`` scope, the form a marked range opens (``[`` / ``]`` or a drag on the
    timeline). The script is deferred and runs after ``episode.js`` (document order)."""
    form = ""
    if can_review:
        form = ("<form id=\"event-form\" hidden><span id=\"event-range\"></span> "
                "<label>from <input id=\"event-t0\" type=\"number\" step=\"any\" min=\"0\" size=\"7\"> s</label> "
                "<label>to <input id=\"event-t1\" type=\"number\" step=\"any\" min=\"0\" size=\"7\"> s</label> "
                f"<input id=\"event-label\" type=\"text\" size=\"20\" maxlength=\"{MAX_LABEL}\" placeholder=\"label\" "
                "required> "
                f"<input id=\"event-note\" type=\"text\" size=\"40\" maxlength=\"{MAX_NOTE}\" placeholder=\"note\"> "
                "<button type=\"submit\" id=\"event-save\">save (Enter)</button> "
                "<button type=\"button\" id=\"event-cancel\">cancel (Esc)</button></form>")
    keys = ("<p class=\"dim\" id=\"event-keys\"><kbd>[</kbd> start an event at the clock · <kbd>]</kbd> end it and "
            "label it · or drag on the timeline</p>") if can_review else ""
    return ("<h2>Events</h2><link rel=\"stylesheet\" href=\"/static/events.css\"><div id=\"events\">" + keys + form
            + "<span id=\"event-msg\" role=\"status\"></span><table id=\"event-list\"><thead><tr><th>from</th>"
              "<th>to</th><th>label</th><th>note</th><th>by</th><th></th></tr></thead><tbody></tbody></table></div>"
            "<script src=\"/static/events.js\" defer></script>")
