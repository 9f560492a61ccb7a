"""A task's dashboard: ``/tasks/<task>/dashboard`` (docs/decisions.md P21).

Episodes, hours and review states per host and per day (UTC day of import) as stacked bar charts, and
each quality fact as a histogram, drawn by the vendored uPlot (``static/dashboard.js``; no CDN, no build
step). Every figure comes from ``server.db`` in two SQL statements (one grouped scan of the task's
episodes with their review state and duration, one scan of its quality rows): no episode file is read,
so the page costs the same on a bucket store and grows with the task's rows only; the figures are kept
until the task's episodes, a review or a quality row change (:func:`dashboard_data`).
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from typing import Any

import numpy as np

from .db import VERDICTS, ServerDB
from .page import _doc, _duration, _e

__all__ = ["FACTS", "build_dashboard_data", "dashboard_data", "dashboard_page"]

#: quality fact -> (SQL over ``quality``, unit, label) drawn as a histogram
FACTS = {"duration_s": ("duration_s", "s", "duration"),
         "idle_fraction": ("idle_fraction", "share of rows", "idle share"),
         "gap_total": ("gap_total", "gaps", "gaps"),
         "drop_total": ("drop_total", "frames", "dropped frames"),
         "frozen_frames": ("json_extract(facts, '$.frozen_frames')", "frames", "frozen frames"),
         "exposure_outliers": ("exposure_outliers", "frames", "dark/bright frames"),
         "blur_outliers": ("blur_outliers", "frames", "blurred frames")}
_BINS = 20
_MAX_DAYS = 3660  # a day axis longer than ten years is cut to its last days
_STATES = (*VERDICTS.values(), "unreviewed")


def _histogram(values: np.ndarray) -> dict[str, Any]:
    """``{"edges": [...], "counts": [...], "whole"}``: :data:`_BINS` equal bins, or one bin per whole number when
    the values are whole numbers spanning fewer than 40 (``whole``: every value is a whole number)."""
    if values.size == 0:
        return {"edges": [], "counts": [], "whole": False}
    lo, hi = float(values.min()), float(values.max())
    whole = bool(np.all(values == np.round(values)))
    if whole and hi - lo < 40:
        edges = np.arange(lo - 0.5, hi + 1.5, 1.0)
    elif hi > lo:
        edges = np.linspace(lo, hi, _BINS + 1)
    else:  # one value: one bin around it
        d = max(abs(lo) * 0.05, 1e-3)
        edges = np.array([lo - d, lo + d])
    counts, edges = np.histogram(values, bins=edges)
    return {"edges": [round(float(x), 6) for x in edges], "counts": [int(c) for c in counts], "whole": whole}


#: task -> (change key, figures): what the last build of each task's dashboard gave (:func:`dashboard_data`)
_CACHE: dict[tuple[str, str], tuple[tuple[Any, ...], dict[str, Any]]] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_TASKS = 64


def _change_key(db: ServerDB, task: str) -> tuple[Any, ...]:
    """What changes whenever a figure of ``task``'s dashboard can: its episode count (a covering index), the last
    review row (every verdict and undo appends one) and the last quality row (``set_quality`` replaces a row,
    which gives it a new rowid): three index lookups, not a scan."""
    return (db.select("SELECT COUNT(*) FROM episodes WHERE task = ?", (task,))[0][0],
            db.select("SELECT MAX(id) FROM reviews")[0][0], db.select("SELECT MAX(rowid) FROM quality")[0][0])


def dashboard_data(db: ServerDB, task: str) -> dict[str, Any]:
    """The dashboard's figures for ``task``, rebuilt (:func:`build_dashboard_data`) only when the task's episodes,
    any review or any quality facts changed since the last build (:func:`_change_key`); a build scans the task
    (2.0 s at 10⁵ episodes measured at load average 12-15 on 2 cores), a page while nothing changed costs three
    index lookups (12 ms there).

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    key = _change_key(db, task)
    ident = (str(db.path), task)
    with _CACHE_LOCK:
        hit = _CACHE.get(ident)
    if hit is not None and hit[0] == key:
        return hit[1]
    data = build_dashboard_data(db, task)
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_TASKS:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[ident] = (key, data)
    return data


