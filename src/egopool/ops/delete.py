"""Delete episodes by global N, all-or-nothing, verified (file_format.md §2, §9).

One delete of N, under the task lock:

1. plan: the group found by :func:`~egopool.layout.find_episode_files` plus every file
   :func:`pooled_episode_leftovers` sees for N (legacy ``file-`` names, a legacy
   shard holding N's row);
2. write a journal ``meta/.delete-<N>-<token>.json`` listing every planned move;
3. registry: mark N ``deleted`` and raise the task watermark to N;
4. *stage*: rename each file to a dot name in its own directory
   (``.episode-004.parquet.deleting-<token>``: same directory, so the rename is atomic
   and never crosses a file system; dotfiles are ignored by every reader, §11). A
   legacy shard is hard-linked to such a dot name and then atomically replaced by a
   copy without N's row;
5. verify :func:`pooled_episode_leftovers` is empty;
6. commit: the journal's ``state`` becomes ``committed`` (atomic write);
7. unlink the staged files, prune empty chunk directories, remove the registry row,
   unlink the journal.

Any failure before step 6 restores every staged file (and the registry status), so
the task is byte-identical to before. A crash before step 6 is rolled back, a crash
after it rolled forward, by the next ``egopool delete`` on the task
(:func:`recover_interrupted_deletes`). ``stats.json`` and ``total_episodes`` are never
rolled back and N is never handed out again (the registry watermark, and
``total_episodes`` raised to N if it was lower).

A task in a bucket (``s3://bucket/prefix/task``) has no rename and no lock: its delete is
:mod:`egopool.ops.delete_bucket` (a claim journal, the row first, rolled forward by a re-run),
reached through the same :func:`delete_episodes`. Either way N is retired for good
(:mod:`egopool.meta.retired`): a directory's delete also leaves the tombstone ``.egopool/retired/<N>``
(before its commit; a rollback removes it again), so a server or a sync that sees only the task knows N. What N's files are and the plan: :mod:`egopool.ops.delete_plan`.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._atomic import atomic_write_bytes, atomic_write_json, fsync_dir, task_lock, task_read_lock
from .._safe_read import read_bytes, read_json, read_parquet
from ..errors import EgopoolError, FormatError, OperationError, RegistryError
from ..layout import TaskLayout, find_episode_files
from ..meta.info import info_path, read_info, write_info
from ..meta.retired import retire, retired_key
from ..registry import Registry, task_key
from ..storage import is_object_uri
from ..storage.directory_store import DirectoryStore
from ._common import Progress, open_registry, prune_empty_dirs, rel, remove_stale_temps
from .delete_plan import (JOURNAL_RE, DeleteOutcome, DeletePlan, DeleteReport, _pending_journals, check_indices,
                          plan_delete, pooled_episode_leftovers)
from ._store_task import refuse_edited
from .migrate import refuse_during_migration
from .task_store import pause

__all__ = [
    "DeleteOutcome",
    "DeletePlan",
    "DeleteReport",
    "delete_episodes",
    "plan_delete",
    "pooled_episode_leftovers",
    "recover_interrupted_deletes",
]


def _stage_rename(src: Path, dst: Path) -> None:
    """Move a file to its staged dot name (a seam: tests inject failures here)."""
    os.rename(src, dst)


def _staged_name(path: Path, token: str) -> Path:
    return path.with_name(f".{path.name}.deleting-{token}")


def _journal_path(root: Path, index: int, token: str) -> Path:
    return root / "meta" / f".delete-{index}-{token}.json"


def _without_row(shard: Path, index: int) -> bytes:
    table = read_parquet(shard, what="legacy episodes shard")
    kept = table.filter(pc.not_equal(table.column("episode_index"), index))
    buf = io.BytesIO()
    pq.write_table(kept, buf, compression="zstd")
    return buf.getvalue()


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _rollback(root: Path, journal: dict[str, Any], info_bytes: bytes | None = None) -> list[str]:
    """Undo a staged (uncommitted) delete; returns what could not be restored.

    ``info_bytes``: ``info.json`` as it was before this delete (in-process undo: restored
    byte for byte). After a crash only the journal is known: a ``total_episodes`` this
    delete raised to N is set back when it still says N.
    """
    failed = []
    if journal.get("tombstone"):  # this delete's tombstone goes with it: N is still in use
        stone = root / retired_key(int(journal["index"]))
        with contextlib.suppress(FileNotFoundError):
            stone.unlink()
        for d in (stone.parent, stone.parent.parent):  # the folders it made, when nothing else is in them
            with contextlib.suppress(OSError):
                d.rmdir()
    before = journal.get("total_episodes_before")
    if before is not None:
        remove_stale_temps(info_path(root))
        try:
            if info_bytes is not None:
                if read_bytes(info_path(root), what="info.json") != info_bytes:
                    atomic_write_bytes(info_path(root), info_bytes)
            else:
                info = read_info(root)
                if info.get("total_episodes") == journal["index"]:
                    info["total_episodes"] = before
                    write_info(root, info)
        except (OSError, EgopoolError) as exc:
            failed.append(f"meta/info.json: total_episodes not set back to {before} ({exc})")
    for m in reversed(journal["moves"]):
        src, staged = root / m["path"], root / m["staged"]
        if staged.exists() and not src.exists():
            try:
                os.rename(staged, src)
            except OSError as exc:
                failed.append(f"{m['path']} is at {m['staged']} ({exc.strerror or exc})")
        elif staged.exists():
            failed.append(f"{m['path']} exists again; the staged copy {m['staged']} was kept")
    for s in reversed(journal["shards"]):
        path, backup = root / s["path"], root / s["backup"]
        if backup.exists():
            try:
                if path.exists() and os.path.samefile(backup, path):
                    backup.unlink()  # still the hard link of the untouched shard (rename would be a no-op)
                else:
                    os.replace(backup, path)
            except OSError as exc:
                failed.append(f"{s['path']}: original is at {s['backup']} ({exc.strerror or exc})")
        remove_stale_temps(path)  # the rewrite of a process killed mid-write
    return failed


def _finish(root: Path, journal: dict[str, Any]) -> list[Path]:
    """Unlink a committed delete's staged files; returns those that could not be unlinked."""
    left = []
    for item in [*journal["moves"], *journal["shards"]]:
        staged = root / item.get("staged", item.get("backup", ""))
        try:
            if staged.is_dir() and not staged.is_symlink():
                shutil.rmtree(staged)  # a PNG16 depth sequence (docs/decisions.md C4)
            else:
                staged.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            left.append(staged)
    return left


