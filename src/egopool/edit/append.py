"""``egopool edit merge SRC... --into EXISTING``: episodes of other tasks appended to a task that exists
(docs/decisions.md E14-E18).

The episodes are numbered after the highest N the target ever used: its committed and uncommitted episodes,
``total_episodes`` (a delete's watermark), the tombstones ``.egopool/retired/N`` of deleted N (both backends,
O37), a directory's ``pipeline.db`` watermark, and the claims of publishes in progress. No N is reused.
Declarations must equal the target's (:func:`~egopool.edit.source.first_difference`, one line naming the first
difference); an episode whose content digest equals one of the target's or of an earlier source's is skipped and
reported; ``tasks.jsonl`` keeps the target's lines (and their ``task_index``) and appends the sources' new
strings; ``stats.json`` gets the sources' accumulators (minus the skipped duplicates) merged in by
compare-and-swap; ``meta/edit_origins.jsonl`` gets one line per new N.

Steps (the crash seams ``EGOPOOL_OPS_PAUSE=edit:<step>``), the target a valid task after each:

1. ``journal``: the journal ``meta/.edit.json`` (the whole plan) is created in the target, then every new N is
   claimed with the publish claim (``.egopool-server/journals/<sha1(task)>/<N>.json`` beside the task,
   ``PutMode.CREATE``, ``op: edit``): a server or ``sync`` publishing into the task takes other N, ``ls`` and
   ``validate`` see the episodes being copied as work in progress, not as damage;
2. ``declared``: ``tasks.jsonl`` (the union) and ``info.json`` (merged by compare-and-swap, ``total_episodes``
   raised to the last new N);
3. ``episode`` (after the first): each episode's data parquet, videos, then its row (its commit, as a publish);
4. ``meta``: ``stats.json`` by compare-and-swap. The journal records the document before and after this
   run's merge before writing it, so a re-run tells "done" from "not done"; when it cannot (another writer
   merged on top meanwhile) it rebuilds ``stats.json`` from the data;
5. ``committed``: the origins, then the claims are released; the journal is removed.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import LockError, OperationError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import merge_info
from ..meta.retired import highest_retired
from ..meta.stats import StatsBlock, merge_stats, needs_recalc, recalc_stats
from ..meta.tasks import read_tasks, tasks_jsonl
from ..ops._store_task import StoreTask, json_bytes
from ..ops.task_store import claim_key, pause
from ..publish import journals as publish_journals
from ..publish.journal import remove as remove_claims
from ..storage import ObjectPath, PreconditionFailed, PutMode, Store, open_store
from .copy import ORIGINS, CopyPlan, EditReport, _episode_keys, _origins, copy_picks, run_plan, target_keys
from .hold import SourceHold
from .journal import EditJournal, other_edit, read_journal
from .registered import record_copied
from .merge import collect, unite_tasks
from .source import SourceTask, first_difference, location, open_source, refuse_busy_source, refuse_nested, \
    same_task

__all__ = ["OP_INTO", "highest_used", "merge_into", "plan_merge_into"]

#: the journal's ``op`` of a merge into an existing task
OP_INTO = "merge-into"
OP = "edit"


def _parent(t: StoreTask) -> tuple[Store, str]:
    """The store holding the task (its publish claims live there, O12) and the task's name in it."""
    return open_store(str(t.root.parent)), t.root.name


def _claimed(t: StoreTask) -> dict[int, dict[str, Any]]:
    """N -> document of every publish claim / journal of the task (a server's, sync's, a command's)."""
    parent, name = _parent(t)
    if isinstance(t.root, Path) and not (t.root.parent / ".egopool-server").is_dir():
        return {}
    return {int(doc["index"]): doc for _, doc in publish_journals(parent, name)}


