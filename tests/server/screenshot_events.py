"""Screenshots of the episode page with reviewers' events for docs/screenshots/ (not a test; run by hand):

    PYTHONPATH=src python tests/server/screenshot_events.py docs/screenshots

A real server with one simulated gripper_d405 episode (4 s) and three events made on its API; the episode page
at 1440x900 and 390x844, device pixel ratio 2, in Debian's headless chromium: the ranges under the timeline
with a new range being labelled (``episode-events-<size>.png``), and the list scrolled into view
(``episode-events-list-<size>.png``).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "transfer")]

import httpx  # noqa: E402
from browser_helpers import chromium  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from transfer_helpers import ServerProc, simulate  # noqa: E402

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        tokens = tmp / "tokens.json"
        up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
        anna = add_token(tokens, "anna", ["read", "review"])
        bob = add_token(tokens, "bob", ["read", "review"])
        grasp = simulate(tmp / "pc", "grasp", 1, rig="gripper_d405", seconds=4.0, seed=11)
        with ServerProc(tmp / "store", "--tokens", str(tokens)) as srv, \
                chromium(tmp / "profile", "--hide-scrollbars") as browser:
            assert upload_episodes(grasp, server=srv.url, token=up).ok
            for _ in range(600):
                ep = httpx.get(f"{srv.url}/api/v1/tasks/grasp/episodes/1", headers={"Authorization": f"Bearer {anna}"})
                if ep.json()["preview"]["state"] != "pending":
                    break
                time.sleep(1.0)
            add = f"{srv.url}/api/v1/tasks/grasp/episodes/1/events"
            for who, body in ((anna, {"t0": 0.3, "t1": 1.2, "label": "reach", "note": ""}),
                              (bob, {"t0": 1.0, "t1": 2.1, "label": "grasp", "note": "second try; the first closed "
                                                                                      "on air"}),
                              (anna, {"t0": 2.6, "t1": 3.1, "label": "slip", "note": "cup slides in the fingers"})):
                r = httpx.post(add, headers={"Authorization": f"Bearer {who}"}, json={"episode": 1, **body})
                assert r.status_code == 200, r.text
            browser.get(srv.url + "/login")
            browser.find_element(By.ID, "token").send_keys(anna)
            browser.find_element(By.ID, "login").click()
            time.sleep(1.0)
            for size, (w, hh, mobile) in {"1440x900": (1440, 900, False), "390x844": (390, 844, True)}.items():
                browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                        {"width": w, "height": hh, "deviceScaleFactor": 2, "mobile": mobile})
                browser.get(srv.url + "/tasks/grasp/episodes/1")
                time.sleep(2.5)  # videos load, plots draw
                timeline = browser.find_element(By.ID, "timeline")
                tw = timeline.size["width"]
                ActionChains(browser).move_to_element_with_offset(timeline, int(tw * 0.3), 0).click_and_hold() \
                    .move_by_offset(int(tw * 0.12), 0).release().perform()  # a new range, its form open
                ActionChains(browser).send_keys("put down").perform()
                time.sleep(0.5)
                browser.execute_script("document.getElementById('timeline').scrollIntoView({block: 'center'})")
                time.sleep(0.5)
                browser.save_screenshot(str(out / f"episode-events-{size}.png"))
                browser.execute_script("document.getElementById('events').scrollIntoView({block: 'start'})")
                time.sleep(0.5)
                browser.save_screenshot(str(out / f"episode-events-list-{size}.png"))

if __name__ == "__main__":
    main(Path(sys.argv[1]))
