"""``meta/episodes``: one single-row parquet per episode (file_format.md §6, multi_device_storage.md §7).

Columns: the 11 of §6.2 plus ``slam_specs`` (【提案】 §7.2). JSON columns are
strings on disk and decoded dicts in memory. Rows of legacy multi-row
``file-NNN.parquet`` shards are found by their ``episode_index`` column (§6.1);
columns an older row lacks get their defaults (``force_matrix_specs`` / ``slam_specs``
-> ``"{}"``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes
from .._safe_read import loads_json, read_parquet
from ..errors import FormatError
from ..storage import TaskPath, TaskPathLike, as_path

__all__ = [
    "EPISODE_COLUMNS",
    "JSON_COLUMNS",
    "decode_row",
    "episode_row_table",
    "read_episode_row",
    "write_episode_row",
]

#: Column -> arrow type, in the order they are written (§6.2 + slam_specs §7.2).
EPISODE_COLUMNS: dict[str, pa.DataType] = {
    "episode_index": pa.int64(),
    "task_index": pa.int64(),
    "start_frame_index": pa.int64(),
    "end_frame_index": pa.int64(),
    "length": pa.int64(),
    "created_at": pa.float64(),
    "duration_sec": pa.float64(),
    "drop_stats": pa.string(),
    "video_codec": pa.string(),
    "calibration": pa.string(),
    "force_matrix_specs": pa.string(),
    "slam_specs": pa.string(),
}
JSON_COLUMNS = ("drop_stats", "video_codec", "calibration", "force_matrix_specs", "slam_specs")
_DEFAULTS: dict[str, Any] = {"task_index": 0, **{c: "{}" for c in JSON_COLUMNS}}


def episode_row_table(row: Mapping[str, Any]) -> pa.Table:
    """A one-row table with exactly :data:`EPISODE_COLUMNS`; dict values of JSON columns are dumped."""
    cols = {}
    for name, typ in EPISODE_COLUMNS.items():
        v = row.get(name, _DEFAULTS.get(name))
        if v is None:
            raise FormatError(f"episodes row lacks required column {name!r}")
        if name in JSON_COLUMNS and not isinstance(v, str):
            try:
                v = json.dumps(v, ensure_ascii=False, sort_keys=False, allow_nan=False)
            except ValueError as exc:
                raise FormatError(f"episodes column {name!r} holds NaN/Infinity, which is not JSON ({exc})") from exc
        cols[name] = pa.array([v], type=typ)
    return pa.table(cols)


def write_episode_row(path: str | Path, row: Mapping[str, Any]) -> None:
    """Write the single-row episodes parquet atomically (§6.1: temp + os.replace)."""
    buf = io.BytesIO()
    pq.write_table(episode_row_table(row), buf, compression="zstd")
    atomic_write_bytes(path, buf.getvalue())


def decode_row(raw: Mapping[str, Any], path: TaskPath | None = None) -> dict[str, Any]:
    """Fill defaults for columns an older row lacks and ``json.loads`` the JSON columns."""
    out = dict(raw)
    for name in EPISODE_COLUMNS:
        if name not in out or out[name] is None:
            out[name] = _DEFAULTS.get(name)
    for name in JSON_COLUMNS:
        v = out.get(name)
        if isinstance(v, str):
            out[name] = loads_json(v, path=path, what=f"episodes column {name!r}") if v.strip() else {}
    return out


def read_episode_row(path: TaskPathLike, index: int) -> dict[str, Any]:
    """Read N's row from a per-episode file or a legacy shard (filtered by ``episode_index``).

    Raises
    ------
    FormatError
        Unreadable parquet, or no row with ``episode_index == index`` in the file.
    """
    path = as_path(path)
    table = read_parquet(path, what="episodes parquet", hint="the file is corrupt; restore it from a backup")
    if "episode_index" not in table.column_names:
        raise FormatError("episodes parquet has no episode_index column", path=path)
    rows = [r for r in table.to_pylist() if r.get("episode_index") == index]
    if not rows:
        raise FormatError(f"no row with episode_index={index}", path=path)
    return decode_row(rows[0], path)
