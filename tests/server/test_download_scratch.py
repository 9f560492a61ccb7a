"""A download streamed from a scratch directory (docs/decisions.md P33) over a real uvicorn server: the client
reads one chunk of a stream far larger than the socket buffers and hangs up; the stream's generator is closed
and the directory removed. A stale directory no response streams is swept; one in use is not."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from egopool.server.download_scratch import ScratchResponse, in_use, make_scratch, sweep_scratch  # noqa: E402

CHUNK = 1 << 20
CHUNKS = 512  # 512 MiB if it were read whole: never fits in the kernel's buffers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(cond: object, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return True
        time.sleep(0.05)
    return False


def test_an_abandoned_stream_closes_its_generator_and_removes_its_directory(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    made: list[Path] = []
    state = {"sent": 0, "closed": False}

    def chunks() -> Iterator[bytes]:
        try:
            for _ in range(CHUNKS):
                state["sent"] += 1
                yield b"\0" * CHUNK
        finally:
            state["closed"] = True

    app = FastAPI()

    @app.get("/big")
    async def big() -> ScratchResponse:
        d = make_scratch(staging)
        (d / "export.bin").write_bytes(b"x")
        made.append(d)
        return ScratchResponse(chunks(), d, media_type="application/octet-stream")

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert _wait(lambda: server.started)
        with httpx.stream("GET", f"http://127.0.0.1:{port}/big", timeout=60) as r:
            assert r.status_code == 200
            assert len(next(r.iter_raw(CHUNK))) > 0
            assert len(made) == 1 and made[0].is_dir() and made[0] in in_use()
        assert _wait(lambda: state["closed"] and not made[0].exists()), state
        assert int(state["sent"]) < CHUNKS  # it stopped early: the client's leaving ended it, not the last chunk
        assert made[0] not in in_use()
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_sweep_removes_only_stale_directories_nobody_streams(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    busy = make_scratch(staging)  # in use by this process
    stale = staging / "download-stale"
    fresh = staging / "download-fresh"
    other = staging / "upload-1234"  # an upload being verified: never a download's
    for d in (stale, fresh, other):
        d.mkdir()
    old = time.time() - 3600
    for d in (busy, stale, other):
        os.utime(d, (old, old))
    assert sweep_scratch(staging) == [stale]
    assert busy.is_dir() and fresh.is_dir() and other.is_dir() and not stale.exists()
