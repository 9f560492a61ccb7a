"""A task read for an edit (docs/decisions.md E3): its declarations, episodes, ``tasks.jsonl``, stats blocks and
each episode's content digest, through its :class:`~egopool.storage.Store` (a directory or a bucket alike).

Also the declaration comparison of a merge (the first difference, in one line) and the accumulator
arithmetic of ``stats.json`` (file_format.md §4: ``sum = mean*count``, ``sum_sq = (std²+mean²)*count``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._parquet_memory import read_parquet_bytes
from ..errors import FormatError, LockError, OperationError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import read_info
from ..meta.stats import StatsBlock, episode_stats
from ..meta.tasks import read_tasks
from .._holders import holder_alive, journal_doc
from ..ops._store_task import EDIT_JOURNAL, StoreTask, open_store_task, refuse_edited
from ..storage import ObjectPath, Store
from ..storage._path import refuse_near_uri

__all__ = ["DECLARATION_KEYS", "EpisodeRef", "SourceTask", "first_difference", "location", "open_source", "refuse_nested",
           "parquet_bytes", "subtract_block"]

#: The data columns a copy rewrites (edit/copy.py ``_copy_episode``): the numbering, not the content.
NUMBERING_COLUMNS = ("episode_index", "task_index")

#: The ``info.json`` keys two tasks must share to be merged (they fix every episode's layout and meaning).
DECLARATION_KEYS = ("fps", "chunks_size", "data_path", "video_path", "episodes_path", "features", "cameras",
                    "video_extensions", "devices", "device_names", "sensors", "sensor_dim", "video")


def parquet_table(body: bytes, where: str) -> pa.Table:
    """``body`` read as a parquet table; a damaged file is one line naming ``where`` (no edit starts on it).

    Raises
    ------
    FormatError
        Not readable as parquet (truncated, corrupt, empty).
    """
    try:
        return read_parquet_bytes(body)
    except (pa.ArrowException, OSError, ValueError) as exc:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise FormatError(f"cannot read parquet ({text}): the file is damaged", path=where,
                          hint="`egopool validate TASK` names what is wrong; restore the file before editing") from exc


@dataclass
class EpisodeRef:
    """One committed episode of a source: N, its task-relative keys, ``image_key -> (ext, key)`` of its videos."""

    index: int
    data: str
    row: str
    videos: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class SourceTask:
    """A task opened for reading by an edit (``t.root`` is its path, ``t.store`` its store)."""

    t: StoreTask
    info: dict[str, Any]
    layout: TaskLayout
    episodes: dict[int, EpisodeRef]
    _task_strings: dict[int, str] | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        """The task's name (the last part of its location)."""
        return self.t.root.name

    def table(self, ref: EpisodeRef) -> pa.Table:
        """N's data parquet as a table (whole: an edit rewrites it).

        Raises
        ------
        FormatError
            The file does not read as parquet (named, with the fix).
        """
        return parquet_table(self.read(ref.data), self.t.store.url(ref.data))

    def read(self, key: str) -> bytes:
        """The bytes of ``key`` (a bucket: streamed through the store's reader).

        Raises
        ------
        FormatError
            The object is gone (named).
        """
        try:
            with self.t.store.open_input(key) as f:
                return f.read()
        except FileNotFoundError as exc:
            raise FormatError("the object vanished while it was being edited", path=self.t.store.url(key),
                              hint="another writer changed the task; run the edit again") from exc

    def tasks(self) -> list[dict[str, Any]]:
        """``tasks.jsonl`` rows ``{task_index, task}``."""
        return read_tasks(self.t.root)

    def task_strings(self) -> dict[int, str]:
        """``task_index -> task string`` of ``tasks.jsonl`` (read once)."""
        if self._task_strings is None:
            self._task_strings = {int(r.get("task_index") or 0): str(r.get("task")) for r in self.tasks()}
        return self._task_strings

    def digest(self, ref: EpisodeRef, table: pa.Table) -> str:
        """The content digest of an episode (docs/decisions.md E4, E22): sha256 over its data and each video's bytes
        by ``image_key``. The numbering an edit rewrites is left out: ``episode_index`` (the N) and ``task_index``
        (a number into this task's ``tasks.jsonl``), the latter replaced by the task *string* it stands for, so two
        copies of one recording have the same digest whatever they are numbered, and two episodes differing in
        any value or in their instruction do not."""
        h = hashlib.sha256()
        body = table.drop_columns([c for c in NUMBERING_COLUMNS if c in table.column_names])
        if "task_index" in table.column_names:
            strings = self.task_strings()
            ks = table.column("task_index").to_pylist()
            body = body.append_column("edit.task", pa.array(
                [None if k is None else strings.get(int(k), f"#{int(k)}") for k in ks], pa.string()))
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, body.schema) as w:
            w.write_table(body)
        h.update(hashlib.sha256(sink.getvalue()).digest())
        for key in sorted(ref.videos):
            h.update(key.encode("utf-8") + b"\0" + hashlib.sha256(self.read(ref.videos[key][1])).digest())
        return "sha256:" + h.hexdigest()

    def blocks(self, table: pa.Table) -> dict[str, StatsBlock]:
        """The episode's stats blocks (§4), from the table already read."""
        return episode_stats(table, self.info)


