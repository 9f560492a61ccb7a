"""Importing one uploaded episode: verify everything, then publish (file_format.md §9; docs/decisions.md U4, U5).

:meth:`Importer.import_zip` (:meth:`Importer.verify`, then :meth:`Importer.publish`) runs on a spooled
request body; steps 1-5 and 7 (:func:`~egopool.server.verify.verify_upload`) run in a worker process of the
server (:class:`~egopool.server.workers.VerifyPool`, U14), the rest in the server process:

1. the zip's structure and manifest (:func:`~egopool.server.zipcheck.inspect_zip`): hostile
   names, sizes, ratios — 400/413;
2. the form's ``episode_index`` (the file number f) against the arcnames — 422;
3. every member streamed into a staging task directory and checked against the manifest — 400;
4. ``info.json.format == "pooled_episodes_v1"`` and the §9 path templates — 422;
5. the parquet footers and the videos' frame sizes are bounded (U9, U20) — 413/422; the data parquet's
   ``episode_index`` column is the truth for N (§9) — 422;
6. content the task already pooled (the same episode digest, from whichever client): a 200
   no-op returning the server N it got, while the store still holds that episode (409
   ``episode_removed`` once it was deleted there; U2);
7. egopool's own validator on the slice: any error is 422 with the findings;
8. under the task's import guard: the slice's declarations must fit the server task
   (:mod:`~egopool.server.declarations`) — 409/403; the server N is the client's N when it is free, else
   the next free one (``--on-conflict renumber``) or 409 (``reject``); a renumbered episode gets
   ``episode_index`` rewritten in its data parquet and row, its videos renamed
   (:mod:`egopool.server.renumber`); N is claimed with its journal and the episode published by the one
   algorithm of :mod:`egopool.publish`, on a directory store and a bucket store alike (docs/decisions.md
   O26). The uploads that waited for the task's guard are checked one by one and published together
   (:func:`egopool.publish.publish_group`, the group commit of U18); a refusal is that upload's alone.

Nothing in the store's tasks changes before step 8's publish, and a failed publish is undone, so every
refusal leaves the store as it was.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EgopoolError, FormatError, UploadRejectedError
from ..layout import TaskLayout
from ..meta import markers
from ..meta.info import merge_info, new_info
from ..meta.retired import retired_key
from ..meta.tasks import read_tasks
from ..publish import (JOURNALS, Publication, claim_all, committed_rows, journal_doc, publish_group, stamp_digests,
                       task_hash)
from ..registry import sha256_file
from ..transfer.manifest import Manifest
from ..write.recovery import reclaim_stale
from .db import EpisodeRow
from .declarations import added_declarations, check_upload_fits, may_not_declare
from .group_commit import GroupQueue
from .renumber import renumber_row, rewrite_episode_index
from .store import ServerStore, record_into
from .verify import Verified, client_host_id, local, verify_attempt, verify_upload
from .workers import Verifier, VerifierLost
from .zipcheck import Limits

__all__ = ["ON_CONFLICT", "ImportResult", "Importer", "Verified", "verify_upload"]

log = logging.getLogger("egopool.server")
ON_CONFLICT = ("renumber", "reject")
_PAUSE_ENV = "EGOPOOL_SERVER_PAUSE"


@dataclass
class ImportResult:
    """The server's answer to an accepted upload.

    Attributes
    ----------
    status:
        ``"imported"`` or ``"duplicate"`` (the same content was already pooled: nothing changed).
    task:
        Server task name.
    episode_index:
        Server N.
    client_episode_index:
        The client's N (the data parquet's ``episode_index``).
    client_host_id:
        The client's host id as the server derived it (:func:`~egopool.server.verify.client_host_id`).
    renumbered:
        True when server N differs from the client's N.
    zip_sha256:
        sha256 of the request's zip as received: the client compares it to its own.
    episode_digest:
        The episode's content digest (manifest, verified member by member).
    upload_id:
        Row in the server's upload log.
    files:
        Task-relative path -> sha256 of the episode's files as published.
    validation:
        ``{"ok", "errors", "warnings"}`` of the uploaded slice.
    meta_warning:
        Set when ``info.json`` / ``stats.json`` could not be merged (the episode stands).
    """

    status: str
    task: str
    episode_index: int
    client_episode_index: int
    client_host_id: str
    renumbered: bool
    zip_sha256: str
    episode_digest: str
    upload_id: int
    files: dict[str, str] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    meta_warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON answer."""
        return dict(self.__dict__)


