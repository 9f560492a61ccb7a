"""``egopool edit split SRC --into TARGET`` (docs/decisions.md E5): chosen episodes of a task into a new task.

The episodes are chosen by N (``--episodes 3 5 9``) and/or a filter on their ``meta/episodes`` row
(``--where "length>=300"``, ``duration_sec``, ``created_at``, ``task_index``: one comparison each, all must hold).
They are copied (or moved: deleted from the source afterwards by ``egopool delete``'s journaled delete, so their
N stay retired there) in ascending N and numbered 1, 2, ... in the target. Data, rows and videos keep every
value (timestamps are never recomputed from N or fps: a 29.97 fps episode keeps each frame where it was);
``stats.json`` is rebuilt from the chosen episodes' blocks by the accumulator merge (file_format.md §4);
``tasks.jsonl`` is the source's.
"""

from __future__ import annotations

import operator
import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import EpisodeNotFoundError, OperationError
from ..meta.episodes import read_episode_row
from ..meta.stats import ACTION_BLOCK, tree_merge
from ..ops.task_store import pause
from ..storage import ObjectPath
from .copy import OP, CopyPlan, EditReport, Pick, open_target, plan_versions, run_plan, target_keys
from .hold import SourceHold, holding, versions_of
from .journal import other_edit, read_journal
from ..write.checks import check_task_name
from .source import SourceTask, location, open_source, refuse_busy_source, refuse_nested, same_task

__all__ = ["parse_where", "plan_split", "split_task"]

_OPS: dict[str, Callable[[Any, Any], bool]] = {">=": operator.ge, "<=": operator.le, "!=": operator.ne,
                                               "==": operator.eq, ">": operator.gt, "<": operator.lt,
                                               "=": operator.eq}
_FIELDS = ("length", "duration_sec", "created_at", "task_index", "episode_index")
_WHERE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|!=|==|>|<|=)\s*(-?[0-9.eE+]+)\s*$")


def parse_where(text: str) -> tuple[str, str, float]:
    """``"length>=300"`` -> ``("length", ">=", 300.0)``.

    Raises
    ------
    OperationError
        Not ``FIELD OP NUMBER`` with a row field of :data:`_FIELDS` (one line naming the accepted form).
    """
    m = _WHERE.match(text)
    if m is None or m.group(1) not in _FIELDS:
        raise OperationError(f"--where {text!r}: write FIELD OP NUMBER, FIELD one of {', '.join(_FIELDS)}, "
                             "OP one of >= <= > < == !=", hint='e.g. --where "length>=300"')
    try:
        value = float(m.group(3))
    except ValueError:
        raise OperationError(f"--where {text!r}: {m.group(3)!r} is not a number", hint='e.g. --where "length>=300"') \
            from None
    return m.group(1), m.group(2), value


def _chosen(s: SourceTask, indices: Sequence[int], where: Sequence[str]) -> list[int]:
    for n in indices:
        if n not in s.episodes:
            raise EpisodeNotFoundError(s.t.uri, n)
    conds = [parse_where(w) for w in where]
    pool = sorted(set(indices)) if indices else sorted(s.episodes)
    if not conds:
        return pool
    out = []
    for n in pool:
        row = read_episode_row(s.t.path(s.episodes[n].row), n)
        if all(_OPS[op](float(row.get(f) or 0), v) for f, op, v in conds):
            out.append(n)
    return out


