"""The LeRobot v3.0 dataset layout, written and read with pyarrow alone (no lerobot, torch or pandas).

::

    OUT/
    ├── data/chunk-{c:03d}/file-{f:03d}.parquet            # frames; egopool: one file per episode
    ├── videos/<feature>/chunk-{c:03d}/file-{f:03d}.mp4     # egopool: one file per episode and stream
    └── meta/info.json, stats.json, tasks.parquet, episodes/chunk-{c:03d}/file-{f:03d}.parquet

``episode_index`` is 0-based and contiguous; ``index`` counts frames over the whole dataset;
``meta/episodes`` has one row per episode with its data / video file and, per video, the
``[from_timestamp, to_timestamp)`` window inside that file; ``fps`` is an integer; feature
statistics are ``min, max, mean, std, count, q01, q10, q50, q90, q99`` (the keys lerobot 0.4
writes), per episode in ``meta/episodes`` (``stats/<feature>/<key>`` columns) and for the
dataset in ``meta/stats.json``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._safe_read import loads_json, read_json, read_parquet
from ..errors import FormatError

__all__ = [
    "CODEBASE_VERSION",
    "DATA_PATH",
    "DEFAULT_FEATURES",
    "EPISODES_PATH",
    "QUANTILES",
    "VIDEO_PATH",
    "aggregate_stats",
    "arrow_type",
    "chunk_file",
    "feature_array",
    "feature_stats",
    "image_stats",
    "read_info",
    "read_tasks",
    "stats_to_json",
    "write_tasks",
]

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
#: Frame-key features every LeRobot dataset has (appended after the user features).
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
#: Quantiles of every statistics block (lerobot's ``DEFAULT_QUANTILES``).
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_QKEYS = tuple(f"q{int(round(q * 100)):02d}" for q in QUANTILES)


def chunk_file(index: int, chunks_size: int = 1000) -> tuple[int, int]:
    """0-based file number -> ``(chunk_index, file_index)`` (``chunks_size`` files per chunk)."""
    return index // chunks_size, index % chunks_size


def arrow_type(feature: Mapping[str, Any]) -> pa.DataType:
    """The parquet type of a non-video feature, as Hugging Face ``datasets`` stores it.

    ``shape [1]`` -> the scalar type; ``[n]`` -> ``fixed_size_list<T>[n]``; ``[a, b, ...]`` ->
    nested fixed-size lists (``datasets.ArrayND`` casts from them); ``"string"`` -> string.
    """
    dtype = feature["dtype"]
    if dtype == "string":
        return pa.string()
    typ: pa.DataType = pa.from_numpy_dtype(np.dtype("bool" if dtype == "bool" else dtype))
    shape = list(feature["shape"])
    if shape == [1]:
        return typ
    for n in reversed(shape):
        typ = pa.list_(typ, int(n))
    return typ


def feature_array(values: np.ndarray, feature: Mapping[str, Any]) -> pa.Array:
    """Rows of one feature -> its arrow array.

    Parameters
    ----------
    values:
        ``(R, *shape)`` (or ``(R,)`` for ``shape [1]``) array of the feature's dtype; a
        sequence of str for ``"string"``.
    feature:
        The LeRobot feature (``dtype``, ``shape``).
    """
    if feature["dtype"] == "string":
        return pa.array(list(values), type=pa.string())
    shape = [int(s) for s in feature["shape"]]
    arr = np.ascontiguousarray(values, dtype=np.dtype(feature["dtype"]))
    if shape == [1]:
        return pa.array(arr.reshape(-1))
    out: pa.Array = pa.array(arr.reshape(-1))
    for n in reversed(shape):
        out = pa.FixedSizeListArray.from_arrays(out, n)
    return out


def _stats_block(x: np.ndarray, axis: int | tuple[int, ...], count: int) -> dict[str, np.ndarray]:
    x64 = x.astype(np.float64, copy=False)
    if x64.size and np.isnan(x64).any():
        return _nan_stats_block(x64, axis, count)
    block: dict[str, np.ndarray] = {
        "min": np.min(x, axis=axis), "max": np.max(x, axis=axis),
        "mean": np.mean(x64, axis=axis), "std": np.std(x64, axis=axis),
        "count": np.array([count], dtype=np.int64),
    }
    qs = np.quantile(x64, QUANTILES, axis=axis)
    for key, q in zip(_QKEYS, qs, strict=True):
        block[key] = q
    return block


def _nan_stats_block(x64: np.ndarray, axis: int | tuple[int, ...], count: int) -> dict[str, np.ndarray]:
    """Statistics over the values present: NaN is a missing value (an empty MPS field, Aria's hand
    joint 1, docs/decisions.md I11), left out; an element with no value at all gets 0 in every
    statistic (stats.json is JSON: no NaN), while the data keeps its NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: handled below
        block: dict[str, np.ndarray] = {
            "min": np.nanmin(x64, axis=axis), "max": np.nanmax(x64, axis=axis),
            "mean": np.nanmean(x64, axis=axis), "std": np.nanstd(x64, axis=axis)}
        qs = np.nanquantile(x64, QUANTILES, axis=axis)
    for key, q in zip(_QKEYS, qs, strict=True):
        block[key] = q
    block = {k: np.nan_to_num(v, nan=0.0) for k, v in block.items()}
    block["count"] = np.array([count], dtype=np.int64)
    return block


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of one numeric feature over an episode's rows (exact quantiles).

    ``values`` ``(R, *shape)``; the blocks have the feature's element shape (``(1,)`` for a
    scalar feature), ``count = R``.
    """
    x = np.asarray(values)
    if x.ndim == 1:
        x = x[:, None]
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    return _stats_block(x, 0, int(x.shape[0]))


def image_stats(frames: np.ndarray, channels_first_shape: tuple[int, ...], scale: float) -> dict[str, np.ndarray]:
    """Per-channel statistics of sampled frames, the way lerobot stores image and video stats.

    Parameters
    ----------
    frames:
        ``(S, H, W, C)`` sampled frames (uint8 RGB, or ``(S, H, W)`` uint16 depth).
    channels_first_shape:
        Shape of each block: ``(3, 1, 1)`` for RGB, ``(1, 1, 1)`` for depth.
    scale:
        Divisor of the values (255 for RGB -> [0, 1]; 1 for depth in mm).
    """
    x = np.asarray(frames)
    if x.ndim == 3:
        x = x[..., None]
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64) / scale
    block = _stats_block(flat, 0, int(x.shape[0]))
    return {k: (v if k == "count" else np.asarray(v).reshape(channels_first_shape)) for k, v in block.items()}


def aggregate_stats(blocks: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Merge per-episode blocks of one feature into the dataset block.

    min/max elementwise; mean and std by the parallel (Chan) formula on counts (population
    std); quantiles as the count-weighted mean of the episodes' quantiles (lerobot's rule:
    an approximation, the exact dataset quantiles would need every value again).
    """
    counts = np.array([int(np.asarray(b["count"]).reshape(-1)[0]) for b in blocks], dtype=np.float64)
    total = counts.sum()
    shape = np.asarray(blocks[0]["mean"]).shape
    w = counts.reshape((-1,) + (1,) * len(shape))
    means = np.stack([np.asarray(b["mean"], np.float64) for b in blocks])
    var = np.stack([np.asarray(b["std"], np.float64) ** 2 for b in blocks])
    mean = (means * w).sum(axis=0) / total
    var_total = ((var + (means - mean) ** 2) * w).sum(axis=0) / total
    out: dict[str, np.ndarray] = {
        "min": np.min(np.stack([b["min"] for b in blocks]), axis=0),
        "max": np.max(np.stack([b["max"] for b in blocks]), axis=0),
        "mean": mean, "std": np.sqrt(var_total), "count": np.array([int(total)], dtype=np.int64),
    }
    for key in _QKEYS:
        out[key] = (np.stack([np.asarray(b[key], np.float64) for b in blocks]) * w).sum(axis=0) / total
    return out


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """``{feature: {key: array}}`` -> JSON-ready nested lists."""
    return {name: {k: np.asarray(v).tolist() for k, v in block.items()} for name, block in stats.items()}


