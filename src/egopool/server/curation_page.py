"""The curation pages: a task's episodes (filters, paging) and one episode (docs/decisions.md Q14, Q15).

``/tasks/<task>?<filters>`` lists one page of a task's pooled episodes (the filters and keyset
paging of :mod:`egopool.server.search`) with a thumbnail, duration, size, origin, validation,
quality summary and review state. ``/tasks/<task>/episodes/<N>`` plays every camera's proxy on
one transport (``static/episode.js``), plots the signals with a playhead, lists the quality
facts, the origin and the review history, and offers the review buttons to a token with the
``review`` scope. Every value is HTML-escaped; the episode's data reaches the script as JSON
in a ``<script type="application/json">`` element with ``<``, ``>`` and ``&`` escaped.
"""

from __future__ import annotations

import datetime as _dt
import json
import urllib.parse
from collections.abc import Sequence
from typing import Any

from .db import ReviewRow, UploadRow
from .events_api import events_section
from .page import _doc, _duration, _e, _partial, _size, _table, _thumb, _time, _uploads_table, _validation
from ..curation.proxy import DEPTH_RANGE_MM
from .search import EpisodeQuery
from .task_tools import episode_downloads

__all__ = ["SHORTCUTS", "episode_page", "task_page"]

#: key -> what it does on the episode page (listed on the page; static/episode.js implements them).
SHORTCUTS = {"space": "play / pause", "← / →": "one frame back / forward", "a": "accept",
             "r": "reject (asks for a reason)", "f": "flag (asks for a reason)", "u": "undo the last verdict",
             "j": "next episode", "k": "previous episode", "Esc": "leave the reason field (its text is dropped)"}
_REVIEW_KEYS = ("a", "r", "f", "u")


def _q(task: str) -> str:
    return urllib.parse.quote(task, safe="")


def _qs(params: dict[str, str]) -> str:
    return ("?" + urllib.parse.urlencode(params)) if params else ""


def _state(state: str) -> str:
    cls = {"accepted": "ok", "rejected": "bad", "flagged": "warn"}.get(state, "dim")
    return f"<span class=\"{cls}\" data-state=\"{_e(state)}\">{_e(state)}</span>"


def _review_cell(r: dict[str, Any] | None) -> str:
    if not r:
        return "<span class=\"dim\">unreviewed</span>"
    reason = f" <span class=\"dim\">{_e(r['reason'])}</span>" if r.get("reason") else ""
    return _state(r["state"]) + reason


def _n(k: int, one: str) -> str:
    return f"{k} {one}" + ("" if k == 1 else "s")


def _quality_cell(q: dict[str, Any] | None) -> str:
    """A few words on the quality facts: frozen frames, gaps, drops, idle share, badly exposed and blurred
    frames, each counted once (P7)."""
    if not q:
        return "<span class=\"dim\">not computed</span>"
    bits = []
    frozen = q.get("frozen_frames") or 0
    if frozen:
        bits.append(f"<span class=\"bad\">{_e(_n(int(frozen), 'frozen frame'))}</span>")
    gaps, drops = q.get("gap_total") or 0, q.get("drop_total") or 0
    if gaps:
        bits.append(f"<span class=\"warn\">{_e(_n(int(gaps), 'gap'))}</span>")
    if drops:
        bits.append(f"<span class=\"warn\">{_e(_n(int(drops), 'drop'))}</span>")
    if q.get("idle_fraction") is not None:
        frac = float(q["idle_fraction"])
        bits.append(f"<span class=\"{'warn' if frac >= 0.3 else 'dim'}\">{frac:.0%} idle</span>")
    if q.get("exposure_outliers"):
        bits.append(f"<span class=\"warn\">{_e(_n(int(q['exposure_outliers']), 'dark/bright frame'))}</span>")
    if q.get("blur_outliers"):
        bits.append(f"<span class=\"warn\">{_e(_n(int(q['blur_outliers']), 'blurred frame'))}</span>")
    return " · ".join(bits) or "<span class=\"ok\">clean</span>"