def recover_interrupted_deletes(task_dir: str | Path, registry: Registry | None = None) -> list[str]:
    """Finish (committed) or roll back (uncommitted) deletes that a crash interrupted.

    Caller holds the task lock. Dot-temps a killed delete left (of its journal, of a
    legacy shard's rewrite, of ``info.json``) are removed too. Returns one line per
    journal handled.

    Raises
    ------
    OperationError
        A staged file could not be restored or removed (the journal is kept).
    """
    root = Path(task_dir)
    meta = root / "meta"
    done: list[str] = []
    if not meta.is_dir():
        return done
    for p in meta.glob("..delete-*.json.*.tmp"):  # a journal write killed mid-way: nothing else happened yet
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    for jp in sorted(meta.iterdir()):
        m = JOURNAL_RE.match(jp.name)
        if not m:
            continue
        remove_stale_temps(jp)
        try:
            journal = read_json(jp, what="delete journal")
        except (FormatError, OSError, ValueError) as exc:
            raise OperationError(f"unreadable delete journal: {exc}", path=jp,
                                 hint="inspect it and the .deleting-* files it names, then remove it") from exc
        n = int(journal["index"])
        if journal.get("state") == "committed":
            left = _finish(root, journal)
            if left:
                names = [rel(root, p) for p in left]
                raise OperationError(f"cannot finish interrupted delete of episode {n}: could not remove "
                                     f"{', '.join(names)}", details=names, path=jp,
                                     hint="fix the cause (permissions, read-only file system) and run "
                                          "`egopool delete TASK N...` again: it finishes this delete first")
            if registry is not None:
                registry.remove(task_key(root), n)
            done.append(f"finished interrupted delete of episode {n}")
        else:
            failed = _rollback(root, journal)
            if failed:
                raise OperationError(f"cannot roll back interrupted delete of episode {n}: {'; '.join(failed)}",
                                     details=failed, path=jp)
            if registry is not None and journal.get("registry_status"):
                registry.set_status(task_key(root), n, journal["registry_status"])
            done.append(f"rolled back interrupted delete of episode {n}")
        jp.unlink()
        fsync_dir(meta)
    return done


