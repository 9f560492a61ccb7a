"""``meta/stats.json``: the per-task count accumulator (file_format.md §4, DESIGN §4).

Each block is ``{count, mean, std, min, max}`` with list dimension = column
dimension and population std (ddof=0). Episodes merge with the parallel (Chan)
formula using ``M2 = std² · count``, equivalent to the spec's
``sum = mean·count`` / ``sum_sq = (std² + mean²)·count`` contract but stable.

Which columns: every ``observation.<sensor>`` listed in ``sensors`` (per row,
all-zero rows included), ``observation.imu`` (per sample) and the ``action``
placeholder (``count: 0``). Never ``*hand_pose``, ``*_ns``, trajectories or
force matrices.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from .._atomic import atomic_write_json
from .._safe_read import open_parquet, read_json, read_parquet
from ..errors import FormatError, SchemaError
from ..storage import TaskPath, TaskPathLike, as_local_path, as_path

__all__ = [
    "ACTION_BLOCK",
    "StatsBlock",
    "episode_stats",
    "episode_stats_file",
    "merge_stats",
    "needs_recalc",
    "read_stats",
    "recalc_stats",
    "stats_columns",
    "stats_path",
    "tree_merge",
    "write_stats",
]

ACTION_BLOCK: dict[str, Any] = {"count": 0, "mean": [0.0], "std": [1.0], "min": [0.0], "max": [0.0]}


@overload
def stats_path(task_dir: Path) -> Path: ...
@overload
def stats_path(task_dir: TaskPathLike) -> TaskPath: ...
def stats_path(task_dir: TaskPathLike) -> TaskPath:
    """``<task>/meta/stats.json`` (a local task's is a ``Path``)."""
    return as_path(task_dir) / "meta" / "stats.json"


@dataclass(frozen=True)
class StatsBlock:
    """One accumulator block. Arrays are float64 of shape ``(d,)``; ``count`` is rows or samples."""

    count: int
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> StatsBlock | None:
        """Block of a ``(n, d)`` array (``n`` rows or samples); None when ``n == 0``."""
        x = np.asarray(values, dtype=np.float64)
        if x.ndim == 1:
            x = x[:, None]
        if x.shape[0] == 0:  # checked before reshape: (0, -1) is ambiguous for numpy
            return None
        x = x.reshape(x.shape[0], -1)
        return cls(int(x.shape[0]), x.mean(axis=0), x.std(axis=0), x.min(axis=0), x.max(axis=0))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StatsBlock:
        """Parse a stored block; raises KeyError when ``count`` is missing (legacy v1.1.0), ValueError
        when ``count`` is not an integer >= 0."""
        count = d["count"]
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        return cls(int(count), *(np.asarray(d[k], dtype=np.float64).reshape(-1)
                                 for k in ("mean", "std", "min", "max")))

    @property
    def empty(self) -> bool:
        """A block with ``count == 0`` holds no samples (§4's placeholder form, like ``action``):
        its mean/std/min/max are not statistics of anything and take no part in a merge."""
        return self.count == 0

    def to_dict(self) -> dict[str, Any]:
        """JSON form ``{count, mean, std, min, max}`` with plain float lists."""
        return {"count": self.count, "mean": self.mean.tolist(), "std": self.std.tolist(),
                "min": self.min.tolist(), "max": self.max.tolist()}

    def merge(self, other: StatsBlock) -> StatsBlock:
        """Parallel (Chan et al.) merge of two blocks; exact up to float64 rounding.

        A block with ``count == 0`` holds no samples: merging it returns the other block
        unchanged (whatever its placeholder values and dimension), so the merge equals a
        recomputation from ``data/`` (docs/decisions.md #23).

        Raises
        ------
        ValueError
            Both blocks hold samples but have different dimensions.
        """
        if other.empty:
            return self
        if self.empty:
            return other
        if self.mean.shape != other.mean.shape:
            raise ValueError(f"stats dimension changed: {self.mean.shape} vs {other.mean.shape}")
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.std ** 2 * self.count + other.std ** 2 * other.count + delta ** 2 * (self.count * other.count / n)
        return StatsBlock(n, mean, np.sqrt(np.maximum(m2 / n, 0.0)),
                          np.minimum(self.min, other.min), np.maximum(self.max, other.max))


def stats_columns(info: Mapping[str, Any], schema_names: Iterable[str]) -> list[str]:
    """Columns of one episode that enter stats.json (DESIGN §4)."""
    names = set(schema_names)
    cols = [f"observation.{s}" for s in info.get("sensors") or [] if f"observation.{s}" in names]
    if "observation.imu" in names:
        cols.append("observation.imu")
    return cols


def read_stats(task_dir: TaskPathLike) -> dict[str, Any]:
    """Load ``stats.json`` ({} when missing). Raises FormatError on bad JSON or a non-regular file."""
    path = stats_path(task_dir)
    if not path.exists() and not path.is_symlink():
        return {}
    obj = read_json(path, what="stats.json", hint="run `egopool stats recalc TASK` to rebuild it from data/")
    if not isinstance(obj, dict):
        raise FormatError("stats.json is not a JSON object", path=path,
                          hint="run `egopool stats recalc TASK` to rebuild it from data/")
    return obj


def merge_stats(stored: Mapping[str, Any], episode: Mapping[str, StatsBlock]) -> dict[str, Any]:
    """Merge one episode's blocks into the stored accumulator; returns the new document.

    Raises
    ------
    KeyError
        A stored block that the episode touches has no ``count`` (legacy; recalc first).
    """
    out = {k: v for k, v in stored.items()}
    for col, block in episode.items():
        if col in out:
            block = StatsBlock.from_dict(out[col]).merge(block)
        out[col] = block.to_dict()
    out["action"] = dict(ACTION_BLOCK)
    return out


def _merge_maps(a: Mapping[str, StatsBlock], b: Mapping[str, StatsBlock]) -> dict[str, StatsBlock]:
    out = dict(a)
    for col, block in b.items():
        out[col] = out[col].merge(block) if col in out else block
    return out


def tree_merge(parts: Iterable[Mapping[str, StatsBlock]]) -> dict[str, StatsBlock]:
    """Merge per-episode blocks pairwise, level by level (a balanced tree), in the given order.

    The accumulator is associative (Chan's merge), so any tree gives the same statistics up
    to float64 rounding; a fixed tree over episodes in ascending N makes the result
    bit-identical whether the blocks were computed in-process or on a Ray cluster, and its
    rounding error grows with ``log2(episodes)`` instead of ``episodes`` (a left fold).

    Parameters
    ----------
    parts:
        ``{column: StatsBlock}`` per episode, in ascending N.

    Returns
    -------
    dict
        ``{column: StatsBlock}`` of all of them ({} when empty).

    Raises
    ------
    ValueError
        A column has different dimensions in two episodes.
    """
    level = [dict(p) for p in parts]
    if not level:
        return {}
    while len(level) > 1:
        nxt = [_merge_maps(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def needs_recalc(stored: Mapping[str, Any]) -> bool:
    """True when any block lacks ``count`` (v1.1.0 legacy, §4 MUST: rescan data/ once)."""
    return any(isinstance(v, Mapping) and "count" not in v for k, v in stored.items() if k != "action")


def episode_stats(table: Any, info: Mapping[str, Any], path: TaskPath | None = None) -> dict[str, StatsBlock]:
    """Blocks of one episode's pyarrow table (rows for sensors, samples for IMU).

    Raises
    ------
    SchemaError
        A column that is not numeric rows of equal length (``list<float32>``, IMU
        ``list<list<float32, 6>>``); names the column and ``path``.
    """
    import pyarrow as pa

    from ..arrowutil import FLOAT_VECTOR, IMU, list_column_to_numpy

    blocks: dict[str, StatsBlock] = {}
    for col in stats_columns(info, table.column_names):
        arr = table.column(col)
        want = IMU if col == "observation.imu" else FLOAT_VECTOR
        if not want.matches(arr.type):
            raise SchemaError(f"is stored as {arr.type}, stats need {want.text}", column=col, path=path,
                              hint="run `egopool validate TASK`")
        try:
            flat = list_column_to_numpy(arr, depth=2 if col == "observation.imu" else 1)
        except (ValueError, TypeError, AttributeError, pa.ArrowException) as exc:
            raise SchemaError(f"rows cannot be summarised ({exc})", column=col, path=path,
                              hint="run `egopool validate TASK`") from exc
        block = StatsBlock.of(flat)
        if block is not None:
            blocks[col] = block
    return blocks


def episode_stats_file(path: TaskPathLike, info: Mapping[str, Any]) -> dict[str, StatsBlock]:
    """:func:`episode_stats` of a data parquet, read one row group at a time (bounded memory).

    Raises
    ------
    FormatError
        The parquet cannot be read.
    """

    pf = open_parquet(path, what="data parquet")
    try:
        cols = stats_columns(info, pf.schema_arrow.names)
        blocks: dict[str, StatsBlock] = {}
        for i in range(pf.num_row_groups if cols else 0):
            for col, block in episode_stats(pf.read_row_group(i, columns=cols), info, path=as_path(path)).items():
                blocks[col] = blocks[col].merge(block) if col in blocks else block
    except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
        raise FormatError(f"cannot read parquet: {exc}", path=path) from exc
    return blocks


def recalc_stats(task_dir: TaskPathLike, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Recompute the whole stats document from every data parquet (legacy blocks, §4)."""

    from ..layout import TaskLayout, list_task_episodes
    from .info import read_info

    info = dict(info) if info is not None else read_info(task_dir)
    layout = TaskLayout.from_info(task_dir, info)
    doc: dict[str, Any] = {}
    for g in list_task_episodes(task_dir, layout):
        if g.data is None:
            continue
        table = read_parquet(g.data, what="data parquet")
        doc = merge_stats(doc, episode_stats(table, info, path=g.data))
    doc["action"] = dict(ACTION_BLOCK)
    return doc


def write_stats(task_dir: str | os.PathLike[str], doc: Mapping[str, Any]) -> None:
    """Write ``stats.json`` atomically. Caller holds the task lock.

    Raises
    ------
    FormatError
        ``task_dir`` is an ``s3://`` location (a local task only, :func:`~egopool.storage.as_local_path`).
    """
    atomic_write_json(stats_path(as_local_path(task_dir, what="writing meta/stats.json")), dict(doc), indent=None)
