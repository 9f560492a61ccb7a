"""`egopool sync` between a directory and a real SeaweedFS bucket (docs/decisions.md O15, O16): both ways, byte
for byte, resumable after a kill -9, never overwriting another episode under the same N."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from transfer_helpers import simulate, snapshot, write_task
from validate_support import reseal

from egopool.layout import list_task_episodes
from egopool.storage import as_path
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("s3")
pytest.importorskip("boto3")

from egopool.storage.bucket import Bucket  # noqa: E402

BUCKET = "sync"


@pytest.fixture()
def prefix(s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    s3_server.create_bucket(BUCKET)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))  # the sync owner id and locks of this test
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"


def _sync(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", *args, "--json"], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=600)
    assert r.stdout, r.stderr
    return r.returncode, json.loads(r.stdout)


def _episode_bytes(task: Path) -> dict[str, bytes]:
    """Every file of every committed episode (videos, data, row), by task-relative path."""
    return {p.relative_to(task).as_posix(): p.read_bytes() for g in list_task_episodes(task, committed_only=True)
            for p in g.paths()}


def _objects(uri: str) -> dict[str, bytes]:
    b = Bucket(uri)
    return {o.key: (b.get(o.key) or (b"", ""))[0] for o in b.list_objects("")}


def test_directory_to_bucket_and_back(prefix: str, tmp_path: Path) -> None:
    src = simulate(tmp_path / "pc", "pick", 2)
    rc, out = _sync(str(src), f"{prefix}/pick", "--dry-run")
    assert rc == 0 and out["would_copy"] == 2 and not _objects(prefix)  # a dry run writes nothing
    rc, out = _sync(str(src), f"{prefix}/pick")
    assert rc == 0 and (out["copied"], out["skipped"]) == (2, 0)
    assert out["bytes"] == sum(len(v) for v in _episode_bytes(src).values())
    assert validate_task(f"{prefix}/pick").ok
    held = _objects(prefix)
    for rel, data in _episode_bytes(src).items():
        assert held[f"pick/{rel}"] == data
    assert not [k for k in held if k.startswith(".egopool-server/")]  # no journal left
    rc, out = _sync(str(src), f"{prefix}/pick")  # again: everything is there
    assert rc == 0 and (out["copied"], out["skipped"]) == (0, 2)

    back = tmp_path / "back" / "pick"
    rc, out = _sync(f"{prefix}/pick", str(back))
    assert rc == 0 and out["copied"] == 2
    assert _episode_bytes(back) == _episode_bytes(src)
    report = validate_task(back)
    assert report.ok, [f.one_line() for f in report.findings]
    assert json.loads((back / "meta/stats.json").read_text()) == json.loads((src / "meta/stats.json").read_text())
    rc, out = _sync(f"{prefix}/pick", str(back))
    assert rc == 0 and out["skipped"] == 2


def test_another_episode_under_the_same_n_is_refused(prefix: str, tmp_path: Path) -> None:
    mine = write_task(tmp_path / "a", episodes=2)
    other = write_task(tmp_path / "b", episodes=1, first_value=50.0)
    assert _sync(str(other), f"{prefix}/pick")[0] == 0
    before = _objects(prefix)
    rc, out = _sync(str(mine), f"{prefix}/pick")
    assert rc == 1
    assert [(e["index"], e["status"]) for e in out["episodes"]] == [(1, "refused"), (2, "copied")]
    assert "episode 1" in out["episodes"][0]["reason"]
    after = _objects(prefix)
    assert all(after[k] == v for k, v in before.items() if "episode-000" in k)  # N=1 untouched
    # and into a directory: the same rule
    dest = tmp_path / "dest"
    rc, _ = _sync(str(other), str(dest / "pick"))
    assert rc == 0
    snap = snapshot(dest / "pick")
    rc, out = _sync(str(mine), str(dest / "pick"))
    assert rc == 1 and out["episodes"][0]["status"] == "refused"
    assert {k: v for k, v in snapshot(dest / "pick").items() if "episode-000" in k} == \
        {k: v for k, v in snap.items() if "episode-000" in k}


@pytest.mark.parametrize("direction", ["to_bucket", "to_directory"])
def test_killed_sync_resumes(direction: str, prefix: str, tmp_path: Path) -> None:
    src_dir = write_task(tmp_path / "pc", episodes=3)
    if direction == "to_bucket":
        src, dst = str(src_dir), f"{prefix}/pick"
    else:
        assert _sync(str(src_dir), f"{prefix}/pick")[0] == 0
        src, dst = f"{prefix}/pick", str(tmp_path / "dest" / "pick")
    marker = tmp_path / "xdg" / "egopool" / "sync-paused-placed"
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "sync", src, dst, "--json"],
                            env={**os.environ, "EGOPOOL_SYNC_PAUSE": "placed"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(30)
    marker.unlink()
    # killed with episode 1's files written and its row not: nobody sees it
    if direction == "to_bucket":
        from egopool import open_task

        assert "pick/data/chunk-000/episode-000.parquet" in _objects(prefix)
        assert not Bucket(prefix).exists("pick/meta/info.json")  # a new task exists from its first row on
        with pytest.raises(Exception):
            open_task(dst)
    else:
        assert (Path(dst) / "data/chunk-000/episode-000.parquet").is_file()
        assert not (Path(dst) / "meta/episodes/chunk-000/episode-000.parquet").exists()
    rc, out = _sync(src, dst)
    assert rc == 0 and out["copied"] == 3
    if direction == "to_bucket":
        assert not [k for k in _objects(prefix) if k.startswith(".egopool-server/")]
        assert validate_task(dst).ok
        held = _objects(prefix)
        assert all(held[f"pick/{r}"] == v for r, v in _episode_bytes(src_dir).items())
    else:
        assert _episode_bytes(Path(dst)) == _episode_bytes(src_dir)
        assert validate_task(dst).ok


def test_an_episode_being_synced_into_a_bucket_task_is_not_shown_as_damaged(prefix: str, tmp_path: Path) -> None:
    """ls and validate on a bucket task while a sync has placed episode 2's files but not its row (O20):
    episode 2 is neither listed nor an error, and ls says it is being published."""
    assert _sync(str(write_task(tmp_path / "one", episodes=1)), f"{prefix}/pick")[0] == 0
    src = write_task(tmp_path / "three", episodes=3)  # the same episode 1 (deterministic), then 2 and 3
    marker = tmp_path / "xdg" / "egopool" / "sync-paused-placed"
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "sync", str(src), f"{prefix}/pick", "--json"],
                            env={**os.environ, "EGOPOOL_SYNC_PAUSE": "placed"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert "pick/data/chunk-000/episode-001.parquet" in _objects(prefix)  # episode 2's files are there
        for argv in (["ls", "--json"], ["validate", "--json"], ["ls"]):
            r = subprocess.run([sys.executable, "-m", "egopool", argv[0], f"{prefix}/pick", *argv[1:]],
                               capture_output=True, text=True, timeout=300)
            assert "Traceback" not in r.stderr, r.stderr
            assert r.returncode == 0, (argv, r.stdout, r.stderr)
            if argv == ["ls", "--json"]:
                assert [row["episode_index"] for row in json.loads(r.stdout)] == [1]
            elif argv == ["ls"]:
                assert "publish or delete under way: 2" in r.stdout
    finally:
        proc.kill()
        proc.wait(30)
        marker.unlink(missing_ok=True)
    rc, out = _sync(str(src), f"{prefix}/pick")  # the killed run's own journal is rolled back, then copied
    assert rc == 0 and (out["copied"], out["skipped"]) == (2, 1)


@pytest.mark.parametrize("tail", ["x//pick", "x/../pick", "x/./pick"])
def test_a_destination_uri_a_reader_refuses_is_refused_before_writing(prefix: str, tmp_path: Path, tail: str) -> None:
    """`s3://b/p/x//pick` was written as `x/pick` (a URI no reader accepts), `..` reached the server (O22)."""
    src = write_task(tmp_path / "pc", episodes=1)
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(src), f"{prefix}/{tail}"], capture_output=True,
                       text=True, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert f"{prefix}/{tail}" in lines[0] and "'..' path component" in lines[0], lines[0]
    assert not _objects(prefix)


@pytest.mark.parametrize("direction", ["to_bucket", "to_directory"])
def test_a_damaged_source_episode_is_refused_and_the_others_are_copied(direction: str, prefix: str,
                                                                       tmp_path: Path) -> None:
    """Episode 2's data parquet truncated in SRC (O23): it is refused naming its place in SRC, nothing of it stays
    in DST (into a directory its row used to be committed, then the whole run stopped naming DST's file), and
    episodes 1 and 3 are copied."""
    local = write_task(tmp_path / "pc", episodes=3)
    rel = "data/chunk-000/episode-001.parquet"
    if direction == "to_bucket":
        good = (local / rel).read_bytes()
        (local / rel).write_bytes(good[: len(good) // 2])
        src, dst = str(local), f"{prefix}/pick"
    else:
        assert _sync(str(local), f"{prefix}/pick")[0] == 0
        b = Bucket(f"{prefix}/pick")
        body = (b.get(rel) or (b"", ""))[0]
        b.put(rel, body[: len(body) // 2])  # rewritten by another tool: no sha256 recorded with it
        src, dst = f"{prefix}/pick", str(tmp_path / "dest" / "pick")
    rc, out = _sync(src, dst)
    assert rc == 1 and (out["copied"], out["refused"]) == (2, 1), out
    bad = out["episodes"][1]
    assert bad["index"] == 2 and bad["status"] == "refused"
    # its row records the file's sha256: the truncated copy is refused by its checksum, before it is read (X4)
    assert f"{src}/{rel}: checksum mismatch" in bad["reason"] and "destination is untouched" in bad["reason"], bad
    if direction == "to_bucket":
        held = _objects(prefix)
        assert not [k for k in held if "episode-001" in k or k.startswith(".egopool-server/")], sorted(held)
    else:
        assert not list(Path(dst).rglob("*episode-001*"))
    assert [g.index for g in list_task_episodes(as_path(dst), committed_only=False)] == [1, 3]
    assert validate_task(dst).ok


def test_an_uncommitted_source_episode_is_named_not_copied(prefix: str, tmp_path: Path) -> None:
    """Episode 3 of SRC has its files but no row (O25): it used to vanish from the report ("copied 2", nothing
    else); now it is named as not copied, and nothing of it reaches the bucket."""
    src = write_task(tmp_path / "pc", episodes=3)
    (src / "meta/episodes/chunk-000/episode-002.parquet").unlink()
    rc, out = _sync(str(src), f"{prefix}/pick")
    assert rc == 0 and (out["copied"], out["uncommitted"], out["refused"]) == (2, 1, 0), out
    last = out["episodes"][-1]
    assert last["index"] == 3 and last["status"] == "uncommitted" and "no meta/episodes row" in last["reason"]
    assert not [k for k in _objects(prefix) if "episode-002" in k]
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(src), f"{prefix}/pick"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "not copied (uncommitted) 1" in r.stdout and "episode 3: uncommitted" in r.stdout


def test_an_episode_another_writer_is_publishing_is_refused_with_the_fix(prefix: str, tmp_path: Path) -> None:
    """Another writer's live claim on N (its journal object): the outcome names the journal and says to sync again."""
    from egopool.publish import journal_doc, journal_key

    src = write_task(tmp_path / "pc", episodes=2)
    b = Bucket(prefix)
    doc = journal_doc("pick", 2, "other-host-0123", ["pick/data/chunk-000/episode-001.parquet"],
                      "pick/meta/episodes/chunk-000/episode-001.parquet")
    b.put(journal_key("pick", 2), json.dumps(doc).encode(), if_none_match=True)
    rc, out = _sync(str(src), f"{prefix}/pick")
    assert rc == 1 and (out["copied"], out["refused"]) == (1, 1), out
    reason = out["episodes"][1]["reason"]
    assert b.url(journal_key("pick", 2)) in reason and "run the sync again once it has finished" in reason, reason
    b.delete([journal_key("pick", 2)])  # the other writer gave up: the next run copies episode 2
    rc, out = _sync(str(src), f"{prefix}/pick")
    assert rc == 0 and (out["copied"], out["skipped"]) == (1, 1), out


@pytest.mark.parametrize("direction", ["to_bucket", "to_directory"])
def test_a_truncated_source_row_is_refused_not_copied(direction: str, prefix: str, tmp_path: Path) -> None:
    """Episode 2's meta/episodes row (the commit object) truncated in SRC (issue 24: it was copied and the run
    exited 0): refused naming its place in SRC, nothing of episode 2 reaches DST, the others are copied."""
    local = write_task(tmp_path / "pc", episodes=3)
    rel = "meta/episodes/chunk-000/episode-001.parquet"
    if direction == "to_bucket":
        good = (local / rel).read_bytes()
        (local / rel).write_bytes(good[: len(good) - 9])
        src, dst = str(local), f"{prefix}/pick"
    else:
        assert _sync(str(local), f"{prefix}/pick")[0] == 0
        b = Bucket(f"{prefix}/pick")
        body = (b.get(rel) or (b"", ""))[0]
        b.put(rel, body[: len(body) - 9])
        src, dst = f"{prefix}/pick", str(tmp_path / "dest" / "pick")
    rc, out = _sync(src, dst)
    assert rc == 1 and (out["copied"], out["refused"]) == (2, 1), out
    bad = out["episodes"][1]
    assert bad["index"] == 2 and bad["status"] == "refused" and f"{src}/{rel} does not read" in bad["reason"], bad
    if direction == "to_bucket":
        assert not [k for k in _objects(prefix) if "episode-001" in k]
    else:
        assert not list(Path(dst).rglob("*episode-001*"))
    assert validate_task(dst).ok


@pytest.mark.parametrize("direction", ["to_bucket", "to_directory"])
def test_a_legacy_png16_task_is_copied_both_ways(direction: str, prefix: str, tmp_path: Path) -> None:
    """A task whose depth stream is a legacy PNG16 directory of frames (file_format.md §8; issue 24: sync took the
    directory for a file and failed both ways): every frame is copied and the copy reads the same depth."""
    import numpy as np

    from egopool import open_task
    from egopool.codecs.depth_png import encode_png16
    from egopool.write import StreamSpec, TaskWriter

    rng = np.random.default_rng(3)
    frames = [rng.integers(300, 9000, size=(24, 40), dtype=np.uint16) for _ in range(3)]
    tw = TaskWriter(tmp_path / "w", "png16", fps=30.0)
    ep = tw.begin_episode(streams=[StreamSpec("d435_depth", "depth", 40, 24, codec="ffv1")])
    for d in frames:
        ep.add_frame({}, images={"d435_depth": d})
    ep.finish()
    local = tmp_path / "w" / "png16"
    vdir = local / "videos" / "chunk-000" / "d435_depth"
    (vdir / "episode-000.mkv").unlink()
    (vdir / "episode-000").mkdir()
    for i, d in enumerate(frames):
        (vdir / "episode-000" / f"{i:06d}.png").write_bytes(encode_png16(d))
    info = json.loads((local / "meta" / "info.json").read_text())
    info["video_extensions"]["d435_depth"] = "png"
    (local / "meta" / "info.json").write_text(json.dumps(info))
    reseal(local)  # the row records the frames' checksums, as a tool writing PNG16 would
    src, dst = str(local), f"{prefix}/png16"
    if direction == "to_directory":
        assert _sync(src, dst)[0] == 0
        src, dst = dst, str(tmp_path / "back" / "png16")
    rc, out = _sync(src, dst)
    assert rc == 0 and out["copied"] == 1, out
    back = list(open_task(as_path(dst)).episode(1).depth("d435_depth"))
    assert len(back) == 3
    for a, b in zip(frames, back, strict=True):
        np.testing.assert_array_equal(b, a)
    assert validate_task(dst).ok


def test_a_deleted_n_is_never_published_again_into_the_bucket(prefix: str, tmp_path: Path) -> None:
    """`egopool delete s3://.../T 2` retires N=2 (its tombstone, decisions O37); a later sync of a copy that still
    holds episode 2 does not bring it back under N=2 (the claim checks the tombstone): N is never reused."""
    local = write_task(tmp_path / "pc", episodes=3)
    dst = f"{prefix}/pick"
    assert _sync(str(local), dst)[0] == 0
    r = subprocess.run([sys.executable, "-m", "egopool", "delete", dst, "2"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    rc, out = _sync(str(local), dst)
    by_n = {o["index"]: o["status"] for o in out["episodes"]}
    assert by_n[1] == by_n[3] == "skipped" and by_n[2] == "refused", out
    assert [g.index for g in list_task_episodes(as_path(dst), committed_only=False)] == [1, 3]
    assert validate_task(dst).ok
