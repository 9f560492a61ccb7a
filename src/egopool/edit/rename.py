"""``egopool edit rename TASK NEW``: a task under a new name (docs/decisions.md E11).

The name of a task is its directory's (or prefix's) last part and ``info.json``'s ``task_name`` (file_format.md §1,
§3). N, data, rows, videos and ``stats.json`` are unchanged.

- A directory is renamed by ``rename(2)`` (a symbolic link to a task is refused, naming the task: E91) (atomic; the new path must not exist and be on the same file system),
  under the task lock, with the journal ``meta/.edit.json`` written first; then ``task_name`` is set. A run
  killed between the two is finished by ``edit rename TASK NEW`` again or ``edit resume NEW``.
- A bucket has no rename: the task is copied to the new prefix by the copy engine (:mod:`egopool.edit.copy`) with
  its N kept, its ``stats.json`` and ``tasks.jsonl`` as they are, its other objects (``.egopool/retired/``
  tombstones: a deleted N stays retired under the new name, O37) copied; ``info.json`` last; then every object of
  the old prefix is deleted, unless it holds one the copy did not take (published or deleted meanwhile): then it is
  left whole and the run says so (E38). A task with a publish claim or another edit's journal is not renamed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..write.checks import check_task_name
from ..errors import LockError, OperationError
from ..meta.stats import read_stats
from .._holders import journal_doc
from ..ops._store_task import StoreTask, json_bytes, refuse_edited
from ..ops.task_store import pause
from ..storage import Store, open_store
from .copy import CopyPlan, EditReport, Pick, open_target, run_plan, target_keys
from .hold import held_target, versions_of
from .journal import JOURNAL, EditJournal, edit_lock, other_edit, read_journal
from .registered import rename_registered
from .source import location, open_source

__all__ = ["rename_task"]


def _objects(store: Store) -> list[str]:
    """Every object key of a bucket task; not a copy tool's empty "folder" markers (``data/``, ``data``)."""
    keys = [m.key for m in store.list()]
    prefixes = {k.rsplit("/", i)[0] for k in keys for i in range(1, k.count("/") + 1)}
    return [k for k in keys if k and not k.endswith("/") and k not in prefixes]


def _bucket_plan(src_uri: str, new_uri: str) -> CopyPlan:
    s = open_source(src_uri)
    picks = [Pick(0, n, n, {}, "", {k: [ext, key] for k, (ext, key) in ref.videos.items()},
                  versions_of(s.t.store, ref)) for n, ref in sorted(s.episodes.items())]
    tasks = s.tasks()
    same = {str(int(r.get("task_index") or 0)): int(r.get("task_index") or 0) for r in tasks}
    for p in picks:
        p.task_index = same or {"0": 0}
    episode_keys = {k for ref in s.episodes.values() for k in (ref.data, ref.row, *(v[1] for v in ref.videos.values()))}
    fixed = {"meta/info.json", "meta/stats.json", "meta/tasks.jsonl", JOURNAL}
    listed = _objects(s.t.store)
    extra = sorted(k for k in listed if k not in episode_keys and k not in fixed)
    info = {**s.info, "task_name": new_uri.rsplit("/", 1)[-1]}
    versions = {}  # the old task's other objects as read (E72): held and checked before the commit
    for key in sorted(fixed - {JOURNAL}) + extra:
        meta = s.t.store.head(key)
        if meta is not None and meta.version is not None:
            versions[key] = meta.version
    return CopyPlan("rename", {"source": s.t.uri}, new_uri, [s.t.uri], picks, [], info, read_stats(s.t.root),
                    tasks, True, extra, versions=versions)


def _copied(plan: CopyPlan) -> set[str]:
    """The old task's keys the plan copied (its episodes' data, rows and videos, the extra objects, meta files)."""
    from ..layout import TaskLayout

    layout = TaskLayout.from_info(plan.sources[0], plan.info)
    keys = {"meta/info.json", "meta/stats.json", "meta/tasks.jsonl", JOURNAL, *plan.extra}
    for p in plan.picks:
        keys |= {layout.data_key(p.index), layout.episodes_key(p.index), *(v[1] for v in p.videos.values())}
    return keys


def _delete_old(plan: CopyPlan) -> dict[str, list[int]]:
    """Delete the old task once copied; left whole (nothing deleted, ``{}``) when it holds an object the plan did not
    copy: an episode published, or a tombstone a delete left, during the copy (E38)."""
    store = open_store(plan.sources[0])
    keys = _objects(store)
    if [k for k in keys if k not in _copied(plan)]:
        got = store.get(JOURNAL)  # left whole: this rename's hold of it (E72) goes
        if got is not None and held_target(journal_doc(got[0])) == plan.target:
            store.delete([JOURNAL])
        return {}
    store.delete(sorted(keys, key=lambda k: (k == "meta/info.json", k)))  # info.json last: a task to the end
    return {plan.sources[0]: sorted(p.index for p in plan.picks)}


