"""`egopool upload --jobs N` (issue 15 H, docs/decisions.md U26): up to N episodes in flight, against a real
`egopool serve` on loopback. The server's pause seam (``EGOPOOL_SERVER_PAUSE=received``) holds every upload
once its body is received, so two bodies received while none is answered prove two requests in flight; the
first episode of a task the server does not know yet goes alone, so a refused declaration is met once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from transfer_helpers import ServerProc, cli, write_task

from egopool.errors import TransferError
from egopool.layout import list_task_episodes
from egopool.registry import Registry
from egopool.transfer import UploadReport, upload_episodes

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.server.tokens import add_token  # noqa: E402


def _log(srv: ServerProc, token: str | None = None) -> list[dict[str, Any]]:
    """The server's upload log, oldest first."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    rows = httpx.get(srv.url + "/api/v1/uploads?limit=1000", headers=headers, timeout=30).json()["uploads"]
    return sorted(rows, key=lambda r: r["id"])


def _until(cond: Any, what: str, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)
    return got


def test_episodes_are_in_flight_at_once_and_reported_in_n_order(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "pick", episodes=4, rows=5)
    spool = tmp_path / "spool"
    marker = tmp_path / "store/.egopool-server/paused-received"
    with ServerProc(tmp_path / "store", env={"EGOPOOL_SERVER_PAUSE": "received"}) as srv:
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["report"] = upload_episodes(task, server=srv.url, jobs=3, temp_dir=spool, retries=0)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the test below
                result["error"] = exc

        uploader = threading.Thread(target=run, daemon=True)
        uploader.start()
        _until(marker.exists, "the first upload paused")
        first = _log(srv)
        assert len(first) == 1 and first[0]["zip_sha256"] and first[0]["outcome"] == "receiving"  # alone, held
        marker.unlink()  # episode 1 imported: the task exists, the rest go together

        def held() -> list[dict[str, Any]]:  # bodies received, none answered yet
            return [r for r in _log(srv) if r["outcome"] == "receiving" and r["zip_sha256"]]

        together = _until(lambda: len(held()) >= 2 and held(), "two uploads received at once")
        assert len({r["zip_sha256"] for r in together}) == len(together)  # distinct episodes
        zips = [p for d in spool.iterdir() for p in d.glob("*.zip")]
        assert 2 <= len(zips) <= 3  # packing bounded: at most `jobs` zips exist
        while uploader.is_alive():  # let every held upload go (a late one writes the marker again)
            if marker.exists():
                marker.unlink()
            uploader.join(0.05)
        assert "error" not in result, result.get("error")
        report: UploadReport = result["report"]
        log = _log(srv)
    assert report.ok and [o.index for o in report.outcomes] == [1, 2, 3, 4]
    assert [o.status for o in report.outcomes] == ["uploaded"] * 4
    assert sorted(o.server_episode_index for o in report.outcomes) == [1, 2, 3, 4]  # distinct N on the server
    assert [r["outcome"] for r in log] == ["imported"] * 4  # each episode sent and imported once
    assert [g.index for g in list_task_episodes(tmp_path / "store/pick")] == [1, 2, 3, 4]
    recorded = {u.episode_index: u.server_episode_index for u in Registry.for_task(task).uploads("pick")}
    assert recorded == {o.index: o.server_episode_index for o in report.outcomes}
    assert list(spool.iterdir()) == []  # the run's spool removed


def test_a_refused_declaration_stops_the_run_after_one_request(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    lab, reader = add_token(tokens, "lab", ["upload:*"]), add_token(tokens, "reader", ["read"])
    task = write_task(tmp_path / "pc", "pick", episodes=5, rows=5)
    with ServerProc(tmp_path / "store", "--tokens", str(tokens)) as srv:
        with pytest.raises(TransferError, match="may not create it") as err:
            upload_episodes(task, server=srv.url, token=lab, jobs=4, temp_dir=tmp_path / "spool", retries=0)
        log = _log(srv, reader)
    assert "not sent: episodes 1, 2, 3, 4, 5" in err.value.message and err.value.status == 403
    assert [(r["status"], r["reason"]) for r in log] == [(403, "may_not_declare")]  # met once, not 4 times
    assert Registry.for_task(task).uploads("pick") == []
    assert list((tmp_path / "spool").iterdir()) == []


def test_a_resumed_run_sends_only_the_rest(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "pick", episodes=6, rows=5)
    with ServerProc(tmp_path / "store") as srv:
        first = upload_episodes(task, [1, 2], server=srv.url, jobs=4, temp_dir=tmp_path / "spool")
        assert first.ok and [o.index for o in first.outcomes] == [1, 2]
        again = upload_episodes(task, server=srv.url, jobs=4, temp_dir=tmp_path / "spool", delete_after=True)
        log = _log(srv)
    assert [(o.index, o.status) for o in again.outcomes] == [(1, "skipped"), (2, "skipped")] + [
        (n, "uploaded") for n in (3, 4, 5, 6)]
    assert again.ok and all(o.deleted for o in again.outcomes)  # deleted after confirmation, each
    assert len(log) == 6 and [r["outcome"] for r in log] == ["imported"] * 6  # 1, 2 not sent again
    assert sorted(r["client_episode_index"] for r in log) == [1, 2, 3, 4, 5, 6]
    assert sorted(o.server_episode_index for o in again.outcomes) == [1, 2, 3, 4, 5, 6]
    assert list_task_episodes(task) == []


@pytest.mark.parametrize("jobs", ["0", "-2"])
def test_jobs_below_one_is_a_one_line_error(tmp_path: Path, jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    task = write_task(tmp_path / "pc", "pick", episodes=1, rows=5)
    assert cli(["upload", str(task), "--server", "http://127.0.0.1:9", "--jobs", jobs]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("egopool: error: ") and f"--jobs {jobs} refused" in err
    with pytest.raises(TransferError, match="jobs=0 refused"):
        upload_episodes(task, server="http://127.0.0.1:9", jobs=0)


def test_ctrl_c_with_uploads_in_flight_is_one_line_and_leaves_no_temp_files(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    task = write_task(tmp_path / "pc", "pick", episodes=4, rows=5)
    cache = tmp_path / "cache"
    marker = tmp_path / "store/.egopool-server/paused-received"
    with ServerProc(tmp_path / "store", env={"EGOPOOL_SERVER_PAUSE": "received"}) as srv:
        client = subprocess.Popen([sys.executable, "-m", "egopool", "upload", str(task), "--server", srv.url,
                                   "--jobs", "3", "--retries", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env={**os.environ, "EGOPOOL_CACHE_DIR": str(cache)})
        try:
            _until(marker.exists, "the first upload paused")
            marker.unlink()
            _until(lambda: len([r for r in _log(srv) if r["outcome"] == "receiving" and r["zip_sha256"]]) >= 2,
                   "two uploads received at once")
            client.send_signal(signal.SIGINT)
            out, err = client.communicate(timeout=300)
        finally:
            if client.poll() is None:
                client.kill()
        assert client.returncode == 130, err.decode()
        assert err.decode().strip().splitlines()[-1] == "egopool: interrupted" and "Traceback" not in err.decode()
        assert list((cache / "upload").iterdir()) == []  # the run's spool removed, no zip left
        recorded = [u.episode_index for u in Registry.for_task(task).uploads("pick")]
        assert recorded == [1]  # only the confirmed episode counts as uploaded
        if marker.exists():
            marker.unlink()