def _delete_one(root: Path, plan: DeletePlan, layout: TaskLayout, registry: Registry | None) -> DeleteOutcome:
    """Delete one planned N (caller holds the task lock). See the module docstring for the steps."""
    n = plan.index
    token = uuid.uuid4().hex[:12]
    jpath = _journal_path(root, n, token)
    key = task_key(root)
    prior = registry.get(key, n) if registry is not None else None
    info_bytes = read_bytes(info_path(root), what="info.json")
    total = int(read_info(root).get("total_episodes") or 0)
    journal: dict[str, Any] = {
        "index": n, "state": "staging", "registry_status": prior.status if prior else None,
        "tombstone": not (root / retired_key(n)).exists(),
        "total_episodes_before": total if total < n else None,
        "moves": [{"path": rel(root, p), "staged": rel(root, _staged_name(p, token))} for p in plan.files],
        "shards": [{"path": rel(root, p), "backup": rel(root, _staged_name(p, token))} for p in plan.shards],
    }
    atomic_write_json(jpath, journal)
    pause("delete", "journal")
    outcome = DeleteOutcome(n)

    def undo(reason: str) -> OperationError:
        failed = _rollback(root, journal, info_bytes)
        if registry is not None and prior is not None:
            with contextlib.suppress(RegistryError):
                registry.set_status(key, n, prior.status)
        if failed:
            return OperationError(f"delete of episode {n} failed ({reason}) and could not be fully undone: "
                                  f"{'; '.join(failed)}", details=failed, path=root,
                                  hint=f"re-run `egopool delete TASK {n}` to finish the recovery")
        jpath.unlink()
        return OperationError(f"delete of episode {n} failed ({reason}); nothing was removed", path=root)

    try:
        if registry is not None:
            registry.bump_watermark(key, n)
            if prior is not None:
                registry.set_status(key, n, "deleted")
        for m in journal["moves"]:
            _stage_rename(root / m["path"], root / m["staged"])
        for s in journal["shards"]:
            shard, backup = root / s["path"], root / s["backup"]
            _link_or_copy(shard, backup)
            atomic_write_bytes(shard, _without_row(backup, n))
        pause("delete", "staged")
        left = pooled_episode_leftovers(root, n, layout)
        if left:
            raise OperationError(f"still present after staging: {', '.join(rel(root, p) for p in left)}")
        if journal["total_episodes_before"] is not None:  # watermark: a deleted N is never handed out again
            info = read_info(root)
            info["total_episodes"] = n
            write_info(root, info)
        # the tombstone a bucket's delete leaves too (meta/retired.py): it travels with every copy of the task,
        # and the pooling server's allocation asks it on either store
        retire(DirectoryStore(root), n)
        journal["state"] = "committed"
        atomic_write_json(jpath, journal)
        pause("delete", "committed")
    except (OSError, EgopoolError) as exc:
        reason = exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}"
        raise undo(reason) from exc
    outcome.not_removed = _finish(root, journal)
    outcome.removed = [p for p in plan.files]
    outcome.shard_rows_removed = list(plan.shards)
    prune_empty_dirs(root, plan.files)
    if registry is None:
        outcome.registry = "disabled"
    else:
        try:
            outcome.registry = "removed" if registry.remove(key, n) else "absent"
        except RegistryError as exc:
            outcome.registry = exc.one_line()
    if not outcome.not_removed:
        jpath.unlink()
        fsync_dir(jpath.parent)
    return outcome


