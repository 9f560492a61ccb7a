"""Values the format cannot hold are never changed without a trace (issue 12 B; DESIGN §8; decisions.md #22, #23).

Counted in the episode's ``drop_stats``, warned (ValueChangedWarning; the CLI prints one
line on stderr), reported by ``validate`` where it can be seen afterwards, with the
lossless way out named where there is one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from egopool import (TaskWriter, ValueChangedWarning, list_task_episodes, open_task, scalar_ns_column,
                     vector_column)
from egopool.cli.app import main
from egopool.codecs.depth import LogDepthCodec
from egopool.codecs.force_matrix import ForceMatrixCodec, saturated_cells
from egopool.read.forces import force_matrix_fz_ratio
from egopool.importers import import_rgbd_frames
from egopool.meta.stats import StatsBlock, merge_stats, read_stats, write_stats
from egopool.ops import repair_force_scale
from egopool.ops.stats_ops import check_stats, compute_stats
from egopool.schema import force_matrix_column
from egopool.validate import validate_task

FM = "observation.gripper_left_force_matrix"
FORCE = "observation.gripper_left_force"


def _warnings(report, text):
    return [f for f in report.findings if f.severity == "warning" and text in f.message]


# -- force matrices at ×1000 -------------------------------------------------------------------------------------

def _block_frame(level=40.0, cell=-35.0):
    v = np.zeros((250, 250, 3), np.float32)
    v[100:110, 100:110, 2] = level  # a 10x10 fz block
    v[200, 200, 2] = cell  # and one cell pressing the other way
    return v


def test_quantize_counts_saturated_cells_of_the_issue_example():
    codec = ForceMatrixCodec("row_diff_quantized", 1000)
    flat, saturated = codec.encode_counted(_block_frame())
    assert saturated == 101
    back = codec.decode(flat)[0]
    assert back[105, 105, 2] == pytest.approx(32.767) and back[200, 200, 2] == pytest.approx(-32.768)
    assert float(back[:, :, 2].sum(dtype=np.float64)) == pytest.approx(100 * 32.767 - 32.768, abs=1e-3)
    assert saturated_cells(codec.decode_quantized(flat)).tolist() == [101]
    assert ForceMatrixCodec("row_diff_quantized", 100).encode_counted(_block_frame())[1] == 0  # 4000 fits
    with pytest.raises(Exception, match="NaN/Infinity"):
        codec.encode_counted(np.full((250, 250, 3), np.nan))


def _force_episode(tw, frames, scale=1000):
    cols = [force_matrix_column(FM, "row_diff_quantized", scale), scalar_ns_column(FM + "_ns"),
            vector_column(FORCE, [3]), scalar_ns_column(FORCE + "_ns")]
    ep = tw.begin_episode(columns=cols)
    for i, v in enumerate(frames):
        true = v.reshape(-1, 3).sum(axis=0, dtype=np.float64).astype(np.float32)
        ep.add_frame({FM: v, FM + "_ns": 1000 + i, FORCE: true, FORCE + "_ns": 1000 + i})
    return ep


def test_saturated_force_cells_are_counted_warned_and_reported(tmp_path, monkeypatch):
    tw = TaskWriter(tmp_path, "umi", registry=False)
    ep = _force_episode(tw, [_block_frame(), np.zeros((250, 250, 3), np.float32) + 0.001])
    with pytest.warns(ValueChangedWarning, match=r"101 force-matrix cell\(s\) of gripper_left_force_matrix were beyond"):
        result = ep.finish()
    assert result.drop_stats["gripper_left_force_matrix_saturated_count"] == 101
    e = open_task(tmp_path / "umi").episode(result.index)
    assert e.meta["drop_stats"]["gripper_left_force_matrix_saturated_count"] == 101
    ratio = force_matrix_fz_ratio(e, FM)
    assert np.isnan(ratio[0])  # a saturated Σfz is a bound, not the truncation case (≈ 0.82 before)
    from egopool.validate import changes

    reads = []  # the matrices are counted from check_data's own read of them, not read a second time (U25)
    orig_read = changes._BatchScan.read
    monkeypatch.setattr(changes._BatchScan, "read", lambda self, *a: reads.append(type(self).__name__)
                        or orig_read(self, *a))
    report = validate_task(tmp_path / "umi")
    assert not [f for f in report.findings if f.severity == "error"]
    assert _warnings(report, "drop_stats gripper_left_force_matrix_saturated_count = 101")
    data = _warnings(report, "101 cell(s) in 1 row(s) (first row 0) are at the int16 limits")
    assert data and "the writer counted 101" in data[0].message
    assert reads == []
    # the same finding from the check's own read, where check_data's batches did not cover every row
    monkeypatch.setattr(changes.ForceCellScan, "feed", lambda self, batch, base: None)
    again = _warnings(validate_task(tmp_path / "umi"), "101 cell(s) in 1 row(s) (first row 0) are at the int16 limits")
    assert reads == ["ForceCellScan"] and [f.message for f in again] == [f.message for f in data]


def test_saturation_written_by_another_writer_is_found_in_the_data(tmp_path):
    """drop_stats is the trace of our writer; a file without it still shows its saturated cells."""
    tw = TaskWriter(tmp_path, "umi", registry=False)
    with pytest.warns(ValueChangedWarning):
        n = _force_episode(tw, [_block_frame()]).finish().index
    g = next(g for g in list_task_episodes(tmp_path / "umi") if g.index == n)
    t = pq.read_table(g.meta)
    t = t.set_column(t.column_names.index("drop_stats"), "drop_stats", pa.array(["{}"]))
    pq.write_table(t, g.meta)
    found = _warnings(validate_task(tmp_path / "umi"), "are at the int16 limits")
    assert found and "drop_stats does not count them" in found[0].message


def test_repair_force_scale_leaves_saturated_rows_out_instead_of_calling_them_truncation(tmp_path):
    rng = np.random.default_rng(4)
    frames = []
    for i in range(8):
        v = np.zeros((250, 250, 3), np.float32)
        v[50:90, 60:110, 2] = rng.uniform(0.5, 30.0, (40, 50))  # fits int16 at ×1000
        if i % 2:
            v[150:160, 150:160, 2] = 40.0  # saturates at ×1000
        frames.append(v)
    tw = TaskWriter(tmp_path, "umi", registry=False)
    with pytest.warns(ValueChangedWarning):
        n = _force_episode(tw, frames).finish().index
    g = next(g for g in list_task_episodes(tmp_path / "umi") if g.index == n)
    t = pq.read_table(g.meta)
    t = t.set_column(t.column_names.index("force_matrix_specs"), "force_matrix_specs", pa.array(["{}"]))
    pq.write_table(t, g.meta)
    report = repair_force_scale(tmp_path / "umi", dry_run=True)
    ev = report.episodes[0].columns[0]
    assert ev.scale == 1000 and ev.saturated_frames == 4 and ev.frames == 4
    assert "4 saturated row(s) left out" in ev.verdict

    # every compared row saturated: inconclusive, and it says why (not "truncated toward zero")
    tw2 = TaskWriter(tmp_path, "all_sat", registry=False)
    with pytest.warns(ValueChangedWarning):
        n2 = _force_episode(tw2, [_block_frame(40.0 + i) for i in range(5)]).finish().index
    g2 = next(g for g in list_task_episodes(tmp_path / "all_sat") if g.index == n2)
    t2 = pq.read_table(g2.meta)
    t2 = t2.set_column(t2.column_names.index("force_matrix_specs"), "force_matrix_specs", pa.array(["{}"]))
    pq.write_table(t2, g2.meta)
    ev2 = repair_force_scale(tmp_path / "all_sat", dry_run=True).episodes[0].columns[0]
    assert ev2.scale is None and ev2.saturated_frames == 5
    assert "5 more row(s) left out because cells are saturated" in ev2.verdict


# -- depth beyond the log code's range ---------------------------------------------------------------------------

def _rgbd_dir(root: Path, frames: int = 3) -> Path:
    root.mkdir()
    (root / "camera-intrinsics.txt").write_text("525 0 16\n0 525 12\n0 0 1\n")
    for i in range(frames):
        rgb = np.full((24, 32, 3), 40 * i, np.uint8)
        Image.fromarray(rgb).save(root / f"frame-{i:06d}.color.png")
        depth = np.full((24, 32), 1500, np.uint16)
        depth[4:8, :] = 30_000  # a band beyond the 20,000 mm log-code range: 4 rows x 32 px
        depth[0, 0] = 0  # a hole
        Image.fromarray(depth).save(root / f"frame-{i:06d}.depth.png")
        (root / f"frame-{i:06d}.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 1\n")
    return root


def test_a_30000_mm_band_is_counted_per_episode_and_ffv1_is_offered(tmp_path):
    src = _rgbd_dir(tmp_path / "frames")
    with pytest.warns(ValueChangedWarning, match=r"384 depth pixel\(s\) of camera_depth .* --depth-codec ffv1"):
        result = import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical", task="lossy")
    assert result.episodes[0].drop_stats["camera_depth_clipped_count"] == 3 * 4 * 32
    assert any("--depth-codec ffv1" in n for n in result.notes)
    ep = open_task(tmp_path / "out" / "lossy").episode(1)
    first = next(iter(ep.depth("camera_depth")))
    assert int(first[4:8].max()) <= 20000  # what the issue saw: 19,132-20,000 mm, now with a count
    report = validate_task(tmp_path / "out" / "lossy")
    assert _warnings(report, "drop_stats camera_depth_clipped_count = 384")
    assert "--depth-codec ffv1" in _warnings(report, "camera_depth_clipped_count")[0].message

    lossless = import_rgbd_frames(src, tmp_path / "out", frame="ego_cam_optical", task="ffv1", depth_codec="ffv1")
    assert "camera_depth_clipped_count" not in lossless.episodes[0].drop_stats
    back = next(iter(open_task(tmp_path / "out" / "ffv1").episode(1).depth("camera_depth")))
    assert int(back[5, 3]) == 30_000 and int(back[0, 0]) == 0


def test_log_codec_counts_both_ends_of_its_range():
    d = np.array([[0, 50, 100, 20000, 20001, 65535]], np.uint16)
    assert LogDepthCodec().out_of_range(d) == 3  # 50 (below d_min) and the two above d_max; 0 is a hole


def test_cli_warns_on_stderr_and_offers_ffv1(tmp_path, capsys):
    src = _rgbd_dir(tmp_path / "frames", frames=1)
    rc = main(["import", "rgbd-frames", str(src), "--out", str(tmp_path / "o"), "--frame", "ego_cam_optical",
               "--json"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert json.loads(out)["episodes"][0]["length"] == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("egopool: warning:")]
    assert len(lines) == 1 and "128 depth pixel(s) of camera_depth" in lines[0] and "--depth-codec ffv1" in lines[0]
    rc = main(["import", "rgbd-frames", str(src), "--out", str(tmp_path / "o"), "--task", "lossless", "--frame",
               "ego_cam_optical", "--depth-codec", "ffv1"])
    assert rc == 0 and "warning" not in capsys.readouterr().err
    assert main(["import", "rgbd-frames", str(src), "--out", str(tmp_path / "o"), "--task", "x", "--frame",
                 "ego_cam_optical", "--depth-codec", "png"]) == 1
    assert "unknown depth codec 'png'" in capsys.readouterr().err


# -- stats blocks with count 0 -----------------------------------------------------------------------------------

GLOVE = "observation.right_glove"


@pytest.mark.parametrize("placeholder", [
    {"count": 0, "mean": [0.0] * 4, "std": [1.0] * 4, "min": [0.0] * 4, "max": [0.0] * 4},
    {"count": 0, "mean": [0.0], "std": [1.0], "min": [0.0], "max": [0.0]},  # the §4 `action` form, dimension 1
], ids=["same-dimension", "action-form"])
def test_a_count_0_block_holds_no_samples_and_the_merge_equals_a_recomputation(tmp_path, placeholder):
    tw = TaskWriter(tmp_path, "t", registry=False)
    write_stats(tmp_path / "t", {GLOVE: placeholder, "action": placeholder if len(placeholder["mean"]) == 1 else
                                 {"count": 0, "mean": [0.0], "std": [1.0], "min": [0.0], "max": [0.0]}})
    ep = tw.begin_episode(columns=[vector_column(GLOVE, [4])], sensors=["right_glove"])
    for i in range(3):
        ep.add_frame({GLOVE: np.array([5 + i, 6, 7, 8 + i], np.float32)})
    ep.finish()
    merged = read_stats(tmp_path / "t")[GLOVE]
    assert merged["count"] == 3 and merged["min"] == [5.0, 6.0, 7.0, 8.0] and merged["max"] == [7.0, 6.0, 7.0, 10.0]
    fresh, _ = compute_stats(tmp_path / "t")
    assert merged["count"] == fresh[GLOVE]["count"]
    for key in ("mean", "std", "min", "max"):
        assert merged[key] == pytest.approx(fresh[GLOVE][key])
    assert check_stats(tmp_path / "t").ok


def test_merge_of_count_0_blocks_in_either_order():
    empty = StatsBlock(0, np.zeros(1), np.ones(1), np.zeros(1), np.zeros(1))
    real = StatsBlock.of(np.array([[5.0, 1.0], [7.0, 3.0]]))
    assert real is not None
    for merged in (empty.merge(real), real.merge(empty)):
        assert merged.count == 2 and merged.min.tolist() == [5.0, 1.0] and merged.max.tolist() == [7.0, 3.0]
    doc = merge_stats({"observation.x": empty.to_dict()}, {"observation.x": real})
    assert doc["observation.x"] == real.to_dict()
    with pytest.raises(ValueError, match="count must be an integer >= 0"):
        StatsBlock.from_dict({"count": -1, "mean": [0], "std": [0], "min": [0], "max": [0]})


def test_stats_check_treats_a_count_0_block_without_data_as_equal(tmp_path):
    tw = TaskWriter(tmp_path, "t", registry=False)
    ep = tw.begin_episode(columns=[vector_column(GLOVE, [4])], sensors=["right_glove"])
    ep.add_frame({GLOVE: np.ones(4, np.float32)})
    ep.finish()
    doc = read_stats(tmp_path / "t")
    doc["observation.left_glove"] = {"count": 0, "mean": [0.0], "std": [1.0], "min": [0.0], "max": [0.0]}
    write_stats(tmp_path / "t", doc)
    assert check_stats(tmp_path / "t").ok


def test_row_flat_raw_cells_beyond_float32_are_counted_reported_and_left_out_of_the_self_check(tmp_path):
    """Found by qa12: the note said "int16 range" for a float32 column, validate found nothing in the data and the
    Σfz ratio was inf."""
    tw = TaskWriter(tmp_path, "raw", registry=False)
    cols = [force_matrix_column(FM, "row_flat_raw", 1), scalar_ns_column(FM + "_ns"),
            vector_column(FORCE, [3]), scalar_ns_column(FORCE + "_ns")]
    ep = tw.begin_episode(columns=cols)
    frame = np.zeros((250, 250, 3))
    frame[0, 0, 2], frame[1, 1, 2] = 1e39, 5.0
    ep.add_frame({FM: frame, FM + "_ns": 1000, FORCE: [0, 0, 5], FORCE + "_ns": 1000})
    ep.add_frame({FM: np.where(frame > 1e30, 0.0, frame), FM + "_ns": 1001, FORCE: [0, 0, 5], FORCE + "_ns": 1001})
    with pytest.warns(ValueChangedWarning, match=r"1 force-matrix cell\(s\) of gripper_left_force_matrix were beyond "
                                                 r"what the column's encoding holds .*row_flat_raw: the float32 range"):
        result = ep.finish()
    assert result.drop_stats["gripper_left_force_matrix_saturated_count"] == 1
    e = open_task(tmp_path / "raw").episode(result.index)
    assert np.isinf(e.force_matrices(FM)[0][0, 0, 2])
    ratio = force_matrix_fz_ratio(e, FM)
    assert np.isnan(ratio[0]) and ratio[1] == pytest.approx(1.0)
    found = _warnings(validate_task(tmp_path / "raw"), "1 cell(s) in 1 row(s) (first row 0) are Infinity/NaN in "
                                                        "row_flat_raw")
    assert found and "the writer counted 1 saturated cell(s)" in found[0].message
