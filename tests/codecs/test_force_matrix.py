"""Force-matrix codec (file_format.md §7.2.1, DESIGN §2): exact int16 round trips, scale authority, Σfz check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from egopool.codecs.force_matrix import (FRAME_SHAPE, FRAME_VALUES, ForceMatrixCodec, encoding_for_dtype,
                                         fz_plane_sums, fz_ratio, resolve_force_matrix_spec)
from egopool.errors import CodecError

SCALES = (10.0, 100.0, 1000.0)


def _q_frame(seed: int, mode: str) -> np.ndarray:
    """int16 q frames of different character; 'full' and 'extremes' make most row diffs wrap."""
    rng = np.random.default_rng(seed)
    if mode == "full":
        return rng.integers(-32768, 32768, FRAME_SHAPE, dtype=np.int16)
    if mode == "extremes":
        return rng.choice(np.array([-32768, -32767, 0, 32766, 32767], np.int16), FRAME_SHAPE)
    if mode == "smooth":
        base = np.cumsum(rng.integers(-40, 41, FRAME_SHAPE[0] * FRAME_SHAPE[1] * 3)).reshape(FRAME_SHAPE)
        return np.clip(base, -32768, 32767).astype(np.int16)
    q = np.zeros(FRAME_SHAPE, np.int16)  # sparse spikes on a zero background
    idx = rng.integers(0, FRAME_VALUES, 50)
    q.reshape(-1)[idx] = rng.integers(-32768, 32768, 50, dtype=np.int16)
    return q


def _true_diffs_wrap(q: np.ndarray) -> bool:
    rows = q.reshape(250, 750).astype(np.int32)
    d = np.diff(rows, axis=1)
    return bool(np.any((d > 32767) | (d < -32768)))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(["full", "extremes", "smooth", "sparse"]),
       scale=st.sampled_from(SCALES))
def test_quantized_round_trip_is_bit_exact(seed, mode, scale):
    codec = ForceMatrixCodec("row_diff_quantized", scale)
    q = _q_frame(seed, mode)
    stored = codec.encode_quantized(q)
    assert stored.dtype == np.int16 and stored.shape == (FRAME_VALUES,)
    assert np.array_equal(codec.decode_quantized(stored)[0], q)
    # value level: decode gives q / scale in float32, and re-encoding the decoded frame stores the same bytes
    values = codec.decode(stored)[0]
    assert values.dtype == np.float32
    assert np.array_equal(values, q.astype(np.float32) / np.float32(scale))
    assert np.array_equal(codec.encode(values), stored)


@pytest.mark.parametrize("scale", SCALES)
def test_wrapping_diffs_are_exercised_and_exact(scale):
    q = np.zeros(FRAME_SHAPE, np.int16)
    flat = q.reshape(250, 750)
    flat[:, 0::2] = -32768
    flat[:, 1::2] = 32767  # every true diff is ±65535: all wrap in int16
    assert _true_diffs_wrap(q)
    codec = ForceMatrixCodec("row_diff_quantized", scale)
    stored = codec.encode_quantized(q)
    assert stored.reshape(250, 750)[0, 1] == -1  # 32767 - (-32768) wraps to -1
    assert np.array_equal(codec.decode_quantized(stored)[0], q)
    first = codec.decode(stored)[0].reshape(250, 750)[0, :2]
    assert first[0] == np.float32(-32768) / np.float32(scale) and first[1] == np.float32(32767) / np.float32(scale)
    assert abs(first[0] + 32768 / scale) < 1e-5 * 32768 / scale


@pytest.mark.parametrize("scale", SCALES)
def test_out_of_range_values_clip(scale):
    v = np.zeros(FRAME_SHAPE, np.float32)
    v[0, 0, 0] = 1e9
    v[0, 0, 1] = -1e9
    v[0, 0, 2] = 1.26  # 12.6 / 126 / 1260 after scaling -> rounds half to even / nearest
    codec = ForceMatrixCodec("row_diff_quantized", scale)
    out = codec.decode(codec.encode(v))[0]
    assert out[0, 0, 0] == np.float32(32767) / np.float32(scale)
    assert out[0, 0, 1] == np.float32(-32768) / np.float32(scale)
    assert out[0, 0, 2] == np.float32(np.rint(1.26 * scale)) / np.float32(scale)


def test_multi_frame_decode_and_out_buffer():
    codec = ForceMatrixCodec("row_diff_quantized", 100)
    qs = [_q_frame(s, "full") for s in range(3)]
    stored = np.concatenate([codec.encode_quantized(q) for q in qs])
    out = np.full((3, *FRAME_SHAPE), np.nan, np.float32)
    got = codec.decode(stored, out=out)
    assert got.shape == (3, *FRAME_SHAPE)
    assert np.shares_memory(got, out)
    for i, q in enumerate(qs):
        assert np.array_equal(out[i], q.astype(np.float32) / np.float32(100))
    with pytest.raises(CodecError, match="out must be"):
        codec.decode(stored, out=np.empty((2, *FRAME_SHAPE), np.float32))
    with pytest.raises(CodecError, match="not a multiple"):
        codec.decode(stored[:-1])


def test_row_flat_raw_is_not_cumsummed():
    codec = ForceMatrixCodec("row_flat_raw", 1)
    v = np.full(FRAME_SHAPE, 1.5, np.float32)
    v[1, 2, 2] = -3.25
    stored = codec.encode(v)
    assert stored.dtype == np.float32
    got = codec.decode(stored)[0]
    assert np.array_equal(got, v)  # a cumsum would turn the constant 1.5 into 1.5, 3.0, 4.5, ...
    with pytest.raises(CodecError, match="scale must be 1"):
        ForceMatrixCodec("row_flat_raw", 10)


# -- scale authority (§7.2.1: force_matrix_specs -> info.features[col].scale -> 1) ---------------------------
COL = "observation.gripper_left_force_matrix"
Q100 = {"dtype": "int16", "shape": [250, 250, 3], "encoding": "row_diff_quantized", "scale": 100}
Q10 = {**Q100, "scale": 10}
RAW = {"dtype": "float32", "shape": [250, 250, 3], "encoding": "row_flat_raw", "scale": 1}


@pytest.mark.parametrize("stored,episode,features,scale,source,encoding", [
    ("int16", {COL: Q100}, {COL: Q10}, 100, "force_matrix_specs", "row_diff_quantized"),
    ("int16", {}, {COL: Q10}, 10, "info.features", "row_diff_quantized"),
    ("int16", None, {COL: Q10}, 10, "info.features", "row_diff_quantized"),
    ("int16", {}, {}, 1, "default", "row_diff_quantized"),
    ("int16", {}, {COL: {"dtype": "int16", "shape": [250, 250, 3]}}, 1, "default", "row_diff_quantized"),
    # §7.2.1: a later float32 episode overwrote info.json; its declaration does not describe int16 data
    ("int16", {}, {COL: RAW}, 1, "default", "row_diff_quantized"),
    ("float32", {COL: RAW}, {COL: Q10}, 1, "force_matrix_specs", "row_flat_raw"),
    ("float32", {}, {}, 1, "default", "row_flat_raw"),
    (None, {}, {COL: Q10}, 10, "info.features", "row_diff_quantized"),
    ("int16", {COL: {"encoding": "row_diff_quantized"}}, {COL: Q10}, 10, "info.features", "row_diff_quantized"),
], ids=["episode-wins", "episode-empty", "old-row-no-column", "nothing", "features-without-scale",
        "stale-float32-features", "float32-episode", "float32-nothing", "dtype-unknown", "episode-without-scale"])
def test_resolve_scale_authority(stored, episode, features, scale, source, encoding):
    r = resolve_force_matrix_spec(COL, stored_dtype=stored, episode_specs=episode, features=features)
    assert (r.codec.scale, r.source, r.codec.encoding) == (scale, source, encoding)


def test_resolve_rejects_episode_spec_contradicting_data():
    with pytest.raises(CodecError, match="force_matrix_specs declares row_flat_raw"):
        resolve_force_matrix_spec(COL, stored_dtype="int16", episode_specs={COL: RAW})
    with pytest.raises(CodecError, match="scale must be a number"):
        resolve_force_matrix_spec(COL, stored_dtype="int16", episode_specs={COL: {**Q10, "scale": "10"}})
    with pytest.raises(CodecError, match="int16 or float32"):
        encoding_for_dtype("float64")


def test_fz_self_check():
    frames = np.zeros((3, *FRAME_SHAPE), np.float32)
    frames[0, :, :, 2] = 0.5
    frames[1, :10, :10, 2] = 2.0
    frames[..., 0] = 7.0  # fx must not count
    sums = fz_plane_sums(frames)
    assert sums.tolist() == [0.5 * 62500, 200.0, 0.0]
    ratio = fz_ratio(sums, np.array([31250.0, 100.0, 0.0]), valid=np.array([True, True, True]))
    assert ratio[0] == 1.0 and ratio[1] == 2.0 and np.isnan(ratio[2])
    ratio = fz_ratio(sums, np.array([31250.0, 100.0, 5.0]), valid=np.array([False, True, True]))
    assert np.isnan(ratio[0]) and ratio[1] == 2.0 and ratio[2] == 0.0


def test_may_saturate_never_misses_a_saturated_frame_and_skips_small_ones() -> None:
    """``may_saturate`` (issue 29): a frame whose rows' |diffs| cannot sum to 32767 has no cell at either limit, so
    the saturation count need not decode it; every frame with a saturated cell (wraps included) is flagged."""
    from egopool.codecs.force_matrix import FRAME_VALUES, ForceMatrixCodec, may_saturate, saturated_cells

    codec = ForceMatrixCodec("row_diff_quantized", 1.0)
    rng = np.random.default_rng(29)
    q = rng.integers(-40, 40, (6, FRAME_VALUES)).astype(np.int16)  # small values: no row can reach a limit
    q[1, 7] = 32767
    q[2, FRAME_VALUES - 1] = -32768
    q[3] = rng.integers(-32768, 32768, FRAME_VALUES).astype(np.int16)  # wrap-arounds all over the frame
    q[4, 0], q[4, 1] = 30000, -30000  # large values, none at a limit: flagged (a bound), counted 0
    flat = np.concatenate([codec.encode_quantized(x) for x in q])
    flags = may_saturate(flat)
    counts = saturated_cells(q)
    assert flags.tolist() == [False, True, True, True, True, False]
    assert counts[0] == counts[5] == 0 and counts[1] == counts[2] == 1 and counts[4] == 0
    assert np.all(flags[counts > 0])
    decoded = codec.decode_quantized(flat).reshape(6, FRAME_VALUES)
    assert np.array_equal(decoded, q)  # the diffs encode exactly what the flags were computed on
