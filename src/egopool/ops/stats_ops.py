"""``egopool stats recalc`` / ``egopool stats check``: rebuild or audit ``stats.json`` (file_format.md §4, DESIGN §4).

``stats.json`` is a count accumulator merged episode by episode; it is *not* rolled
back when an episode is deleted (§4 "删除 episode 不回退 stats"). ``recalc`` rebuilds it
from what is in ``data/`` now (the v1.1.0 legacy path: blocks without ``count``);
``check`` recomputes the same document and lists, block by block, where the stored
accumulator differs from it — after deletes it is expected to differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import task_lock, task_read_lock
from .._safe_read import read_parquet, read_parquet_schema
from ..errors import EgopoolError, FormatError
from ..storage import ObjectPath, TaskPath, as_path
from ..jobs.executor import Executor, LocalExecutor
from ..layout import EpisodeFiles, TaskLayout, list_task_episodes
from ..meta.info import read_info
from ..meta.stats import (ACTION_BLOCK, StatsBlock, episode_stats, read_stats, stats_columns, stats_path, tree_merge,
                          write_stats)
from ._common import Progress, backup_copy, new_backup_dir, rel

__all__ = ["BlockDiff", "EpisodeBlocks", "StatsCheckReport", "StatsRecalcReport", "check_stats", "compare_stats",
           "compute_stats", "episode_blocks", "recalc_task_stats"]

_FIELDS = ("mean", "std", "min", "max")


@dataclass(frozen=True)
class BlockDiff:
    """How one stats block differs.

    Attributes
    ----------
    column:
        Block name (``observation.imu``...).
    field:
        ``"block"`` (missing on one side), ``"count"`` (absent = legacy block), or one of
        ``mean``/``std``/``min``/``max``.
    stored, fresh:
        The stored and recomputed value (count, or the max-deviation element), None when absent.
    detail:
        One line for people.
    """

    column: str
    field: str
    stored: Any
    fresh: Any
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"column": self.column, "field": self.field, "stored": self.stored, "fresh": self.fresh,
                "detail": self.detail}


#: What identifies the bytes a unit read: (data path, inode, size, mtime ns) of the data parquet
#: and the path of the commit row. An atomic replace gives a new inode.
Signature = tuple[str, int, int, int, str]


@dataclass(frozen=True)
class _StatsInput:
    """What every per-episode unit of a stats job shares (sent once to a Ray cluster)."""

    info: dict[str, Any]


@dataclass(frozen=True)
class EpisodeBlocks:
    """One unit's result: the data file's identity, its stats blocks, or why it could not be read.

    Attributes
    ----------
    signature:
        (data path, inode, size, mtime ns, row path), taken *before* reading (None when the
        file could not be stat-ed), so a file replaced meanwhile is seen as changed.
    blocks:
        ``{column: StatsBlock}`` ({} when unreadable).
    error:
        ``(message, path)`` of an unreadable data parquet, else None (plain strings: they
        cross process boundaries unchanged).
    """

    signature: Signature | None
    blocks: dict[str, StatsBlock]
    error: tuple[str, str] | None = None


def _signature(g: EpisodeFiles) -> Signature | None:
    assert g.data is not None and g.meta is not None
    try:
        if isinstance(g.data, ObjectPath):  # a HEAD: an object has no inode, its size and mtime say it changed
            ost = g.data.stat()
            return (str(g.data), 0, ost.st_size, int(ost.st_mtime * 1e9), str(g.meta))
        st = os.stat(g.data)
    except OSError:
        return None
    return (str(g.data), st.st_ino, st.st_size, st.st_mtime_ns, str(g.meta))


def episode_blocks(shared: _StatsInput, g: EpisodeFiles) -> EpisodeBlocks:
    """One unit of a stats job: the stats blocks of one committed episode's data parquet.

    Only the stats columns are read (DESIGN §4). Runs in-process or as a Ray task and never
    raises for an unreadable file: the error is returned and the caller names every such
    episode.
    """
    assert g.data is not None
    sig = _signature(g)
    hint = f"restore the file or delete episode {g.index}"
    try:
        cols = stats_columns(shared.info, read_parquet_schema(g.data, what="data parquet", hint=hint).names)
        table = read_parquet(g.data, cols, what="data parquet", hint=hint)
        blocks = episode_stats(table, shared.info, path=g.data)
    except EgopoolError as exc:  # unreadable, or a stats column of another type (SchemaError)
        return EpisodeBlocks(sig, {}, (exc.message, str(exc.path or g.data)))
    return EpisodeBlocks(sig, blocks)


def _committed(root: TaskPath, info: dict[str, Any]) -> list[EpisodeFiles]:
    # committed episodes only (data parquet + meta/episodes row, decisions.md #5): an episode whose
    # data is published but whose row is not yet written merges its own blocks when it commits.
    # Absolute paths: a Ray worker does not share the caller's working directory.
    root = root if isinstance(root, ObjectPath) else Path(os.path.abspath(root))
    return [g for g in list_task_episodes(root, TaskLayout.from_info(root, info))
            if g.data is not None and g.meta is not None]


def _blocks_of(root: TaskPath, info: dict[str, Any], executor: Executor[Any, Any, Any] | None,
               progress: Progress | None) -> dict[int, EpisodeBlocks]:
    groups = _committed(root, info)
    cb = None if progress is None else (lambda done, total: progress(done, total, "episodes"))
    results = (executor or LocalExecutor()).map(episode_blocks, _StatsInput(info), groups, progress=cb)
    return {g.index: r for g, r in zip(groups, results, strict=True)}


def _document(per_episode: dict[int, EpisodeBlocks]) -> tuple[dict[str, Any], int, list[tuple[int, FormatError]]]:
    """(doc, episodes read, [(N, error)] of those that could not be): the tree merge in ascending N."""
    readable = [n for n in sorted(per_episode) if per_episode[n].error is None]
    merged = tree_merge(per_episode[n].blocks for n in readable)
    doc: dict[str, Any] = {col: block.to_dict() for col, block in merged.items()}
    doc["action"] = dict(ACTION_BLOCK)
    unreadable = []
    for n in sorted(per_episode):
        err = per_episode[n].error
        if err is not None:
            unreadable.append((n, FormatError(err[0], path=err[1], hint=f"restore the file or delete episode {n}")))
    return doc, len(readable), unreadable


def _raise_unreadable(unreadable: list[tuple[int, FormatError]]) -> None:
    if unreadable:
        exc = unreadable[0][1]
        raise FormatError(f"cannot read the data of episode(s) {', '.join(str(i) for i, _ in unreadable)}: "
                          f"{exc.message}", path=exc.path,
                          hint="restore the file(s) or delete the episode(s) before recomputing stats")


def compute_stats(task_dir: str | Path, info: dict[str, Any] | None = None,
                  progress: Progress | None = None, *,
                  executor: Executor[Any, Any, Any] | None = None) -> tuple[dict[str, Any], int]:
    """Recompute the stats document from every committed episode's data parquet (only the stats columns are read).

    An episode counts when it has both its data parquet and its ``meta/episodes`` row
    (the commit record, decisions.md #5); one still being published merges its own
    blocks when it commits, so counting its data here would count it twice. The
    per-episode blocks are merged as a balanced tree in ascending N
    (:func:`~egopool.meta.stats.tree_merge`): the same bits in-process and on Ray.

    Parameters
    ----------
    executor:
        Where the per-episode units run (:mod:`egopool.jobs`); in-process by default.

    Returns
    -------
    (doc, episodes):
        The ``stats.json`` document (blocks ``{count, mean, std, min, max}`` plus the
        ``action`` placeholder) and how many data files went into it.

    Raises
    ------
    FormatError
        ``info.json`` cannot be read, or data parquets cannot (every such episode is named).
    """
    root = as_path(task_dir)
    info = info if info is not None else read_info(root)
    doc, n, unreadable = _document(_blocks_of(root, info, executor, progress))
    _raise_unreadable(unreadable)
    return doc, n


def compare_stats(stored: dict[str, Any], fresh: dict[str, Any], *, rtol: float = 1e-7,
                  atol: float = 1e-9) -> list[BlockDiff]:
    """Block-by-block differences between two stats documents (``count`` exact, floats within tolerance).

    Parameters
    ----------
    stored, fresh:
        ``stats.json`` documents.
    rtol, atol:
        ``np.isclose`` tolerances for mean/std/min/max (merge order changes the last bits).
    """
    out: list[BlockDiff] = []
    for col in sorted(set(stored) | set(fresh)):
        s, f = stored.get(col), fresh.get(col)
        if not isinstance(s, dict):
            out.append(BlockDiff(col, "block", None, f.get("count") if isinstance(f, dict) else None,
                                 "in data/ but missing from stats.json"))
            continue
        if not isinstance(f, dict):
            if _holds_no_samples(s):  # §4 placeholder form: nothing to recompute, nothing differs
                continue
            out.append(BlockDiff(col, "block", s.get("count"), None, "in stats.json but no data/ column feeds it"))
            continue
        if col != "action" and _holds_no_samples(s) and _holds_no_samples(f):
            continue
        count = s.get("count")
        if "count" not in s:
            out.append(BlockDiff(col, "count", None, f.get("count"),
                                 "legacy block without count (v1.1.0): run `egopool stats recalc TASK`"))
        elif isinstance(count, bool) or not isinstance(count, int):
            out.append(BlockDiff(col, "count", repr(count), int(f["count"]),
                                 f"count {count!r} stored is not an integer: run `egopool stats recalc TASK`"))
        elif count != int(f["count"]):
            out.append(BlockDiff(col, "count", count, int(f["count"]),
                                 f"count {count} stored, {f['count']} in data/"))
        for name in _FIELDS:
            a = _numbers(s.get(name, []))
            b = np.asarray(f.get(name, []), dtype=np.float64).reshape(-1)
            if a is None:
                out.append(BlockDiff(col, name, repr(s.get(name)), len(b),
                                     f"{name} stored is not a list of numbers: run `egopool stats recalc TASK`"))
                continue
            if a.shape != b.shape:
                out.append(BlockDiff(col, name, len(a), len(b), f"{name} has {len(a)} values stored, {len(b)} in data/"))
                continue
            bad = ~np.isclose(a, b, rtol=rtol, atol=atol)
            if bad.any():
                k = int(np.argmax(np.where(bad, np.abs(a - b), -1.0)))
                out.append(BlockDiff(col, name, float(a[k]), float(b[k]),
                                     f"{name} differs in {int(bad.sum())} of {len(a)} dims "
                                     f"(dim {k}: {a[k]:.6g} stored, {b[k]:.6g} in data/)"))
    return out


def _holds_no_samples(block: dict[str, Any]) -> bool:
    """A block whose ``count`` is 0: §4's placeholder form (its values describe no data)."""
    count = block.get("count")
    return isinstance(count, int) and not isinstance(count, bool) and count == 0


def _numbers(value: Any) -> np.ndarray | None:
    """A stored mean/std/min/max as a flat float64 array.

    None unless it is a number or a regular (possibly nested) list of numbers.
    """
    def ok(v: Any) -> bool:
        if isinstance(v, list):
            return all(ok(x) for x in v)
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not ok(value):
        return None
    try:
        return np.asarray(value, dtype=np.float64).reshape(-1)
    except ValueError:  # ragged nesting
        return None


@dataclass
class StatsCheckReport:
    """Result of :func:`check_stats`: ``ok`` when stored and recomputed agree block by block.

    ``skipped`` lists the episodes whose data parquet could not be read, as
    ``{"episode_index", "reason": "unreadable", "error"}``: the recomputation lacks them
    (so counts differ by their rows) and the report is not ok.
    """

    task_dir: TaskPath
    episodes: int
    blocks: list[str]
    differences: list[BlockDiff] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no block differs and every episode was read."""
        return not self.differences and not self.skipped

    @property
    def differing_blocks(self) -> list[str]:
        """Names of the blocks that differ, sorted."""
        return sorted({d.column for d in self.differences})

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool stats check --json``)."""
        return {"task": str(self.task_dir), "ok": self.ok, "episodes": self.episodes, "blocks": self.blocks,
                "differing_blocks": self.differing_blocks, "differences": [d.to_dict() for d in self.differences],
                "skipped": self.skipped}


def check_stats(task_dir: str | Path, *, progress: Progress | None = None,
                executor: Executor[Any, Any, Any] | None = None) -> StatsCheckReport:
    """Compare ``stats.json`` with a fresh recomputation from ``data/`` (read-only).

    An episode whose data parquet cannot be read is listed in ``skipped`` with its error
    and the others are still compared (the report is then not ok). ``executor`` runs the
    per-episode units (in-process by default, :mod:`egopool.jobs`).

    Raises
    ------
    FormatError
        ``info.json`` or ``stats.json`` cannot be read.
    """
    root = as_path(task_dir)
    stored = read_stats(root)
    fresh, n, unreadable = _document(_blocks_of(root, read_info(root), executor, progress))
    skipped = [{"episode_index": i, "reason": "unreadable", "error": exc.one_line()} for i, exc in unreadable]
    return StatsCheckReport(root, n, sorted(set(stored) | set(fresh)), compare_stats(stored, fresh), skipped)


@dataclass
class StatsRecalcReport:
    """Result of :func:`recalc_task_stats`.

    Attributes
    ----------
    changes:
        How the new document differs from the old one (empty: nothing to do, file untouched).
    backup:
        Copy of the previous ``stats.json`` (None on a dry run or when nothing changed).
    """

    task_dir: Path
    dry_run: bool
    episodes: int
    changes: list[BlockDiff]
    backup: Path | None = None
    written: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool stats recalc --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "episodes": self.episodes,
                "written": self.written, "backup": rel(self.task_dir, self.backup) if self.backup else None,
                "changed_blocks": sorted({d.column for d in self.changes}),
                "changes": [d.to_dict() for d in self.changes]}


