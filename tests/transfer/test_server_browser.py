"""The server's HTML page in a real headless browser: Debian's chromium driven by selenium (chromium-driver).

Nothing is installed here: `.ci/run` installs chromium and chromium-driver, the server extra installs
selenium. The test signs in with a read token, checks that the tasks, the last uploads and a task's
episodes (uploader, validation, review state) are listed, and takes a screenshot. The curation pages
(filters, the episode player, review) are tests/transfer/test_server_curation.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")

from browser_helpers import chromium  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


@pytest.fixture()
def browser(tmp_path: Path):
    with chromium(tmp_path / "chromium-profile") as driver:
        yield driver


def test_html_page_lists_tasks_episodes_and_uploads(browser, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    read = add_token(tokens, "viewer", ["read"])
    pick = write_task(tmp_path / "pc", "pick_cup", episodes=3)
    place = write_task(tmp_path / "pc", "place_cup", episodes=1, first_value=5.0)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv:
        assert upload_episodes(pick, server=srv.url, token=up).ok
        assert upload_episodes(place, server=srv.url, token=up).ok

        wait = WebDriverWait(browser, 30)
        browser.get(srv.url + "/")
        wait.until(ec.presence_of_element_located((By.ID, "token")))  # not signed in: the sign-in form
        assert not browser.find_elements(By.ID, "tasks")
        browser.find_element(By.ID, "token").send_keys("egp_wrong")
        browser.find_element(By.ID, "login").click()
        wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "unknown token"))
        browser.find_element(By.ID, "token").send_keys(read)
        browser.find_element(By.ID, "login").click()
        wait.until(ec.presence_of_element_located((By.ID, "tasks")))

        tasks = browser.find_elements(By.CSS_SELECTOR, "#tasks tbody tr")
        cells = {r.find_elements(By.TAG_NAME, "td")[1].text: [c.text for c in r.find_elements(By.TAG_NAME, "td")]
                 for r in tasks}
        assert set(cells) == {"pick_cup", "place_cup"}
        assert cells["pick_cup"][2] == "3" and cells["pick_cup"][7] == "cam"  # episodes, streams
        assert cells["pick_cup"][5] == "0 accepted · 0 rejected · 0 flagged · 3 unreviewed"
        uploads = browser.find_elements(By.CSS_SELECTOR, "#uploads tbody tr")
        assert len(uploads) == 4
        assert all("imported" in u.text and "pc-7" in u.text for u in uploads)

        shot = tmp_path / "index.png"
        assert browser.save_screenshot(str(shot))
        img = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
        assert img.shape[0] >= 500 and img.shape[1] >= 800
        assert img.std() > 10  # text and table borders, not a blank page

        browser.find_element(By.LINK_TEXT, "pick_cup").click()
        wait.until(ec.title_is("egopool · pick_cup"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#episodes-pick_cup tbody tr")
        eps = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        assert [e[1] for e in eps] == ["1", "2", "3"]
        for n, e in enumerate(eps, 1):
            assert f"its N {n}" in e[4] and e[6] == "valid" and e[8] == "unreviewed"
        browser.find_element(By.LINK_TEXT, "all tasks").click()
        browser.find_element(By.LINK_TEXT, "place_cup").click()
        wait.until(ec.title_is("egopool · place_cup"))
        assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes-place_cup tbody tr")) == 1
