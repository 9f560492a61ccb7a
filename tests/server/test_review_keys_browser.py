"""Review that cannot misfire, in a real headless chromium (docs/decisions.md P1-P4).

The exact key sequence of issue 26 (`r`, "gripper occluded", Enter, `j`, Escape, `a`) leaves the episode
rejected and shows the next one; after a verdict no field keeps the focus (a later Enter sends nothing);
typing in the reason field never fires a shortcut; a second tab's verdict on a page loaded before the
first tab's is refused with its message and not recorded; `u` undoes; auto-advance goes to the next
unreviewed episode.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

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

ACTIVE = "const a = document.activeElement; return a === document.body ? 'body' : a.tagName + '#' + a.id"


def _sign_in(browser, wait: WebDriverWait, url: str, token: str) -> None:
    browser.get(url + "/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.ID, "login").click()
    wait.until(ec.presence_of_element_located((By.ID, "tasks")))


def _keys(browser, *keys: str) -> None:
    """Click the heading (no field focused), then type ``keys`` in one go, as a fast reviewer does."""
    chain = ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).click()
    for k in keys:
        chain = chain.send_keys(k)
    chain.perform()


def _history(srv: ServerProc, token: str, n: int) -> list[tuple[str, str, str]]:
    doc = httpx.get(f"{srv.url}/api/v1/tasks/pick_cup/episodes/{n}/reviews",
                    headers={"Authorization": f"Bearer {token}"}).json()
    return [(r["state"], r["reason"], r["token_id"]) for r in doc["reviews"]]


def test_review_keys_cannot_misfire(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    task = write_task(tmp_path / "pc", "pick_cup", episodes=5)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens), "--no-previews") as srv, \
            chromium(tmp_path / "profile") as browser:
        assert upload_episodes(task, server=srv.url, token=up).ok
        wait = WebDriverWait(browser, 30)
        _sign_in(browser, wait, srv.url, anna)
        # no quality facts without previews: the totals say they are partial (P9)
        assert browser.find_element(By.CSS_SELECTOR, "#tasks .partial").text == "(partial: 0 of 5 episodes measured)"

        # 1. the exact sequence: the reject is sent by Enter, j goes on, Escape and a judge nothing
        browser.get(srv.url + "/tasks/pick_cup/episodes/1")
        wait.until(ec.title_is("egopool · pick_cup · 1"))
        _keys(browser, "r", "gripper occluded", Keys.ENTER, "j", Keys.ESCAPE, "a")
        wait.until(ec.title_is("egopool · pick_cup · 2"))
        assert _history(srv, anna, 1) == [("rejected", "gripper occluded", "anna")]
        # the `a` reached either the page being left (ignored: it is leaving) or episode 2 (accepted there)
        assert _history(srv, anna, 2) in ([], [("accepted", "", "anna")])
        browser.get(srv.url + "/tasks/pick_cup/episodes/1")
        assert browser.find_element(By.ID, "review-state").text == "rejected gripper occluded"

        # 2. after a verdict by button the focus is nowhere: Enter and Space send nothing more
        browser.get(srv.url + "/tasks/pick_cup/episodes/2")
        before = _history(srv, anna, 2)
        browser.find_element(By.ID, "reason").send_keys("fine")
        browser.find_element(By.ID, "accept").click()
        wait.until(lambda b: len(_history(srv, anna, 2)) == len(before) + 1)
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-msg"), "accepted"))
        assert browser.execute_script(ACTIVE) == "body"
        ActionChains(browser).send_keys(Keys.ENTER).send_keys(Keys.ENTER).perform()
        assert browser.find_element(By.ID, "reason").get_attribute("value") == ""
        # typing in the reason field is text, never a shortcut (a, r, f, u, j, k all typed)
        browser.find_element(By.ID, "reason").send_keys("a raw fuji k")
        assert browser.find_element(By.ID, "reason").get_attribute("value") == "a raw fuji k"
        assert browser.title == "egopool · pick_cup · 2"
        browser.find_element(By.ID, "reason").send_keys(Keys.ESCAPE)  # Escape drops the text and the focus
        assert browser.find_element(By.ID, "reason").get_attribute("value") == ""
        assert browser.execute_script(ACTIVE) == "body"
        assert _history(srv, anna, 2) == [*before, ("accepted", "fine", "anna")]

        # 3. two tabs on episode 3: the second tab's verdict answers a version that is gone
        browser.get(srv.url + "/tasks/pick_cup/episodes/3")
        first = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(srv.url + "/tasks/pick_cup/episodes/3")
        second = browser.current_window_handle
        browser.switch_to.window(first)
        _keys(browser, "r", "blurred", Keys.ENTER)
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "rejected"))
        browser.switch_to.window(second)
        _keys(browser, "a")
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-msg"), "was reviewed again"))
        msg = browser.find_element(By.ID, "review-msg").text
        assert "it is rejected 'blurred' by anna now; nothing was recorded" in msg, msg
        assert browser.find_element(By.ID, "review-state").text == "unreviewed"  # the page says what it knew
        assert _history(srv, anna, 3) == [("rejected", "blurred", "anna")]
        browser.refresh()
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "rejected blurred"))
        _keys(browser, "a")
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "accepted"))
        # 4. undo: the reject is in force again, on the page and in the search
        _keys(browser, "u")
        wait.until(ec.text_to_be_present_in_element((By.ID, "review-state"), "rejected blurred"))
        assert [h[0] for h in _history(srv, anna, 3)] == ["rejected", "accepted", "undone"]
        found = httpx.get(f"{srv.url}/api/v1/episodes", params={"review": "rejected"},
                          headers={"Authorization": f"Bearer {anna}"}).json()["episodes"]
        assert [e["episode_index"] for e in found] == [1, 3]
        browser.close()
        browser.switch_to.window(first)

        # 5. auto-advance: after a verdict, the next unreviewed episode (4 was judged elsewhere: 5)
        assert httpx.post(f"{srv.url}/api/v1/tasks/pick_cup/episodes/4/review", headers={"Authorization": f"Bearer {anna}"},
                          json={"episode": 4, "version": 0, "verdict": "accept"}).status_code == 200
        browser.get(srv.url + "/tasks/pick_cup/episodes/3")
        browser.find_element(By.ID, "auto-advance").click()
        assert browser.execute_script(ACTIVE) == "body"  # the checkbox does not keep the focus
        _keys(browser, "f", "check depth", Keys.ENTER)
        wait.until(ec.title_is("egopool · pick_cup · 5"))
        assert _history(srv, anna, 3)[-1] == ("flagged", "check depth", "anna")
        assert browser.find_element(By.ID, "auto-advance").is_selected()  # kept for the next episode
