"""The episode player opens on frame 0 and its clock and slider agree, in a real headless chromium
(docs/decisions.md P5, P6): no middle-frame poster, every stream at 0 s; the slider counts frames
0 .. N-1 and the last frame reads "frame N-1 / N-1" (never "frame N / N-1"); speed 0.25-4x sets every
video's rate; loop goes back to frame 0 and keeps playing. Preview files are same-origin resources.
"""

from __future__ import annotations

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
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

VIDEOS = "return Array.from(document.querySelectorAll('#videos video'))"


def wait_ready(srv: ServerProc, token: str, task: str, n: int, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ep = httpx.get(f"{srv.url}/api/v1/tasks/{task}/episodes/{n}", headers={"Authorization": f"Bearer {token}"}).json()
        assert ep["preview"]["state"] != "failed", ep["preview"]
        if ep["preview"]["state"] == "ready":
            return ep
        time.sleep(1.0)
    raise AssertionError(f"preview of {task} {n} not built in {timeout} s")


def test_player_opens_on_frame_zero_and_counts_frames(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    pc = simulate(tmp_path / "pc", "grasp", 1, rig="gripper_d405", seconds=2.0, seed=3)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv, \
            chromium(tmp_path / "profile", "--autoplay-policy=no-user-gesture-required",
                     "--force-device-scale-factor=2") as browser:
        assert upload_episodes(pc, server=srv.url, token=up).ok
        ep = wait_ready(srv, anna, "grasp", 1)
        video = ep["preview"]["streams"][0]["video"]
        head = httpx.get(srv.url + video, headers={"Authorization": f"Bearer {anna}", "Range": "bytes=0-99"})
        assert head.status_code == 206 and head.headers["cross-origin-resource-policy"] == "same-origin"

        wait = WebDriverWait(browser, 60)
        browser.get(srv.url + "/login")
        browser.find_element(By.ID, "token").send_keys(anna)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))
        browser.get(srv.url + "/tasks/grasp/episodes/1")
        wait.until(lambda b: b.execute_script(VIDEOS + ".length === 3 && " + VIDEOS[7:] + ".every(v => v.readyState >= 2)"))
        # frame 0 everywhere: no poster (the thumbnail is the middle frame), every video at 0 s
        state = browser.execute_script(VIDEOS + ".map(v => [v.poster, v.currentTime, v.dataset.key])")
        assert len(state) == 3 and all(p == "" and t == 0 for p, t, _ in state), state
        n = 60  # 2 s at 30 fps: frames 0 .. 59
        seek = browser.find_element(By.ID, "seek")
        assert seek.get_attribute("max") == str(n - 1) and seek.get_attribute("value") == "0"
        assert browser.find_element(By.ID, "clock").text == f"0.000 s · frame 0 / {n - 1}"

        # the last frame: slider and clock both say 59, and a step forward stays there
        browser.execute_script("const s = document.getElementById('seek'); s.value = s.max;"
                               "s.dispatchEvent(new Event('input'))")
        wait.until(lambda b: b.find_element(By.ID, "clock").get_attribute("data-frame") == str(n - 1))
        browser.find_element(By.TAG_NAME, "h1").click()
        ActionChains(browser).send_keys(Keys.ARROW_RIGHT).perform()
        try:
            # at or past the last frame's start (Chromium may put a video that reached its end at its
            # duration): each shows frame n - 1
            wait.until(lambda b: all((n - 1) / 30 <= t <= 2.0
                                     for t in b.execute_script(VIDEOS + ".map(v => v.currentTime)")))
        except Exception:
            raise AssertionError(browser.execute_script(VIDEOS + ".map(v => [v.currentTime, v.duration])")) from None
        clock = browser.find_element(By.ID, "clock").text
        assert clock.endswith(f"frame {n - 1} / {n - 1}") and seek.get_attribute("value") == str(n - 1), clock
        # play from the last frame: starts again at 0; a step back from 0 stays at frame 0
        Select(browser.find_element(By.ID, "speed")).select_by_value("2")
        assert browser.execute_script("return document.activeElement === document.body")
        assert browser.execute_script(VIDEOS + ".map(v => v.playbackRate)") == [2, 2, 2]
        browser.find_element(By.ID, "loop").click()
        browser.find_element(By.ID, "play").click()
        # loop: the master passes the end and comes back near 0 while still playing
        seen: list[float] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen.append(browser.execute_script(VIDEOS + "[0].currentTime"))
            if len(seen) > 2 and seen[-1] < seen[-2] - 0.5 and max(seen) > 1.5:
                break
            time.sleep(0.05)
        assert len(seen) > 2 and seen[-1] < seen[-2] - 0.5, seen
        assert browser.execute_script(VIDEOS + "[0].paused") is False
        rates = browser.execute_script(VIDEOS + ".map(v => v.playbackRate)")
        assert rates[0] == 2 and all(1.0 <= r <= 3.0 for r in rates), rates  # steered around 2x
        browser.find_element(By.ID, "play").click()  # pause: every stream on the master's frame
        wait.until(lambda b: len({round(t * 30 - 0.03) for t in b.execute_script(VIDEOS + ".map(v => v.currentTime)")})
                   == 1)
        frame = int(browser.find_element(By.ID, "clock").get_attribute("data-frame"))
        assert seek.get_attribute("value") == str(frame)
        browser.find_element(By.ID, "step-back").click()
        browser.find_element(By.ID, "step-back").click()
        assert browser.find_element(By.ID, "clock").get_attribute("data-frame") == str(max(0, frame - 2))

        # the plots (uPlot, vendored; P10): axes with units, a legend naming every series, HiDPI canvases
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#plots .plot")) >= 2)
        plots = browser.find_elements(By.CSS_SELECTOR, "#plots .plot")
        groups = [p.get_attribute("data-group") for p in plots]
        assert "gripper [%]" in groups, groups
        grip = plots[groups.index("gripper [%]")]
        assert grip.get_attribute("data-axes") == "time [s] | [%]"
        for p in plots:  # every series named in the legend, none drawn off the canvas
            labels = [e.text for e in p.find_elements(By.CSS_SELECTOR, ".u-legend .u-series .u-label")]
            assert labels[0] == "t [s]" and all(labels[1:]), labels
        ratio = browser.execute_script("const c = document.querySelector('#plots .plot canvas');"
                                       "return c.width / c.getBoundingClientRect().width")
        assert abs(ratio - 2.0) < 0.02, ratio
        over = grip.find_element(By.CSS_SELECTOR, ".u-over")
        # hover: the legend shows the value at the cursor
        ActionChains(browser).move_to_element_with_offset(over, 0, 0).perform()
        value = grip.find_elements(By.CSS_SELECTOR, ".u-legend .u-series .u-value")[1].text
        assert value not in ("", "—") and float(value) == float(value), value
        # click: the players go to that time (the middle of the plot: about frame 29 of 0..59)
        ActionChains(browser).move_to_element_with_offset(over, 0, 0).click().perform()
        wait.until(lambda b: abs(int(b.find_element(By.ID, "clock").get_attribute("data-frame")) - 29) <= 2)
        # drag: zoom on the time axis; double-click: back
        def axis() -> tuple[float, float]:
            return float(grip.get_attribute("data-xmin")), float(grip.get_attribute("data-xmax"))

        before = axis()
        assert before[0] == 0 and before[1] > 1.9
        w = over.size["width"]
        ActionChains(browser).move_to_element_with_offset(over, -w // 4, 0).click_and_hold() \
            .move_by_offset(w // 8, 0).release().perform()
        wait.until(lambda b: axis() != before)
        lo, hi = axis()
        assert 0.3 < lo < hi < 1.0 and hi - lo < 0.5, (lo, hi)  # about a quarter .. three eighths of 2 s
        ActionChains(browser).double_click(over).perform()
        wait.until(lambda b: axis() == before)
