"""Importing an upload into a bucket store: the same verification, a bucket publish (docs/decisions.md O11-O13).

:class:`BucketImporter` keeps every step of :class:`~egopool.server.importer.Importer` up to
the publish (the zip, the manifest, the slice's format, N, the validator: all on the local
staging directory) and replaces step 8: the server task's ``info.json`` / ``stats.json`` are
read from the bucket (a scratch copy under the state directory for the writer's own checks),
N is claimed in the bucket (:func:`~egopool.server.bucket_publish.claim`), and the episode is
published by :func:`~egopool.server.bucket_publish.publish_to_bucket`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import FormatError, UploadRejectedError
from ..layout import TaskLayout
from ..meta.info import new_info, read_info
from ..meta.stats import StatsBlock
from ..meta.tasks import read_tasks
from ..registry import sha256_file
from ..transfer.manifest import Manifest
from .bucket_publish import (JOURNALS, BucketPublication, claim, journal_doc, journal_key, publish_to_bucket,
                             recover_bucket, task_hash)
from .bucket_store import BucketStore
from .db import EpisodeRow
from .importer import ImportResult, Importer, _may_not_declare, check_upload_fits

__all__ = ["BucketImporter", "open_bucket_store"]


class BucketImporter(Importer):
    """:class:`~egopool.server.importer.Importer` for a :class:`~egopool.server.bucket_store.BucketStore`.

    Parameters
    ----------
    store:
        The bucket store.
    on_conflict, limits:
        As for :class:`~egopool.server.importer.Importer`.
    """

    store: BucketStore
    group_commit = False  # one publish at a time (docs/decisions.md U18: the group commit is the directory store's)

    def _shadow(self, task: str, task_dir: Path) -> dict[str, Any] | None:
        """Copy the bucket task's ``info.json`` / ``stats.json`` into ``task_dir/meta``; its info (None: no task)."""
        b = self.store.bucket
        shutil.rmtree(task_dir, ignore_errors=True)
        (task_dir / "meta").mkdir(parents=True)
        got = b.get(f"{task}/meta/info.json")
        if got is None:
            return None
        (task_dir / "meta" / "info.json").write_bytes(got[0])
        stats = b.get(f"{task}/meta/stats.json")
        if stats is not None:
            (task_dir / "meta" / "stats.json").write_bytes(stats[0])
        try:
            return read_info(task_dir)
        except FormatError as exc:
            raise UploadRejectedError(409, "server_task_broken", f"the server task cannot take episodes: "
                                                                 f"{exc.message}") from exc

    def _still_held(self, task: str, index: int) -> dict[str, str] | None:
        """sha256 (from the objects' metadata) of N's objects, or None when its row or data is gone."""
        b = self.store.bucket
        got = b.get(f"{task}/meta/info.json")
        if got is None:
            return None
        try:
            info = json.loads(got[0].decode("utf-8"))
            layout = TaskLayout.from_info(Path(task), info)
        except (ValueError, FormatError):
            return None
        keys = [layout.episodes_file(index).as_posix(), layout.data_file(index).as_posix()]
        exts = info.get("video_extensions") if isinstance(info.get("video_extensions"), dict) else {}
        keys += [layout.video_file(index, k, str(e)).as_posix() for k, e in sorted(exts.items())]
        out: dict[str, str] = {}
        for i, key in enumerate(keys):
            sha = b.sha256_of(key)
            if sha is None and not b.exists(key):
                if i < 2:
                    return None
                continue  # a stream this episode does not have
            out[key[len(task) + 1:]] = sha or ""
        return out

    def _publish(self, task: str, task_dir: Path, staging: Path, info: dict[str, Any], layout: TaskLayout, n: int,
                 manifest: Manifest, host_id: str, zip_sha256: str, upload_id: int, token_id: str | None,
                 validation: dict[str, Any], length: int, streams: list[str],
                 hashed: Mapping[Path, str], synced: frozenset[Path],
                 blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]], may_declare: bool) -> ImportResult:
        b = self.store.bucket
        recover_bucket(b, self.store.db, self.store.owner, task=task)  # our own failed publishes into it
        server_info = self._shadow(task, task_dir)
        fresh = None
        if server_info is None:
            if not may_declare:  # docs/decisions.md U15
                raise _may_not_declare(task, f"task {task!r} does not exist on this server, and this token may not "
                                             "create it (its first upload sets the fps, columns and streams every "
                                             "later upload must match)")
            fresh = new_info(task, fps=float(info.get("fps") or 30.0), app_version=str(info.get("app_version") or
                                                                                      "unknown"),
                             created_at=float(info.get("created_at") or time.time()), chunks_size=layout.chunks_size)
            server_info = fresh
        server_layout = TaskLayout.from_info(Path(task), server_info)  # paths = keys under the store prefix
        if server_layout.chunks_size != layout.chunks_size:
            raise UploadRejectedError(409, "declaration_conflict", f"the server task has chunks_size "
                                                                   f"{server_layout.chunks_size}, the upload "
                                                                   f"{layout.chunks_size}")
        dup = self._duplicate(task, manifest, host_id, n, zip_sha256, upload_id)
        if dup is not None:
            return dup
        decl, blocks = check_upload_fits(task, task_dir, server_info, info, fresh, blocks_for, may_declare)
        tasks_jsonl = None
        if fresh is not None:
            lines = read_tasks(staging) if (staging / "meta" / "tasks.jsonl").is_file() else []
            tasks_jsonl = "".join(json.dumps(o, ensure_ascii=False) + "\n"
                                  for o in lines or [{"task_index": 0, "task": task}]).encode("utf-8")
        c, f = layout.chunk_file(n)
        vdir = staging / "videos" / f"chunk-{c:03d}"
        videos = [(d.name, p.suffix.lstrip(".")) for d in sorted(vdir.iterdir()) if vdir.is_dir()
                  for p in sorted(d.iterdir())] if vdir.is_dir() else []

        def doc_for(k: int) -> tuple[dict[str, Any], EpisodeRow, dict[str, Any]]:
            keys = [server_layout.video_file(k, key, ext).as_posix() for key, ext in videos]
            keys.append(server_layout.data_file(k).as_posix())
            row_key = server_layout.episodes_file(k).as_posix()
            ep = EpisodeRow(task, k, host_id, manifest.source_hostname, n, manifest.episode_digest, upload_id,
                            token_id, time.time(), length, streams, validation)
            upload_fields = {"client_episode_index": n, "server_episode_index": k, "outcome": "imported",
                             "status": 200, "finished_at": time.time()}
            d = journal_doc(task, k, self.store.owner, [*keys, row_key], row_key, episode=ep.to_dict(),
                            upload_fields=upload_fields, declarations={**decl, "total_episodes": k},
                            new_info=fresh, tasks_jsonl=tasks_jsonl.decode("utf-8") if tasks_jsonl else None)
            return d, ep, upload_fields

        target = self._claim(task, server_layout, server_info, n, doc_for)
        try:
            doc, episode, upload_fields = doc_for(target)
            decl["total_episodes"] = target
            moves, row = self._stage_files(staging, layout, server_layout, task_dir, n, target)
            rewritten = {layout.data_file(n), layout.episodes_file(n)} if target != n else set()
            sha = {staged: hashed[staged] if staged in hashed and staged not in rewritten else sha256_file(staged)
                   for staged, _ in [*moves, row]}
            pub = BucketPublication(task, target, [(s, fin.as_posix()) for s, fin in moves],
                                    (row[0], row[1].as_posix()), decl, blocks, episode, upload_fields, fresh,
                                    tasks_jsonl, sha={fin.as_posix(): sha[s] for s, fin in [*moves, row]})
        except BaseException:
            b.delete([journal_key(task, target)])
            raise
        problem = publish_to_bucket(b, self.store.db, pub, self._pause)
        files = {fin.as_posix()[len(task) + 1:]: sha[s] for s, fin in [*moves, row]}
        return ImportResult("imported", task, target, n, host_id, target != n, zip_sha256, manifest.episode_digest,
                            upload_id, files, validation, problem)

    def _claim(self, task: str, layout: TaskLayout, info: Mapping[str, Any], n: int, doc_for: Any) -> int:
        """Server N (docs/decisions.md U2, O12): the client's N when its claim wins, else (renumber) the next
        N above everything known that a claim wins.

        Raises
        ------
        UploadRejectedError
            409 ``episode_taken`` under ``--on-conflict reject``.
        """
        b, db = self.store.bucket, self.store.db

        def attempt(k: int) -> bool:
            if db.episode(task, k) is not None:
                return False
            d, _, _ = doc_for(k)
            return claim(b, task, k, d["commit"], d)

        if attempt(n):
            return n
        if self.on_conflict == "reject":
            raise UploadRejectedError(409, "episode_taken", f"task {task!r} already holds episode {n}; this server "
                                                            "runs --on-conflict reject")
        claimed = [int(o.key.rsplit("/", 1)[-1].split(".")[0]) for o in
                   b.list_objects(f"{JOURNALS}/{task_hash(task)}/") if o.key.endswith(".json")]
        k = max([int(info.get("total_episodes") or 0), db.max_index(task), self._scanned.get(task, 0), n,
                 *claimed]) + 1
        while not attempt(k):
            k += 1
        self._scanned[task] = k
        return k


def open_bucket_store(uri: str, state: Path | None, log: logging.Logger) -> tuple[BucketStore, type[Importer]]:
    """Open a bucket store at server start: take its state directory's ``server.lock``, run the start-up
    sweep (:func:`~egopool.server.bucket_publish.recover_bucket`, each line logged as a warning).

    Raises
    ------
    LockError
        Another server uses this state directory.
    ObjectStoreError
        The bucket cannot be reached.
    """
    store = BucketStore(uri, state)
    store.acquire()
    try:
        for line in recover_bucket(store.bucket, store.db, store.owner):
            log.warning(line)
    except BaseException:
        store.release()
        raise
    return store, BucketImporter
