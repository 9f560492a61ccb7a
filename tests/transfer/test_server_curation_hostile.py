"""Hostile input to the review and search API and to ``--episodes-from`` (docs/decisions.md Q20, Q21).

A real ``egopool serve`` on loopback: every refusal is a 4xx whose body is the server's one-line
``{"error", "message"}`` (never a 500, never pydantic's nested list), and a selection URL that
answers an HTML error page is reported in one line.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.errors import EgopoolError  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

HUGE = 10**30
LONE = "\ud800"  # a lone surrogate


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _one_line(r: httpx.Response, status: int, starts: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] and body["message"].startswith(starts), body
    assert "\n" not in body["message"] and "Traceback" not in r.text


def _page_line(r: httpx.Response, status: int, starts: str) -> None:
    """A refused page request is a page (not JSON in the browser) saying the same one line."""
    assert r.status_code == status and r.headers["content-type"].startswith("text/html"), r.text
    import html
    import re
    said = re.search(r'<p class="bad" id="error">(.*?)</p>', r.text)
    assert said and html.unescape(said.group(1)).startswith(starts), r.text
    assert "Traceback" not in r.text and 'href="/"' in r.text


def _cursor(doc: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode("utf-8")).decode("ascii").rstrip("=")


@pytest.fixture()
def served(tmp_path: Path):
    tokens = tmp_path / "tokens.json"
    tok = {"up": add_token(tokens, "pc-7", ["upload:*", "declare:*"]), "read": add_token(tokens, "viewer", ["read"]),
           "rev": add_token(tokens, "anna", ["read", "review"])}
    task = write_task(tmp_path / "pc", "pick_cup", episodes=2)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=tok["up"]).ok
        yield srv, tok


def test_hostile_reviews_are_one_line_4xx(served) -> None:
    srv, tok = served
    url = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/review"
    h = _bearer(tok["rev"])
    for verdict in ([], {}, 1, None):
        _one_line(httpx.post(url, json={"verdict": verdict}, headers=h), 400, "unknown verdict")
    # a verdict names its episode and the review version it answers, as whole numbers (docs/decisions.md P1)
    for bad in ({}, {"episode": 1}, {"episode": "1", "version": 0}, {"episode": 1, "version": True},
                {"episode": 1, "version": -1}, {"episode": 1, "version": 2**63}):
        _one_line(httpx.post(url, json={**bad, "verdict": "accept"}, headers=h), 400, "a review names the ")
    for reason in (f"a{LONE}b", "a\x00b", "\x1b[31mred"):  # a lone surrogate cannot be stored; controls hide text
        body = json.dumps({"verdict": "flag", "reason": reason})  # ensure_ascii: \\ud800 reaches the server
        _one_line(httpx.post(url, content=body, headers={**h, "Content-Type": "application/json"}), 400,
                  "the reason holds the character U+")
    # 2000 astral characters are 2000 characters, even escaped as surrogate pairs (24 kB of JSON)
    body = json.dumps({"episode": 1, "version": 0, "verdict": "flag", "reason": "\U0001f600" * 2000})
    r = httpx.post(url, content=body, headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["reason"] == "\U0001f600" * 2000
    r = httpx.post(url, json={"episode": 1, "version": r.json()["version"], "verdict": "flag",
                              "reason": "line one\n\tline two"}, headers=h)
    assert r.status_code == 200 and r.json()["reason"] == "line one\n\tline two"
    # an N SQLite cannot hold is a missing episode, on every route that takes one
    base = f"{srv.url}/api/v1/tasks/pick_cup/episodes/{HUGE}"
    _one_line(httpx.post(base + "/review", json={"verdict": "accept"}, headers=h), 404, f"no episode {HUGE}")
    for path in ("", "/reviews", "/preview/signals.json", "/files/meta/info.json"):
        _one_line(httpx.get(base + path, headers=h), 404, f"no episode {HUGE}")
    _page_line(httpx.get(f"{srv.url}/tasks/pick_cup/episodes/{HUGE}", headers=h), 404, f"no episode {HUGE}")
    _page_line(httpx.get(f"{srv.url}/tasks/pick_cup/episodes/abc", headers=h), 422, "path index 'abc'")
    # FastAPI's own refusal of a path value: one line too
    _one_line(httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/abc/reviews", headers=h), 422, "path index 'abc'")
    assert httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/reviews", headers=h).json()["reviews"][0][
        "verdict"] == "flag"


def test_hostile_search_parameters_are_one_line_400(served) -> None:
    srv, tok = served
    h = _bearer(tok["read"])
    cases = {"limit=%C2%B2": "filter limit='²'", "limit=-1": "filter limit='-1'",
             "limit=1000000000": "filter limit='1000000000'",
             f"cursor={_cursor(['pick_cup', HUGE])}": "filter cursor=", f"cursor={_cursor(['pick_cup', True])}":
             "filter cursor=", f"cursor={_cursor([LONE, 1])}": "filter cursor=",
             "since=nan": "filter since='nan' is not a finite time", "until=1e999": "filter until='1e999'",
}
    for query, starts in cases.items():
        _one_line(httpx.get(f"{srv.url}/api/v1/episodes?{query}", headers=h), 400, starts)
        _page_line(httpx.get(f"{srv.url}/tasks/pick_cup?{query}", headers=h), 400, starts)  # the task page's form
    r = httpx.get(f"{srv.url}/api/v1/episodes?since=2020-01-01&until=2100-01-01&limit=5", headers=h)
    assert [e["episode_index"] for e in r.json()["episodes"]] == [1, 2]
    # an empty window or duration range is an empty answer (filters are ANDed), and the page keeps its form
    for query in ("since=2100-01-01&until=2020-01-01", "min_duration=5&max_duration=1"):
        r = httpx.get(f"{srv.url}/api/v1/episodes?{query}", headers=h)
        assert r.status_code == 200 and r.json() == {"episodes": [], "next_cursor": None}
        r = httpx.get(f"{srv.url}/tasks/pick_cup?{query}", headers=h)
        assert r.status_code == 200 and 'id="filters"' in r.text and "0 shown (filtered)" in r.text


class _HTMLErrors(http.server.BaseHTTPRequestHandler):
    """Another web server: an HTML error page for every GET."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


