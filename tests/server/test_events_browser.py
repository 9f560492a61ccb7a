"""Events on time ranges in a real headless chromium (docs/decisions.md P13): `[` at one frame and `]` at a
later one mark both frames; a drag on the timeline marks the dragged span; a label typed into the form never
fires a shortcut and after Enter no field keeps the focus; the ranges are drawn under the timeline and a click
on one seeks to its start; a note with markup is shown as text; edit and delete from the list; Escape cancels;
the form's from / to boxes move a range; the page's event reaches `export lerobot --events-from <the API's URL>` (the mapping and language_events).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pyarrow.parquet as pq
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
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_player_browser import VIDEOS, wait_ready  # noqa: E402

from egopool.cli.app import main  # noqa: E402
from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

ACTIVE = "const a = document.activeElement; return a === document.body ? 'body' : a.tagName + '#' + a.id"
FPS = 30


def _to_frame(browser, i: int, wait: WebDriverWait) -> None:
    browser.execute_script("const s = document.getElementById('seek'); s.value = arguments[0];"
                           "s.dispatchEvent(new Event('input'))", i)
    wait.until(lambda b: b.find_element(By.ID, "clock").get_attribute("data-frame") == str(i))
    ActionChains(browser).move_to_element(browser.find_element(By.TAG_NAME, "h1")).click().perform()


def _events(srv: ServerProc, token: str) -> list[dict]:
    r = httpx.get(f"{srv.url}/api/v1/events", params={"task": "grasp", "episode": 1},
                  headers={"Authorization": f"Bearer {token}"})
    return sorted(r.json()["events"], key=lambda e: e["t0"])


def test_events_marked_by_keys_and_drag_shown_edited_deleted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    anna = add_token(tokens, "anna", ["read", "review"])
    pc = simulate(tmp_path / "pc", "grasp", 1, rig="gripper_d405", seconds=2.0, seed=3)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv, chromium(tmp_path / "profile") as browser:
        assert upload_episodes(pc, server=srv.url, token=up).ok
        wait_ready(srv, anna, "grasp", 1)
        # the list and the lane are drawn anew after every change: an element read between two draws is stale
        wait = WebDriverWait(browser, 60, ignored_exceptions=(StaleElementReferenceException,))
        browser.get(srv.url + "/login")
        browser.find_element(By.ID, "token").send_keys(anna)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))
        browser.get(srv.url + "/tasks/grasp/episodes/1")
        wait.until(lambda b: b.execute_script(VIDEOS + ".length > 0 && " + VIDEOS[7:] + ".every(v => v.readyState >= 2)"))
        assert browser.find_element(By.ID, "event-form").get_attribute("hidden") is not None

        # 1. keys: [ at frame 10, ] at frame 20 -> [10/30, 21/30); the label holds a, r, f, j, k: typed, not shortcuts
        _to_frame(browser, 10, wait)
        ActionChains(browser).send_keys("[").perform()
        _to_frame(browser, 20, wait)
        ActionChains(browser).send_keys("]").perform()
        wait.until(lambda b: b.execute_script(ACTIVE) == "INPUT#event-label")
        assert browser.find_element(By.ID, "event-range").text == "new event"
        assert [browser.find_element(By.ID, f"event-t{k}").get_attribute("value") for k in (0, 1)] == ["0.333", "0.700"]
        ActionChains(browser).send_keys("grasp a jar fk").send_keys(Keys.TAB).send_keys("<b>slow</b> & shaky") \
            .send_keys(Keys.ENTER).perform()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#event-list tbody tr")) == 1)
        assert browser.execute_script(ACTIVE) == "body"  # after Enter no field keeps the focus
        assert browser.title == "egopool · grasp · 1"  # j / k were typed into the label, not obeyed
        got = _events(srv, anna)
        assert [(e["t0"] * FPS, e["t1"] * FPS, e["label"], e["note"], e["token_id"]) for e in got] == [
            (pytest.approx(10), pytest.approx(21), "grasp a jar fk", "<b>slow</b> & shaky", "anna")]
        assert httpx.get(f"{srv.url}/api/v1/tasks/grasp/episodes/1/reviews",
                         headers={"Authorization": f"Bearer {anna}"}).json()["reviews"] == []
        wait.until(lambda b: [(n.text, n.find_elements(By.TAG_NAME, "b")) for n in
                              b.find_elements(By.CSS_SELECTOR, "#event-list td.event-note")] == [
            ("<b>slow</b> & shaky", [])])
        # an Enter now sends nothing more; ] without [ only says so
        ActionChains(browser).send_keys(Keys.ENTER).send_keys("]").perform()
        wait.until(ec.text_to_be_present_in_element((By.ID, "event-msg"), "press [ at the event's first frame"))
        assert len(_events(srv, anna)) == 1

        # 2. Escape cancels a form: nothing recorded, no focus kept
        _to_frame(browser, 30, wait)
        ActionChains(browser).send_keys("[").send_keys("]").perform()
        wait.until(lambda b: b.execute_script(ACTIVE) == "INPUT#event-label")
        ActionChains(browser).send_keys("oops").send_keys(Keys.ESCAPE).perform()
        wait.until(ec.text_to_be_present_in_element((By.ID, "event-msg"), "cancelled"))
        assert browser.execute_script(ACTIVE) == "body" and len(_events(srv, anna)) == 1

        # 3. a drag on the timeline from 1/4 to 3/4 of its width marks about [0.5, 1.5) s, frame-aligned
        timeline = browser.find_element(By.ID, "timeline")
        w = timeline.size["width"]
        ActionChains(browser).move_to_element_with_offset(timeline, -w // 4, 0).click_and_hold() \
            .move_by_offset(w // 4, 0).move_by_offset(w // 4, 0).release().perform()
        wait.until(lambda b: b.execute_script(ACTIVE) == "INPUT#event-label")
        ActionChains(browser).send_keys("occluded").send_keys(Keys.ENTER).perform()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#event-list tbody tr")) == 2)
        drag = _events(srv, anna)[1]
        assert drag["label"] == "occluded" and 0.45 <= drag["t0"] <= 0.55 and 1.45 <= drag["t1"] <= 1.55, drag
        for t in (drag["t0"], drag["t1"]):
            assert abs(t * FPS - round(t * FPS)) < 0.02, t  # whole frames
        # the drag's click did not seek (the clock stayed at frame 30)
        assert browser.find_element(By.ID, "clock").get_attribute("data-frame") == "30"

        # 4. the ranges under the timeline; a click on one seeks to its start
        lane = (By.CSS_SELECTOR, "#event-lane .event-range")
        wait.until(lambda b: sorted(r.text for r in b.find_elements(*lane)) == ["grasp a jar fk", "occluded"])
        wait.until(lambda b: next(r for r in b.find_elements(*lane) if r.text == "grasp a jar fk").click() is None)
        wait.until(lambda b: b.find_element(By.ID, "clock").get_attribute("data-frame") == "10")

        # 5. edit from the list (the version moves on), then delete the drag's event
        browser.find_element(By.CSS_SELECTOR, "#event-list tbody tr:first-child button.event-edit").click()
        wait.until(lambda b: b.execute_script(ACTIVE) == "INPUT#event-label")
        assert browser.find_element(By.ID, "event-label").get_attribute("value") == "grasp a jar fk"
        assert browser.find_element(By.ID, "event-t1").get_attribute("value") == "0.700"
        label = browser.find_element(By.ID, "event-label")
        label.clear()
        label.send_keys("grasp")
        end = browser.find_element(By.ID, "event-t1")  # the end moved by hand; the start box left as shown
        end.clear()
        end.send_keys("9", Keys.ENTER)  # past the end: refused, the form stays with what was typed, unfocused
        wait.until(ec.text_to_be_present_in_element((By.ID, "event-msg"), "lasts 2 s; an event cannot end at t1=9 s"))
        assert browser.execute_script(ACTIVE) == "body"
        assert browser.find_element(By.ID, "event-label").get_attribute("value") == "grasp"
        end.clear()
        end.send_keys("0.9", Keys.ENTER)
        wait.until(ec.text_to_be_present_in_element((By.ID, "event-msg"), "saved grasp"))
        assert browser.execute_script(ACTIVE) == "body"
        first = _events(srv, anna)[0]
        assert (first["label"], first["note"], first["version"], first["t0"] * FPS, first["t1"]) == (
            "grasp", "<b>slow</b> & shaky", 2, pytest.approx(10), 0.9)  # the start stays exact (not 0.333)
        browser.find_element(By.CSS_SELECTOR, "#event-list tbody tr:nth-child(2) button.event-delete").click()
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#event-list tbody tr")) == 1)
        assert [e["label"] for e in _events(srv, anna)] == ["grasp"]
        wait.until(lambda b: [r.text for r in b.find_elements(*lane)] == ["grasp"])

        # 6. the page's event reaches the LeRobot export through the API (P16, P17)
        monkeypatch.setenv("EGOPOOL_TOKEN", anna)
        out = tmp_path / "lr"
        assert main(["export", "lerobot", str(tmp_path / "store" / "grasp"), str(out), "--no-depth",
                     "--events-from", f"{srv.url}/api/v1/events?task=grasp"]) == 0
    listed = json.loads((out / "egopool_mapping.json").read_text())["events"]["events"]
    assert [(e["label"], e["note"], e["frames"], e["token_id"]) for e in listed] == [
        ("grasp", "<b>slow</b> & shaky", [10, 27], "anna")]
    rows = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet").column("language_events").to_pylist()
    assert [(i, [r["content"] for r in v]) for i, v in enumerate(rows) if v] == [(10, ["grasp: <b>slow</b> & shaky"])]
