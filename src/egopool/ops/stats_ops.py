"""``egopool stats recalc`` / ``egopool stats check``: rebuild or audit ``stats.json`` (file_format.md §4, DESIGN §4).

``stats.json`` is a count accumulator merged episode by episode; it is *not* rolled
back when an episode is deleted (§4 "删除 episode 不回退 stats"). ``recalc`` rebuilds it
from what is in ``data/`` now (the v1.1.0 legacy path: blocks without ``count``);
``check`` recomputes the same document and lists, block by block, where the stored
accumulator differs from it — after deletes it is expected to differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import task_lock
from .._safe_read import read_parquet, read_parquet_schema
from ..errors import EgopoolError, FormatError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import read_info
from ..meta.stats import ACTION_BLOCK, episode_stats, merge_stats, read_stats, stats_columns, stats_path, write_stats
from ._common import Progress, backup_copy, new_backup_dir, rel

__all__ = ["BlockDiff", "StatsCheckReport", "StatsRecalcReport", "check_stats", "compare_stats", "compute_stats",
           "recalc_task_stats"]

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


def compute_stats(task_dir: str | Path, info: dict[str, Any] | None = None,
                  progress: Progress | None = None) -> tuple[dict[str, Any], int]:
    """Recompute the stats document from every committed episode's data parquet (only the stats columns are read).

    An episode counts when it has both its data parquet and its ``meta/episodes`` row
    (the commit record, decisions.md #5); one still being published merges its own
    blocks when it commits, so counting its data here would count it twice.

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
    doc, n, unreadable = _recompute(Path(task_dir), info, progress)
    if unreadable:
        exc = unreadable[0][1]
        raise FormatError(f"cannot read the data of episode(s) {', '.join(str(i) for i, _ in unreadable)}: "
                          f"{exc.message}", path=exc.path,
                          hint="restore the file(s) or delete the episode(s) before recomputing stats")
    return doc, n


def _recompute(root: Path, info: dict[str, Any] | None,
               progress: Progress | None) -> tuple[dict[str, Any], int, list[tuple[int, FormatError]]]:
    """:func:`compute_stats` over the episodes that read, plus ``(N, error)`` of those that do not."""
    info = info if info is not None else read_info(root)
    # committed episodes only (data parquet + meta/episodes row, decisions.md #5): an episode whose
    # data is published but whose row is not yet written merges its own blocks when it commits
    groups = [g for g in list_task_episodes(root, TaskLayout.from_info(root, info))
              if g.data is not None and g.meta is not None]
    doc: dict[str, Any] = {}
    unreadable: list[tuple[int, FormatError]] = []
    for i, g in enumerate(groups):
        assert g.data is not None
        hint = f"restore the file or delete episode {g.index}"
        try:
            cols = stats_columns(info, read_parquet_schema(g.data, what="data parquet", hint=hint).names)
            table = read_parquet(g.data, cols, what="data parquet", hint=hint)
            blocks = episode_stats(table, info, path=g.data)
        except EgopoolError as exc:  # unreadable, or a stats column of another type (SchemaError)
            err = exc if isinstance(exc, FormatError) else FormatError(exc.message, path=exc.path or g.data, hint=hint)
            unreadable.append((g.index, err))
        else:
            doc = merge_stats(doc, blocks)
        if progress is not None:
            progress(i + 1, len(groups), f"episode {g.index}")
    doc["action"] = dict(ACTION_BLOCK)
    return doc, len(groups) - len(unreadable), unreadable


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

    task_dir: Path
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


def check_stats(task_dir: str | Path, *, progress: Progress | None = None) -> StatsCheckReport:
    """Compare ``stats.json`` with a fresh recomputation from ``data/`` (read-only).

    An episode whose data parquet cannot be read is listed in ``skipped`` with its error
    and the others are still compared (the report is then not ok).

    Raises
    ------
    FormatError
        ``info.json`` or ``stats.json`` cannot be read.
    """
    root = Path(task_dir)
    stored = read_stats(root)
    fresh, n, unreadable = _recompute(root, None, progress)
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


def recalc_task_stats(task_dir: str | Path, *, dry_run: bool = False,
                      progress: Progress | None = None) -> StatsRecalcReport:
    """Rebuild ``stats.json`` from every data parquet (file_format.md §4 legacy path).

    Runs under the task lock, so no episode finishing meanwhile is lost. The previous
    file is copied to ``.egopool_backup/stats-recalc-<time>/meta/stats.json`` first;
    the new one is written atomically. Nothing is written when nothing differs.

    Raises
    ------
    FormatError
        ``info.json`` or a data parquet cannot be read.
    """
    root = Path(task_dir)
    info = read_info(root)
    with task_lock(root):
        exists = stats_path(root).is_file()
        try:
            stored, readable = read_stats(root), True
        except FormatError:  # unparsable stats.json: exactly what recalc is for
            stored, readable = {}, False
        fresh, n = compute_stats(root, info, progress=progress)
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
