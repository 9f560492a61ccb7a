"""Review and search over real HTTP (a real ``egopool serve`` on loopback), and the search query's plan.

Review: scopes (a read-only token is refused with a one-line 403), reasons, history, the browser
cookie's CSRF guard. Search: every filter against episodes uploaded for real, keyset paging that
neither repeats nor skips an episode when others are imported between two pages, and SQLite's
query plan (the page query walks the ``episodes`` primary-key index; no OFFSET, no sort).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.cli.app import main as cli  # noqa: E402
from egopool.server.db import EpisodeRow, ServerDB  # noqa: E402
from egopool.server.search import explain, parse_query, search_episodes  # noqa: E402
from egopool.server.summary import task_totals  # noqa: E402
from egopool.server.tokens import add_token, parse_scope  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def served(tmp_path: Path):
    tokens = tmp_path / "tokens.json"
    tok = {"up": add_token(tokens, "pc-7", ["upload:*", "declare:*"]), "read": add_token(tokens, "viewer", ["read"]),
           "rev": add_token(tokens, "anna", ["read", "review"]), "revonly": add_token(tokens, "bot", ["review"])}
    task = write_task(tmp_path / "pc", "pick_cup", episodes=4)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv:
        assert upload_episodes(task, server=srv.url, token=tok["up"]).ok
        yield srv, tok, tmp_path


def test_review_scope_cli_and_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_scope("review") == "review"
    assert cli(["token", "add", "--tokens", str(tmp_path / "t.json"), "--id", "anna", "--scope", "read",
                "--scope", "review", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scopes"] == ["read", "review"] and out["token"].startswith("egp_")
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["tokens"][0]["scopes"] == ["read", "review"]


def test_review_history_and_scopes(served) -> None:
    srv, tok, _ = served
    url = f"{srv.url}/api/v1/tasks/pick_cup/episodes/2/review"
    r = httpx.post(url, json={"verdict": "accept"}, headers=_bearer(tok["read"]))
    assert r.status_code == 403
    assert r.json()["message"].startswith("token 'viewer' has no review scope") and "\n" not in r.text
    assert httpx.post(url, json={"verdict": "accept"}).status_code == 401
    for body, why in [({"verdict": "reject"}, "a reject needs a reason"), ({"verdict": "ok"}, "unknown verdict 'ok'"),
                      ({"verdict": "flag", "reason": "   "}, "a flag needs a reason")]:
        r = httpx.post(url, json=body, headers=_bearer(tok["rev"]))
        assert r.status_code == 400 and r.json()["message"].startswith(why)
    assert httpx.post(url, content=b"[1]", headers={**_bearer(tok["rev"]), "Content-Type": "application/json"}
                      ).status_code == 400
    r = httpx.post(url, content=b'{"verdict": "accept"}', headers={**_bearer(tok["rev"]), "Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["message"].startswith("a review is a JSON body")
    assert httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/9/review",
                      json={"episode": 9, "version": 0, "verdict": "accept"}, headers=_bearer(tok["rev"])
                      ).status_code == 404

    before = time.time()
    a = httpx.post(url, json={"episode": 2, "version": 0, "verdict": "reject", "reason": "gripper <occluded>"},
                   headers=_bearer(tok["rev"]))
    assert a.status_code == 200, a.text
    b = httpx.post(url, json={"episode": 2, "version": a.json()["version"], "verdict": "accept", "reason": ""},
                   headers=_bearer(tok["revonly"]))
    assert b.status_code == 200
    assert a.json()["state"] == "rejected" and b.json()["state"] == "accepted"
    assert before <= a.json()["at"] <= b.json()["at"] <= time.time()

    # the review-only token cannot read (the history needs read)
    assert httpx.get(url + "s", headers=_bearer(tok["revonly"])).status_code == 403
    hist = httpx.get(url + "s", headers=_bearer(tok["read"])).json()["reviews"]
    assert [(h["verdict"], h["reason"], h["token_id"]) for h in hist] == [
        ("reject", "gripper <occluded>", "anna"), ("accept", "", "bot")]
    found = httpx.get(f"{srv.url}/api/v1/episodes", params={"review": "accepted"}, headers=_bearer(tok["read"]))
    assert [e["episode_index"] for e in found.json()["episodes"]] == [2]
    assert found.json()["episodes"][0]["review"]["token_id"] == "bot"
    found = httpx.get(f"{srv.url}/api/v1/episodes", params={"review": "unreviewed"}, headers=_bearer(tok["read"]))
    assert [e["episode_index"] for e in found.json()["episodes"]] == [1, 3, 4]

    # the task page shows the state; the reason is escaped
    r = httpx.get(f"{srv.url}/tasks/pick_cup", headers=_bearer(tok["read"]))
    page = r.text
    assert "1 accepted" in page and 'data-state="accepted"' in page
    assert "script-src 'self'" in r.headers["content-security-policy"]
    r = httpx.post(url, json={"episode": 2, "version": b.json()["version"], "verdict": "flag",
                              "reason": "<script>x</script>"}, headers=_bearer(tok["rev"]))
    assert r.status_code == 200, r.text
    page = httpx.get(f"{srv.url}/tasks/pick_cup/episodes/2", headers=_bearer(tok["read"])).text
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


@contextlib.contextmanager
def _login(srv: ServerProc, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url) as c:
        r = c.post("/login", data={"token": token})
        assert r.status_code == 303 and "egopool_token" in c.cookies
        yield c


def test_browser_cookie_review_needs_same_origin_and_csrf(served) -> None:
    srv, tok, _ = served
    with _login(srv, tok["rev"]) as c:
        page = c.get("/tasks/pick_cup/episodes/1").text
        data = json.loads(re.search(r'id="episode-data">(.*?)</script>', page).group(1))
        assert data["can_review"] is True and len(data["csrf"]) == 32 and tok["rev"] not in page
        url = "/api/v1/tasks/pick_cup/episodes/1/review"
        body = {"episode": 1, "version": 0, "verdict": "flag", "reason": "check the wrist camera"}
        refused = [c.post(url, json=body),  # cookie alone
                   c.post(url, json=body, headers={"X-Egopool-CSRF": data["csrf"], "Origin": "http://evil.example"}),
                   c.post(url, json=body, headers={"X-Egopool-CSRF": "0" * 32, "Origin": srv.url}),
                   c.post(url, json=body, headers={"X-Egopool-CSRF": data["csrf"], "Sec-Fetch-Site": "cross-site"})]
        assert [r.status_code for r in refused] == [403] * 4
        assert "same origin" in refused[0].json()["message"]
        ok = c.post(url, json=body, headers={"X-Egopool-CSRF": data["csrf"], "Origin": srv.url})
        assert ok.status_code == 200 and ok.json()["token_id"] == "anna"
    with _login(srv, tok["read"]) as c:
        page = c.get("/tasks/pick_cup/episodes/1").text
        data = json.loads(re.search(r'id="episode-data">(.*?)</script>', page).group(1))
        assert data["can_review"] is False and 'id="accept"' not in page
        r = c.post(url, json=body, headers={"X-Egopool-CSRF": data["csrf"], "Origin": srv.url})
        assert r.status_code == 403 and r.json()["message"].startswith("token 'viewer' has no review scope")


def test_without_tokens_only_the_servers_own_pages_review(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "pick_cup", episodes=1)
    with ServerProc(tmp_path / "store") as srv:
        assert upload_episodes(task, server=srv.url).ok
        url = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/review"
        body = json.dumps({"episode": 1, "version": 0, "verdict": "reject", "reason": "cross-site"})
        refused = [httpx.post(url, content=body, headers={"Content-Type": "text/plain", "Origin": "http://evil.example"}),
                   httpx.post(url, content=body, headers={"Content-Type": "application/json",
                                                          "Origin": "http://evil.example"})]
        assert [r.status_code for r in refused] == [415, 403]
        ok = httpx.post(url, content=body, headers={"Content-Type": "application/json", "Origin": srv.url})
        assert ok.status_code == 200 and ok.json()["token_id"] is None
        assert len(httpx.get(url + "s").json()["reviews"]) == 1
        # a task copied into the store (not pooled here) is on the index with its total_episodes
        write_task(srv.store, "copied", episodes=2, registry=False)
        index = httpx.get(srv.url + "/").text
        assert 'href="/tasks/copied">copied</a></td><td>2 <span class="dim">(none pooled here)</span>' in index
        assert "1 rejected" in index


def test_search_filters_and_stable_paging(served) -> None:
    srv, tok, tmp_path = served
    h = _bearer(tok["read"])

    def ids(**params: object) -> list[tuple[str, int]]:
        r = httpx.get(f"{srv.url}/api/v1/episodes", params=params, headers=h)
        assert r.status_code == 200, r.text
        return [(e["task"], e["episode_index"]) for e in r.json()["episodes"]]

    other = write_task(tmp_path / "pc2", "wipe", episodes=2, first_value=3.0)
    assert upload_episodes(other, server=srv.url, token=tok["up"]).ok
    everything = [("pick_cup", n) for n in range(1, 5)] + [("wipe", 1), ("wipe", 2)]
    assert ids() == everything
    host = httpx.get(f"{srv.url}/api/v1/episodes", headers=h).json()["episodes"][0]["uploaded_by"]["client_hostname"]
    assert ids(host=host) == everything and ids(host=host + "-not") == []
    assert ids(task="wipe") == [("wipe", 1), ("wipe", 2)]
    assert ids(validation="passed") == everything and ids(validation="failed") == []
    assert ids(since="2000-01-01") == everything and ids(until="2000-01-01") == []
    now = time.time()
    assert ids(since=now + 60) == [] and ids(until=now + 60) == everything
    for bad, msg in [({"validation": "maybe"}, "filter validation='maybe' is not passed or failed"),
                     ({"limit": "0"}, "filter limit='0' is not an integer 1..500"),
                     ({"cursor": "zzz"}, "filter cursor='zzz' is not a next_cursor this server gave"),
                     ({"colour": "red"}, "unknown filter 'colour'")]:
        r = httpx.get(f"{srv.url}/api/v1/episodes", params=bad, headers=h)
        assert r.status_code == 400 and r.json()["message"].startswith(msg)

    # keyset paging: 2 per page; episodes imported and reviewed between pages are neither repeated nor
    # make one be skipped (the new ones sort after the cursor: they show up on a later page)
    first = httpx.get(f"{srv.url}/api/v1/episodes", params={"limit": 2}, headers=h).json()
    seen = [(e["task"], e["episode_index"]) for e in first["episodes"]]
    assert seen == everything[:2]
    more = write_task(tmp_path / "pc3", "pick_cup", episodes=2, first_value=9.0)
    assert upload_episodes(more, server=srv.url, token=tok["up"]).ok
    assert httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/3/review",
                      json={"episode": 3, "version": 0, "verdict": "accept"}, headers=_bearer(tok["rev"])
                      ).status_code == 200
    cursor = first["next_cursor"]
    while cursor:
        page = httpx.get(f"{srv.url}/api/v1/episodes", params={"limit": 2, "cursor": cursor}, headers=h).json()
        seen += [(e["task"], e["episode_index"]) for e in page["episodes"]]
        cursor = page["next_cursor"]
    assert seen == [("pick_cup", n) for n in range(1, 7)] + [("wipe", 1), ("wipe", 2)]
    assert len(set(seen)) == len(seen)
    # the same filters as a page: the task page pages with the same cursor
    html = httpx.get(f"{srv.url}/tasks/pick_cup", params={"limit": 4}, headers=h).text
    nxt = re.search(r'id="next-page" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    html2 = httpx.get(srv.url + nxt, headers=h).text
    assert re.findall(r'/tasks/pick_cup/episodes/(\d+)\?limit=4"', html2) == ["5", "6"]
    assert 'id="next-page"' not in html2 and 'id="first-page"' in html2


def test_search_page_query_walks_an_index_in_key_order(tmp_path: Path) -> None:
    db = ServerDB(tmp_path / "server.db")
    rows = [EpisodeRow(f"task{t}", n, f"{t:032x}", f"pc-{n % 7}", n, f"{t}-{n}", n, "pc", 1_700_000_000.0 + n,
                       300, ["ego"], {"ok": n % 11 != 0, "errors": int(n % 11 == 0), "warnings": 0})
            for t in range(4) for n in range(1, 5001)]
    db.add_episodes(rows)
    for n in range(1, 5001, 3):
        db.add_review("task1", n, "reject" if n % 2 else "accept", "blur", "anna")
    con = sqlite3.connect(tmp_path / "server.db")
    with con:  # quality facts as the preview worker stores them (its columns; the JSON is not read here)
        con.executemany("INSERT INTO quality (task, episode_index, duration_s, idle_fraction, gap_total, updated_at, "
                        "facts) VALUES (?, ?, ?, ?, ?, 0, '{}')",
                        [(r.task, r.episode_index, r.length / 30 + r.episode_index % 9, (r.episode_index % 10) / 10,
                          r.episode_index % 5 == 0) for r in rows])
        con.execute("ANALYZE")
    con.close()
    for params in [{}, {"task": "task2"}, {"host": "pc-3"}, {"review": "unreviewed"}, {"review": "rejected"},
                   {"validation": "failed", "since": "2023-11-14"}, {"task": "task1", "review": "accepted"},
                   {"task": "task1", "review": "rejected", "min_duration": "14", "max_idle_fraction": "0.5"},
                   {"task": "task3", "min_duration": "15", "has_gaps": "false"}]:
        first, cursor = search_episodes(db, parse_query({**params, "limit": "100"}))
        q = parse_query({**params, "limit": "100", **({"cursor": cursor} if cursor else {})})
        plan = explain(db, q)
        index = "review_state_verdict" if params.get("review") in ("accepted", "rejected") else "sqlite_autoindex_episodes_1"
        assert any(index in line for line in plan), (params, plan)
        assert not any("TEMP B-TREE" in line or re.match(r"SCAN e$", line) for line in plan), (params, plan)
        # and the pages are right: the cursor's page continues the first one without overlap
        second, _ = search_episodes(db, q)
        keys = [(e["task"], e["episode_index"]) for e in first + second]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
    got, _ = search_episodes(db, parse_query({"task": "task1", "review": "rejected", "limit": "3"}))
    assert [e["episode_index"] for e in got] == [1, 7, 13] and got[0]["review"]["reason"] == "blur"
    got, _ = search_episodes(db, parse_query({"task": "task1", "review": "rejected", "min_duration": "14",
                                              "max_idle_fraction": "0.5", "limit": "4"}))
    # rejected: N = 1, 7, 13, ... (every 6th); duration 10 + N % 9 >= 14 and idle (N % 10) / 10 <= 0.5
    want = [n for n in range(1, 5001, 6) if 10 + n % 9 >= 14 and n % 10 <= 5][:4]
    assert [e["episode_index"] for e in got] == want and got[0]["duration_s"] == 10 + want[0] % 9
    got, _ = search_episodes(db, parse_query({"task": "task3", "has_gaps": "true", "limit": "3"}))
    assert [e["episode_index"] for e in got] == [5, 10, 15]
    totals = task_totals(db)
    assert totals["task1"]["episodes"] == 5000 and totals["task1"]["rejected"] == 834
    assert totals["task1"]["accepted"] == 833 and totals["task1"]["unreviewed"] == 5000 - 1667
    assert totals["task0"]["duration_s"] == pytest.approx(sum(10 + n % 9 for n in range(1, 5001)))


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_server_db_gains_the_review_tables(tmp_path: Path, version: int) -> None:
    path = tmp_path / "server.db"
    db = ServerDB(path)
    db.add_episode(EpisodeRow("pick", 1, "ab" * 16, "pc-1", 1, "d1", 1, "pc", 1.0, 30, ["ego"],
                              {"ok": True, "errors": 0, "warnings": 0}))
    del db
    con = sqlite3.connect(path)
    with con:  # back to what an egopool of that schema wrote
        con.execute("DROP TABLE reviews")
        con.execute("DROP TABLE review_state")
        con.execute("DROP INDEX quality_totals")
        if version == 2:
            con.execute("DROP TABLE previews")
            con.execute("DROP TABLE quality")
        con.execute(f"PRAGMA user_version = {version}")
    con.close()
    db = ServerDB(path)
    assert db.select("PRAGMA user_version") == [(6,)]  # the current schema (6: the reviewers' events)
    assert db.episode("pick", 1) is not None and db.reviews("pick", 1) == []
    db.add_review("pick", 1, "flag", "check", "anna")
    got, _ = search_episodes(db, parse_query({"review": "flagged"}))
    assert [(e["task"], e["episode_index"], e["quality"]) for e in got] == [("pick", 1, None)]


def test_the_accepted_episodes_are_a_training_selection(served) -> None:
    """The judgement reaches training: `--episodes-from <search URL>` (egopool.curation.selection) reads
    this API page by page."""
    from egopool.curation.selection import read_selection

    srv, tok, _ = served
    for n, verdict in ((1, "accept"), (2, "reject"), (3, "accept"), (4, "accept")):
        assert httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{n}/review", headers=_bearer(tok["rev"]),
                          json={"episode": n, "version": 0, "verdict": verdict,
                                "reason": "" if verdict == "accept" else "blur"}).status_code == 200
    v4 = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/4", headers=_bearer(tok["read"])).json()["review_version"]
    assert httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/4/review", headers=_bearer(tok["rev"]),
                      json={"episode": 4, "version": v4, "verdict": "flag", "reason": "look again"}).status_code == 200
    sel = read_selection(f"{srv.url}/api/v1/episodes?task=pick_cup&review=accepted&limit=1", token=tok["read"])
    assert sel.by_task() == {"pick_cup": [1, 3]}


def test_episode_page_escapes_values_and_marks_idle_ranges() -> None:
    from egopool.server.curation_page import episode_page
    from egopool.server.db import ReviewRow

    evil = "</script><script>alert(1)</script>"
    ep = {"episode_index": 7, "length": 150, "validation": {"ok": True, "errors": 0, "warnings": 0},
          "duration_s": 5.0, "size_bytes": 1234,
          "quality": {"fps": 30.0, "idle_ranges": [[30, 90], [120, 150]], "ego_stream": "wrist",
                      "note": evil},
          "preview": {"state": "ready", "signals": "/api/v1/tasks/t/episodes/7/preview/signals.json",
                      "streams": [{"key": "depth", "kind": "depth", "video": "/d.mp4", "thumbnail": None, "fps": 30.0,
                                   "width": 8, "height": 6, "frames": 150},
                                  {"key": "wrist", "kind": "rgb", "video": "/w.mp4", "thumbnail": "/w.jpg",
                                   "fps": 30.0, "width": 8, "height": 6, "frames": 150}]},
          "uploaded_by": {"client_hostname": evil, "client_host_id": "ab" * 16, "client_episode_index": 3,
                          "upload_id": 9, "token_id": "pc", "imported_at": 0.0}}
    page = episode_page("t<b>", ep, [ReviewRow(1, "t<b>", 7, "flag", evil, "anna", 0.0)], (6, None),
                        parse_query({"host": "pc-1"}), can_review=False, csrf="")
    assert "<script>alert" not in page and "&lt;/script&gt;&lt;script&gt;alert(1)" in page
    data = json.loads(re.search(r'id="episode-data">(.*?)</script>', page).group(1))
    assert data["idle"] == [[1.0, 3.0], [4.0, 5.0]]  # rows [start, stop) at 30 fps -> s
    assert [s["key"] for s in data["streams"]] == ["wrist", "depth"]  # the ego stream is the master clock
    assert data["prev"] == "/tasks/t%3Cb%3E/episodes/6?host=pc-1" and data["next"] is None
    assert data["can_review"] is False and 'id="accept"' not in page and "<kbd>a</kbd>" not in page