def highest_used(target: SourceTask) -> int:
    """The highest N the task ever used: every episode group (committed or not), ``total_episodes``, the
    tombstones of deleted N, a directory's registry watermark, the N under a publish claim (0: none)."""
    t = target.t
    used = [g.index for g in list_task_episodes(t.root, target.layout)]
    used += [int(target.info.get("total_episodes") or 0), highest_retired(t.store), *_claimed(t)]
    if t.local is not None:
        from ..registry import Registry, registry_path, task_key

        if registry_path(t.local).is_file():
            used.append(Registry.for_task(t.local).watermark(task_key(t.local)))
    return max(used, default=0)


def fingerprint(t: StoreTask) -> list[list[str]]:
    """``[key, version]`` of every object of the task but dot-named ones (its journal, a directory's lock file):
    what a plan of a merge into it was made from (E71). Any episode committed, deleted or retired, any
    ``info.json`` change alters it."""
    return sorted([m.key, m.version] for m in t.store.list() if not m.key.rsplit("/", 1)[-1].startswith("."))


def plan_merge_into(sources: Sequence[str | ObjectPath], target: SourceTask, *, held: bool = False) -> CopyPlan:
    """The plan of appending ``sources`` to the task ``target`` (module docstring); reads every episode of the
    target and the sources once (digests), writes nothing. ``held``: the sources are held by this run already
    (a re-plan, E71): their hold is not refused as a busy source.

    Raises
    ------
    OperationError
        No source, a task named twice or as the target, declarations that differ from the target's (one line
        naming the first difference, ``fps is 30.0 in A and 29.97 in B``).
    FormatError, ObjectStoreError
        A source is not a task / cannot be read.
    """
    if not sources:
        raise OperationError("edit merge needs a source task", hint="egopool edit merge A --into EXISTING")
    opened = [open_source(s) for s in sources]
    for o in opened:
        if not held:
            refuse_busy_source(o)
    uris = [s.t.uri for s in opened]
    real = [same_task(u) for u in uris]  # a symlink to a task is that task (E64)
    if same_task(target.t.uri) in real:
        raise OperationError(f"cannot merge {target.t.uri} into itself"
                             + ("" if target.t.uri in uris else f" ({uris[real.index(same_task(target.t.uri))]} "
                                                                 "is the same task)"),
                             hint="name other tasks as sources")
    if len(set(real)) != len(real):
        raise OperationError(f"a task is named twice among {', '.join(uris + [target.t.uri])}",
                             hint="name each source once, and not the target")
    refuse_nested(uris, target.t.uri)
    for other in opened:
        diff = first_difference(target, other)
        if diff is not None:
            raise OperationError(f"cannot merge into {target.t.uri}: {diff}; nothing was written",
                                 hint="merge only tasks recorded with the same declarations")
    tasks, maps = unite_tasks(target.tasks(), opened)
    seen = {target.digest(ref, target.table(ref)): n for n, ref in sorted(target.episodes.items())}
    picks, skipped, stats = collect(opened, maps, seen, highest_used(target) + 1)
    info: dict[str, Any] = dict(target.info)
    for s in opened:
        info = merge_info(info, s.info)
    info.update(task_name=target.info.get("task_name", target.t.root.name),
                total_episodes=max([int(target.info.get("total_episodes") or 0)] + [p.new_index for p in picks]))
    return CopyPlan(OP_INTO, {"sources": uris}, target.t.uri, uris, picks, skipped, info,
                    {k: b.to_dict() for k, b in stats.items()}, tasks, into=True)


