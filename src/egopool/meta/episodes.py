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
from .digests import DIGEST_COLUMN, parse_digests, row_digest, stamp

__all__ = [
    "EPISODE_COLUMNS",
    "JSON_COLUMNS",
    "decode_row",
    "episode_row_table",
    "raw_episode_row",
    "recorded_as",
    "read_episode_row",
    "keep_digests",
    "restamp_row_file",
    "restamp_table",
    "row_bytes",
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
    """A one-row table with exactly :data:`EPISODE_COLUMNS`; dict values of JSON columns are dumped.

    When ``row`` holds file digests (``file_digests``: the column's string or dict, or a plain
    ``{path: sha256}`` mapping), they are written as a last column with the row's own content digest
    recomputed (:mod:`egopool.meta.digests`, docs/decisions.md X3).

    Raises
    ------
    FormatError
        A required column is missing, a JSON column holds NaN, or ``file_digests`` is malformed.
    """
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
    files = _digest_files(row.get(DIGEST_COLUMN))
    if files is not None:
        cols[DIGEST_COLUMN] = pa.array([stamp({k: a[0].as_py() for k, a in cols.items()}, files)], type=pa.string())
    return pa.table(cols)


def _digest_files(value: Any) -> dict[str, str] | None:
    if isinstance(value, Mapping) and value and "files" not in value:
        return {str(k): str(v) for k, v in value.items()}
    try:
        got = parse_digests(value)
    except ValueError as exc:
        raise FormatError(f"episodes column {DIGEST_COLUMN!r}: {exc}") from exc
    return got.files if got is not None else None


def write_episode_row(path: str | Path, row: Mapping[str, Any]) -> None:
    """Write the single-row episodes parquet atomically (§6.1: temp + os.replace)."""
    atomic_write_bytes(path, row_bytes(episode_row_table(row)))


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


def restamp_table(table: pa.Table, files: Mapping[str, str], previous: Mapping[str, str] | None = None) -> pa.Table:
    """A single-row episodes table with its ``file_digests`` column set to ``files`` (task-relative path ->
    sha256) and the row's content digest recomputed; every other column kept as stored (docs/decisions.md X3).

    Raises
    ------
    FormatError
        The table does not hold exactly one row.
    """
    if table.num_rows != 1:
        raise FormatError(f"an episode's row file holds {table.num_rows} rows, not 1")
    raw = {k: v for k, v in table.to_pylist()[0].items() if k != DIGEST_COLUMN}
    value = pa.array([stamp(raw, files, previous)], type=pa.string())
    if DIGEST_COLUMN in table.column_names:
        return table.set_column(table.column_names.index(DIGEST_COLUMN), DIGEST_COLUMN, value)
    return table.append_column(DIGEST_COLUMN, value)


def row_bytes(table: pa.Table) -> bytes:
    """The parquet bytes of a row table as the writers store it (zstd, page checksums)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_page_checksum=True)
    return buf.getvalue()


def restamp_row_file(path: Path, files: Mapping[str, str], previous: Mapping[str, str] | None = None) -> None:
    """Rewrite a local single-row episodes file by :func:`restamp_table` (atomically, §6.1).

    Raises
    ------
    FormatError
        The file is not a readable single-row episodes parquet.
    """
    table = read_parquet(path, what="episodes parquet", hint="the file is corrupt; restore it from a backup")
    try:
        new = restamp_table(table, files, previous)
    except FormatError as exc:
        raise FormatError(exc.message, path=path) from exc
    atomic_write_bytes(path, row_bytes(new))


def raw_episode_row(path: TaskPathLike, index: int) -> dict[str, Any]:
    """N's row as stored (JSON columns as strings, no defaults filled): what :func:`~egopool.meta.digests.row_digest`
    hashes.

    Raises
    ------
    FormatError
        Unreadable parquet, or no row with ``episode_index == index``.
    """
    path = as_path(path)
    table = read_parquet(path, what="episodes parquet", hint="the file is corrupt; restore it from a backup")
    rows = [r for r in table.to_pylist() if r.get("episode_index") == index]
    if not rows:
        raise FormatError(f"no row with episode_index={index}", path=path)
    return rows[0]


def recorded_as(path: TaskPathLike, index: int, files: Mapping[str, str]) -> bool:
    """True when N's row records exactly ``files`` and its content digest holds (nothing to re-stamp).

    Raises
    ------
    FormatError
        The row cannot be read.
    """
    raw = raw_episode_row(path, index)
    try:
        rec = parse_digests(raw.get(DIGEST_COLUMN))
    except ValueError:
        return False
    return rec is not None and rec.files == dict(files) and rec.row == row_digest(raw)


def keep_digests(table: pa.Table) -> pa.Table:
    """A row table whose other columns were just changed, with its recorded files kept and its content digest
    recomputed (docs/decisions.md X3); a table without digests (or with damaged ones) is returned as is."""
    if DIGEST_COLUMN not in table.column_names or table.num_rows != 1:
        return table
    try:
        rec = parse_digests(table.column(DIGEST_COLUMN)[0].as_py())
    except ValueError:
        return table
    return restamp_table(table, rec.files, rec.previous) if rec is not None else table