#: facts the task table sorts by (the page shown, in the browser: static/task.js; P8) -> label
SORTS = {"episode_index": "N", "duration_s": "duration", "size_bytes": "size", "frozen_frames": "frozen frames",
         "gap_total": "gaps", "drop_total": "drops", "idle_fraction": "idle share",
         "exposure_outliers": "dark/bright frames", "blur_outliers": "blurred frames", "imported_at": "imported"}


def _sort_values(ep: dict[str, Any]) -> str:
    q = ep.get("quality") or {}
    up = ep.get("uploaded_by") or {}
    vals = {"episode_index": ep.get("episode_index"), "duration_s": ep.get("duration_s"),
            "size_bytes": ep.get("size_bytes"), "imported_at": up.get("imported_at"),
            "version": ep.get("review_version"),  # what a bulk verdict on it answers (P20)
            **{k: q.get(k) for k in SORTS if k in q}}
    return "".join(f" data-{k.replace('_', '-')}=\"{_e(v)}\"" for k, v in vals.items() if v is not None)


def _origin(up: dict[str, Any] | None) -> str:
    if not up:
        return "<span class=\"dim\">—</span>"
    return (f"{_e(up['client_hostname'])} <span class=\"dim\">({_e(str(up['client_host_id'])[:8])}, its N "
            f"{_e(up['client_episode_index'])})</span>")


_SELECTS = {"validation": ("", "passed", "failed"),
            "review": ("", "unreviewed", "accepted", "rejected", "flagged"),
            "has_gaps": ("", "true", "false"), "has_frozen": ("", "true", "false")}
_INPUTS = (("host", "host", "text", "pc-3"), ("event", "event label", "text", "slip"), ("since", "imported since", "date", ""),
           ("until", "imported before", "date", ""), ("min_duration", "min s", "number", ""),
           ("max_duration", "max s", "number", ""), ("max_idle_fraction", "max idle share", "number", "0.3"),
           ("max_blur_outliers", "max blurred frames", "number", ""))


def _filter_form(task: str, q: EpisodeQuery) -> str:
    vals = q.params()
    raw = dict(vals)
    for k in ("since", "until"):  # shown back as the date the form sent
        if k in q.filters:
            raw[k] = _dt.datetime.fromtimestamp(q.filters[k], _dt.timezone.utc).strftime("%Y-%m-%d")
    fields = []
    for name, label, kind, ph in _INPUTS:
        step = " step=\"any\"" if kind == "number" else ""
        fields.append(f"<label>{_e(label)} <input name=\"{name}\" id=\"f-{name}\" type=\"{kind}\"{step} "
                      f"value=\"{_e(raw.get(name, ''))}\" placeholder=\"{_e(ph)}\"></label>")
    for name, options in _SELECTS.items():
        opts = "".join(f"<option value=\"{_e(o)}\"{' selected' if raw.get(name) == o else ''}>{_e(o or 'any')}</option>"
                       for o in options)
        fields.append(f"<label>{_e(name.replace('_', ' '))} <select name=\"{name}\" id=\"f-{name}\">{opts}</select>"
                      "</label>")
    fields.append(f"<label>per page <input name=\"limit\" id=\"f-limit\" type=\"number\" min=\"1\" max=\"500\" "
                  f"value=\"{_e(q.limit)}\"></label>")
    return (f"<form id=\"filters\" method=\"get\" action=\"/tasks/{_q(task)}\">{''.join(fields)}"
            f"<button type=\"submit\" id=\"apply\">Filter</button> <a href=\"/tasks/{_q(task)}\">clear</a></form>")


_FACT_LABELS = {"min_duration": "duration", "max_duration": "duration", "max_idle_fraction": "idle share",
                "max_blur_outliers": "blurred-frame", "has_gaps": "gap", "has_frozen": "frozen-frame"}


def _missing_note(missing: dict[str, int]) -> str:
    """Per quality filter: how many episodes have no value for its fact and so are not shown (P8)."""
    bits = [f"<li data-filter=\"{_e(name)}\">{_e(_n(k, 'episode'))} of this task {'has' if k == 1 else 'have'} no "
            f"{_e(_FACT_LABELS.get(name, name))} value (not computed yet, or the rig cannot have one): not shown by "
            f"<code>{_e(name)}</code></li>" for name, k in missing.items() if k]
    return f"<ul id=\"missing\" class=\"warn\">{''.join(bits)}</ul>" if bits else ""


