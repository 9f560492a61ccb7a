"""Screenshots of the server's pages for docs/screenshots/ (not a test; run by hand):

    PYTHONPATH=src python tests/server/screenshots.py docs/screenshots

A real server with a simulated gripper_d405 rig (3 episodes) and the quality-facts episodes of
facts_episode.py (a frozen stream, a stall, dark frames); index, task (rows 1-3 selected for bulk review),
episode and dashboard pages at 1440x900 and
390x844, both at device pixel ratio 2, in Debian's headless chromium.
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
from facts_episode import write_facts_task  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from transfer_helpers import ServerProc, simulate  # noqa: E402

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def _ready(srv: ServerProc, token: str, task: str, n: int) -> None:
    for _ in range(600):
        ep = httpx.get(f"{srv.url}/api/v1/tasks/{task}/episodes/{n}", headers={"Authorization": f"Bearer {token}"})
        if ep.json()["preview"]["state"] != "pending":
            return
        time.sleep(1.0)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        tokens = tmp / "tokens.json"
        up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
        anna = add_token(tokens, "anna", ["read", "review"])
        grasp = simulate(tmp / "pc", "grasp", 3, rig="gripper_d405", seconds=4.0, seed=11)
        facts = write_facts_task(tmp / "pc2", dark=(10, 3))
        with ServerProc(tmp / "store", "--tokens", str(tokens)) as srv, \
                chromium(tmp / "profile", "--hide-scrollbars") as browser:
            assert upload_episodes(grasp, server=srv.url, token=up).ok
            assert upload_episodes(facts, server=srv.url, token=up).ok
            for task, n in (("grasp", 3), ("facts", 2)):
                for i in range(1, n + 1):
                    _ready(srv, anna, task, i)
            h = {"Authorization": f"Bearer {anna}"}
            httpx.post(f"{srv.url}/api/v1/tasks/grasp/episodes/2/review", headers=h,
                       json={"episode": 2, "version": 0, "verdict": "reject", "reason": "gripper occluded by the left "
                             "hand for most of the grasp; the wrist camera shows only the palm " * 3})
            httpx.post(f"{srv.url}/api/v1/tasks/grasp/episodes/1/review", headers=h,
                       json={"episode": 1, "version": 0, "verdict": "accept"})
            browser.get(srv.url + "/login")
            browser.find_element(By.ID, "token").send_keys(anna)
            browser.find_element(By.ID, "login").click()
            time.sleep(1.0)
            pages = {"index": "/", "task": "/tasks/grasp", "episode": "/tasks/grasp/episodes/1",
                     "task-facts": "/tasks/facts", "episode-facts": "/tasks/facts/episodes/1",
                     "dashboard": "/tasks/grasp/dashboard"}
            for size, (w, hh, mobile) in {"1440x900": (1440, 900, False), "390x844": (390, 844, True)}.items():
                browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                        {"width": w, "height": hh, "deviceScaleFactor": 2, "mobile": mobile})
                for name, path in pages.items():
                    browser.get(srv.url + path)
                    time.sleep(2.5)  # videos load, plots draw
                    if name == "task":  # a selection for bulk review: rows 1 and 3 (shift-click takes 2)
                        boxes = browser.find_elements(By.CSS_SELECTOR, "input.pick")
                        boxes[0].click()
                        browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true, "
                                               "shiftKey: true}))", boxes[2])
                    browser.save_screenshot(str(out / f"{name}-{size}.png"))
    for png in out.glob("*-*x*.png"):  # 256 colours: a third of the bytes in git, the pages' look kept
        _palette(png)


def _palette(png: Path) -> None:
    from PIL import Image

    with Image.open(png) as im:
        if im.mode == "P":
            return
        small = im.convert("RGB").quantize(256)
    small.save(png, optimize=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
