"""`egopool serve --store s3://...` against a real SeaweedFS (docs/decisions.md O10-O14): uploads land byte for byte,
a kill -9 of the server or of `weed` mid-publish never leaves a half-published episode visible, and two servers
publishing into one bucket task lose nothing and never share an N.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from transfer_helpers import ServerProc, cli, simulate, wait_for, write_task

from egopool.layout import list_task_episodes
from egopool.meta.stats import recalc_stats
from egopool.validate import validate_task

pytestmark = [pytest.mark.extra("server"), pytest.mark.extra("s3")]
pytest.importorskip("fastapi")
pytest.importorskip("boto3")

from egopool.storage.bucket import Bucket  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

BUCKET = "pool"


@pytest.fixture()
def uri(s3_server: Any) -> str:
    """A fresh prefix in the test bucket (one bucket for the session: SeaweedFS gives each bucket its own volumes)."""
    s3_server.create_bucket(BUCKET)
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"


def _server(tmp: Path, uri: str, name: str = "state", **env: str) -> ServerProc:
    state = tmp / name
    return ServerProc(state, "--state", str(state), store_arg=uri, env=env)


def _objects(uri: str) -> dict[str, bytes]:
    b = Bucket(uri)
    return {o.key: (b.get(o.key) or (b"", ""))[0] for o in b.list_objects("")}


def _task_objects(uri: str, task: str) -> dict[str, bytes]:
    return {k[len(task) + 1:]: v for k, v in _objects(uri).items() if k.startswith(task + "/")}


def _download(uri: str, task: str, dest: Path) -> Path:
    for rel, data in _task_objects(uri, task).items():
        (dest / task / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / task / rel).write_bytes(data)
    return dest / task


def _post_in_thread(url: str, zip_path: Path, f: int, task: str = "pick") -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        try:
            result.append(httpx.post(url + "/api/v1/session/upload", data={"name": task, "episode_index": str(f)},
                                     files={"file": ("e.zip", zip_path.read_bytes(), "application/zip")},
                                     timeout=300))
        except httpx.TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _stats_match(task_dir: Path) -> None:
    stored = json.loads((task_dir / "meta/stats.json").read_text())
    fresh = recalc_stats(task_dir)
    assert stored.keys() == fresh.keys()
    for col in fresh:
        assert stored[col]["count"] == fresh[col]["count"]
        for k in ("mean", "std", "min", "max"):
            assert all(abs(a - b) <= 1e-9 for a, b in zip(stored[col][k], fresh[col][k], strict=True))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_round_trip_simulated_rigs_into_a_bucket(uri: str, tmp_path: Path) -> None:
    pc1 = simulate(tmp_path / "pc1", "pick", 2, seed=1)
    pc2 = simulate(tmp_path / "pc2", "pick", 1, seed=2)
    with _server(tmp_path, uri) as srv:
        r1 = upload_episodes(pc1, server=srv.url)
        r2 = upload_episodes(pc2, server=srv.url)
        assert r1.ok and r2.ok
        assert [o.server_episode_index for o in r1.outcomes] == [1, 2]
        assert [o.server_episode_index for o in r2.outcomes] == [3]  # pc2's N=1 is taken: renumbered
        eps = httpx.get(srv.url + "/api/v1/tasks/pick/episodes").json()["episodes"]
        assert [e["episode_index"] for e in eps] == [1, 2, 3]
        assert eps[2]["uploaded_by"]["client_episode_index"] == 1
        rel = eps[0]["files"][0]
        got = httpx.get(srv.url + f"/api/v1/tasks/pick/episodes/1/files/{rel}")
        assert got.status_code == 200 and got.content == (pc1 / rel).read_bytes()
        assert httpx.get(srv.url + "/api/v1/tasks/pick/episodes/4/files/" + rel).status_code == 404
    held = _task_objects(uri, "pick")
    for g in list_task_episodes(pc1):  # pc1's N are free on the server: every file byte-identical
        for p in g.paths():
            assert held[p.relative_to(pc1).as_posix()] == p.read_bytes()
    (pc2_ep,) = list_task_episodes(pc2)
    for key, p in pc2_ep.videos.items():  # renumbered: videos renamed, never re-encoded
        assert held[f"videos/chunk-000/{key}/episode-002{p.suffix}"] == p.read_bytes()
    b = Bucket(uri)  # the sha256 the server recorded is the one of the bytes held
    for rel, data in held.items():
        if rel.startswith(("data/", "videos/", "meta/episodes/")):
            assert b.sha256_of(f"pick/{rel}") == _sha(data)
    assert not b.list_objects(".egopool-server/journals/")  # every journal gone
    assert cli(["validate", f"{uri}/pick"]) == 0  # `egopool validate s3://...` on the bucket itself
    from egopool import open_task

    remote = open_task(f"{uri}/pick")
    assert [e.index for e in remote.episodes()] == [1, 2, 3]
    local = _download(uri, "pick", tmp_path / "copy")
    report = validate_task(local)
    assert report.ok, [f.one_line() for f in report.findings]
    assert json.loads((local / "meta/info.json").read_text())["total_episodes"] == 3
    _stats_match(local)


@pytest.mark.parametrize("stage", ["placed", "committed"])
def test_kill_server_mid_publish(stage: str, uri: str, tmp_path: Path) -> None:
    from egopool.transfer import pack_episode

    task = write_task(tmp_path / "pc", episodes=2)
    with _server(tmp_path, uri) as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
    before = _objects(uri)
    packed = pack_episode(task, 2, tmp_path / "zips")
    paused = _server(tmp_path, uri, EGOPOOL_SERVER_PAUSE=stage).start()
    try:
        thread, result = _post_in_thread(paused.url, packed.path, packed.file)
        wait_for(tmp_path / "state" / f"paused-{stage}")
        mid = _objects(uri)
        assert any(k.startswith(".egopool-server/journals/") for k in mid)
        assert "pick/data/chunk-000/episode-001.parquet" in mid  # every object PUT, the row (not) yet
        assert ("pick/meta/episodes/chunk-000/episode-001.parquet" in mid) == (stage == "committed")
        listed = httpx.get(paused.url + "/api/v1/tasks/pick/episodes").json()["episodes"]
        assert [e["episode_index"] for e in listed] == ([1] if stage == "placed" else [1, 2])
        from egopool import open_task  # a reader of the bucket counts an episode from its row on, too

        assert [e.index for e in open_task(f"{uri}/pick").episodes()] == ([1] if stage == "placed" else [1, 2])
        assert httpx.get(paused.url + "/api/v1/tasks/pick/episodes/2/files/data/chunk-000/episode-001.parquet"
                         ).status_code == (404 if stage == "placed" else 200)
    finally:
        paused.kill()
    thread.join(30)
    assert isinstance(result[0], httpx.TransportError)
    with _server(tmp_path, uri) as srv:  # the start-up sweep
        after = _objects(uri)
        assert not [k for k in after if k.startswith(".egopool-server/journals/")]
        if stage == "placed":
            assert after == before  # rolled back, object for object
        report = upload_episodes(task, server=srv.url)
        assert report.ok
        assert [o.status for o in report.outcomes] == ["duplicate", "uploaded" if stage == "placed" else "duplicate"]
        assert report.outcomes[1].server_episode_index == 2
    assert validate_task(f"{uri}/pick").ok
    local = _download(uri, "pick", tmp_path / "copy")
    assert [g.index for g in list_task_episodes(local)] == [1, 2]
    assert json.loads((local / "meta/info.json").read_text())["total_episodes"] == 2
    _stats_match(local)


def test_kill_weed_mid_publish(s3_server: Any, uri: str, tmp_path: Path) -> None:
    """SIGKILL of `weed` while a publish has PUT its objects (and of the server, which cannot go on without it):
    after both restart, nothing of the episode is visible or left, and the upload completes."""
    from egopool.transfer import pack_episode

    task = write_task(tmp_path / "pc", episodes=2)
    with _server(tmp_path, uri) as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
    before = _objects(uri)
    packed = pack_episode(task, 2, tmp_path / "zips")
    paused = _server(tmp_path, uri, EGOPOOL_SERVER_PAUSE="placed").start()
    try:
        thread, _ = _post_in_thread(paused.url, packed.path, packed.file)
        wait_for(tmp_path / "state" / "paused-placed")
        s3_server.kill()
    finally:
        paused.kill()
    thread.join(30)
    s3_server.start()
    mid = _objects(uri)  # weed kept what it acknowledged: the episode's objects, no row
    assert "pick/data/chunk-000/episode-001.parquet" in mid
    assert "pick/meta/episodes/chunk-000/episode-001.parquet" not in mid
    with _server(tmp_path, uri) as srv:
        assert _objects(uri) == before
        assert [e["episode_index"] for e in httpx.get(srv.url + "/api/v1/tasks/pick/episodes").json()["episodes"]
                ] == [1]
        assert upload_episodes(task, server=srv.url).ok
    local = _download(uri, "pick", tmp_path / "copy")
    assert [g.index for g in list_task_episodes(local)] == [1, 2]
    assert validate_task(local).ok


def test_weed_killed_while_the_server_runs(s3_server: Any, uri: str, tmp_path: Path) -> None:
    """`weed` SIGKILLed after the publish PUT the episode's objects, the server still running: the commit fails
    (the client sees a 5xx), the leftovers stay named by the server's journal, and once `weed` is back the
    server undoes them before its next import into the task, so the re-upload lands as N (not N+1)."""
    from egopool.transfer import pack_episode

    task = write_task(tmp_path / "pc", episodes=2)
    with _server(tmp_path, uri) as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
    before = _objects(uri)
    packed = pack_episode(task, 2, tmp_path / "zips")
    marker = tmp_path / "state" / "paused-placed"
    with _server(tmp_path, uri, EGOPOOL_SERVER_PAUSE="placed") as srv:
        thread, result = _post_in_thread(srv.url, packed.path, packed.file)
        wait_for(marker)
        s3_server.kill()
        marker.unlink()  # the import goes on: its row PUT meets no server
        thread.join(300)
        assert isinstance(result[0], httpx.Response) and result[0].status_code >= 500
        s3_server.start()
        left = _objects(uri)
        assert any(k.startswith(".egopool-server/journals/") for k in left)
        assert "pick/meta/episodes/chunk-000/episode-001.parquet" not in left
        assert [e["episode_index"] for e in httpx.get(srv.url + "/api/v1/tasks/pick/episodes").json()["episodes"]
                ] == [1]
        thread, result = _post_in_thread(srv.url, packed.path, packed.file)
        wait_for(marker)
        mid = _objects(uri)
        assert not [k for k in mid if k.startswith(".egopool-server/journals/") and k not in left]  # N reused
        marker.unlink()
        thread.join(300)
        assert isinstance(result[0], httpx.Response) and result[0].status_code == 200, result[0]
        assert result[0].json()["episode_index"] == 2
    after = _objects(uri)
    assert not [k for k in after if k.startswith(".egopool-server/journals/")]
    assert set(after) - set(before) == {k for k in after if "episode-001" in k}  # episode 2's objects, once


def test_two_servers_one_bucket_task(uri: str, tmp_path: Path) -> None:
    pcs = [write_task(tmp_path / f"pc{i}", episodes=4, first_value=100.0 * i) for i in range(2)]
    a, b = _server(tmp_path, uri, "state-a").start(), _server(tmp_path, uri, "state-b").start()
    try:
        reports: list[Any] = [None, None]

        def up(i: int, srv: ServerProc) -> None:
            reports[i] = upload_episodes(pcs[i], server=srv.url)

        threads = [threading.Thread(target=up, args=(i, s)) for i, s in enumerate((a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        assert all(r is not None and r.ok for r in reports)
        got = sorted(o.server_episode_index for r in reports for o in r.outcomes)
        assert got == list(range(1, 9))  # eight episodes, eight distinct N
        for srv in (a, b):
            listed = httpx.get(srv.url + "/api/v1/tasks/pick/episodes").json()["episodes"]
            assert [e["episode_index"] for e in listed] == list(range(1, 9))
    finally:
        a.stop()
        b.stop()
    local = _download(uri, "pick", tmp_path / "copy")
    assert validate_task(local).ok
    _stats_match(local)  # every server's stats merge kept (If-Match retried, none lost)
    info = json.loads((local / "meta/info.json").read_text())
    assert info["total_episodes"] == 8
    firsts = sorted(float(v) for v in _first_values(local))  # each PC's episodes, each once
    assert firsts == sorted([100.0 * i + k for i in range(2) for k in range(4)])


def _first_values(task_dir: Path) -> list[float]:
    import pyarrow.parquet as pq

    out = []
    for g in list_task_episodes(task_dir):
        t = pq.read_table(g.data)
        col = next(c for c in t.column_names if c.startswith("observation.") or c.endswith("glove"))
        out.append(float(t.column(col)[0].as_py()[0]))
    return out


def test_stats_recalc_waits_for_a_publish_in_progress(uri: str, tmp_path: Path) -> None:
    """`stats recalc s3://` while a server has committed a row but not merged its stats: the recalc waits for the
    merge (the journal), so the episode is counted once."""
    from egopool.ops.stats_bucket import recalc_bucket_stats
    from egopool.storage import as_path
    from egopool.transfer import pack_episode

    task = write_task(tmp_path / "pc", episodes=2)
    with _server(tmp_path, uri) as srv:
        assert upload_episodes(task, [1], server=srv.url).ok
    packed = pack_episode(task, 2, tmp_path / "zips")
    marker = tmp_path / "state" / "paused-committed"
    with _server(tmp_path, uri, EGOPOOL_SERVER_PAUSE="committed") as srv:
        thread, result = _post_in_thread(srv.url, packed.path, packed.file)
        wait_for(marker)  # episode 2's row is in place, its stats merge not done
        box: dict[str, Any] = {}
        recalc = threading.Thread(target=lambda: box.update(r=recalc_bucket_stats(as_path(f"{uri}/pick"))))
        recalc.start()
        time.sleep(2.0)
        assert recalc.is_alive()  # waiting for the journal to go
        marker.unlink()
        thread.join(120)
        recalc.join(120)
        assert isinstance(result[0], httpx.Response) and result[0].status_code == 200
    assert box["r"].episodes == 2
    _stats_match(_download(uri, "pick", tmp_path / "copy"))  # counted once


@pytest.mark.parametrize("case", ["short-bucket", "double-slash", "dot-dot", "bad-secret"])
def test_a_store_that_cannot_work_is_one_line_before_the_server_starts(case: str, uri: str, tmp_path: Path) -> None:
    """`serve --store s3://...` (O24): a bucket name under 3 characters or refused keys died in a traceback inside
    uvicorn's start-up; `//` and `..` started a server whose keys no reader accepts (or the store refuses)."""
    import os
    import subprocess
    import sys

    store, env, fix = {
        "short-bucket": ("s3://ab/pooled", {}, "a bucket name has 3 to 63 characters"),
        "double-slash": (f"{uri}/x//y", {}, "'..' path component"),
        "dot-dot": (f"{uri}/x/../y", {}, "'..' path component"),
        "bad-secret": (f"{uri}/pooled", {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}, "AWS_ACCESS_KEY_ID"),
    }[case]
    r = subprocess.run([sys.executable, "-m", "egopool", "serve", "--store", store, "--state", str(tmp_path / "st"),
                        "--port", "0", "--no-previews"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("egopool: error: ") and store.rstrip("/") in lines[0] and fix in lines[0], lines[0]
