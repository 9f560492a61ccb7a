"""Importing one uploaded episode: verify everything, then publish (file_format.md §9).

:meth:`Importer.import_zip` (:meth:`Importer.verify`, then :meth:`Importer.publish`) runs on a spooled
request body; steps 1-5 and 7 (:func:`verify_upload`) run in a worker process of the server
(:class:`~egopool.server.workers.VerifyPool`, docs/decisions.md U14), the rest in the server process:

1. the zip's structure and manifest (:func:`~egopool.server.zipcheck.inspect_zip`): hostile
   names, sizes, ratios — 400/413;
2. the form's ``episode_index`` (the file number f) against the arcnames — 422;
3. every member streamed into a staging task directory and checked against the manifest
   (:func:`~egopool.server.zipcheck.extract_verified`) — 400;
4. ``info.json.format == "pooled_episodes_v1"`` and the §9 path templates — 422;
5. the parquet footers are checked for bombs (:func:`~egopool.server.zipcheck.check_parquet_bounds`:
   decoded bytes at a time, decoded/compressed ratio, the meta file's single row) and the videos'
   frame sizes (:func:`~egopool.server.zipcheck.open_video_bounded`; a container of small frames is
   kept open for step 7's validator, docs/decisions.md U20) — 413/422; the data parquet's
   ``episode_index`` column is the truth for N (§9): one value N whose
   ``(chunk, file)`` are the arcnames', the same in the meta row and the manifest — 422;
6. content the task already pooled (the same episode digest, from whichever client): a 200
   no-op returning the server N it got, while the store still holds that episode (409
   ``episode_removed`` once it was deleted there); different content is a new episode, even
   with a host id and N already seen (two copies of one recordings root, docs/decisions.md U2);
   checked in the server process after the worker's step 7 (a re-sent episode is verified again);
7. egopool's own validator on the slice (:func:`egopool.validate.validate_task`): any error
   is 422 with the findings;
8. under the task's import guard and task lock: the slice's declarations must fit the
   server task (:mod:`egopool.write.checks`, the writer's own checks) — 409; the server N is
   the client's N when it is free, else the next free one (``--on-conflict renumber``) or 409
   (``reject``); a renumbered episode gets ``episode_index`` rewritten in its data parquet and
   row, its videos renamed (:mod:`egopool.server.renumber`); then
   :func:`~egopool.server.publish.publish_episode`. The uploads that waited for the task's guard are
   checked one by one and published together (:func:`~egopool.server.publish.publish_group`, the group
   commit of docs/decisions.md U18); a refusal is that upload's alone.

Nothing in the store's tasks changes before step 8's publish, and a failed publish is
undone, so every refusal leaves the store as it was.

The client's host id is the server's own finding (:meth:`Importer.client_host_id`,
docs/decisions.md U11): derived from the client key the request carries, never taken from
the manifest, so a host id read from the read API cannot be claimed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._atomic import fsync_file, task_lock
from ..codecs.decode_scan import SINGLE_THREAD_PIXELS
from ..errors import EgopoolError, FormatError, LegacyLayoutError, SchemaError, UploadRejectedError
from ..identity import check_client_key, host_id_of_key, token_host_id
from ..layout import TaskLayout, list_task_episodes
from ..meta import markers
from ..meta.info import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH, merge_info, new_info, read_info
from ..meta.stats import StatsBlock, episode_stats_file, stats_columns
from ..meta.tasks import read_tasks
from ..registry import file_record
from ..transfer.manifest import Manifest
from ..validate import validate_task
from ..write.checks import check_feature_declarations, check_stream_declarations, check_task_meta_mergeable
from ..write.recovery import reclaim_stale
from .db import EpisodeRow
from .group_commit import GroupQueue
from .publish import Publication, publish_episode, publish_group, recover_journals
from .renumber import rewrite_episode_index
from .store import Store
from .workers import VerifyPool
from .zipcheck import Limits, check_parquet_bounds, extract_verified, inspect_zip, open_video_bounded

__all__ = ["ON_CONFLICT", "ImportResult", "Importer", "Verified", "verify_upload"]

ON_CONFLICT = ("renumber", "reject")
#: info.json keys the server task owns: never taken from an upload's snapshot.
_SERVER_OWNED = ("format", "chunks_size", "data_path", "video_path", "episodes_path", "task_name", "total_episodes",
                 "fps", "created_at")
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
        The client's host id as the server derived it (:meth:`Importer.client_host_id`).
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


def _facts(staging: Path, n: int, layout: TaskLayout) -> tuple[int, list[str], list[str]]:
    """Rows and column names of the data parquet (one footer read) and the image_keys of the slice's videos."""
    with pq.ParquetFile(str(layout.data_file(n))) as pf:
        rows, names = pf.metadata.num_rows, pf.schema_arrow.names
    c, f = layout.chunk_file(n)
    vdir = staging / "videos" / f"chunk-{c:03d}"
    keys = sorted(p.name for p in vdir.iterdir()) if vdir.is_dir() else []
    return int(rows), keys, names


