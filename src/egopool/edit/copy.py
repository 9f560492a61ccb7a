"""Build a new task from episodes of others (``edit merge``, ``edit split``; docs/decisions.md E1-E6).

A plan (:class:`CopyPlan`) names every episode's source task and N, its new N in the target (1, 2, ... in the
plan's order), the target's ``info.json``, ``stats.json`` and ``tasks.jsonl``. It is executed from its journal
(:mod:`egopool.edit.journal`, in the target), so a SIGKILL at any step is finished by the next run:

1. ``journal``: the journal is created in the target (``CREATE``; the target holds nothing else yet);
2. ``episode``: each episode's data parquet (``episode_index`` = new N, ``task_index`` mapped to the united
   ``tasks.jsonl``), its videos (bytes unchanged), then its ``meta/episodes`` row (the new N, the mapped task,
   every other column as it was: calibration, drop_stats, ...): one object at a time, each atomic; an episode
   whose row exists is done (the row is written last);
3. ``meta``: ``stats.json``, ``tasks.jsonl``, ``meta/edit_origins.jsonl`` (each new N's source task and N);
4. ``committed``: ``info.json``: from here the target is a task for every reader (before, ``meta/info.json``
   is missing and nothing reads it as one);
5. ``moved`` (``split --move`` only): the episodes are deleted from their source by ``egopool delete``'s own
   journaled delete (N retired there, never reused);
6. the journal is removed.

Sources are only read (until step 5). Every write goes through the target's :class:`~egopool.storage.Store`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import OperationError
from ..layout import TaskLayout
from ..meta.digests import DIGEST_COLUMN, remapped_digests, sha256_bytes
from ..meta.episodes import decode_row, episode_row_table
from ..meta.tasks import tasks_jsonl
from ..ops._store_task import StoreTask, json_bytes
from ..ops.task_store import pause
from ..storage import ObjectPath, PreconditionFailed, PutMode, as_path, open_store
from ..storage.directory_store import DirectoryStore
from .hold import SourceHold, holding
from .journal import JOURNAL, EditJournal, edit_lock, other_edit, read_journal
from .registered import record_copied
from .source import SourceTask, location, open_source, parquet_bytes, parquet_table

__all__ = ["ORIGINS", "CopyPlan", "EditReport", "Pick", "execute", "open_target", "plan_versions"]

#: task-relative key of the origins of a built task's episodes (one JSON line per episode)
ORIGINS = "meta/edit_origins.jsonl"
OP = "edit"


@dataclass
class Pick:
    """One episode to copy: source (index into the plan's sources) and N there, its N in the target, the
    ``task_index`` it gets there, its content digest, its videos ``image_key -> [ext, source key]``."""

    source: int
    index: int
    new_index: int
    task_index: dict[str, int]
    digest: str
    videos: dict[str, list[str]] = field(default_factory=dict)
    #: source key -> version of the objects the copy reads, as planned (:func:`egopool.edit.hold.versions_of`)
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "index": self.index, "new_index": self.new_index,
                "task_index": self.task_index, "digest": self.digest, "videos": self.videos,
                "versions": self.versions}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pick:
        return cls(int(d["source"]), int(d["index"]), int(d["new_index"]), dict(d["task_index"]), str(d["digest"]),
                   {k: list(v) for k, v in (d.get("videos") or {}).items()},
                   {str(k): str(v) for k, v in (d.get("versions") or {}).items()})


@dataclass
class CopyPlan:
    """Everything an execution needs (it is the journal's body)."""

    op: str
    args: dict[str, Any]
    target: str
    sources: list[str]
    picks: list[Pick]
    skipped: list[dict[str, Any]]
    info: dict[str, Any]
    stats: dict[str, Any]
    tasks: list[dict[str, Any]]
    move: bool = False
    #: objects of the (single) source copied as they are (a rename: its origins, a bucket's tombstones)
    extra: list[str] = field(default_factory=list)
    #: the target is an existing task the episodes are appended to (:mod:`egopool.edit.append`); ``stats`` is
    #: then what the sources add to its accumulators
    into: bool = False
    #: key -> version of the (single) source's objects read apart from its episodes (a bucket rename's meta files
    #: and extra objects): held and checked before the commit as the picks' are (E72)
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "args": self.args, "target": self.target, "sources": self.sources,
                "picks": [p.to_dict() for p in self.picks], "skipped": self.skipped, "info": self.info,
                "stats": self.stats, "tasks": self.tasks, "move": self.move, "extra": self.extra,
                "into": self.into, "versions": self.versions}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CopyPlan:
        return cls(str(d["op"]), dict(d["args"]), str(d["target"]), list(d["sources"]),
                   [Pick.from_dict(p) for p in d["picks"]], list(d.get("skipped") or []), dict(d["info"]),
                   dict(d["stats"]), list(d["tasks"]), bool(d.get("move")), list(d.get("extra") or []),
                   bool(d.get("into")), {str(k): str(v) for k, v in (d.get("versions") or {}).items()})


def plan_versions(plan: CopyPlan) -> list[tuple[int, dict[str, str]]]:
    """The versions ``plan`` recorded, per picked episode: ``(source index, key -> version)`` (what a
    :class:`~egopool.edit.hold.SourceHold` verifies), and the single source's other objects' (a bucket rename's,
    E72)."""
    return [(p.source, p.versions) for p in plan.picks] + ([(0, plan.versions)] if plan.versions else [])


@dataclass
class EditReport:
    """What an edit did (or, ``dry_run``, would do). ``writes``: target-relative keys; ``deleted``: N per source
    (a move); ``resumed``: the run finished an interrupted edit of the same plan."""

    op: str
    target: str
    dry_run: bool
    plan: CopyPlan | None = None
    changes: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    deleted: dict[str, list[int]] = field(default_factory=dict)
    resumed: bool = False

    def to_dict(self) -> dict[str, Any]:
        p = self.plan
        return {"ok": True, "op": self.op, "target": self.target, "dry_run": self.dry_run, "resumed": self.resumed,
                "episodes": [{"source": p.sources[k.source], "index": k.index, "new_index": k.new_index,
                              "digest": k.digest} for k in p.picks] if p else [],
                "skipped": p.skipped if p else [], "changes": self.changes, "writes": self.writes,
                "deleted": self.deleted}

    def lines(self) -> list[str]:
        """The human report: one line per change."""
        out = list(self.changes)
        if self.plan is not None:
            p = self.plan
            verb = "would copy" if self.dry_run else "copied"
            rank = {uri: i for i, uri in enumerate(p.sources)}
            shown = [(k.source, k.index, f"{verb} {p.sources[k.source]} episode {k.index} -> {p.target} episode "
                                         f"{k.new_index}") for k in p.picks]
            shown += [(rank.get(str(s["source"]), len(rank)), int(s["index"]),
                       f"skipped duplicate {s['source']} episode {s['index']} (same content as target episode "
                       f"{s['same_as']}, {s['digest'][:19]})") for s in p.skipped]
            out += [line for _src, _n, line in sorted(shown, key=lambda e: (e[0], e[1]))]  # source order (E97)
            out += [f"{'would write' if self.dry_run else 'wrote'} {p.target}/{k}" for k in self.writes]
        for src, ns in self.deleted.items():
            if self.op == "rename" or (self.plan is not None and self.plan.op == "rename"):  # also resumed (E94)
                out.append(f"would rename {src} -> {self.target} (the old prefix would be deleted)" if self.dry_run
                           else f"renamed {src} -> {self.target} (old prefix deleted)")
                continue
            out.append(f"{'would delete' if self.dry_run else 'deleted'} episode(s) {', '.join(map(str, ns))} "
                       f"from {src} (moved; N retired there)")
        return out


def open_target(where: str | os.PathLike[str] | ObjectPath, *, new: bool = True) -> StoreTask:
    """The target of a merge or split: a location that is no task yet (or holds an interrupted edit's journal).
    ``new=False``: any location (``edit resume``).

    Raises
    ------
    OperationError
        ``location`` is a task already (named), a directory that is not empty and not an edit's, or a directory
        whose parent directory does not exist (``new``; it is never created, E55).
    ObjectStoreError
        The bucket does not exist.
    """
    root = as_path(location(where))
    store = open_store(str(root))
    if isinstance(root, ObjectPath):
        from ..storage._path import require_bucket

        if not root.key.strip("/"):
            raise OperationError(f"{location(where)}: give the task's prefix, s3://BUCKET/[PREFIX/]TASK",
                                 hint="a task in a bucket is named by its bucket and the task's key prefix; "
                                      "nothing was written")
        require_bucket(root)
    t = StoreTask(root, store, store.root if isinstance(store, DirectoryStore) else None)
    if not new:
        return t
    refuse_inside_task(t)
    if t.local is not None and not t.local.parent.is_dir():  # E55: never a whole path made up from a typo
        blocker = next((p for p in t.local.parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():  # a file where a directory must be (E65)
            raise OperationError(f"{t.uri}: {blocker} is a file, not a directory",
                                 hint="name a target in an existing directory; nothing was written")
        raise OperationError(f"{t.uri}: the parent directory {t.local.parent} does not exist",
                             hint=f"create it first (mkdir -p {t.local.parent}) or name a target in an existing "
                                  "directory; nothing was written")
    if store.exists("meta/info.json") and not store.exists(JOURNAL):
        raise OperationError(f"{t.uri} is a task already; an edit builds a new task",
                             hint="name a new location, or delete or rename the old task first if it must go")
    _refuse_holding(t)
    if t.local is not None and t.local.exists() and not store.exists(JOURNAL) and \
            any(not any(part.startswith(".") for part in f.relative_to(t.local).parts)
                for f in t.local.rglob("*") if f.is_file()):
        raise OperationError(f"{t.uri} is a directory that is not empty", hint="name a new location")
    return t


def refuse_inside_task(t: StoreTask) -> None:
    """Refuse a new task at ``t`` that would sit inside an existing task (a directory above it, or a bucket prefix
    above it, holds ``meta/info.json``: its files would be stray files of that task, docs/decisions.md E90). A
    directory looks at each parent's ``meta/info.json`` (symlinks resolved); a bucket sends one HEAD per prefix
    level above the target.

    Raises
    ------
    OperationError
        Naming the enclosing task and the fix; nothing was written.
    """
    hint = "name a location outside every task (a task never holds another); nothing was written"
    if t.local is not None:
        for parent in Path(os.path.realpath(t.local)).parents:
            if (parent / "meta" / "info.json").is_file():
                raise OperationError(f"{t.uri} is inside the task {parent}", hint=hint)
        return
    if not isinstance(t.root, ObjectPath):
        return
    parents = [p for p in t.root.parents if p.key]
    if parents:
        top = open_store(f"s3://{t.root.bucket}")
        for p in parents:
            if top.exists(f"{p.key}/meta/info.json"):
                raise OperationError(f"{t.uri} is inside the task {p}", hint=hint)


def _refuse_holding(t: StoreTask) -> None:
    """Refuse a bucket target prefix with objects under it (not dot-named, no edit journal: a task or anything
    else would end up inside the new task; a directory is refused as not empty by :func:`open_target`). One LIST
    of the target prefix (paged only when objects are there)."""
    if t.local is not None or t.store.exists(JOURNAL):
        return  # an interrupted edit's own objects
    # one LIST of the prefix (a new target's is empty); a copy tool's empty "folder" objects and the directories a
    # store keeps after its objects were deleted (SeaweedFS) are nothing under it
    keys = [m.key for m in t.store.list() if m.key.strip("/") and not m.key.endswith("/")
            and not any(part.startswith(".") for part in m.key.split("/"))]
    inner = {k.rsplit("/", i)[0] for k in keys for i in range(1, k.count("/") + 1)}
    shown = sorted({k.split("/", 1)[0] for k in keys if k not in inner})
    if shown:
        raise OperationError(f"{t.uri} is not empty (it holds {', '.join(shown[:3])}"
                             f"{', ...' if len(shown) > 3 else ''})",
                             hint="name a new location (a task never holds another); nothing was written")


def _episode_keys(layout: TaskLayout, n: int, videos: dict[str, list[str]]) -> list[str]:
    keys = [layout.data_key(n)] + [layout.video_key(n, k, v[0]) for k, v in sorted(videos.items())]
    return keys + [layout.episodes_key(n)]


def target_keys(plan: CopyPlan) -> list[str]:
    """Every key the plan writes in the target, in the order it writes them."""
    layout = TaskLayout.from_info(as_path(plan.target), plan.info)
    keys: list[str] = []
    for p in plan.picks:
        keys += _episode_keys(layout, p.new_index, p.videos)
    if plan.into:
        return ["meta/tasks.jsonl", "meta/info.json"] + keys + ["meta/stats.json", ORIGINS]
    return keys + plan.extra + ["meta/stats.json", "meta/tasks.jsonl"] + \
        ([ORIGINS] if _new_origins(plan) else []) + ["meta/info.json"]


def _new_origins(plan: CopyPlan) -> bool:
    """Whether the copy writes ``meta/edit_origins.jsonl`` (E4): a merge or split does; a rename keeps each N in
    the same task (a bucket rename copies the old task's origins file, if any, as it is; docs/decisions.md E80)."""
    return plan.op != "rename" and ORIGINS not in plan.extra


def _set(table: pa.Table, name: str, value: int) -> pa.Table:
    col = pa.array(np.full(table.num_rows, value, np.int64))
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, col)
    return table


def _copy_episode(src: SourceTask, tgt: StoreTask, layout: TaskLayout, p: Pick) -> None:
    if tgt.store.exists(layout.episodes_key(p.new_index)):
        return  # done by an earlier run: the row is written last
    ref = src.episodes.get(p.index)
    data_key = ref.data if ref is not None else src.layout.data_key(p.index)
    row_key = ref.row if ref is not None else src.layout.episodes_key(p.index)
    body = src.read(data_key)
    table = parquet_table(body, src.t.store.url(data_key))
    old_task = int(table.column("task_index")[0].as_py()) if "task_index" in table.column_names and \
        table.num_rows else 0
    new_task = p.task_index.get(str(old_task), 0)
    moves: dict[str, str] = {data_key: layout.data_key(p.new_index)}
    changes: dict[str, str | None] = {}
    if p.new_index != p.index or new_task != old_task:  # else the bytes as they are (a rename)
        body = parquet_bytes(_set(_set(table, "episode_index", p.new_index), "task_index", new_task))
        changes[layout.data_key(p.new_index)] = sha256_bytes(body)
    tgt.store.put(layout.data_key(p.new_index), body)
    for image_key, (ext, key) in sorted(p.videos.items()):
        dest = layout.video_key(p.new_index, image_key, ext)
        moves[key] = dest
        local = src.t.store.local_path(key)
        if local is not None:
            tgt.store.put_file(dest, local)
        else:
            with tgt.store.staged(dest, suffix="." + ext) as tmp, src.t.store.open_input(key) as f, \
                    open(tmp, "wb") as out:
                while piece := f.read(1 << 20):
                    out.write(piece)
    row_body = src.read(row_key)
    raw = parquet_table(row_body, src.t.store.url(row_key))
    rows = [r for r in raw.to_pylist() if r.get("episode_index") == p.index] or raw.to_pylist()
    row = decode_row(rows[0])
    task = p.task_index.get(str(row.get("task_index") or 0), 0)
    # the checksums follow the files (docs/decisions.md X1, E13): new names, the rewritten data file's sha256
    files = remapped_digests(row.get(DIGEST_COLUMN), moves=moves, changes=changes)
    if p.new_index != p.index or task != (row.get("task_index") or 0) or raw.num_rows != 1 or \
            (files is not None and any(k != v for k, v in moves.items())):
        row["episode_index"], row["task_index"] = p.new_index, task
        if files is not None:
            row[DIGEST_COLUMN] = files  # episode_row_table stamps them with the row's new content digest
        row_body = parquet_bytes(episode_row_table(row))
    tgt.store.put(layout.episodes_key(p.new_index), row_body)


def copy_picks(plan: CopyPlan, tgt: StoreTask, layout: TaskLayout) -> dict[int, SourceTask]:
    """Copy every picked episode of ``plan`` into ``tgt`` at its new N (the crash tests' ``episode`` pause after
    the first); returns the sources opened, by their index in ``plan.sources``.

    Raises
    ------
    OperationError, StorageError
        A source object is gone or a store failed (the edit's journal stays; the next run copies again).
    """
    sources: dict[int, SourceTask] = {}
    for i, p in enumerate(plan.picks):
        if p.source not in sources:
            sources[p.source] = open_source(plan.sources[p.source])
        _copy_episode(sources[p.source], tgt, layout, p)
        if i == 0:
            pause(OP, "episode")
    return sources


def _origins(plan: CopyPlan) -> bytes:
    lines = [json.dumps({"episode_index": p.new_index, "task": as_path(plan.sources[p.source]).name,
                         "location": plan.sources[p.source], "source_episode_index": p.index, "digest": p.digest,
                         "op": plan.op}, ensure_ascii=False) for p in plan.picks]
    return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""


def execute(tgt: StoreTask, plan: CopyPlan, journal: EditJournal, *,
            move: Callable[[CopyPlan], dict[str, list[int]]] | None = None,
            hold: SourceHold | None = None) -> dict[str, list[int]]:
    """Run ``plan`` into ``tgt`` from the step its journal records (module docstring). Returns the deleted N per
    source (a move).

    Raises
    ------
    OperationError, StorageError
        A source object is gone or a store failed: the journal stays; the next run finishes the edit.
    """
    layout = TaskLayout.from_info(tgt.root, plan.info)
    deleted: dict[str, list[int]] = {}
    if journal.doc.get("state") not in ("committed", "moved"):
        sources = copy_picks(plan, tgt, layout)
        tgt.store.put("meta/stats.json", json_bytes(plan.stats, indent=None))
        tgt.store.put("meta/tasks.jsonl", tasks_jsonl(plan.tasks))
        for key in plan.extra:
            src = sources.get(0) or open_source(plan.sources[0])
            tgt.store.put(key, src.read(key))
        if _new_origins(plan):
            tgt.store.put(ORIGINS, _origins(plan))
        pause(OP, "meta")
        if hold is not None:
            hold.verify()  # the sources as planned, before the commit (E45)
        try:
            tgt.store.put("meta/info.json", json_bytes(plan.info), mode=PutMode.CREATE)
        except PreconditionFailed:
            got = tgt.get_json("meta/info.json", "info.json")
            if got is None or got[0].get("task_name") != plan.info.get("task_name"):
                raise OperationError(f"{tgt.uri}: another writer created meta/info.json during the edit",
                                     hint="inspect the target; its journal stays") from None
        if hold is not None and plan.op != "rename":  # a rename's old task stays held to its deletion (E72)
            hold.release()  # before the state (a resume at "committed" holds nothing) and a move's delete
        journal.write(state="committed")
        pause(OP, "committed")
    if plan.move and move is not None and journal.doc.get("state") != "moved":
        deleted = move(plan)
        journal.write(state="moved")
        pause(OP, "moved")
    record_copied(tgt, [(p.new_index, _episode_keys(layout, p.new_index, p.videos)) for p in plan.picks])
    journal.remove()
    return deleted


def run_plan(tgt: StoreTask, plan: CopyPlan | None, report: EditReport, *,
             move: Callable[[CopyPlan], dict[str, list[int]]] | None = None,
             into: Callable[[StoreTask, CopyPlan, EditJournal, SourceHold | None], None] | None = None,
             held: SourceHold | None = None) -> EditReport:
    """Own the target's journal (created for ``plan``, or the interrupted one of the same op and arguments) and
    execute it. ``plan`` None: finish the interrupted edit whatever it was (``edit resume``). ``into`` executes a
    plan that appends to an existing task (``merge --into``: :func:`egopool.edit.append.execute_into`); callers
    that may meet one pass it. ``held``: the plan's sources, held already by the caller since before it planned
    (E68; the caller releases it), else they are held here.

    Raises
    ------
    OperationError
        The target holds an interrupted edit of another op or arguments (named; `egopool edit resume`).
    LockError
        Another edit of the target is under way.
    """
    with edit_lock(tgt, dry_run=False):
        got = read_journal(tgt)
        if got is not None:
            old = CopyPlan.from_dict(got[0])
            if plan is not None and (old.op != plan.op or old.args != plan.args):
                raise other_edit(tgt, got[0])
            report.plan, report.resumed = old, True
            plan = old
        elif plan is None:
            raise OperationError(f"{tgt.uri} holds no unfinished edit", hint="nothing to resume")
        # the target's journal owned first (a live run of this edit: refused as such), then the sources held; a
        # new journal only once they are (a busy source then leaves nothing behind)
        journal = EditJournal.take_over(tgt, got[0], got[1]) if got is not None else None
        own = None if held is not None else _hold(tgt, plan, got[0].get("state") if got is not None else "copying")
        if own is not None:
            own.journaled = journal is not None
        with holding(own) as hold:
            hold = hold or held
            if hold is not None and journal is not None:
                hold.journaled = True
            if journal is None:
                journal = EditJournal.create(tgt, {**plan.to_dict(), "state": "copying"})
                if hold is not None:
                    hold.journaled = True  # from here an interrupt leaves the sources held, as a kill (E67)
                pause(OP, "journal")
            report.writes = target_keys(plan)
            if plan.into:
                if into is None:
                    raise OperationError(f"{tgt.uri} holds an interrupted `edit merge --into`",
                                         hint=f"`egopool edit resume {tgt.uri}` finishes it")
                into(tgt, plan, journal, hold)
            else:
                report.deleted = execute(tgt, plan, journal, move=move, hold=hold)
    return report


#: the states of a journal in which its edit still reads its sources (a new task's copy; a merge --into's)
_READING = ("copying", "claiming", "declaring", "episodes")


def _hold(tgt: StoreTask, plan: CopyPlan, state: Any) -> SourceHold | None:
    """The hold of ``plan``'s sources (:mod:`egopool.edit.hold`) while the edit reads them (a bucket rename's old
    task too, E72); None once the copy is done."""
    if plan.op not in ("merge", "merge-into", "split", "rename") or state not in _READING:
        return None
    return SourceHold(plan.op, tgt.uri, plan.sources, plan_versions(plan))
