"""What one upload's verification opens and reads (issue 15 H, docs/decisions.md U20), on the real
``verify_upload``, validator and disk.

* a video whose frames are small is opened once per verification: the container the frame-size bound
  opened is the one the validator probes and decodes; one with larger frames is closed after the bound
  and opened again by the validator (an import holds one large decoder at a time, U9);
* a junk packet in such a video is still named with its frame = data row (422), from that container;
* ``validate_task`` with a handed container gives the report it gives without, and takes (closes) only
  the containers of its task's files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import av
import numpy as np
import pytest

from egopool import StreamSpec, TaskWriter, open_task
from egopool.errors import UploadRejectedError
from egopool.codecs.video import open_media
from egopool.server.importer import verify_upload
from egopool.server.zipcheck import Limits
from egopool.transfer import pack_episodes
from egopool.validate import validate_task

ROWS = 30


def _task(root: Path) -> Path:
    """One 30-row episode: a 64x48 H.264 RGB stream and a 64x48 FFV1 depth stream (both small frames)."""
    tw = TaskWriter(root, "pick", fps=30.0, registry=False)
    ep = tw.begin_episode(streams=[StreamSpec("cam", "rgb", 64, 48), StreamSpec("cam_depth", "depth", 64, 48,
                                                                               codec="ffv1")],
                          created_at=1.79e9)
    rng = np.random.default_rng(3)
    for i in range(ROWS):
        ep.add_frame({}, hardware_ns=1000 + i, images={
            "cam": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
            "cam_depth": rng.integers(300, 5000, (48, 64), dtype=np.uint16)})
    ep.finish()
    return root / "pick"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _task(tmp_path_factory.mktemp("rec"))


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every ``av.open`` from here on: the file each opened."""
    seen: list[str] = []
    real = av.open

    def counting(file, *a, **k):  # type: ignore[no-untyped-def]
        seen.append(str(file))
        return real(file, *a, **k)

    monkeypatch.setattr(av, "open", counting)
    return seen


def _junk_packet(path: Path, frame: int) -> None:
    """Overwrite the payload of the packet presented as ``frame`` with noise; the container stays intact."""
    with av.open(str(path)) as c:
        packets = sorted(((p.pts, bytes(p)) for p in c.demux(c.streams.video[0]) if p.size), key=lambda t: t[0])
    data = bytearray(path.read_bytes())
    payload = packets[frame][1]
    at = bytes(data).find(payload)
    assert at > 0 and bytes(data).find(payload, at + 1) < 0
    data[at:at + len(payload)] = np.random.default_rng(frame).integers(0, 256, len(payload), np.uint8).tobytes()
    path.write_bytes(bytes(data))


def _verify(task: Path, tmp: Path):  # type: ignore[no-untyped-def]
    zip_path = pack_episodes(task, [1], tmp / "zips", registry=False)[0].path
    staging = tmp / "staging" / "pick"
    staging.mkdir(parents=True)
    return verify_upload(zip_path, staging, Limits(), form_index=None, client_key=None, token_id=None), staging


def test_each_small_video_is_opened_once_per_verification(recorded: Path, tmp_path: Path, opens: list[str]) -> None:
    zip_path = pack_episodes(recorded, [1], tmp_path / "zips", registry=False)[0].path
    staging = tmp_path / "staging" / "pick"
    staging.mkdir(parents=True)
    opens.clear()  # packing probes the videos too
    v = verify_upload(zip_path, staging, Limits(), form_index=None, client_key=None, token_id=None)
    assert v.validation == {"ok": True, "errors": 0, "warnings": 0}
    assert (v.length, sorted(v.streams)) == (ROWS, ["cam", "cam_depth"])
    videos = sorted(str(p) for p in staging.glob("videos/chunk-000/*/episode-000.*"))
    assert len(videos) == 2
    # one open per video, plus the depth stream's layout probe the validator makes (docs/decisions.md C5)
    assert sorted(os.path.relpath(f, staging) for f in opens) == sorted(
        [os.path.relpath(p, staging) for p in videos] + ["videos/chunk-000/cam_depth/episode-000.mkv"])


