"""Publishing an episode into a bucket task: claim N, PUT every object, PUT the row last (docs/decisions.md O11-O14).

S3 has no rename and no lock, so the order alone makes a publish atomic for readers:

1. **claim N**: the publish journal ``.egopool-server/journals/<task hash>/<N:09d>.json`` is
   created with ``If-None-Match: *`` (one winner among every server and ``egopool sync``
   writing into the bucket), then the row ``meta/episodes/...`` of N is checked absent (a
   journal is deleted only after its row exists, so a claim that wins after an earlier
   publish of N finished sees that row and gives N up). The journal lists every key the
   publish will write and who wrote it (``owner``: the server's id, :meth:`BucketStore.owner`);
2. every object of the episode (videos, data parquet) is PUT under its final key (a large
   one as a multipart upload, invisible until completed);
3. the row is PUT with ``If-None-Match: *``: **the commit point**. Readers count an episode
   from its row on (the read API, ``open_task`` on ``s3://``, ``egopool validate``), so the
   objects of step 2 without a row are never seen;
4. a new task's ``tasks.jsonl`` and ``info.json`` are created (``If-None-Match``) only now:
   a task exists for readers from ``info.json`` on, i.e. from its first committed episode;
5. ``server.db``, then ``info.json`` / ``stats.json`` merged by read-modify-write with
   ``If-Match`` on the ETag read, retried when another writer got there first;
6. the journal is deleted.

A failure before 3 deletes what was PUT and the journal. A killed publish leaves its journal:
:func:`recover_bucket` (start-up) rolls it forward when its row exists (steps 4-6, with
``stats.json`` rebuilt from the committed episodes' data, as the local writer's replay does)
and back otherwise (its keys deleted, incomplete multipart uploads under the task aborted).
It handles this server's own journals (their publisher is dead: one process per state
directory) and any other journal older than ``stale_after`` seconds (its server died).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, FormatError, MetaUpdateError
from ..layout import TaskLayout
from ..meta.info import merge_info
from ..meta.stats import ACTION_BLOCK, StatsBlock, episode_stats_file, merge_stats, needs_recalc
from ..storage.bucket import Bucket, Conflict
from .db import EpisodeRow, ServerDB

__all__ = ["BucketPublication", "claim", "journal_key", "publish_to_bucket", "recover_bucket", "update_json"]

JOURNALS = ".egopool-server/journals"
#: a journal of another owner is treated as dead after this long (s): a publish takes seconds to minutes
STALE_AFTER = 6 * 3600.0
_ROW = re.compile(r"chunk-(\d+)/episode-(\d+)\.parquet\Z")

Pause = Callable[[str], None]


def task_hash(task: str) -> str:
    """The journal folder of a task: 20 hex of sha1 (task names may hold any character)."""
    return hashlib.sha1(task.encode("utf-8")).hexdigest()[:20]


def journal_key(task: str, index: int) -> str:
    """The journal / claim object of episode N of ``task`` (relative to the store prefix)."""
    return f"{JOURNALS}/{task_hash(task)}/{index:09d}.json"


def json_bytes(obj: Any, *, indent: int | None) -> bytes:
    """The bytes :func:`egopool._atomic.atomic_write_json` writes (UTF-8, no NaN, final newline).

    Raises
    ------
    FormatError
        ``obj`` holds NaN or Infinity.
    """
    try:
        return (json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False) + "\n").encode("utf-8")
    except ValueError as exc:
        raise FormatError(f"refusing to write NaN/Infinity into JSON ({exc})") from exc


def claim(bucket: Bucket, task: str, index: int, row_rel: str, doc: Mapping[str, Any]) -> bool:
    """Claim episode N of ``task`` for one publish (module docstring, step 1): True when won.

    ``row_rel``: the row's key relative to the store prefix. The journal ``doc`` is written
    as the claim; when N turns out committed already, the claim is withdrawn.

    Raises
    ------
    ObjectStoreError
        The bucket cannot be reached.
    """
    key = journal_key(task, index)
    try:
        bucket.put(key, json_bytes(dict(doc), indent=None), if_none_match=True)
    except Conflict:
        return False
    if bucket.exists(row_rel):  # N was published (and its journal deleted) before our claim
        bucket.delete([key])
        return False
    return True


def update_json(bucket: Bucket, rel: str, change: Callable[[Any], Any], *, indent: int | None,
                attempts: int = 200) -> Any:
    """Read-modify-write of JSON object ``rel`` with ``If-Match`` (create: ``If-None-Match``), retried.

    ``change(old)`` gets the parsed document (None when absent) and returns the new one, or None
    to leave the object as it is. Returns what was written (or None).

    Raises
    ------
    MetaUpdateError-free: FormatError from ``change``; ObjectStoreError; Conflict after ``attempts`` lost races.
    """
    for i in range(attempts):
        got = bucket.get(rel)
        old = None
        if got is not None:
            try:
                old = json.loads(got[0].decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise FormatError(f"{bucket.url(rel)} is not JSON ({exc})",
                                  hint="run `egopool stats recalc` on a local copy, or restore it") from exc
        new = change(old)
        if new is None:
            return None
        try:
            if got is None:
                bucket.put(rel, json_bytes(new, indent=indent), if_none_match=True)
            else:
                bucket.put(rel, json_bytes(new, indent=indent), if_match=got[1])
            return new
        except Conflict:
            time.sleep(random.uniform(0, min(0.5, 0.01 * (i + 1))))
    raise Conflict(f"{bucket.url(rel)}: {attempts} conditional writes lost to other writers")


@dataclass
class BucketPublication:
    """One publish into a bucket task (module docstring).

    Attributes
    ----------
    task:
        Task name (its objects are under ``<task>/``).
    index:
        Server N (claimed).
    objects:
        ``(local file, key relative to the store prefix)`` of the videos and the data parquet.
    row:
        ``(local row file, row key)``: the commit object.
    declarations:
        Merged into ``info.json`` (§6.7 union).
    blocks:
        The episode's stats blocks (§4).
    episode:
        The ``server.db`` row.
    upload_fields:
        Upload-log fields set with it.
    new_info, tasks_jsonl:
        ``info.json`` and ``tasks.jsonl`` of a task that does not exist yet.
    sha:
        Key -> sha256 of each object, stored in its metadata (``x-amz-meta-sha256``).
    """

    task: str
    index: int
    objects: list[tuple[Path, str]]
    row: tuple[Path, str]
    declarations: dict[str, Any]
    blocks: dict[str, StatsBlock]
    episode: EpisodeRow
    upload_fields: dict[str, Any] = field(default_factory=dict)
    new_info: dict[str, Any] | None = None
    tasks_jsonl: bytes | None = None
    sha: dict[str, str] = field(default_factory=dict)


def journal_doc(pub_task: str, index: int, owner: str, keys: list[str], row_key: str,
                **extra: Any) -> dict[str, Any]:
    """The journal object's document: task, N, owner, creation time (s), every key, the commit key."""
    return {"task": pub_task, "index": index, "owner": owner, "created_at": time.time(), "files": keys,
            "commit": row_key, **extra}