def _finished(report: EditReport, src: str) -> EditReport:
    """Refuse in one line when the old task was left (:func:`_delete_old`): the copy is complete under the new
    name, the old task changed meanwhile."""
    if src not in report.deleted:
        raise OperationError(f"the task was copied to {report.target}, but {src} changed during the copy (an episode "
                             f"published or deleted there), so it was left in place", path=src,
                             hint=f"compare the two (`egopool ls`); `egopool edit merge {src} --into {report.target}` "
                                  f"brings new episodes over; then delete the old task")
    return report


def _rename_dir(old: Path, new: Path, dry_run: bool) -> EditReport:
    report = EditReport("rename", str(new), dry_run)
    report.changes = [f"{'would rename' if dry_run else 'renamed'} {old} -> {new}",
                      f"{'would set' if dry_run else 'set'} task_name {new.name!r} in meta/info.json"]
    report.writes = ["meta/info.json"]  # its task_name (E79); the rest is moved by rename(2), not written
    pending_new = new.exists() and (new / JOURNAL).exists()
    if not pending_new:
        if old.is_symlink():  # rename(2) would rename the link, not the task (E91)
            raise OperationError(f"{old} is a symbolic link to {os.path.realpath(old)}; rename the task itself",
                                 hint=f"egopool edit rename {os.path.realpath(old)} {new.name}, then point the link "
                                      "at the new name (ln -sfn); nothing was changed")
        if not old.is_dir():
            raise OperationError(f"{old}: no such task directory", hint="give the task's directory")
        if new.exists():
            raise OperationError(f"{new} exists already", hint="choose a new name")
        if old.parent.resolve() != new.parent.resolve() and os.stat(old).st_dev != os.stat(new.parent).st_dev:
            raise OperationError(f"{new.parent} is on another file system than {old}",
                                 hint="rename within one file system, or `edit split --episodes 1-N --move`")
        open_source(old)  # a task, readable
        if dry_run:
            return report
        t = StoreTask(old, open_store(str(old)), old)
        args = {"source": str(old), "target": str(new)}
        with edit_lock(t, dry_run=False):  # as every in-place edit: no live recording, another edit named (E62)
            got = read_journal(t)
            if got is None:
                EditJournal.create(t, {"op": "rename", "args": args, "state": "renaming"})
                pause("edit", "journal")
            elif got[0].get("op") != "rename" or got[0].get("args") != args:
                raise other_edit(t, got[0])
            os.rename(old, new)
        pause("edit", "renamed")
    t = StoreTask(new, open_store(str(new)), new)
    with edit_lock(t, dry_run=False):
        got = read_journal(t)
        info = t.get_json("meta/info.json", "info.json")
        if info is not None and info[0].get("task_name") != new.name:
            t.store.put("meta/info.json", json_bytes({**info[0], "task_name": new.name}))
        rename_registered(old, new)  # pipeline.db: its rows under the new name (E50)
        if got is not None:
            t.store.delete([JOURNAL])
    report.resumed = pending_new
    return report


def rename_task(source: str, new_name: str, *, dry_run: bool = False) -> EditReport:
    """Rename the task at ``source`` to ``new_name`` (a name: the new task is its sibling), module docstring.

    Raises
    ------
    OperationError
        The new location exists; another file system (a directory).
    EgopoolError
        ``new_name`` is no task name (:func:`egopool.write.checks.check_task_name`: the writer's rule).
    LockError
        Another edit or writer holds the task.
    """
    check_task_name(new_name)  # the writer's rule (E36)
    src = location(source)
    new = src.rsplit("/", 1)[0] + "/" + new_name
    if new == src:
        raise OperationError(f"the task is already called {new_name!r}", path=src,
                             hint="give a different new name; nothing was written")
    if not src.startswith("s3://"):
        return _rename_dir(Path(src), Path(new), dry_run)
    tgt = open_target(new)
    report = EditReport("rename", tgt.uri, dry_run)
    pending = read_journal(tgt)
    if pending is not None and not dry_run:
        return _finished(run_plan(tgt, None, report, move=_delete_old), src)
    if not dry_run:
        _refuse_busy(src)
    plan = _bucket_plan(src, tgt.uri)
    report.plan = plan
    report.changes = [f"{'would set' if dry_run else 'set'} task_name {new_name!r} in meta/info.json"]
    if dry_run:
        report.writes = target_keys(plan)
        report.deleted = {src: [p.index for p in plan.picks]}
        return report
    return _finished(run_plan(tgt, plan, report, move=_delete_old), src)


def _refuse_busy(src: str) -> None:
    """A bucket task under another edit, or with a publish or delete in progress, is not renamed (E38)."""
    from .append import _claimed

    old = open_source(src).t
    refuse_edited(old.store, old.uri, "nothing was written")
    busy = sorted(_claimed(old))
    if busy:
        raise LockError(f"episode(s) {', '.join(map(str, busy))} of this task are being published or changed "
                        f"(their claims are under .egopool-server/journals/)", path=old.uri,
                        hint="rename it when the upload or command finished; nothing was written")
