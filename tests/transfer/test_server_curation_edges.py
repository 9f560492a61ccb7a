"""The episode page at its edges, in a real headless chromium against a real server (docs/decisions.md Q22).

The plots' range labels carry enough digits to tell a varying series' ends apart; an episode whose
videos all failed to build still draws its signal plots and its keys do nothing harmful; j / k / ←
at the first and last episode stay put; the page says why there is no player.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, simulate

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("selenium.webdriver")

from browser_helpers import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from egopool import open_task  # noqa: E402
from egopool.server.curation_page import episode_page  # noqa: E402
from egopool.server.search import parse_query  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

RANGES = "return Array.from(document.querySelectorAll('#plots canvas[data-range]')).map(c => [c.dataset.group, c.dataset.range])"
DRAWN = ("return Array.from(document.querySelectorAll('#plots canvas')).map(c => "
         "c.getContext('2d').getImageData(2, c.height - 2, 1, 1).data[3])")


def _settled(url: str, token: str, task: str, n: int, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ep = httpx.get(f"{url}/api/v1/tasks/{task}/episodes/{n}", headers={"Authorization": f"Bearer {token}"}).json()
        if ep["preview"]["state"] != "pending":
            return ep
        time.sleep(0.5)
    raise AssertionError(f"preview of {task} {n} not settled in {timeout} s")


def _key(browser, key: str) -> None:
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).click().send_keys(key).perform()


def _errors(browser) -> list[str]:
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]


def _check_ranges(ranges: list[list[str]], signals: dict) -> None:
    """Each line plot's label ``lo … hi`` is within 1 % of the span of its series' true ends."""
    groups: dict[str, list[float]] = {}
    for s in signals["series"]:
        key = (s.get("group") or s["name"]) + (f" [{s['unit']}]" if s.get("unit") else "")
        groups.setdefault(key, []).extend(v for v in s["values"] if v is not None)
    assert ranges and {g for g, _ in ranges} == set(groups)
    for group, label in ranges:
        lo, hi = min(groups[group]), max(groups[group])
        if hi == lo:
            assert label.endswith("(constant)")
            continue
        a, b = label.split(" … ")
        assert a != b, (group, label)
        assert abs(float(a) - lo) <= (hi - lo) / 100 and abs(float(b) - hi) <= (hi - lo) / 100, (group, label, lo, hi)


def test_episode_page_edges_in_the_browser(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    pc = simulate(tmp_path / "pc", "grasp", 2, rig="gripper_d405", seconds=2.0, seed=5)
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens)) as srv, chromium(tmp_path / "profile") as browser:
        assert upload_episodes(pc, server=srv.url, token=up).ok
        assert _settled(srv.url, anna, "grasp", 1)["preview"]["state"] == "ready"
        assert _settled(srv.url, anna, "grasp", 2)["preview"]["state"] == "ready"
        # episode 2's videos become unreadable: its rebuilt preview has no player, only signals
        for key in ("D405_head_rgb", "gripper_rgb", "D405_head_depth"):
            path = open_task(store / "grasp").episode(2).stream_path(key)
            path.write_bytes(path.read_bytes()[:600])
        assert httpx.post(f"{srv.url}/api/v1/tasks/grasp/episodes/2/preview",
                          headers={"Authorization": f"Bearer {anna}"}).status_code == 200
        time.sleep(0.5)
        ep2 = _settled(srv.url, anna, "grasp", 2)
        assert ep2["preview"]["state"] == "failed" and ep2["preview"]["streams"] == [] and ep2["preview"]["signals"]

        wait = WebDriverWait(browser, 60)
        browser.get(srv.url + "/login")
        browser.find_element(By.ID, "token").send_keys(anna)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))

        # episode 1: range labels tell the ends of every varying series apart
        browser.get(srv.url + "/tasks/grasp/episodes/1")
        wait.until(lambda b: len(b.execute_script(RANGES)) >= 3)
        signals = httpx.get(srv.url + httpx.get(f"{srv.url}/api/v1/tasks/grasp/episodes/1", headers={
            "Authorization": f"Bearer {anna}"}).json()["preview"]["signals"], headers={"Authorization": f"Bearer {anna}"}
                            ).json()
        _check_ranges(browser.execute_script(RANGES), signals)
        # the first episode: k and ← stay put
        wait.until(lambda b: b.execute_script("return document.querySelector('#videos video').readyState >= 2"))
        here = browser.current_url
        _key(browser, "k")
        _key(browser, Keys.ARROW_LEFT)
        assert re.fullmatch(r"0\.00\d s · frame 0 / 59", browser.find_element(By.ID, "clock").text)
        assert browser.current_url == here and not browser.find_elements(By.ID, "prev")

        # episode 2 (the last): no player, the reason said, the plots drawn; j, space and → do no harm
        browser.get(srv.url + "/tasks/grasp/episodes/2")
        wait.until(lambda b: len(b.execute_script(RANGES)) >= 3)
        assert browser.find_elements(By.CSS_SELECTOR, "#videos video") == []
        assert re.match(r"No preview: .*D405_head_rgb", browser.find_element(By.ID, "videos").text)
        wait.until(lambda b: all(a == 255 for a in b.execute_script(DRAWN)))  # white plot background, not blank
        here = browser.current_url
        browser.get_log("browser")  # drop what loading logged
        for key in ("j", " ", Keys.ARROW_RIGHT, Keys.ARROW_LEFT):
            _key(browser, key)
        assert browser.current_url == here and not browser.find_elements(By.ID, "next")
        assert _errors(browser) == []


def test_episode_page_says_why_it_has_no_player() -> None:
    ep = {"episode_index": 3, "length": 30, "validation": {"ok": True}, "duration_s": 1.0, "size_bytes": 10,
          "quality": None, "uploaded_by": None,
          "preview": {"state": "ready", "streams": [], "signals": "/s.json", "enabled": True}}
    page = episode_page("t", ep, [], (None, None), parse_query({}), can_review=False, csrf="")
    assert "This episode has no camera stream; its signals are below." in page and "No preview: ready" not in page
    ep["preview"] = {"state": "pending", "streams": [], "signals": None, "enabled": False}
    page = episode_page("t", ep, [], (None, None), parse_query({}), can_review=False, csrf="")
    assert "This server builds no previews" in page and "being built" not in page
    ep["preview"] = {"state": "failed", "error": "stream 'side' could not be read", "signals": "/s.json",
                     "streams": [{"key": "head", "kind": "rgb", "video": "/h.mp4", "fps": 30.0}], "enabled": True}
    page = episode_page("t", ep, [], (None, None), parse_query({}), can_review=False, csrf="")
    assert 'id="video-0"' in page and "Part of the preview failed: stream &#x27;side&#x27; could not be read" in page
    # an episode copied into the store (no server.db row) cannot be judged: no buttons whose POST 404s
    page = episode_page("t", ep, [], (None, None), parse_query({}), can_review=True, csrf="x")
    assert 'id="accept"' not in page and "<kbd>a</kbd>" not in page and "it cannot be judged here" in page
    ep["uploaded_by"] = {"client_hostname": "pc", "client_host_id": "ab" * 16, "client_episode_index": 3,
                         "upload_id": 9, "token_id": "pc", "imported_at": 0.0}
    page = episode_page("t", ep, [], (None, None), parse_query({}), can_review=True, csrf="x")
    assert 'id="accept"' in page and "<kbd>a</kbd>" in page
