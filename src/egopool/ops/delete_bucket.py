"""Delete episodes of a task in a bucket (``egopool delete s3://bucket/prefix/task N...``; file_format.md §2, §9).

A bucket has no rename (nothing can be staged and put back) and no lock, so the delete rolls
*forward*: once started it is finished, by this run or by the next one. One delete of N:

1. **claim**: N's journal object (:func:`~egopool.ops.task_store.claim_key`, the claim of the
   pooling server and ``egopool sync``) is created with ``PutMode.CREATE``: two deletes, or a
   delete and a publish of N, cannot both hold it. It names ``op: delete``, the data and video
   keys (``files``) and the row (``commit``);
2. **retire N**: the tombstone ``<task>/.egopool/retired/<N:09d>`` (:mod:`egopool.meta.retired`)
   and ``total_episodes >= N`` in ``info.json`` (read-modify-write with ``PutMode.UPDATE``): N is
   never handed out again, whoever finishes the delete;
3. **the row is deleted**: the commit. Readers count an episode from its row on (O11), so from
   here N is gone for every reader; ``ls`` / ``validate`` see what is left of the group as work
   under a journal (O20), not as damage;
4. the data parquet, then the videos, are deleted;
5. **verification by listing**: N's chunk prefixes of ``meta/episodes/``, ``data/`` and ``videos/``
   hold nothing of N (else an error naming the keys; the journal stays);
6. the journal is deleted.

A run killed at any step leaves a valid task and its journal; the next ``egopool delete`` on the
task (whatever N it names) finds it and rolls it forward (steps 2-6 again: each is idempotent).
``stats.json`` is not rolled back (as in a directory, §4). A journal of another operation on N (a
publish in progress) refuses the delete of that N before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import EpisodeNotFoundError, LockError, OperationError
from ..meta.retired import retire
from ..publish import update_json
from ._common import Progress
from ._store_task import refuse_edited
from .delete_plan import DeleteOutcome, DeletePlan, DeleteReport, check_indices
from .task_store import BucketTask, Claim, episode_objects, open_task_store, pause, take_claim, task_claims

__all__ = ["delete_in_bucket"]

OP = "delete"


def _raise_total(index: int) -> Any:
    def change(old: Any) -> Any:
        if not isinstance(old, dict):
            return None
        total = old.get("total_episodes")
        if isinstance(total, int) and not isinstance(total, bool) and total >= index:
            return None
        return {**old, "total_episodes": index}
    return change


def _plan(bt: BucketTask, index: int, pending: Claim | None) -> DeletePlan:
    objs = episode_objects(bt.store, bt.layout, index)
    if objs.legacy_rows:
        raise OperationError(f"{bt.uri}: episode {index}'s chunk has legacy file- episodes shards "
                             f"({objs.legacy_rows[0]}); a bucket cannot rewrite a shard safely",
                             hint="copy the task to a directory (`egopool sync`), run `egopool migrate` there, "
                                  "and sync it back")
    if not objs.row and pending is None:
        raise EpisodeNotFoundError(bt.uri, index)
    keys = [*objs.row, *objs.data, *objs.videos]
    return DeletePlan(index, [Path(k) for k in sorted(keys)], [], sum(objs.sizes.get(k, 0) for k in keys))


def _roll_forward(bt: BucketTask, index: int, claim: Claim) -> DeleteOutcome:
    """Steps 2-6 of the module docstring for a claimed N."""
    retire(bt.store, index)
    update_json(bt.store, "meta/info.json", _raise_total(index), indent=2)
    pause(OP, "retired")
    objs = episode_objects(bt.store, bt.layout, index)
    planned = [str(f)[len(bt.name) + 1:] for f in claim.doc.get("files") or [] if isinstance(f, str)]
    bt.store.delete([*objs.row, bt.row_key(index)])  # the commit: from here no reader counts N
    pause(OP, "row")
    bt.store.delete(objs.data)
    pause(OP, "data")
    bt.store.delete(sorted({*objs.videos, *planned}))
    pause(OP, "videos")
    left = episode_objects(bt.store, bt.layout, index)
    if left.keys():
        raise OperationError(f"{bt.uri}: episode {index} still has {', '.join(left.keys())} after its delete",
                             details=left.keys(), path=bt.uri,
                             hint=f"run `egopool delete {bt.uri} {index}` again: it finishes this delete")
    bt.parent.delete([claim.key])
    removed = sorted({*objs.keys(), *planned} - set(left.keys()))
    return DeleteOutcome(index, removed=[Path(k) for k in removed], registry="disabled")


def _unless_edited(bt: BucketTask, claim: Claim) -> None:
    """After N is claimed, look for an edit's journal again (an edit that started between the first look and the
    claim checks the claims after creating its journal: one of the two sees the other). Found: the claim is
    released and the delete refused."""
    try:
        refuse_edited(bt.store, bt.uri, "nothing was deleted")
    except LockError:
        bt.parent.delete([claim.key])
        raise


def delete_in_bucket(uri: str, indices: Sequence[int], *, dry_run: bool = False,
                     progress: Progress | None = None) -> DeleteReport:
    """Delete episodes of the bucket task ``uri`` by global N (module docstring).

    Every N is checked before anything is written: N < 1, an N with no row (and no interrupted
    delete), an N another writer holds a journal for, and a chunk with legacy shards are refused.
    Interrupted deletes of the task are finished first (``recovered``).

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix/task``.
    indices:
        Global 1-based N (duplicates ignored).
    dry_run:
        Only plan (the keys each delete removes); write nothing.
    progress:
        ``progress(done, total, what)`` after each N.

    Returns
    -------
    DeleteReport
        ``task_dir`` is ``Path("")``, ``uri`` the task; paths are task-relative keys; ``registry`` is
        ``disabled`` (a bucket has no ``pipeline.db``).

    Raises
    ------
    LayoutError
        N < 1 or no N.
    EpisodeNotFoundError
        "no episode N in task".
    OperationError
        Another writer holds N; legacy shards; a delete that could not be verified (re-run finishes it).
    LockError
        An ``egopool edit`` of the task is in progress or was interrupted (its journal ``meta/.edit.json``).
    ObjectStoreError, FormatError
        No such bucket, not a task, the bucket cannot be reached.
    """
    wanted = check_indices(indices)
    bt = open_task_store(uri, "delete episodes")
    if not dry_run:  # an edit holds the task: it has no lock here, its journal is the claim (E30)
        refuse_edited(bt.store, bt.uri, "nothing was deleted")
    claims = {c.index: c for c in task_claims(bt)}
    pending = {n: c for n, c in claims.items() if c.op == OP}
    for n in wanted:
        other = claims.get(n)
        if other is not None and other.op != OP:
            raise OperationError(f"{bt.uri}: episode {n} is being changed by another writer ({other.op}, "
                                 f"{bt.parent.url(other.key)}); nothing was deleted",
                                 hint="wait for it and run again; a journal left by a killed writer is "
                                      "handled by `egopool repair clean TASK`")
    plans = [_plan(bt, n, pending.get(n)) for n in wanted]
    report = DeleteReport(Path(""), dry_run, plans, uri=bt.uri)
    earlier = [n for n in sorted(pending) if n not in wanted]
    if dry_run:
        report.recovered = [f"would finish interrupted delete of episode {n}" for n in earlier]
        return report
    for n in earlier:
        _roll_forward(bt, n, pending[n])
        report.recovered.append(f"finished interrupted delete of episode {n}")
    for i, plan in enumerate(plans):
        n = plan.index
        try:
            claim = pending.get(n)
            if claim is None:
                claim = take_claim(bt, n, OP, [str(p) for p in plan.files if str(p) != bt.row_key(n)])
                _unless_edited(bt, claim)
                pause(OP, "journal")
            report.outcomes.append(_roll_forward(bt, n, claim))
        except OperationError as exc:
            done = [o.index for o in report.outcomes]
            if done:
                exc.message += f"; already deleted: {', '.join(map(str, done))}"
            rest = [p.index for p in plans[i + 1:]]
            if rest:
                exc.message += f"; not attempted: {', '.join(map(str, rest))}"
            raise
        if progress is not None:
            progress(i + 1, len(plans), f"episode {n}")
    return report
