"""``egopool ls`` and ``egopool validate`` run directly on a pooling server's store while it publishes
(docs/decisions.md U16): the episode a live import has placed but not committed is not a damaged or
incomplete episode there. The server is held at ``EGOPOOL_SERVER_PAUSE=placed`` (every file of the
episode but its ``meta/episodes`` row in place, the journal written).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, cli, write_task

from egopool.transfer import pack_episode

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402


def _hold_at_placed(store: Path, task: Path, n: int, zips: Path) -> tuple[ServerProc, threading.Thread]:
    packed = pack_episode(task, n, zips)
    srv = ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": "placed"}).start()

    def post() -> None:
        try:
            httpx.post(srv.url + "/api/v1/session/upload", data={"name": task.name, "episode_index": str(packed.file)},
                       files={"file": ("e.zip", packed.path.read_bytes(), "application/zip")}, timeout=300)
        except httpx.TransportError:
            pass  # the server is killed at the end of the test

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    marker = store / ".egopool-server" / "paused-placed"
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline, "the server never reached the placed stage"
        time.sleep(0.05)
    return srv, thread


def _ls_validate(task: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[dict], dict, str]:
    capsys.readouterr()
    assert cli(["ls", str(task), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    rc = cli(["validate", str(task), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == (0 if report["ok"] else 1)
    assert cli(["ls", str(task)]) == 0
    return listed, report, capsys.readouterr().out


@pytest.mark.parametrize("n", [1, 2], ids=["first episode (the server creates the task)", "second episode"])
def test_ls_and_validate_on_the_store_do_not_report_an_episode_being_published(
        n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = write_task(tmp_path / "pc", episodes=2)
    store = tmp_path / "store"
    if n == 2:
        with ServerProc(store) as srv:
            assert upload_episodes(task, [1], server=srv.url, registry=False).ok
    srv, thread = _hold_at_placed(store, task, n, tmp_path / "zips")
    try:
        placed = store / "pick" / "data" / "chunk-000" / f"episode-{n - 1:03d}.parquet"
        assert placed.is_file()  # the episode's files are there, its row is not
        assert not (store / "pick" / "meta" / "episodes" / "chunk-000" / f"episode-{n - 1:03d}.parquet").exists()

        if n == 1:  # a task exists from its first commit on (its info.json is created after the row, O11, O26):
            capsys.readouterr()  # before that it is no task for ls/validate, not a task with a damaged episode
            assert cli(["ls", str(store / "pick")]) == 1
            assert "meta/info.json is missing" in capsys.readouterr().err
            assert not (store / "pick" / "meta" / "info.json").exists()
        else:
            listed, report, text = _ls_validate(store / "pick", capsys)
            assert [r["episode_index"] for r in listed] == list(range(1, n))
            assert all(r["complete"] for r in listed)
            assert report["ok"] and not [f for f in report["findings"] if f["severity"] == "error"], report
            assert f"publish or delete under way: {n}" in text

            # the same files without the server's journal beside them (a recorder's disk): reported, as before
            copy = tmp_path / "copy" / "pick"
            shutil.copytree(store / "pick", copy)
            listed, report, _ = _ls_validate(copy, capsys)
            assert [r["episode_index"] for r in listed] == list(range(1, n + 1))
            assert not listed[-1]["complete"]
            assert not report["ok"]
            assert any(f"episode {n} has a data parquet but no meta/episodes row" in f["message"]
                       for f in report["findings"]), report["findings"]
    finally:
        srv.kill()
        thread.join(30)
        with ServerProc(store):  # restarted: the interrupted import is rolled back, the store validates
            pass
    assert cli(["validate", str(store / "pick")]) == 0 if n == 2 else not (store / "pick").exists()