def merge_into(sources: Sequence[str | ObjectPath], tgt: StoreTask, *, dry_run: bool = False) -> EditReport:
    """Append ``sources`` to the existing task ``tgt`` (module docstring), or finish an interrupted such merge of
    the same sources.

    Returns
    -------
    EditReport
        Every episode's source, N and new N; the skipped duplicates; every key written.

    Raises
    ------
    OperationError
        Bad sources or declarations (:func:`plan_merge_into`); another edit's journal in the target.
    LockError
        Another edit, a recorder or a server holds the task (a directory's lock; a bucket's publish claims).
    """
    report = EditReport("merge", tgt.uri, dry_run)
    pending = read_journal(tgt)
    if pending is not None and not dry_run:
        if pending[0].get("op") == OP_INTO and pending[0].get("args") == {"sources": [location(s) for s in sources]}:
            return run_plan(tgt, None, report, into=execute_into)
        raise other_edit(tgt, pending[0])
    target = open_source(tgt.root)
    busy = sorted(_claimed(tgt))
    if busy and not dry_run:
        raise LockError(f"episode(s) {', '.join(map(str, busy))} of this task are being published or changed "
                        f"(their claims are under .egopool-server/journals/)", path=tgt.uri,
                        hint="merge when the upload or command finished; nothing was written")
    planned_on = fingerprint(tgt)  # before the plan reads the target (E71)
    plan = plan_merge_into(sources, target)
    report.plan = plan
    if not plan.picks:  # every episode is in the target already: nothing changes, no journal, no claim (E32)
        return _nothing_to_do(report, plan)
    if dry_run:
        report.writes = [k for k in target_keys(plan) if k not in _unchanged(plan, target.tasks())]
        return report
    pause(OP, "planned")

    def run(t: StoreTask, p: CopyPlan, journal: EditJournal, hold: SourceHold | None) -> None:
        execute_into(t, p, journal, hold, planned_on=planned_on)

    before = target.tasks()
    report = run_plan(tgt, plan, report, into=run)
    if not plan.picks:  # re-planned once this run owned the target: another merge brought them in meanwhile
        report.writes = []
        return _nothing_to_do(report, plan)
    report.writes = [k for k in target_keys(plan) if k not in _unchanged(plan, before)]
    return report


def _unchanged(plan: CopyPlan, tasks: list[dict[str, Any]]) -> list[str]:
    return ["meta/tasks.jsonl"] if plan.tasks == tasks else []


def _nothing_to_do(report: EditReport, plan: CopyPlan) -> EditReport:
    report.changes.append(f"nothing to do: every episode of {', '.join(plan.sources)} is in {report.target} already")
    return report


def _replan(tgt: StoreTask, plan: CopyPlan, journal: EditJournal, hold: SourceHold | None) -> bool:
    """The target changed between the plan and this run's ownership of its journal (another merge, a publish, a
    delete finished meanwhile, E71): the plan is made again from the target as it is now, in place (the report
    shows it), recorded in the journal, and the hold checks the new plan's versions. False: nothing is left to
    copy (the journal is removed)."""
    new = plan_merge_into(plan.sources, open_source(tgt.root), held=True)
    plan.picks, plan.skipped, plan.info, plan.stats, plan.tasks = new.picks, new.skipped, new.info, new.stats, \
        new.tasks
    if hold is not None:
        hold.versions = [(p.source, p.versions) for p in plan.picks]
        hold.verify()
    if not plan.picks:
        journal.remove()
        return False
    journal.write(**plan.to_dict())
    return True


def _claim_doc(name: str, new_index: int, token: str, keys: list[str], row: str) -> dict[str, Any]:
    import time

    return {"task": name, "index": new_index, "op": OP, "edit": token, "owner": f"edit-{token}",
            "created_at": time.time(), "files": [f"{name}/{k}" for k in keys], "commit": f"{name}/{row}"}


