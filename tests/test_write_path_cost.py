"""Per-row work made cheaper without changing what is stored (issue 20; docs/decisions.md R25).

* force-matrix columns go to the parquet writer row by row (no row-group concatenation), carry no
  min/max statistics (nobody filters on them) and stay the exact int16 row diffs of
  :class:`~egopool.codecs.force_matrix.ForceMatrixCodec`; every other column keeps its statistics,
  scalar and string columns their dictionary pages;
* depth frames reach FFmpeg without a second copy (a read-only frame of a source too), and the clipped
  pixel count takes two passes instead of three: same count as the formula, bit-exact FFV1.
"""

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egopool import TaskWriter, ValueChangedWarning
from egopool.codecs.depth import DepthEncoder, LogDepthCodec, read_depth_frames
from egopool.codecs.force_matrix import ForceMatrixCodec
from egopool.sample_frames import depth_pool, force_matrix_pool
from egopool.schema import force_matrix_column, vector_column


def test_force_matrices_are_stored_bit_identical_without_statistics(tmp_path):
    col = "observation.gripper_left_force_matrix"
    ep = TaskWriter(tmp_path, "t").begin_episode(columns=[force_matrix_column(col, scale=10),
                                                          vector_column("observation.gripper_left_force", [3])])
    frames, sums = force_matrix_pool(3)
    noisy = np.random.default_rng(1).normal(0, 2000, (250, 250, 3)).astype(np.float32)  # saturates at x10
    rows = [*frames[:3], None, *frames[3:5], noisy]  # None: a row without a sample (zeros, §5.5)
    for i, f in enumerate(rows):
        values = {"observation.gripper_left_force": sums[i % len(sums)]}
        if f is not None:
            values[col] = f
        ep.add_frame(values, timestamp=i / 30)
        if i == 4:
            ep.flush()  # two row groups
    with pytest.warns(ValueChangedWarning, match="beyond what the column's encoding holds"):
        res = ep.finish()
    path = next(p for p in res.paths if "data" in p.parts)
    table = pq.read_table(path)
    codec = ForceMatrixCodec("row_diff_quantized", 10.0)
    for i, f in enumerate(rows):  # the very int16 diffs the codec makes, saturated cells included
        want = np.zeros(250 * 750, np.int16) if f is None else codec.encode(f)
        np.testing.assert_array_equal(np.asarray(table.column(col)[i].values), want)
    assert res.drop_stats["gripper_left_force_matrix_saturated_count"] > 0
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    md = pq.ParquetFile(path).metadata.row_group(0)
    cols = {md.column(i).path_in_schema: md.column(i) for i in range(md.num_columns)}
    assert not cols[f"{col}.list.element"].is_stats_set
    assert cols["timestamp"].is_stats_set and cols["observation.gripper_left_force.list.element"].is_stats_set
    assert cols["frame_index"].statistics.min == 0 and cols["frame_index"].statistics.max == 4  # row group 1: 0..4
    assert "RLE_DICTIONARY" not in cols[f"{col}.list.element"].encodings
    assert "RLE_DICTIONARY" in cols["frame_index"].encodings


@settings(max_examples=60, deadline=None)
@given(st.floats(0.5, 400.0), st.floats(500.0, 65000.0), st.integers(0, 2**32 - 1))
def test_clipped_count_equals_the_formula(d_min, d_max, seed):
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 65536, (23, 31)).astype(np.uint16)
    d[rng.random(d.shape) < 0.3] = 0
    d[rng.random(d.shape) < 0.3] = rng.integers(0, int(d_min) + 3)  # around d_min, exact boundaries too
    want = int(np.count_nonzero(d > d_max) + np.count_nonzero((d > 0) & (d < d_min)))
    assert LogDepthCodec(d_min, d_max).out_of_range(d) == want


@pytest.mark.parametrize("codec", ["ffv1", "hevc12"])
def test_read_only_source_frames_encode_as_before(tmp_path, codec):
    frames = depth_pool(96, 64)[:6]  # read-only, shared: what a source hands over
    assert not frames[0].flags.writeable
    enc = DepthEncoder(tmp_path / f"d.{DepthEncoder.ext_for(codec)}", 96, 64, 30.0, codec=codec)
    for f in frames:
        enc.encode(f)
    enc.close()
    out = list(read_depth_frames(enc.path))
    assert len(out) == len(frames)
    params = LogDepthCodec()
    for a, b in zip(frames, out):
        if codec == "ffv1":
            np.testing.assert_array_equal(a, b)
        else:  # holes exact, values within the log code's step plus qp=6 ringing (DESIGN §3)
            np.testing.assert_array_equal(a == 0, b == 0)
            ref = params.decode(params.encode(a)).astype(np.float64)
            valid = a > 0
            assert np.median(np.abs(b[valid] - ref[valid]) / ref[valid]) < 0.005
