"""Verifying one uploaded episode before anything is published (file_format.md §9; docs/decisions.md U4, U9, U20).

:func:`verify_upload` runs steps 1-5 and 7 of :mod:`egopool.server.importer` on a spooled zip, in a worker
process of the server (:class:`~egopool.server.workers.VerifyPool`, U14) or inline: the zip's structure and
manifest, the form's ``episode_index``, every member extracted into a staging task directory and checked
against the manifest, the slice's format and templates, the parquet and video bounds, N from the data parquet,
and egopool's validator. It touches no database and no task of the store.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from .._atomic import fsync_file
from ..codecs.decode_scan import SINGLE_THREAD_PIXELS
from ..errors import FormatError, LegacyLayoutError, UploadRejectedError
from ..identity import check_client_key, host_id_of_key, token_host_id
from ..layout import TaskLayout
from ..storage import ObjectPath
from ..meta.digests import DIGEST_COLUMN, parse_digests, sha256_path
from ..meta.episodes import raw_episode_row, restamp_row_file
from ..meta.info import DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH, read_info
from ..meta.stats import StatsBlock, episode_stats_file, stats_columns
from ..transfer.manifest import Manifest
from ..validate import validate_task
from .media_bounds import open_parquet_bounded, open_video_bounded
from .zipcheck import Limits, extract_verified, inspect_zip

__all__ = ["Verified", "check_slice", "client_host_id", "local", "verify_attempt", "verify_upload"]


def local(p: Path | ObjectPath) -> Path:
    """A staged file's path (a staging task is a local directory, so its layout gives local paths)."""
    if not isinstance(p, Path):
        raise TypeError(f"{p} is not a local path")
    return p


def _facts(staging: Path, n: int, layout: TaskLayout) -> list[str]:
    """The image_keys of the slice's videos."""
    c, f = layout.chunk_file(n)
    vdir = staging / "videos" / f"chunk-{c:03d}"
    return sorted(p.name for p in vdir.iterdir()) if vdir.is_dir() else []


def _column_values(pf: Any, column: str) -> set[int]:
    """Every value of ``column`` of an open parquet file, row group by row group."""
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


#: Threads that fsync staged videos while the validator decodes them, kept for the process's life (a verification
#: used to start and join a thread of its own: ~1 ms of CPU per small upload); each verification waits for its own.
_SYNCER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="egopool-fsync")


def _sync_episode_files(staging: Path, layout: TaskLayout, n: int) -> frozenset[Path]:
    """fsync the staged videos (the extraction wrote them without syncing; published as they are, never
    rewritten). The data parquet and the row may still be rewritten with a new N under the lock:
    :func:`egopool.publish.publish_group`'s put syncs those. Returns the paths synced."""
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
        The sender's host id (:func:`client_host_id`).
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
        return episode_stats_file(local(layout.data_file(self.n)), merged)


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
        host_id = client_host_id(plan.manifest, client_key, token_id)
        learnt = {"form_episode_index": plan.file, "client_host_id": host_id,
                  "client_hostname": plan.manifest.source_hostname}
        extracted = extract_verified(zip_path, plan, staging, limits)
        footer: dict[str, Any] = {}
        info, layout, n = check_slice(staging, plan.chunk, plan.file, plan.manifest, limits, media, footer)
        learnt["client_episode_index"] = n
        hashed = {str(staging.joinpath(*a.split("/"))): r.sha256 for a, r in extracted.items()}
        row_file = local(layout.episodes_file(n))
        new_row = adopt_reencoded(row_file, n, {a: (r.sha256, r.source_sha256) for a, r in extracted.items()
                                                if r.reencoded})
        if new_row is not None:
            hashed[str(row_file)] = new_row
        # the videos' bytes go to disk while the validator decodes them (fsync releases the GIL)
        syncing = _SYNCER.submit(_sync_episode_files, staging, layout, n)
        try:
            # the extraction hashed every file as it wrote it: the checksum check takes those (one pass, U33)
            report = validate_task(staging, media=media,
                                   digests={Path(os.path.abspath(k)): v for k, v in hashed.items()})
            if not report.ok:
                errors = [f for f in report.findings if f.severity == "error"]
                hide = _StagingPaths(staging)
                raise UploadRejectedError(422, "validation", f"the episode fails validation: {len(errors)} error(s), "
                                                             f"first: {hide(errors[0].one_line())}",
                                          findings=[{k: hide(v) for k, v in f.to_dict().items()}
                                                    for f in report.findings])
            validation = {"ok": True, "errors": 0,
                          "warnings": sum(1 for f in report.findings if f.severity == "warning")}
            length, names, streams = footer["rows"], footer["names"], _facts(staging, n, layout)
            blocks = episode_stats_file(local(layout.data_file(n)), info)
            synced = syncing.result()
        finally:
            syncing.exception()  # a refusal too: the staging directory is discarded only once the sync ended
    except UploadRejectedError as exc:
        exc.upload_log = learnt  # type: ignore[attr-defined]
        raise
    finally:
        for container in media.values():  # those the validator did not take
            container.close()
    return Verified(staging, plan.manifest, host_id, info, n, validation, length, streams, hashed,
                    [str(p) for p in synced], stats_columns(info, names), blocks, names)


