"""Quality facts on the pages, in a real headless chromium (docs/decisions.md P7-P9).

Two episodes written with the writer (a frozen stream, one 200 ms stall, 10 and 3 dark frames) are
uploaded; the task page says "119 frozen frames · 1 gap · 10 dark/bright frames" (no blurred frame), filters
on frozen streams, says how many episodes have no idle share instead of hiding them silently, and sorts by
a fact; the episode page plays the stream that moves as its master, names the frozen one, draws the marks
and seeks where the timeline is clicked. A 480-character reason wraps; the pages carry a viewport.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from facts_episode import write_facts_task
from test_player_browser import wait_ready
from transfer_helpers import ServerProc

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("selenium.webdriver")

from browser_helpers import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def _ns(browser, task: str = "facts") -> list[str]:
    return [r.find_elements(By.TAG_NAME, "td")[1].text
            for r in browser.find_elements(By.CSS_SELECTOR, f"#episodes-{task} tbody tr")]


def test_quality_facts_on_the_pages(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    task = write_facts_task(tmp_path / "pc", dark=(10, 3))
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv, chromium(tmp_path / "profile") as browser:
        assert upload_episodes(task, server=srv.url, token=up).ok
        wait_ready(srv, anna, "facts", 1)
        wait_ready(srv, anna, "facts", 2)
        wait = WebDriverWait(browser, 60)
        browser.get(srv.url + "/login")
        browser.find_element(By.ID, "token").send_keys(anna)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))
        assert browser.find_element(By.CSS_SELECTOR, "meta[name=viewport]").get_attribute("content") == \
            "width=device-width, initial-scale=1"
        assert not browser.find_elements(By.CSS_SELECTOR, ".partial")  # every episode measured: totals whole
        # the index thumbnail is the moving stream's (a frozen camera shows the same picture everywhere)
        assert "/preview/wrist_rgb.jpg" in browser.find_element(By.CSS_SELECTOR, "#tasks img.thumb").get_attribute("src")

        browser.get(srv.url + "/tasks/facts")
        cells = [r.find_elements(By.TAG_NAME, "td")[7].text
                 for r in browser.find_elements(By.CSS_SELECTOR, "#episodes-facts tbody tr")]
        assert cells == ["119 frozen frames · 1 gap · 10 dark/bright frames",
                         "119 frozen frames · 1 gap · 3 dark/bright frames"], cells
        # sort this page by a fact, both ways
        Select(browser.find_element(By.ID, "sort")).select_by_value("exposure_outliers")
        assert _ns(browser) == ["2", "1"]
        browser.find_element(By.ID, "sort-desc").click()
        assert _ns(browser) == ["1", "2"] and browser.current_url.endswith("#sort=exposure_outliers:desc")
        # the frozen filter; an idle filter says that no episode has an idle share (no trajectory, no gripper)
        browser.get(srv.url + "/tasks/facts?has_frozen=false")
        assert _ns(browser) == []
        browser.get(srv.url + "/tasks/facts?has_frozen=true")
        assert _ns(browser) == ["1", "2"] and not browser.find_elements(By.ID, "missing")
        browser.get(srv.url + "/tasks/facts?max_idle_fraction=0.3")
        assert _ns(browser) == []
        assert browser.find_element(By.ID, "missing").text == (
            "2 episodes of this task have no idle share value (not computed yet, or the rig cannot have one): "
            "not shown by max_idle_fraction")

        # the episode page: the moving stream is the master clock; the frozen one is named; marks; click-to-seek
        browser.get(srv.url + "/tasks/facts/episodes/1")
        wait.until(lambda b: b.execute_script("const v = document.querySelectorAll('#videos video');"
                                              "return v.length === 2 && Array.from(v).every(x => x.readyState >= 2)"))
        keys = browser.execute_script("return Array.from(document.querySelectorAll('#videos video'))"
                                      ".map(v => v.dataset.key)")
        assert keys == ["wrist_rgb", "head_rgb"]
        assert browser.find_element(By.CSS_SELECTOR, "#videos .frozen").text == "frozen: 119 held frames"
        marks = {li.get_attribute("data-mark"): li.text for li in browser.find_elements(By.CSS_SELECTOR, "#marks li")}
        assert marks == {"gap": "gap: 1", "frozen": "frozen frames: 119", "exposure": "dark/bright frames: 10"}
        line = browser.find_element(By.ID, "timeline")
        # 84.5 / 120 of the width: inside the dark frames (rows 80..89)
        x = round(line.size["width"] * (84.5 / 120 - 0.5))
        ActionChains(browser).move_to_element_with_offset(line, x, 0).click().perform()
        wait.until(lambda b: abs(int(b.find_element(By.ID, "clock").get_attribute("data-frame")) - 84) <= 1)

        # a 480-character reason wraps: the task page is no wider than the window
        reason = "gripper occluded by the left hand " * 14
        assert httpx.post(f"{srv.url}/api/v1/tasks/facts/episodes/1/review", headers={"Authorization": f"Bearer {anna}"},
                          json={"episode": 1, "version": 0, "verdict": "reject", "reason": reason}).status_code == 200
        browser.get(srv.url + "/tasks/facts")
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
        browser.set_window_size(390, 844)
        browser.get(srv.url + "/tasks/facts/episodes/1")
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
