"""Bulk review and the task dashboard in a real headless chromium (docs/decisions.md P20, P21).

Bulk: a click and a shift-click select a range; an episode judged elsewhere after the page was loaded is
refused (listed, its row marked) while the rest are recorded; "select all matching the filter" takes every
page; a cookie POST without the CSRF header and a token without the review scope are refused. Dashboard:
linked from the task page, its per-day and per-host charts and quality histograms are drawn by uPlot with
the figures the server holds.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, previews_settled, write_task

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


def _history(srv: ServerProc, token: str, n: int) -> list[tuple[str, str]]:
    doc = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{n}/reviews",
                    headers={"Authorization": f"Bearer {token}"}).json()
    return [(r["state"], r["reason"]) for r in doc["reviews"]]


def _box(browser, n: int):
    return browser.find_element(By.CSS_SELECTOR, f"tr[data-episode-index='{n}'] input.pick")


def test_bulk_review_and_dashboard(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    reader = add_token(tokens, "viewer", ["read"])
    task = write_task(tmp_path / "pc", "pick_cup", episodes=6, rows=12)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv, \
            chromium(tmp_path / "profile") as browser:
        assert upload_episodes(task, server=srv.url, token=up).ok
        wait = WebDriverWait(browser, 30)
        browser.get(srv.url + "/login")
        browser.find_element(By.ID, "token").send_keys(anna)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))

        # 1. click 1, shift-click 3: three selected
        browser.get(srv.url + "/tasks/pick_cup")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "input.pick")))
        _box(browser, 1).click()
        ActionChains(browser).key_down(Keys.SHIFT).click(_box(browser, 3)).key_up(Keys.SHIFT).perform()
        assert browser.find_element(By.ID, "bulk-count").text == "3 selected"
        assert [_box(browser, n).is_selected() for n in range(1, 7)] == [True, True, True, False, False, False]
        if browser.find_elements(By.CSS_SELECTOR, ".partial"):  # previews building: the page would reload every 5 s
            browser.execute_script("window.__kept = 1")
            time.sleep(6)  # not while a selection is pending: it would be lost
            assert browser.execute_script("return window.__kept") == 1
        # episode 2 is judged elsewhere after this page showed it unreviewed (version 0)
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/2/review", headers={"Authorization": f"Bearer {anna}"},
                       json={"episode": 2, "version": 0, "verdict": "accept", "reason": "checked by hand"})
        assert r.status_code == 200, r.text
        # a reject needs a reason: nothing is sent without one
        browser.find_element(By.ID, "bulk-reject").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "bulk-msg"), "a reject needs a reason"))
        assert _history(srv, anna, 1) == []
        browser.find_element(By.ID, "bulk-reason").send_keys("gripper occluded")
        browser.find_element(By.ID, "bulk-reject").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "bulk-msg"), "2 rejected"))
        msg = browser.find_element(By.ID, "bulk-msg").text
        assert "1 not recorded: reviewed again since you looked (episodes 2)" in msg, msg
        assert _history(srv, anna, 1) == [("rejected", "gripper occluded")]
        assert _history(srv, anna, 3) == [("rejected", "gripper occluded")]
        assert _history(srv, anna, 2) == [("accepted", "checked by hand")]  # never overwritten
        row2 = browser.find_element(By.CSS_SELECTOR, "tr[data-episode-index='2']")
        assert "stale" in row2.get_attribute("class")
        assert browser.find_element(By.CSS_SELECTOR, "tr[data-episode-index='1'] td:last-child").text == \
            "rejected gripper occluded"
        assert browser.find_element(By.ID, "bulk-count").text == "1 selected"  # the stale one stays selected
        assert browser.execute_script("return document.activeElement === document.body")

        # 2. select all matching "unreviewed", 2 per page: the three on two pages, then accept them
        browser.get(srv.url + "/tasks/pick_cup?review=unreviewed&limit=2")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "input.pick")))
        assert len(browser.find_elements(By.CSS_SELECTOR, "input.pick")) == 2
        browser.find_element(By.ID, "select-all").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "bulk-count"), "all 3 matching selected"))
        browser.find_element(By.ID, "bulk-accept").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "bulk-msg"), "3 accepted"))
        for n in (4, 5, 6):
            assert _history(srv, anna, n) == [("accepted", "")]
        browser.refresh()  # "unreviewed" is empty now
        wait.until(ec.presence_of_element_located((By.ID, "bulk")))
        assert browser.find_elements(By.CSS_SELECTOR, "input.pick") == []

        # 3. the guards of a single verdict hold: no CSRF header, no review scope
        cookie = {"egopool_token": anna}
        body = {"verdict": "flag", "reason": "x", "episodes": [{"episode": 4, "version": 1}]}
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/reviews", cookies=cookie, json=body,
                       headers={"Origin": srv.url, "Sec-Fetch-Site": "same-origin"})
        assert r.status_code == 403 and "X-Egopool-CSRF" in r.json()["message"]
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/reviews", json=body,
                       headers={"Authorization": f"Bearer {reader}"})
        assert r.status_code == 403 and "review scope" in r.json()["message"]
        # the API's all-or-none: one stale item, nothing recorded, the finding names it
        v5 = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/selection", params={"review": "accepted"},
                       headers={"Authorization": f"Bearer {reader}"}).json()["episodes"]
        assert [n for n, _ in v5] == [2, 4, 5, 6]
        items = [{"episode": n, "version": v} for n, v in v5] + [{"episode": 1, "version": 0}]
        r = httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/reviews", headers={"Authorization": f"Bearer {anna}"},
                       json={"verdict": "flag", "reason": "recheck", "episodes": items, "all_or_none": True})
        assert r.status_code == 409, r.text
        assert [f["episode"] for f in r.json()["findings"]] == ["1"]
        assert _history(srv, anna, 5) == [("accepted", "")]

        # 4. the dashboard: linked from the task page; figures from server.db once the facts are measured
        previews_settled(tmp_path / "store", timeout=300)
        deadline = time.monotonic() + 120
        while True:
            dash = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/dashboard",
                             headers={"Authorization": f"Bearer {reader}"}).json()
            if dash["totals"]["measured"] == 6 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        t = dash["totals"]
        assert (t["episodes"], t["accepted"], t["rejected"], t["flagged"], t["unreviewed"], t["measured"]) == \
            (6, 4, 2, 0, 0, 6)
        assert t["hours"] == pytest.approx(6 * 12 / 30 / 3600)
        assert [(h["host"], h["episodes"], h["rejected"]) for h in dash["hosts"]] == [(dash["hosts"][0]["host"], 6, 2)]
        assert sum(d["episodes"] for d in dash["days"]) == 6
        assert sum(dash["facts"]["duration_s"]["counts"]) == 6 and dash["facts"]["duration_s"]["missing"] == 0
        browser.get(srv.url + "/tasks/pick_cup")
        browser.find_element(By.ID, "dashboard-link").click()
        wait.until(ec.title_is("egopool · pick_cup · dashboard"))
        wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
        assert "6 pooled episodes" in browser.find_element(By.ID, "dash-summary").text
        assert "2 rejected" in browser.find_element(By.ID, "dash-summary").text
        days = browser.find_element(By.ID, "chart-days")
        assert days.get_attribute("data-kind") == "stacked" and days.get_attribute("data-points") == str(len(dash["days"]))
        assert browser.find_element(By.ID, "chart-hosts").get_attribute("data-points") == "1"
        hist = browser.find_element(By.ID, "hist-duration_s")
        assert hist.get_attribute("data-kind") == "histogram"
        assert hist.get_attribute("data-points") == str(len(dash["facts"]["duration_s"]["counts"]))
        # uPlot drew real pixels (a canvas with bars: more than one colour in it)
        colours = browser.execute_script(
            "const c = document.querySelector('#chart-hosts canvas'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; const s = new Set();"
            "for (let i = 0; i < d.length; i += 4 * 97) s.add(d[i] + ',' + d[i+1] + ',' + d[i+2]); return s.size;")
        assert colours > 3
        # hover the host bar: the legend reads each state's own count (not the stacked sum)
        over = browser.find_element(By.CSS_SELECTOR, "#chart-hosts .u-over")
        ActionChains(browser).move_to_element(over).perform()
        legend = browser.find_element(By.CSS_SELECTOR, "#chart-hosts .u-legend").text
        assert "accepted" in legend and "4" in legend and "rejected" in legend
