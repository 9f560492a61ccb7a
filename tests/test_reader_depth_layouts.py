"""Episode.depth over every depth layout under videos/ (file_format.md §3 video_extensions, §8, §12.6)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from validate_support import reseal

from egopool import StreamSpec, TaskWriter, list_task_episodes, open_task
from egopool._atomic import atomic_write_json
from egopool.codecs.depth_png import encode_png16
from egopool.validate import validate_task

DATA = Path(__file__).resolve().parent / "data" / "sevenscenes_tsdf_fusion"
KEY = "d435_depth"


@pytest.fixture(scope="module")
def kinect() -> list[np.ndarray]:
    frames = []
    for i in (3, 4):
        with av.open(str(DATA / f"frame-{i:06d}.depth.png")) as c:
            frames.append(np.ascontiguousarray(next(c.decode(video=0)).to_ndarray(format="gray16le")[100:164, 300:380]))
    return frames


@pytest.fixture()
def task(tmp_path, kinect):
    tw = TaskWriter(tmp_path, "depth_task", fps=30.0)
    h, w = kinect[0].shape
    ep = tw.begin_episode(streams=[StreamSpec(KEY, "depth", w, h, codec="ffv1")])
    for d in kinect:
        ep.add_frame({}, images={KEY: d})
    ep.finish()
    return tmp_path / "depth_task"


def _set_ext(task: Path, ext: str) -> None:
    info = json.loads((task / "meta" / "info.json").read_text())
    info["video_extensions"][KEY] = ext
    atomic_write_json(task / "meta" / "info.json", info)


def test_current_ffv1_layout(task, kinect):
    ep = open_task(task).episode(1)
    assert ep.stream_path(KEY).name == "episode-000.mkv"
    got = list(ep.depth(KEY))
    assert len(got) == 2 and all(np.array_equal(a, b) for a, b in zip(got, kinect))


@pytest.mark.parametrize("ffv1_first", [False, True])
def test_legacy_dual_stream_mkv_in_place(task, kinect, ffv1_first):
    path = task / "videos" / "chunk-000" / KEY / "episode-000.mkv"
    h, w = kinect[0].shape
    with av.open(str(path), "w", format="matroska") as out:
        streams = []
        for kind in (("ffv1", "h264") if ffv1_first else ("h264", "ffv1")):
            s = out.add_stream("ffv1" if kind == "ffv1" else "libx264", rate=Fraction(30))
            s.width, s.height, s.pix_fmt = w, h, "gray16le" if kind == "ffv1" else "yuv420p"
            streams.append((kind, s))
        for i, d in enumerate(kinect):
            for kind, s in streams:
                img = (av.VideoFrame.from_ndarray(d, format="gray16le") if kind == "ffv1" else
                       av.VideoFrame.from_ndarray(np.repeat((d >> 4).astype(np.uint8)[..., None], 3, 2), format="rgb24"))
                img.pts = i
                for p in s.encode(img):
                    out.mux(p)
        for _, s in streams:
            for p in s.encode():
                out.mux(p)
    got = list(open_task(task).episode(1).depth(KEY))
    assert len(got) == 2 and all(np.array_equal(a, b) for a, b in zip(got, kinect))


@pytest.mark.parametrize("dirname", ["episode-000", "episode-000.png"])
def test_legacy_png16_directory_is_enumerated_and_read(task, kinect, dirname):
    vdir = task / "videos" / "chunk-000" / KEY
    (vdir / "episode-000.mkv").unlink()
    seq = vdir / dirname
    seq.mkdir()
    for i, d in enumerate(kinect):
        (seq / f"{i:06d}.png").write_bytes(encode_png16(d))
    _set_ext(task, "png")
    reseal(task)  # the row records the frames' checksums, as a legacy writer's task copied by egopool would
    groups = list_task_episodes(task)
    assert len(groups) == 1 and groups[0].videos == {KEY: seq}
    ep = open_task(task).episode(1)
    assert ep.streams[KEY] == seq and ep.stream_path(KEY) == seq
    got = list(ep.depth(KEY))
    assert len(got) == 2 and all(np.array_equal(a, b) for a, b in zip(got, kinect))
    # the validator accepts the legacy layout with a warning (no stray-file warnings for the frames)
    report = validate_task(task)
    assert report.errors == []
    assert [w.path for w in report.warnings if "PNG16" in w.message] == [str(seq)]
    assert not [w for w in report.warnings if w.path.endswith(".png") and w.path != str(seq)]
    (seq / "000001.png").unlink()
    # 1 frame for 2 rows, and the missing frame is one the row records a checksum for (X2)
    assert sorted(e.rule for e in validate_task(task).errors) == ["docs/decisions.md X2 (file_digests)",
                                                                   "file_format.md §7.3"]


def test_video_extensions_picks_the_file_and_probing_picks_the_decoder(task, kinect):
    vdir = task / "videos" / "chunk-000" / KEY
    # an FFV1 stream in a file named .mp4 (what video_extensions now says), next to the old .mkv
    h, w = kinect[0].shape
    with av.open(str(vdir / "episode-000.mp4"), "w", format="mp4") as out:
        s = out.add_stream("ffv1", rate=Fraction(30))
        s.width, s.height, s.pix_fmt = w, h, "gray16le"
        for i, d in enumerate(kinect[::-1]):  # reversed, so the two files differ
            f = av.VideoFrame.from_ndarray(d, format="gray16le")
            f.pts = i
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    _set_ext(task, "mp4")
    ep = open_task(task).episode(1)
    assert ep.stream_path(KEY).name == "episode-000.mp4"
    got = list(ep.depth(KEY))
    assert all(np.array_equal(a, b) for a, b in zip(got, kinect[::-1]))