_TASK_INDEX_META = {
    "index_columns": ["__index_level_0__"],
    "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                        "metadata": {"encoding": "UTF-8"}}],
    "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None},
    ],
    "creator": {"library": "pyarrow", "version": pa.__version__},
    "pandas_version": "2.2.0",
}


def write_tasks(path: Path, tasks: Sequence[str]) -> None:
    """``meta/tasks.parquet``: one row per task, ``task_index`` 0.., the task text as the pandas index.

    lerobot reads it with ``pandas.read_parquet`` and looks tasks up by that index, so the
    file carries pandas' own schema metadata naming the index column.
    """
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()),
                      "__index_level_0__": pa.array(list(tasks), pa.large_string())})
    table = table.replace_schema_metadata({"pandas": json.dumps(_TASK_INDEX_META)})
    pq.write_table(table, path)


def read_tasks(root: Path) -> dict[int, str]:
    """``task_index -> task text`` of a LeRobot v3 dataset (the pandas index column, or a ``task`` column).

    Raises
    ------
    FormatError
        The file is missing, unreadable, or names no task text.
    """
    path = root / "meta" / "tasks.parquet"
    table = read_parquet(path, what="LeRobot tasks", hint="a LeRobot v3.0 dataset has meta/tasks.parquet")
    names = table.column_names
    text_col = next((c for c in ("__index_level_0__", "task") if c in names), None)
    meta = loads_json((table.schema.metadata or {}).get(b"pandas", b"{}") or b"{}", path=path,
                      what="the pandas schema metadata")
    index_columns = meta.get("index_columns") if isinstance(meta, dict) else None
    for idx in index_columns if isinstance(index_columns, list) else []:
        if isinstance(idx, str) and idx in names:
            text_col = idx
    if text_col is None or "task_index" not in names:
        raise FormatError(f"tasks.parquet has columns {names}, no task text and task_index", path=path)
    try:
        return {int(i): str(t) for i, t in zip(table.column("task_index").to_pylist(),
                                               table.column(text_col).to_pylist(), strict=True)}
    except (TypeError, ValueError) as exc:  # a null or non-integer task_index
        raise FormatError(f"tasks.parquet task_index is not an integer column ({exc})", path=path) from None