def location(where: str | os.PathLike[str] | ObjectPath) -> str:
    """A task's location as an edit records it: ``s3://...`` as given (no trailing ``/``), a directory absolute.

    Raises
    ------
    FormatError
        A mistyped S3 URI (``s3:/b/p``, ``S3://b/p``; :func:`~egopool.storage._path.refuse_near_uri`): taken as a
        local path it would be a folder named ``s3:``.
    """
    text = str(where) if isinstance(where, ObjectPath) else os.fspath(where)
    refuse_near_uri(text)
    if text.startswith("s3://"):
        return str(ObjectPath(text))  # checked (a bucket, no empty or dot component), no trailing "/"
    return os.path.abspath(text)


def refuse_busy_source(s: SourceTask, target: str | None = None) -> None:
    """Refuse to read the source task ``s`` (merge, split) while an edit of it is unfinished or running (its
    journal ``meta/.edit.json``) or, in a directory, while its task lock is held (a recorder, ``delete``): the
    copy would mix changed and unchanged episodes (docs/decisions.md E40).

    ``target``: a hold marker of a killed run of the same merge or split into ``target`` (:func:`dead_hold_of`)
    is not refused: this run takes it over (E92).

    Raises
    ------
    LockError
        One line: the edit in progress (pid, host) or interrupted (with ``egopool edit resume SOURCE``), or the
        task lock held.
    """
    if target is None or not dead_hold_of(s.t.store, target):
        refuse_edited(s.t.store, s.t.uri, "nothing was written")
    if s.t.local is not None:
        from .._atomic import task_lock

        try:
            with task_lock(s.t.local, wait=False):
                pass
        except LockError as exc:
            raise LockError(f"the source task is locked by another command ({exc.message})", path=s.t.uri,
                            hint="run again when it has finished; nothing was written") from None


def dead_hold_of(store: Store, target: str) -> bool:
    """Whether the task at ``store`` holds the hold marker (E45) of a merge or split into ``target`` whose run is
    gone (``holder_alive`` false): the same command run again may take it over (E92)."""
    got = store.get(EDIT_JOURNAL)
    if got is None:
        return False
    doc = journal_doc(got[0])
    return bool(doc.get("hold")) and str(doc.get("target")) == target and not holder_alive(doc)


def same_task(uri: str) -> str:
    """The identity of the task at ``uri`` (as :func:`location` gives it) for "the same task" checks: a directory's
    real path (symlinks resolved: ``alink`` -> ``a`` is the task ``a``, docs/decisions.md E64), an ``s3://`` URI as
    it is."""
    return uri if uri.startswith("s3://") else os.path.realpath(uri)


