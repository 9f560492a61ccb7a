"""Streamed downloads against a real ``egopool serve`` (docs/decisions.md P22): one episode's zip holds the
task's own bytes; a selection's zip holds one such zip per matching episode; the LeRobot download is the
export of the filter; a ``.rrd`` without rerun-sdk is a clear 501 naming the extra (with it, a recording);
scope ``read``."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, write_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

HAS_RERUN = importlib.util.find_spec("rerun") is not None


def _no_scratch_left(store: Path) -> bool:
    """The export's scratch directory is removed once the stream ends or the client leaves (the server closes
    the stream just after: wait for it, up to a generous deadline)."""
    for _ in range(600):
        if not [p for p in (store / ".egopool-server" / "staging").iterdir() if p.name.startswith("download-")]:
            return True
        time.sleep(0.1)
    return False


def _members_match(zf: zipfile.ZipFile, root: Path, n: int) -> list[str]:
    """Every member of an episode zip equals the task's file at that path; the member names (task-relative)."""
    names = zf.namelist()
    for name in names:
        assert name.startswith("pick_cup/")
        assert zf.read(name) == (root / name).read_bytes(), name
    rels = [x[len("pick_cup/"):] for x in names]
    assert "meta/info.json" in rels
    assert any(r.startswith("data/") for r in rels) and any(r.startswith("videos/") for r in rels)
    assert sum(1 for r in rels if r.startswith("meta/episodes/")) == 1
    return rels


def test_downloads(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    reader = add_token(tokens, "viewer", ["read"])
    anna = add_token(tokens, "anna", ["read", "review"])
    task = write_task(tmp_path / "pc", "pick_cup", episodes=3, rows=8)
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        auth = {"Authorization": f"Bearer {reader}"}
        api = f"{srv.url}/api/v1/tasks/pick_cup"

        # one episode: streamed (chunked, no Content-Length), its members are the task's bytes
        with httpx.stream("GET", f"{api}/episodes/2/download.zip", headers=auth) as r:
            assert r.status_code == 200
            assert r.headers["content-type"] == "application/zip"
            assert "content-length" not in r.headers and r.headers.get("transfer-encoding") == "chunked"
            assert r.headers["content-disposition"] == 'attachment; filename="pick_cup-2.zip"'
            raw = r.read()
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            assert zf.testzip() is None
            rels = _members_match(zf, store, 2)
        listed = httpx.get(f"{api}/episodes/2", headers=auth).json()["files"]
        page = httpx.get(f"{srv.url}/tasks/pick_cup/episodes/2", headers=auth).text  # linked from the pages
        assert 'href="/api/v1/tasks/pick_cup/episodes/2/download.zip"' in page
        assert 'href="/api/v1/tasks/pick_cup/episodes/2/download.rrd"' in page
        page = httpx.get(f"{srv.url}/tasks/pick_cup", params={"review": "accepted"}, headers=auth).text
        assert 'href="/api/v1/tasks/pick_cup/download/lerobot.zip?review=accepted"' in page
        assert sorted(rels) == sorted(["meta/info.json", *listed])

        # scope read; unknown episodes are 404 before anything is streamed
        assert httpx.get(f"{api}/episodes/2/download.zip").status_code == 401
        r = httpx.get(f"{api}/episodes/9/download.zip", headers=auth)
        assert r.status_code == 404 and r.json()["message"] == "no episode 9 in task 'pick_cup'"
        assert httpx.get(f"{srv.url}/api/v1/tasks/nope/episodes/1/download.zip", headers=auth).status_code == 404

        # a selection: the current filter (accepted), a zip of the episodes' zips
        for n in (1, 3):
            assert httpx.post(f"{api}/episodes/{n}/review", headers={"Authorization": f"Bearer {anna}"},
                              json={"episode": n, "version": 0, "verdict": "accept"}).status_code == 200
        r = httpx.get(f"{api}/download/episodes.zip", params={"review": "accepted"}, headers=auth)
        assert r.status_code == 200
        with zipfile.ZipFile(io.BytesIO(r.content)) as outer:
            assert outer.namelist() == ["pick_cup-1.zip", "pick_cup-3.zip"]
            for n in (1, 3):
                with zipfile.ZipFile(io.BytesIO(outer.read(f"pick_cup-{n}.zip"))) as inner:
                    _members_match(inner, store, n)
        assert httpx.get(f"{api}/download/episodes.zip", params={"review": "bogus"}, headers=auth).status_code == 400

        # reviewers' events go with the LeRobot download as --events-from takes them (P34): 3's is exported,
        # 2's is not in the selection (counted as left out)
        events = []
        for n, t0, t1, label in ((3, 0.1, 0.2, "slip"), (2, 0.0, 0.1, "occluded")):
            r = httpx.post(f"{api}/episodes/{n}/events", headers={"Authorization": f"Bearer {anna}"},
                           json={"episode": n, "t0": t0, "t1": t1, "label": label, "note": "by hand"})
            assert r.status_code == 200, r.text
            events.append(r.json())
        # a stale scratch directory that no download streams is swept when the next export starts (P33)
        staging = store / ".egopool-server" / "staging"
        stale, fresh = staging / "download-stale0000000", staging / "download-fresh0000000"
        for d in (stale, fresh):
            d.mkdir()
            (d / "part").write_bytes(b"x")
        os.utime(stale, (time.time() - 3600, time.time() - 3600))

        # the same filter as a LeRobot dataset: its info says two episodes, with the rows of 1 and 3
        r = httpx.get(f"{api}/download/lerobot.zip", params={"review": "accepted"}, headers=auth, timeout=300)
        assert r.status_code == 200, r.text[:500]
        with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
            info = json.loads(zf.read("pick_cup-lerobot/meta/info.json"))
            assert info["total_episodes"] == 2 and info["total_frames"] == 16
            assert any(x.startswith("pick_cup-lerobot/data/") for x in zf.namelist())
            mapping = json.loads(zf.read("pick_cup-lerobot/egopool_mapping.json"))
            assert info["features"]["language_events"]["dtype"] == "language"
        listed = mapping["events"]["events"]
        assert mapping["events"]["left_out"] == 1
        assert mapping["events"]["from"] == "this server's events (GET /api/v1/events?task=pick_cup)"
        assert [(e["id"], e["episode_index"], e["lerobot_episode_index"], e["label"], e["note"], e["t0"], e["t1"],
                 e["frames"]) for e in listed] == [(events[0]["id"], 3, 1, "slip", "by hand", 0.1, 0.2, [3, 6])]
        assert listed[0]["language_events"]["content"] == "slip: by hand"
        assert not stale.exists() and fresh.is_dir()  # the fresh one may still be someone's: kept
        shutil.rmtree(fresh)
        assert _no_scratch_left(store)

        # a download the client abandons after its first chunk leaves no scratch directory behind (P33)
        with httpx.stream("GET", f"{api}/download/lerobot.zip", params={"review": "accepted"}, headers=auth,
                          timeout=300) as r:
            assert r.status_code == 200
            first = next(r.iter_raw(1024))
            assert first[:4] == b"PK\x03\x04"
        assert _no_scratch_left(store)

        # a filter that matches nothing: the same 404 for both selection downloads (P35)
        for what in ("episodes.zip", "lerobot.zip"):
            r = httpx.get(f"{api}/download/{what}", params={"review": "flagged"}, headers=auth)
            assert r.status_code == 404, (what, r.text[:300])
            assert r.json()["message"] == "no pooled episode of task 'pick_cup' matches this filter"


def test_download_rerun_recording(tmp_path: Path) -> None:
    """The .rrd of one episode (rerun-sdk installed: .ci/run's rerun venvs run this) or a 501 naming the extra."""
    tokens = tmp_path / "tokens.json"
    up = add_token(tokens, "pc-7", ["upload:*", "declare:*"])
    reader = add_token(tokens, "viewer", ["read"])
    task = write_task(tmp_path / "pc", "pick_cup", episodes=2, rows=8)
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens), "--no-previews") as srv:
        assert upload_episodes(task, server=srv.url, token=up).ok
        auth = {"Authorization": f"Bearer {reader}"}
        api = f"{srv.url}/api/v1/tasks/pick_cup"
        assert httpx.get(f"{api}/episodes/1/download.rrd").status_code == 401
        r = httpx.get(f"{api}/episodes/1/download.rrd", headers=auth, timeout=300)
        if HAS_RERUN:
            assert r.status_code == 200, r.text[:500]
            assert r.content[:3] == b"RRF" and len(r.content) > 1000  # the .rrd stream header (RRF2 in 0.26-0.41)
            assert _no_scratch_left(store)
        else:
            assert r.status_code == 501
            msg = r.json()["message"]
            assert msg.startswith("this server cannot make a .rrd: egopool ") and "rerun-sdk" in msg, msg
            assert "EGOPOOL_EXTRAS=interop ./run" in msg and "pip install 'egopool[interop]'" in msg, msg
        assert httpx.get(f"{api}/episodes/9/download.rrd", headers=auth).status_code == 404