def task_page(task: str, info: dict[str, Any], totals: dict[str, Any] | None, q: EpisodeQuery,
              episodes: Sequence[dict[str, Any]], next_cursor: str | None, uploads: Sequence[UploadRow],
              missing: dict[str, int] | None = None, tools: str = "") -> str:
    """``/tasks/<task>``: the filter form, one page of matching episodes, the last uploads.

    ``episodes`` and ``next_cursor`` come from :func:`~egopool.server.search.search_episodes`;
    ``totals`` from :func:`~egopool.server.summary.task_totals`; ``missing`` from
    :func:`~egopool.server.search.missing_facts`; ``tools``: the bar of
    :func:`~egopool.server.task_tools.task_tools` (dashboard, downloads, bulk review), already HTML.
    """
    t = totals or {"episodes": 0, "accepted": 0, "rejected": 0, "flagged": 0, "unreviewed": 0}
    keep = {k: v for k, v in q.params().items() if k != "task"}
    if q.limit != 50:
        keep["limit"] = str(q.limit)
    rows = []
    for ep in episodes:
        link = f"/tasks/{_q(task)}/episodes/{ep['episode_index']}{_qs(keep)}"
        up = ep.get("uploaded_by")
        rows.append([_thumb(ep.get("thumbnail")), f"<a href=\"{_e(link)}\">{_e(ep['episode_index'])}</a>",
                     _duration(ep.get("duration_s")), _size(ep.get("size_bytes")), _origin(up),
                     _time(up["imported_at"]) if up else "—", _validation(ep.get("validation")),
                     _quality_cell(ep.get("quality")), _review_cell(ep.get("review")), _sort_values(ep)])
    filtered = any(k != "task" for k in q.filters)
    paging = []
    if q.after is not None:
        paging.append(f"<a id=\"first-page\" href=\"/tasks/{_q(task)}{_e(_qs(keep))}\">« first page</a>")
    if next_cursor:
        paging.append(f"<a id=\"next-page\" href=\"/tasks/{_q(task)}{_e(_qs({**keep, 'cursor': next_cursor}))}\">"
                      "next page »</a>")
    shown = (f"{len(episodes)} shown" + (" (filtered)" if filtered else "")
             + (f", after episode {_e(q.after[1])}" if q.after else ""))
    body = [f"<h1>Task {_e(task)}</h1>", "<p><a href=\"/\">all tasks</a> · "
            f"<a href=\"/api/v1/tasks/{_q(task)}\">info.json</a> · "
            f"<a href=\"/api/v1/episodes{_e(_qs({**q.params(), 'task': task}))}\">these results as JSON</a></p>",
            f"<p id=\"summary\">{_e(t['episodes'])} pooled episodes · fps {_e(info.get('fps'))} · "
            f"<span class=\"ok\">{_e(t['accepted'])} accepted</span> · <span class=\"bad\">{_e(t['rejected'])} "
            f"rejected</span> · <span class=\"warn\">{_e(t['flagged'])} flagged</span> · "
            f"{_e(t['unreviewed'])} unreviewed"
            + (f" · {_duration(t.get('duration_s'))} · {_size(t.get('size_bytes'))}{_partial(t)}" if totals else "")
            + "</p>",
            _filter_form(task, q), _missing_note(missing or {}), tools,
            f"<p class=\"dim\" id=\"shown\">{shown} · <label>sort this page by <select id=\"sort\">"
            + "".join(f"<option value=\"{k}\">{_e(v)}</option>" for k, v in SORTS.items())
            + "</select></label> <label><input type=\"checkbox\" id=\"sort-desc\"> descending</label></p>",
            _episodes_table(f"episodes-{task}", rows),
            f"<p class=\"paging\">{' · '.join(paging)}</p>", "<h2>Last uploads</h2>", _uploads_table(uploads)]
    return _doc(f"egopool · {task}", "".join(body), script="task.js", libs=("bulk.js",) if tools else ())


