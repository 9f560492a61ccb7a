"""Episodes a pooling server is publishing into a task (docs/decisions.md U16, U5).

``egopool serve`` keeps its state beside the tasks of its store, in ``<store>/.egopool-server/``
(a dot directory: no reader lists it, file_format.md §11). Before it places an uploaded
episode's files into ``<store>/<task>/`` it writes a publish journal
``journals/import-<sha1 of the task name, 20 hex>-<token>.json`` naming the episode's N, every file
it places and the commit object (the ``meta/episodes`` row, placed last). Until that row exists,
the episode's data parquet and videos are a file group without its row, which ``ls`` and
``validate`` run on the store directory would otherwise show as an incomplete episode (decision 5
shows such groups on purpose: on a recorder's disk they are what a crash left). This module lets
them tell the two apart: an uncommitted group a journal names belongs to a server import in
progress (or to one a killed server left, which the server rolls back when it starts).

A task in a bucket (``s3://bucket/prefix/task``, a store of ``egopool serve --store s3://...`` or
a destination of ``egopool sync``) has its journals as objects
``<prefix>/.egopool-server/journals/<sha1 of the task name, 20 hex>/<N, 9 digits>.json`` whose
``files`` and ``commit`` keys are relative to the store prefix (docs/decisions.md O11, O20).
"""

from __future__ import annotations

import hashlib

from .._safe_read import read_json
from ..errors import EgopoolError
from ..storage import ObjectPath, TaskPathLike, as_path

__all__ = ["STATE_DIR", "journal_prefix", "publishing"]

#: The pooling server's state directory inside its store.
STATE_DIR = ".egopool-server"


def journal_prefix(task: str) -> str:
    """File-name prefix of the publish journals of task ``task``."""
    return f"import-{hashlib.sha1(task.encode('utf-8')).hexdigest()[:20]}-"


def publishing(task_dir: TaskPathLike) -> dict[int, list[str]]:
    """Episodes of ``task_dir`` that a pooling server's import has placed files of but not committed.

    Parameters
    ----------
    task_dir:
        A task directory; only one inside a server's store (``<store>/<task>`` beside
        ``<store>/.egopool-server/journals/``) can have any.

    Returns
    -------
    dict
        N -> task-relative POSIX paths the import places (its commit object last), for every journal
        of this task whose commit object does not exist yet. Empty elsewhere. For an ``s3://``
        task, the bucket's own publish journals are read (docs/decisions.md O11, O20).
        A journal that does not read (being written: written atomically, so nothing was placed yet)
        is skipped.
    """
    root = as_path(task_dir)
    if isinstance(root, ObjectPath):
        return _publishing_in_bucket(root)
    jdir = root.parent / STATE_DIR / "journals"
    if not jdir.is_dir():
        return {}
    out: dict[int, list[str]] = {}
    for jp in sorted(jdir.glob(f"{journal_prefix(root.name)}*.json")):
        try:
            doc = read_json(jp, what="publish journal")
        except EgopoolError:
            continue  # unlinked meanwhile (finished), or never written through
        if not isinstance(doc, dict) or doc.get("task") != root.name or not isinstance(doc.get("index"), int):
            continue
        files = [f for f in doc.get("files") or [] if isinstance(f, str)]
        commit = doc.get("commit") or (files[-1] if files else None)
        if isinstance(commit, str) and not (root / commit).is_file():
            out[int(doc["index"])] = files
    return out


def _publishing_in_bucket(root: ObjectPath) -> dict[int, list[str]]:
    """:func:`publishing` for a task in a bucket: one LIST of its journal prefix, one GET per journal,
    one HEAD per commit key (docs/decisions.md O20)."""
    store = root.parent
    jdir = store / STATE_DIR / "journals" / hashlib.sha1(root.name.encode("utf-8")).hexdigest()[:20]
    out: dict[int, list[str]] = {}
    cut = len(root.name) + 1
    for rel, jp in jdir.walk_objects():
        if "/" in rel or not rel.endswith(".json"):
            continue
        try:
            doc = read_json(jp, what="publish journal")
        except (EgopoolError, FileNotFoundError):
            continue  # deleted meanwhile (finished or rolled back)
        if not isinstance(doc, dict) or doc.get("task") != root.name or not isinstance(doc.get("index"), int):
            continue
        files = [f for f in doc.get("files") or [] if isinstance(f, str) and f.startswith(root.name + "/")]
        commit = doc.get("commit")
        if isinstance(commit, str) and commit.startswith(root.name + "/") and not (store / commit).is_file():
            out[int(doc["index"])] = [f[cut:] for f in files]
    return out
