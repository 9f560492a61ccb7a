"""Change a task in place (``edit set-task``, ``remove-column``, ``rename-column``, ``add-column``, ``remove-slot``,
``rename-slot``; docs/decisions.md E7-E10): one :class:`Change`, applied to every episode and to ``info.json``,
``stats.json`` and ``tasks.jsonl``, journaled in the task (``meta/.edit.json``, :mod:`egopool.edit.journal`).

Steps (each a crash seam ``EGOPOOL_OPS_PAUSE=edit:<step>``), a valid task after each:

1. ``journal``: the journal (the change and its arguments) is created; a bucket task with a publish in progress
   is refused first (its journals are listed);
2. ``declared``: ``info.json`` gets the union of the old and the new declarations (a renamed column or slot is
   declared under both names, an added column is declared), so every episode validates, changed or not;
3. ``episode`` (after the first): each episode's data parquet, videos and row are rewritten, one object at a
   time, each atomically, after the journal records what the row must say (E39, seam ``row``); a change is
   idempotent (an episode already changed is left as it is), so a re-run
   simply goes over every episode again;
4. ``committed``: ``stats.json``, ``tasks.jsonl``, then ``info.json`` with the old declarations gone;
5. the journal is removed.

Episodes that arrive while the change runs (a publish into a bucket task) are changed too: the episodes are
listed again before step 4, up to 5 rounds. Untouched objects keep their bytes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import LockError, OperationError
from ..ops._store_task import StoreTask, json_bytes
from ..ops.task_store import pause
from ..storage import ObjectPath, PreconditionFailed, PutMode
from .journal import EditJournal, edit_lock, other_edit, read_journal
from .registered import refresh_episode
from ..meta.digests import DIGEST_COLUMN, remapped_digests, sha256_bytes, stamp
from ..meta.tasks import tasks_jsonl
from .source import EpisodeRef, SourceTask, open_source, parquet_bytes, parquet_table

__all__ = ["Change", "InplaceReport", "apply_change", "shown_text"]

OP = "edit"


class Change(ABC):
    """One in-place change: what it does to declarations, to each episode, to stats and task strings."""

    op: str = ""

    @abstractmethod
    def args(self) -> dict[str, Any]:
        """Its arguments, JSON (the journal's record; equal arguments = the same change)."""

    @abstractmethod
    def check(self, s: SourceTask) -> None:
        """Refuse bad input in one line before anything is written (``OperationError`` and friends)."""

    def declare(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info.json`` during the change (old and new declarations both); default: unchanged."""
        return info

    def finish(self, info: dict[str, Any]) -> dict[str, Any]:
        """``info.json`` after the change."""
        return info

    def stats(self, doc: dict[str, Any]) -> dict[str, Any]:
        """``stats.json`` after the change; default: unchanged."""
        return doc

    def tasks(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``tasks.jsonl`` rows after the change; default: unchanged."""
        return rows

    def data(self, n: int, table: pa.Table) -> pa.Table | None:
        """N's data table changed, or None when it has nothing to change (idempotence)."""
        return None

    def row(self, n: int, row: dict[str, Any]) -> dict[str, Any] | None:
        """N's row (raw parquet values) changed, or None."""
        return None

    def videos(self, n: int, videos: dict[str, tuple[str, str]]) -> list[tuple[str, str | None]]:
        """``(image_key, new image_key | None to delete)`` for N's videos; default: none."""
        return []

    def touches_data(self) -> bool:
        """Whether :meth:`data` can change anything (else the data parquets are not read)."""
        return False

    def touches_rows(self) -> bool:
        """Whether :meth:`row` can change anything."""
        return False


#: The most characters of a task string a message shows (the rest is cut, its length said; E78).
SHOWN_CHARS = 80


def shown_text(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` quoted for a message or report line: whole up to ``limit`` characters, else its first ``limit``
    characters, ``...`` and its length (a 100 kB string is never echoed whole; docs/decisions.md E78)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


@dataclass
class InplaceReport:
    """What a change did (or would do): ``changed`` per N the objects rewritten (a moved one as ``old -> new``),
    ``deleted`` per N the objects deleted (a removed slot's videos, E57), ``meta`` the meta documents, ``tasks``
    each ``tasks.jsonl`` line whose string changes (``{"task_index", "old", "new"}``, E56)."""

    op: str
    task: str
    dry_run: bool
    args: dict[str, Any]
    changed: dict[int, list[str]] = field(default_factory=dict)
    meta: list[str] = field(default_factory=list)
    resumed: bool = False
    deleted: dict[int, list[str]] = field(default_factory=dict)
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": True, "op": self.op, "task": self.task, "dry_run": self.dry_run, "args": self.args,
                "resumed": self.resumed, "episodes": {str(k): v for k, v in sorted(self.changed.items())},
                "deleted": {str(k): v for k, v in sorted(self.deleted.items()) if v}, "tasks": self.tasks,
                "meta": self.meta}

    def lines(self) -> list[str]:
        verb = "would rewrite" if self.dry_run else "rewrote"
        gone = "would delete" if self.dry_run else "deleted"
        out: list[str] = []
        for n in sorted(set(self.changed) | set(self.deleted)):
            if self.changed.get(n):
                out.append(f"{verb} episode {n}: {', '.join(self.changed[n])}")
            if self.deleted.get(n):
                out.append(f"{gone} episode {n}: {', '.join(self.deleted[n])}")
        out += [f"{'would set' if self.dry_run else 'set'} task_index {d['task_index']}: "
                f"{shown_text(d['old']) if d['old'] is not None else None} -> "
                f"{shown_text(d['new']) if d['new'] is not None else None}" for d in self.tasks]
        out += [f"{verb} {k}" for k in self.meta]
        return out or [f"nothing to do: {self.task} is that way already (`edit {self.op}` changes no object)"]


def task_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``tasks.jsonl`` lines whose string differs between ``old`` and ``new`` rows, by ``task_index``:
    ``[{"task_index": K, "old": str | None, "new": str | None}, ...]`` (None: no such line), ascending K."""
    def by_index(rows: list[dict[str, Any]]) -> dict[int, str]:
        return {int(r.get("task_index") or 0): str(r.get("task")) for r in rows}

    a, b = by_index(old), by_index(new)
    return [{"task_index": k, "old": a.get(k), "new": b.get(k)} for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def _row_table(raw: pa.Table, row: dict[str, Any]) -> pa.Table:
    """The one-row table ``row`` with ``raw``'s column types (the row's own columns, nothing added or dropped)."""
    cols = {name: pa.array([row[name]], type=raw.schema.field(name).type) for name in raw.column_names
            if name in row}
    return pa.table(cols)


def _apply_episode(s: SourceTask, ch: Change, ref: EpisodeRef, write: bool,
                   journal: EditJournal | None = None) -> tuple[list[str], list[str]]:
    """Change one episode: its files first, then its row; returns the keys rewritten (a moved one as
    ``old -> new``) and the keys deleted. Before the first file is written the journal records what the row must
    say (``pending``: the new sha256 of each rewritten file, each move and deletion), so a run killed between a
    file and the row is finished from the journal, never by hashing whatever bytes are there (docs/decisions.md
    E39)."""
    store, keys, deleted = s.t.store, [], []
    moves: dict[str, str] = {}
    changes: dict[str, str | None] = {}
    body: bytes | None = None
    if ch.touches_data():
        table = s.table(ref)
        new = ch.data(ref.index, table)
        if new is not None:
            keys.append(ref.data)
            body = parquet_bytes(new)
            changes[ref.data] = sha256_bytes(body)
    videos: list[tuple[str, str, str | None]] = []  # (ext, key, dest | None to delete)
    for image_key, to in ch.videos(ref.index, ref.videos):
        ext, key = ref.videos[image_key]
        if to is None:
            deleted.append(key)
            changes[key] = None
            videos.append((ext, key, None))
            continue
        dest = s.layout.video_key(ref.index, to, ext)
        keys.append(f"{key} -> {dest}")
        moves[key] = dest
        videos.append((ext, key, dest))
    pending = (journal.doc.get("pending") or {}) if journal is not None else {}
    if pending.get("n") == ref.index:  # an earlier run wrote some of these files, then died before the row
        moves = {**pending.get("moves", {}), **moves}
        changes = {**pending.get("changes", {}), **changes}
    row_bytes: bytes | None = None
    if ch.touches_rows() or moves or changes:
        raw = parquet_table(s.read(ref.row), s.t.store.url(ref.row))
        row = raw.to_pylist()[0]
        new_row = (ch.row(ref.index, dict(row)) if ch.touches_rows() else None) or dict(row)
        # the row's checksums follow its files (docs/decisions.md X1, E13): same bytes under a new name, a
        # rewritten data file's new sha256, a removed stream gone; the row's own digest recomputed
        files = remapped_digests(row.get(DIGEST_COLUMN), moves=moves, changes=changes)
        if files is not None:
            new_row[DIGEST_COLUMN] = stamp(new_row, files)
        if new_row != row:
            keys.append(ref.row)
            row_bytes = parquet_bytes(_row_table(raw, new_row))
    if not write:
        return keys, deleted
    wrote = body is not None or bool(videos)
    # a row-only change in a directory is journaled too: a run killed between the row and pipeline.db's refresh
    # is refreshed on resume (E48, E82); a bucket has no registry
    if (wrote or (row_bytes is not None and s.t.local is not None)) and journal is not None:
        journal.write(pending={"n": ref.index, "moves": moves, "changes": changes})
    if body is not None:
        store.put(ref.data, body)
    for v_ext, v_key, v_dest in videos:
        if v_dest is None:
            _delete(s, v_key)
            continue
        local = store.local_path(v_key)
        if local is not None:
            store.put_file(v_dest, local)
        else:
            with store.staged(v_dest, suffix="." + v_ext) as tmp, store.open_input(v_key) as f, \
                    open(tmp, "wb") as out:
                while piece := f.read(1 << 20):
                    out.write(piece)
        _delete(s, v_key)
    if wrote:
        pause(OP, "row")
    if row_bytes is not None:
        store.put(ref.row, row_bytes)
        pause(OP, "registry")
    if keys or deleted or pending.get("n") == ref.index:  # pipeline.db in step with the files (E48)
        refresh_episode(s.t, ref.index, [k for k, v in changes.items() if v is not None] + list(moves.values()) +
                        [ref.row], [k for k, v in changes.items() if v is None] + list(moves))
    return keys, deleted


def _delete(s: SourceTask, key: str) -> None:
    """Delete ``key``; in a directory also the directories it leaves empty (a renamed slot's old folder)."""
    s.t.store.delete([key])
    local = s.t.store.local_path(key)
    if local is None or s.t.local is None:
        return
    d = local.parent
    while d != s.t.local and s.t.local in d.parents:
        try:
            d.rmdir()
        except OSError:
            break
        d = d.parent


def _publishing(t: StoreTask) -> str | None:
    """A bucket task's publish in progress (the server's or sync's journal), or None."""
    if not isinstance(t.root, ObjectPath):
        return None
    from ..publish import JOURNALS, task_hash
    from ..storage import open_store

    parent = open_store(str(t.root.parent))
    first = next(iter(parent.list(f"{JOURNALS}/{task_hash(t.root.name)}/")), None)
    return None if first is None else parent.url(first.key)


def _update(t: StoreTask, change: Any, key: str = "meta/info.json", *, indent: int | None = 2) -> bool:
    """Read-modify-write of a meta document by compare-and-swap on both backends (a publish merging into it
    meanwhile is read again and the change made on top of it). An absent document is left absent."""
    for _ in range(50):
        got = t.get_json(key, key)
        if got is None:
            if key == "meta/info.json":
                raise OperationError("meta/info.json vanished during the edit", path=t.uri, hint="restore it")
            return False
        new = change(got[0])
        if new == got[0]:
            return False
        try:
            t.store.put(key, json_bytes(new, indent=indent), mode=PutMode.UPDATE, version=got[1])
            return True
        except PreconditionFailed:
            continue
    raise LockError(f"{key} kept changing under the edit (50 compare-and-swap rounds lost)", path=t.uri,
                    hint="run the edit again when the task is quieter; `egopool edit resume TASK` finishes it")


def apply_change(location: str | ObjectPath, ch: Change, *, dry_run: bool = False) -> InplaceReport:
    """Apply ``ch`` to the task at ``location`` (a directory or ``s3://...``), module docstring.

    Raises
    ------
    OperationError, SchemaError, EpisodeNotFoundError
        Bad input (:meth:`Change.check`), one line, nothing written; another edit's journal in the task.
    LockError
        Another edit (or a recorder, delete) holds the task; a publish in progress in a bucket task.
    """
    s = open_source(location)
    t = s.t
    report = InplaceReport(ch.op, t.uri, dry_run, ch.args())
    if dry_run:
        ch.check(s)
        for n in sorted(s.episodes):
            report.changed[n], report.deleted[n] = _apply_episode(s, ch, s.episodes[n], False)
        info = ch.finish(ch.declare(s.info))
        stats = s.t.get_json("meta/stats.json", "stats.json")
        report.tasks = task_changes(s.tasks(), ch.tasks(s.tasks()))
        report.meta = ([] if stats is None or ch.stats(stats[0]) == stats[0] else ["meta/stats.json"]) + \
            (["meta/tasks.jsonl"] if ch.tasks(s.tasks()) != s.tasks() else []) + \
            (["meta/info.json"] if info != s.info else [])
        return report
    with edit_lock(t, dry_run=False):
        got = read_journal(t)
        if got is not None:
            if got[0].get("op") != ch.op or got[0].get("args") != ch.args():
                raise other_edit(t, got[0])
            journal = EditJournal.take_over(t, got[0], got[1])
            report.resumed = True
        else:
            ch.check(s)
            busy = _publishing(t)
            if busy is not None:
                raise LockError(f"a publish into this task is in progress ({busy})", path=t.uri,
                                hint="edit it when the upload finished; nothing was written")
            journal = EditJournal.create(t, {"op": ch.op, "args": ch.args(), "state": "declaring"})
            busy = _publishing(t)  # again: a delete or publish that claimed before it saw the journal (E30)
            if busy is not None:
                journal.remove()
                raise LockError(f"a publish or delete in this task is in progress ({busy})", path=t.uri,
                                hint="edit it when it finished; nothing was written")
            pause(OP, "journal")
        _run(s, ch, journal, report)
    return report


def _run(s: SourceTask, ch: Change, journal: EditJournal, report: InplaceReport) -> None:
    t = s.t
    if journal.doc.get("state") != "committing":
        _update(t, ch.declare)
        journal.write(state="episodes")
        pause(OP, "declared")
        done: set[int] = set()
        for _ in range(5):
            todo = sorted(set(s.episodes) - done)
            if not todo:
                break
            for n in todo:
                report.changed[n], report.deleted[n] = _apply_episode(s, ch, s.episodes[n], True, journal)
                done.add(n)
                if len(done) == 1:
                    pause(OP, "episode")
            s = open_source(t.root)  # episodes published meanwhile are changed too
        journal.write(state="committing")
    report.meta = []
    if _update(t, ch.stats, "meta/stats.json", indent=None):
        report.meta.append("meta/stats.json")
    old_tasks = s.tasks()
    new_tasks = ch.tasks(old_tasks)
    if new_tasks != old_tasks:
        t.store.put("meta/tasks.jsonl", tasks_jsonl(new_tasks))
        report.meta.append("meta/tasks.jsonl")
        report.tasks = task_changes(old_tasks, new_tasks)
    if _update(t, ch.finish):
        report.meta.append("meta/info.json")
    pause(OP, "committed")
    journal.remove()