def plan_split(source: str | ObjectPath, target: str | ObjectPath, indices: Sequence[int] = (),
               where: Sequence[str] = (), *, move: bool = False, held: bool = False) -> CopyPlan:
    """The plan of a split (module docstring); reads the chosen episodes' data, writes nothing. ``held``: this
    run holds the source already (E68; its marker and lock are its own).

    Raises
    ------
    EpisodeNotFoundError
        An N of ``indices`` is not in the source ("no episode N in task").
    OperationError
        No selection given, nothing chosen, a bad ``--where``, the target is the source.
    """
    if not indices and not where:
        raise OperationError("edit split needs --episodes, --episodes-from and/or --where (none names an episode)",
                             hint='e.g. egopool edit split A --into B --episodes 1,3,5-7 (or --where "length>=300")')
    s = open_source(source)
    tgt_uri = location(target)
    if not held:
        refuse_busy_source(s, tgt_uri)
    if same_task(tgt_uri) == same_task(s.t.uri):
        raise OperationError(f"{tgt_uri} is the source itself", hint="name a new task as --into")
    refuse_nested([s.t.uri], tgt_uri)
    check_task_name(tgt_uri.rsplit("/", 1)[-1])  # the new task's name: the writer's rule (E36)
    chosen = _chosen(s, indices, where)
    if not chosen:
        raise OperationError(f"no episode of {s.t.uri} matches the selection; nothing was written",
                             hint="check it with `egopool ls TASK`")
    tasks = s.tasks() or [{"task_index": 0, "task": s.name}]
    same = {str(int(r.get("task_index") or 0)): int(r.get("task_index") or 0) for r in tasks}
    picks, parts = [], []
    for k, n in enumerate(chosen, start=1):
        ref = s.episodes[n]
        versions = versions_of(s.t.store, ref)  # before reading (E45)
        table = s.table(ref)
        parts.append(s.blocks(table))
        picks.append(Pick(0, n, k, same, s.digest(ref, table),
                          {key: [ext, v] for key, (ext, v) in ref.videos.items()}, versions))
    stats: dict[str, Any] = {k: b.to_dict() for k, b in tree_merge(parts).items()}
    stats["action"] = dict(ACTION_BLOCK)
    info = dict(s.info)
    info.update(task_name=tgt_uri.rsplit("/", 1)[-1], total_episodes=len(picks))
    args = {"source": s.t.uri, "episodes": chosen, "move": move}
    return CopyPlan("split", args, tgt_uri, [s.t.uri], picks, [], info, stats, tasks, move)


def _move(plan: CopyPlan) -> dict[str, list[int]]:
    from ..ops.delete import delete_episodes

    src = plan.sources[0]
    s = open_source(src)
    # an episode rewritten since it was copied (the source is no longer held: a run killed at `committed`, then
    # an edit of the source) is left there, not deleted with its new content (E47); a file gone is a delete's
    changed = [p.index for p in plan.picks if p.index in s.episodes and
               any(now.get(k, v) != v for now in [versions_of(s.t.store, s.episodes[p.index])]
                   for k, v in p.versions.items())]
    if changed:
        warnings.warn(f"episode(s) {', '.join(map(str, changed))} of {src} changed after they were copied to "
                      f"{plan.target}: left in {src}, not deleted (compare them, then delete by hand)",
                      RuntimeWarning, stacklevel=2)
    ns = sorted(p.index for p in plan.picks if p.index not in changed)
    still = sorted(set(ns) & set(s.episodes))
    if still:
        delete_episodes(src, still)
    return {src: ns} if ns else {}


def split_task(source: str | ObjectPath, target: str | ObjectPath, indices: Sequence[int] = (),
               where: Sequence[str] = (), *, move: bool = False, dry_run: bool = False) -> EditReport:
    """Copy (``move``: move) the chosen episodes of ``source`` into the new task ``target``, journaled
    (:mod:`egopool.edit.copy`); a target holding an interrupted split is finished.

    Raises
    ------
    EpisodeNotFoundError, OperationError
        :func:`plan_split`; a target that is a task already or holds another unfinished edit.
    LockError
        Another edit of the target is under way.
    """
    tgt = open_target(target)
    report = EditReport("split", tgt.uri, dry_run)
    pending = read_journal(tgt)
    if pending is not None and not dry_run:
        args = pending[0].get("args") or {}
        if pending[0].get("op") == "split" and args.get("source") == location(source):
            return run_plan(tgt, None, report, move=_move)
        raise other_edit(tgt, pending[0])
    if dry_run:
        plan = plan_split(source, tgt.uri, indices, where, move=move)
        report.plan = plan
        report.writes = target_keys(plan)
        if move:
            report.deleted = {plan.sources[0]: [p.index for p in plan.picks]}
        return report
    if not indices and not where:
        plan_split(source, tgt.uri, indices, where)  # its refusal, before anything is held
    s = open_source(source)
    refuse_busy_source(s, tgt.uri)  # a killed run's hold of it for this target: taken over (E92)
    if location(target) == s.t.uri:
        raise OperationError(f"{s.t.uri} is the source itself", hint="name a new task as --into")
    hold = SourceHold("split", tgt.uri, [s.t.uri], [])  # held before the plan reads it (E68)
    with holding(hold):
        pause(OP, "held")  # the crash tests' seam: held, not planned yet
        plan = plan_split(source, tgt.uri, indices, where, move=move, held=True)
        report.plan = plan
        hold.versions = plan_versions(plan)
        return run_plan(tgt, plan, report, move=_move, held=hold)
