"""The server's HTML pages: server-rendered HTML; the episode page adds one small script.

``/`` lists the tasks (episodes, duration, size, review totals, a thumbnail) and the last
uploads; ``/login`` takes a token for the browser (kept in an HttpOnly cookie). The task and
episode pages are :mod:`egopool.server.curation_page`. Style and script are files of the
package under ``static/`` (no CDN, no build step). Every value is HTML-escaped.
"""

from __future__ import annotations

import datetime as _dt
import html
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from .. import __version__
from .db import UploadRow

__all__ = ["index_page", "login_page"]


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _time(ts: float | None) -> str:
    if ts is None:
        return "—"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = float(seconds)
    return f"{s:.1f} s" if s < 60 else f"{int(s // 3600)}:{int(s % 3600 // 60):02d}:{int(s % 60):02d}"


def _size(n: int | None) -> str:
    if n is None:
        return "—"
    x = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if x < 1000 or unit == "GB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000
    return f"{x:.1f} TB"


def _doc(title: str, body: str, script: str = "", libs: Sequence[str] = ()) -> str:
    """A page; ``script`` and ``libs`` (vendored files of ``static/``, run before it, in order) are deferred;
    a lib ending in ``.css`` is a style sheet."""
    css = "".join(f"<link rel=\"stylesheet\" href=\"/static/{_e(x)}\">" for x in libs if x.endswith(".css"))
    js = "".join(f"<script src=\"/static/{_e(x)}\" defer></script>" for x in [*libs, script]
                 if x and not x.endswith(".css"))
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{_e(title)}</title>"
            "<link rel=\"icon\" href=\"data:,\">"
            f"{css}<link rel=\"stylesheet\" href=\"/static/egopool.css\">{js}</head><body>{body}"
            f"<footer class=\"dim\">egopool {_e(__version__)} · pooled_episodes_v1 · "
            "<a href=\"/api/v1/tasks\">JSON API</a> · <form method=\"post\" action=\"/logout\">"
            "<button type=\"submit\" id=\"logout\">sign out</button></form></footer></body></html>")


