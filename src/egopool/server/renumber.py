"""Giving an uploaded episode another N (docs/decisions.md U2): rewrite ``episode_index``, rename videos.

Only the ``episode_index`` column changes, in the data parquet (row group by row group,
never the whole episode in memory; every other column, the schema and its metadata kept)
and in the one-row ``meta/episodes`` file (every stored column kept). Videos are moved to
the new ``(chunk, file)`` name, never re-encoded; the row's ``video_codec`` stays.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pathlib import Path

from .._safe_read import open_parquet
from ..errors import FormatError

__all__ = ["RenumberAhead", "rewrite_episode_index"]


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


@dataclass
class _Prepared:
    task: str
    index: int
    files: list[tuple[Path, Path]]  # (staged file, its rewrite with ``index``)


class RenumberAhead:
    """Renumbering before the task guard (docs/decisions.md U17): a guessed server N, rewritten outside it.

    An upload whose client N the task already holds gets another server N (U2), and its data parquet
    and ``meta/episodes`` row are rewritten with it (:func:`rewrite_episode_index`). The N is decided
    under the task's import guard; rewriting there made every publish into the task wait for it. Here
    the request thread guesses the N before taking the guard (:meth:`predict`: one above the highest N
    the server holds or another in-flight guess holds, so concurrent guesses differ), rewrites the
    staged copies with it (:meth:`prepare`), and the guesses of one task take the guard in their order
    (:meth:`wait_turn`), so the N the importer allocates under the guard, by U2's rule unchanged, is
    usually the guess; then the prepared files are swapped in (:meth:`take`). A wrong guess (another
    upload kept its own N meanwhile, a lower guess was refused) is only wasted work: the files are
    rewritten under the guard as before. Nothing here touches the store; the prepared files live in
    the upload's own staging directory. Thread-safe (one instance per importer, shared by the request
    threads).
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._held: dict[str, set[int]] = {}
        self._prepared: dict[Path, _Prepared] = {}

    def predict(self, task: str, floor: int, taken: Callable[[int], bool]) -> int:
        """A server N > ``floor`` (the highest N the task is known to hold) that no other guess of ``task``
        holds and ``taken`` does not refuse; held until :meth:`release`."""
        with self._lock:
            held = self._held.setdefault(task, set())
            k = max(floor, max(held, default=0)) + 1
            while k in held or taken(k):
                k += 1
            held.add(k)
            return k

    def prepare(self, staging: Path, task: str, index: int, files: list[Path]) -> None:
        """Rewrite each staged parquet of ``files`` (the data file, then the one-row ``meta/episodes`` file)
        with ``index`` beside it; a failure leaves nothing prepared (the guarded path rewrites and reports)."""
        done: list[tuple[Path, Path]] = []
        try:
            for src in files:
                dst = src.with_name(f"ahead-{index}-{src.name}")
                rewrite_episode_index(src, dst, index, single_row=src.parent.parent.name == "episodes")
                done.append((src, dst))
        except Exception:  # noqa: BLE001 - the same rewrite runs again under the guard and raises there
            for _, dst in done:
                with contextlib.suppress(FileNotFoundError):
                    dst.unlink()
            self.release(staging, task, index)
            return
        with self._lock:
            self._prepared[staging] = _Prepared(task, index, done)

    def wait_turn(self, staging: Path, timeout: float = 60.0) -> None:
        """Block until no lower guess of the same task is held (each holder releases it at the end of its
        publish, refused or not); at most ``timeout`` s (then go on: the guard decides either way)."""
        with self._lock:
            prep = self._prepared.get(staging)
            if prep is not None:
                self._lock.wait_for(lambda: min(self._held.get(prep.task) or {prep.index}) >= prep.index, timeout)

    def take(self, staging: Path, index: int) -> bool:
        """Put the prepared rewrites in place of the staged files when they carry ``index``; False: none do
        (the caller rewrites)."""
        with self._lock:
            prep = self._prepared.get(staging)
        if prep is None or prep.index != index:
            return False
        for src, dst in prep.files:
            src.unlink()
            dst.rename(src)
        return True

    def release(self, staging: Path, task: str | None = None, index: int | None = None) -> None:
        """Forget the upload staged in ``staging`` (its guess is free again); ``task``/``index``: a guess
        made for it without prepared files."""
        with self._lock:
            prep = self._prepared.pop(staging, None)
            if prep is not None:
                self._held.get(prep.task, set()).discard(prep.index)
            if task is not None and index is not None:
                self._held.get(task, set()).discard(index)
            self._lock.notify_all()