def test_a_refused_selection_url_is_one_line(served) -> None:
    from egopool.curation.selection import read_selection

    srv, tok = served
    with pytest.raises(EgopoolError) as err:  # an egopool server's refusal: its message, not the JSON body
        read_selection(f"{srv.url}/api/v1/episodes?task=pick_cup&limit=0", token=tok["read"])
    line = err.value.one_line()
    assert "answered 400" in line and "filter limit='0' is not an integer 1..500" in line
    assert "\n" not in line and '{"error"' not in line
    other = http.server.HTTPServer(("127.0.0.1", 0), _HTMLErrors)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with pytest.raises(EgopoolError) as err:
            read_selection(f"http://127.0.0.1:{other.server_address[1]}/episodes", token=tok["read"])
    finally:
        other.shutdown()
        other.server_close()
    line = err.value.one_line()
    assert "answered 404" in line and "\n" not in line and "<" not in line and len(line) < 400


def test_a_damaged_task_is_a_page_in_the_browser(served, tmp_path: Path) -> None:
    """A task whose info.json the server cannot read: its pages answer an HTML page with the one line (no path
    of the server's disk), the JSON API its JSON, as for every other refused page request."""
    srv, tok = served
    h = _bearer(tok["read"])
    (tmp_path / "store/pick_cup/meta/info.json").write_text('{"fps": 30, broken')
    for page in ("/tasks/pick_cup", "/tasks/pick_cup/episodes/1"):
        r = httpx.get(srv.url + page, headers=h)
        _page_line(r, 500, "pick_cup/meta/info.json: cannot parse JSON")
        assert str(tmp_path) not in r.text
    r = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup", headers=h)
    _one_line(r, 500, "pick_cup/meta/info.json: cannot parse JSON")
    assert str(tmp_path) not in r.text
