"""Routes of the review pages' later parts (docs/decisions.md P20-P22), added to the app by
:func:`add_page_routes` with the app's own authentication and store (:class:`PageDeps`):

* ``POST /api/v1/tasks/{task}/reviews`` — bulk review (:mod:`egopool.server.bulk_review`), scope ``review``,
  the same bearer-or-cookie+CSRF guard as a single verdict;
* ``GET /api/v1/tasks/{task}/selection?<filters>&cursor=`` — ``[N, version]`` of the matching episodes, ``read``;
* ``GET /tasks/{task}/dashboard`` — the dashboard page, ``GET /api/v1/tasks/{task}/dashboard`` its figures, ``read``
  (:mod:`egopool.server.dashboard`);
* ``GET /api/v1/tasks/{task}/episodes/{n}/download.zip`` and ``.../download.rrd``,
  ``GET /api/v1/tasks/{task}/download/episodes.zip?<filters>`` and ``.../download/lerobot.zip?<filters>`` —
  streamed downloads, ``read`` (:mod:`egopool.server.downloads`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from ..errors import EgopoolError, UploadRejectedError
from .catalog import episode_entry
from .bulk_review import MAX_BULK_BODY, parse_bulk, record_bulk, selection
from .dashboard import dashboard_data, dashboard_page
from .download_scratch import ScratchResponse
from .downloads import (episode_zip, episodes_zip, file_stream, lerobot_export_dir, lerobot_stream, rerun_file,
                        rerun_ready)
from .review import MAX_BODY
from .search import EpisodeQuery, parse_query
from .task_tools import task_tools
from .store import ServerStore
from .tokens import Token

__all__ = ["PageDeps", "add_page_routes", "read_body", "task_tools"]


@dataclass(frozen=True)
class PageDeps:
    """What the routes take from :func:`~egopool.server.app.create_app`: the open store, the two
    guards (raising :class:`~egopool.errors.UploadRejectedError` 401/403/415) and the task check (404)."""

    store: Callable[[], ServerStore]
    require_read: Callable[[Request], Token | None]
    require_review: Callable[[Request], Token | None]
    task: Callable[[str], str]


#: a selection download (zip of episodes, LeRobot) whose filter matches nothing: 404
_NONE_MATCH = "no pooled episode of task {task!r} matches this filter"


def _filters(request: Request, task: str) -> EpisodeQuery:
    params = {k: v for k, v in request.query_params.items() if k not in ("task", "limit", "cursor")}
    q = parse_query({**params, "task": task})
    cursor = request.query_params.get("cursor")
    return parse_query({**q.params(), "cursor": cursor}) if cursor else q


def _attachment(name: str) -> dict[str, str]:
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    return {"Content-Disposition": f"attachment; filename=\"{safe}\"", "Cache-Control": "no-store",
            "Cross-Origin-Resource-Policy": "same-origin"}


def _all_matching(store: ServerStore, q: EpisodeQuery, task: str) -> list[int]:
    out: list[int] = []
    page = selection(store.db, q, task)
    while True:
        out += [n for n, _ in page["episodes"]]
        if not page["next_cursor"]:
            return out
        page = selection(store.db, parse_query({**q.params(), "cursor": page["next_cursor"]}), task)


async def read_body(request: Request, limit: int, what: str) -> bytes:
    """The request's body, refused with 413 once it passes ``limit`` bytes (``what`` names it: "a review body")."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise UploadRejectedError(413, "too_large", f"{what} is at most {limit // 1024} KiB",
                                      hint="send the selection in several requests" if limit > MAX_BODY else None)
    return body