def publish_to_bucket(bucket: Bucket, db: ServerDB | None, pub: BucketPublication, pause: Pause) -> str | None:
    """Steps 2-6 of the module docstring; the caller has claimed N (:func:`claim`).

    Returns
    -------
    str or None
        A message when the episode stands but ``info.json`` / ``stats.json`` could not be merged.

    Raises
    ------
    EgopoolError
        Before the commit; what was PUT and the journal are deleted again.
    """
    jkey = journal_key(pub.task, pub.index)
    placed: list[str] = []
    try:
        for path, rel in pub.objects:
            placed.append(rel)
            bucket.upload(path, rel, sha256=pub.sha.get(rel))
        pause("placed")
        bucket.put(pub.row[1], pub.row[0].read_bytes(), if_none_match=True, sha256=pub.sha.get(pub.row[1]))  # commit
    except BaseException:
        try:
            if not bucket.exists(pub.row[1]):
                bucket.delete(placed)
                bucket.delete([jkey])
        except EgopoolError:
            pass  # the bucket is unreachable: the next import into the task, or the start-up sweep, undoes it
        raise
    return finish(bucket, db, pub.task, pub.index, pub.declarations, pub.blocks, pub.episode, pub.upload_fields,
                  pub.new_info, pub.tasks_jsonl, pause)


