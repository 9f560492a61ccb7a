"""Giving an uploaded episode another N (docs/decisions.md U2): rewrite ``episode_index``, rename videos.

Only the ``episode_index`` column changes, in the data parquet (row group by row group,
never the whole episode in memory; every other column, the schema and its metadata kept)
and in the one-row ``meta/episodes`` file (every stored column kept). Videos are moved to
the new ``(chunk, file)`` name, never re-encoded; the row's ``video_codec`` stays.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pathlib import Path

from .._safe_read import open_parquet
from ..errors import FormatError

__all__ = ["rewrite_episode_index"]


def _replace_index(table: pa.Table, index: int) -> pa.Table:
    pos = table.schema.get_field_index("episode_index")
    field = table.schema.field(pos)
    return table.set_column(pos, field, pa.array(np.full(table.num_rows, index, dtype=np.int64), type=field.type))


def rewrite_episode_index(src: Path, dst: Path, index: int, *, single_row: bool = False) -> None:
    """Copy parquet ``src`` to ``dst`` with every ``episode_index`` set to ``index``.

    Parameters
    ----------
    src, dst:
        Input and output files (``dst`` is created; the caller publishes it).
    index:
        The new global N (1-based).
    single_row:
        ``src`` is a ``meta/episodes`` row file (read whole: one row).

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
        if single_row:
            pq.write_table(_replace_index(pf.read(), index), str(dst), compression="zstd")
            return
        # the writer's choice (decisions.md R8): force matrices are not dictionary-encoded
        use_dict = [n for n in schema.names if not n.endswith("_force_matrix")]
        with pq.ParquetWriter(str(dst), schema, compression="zstd", use_dictionary=use_dict) as w:
            for i in range(pf.num_row_groups):
                w.write_table(_replace_index(pf.read_row_group(i), index))
    except FormatError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise FormatError(f"cannot rewrite episode_index: {exc}", path=src) from exc
