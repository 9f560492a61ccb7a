"""Screenshots of the pooling server's curation pages for docs/screenshots/ (README "Curation").

Records two simulated tasks, serves them with a real ``egopool serve`` on loopback, uploads,
waits for the previews, gives a few verdicts, and photographs the index, a task page and an
episode page (paused at 1.2 s) in Debian's headless chromium (selenium + chromium-driver, the
server extra)::

    EGOPOOL_EXTRAS=server ./run --help && .venv/bin/python scripts/curation_screenshots.py [OUT_DIR]
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from egopool.cli.app import main as cli
from egopool.server.tokens import add_token
from egopool.transfer import upload_episodes


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        tokens = tmp / "tokens.json"
        up = add_token(tokens, "lab-pc-3", ["upload:*", "declare:*"])
        anna = add_token(tokens, "anna", ["read", "review"])
        for task, rig, n, seed in (("grasp_cup", "gripper_d405", 5, 7), ("wipe_table", "uvc3", 3, 8)):
            assert cli(["simulate", "--rig", rig, "--episodes", str(n), "--seconds", "4", "--scale", "8",
                        "--out", str(tmp / "pc"), "--task", task, "--seed", str(seed), "--json"]) == 0
        port = _port()
        url = f"http://127.0.0.1:{port}"
        with open(tmp / "serve.log", "wb") as log:
            srv = subprocess.Popen([sys.executable, "-m", "egopool", "serve", "--store", str(tmp / "store"), "--port",
                                    str(port), "--tokens", str(tokens), "--log-level", "warning"], stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            h = {"Authorization": f"Bearer {anna}"}
            for _ in range(300):
                try:
                    if httpx.get(url + "/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            for task in ("grasp_cup", "wipe_table"):
                assert upload_episodes(tmp / "pc" / task, server=url, token=up).ok
            for task, n in (("grasp_cup", 5), ("wipe_table", 3)):
                for i in range(1, n + 1):
                    while httpx.get(f"{url}/api/v1/tasks/{task}/episodes/{i}", headers=h).json()["preview"]["state"] \
                            == "pending":
                        time.sleep(0.5)
            for i, verdict, reason in ((1, "accept", ""), (2, "reject", "gripper leaves the frame"),
                                       (3, "flag", "depth has holes near the cup"), (4, "accept", "")):
                httpx.post(f"{url}/api/v1/tasks/grasp_cup/episodes/{i}/review", headers=h,
                           json={"verdict": verdict, "reason": reason}).raise_for_status()
            opts = webdriver.ChromeOptions()
            opts.binary_location = "/usr/bin/chromium"
            for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900",
                         f"--user-data-dir={tmp / 'profile'}"):
                opts.add_argument(flag)
            driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
            try:
                driver.get(url + "/login")
                driver.find_element("id", "token").send_keys(anna)
                driver.find_element("id", "login").click()
                time.sleep(1.5)
                driver.save_screenshot(str(out / "index.png"))
                driver.get(url + "/tasks/grasp_cup")
                time.sleep(1.5)
                driver.save_screenshot(str(out / "task.png"))
                driver.set_window_size(1400, 1500)
                driver.get(url + "/tasks/grasp_cup/episodes/3")
                time.sleep(2.0)
                driver.execute_script("for (const v of document.querySelectorAll('video')) v.currentTime = 1.2;")
                time.sleep(1.5)
                height = driver.execute_script("return document.documentElement.scrollHeight")
                driver.set_window_size(1400, min(int(height) + 200, 3200))  # the whole page: review, facts, keys
                time.sleep(1.0)
                driver.save_screenshot(str(out / "episode.png"))
            finally:
                driver.quit()
        finally:
            srv.terminate()
            srv.wait(30)
    print("\n".join(str(out / n) for n in ("index.png", "task.png", "episode.png")))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.path.dirname(__file__)).parent / "docs" / "screenshots")