@pytest.mark.extra("s3")
def test_downloads_from_a_bucket_store(s3_server, tmp_path: Path) -> None:
    """The same streamed zips from a server whose store is a bucket (real SeaweedFS): the bytes are the objects'."""
    pytest.importorskip("boto3")
    import uuid

    from egopool.storage.bucket import Bucket

    s3_server.create_bucket("pool")
    uri = f"s3://pool/{uuid.uuid4().hex[:10]}"
    task = write_task(tmp_path / "pc", "pick_cup", episodes=2, rows=8)
    state = tmp_path / "state"
    with ServerProc(state, "--state", str(state), "--no-previews", store_arg=uri) as srv:
        assert upload_episodes(task, server=srv.url).ok
        api = f"{srv.url}/api/v1/tasks/pick_cup"
        bucket = Bucket(uri)
        r = httpx.get(f"{api}/episodes/2/download.zip")
        assert r.status_code == 200
        with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
            names = zf.namelist()
            assert "pick_cup/meta/info.json" in names and any("/videos/" in n for n in names)
            for name in names:
                assert zf.read(name) == (bucket.get(name) or (b"", ""))[0], name
        r = httpx.get(f"{api}/download/episodes.zip")
        with zipfile.ZipFile(io.BytesIO(r.content)) as outer:
            assert outer.namelist() == ["pick_cup-1.zip", "pick_cup-2.zip"]
        r = httpx.get(f"{api}/download/lerobot.zip")
        assert r.status_code == 501 and "this server's store is a bucket" in r.json()["message"]