def adopt_reencoded(row_file: Path, n: int, reencoded: Mapping[str, tuple[str, str | None]]) -> str | None:
    """Let a row that records digests vouch for the videos the client re-encoded before sending (§9 HEVC
    pre-compression; docs/decisions.md X4): each one's source sha256 (the manifest's) must be the digest the row
    records, then the row records the received bytes' sha256. Returns the staged row's new sha256, or None when
    it was left as sent (no re-encoded member, or a row without digests).

    Raises
    ------
    UploadRejectedError
        422 ``checksum``: the client's source file was not the one its row records (damaged before packing).
    """
    if not reencoded:
        return None
    raw = raw_episode_row(row_file, n)
    try:
        rec = parse_digests(raw.get(DIGEST_COLUMN))
    except ValueError as exc:
        raise UploadRejectedError(422, "checksum", f"the episode's row: {exc}") from exc
    if rec is None:
        return None
    files = dict(rec.files)
    for name, (got, source) in sorted(reencoded.items()):
        want = files.get(name)
        if want is not None and source != want:
            raise UploadRejectedError(422, "checksum", f"{name} was re-encoded from a file whose sha256 is "
                                                       f"{source}, the episode's row records {want}: the client's "
                                                       "copy was damaged before packing; restore it and upload again")
        files[name] = got
    restamp_row_file(row_file, files)
    return sha256_path(row_file)


def verify_attempt(zip_path: Path, staging: Path, limits: Limits, *, attempt: int, form_index: str | None,
                   client_key: str | None, token_id: str | None) -> Verified:
    """:func:`verify_upload` into ``staging`` emptied first: attempt 2 follows a worker that died mid-extraction
    (docs/decisions.md U28), whose files are never taken for verified ones.

    ``EGOPOOL_SERVER_PAUSE=verifying`` (the crash tests' seam, read in the worker) makes attempt 1 write
    ``<state>/paused-verifying`` holding this process's pid and wait until that file is removed (a test kills
    the process meanwhile); a retry does not pause.

    Raises
    ------
    UploadRejectedError, OSError
        As :func:`verify_upload`.
    """
    for entry in os.scandir(staging):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    if attempt == 1 and os.environ.get("EGOPOOL_SERVER_PAUSE") == "verifying":
        marker = staging.parents[2] / "paused-verifying"  # <state>/staging/<id>-<hex>/<task>
        marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + 3600
        while marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return verify_upload(zip_path, staging, limits, form_index=form_index, client_key=client_key, token_id=token_id)


def check_slice(staging: Path, chunk: int, file: int, manifest: Manifest, limits: Limits,
                media: dict[Path, Any] | None = None, footer: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], TaskLayout, int]:
    """Steps 4 and 5: format, templates, and N from the data parquet. ``media`` receives the open
    containers of the videos with small frames (:func:`_small_frames`) for the validator; ``footer`` the data
    parquet's ``rows`` and column ``names`` from the footer the bounds read (each parquet file's footer is read
    once here: docs/decisions.md U36)."""
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
    with open_parquet_bounded(data, limits) as data_pf, open_parquet_bounded(row, limits, rows=1) as row_pf:
        if footer is not None:
            footer.update(rows=int(data_pf.metadata.num_rows), names=list(data_pf.schema_arrow.names))
        for video in sorted((staging / "videos").glob("chunk-*/*/episode-*.*")):
            container = open_video_bounded(video, limits)
            if container is not None and media is not None and _small_frames(container):
                media[Path(os.path.abspath(video))] = container  # the validator's, not opened twice (U20)
            elif container is not None:
                container.close()
        try:
            values, row_values = _column_values(data_pf, "episode_index"), _column_values(row_pf, "episode_index")
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
