"""``egopool repair clean``: finish what dead or failed writers left in a task (file_format.md §2, §7.5, §11).

What a writer killed (SIGKILL, power loss) or stopped by a full disk leaves, all of which
``egopool validate`` reports as warnings:

* dot-temps of files it was writing (:mod:`egopool.meta.leftovers`): removed;
* ``meta/.reserved-<N>`` of a process that no longer runs: N without its ``meta/episodes`` row is
  rolled back and recycled (the next recording takes it), with its row only the reservation goes
  (:func:`egopool.write.recovery.reclaim_stale`);
* ``meta/.pending-<N>.json``, the declarations of a saved episode whose ``info.json`` /
  ``stats.json`` merge failed: the merge is replayed;
* a committed episode that is not in the registry ``pipeline.db`` (its registration failed): it
  is recorded (file hashes).

Every writer does the first three when it opens the task; this command does them on demand,
under the task lock (``--dry-run``: the shared lock, nothing written). A task in a bucket
(``s3://bucket/prefix/task``) has other leftovers (journals of dead writers, incomplete multipart
uploads, orphan objects of an uncommitted N): :mod:`egopool.ops.clean_bucket`, reached through the
same :func:`clean_task`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import task_lock, task_read_lock
from ..errors import RegistryError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import read_info
from ..meta.leftovers import find_leftovers
from ..registry import Registry, record_episode, task_key
from ..storage import is_object_uri
from ..write.recovery import pending_indices, reclaim_stale, sweep_stale_temps
from ._common import open_registry, rel
from .clean_bucket import BucketCleanReport, clean_bucket_task
from .task_store import pause

__all__ = ["CleanReport", "clean_task"]


@dataclass
class CleanReport:
    """What :func:`clean_task` found and did (or, with ``dry_run``, would do).

    Attributes
    ----------
    temps:
        Task-relative paths of stale dot-temps; ``temp_bytes`` their size.
    rolled_back:
        N of dead reservations without a committed row (rolled back, recycled).
    reservations:
        N of every dead reservation (rolled back or simply removed).
    replayed:
        N whose pending ``info.json`` / ``stats.json`` merge was replayed (or is pending, dry run).
    registered:
        Committed N that were missing from the registry and are now recorded in it.
    problems:
        One line per thing that could not be done (e.g. the registry still cannot be written).
    """

    task_dir: Path
    dry_run: bool
    temps: list[str] = field(default_factory=list)
    temp_bytes: int = 0
    reservations: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    registered: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing was left undone."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-able dict (``--json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "ok": self.ok, "temps": self.temps,
                "temp_bytes": self.temp_bytes, "reservations": self.reservations, "rolled_back": self.rolled_back,
                "replayed": self.replayed, "registered": self.registered, "problems": self.problems}


def _unregistered(root: Path, layout: TaskLayout, reg: Registry | None, report: CleanReport) -> list[Any]:
    if reg is None:
        return []
    try:
        known = {r.episode_index for r in reg.recordings(task_key(root))}
    except RegistryError as exc:
        report.problems.append(f"registry not checked: {exc.one_line()}")
        return []
    return [g for g in list_task_episodes(root, layout) if g.meta is not None and g.data is not None
            and not g.meta_is_shard and g.index not in known]


def clean_task(task_dir: str | Path, *, dry_run: bool = False,
               registry: bool | str | Path | Registry | None = True,
               stale_after: float | None = None) -> CleanReport | BucketCleanReport:
    """Remove what dead writers left and finish what failed writers could not (module docstring).

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (:func:`~egopool.ops.clean_bucket.clean_bucket_task`).
    dry_run:
        Only report; write nothing (needs no write access).
    registry:
        ``pipeline.db`` to complete (True = beside the task, a path / Registry, False = leave it out); a
        directory only.
    stale_after:
        A bucket only: seconds after which a journal or multipart upload is a dead writer's (default 6 h).

    Returns
    -------
    CleanReport
        For a directory; a :class:`~egopool.ops.clean_bucket.BucketCleanReport` for a bucket.

    Raises
    ------
    FormatError
        ``info.json`` cannot be read (not a task).
    """
    if is_object_uri(task_dir):
        kw = {} if stale_after is None else {"stale_after": stale_after}
        return clean_bucket_task(str(task_dir), dry_run=dry_run, **kw)
    root = Path(task_dir)
    layout = TaskLayout.from_info(root, read_info(root))
    reg = open_registry(root, registry)
    report = CleanReport(root, dry_run)
    with task_read_lock(root) if dry_run else task_lock(root):
        found = find_leftovers(root, layout, meta_temps=True)
        report.temps = [rel(root, p) for p in found.temps]
        report.temp_bytes = found.bytes
        report.reservations = list(found.reservations)
        pending = pending_indices(root)
        missing = _unregistered(root, layout, reg, report)
        if dry_run:
            report.rolled_back = [n for n in found.reservations if not layout.episodes_file(n).exists()]
            report.replayed = [n for n in pending if layout.episodes_file(n).exists()]
            report.registered = [g.index for g in missing]
            return report
        report.rolled_back = reclaim_stale(root, layout)
        pause("clean", "reclaimed")
        report.replayed = [n for n in pending if layout.episodes_file(n).exists()]
        left = set(pending_indices(root))
        for n in sorted(left & set(report.replayed)):
            report.problems.append(f"episode {n}: the info.json/stats.json merge failed again; free disk space and "
                                   "run it again")
        report.replayed = [n for n in report.replayed if n not in left]
        sweep_stale_temps(root, layout)
        assert reg is not None or not missing
        for g in missing:
            try:
                record_episode(root, g.index, g.paths(), registry=reg)
                report.registered.append(g.index)
            except RegistryError as exc:
                report.problems.append(f"episode {g.index} not recorded in the registry: {exc.one_line()}")
                break
    return report