def _claim_all(tgt: StoreTask, plan: CopyPlan, journal: EditJournal, layout: TaskLayout) -> None:
    """Claim every new N (step 1). A claim held by another writer: this run's claims are released, the journal
    removed, and the merge refused (nothing else was written)."""
    parent, name = _parent(tgt)
    token = str(journal.doc.get("token") or "")

    for p in plan.picks:
        key = claim_key(name, p.new_index)
        keys = _episode_keys(layout, p.new_index, p.videos)
        doc = _claim_doc(name, p.new_index, token, keys, keys[-1])
        try:
            parent.put(key, json_bytes(doc, indent=None), mode=PutMode.CREATE)
        except PreconditionFailed:
            got = parent.get(key)
            held = json.loads(got[0].decode("utf-8")) if got is not None else {}
            if isinstance(held, dict) and held.get("edit") == token:
                continue  # this edit's own claim (a re-run)
            if journal.doc.get("state") == "claiming":
                _release(tgt, plan, token)
                if journal.doc.get("made_claims_dir"):
                    _drop_claims_dir(tgt)
                journal.remove()
                raise LockError(f"episode {p.new_index} of this task was claimed by another writer meanwhile "
                                f"({parent.url(key)})", path=tgt.uri,
                                hint="run the merge again when the upload finished; nothing was written") from None
            raise LockError(f"episode {p.new_index} of this task is held by another writer ({parent.url(key)})",
                            path=tgt.uri, hint="inspect that claim; `egopool edit resume TASK` finishes the merge "
                                               "once it is gone") from None


def _release(tgt: StoreTask, plan: CopyPlan, token: str) -> None:
    parent, name = _parent(tgt)
    mine = []
    for p in plan.picks:
        key = claim_key(name, p.new_index)
        got = parent.get(key)
        if got is not None and json.loads(got[0].decode("utf-8")).get("edit") == token:
            mine.append(key)
    if mine:
        remove_claims(parent, mine)


def _drop_claims_dir(tgt: StoreTask) -> None:
    """Remove ``<parent>/.egopool-server/journals`` and ``.egopool-server`` of a directory when empty (made by
    this edit: a plain folder of tasks is left as it was)."""
    if not isinstance(tgt.root, Path):
        return
    top = tgt.root.parent / ".egopool-server"
    for d in (top / "journals", top):
        try:
            d.rmdir()
        except OSError:
            return


def _update_info(tgt: StoreTask, plan: CopyPlan) -> None:
    for _ in range(50):
        got = tgt.get_json("meta/info.json", "info.json")
        if got is None:
            raise OperationError("meta/info.json vanished during the merge", path=tgt.uri, hint="restore it")
        new = merge_info(got[0], {**plan.info, "task_name": got[0].get("task_name", plan.info.get("task_name"))})
        if new == got[0]:
            return
        try:
            tgt.store.put("meta/info.json", json_bytes(new), mode=PutMode.UPDATE, version=got[1])
            return
        except PreconditionFailed:
            continue
    raise LockError("meta/info.json kept changing under the merge", path=tgt.uri,
                    hint="`egopool edit resume TASK` finishes it")


def _delta(plan: CopyPlan) -> dict[str, StatsBlock]:
    return {k: StatsBlock.from_dict(v) for k, v in plan.stats.items() if k != "action" and isinstance(v, dict)}


def _merge_stats(tgt: StoreTask, plan: CopyPlan, journal: EditJournal) -> None:
    """Step 4 (module docstring): the sources' accumulators into ``stats.json``, exactly once."""
    before, after = journal.doc.get("stats_before"), journal.doc.get("stats_after")
    got = tgt.get_json("meta/stats.json", "stats.json")
    if after is not None and got is not None and got[0] == after:
        return  # this run's merge is in
    if after is not None and (got is None or got[0] != before):  # cannot tell: rebuilt from the data
        tgt.store.put("meta/stats.json", json_bytes(recalc_stats(tgt.root), indent=None))
        return
    for _ in range(50):
        doc = got[0] if got is not None else {}
        if doc and needs_recalc(doc):
            tgt.store.put("meta/stats.json", json_bytes(recalc_stats(tgt.root), indent=None))
            return
        new = merge_stats(doc, _delta(plan))
        journal.write(stats_before=doc, stats_after=new)
        try:
            if got is None:
                tgt.store.put("meta/stats.json", json_bytes(new, indent=None), mode=PutMode.CREATE)
            else:
                tgt.store.put("meta/stats.json", json_bytes(new, indent=None), mode=PutMode.UPDATE, version=got[1])
            return
        except PreconditionFailed:
            got = tgt.get_json("meta/stats.json", "stats.json")
    raise LockError("meta/stats.json kept changing under the merge", path=tgt.uri,
                    hint="`egopool edit resume TASK` finishes it")


