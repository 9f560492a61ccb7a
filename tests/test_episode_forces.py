"""Episode-level force matrices (file_format.md §7.2.1, multi_device_storage.md §4.6, §7.3, §8.2.6).

A task recorded at ×10, ×100, ×1000 and then float32 reproduces the §7.2.1 trap:
info.json ends up saying "float32, scale 1" for every episode, so only the per-episode
``force_matrix_specs`` gives the right numbers; the Σfz self-check exposes a wrong scale.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import SchemaError, TaskWriter, open_task, scalar_ns_column, vector_column
from egopool._atomic import atomic_write_json
from egopool.codecs.force_matrix import FRAME_SHAPE, FRAME_VALUES
from egopool.meta.episodes import read_episode_row, write_episode_row
from egopool.schema import force_matrix_column

COL = "observation.gripper_left_force_matrix"
FORCE = "observation.gripper_left_force"


def _frame(rng: np.random.Generator, scale: float) -> np.ndarray:
    """A contact patch: fz on a 40x40 blob, small shear; values on the quantisation grid of ``scale``."""
    f = np.zeros(FRAME_SHAPE, np.float32)
    y, x = rng.integers(20, 200, 2)
    q = rng.integers(1, 3000, (40, 40))
    f[y:y + 40, x:x + 40, 2] = q / scale
    f[y:y + 40, x:x + 40, 0] = rng.integers(-50, 50, (40, 40)) / scale
    return f


def _record(root, encoding: str, scale: float, rows: int, seed: int, skip: tuple[int, ...] = ()):
    tw = TaskWriter(root, "grip", fps=30.0)
    cols = [force_matrix_column(COL, encoding, scale), scalar_ns_column(COL + "_ns"),
            vector_column(FORCE, [3]), scalar_ns_column(FORCE + "_ns")]
    ep = tw.begin_episode(columns=cols)
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(rows):
        if i in skip:
            ep.add_frame({}, hardware_ns=10**9 + i * 33_333_333)
            frames.append(None)
            continue
        f = _frame(rng, scale)
        fz = float(f[..., 2].astype(np.float64).sum())
        ns = 10**9 + i * 33_333_333 - 2_000_000
        ep.add_frame({COL: f, COL + "_ns": ns, FORCE: [0.0, 0.0, fz], FORCE + "_ns": ns},
                     hardware_ns=10**9 + i * 33_333_333)
        frames.append(f)
    return ep.finish().index, frames


@pytest.fixture()
def task(tmp_path):
    expected = {}
    for n, (enc, scale) in enumerate([("row_diff_quantized", 10), ("row_diff_quantized", 100),
                                      ("row_diff_quantized", 1000), ("row_flat_raw", 1)]):
        idx, frames = _record(tmp_path, enc, scale, rows=4, seed=n, skip=(2,) if n == 1 else ())
        expected[idx] = (scale, frames)
    return tmp_path / "grip", expected


def test_info_json_was_overwritten_but_each_episode_keeps_its_scale(task):
    path, expected = task
    t = open_task(path)
    assert t.info["features"][COL]["encoding"] == "row_flat_raw"  # the latest episode won (§6.7)
    for ep in t.episodes():
        scale, frames = expected[ep.index]
        spec = ep.force_matrix_spec(COL)
        assert (spec.codec.scale, spec.source) == (scale, "force_matrix_specs")
        got = ep.force_matrices(COL)
        assert got.shape == (4, *FRAME_SHAPE) and got.dtype == np.float32
        for row, f in enumerate(frames):
            if f is None:
                assert not got[row].any()
            else:
                assert np.array_equal(got[row], f)  # values on the scale grid come back exactly
                assert np.array_equal(ep.force_matrix(COL, row), f)
        ratio = ep.force_matrix_fz_ratio(COL)
        valid = np.array([f is not None for f in frames])
        assert np.all(np.abs(ratio[valid] - 1.0) < 1e-5)
        assert np.all(np.isnan(ratio[~valid]))
        assert ep.force_matrix_sampled(COL).tolist() == valid.tolist()


def test_fallbacks_when_the_episode_row_lacks_force_matrix_specs(task):
    path, expected = task
    t = open_task(path)
    ep = t.episode(2)  # recorded at ×100
    row = read_episode_row(ep.files.meta, 2)
    row["force_matrix_specs"] = {}
    write_episode_row(ep.files.meta, row)
    # info.features describes the float32 episode: not this int16 data -> scale 1 ("default")
    spec = ep.force_matrix_spec(COL)
    assert (spec.codec.scale, spec.source) == (1.0, "default")
    ratio = ep.force_matrix_fz_ratio(COL)
    assert np.nanmedian(ratio) == pytest.approx(100.0, rel=1e-5)  # the silent ×100 error, caught by the check
    # a task-level int16 declaration is the fallback (§7.2.1 step 2)
    info = json.loads((path / "meta" / "info.json").read_text())
    info["features"][COL] = {"dtype": "int16", "shape": [250, 250, 3], "encoding": "row_diff_quantized",
                             "scale": 10}
    atomic_write_json(path / "meta" / "info.json", info)
    ep = open_task(path).episode(2)
    spec = ep.force_matrix_spec(COL)
    assert (spec.codec.scale, spec.source) == (10.0, "info.features")
    assert np.nanmedian(ep.force_matrix_fz_ratio(COL)) == pytest.approx(10.0, rel=1e-5)


def test_legacy_empty_rows_and_many_row_groups(task):
    path, expected = task
    ep = open_task(path).episode(3)  # ×1000
    table = ep.table
    col = table.column(COL).combine_chunks()
    values = col.values.to_numpy()
    rows = [values[i * FRAME_VALUES:(i + 1) * FRAME_VALUES] for i in range(4)]
    # rows 1 (empty list) and 3 (null) carry no frame, as older writers stored them
    legacy = pa.array([rows[0], [], rows[2], None], type=pa.list_(pa.int16()))
    table = table.set_column(table.schema.get_field_index(COL), COL, legacy)
    pq.write_table(table, ep.files.data, row_group_size=1)
    assert pq.ParquetFile(ep.files.data).metadata.num_row_groups == 4
    _, frames = expected[3]
    got = ep.force_matrices(COL)
    assert np.array_equal(got[0], frames[0]) and np.array_equal(got[2], frames[2])
    assert not got[1].any() and not got[3].any()
    assert np.array_equal(ep.force_matrix(COL, 2), frames[2])
    assert np.array_equal(ep.force_matrices(COL, 1, 3), got[1:3])
    assert ep.force_matrix_sampled(COL).tolist() == [True, False, True, False]


def test_bad_requests(task):
    path, _ = task
    ep = open_task(path).episode(1)
    with pytest.raises(SchemaError, match="not in episode 1"):
        ep.force_matrices("observation.gripper_right_force_matrix")
    with pytest.raises(SchemaError, match="row 4 outside"):
        ep.force_matrix(COL, 4)
    table = ep.table
    short = pa.array([np.zeros(10, np.int16)] * 4, type=pa.list_(pa.int16()))
    pq.write_table(table.set_column(table.schema.get_field_index(COL), COL, short), ep.files.data)
    with pytest.raises(SchemaError, match="row 0 holds 10 values"):
        ep.force_matrices(COL)