def _check_info(info: Mapping[str, Any], path: Path) -> None:
    """The parts of info.json the importer relies on have their LeRobot types (one line naming the key)."""
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not np.isfinite(fps) or fps <= 0:
        raise FormatError(f"info.json fps is {fps!r}, not a number > 0", path=path)
    feats = info["features"]
    if not isinstance(feats, dict):
        raise FormatError(f"info.json features is a {type(feats).__name__}, not an object", path=path)
    for name, feat in feats.items():
        shape = feat.get("shape") if isinstance(feat, dict) else None
        if not isinstance(feat, dict) or not isinstance(feat.get("dtype"), str) or not isinstance(shape, list) \
                or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 2**31 for n in shape):
            raise FormatError(f"info.json feature {name!r} is {str(feat)[:80]}, not {{dtype: str, shape: [int, ...]}}",
                              path=path)
    for key, fields in (("data_path", {"chunk_index": 0, "file_index": 0}),
                        ("video_path", {"video_key": "v", "chunk_index": 0, "file_index": 0})):
        tmpl = info.get(key)
        if tmpl is None:
            continue
        try:
            if not isinstance(tmpl, str):
                raise TypeError(f"a {type(tmpl).__name__}")
            tmpl.format(**fields)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            raise FormatError(f"info.json {key} {str(tmpl)[:80]!r} is not a path template of "
                              f"{{{'}, {'.join(fields)}}} ({type(exc).__name__}: {exc})", path=path) from None


def read_info(root: Path) -> dict[str, Any]:
    """``meta/info.json`` of a LeRobot dataset, checked to be ``codebase_version`` v3.x.

    Raises
    ------
    FormatError
        Missing or unreadable, not an object, or another codebase version (v2.x datasets
        have another layout; lerobot's converter upgrades them); ``fps`` not a positive number;
        a feature without a ``dtype`` string and a ``shape`` list of positive ints.
    """
    path = root / "meta" / "info.json"
    if not path.exists() and not path.is_symlink():
        raise FormatError("no meta/info.json: not a LeRobot dataset", path=root,
                          hint="pass the dataset's root directory (holding meta/, data/, videos/)")
    info = read_json(path, what="LeRobot info.json")
    if not isinstance(info, dict):
        raise FormatError("info.json is not a JSON object", path=path)
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3."):
        raise FormatError(f"codebase_version {version or 'missing'!r}: only LeRobot v3.x datasets are read",
                          path=path, hint="convert v2.x datasets with lerobot's v2.1 -> v3.0 converter first")
    for key in ("fps", "features"):
        if key not in info:
            raise FormatError(f"info.json lacks {key!r}", path=path)
    _check_info(info, path)
    return info
