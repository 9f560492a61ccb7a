"""``egopool migrate``: bring a legacy pooled task to the v1.1.2 layout (file_format.md §2, §6.1, §11).

What it changes:

* ``--split-episodes``: every legacy multi-row ``meta/episodes/chunk-NNN/file-NNN.parquet``
  shard becomes one single-row ``episode-NNN.parquet`` per episode; rows are found by
  their ``episode_index`` (never by file name) and keep every value (columns an older
  row lacks get their defaults, §6.2 "追加旧任务"). Where N already has its own
  ``episode-`` file, that file wins (it is what every reader already uses) and the
  shard row is only kept in the backup.
* pre-v1.1.2 per-episode ``file-NNN`` names in ``data/``, ``videos/`` and ``meta/episodes``
  become ``episode-NNN`` (a rename: the bytes do not change); ``info.json`` path
  templates that still say ``file-`` are updated.
* the obsolete ``meta/.stats_state.json`` and ``_trash/`` are moved into the backup.

How it stays safe: the whole plan is computed first, then written as a journal
``_migrate_backup_<time>/migrate.json`` (the backup directory is prepared under a
dot name and renamed into place, so it exists only complete). Every step is
idempotent (a copy that exists is complete, a rename whose target exists is done, a
row write is atomic), so after a crash at any point, running ``egopool migrate``
again resumes the journal and reaches the same result as an uninterrupted run. A
second run on a migrated task finds nothing to do and changes nothing. Originals
of everything removed or rewritten (shards, ``info.json``) are copied into the
backup first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, task_lock, task_read_lock
from .._safe_read import read_json
from ..errors import EgopoolError, OperationError
from ..layout import TaskLayout
from ..meta.info import read_info, write_info
from ..registry import FileRecord, Registry, file_record, task_key
from ..storage import ObjectPath, as_path
from ._common import Progress, backup_copy, open_registry, remove_stale_temps, timestamp
from .migrate_plan import (BACKUP_PREFIX, JOURNAL_NAME, MigrationReport, Step, pause_after, pending_journal,
                           plan_migration, refuse_during_migration, row_bytes)

__all__ = ["BACKUP_PREFIX", "JOURNAL_NAME", "MigrationReport", "Step", "migrate_task", "plan_migration",
           "refuse_during_migration"]


def _move(src: Path, dst: Path, what: str) -> None:
    """Idempotent rename: done when ``src`` is gone and ``dst`` exists."""
    if not src.exists() and not src.is_symlink():
        if dst.exists():
            return
        raise OperationError(f"{what}: neither {src} nor {dst} exists", path=src,
                             hint="the task changed since the migration was planned; inspect the backup")
    if dst.exists():
        raise OperationError(f"{what}: target {dst} already exists", path=src,
                             hint="the task changed since the migration was planned; inspect the backup")
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.rename(src, dst)
    fsync_dir(dst.parent)


def _refresh_registry(root: Path, registry: Registry, indices: list[int], renames: dict[str, str]) -> None:
    """Point registry rows of migrated episodes at the new names.

    A renamed file keeps its bytes, so its size and sha256 are carried over (no
    re-hashing of videos); a new per-episode meta row file is hashed; files that no
    longer exist (stashed duplicates, split shards) are dropped.
    """
    key = task_key(root)
    rows = {r.episode_index: r for r in registry.recordings(key)}
    if not rows:
        return
    layout = TaskLayout.from_info(root, read_info(root))
    for n in indices:
        rec = rows.get(n)
        if rec is None:
            continue
        files: dict[str, FileRecord] = {}
        for f in rec.files:
            path = renames.get(f.path, f.path)
            if (root / path).is_file():
                files[path] = FileRecord(path, f.size, f.sha256)
        meta = layout.episodes_file(n)
        if isinstance(meta, Path) and meta.is_file():
            r = file_record(root, meta)
            files[r.path] = r
        registry.replace_files(key, n, sorted(files.values(), key=lambda f: f.path))


def _run_step(root: Path, step: Step, registry: Registry | None, renames: dict[str, str]) -> None:
    def p(x: str | None) -> Path:
        assert x is not None
        return root / x

    if step.kind == "backup":
        if not p(step.dst).exists():
            if not p(step.src).exists():
                raise OperationError(f"cannot back up {step.src}: it is gone and no copy exists", path=root)
            backup_copy(root, p(step.src), root / Path(step.dst).parts[0])  # type: ignore[arg-type]
    elif step.kind == "templates":
        info = read_info(root)
        if any(info.get(k) != v for k, v in step.value.items()):
            info.update(step.value)
            write_info(root, info)
    elif step.kind == "split_row":
        atomic_write_bytes(p(step.dst), row_bytes(p(step.src), int(step.index or 0)))
    elif step.kind == "remove":
        with contextlib.suppress(FileNotFoundError):
            p(step.src).unlink()
    elif step.kind in ("rename", "stash"):
        _move(p(step.src), p(step.dst), step.kind)
    elif step.kind == "registry":
        if registry is not None:
            _refresh_registry(root, registry, [int(n) for n in step.value], renames)
    else:
        raise OperationError(f"unknown migration step {step.kind!r} in the journal", path=root)


def _sweep_temps(root: Path, steps: list[Step], journal: Path) -> None:
    """Remove the dot-temps a migration killed mid-write left beside the files its steps write."""
    finals = {journal, root / "meta" / "info.json"}
    finals.update(root / st.dst for st in steps if st.kind in ("backup", "split_row") and st.dst)
    for final in finals:
        remove_stale_temps(final)


def _start(root: Path, steps: list[Step], notes: list[str]) -> tuple[Path, list[Step]]:
    """Create the backup directory with its journal atomically (prepared under a dot name)."""
    stamp = timestamp()
    name = BACKUP_PREFIX + stamp
    def fill(x: str | None) -> str | None:
        return x.replace(BACKUP_PREFIX + "@", name, 1) if x is not None else None

    concrete = [Step(s.kind, fill(s.src), fill(s.dst), s.index, s.value) for s in steps]
    tmp = root / f".{name}.tmp"
    tmp.mkdir()
    atomic_write_json(tmp / JOURNAL_NAME, {"state": "running", "created": stamp, "completed": 0,
                                          "steps": [s.to_dict() for s in concrete], "notes": notes})
    os.rename(tmp, root / name)
    fsync_dir(root)
    return root / name, concrete


def migrate_task(task_dir: str | Path | ObjectPath, *, split_episodes: bool = True, dry_run: bool = False,
                 registry: bool | str | Path | Registry | None = True, progress: Progress | None = None,
                 checkpoint_every: int = 50) -> MigrationReport:
    """Migrate a legacy pooled task in place (file_format.md §2, §6.1, §11); see the module docstring.

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (:func:`egopool.ops.migrate_store.migrate_store`: the
        same plan and journal through the bucket; ``registry`` does not apply there).
    split_episodes:
        Split legacy multi-row ``meta/episodes`` shards into per-episode files.
    dry_run:
        Only plan (or show the interrupted plan that a real run would resume).
    registry:
        ``pipeline.db`` whose file lists follow renamed episodes (True = beside the task).
    progress:
        ``progress(done, total, what)`` after every step. An exception raised from it
        stops the migration like a crash would; running again resumes it.
    checkpoint_every:
        Steps between journal checkpoints (steps are idempotent, so at most this many
        are re-run after a crash).

    Returns
    -------
    MigrationReport

    Raises
    ------
    FormatError
        ``info.json`` or a shard cannot be read.
    OperationError
        A step found the task changed under it (names the file); the journal is kept
        so a re-run resumes after the cause is fixed.
    """
    root = as_path(task_dir)
    if isinstance(root, ObjectPath):
        from .migrate_store import migrate_store

        return migrate_store(root, split_episodes=split_episodes, dry_run=dry_run, progress=progress,
                             checkpoint_every=checkpoint_every)
    read_info(root)  # format check and a one-line error for a wrong directory
    reg = open_registry(root, registry)
    with task_read_lock(root) if dry_run else task_lock(root):  # a dry run writes nothing (decisions.md #24)
        for stale in [] if dry_run else root.glob(f".{BACKUP_PREFIX}*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)  # a crash while preparing: nothing was changed
        found = pending_journal(root)
        journal: Path | None = found if isinstance(found, Path) else None
        if journal is not None:
            doc = read_json(journal, what="migration journal")
            steps = [Step.from_dict(d) for d in doc["steps"]]
            report = MigrationReport(root, dry_run, steps, journal.parent, resumed=True, notes=list(doc.get("notes", [])))
            start = int(doc.get("completed", 0))
        else:
            steps, notes = plan_migration(root, split_episodes=split_episodes)
            report = MigrationReport(root, dry_run, steps, notes=notes)
            if dry_run or not steps:
                return report
            backup, steps = _start(root, steps, notes)
            report.backup, report.steps = backup, steps
            doc = read_json(backup / JOURNAL_NAME, what="migration journal")
            journal, start = backup / JOURNAL_NAME, 0
        if dry_run:
            return report
        if report.resumed:
            _sweep_temps(root, steps, journal)
        renames = {st.src: st.dst for st in steps if st.kind == "rename" and st.src and st.dst}
        for i in range(start, len(steps)):
            try:
                _run_step(root, steps[i], reg, renames)
            except EgopoolError:
                raise
            except OSError as exc:
                raise OperationError(f"migration step {i + 1}/{len(steps)} failed ({steps[i].describe()}): {exc}",
                                     path=root,
                                     hint="fix the cause and run `egopool migrate TASK` again to resume") from exc
            report.done += 1
            if (i + 1) % checkpoint_every == 0:
                doc["completed"] = i + 1
                atomic_write_json(journal, doc)
            pause_after(i + 1, lambda k, b: (root / k).write_bytes(b))
            if progress is not None:
                progress(i + 1, len(steps), steps[i].describe())
        doc["completed"], doc["state"] = len(steps), "done"
        atomic_write_json(journal, doc)
    return report