def recalc_task_stats(task_dir: str | Path, *, dry_run: bool = False, progress: Progress | None = None,
                      executor: Executor[Any, Any, Any] | None = None) -> StatsRecalcReport:
    """Rebuild ``stats.json`` from every data parquet (file_format.md §4 legacy path).

    The per-episode blocks are computed first, without the lock (in-process or one Ray
    task per episode, ``executor``); then, under the task lock, the committed episodes are
    listed again: an episode committed meanwhile, or whose data file changed (another
    inode, size or mtime), is computed again there, one deleted meanwhile is dropped,
    and the blocks are tree-merged in ascending N (docs/decisions.md K5). So a long job
    never blocks a recorder, and no episode finishing meanwhile is lost or counted twice.
    The previous file is copied to ``.egopool_backup/stats-recalc-<time>/meta/stats.json``
    first; the new one is written atomically. Nothing is written when nothing differs.

    Raises
    ------
    FormatError
        ``info.json`` cannot be read, or data parquets cannot (every such episode is named;
        nothing is written).
    EgopoolError
        From the executor: the Ray cluster failed (see :class:`~egopool.jobs.RayExecutor`).
    """
    root = Path(task_dir)
    info = read_info(root)
    per_episode = _blocks_of(root, info, executor, progress)
    with task_read_lock(root) if dry_run else task_lock(root):  # a dry run writes nothing (decisions.md #24)
        info_now = read_info(root)
        if info_now.get("sensors") != info.get("sensors"):  # other stats columns: every episode again
            per_episode = {}
        per_episode = _reconcile(root, info_now, per_episode)
        fresh, n, unreadable = _document(per_episode)
        _raise_unreadable(unreadable)
        exists = stats_path(root).is_file()
        try:
            stored, readable = read_stats(root), True
        except FormatError:  # unparsable stats.json: exactly what recalc is for
            stored, readable = {}, False
        changes = compare_stats(stored, fresh, rtol=0.0, atol=0.0)
        if not readable:
            changes.insert(0, BlockDiff("*", "block", None, None, "stats.json is not valid JSON"))
        report = StatsRecalcReport(root, dry_run, n, changes)
        if dry_run or (not changes and exists):
            return report
        if exists:
            report.backup = backup_copy(root, stats_path(root), new_backup_dir(root, "stats-recalc"))
        write_stats(root, fresh)
        report.written = True
    return report


def _reconcile(root: TaskPath, info: dict[str, Any], per_episode: dict[int, EpisodeBlocks]) -> dict[int, EpisodeBlocks]:
    """Under the lock: the blocks of exactly the episodes committed now, recomputing what changed."""
    shared = _StatsInput(info)
    out = {}
    for g in _committed(root, info):
        have = per_episode.get(g.index)
        sig = _signature(g)
        ok = have is not None and sig is not None and have.signature == sig
        out[g.index] = have if ok and have is not None else episode_blocks(shared, g)
    return out