def _added_declarations(server_info: Mapping[str, Any], info: Mapping[str, Any]) -> list[str]:
    """What an upload's ``info.json`` declares that the server task does not yet (docs/decisions.md U15): its
    new columns (``features``) and stream slots (``video_extensions``), each named."""
    def keys(doc: Mapping[str, Any], name: str) -> set[str]:
        v = doc.get(name)
        return set(v) if isinstance(v, dict) else set()

    old_streams = keys(server_info, "video_extensions") | keys(server_info, "cameras")
    return [f"column {k!r}" for k in sorted(keys(info, "features") - keys(server_info, "features"))] + \
        [f"stream {k!r}" for k in sorted(keys(info, "video_extensions") - old_streams)]


def check_upload_fits(task: str, task_dir: Path, server_info: Mapping[str, Any], info: Mapping[str, Any],
                      fresh: Mapping[str, Any] | None, blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]],
                      may_declare: bool) -> tuple[dict[str, Any], dict[str, StatsBlock]]:
    """Whether an upload's declarations fit the server task (§3, multi_device_storage §6.7), for the directory
    and the bucket importer alike: one fps, features and stream slots the task can take, task meta that
    merges, and nothing newly declared by a token that may not declare (docs/decisions.md U15). ``fresh``:
    the new task's info when the upload creates it.

    Returns
    -------
    tuple
        The upload's declarations to merge (``info.json`` without the server-owned keys) and its stats
        blocks (``blocks_for`` of the merged info).

    Raises
    ------
    UploadRejectedError
        409 ``declaration_conflict`` / ``server_task_broken``, 403 ``may_not_declare``.
    """
    if fresh is None and not _same_fps(server_info.get("fps"), info.get("fps")):
        raise UploadRejectedError(409, "declaration_conflict", f"the server task records at fps "
                                                               f"{server_info.get('fps')}, the upload at "
                                                               f"{info.get('fps')!r}; a task has one fps (§3)",
                                  hint="upload it under another task name")
    decl = {k: v for k, v in info.items() if k not in _SERVER_OWNED}
    raw_cams, raw_exts = info.get("cameras"), info.get("video_extensions")
    cams: dict[str, Any] = raw_cams if isinstance(raw_cams, dict) else {}
    exts: dict[str, Any] = raw_exts if isinstance(raw_exts, dict) else {}
    blocks = blocks_for(merge_info(server_info, decl))  # computed by the verification unless the merge adds a column
    try:
        check_feature_declarations(server_info, info.get("features") or {})
        check_stream_declarations(server_info, [(k, "rgb" if k in cams else "depth", str(e))
                                                for k, e in exts.items()])
        check_task_meta_mergeable(task_dir, server_info, decl, {c: b.mean.shape[0] for c, b in blocks.items()})
    except SchemaError as exc:
        raise UploadRejectedError(409, "declaration_conflict", exc.message, hint=exc.hint) from exc
    except FormatError as exc:
        raise UploadRejectedError(409, "server_task_broken", exc.one_line()) from exc
    added = [] if may_declare or fresh is not None else _added_declarations(server_info, info)
    if added:
        raise _may_not_declare(task, f"this upload would add {', '.join(added[:5])}"
                                     f"{' and more' if len(added) > 5 else ''} to task {task!r}, which does not "
                                     "declare it yet, and this token may not declare")
    return decl, blocks


def _may_not_declare(task: str, what: str) -> UploadRejectedError:
    return UploadRejectedError(403, "may_not_declare", what,
                               hint=f"a token of scope declare:{task} (or upload:{task}) declares it: `egopool token "
                                    f"add --scope declare:{task}` on the server, then upload its first episode "
                                    "with that token")


def _same_fps(a: Any, b: Any) -> bool:
    """True when two ``fps`` values are the same number (the local writer never changes a task's fps)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)) and float(a) == float(b)


def _column_values(path: Path, column: str) -> set[int]:
    pf = pq.ParquetFile(str(path))
    if column not in pf.schema_arrow.names:
        return set()
    out: set[int] = set()
    for i in range(pf.metadata.num_row_groups):  # row group by row group (bounded, U9); iter_batches costs ~10x
        out.update(pc.unique(pf.read_row_group(i, columns=[column]).column(0)).to_pylist())
    return out


def _small_frames(container: Any) -> bool:
    """Whether every video stream of an open container has frames of at most
    :data:`~egopool.codecs.decode_scan.SINGLE_THREAD_PIXELS`: such a container is kept open for the
    validator (its open costs more than decoding its frames, docs/decisions.md U20); one with larger
    frames is closed and opened again by the validator, so one import holds at most one such decoder
    at a time (the per-import bound of docs/decisions.md U9)."""
    streams = container.streams.video
    return bool(streams) and all(0 < int(s.codec_context.width or 0) * int(s.codec_context.height or 0)
                                 <= SINGLE_THREAD_PIXELS for s in streams)


def _sync_episode_files(staging: Path, layout: TaskLayout, n: int) -> frozenset[Path]:
    """fsync the staged videos (the extraction wrote them without syncing; published as they are, never
    rewritten). The data parquet and the row may still be rewritten with a new N under the lock:
    :func:`~egopool.server.publish.publish_episode` syncs those. Returns the paths synced."""
    c, f = layout.chunk_file(n)
    vdir = staging / "videos" / f"chunk-{c:03d}"
    paths = sorted(vdir.glob(f"*/episode-{f:03d}.*")) if vdir.is_dir() else []
    for p in paths:
        fsync_file(p)
    return frozenset(paths)


class _StagingPaths:
    """Text with the server's staging directory cut off: findings name task-relative paths, never the
    server's own file system."""

    def __init__(self, staging: Path) -> None:
        self.prefix = str(staging) + os.sep

    def __call__(self, text: str) -> str:
        return text.replace(self.prefix, "")