def add_page_routes(app: FastAPI, deps: PageDeps) -> None:
    """Add the routes of the module docstring to ``app``."""

    @app.post("/api/v1/tasks/{task}/reviews")
    async def bulk_review_api(task: str, request: Request) -> dict[str, Any]:
        tok = deps.require_review(request)
        bv = parse_bulk(await read_body(request, MAX_BULK_BODY, "a bulk review body"))
        return await anyio.to_thread.run_sync(record_bulk, deps.store().db, deps.task(task), bv,
                                              tok.id if tok else None)

    @app.get("/api/v1/tasks/{task}/selection")
    async def selection_api(task: str, request: Request) -> dict[str, Any]:
        deps.require_read(request)
        q = _filters(request, task)
        return await anyio.to_thread.run_sync(selection, deps.store().db, q, deps.task(task))

    @app.get("/api/v1/tasks/{task}/dashboard")
    async def dashboard_api(task: str, request: Request) -> dict[str, Any]:
        deps.require_read(request)
        return await anyio.to_thread.run_sync(dashboard_data, deps.store().db, deps.task(task))

    @app.get("/tasks/{task}/dashboard", response_class=HTMLResponse)
    async def dashboard_html(task: str, request: Request) -> HTMLResponse:
        deps.require_read(request)

        def build() -> str:
            return dashboard_page(task, dashboard_data(deps.store().db, deps.task(task)))
        return HTMLResponse(await anyio.to_thread.run_sync(build))

    def _stream(chunks: Iterator[bytes], name: str, media: str = "application/zip") -> StreamingResponse:
        return StreamingResponse(chunks, media_type=media, headers=_attachment(name))

    @app.get("/api/v1/tasks/{task}/episodes/{index}/download.zip")
    async def episode_zip_api(task: str, index: int, request: Request) -> Response:
        deps.require_read(request)

        def start() -> Iterator[bytes]:
            if not 1 <= index < 2**63:
                raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
            try:
                return episode_zip(deps.store(), deps.task(task), index)
            except FileNotFoundError:
                raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}") from None
        return _stream(await anyio.to_thread.run_sync(start), f"{task}-{index}.zip")

    @app.get("/api/v1/tasks/{task}/episodes/{index}/download.rrd")
    async def episode_rrd_api(task: str, index: int, request: Request) -> Response:
        deps.require_read(request)
        store, name = deps.store(), deps.task(task)
        if not 1 <= index < 2**63 or await anyio.to_thread.run_sync(episode_entry, store, name, index) is None:
            raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
        try:
            await anyio.to_thread.run_sync(rerun_ready)
        except EgopoolError as exc:  # its hint names the extra to install on the server
            raise UploadRejectedError(501, "not_available", f"this server cannot make a .rrd: {exc.one_line()}"
                                      ) from None
        path, scratch = await anyio.to_thread.run_sync(rerun_file, store, name, index)
        return ScratchResponse(file_stream(path, scratch), scratch, media_type="application/octet-stream",
                               headers=_attachment(f"{task}-{index}.rrd"))

    async def matching(task: str, request: Request) -> tuple[ServerStore, str, list[int]]:
        """The store, task name and every N the request's filter selects (scope read); none is the same 404 for
        both selection downloads (P35)."""
        deps.require_read(request)
        q = _filters(request, task)
        store, name = deps.store(), deps.task(task)
        indices = await anyio.to_thread.run_sync(_all_matching, store, q, name)
        if not indices:
            raise UploadRejectedError(404, "not_found", _NONE_MATCH.format(task=task))
        return store, name, indices

    @app.get("/api/v1/tasks/{task}/download/episodes.zip")
    async def selection_zip_api(task: str, request: Request) -> Response:
        store, name, indices = await matching(task, request)
        return _stream(episodes_zip(store, name, indices), f"{task}-episodes.zip")

    @app.get("/api/v1/tasks/{task}/download/lerobot.zip")
    async def selection_lerobot_api(task: str, request: Request) -> Response:
        store, name, indices = await matching(task, request)
        d, out = await anyio.to_thread.run_sync(lerobot_export_dir, store, name, indices)
        return ScratchResponse(lerobot_stream(name, d, out), d, media_type="application/zip",
                               headers=_attachment(f"{task}-lerobot.zip"))