def _append_origins(tgt: StoreTask, plan: CopyPlan) -> None:
    got = tgt.store.get(ORIGINS)
    old = got[0].decode("utf-8") if got is not None else ""
    have = {json.loads(line).get("episode_index") for line in old.splitlines() if line.strip()}
    lines = [line for line in _origins(plan).decode("utf-8").splitlines()
             if line.strip() and json.loads(line)["episode_index"] not in have]
    if lines:
        body = (old if not old or old.endswith("\n") else old + "\n") + "\n".join(lines) + "\n"
        tgt.store.put(ORIGINS, body.encode("utf-8"))


def execute_into(tgt: StoreTask, plan: CopyPlan, journal: EditJournal,
                 hold: SourceHold | None = None, *, planned_on: list[list[str]] | None = None) -> None:
    """Run a merge into an existing task from the step its journal records (module docstring). ``planned_on``: the
    target's :func:`fingerprint` the new plan was made from; when the target differs once this run owns its
    journal, the plan is made again (E71: two merges of overlapping sources at once add each episode once).

    Raises
    ------
    LockError
        A new N was claimed by another writer before this run claimed it (nothing written; the journal removed).
    OperationError, StorageError
        A source object is gone or a store failed: the journal (and the claims) stay; a re-run finishes it.
    """
    layout = TaskLayout.from_info(tgt.root, plan.info)
    if not journal.doc.get("token"):
        journal.write(token=uuid.uuid4().hex)
    state = journal.doc.get("state")
    if state == "copying":  # again, now that the journal is there: a delete or publish that claimed before (E30)
        busy = sorted(_claimed(tgt))
        if busy:
            journal.remove()
            raise LockError(f"episode(s) {', '.join(map(str, busy))} of this task are being published or changed "
                            f"(their claims are under .egopool-server/journals/)", path=tgt.uri,
                            hint="merge when the upload or command finished; nothing was written")
        if planned_on is not None and fingerprint(tgt) != planned_on and not _replan(tgt, plan, journal, hold):
            return
    if state in ("copying", "claiming"):
        if state == "copying":  # a directory's claims folder this edit makes is removed with its claims
            made = isinstance(tgt.root, Path) and not (tgt.root.parent / ".egopool-server").exists()
            journal.write(made_claims_dir=made)
        journal.write(state="claiming")
        _claim_all(tgt, plan, journal, layout)
        journal.write(state="declaring")
        pause(OP, "journal")
        state = "declaring"
    if state == "declaring":
        if read_tasks(tgt.root) != plan.tasks:  # the sources' strings all the target's: left as it is
            tgt.store.put("meta/tasks.jsonl", tasks_jsonl(plan.tasks))
        _update_info(tgt, plan)
        journal.write(state="episodes")
        pause(OP, "declared")
        state = "episodes"
    if state == "episodes":
        copy_picks(plan, tgt, layout)
        if hold is not None:
            hold.verify()  # the sources as planned (E45); then held no longer
            hold.release()
        journal.write(state="stats")
        state = "stats"
    if state == "stats":
        _merge_stats(tgt, plan, journal)
        journal.write(state="origins")
        pause(OP, "meta")
        state = "origins"
    _append_origins(tgt, plan)
    _release(tgt, plan, str(journal.doc.get("token")))
    if journal.doc.get("made_claims_dir"):
        _drop_claims_dir(tgt)
    record_copied(tgt, [(p.new_index, _episode_keys(layout, p.new_index, p.videos)) for p in plan.picks])
    journal.write(state="committed")
    pause(OP, "committed")
    journal.remove()