def _create_task_meta(bucket: Bucket, task: str, new_info: Mapping[str, Any] | None,
                      tasks_jsonl: bytes | None) -> None:
    """Step 4: a new task's ``tasks.jsonl`` then ``info.json`` (create only: another writer may have made it)."""
    if new_info is None:
        return
    for rel, body in ((f"{task}/meta/tasks.jsonl", tasks_jsonl or b""),
                      (f"{task}/meta/info.json", json_bytes(dict(new_info), indent=2))):
        try:
            bucket.put(rel, body, if_none_match=True)
        except Conflict:
            pass


def merge_meta(bucket: Bucket, task: str, index: int, declarations: Mapping[str, Any],
               blocks: Mapping[str, StatsBlock] | None) -> None:
    """``info.json`` (union, latest wins) and ``stats.json`` (accumulator; ``blocks`` None: rebuilt from every
    committed episode's data) merged with If-Match retries.

    Raises
    ------
    MetaUpdateError
        Either could not be written; the episode stands.
    """
    info_rel = f"{task}/meta/info.json"
    try:
        info = update_json(bucket, info_rel, lambda old: merge_info(old or {}, declarations), indent=2)
    except (EgopoolError, TypeError, ValueError, AttributeError) as exc:
        raise MetaUpdateError(index, f"meta/info.json was not updated ({exc})", path=bucket.url(info_rel)) from exc
    stats_rel = f"{task}/meta/stats.json"

    def change(old: Any) -> Any:
        if blocks is not None and isinstance(old, dict) and not needs_recalc(old):
            try:
                return merge_stats(old, blocks)
            except (KeyError, TypeError, ValueError):
                pass
        if blocks is not None and old is None:
            return merge_stats({}, blocks)
        return committed_stats_in_bucket(bucket, task, info)

    try:
        update_json(bucket, stats_rel, change, indent=None)
    except (EgopoolError, TypeError, ValueError) as exc:
        raise MetaUpdateError(index, f"meta/stats.json was not updated ({exc})", path=bucket.url(stats_rel),
                              hint="rebuild it with `egopool stats recalc`") from exc


def committed_rows(bucket: Bucket, task: str, layout: TaskLayout) -> dict[int, str]:
    """N -> row key of every committed episode of ``task`` (one LIST of ``meta/episodes/``: 1 request per
    1000 episodes)."""
    out: dict[int, str] = {}
    for o in bucket.list_objects(f"{task}/meta/episodes/"):
        m = _ROW.search(o.key)
        if m:
            out[layout.index_of(int(m.group(1)), int(m.group(2)))] = o.key
    return out


def committed_stats_in_bucket(bucket: Bucket, task: str, info: Mapping[str, Any]) -> dict[str, Any]:
    """``stats.json`` recomputed from every committed episode's data parquet (downloaded one at a time)."""
    layout = TaskLayout.from_info(Path(task), info)
    doc: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="egopool-stats-") as tmp:
        for n in sorted(committed_rows(bucket, task, layout)):
            rel = layout.data_file(n).as_posix()
            dest = Path(tmp) / "data.parquet"
            bucket.download(rel, dest)
            doc = merge_stats(doc, episode_stats_file(dest, info))
    doc["action"] = dict(ACTION_BLOCK)
    return doc


