"""``egopool repair checksums TASK``: record the sha256 of every file of the episodes whose row has none
(docs/decisions.md X6), on a directory or a bucket.

Only the rows without ``file_digests`` are touched (a row that records digests is never rewritten here: a
mismatch is damage for ``validate`` to report, not a digest to refresh). Each file is hashed as it is now, so run
``egopool validate TASK`` first: the digests vouch for the bytes they were taken from. The episode's
``meta/episodes`` file is rewritten with its other columns kept as stored (:func:`~egopool.meta.episodes.
restamp_table`); data and videos are never touched. The old row goes to ``.egopool_backup/repair-checksums-<time>/``
first.

A directory task is rewritten under the task lock (temp file, fsync, rename: a run killed anywhere leaves the old
or the new row). A bucket task's rows are rewritten under N's claim (:mod:`egopool.ops.task_store`), old row
PUT to the backup prefix first, then the new row PUT with ``PutMode.UPDATE`` on the version read (a row changed
meanwhile is skipped), the claim released last: as ``repair force-scale``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._parquet_memory import read_parquet_bytes
from .._safe_read import read_parquet
from ..errors import EgopoolError
from ..layout import EpisodeFiles, list_task_episodes
from ..meta.digests import DIGEST_COLUMN, episode_digests, parse_digests
from ..meta.episodes import restamp_table, row_bytes
from ..registry import Registry
from ..storage import ObjectPath, TaskPath
from ._common import Progress
from .row_rewrite import open_row_task, rewrite_local_row, rewrite_row_under_claim
from .task_store import BucketTask

__all__ = ["ChecksumsReport", "EpisodeChecksums", "repair_checksums"]

OP = "repair-checksums"


@dataclass
class EpisodeChecksums:
    """One episode: ``status`` ``recorded`` / ``would record`` / ``skipped`` (``reason``); ``files`` hashed."""

    index: int
    status: str
    files: dict[str, str] = field(default_factory=dict)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"episode_index": self.index, "status": self.status, "files": dict(self.files),
                "reason": self.reason}


@dataclass
class ChecksumsReport:
    """The run: the task, whether it was a dry run, episodes already holding digests, the others."""

    task: TaskPath
    dry_run: bool
    already: int = 0
    episodes: list[EpisodeChecksums] = field(default_factory=list)
    backup: TaskPath | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"task": str(self.task), "dry_run": self.dry_run, "already_recorded": self.already,
                "episodes": [e.to_dict() for e in self.episodes],
                "backup": str(self.backup) if self.backup is not None else None}


def _row_table(g: EpisodeFiles[TaskPath]) -> Any:
    assert g.meta is not None
    return read_parquet(g.meta, what="episodes parquet", hint="the file is corrupt; restore it from a backup")


def _inspect(root: TaskPath, g: EpisodeFiles[TaskPath]) -> EpisodeChecksums | None:
    """None when N's row records digests already; else what to record (or why not)."""
    assert g.meta is not None
    if g.meta_is_shard:
        return EpisodeChecksums(g.index, "skipped", reason="row is in a legacy multi-row shard: run `egopool "
                                                           "migrate --split-episodes` first")
    table = _row_table(g)
    if DIGEST_COLUMN in table.column_names:
        try:
            if parse_digests(table.column(DIGEST_COLUMN)[0].as_py()) is not None:
                return None
        except ValueError as exc:
            return EpisodeChecksums(g.index, "skipped", reason=f"its {DIGEST_COLUMN} is damaged ({exc}): restore "
                                                               "the row from another copy of the task")
    return EpisodeChecksums(g.index, "recorded", episode_digests(root, [p for p in g.paths() if p != g.meta]))


def repair_checksums(task_dir: str | Path, *, dry_run: bool = False,
                     registry: bool | str | Path | Registry | None = True,
                     progress: Progress | None = None) -> ChecksumsReport:
    """Record the sha256 of every file of each committed episode whose row records none (module docstring).

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task``.
    dry_run:
        Hash and report what would be recorded; write nothing.
    registry:
        ``pipeline.db`` whose hash of each rewritten row file is updated (True = beside the task).
    progress:
        ``progress(done, total, what)`` after each episode.

    Returns
    -------
    ChecksumsReport
        An episode whose files cannot be read is ``skipped`` with the error; the others are recorded.

    Raises
    ------
    FormatError
        ``info.json`` cannot be read.
    """
    rt = open_row_task(task_dir, "repair checksums", OP, dry_run=dry_run, registry=registry)
    bt, root = rt.bt, rt.root
    report = ChecksumsReport(root, dry_run)
    with rt.hold():
        groups = [g for g in list_task_episodes(rt.where, rt.layout) if g.meta is not None and g.data is not None]
        for i, g in enumerate(groups):
            try:
                rep = _inspect(root, g)
                if rep is None:
                    report.already += 1
                else:
                    report.episodes.append(rep)
                    if rep.status == "recorded" and dry_run:
                        rep.status = "would record"
                    elif rep.status == "recorded" and bt is not None:
                        _write_bucket(bt, g, rep, report)
                    elif rep.status == "recorded" and rt.local is not None:
                        _write(rt.local, g, rep, report, rt.reg)
            except EgopoolError as exc:  # one unreadable episode never stops the others
                report.episodes.append(EpisodeChecksums(g.index, "skipped", reason=exc.one_line()))
            if progress is not None:
                progress(i + 1, len(groups), f"episode {g.index}")
    return report


def _write_bucket(bt: BucketTask, g: EpisodeFiles[TaskPath], rep: EpisodeChecksums, report: ChecksumsReport) -> None:
    """Rewrite one row in a bucket: claim, backup, conditional PUT, release (module docstring)."""
    assert report.backup is None or isinstance(report.backup, ObjectPath)
    reason, report.backup = rewrite_row_under_claim(
        bt, rep.index, OP, report.backup, "repair-checksums",
        lambda old: row_bytes(restamp_table(read_parquet_bytes(old), rep.files)))
    if reason is not None:
        rep.status, rep.reason = "skipped", reason


def _write(root: Path, g: EpisodeFiles[TaskPath], rep: EpisodeChecksums, report: ChecksumsReport,
           reg: Registry | None) -> None:
    meta = g.meta
    if not isinstance(meta, Path):
        raise TypeError(f"episode {rep.index} of the directory task {root} has no local row file: {meta!r}")
    assert report.backup is None or isinstance(report.backup, Path)
    report.backup = rewrite_local_row(
        root, rep.index, meta, OP, report.backup, "repair-checksums",
        lambda: row_bytes(restamp_table(read_parquet(meta, what="episodes parquet"), rep.files)), reg)