def refuse_nested(sources: Sequence[str], target: str) -> None:
    """Refuse a target inside a source task or a source inside the target (``split A --into A/part``: the new
    task's files would be stray files of A, and a task is never nested in another). ``sources`` and ``target``
    as :func:`location` gives them.

    Raises
    ------
    OperationError
        Naming both and the fix.
    """
    tgt = same_task(target).rstrip("/") + "/"
    for src in sources:
        inner = same_task(src).rstrip("/") + "/"
        if inner != tgt and tgt.startswith(inner):
            raise OperationError(f"{target} is inside the task {src}; nothing was written",
                                 hint="name a location outside every source task (a task never holds another)")
        if inner != tgt and inner.startswith(tgt):
            raise OperationError(f"the source task {src} is inside {target}; nothing was written",
                                 hint="name a target that holds no source task")


def open_source(where: str | os.PathLike[str] | ObjectPath) -> SourceTask:
    """Open a task for reading by an edit: ``info.json`` and its committed episodes (one listing, O33).

    Raises
    ------
    FormatError
        Not a task (``meta/info.json`` missing), named; an episode without its data parquet or row.
    ObjectStoreError
        No such bucket / unreachable.
    """
    t = open_store_task(location(where))
    info = read_info(t.root)
    layout = TaskLayout.from_info(t.root, info)
    exts = info.get("video_extensions") or {}
    episodes: dict[int, EpisodeRef] = {}
    for g in list_task_episodes(t.root, layout):
        if g.meta is None:
            continue  # no row: not committed (a publish in progress), not an episode for readers (O11)
        if g.data is None or g.meta_is_shard:
            raise FormatError(f"episode {g.index} has {'no data parquet' if g.data is None else 'a legacy shard row'}",
                              path=t.uri, hint="run `egopool validate TASK` (and `egopool migrate` for shards) first")
        videos = {}
        for key, p in g.videos.items():
            ext = str(exts.get(key) or t.key(p).rsplit(".", 1)[-1])
            videos[key] = (ext, t.key(p))
        episodes[g.index] = EpisodeRef(g.index, t.key(g.data), t.key(g.meta), videos)
    return SourceTask(t, info, layout, episodes)


def _first_diff(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}[{json.dumps(k, ensure_ascii=False)}]"
            d = _first_diff(a[k], b[k], f"{where}[{json.dumps(k, ensure_ascii=False)}]")
            if d is not None:
                return d
        return None
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return None if float(a) == float(b) else where
    return None if a == b else where


def first_difference(a: SourceTask, b: SourceTask) -> str | None:
    """The first declaration (:data:`DECLARATION_KEYS`, then nested keys in sorted order) where ``a`` and ``b``
    differ, as one phrase naming both values, or None when they declare the same."""
    for key in DECLARATION_KEYS:
        where = _first_diff(a.info.get(key), b.info.get(key), key)
        if where is not None:
            va, vb = _at(a.info, where), _at(b.info, where)
            return f"{where} is {va} in {a.t.uri} and {vb} in {b.t.uri}"
    return None


def _at(doc: Mapping[str, Any], where: str) -> str:
    head, _, rest = where.partition("[")
    value: Any = doc.get(head, "absent")
    for part in (rest.rstrip("]").split("][") if rest else []):
        k = json.loads(part)
        value = value.get(k, "absent") if isinstance(value, Mapping) else "absent"
    text = json.dumps(value, ensure_ascii=False) if value != "absent" else "absent"
    return text if len(text) <= 60 else text[:57] + "..."


def subtract_block(total: StatsBlock, part: StatsBlock) -> StatsBlock | None:
    """``total`` without the samples of ``part`` (count, sum and sum of squares subtracted; min/max of ``total``
    kept: a skipped duplicate's values are also in the copy that stays). None when nothing is left."""
    n = total.count - part.count
    if n <= 0:
        return None
    s = total.mean * total.count - part.mean * part.count
    sq = (total.std ** 2 + total.mean ** 2) * total.count - (part.std ** 2 + part.mean ** 2) * part.count
    mean = s / n
    return StatsBlock(n, mean, np.sqrt(np.maximum(sq / n - mean ** 2, 0.0)), total.min, total.max)


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as a zstd parquet file (the writer's compression, §7)."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()