def finish(bucket: Bucket, db: ServerDB | None, task: str, index: int, declarations: Mapping[str, Any],
           blocks: Mapping[str, StatsBlock] | None, episode: EpisodeRow | None, upload_fields: Mapping[str, Any],
           new_info: Mapping[str, Any] | None, tasks_jsonl: bytes | None, pause: Pause) -> str | None:
    """Steps 4-6 after the commit (also the roll-forward of a journal whose row exists)."""
    _create_task_meta(bucket, task, new_info, tasks_jsonl)
    pause("committed")
    if db is not None and episode is not None:
        db.add_episode(episode, dict(upload_fields))
    problem = None
    try:
        merge_meta(bucket, task, index, declarations, blocks)
    except MetaUpdateError as exc:
        problem = exc.one_line()
    if problem is None:
        bucket.delete([journal_key(task, index)])
    return problem  # a journal left: the next start-up replays the merge


def _read_journal(bucket: Bucket, key: str) -> dict[str, Any] | None:
    got = bucket.get(key)
    if got is None:
        return None
    try:
        doc = json.loads(got[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    ok = isinstance(doc, dict) and isinstance(doc.get("task"), str) and isinstance(doc.get("index"), int) and \
        isinstance(doc.get("files"), list) and isinstance(doc.get("commit"), str)
    return doc if ok else None


def recover_bucket(bucket: Bucket, db: ServerDB | None, owner: str, *, stale_after: float = STALE_AFTER,
                   now: float | None = None, task: str | None = None) -> list[str]:
    """The start-up sweep (module docstring); returns one line per journal handled.

    Journals of ``owner`` and journals older than ``stale_after`` s are finished (row present)
    or undone (row absent); an incomplete multipart upload is aborted when its key belongs to a
    journal undone here or it is older than ``stale_after``.

    Raises
    ------
    ObjectStoreError
        The bucket cannot be reached.
    """
    now = time.time() if now is None else now
    lines: list[str] = []
    undone: set[str] = set()
    for o in bucket.list_objects(f"{JOURNALS}/{task_hash(task)}/" if task is not None else JOURNALS + "/"):
        doc = _read_journal(bucket, o.key)
        if doc is None:
            continue  # unreadable: written whole (one PUT) or not at all; a foreign object: left alone
        mine = doc.get("owner") == owner
        if not mine and now - float(doc.get("created_at") or 0) < stale_after:
            continue  # another live server's publish in progress
        task, n = doc["task"], int(doc["index"])
        if bucket.exists(doc["commit"]):
            ep = doc.get("episode")
            row = EpisodeRow(**{k: ep[k] for k in EpisodeRow.__dataclass_fields__}) if isinstance(ep, dict) else None
            finish(bucket, db, task, n, doc.get("declarations") or {}, None, row, doc.get("upload_fields") or {},
                   doc.get("new_info"), str(doc.get("tasks_jsonl") or "").encode("utf-8") or None, lambda s: None)
            lines.append(f"{task}: finished the interrupted publish of episode {n} into {bucket.uri}")
        else:
            keys = [str(k) for k in doc["files"] if isinstance(k, str)]
            bucket.delete(keys)
            bucket.delete([o.key])
            undone.update(keys)
            lines.append(f"{task}: rolled back the interrupted publish of episode {n} into {bucket.uri}")
    for key, upload_id, started in bucket.incomplete_uploads("") if task is None else []:
        if key in undone or now - started > stale_after:
            bucket.abort_upload(key, upload_id)
            lines.append(f"aborted an incomplete multipart upload of {bucket.url(key)}")
    return lines


def new_owner_id() -> str:
    """A fresh owner id for journals (a server's is kept in its state directory)."""
    return f"{os.uname().nodename}-{uuid.uuid4().hex[:12]}"