def build_dashboard_data(db: ServerDB, task: str) -> dict[str, Any]:
    """The dashboard's figures for ``task``.

    Returns ``{"task", "totals": {"episodes", "hours", "measured", "accepted", "rejected", "flagged",
    "unreviewed"}, "hosts": [{"host", "episodes", "hours", <states>}], "days": [{"day" (unix s of 00:00
    UTC), "episodes", "hours", <states>}] (every day from the first to the last import, zeros included),
    "facts": {fact: {"unit", "label", "edges", "counts", "whole", "missing"}}}``; hours sum the episodes whose
    quality facts are computed (``measured``).

    Raises
    ------
    RegistryError
        ``server.db`` failed.
    """
    rows = db.select(
        "SELECT e.client_hostname, CAST(e.imported_at / 86400 AS INTEGER), COUNT(*), SUM(q.duration_s), "
        "COUNT(q.duration_s), SUM(s.verdict = 'accepted'), SUM(s.verdict = 'rejected'), SUM(s.verdict = 'flagged') "
        "FROM episodes AS e LEFT JOIN review_state AS s ON s.task = e.task AND s.episode_index = e.episode_index "
        "LEFT JOIN quality AS q ON q.task = e.task AND q.episode_index = e.episode_index "
        "WHERE e.task = ? GROUP BY 1, 2", (task,))
    hosts: dict[str, dict[str, Any]] = {}
    days: dict[int, dict[str, Any]] = {}
    total: dict[str, Any] = {"episodes": 0, "hours": 0.0, "measured": 0, **{s: 0 for s in _STATES}}
    for host, day, n, secs, measured, acc, rej, flg in rows:
        add = {"episodes": int(n), "hours": float(secs or 0.0) / 3600.0, "accepted": int(acc or 0),
               "rejected": int(rej or 0), "flagged": int(flg or 0)}
        add["unreviewed"] = add["episodes"] - add["accepted"] - add["rejected"] - add["flagged"]
        for bucket in (hosts.setdefault(str(host), {"host": str(host)}), days.setdefault(int(day), {"day": int(day)}),
                       total):
            for k, v in add.items():
                bucket[k] = bucket.get(k, 0) + v
        total["measured"] += int(measured)
    day_list: list[dict[str, Any]] = []
    if days:
        first, last = min(days), max(days)
        first = max(first, last - _MAX_DAYS)
        zero = {"episodes": 0, "hours": 0.0, **{s: 0 for s in _STATES}}
        day_list = [{**zero, **days.get(d, {}), "day": d * 86400} for d in range(first, last + 1)]
    facts: dict[str, Any] = {}
    cols = ", ".join(sql for sql, _, _ in FACTS.values())
    qrows = db.select(f"SELECT {cols} FROM quality WHERE task = ?", (task,))
    table = np.array(qrows, dtype=np.float64) if qrows else np.zeros((0, len(FACTS)))  # NULL -> NaN
    for i, (name, (_, unit, label)) in enumerate(FACTS.items()):
        col = table[:, i]
        have = col[~np.isnan(col)]
        facts[name] = {"unit": unit, "label": label, **_histogram(have),
                       "missing": int(total["episodes"] - have.size)}
    return {"task": task, "totals": total, "hosts": sorted(hosts.values(), key=lambda h: h["host"]),
            "days": day_list, "facts": facts}


def _json_script(element_id: str, data: Any) -> str:
    text = json.dumps(data).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return f"<script type=\"application/json\" id=\"{_e(element_id)}\">{text}</script>"


def dashboard_page(task: str, data: dict[str, Any]) -> str:
    """``/tasks/<task>/dashboard``: the totals in a sentence, then the charts (drawn by ``static/dashboard.js``
    from the JSON of :func:`dashboard_data` embedded in the page)."""
    t = data["totals"]
    link = f"/tasks/{urllib.parse.quote(task, safe='')}"
    hours = f"{t['hours']:.2f}"
    partial = (f" <span class=\"partial dim\">(hours of {_e(t['measured'])} of {_e(t['episodes'])} episodes: the "
               "others are not measured yet)</span>") if t["measured"] < t["episodes"] else ""
    charts = "".join(f"<figure class=\"chart hist\" id=\"hist-{_e(name)}\"><figcaption>{_e(f['label'])} "
                     f"<span class=\"dim\">({_e(f['unit'])}; {_e(f['missing'])} episodes without a value)</span>"
                     "</figcaption></figure>" for name, f in data["facts"].items())
    body = [f"<h1>Task {_e(task)} · dashboard</h1>",
            f"<p class=\"nav\"><a href=\"{_e(link)}\">{_e(task)}: episodes</a> · <a href=\"/\">all tasks</a></p>",
            f"<p id=\"dash-summary\">{_e(t['episodes'])} pooled episodes · {_e(hours)} h "
            f"({_duration(t['hours'] * 3600)}){partial} · <span class=\"ok\">{_e(t['accepted'])} accepted</span> · "
            f"<span class=\"bad\">{_e(t['rejected'])} rejected</span> · <span class=\"warn\">{_e(t['flagged'])} "
            f"flagged</span> · {_e(t['unreviewed'])} unreviewed</p>",
            "<h2>Per day (UTC, by import)</h2><figure class=\"chart\" id=\"chart-days\"></figure>"
            "<figure class=\"chart\" id=\"chart-days-hours\"></figure>",
            "<h2>Per host</h2><figure class=\"chart\" id=\"chart-hosts\"></figure>"
            "<figure class=\"chart\" id=\"chart-hosts-hours\"></figure>",
            f"<h2>Quality facts</h2><div id=\"hists\">{charts}</div>", _json_script("dashboard-data", data)]
    return _doc(f"egopool · {task} · dashboard", "".join(body), script="dashboard.js",
                libs=("uPlot.min.css", "uPlot.iife.min.js"))
