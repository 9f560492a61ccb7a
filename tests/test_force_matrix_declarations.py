"""Unusable force-matrix declarations (file_format.md §7.2.1, multi_device_storage.md §7.3, §8.2.6).

A wrong scale is a silent ×10…×1000 error, so a declaration the reader cannot use must stop it
with one line naming the column, the file that holds the declaration and the fix — and that fix
(`egopool repair force-scale`) must then be able to repair it.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import CodecError, TaskWriter, open_task, scalar_ns_column, vector_column
from egopool._atomic import atomic_write_json
from egopool.codecs.force_matrix import FRAME_SHAPE
from egopool.meta.episodes import read_episode_row, write_episode_row
from egopool.ops import repair_force_scale
from egopool.schema import force_matrix_column

COL = "observation.gripper_left_force_matrix"
FORCE = "observation.gripper_left_force"


@pytest.fixture()
def task(tmp_path):
    """One ×100 episode of 4 rows; force fz = Σ fz plane of the matrix."""
    ep = TaskWriter(tmp_path, "g", fps=30.0).begin_episode(
        [force_matrix_column(COL, "row_diff_quantized", 100), scalar_ns_column(COL + "_ns"),
         vector_column(FORCE, [3]), scalar_ns_column(FORCE + "_ns")])
    rng = np.random.default_rng(7)
    for i in range(4):
        f = np.zeros(FRAME_SHAPE, np.float32)
        f[40:80, 90:130, 2] = rng.integers(100, 3000, (40, 40)) / 100
        fz = float(f[..., 2].astype(np.float64).sum())
        ns = 10**12 + i * 33_333_333
        ep.add_frame({COL: f, COL + "_ns": ns, FORCE: [0.0, 0.0, fz], FORCE + "_ns": ns}, hardware_ns=ns)
    ep.finish()
    return tmp_path / "g"


def _set_episode_spec(task, entry):
    meta = task / "meta" / "episodes" / "chunk-000" / "episode-000.parquet"
    row = read_episode_row(meta, 1)
    row["force_matrix_specs"] = {COL: entry}
    write_episode_row(meta, row)
    return meta


def _set_feature(task, entry):
    info_path = task / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"][COL] = entry
    atomic_write_json(info_path, info)
    return info_path


@pytest.mark.parametrize("scale", [0, -10, "abc", "100", True, [10], 1e-300])
def test_unusable_episode_scale_names_the_row_and_the_fix(task, scale):
    meta = _set_episode_spec(task, {"dtype": "int16", "encoding": "row_diff_quantized", "scale": scale})
    ep = open_task(task).episode(1)
    with pytest.raises(CodecError) as ei:
        ep.force_matrices(COL)
    msg = str(ei.value)
    assert "\n" not in msg
    assert str(meta) in msg and COL in msg and "force_matrix_specs" in msg and "repair force-scale" in msg


@pytest.mark.parametrize("scale", [0, "abc"])
def test_unusable_task_level_scale_names_info_json(task, scale):
    _set_episode_spec(task, {})
    info_path = _set_feature(task, {"dtype": "int16", "encoding": "row_diff_quantized", "scale": scale})
    with pytest.raises(CodecError) as ei:
        open_task(task).episode(1).force_matrix_spec(COL)
    msg = str(ei.value)
    assert str(info_path) in msg and COL in msg and "info.json" in msg


def test_episode_entry_that_is_not_an_object_is_refused_not_skipped(task):
    """Skipping it would silently fall back to info.json, which may describe another episode (§7.2.1)."""
    _set_feature(task, {"dtype": "int16", "encoding": "row_diff_quantized", "scale": 10})
    meta = _set_episode_spec(task, "100")
    with pytest.raises(CodecError) as ei:
        open_task(task).episode(1).force_matrix_spec(COL)
    assert str(meta) in str(ei.value) and COL in str(ei.value)


@pytest.mark.parametrize("where", ["episode", "info"])
def test_unknown_declared_encoding_is_refused(task, where):
    decl = {"dtype": "int16", "encoding": "zigzag", "scale": 100}
    if where == "episode":
        path = _set_episode_spec(task, decl)
    else:
        _set_episode_spec(task, {})
        path = _set_feature(task, decl)
    with pytest.raises(CodecError) as ei:
        open_task(task).episode(1).force_matrix_spec(COL)
    assert "zigzag" in str(ei.value) and str(path) in str(ei.value)


def test_stored_dtype_that_no_encoding_uses_names_the_data_file(task):
    data = task / "data" / "chunk-000" / "episode-000.parquet"
    t = pq.read_table(data)
    as_i32 = pa.array([None if v is None else [int(x) for x in v] for v in t.column(COL).to_pylist()],
                      type=pa.list_(pa.int32()))
    pq.write_table(t.set_column(t.column_names.index(COL), COL, as_i32), data)
    with pytest.raises(CodecError) as ei:
        open_task(task).episode(1).force_matrices(COL)
    assert str(data) in str(ei.value) and COL in str(ei.value) and "int32" in str(ei.value)


@pytest.mark.parametrize("scale", [0, "abc"])
def test_repair_force_scale_restores_an_unusable_declared_scale(task, scale):
    _set_episode_spec(task, {"dtype": "int16", "encoding": "row_diff_quantized", "scale": scale})
    report = repair_force_scale(task, registry=False)
    assert [e.status for e in report.episodes] == ["repaired"]
    ep = open_task(task).episode(1)
    spec = ep.force_matrix_spec(COL)
    assert (spec.codec.scale, spec.source) == (100.0, "force_matrix_specs")
    assert np.allclose(ep.force_matrix_fz_ratio(COL), 1.0, atol=1e-6)