def _table(table_id: str, head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are already escaped HTML."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table id=\"{_e(table_id)}\"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _task_link(name: str) -> str:
    return f"<a href=\"/tasks/{urllib.parse.quote(name, safe='')}\">{_e(name)}</a>"


def _validation(v: dict[str, Any] | None) -> str:
    if not v:
        return "<span class=\"dim\">not checked here</span>"
    if v.get("ok"):
        w = int(v.get("warnings") or 0)
        return "<span class=\"ok\">valid</span>" + (f" ({w} warning{'s' if w != 1 else ''})" if w else "")
    return f"<span class=\"bad\">{_e(v.get('errors'))} errors</span>"


def _client(u: UploadRow) -> str:
    """The declared host name (a label) with the host id the server derived (the identity, decisions.md U11)."""
    if not u.client_hostname:
        return _e(u.client_addr)
    ident = f" <span class=\"dim\">({_e(u.client_host_id[:8])})</span>" if u.client_host_id else ""
    return _e(u.client_hostname) + ident


def _uploads_table(uploads: Sequence[UploadRow]) -> str:
    rows = []
    for u in uploads:
        outcome = f"<span class=\"{'ok' if u.outcome in ('imported', 'duplicate') else 'bad'}\">{_e(u.outcome)}</span>"
        mapping = f"{_e(u.client_episode_index)} → {_e(u.server_episode_index)}" \
            if u.server_episode_index is not None else _e(u.client_episode_index)
        rows.append([_e(u.id), _time(u.received_at), _task_link(u.task) if u.task else "—",
                     _client(u), mapping, outcome, _e(u.status),
                     _e(u.reason or ""), _e(u.token_id or ""), _stages(u)])
    return _table("uploads", ("#", "received", "task", "client", "client N → server N", "outcome", "HTTP",
                              "reason", "token", "receive · queue · verify · publish (s)"), rows)


def _stages(u: UploadRow) -> str:
    """Where the upload's time went (docs/decisions.md U30): a queue time growing upload after upload is a backlog."""
    parts = [f"{v:.2f}" if v is not None else "—" for v in (u.receive_s, u.queue_s, u.verify_s, u.publish_s)]
    retried = f" <span class=\"warn\">({_e(u.verify_attempts)} verifications)</span>" \
        if (u.verify_attempts or 0) > 1 else ""
    return _e(" · ".join(parts)) + retried


def _reviews(t: dict[str, Any]) -> str:
    return (f"<span class=\"ok\">{_e(t['accepted'])} accepted</span> · <span class=\"bad\">{_e(t['rejected'])} "
            f"rejected</span> · <span class=\"warn\">{_e(t['flagged'])} flagged</span> · "
            f"<span class=\"dim\">{_e(t['unreviewed'])} unreviewed</span>")


def _partial(tot: dict[str, Any]) -> str:
    """" (partial: 1 of 3 measured)" while previews build (P9), else ""."""
    measured, n = tot.get("measured"), tot.get("episodes")
    if measured is None or n is None or measured >= n:
        return ""
    return (f" <span class=\"warn partial\" data-building=\"{_e(n - measured)}\">(partial: {_e(measured)} of "
            f"{_e(n)} episodes measured)</span>")


def _thumb(url: str | None) -> str:
    return f"<img class=\"thumb\" src=\"{_e(url)}\" alt=\"\" loading=\"lazy\">" if url else \
        "<span class=\"thumb none\"></span>"


def index_page(tasks: Sequence[dict[str, Any]], uploads: Sequence[UploadRow]) -> str:
    """``/``: the tasks (:func:`~egopool.server.summary.task_overview`: episodes, duration, size and
    review totals of the pooled episodes, a thumbnail) and the last uploads. A task with no pooled
    episode (copied into the store) shows its ``total_episodes``."""
    trows = []
    for t in tasks:
        if "error" in t:
            trows.append(["", _task_link(t["name"]), f"<span class=\"bad\">{_e(t['error'])}</span>", "", "", "", "",
                          "", ""])
            continue
        tot = t.get("totals")
        count = _e(tot["episodes"]) if tot else \
            f"{_e(t.get('total_episodes'))} <span class=\"dim\">(none pooled here)</span>"
        tot = tot or {"accepted": 0, "rejected": 0, "flagged": 0, "unreviewed": 0}
        trows.append([_thumb(tot.get("thumbnail")), _task_link(t["name"]), count,
                      _duration(tot.get("duration_s")) + _partial(tot), _size(tot.get("size_bytes")), _reviews(tot),
                      _e(t["fps"]), f"<span class=\"wrap\">{_e(', '.join(t['streams']))}</span>",
                      _time(t["last_upload_at"])])
    body = ["<h1>egopool pooling server</h1>", "<h2>Tasks</h2>",
            _table("tasks", ("", "task", "episodes", "duration", "size", "review", "fps", "streams", "last upload"),
                   trows)
            if trows else "<p id=\"tasks\">No task yet: upload with <code>egopool upload TASK --server URL</code>.</p>"]
    body.append("<h2>Last uploads</h2>")
    body.append(_uploads_table(uploads))
    return _doc("egopool pooling server", "".join(body), script="task.js")


def error_page(status: int, message: str, hint: str | None = None) -> str:
    """A refused page request (a bad filter, an unknown task or episode) as a page: the one-line message and
    its fix, with the way back, where the JSON API answers the same refusal as JSON."""
    fix = f"<p>{_e(hint)}</p>" if hint else ""
    return _doc(f"egopool · {status}", f"<h1>{status}</h1><p class=\"bad\" id=\"error\">{_e(message)}</p>{fix}"
                                       "<p><a href=\"/\">all tasks</a></p>")


def login_page(message: str | None = None) -> str:
    """``/login``: a token field; the token goes into an HttpOnly cookie for read access."""
    note = f"<p class=\"bad\">{_e(message)}</p>" if message else ""
    form = ("<form method=\"post\" action=\"/login\"><label>Access token (scope read) "
            "<input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" size=\"50\"></label> "
            "<button type=\"submit\" id=\"login\">Open</button></form>")
    return _doc("egopool · sign in", f"<h1>egopool pooling server</h1>{note}{form}")
