"""The keypoints mirror layout (file_format.md §10, multi_device_storage.md §1.4) and Episode.keypoints()."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kp_helpers import reference_joints, reference_mirror, write_hand_task, write_reference_mirror

import egopool
from egopool.errors import FormatError
from egopool.keypoints.mirror import (AUTO_LABELS, HAND_POSE_2D, HAND_POSE_3D, default_mirror_root, episode_mirror_dir,
                                      read_episode_keypoints, write_episode_keypoints)


def test_mirror_directory_is_beside_the_recordings_root(tmp_path, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    task = tmp_path / "data" / "recordings" / "抓杯子"
    assert default_mirror_root(task) == tmp_path / "data" / "keypoints_output"
    # N is 1-based and 6 digits (multi_device_storage.md §1.4: the first episode is episode_000001)
    assert episode_mirror_dir(task, 1) == tmp_path / "data" / "keypoints_output" / "抓杯子" / "episode_000001"
    assert episode_mirror_dir(task, 1001).name == "episode_001001"
    assert episode_mirror_dir(task, 2, tmp_path / "kp") == tmp_path / "kp" / "抓杯子" / "episode_000002"
    monkeypatch.setenv("EGOPOOL_KEYPOINTS_ROOT", str(tmp_path / "elsewhere"))
    assert episode_mirror_dir(task, 3) == tmp_path / "elsewhere" / "抓杯子" / "episode_000003"
    with pytest.raises(FormatError, match="integer >= 1"):
        episode_mirror_dir(task, 0)


def test_write_then_read_round_trips_every_file(tmp_path):
    p2, p3 = reference_mirror(30, offset=100)
    d = tmp_path / "episode_000001"
    paths = write_episode_keypoints(d, p2, p3, {"stream": "head_left_rgb", "image_width": 640})
    assert [p.relative_to(d).as_posix() for p in paths] == [HAND_POSE_2D, AUTO_LABELS, HAND_POSE_3D]
    assert sorted(x.name for x in d.rglob("*") if x.name.startswith(".")) == []  # no temps left
    kp = read_episode_keypoints(d)
    assert kp.exists and kp.metadata == {"stream": "head_left_rgb", "image_width": 640}
    np.testing.assert_array_equal(kp.hand_pose_3d.frame_index, np.arange(30))
    ref = reference_joints()[100:130]
    right = kp.hand_pose_3d.present["right"]
    assert right.sum() == 25 and not right[0] and not right[7]
    np.testing.assert_array_equal(kp.hand_pose_3d.world["right"][right], ref[right])
    assert not kp.hand_pose_3d.world["right"][~right].any()          # absent = zeros (§5.5)
    assert kp.hand_pose_3d.flat("right").shape == (30, 63)
    np.testing.assert_array_equal(kp.hand_pose.pixels["left"], p2.pixels["left"])
    np.testing.assert_array_equal(kp.hand_pose.score["right"][right], np.float32(0.97))
    labels = kp.auto_labels.to_pydict()
    assert labels["hands"][:5] == ["none", "right", "right", "both", "both"]
    assert labels["hands"].count("none") == 5  # rows 0, 7, 14, 21, 28: no right hand, no left hand
    # the stored columns are bare lists: 63 world values, 42 pixels, 21 relative depths per row
    t3 = pq.read_table(d / HAND_POSE_3D)
    assert t3.schema.field("right_hand_pose").type == pa.list_(pa.float32())
    assert set(np.diff(t3.column("right_hand_pose").combine_chunks().offsets.to_numpy())) == {63}
    assert set(np.diff(pq.read_table(d / HAND_POSE_2D).column("left_hand_2d").combine_chunks().offsets.to_numpy())) == {42}


def test_episode_keypoints_returns_what_exists(tmp_path, monkeypatch):
    monkeypatch.delenv("EGOPOOL_KEYPOINTS_ROOT", raising=False)
    task = write_hand_task(tmp_path / "recordings", episodes=2, rows=12)
    ep1, ep2 = egopool.open_task(task).episodes()
    nothing = ep1.keypoints()
    assert not nothing.exists and nothing.hand_pose is None and nothing.hand_pose_3d is None
    assert nothing.directory == tmp_path / "keypoints_output" / "hands" / "episode_000001"
    d = write_reference_mirror(task, 1, rows=12)
    (d / HAND_POSE_2D).unlink()
    kp = ep1.keypoints()
    assert kp.hand_pose is None and kp.hand_pose_3d is not None and kp.auto_labels is not None
    assert kp.hand_pose_3d.world["right"].shape == (12, 21, 3)
    assert not ep2.keypoints().exists
    other = tmp_path / "kp_elsewhere"
    write_reference_mirror(task, 2, rows=12, mirror_root=other)
    assert ep2.keypoints(root=other).hand_pose is not None


def test_a_broken_mirror_file_is_a_format_error_naming_it(tmp_path):
    p2, p3 = reference_mirror(10)
    d = tmp_path / "episode_000004"
    write_episode_keypoints(d, p2, p3, {})
    (d / HAND_POSE_3D).write_bytes(b"not parquet")
    with pytest.raises(FormatError, match="hand_pose_3d/chunk-000.parquet: keypoints parquet is 11 bytes, "
                                          "too short for a parquet file"):
        read_episode_keypoints(d)
    (d / HAND_POSE_3D).unlink()
    os.mkfifo(d / HAND_POSE_3D)  # found by qa12: pq.read_table blocked on it forever
    with pytest.raises(FormatError, match="hand_pose_3d/chunk-000.parquet: keypoints parquet is a FIFO"):
        read_episode_keypoints(d)
    (d / HAND_POSE_3D).unlink()
    write_episode_keypoints(d, p2, p3, {})
    t = pq.read_table(d / HAND_POSE_2D)
    pq.write_table(t.set_column(0, "frame_index", pa.array(np.arange(10)[::-1].copy())), d / HAND_POSE_2D)
    with pytest.raises(FormatError, match="frame_index is not strictly increasing"):
        read_episode_keypoints(d)


def test_nested_mirror_metadata_is_no_metadata(tmp_path):
    """Found by qa12: a RecursionError from json.loads of the schema metadata."""
    p2, p3 = reference_mirror(10)
    d = tmp_path / "episode_000001"
    write_episode_keypoints(d, p2, p3, {"stream": "cam"})
    for rel in (HAND_POSE_2D, AUTO_LABELS, HAND_POSE_3D):
        t = pq.read_table(d / rel)
        key = next(iter(t.schema.metadata))
        pq.write_table(t.replace_schema_metadata({key: "[" * 100_000 + "]" * 100_000}), d / rel)
    kp = read_episode_keypoints(d)
    assert kp.metadata == {} and kp.hand_pose_3d.world["right"].shape == (10, 21, 3)


def test_inconsistent_poses_are_refused_before_writing(tmp_path):
    p2, _ = reference_mirror(10)
    _, p3 = reference_mirror(11)
    with pytest.raises(FormatError, match="do not share frame_index"):
        write_episode_keypoints(tmp_path / "e", p2, p3, {})
    assert not (tmp_path / "e").exists() or not any((tmp_path / "e").rglob("*.parquet"))


def test_extract_without_mediapipe_is_one_line_naming_the_extra(tmp_path, capsys):
    import importlib.util

    if importlib.util.find_spec("mediapipe") is not None:
        pytest.skip("mediapipe is installed here (the keypoints venv runs the real extraction tests)")
    from egopool.cli.app import main

    task = write_hand_task(tmp_path / "recordings", episodes=1, rows=5)
    assert main(["keypoints", "extract", str(task)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "keypoint extraction needs MediaPipe" in err
    assert "pip install 'egopool[keypoints]'" in err
    assert not (tmp_path / "keypoints_output").exists()


def test_the_ego_stream_is_chosen_from_the_declarations():
    from pathlib import Path

    from egopool.errors import SchemaError
    from egopool.keypoints import choose_stream
    from egopool.layout import EpisodeFiles

    g = EpisodeFiles(4, 0, 3, videos={k: Path(f"{k}.mp4") for k in ("stereo_left", "stereo_right", "stereo_depth")})
    info = {"cameras": {"stereo_left": {}, "stereo_right": {}},
            "features": {"observation.ego_slam_trajectory": {"owner": {"role": "ego"}, "source_slot": "stereo_left"}}}
    assert choose_stream(info, g) == "stereo_left"
    assert choose_stream(info, g, "stereo_right") == "stereo_right"
    with pytest.raises(SchemaError, match=r"episode 4 has no stream 'gripper_rgb'"):
        choose_stream(info, g, "gripper_rgb")
    no_ego = {"cameras": info["cameras"], "features": {}}
    with pytest.raises(SchemaError, match=r"cannot tell which RGB stream.*\['stereo_left', 'stereo_right'\].*--stream"):
        choose_stream(no_ego, g)
    one = EpisodeFiles(1, 0, 0, videos={"head_left_rgb": Path("a.mp4"), "d435_depth": Path("b.mp4")})
    assert choose_stream({"cameras": {"head_left_rgb": {}}}, one) == "head_left_rgb"   # depth is never in cameras
