"""A task in a bucket as the commands that change it see it (file_format.md §1, §2, §9; decisions O34–O38).

The commands that change a task (``delete``, ``repair force-scale``, ``repair clean``, ``keypoints
backfill``) take a directory or ``s3://bucket/prefix/task``. In a directory they hold the task
``flock`` and keep ``pipeline.db`` in step; in a bucket there is neither, and the guarantee comes
from conditional writes instead:

- **the claim of N**: before changing episode N an operation creates N's claim object, the pooling
  server's publish journal ``<prefix>/.egopool-server/journals/<sha1(task)[:20]>/<N:09d>.json``
  (:func:`claim_key`), with ``PutMode.CREATE``. One writer at a time holds it: a server or
  ``egopool sync`` publishing N, or another command changing N, finds it and stops. The journal
  says what the operation is (``op``), which objects it changes (``files``) and the row (``commit``);
  ``ls`` / ``validate`` treat a group under a journal as work in progress (O20), and a re-run of
  the same command finds its journal and rolls it forward;
- **a JSON merge** (``info.json``) is read-modify-write with ``PutMode.UPDATE`` on the version read;
- **a row rewrite** is ``PutMode.UPDATE`` on the row's version: a row deleted meanwhile is not
  brought back.

:func:`open_task_store` checks the location first (the bucket exists, the prefix is a task), in one
line naming the URI and the fix, before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .._state import state_dir
from ..errors import FormatError, OperationError
from ..layout import TaskLayout
from ..meta.info import read_info
from ..storage import ObjectPath, PreconditionFailed, PutMode, Store, as_path, is_object_uri, open_store, require_conditional_writes

from ..publish import json_bytes
from ._common import EXT_TAIL, path_regex

__all__ = ["BucketTask", "Claim", "claim_key", "episode_objects", "open_task_store", "pause", "task_claims"]

#: The pooling server's journal folder beside the tasks of a store (egopool.publish, O12).
JOURNALS = ".egopool-server/journals"
#: ``EGOPOOL_OPS_PAUSE=<op>:<stage>``: the crash tests' seam (:func:`pause`).
PAUSE_ENV = "EGOPOOL_OPS_PAUSE"


def pause(op: str, stage: str) -> None:
    """``EGOPOOL_OPS_PAUSE=<op>:<stage>``: write ``$XDG_STATE_HOME/egopool/ops-paused-<op>-<stage>`` and sleep
    until it is removed (the tests SIGKILL the process there). Without the variable: nothing."""
    if os.environ.get(PAUSE_ENV) != f"{op}:{stage}":
        return
    base = state_dir()
    base.mkdir(parents=True, exist_ok=True)
    marker = base / f"ops-paused-{op}-{stage}"
    marker.write_text(str(os.getpid()))
    while marker.exists():
        time.sleep(0.05)


def claim_key(task: str, index: int) -> str:
    """N's claim / journal object relative to the store holding the task (the server's ``journal_key``)."""
    return f"{JOURNALS}/{hashlib.sha1(task.encode('utf-8')).hexdigest()[:20]}/{index:09d}.json"


@dataclass
class BucketTask:
    """A task in a bucket, opened for a change.

    Attributes
    ----------
    uri:
        ``s3://bucket/prefix/task``.
    store:
        The task's own root (keys ``meta/info.json``, ``data/...``).
    parent:
        The store holding the task (keys ``<task>/...`` and the journals, O12).
    name:
        The task's name (the last component of the URI).
    info, layout:
        ``info.json`` as read, and its templates.
    """

    uri: str
    store: Store
    parent: Store
    name: str
    info: dict[str, Any]
    layout: TaskLayout
    owner: str = field(default_factory=lambda: f"ops-{socket.gethostname()}-{uuid.uuid4().hex[:12]}")

    def row_key(self, index: int) -> str:
        """N's ``meta/episodes`` row key relative to the task."""
        c, f = self.layout.chunk_file(index)
        return self.layout.episodes_path.format(c=c, f=f, chunk_index=c, file_index=f)

    def data_key(self, index: int) -> str:
        """N's data parquet key relative to the task."""
        c, f = self.layout.chunk_file(index)
        return self.layout.data_path.format(c=c, f=f, chunk_index=c, file_index=f)

    @property
    def path(self) -> ObjectPath:
        """The task as the readers' :class:`~egopool.storage.ObjectPath`."""
        root = as_path(self.uri)
        assert isinstance(root, ObjectPath)
        return root


