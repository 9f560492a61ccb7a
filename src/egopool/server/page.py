"""The server's HTML pages: plain server-rendered HTML, no JavaScript.

``/`` lists the tasks, each task's episodes (length, streams, who uploaded them, the
validator's verdict on the uploaded slice; the newest :data:`EPISODES_ON_INDEX` per task)
and the last uploads; ``/tasks/<task>`` lists every episode of one task; ``/login`` takes a
token for the browser (kept in an HttpOnly cookie). Every value is HTML-escaped.
"""

from __future__ import annotations

import datetime as _dt
import html
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any

from .. import __version__
from .db import UploadRow

__all__ = ["EPISODES_ON_INDEX", "index_page", "login_page", "task_page"]

EPISODES_ON_INDEX = 200

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.4em 0 1em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;font-size:.92em}
th{background:#f0f0f0}.ok{color:#176b24}.bad{color:#a31515}.dim{color:#777}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _time(ts: float | None) -> str:
    if ts is None:
        return "—"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _doc(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{body}"
            f"<p class=\"dim\">egopool {_e(__version__)} · pooled_episodes_v1 · "
            "<a href=\"/api/v1/tasks\">JSON API</a></p></body></html>")


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


def _episode_rows(episodes: Sequence[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for ep in episodes:
        up = ep.get("uploaded_by")
        who = (f"{_e(up['client_hostname'])} <span class=\"dim\">({_e(up['client_host_id'][:8])}, its N "
               f"{_e(up['client_episode_index'])})</span>") if up else "<span class=\"dim\">—</span>"
        rows.append([_e(ep["episode_index"]), f"{ep['chunk']:03d}/{ep['file']:03d}", _e(ep.get("length")),
                     _e(", ".join(ep["streams"])), who, _validation(ep.get("validation"))])
    return rows


_EP_HEAD = ("N", "chunk/file", "length (rows)", "streams", "uploaded by", "validation")


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
                     _e(u.reason or ""), _e(u.token_id or "")])
    return _table("uploads", ("#", "received", "task", "client", "client N → server N", "outcome", "HTTP",
                              "reason", "token"), rows)


def index_page(tasks: Sequence[dict[str, Any]], episodes: dict[str, list[dict[str, Any]]],
               uploads: Sequence[UploadRow]) -> str:
    """``/``: tasks, their (newest) episodes, the last uploads."""
    trows = []
    for t in tasks:
        if "error" in t:
            trows.append([_task_link(t["name"]), f"<span class=\"bad\">{_e(t['error'])}</span>", "", "", "", ""])
            continue
        trows.append([_task_link(t["name"]), _e(t["episodes"]), _e(t["total_episodes"]), _e(t["fps"]),
                      _e(", ".join(t["streams"])), _time(t["last_upload_at"])])
    body = ["<h1>egopool pooling server</h1>", "<h2>Tasks</h2>",
            _table("tasks", ("task", "episodes", "total_episodes", "fps", "streams", "last upload"), trows)
            if trows else "<p id=\"tasks\">No task yet: upload with <code>egopool upload TASK --server URL</code>.</p>"]
    for t in tasks:
        eps = episodes.get(t["name"], [])
        shown = eps[-EPISODES_ON_INDEX:]
        more = f" <span class=\"dim\">(newest {len(shown)} of {len(eps)})</span>" if len(shown) < len(eps) else ""
        body.append(f"<h2>Episodes of {_task_link(t['name'])}{more}</h2>")
        body.append(_table(f"episodes-{t['name']}", _EP_HEAD, _episode_rows(shown)))
    body.append("<h2>Last uploads</h2>")
    body.append(_uploads_table(uploads))
    return _doc("egopool pooling server", "".join(body))


def task_page(task: str, detail: dict[str, Any], episodes: Sequence[dict[str, Any]],
              uploads: Sequence[UploadRow]) -> str:
    """``/tasks/<task>``: every episode of one task and its last uploads."""
    info = detail["info"]
    body = [f"<h1>Task {_e(task)}</h1>", "<p><a href=\"/\">all tasks</a> · "
            f"<a href=\"/api/v1/tasks/{urllib.parse.quote(task, safe='')}\">info.json</a></p>",
            f"<p>{_e(detail['episodes'])} episodes, total_episodes {_e(info.get('total_episodes'))}, "
            f"fps {_e(info.get('fps'))}, app_version {_e(info.get('app_version'))}</p>",
            _table(f"episodes-{task}", _EP_HEAD, _episode_rows(episodes)), "<h2>Last uploads</h2>",
            _uploads_table(uploads)]
    return _doc(f"egopool · {task}", "".join(body))


def login_page(message: str | None = None) -> str:
    """``/login``: a token field; the token goes into an HttpOnly cookie for read access."""
    note = f"<p class=\"bad\">{_e(message)}</p>" if message else ""
    form = ("<form method=\"post\" action=\"/login\"><label>Access token (scope read) "
            "<input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"off\" size=\"50\"></label> "
            "<button type=\"submit\" id=\"login\">Open</button></form>")
    return _doc("egopool · sign in", f"<h1>egopool pooling server</h1>{note}{form}")
