"""The intake on worker processes (issue 29; docs/decisions.md U28-U30): a verification worker killed mid-call costs
one more verification, never a half-verified publish; a full queue answers 503 with Retry-After, which the client
waits out; a server killed while an upload is queued or being verified leaves the store as it was; every upload
records where its time went."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, store_files, wait_for, write_task

from egopool.layout import list_task_episodes
from egopool.transfer import pack_episode
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402


def _post(url: str, zip_path: Path, f: int) -> httpx.Response:
    return httpx.post(url + "/api/v1/session/upload", data={"name": "pick", "episode_index": str(f)},
                      files={"file": ("e.zip", zip_path.read_bytes(), "application/zip")}, timeout=300)


def _in_thread(fn, *args) -> tuple[threading.Thread, list[object]]:  # type: ignore[no-untyped-def]
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn(*args))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_worker_killed_mid_verification_is_verified_again_once(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=1)
    packed = pack_episode(task, 1, tmp_path / "zips")
    store = tmp_path / "store"
    with ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": "verifying"}) as srv:
        thread, out = _in_thread(_post, srv.url, packed.path, packed.file)
        marker = store / ".egopool-server/paused-verifying"
        wait_for(marker)
        worker = int(marker.read_text())
        assert worker != srv.proc.pid  # type: ignore[union-attr]  # the pause is in a worker process
        assert not (store / "pick").exists()  # nothing published while it verifies
        os.kill(worker, signal.SIGKILL)  # mid-verification: its staging directory is half written
        thread.join(300)
        marker.unlink(missing_ok=True)
        resp = out[0]
        assert isinstance(resp, httpx.Response) and resp.status_code == 200, resp
        assert resp.json()["status"] == "imported" and resp.json()["episode_index"] == 1
        log = httpx.get(srv.url + "/api/v1/uploads?limit=5").json()["uploads"]
        assert [(u["outcome"], u["verify_attempts"]) for u in log] == [("imported", 2)]
    assert [g.index for g in list_task_episodes(store / "pick")] == [1]  # once
    assert validate_task(store / "pick").ok


@pytest.mark.parametrize("stage", ["queued", "verifying"])
def test_kill_while_queued_or_verifying_leaves_the_store_as_it_was(stage: str, tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=2)
    store = tmp_path / "store"
    with ServerProc(store) as srv:
        assert upload_episodes(task, [1], server=srv.url, registry=False).ok
    before = store_files(store)
    packed = pack_episode(task, 2, tmp_path / "zips")
    paused = ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": stage}).start()
    try:
        thread, out = _in_thread(_post, paused.url, packed.path, packed.file)
        wait_for(store / ".egopool-server" / f"paused-{stage}")
    finally:
        paused.kill()
    thread.join(60)
    assert isinstance(out[0], httpx.TransportError)  # never confirmed
    with ServerProc(store) as srv:
        assert store_files(store) == before  # nothing of episode 2, spool and staging emptied
        log = httpx.get(srv.url + "/api/v1/uploads?limit=1").json()["uploads"][0]
        assert log["outcome"] == "interrupted"
        rep = upload_episodes(task, server=srv.url, registry=False)  # the client's retry: each episode once
        assert [o.status for o in rep.outcomes] == ["duplicate", "uploaded"]
    assert [g.index for g in list_task_episodes(store / "pick")] == [1, 2]


def test_a_full_queue_answers_503_with_retry_after_which_the_client_waits(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=2)
    zips = [pack_episode(task, n, tmp_path / "zips") for n in (1, 2)]
    store = tmp_path / "store"
    marker = store / ".egopool-server/paused-queued"
    with ServerProc(store, "--max-queue", "1", env={"EGOPOOL_SERVER_PAUSE": "queued"}) as srv:
        first, out1 = _in_thread(_post, srv.url, zips[0].path, zips[0].file)
        wait_for(marker)  # episode 1 holds the only place
        busy = _post(srv.url, zips[1].path, zips[1].file)
        assert busy.status_code == 503 and busy.json()["error"] == "busy"
        wait = busy.headers["Retry-After"]
        assert wait.isdigit() and 1 <= int(wait) <= 30
        assert len(httpx.get(srv.url + "/api/v1/uploads").json()["uploads"]) == 1  # no log row for the 503
        second, out2 = _in_thread(lambda: upload_episodes(task, [2], server=srv.url, registry=False, retries=0))
        time.sleep(1.5)  # the client meets the full queue (at least once) and waits
        marker.unlink()  # episode 1 goes on and leaves its place
        first.join(300)
        wait_for(marker)  # episode 2 got the place after Retry-After
        marker.unlink()
        second.join(300)
        assert isinstance(out1[0], httpx.Response) and out1[0].status_code == 200
        rep = out2[0]
        assert not isinstance(rep, Exception), rep
        assert rep.ok and [o.server_episode_index for o in rep.outcomes] == [2]  # type: ignore[attr-defined]
        assert rep.outcomes[0].attempts == 1  # type: ignore[attr-defined]  # a busy answer is not a retry
        log = httpx.get(srv.url + "/api/v1/uploads?limit=5").json()["uploads"]
        page = httpx.get(srv.url + "/").text
    assert "receive · queue · verify · publish (s)" in page  # the page's upload table shows them too
    first_stages = " · ".join(f"{log[1][k]:.2f}" for k in ("receive_s", "queue_s", "verify_s", "publish_s"))
    assert first_stages in page
    assert [u["outcome"] for u in log] == ["imported", "imported"]
    for u in log:  # where the time went (U30): every stage measured
        assert all(u[k] is not None and u[k] >= 0 for k in ("receive_s", "queue_s", "verify_s", "publish_s")), u
        assert u["verify_attempts"] == 1
    assert log[1]["queue_s"] >= 1.0  # episode 1 was held in the queue by the pause