def _inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


@dataclass
class _Waiting:
    """A verified upload waiting for its task's guard: :meth:`Importer.publish`'s arguments."""

    v: Verified
    zip_sha256: str
    token_id: str | None
    may_declare: bool


@dataclass
class _Prepared:
    """An upload checked and staged under the guard, its N chosen (not claimed yet)."""

    pub: Publication
    doc: dict[str, Any]
    files: dict[str, str]


class _LostClaim(Exception):
    """Another writer claimed the N chosen meanwhile: the upload is taken again in the next group."""


class Importer:
    """Imports uploads into a :class:`~egopool.server.store.ServerStore` (module docstring).

    Parameters
    ----------
    store:
        The store (a directory or a bucket).
    on_conflict:
        ``"renumber"`` (default): a client N the server task already holds gets the next free
        server N; ``"reject"``: such an upload is answered 409 (docs/decisions.md U2).
    limits:
        Zip limits.
    pool:
        Worker processes (docs/decisions.md U14) or Ray tasks (U28) for :meth:`verify`; None verifies in the
        calling thread.
    max_publishes:
        Groups published at a time, over every task (U19).

    Notes
    -----
    ``EGOPOOL_SERVER_PAUSE=<stage>`` (``received``; ``placed``: every object but the meta row in
    place; ``committed``: the row in place, the commit) makes an import stop at that stage, write
    ``<state>/paused-<stage>`` and sleep until that file is removed: the seam the crash tests
    SIGKILL the server (or its bucket) at. Unset in production.
    """

    #: Publishes waiting for one task's guard are published together (docs/decisions.md U18), on every store.
    group_commit = True
    #: Publications in one group at most.
    GROUP_LIMIT = 16

    def __init__(self, store: ServerStore, *, on_conflict: str = "renumber", limits: Limits | None = None,
                 pool: Verifier | None = None, max_publishes: int = 2) -> None:
        if on_conflict not in ON_CONFLICT:
            raise EgopoolError(f"unknown --on-conflict {on_conflict!r}", hint=f"use one of {ON_CONFLICT}")
        self.store = store
        self.on_conflict = on_conflict
        self.limits = limits or Limits()
        self._pause_at = os.environ.get(_PAUSE_ENV, "")
        self._scanned: dict[str, int] = {}
        self.pool = pool
        self._groups: GroupQueue[_Waiting] = GroupQueue(self.GROUP_LIMIT, leaders=max_publishes)

    client_host_id = staticmethod(client_host_id)

    def pause(self, stage: str) -> None:
        """The crash tests' seam at ``stage`` (class docstring); a no-op unless ``EGOPOOL_SERVER_PAUSE`` names it."""
        self._pause(stage)

    def pauses_at(self, stage: str) -> bool:
        """:meth:`pause` at ``stage`` would wait (``EGOPOOL_SERVER_PAUSE`` names it): the request path hands the
        call to a thread only then (docs/decisions.md U48)."""
        return self._pause_at == stage

    def _pause(self, stage: str) -> None:
        if self._pause_at == stage:
            marker = self.store.state / f"paused-{stage}"
            marker.write_text(str(os.getpid()))
            deadline = time.monotonic() + 3600
            while marker.exists() and time.monotonic() < deadline:  # a test removes it to let the import go on
                time.sleep(0.05)

    # -- the import ----------------------------------------------------------------------------------
    def import_zip(self, zip_path: Path, *, task: str, form_index: str | None, zip_sha256: str, upload_id: int,
                   token_id: str | None = None, client_key: str | None = None,
                   may_declare: bool = True) -> ImportResult:
        """Verify and publish one uploaded zip (module docstring): :meth:`verify`, then :meth:`publish`.

        Parameters
        ----------
        zip_path:
            The spooled zip.
        task:
            The form's ``name`` (server task name).
        form_index:
            The form's ``episode_index`` (f, 0-based file number, §9), or None when absent.
        zip_sha256:
            sha256 of the zip as received.
        upload_id:
            The upload log row.
        token_id:
            The token that sent it.
        client_key:
            The request's :data:`~egopool.identity.CLIENT_KEY_HEADER` (None when absent).
        may_declare:
            The sender may set the task's declarations (:meth:`publish`).

        Raises
        ------
        UploadRejectedError
            Every refusal, with HTTP status, reason and findings; the store is unchanged.
        """
        verified = self.verify(zip_path, task=task, form_index=form_index, upload_id=upload_id, token_id=token_id,
                               client_key=client_key)
        return self.publish(verified, zip_sha256=zip_sha256, token_id=token_id, may_declare=may_declare)

    def verify(self, zip_path: Path, *, task: str, form_index: str | None, upload_id: int,
               token_id: str | None = None, client_key: str | None = None, queue_s: float | None = None) -> Verified:
        """Steps 1-5 and 7 (:func:`~egopool.server.verify.verify_upload`) into a fresh staging directory, in a
        worker process of the ``pool`` (U14) or a Ray task (U28) when the importer has one, else in this thread.
        A worker that dies mid-call (:class:`~egopool.server.workers.VerifierLost`) costs one more verification
        into the emptied staging directory (U28); a second death is the caller's 500. The staging directory is
        discarded here on a refusal, else by :meth:`publish`. ``queue_s``: the seconds the upload waited for a
        worker, recorded with the verification's own (U30).

        Raises
        ------
        UploadRejectedError
            Every refusal; the upload log row gets what was learnt before it (task, f, host id).
        VerifierLost
            The worker died twice.
        """
        self.store.check_task(task)  # the name first: 400 before anything is staged
        self._pause("received")
        staging = self.store.new_staging(upload_id, task)
        started, attempt = time.monotonic(), 1
        timings: dict[str, Any] = {"queue_s": queue_s}
        try:
            run = self.pool.run if self.pool is not None else _inline
            while True:
                try:
                    verified: Verified = run(verify_attempt, zip_path, staging, self.limits, attempt=attempt,
                                             form_index=form_index, client_key=client_key, token_id=token_id)
                    break
                except VerifierLost:
                    if attempt >= 2:
                        raise
                    log.warning("upload %d: its verification worker died; verifying it again", upload_id)
                    attempt += 1
        except BaseException as exc:
            timings.update(verify_s=time.monotonic() - started, verify_attempts=attempt)
            learnt = getattr(exc, "upload_log", None)
            self.store.db.update_upload(upload_id, task=task, **timings, **(learnt or {}))
            self.store.discard(staging.parent)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise UploadRejectedError(507, "insufficient_storage", f"the server's disk is full ({exc.strerror})"
                                          ) from exc
            raise
        verified.task, verified.upload_id = task, upload_id
        timings.update(verify_s=time.monotonic() - started, verify_attempts=attempt)
        self.store.db.update_upload(upload_id, task=task, **timings, **verified.upload_log())
        return verified

    def publish(self, v: Verified, *, zip_sha256: str, token_id: str | None = None,
                may_declare: bool = True) -> ImportResult:
        """Steps 6 and 8 for a :meth:`verify` result: the duplicate check, then the publish under the task's
        import guard, together with the uploads waiting for it (U18). Discards ``v``'s staging directory.
        ``may_declare``: the sender may set the task's declarations (U15: create the task, add a column or
        stream it does not declare yet); without it only an upload that fits the existing task is published.

        Raises
        ------
        UploadRejectedError
            403 ``may_not_declare``, 409 (declarations, ``reject`` policy, a broken server task), 507 (disk
            full); the store is unchanged.
        """
        task = self.store.check_task(v.task)
        try:
            dup = self._duplicate(task, v.manifest, v.host_id, v.n, zip_sha256, v.upload_id)
            if dup is not None:
                return dup
            waiting = _Waiting(v, zip_sha256, token_id, may_declare)
            out: ImportResult = self._groups.run(task, waiting, self.store.task_guard,
                                                 lambda items: self._publish_many(task, items))
            return out
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the store is full: nothing was published (U5)
                raise UploadRejectedError(507, "insufficient_storage", f"the server's disk is full ({exc.strerror})"
                                          ) from exc
            raise
        finally:
            self.store.discard(v.staging.parent)

    # -- step 6 --------------------------------------------------------------------------------------
    def _duplicate(self, task: str, manifest: Manifest, host_id: str, n: int, zip_sha256: str,
                   upload_id: int) -> ImportResult | None:
        """Step 6: content the task already pooled (200 no-op), or None: a new episode."""
        known = self.store.db.episodes_with_digest(task, manifest.episode_digest)
        if not known:
            return None
        for row in known:
            files = self._still_held(task, row.episode_index)
            if files is not None:
                return ImportResult("duplicate", task, row.episode_index, n, host_id, row.episode_index != n,
                                    zip_sha256, manifest.episode_digest, upload_id, files, row.validation)
        # a "duplicate" answer confirms the upload (the client may delete its copy): not for a removed episode
        row = known[0]
        raise UploadRejectedError(409, "episode_removed",
                                  f"this episode (client N {n}) was pooled as episode {row.episode_index} of task "
                                  f"{task!r}, which has since been removed from the server; it is not confirmed "
                                  "again", hint="keep the local copy and ask the server's admin")

    def _still_held(self, task: str, index: int) -> dict[str, str] | None:
        """Task-relative path -> sha256 of server N's files as the store holds them (the client checks them against
        its own), or None when its data parquet or row is gone."""
        try:
            info = self.store.task_info(task)
            if info is None:
                return None
            layout = TaskLayout.from_info(Path(task), info)
        except FormatError:
            return None
        objects = self.store.objects
        keys = [layout.data_file(index).as_posix(), layout.episodes_file(index).as_posix()]
        raw = info.get("video_extensions")
        exts: dict[str, Any] = raw if isinstance(raw, dict) else {}
        keys += [layout.video_file(index, k, str(e)).as_posix() for k, e in sorted(exts.items())]
        out: dict[str, str] = {}
        for i, key in enumerate(keys):
            meta = objects.head(key)
            if meta is None:
                if i < 2:
                    return None
                continue  # a stream this episode does not have
            out[key[len(task) + 1:]] = meta.sha256 or _sha256_of(self.store, key)
        return dict(sorted(out.items()))

    # -- step 8 --------------------------------------------------------------------------------------
    def _occupied(self, task: str, layout: TaskLayout, k: int) -> bool:
        """N ``k`` has an object, a claim or a tombstone (it was deleted) in the store (a directory store: any file
        of its group too)."""
        objects = self.store.objects
        if any(objects.exists(key) for key in (layout.episodes_file(k).as_posix(), layout.data_file(k).as_posix(),
                                               f"{JOURNALS}/{task_hash(task)}/{k:09d}.json",
                                               f"{task}/{retired_key(k)}")):  # deleted N: never again (O34)
            return True
        local = self.store.local_task(task)
        if local is None:
            return False
        c, f = layout.chunk_file(k)
        return video_group_exists(local / "videos" / f"chunk-{c:03d}", f)

    def _allocate(self, task: str, layout: TaskLayout, info: Mapping[str, Any], n: int,
                  claimed: frozenset[int] = frozenset()) -> int:
        """Server N for client N (docs/decisions.md U2, O12), not claimed yet. Caller holds the import guard;
        ``claimed``: the N given to the earlier episodes of its group (U18)."""
        local = self.store.local_task(task)
        reserved = set(claimed)
        if local is not None and local.is_dir():
            reserved |= markers.live_reservations(local)  # a recorder's reservations in a directory task
        db = self.store.db

        def taken(k: int) -> bool:
            return k in reserved or db.episode(task, k) is not None or self._occupied(task, layout, k)

        if not taken(n):
            return n
        if self.on_conflict == "reject":
            holder = db.episode(task, n)
            who = f" from {holder.client_hostname} (its episode {holder.client_episode_index})" if holder else ""
            raise UploadRejectedError(409, "episode_taken", f"task {task!r} already holds episode {n}{who}; this "
                                                            "server runs --on-conflict reject")
        if task not in self._scanned:  # one listing per task and process; later allocations probe keys only
            rows = committed_rows(self.store.objects, task, layout)
            self._scanned[task] = max(rows) if rows else 0
        claims = [int(o.key.rsplit("/", 1)[-1].split(".")[0]) for o in
                  self.store.objects.list(f"{JOURNALS}/{task_hash(task)}/") if o.key.endswith(".json")]
        k = max([self._scanned[task], int(info.get("total_episodes") or 0), db.max_index(task), n, *reserved,
                 *claims]) + 1
        while taken(k):
            k += 1
        return k

    def _publish_many(self, task: str, items: list[_Waiting]) -> list[ImportResult | BaseException]:
        """Publish the uploads waiting for ``task``'s guard (caller holds it): one outcome each, in order (an
        answer, or its refusal or failure), in groups (:meth:`_group`)."""
        outcomes: dict[int, ImportResult | BaseException] = {}
        rest = list(range(len(items)))
        while rest:
            try:
                rest = self._group(task, items, rest, outcomes)
            except Exception as exc:  # the lock or the recovery failed: every upload not answered yet
                for i in rest:
                    outcomes.setdefault(i, exc)
                rest = []
        return [outcomes[i] for i in range(len(items))]

    def _group(self, task: str, items: list[_Waiting], rest: list[int],
               outcomes: dict[int, ImportResult | BaseException]) -> list[int]:
        """One group commit into ``task``: every upload of ``rest`` (indices into ``items``) is checked and staged
        in its order exactly as a single publish would be — against the task as the earlier ones of the group
        will leave it (their declarations merged, their N taken) — then their N are claimed and the accepted
        ones published together (:func:`egopool.publish.publish_group`). A refusal is that upload's outcome
        alone. A task's first upload, and an upload that declares something new (U15), is published in a group
        of its own; one whose content an earlier one of the group carries, or whose N another writer claimed
        meanwhile, waits for the next group: returns the indices left for it."""
        store = self.store
        with store.task_lock(task):
            store.recover(task)  # this server's own interrupted publishes into the task first (O14)
            try:
                server_info = store.task_info(task)
                fresh: dict[str, Any] | None = None
                if server_info is None:
                    first = items[rest[0]]
                    if not first.may_declare:
                        outcomes[rest[0]] = may_not_declare(task, f"task {task!r} does not exist on this server, and "
                                                                  "this token may not create it (its first upload sets "
                                                                  "the fps, columns and streams every later upload "
                                                                  "must match)")
                        return rest[1:]
                    v = first.v
                    fresh = new_info(task, fps=float(v.info.get("fps") or 30.0),
                                     app_version=str(v.info.get("app_version") or "unknown"),
                                     created_at=float(v.info.get("created_at") or time.time()),
                                     chunks_size=TaskLayout.from_info(v.staging, v.info).chunks_size)
                    server_info = fresh
                server_layout = TaskLayout.from_info(Path(task), server_info)  # paths = keys in the store
            except FormatError as exc:
                for i in rest:
                    outcomes[i] = UploadRejectedError(409, "server_task_broken", f"the server task cannot take "
                                                                                 f"episodes: {exc.one_line()}")
                return []
            local = store.local_task(task)
            if fresh is None and local is not None:
                reclaim_stale(local, TaskLayout.from_info(local, server_info))  # a local writer's pending merges
            checks = store.checks_dir(task) if fresh is None else store.state
            prepared: list[tuple[int, _Prepared]] = []
            claimed: set[int] = set()
            digests: set[str] = set()
            later: list[int] = []
            for pos, i in enumerate(rest):
                w, v = items[i], items[i].v
                declaring = fresh is not None or bool(added_declarations(server_info, v.info))
                if prepared and (declaring or v.manifest.episode_digest in digests):
                    later = rest[pos:]
                    break
                try:
                    out = self._prepare(task, w, server_info, server_layout, fresh, checks, frozenset(claimed))
                except Exception as exc:  # a refusal: this upload's answer, the group goes on
                    outcomes[i] = exc
                    if fresh is not None:
                        return rest[pos + 1:]
                    continue
                if isinstance(out, ImportResult):  # a duplicate of an episode published before
                    outcomes[i] = out
                    continue
                prepared.append((i, out))
                claimed.add(out.pub.index)
                digests.add(v.manifest.episode_digest)
                server_info = merge_info(server_info, out.pub.declarations)  # what the merge will make of info.json
                if declaring:
                    later = rest[pos + 1:]
                    break
            won: list[tuple[int, _Prepared]] = []
            claimed_ok = claim_all(store.objects, [(task, p.pub.index, p.doc) for _, p in prepared])
            for (i, prep), ok in zip(prepared, claimed_ok, strict=True):  # the claims (O12): or the upload waits
                if ok:
                    won.append((i, prep))
                else:
                    later.insert(0, i)
            later.sort()
            results = publish_group(store.objects, [p.pub for _, p in won], self._pause, record_into(store.db)) \
                if won else []
            for (i, prep), res in zip(won, results, strict=True):
                if isinstance(res, BaseException):
                    outcomes[i] = res
                    continue
                outcomes[i] = self._imported(prep, items[i].zip_sha256, res)
            return later

    def _prepare(self, task: str, w: _Waiting, server_info: dict[str, Any], server_layout: TaskLayout,
                 fresh: dict[str, Any] | None, checks: Path, claimed: frozenset[int]) -> ImportResult | _Prepared:
        """Step 8's checks and staging under the guard, up to the claim: the duplicate answer, or the publication,
        its journal document and the sha256 of its files. ``claimed``: N given to earlier episodes of the group."""
        v = w.v
        layout = TaskLayout.from_info(v.staging, v.info)
        if server_layout.chunks_size != layout.chunks_size:
            raise UploadRejectedError(409, "declaration_conflict", f"the server task has chunks_size "
                                                                   f"{server_layout.chunks_size}, the upload "
                                                                   f"{layout.chunks_size}")
        dup = self._duplicate(task, v.manifest, v.host_id, v.n, w.zip_sha256, v.upload_id)  # again, under the guard
        if dup is not None:
            return dup
        decl, blocks = check_upload_fits(task, checks, server_info, v.info, fresh, v.blocks_for, w.may_declare)
        target = self._allocate(task, server_layout, server_info, v.n, claimed)
        decl["total_episodes"] = target
        moves, row = self._stage_files(v.staging, layout, server_layout, v.n, target)
        rewritten = {layout.data_file(v.n)} if target != v.n else set()
        hashed = {Path(p): h for p, h in v.hashed.items()}
        sha = {key: hashed[staged] if staged in hashed and staged not in rewritten else sha256_file(staged)
               for staged, key in moves}
        synced = frozenset(map(Path, v.synced))
        if target != v.n:  # renumbered: the row gets its new N and its files' sha256 (X3) in one durable write
            sha[row[1]] = renumber_row(row[0], target, {key[len(task) + 1:]: h for key, h in sha.items()})
            synced |= {row[0]}
        else:
            sha[row[1]] = hashed[row[0]] if row[0] in hashed else sha256_file(row[0])
        episode = EpisodeRow(task, target, v.host_id, v.manifest.source_hostname, v.n, v.manifest.episode_digest,
                             v.upload_id, w.token_id, time.time(), v.length, v.streams, v.validation)
        upload_fields = {"client_episode_index": v.n, "server_episode_index": target, "outcome": "imported",
                         "status": 200, "finished_at": time.time()}
        tasks_jsonl = None
        if fresh is not None:  # the uploaded lines' values, one object per line, no BOM or CR (§5's readline reader)
            lines = read_tasks(v.staging) if (v.staging / "meta" / "tasks.jsonl").is_file() else []
            tasks_jsonl = "".join(json.dumps(o, ensure_ascii=False) + "\n"
                                  for o in lines or [{"task_index": 0, "task": task}]).encode("utf-8")
        pub = Publication(task, target, moves, row, decl, blocks, episode.to_dict(), upload_fields, fresh, tasks_jsonl,
                          sha, synced, stamped=target != v.n)
        stamp_digests(pub)  # the row records its files' sha256 as published (renumbered: stamped above), X3
        doc = journal_doc(task, target, self.store.owner, [key for _, key in [*moves, row]], row[1],
                          episode=episode.to_dict(), upload_fields=upload_fields, declarations=decl,
                          new_task=fresh is not None, new_info=fresh,
                          tasks_jsonl=tasks_jsonl.decode("utf-8") if tasks_jsonl else None)
        return _Prepared(pub, doc, {key[len(task) + 1:]: h for key, h in sorted(pub.sha.items())})

    def _imported(self, prep: _Prepared, zip_sha256: str, problem: str | None) -> ImportResult:
        """The answer for a published (committed) episode."""
        e = EpisodeRow.from_dict(prep.pub.episode) if prep.pub.episode is not None else None
        if e is None:
            raise EgopoolError("a publication without its episode row")
        self._scanned[e.task] = max(self._scanned.get(e.task, 0), e.episode_index)
        return ImportResult("imported", e.task, e.episode_index, e.client_episode_index, e.client_host_id,
                            e.episode_index != e.client_episode_index, zip_sha256, e.episode_digest, e.upload_id,
                            prep.files, e.validation, problem)

    def _stage_files(self, staging: Path, layout: TaskLayout, server_layout: TaskLayout, n: int,
                     target: int) -> tuple[list[tuple[Path, str]], tuple[Path, str]]:
        """Staged file -> final key; a renumbered episode's data parquet is rewritten first (its row is not)."""
        c, f = layout.chunk_file(n)
        moves: list[tuple[Path, str]] = []
        vdir = staging / "videos" / f"chunk-{c:03d}"
        for key_dir in sorted(vdir.iterdir()) if vdir.is_dir() else []:
            for p in sorted(key_dir.iterdir()):
                moves.append((p, server_layout.video_file(target, key_dir.name, p.suffix.lstrip(".")).as_posix()))
        data, row = local(layout.data_file(n)), local(layout.episodes_file(n))
        if target != n:  # the row is renumbered with its digests by _prepare (renumber_row)
            dst = data.with_name(f"renumbered-{data.name}")
            rewrite_episode_index(data, dst, target)
            data.unlink()
            dst.rename(data)
        moves.append((data, server_layout.data_file(target).as_posix()))
        return moves, (row, server_layout.episodes_file(target).as_posix())


def video_group_exists(chunk_dir: Path, f: int) -> bool:
    """A file or folder named ``episode-<f:03d>.<anything>`` in a sub-folder of ``chunk_dir`` (a slot), i.e.
    ``any(chunk_dir.glob(f"*/episode-{f:03d}.*"))`` without compiling a pattern per N (docs/decisions.md U48):
    the same listings, names compared by prefix."""
    prefix = f"episode-{f:03d}."
    try:
        slots = [e.path for e in os.scandir(chunk_dir) if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return False
    for slot in slots:
        try:
            if any(name.startswith(prefix) for name in os.listdir(slot)):
                return True
        except (FileNotFoundError, NotADirectoryError):
            continue
    return False


def _sha256_of(store: ServerStore, key: str) -> str:
    """sha256 of an object whose store did not record it (a directory's file is read in place)."""
    local = store.objects.local_path(key)
    if local is not None:
        return sha256_file(local)
    h = hashlib.sha256()
    with store.objects.open_input(key) as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()
