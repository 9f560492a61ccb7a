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
writes) in the shapes lerobot 0.4.4's writer gives them (per component of a feature's last axis;
``(3, 1, 1)`` per channel for videos), per episode in ``meta/episodes``
(``stats/<feature>/<key>`` columns) and for the dataset in ``meta/stats.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._safe_read import loads_json, read_json, read_parquet
from ..errors import FormatError

__all__ = [
    "CODEBASE_VERSION",
    "CountedStats",
    "DATA_PATH",
    "DEFAULT_FEATURES",
    "EPISODES_PATH",
    "QUANTILES",
    "QUANTILE_BINS",
    "VIDEO_PATH",
    "aggregate_stats",
    "arrow_field",
    "arrow_type",
    "as_vectors",
    "chunk_file",
    "feature_array",
    "feature_stats",
    "image_stats",
    "read_info",
    "read_tasks",
    "stats_to_json",
    "vector_stats",
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


def arrow_type(feature: Mapping[str, Any], *, plain_nested: bool = False) -> pa.DataType:
    """The parquet type of a non-video feature, as Hugging Face ``datasets`` stores it.

    ``shape [1]`` -> the scalar type; ``[n]`` -> ``fixed_size_list<T>[n]``; ``[a, b, ...]`` ->
    nested fixed-size lists (``datasets.ArrayND`` casts from them), or with ``plain_nested`` the plain
    nested lists ``list<list<T>>`` lerobot's own writer stores (what lerobot >= 0.6's tools expect,
    issue 31); ``"string"`` -> string.
    """
    dtype = feature["dtype"]
    if dtype == "string":
        return pa.string()
    typ: pa.DataType = pa.from_numpy_dtype(np.dtype("bool" if dtype == "bool" else dtype))
    shape = list(feature["shape"])
    if shape == [1]:
        return typ
    if plain_nested and len(shape) > 1:
        for _ in shape:
            typ = pa.list_(typ)
        return typ
    for n in reversed(shape):
        typ = pa.list_(typ, int(n))
    return typ


def arrow_field(name: str, feature: Mapping[str, Any], *, plain_nested: bool = False) -> pa.Field:
    """:func:`arrow_type` as a field; a plain nested ``[a, b, ...]`` feature carries the ``datasets`` ArrayND
    extension metadata lerobot's writer gives it (``Array2DExtensionType``, ``[[a, b], dtype]``)."""
    typ = arrow_type(feature, plain_nested=plain_nested)
    shape = [int(n) for n in feature.get("shape") or [1]]
    if not plain_nested or len(shape) < 2 or len(shape) > 5 or feature["dtype"] == "string":
        return pa.field(name, typ)
    meta = {b"ARROW:extension:metadata": json.dumps([shape, str(feature["dtype"])]).encode(),
            b"ARROW:extension:name": f"datasets.features.features.Array{len(shape)}DExtensionType".encode()}
    return pa.field(name, typ, metadata=meta)


def feature_array(values: np.ndarray, feature: Mapping[str, Any], *, plain_nested: bool = False) -> pa.Array:
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
    if plain_nested and len(shape) > 1:
        return out.cast(arrow_type(feature, plain_nested=True))
    return out


#: Histogram bins of a quantile estimate (lerobot 0.4's ``RunningQuantileStats``).
QUANTILE_BINS = 5000


def _quantiles(hist: np.ndarray, edges: np.ndarray, count: int) -> np.ndarray:
    """``(len(QUANTILES),)`` values of one column from its histogram, by lerobot 0.4's rule.

    The bin where the cumulative count first reaches ``q * count`` is found and the value
    interpolated linearly inside it (the lower outer edge below the first bin, the upper
    one past the last, the bin's left edge for an empty bin).
    """
    cum = np.cumsum(hist)
    out = np.empty(len(QUANTILES), np.float64)
    for k, q in enumerate(QUANTILES):
        target = q * count
        i = int(np.searchsorted(cum, target))
        if i == 0:
            out[k] = edges[0]
        elif i >= len(cum):
            out[k] = edges[-1]
        else:
            before = cum[i - 1]
            inside = cum[i] - before
            out[k] = edges[i] if inside == 0 else edges[i] + (target - before) / inside * (edges[i + 1] - edges[i])
    return out


def _block(mn: np.ndarray, mx: np.ndarray, mean: np.ndarray, std: np.ndarray, frames: int,
           quantiles: Callable[[int], np.ndarray]) -> dict[str, np.ndarray]:
    """One statistics block; ``quantiles(i)`` gives component i's (lerobot: the mean below 2 frames)."""
    block: dict[str, np.ndarray] = {"min": mn, "max": mx, "mean": mean, "std": std,
                                    "count": np.array([frames], dtype=np.int64)}
    if frames < 2:
        qs = np.tile(mean, (len(QUANTILES), 1))
    else:
        qs = np.stack([quantiles(i) for i in range(mean.shape[0])], axis=1)
    for key, q in zip(_QKEYS, qs, strict=True):
        block[key] = q
    return block


def _edges(lo: Any, hi: Any) -> np.ndarray:
    """lerobot 0.4's histogram edges of one component: ``min - 1e-10 .. max + 1e-10`` in the dtype numpy
    gives that sum (float32 for float32 data, float64 for integers)."""
    return np.linspace(lo - 1e-10, hi + 1e-10, QUANTILE_BINS + 1)


def vector_stats(x: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """Statistics of ``(N, D)`` vectors per component (lerobot 0.4's blocks, exact std).

    min and max in the data's dtype, the float64 mean, the exact population std (float64, from
    squared deviations: lerobot 0.4.4 takes ``E[x²] - E[x]²`` in the data's own dtype, which wraps
    for small integers, lerobot issue 3682, and cancels for large values), and quantiles read from a
    histogram of :data:`QUANTILE_BINS` bins per component (:func:`_edges`, :func:`_quantiles`), as
    lerobot computes them (uint8 / uint16 vectors through :class:`CountedStats`, the same numbers).
    With fewer than 2 frames the quantiles are the mean (lerobot's rule).
    ``count`` is ``frames`` (lerobot counts frames, not vectors).

    Returns ``{min, max, mean, std: (D,), count: (1,) int64, q01..q99: (D,) float64}``.
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"statistics need (N, D) vectors with N > 0, got shape {x.shape}")
    if x.dtype in (np.uint8, np.uint16):  # few distinct values: counting them is exact and faster
        counted = CountedStats()
        counted.update(x)
        return counted.result(frames)
    if x.dtype.kind == "f" and np.isnan(x).any():
        return _stats_of_present(x, frames)
    mn, mx = x.min(axis=0), x.max(axis=0)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=0)
    std = np.sqrt(((x64 - mean) ** 2).mean(axis=0))
    n = x.shape[0]

    def quantiles(i: int) -> np.ndarray:
        edges = _edges(mn[i], mx[i])
        return _quantiles(np.histogram(x[:, i], bins=edges)[0], edges, n)

    return _block(mn, mx, mean, std, frames, quantiles)


def _stats_of_present(x: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    """:func:`vector_stats` of float vectors holding NaN: a NaN is a missing value (an empty MPS field,
    Aria's hand joint 1, docs/decisions.md I13), left out of each component's statistics; a component
    without any value gets 0 in every statistic (stats.json is JSON: no NaN), the data keeps its NaN."""
    d = x.shape[1]
    present = [x[:, i][~np.isnan(x[:, i])] for i in range(d)]
    mn, mx = np.zeros(d, x.dtype), np.zeros(d, x.dtype)
    mean, std = np.zeros(d), np.zeros(d)
    for i, v in enumerate(present):
        if len(v):
            v64 = v.astype(np.float64)
            mn[i], mx[i], mean[i] = v.min(), v.max(), v64.mean()
            std[i] = np.sqrt(((v64 - mean[i]) ** 2).mean())

    def quantiles(i: int) -> np.ndarray:
        if not len(present[i]):
            return np.zeros(len(QUANTILES))
        edges = _edges(mn[i], mx[i])
        return _quantiles(np.histogram(present[i], bins=edges)[0], edges, len(present[i]))

    return _block(mn, mx, mean, std, frames, quantiles)


class CountedStats:
    """:func:`vector_stats` of integer vectors that arrive in batches (a depth stream: no second read).

    Each component keeps how often each value occurs (``counts[i][v]``, values 0..max seen), from
    which min, max, the mean, the exact std and lerobot's histogram (a weighted ``np.histogram`` of
    the distinct values: the bins lerobot fills one value at a time) follow exactly. Memory: D x
    (largest value + 1) counts, e.g. 640 x 20001 x 8 B = 102 MB for a 640-wide depth up to 20 m.

    Raises
    ------
    ValueError
        A batch that is not ``(n, D)`` non-negative integers of the first batch's D.
    """

    def __init__(self) -> None:
        self._counts: np.ndarray | None = None
        self._dtype: np.dtype | None = None

    def update(self, batch: np.ndarray) -> None:
        """Count the ``(n, D)`` non-negative integer vectors of ``batch``."""
        b = np.asarray(batch)
        if b.ndim != 2 or b.dtype.kind not in "ui" or (b.size and b.min() < 0):
            raise ValueError(f"counted statistics take (n, D) non-negative integers, got {b.dtype} {b.shape}")
        if b.shape[0] == 0:
            return
        top = int(b.max()) + 1
        if self._counts is None:
            self._counts, self._dtype = np.zeros((b.shape[1], top), np.int64), b.dtype
        elif b.shape[1] != self._counts.shape[0]:
            raise ValueError(f"a batch of {b.shape[1]} components after {self._counts.shape[0]}")
        elif top > self._counts.shape[1]:
            self._counts = np.pad(self._counts, ((0, 0), (0, top - self._counts.shape[1])))
        width = self._counts.shape[1]
        for i in range(b.shape[1]):
            self._counts[i] += np.bincount(b[:, i], minlength=width)

    def result(self, frames: int) -> dict[str, np.ndarray]:
        """The block of every counted vector; ``count = frames``."""
        if self._counts is None or self._dtype is None:
            raise ValueError("no values to compute statistics of")
        counts, dtype = self._counts, self._dtype
        values = np.arange(counts.shape[1], dtype=np.float64)
        n = int(counts[0].sum())
        present = [np.flatnonzero(c) for c in counts]
        mn = np.array([p[0] for p in present], dtype=dtype)
        mx = np.array([p[-1] for p in present], dtype=dtype)
        mean = (counts * values).sum(axis=1) / n
        std = np.sqrt((counts * (values - mean[:, None]) ** 2).sum(axis=1) / n)

        def quantiles(i: int) -> np.ndarray:
            edges = _edges(mn[i], mx[i])
            v = present[i]
            return _quantiles(np.histogram(v, bins=edges, weights=counts[i, v])[0], edges, n)

        return _block(mn, mx, mean, std, frames, quantiles)


def as_vectors(values: np.ndarray) -> np.ndarray:
    """``(R, *shape)`` feature values -> the ``(N, D)`` vectors lerobot takes statistics of.

    A scalar feature (``(R,)`` or ``(R, 1)``) gives ``(R, 1)``; any other keeps its last axis:
    ``(R, 21, 3)`` -> ``(R * 21, 3)``, ``(R, H, W)`` -> ``(R * H, W)`` (what lerobot 0.4's
    ``compute_episode_stats`` does, so its ``aggregate_stats`` and ``merge_datasets`` take the
    blocks). bool becomes uint8.
    """
    x = np.asarray(values)
    if x.dtype == np.bool_:
        x = x.astype(np.uint8)
    if x.ndim == 1:
        return x[:, None]
    return x.reshape(-1, x.shape[-1])


def feature_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Statistics of one numeric feature over an episode's rows, as lerobot 0.4's writer stores them.

    ``values`` ``(R, *shape)``; the blocks have shape ``(shape[-1],)`` (``(1,)`` for a scalar
    feature: :func:`as_vectors`), ``count = R``; values: :func:`vector_stats`.
    """
    return vector_stats(as_vectors(values), int(np.asarray(values).shape[0]))


def image_stats(frames: np.ndarray, scale: float = 255.0) -> dict[str, np.ndarray]:
    """Per-channel statistics of sampled RGB frames, the way lerobot stores image and video stats.

    Parameters
    ----------
    frames:
        ``(S, H, W, 3)`` uint8 sampled frames (``count = S``).
    scale:
        Divisor of every value but ``count`` (255: the blocks are in [0, 1], shape ``(3, 1, 1)``).

    The statistics are taken of the uint8 values (:func:`vector_stats`, so the histogram bins are
    lerobot's) and then divided by ``scale``, as lerobot does.
    """
    x = np.asarray(frames)
    flat = x.reshape(-1, x.shape[-1])
    block = vector_stats(flat, int(x.shape[0]))
    return {k: (v if k == "count" else (np.asarray(v, np.float64) / scale).reshape(-1, 1, 1))
            for k, v in block.items()}


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
    if info.get("format") == "pooled_episodes_v1":  # issue 28: an egopool task said "KeyError: 'c'"
        raise FormatError("this is an egopool task (format pooled_episodes_v1), not a LeRobot dataset: it needs no "
                          "import", path=path, hint="use it as it is (`egopool ls`, `egopool validate`), or make a "
                                                    "LeRobot dataset of it with `egopool export lerobot`")
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3."):
        raise FormatError(f"codebase_version {version or 'missing'!r}: only LeRobot v3.x datasets are read",
                          path=path, hint="convert v2.x datasets with lerobot's v2.1 -> v3.0 converter first")
    for key in ("fps", "features"):
        if key not in info:
            raise FormatError(f"info.json lacks {key!r}", path=path)
    _check_info(info, path)
    return info
