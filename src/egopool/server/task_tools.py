"""The task page's tools bar: dashboard link, downloads of the current filter, bulk review (P20-P22).

The bar is HTML with its URLs in ``data-*`` attributes; ``static/bulk.js`` adds a checkbox to every
episode row (its N and review version are the row's ``data-episode-index`` / ``data-version``), a
shift-click selects a range, "select all matching" asks ``.../selection`` for every page, and the
buttons post the verdict in requests of at most :data:`~egopool.server.bulk_review.MAX_BULK` items.
"""

from __future__ import annotations

import urllib.parse

from .bulk_review import MAX_BULK
from .page import _e
from .review import csrf_token
from .search import EpisodeQuery
from .tokens import Token

__all__ = ["episode_downloads", "task_tools"]


def task_tools(task: str, q: EpisodeQuery, tok: Token | None, cookie: str | None) -> str:
    """The bar of the task page for ``task`` under the filters ``q`` (module docstring), for the request's token
    ``tok`` (None: a server without tokens) and sign-in ``cookie`` (its CSRF value goes on the bar)."""
    can_review = tok is None or tok.can_review()
    csrf = csrf_token(cookie) if cookie and tok is not None else ""
    t = urllib.parse.quote(task, safe="")
    params = {k: v for k, v in q.params().items() if k != "task"}
    qs = ("?" + urllib.parse.urlencode(params)) if params else ""
    links = (f"<p id=\"task-tools\"><a id=\"dashboard-link\" href=\"/tasks/{t}/dashboard\">dashboard</a> · "
             f"download the episodes matching this filter: <a id=\"dl-lerobot\" "
             f"href=\"/api/v1/tasks/{t}/download/lerobot.zip{_e(qs)}\">as a LeRobot dataset</a> · "
             f"<a id=\"dl-zips\" href=\"/api/v1/tasks/{t}/download/episodes.zip{_e(qs)}\">as a zip of the episodes' "
             "zips</a></p>")
    if not can_review:
        return links
    return links + (
        f"<div id=\"bulk\" data-bulk-url=\"/api/v1/tasks/{t}/reviews\" "
        f"data-selection-url=\"/api/v1/tasks/{t}/selection{_e(qs)}\" data-csrf=\"{_e(csrf)}\" "
        f"data-max=\"{MAX_BULK}\"><span id=\"bulk-count\">0 selected</span> "
        "<button type=\"button\" id=\"select-all\">select all matching the filter</button> "
        "<button type=\"button\" id=\"select-none\">clear</button> "
        "<input id=\"bulk-reason\" type=\"text\" maxlength=\"2000\" placeholder=\"reason (needed to reject or flag)\"> "
        "<button type=\"button\" id=\"bulk-accept\" class=\"ok\">accept selected</button> "
        "<button type=\"button\" id=\"bulk-reject\" class=\"bad\">reject selected</button> "
        "<button type=\"button\" id=\"bulk-flag\" class=\"warn\">flag selected</button> "
        "<label class=\"dim\"><input type=\"checkbox\" id=\"bulk-all-or-none\"> all or none</label> "
        "<span id=\"bulk-msg\" role=\"status\"></span></div>")


def episode_downloads(task: str, index: int) -> str:
    """The episode page's download links: its files as a zip, its Rerun recording (P22)."""
    base = f"/api/v1/tasks/{urllib.parse.quote(task, safe='')}/episodes/{index}"
    return (f"<p id=\"downloads\">download: <a id=\"dl-zip\" href=\"{base}/download.zip\">its files (zip)</a> · "
            f"<a id=\"dl-rrd\" href=\"{base}/download.rrd\">a Rerun recording (.rrd)</a></p>")
