"""The FastAPI application of ``egopool serve`` (file_format.md §9).

Routes:

* ``POST /api/v1/session/upload`` — multipart ``name`` (task), ``episode_index`` (f), the
  zip, and the ``X-Egopool-Client-Key`` header (the sender's identity, docs/decisions.md U11);
  scope ``upload:<task>`` or ``upload:*``; answers 200 with the server's N
  (:class:`~egopool.server.importer.ImportResult`) or 4xx/5xx with
  ``{"error", "message", "findings"}``;
* ``GET /api/v1/tasks``, ``/api/v1/tasks/{task}``, ``/api/v1/tasks/{task}/episodes``,
  ``/api/v1/tasks/{task}/episodes/{n}``, ``/api/v1/tasks/{task}/episodes/{n}/files/{path}``,
  ``/api/v1/uploads`` — scope ``read``;
* ``GET /`` and ``/tasks/{task}`` — the HTML page (scope ``read``; a browser signs in at
  ``/login``, which keeps the token in an HttpOnly, SameSite=Strict cookie honoured for GET only);
* ``GET /api/v1/openapi.json`` — the OpenAPI schema, scope ``read`` like the rest of the
  read API (docs/decisions.md U10; no ``/docs`` page);
* ``GET /healthz`` — no token.

Without a tokens file every request is allowed (only for a server bound to loopback,
which ``egopool serve`` enforces). An upload without a valid token is answered 401 from
its headers alone: nothing is read, logged in ``server.db`` or written. The request body
of an upload is streamed to a spool file (never held in memory), at most ``max_receiving``
bodies at a time (the others wait, unread); the import runs in a worker thread, at most
``max_imports`` at a time, so the server's memory and scratch disk are bounded by those
two and the per-upload :class:`~egopool.server.zipcheck.Limits`. No answer names a path of
the server's disk (:func:`hide_paths`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import urllib.parse
from functools import partial
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from .. import __version__
from ..errors import EgopoolError, UploadRejectedError
from ..identity import CLIENT_KEY_HEADER
from ..storage.bucket import is_bucket_uri
from .bucket_importer import open_bucket_store
from .bucket_store import hide_state
from .catalog import episode_entries, episode_file, task_detail, task_summaries
from .importer import Importer
from .page import index_page, login_page, task_page
from .publish import recover_journals
from .receive import MultipartSpool
from .store import Store
from .tokens import Token, TokenStore
from .zipcheck import Limits, too_large

__all__ = ["ServerConfig", "create_app", "hide_paths"]

log = logging.getLogger("egopool.server")
_COOKIE = "egopool_token"
_WRITE_AT = 1 << 20  # write spooled file bytes in 1 MiB pieces, off the event loop


@dataclass
class ServerConfig:
    """Settings of one server.

    Attributes
    ----------
    store:
        The store directory (tasks + ``.egopool-server/``), or ``s3://bucket/prefix`` (docs/decisions.md O10).
    state:
        A bucket store's local state directory (None: the per-user default).
    tokens:
        Tokens file, or None for no authentication (loopback only).
    on_conflict:
        ``"renumber"`` or ``"reject"`` (docs/decisions.md U2).
    limits:
        Request and zip limits.
    max_imports:
        Imports verified and published at the same time (the rest wait).
    max_receiving:
        Upload bodies received at the same time (the rest wait before their body is read).
    """

    store: Path | str
    tokens: Path | None = None
    state: Path | None = None
    on_conflict: str = "renumber"
    limits: Limits = field(default_factory=Limits)
    max_imports: int = 2
    max_receiving: int = 32


def hide_paths(text: str, store: Path, tokens: Path | None = None) -> str:
    """``text`` with every path of the server's disk replaced: a staged file by its task-relative
    path, another file of the store by its store-relative path, the server's state directory,
    the store itself and the tokens file by a word."""
    roots = sorted({str(store.resolve()), os.path.abspath(store)}, key=len, reverse=True)

    def repl(m: re.Match[str]) -> str:
        rel = m.group(1) or ""
        staged = re.match(r"/\.egopool-server/staging/[^/]+/[^/]+/(.*)", rel)
        if staged:
            return staged.group(1)
        if rel.startswith("/.egopool-server"):
            return "the upload" if rel.startswith("/.egopool-server/spool/") else "the server's state"
        return rel.lstrip("/") or "the store"

    for root in roots:
        text = re.sub(re.escape(root) + r"(?![\w.-])(/[^\s'\"]*)?", repl, text)
    if tokens is not None:
        for t in {str(tokens.resolve()), os.path.abspath(tokens)}:
            text = text.replace(t, "the tokens file")
    return text


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
        if is_bucket_uri(config.store):  # docs/decisions.md O10-O14
            store, importer_cls = open_bucket_store(str(config.store), config.state, log)
            state["bucket_state"] = store.state
        else:
            store, importer_cls = Store(config.store), Importer
            store.acquire()
        try:
            for line in recover_journals(store) if store.bucket is None else []:
                log.warning(line)
            store.clean_scratch()
            n = store.db.interrupt_unfinished()
            if n:
                log.warning("%d upload(s) were interrupted by the last shutdown", n)
            state["store"] = store
            state["importer"] = importer_cls(store, on_conflict=config.on_conflict, limits=config.limits)
            state["imports"] = anyio.Semaphore(max(1, config.max_imports))
            state["receiving"] = anyio.Semaphore(max(1, config.max_receiving))
            yield
        finally:
            store.release()

    app = FastAPI(title="egopool pooling server", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)  # the schema is served below, scope read

    def store_() -> Store:
        return state["store"]  # type: ignore[no-any-return]

    # -- authentication ------------------------------------------------------------------------------
    def _bearer(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return None

    def authenticate(request: Request, *, cookie_ok: bool) -> Token | None:
        """The request's token entry; None when authentication is off. 401 without a valid token."""
        if not tokens.enabled:
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

    @app.exception_handler(UploadRejectedError)
    async def _rejected(request: Request, exc: UploadRejectedError) -> Response:
        page = request.url.path == "/" or request.url.path.startswith("/tasks/")
        if page and exc.status in (401, 403):  # a browser: offer the sign-in form
            return HTMLResponse(login_page(exc.message), status_code=exc.status)
        return _error(exc)

    @app.exception_handler(EgopoolError)
    async def _egopool_error(request: Request, exc: EgopoolError) -> Response:
        status = 404 if isinstance(exc, FileNotFoundError) else 500
        return JSONResponse({"error": "not_found" if status == 404 else "server_error",
                             "message": hide(exc.one_line()), "findings": []}, status_code=status)

    # -- upload ----------------------------------------------------------------------------------------
    @app.post("/api/v1/session/upload")
    async def upload(request: Request) -> Response:
        store = store_()
        client = request.client.host if request.client else None
        try:  # from the headers alone: a request without a valid token costs no storage (not even a log row)
            tok = authenticate(request, cookie_ok=False)
        except UploadRejectedError as exc:
            return _error(exc)
        upload_id = await anyio.to_thread.run_sync(store.db.start_upload, tok.id if tok else None, client)
        spool = store.new_spool()
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
            await anyio.to_thread.run_sync(lambda: store.db.update_upload(upload_id, task=task, bytes=body.file_bytes,
                                                                          zip_sha256=sha))
            importer: Importer = state["importer"]
            async with state["imports"]:
                result = await anyio.to_thread.run_sync(
                    lambda: importer.import_zip(spool, task=task, form_index=body.fields.get("episode_index"),
                                                zip_sha256=sha, upload_id=upload_id, token_id=tok.id if tok else None,
                                                client_key=request.headers.get(CLIENT_KEY_HEADER)))
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
            with contextlib.suppress(FileNotFoundError):
                spool.unlink()

    # -- read API --------------------------------------------------------------------------------------
    def _task(name: str) -> str:
        if not store_().has_task(name):
            raise UploadRejectedError(404, "not_found", f"no task {name!r} on this server")
        return name

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "version": __version__}

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
        eps = await anyio.to_thread.run_sync(episode_entries, store_(), _task(task))
        for ep in eps:
            if ep["episode_index"] == index:
                return ep  # type: ignore[no-any-return]
        raise UploadRejectedError(404, "not_found", f"no episode {index} in task {task!r}")

    @app.get("/api/v1/tasks/{task}/episodes/{index}/files/{rel:path}")
    async def episode_file_api(task: str, index: int, rel: str, request: Request) -> Response:
        require_read(request)
        path = await anyio.to_thread.run_sync(episode_file, store_(), _task(task), index, rel)
        if isinstance(path, str):  # an object of a bucket store
            return StreamingResponse(store_().bucket.stream(path), media_type="application/octet-stream",
                                     headers={"Content-Disposition": f'attachment; filename="{rel.rsplit("/", 1)[-1]}"'})
        return FileResponse(path, filename=path.name)

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
            tasks = task_summaries(store)
            eps = {t["name"]: episode_entries(store, t["name"]) for t in tasks if "error" not in t}
            return index_page(tasks, eps, store.db.uploads(limit=20))

        return HTMLResponse(await anyio.to_thread.run_sync(build))

    @app.get("/tasks/{task}", response_class=HTMLResponse)
    async def task_html(task: str, request: Request) -> HTMLResponse:
        require_read(request)

        def build() -> str:
            store = store_()
            return task_page(task, task_detail(store, _task(task)), episode_entries(store, task),
                             store.db.uploads(limit=20, task=task))

        return HTMLResponse(await anyio.to_thread.run_sync(build))

    @app.get("/login", response_class=HTMLResponse)
    async def login_form() -> HTMLResponse:
        return HTMLResponse(login_page())

    @app.post("/login")
    async def login(request: Request) -> Response:
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
    async def logout() -> Response:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(_COOKIE, path="/")
        return resp

    return app
