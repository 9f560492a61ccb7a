"""``egopool migrate s3://bucket/prefix/task``: the legacy-to-v1.1.2 migration in a bucket (issue 24; O40).

The plan and the journal are the directory's (:mod:`egopool.ops.migrate_plan`): ``_migrate_backup_<time>/
migrate.json`` lists every step, and a re-run resumes it at its last checkpoint. A bucket has no rename and
no lock, so:

- the journal is the job's ownership: created with ``If-None-Match`` (a second run started at the same time
  finds two pending journals and backs out, deleting its own, before it changed anything), every checkpoint
  is a compare-and-swap, and a later run takes a journal over only when its run is dead (same host: its pid
  is gone; another host: after :data:`~egopool.ops._store_task.STALE_AFTER`);
- a rename (``file-`` -> ``episode-``, same bytes) is a copy under the new key (``If-None-Match``) and then
  the delete of the old one; a run killed between the two leaves both, which the re-run finishes (the copy
  of the same size is taken as done). Readers take the ``episode-`` name where both exist;
- ``info.json``'s templates are switched by compare-and-swap; a split row is one PUT; one object at a time
  passes through a local scratch file (disk bounded by the largest file).

There is no ``pipeline.db`` beside a bucket task: the ``registry`` step does nothing there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, LockError, OperationError
from ..storage import ObjectPath, PreconditionFailed, PutMode
from ._common import Progress, timestamp
from ._store_task import StoreTask, json_bytes, open_store_task
from .migrate_plan import (BACKUP_PREFIX, JOURNAL_NAME, MigrationReport, Step, pause_after, pending_journal,
                           plan_migration, row_bytes)

__all__ = ["migrate_store"]


def _pending_keys(t: StoreTask) -> list[str]:
    """Every journal not ``done`` (``_migrate_backup_*/migrate.json``), oldest first."""
    out = []
    prefixes, _ = t.store.list_dir("")
    for d in sorted(prefixes):
        if not d.startswith(BACKUP_PREFIX):
            continue
        got = t.get_json(d + JOURNAL_NAME, "migration journal")
        if got is not None and got[0].get("state") != "done":
            out.append(d + JOURNAL_NAME)
    return out


def _copy(t: StoreTask, src: str, dst: str, mode: PutMode) -> None:
    with tempfile.TemporaryDirectory(prefix="egopool-migrate-") as tmp:
        local = t.download(src, Path(tmp) / "object")
        t.store.put_file(dst, local, mode=mode)


def _move(t: StoreTask, src: str, dst: str, what: str) -> None:
    """Idempotent move of an object or of every object under a prefix: copy (``CREATE``), then delete."""
    if t.store.exists(src):
        pairs = [(src, dst)]
    else:
        pairs = [(m.key, dst + m.key[len(src):]) for m in t.store.list(src + "/") if not m.key.endswith("/")]
    if not pairs:
        if t.store.exists(dst) or next(iter(t.store.list(dst + "/")), None) is not None:
            return  # done by the run we resume
        raise OperationError(f"{what}: neither {src} nor {dst} exists", path=t.uri,
                             hint="the task changed since the migration was planned; inspect the backup")
    for s, d in pairs:
        hs, hd = t.store.head(s), t.store.head(d)
        if hs is None:
            continue
        if hd is None:
            try:
                _copy(t, s, d, PutMode.CREATE)
            except PreconditionFailed:
                hd = t.store.head(d)
        if hd is not None and hd.size != hs.size:
            raise OperationError(f"{what}: target {t.store.url(d)} already exists", path=t.uri,
                                 hint="the task changed since the migration was planned; inspect the backup")
        t.store.delete([s])


def _templates(t: StoreTask, value: dict[str, Any]) -> None:
    """``info.json``'s path templates set by compare-and-swap (a publish's merge in between: read again)."""
    for _ in range(20):
        got = t.get_json("meta/info.json", "info.json")
        if got is None:
            raise OperationError("meta/info.json vanished during the migration", path=t.uri,
                                 hint="restore it from the backup directory")
        info, version = got
        if all(info.get(k) == v for k, v in value.items()):
            return
        info.update(value)
        try:
            t.store.put("meta/info.json", json_bytes(info), mode=PutMode.UPDATE, version=version)
            return
        except PreconditionFailed:
            continue
    raise OperationError("info.json kept changing (publishes); its templates were not switched", path=t.uri,
                         hint="run `egopool migrate TASK` again to resume")


def _run_step(t: StoreTask, step: Step) -> None:
    def key(x: str | None) -> str:
        assert x is not None
        return x

    if step.kind == "backup":
        if not t.store.exists(key(step.dst)):
            if not t.store.exists(key(step.src)):
                raise OperationError(f"cannot back up {step.src}: it is gone and no copy exists", path=t.uri)
            _copy(t, key(step.src), key(step.dst), PutMode.OVERWRITE)
    elif step.kind == "templates":
        _templates(t, dict(step.value))
    elif step.kind == "split_row":
        t.store.put(key(step.dst), row_bytes(t.path(key(step.src)), int(step.index or 0)))
    elif step.kind == "remove":
        t.store.delete([key(step.src)])
    elif step.kind in ("rename", "stash"):
        _move(t, key(step.src), key(step.dst), step.kind)
    elif step.kind == "registry":
        return  # a bucket task has no pipeline.db
    else:
        raise OperationError(f"unknown migration step {step.kind!r} in the journal", path=t.uri)


def migrate_store(location: str | ObjectPath, *, split_episodes: bool = True, dry_run: bool = False,
                  progress: Progress | None = None, checkpoint_every: int = 50) -> MigrationReport:
    """Migrate the bucket task at ``location`` (module docstring; parameters as
    :func:`egopool.ops.migrate.migrate_task`).

    Raises
    ------
    FormatError
        Not a task, ``info.json`` or a shard cannot be read.
    LockError
        Another live run owns the migration (or started at the same moment: nothing was changed).
    OperationError
        A step found the task changed under it; the journal is kept so a re-run resumes.
    ObjectStoreError
        The bucket does not exist or refuses the credentials (one line naming the URI).
    """
    t = open_store_task(location)
    if not dry_run and not t.store.conditional_writes:
        raise OperationError("this bucket does not honour conditional writes (If-None-Match / If-Match), so two "
                             "runs could migrate it at once", path=t.uri,
                             hint="migrate a local copy (`egopool sync`) and sync it into a new task")
    found = pending_journal(t.root)
    version: str | None
    if found is not None:
        jkey = t.key(found)
        got = t.get_json(jkey, "migration journal")
        assert got is not None
        doc, version = got
        if not dry_run:
            version = t.own_journal(jkey, doc, version, "migrate")
        steps = [Step.from_dict(d) for d in doc["steps"]]
        report = MigrationReport(t.root, dry_run, steps, t.path(jkey.split("/")[0]), resumed=True,
                                 notes=list(doc.get("notes", [])))
        start = int(doc.get("completed", 0))
    else:
        steps, notes = plan_migration(t.root, split_episodes=split_episodes)
        report = MigrationReport(t.root, dry_run, steps, notes=notes)
        if dry_run or not steps:
            return report
        name = BACKUP_PREFIX + timestamp()

        def fill(x: str | None) -> str | None:
            return x.replace(BACKUP_PREFIX + "@", name, 1) if x is not None else None

        steps = [Step(s.kind, fill(s.src), fill(s.dst), s.index, s.value) for s in steps]
        jkey = name + "/" + JOURNAL_NAME
        doc = {"state": "running", "created": name[len(BACKUP_PREFIX):], "completed": 0,
               "steps": [s.to_dict() for s in steps], "notes": notes}
        version = t.write_journal(jkey, doc, None, "migrate")
        if _pending_keys(t) != [jkey]:  # another run started at the same moment: back out, nothing changed
            t.store.delete([jkey])
            raise LockError("another `egopool migrate` started on this task at the same time", path=t.uri,
                            hint="nothing was changed; run it again once the other has finished")
        report.backup, report.steps, start = t.path(name), steps, 0
    if dry_run:
        return report
    for i in range(start, len(steps)):
        try:
            _run_step(t, steps[i])
        except EgopoolError:
            raise
        except OSError as exc:
            raise OperationError(f"migration step {i + 1}/{len(steps)} failed ({steps[i].describe()}): {exc}",
                                 path=t.uri, hint="fix the cause and run `egopool migrate TASK` again to resume") from exc
        report.done += 1
        if (i + 1) % checkpoint_every == 0:
            doc["completed"] = i + 1
            version = t.write_journal(jkey, doc, version, "migrate")
        pause_after(i + 1, lambda k, b: t.store.put(k, b))
        if progress is not None:
            progress(i + 1, len(steps), steps[i].describe())
    doc["completed"], doc["state"] = len(steps), "done"
    t.write_journal(jkey, doc, version, "migrate")
    return report
