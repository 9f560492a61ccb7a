"""info.json union merge and the stats.json count accumulator (file_format.md §3, §4; DESIGN §4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egopool import TaskWriter, imu_columns, open_task, slam_trajectory_columns, vector_column
from egopool.meta.info import INFO_MUST_KEYS, merge_info, new_info, read_info
from egopool.meta.stats import ACTION_BLOCK, StatsBlock, merge_stats, read_stats, recalc_stats

# -- stats -----------------------------------------------------------------------------------------------------------

EPISODE_ROWS = (5, 300, 41)  # 300 > one 256-row group: per-row-group blocks are merged inside an episode too


def _episode_values(seed: int, rows: int):
    rng = np.random.default_rng(seed)
    glove = rng.normal(1000.0 * (seed + 1), 50.0 + seed, size=(rows, 16)).astype(np.float32)
    imu = [rng.normal(seed, 2.0, size=(int(rng.integers(0, 9)), 6)).astype(np.float32) for _ in range(rows)]
    return glove, imu


@pytest.fixture(scope="module")
def three_episodes(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    tw = TaskWriter(root, "t")
    imu, imu_ts = imu_columns()
    glove_col = vector_column("observation.right_glove", [16])
    all_glove, all_imu = [], []
    for seed, rows in enumerate(EPISODE_ROWS):
        glove, imu_rows = _episode_values(seed, rows)
        ep = tw.begin_episode(columns=[imu, imu_ts, glove_col], sensors=["right_glove"], sensor_dim=16)
        for i in range(rows):
            ep.add_frame({"observation.right_glove": glove[i], "observation.imu": imu_rows[i],
                          "imu_ts_ns": np.arange(len(imu_rows[i])) + 1000 * i})
        ep.finish()
        all_glove.append(glove)
        all_imu.extend(imu_rows)
    return root / "t", np.concatenate(all_glove), np.concatenate(all_imu)


@pytest.mark.parametrize("column", ["observation.right_glove", "observation.imu"])
def test_stats_after_three_episodes_equal_a_one_shot_computation(three_episodes, column):
    task, glove, imu = three_episodes
    values = glove if column == "observation.right_glove" else imu
    stored = read_stats(task)[column]
    one_shot = StatsBlock.of(values)
    assert one_shot is not None
    assert stored["count"] == one_shot.count == values.shape[0]
    for key in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(stored[key], getattr(one_shot, key), rtol=1e-9, atol=0, err_msg=key)
    # min/max are exact
    assert stored["min"] == values.astype(np.float64).min(axis=0).tolist()
    assert stored["max"] == values.astype(np.float64).max(axis=0).tolist()


def test_stats_document_shape(three_episodes):
    task, glove, imu = three_episodes
    doc = read_stats(task)
    assert set(doc) == {"observation.right_glove", "observation.imu", "action"}
    assert doc["action"] == ACTION_BLOCK
    assert len(doc["observation.right_glove"]["mean"]) == 16 and len(doc["observation.imu"]["std"]) == 6
    # the accumulator contract: sum = mean*count, sum_sq = (std^2 + mean^2)*count (§4)
    b = doc["observation.imu"]
    np.testing.assert_allclose(np.asarray(b["mean"]) * b["count"], imu.astype(np.float64).sum(axis=0), rtol=1e-9)
    np.testing.assert_allclose((np.asarray(b["std"]) ** 2 + np.asarray(b["mean"]) ** 2) * b["count"],
                               (imu.astype(np.float64) ** 2).sum(axis=0), rtol=1e-9)


def test_stored_stats_equal_a_recomputation_from_data(three_episodes):
    task, _, _ = three_episodes
    stored, fresh = read_stats(task), recalc_stats(task)
    assert set(stored) == set(fresh)
    for col in stored:
        assert stored[col]["count"] == fresh[col]["count"]
        for key in ("mean", "std", "min", "max"):
            np.testing.assert_allclose(stored[col][key], fresh[col][key], rtol=1e-9, err_msg=f"{col}.{key}")


def test_legacy_stats_without_count_are_recalculated_then_merged(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    col = vector_column("observation.left_glove", [2])
    for k in range(2):
        ep = tw.begin_episode(columns=[col], sensors=["left_glove"])
        for i in range(3):
            ep.add_frame({"observation.left_glove": [k * 10 + i, 1.0]})
        ep.finish()
        if k == 0:  # turn the first episode's stats into a v1.1.0 block (no count)
            path = tmp_path / "t" / "meta" / "stats.json"
            doc = json.loads(path.read_text())
            del doc["observation.left_glove"]["count"]
            doc["observation.left_glove"]["mean"] = [999.0, 999.0]  # wrong on purpose: must not survive
            path.write_text(json.dumps(doc))
    b = read_stats(tmp_path / "t")["observation.left_glove"]
    assert b["count"] == 6
    np.testing.assert_allclose(b["mean"], [(0 + 1 + 2 + 10 + 11 + 12) / 6, 1.0])


def test_stats_block_of_empty_is_none():
    assert StatsBlock.of(np.zeros((0, 6))) is None
    assert StatsBlock.of(np.zeros(0)) is None


_rows = st.integers(min_value=1, max_value=40)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(_rows, min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1e-3, 1.0, 1e3, 1e6]))
def test_chan_merge_equals_one_shot(sizes, seed, scale):
    rng = np.random.default_rng(seed)
    parts = [rng.normal(scale, scale / 3, size=(n, 3)) for n in sizes]
    merged = StatsBlock.of(parts[0])
    for p in parts[1:]:
        merged = merged.merge(StatsBlock.of(p))
    whole = StatsBlock.of(np.concatenate(parts))
    assert merged.count == whole.count
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9)
    np.testing.assert_allclose(merged.std, whole.std, rtol=1e-7, atol=1e-12 * scale)
    np.testing.assert_array_equal(merged.min, whole.min)
    np.testing.assert_array_equal(merged.max, whole.max)


def test_merge_stats_refuses_a_dimension_change():
    a = StatsBlock.of(np.ones((2, 3)))
    doc = merge_stats({}, {"observation.x": a})
    with pytest.raises(ValueError, match="dimension"):
        merge_stats(doc, {"observation.x": StatsBlock.of(np.ones((2, 4)))})


def test_merge_stats_keeps_blocks_the_episode_does_not_touch():
    doc = merge_stats({}, {"observation.a": StatsBlock.of(np.ones((2, 1)))})
    doc = merge_stats(doc, {"observation.b": StatsBlock.of(np.zeros((3, 1)))})
    assert doc["observation.a"]["count"] == 2 and doc["observation.b"]["count"] == 3


# -- info.json -------------------------------------------------------------------------------------------------------

def test_merge_info_union_latest_wins_nothing_removed():
    old = {**new_info("t", app_version="1.0", created_at=100.0), "total_episodes": 7,
           "features": {"action": {"dtype": "float32", "shape": [1]},
                        "observation.x": {"dtype": "float32", "shape": [3], "scale": 10}},
           "cameras": {"a_rgb": {"height": 1, "width": 2}}, "sensors": ["left_glove"],
           "devices": [{"key": "d1", "kind": "uvc", "slots": ["a_rgb"]}], "custom_key": {"kept": True}}
    new = {"features": {"observation.x": {"dtype": "float32", "shape": [3], "scale": 100},
                        "observation.y": {"dtype": "int64", "shape": [1]}},
           "cameras": {"b_rgb": {"height": 3, "width": 4}}, "sensors": ["right_glove", "left_glove"],
           "devices": [{"key": "d2", "kind": "d435", "slots": ["b_rgb"]},
                       {"key": "d1", "kind": "uvc", "slots": ["a_rgb", "a2_rgb"]}],
           "total_episodes": 3, "created_at": 200.0, "app_version": "1.1", "video": False}
    out = merge_info(old, new)
    assert set(old) <= set(out)
    assert out["custom_key"] == {"kept": True}
    assert out["features"]["observation.x"]["scale"] == 100  # latest episode wins per key
    assert set(out["features"]) == {"action", "observation.x", "observation.y"}
    assert set(out["cameras"]) == {"a_rgb", "b_rgb"}
    assert out["sensors"] == ["left_glove", "right_glove"]
    assert [d["key"] for d in out["devices"]] == ["d1", "d2"]
    assert out["devices"][0]["slots"] == ["a_rgb", "a2_rgb"]
    assert out["total_episodes"] == 7  # never decreases
    assert out["created_at"] == 100.0 and out["app_version"] == "1.1"
    assert old["features"]["observation.x"]["scale"] == 10  # input not mutated


def test_info_over_three_episodes(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    assert set(INFO_MUST_KEYS) <= set(read_info(tmp_path / "t"))
    imu, imu_ts = imu_columns()
    traj, traj_ns = slam_trajectory_columns(frame="down_left_forward")
    plans = [
        dict(columns=[imu, imu_ts], sensors=["left_glove"], device_names={"head_left_rgb": "Head"},
             calibration={"head_stereo": {"baseline": 0.06}}),
        dict(columns=[traj, traj_ns], sensors=["right_glove"], calibration={"head_stereo": {"baseline": 0.07}},
             info_extra={"custom": 1}),
        dict(columns=[], device_names={"head_left_rgb": "Head2"}),
    ]
    totals = []
    for plan in plans:
        ep = tw.begin_episode(**plan)
        values = {}
        names = {c.name for c in plan["columns"]}
        if "observation.imu" in names:
            values = {"observation.imu": np.ones((1, 6), np.float32), "imu_ts_ns": [1]}
        if traj.name in names:
            values = {traj.name: np.ones((1, 8)), traj_ns.name: [5]}
        ep.add_frame(values)
        ep.finish()
        info = read_info(tmp_path / "t")
        assert set(INFO_MUST_KEYS) <= set(info)
        totals.append(info["total_episodes"])
    info = open_task(tmp_path / "t").info
    assert totals == [1, 2, 3]
    assert set(info["features"]) == {"action", "observation.imu", traj.name, traj_ns.name}
    assert info["sensors"] == ["left_glove", "right_glove"]
    assert info["device_names"] == {"head_left_rgb": "Head2"}
    assert info["calibration"] == {"head_stereo": {"baseline": 0.07}}
    assert info["custom"] == 1 and info["slam_frames"] == {traj.name: "down_left_forward"}
    assert info["gripper_slam_frame"] == "down_left_forward"
    assert info["format"] == "pooled_episodes_v1" and info["chunks_size"] == 1000


def test_total_episodes_is_monotone_when_a_recycled_n_finishes_last(tmp_path):
    tw = TaskWriter(tmp_path, "t")
    a, b = tw.begin_episode(), tw.begin_episode()
    b.add_frame()
    b.finish()
    a.add_frame()
    a.finish()  # N=1 finishes after N=2
    assert read_info(tmp_path / "t")["total_episodes"] == 2
