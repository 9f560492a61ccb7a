"""A verdict names its episode and the review version it answers (docs/decisions.md P1, P2), over real HTTP.

A stale verdict (a second tab, a repeated request) or one sent to another episode's URL is a one-line 409
and is not recorded; undo takes back the last verdict in force and is appended like any other row.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.server.db import EpisodeRow, ReviewConflict, ServerDB  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def test_stale_duplicate_and_misaddressed_verdicts_are_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = {"Authorization": f"Bearer {add_token(tokens, 'anna', ['read', 'review'])}"}
    bob = {"Authorization": f"Bearer {add_token(tokens, 'bob', ['read', 'review'])}"}
    task = write_task(tmp_path / "pc", "pick_cup", episodes=2)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        ep = f"{srv.url}/api/v1/tasks/pick_cup/episodes/1"
        seen = httpx.get(ep, headers=anna).json()
        assert seen["review_version"] == 0 and seen["review"] is None

        r = httpx.post(ep + "/review", headers=anna,
                       json={"episode": 1, "version": 0, "verdict": "reject", "reason": "gripper occluded"})
        assert r.status_code == 200, r.text
        v1 = r.json()["version"]
        assert v1 > 0 and r.json()["current"]["state"] == "rejected"
        # the same request again (a double Enter), and bob's accept from a page loaded before it: refused
        for who, body in ((anna, {"episode": 1, "version": 0, "verdict": "reject", "reason": "gripper occluded"}),
                          (bob, {"episode": 1, "version": 0, "verdict": "accept"})):
            r = httpx.post(ep + "/review", headers=who, json=body)
            assert r.status_code == 409, r.text
            msg = r.json()["message"]
            assert msg == (f"episode 1 of task 'pick_cup' was reviewed again since review version 0 (now {v1}): "
                           "it is rejected 'gripper occluded' by anna now; nothing was recorded (reload the episode to see its "
                           "current review)"), msg
        # a verdict sent to episode 2's URL but naming episode 1 (a page that moved on): refused
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/2/review", headers=anna,
                       json={"episode": 1, "version": 0, "verdict": "accept"})
        assert r.status_code == 409 and r.json()["message"].startswith("this verdict names episode 1 but was sent "
                                                                       "to episode 2")
        hist = httpx.get(ep + "/reviews", headers=anna).json()
        assert [(h["verdict"], h["reason"]) for h in hist["reviews"]] == [("reject", "gripper occluded")]
        assert hist["version"] == v1
        assert httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/2/reviews", headers=anna).json()["reviews"] == []

        # flag over the reject, then undo: the reject is in force again; undo again: unreviewed
        r = httpx.post(ep + "/review", headers=bob, json={"episode": 1, "version": v1, "verdict": "flag",
                                                          "reason": "look again"})
        assert r.status_code == 200 and r.json()["current"]["state"] == "flagged"
        r = httpx.post(ep + "/review", headers=anna, json={"episode": 1, "version": r.json()["version"],
                                                           "verdict": "undo"})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "undone" and r.json()["current"]["reason"] == "gripper occluded"
        found = httpx.get(f"{srv.url}/api/v1/episodes", params={"review": "rejected"}, headers=anna).json()
        assert [e["episode_index"] for e in found["episodes"]] == [1]
        r = httpx.post(ep + "/review", headers=anna, json={"episode": 1, "version": r.json()["version"],
                                                           "verdict": "undo"})
        assert r.status_code == 200 and r.json()["current"] is None
        r2 = httpx.post(ep + "/review", headers=anna, json={"episode": 1, "version": r.json()["version"],
                                                            "verdict": "undo"})
        assert r2.status_code == 409 and r2.json()["message"].startswith("episode 1 of task 'pick_cup' has no verdict to undo")
        found = httpx.get(f"{srv.url}/api/v1/episodes", params={"review": "unreviewed"}, headers=anna).json()
        assert [e["episode_index"] for e in found["episodes"]] == [1, 2]
        hist = httpx.get(ep + "/reviews", headers=anna).json()["reviews"]
        assert [h["state"] for h in hist] == ["rejected", "flagged", "undone", "undone"]
        assert httpx.get(ep, headers=anna).json()["review_version"] == hist[-1]["id"]


def test_conflict_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    db = ServerDB(tmp_path / "server.db")
    db.add_episodes([EpisodeRow("t", 1, "0" * 32, "pc", 1, "h", 1, "pc", 1.0, 10, ["ego"], {"ok": True})])
    row, cur = db.add_review("t", 1, "accept", "", "anna", version=0)
    assert cur == row and db.review_version("t", 1) == row.id
    with pytest.raises(ReviewConflict) as exc:
        db.add_review("t", 1, "reject", "blur", "bob", version=0)
    assert exc.value.current == row and exc.value.version == row.id
    assert db.reviews("t", 1) == [row] and db.current_review("t", 1) == row
    assert db.select("SELECT review_id, verdict FROM review_state") == [(row.id, "accepted")]
