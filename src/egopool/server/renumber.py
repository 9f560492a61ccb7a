"""Giving an uploaded episode another N (docs/decisions.md U2): rewrite ``episode_index``, rename videos.

Only the ``episode_index`` column changes, in the data parquet (row group by row group,
never the whole episode in memory; every other column, the schema and its metadata kept)
and in the one-row ``meta/episodes`` file (every stored column kept; the server renumbers and stamps the
file digests of a row in one write, :func:`renumber_row`, U48). Videos are moved to
the new ``(chunk, file)`` name, never re-encoded; the row's ``video_codec`` stays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes
from .._safe_read import open_parquet, read_parquet
from ..errors import FormatError
from ..meta.episodes import restamp_table, row_bytes

__all__ = ["renumber_row", "rewrite_episode_index"]


def _replace_index(table: pa.Table, index: int) -> pa.Table:
    pos = table.schema.get_field_index("episode_index")
    field = table.schema.field(pos)
    return table.set_column(pos, field, pa.array(np.full(table.num_rows, index, dtype=np.int64), type=field.type))


def rewrite_episode_index(src: Path, dst: Path, index: int) -> None:
    """Copy parquet ``src`` to ``dst`` with every ``episode_index`` set to ``index``.

    Parameters
    ----------
    src, dst:
        Input and output files (``dst`` is created; the caller publishes it).
    index:
        The new global N (1-based).

    Raises
    ------
    FormatError
        ``src`` cannot be read or has no ``episode_index`` column.
    """
    try:
        pf = open_parquet(src, what="data parquet")
        schema = pf.schema_arrow
        if "episode_index" not in schema.names:
            raise FormatError("no episode_index column", path=src)
        # the writer's choice (decisions.md R8): force matrices are not dictionary-encoded
        use_dict = [n for n in schema.names if not n.endswith("_force_matrix")]
        with pq.ParquetWriter(str(dst), schema, compression="zstd", use_dictionary=use_dict) as w:
            for i in range(pf.num_row_groups):
                w.write_table(_replace_index(pf.read_row_group(i), index))
    except FormatError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise FormatError(f"cannot rewrite episode_index: {exc}", path=src) from exc


def renumber_row(path: Path, index: int, files: Mapping[str, str]) -> str:
    """Rewrite the one-row ``meta/episodes`` file ``path`` in place with ``episode_index`` = ``index`` and its
    ``file_digests`` set to ``files`` (task-relative path -> sha256 of the published objects, X3), in one atomic
    write (temp + fsync + rename: durable on return). The bytes are those of the row rewritten with its new N,
    then :func:`~egopool.meta.episodes.restamp_row_file`, which wrote the file twice and read it three times
    (docs/decisions.md U48).

    Returns
    -------
    str
        sha256 (hex) of the new file's bytes.

    Raises
    ------
    FormatError
        ``path`` cannot be read, has no ``episode_index`` column or does not hold exactly one row.
    """
    table = read_parquet(path, what="episodes parquet", hint="the file is corrupt; restore it from a backup")
    if "episode_index" not in table.column_names:
        raise FormatError("no episode_index column", path=path)
    try:
        new = restamp_table(_replace_index(table, index), files)
    except FormatError as exc:
        raise FormatError(exc.message, path=path) from exc
    data = row_bytes(new)
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()