def open_task_store(uri: str, what: str) -> BucketTask:
    """Open ``s3://bucket/prefix/task`` for the command ``what`` (e.g. ``"delete episodes"``).

    Raises
    ------
    ObjectStoreError
        The bucket does not exist or cannot be reached (one line naming the URI and the fix).
    FormatError
        The prefix holds no ``meta/info.json`` (not a task) or it does not read.
    OperationError
        The store cannot write conditionally (its guarantees rest on ``If-None-Match`` / ``If-Match``).
    """
    text = str(uri).rstrip("/")
    if not is_object_uri(text) or text.count("/") < 3:
        raise OperationError(f"{uri}: give the task's prefix, s3://BUCKET/[PREFIX/]TASK",
                             hint="a task in a bucket is named by its bucket and the task's key prefix")
    try:
        info = read_info(text)  # a missing bucket, a prefix without info.json: one line each (O3)
    except FormatError as exc:
        if as_path(text).exists():
            raise
        raise FormatError("no task at this prefix: no object is under it", path=text,
                          hint="name a task's prefix, s3://BUCKET/PREFIX/TASK (`egopool sync DIR s3://...` puts "
                               "one there)") from exc
    store = open_store(text)
    parent_uri, _, name = text.rpartition("/")
    parent = open_store(parent_uri)
    require_conditional_writes(store, what)
    return BucketTask(text, store, parent, name, info, TaskLayout.from_info(text, info))


@dataclass
class Claim:
    """One journal of a task's journal folder: its key (relative to the parent store) and document."""

    index: int
    key: str
    doc: dict[str, Any]

    @property
    def op(self) -> str:
        """``delete``, ``force-scale``, ``backfill``, or ``publish`` (a server's or sync's journal)."""
        return str(self.doc.get("op") or "publish")


def task_claims(bt: BucketTask) -> list[Claim]:
    """Every journal of the task (one LIST of its journal folder, one GET per journal), by N."""
    out: list[Claim] = []
    folder = claim_key(bt.name, 1).rsplit("/", 1)[0] + "/"
    for m in bt.parent.list(folder):
        got = bt.parent.get(m.key)
        if got is None:
            continue
        try:
            doc = json.loads(got[0].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("task") == bt.name and isinstance(doc.get("index"), int):
            out.append(Claim(int(doc["index"]), m.key, doc))
    return sorted(out, key=lambda c: c.index)


def take_claim(bt: BucketTask, index: int, op: str, files: list[str], **extra: Any) -> Claim:
    """Create N's claim for ``op`` (``PutMode.CREATE``): ``files`` are task-relative keys it changes.

    Raises
    ------
    OperationError
        Another writer holds N (a publish, or another command): named with its journal, nothing written.
    """
    key = claim_key(bt.name, index)
    doc = {"task": bt.name, "index": index, "op": op, "owner": bt.owner, "created_at": time.time(),
           "files": [f"{bt.name}/{k}" for k in files], "commit": f"{bt.name}/{bt.row_key(index)}", **extra}
    try:
        bt.parent.put(key, json_bytes(doc, indent=None), mode=PutMode.CREATE)
    except PreconditionFailed:
        raise OperationError(f"{bt.uri}: episode {index} is being changed by another writer "
                             f"({bt.parent.url(key)} exists); nothing was written",
                             hint="wait for it (a publish or another egopool command) and run again; a journal "
                                  "left by a killed writer is handled by `egopool repair clean TASK`") from None
    return Claim(index, key, doc)


@dataclass
class EpisodeObjects:
    """N's objects in the three places (task-relative keys): its row, data parquet(s) and videos."""

    index: int
    row: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    #: legacy ``file-`` episodes shards of N's chunk (v1.1.0, §6.1): possibly holding N's row among others
    legacy_rows: list[str] = field(default_factory=list)
    #: key -> bytes
    sizes: dict[str, int] = field(default_factory=dict)

    def keys(self) -> list[str]:
        """Every key, data and videos first, the row last."""
        return [*self.data, *self.videos, *self.row]


def episode_objects(store: Store, layout: TaskLayout, index: int) -> EpisodeObjects:
    """List N's objects: the three places, only N's own chunk prefixes (one LIST each, O5).

    Names are matched with the task's templates (``episode-`` and the legacy ``file-`` prefix,
    every ``image_key`` and extension; a legacy PNG16 depth directory's frames count as N's).
    """
    c, f = layout.chunk_file(index)
    out = EpisodeObjects(index)
    prefix, rx = path_regex(layout.data_path, c, f)
    for m in store.list(prefix + "/" if prefix else ""):
        if rx.match(m.key):
            out.data.append(m.key)
            out.sizes[m.key] = m.size
    prefix, rx = path_regex(layout.episodes_path, c, f)
    for m in store.list(prefix + "/" if prefix else ""):
        out.sizes[m.key] = m.size
        name = m.key.rsplit("/", 1)[-1]
        if rx.match(m.key):
            (out.legacy_rows if name.startswith("file-") else out.row).append(m.key)
        elif name.startswith("file-") and name.endswith(".parquet") and "/" not in m.key[len(prefix) + 1:]:
            out.legacy_rows.append(m.key)
    prefix, rx = path_regex(layout.video_path, c, f)
    _, rx_dir = path_regex(EXT_TAIL.sub("", layout.video_path), c, f)
    for m in store.list(prefix + "/" if prefix else ""):
        parent = m.key.rsplit("/", 1)[0]
        if rx.match(m.key) or rx.match(parent) or rx_dir.match(parent):
            out.videos.append(m.key)
            out.sizes[m.key] = m.size
    return out

