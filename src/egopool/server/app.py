"""The FastAPI application of ``egopool serve`` (file_format.md §9).

Routes:

* ``POST /api/v1/session/upload`` — multipart ``name`` (task), ``episode_index`` (f), the
  zip, and the ``X-Egopool-Client-Key`` header (the sender's identity, docs/decisions.md U11);
  scope ``upload:<task>`` or ``upload:*``; answers 200 with the server's N
  (:class:`~egopool.server.importer.ImportResult`) or 4xx/5xx with ``{"error", "message", "findings"}``;
* ``GET /api/v1/tasks``, ``/api/v1/tasks/{task}``, ``/api/v1/tasks/{task}/episodes``,
  ``/api/v1/tasks/{task}/episodes/{n}``, ``/api/v1/tasks/{task}/episodes/{n}/files/{path}``,
  ``/api/v1/uploads`` — scope ``read``;
* ``GET /api/v1/tasks/{task}/episodes/{n}`` also carries ``duration_s``, ``size_bytes``, ``quality`` (the
  quality facts, null until computed), ``review``, ``review_version`` (P1) and ``preview`` (state, streams with
  their proxy and thumbnail URLs, signals URL; :func:`~egopool.server.previews.describe`);
  ``GET /api/v1/tasks/{task}/episodes/{n}/preview/{name}`` serves a preview file (HTTP Range
  for the videos), 404 until built; ``POST`` ``.../preview`` queues a rebuild (scope
  ``upload:*`` or ``review``) — docs/decisions.md Q5, Q6;
* ``GET /`` and ``/tasks/{task}`` — the HTML page (scope ``read``; a browser signs in at
  ``/login``, which keeps the token in an HttpOnly, SameSite=Strict cookie honoured for GET only);
* ``POST .../episodes/{n}/review`` — ``{"episode", "version", "verdict", "reason"}`` (P1), scope ``review``
  (bearer, or cookie + CSRF header, :mod:`egopool.server.review`); ``GET .../reviews``, scope ``read``;
* ``GET /api/v1/episodes?<filters>&limit=&cursor=`` — search (:mod:`egopool.server.search`),
  scope ``read``; ``GET /tasks/{task}?<filters>`` is the same as a page, and
  ``GET /tasks/{task}/episodes/{n}`` the episode page (:mod:`egopool.server.curation_page`);
* ``GET /api/v1/openapi.json`` — the OpenAPI schema, scope ``read`` (docs/decisions.md U10; no ``/docs``);
* ``GET /static/{name}`` (the pages' script and style sheet: nothing of the store) and ``GET /healthz`` — no token.

Without a tokens file every request is allowed (only for a server bound to loopback,
which ``egopool serve`` enforces). An upload without a valid token is answered 401 from
its headers alone: nothing is read, logged in ``server.db`` or written; so is one beyond ``max_queue``
admitted uploads (503 with ``Retry-After``, :mod:`~egopool.server.intake`). A body is streamed to a spool file,
at most ``max_receiving`` at a time; the verification runs in one of ``max_imports`` worker processes or Ray
tasks (docs/decisions.md U14, U28), then the publish in a thread of this process, so memory and scratch disk
are bounded by those and the per-upload :class:`~egopool.server.zipcheck.Limits`. No answer names a path of
the server's disk (:func:`hide_paths`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
import urllib.parse
from functools import partial
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from .. import __version__
from ..errors import EgopoolError, UploadRejectedError
from ..identity import CLIENT_KEY_HEADER
from ..meta.info import read_info
from ..storage.bucket import is_bucket_uri
from ..storage.s3_store import S3Store
from .catalog import episode_entries, episode_entry, episode_file, pending_rows, task_detail, task_summaries
from .importer import Importer
from .curation_page import episode_page, task_page
from .events_api import EventRoutes, add_event_routes
from .page import error_page, index_page, login_page
from .review import (CSRF_HEADER, MAX_BODY, cross_site, csrf_ok, csrf_token, loopback_host, other_site,
                     parse_review, record_verdict)
from .search import episode_neighbours, missing_facts, next_unreviewed, parse_query, search_episodes
from .summary import task_overview, task_totals
from .previews import PreviewWorker, describe
from .receive import MultipartSpool
from .legacy_journals import recover_legacy_journals
from .config import ServerConfig, hide_paths, hide_state
from .store import ServerStore
from .tokens import Token, TokenStore
from .intake import IntakeQueue, start_intake
from .zipcheck import too_large
from .page_routes import PageDeps, add_page_routes, read_body, task_tools

__all__ = ["ServerConfig", "create_app", "hide_paths"]

log = logging.getLogger("egopool.server")
_COOKIE = "egopool_token"
_STATIC = Path(__file__).parent / "static"
_WRITE_AT = 1 << 20  # write spooled file bytes in 1 MiB pieces, off the event loop


def create_app(config: ServerConfig) -> FastAPI:
    """Build the application; the store is opened (and recovered) when it starts.

    Raises
    ------
    FormatError
        The tokens file is missing or malformed.
    """
    tokens = TokenStore(config.tokens)
    state: dict[str, Any] = {}

    def hide(text: str) -> str:
        if state.get("bucket_state") is not None:
            return hide_paths(hide_state(text, state["bucket_state"]), Path("/nonexistent"), config.tokens)
        return hide_paths(text, Path(config.store), config.tokens)

    def _error(exc: UploadRejectedError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        body = exc.to_dict()
        body["message"] = hide(str(body["message"]))
        body["findings"] = [{k: hide(v) if isinstance(v, str) else v for k, v in f.items()} for f in exc.findings]
        return JSONResponse(body, status_code=exc.status, headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bucket = is_bucket_uri(config.store)  # docs/decisions.md O10-O14, O26
        store = ServerStore(config.store, state=config.state if bucket else None)
        if bucket:
            state["bucket_state"] = store.state
        store.acquire()
        try:
            for line in [*recover_legacy_journals(store), *store.recover()]:  # the start-up sweep
                log.warning(line)
            store.clean_scratch()
            if n := store.db.interrupt_unfinished():
                log.warning("%d upload(s) were interrupted by the last shutdown", n)
            state["store"] = store
            start_intake(config, store, state)  # verifier, importer, admission queue, semaphores (U14, U28, U29)
            state["previews"] = PreviewWorker(store, config.previews)
            state["previews"].start()
            yield
        finally:
            if "previews" in state:
                state["previews"].stop()
            if "pool" in state:
                state.pop("pool").close()
            store.release()

    app = FastAPI(title="egopool pooling server", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)  # the schema is served below, scope read

    @app.middleware("http")
    async def _page_policy(request: Request, call_next: Any) -> Response:
        """Pages load only this server's script, style, images and videos (docs/decisions.md Q16)."""
        response: Response = await call_next(request)
        if response.headers.get("content-type", "").startswith("text/html"):
            response.headers["Content-Security-Policy"] = (
                "default-src 'self'; img-src 'self' data:; media-src 'self'; script-src 'self'; "
                "style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
            response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    def store_() -> ServerStore:
        store: ServerStore = state["store"]
        return store

    # -- authentication ------------------------------------------------------------------------------
    def _bearer(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return None

    def local_only(request: Request) -> None:
        """403 for a request to a server without tokens whose ``Host`` is not loopback (DNS rebinding, U27)."""
        host = request.headers.get("host")
        if not loopback_host(host):
            raise UploadRejectedError(403, "forbidden", f"a request for host {(host or '')[:100]!r}: a server without "
                                                        "tokens answers loopback names only",
                                      hint="open http://127.0.0.1:PORT/ or http://localhost:PORT/, or serve "
                                           "with --tokens")

    def authenticate(request: Request, *, cookie_ok: bool) -> Token | None:
        """The request's token entry; None when authentication is off. 401 without a valid token; 403 for a
        browser's cross-site POST to a server without tokens (a web page must not upload to, or make work
        for, a loopback server just because it is open: docs/decisions.md U24)."""
        if not tokens.enabled:
            local_only(request)
            if request.method != "GET" and cross_site(request.headers.get("origin"),
                                                      request.headers.get("sec-fetch-site"),
                                                      request.headers.get("host")):
                raise UploadRejectedError(403, "forbidden", "a request from another site's page; this server "
                                                            "answers its own page and egopool clients only",
                                          hint="serve with --tokens to let other pages in with a token")
            return None
        raw = _bearer(request) or (request.cookies.get(_COOKIE) if cookie_ok else None)
        tok = tokens.authenticate(raw)
        if tok is None:
            raise UploadRejectedError(401, "unauthorized", "a valid token is required" if raw else "no token given",
                                      hint="send Authorization: Bearer <token>")
        return tok

    def require_read(request: Request) -> Token | None:
        tok = authenticate(request, cookie_ok=request.method == "GET")
        if tok is not None and not tok.can_read():
            raise UploadRejectedError(403, "forbidden", f"token {tok.id!r} has no read scope")
        return tok

    def require_review(request: Request, what: str = "a review") -> Token | None:
        """A bearer token, or the sign-in cookie on a same-origin request with the CSRF header (``what``: the body)."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            # an HTML form or a "simple" cross-site fetch cannot send application/json (a CORS preflight would)
            tail = ' ({"version": V} for a delete)' if request.method == "DELETE" else ""
            raise UploadRejectedError(415, "unsupported_media_type", f"{what} is a JSON body{tail}",
                                      hint="send Content-Type: application/json")
        origin = request.headers.get("origin")
        if not tokens.enabled:  # loopback without tokens: still only this server's own pages
            local_only(request)
            if cross_site(origin, request.headers.get("sec-fetch-site"), request.headers.get("host")):
                raise UploadRejectedError(403, "forbidden", f"{what} from the browser must come from this "
                                                            "server's page (same origin)")
            return None
        cookie = request.cookies.get(_COOKIE)
        if _bearer(request) is None and cookie:
            if not csrf_ok(cookie, request.headers.get(CSRF_HEADER), origin,
                           request.headers.get("sec-fetch-site"), request.headers.get("host")):
                raise UploadRejectedError(403, "forbidden", f"{what} from the browser must come from this "
                                                            f"server's page (same origin, {CSRF_HEADER} header)")
        tok = authenticate(request, cookie_ok=True)
        assert tok is not None
        if not tok.can_review():
            raise UploadRejectedError(403, "forbidden", f"token {tok.id!r} has no review scope",
                                      hint="egopool token add --scope review")
        return tok

    @app.exception_handler(UploadRejectedError)
    async def _rejected(request: Request, exc: UploadRejectedError) -> Response:
        page = request.method == "GET" and (request.url.path == "/" or request.url.path.startswith("/tasks/"))
        if page and exc.status in (401, 403):  # a browser: offer the sign-in form
            return HTMLResponse(login_page(exc.message), status_code=exc.status)
        if page:  # a bad filter, an unknown task or episode: a page too, not JSON in the browser
            return HTMLResponse(error_page(exc.status, hide(exc.message), exc.hint), status_code=exc.status,
                                headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)
        return _error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        """FastAPI's own refusal of a path or query value (``episodes/abc``): one line like every
        other error of this server (docs/decisions.md Q20), not pydantic's nested list."""
        bits = []
        for err in exc.errors()[:3]:
            where = " ".join(str(x) for x in err.get("loc", ()))
            bits.append(f"{where} {str(err.get('input'))[:60]!r}: {err.get('msg', 'invalid')}")
        message = "; ".join(bits) or "invalid request"
        if request.method == "GET" and request.url.path.startswith("/tasks/"):  # a page: answered as one
            return HTMLResponse(error_page(422, hide(message)), status_code=422)
        return JSONResponse({"error": "bad_request", "message": message, "findings": []}, status_code=422)

    @app.exception_handler(EgopoolError)
    async def _egopool_error(request: Request, exc: EgopoolError) -> Response:
        status = 404 if isinstance(exc, FileNotFoundError) else 500
        if request.method == "GET" and (request.url.path == "/" or request.url.path.startswith("/tasks/")):
            return HTMLResponse(error_page(status, hide(exc.one_line())), status_code=status)  # a page, as above
        return JSONResponse({"error": "not_found" if status == 404 else "server_error",
                             "message": hide(exc.one_line()), "findings": []}, status_code=status)

    @app.post("/api/v1/session/upload")
    async def upload(request: Request) -> Response:
        store = store_()
        client = request.client.host if request.client else None
        try:  # from the headers alone: a request without a valid token costs no storage (not even a log row)
            tok = authenticate(request, cookie_ok=False)
        except UploadRejectedError as exc:
            return _error(exc)
        intake: IntakeQueue = state["intake"]
        if (place := intake.admit()) is None:  # the queue is full (U29): from the headers, before a log row
            return intake.busy()
        try:
            t0 = time.monotonic()
            upload_id = await anyio.to_thread.run_sync(store.db.start_upload, tok.id if tok else None, client)
            spool = store.new_spool()
        except BaseException:
            place.leave()
            raise
        named: dict[str, str] = {}  # the task name once the form gave it (for the upload log)
        try:
            length = request.headers.get("content-length")
            if length is not None and length.isdigit():
                if int(length) > config.limits.max_request_bytes:
                    raise too_large("too_large", f"the request body ({length} bytes) exceeds the limit of "
                                                 f"{config.limits.max_request_bytes} bytes", "max_request_bytes")
                free = shutil.disk_usage(store.spool_dir).free
                if int(length) + config.limits.free_reserve_bytes > free:
                    raise UploadRejectedError(507, "insufficient_storage", f"the server has {free} bytes free, the "
                                                                           f"request body is {length} bytes")
            body = MultipartSpool(request.headers.get("content-type"), spool, config.limits.max_request_bytes)
            checked = False

            def scope_check(name: str) -> None:
                named["task"] = name
                if tok is not None and not tok.can_upload(name):
                    raise UploadRejectedError(403, "forbidden", f"token {tok.id!r} may not upload to task {name!r}")
                # a new task needs a token that may declare it (U15): said before the body is read (a bad name
                # is 400 first); the publish checks again under the task lock
                if tok is not None and not tok.can_declare(name) and not store.has_task(store.check_task(name)):
                    raise UploadRejectedError(403, "may_not_declare",
                                              f"task {name!r} does not exist on this server, and token {tok.id!r} "
                                              "may not create it (its first upload sets the fps, columns and streams "
                                              "every later upload must match)",
                                              hint=f"`egopool token add --scope declare:{name}` on the server gives "
                                                   "a token that creates it")

            try:
                async with state["receiving"]:  # bounds the bodies buffered at once (each < _WRITE_AT + a chunk)
                    async for chunk in request.stream():
                        body.feed(chunk)
                        if not checked and "name" in body.fields:
                            scope_check(body.fields["name"])
                            checked = True
                        if body.buffered >= _WRITE_AT:
                            await anyio.to_thread.run_sync(body.write, body.take())
                    sha = await anyio.to_thread.run_sync(body.finish)
            finally:
                body.close()
            task = body.fields.get("name")
            if not task:
                raise UploadRejectedError(400, "bad_request", "the form field 'name' (the task name, §9) is missing")
            scope_check(task)
            t1 = time.monotonic()
            await anyio.to_thread.run_sync(lambda: store.db.update_upload(upload_id, task=task, bytes=body.file_bytes,
                                                                          zip_sha256=sha, receive_s=t1 - t0))
            importer: Importer = state["importer"]
            if importer.pauses_at("queued"):  # the crash tests' seam: spooled, queued (no thread hop when unarmed)
                await anyio.to_thread.run_sync(importer.pause, "queued")
            try:
                async with state["imports"]:  # the verification (worker processes: U14, Ray: U28), then the
                    t2 = time.monotonic()  # publish: the next upload is verified while this one publishes
                    verified = await anyio.to_thread.run_sync(
                        lambda: importer.verify(spool, task=task, form_index=body.fields.get("episode_index"),
                                                upload_id=upload_id, token_id=tok.id if tok else None,
                                                client_key=request.headers.get(CLIENT_KEY_HEADER), queue_s=t2 - t1))
                    intake.observe(time.monotonic() - t2)
            finally:
                place.leave()
            t3 = time.monotonic()
            try:
                async with state["publishing"]:
                    result = await anyio.to_thread.run_sync(
                        lambda: importer.publish(verified, zip_sha256=sha, token_id=tok.id if tok else None,
                                                 may_declare=tok is None or tok.can_declare(task)))
            except BaseException:
                store.discard(verified.staging.parent)  # publish discards it itself; not reached when cancelled
                raise
            await anyio.to_thread.run_sync(lambda: store.db.update_upload(upload_id, publish_s=time.monotonic() - t3))
            if result.status == "imported" and state["previews"].config.enabled:  # off the request path: the
                try:  # answer does not wait for them; --no-previews: no thread hop for a no-op (U48)
                    await anyio.to_thread.run_sync(state["previews"].enqueue, task, result.episode_index)
                except Exception:  # noqa: BLE001 - a preview never fails an import (rebuilt at the next start)
                    log.exception("could not queue the previews of %s episode %d", task, result.episode_index)
            if result.status == "duplicate":
                await anyio.to_thread.run_sync(lambda: store.db.finish_upload(
                    upload_id, "duplicate", 200, client_episode_index=result.client_episode_index,
                    server_episode_index=result.episode_index))
            return JSONResponse(result.to_dict())
        except UploadRejectedError as exc:
            outcome = "rejected" if exc.status < 500 else "failed"
            await anyio.to_thread.run_sync(partial(store.db.finish_upload, upload_id, outcome, exc.status, exc.reason,
                                                   hide(exc.one_line()), **named))
            return _error(exc)
        except ClientDisconnect:
            await anyio.to_thread.run_sync(lambda: store.db.finish_upload(upload_id, "failed", 499, "disconnected",
                                                                          "the client went away mid-upload"))
            return Response(status_code=499)
        except Exception as exc:  # last resort: the client retries a 5xx
            log.exception("upload %d failed", upload_id)
            msg = hide(exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
            await anyio.to_thread.run_sync(partial(store.db.finish_upload, upload_id, "failed", 500, "server_error",
                                                   msg))
            return JSONResponse({"error": "server_error", "message": msg, "findings": []}, status_code=500)
        finally:
            place.leave()
            with contextlib.suppress(FileNotFoundError):
                spool.unlink()

    def _task(name: str) -> str:
        if not store_().has_task(name):
            raise UploadRejectedError(404, "not_found", f"no task {name!r} on this server")
        return name

    def _n(task: str, index: int) -> int:
        """``index`` when SQLite holds it (signed 64-bit), else a missing episode's 404 (Q20, P31: not a 500)."""
        if not -(1 << 63) <= index < (1 << 63):
            raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
        return index

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        pool = state.get("pool")  # the verification workers start beside the server (U14)
        return {"ok": True, "version": __version__, "workers": "starting" if pool and not pool.ready else "ready"}

    @app.get("/api/v1/openapi.json", include_in_schema=False)
    async def openapi_api(request: Request) -> JSONResponse:
        require_read(request)  # like every route that describes the store (docs/decisions.md U10)
        return JSONResponse(app.openapi())

    @app.get("/api/v1/tasks")
    async def tasks_api(request: Request) -> dict[str, Any]:
        require_read(request)
        return {"tasks": await anyio.to_thread.run_sync(task_summaries, store_())}

    @app.get("/api/v1/tasks/{task}")
    async def task_api(task: str, request: Request) -> dict[str, Any]:
        require_read(request)
        return await anyio.to_thread.run_sync(task_detail, store_(), _task(task))

    @app.get("/api/v1/tasks/{task}/episodes")
    async def episodes_api(task: str, request: Request) -> dict[str, Any]:
        require_read(request)
        eps = await anyio.to_thread.run_sync(episode_entries, store_(), _task(task))
        return {"task": task, "episodes": eps}

    @app.get("/api/v1/tasks/{task}/episodes/{index}")
    async def episode_api(task: str, index: int, request: Request) -> dict[str, Any]:
        require_read(request)
        return await anyio.to_thread.run_sync(_episode, task, index)

    def _episode(task: str, index: int) -> dict[str, Any]:
        ep = episode_entry(store_(), _task(task), _n(task, index))
        if ep is None:
            raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
        return _curation(task, index, ep)

    @app.post("/api/v1/tasks/{task}/episodes/{index}/review")
    async def review_api(task: str, index: int, request: Request) -> dict[str, Any]:
        tok = require_review(request)
        body = await read_body(request, MAX_BODY, "a review body")
        _n(task, index)
        v, who = parse_review(body), (tok.id if tok else None)
        return await anyio.to_thread.run_sync(record_verdict, store_().db, _task(task), index, v, who)

    @app.get("/api/v1/tasks/{task}/episodes/{index}/reviews")
    async def reviews_api(task: str, index: int, request: Request) -> dict[str, Any]:
        require_read(request)
        rows = await anyio.to_thread.run_sync(store_().db.reviews, _task(task), _n(task, index))
        return {"task": task, "episode_index": index, "reviews": [r.to_dict() for r in rows],
                "version": rows[-1].id if rows else 0}

    @app.get("/api/v1/episodes")
    async def search_api(request: Request) -> dict[str, Any]:
        require_read(request)
        q = parse_query(dict(request.query_params))

        def run() -> tuple[list[dict[str, Any]], str | None]:
            store = store_()
            pending = pending_rows(store, q.filters.get("task"))  # the journals first, then server.db (U5)
            return search_episodes(store.db, q, pending)
        eps, nxt = await anyio.to_thread.run_sync(run)
        return {"episodes": eps, "next_cursor": nxt}

    add_event_routes(app, EventRoutes(store_, require_read, lambda r: require_review(r, "an event"), _task))  # P11-P19

    @app.get("/static/{name}")
    async def static(name: str) -> Response:
        path = _STATIC / name
        if "/" in name or name.startswith(".") or not path.is_file():
            raise UploadRejectedError(404, "not_found", f"no static file {name!r}")
        return FileResponse(path, headers={"Cache-Control": "no-cache"})

    def _curation(task: str, index: int, ep: dict[str, Any]) -> dict[str, Any]:
        store = store_()
        where = state["previews"].task_location(task)  # a bucket store's task is read in place
        fps = read_info(where).get("fps")
        fps = float(fps) if isinstance(fps, (int, float)) and not isinstance(fps, bool) and fps > 0 else None
        size = 0
        for rel in ep["files"]:
            with contextlib.suppress(OSError):
                size += (where / rel).stat().st_size
        quality = store.db.quality(task, index)
        preview = describe(state["previews"], task, index)
        if preview.get("error"):
            preview["error"] = hide(preview["error"])
        if quality and quality.get("errors"):
            quality["errors"] = [hide(str(e)) for e in quality["errors"]]
        length = ep.get("length")
        current = store.db.current_review(task, index)
        return {**ep, "duration_s": round(length / fps, 6) if length is not None and fps else None,
                "size_bytes": size, "quality": quality, "preview": preview,
                "review": current.to_dict() if current else None,
                "review_version": store.db.review_version(task, index)}

    @app.get("/api/v1/tasks/{task}/episodes/{index}/preview/{name}")
    async def preview_file_api(task: str, index: int, name: str, request: Request) -> Response:
        require_read(request)
        path = await anyio.to_thread.run_sync(state["previews"].file, _task(task), _n(task, index), name)
        if path is None:
            raise UploadRejectedError(404, "not_found", f"episode {index} of task {task!r} has no preview {name!r} "
                                                        "(yet); its entry in the read API says the preview's state")
        media = {".mp4": "video/mp4", ".jpg": "image/jpeg", ".json": "application/json"}[path.suffix]
        return FileResponse(path, media_type=media, headers={"Cache-Control": "no-cache",
                                                               "Cross-Origin-Resource-Policy": "same-origin"})

    @app.post("/api/v1/tasks/{task}/episodes/{index}/preview")
    async def preview_rebuild_api(task: str, index: int, request: Request) -> dict[str, Any]:
        tok = authenticate(request, cookie_ok=False)
        if tok is not None and not ("upload:*" in tok.scopes or "review" in tok.scopes):
            raise UploadRejectedError(403, "forbidden", f"token {tok.id!r} may not rebuild previews (scope upload:* "
                                                        "or review)")
        worker: PreviewWorker = state["previews"]
        if not worker.config.enabled:
            raise UploadRejectedError(409, "previews_off", "this server runs with --no-previews")
        if await anyio.to_thread.run_sync(episode_entry, store_(), _task(task), _n(task, index)) is None:
            raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")
        queued = await anyio.to_thread.run_sync(worker.enqueue, task, index)
        return {"task": task, "episode_index": index, "queued": queued, "state": "pending"}

    @app.get("/api/v1/tasks/{task}/episodes/{index}/files/{rel:path}")
    async def episode_file_api(task: str, index: int, rel: str, request: Request) -> Response:
        require_read(request)
        key = await anyio.to_thread.run_sync(episode_file, store_(), _task(task), _n(task, index), rel)
        objects = store_().objects
        if (local := objects.local_path(key)) is not None:
            return FileResponse(local, filename=local.name)
        if isinstance(objects, S3Store):  # streamed from the bucket, never a local file (O13)
            return StreamingResponse(objects.bucket.stream(key), media_type="application/octet-stream",
                                     headers={"Content-Disposition": f'attachment; filename="{rel.rsplit("/", 1)[-1]}"'})
        raise UploadRejectedError(500, "server_error", f"the store {objects.uri} cannot serve {rel!r}")

    @app.get("/api/v1/uploads")
    async def uploads_api(request: Request, limit: int = 50, task: str | None = None) -> dict[str, Any]:
        require_read(request)
        rows = await anyio.to_thread.run_sync(lambda: store_().db.uploads(min(max(limit, 1), 1000), task))
        return {"uploads": [u.to_dict() for u in rows]}

    # -- HTML ------------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    async def index(request: Request) -> HTMLResponse:
        require_read(request)

        def build() -> str:
            store = store_()
            return index_page(task_overview(store), store.db.uploads(limit=20))

        return HTMLResponse(await anyio.to_thread.run_sync(build))

    @app.get("/tasks/{task}", response_class=HTMLResponse)
    async def task_html(task: str, request: Request) -> HTMLResponse:
        tok = require_read(request)
        params = dict(request.query_params)
        params.pop("task", None)
        q = parse_query({**params, "task": task})

        def build() -> str:
            store = store_()
            info = read_info(state["previews"].task_location(_task(task)))
            eps, nxt = search_episodes(store.db, q, pending_rows(store, task))
            return task_page(task, info, task_totals(store.db, task).get(task), q, eps, nxt,
                             store.db.uploads(limit=20, task=task), missing_facts(store.db, q, task),
                             tools=task_tools(task, q, tok, request.cookies.get(_COOKIE)))  # P20-P22

        return HTMLResponse(await anyio.to_thread.run_sync(build))

    @app.get("/tasks/{task}/episodes/{index}", response_class=HTMLResponse)
    async def episode_html(task: str, index: int, request: Request) -> HTMLResponse:
        tok = require_read(request)
        params = dict(request.query_params)
        params.pop("cursor", None)
        params.pop("task", None)
        q = parse_query(params)
        cookie = request.cookies.get(_COOKIE)

        def build() -> str:
            store = store_()
            entry = _episode(task, index)
            prev, nxt = episode_neighbours(store.db, q, task, index)
            return episode_page(task, entry, store.db.reviews(task, index), (prev, nxt), q,
                                can_review=tok is None or tok.can_review(),
                                csrf=csrf_token(cookie) if cookie and tok is not None else "",
                                next_unreviewed=next_unreviewed(store.db, q, task, index))

        return HTMLResponse(await anyio.to_thread.run_sync(build))

    @app.get("/login", response_class=HTMLResponse)
    async def login_form() -> HTMLResponse:
        return HTMLResponse(login_page())

    @app.post("/login")
    async def login(request: Request) -> Response:
        if other_site(request.headers.get("sec-fetch-site")):
            return HTMLResponse(login_page("sign in from this server's own page"), status_code=403)
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > 4096:
                return HTMLResponse(login_page("request too large"), status_code=413)
        token = urllib.parse.parse_qs(raw.decode("utf-8", "replace")).get("token", [""])[0].strip()
        tok = tokens.authenticate(token)
        if tokens.enabled and (tok is None or not tok.can_read()):
            return HTMLResponse(login_page("unknown token, or a token without the read scope"), status_code=401)
        resp = RedirectResponse("/", status_code=303)
        resp.set_cookie(_COOKIE, token, httponly=True, samesite="strict", path="/")
        return resp

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        if other_site(request.headers.get("sec-fetch-site")):
            return HTMLResponse(login_page("sign out from this server's own page"), status_code=403)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(_COOKIE, path="/")
        return resp

    add_page_routes(app, PageDeps(store_, require_read, require_review, _task))  # bulk review, dashboard, downloads
    return app
