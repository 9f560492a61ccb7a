"""Where `egopool upload` packs its zips (issue 15 D): never inside the recordings root, and what a killed
run left is removed by the next one. The client is a real `python -m egopool upload` process SIGKILLed
while a real server holds its upload (the importer's pause seam), then run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transfer_helpers import ServerProc, simulate, snapshot, write_task

from egopool.errors import TransferError
from egopool.transfer import upload_episodes
from egopool.transfer.spool import sweep_stale, upload_spool


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _root_files(root: Path) -> dict[str, str]:
    """The recordings root's files, its registry aside (the client writes pipeline.db on purpose)."""
    return {k: v for k, v in snapshot(root).items() if not k.startswith("pipeline.db")}


def _upload(task: Path, url: str, cache: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "EGOPOOL_CACHE_DIR": str(cache)}
    return subprocess.Popen([sys.executable, "-m", "egopool", "upload", str(task), "--server", url, "--retries", "0",
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


@pytest.mark.extra("server")
def test_sigkilled_upload_leaves_nothing_in_the_root_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    root, cache, store = tmp_path / "pc", tmp_path / "cache", tmp_path / "store"
    task = simulate(root, "spooled", 2)
    before = _root_files(root)
    with ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": "received"}) as srv:
        client = _upload(task, srv.url, cache)
        try:
            _wait_for(store / ".egopool-server/paused-received")  # the zip is sent, the client awaits the answer
            spools = list((cache / "upload").iterdir())
            assert len(spools) == 1 and spools[0].name.startswith("upload-") and \
                f"-{client.pid}-" in spools[0].name
            zips = list(spools[0].glob("*.zip"))
            assert len(zips) == 1 and zips[0].stat().st_size > 10_000
            client.send_signal(signal.SIGKILL)
            client.wait(30)
        finally:
            if client.poll() is None:
                client.kill()
            client.communicate()
        assert _root_files(root) == before  # nothing beside the tasks, the tasks unchanged
        assert not [p for p in root.iterdir() if p.name.startswith(".egopool")]
        assert list((cache / "upload").iterdir()) == spools  # the killed run's spool, until the next run
        srv.kill()
    # what egopool before this change left in the root: removed once idle for 10 minutes
    old, fresh = root / ".egopool-upload-k2j4x8", root / ".egopool-upload-q7w1z0"
    for d in (old, fresh):
        d.mkdir()
        (d / "spooled_chunk-000_ep000000.zip").write_bytes(b"\0" * 4096)
    hour_ago = time.time() - 3600
    for p in (old / "spooled_chunk-000_ep000000.zip", old):
        os.utime(p, (hour_ago, hour_ago))
    with ServerProc(store) as srv:
        again = _upload(task, srv.url, cache)
        out, err = again.communicate(timeout=600)
        assert again.returncode == 0, err.decode()
    doc = json.loads(out)
    assert doc["ok"] and [o["status"] for o in doc["outcomes"]] == ["uploaded", "uploaded"]
    assert doc["notices"] == [f"removed 1 upload temp directory an earlier egopool left in {root} "
                              f"(.egopool-upload-k2j4x8)"]
    assert err.decode().count("egopool: note:") == 1
    assert list((cache / "upload").iterdir()) == []  # the stale spool swept, this run's removed
    assert not old.exists() and fresh.is_dir()


def test_temp_dir_inside_the_recordings_root_is_refused(tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", episodes=1)
    with pytest.raises(TransferError, match="inside the recordings root"):
        upload_episodes(task, server="http://127.0.0.1:9", temp_dir=tmp_path / "pc" / "tmp")
    assert not (tmp_path / "pc" / "tmp").exists()


def test_a_live_spool_is_never_swept(tmp_path: Path) -> None:
    base = tmp_path / "upload"
    base.mkdir()
    with upload_spool(base) as mine:
        (mine / "x.zip").write_bytes(b"zip")
        assert sweep_stale(base) == [] and (mine / "x.zip").is_file()  # this process: alive, locked
        # a spool of a process that ended without cleaning up (no lock file either): stale
        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        dead = base / f"{mine.name.split('-')[0]}-{mine.name.split('-')[1]}-{done.stdout.strip()}-abc"
        dead.mkdir()
        (dead / "y.zip").write_bytes(b"zip")
        assert sweep_stale(base) == [dead] and not dead.exists()
    assert list(base.iterdir()) == []
