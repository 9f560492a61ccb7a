"""A server SIGKILLed mid-upload or mid-import, then restarted: the store is as before the request (or the
episode is there once, when the kill came after the commit), and the client's retry finishes.

The server stops at a named stage (``EGOPOOL_SERVER_PAUSE``, the importer's fault-injection seam), the
test sees the stage's marker file and kills the process with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, store_files, verify_workers, wait_for, write_task

from egopool.layout import list_task_episodes
from egopool.meta.stats import recalc_stats
from egopool.registry import Registry
from egopool.transfer import pack_episode
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (FileNotFoundError, ProcessLookupError):
        return False


def _wait_for_exit(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"worker {pid} outlived the killed server"
        time.sleep(0.05)


def _db_episodes(store: Path, task: str) -> list[tuple[int, int]]:
    con = sqlite3.connect(store / ".egopool-server/server.db")
    try:
        return con.execute("SELECT client_episode_index, episode_index FROM episodes WHERE task = ? ORDER BY 2",
                           (task,)).fetchall()
    finally:
        con.close()


def _post_in_thread(url: str, zip_path: Path, f: int) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        try:
            result.append(httpx.post(url + "/api/v1/session/upload", data={"name": "pick", "episode_index": str(f)},
                                     files={"file": ("e.zip", zip_path.read_bytes(), "application/zip")},
                                     timeout=120))
        except httpx.TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _stats_match(task: Path) -> None:
    stored = json.loads((task / "meta/stats.json").read_text())
    fresh = recalc_stats(task)
    assert stored.keys() == fresh.keys()
    for col in fresh:
        assert stored[col]["count"] == fresh[col]["count"]
        for k in ("mean", "std", "min", "max"):
            assert all(abs(a - b) <= 1e-9 for a, b in zip(stored[col][k], fresh[col][k], strict=True))


@pytest.mark.parametrize("stage", ["placed", "committed"])
def test_kill_mid_import(stage: str, tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=2)
    store = tmp_path / "store"
    with ServerProc(store) as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
    before = store_files(store)
    packed = pack_episode(task, 2, tmp_path / "zips")

    paused = ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": stage}).start()
    try:
        thread, result = _post_in_thread(paused.url, packed.path, packed.file)
        wait_for(store / ".egopool-server" / f"paused-{stage}")
        mid = store_files(store)
        assert "pick/data/chunk-000/episode-001.parquet" in mid  # killed with the files placed
        assert list((store / ".egopool-server/journals").iterdir())
        workers = verify_workers(paused.proc.pid)  # type: ignore[union-attr]
        assert len(workers) == 2  # the verification workers (docs/decisions.md U14)
    finally:
        paused.kill()
    for pid in workers:  # they leave on their own once the server is gone (no orphan keeps working)
        _wait_for_exit(pid)
    thread.join(30)
    assert isinstance(result[0], httpx.TransportError)  # the client saw the connection die

    with ServerProc(store) as srv:  # start-up recovery runs before the first request
        assert not list((store / ".egopool-server/journals").iterdir())
        if stage == "placed":  # before the commit: rolled back, byte for byte
            assert store_files(store) == before
            assert _db_episodes(store, "pick") == [(1, 1)]
        else:  # after the commit: rolled forward, the merge replayed
            assert _db_episodes(store, "pick") == [(1, 1), (2, 2)]
            assert json.loads((store / "pick/meta/info.json").read_text())["total_episodes"] == 2
            _stats_match(store / "pick")
        log = httpx.get(srv.url + "/api/v1/uploads?limit=1").json()["uploads"][0]
        assert log["outcome"] == ("interrupted" if stage == "placed" else "imported")
        # the client's own retry (a re-run; the server moved to another port, so the registry does not
        # skip episode 1 and the server de-duplicates it) finishes: each episode once
        report = upload_episodes(task, server=srv.url)
        assert report.ok
        assert [o.status for o in report.outcomes] == ["duplicate", "uploaded" if stage == "placed" else "duplicate"]
        assert report.outcomes[1].server_episode_index == 2
    assert [g.index for g in list_task_episodes(store / "pick")] == [1, 2]
    assert _db_episodes(store, "pick") == [(1, 1), (2, 2)]
    assert validate_task(store / "pick").ok
    _stats_match(store / "pick")


def test_client_retry_survives_a_server_killed_mid_upload_and_deletes_only_confirmed(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=3)
    store = tmp_path / "store"
    paused = ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": "received"}).start()
    client = subprocess.Popen([sys.executable, "-m", "egopool", "upload", str(task), "--server", paused.url,
                               "--delete-after", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(store / ".egopool-server/paused-received")  # episode 1's body is on the server
        assert [g.index for g in list_task_episodes(task)] == [1, 2, 3]  # not confirmed: nothing deleted
        paused.kill()
        time.sleep(0.5)  # the client sees the connection die and starts retrying
        with ServerProc(store, port=paused.port):
            out, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        paused.kill()
    assert client.returncode == 0, err.decode()
    doc = json.loads(out)
    assert [(o["episode_index"], o["status"], o["server_episode_index"], o["deleted"]) for o in doc["outcomes"]] == [
        (1, "uploaded", 1, True), (2, "uploaded", 2, True), (3, "uploaded", 3, True)]
    assert doc["outcomes"][0]["attempts"] >= 2
    assert list_task_episodes(task) == []  # deleted locally, through the verified delete
    assert [g.index for g in list_task_episodes(store / "pick")] == [1, 2, 3]  # each once
    assert _db_episodes(store, "pick") == [(1, 1), (2, 2), (3, 3)]
    assert [r.episode_index for r in Registry.for_task(task).uploads("pick")] == [1, 2, 3]
    assert Registry.for_task(task).recordings("pick") == []


def test_delete_after_keeps_what_the_server_did_not_confirm(tmp_path: Path) -> None:
    other = write_task(tmp_path / "other_pc", episodes=2, first_value=50.0)
    task = write_task(tmp_path / "pc", episodes=3)
    with ServerProc(tmp_path / "store", "--on-conflict", "reject") as srv:
        assert upload_episodes(other, [2], server=srv.url).ok  # the other PC's episode 2 takes N=2
        report = upload_episodes(task, server=srv.url, delete_after=True)
    assert [(o.index, o.status, o.deleted) for o in report.outcomes] == [
        (1, "uploaded", True), (2, "failed", None), (3, "uploaded", True)]
    assert not report.ok
    assert [g.index for g in list_task_episodes(task)] == [2]
    assert [r.episode_index for r in Registry.for_task(task).recordings("pick")] == [2]


def test_a_killed_verification_worker_is_replaced_and_the_next_upload_is_imported(tmp_path: Path) -> None:
    """A worker process killed while idle (the OOM killer, a crash in native code) breaks its pool; the server
    starts a new one before the next verification, which is imported first time (docs/decisions.md U14)."""
    task = write_task(tmp_path / "pc", episodes=2)
    with ServerProc(tmp_path / "store") as srv:
        assert upload_episodes(task, [1], server=srv.url, registry=False).ok
        pid = srv.wait_workers().proc.pid  # type: ignore[union-attr]
        old = verify_workers(pid)
        assert len(old) == 2
        os.kill(old[0], signal.SIGKILL)
        for p in old:  # the executor sees the death and ends the pool's other workers too
            _wait_for_exit(p)
        rep = upload_episodes(task, [2], server=srv.url, registry=False, retries=0)
        assert rep.ok and [o.server_episode_index for o in rep.outcomes] == [2]
        new = verify_workers(pid)
        assert len(new) == 2 and not set(new) & set(old)
        log = httpx.get(srv.url + "/api/v1/uploads?limit=5").json()["uploads"]
        assert [u["status"] for u in log] == [200, 200]  # no 500 for the upload after the kill