def _inline(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


@dataclass
class Verified:
    """What :func:`verify_upload` found: a verified episode in its staging directory, ready to publish.

    Attributes
    ----------
    staging:
        The staging task directory (``staging/<id>-<hex>/<task>/``).
    manifest:
        The zip's manifest (verified member by member).
    host_id:
        The sender's host id (:meth:`Importer.client_host_id`).
    info:
        The slice's ``info.json``.
    n:
        The client's N (the data parquet's ``episode_index``).
    validation:
        ``{"ok", "errors", "warnings"}`` of the slice.
    length:
        Rows of the data parquet.
    streams:
        image_keys of the slice's videos.
    hashed:
        Staged file (str path) -> sha256 the extraction computed.
    synced:
        Staged files (str paths) already fsynced.
    stats_columns, blocks:
        The columns :func:`~egopool.meta.stats.stats_columns` picks with the slice's ``info.json`` and
        their stats blocks (computed in the worker; :meth:`blocks_for` checks they are the server task's).
    data_columns:
        Column names of the data parquet.
    task, upload_id:
        Set by :meth:`Importer.verify`.
    """

    staging: Path
    manifest: Manifest
    host_id: str
    info: dict[str, Any]
    n: int
    validation: dict[str, Any]
    length: int
    streams: list[str]
    hashed: dict[str, str]
    synced: list[str]
    stats_columns: list[str]
    blocks: dict[str, StatsBlock]
    data_columns: list[str]
    task: str = ""
    upload_id: int = 0

    def upload_log(self) -> dict[str, Any]:
        """The upload log's fields this verification established."""
        return {"form_episode_index": self.manifest.file, "client_host_id": self.host_id,
                "client_hostname": self.manifest.source_hostname, "client_episode_index": self.n}

    def blocks_for(self, merged: Mapping[str, Any]) -> dict[str, StatsBlock]:
        """The episode's stats blocks under the server task's merged ``info.json`` (§4): the worker's
        blocks when the merged declarations pick the same columns, else computed again here."""
        if stats_columns(merged, self.data_columns) == self.stats_columns:
            return self.blocks
        layout = TaskLayout.from_info(self.staging, self.info)
        return episode_stats_file(layout.data_file(self.n), merged)


def verify_upload(zip_path: Path, staging: Path, limits: Limits, *, form_index: str | None,
                  client_key: str | None, token_id: str | None) -> Verified:
    """Steps 1-5 and 7 of the module docstring on one spooled zip, extracting into ``staging``; runs in a
    worker process (:class:`~egopool.server.workers.VerifyPool`) or inline. Touches no database and no
    task of the store.

    Raises
    ------
    UploadRejectedError
        Every refusal (its ``upload_log`` attribute holds what was learnt before: f, host id).
    OSError
        The staging disk failed (``ENOSPC``: the caller answers 507).
    """
    learnt: dict[str, Any] = {}
    media: dict[Path, Any] = {}  # video containers the frame-size bound opened, for the validator (U20)
    try:
        plan = inspect_zip(zip_path, limits)
        if form_index is not None:
            try:
                f_form = int(form_index.strip())
            except ValueError:
                raise UploadRejectedError(400, "bad_form", f"form episode_index {form_index!r} is not an integer "
                                                           "(the 0-based episode file number, §9)") from None
            if f_form != plan.file:
                raise UploadRejectedError(422, "episode_index_mismatch",
                                          f"form episode_index {f_form} is not the zip's episode file number "
                                          f"{plan.file} (episode-{plan.file:03d}; §9: the three must agree)")
        host_id = Importer.client_host_id(plan.manifest, client_key, token_id)
        learnt = {"form_episode_index": plan.file, "client_host_id": host_id,
                  "client_hostname": plan.manifest.source_hostname}
        extracted = extract_verified(zip_path, plan, staging, limits)
        info, layout, n = Importer._check_slice(staging, plan.chunk, plan.file, plan.manifest, limits, media)
        learnt["client_episode_index"] = n
        # the videos' bytes go to disk while the validator decodes them (fsync releases the GIL)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="egopool-fsync") as syncer:
            syncing = syncer.submit(_sync_episode_files, staging, layout, n)
            report = validate_task(staging, media=media)
            if not report.ok:
                errors = [f for f in report.findings if f.severity == "error"]
                hide = _StagingPaths(staging)
                raise UploadRejectedError(422, "validation", f"the episode fails validation: {len(errors)} error(s), "
                                                             f"first: {hide(errors[0].one_line())}",
                                          findings=[{k: hide(v) for k, v in f.to_dict().items()}
                                                    for f in report.findings])
            validation = {"ok": True, "errors": 0,
                          "warnings": sum(1 for f in report.findings if f.severity == "warning")}
            length, streams, names = _facts(staging, n, layout)
            blocks = episode_stats_file(layout.data_file(n), info)
            synced = syncing.result()
    except UploadRejectedError as exc:
        exc.upload_log = learnt  # type: ignore[attr-defined]
        raise
    finally:
        for container in media.values():  # those the validator did not take
            container.close()
    return Verified(staging, plan.manifest, host_id, info, n, validation, length, streams,
                    {str(staging.joinpath(*a.split("/"))): r.sha256 for a, r in extracted.items()},
                    [str(p) for p in synced], stats_columns(info, names), blocks, names)


@dataclass
class _Waiting:
    """A verified upload waiting for its task's guard: :meth:`Importer.publish`'s arguments."""

    v: Verified
    zip_sha256: str
    token_id: str | None
    may_declare: bool


class Importer:
    """Imports uploads into a :class:`~egopool.server.store.Store` (module docstring).

    Parameters
    ----------
    store:
        The store.
    on_conflict:
        ``"renumber"`` (default): a client N the server task already holds gets the next free
        server N; ``"reject"``: such an upload is answered 409 (docs/decisions.md U2).
    limits:
        Zip limits.
    pool:
        Worker processes for :meth:`verify` (docs/decisions.md U14); None verifies in the calling thread.

    Notes
    -----
    ``EGOPOOL_SERVER_PAUSE=<stage>`` (``received``; ``placed``: every file but the meta row in
    place; ``committed``: the row in place, the commit) makes an import stop at that stage, write
    ``.egopool-server/paused-<stage>`` and sleep until that file is removed: the seam the crash tests
    SIGKILL the server (or its bucket) at.
    Unset in production.
    """

    #: Publishes waiting for one task's guard are published together (docs/decisions.md U18); the bucket
    #: importer publishes one at a time.
    group_commit = True
    #: Publications in one group at most.
    GROUP_LIMIT = 16

    def __init__(self, store: Store, *, on_conflict: str = "renumber", limits: Limits | None = None,
                 pool: VerifyPool | None = None, max_publishes: int = 2) -> None:
        if on_conflict not in ON_CONFLICT:
            raise EgopoolError(f"unknown --on-conflict {on_conflict!r}", hint=f"use one of {ON_CONFLICT}")
        self.store = store
        self.on_conflict = on_conflict
        self.limits = limits or Limits()
        self._pause_at = os.environ.get(_PAUSE_ENV, "")
        self._scanned: dict[str, int] = {}
        self.pool = pool
        self._groups: GroupQueue[_Waiting] = GroupQueue(self.GROUP_LIMIT, leaders=max_publishes)

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
               token_id: str | None = None, client_key: str | None = None) -> Verified:
        """Steps 1-5 and 7 (:func:`verify_upload`) into a fresh staging directory, in a worker process of
        the ``pool`` when the importer has one (docs/decisions.md U14), else in this thread. The staging
        directory is discarded here on a refusal, else by :meth:`publish`.

        Raises
        ------
        UploadRejectedError
            Every refusal; the upload log row gets what was learnt before it (task, f, host id).
        """
        self.store.task_dir(task)  # the name first: 400 before anything is staged
        self._pause("received")
        staging = self.store.new_staging(upload_id, task)
        try:
            run = self.pool.run if self.pool is not None else _inline
            verified = run(verify_upload, zip_path, staging, self.limits, form_index=form_index,
                           client_key=client_key, token_id=token_id)
        except BaseException as exc:
            learnt = getattr(exc, "upload_log", None)
            if learnt:
                self.store.db.update_upload(upload_id, task=task, **learnt)
            self.store.discard(staging.parent)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise UploadRejectedError(507, "insufficient_storage", f"the server's disk is full ({exc.strerror})"
                                          ) from exc
            raise
        verified.task, verified.upload_id = task, upload_id
        self.store.db.update_upload(upload_id, task=task, **verified.upload_log())
        return verified

    def publish(self, v: Verified, *, zip_sha256: str, token_id: str | None = None,
                may_declare: bool = True) -> ImportResult:
        """Steps 6 and 8 for a :meth:`verify` result: the duplicate check, then the publish under the task's
        import guard (module docstring). Discards ``v``'s staging directory. ``may_declare``: the sender
        may set the task's declarations (docs/decisions.md U15: create the task, add a column or stream it
        does not declare yet); without it only an upload that fits the existing task is published.

        Raises
        ------
        UploadRejectedError
            403 ``may_not_declare``, 409 (declarations, ``reject`` policy, a broken server task), 507 (disk
            full); the store is unchanged.
        """
        task, upload_id, n, staging = v.task, v.upload_id, v.n, v.staging
        task_dir = self.store.task_dir(task)
        try:
            dup = self._duplicate(task, v.manifest, v.host_id, n, zip_sha256, upload_id)
            if dup is not None:
                return dup
            waiting = _Waiting(v, zip_sha256, token_id, may_declare)
            if self.group_commit:  # imports into a task wait for each other only for the publish, done together
                return self._groups.run(task, waiting, self.store.task_guard,
                                        lambda items: self._publish_many(task, task_dir, items))
            with self.store.task_guard(task):
                return self._publish_one(task, task_dir, waiting)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # the store is full: nothing was published (U5)
                raise UploadRejectedError(507, "insufficient_storage", f"the server's disk is full ({exc.strerror})"
                                          ) from exc
            raise
        finally:
            self.store.discard(staging.parent)

    @staticmethod
    def _check_slice(staging: Path, chunk: int, file: int, manifest: Manifest, limits: Limits,
                     media: dict[Path, Any] | None = None) -> tuple[dict[str, Any], TaskLayout, int]:
        """Steps 4 and 5: format, templates, and N from the data parquet. ``media`` receives the open
        containers of the videos with small frames (:func:`_small_frames`) for the validator."""
        try:
            info = read_info(staging)
        except LegacyLayoutError as exc:
            raise UploadRejectedError(422, "unknown_format", exc.message) from exc
        except FormatError as exc:
            raise UploadRejectedError(422, "unknown_format", f"meta/info.json: {exc.message}", hint=exc.hint) from exc
        for key, default in (("data_path", DEFAULT_DATA_PATH), ("video_path", DEFAULT_VIDEO_PATH),
                             ("episodes_path", DEFAULT_EPISODES_PATH)):
            if info.get(key, default) != default:
                raise UploadRejectedError(422, "templates", f"info.json {key} is {info.get(key)!r}; uploads use the "
                                                            f"§9 names {default!r}")
        try:
            layout = TaskLayout.from_info(staging, info)
        except FormatError as exc:
            raise UploadRejectedError(422, "unknown_format", f"meta/info.json: {exc.message}") from exc
        data = staging / "data" / f"chunk-{chunk:03d}" / f"episode-{file:03d}.parquet"
        row = staging / "meta" / "episodes" / f"chunk-{chunk:03d}" / f"episode-{file:03d}.parquet"
        check_parquet_bounds(data, limits)
        check_parquet_bounds(row, limits, rows=1)
        for video in sorted((staging / "videos").glob("chunk-*/*/episode-*.*")):
            container = open_video_bounded(video, limits)
            if container is not None and media is not None and _small_frames(container):
                media[Path(os.path.abspath(video))] = container  # the validator's, not opened twice (U20)
            elif container is not None:
                container.close()
        try:
            values, row_values = _column_values(data, "episode_index"), _column_values(row, "episode_index")
        except Exception as exc:  # pyarrow raises several types for a broken file
            raise UploadRejectedError(422, "validation", f"cannot read the episode's parquet files ({exc})") from exc
        if len(values) != 1 or not all(isinstance(v, int) and v >= 1 for v in values):
            raise UploadRejectedError(422, "episode_index_mismatch",
                                      f"the data parquet's episode_index column holds {sorted(map(str, values))[:5]}; "
                                      "it must hold one global N >= 1 (§9: it is the truth for N)")
        n = values.pop()
        if layout.chunk_file(n) != (chunk, file):
            c, f = layout.chunk_file(n)
            raise UploadRejectedError(422, "episode_index_mismatch",
                                      f"the data parquet says episode_index {n}, which is chunk-{c:03d} "
                                      f"episode-{f:03d}, but the zip's files are chunk-{chunk:03d} "
                                      f"episode-{file:03d} (file number f={file}; N = chunk*{layout.chunks_size}+f+1)")
        if row_values != {n}:
            raise UploadRejectedError(422, "episode_index_mismatch", f"the meta/episodes row says episode_index "
                                                                     f"{sorted(row_values)}, the data parquet {n}")
        if manifest.episode_index != n:
            raise UploadRejectedError(400, "manifest_mismatch", f"the manifest says episode {manifest.episode_index}, "
                                                                f"the data parquet {n}")
        return info, layout, n

    @staticmethod
    def client_host_id(manifest: Manifest, client_key: str | None, token_id: str | None) -> str:
        """The sender's host id (docs/decisions.md U11): :func:`~egopool.identity.host_id_of_key` of the
        request's client key, which the manifest must declare; without a key (an egopool before U11),
        :func:`~egopool.identity.token_host_id` of the token and the declared id.

        Raises
        ------
        UploadRejectedError
            400 ``bad_client_key`` (not 64 hex) or ``host_id_mismatch`` (the manifest declares
            another host id than the key's: a zip is sent by the recordings root that packed it).
        """
        if client_key is None:
            return token_host_id(token_id, manifest.source_host_id)
        try:
            host = host_id_of_key(check_client_key(client_key.strip()))
        except FormatError as exc:
            raise UploadRejectedError(400, "bad_client_key", exc.message, hint=exc.hint) from exc
        if manifest.source_host_id != host:
            raise UploadRejectedError(400, "host_id_mismatch",
                                      f"the manifest declares host id {manifest.source_host_id[:32]!r}, the client "
                                      f"key sent is that of host id {host}: an upload carries the key of the "
                                      "recordings root that packed it", hint="upload with `egopool upload` from "
                                                                             "the PC that recorded the episode")
        return host

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
        """:meth:`_published_files` of server N, or None when its data or meta file is gone from the store."""
        task_dir = self.store.root / task
        if not (task_dir / "meta" / "info.json").is_file():
            return None
        try:
            layout = TaskLayout.from_info(task_dir, read_info(task_dir))
        except FormatError:
            return None
        if not (layout.data_file(index).is_file() and layout.episodes_file(index).is_file()):
            return None
        return self._published_files(task, index)

    def _published_files(self, task: str, index: int, known: Mapping[Path, str] | None = None) -> dict[str, str]:
        """sha256 of N's files as the server holds them (the client checks them against its own); ``known``:
        final path -> sha256 already computed for exactly these bytes (not read again)."""
        task_dir = self.store.root / task
        layout = TaskLayout.from_info(task_dir, read_info(task_dir))
        c, f = layout.chunk_file(index)
        vdir = task_dir / "videos" / f"chunk-{c:03d}"
        paths = sorted(vdir.glob(f"*/episode-{f:03d}.*")) if vdir.is_dir() else []
        paths += [p for p in (layout.data_file(index), layout.episodes_file(index)) if p.is_file()]
        known = known or {}
        return {p.relative_to(task_dir).as_posix(): known[p] if p in known else file_record(task_dir, p).sha256
                for p in paths}

    # -- step 8 --------------------------------------------------------------------------------------
    def _occupied(self, task_dir: Path, layout: TaskLayout, n: int) -> bool:
        if layout.data_file(n).exists() or layout.episodes_file(n).exists():
            return True
        c, f = layout.chunk_file(n)
        vdir = task_dir / "videos" / f"chunk-{c:03d}"
        return vdir.is_dir() and any(vdir.glob(f"*/episode-{f:03d}.*"))

    def _allocate(self, task: str, task_dir: Path, layout: TaskLayout, info: Mapping[str, Any], n: int,
                  claimed: frozenset[int] = frozenset()) -> int:
        """Server N for client N (docs/decisions.md U2). Caller holds the import guard and the task lock;
        ``claimed``: the N given to the earlier episodes of its group (not placed yet, U18)."""
        reserved = (markers.live_reservations(task_dir) if task_dir.is_dir() else set()) | claimed
        db = self.store.db

        def taken(k: int) -> bool:
            return k in reserved or self._occupied(task_dir, layout, k) or db.episode(task, k) is not None

        if not taken(n):
            return n
        if self.on_conflict == "reject":
            holder = db.episode(task, n)
            who = f" from {holder.client_hostname} (its episode {holder.client_episode_index})" if holder else ""
            raise UploadRejectedError(409, "episode_taken", f"task {task!r} already holds episode {n}{who}; this "
                                                            "server runs --on-conflict reject")
        if task not in self._scanned:  # one scan per task and process; later allocations probe paths only
            groups = list_task_episodes(task_dir, layout) if task_dir.is_dir() else []
            self._scanned[task] = groups[-1].index if groups else 0
        k = max([self._scanned[task], int(info.get("total_episodes") or 0), db.max_index(task), *reserved]) + 1
        while taken(k):
            k += 1
        return k

    def _publish(self, task: str, task_dir: Path, staging: Path, info: dict[str, Any], layout: TaskLayout, n: int,
                 manifest: Manifest, host_id: str, zip_sha256: str, upload_id: int, token_id: str | None,
                 validation: dict[str, Any], length: int, streams: list[str],
                 hashed: Mapping[Path, str], synced: frozenset[Path],
                 blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]], may_declare: bool) -> ImportResult:
        existed = task_dir.exists()
        is_task = (task_dir / "meta" / "info.json").is_file()
        if existed and not is_task and any(p.name != "meta" for p in task_dir.iterdir()):
            raise UploadRejectedError(409, "not_a_task", f"the store holds a directory {task!r} that is not a "
                                                         "pooled task; the server will not write into it")
        try:
            with task_lock(task_dir):
                if is_task:
                    recover_journals(self.store, task)
                    try:
                        server_info = read_info(task_dir)
                        server_layout = TaskLayout.from_info(task_dir, server_info)
                    except FormatError as exc:
                        raise UploadRejectedError(409, "server_task_broken", f"the server task cannot take "
                                                                             f"episodes: {exc.one_line()}") from exc
                    reclaim_stale(task_dir, server_layout)
                    fresh = None
                else:
                    if not may_declare:
                        raise _may_not_declare(task, f"task {task!r} does not exist on this server, and this token "
                                                     "may not create it (its first upload sets the fps, columns and "
                                                     "streams every later upload must match)")
                    fresh = new_info(task, fps=float(info.get("fps") or 30.0),
                                     app_version=str(info.get("app_version") or "unknown"),
                                     created_at=float(info.get("created_at") or time.time()),
                                     chunks_size=layout.chunks_size)
                    server_info, server_layout = fresh, TaskLayout.from_info(task_dir, fresh)
                return self._publish_locked(task, task_dir, staging, info, layout, server_info, server_layout, fresh,
                                            n, manifest, host_id, zip_sha256, upload_id, token_id, validation, length,
                                            streams, hashed, synced, blocks_for, may_declare)
        except BaseException:
            if not existed and not (task_dir / "meta" / "info.json").is_file():
                shutil.rmtree(task_dir, ignore_errors=True)  # only the lock anchor we created
            raise

    def _publish_locked(self, task: str, task_dir: Path, staging: Path, info: dict[str, Any], layout: TaskLayout,
                        server_info: dict[str, Any], server_layout: TaskLayout, fresh: dict[str, Any] | None, n: int,
                        manifest: Manifest, host_id: str, zip_sha256: str, upload_id: int, token_id: str | None,
                        validation: dict[str, Any], length: int, streams: list[str],
                        hashed: Mapping[Path, str], synced: frozenset[Path],
                        blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]],
                        may_declare: bool) -> ImportResult:
        """Step 8 under the lock for one upload: :meth:`_prepare`, then
        :func:`~egopool.server.publish.publish_episode`."""
        prepared = self._prepare(task, task_dir, staging, info, layout, server_info, server_layout, fresh, n, manifest,
                                 host_id, zip_sha256, upload_id, token_id, validation, length, streams, hashed, synced,
                                 blocks_for, may_declare)
        if isinstance(prepared, ImportResult):
            return prepared
        pub, known = prepared
        return self._imported(pub, known, zip_sha256, publish_episode(self.store, pub, server_layout, self._pause))

    def _prepare(self, task: str, task_dir: Path, staging: Path, info: dict[str, Any], layout: TaskLayout,
                 server_info: dict[str, Any], server_layout: TaskLayout, fresh: dict[str, Any] | None, n: int,
                 manifest: Manifest, host_id: str, zip_sha256: str, upload_id: int, token_id: str | None,
                 validation: dict[str, Any], length: int, streams: list[str],
                 hashed: Mapping[Path, str], synced: frozenset[Path],
                 blocks_for: Callable[[Mapping[str, Any]], dict[str, StatsBlock]], may_declare: bool,
                 claimed: frozenset[int] = frozenset()) -> ImportResult | tuple[Publication, dict[Path, str]]:
        """Step 8's checks and staging under the lock, up to the publish: the duplicate answer, or the
        :class:`~egopool.server.publish.Publication` and the sha256 already known of its final paths.
        ``hashed``: staged file -> sha256 the extraction computed (hash once: a file published as extracted
        is not read again for the answer's ``files``); ``synced``: staged files already fsynced
        (:func:`_sync_episode_files`); ``claimed``: N given to earlier episodes of the group (U18)."""
        if server_layout.chunks_size != layout.chunks_size:
            raise UploadRejectedError(409, "declaration_conflict", f"the server task has chunks_size "
                                                                   f"{server_layout.chunks_size}, the upload "
                                                                   f"{layout.chunks_size}")
        dup = self._duplicate(task, manifest, host_id, n, zip_sha256, upload_id)  # again, under the guard
        if dup is not None:
            return dup
        decl, blocks = check_upload_fits(task, task_dir, server_info, info, fresh, blocks_for, may_declare)
        target = self._allocate(task, task_dir, server_layout, server_info, n, claimed)
        decl["total_episodes"] = target
        moves, row = self._stage_files(staging, layout, server_layout, task_dir, n, target)
        rewritten = {layout.data_file(n), layout.episodes_file(n)} if target != n else set()
        known = {final: hashed[staged] for staged, final in [*moves, row] if staged in hashed
                 and staged not in rewritten}
        episode = EpisodeRow(task, target, host_id, manifest.source_hostname, n,
                             manifest.episode_digest, upload_id, token_id, time.time(), length, streams, validation)
        upload_fields = {"client_episode_index": n, "server_episode_index": target, "outcome": "imported",
                         "status": 200, "finished_at": time.time()}
        tasks_jsonl = None
        if fresh is not None:  # the uploaded lines' values, one object per line, no BOM or CR (§5's readline reader)
            lines = read_tasks(staging) if (staging / "meta" / "tasks.jsonl").is_file() else []
            tasks_jsonl = "".join(json.dumps(o, ensure_ascii=False) + "\n"
                                  for o in lines or [{"task_index": 0, "task": task}]).encode("utf-8")
        return Publication(task_dir, target, moves, row, decl, blocks, episode, upload_fields, fresh, tasks_jsonl,
                           synced), known

    def _imported(self, pub: Publication, known: Mapping[Path, str], zip_sha256: str,
                  problem: str | None) -> ImportResult:
        """The answer for a published (committed) episode."""
        e = pub.episode
        self._scanned[e.task] = max(self._scanned.get(e.task, 0), e.episode_index)
        return ImportResult("imported", e.task, e.episode_index, e.client_episode_index, e.client_host_id,
                            e.episode_index != e.client_episode_index, zip_sha256, e.episode_digest, e.upload_id,
                            self._published_files(e.task, e.episode_index, known), e.validation, problem)

    # -- the group commit (docs/decisions.md U18) ------------------------------------------------------
    def _publish_one(self, task: str, task_dir: Path, w: _Waiting) -> ImportResult:
        """:meth:`_publish` of one waiting upload. Caller holds the task's import guard."""
        v = w.v
        return self._publish(task, task_dir, v.staging, v.info, TaskLayout.from_info(v.staging, v.info), v.n,
                             v.manifest, v.host_id, w.zip_sha256, v.upload_id, w.token_id, v.validation, v.length,
                             v.streams, {Path(p): h for p, h in v.hashed.items()}, frozenset(map(Path, v.synced)),
                             v.blocks_for, w.may_declare)

    def _publish_many(self, task: str, task_dir: Path, items: list[_Waiting]) -> list[ImportResult | BaseException]:
        """Publish the uploads waiting for ``task``'s guard (caller holds it): one outcome each, in order (an
        answer, or its refusal or failure). A task's first episode is published alone (a new task's
        rollback removes the task directory), then the rest in groups (:meth:`_group`)."""
        outcomes: dict[int, ImportResult | BaseException] = {}
        rest = list(range(len(items)))
        while rest:
            if not (task_dir / "meta" / "info.json").is_file():
                i = rest.pop(0)
                try:
                    outcomes[i] = self._publish_one(task, task_dir, items[i])
                except Exception as exc:  # this upload's refusal or failure only
                    outcomes[i] = exc
                continue
            try:
                rest = self._group(task, task_dir, items, rest, outcomes)
            except Exception as exc:  # the task lock or the recovery failed: every upload not answered yet
                for i in rest:
                    outcomes.setdefault(i, exc)
                rest = []
        return [outcomes[i] for i in range(len(items))]

    def _group(self, task: str, task_dir: Path, items: list[_Waiting], rest: list[int],
               outcomes: dict[int, ImportResult | BaseException]) -> list[int]:
        """One group commit into the existing ``task``: every upload of ``rest`` (indices into ``items``) is
        checked and staged in its order exactly as a single publish would be — against the task as the earlier
        ones of the group will leave it (their declarations merged, their N taken) — then the accepted ones
        are published together (:func:`~egopool.server.publish.publish_group`). A refusal is that upload's
        outcome alone. An upload that declares something new (U15) is published in a group of its own, and
        one whose content an earlier one of the group carries waits for the next group (there it is a
        duplicate): returns the indices left for the next group."""
        with task_lock(task_dir):
            recover_journals(self.store, task)
            try:
                server_info = read_info(task_dir)
                server_layout = TaskLayout.from_info(task_dir, server_info)
            except FormatError as exc:
                for i in rest:
                    outcomes[i] = UploadRejectedError(409, "server_task_broken", f"the server task cannot take "
                                                                                 f"episodes: {exc.one_line()}")
                return []
            reclaim_stale(task_dir, server_layout)
            prepared: list[tuple[int, Publication, dict[Path, str]]] = []
            claimed: set[int] = set()
            digests: set[str] = set()
            later: list[int] = []
            for pos, i in enumerate(rest):
                w, v = items[i], items[i].v
                declaring = bool(_added_declarations(server_info, v.info))
                if prepared and (declaring or v.manifest.episode_digest in digests):
                    later = rest[pos:]
                    break
                try:
                    out = self._prepare(task, task_dir, v.staging, v.info, TaskLayout.from_info(v.staging, v.info),
                                        server_info, server_layout, None, v.n, v.manifest, v.host_id, w.zip_sha256,
                                        v.upload_id, w.token_id, v.validation, v.length, v.streams,
                                        {Path(p): h for p, h in v.hashed.items()}, frozenset(map(Path, v.synced)),
                                        v.blocks_for, w.may_declare, frozenset(claimed))
                except Exception as exc:  # a refusal: this upload's answer, the group goes on
                    outcomes[i] = exc
                    continue
                if isinstance(out, ImportResult):  # a duplicate of an episode published before
                    outcomes[i] = out
                    continue
                pub, known = out
                prepared.append((i, pub, known))
                claimed.add(pub.index)
                digests.add(v.manifest.episode_digest)
                server_info = merge_info(server_info, pub.declarations)  # what the merge will make of info.json
                if declaring:
                    later = rest[pos + 1:]
                    break
            results = publish_group(self.store, [pub for _, pub, _ in prepared], server_layout, self._pause) \
                if prepared else []
            for (i, pub, known), res in zip(prepared, results):
                if isinstance(res, BaseException):
                    outcomes[i] = res
                    continue
                try:
                    outcomes[i] = self._imported(pub, known, items[i].zip_sha256, res)
                except Exception as exc:
                    outcomes[i] = exc
            return later

    def _stage_files(self, staging: Path, layout: TaskLayout, server_layout: TaskLayout, task_dir: Path, n: int,
                     target: int) -> tuple[list[tuple[Path, Path]], tuple[Path, Path]]:
        """Staged file -> final path; a renumbered episode's parquet files are rewritten first."""
        c, f = layout.chunk_file(n)
        moves: list[tuple[Path, Path]] = []
        vdir = staging / "videos" / f"chunk-{c:03d}"
        for key_dir in sorted(vdir.iterdir()) if vdir.is_dir() else []:
            for p in sorted(key_dir.iterdir()):
                moves.append((p, server_layout.video_file(target, key_dir.name, p.suffix.lstrip("."))))
        data, row = layout.data_file(n), layout.episodes_file(n)
        if target != n:
            for src, single in ((data, False), (row, True)):
                dst = src.with_name(f"renumbered-{src.name}")
                rewrite_episode_index(src, dst, target, single_row=single)
                src.unlink()
                dst.rename(src)
        moves.append((data, server_layout.data_file(target)))
        return moves, (row, server_layout.episodes_file(target))