def test_a_large_frame_video_is_opened_again_by_the_validator(tmp_path: Path, opens: list[str]) -> None:
    tw = TaskWriter(tmp_path / "rec", "pick", fps=30.0, registry=False)
    ep = tw.begin_episode(streams=[StreamSpec("cam", "rgb", 352, 288)], created_at=1.79e9)
    for i in range(4):
        ep.add_frame({}, hardware_ns=1000 + i, images={"cam": np.full((288, 352, 3), 20 * i, np.uint8)})
    ep.finish()
    zip_path = pack_episodes(tmp_path / "rec" / "pick", [1], tmp_path / "zips", registry=False)[0].path
    staging = tmp_path / "staging" / "pick"
    staging.mkdir(parents=True)
    opens.clear()
    v = verify_upload(zip_path, staging, Limits(), form_index=None, client_key=None, token_id=None)
    assert (v.validation["ok"], v.length) == (True, 4)
    assert [os.path.relpath(f, staging) for f in opens] == ["videos/chunk-000/cam/episode-000.mp4"] * 2


def test_a_junk_packet_in_a_small_video_is_still_named(recorded: Path, tmp_path: Path) -> None:
    task = Path(shutil.copytree(recorded, tmp_path / "rec" / "pick"))
    _junk_packet(open_task(task).episode(1).stream_path("cam"), 8)
    from validate_support import reseal

    reseal(task)  # the recorder wrote the junk packet itself: its checksum holds, the decoding must name it
    with pytest.raises(UploadRejectedError) as err:
        _verify(task, tmp_path)
    assert (err.value.status, err.value.reason) == (422, "validation")
    assert any("stream 'cam' frame 8 (data row 8) does not decode" in f["message"] and
               f["path"] == "videos/chunk-000/cam/episode-000.mp4" for f in err.value.findings), err.value.findings


def test_validate_task_takes_only_its_own_handed_containers(recorded: Path, tmp_path: Path) -> None:
    task = Path(shutil.copytree(recorded, tmp_path / "t" / "pick"))
    alone = [f.to_dict() for f in validate_task(task).findings]
    video = Path(os.path.abspath(open_task(task).episode(1).stream_path("cam")))
    other = Path(shutil.copy(video, tmp_path / "elsewhere.mp4"))  # not a file of the task
    handed = {video: open_media(video), other: open_media(other)}
    try:
        report = validate_task(task, media=handed)
    finally:
        for c in handed.values():
            c.close()
    assert [f.to_dict() for f in report.findings] == alone
    assert report.ok and list(handed) == [other]  # the task's container was taken; the other was left


def _thread_mode() -> tuple[bool, str]:
    """In a worker: whether it decodes in one thread, and the thread mode a scan leaves on a 352x288 stream."""
    import tempfile

    from egopool.codecs import decode_scan

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.mp4"
        with av.open(str(path), "w") as out:
            s = out.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = 352, 288, "yuv420p"
            for i in range(3):
                frame = av.VideoFrame.from_ndarray(np.full((288, 352, 3), 40 * i, np.uint8), format="rgb24")
                for p in s.encode(frame):
                    out.mux(p)
            for p in s.encode():
                out.mux(p)
        with av.open(str(path)) as c:
            scan = decode_scan.scan_opened(c, path)
            mode = str(c.streams.video[0].codec_context.thread_type)
    assert scan.decoded == 3
    return decode_scan.decodes_in_one_thread(), mode


def _thread_mode_after(seconds: float) -> tuple[bool, str]:
    import time

    time.sleep(seconds)  # the calls overlap
    return _thread_mode()


def test_a_full_pool_decodes_in_one_thread_a_lone_call_with_threads() -> None:
    """docs/decisions.md U34: a verification that starts while every core has one decodes a large frame in its
    own thread; one that starts alone keeps FFmpeg's slice threads; ``one_thread`` forces either."""
    from concurrent.futures import ThreadPoolExecutor

    from egopool.server.workers import VerifyPool

    pool = VerifyPool(2)
    pool.cores = 2  # as on the 2-core machine, whatever this one has
    forced = VerifyPool(1, one_thread=True)
    try:
        assert pool.run(_thread_mode)[0] is False  # alone: slice threads
        with ThreadPoolExecutor(2) as ex:
            first = ex.submit(pool.run, _thread_mode_after, 1.5)
            while pool._busy < 1:
                pass
            second = ex.submit(pool.run, _thread_mode_after, 0.0)
            got = [first.result(), second.result()]
        assert got[0][0] is False and got[0][1] != "ThreadType.NONE"
        assert got[1] == (True, "ThreadType.NONE")  # the second core's call: one thread
        assert forced.run(_thread_mode) == (True, "ThreadType.NONE")
    finally:
        pool.close()
        forced.close()
