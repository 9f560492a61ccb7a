"""The writer refuses, before it records anything, what its task could not take (QA of issue 2).

* a ``stats.json`` / ``info.json`` that finish() could not merge (file_format.md §3, §4);
* a changed declaration of an existing column or stream (multi_device_storage.md §6.7), while
  the per-episode ones (force-matrix scale/encoding, trajectory frame, §7.3) stay allowed;
* NaN / Infinity where it would reach JSON (fps, created_at, declarations, stats columns);
* file-system refusals (read-only, a file in the way, disk full) become one StorageError
  naming the file; problems after the commit are a MetaUpdateError saying the episode was saved.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

import egopool.write.task_meta
from egopool import (EgopoolError, FormatError, LayoutError, MetaUpdateError, SchemaError, StorageError, StreamSpec,
                     TaskWriter, imu_columns, list_task_episodes, open_task, slam_trajectory_columns, vector_column)
from egopool._atomic import atomic_write_json
from egopool.codecs.depth import hevc12_available
from egopool.meta.stats import read_stats
from egopool.registry import Registry, task_key
from egopool.schema import force_matrix_column
from egopool.validate import validate_task

W, H = 32, 24
GLOVE = "observation.glove"


def _glove_episode(tw: TaskWriter, rows: int = 3, start: int = 0, **kw):
    ep = tw.begin_episode([vector_column(GLOVE, [4])], [StreamSpec("cam", "rgb", W, H)], sensors=["glove"], **kw)
    for i in range(rows):
        ep.add_frame({GLOVE: np.full(4, start + i, np.float32)}, images={"cam": np.full((H, W, 3), i, np.uint8)})
    return ep


def _files(task: Path) -> dict[str, bytes]:
    return {str(p.relative_to(task)): p.read_bytes() for p in sorted(task.rglob("*")) if p.is_file()}


# -- stats.json / info.json that finish() could not merge -------------------------------------------------------

@pytest.mark.parametrize("content", ['{"observation.glove": {"count": 3, "mean": [0', "[1, 2]",
                                     '{"observation.glove": {"count": 3, "mean": [1, 1, 1], "std": [0, 0, 0], '
                                     '"min": [0, 0, 0], "max": [1, 1, 1]}}',
                                     '{"observation.glove": {"count": 3, "mean": [NaN, 0, 0, 0], "std": [0, 0, 0, 0], '
                                     '"min": [0, 0, 0, 0], "max": [1, 1, 1, 1]}}'],
                         ids=["truncated", "not-an-object", "other-dimension", "nan"])
def test_unmergeable_stats_json_is_refused_before_recording(tmp_path: Path, content: str) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    _glove_episode(tw).finish()
    (tmp_path / "t/meta/stats.json").write_text(content)
    before = _files(tmp_path / "t")
    with pytest.raises(FormatError) as err:
        _glove_episode(tw)
    assert err.value.path == tmp_path / "t/meta/stats.json"
    assert "egopool stats recalc TASK" in str(err.value)
    assert _files(tmp_path / "t") == before  # no episode, no reservation, total_episodes unchanged


def test_info_json_with_nan_is_refused_before_recording(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    info = json.loads((tmp_path / "t/meta/info.json").read_text())
    info["calibration"] = {"head_stereo": {"baseline": float("nan")}}
    (tmp_path / "t/meta/info.json").write_text(json.dumps(info))
    with pytest.raises(FormatError, match=r"info.json: holds NaN or Infinity \(key calibration\)"):
        _glove_episode(tw)
    assert list_task_episodes(tmp_path / "t") == []


def test_stats_json_broken_while_recording_is_rebuilt_after_the_commit(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    _glove_episode(tw).finish()
    ep = _glove_episode(tw, rows=2, start=10)
    broken = b'{"observation.glove": '
    (tmp_path / "t/meta/stats.json").write_bytes(broken)
    with pytest.warns(RuntimeWarning, match="rebuilt it from data/"):
        result = ep.finish()
    assert result.index == 2 and result.length == 2
    block = read_stats(tmp_path / "t")[GLOVE]
    values = np.array([0, 1, 2, 10, 11], np.float64)  # rows of both committed episodes
    assert block["count"] == 5
    assert block["mean"] == pytest.approx([values.mean()] * 4)
    assert block["std"] == pytest.approx([values.std()] * 4)
    assert block["min"] == [0.0] * 4 and block["max"] == [11.0] * 4
    backups = list((tmp_path / "t/.egopool_backup").glob("stats-unmergeable-*/meta/stats.json"))
    assert [b.read_bytes() for b in backups] == [broken]
    assert validate_task(tmp_path / "t").ok


def test_meta_write_failing_after_the_commit_says_the_episode_was_saved(tmp_path: Path, monkeypatch) -> None:
    tw = TaskWriter(tmp_path, "t")
    _glove_episode(tw).finish()
    ep = _glove_episode(tw)

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(egopool.write.task_meta, "write_stats", full)
    with pytest.raises(MetaUpdateError) as err:
        ep.finish()
    assert err.value.index == 2
    assert str(err.value) == (f"{tmp_path}/t/meta/stats.json: episode 2 was saved, but meta/stats.json was not "
                              "updated (No space left on device) (once the cause is fixed (a full disk: free space), "
                              "run `egopool repair clean TASK`: it finishes the merge; the next recording into the "
                              "task does it too)")
    monkeypatch.undo()
    files = _files(tmp_path / "t")
    assert "meta/episodes/chunk-000/episode-001.parquet" in files  # committed, not rolled back
    assert not any(name.startswith("meta/.reserved") or name == "meta/recycled_episode.json" for name in files)
    assert json.loads(files["meta/info.json"])["total_episodes"] == 2
    assert [e.index for e in open_task(tmp_path / "t").episodes()] == [1, 2]
    assert Registry.for_task(tmp_path / "t").watermark(task_key(tmp_path / "t")) == 2  # registered all the same
    assert tw.next_episode_index() == 3


# -- declarations that would misdescribe earlier episodes --------------------------------------------------------

def test_changed_column_shape_is_refused(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    _glove_episode(tw).finish()
    with pytest.raises(SchemaError) as err:
        tw.begin_episode([vector_column(GLOVE, [3])], sensors=["glove"])
    assert err.value.column == GLOVE
    assert "the task declares shape [4] (info.json features), this episode [3]" in str(err.value)
    with pytest.raises(SchemaError, match="the task declares dtype 'float32'.*'float64'"):
        tw.begin_episode([vector_column(GLOVE, [4], dtype="float64")])
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1]


def test_a_slot_does_not_change_between_rgb_and_depth(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    _glove_episode(tw).finish()
    with pytest.raises(SchemaError, match="stream 'cam' is an RGB slot in this task .* records it as depth"):
        tw.begin_episode(streams=[StreamSpec("cam", "depth", W, H, codec="ffv1")])
    ep = tw.begin_episode(streams=[StreamSpec("d", "depth", W, H, codec="ffv1")])
    ep.add_frame(images={"d": np.full((H, W), 900, np.uint16)})
    ep.finish()
    with pytest.raises(SchemaError, match="stream 'd' is a depth slot in this task .* records it as RGB"):
        tw.begin_episode(streams=[StreamSpec("d", "rgb", W, H)])
    if hevc12_available():
        with pytest.raises(SchemaError, match=r"stream 'd' is stored as \.mkv in this task .* would write \.mp4"):
            tw.begin_episode(streams=[StreamSpec("d", "depth", W, H, codec="hevc12")])
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1, 2]


def test_per_episode_declarations_may_change_and_the_task_stays_valid(tmp_path: Path) -> None:
    """Force-matrix scale/encoding and trajectory frames are per episode (§7.3); camera sizes may change."""
    tw = TaskWriter(tmp_path, "t", registry=False)
    fm = "observation.gripper_left_force_matrix"
    for enc, scale, frame, width in (("row_diff_quantized", 10, "down_left_forward", W),
                                     ("row_flat_raw", 1, "right_forward_up", 2 * W)):
        traj, ns = slam_trajectory_columns("", frame=frame)
        ep = tw.begin_episode([force_matrix_column(fm, enc, scale), traj, ns], [StreamSpec("cam", "rgb", width, H)])
        for i in range(2):
            ep.add_frame({fm: np.full((250, 250, 3), 2.5, np.float32), traj.name: [[i, 0, 0, 0, 0, 0, 0, 1]],
                          ns.name: [7 + i]}, images={"cam": np.zeros((H, width, 3), np.uint8)})
        ep.finish()
    report = validate_task(tmp_path / "t")
    assert report.ok, [f.message for f in report.findings]
    task = open_task(tmp_path / "t")
    specs = [task.episode(n).force_matrix_spec(fm) for n in (1, 2)]
    assert [(s.codec.encoding, s.codec.scale, s.source) for s in specs] == [
        ("row_diff_quantized", 10, "force_matrix_specs"), ("row_flat_raw", 1, "force_matrix_specs")]
    assert float(task.episode(1).force_matrix(fm, 0)[0, 0, 0]) == pytest.approx(2.5, abs=0.05)
    assert [task.episode(n).trajectory().frame for n in (1, 2)] == ["down_left_forward", "right_forward_up"]


# -- NaN / Infinity never reach JSON ------------------------------------------------------------------------------

def test_non_finite_stats_values_are_refused_per_row(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    imu, ts = imu_columns()
    ep = tw.begin_episode([vector_column(GLOVE, [4]), imu, ts], sensors=["glove"])
    ep.add_frame({GLOVE: [1, 2, 3, 4]})
    with pytest.raises(SchemaError) as err:
        ep.add_frame({GLOVE: [1, np.nan, 3, 4]})
    assert err.value.column == GLOVE and "row 1 holds nan" in str(err.value)
    with pytest.raises(SchemaError, match=r"column 'observation.imu': row 1 holds inf"):
        ep.add_frame({"observation.imu": np.full((2, 6), np.inf, np.float32), "imu_ts_ns": [1, 2]})
    ep.add_frame({GLOVE: [5, 6, 7, 8]})  # the refused rows left nothing behind
    assert ep.finish().length == 2
    block = json.loads((tmp_path / "t/meta/stats.json").read_text())[GLOVE]
    assert block["count"] == 2 and block["mean"] == [3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("fps", [math.inf, math.nan, -1.0, 0, "30", True, None])
def test_fps_must_be_a_finite_positive_number(tmp_path: Path, fps) -> None:
    with pytest.raises(SchemaError, match="fps must be"):
        TaskWriter(tmp_path, "t", fps=fps, registry=False)
    assert not (tmp_path / "t").exists()
    with pytest.raises(SchemaError, match="stream 'cam': fps must be"):
        StreamSpec("cam", "rgb", W, H, fps=fps if fps is not None else math.inf)


def test_created_at_and_declarations_must_be_finite(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    with pytest.raises(SchemaError, match="created_at must be finite"):
        tw.begin_episode(created_at=math.nan)
    with pytest.raises(SchemaError, match="calibration holds NaN or Infinity"):
        tw.begin_episode(calibration={"head_stereo": {"baseline": math.inf}})
    assert not any(p.name.startswith(".reserved") for p in (tmp_path / "t/meta").iterdir())
    with pytest.raises(FormatError, match="refusing to write NaN/Infinity"):
        atomic_write_json(tmp_path / "x.json", {"fps": math.inf})
    assert not (tmp_path / "x.json").exists()


# -- the file system says no --------------------------------------------------------------------------------------

def test_read_only_directory_is_one_storage_error(tmp_path: Path, monkeypatch) -> None:
    def read_only(self: Path, *a, **k) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StorageError) as err:
        TaskWriter(tmp_path / "rec", "t", registry=False)
    assert err.value.errno == errno.EROFS
    assert str(err.value) == (f"{tmp_path}/rec/t/meta/episodes: cannot write the task: Read-only file system "
                              "(choose a location on a writable file system)")


def test_a_file_where_the_recordings_root_belongs(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StorageError) as err:
        TaskWriter(tmp_path / "afile", "t", registry=False)
    assert err.value.path == tmp_path / "afile"
    assert "this is a file, where a directory is needed" in str(err.value)


def test_disk_full_while_encoding_names_the_video_and_abort_frees_n(tmp_path: Path, monkeypatch) -> None:
    from egopool.codecs import video

    tw = TaskWriter(tmp_path, "t", registry=False)
    _glove_episode(tw).finish()
    ep = _glove_episode(tw, rows=1)
    real = video.RgbEncoder.encode

    def full(self, image):
        with video.encoding_errors(self.path, "cannot write video"):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(video.RgbEncoder, "encode", full)
    with pytest.raises(StorageError) as err:  # streams encode on their own threads (write/stream_encoder.py):
        ep.add_frame({GLOVE: np.zeros(4, np.float32)}, images={"cam": np.zeros((H, W, 3), np.uint8)})
        ep.finish()  # the failure comes back at a later frame or, at the latest, here
    assert err.value.path == tmp_path / "t/videos/chunk-000/cam/episode-001.mp4"  # not the dot-temp
    monkeypatch.setattr(video.RgbEncoder, "encode", real)
    # the encoder thread's failure came back at add_frame (the episode is broken) or at finish (it is closed)
    with pytest.raises(EgopoolError, match="already finished or aborted|a write failed .*abort\\(\\) the episode"):
        ep.finish()
    ep.abort()
    assert [g.index for g in list_task_episodes(tmp_path / "t")] == [1]
    assert not [p for p in (tmp_path / "t").rglob("*.tmp")]
    assert tw.next_episode_index() == 2


# -- small API refusals -------------------------------------------------------------------------------------------

def test_finish_without_frames_discards_the_episode(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = _glove_episode(tw, rows=0)
    with pytest.raises(EgopoolError, match="episode 1 has no frames; it was discarded and N=1 is free again"):
        ep.finish()
    left = sorted(str(p.relative_to(tmp_path / "t")) for p in (tmp_path / "t").rglob("*") if p.is_file())
    assert left == ["meta/episodes/.lock", "meta/info.json", "meta/recycled_episode.json", "meta/tasks.jsonl"]
    assert tw.next_episode_index() == 1


def test_episode_index_types_and_non_trajectory_and_depth_streams(tmp_path: Path) -> None:
    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = tw.begin_episode(streams=[StreamSpec("cam", "rgb", W, H), StreamSpec("d", "depth", W, H, codec="ffv1")])
    ep.add_frame(images={"cam": np.full((H, W, 3), 80, np.uint8), "d": np.full((H, W), 1234, np.uint16)})
    ep.finish()
    task = open_task(tmp_path / "t")
    for bad in ("1", True, 0, 1.0):
        with pytest.raises(LayoutError, match="episode index must be an integer >= 1"):
            task.episode(bad)
    e = task.episode(np.int64(1))
    with pytest.raises(SchemaError, match="column 'timestamp': is not a trajectory column"):
        e.trajectory("timestamp")
    with pytest.raises(SchemaError, match=r"episode-000.mkv: stream 'd' is a depth stream \(ffv1 gray16le\)"
                                          r".*use ep.depth\('d'\)"):
        e.video("d")
    assert [int(f[0, 0]) for f in e.depth("d")] == [1234]
    assert [f.shape for f in e.video("cam")] == [(H, W, 3)]
    with pytest.raises(EgopoolError, match="task name must be a str"):
        TaskWriter(tmp_path, os.fsencode("t"), registry=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs,message", [
    ({"calibration": [1]}, "calibration must be an object, got list '[1]'"),
    ({"calibration": {"head_stereo": [1]}}, "calibration must be an object of device -> calibration objects"),
    ({"devices": "x"}, "devices must be a list of objects, got str 'x'"),
    ({"devices": [1]}, "devices must be a list of objects, got list '[1]'"),
    ({"device_names": [1]}, "device_names must be an object, got list '[1]'"),
    ({"device_names": {"cam": 3}}, "device_names must be an object of slot -> name strings"),
    ({"sensors": "left_glove"}, "sensors must be a list of sensor names, got str 'left_glove'"),
    ({"sensor_dim": [256]}, "sensor_dim must be an integer >= 1, got list '[256]'"),
    ({"sensor_dim": True}, "sensor_dim must be an integer >= 1, got bool 'True'"),
    ({"info_extra": "x"}, "info_extra must be an object, got str 'x'"),
])
def test_declarations_of_the_wrong_json_type_are_refused_before_anything_is_written(tmp_path, kwargs, message):
    """Found by qa12: TypeError/ValueError from begin_episode, or sensors="left_glove" declared as one sensor per
    letter in info.json."""
    tw = TaskWriter(tmp_path, "t", registry=False)
    with pytest.raises(SchemaError) as err:
        tw.begin_episode(**kwargs)
    assert err.value.message.startswith(message)
    assert not (tmp_path / "t" / "data").exists() and tw.next_episode_index() == 1
    tw.begin_episode(sensors=(s for s in ["left_glove"]), devices=iter([{"key": "k"}])).abort()  # generators: fine


def test_a_task_keeps_its_fps(tmp_path: Path) -> None:
    """A task has one fps (file_format.md §3): a writer at another fps is refused before it writes
    anything (its rows would be 1/fps apart on another clock, and the server refuses such a slice)."""
    _glove_episode(TaskWriter(tmp_path, "t", fps=30.0, registry=False)).finish()
    before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*"))
    with pytest.raises(SchemaError) as err:
        TaskWriter(tmp_path, "t", fps=60.0, registry=False)
    assert str(err.value) == (f"{tmp_path}/t: the task records at 30 fps, not 60 (a task has one fps, "
                              "file_format.md §3) (use --fps 30, or record into a new task)")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "t").rglob("*")) == before
    assert TaskWriter(tmp_path, "t", fps=30.0, registry=False).fps == 30.0
    with pytest.raises(SchemaError) as err:  # the one check; the caller says what to do instead
        TaskWriter(tmp_path, "t", fps=60.0, registry=False, fps_hint="import into a new task (--task NEW_NAME)")
    assert err.value.hint == "import into a new task (--task NEW_NAME)"
    assert err.value.message == "the task records at 30 fps, not 60 (a task has one fps, file_format.md §3)"


@pytest.mark.parametrize("created_at", [1e300, 1.79e18])
def test_created_at_that_wall_time_cannot_build_on_is_refused(tmp_path: Path, created_at: float) -> None:
    """1e300 (or ns since 1970) used to be accepted and published wall_time that never increases (§7.3)."""
    tw = TaskWriter(tmp_path, "t", registry=False)
    with pytest.raises(SchemaError, match=r"not finer than a row \(1/30 s\), so it cannot increase row by row"):
        tw.begin_episode(created_at=created_at)
    assert not list((tmp_path / "t").glob("data/**/*.parquet"))
    ep = tw.begin_episode(created_at=1.79e12)  # milliseconds: representable, the validator warns
    ep.add_frame({})
    assert ep.finish().index == 1


def test_a_decoded_video_frame_for_a_depth_stream_is_refused_by_name(tmp_path: Path) -> None:
    """An RGB stream takes an av.VideoFrame; a depth stream says it takes uint16 mm arrays (not "shape ()")."""
    import av

    from egopool.errors import CodecError

    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = tw.begin_episode(streams=[StreamSpec("cam", "rgb", W, H), StreamSpec("d", "depth", W, H, codec="ffv1")])
    frame = av.VideoFrame.from_ndarray(np.zeros((H, W, 3), np.uint8), format="rgb24")
    with pytest.raises(CodecError, match=r"stream 'd' got a VideoFrame: a depth stream takes uint16 mm \(H, W\)") as e:
        ep.add_frame(images={"cam": frame, "d": frame})
    assert e.value.path == tw.task_dir / "videos" / "chunk-000" / "d" / "episode-000.mkv"  # not its dot-temp
    ep.add_frame(images={"cam": frame, "d": np.full((H, W), 1000, np.uint16)})
    assert ep.finish().length == 1


def test_a_stats_json_rewritten_after_a_passed_check_is_checked_again(tmp_path: Path) -> None:
    """The merge check keeps what it learnt of stats.json only while the file is the same (docs/decisions.md U40):
    a block that passed and is then replaced, or damaged in place with the same size, is refused the next time."""
    from egopool.write.checks import check_task_meta_mergeable

    task = tmp_path / "t"
    (task / "meta").mkdir(parents=True)
    info = {"format": "pooled_episodes_v1", "fps": 30.0}

    def stats(values: list[float]) -> None:
        block = {"count": 2, "mean": values, "std": values, "min": values, "max": values}
        atomic_write_json(task / "meta" / "stats.json", {"observation.glove": block})

    stats([1.0, 2.0, 3.0])
    for _ in range(2):  # the second call answers from what the first learnt
        check_task_meta_mergeable(task, info, {}, {"observation.glove": 3})
    stats([1.0, 2.0, 3.0, 4.0])  # replaced by a rename: another file
    with pytest.raises(FormatError, match=r"block 'observation.glove' has 4 values per sample, this episode's "
                                          r"column has 3"):
        check_task_meta_mergeable(task, info, {}, {"observation.glove": 3})
    path = task / "meta" / "stats.json"
    text = path.read_text()
    check_task_meta_mergeable(task, info, {}, {"observation.glove": 4})
    os.utime(path, ns=(1, 1))  # written in place later, same size: its mtime and ctime change
    assert "4.0" in text
    path.write_text(text.replace("4.0", "NaN", 1))
    with pytest.raises(FormatError, match="stats.json"):
        check_task_meta_mergeable(task, info, {}, {"observation.glove": 4})
