"""Reviewers' events on time ranges over real HTTP (docs/decisions.md P11-P19): made, found, edited, deleted;
refused with one clear line when the range, the scope, the CSRF header or the version is wrong."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.server.db import ServerDB  # noqa: E402
from egopool.server.review import csrf_token  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def test_events_are_made_found_edited_and_deleted_with_versions(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna_raw = add_token(tokens, "anna", ["read", "review"])
    anna = {"Authorization": f"Bearer {anna_raw}"}
    bob = {"Authorization": f"Bearer {add_token(tokens, 'bob', ['read', 'review'])}"}
    reader = {"Authorization": f"Bearer {add_token(tokens, 'viewer', ['read'])}"}
    task = write_task(tmp_path / "pc", "pick_cup", episodes=2, rows=60, video=False)  # 60 rows at 30 fps: 2 s
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        add = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/events"
        r = httpx.post(add, headers=anna, json={"episode": 1, "t0": 0.5, "t1": 1.25, "label": "slip",
                                                "note": "<b>gripper</b> slides"})
        assert r.status_code == 200, r.text
        slip = r.json()
        assert (slip["task"], slip["episode_index"], slip["t0"], slip["t1"], slip["label"], slip["note"],
                slip["token_id"], slip["version"]) == ("pick_cup", 1, 0.5, 1.25, "slip", "<b>gripper</b> slides",
                                                       "anna", 1)
        r = httpx.post(add, headers=bob, json={"episode": 1, "t0": 1.0, "t1": 2.0, "label": "occluded"})
        assert r.status_code == 200, r.text
        occ = r.json()
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/2/events", headers=bob,
                       json={"episode": 2, "t0": 0, "t1": 0.1, "label": "slip", "note": "again"})
        assert r.status_code == 200, r.text

        # refusals: one line each, nothing recorded
        for body, status, start in (
                ({"episode": 1, "t0": 1.0, "t1": 1.0, "label": "x"}, 400,
                 "an event is the range [t0, t1) with t0 < t1; episode 1 of task 'pick_cup' got t0=1 s, t1=1 s"),
                ({"episode": 1, "t0": 1.0, "t1": 2.5, "label": "x"}, 400,
                 "episode 1 of task 'pick_cup' lasts 2 s; an event cannot end at t1=2.5 s"),
                ({"episode": 1, "t0": -1, "t1": 1, "label": "x"}, 400,
                 "an event's t0 is seconds from the episode's start (a finite number >= 0), not -1"),
                ({"episode": 1, "t0": 0, "t1": 1, "label": " "}, 400, "a new event needs t0, t1 and a label"),
                ({"t0": 0, "t1": 1, "label": "x"}, 400, "an event names the episode it marks"),
                ({"episode": 2, "t0": 0, "t1": 1, "label": "x"}, 409,
                 "this event names episode 2 but was sent to episode 1 of task 'pick_cup'"),
                ({"episode": 1, "t0": 0, "t1": 1, "label": "a\x07b"}, 400, "the label holds the character U+0007")):
            r = httpx.post(add, headers=anna, json=body)
            assert r.status_code == status and r.json()["message"].startswith(start), (body, r.text)
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/9/events", headers=anna,
                       json={"episode": 9, "t0": 0, "t1": 1, "label": "x"})
        assert r.status_code == 404 and r.json()["message"] == "no pooled episode 9 in task 'pick_cup'"
        # scope review, and the verdicts' CSRF rule for a browser's cookie
        r = httpx.post(add, headers=reader, json={"episode": 1, "t0": 0, "t1": 1, "label": "x"})
        assert r.status_code == 403 and "no review scope" in r.json()["message"]
        cookies = {"egopool_token": anna_raw}
        r = httpx.post(add, cookies=cookies, json={"episode": 1, "t0": 0, "t1": 1, "label": "x"},
                       headers={"Origin": srv.url})
        assert r.status_code == 403 and "X-Egopool-CSRF" in r.json()["message"]
        r = httpx.post(add, cookies=cookies, json={"episode": 1, "t0": 0, "t1": 1, "label": "x"},
                       headers={"Origin": "http://evil.example", "X-Egopool-CSRF": csrf_token(anna_raw)})
        assert r.status_code == 403
        r = httpx.post(add, content=b'{"episode": 1}', headers={**anna, "Content-Type": "text/plain"})
        assert r.status_code == 415

        # search: every filter, scope read
        def find(**params: object) -> list[tuple[int, str]]:
            r = httpx.get(f"{srv.url}/api/v1/events", params=params, headers=reader)
            assert r.status_code == 200, r.text
            return [(e["episode_index"], e["label"]) for e in r.json()["events"]]
        assert find(task="pick_cup") == [(1, "slip"), (1, "occluded"), (2, "slip")]
        assert find(task="pick_cup", episode=1) == [(1, "slip"), (1, "occluded")]
        assert find(label="slip") == [(1, "slip"), (2, "slip")]
        assert find(q="GRIPPER") == [(1, "slip")]  # the note, case-insensitive
        assert find(q="%") == []  # a LIKE wildcard is a plain character
        assert find(reviewer="bob") == [(1, "occluded"), (2, "slip")]
        assert find(task="other") == []
        page = httpx.get(f"{srv.url}/api/v1/events", params={"limit": 2}, headers=reader).json()
        assert len(page["events"]) == 2 and page["next_cursor"] == str(occ["id"])
        rest = httpx.get(f"{srv.url}/api/v1/events", params={"limit": 2, "cursor": page["next_cursor"]},
                         headers=reader).json()
        assert [e["note"] for e in rest["events"]] == ["again"] and rest["next_cursor"] is None
        r = httpx.get(f"{srv.url}/api/v1/events", params={"episode": "one"}, headers=reader)
        assert r.status_code == 400 and r.json()["message"] == "filter episode='one' is not a whole number"
        r = httpx.get(f"{srv.url}/api/v1/events", params={"labels": "x"}, headers=reader)
        assert r.status_code == 400 and r.json()["message"] == ("unknown event filter(s) ['labels'] "
                                                          "(filters: cursor, episode, label, limit, q, reviewer, task)")
        assert httpx.get(f"{srv.url}/api/v1/events").status_code == 401

        # edit: the version it answers; a stale edit or delete is refused and changes nothing
        one = f"{srv.url}/api/v1/events/{slip['id']}"
        r = httpx.patch(one, headers=bob, json={"version": 1, "label": "slip", "note": "fingers slide", "t1": 1.5})
        assert r.status_code == 200, r.text
        assert (r.json()["version"], r.json()["note"], r.json()["t1"], r.json()["token_id"],
                r.json()["updated_by"]) == (2, "fingers slide", 1.5, "anna", "bob")
        r = httpx.patch(one, headers=anna, json={"version": 1, "note": "mine"})
        assert r.status_code == 409
        assert r.json()["message"] == (f"event {slip['id']} was edited since version 1 (now 2 by bob: 'slip' "
                                       "0.5-1.5 s); nothing was changed (reload the episode to see it)")
        r = httpx.patch(one, headers=anna, json={"version": 2, "t0": 1.6})
        assert r.status_code == 400 and "with t0 < t1" in r.json()["message"]
        r = httpx.patch(one, headers=anna, json={"note": "no version"})
        assert r.status_code == 400 and "\"version\" is missing" in r.json()["message"]
        r = httpx.request("DELETE", one, headers=anna, json={"version": 1})
        assert r.status_code == 409
        assert httpx.get(f"{srv.url}/api/v1/events", params={"q": "fingers"}, headers=reader).json()["events"][0][
            "version"] == 2
        r = httpx.request("DELETE", one, headers=anna, json={"version": 2})
        assert r.status_code == 200 and r.json()["deleted"]["label"] == "slip"
        r = httpx.request("DELETE", one, headers=anna, json={"version": 2})
        assert r.status_code == 404 and r.json()["message"].startswith(f"no event {slip['id']}")
        assert find(task="pick_cup", episode=1) == [(1, "occluded")]

        # the task page filters by event label; the search API takes the same filter
        found = httpx.get(f"{srv.url}/api/v1/episodes", params={"task": "pick_cup", "event": "slip"},
                          headers=reader).json()
        assert [e["episode_index"] for e in found["episodes"]] == [2]
        html = httpx.get(f"{srv.url}/tasks/pick_cup", params={"event": "occluded"}, headers=reader).text
        assert 'id="f-event"' in html and 'value="occluded"' in html
        assert 'href="/tasks/pick_cup/episodes/1?event=occluded"' in html
        assert "/tasks/pick_cup/episodes/2" not in html


def test_a_schema_5_file_gains_the_events_table(tmp_path: Path) -> None:
    path = tmp_path / "server.db"
    ServerDB(path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE events")
    con.execute("PRAGMA user_version = 5")
    con.commit()
    con.close()
    db = ServerDB(path)
    assert db.select("PRAGMA user_version") == [(6,)]
    assert db.select("SELECT COUNT(*) FROM events") == [(0,)]


def test_edge_requests_are_clear_refusals_and_a_no_change_edit_keeps_the_version(tmp_path: Path) -> None:
    """P30-P32: a huge id is a 404 (not a 500 from SQLite), unknown and null fields are named, an edit that
    changes nothing keeps version and updated_at, numbers out of range say the range, the 415 says "event"."""
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = {"Authorization": f"Bearer {add_token(tokens, 'anna', ['read', 'review'])}"}
    task = write_task(tmp_path / "pc", "pick_cup", episodes=1, rows=60, video=False)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        add = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/events"
        r = httpx.post(add, headers=anna, json={"episode": 1, "t0": 0.5, "t1": 1.0, "label": "slip", "note": "n"})
        assert r.status_code == 200, r.text
        ev = r.json()
        one = f"{srv.url}/api/v1/events/{ev['id']}"

        # 1. ids SQLite cannot hold are unknown events, for PATCH and DELETE; so are huge episode N elsewhere
        for big in (2**63, 10**30):
            r = httpx.patch(f"{srv.url}/api/v1/events/{big}", headers=anna, json={"version": 1, "note": "x"})
            assert r.status_code == 404 and r.json()["message"] == f"no event {big} (deleted, or never made)", r.text
            r = httpx.request("DELETE", f"{srv.url}/api/v1/events/{big}", headers=anna, json={"version": 1})
            assert r.status_code == 404 and r.json()["message"] == f"no event {big} (deleted, or never made)", r.text
            for path in (f"/api/v1/tasks/pick_cup/episodes/{big}", f"/api/v1/tasks/pick_cup/episodes/{big}/reviews",
                         f"/api/v1/tasks/pick_cup/episodes/{big}/download.zip",
                         f"/api/v1/tasks/pick_cup/episodes/{big}/files/meta/info.json",
                         f"/api/v1/tasks/pick_cup/episodes/{big}/preview/card.jpg",
                         f"/api/v1/tasks/pick_cup/episodes/{big}/download.rrd", f"/tasks/pick_cup/episodes/{big}"):
                assert httpx.get(srv.url + path, headers=anna).status_code == 404, path
            r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{big}/events", headers=anna,
                           json={"episode": 1, "t0": 0, "t1": 1, "label": "x"})
            assert r.status_code == 404, r.text
            r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{big}/review", headers=anna,
                           json={"episode": 1, "version": 0, "verdict": "accept"})
            assert r.status_code == 404, r.text

        # 4. an edit that changes nothing: 200, the event as stored (same version and updated_at)
        for body in ({"version": 1}, {"version": 1, "label": "slip", "t0": 0.5}):
            r = httpx.patch(one, headers=anna, json=body)
            assert r.status_code == 200 and r.json() == ev, (body, r.text)
        # unknown fields and nulls: one line naming them, nothing changed
        r = httpx.patch(one, headers=anna, json={"version": 1, "token_id": "x", "version2": 3})
        assert r.status_code == 400 and r.json()["message"] == ("unknown event field(s) ['token_id', 'version2']; "
                                                                "nothing was changed (fields here: episode, label, "
                                                                "note, t0, t1, version)"), r.text
        r = httpx.patch(one, headers=anna, json={"version": 1, "t0": None, "label": None})
        assert r.status_code == 400 and r.json()["message"].startswith(
            "an event's label, t0 cannot be null (leave a field out to keep it; only the note is cleared by null)")
        r = httpx.post(add, headers=anna, json={"episode": 1, "t0": 0, "t1": 1, "label": "x", "version": 1})
        assert r.status_code == 400 and r.json()["message"].startswith("unknown event field(s) ['version']")
        r = httpx.request("DELETE", one, headers=anna, json={"version": 1, "note": "why"})
        assert r.status_code == 400 and r.json()["message"].startswith("unknown event field(s) ['note']")
        assert httpx.get(f"{srv.url}/api/v1/events", headers=anna).json()["events"] == [ev]
        # the note is the one field null clears: a real change, version 2
        r = httpx.patch(one, headers=anna, json={"version": 1, "note": None})
        assert r.status_code == 200 and (r.json()["note"], r.json()["version"]) == ("", 2), r.text

        # 6. the range of a whole number; "an event" in the 415; the version of a delete goes in the body
        for body, name, low in (({"episode": -1}, "episode", 1), ({"episode": 10**30}, "episode", 1),
                                ({"version": -1}, "version", 1), ({"version": 0}, "version", 1)):
            value = next(iter(body.values()))
            r = httpx.patch(one, headers=anna, json=body)
            assert r.status_code == 400 and r.json()["message"].startswith(
                f"an event's {name} must be a whole number from {low} to {2**63 - 1}, not {value}"), r.text
        r = httpx.post(add, content=b'{"episode": 1}', headers={**anna, "Content-Type": "text/plain"})
        assert r.status_code == 415 and r.json()["message"].startswith("an event is a JSON body ("), r.text
        r = httpx.request("DELETE", one, headers=anna)
        assert r.status_code == 415 and r.json()["message"].startswith(
            'an event is a JSON body ({"version": V} for a delete)'), r.text
        r = httpx.request("DELETE", one, headers=anna, params={"version": 2})
        assert r.status_code == 400 and r.json()["message"].startswith(
            "a delete names the event's version in its JSON body, not in the URL"), r.text

        # a review: the range of its numbers, and a version from the future is not "reviewed again"
        rev = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1/review"
        r = httpx.post(rev, headers=anna, json={"episode": 1, "version": -1, "verdict": "accept"})
        assert r.status_code == 400 and r.json()["message"].startswith(
            f"a review names the version it answers: 'version' must be a whole number from 0 to {2**63 - 1}, "
            "not -1"), r.text
        r = httpx.post(rev, headers=anna, json={"episode": 1, "version": 0, "verdict": "accept"})
        assert r.status_code == 200, r.text
        now = r.json()["version"]
        r = httpx.post(rev, headers=anna, json={"episode": 1, "version": now + 999, "verdict": "accept"})
        assert r.status_code == 409 and r.json()["message"].startswith(
            f"episode 1 of task 'pick_cup' has no review version {now + 999} (the latest is {now})"), r.text
