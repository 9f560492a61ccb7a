"""Imports into a bucket: ``egopool import ... --out s3://BUCKET/PREFIX`` (issue 24; docs/decisions.md O40).

An importer writes a task directory (its :class:`~egopool.write.task_writer.TaskWriter`: temp names,
the row last). For ``s3://`` it writes into a local scratch root instead, whose task is seeded first
with the bucket task's ``meta/info.json`` and ``meta/tasks.jsonl`` (so the fps check, the codec
checks and the next N are those of the bucket task: ``total_episodes`` is raised to the highest N
the bucket holds, committed or not). The scratch task's new episodes are then published with
:func:`egopool.transfer.sync.sync_task`, the commit rule of the pooling server and ``egopool sync``:
N claimed by a journal created with ``If-None-Match``, every object PUT and read back, the row PUT
last with ``If-None-Match``, ``info.json`` / ``stats.json`` merged by compare-and-swap. A crash
before a row is written leaves no episode (the next sync or import from this machine rolls its
journal back); an N another writer claimed meanwhile is refused in one line (import again).

Nothing is written under a local ``s3:`` directory, and nothing reaches the bucket before the import
itself succeeded. The registry's memory of imported sources (``--allow-duplicate``'s check) is kept in
the bucket task itself (:mod:`egopool.importers.bucket_sources`): a source imported before is refused
before anything is written, as for a directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import FormatError, ObjectStoreError, OperationError
from ..layout import TaskLayout, list_task_episodes
from ..storage import ObjectPath, as_path, require_bucket
from ..storage._path import refuse_near_uri
from ..storage.bucket import is_bucket_uri
from ._common import SOURCE_MEMORY, TASK_SEED, ImportResult
from .bucket_sources import BucketSources

__all__ = ["import_into", "is_bucket_out"]


def is_bucket_out(out: str | os.PathLike[str]) -> bool:
    """True when ``--out`` names a bucket (``s3://...``)."""
    return is_bucket_uri(os.fspath(out))


def _bucket_root(out: str) -> ObjectPath:
    """``--out`` as an :class:`ObjectPath` whose bucket exists (one line naming the URI and the fix otherwise)."""
    root = as_path(out.rstrip("/"))
    assert isinstance(root, ObjectPath)
    try:
        require_bucket(root)
    except ObjectStoreError as exc:  # named by the bucket alone: name --out as given
        raise ObjectStoreError(exc.message, uri=str(root), cause=exc.cause, hint=exc.hint) from exc
    return root


def _publishing(root: ObjectPath, task: str) -> bool:
    """True when a publish journal of ``task`` exists under ``root`` (the pooling server's or a sync's: a first
    episode being published, or one a killed run left, which the next sync from its machine rolls back)."""
    from ..publish import JOURNALS, task_hash
    from ..storage import open_store

    return next(iter(open_store(str(root)).list(f"{JOURNALS}/{task_hash(task)}/")), None) is not None


def _seed_from(root: ObjectPath) -> Callable[[Path, str], None]:
    """A seeder that copies the bucket task's ``meta/info.json`` and ``tasks.jsonl`` into the scratch task."""
    done: set[str] = set()

    def seed(scratch: Path, task: str) -> None:
        if task in done or not task or "/" in task or task in (".", ".."):
            return
        done.add(task)
        remote = root / task
        info_obj = remote / "meta" / "info.json"
        if not info_obj.exists():
            if remote.is_dir() and not _publishing(root, task):  # objects, no task, no publish: never mixed into
                raise FormatError("not a pooled_episodes_v1 task: objects exist under this prefix but no "
                                  "meta/info.json", path=str(remote),
                                  hint="import into another --task, or remove what is there")
            return
        from ..meta.info import read_info

        info = read_info(remote)
        layout = TaskLayout.from_info(remote, info)
        highest = max((g.index for g in list_task_episodes(remote, layout, committed_only=False)), default=0)
        info["total_episodes"] = max(int(info.get("total_episodes") or 0), highest)
        local = scratch / task / "meta"
        local.mkdir(parents=True, exist_ok=True)
        (local / "info.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tasks = remote / "meta" / "tasks.jsonl"
        if tasks.exists():
            (local / "tasks.jsonl").write_bytes(tasks.read_bytes())

    return seed


def import_into(out: str | os.PathLike[str], run: Callable[[Path], ImportResult]) -> ImportResult:
    """Run an importer ``run(root)`` into ``out``: a directory as it is, or a bucket through a scratch task.

    Parameters
    ----------
    out:
        The recordings root: a directory, or ``s3://BUCKET/PREFIX`` (the task is ``PREFIX/TASK``).
    run:
        The importer, given the local root to write ``<root>/<task>`` into.

    Returns
    -------
    ImportResult
        For a bucket, ``task_dir`` and the episodes' paths are ``s3://`` locations.

    Raises
    ------
    ObjectStoreError
        The bucket does not exist or cannot be reached (nothing written).
    FormatError
        ``s3://`` URI malformed, or the prefix holds objects that are not a task.
    OperationError
        An episode's N was claimed in the bucket by another writer meanwhile (nothing of it stays; import again).
    """
    text = os.fspath(out)
    if not is_bucket_out(text):
        refuse_near_uri(text)  # `--out s3:/b/p` made a local folder named `s3:` (issue 24 review)
        return run(Path(text))
    from ..transfer.sync import sync_task

    root = _bucket_root(text)
    sources = BucketSources(root)
    with tempfile.TemporaryDirectory(prefix="egopool-import-") as tmp:
        scratch = Path(tmp)
        token, memory = TASK_SEED.set(_seed_from(root)), SOURCE_MEMORY.set(sources)
        try:
            result = run(scratch)
        finally:
            SOURCE_MEMORY.reset(memory)
            TASK_SEED.reset(token)
        local = result.task_dir
        assert isinstance(local, Path)  # run() wrote into the scratch directory
        dest = root / local.name
        report = sync_task(str(local), str(dest))
        refused = [o for o in report.outcomes if o.status not in ("copied", "skipped")]
        if refused:
            o = refused[0]
            raise OperationError(f"episode {o.index} was not published: {o.reason}", path=str(dest),
                                 hint="nothing of it was left in the bucket; run the import again")
        problems = [f"episode {o.index}: {o.reason}" for o in report.outcomes if o.reason]
        sources.flush(local.name, {o.index for o in report.outcomes if o.status == "copied"})

        def remote(p: Path) -> Path | ObjectPath:
            with contextlib.suppress(ValueError):
                return dest / p.relative_to(local).as_posix()
            return p

        episodes = tuple(dataclasses.replace(e, paths=tuple(remote(Path(str(p))) for p in e.paths))
                         for e in result.episodes)
        return dataclasses.replace(result, task_dir=dest, episodes=episodes, notes=(*result.notes, *problems))

