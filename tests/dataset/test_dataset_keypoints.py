"""Keypoints from the mirror (`keypoints.*` keys, issue 18): written with the mirror's own writer."""

from __future__ import annotations

import numpy as np
import pytest

from egopool.dataset import PooledDataset
from egopool.errors import SchemaError
from egopool.keypoints.mirror import JOINTS, SIDES, HandPose2D, HandPose3D, episode_mirror_dir, write_episode_keypoints


def _write_mirror(task, index: int, root, seed: int) -> None:
    ep = task.episode(index)
    fi = np.asarray(ep.columns(["frame_index"]).column("frame_index").to_numpy(), np.int64)
    rng = np.random.default_rng(seed)
    r = fi.size
    present = {s: rng.random(r) < 0.6 for s in SIDES}
    present["left"][0] = False  # the first row: no left hand (zeros, present false)

    def rand(*shape):
        return {s: (rng.random((r, *shape)) * 100).astype(np.float32) * present[s].reshape(-1, *[1] * len(shape))
                for s in SIDES}

    p2 = HandPose2D(fi, present, rand(JOINTS, 2), rand(JOINTS), {s: rng.random(r).astype(np.float32) * present[s]
                                                                 for s in SIDES})
    p3 = HandPose3D(fi, present, rand(JOINTS, 3))
    write_episode_keypoints(episode_mirror_dir(task.path, index, root), p2, p3, {"backend": "test"})


def test_keypoint_keys_equal_the_mirror_reader(full_task, tmp_path):
    root = tmp_path / "keypoints_output"
    for n in (1, 2):
        _write_mirror(full_task, n, root, seed=n)
    keys = ["keypoints.left_hand_2d", "keypoints.right_hand_pose", "keypoints.left_present",
            "keypoints.right_hand_z", "keypoints.right_score"]
    ds = PooledDataset(full_task.path, keys=keys, output="numpy", cache_dir=tmp_path / "c", mirror_root=root,
                       delta_timestamps={"keypoints.right_hand_pose": [-1 / 30, 0.0]})
    assert len(ds) == 42
    for i in [0, 5, 20, 21, 41]:
        item = ds[i]
        n, r = int(item["episode_index"]), int(item["frame_index"])
        kp = full_task.episode(n).keypoints(root)
        assert item["keypoints.left_hand_2d"].shape == (21, 2) and item["keypoints.left_hand_2d"].dtype == np.float32
        np.testing.assert_array_equal(item["keypoints.left_hand_2d"], kp.hand_pose.pixels["left"][r])
        np.testing.assert_array_equal(item["keypoints.right_hand_z"], kp.hand_pose.z_rel["right"][r])
        assert item["keypoints.right_score"] == kp.hand_pose.score["right"][r]
        assert bool(item["keypoints.left_present"]) == bool(kp.hand_pose.present["left"][r])
        want = kp.hand_pose_3d.world["right"][[max(r - 1, 0), r]]
        assert item["keypoints.right_hand_pose"].shape == (2, 21, 3)
        np.testing.assert_array_equal(item["keypoints.right_hand_pose"], want)
        np.testing.assert_array_equal(item["keypoints.right_hand_pose_is_pad"], [r == 0, False])
    first = ds[0]
    assert not first["keypoints.left_present"] and not first["keypoints.left_hand_2d"].any()


def test_a_task_without_a_mirror_is_one_line_naming_the_key_and_extract(full_task, tmp_path):
    root = tmp_path / "keypoints_output"
    with pytest.raises(SchemaError) as exc:
        PooledDataset(full_task.path, keys=["keypoints.left_hand_2d"], cache_dir=tmp_path / "c", mirror_root=root)
    text = str(exc.value)
    assert "\n" not in text and "'keypoints.left_hand_2d'" in text and "egopool keypoints extract" in text
    # a mirror for episode 1 only: episode 2's items name its missing directory
    _write_mirror(full_task, 1, root, seed=3)
    ds = PooledDataset(full_task.path, keys=["keypoints.left_hand_2d"], cache_dir=tmp_path / "c", mirror_root=root,
                       output="numpy")
    assert ds[3]["keypoints.left_hand_2d"].shape == (21, 2)
    with pytest.raises(SchemaError, match=r"episode_000002.*egopool keypoints extract"):
        ds[25]
    with pytest.raises(ValueError, match=r"not a keypoints key"):
        PooledDataset(full_task.path, keys=["keypoints.left_hand"], cache_dir=tmp_path / "c", mirror_root=root)


def test_mirror_root_defaults_as_the_cli(full_task, tmp_path, monkeypatch):
    root = tmp_path / "env_root"
    _write_mirror(full_task, 1, root, seed=4)
    _write_mirror(full_task, 2, root, seed=5)
    monkeypatch.setenv("EGOPOOL_KEYPOINTS_ROOT", str(root))
    ds = PooledDataset(full_task.path, keys=["keypoints.left_hand_pose"], cache_dir=tmp_path / "c", output="numpy")
    np.testing.assert_array_equal(ds[22]["keypoints.left_hand_pose"],
                                  full_task.episode(2).keypoints(root).hand_pose_3d.world["left"][1])
