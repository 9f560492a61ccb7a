"""``egopool edit merge SRC... --into TARGET``: tasks with the same declarations into one new task (docs/decisions.md
E1, E3, E4).

Order: the sources as given, each by ascending N; the target numbers them 1, 2, ... (N of the sources are not kept
as N, they are kept as origins in ``meta/edit_origins.jsonl``). An episode whose content digest (its data without
``episode_index``, and its videos' bytes) equals one already taken is skipped and reported. ``stats.json`` is the
sources' accumulators merged (file_format.md §4, Chan's merge), minus the skipped duplicates' own blocks (count,
sum and sum of squares subtracted; min and max are unchanged, the copy that stays holds the same values); a source
whose ``stats.json`` has no ``count`` (v1.1.0) contributes the blocks of its episodes instead. ``tasks.jsonl`` is
the union of the sources' task strings, in order of first appearance (``task_index`` remapped in data and rows).
``info.json`` is the first source's, the others' merged in (calibration per device: the latest; every episode
keeps its own in its row), ``task_name`` the target's, ``total_episodes`` the number of episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import OperationError
from ..meta.info import merge_info
from ..meta.stats import ACTION_BLOCK, StatsBlock, needs_recalc, read_stats
from ..ops.task_store import pause
from ..storage import ObjectPath
from .copy import OP, CopyPlan, EditReport, Pick, open_target, plan_versions, run_plan, target_keys
from .hold import SourceHold, holding, versions_of
from .journal import other_edit, read_journal
from ..write.checks import check_task_name
from .source import (SourceTask, first_difference, location, open_source, refuse_busy_source, refuse_nested,
                     same_task, subtract_block)

__all__ = ["merge_new", "plan_merge"]


def _blocks(doc: dict[str, Any]) -> dict[str, StatsBlock]:
    return {k: StatsBlock.from_dict(v) for k, v in doc.items() if k != "action" and isinstance(v, dict)}


def _fold(a: dict[str, StatsBlock], b: dict[str, StatsBlock]) -> dict[str, StatsBlock]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out[k].merge(v) if k in out else v
    return out


def checked_sources(sources: Sequence[str | ObjectPath], target: str | ObjectPath, *, held: bool = False
                    ) -> list[SourceTask]:
    """The sources of a merge into the new task ``target``, opened and checked (:func:`plan_merge`'s refusals but
    the reading of episodes); ``held``: this run holds them already (E68), their marker and lock are its own."""
    if len(sources) < 2:
        raise OperationError(f"edit merge into the new task {target} needs two or more source tasks",
                             hint="egopool edit merge A B --into NEW, or A --into an existing task")
    opened = [open_source(s) for s in sources]
    tgt_uri = str(target).rstrip("/")
    if not held:
        for o in opened:
            refuse_busy_source(o, tgt_uri)  # a killed run's hold of it for this target: taken over (E92)
    uris = [s.t.uri for s in opened]
    real = [same_task(u) for u in uris]  # a symlink to a task is that task (E64)
    if len(set(real)) != len(real) or same_task(tgt_uri) in real:
        raise OperationError(f"a task is named twice among {', '.join(uris + [tgt_uri])}",
                             hint="name each source once and a new target")
    refuse_nested(uris, tgt_uri)
    check_task_name(tgt_uri.rsplit("/", 1)[-1])  # the new task's name: the writer's rule (E36)
    for other in opened[1:]:
        diff = first_difference(opened[0], other)
        if diff is not None:
            raise OperationError(f"cannot merge: {diff}; nothing was written",
                                 hint="merge only tasks recorded with the same declarations")
    return opened


def plan_merge(sources: Sequence[str | ObjectPath], target: str | ObjectPath, *, held: bool = False) -> CopyPlan:
    """The plan of a merge (module docstring); reads every source episode once (digests), writes nothing.
    ``held``: the run holds the sources already (:func:`checked_sources`).

    Raises
    ------
    OperationError
        Fewer than two sources, a source named twice or as the target, or declarations that differ: one line
        naming the first difference (``fps is 30.0 in A and 29.97 in B``).
    FormatError, ObjectStoreError
        A source is not a task / cannot be read.
    """
    opened = checked_sources(sources, target, held=held)
    uris = [s.t.uri for s in opened]
    tgt_uri = str(target).rstrip("/")
    tasks, maps = unite_tasks([], opened)
    picks, skipped, stats = collect(opened, maps, {}, 1)
    info: dict[str, Any] = {}
    for s in opened:
        info = merge_info(info, s.info)
    name = tgt_uri.rsplit("/", 1)[-1]
    info.update(task_name=name, total_episodes=len(picks))
    doc = {k: b.to_dict() for k, b in stats.items()}
    doc["action"] = dict(ACTION_BLOCK)
    return CopyPlan("merge", {"sources": uris}, tgt_uri, uris, picks, skipped, info, doc, tasks)


def merge_new(sources: Sequence[str | ObjectPath], target: str | ObjectPath, *,
              dry_run: bool = False) -> EditReport:
    """Merge ``sources`` into the new task ``target`` (a directory or ``s3://bucket/prefix/task``), journaled
    (:mod:`egopool.edit.copy`). A target holding an interrupted merge of the same sources is finished.

    Returns
    -------
    EditReport
        Every episode's source, N and new N; the skipped duplicates; every key written in the target.

    Raises
    ------
    OperationError
        Bad sources (:func:`plan_merge`), a target that is a task already, an unfinished other edit there.
    LockError
        Another edit of the target is under way.
    """
    tgt = open_target(target)
    tgt_uri = tgt.uri
    report = EditReport("merge", tgt_uri, dry_run)
    pending = read_journal(tgt)
    if pending is not None and not dry_run:
        if pending[0].get("args") == {"sources": [location(s) for s in sources]}:
            return run_plan(tgt, None, report)  # finish it from its journal (the sources may have changed since)
        raise other_edit(tgt, pending[0])
    if dry_run:
        plan = plan_merge(sources, tgt_uri)
        report.plan = plan
        report.writes = target_keys(plan)
        return report
    # the sources held before the plan reads them (E68): an edit of a source meanwhile is refused, not missed
    hold = SourceHold("merge", tgt_uri, [s.t.uri for s in checked_sources(sources, tgt_uri)], [])
    with holding(hold):
        pause(OP, "held")  # the crash tests' seam: held, not planned yet
        plan = plan_merge(sources, tgt_uri, held=True)
        report.plan = plan
        hold.versions = plan_versions(plan)
        return run_plan(tgt, plan, report, held=hold)


def unite_tasks(existing: list[dict[str, Any]], opened: Sequence[SourceTask]
                ) -> tuple[list[dict[str, Any]], list[dict[str, int]]]:
    """``tasks.jsonl`` rows united: ``existing`` (a target's, indices kept) then each source's strings not seen yet,
    numbered on from the highest index; and per source its ``task_index`` map (text key -> united index)."""
    index: dict[str, int] = {}
    for r in existing:
        index.setdefault(str(r.get("task")), int(r.get("task_index") or 0))
    maps: list[dict[str, int]] = []
    for s in opened:
        m: dict[str, int] = {}
        for row in s.tasks():
            text = str(row.get("task"))
            if text not in index:
                index[text] = max(index.values(), default=-1) + 1
            m[str(int(row.get("task_index") or 0))] = index[text]
        maps.append(m or {"0": 0})
    kept = [dict(r) for r in existing]
    have = {str(r.get("task")) for r in existing}
    return kept + [{"task_index": k, "task": t} for t, k in index.items() if t not in have], maps


def collect(opened: Sequence[SourceTask], maps: list[dict[str, int]], seen: dict[str, int], start: int
            ) -> tuple[list[Pick], list[dict[str, Any]], dict[str, StatsBlock]]:
    """The episodes of ``opened`` (in order, each by ascending N) numbered from ``start``, those whose content
    digest is in ``seen`` (digest -> N it is kept as; updated) skipped, and the stats blocks they add: each
    source's accumulators minus its skipped episodes' blocks (a v1.1.0 source: its taken episodes' blocks).
    Reads every source episode once."""
    picks: list[Pick] = []
    skipped: list[dict[str, Any]] = []
    stats: dict[str, StatsBlock] = {}
    for i, s in enumerate(opened):
        stored = read_stats(s.t.root)
        legacy = not stored or needs_recalc(stored)
        own = {} if legacy else _blocks(stored)
        versions = {n: versions_of(s.t.store, ref) for n, ref in s.episodes.items()}  # before reading (E45)
        for n in sorted(s.episodes):
            ref = s.episodes[n]
            table = s.table(ref)
            digest = s.digest(ref, table)
            if digest in seen:
                skipped.append({"source": s.t.uri, "index": n, "same_as": seen[digest], "digest": digest})
                if not legacy:
                    for col, block in s.blocks(table).items():
                        if col in own:
                            left = subtract_block(own[col], block)
                            if left is None:
                                del own[col]
                            else:
                                own[col] = left
                continue
            new = start + len(picks)
            seen[digest] = new
            picks.append(Pick(i, n, new, maps[i], digest,
                              {k: [ext, key] for k, (ext, key) in ref.videos.items()}, versions[n]))
            if legacy:
                own = _fold(own, s.blocks(table))
        stats = _fold(stats, own)
    return picks, skipped, stats