def _episodes_table(table_id: str, rows: Sequence[Sequence[str]]) -> str:
    """The task's episode rows; each row's last item is its ``data-*`` sort values (static/task.js)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in ("", "N", "duration", "size", "host (its N)", "imported",
                                                  "validation", "quality", "review"))
    trs = "".join(f"<tr{r[-1]}>" + "".join(f"<td>{c}</td>" for c in r[:-1]) + "</tr>" for r in rows)
    return f"<table id=\"{_e(table_id)}\"><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>"


def _json_script(data: Any) -> str:
    text = json.dumps(data).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return f"<script type=\"application/json\" id=\"episode-data\">{text}</script>"


def _facts_table(ep: dict[str, Any]) -> str:
    q = ep.get("quality") or {}
    rows = [["duration", _duration(ep.get("duration_s"))], ["size", _size(ep.get("size_bytes"))],
            ["rows", _e(ep.get("length"))], ["validation", _validation(ep.get("validation"))]]
    for k in sorted(set(q) - {"duration_s", "rows", "size_bytes"}):  # those three are the rows above
        v = q[k]
        text = v if isinstance(v, str) else json.dumps(v)
        rows.append([_e(k), _e(text if len(text) <= 300 else text[:300] + " …")])
    return _table("quality", ("fact", "value"), rows)


def _marks(q: dict[str, Any] | None) -> dict[str, list[list[float]]]:
    """Timeline marks in s from the quality facts (P7): ``gap`` (the rows each stall spans), ``frozen``
    (every stream's held frames), ``exposure`` and ``blur`` (the sampled frames found so, one row each)."""
    q = q or {}
    fps = q.get("fps")
    if not fps:
        return {}
    out: dict[str, list[list[float]]] = {
        "gap": [[a / fps, b / fps] for a, b in q.get("gap_ranges") or []],
        "frozen": [[a / fps, b / fps] for runs in (q.get("frozen_ranges") or {}).values() for a, b in runs],
        "exposure": [[r / fps, (r + 1) / fps] for r in q.get("exposure_rows") or []],
        "blur": [[r / fps, (r + 1) / fps] for r in q.get("blur_rows") or []]}
    return {k: v for k, v in out.items() if v}


_MARK_LABELS = {"gap": "gap", "frozen": "frozen frames", "exposure": "dark/bright frames", "blur": "blurred frames",
                "idle": "idle"}


def _marks_legend(q: dict[str, Any] | None, marks: dict[str, list[list[float]]], idle: bool) -> str:
    q = q or {}
    counts = {"gap": q.get("gap_total"), "frozen": q.get("frozen_frames"), "exposure": q.get("exposure_outliers"),
              "blur": q.get("blur_outliers"), "idle": q.get("idle_frames")}
    items = [f"<li data-mark=\"{k}\"><span class=\"sw {k}\"></span>{_e(label)}: {_e(counts.get(k))}</li>"
             for k, label in _MARK_LABELS.items() if k in marks or (k == "idle" and idle)]
    return (f"<ul id=\"marks\" title=\"click the timeline to go there\">{''.join(items)}</ul>") if items else ""


def _idle_ranges(q: dict[str, Any] | None) -> list[list[float]]:
    """``[[t0, t1], ...]`` s of the quality facts' idle row ranges (``[start, stop)`` rows at ``fps``)."""
    fps = (q or {}).get("fps")
    if not fps:
        return []
    return [[a / fps, b / fps] for a, b in (q or {}).get("idle_ranges") or []]


def episode_page(task: str, ep: dict[str, Any], reviews: Sequence[ReviewRow], neighbours: tuple[int | None, int | None],
                 q: EpisodeQuery, *, can_review: bool, csrf: str, next_unreviewed: int | None = None) -> str:
    """``/tasks/<task>/episodes/<N>``: synced cameras, signal plots, quality facts, origin, review.

    ``ep`` is the read API's episode entry (``preview`` and ``quality`` when the previews
    exist); ``neighbours`` the previous / next N under the same filters ``q`` (j / k).
    ``can_review``: the token may judge; an episode without ``uploaded_by`` (copied into the
    store) never shows the review buttons. ``next_unreviewed``: the next N under ``q`` without a
    verdict (where "next unreviewed after a verdict" goes, docs/decisions.md P4).
    """
    n = ep["episode_index"]
    keep = {k: v for k, v in q.params().items() if k != "task"}
    prev, nxt = neighbours
    # only a pooled episode (a server.db row) can be judged (docs/decisions.md Q10): no buttons that 404
    can_review = can_review and ep.get("uploaded_by") is not None
    preview = ep.get("preview") or {}
    ego = (ep.get("quality") or {}).get("ego_stream")
    # the master clock is the first video: the ego stream, then the other RGB streams, then depth
    streams = sorted((s for s in preview.get("streams") or [] if s.get("video")),
                     key=lambda s: (s.get("key") != ego, s.get("moves") is False, s.get("kind") != "rgb",
                                    str(s.get("key"))))
    fps = next((s.get("fps") for s in streams if s.get("fps")), None)
    frames = next((int(s["frames"]) for s in streams if isinstance(s.get("frames"), int) and s["frames"] > 0), None)
    data = {"task": task, "index": n, "fps": fps, "duration": ep.get("duration_s"), "frames": frames,
            "streams": streams, "signals": preview.get("signals"), "idle": _idle_ranges(ep.get("quality")),
            "marks": _marks(ep.get("quality")), "depth_range": list(DEPTH_RANGE_MM),
            "building": preview.get("state") in ("pending", None) and preview.get("enabled") is not False,
            "prev": f"/tasks/{_q(task)}/episodes/{prev}{_qs(keep)}" if prev is not None else None,
            "next": f"/tasks/{_q(task)}/episodes/{nxt}{_qs(keep)}" if nxt is not None else None,
            "next_unreviewed": (f"/tasks/{_q(task)}/episodes/{next_unreviewed}{_qs(keep)}"
                                if next_unreviewed is not None else None),
            "review_url": f"/api/v1/tasks/{_q(task)}/episodes/{n}/review", "can_review": can_review, "csrf": csrf,
            "version": int(ep.get("review_version") or 0)}
    nav = [f"<a href=\"/tasks/{_q(task)}{_e(_qs(keep))}\">{_e(task)}</a>"]
    if prev is not None:
        nav.append(f"<a id=\"prev\" href=\"{_e(data['prev'])}\">« episode {_e(prev)} (k)</a>")
    if nxt is not None:
        nav.append(f"<a id=\"next\" href=\"{_e(data['next'])}\">episode {_e(nxt)} » (j)</a>")
    state = preview.get("state")
    last = max(0, (frames or round((ep.get("duration_s") or 0) * (fps or 0))) - 1)
    if streams:
        figs = "".join(
            f"<figure><video id=\"video-{i}\" data-key=\"{_e(s.get('key'))}\" src=\"{_e(s['video'])}\" muted "
            "playsinline preload=\"auto\">"  # no poster: the middle-frame thumbnail is not frame 0 (P5)
            f"</video><figcaption>{_e(s.get('key'))} <span class=\"dim\">{_e(s.get('kind'))} · "
            f"{_e(s.get('width'))}×{_e(s.get('height'))} · {_e(s.get('frames'))} frames</span>"
            + (f" <span class=\"bad frozen\">frozen: {_e(s.get('held_frames'))} held frames</span>"
               if s.get("moves") is False else "")
            + (f"<div class=\"depthbar\" data-video=\"video-{i}\"><span>{DEPTH_RANGE_MM[0]:.0f} mm</span>"
               f"<span class=\"ramp\"></span><span>{DEPTH_RANGE_MM[1]:.0f} mm</span>"
               f"<span class=\"depthval\" id=\"depthval-{i}\" title=\"depth under the pointer\">black: none"
               "</span></div>"
               if s.get("kind") == "depth" else "")
            + "</figcaption></figure>"
            for i, s in enumerate(streams))
        # a build where some streams failed: the error names them, the others play
        failed = (f"<p id=\"preview-error\" class=\"bad\">Part of the preview failed: "
                  f"{_e(preview.get('error') or state)}</p>") if state == "failed" else ""
        player = failed + (f"<div id=\"videos\">{figs}</div><div id=\"transport\">"
                  "<button id=\"step-back\" title=\"one frame back (←)\">← frame</button>"
                  "<button id=\"play\" title=\"play / pause (space)\">Play</button>"
                  "<button id=\"step-fwd\" title=\"one frame forward (→)\">frame →</button>"
                  f"<input id=\"seek\" type=\"range\" min=\"0\" max=\"{last}\" step=\"1\" value=\"0\" "
                  "aria-label=\"frame\">"
                  f"<span id=\"clock\" data-frame=\"0\">0.000 s · frame 0 / {last}</span>"
                  "<label>speed <select id=\"speed\">" + "".join(
                      f"<option value=\"{x}\"{' selected' if x == '1' else ''}>{x}×</option>"
                      for x in ("0.25", "0.5", "1", "1.5", "2", "4")) + "</select></label>"
                  "<label><input type=\"checkbox\" id=\"loop\"> loop</label>"
                  "</div><canvas id=\"timeline\" height=\"22\"></canvas>"
                  + _marks_legend(ep.get("quality"), data["marks"], bool(data["idle"])))
    elif preview.get("enabled") is False and state in ("pending", None):
        player = ("<p id=\"videos\" class=\"dim\">This server builds no previews (<code>serve --no-previews</code>); "
                  "the episode's files are in the read API.</p>")
    elif state in ("pending", None):
        player = "<p id=\"videos\" class=\"dim\">The previews of this episode are being built; reload in a moment.</p>"
    elif state == "ready":  # built, and no RGB or depth stream to show (docs/decisions.md Q22)
        player = "<p id=\"videos\" class=\"dim\">This episode has no camera stream; its signals are below.</p>"
    else:
        player = (f"<p id=\"videos\" class=\"bad\">No preview: {_e(preview.get('error') or state)} "
                  "(the episode itself is fine; the server rebuilds previews on demand).</p>")
    up = ep.get("uploaded_by")
    origin = (f"<p id=\"origin\">Uploaded from {_origin(up)} at {_time(up['imported_at'])}, upload "
              f"#{_e(up['upload_id'])}, token {_e(up.get('token_id') or '—')}</p>") if up else \
        ("<p id=\"origin\" class=\"dim\">Not uploaded to this server (copied into the store): "
         "it cannot be judged here.</p>")
    current = ep.get("review")
    review_box = ""
    if can_review:
        review_box = ("<div id=\"review\"><input id=\"reason\" type=\"text\" size=\"50\" maxlength=\"2000\" "
                      "placeholder=\"reason (needed to reject or flag)\"> "
                      "<button id=\"accept\" class=\"ok\">accept (a)</button> "
                      "<button id=\"reject\" class=\"bad\">reject (r)</button> "
                      "<button id=\"flag\" class=\"warn\">flag (f)</button> "
                      "<button id=\"undo\" title=\"take back the last verdict (u)\">undo (u)</button> "
                      "<label class=\"dim\"><input type=\"checkbox\" id=\"auto-advance\"> then the next "
                      "unreviewed episode</label> <span id=\"review-msg\" role=\"status\"></span></div>")
    hist = _table("reviews", ("when", "verdict", "reason", "token"),
                  [[_time(r.at), _state(r.state), _e(r.reason),
                    _e(r.token_id or "—")] for r in reversed(reviews)])
    keys = "".join(f"<li><kbd>{_e(k)}</kbd> {_e(v)}</li>" for k, v in SHORTCUTS.items()
                   if can_review or k not in (*_REVIEW_KEYS, "Esc"))
    body = [f"<h1>{_e(task)} · episode {_e(n)}</h1>", f"<p class=\"nav\">{' · '.join(nav)}</p>", origin,
            episode_downloads(task, n), player,
            f"<h2>Review</h2><p>Current: <span id=\"review-state\">{_review_cell(current)}</span></p>", review_box,
            hist, f"<ul id=\"shortcuts\">{keys}</ul>", events_section(can_review=can_review),
            "<h2>Signals</h2><div id=\"plots\"><p class=\"dim\">no signals</p></div>",
            "<h2>Quality facts</h2>", _facts_table(ep), _json_script(data)]
    return _doc(f"egopool · {task} · {n}", "".join(body), script="episode.js",
                libs=("uPlot.min.css", "uPlot.iife.min.js"))  # docs/decisions.md P10

