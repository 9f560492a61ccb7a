"""The curation pages in a real headless chromium (selenium + chromium-driver) against a real server.

A simulated D405 rig (two RGB streams and a depth stream, gripper and glove signals) is uploaded;
the server builds its H.264 proxies; a reviewer signs in, filters the task page, opens an episode,
presses play (every video's ``currentTime`` advances and stays within one frame of the others,
read in the page), steps and seeks, judges with key presses, reloads (the verdicts are kept) and
goes to the next episode with ``j``. A read-only token sees no review buttons and its POST is refused.
"""

from __future__ import annotations

import json
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

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

TIMES = "return Array.from(document.querySelectorAll('#videos video')).map(v => v.currentTime)"


def _wait_previews(srv: ServerProc, token: str, task: str, n: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [httpx.get(f"{srv.url}/api/v1/tasks/{task}/episodes/{i}", headers={"Authorization": f"Bearer {token}"})
                  .json()["preview"]["state"] for i in range(1, n + 1)]
        assert "failed" not in states
        if all(s == "ready" for s in states):
            return
        time.sleep(1.0)
    raise AssertionError(f"previews not built in {timeout} s: {states}")


def _sign_in(browser, wait: WebDriverWait, url: str, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "login").click()
    wait.until(ec.presence_of_element_located((By.ID, "tasks")))


def _body_key(browser, key: str) -> None:
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).click().send_keys(key).perform()