def delete_episodes(task_dir: str | Path, indices: Sequence[int], *, dry_run: bool = False,
                    registry: bool | str | Path | Registry | None = True,
                    progress: Progress | None = None) -> DeleteReport:
    """Delete episodes by global N (file_format.md §2, §9; ``egopool delete``).

    Every N is checked before anything is touched: N < 1 is refused, an N that
    :func:`~egopool.layout.find_episode_files` does not find (or that was already
    deleted) is an error. Each N is then deleted all-or-nothing (see the module
    docstring) and verified gone with :func:`pooled_episode_leftovers`; its registry
    row is removed. ``stats.json`` and ``total_episodes`` are not rolled back; N is
    never reused.

    Parameters
    ----------
    task_dir:
        The task directory, or ``s3://bucket/prefix/task`` (:func:`~egopool.ops.delete_bucket.delete_in_bucket`:
        rolled forward, no registry).
    indices:
        Global 1-based N (duplicates are ignored).
    dry_run:
        Only plan: report exactly which files and shard rows would be removed.
    registry:
        ``pipeline.db`` to update: True = beside the task, a path / Registry, False = none (a directory only).
    progress:
        ``progress(done, total, what)`` after each N.

    Returns
    -------
    DeleteReport

    Raises
    ------
    LayoutError
        N < 1 or no N.
    EpisodeNotFoundError
        "no episode N in task".
    OperationError
        A delete failed; the message says whether it was undone (nothing removed) or
        what is left where. Episodes before it in ``indices`` stay deleted.
    """
    if is_object_uri(task_dir):
        from .delete_bucket import delete_in_bucket

        return delete_in_bucket(str(task_dir), indices, dry_run=dry_run, progress=progress)
    root = Path(task_dir)
    check_indices(indices)
    info = read_info(root)
    layout = TaskLayout.from_info(root, info)
    reg = open_registry(root, registry)
    with task_read_lock(root) if dry_run else task_lock(root):  # a dry run writes nothing (decisions.md #24)
        refuse_during_migration(root, "delete episodes")
        if not dry_run:  # the lock is free, yet an edit's journal: an interrupted edit, finished first (E30)
            refuse_edited(DirectoryStore(root), str(root), "nothing was deleted")
        pending = _pending_journals(root)
        if dry_run:
            recovered = [f"would {'finish' if committed else 'roll back'} interrupted delete of episode {n}"
                         for n, committed, _ in pending]
        else:
            recovered = recover_interrupted_deletes(root, reg)
        # an N whose interrupted delete was (or will be) finished above is done, not "no episode N"
        finished = {n for n, committed, _ in pending if committed} if dry_run else \
            {int(line.rsplit(" ", 1)[1]) for line in recovered if line.startswith("finished")}
        asked = [n for n in check_indices(indices)
                 if n not in finished or find_episode_files(root, layout, n) is not None]
        plans = plan_delete(root, asked, layout) if asked else []
        report = DeleteReport(root, dry_run, plans, recovered=recovered)
        if dry_run:
            return report
        for i, plan in enumerate(plans):
            try:
                report.outcomes.append(_delete_one(root, plan, layout, reg))
            except OperationError as exc:
                done = [o.index for o in report.outcomes]
                if done:
                    exc.message += f"; already deleted: {', '.join(map(str, done))}"
                rest = [p.index for p in plans[i + 1:]]
                if rest:
                    exc.message += f"; not attempted: {', '.join(map(str, rest))}"
                raise OperationError(exc.message, details=exc.details, path=exc.path, hint=exc.hint) from exc
            if progress is not None:
                progress(i + 1, len(plans), f"episode {plan.index}")
    return report