def test_review_an_episode_in_the_browser(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    viewer = add_token(tokens, "viewer", ["read"])
    pc = simulate(tmp_path / "pc", "grasp", 3, rig="gripper_d405", seconds=4.0, seed=11)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv, \
            chromium(tmp_path / "profile", "--autoplay-policy=no-user-gesture-required") as browser:
        assert upload_episodes(pc, server=srv.url, token=up).ok
        _wait_previews(srv, anna, "grasp", 3)
        wait = WebDriverWait(browser, 60)
        _sign_in(browser, wait, srv.url, anna)

        # the index: the task with its totals and thumbnail
        row = browser.find_element(By.CSS_SELECTOR, "#tasks tbody tr")
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        assert cells[1:4] == ["grasp", "3", "12.0 s"] and cells[5] == "0 accepted · 0 rejected · 0 flagged · 3 unreviewed"
        wait.until(lambda b: b.execute_script("const i = document.querySelector('#tasks img.thumb');"
                                              "return i && i.complete && i.naturalWidth > 0"))

        # the task page's filter form: 4 s episodes pass min 2 s, none passes max 1 s
        browser.find_element(By.LINK_TEXT, "grasp").click()
        wait.until(ec.title_is("egopool · grasp"))
        browser.find_element(By.ID, "f-min_duration").send_keys("2")
        browser.find_element(By.ID, "f-validation").send_keys("passed")
        browser.find_element(By.ID, "apply").click()
        wait.until(ec.url_contains("min_duration=2"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#episodes-grasp tbody tr")
        assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["1", "2", "3"]
        assert all(r.find_elements(By.TAG_NAME, "td")[2].text == "4.0 s" for r in rows)
        browser.find_element(By.ID, "f-max_duration").send_keys("1")
        browser.find_element(By.ID, "apply").click()
        wait.until(ec.url_contains("max_duration=1"))
        assert browser.find_elements(By.CSS_SELECTOR, "#episodes-grasp tbody tr") == []
        browser.find_element(By.ID, "f-max_duration").clear()
        browser.find_element(By.ID, "apply").click()
        wait.until(lambda b: "max_duration=1" not in b.current_url)

        # the episode page: three videos (the ego RGB stream is the master), signal plots
        browser.find_element(By.LINK_TEXT, "1").click()
        wait.until(ec.title_is("egopool · grasp · 1"))
        assert "min_duration=2" in browser.current_url  # j / k stay within the filter
        wait.until(lambda b: b.execute_script(
            "return Array.from(document.querySelectorAll('#videos video')).every(v => v.readyState >= 2)"))
        keys = browser.execute_script("return Array.from(document.querySelectorAll('#videos video'))"
                                      ".map(v => v.dataset.key)")
        assert sorted(keys) == ["D405_head_depth", "D405_head_rgb", "gripper_rgb"] and keys[-1] == "D405_head_depth"
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#plots canvas")) >= 2)
        data = json.loads(browser.find_element(By.ID, "episode-data").get_attribute("textContent"))
        frame = 1.0 / data["fps"]
        assert data["fps"] == 30.0 and data["duration"] == 4.0

        # play: every video advances, all within one frame of each other
        browser.find_element(By.ID, "play").click()
        wait.until(lambda b: b.execute_script(TIMES)[0] > 0.2)
        samples = []
        for _ in range(5):
            samples.append(browser.execute_script(TIMES))
            time.sleep(0.1)
        browser.find_element(By.ID, "play").click()  # pause
        for a, b in zip(samples, samples[1:]):
            assert all(tb > ta for ta, tb in zip(a, b)), samples
        for s in samples:
            assert max(s) - min(s) <= frame, (samples, frame)

        # step: the arrow keys move every video by one frame
        _body_key(browser, Keys.ARROW_LEFT)
        start = browser.execute_script(TIMES)
        assert max(start) - min(start) <= frame / 2
        i0 = round(start[0] / frame - 0.03)
        for _ in range(3):
            _body_key(browser, Keys.ARROW_RIGHT)
        wait.until(lambda b: all(abs(t - (i0 + 3) * frame) < frame / 2 for t in b.execute_script(TIMES)))

        # seek: a click at ~25 % of the seek bar
        bar = browser.find_element(By.ID, "seek")
        ActionChains(browser).move_to_element_with_offset(bar, -bar.size["width"] // 4, 0).click().perform()
        wait.until(lambda b: all(abs(t - 1.0) < 0.3 for t in b.execute_script(TIMES)))
        after = browser.execute_script(TIMES)
        assert max(after) - min(after) <= frame

        # review with keys: a = accept; f asks for a reason, Enter sends it
        _body_key(browser, "a")
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "accepted"))
        _body_key(browser, "f")
        wait.until(lambda b: b.switch_to.active_element.get_attribute("id") == "reason")
        browser.switch_to.active_element.send_keys("depth has holes <check>", Keys.ENTER)
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "flagged"))
        browser.refresh()
        wait.until(ec.presence_of_element_located((By.ID, "review-state")))
        assert browser.find_element(By.ID, "review-state").text == "flagged depth has holes <check>"
        hist = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                for r in browser.find_elements(By.CSS_SELECTOR, "#reviews tbody tr")]
        assert [h[1:] for h in hist] == [["flagged", "depth has holes <check>", "anna"], ["accepted", "", "anna"]]
        api = httpx.get(f"{srv.url}/api/v1/tasks/grasp/episodes/1/reviews",
                        headers={"Authorization": f"Bearer {viewer}"}).json()["reviews"]
        assert [(r["verdict"], r["token_id"]) for r in api] == [("accept", "anna"), ("flag", "anna")]

        # j: the next episode under the same filter
        _body_key(browser, "j")
        wait.until(ec.title_is("egopool · grasp · 2"))
        assert "min_duration=2" in browser.current_url

        # the task page shows the state and filters on it
        browser.get(srv.url + "/tasks/grasp?review=flagged")
        rows = browser.find_elements(By.CSS_SELECTOR, "#episodes-grasp tbody tr")
        assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["1"]
        assert rows[0].find_elements(By.TAG_NAME, "td")[8].text == "flagged depth has holes <check>"

        # sign out; a read-only token: no review buttons, keys do nothing, its POST is refused
        browser.find_element(By.ID, "logout").click()
        wait.until(ec.presence_of_element_located((By.ID, "token")))
        browser.get(srv.url + "/tasks/grasp")
        assert browser.find_elements(By.ID, "token") and not browser.find_elements(By.ID, "filters")
        _sign_in(browser, wait, srv.url, viewer)
        browser.get(srv.url + "/tasks/grasp/episodes/3")
        wait.until(ec.title_is("egopool · grasp · 3"))
        assert browser.find_elements(By.ID, "accept") == [] and browser.find_elements(By.ID, "review") == []
        assert "accept" not in browser.find_element(By.ID, "shortcuts").text
        _body_key(browser, "a")
        status = browser.execute_async_script(
            "const done = arguments[0]; const d = JSON.parse(document.getElementById('episode-data').textContent);"
            "fetch(d.review_url, {method: 'POST', credentials: 'same-origin', headers: {'Content-Type': "
            "'application/json', 'X-Egopool-CSRF': d.csrf}, body: JSON.stringify({verdict: 'accept'})})"
            ".then(r => r.json().then(b => done([r.status, b.message])));")
        assert status[0] == 403 and status[1].startswith("token 'viewer' has no review scope")
        assert httpx.get(f"{srv.url}/api/v1/tasks/grasp/episodes/3/reviews",
                         headers={"Authorization": f"Bearer {viewer}"}).json()["reviews"] == []
