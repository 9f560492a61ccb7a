"""Previews and quality facts of pooled episodes, built off the request path (issue 19, docs/decisions.md Q1, Q5, Q17).

Layout (never inside a task directory: readers and the store's tasks stay as the format says)::

    <previews>/                      default <store>/.egopool-server/previews/ (the LOCAL state directory)
    └── <task>/episode_NNNNNN/
        ├── preview.json             the manifest: streams (key, kind, files, size, fps, frames), signals
        ├── <image_key>.mp4          H.264 proxy per stream (depth colour-mapped)
        ├── <image_key>.jpg          thumbnail
        └── signals.json

A published episode is queued (:meth:`PreviewWorker.enqueue`); worker threads (niced: imports
come first) build it (:func:`egopool.curation.build.preview_unit`, in this process or, with
``serve --ray``, as one Ray task whose files come back as bytes: docs/decisions.md Q17) into a
temporary directory beside its place and rename it in whole, so a reader sees the old build or
the new one, never half of one. Each build is tried up to :data:`ATTEMPTS` times (a transient
error, e.g. a full disk, may pass); ``server.db`` records ``pending`` / ``ready`` / ``failed``
with the error's one line. The quality facts (:mod:`egopool.curation.quality`) come from the same
pass (the ego stream's frames are measured while its proxy is encoded). Nothing here can fail an
import: the import has answered before the build starts. At start-up, builds left ``pending``
and committed episodes without a preview row (a store imported before schema 3) are queued.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import queue
import re
import shutil
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._atomic import atomic_write_bytes
from ..curation.build import PreviewJob, PreviewResult, preview_unit
from ..curation.quality import QualityParams
from ..errors import EgopoolError
from ..layout import list_task_episodes
from .store import ServerStore

if TYPE_CHECKING:
    from ..jobs.executor import Executor

__all__ = ["ATTEMPTS", "PreviewConfig", "PreviewWorker", "describe", "preview_name_ok"]

log = logging.getLogger("egopool.server.previews")
#: Builds tried per queued episode before it is ``failed``.
ATTEMPTS = 3
#: Niceness of the builder threads: imports (the request path) come first on a busy machine.
_NICE = 10
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.(mp4|jpg|json)$")


def preview_name_ok(name: str) -> bool:
    """True when ``name`` could be a preview file (one path segment: ``<key>.mp4|.jpg`` or ``signals.json``)."""
    return bool(_NAME.match(name)) and ".." not in name and name != "preview.json"


@dataclass
class PreviewConfig:
    """Settings of the preview worker.

    Attributes
    ----------
    enabled:
        False: nothing is built or queued (``egopool serve --no-previews``); the API says ``pending``.
    root:
        Preview directory (None: ``<store>/.egopool-server/previews``).
    workers:
        Builder threads.
    quality:
        Thresholds of the quality facts.
    retry_delay_s:
        Wait before the second attempt (doubled before the third), s.
    ray:
        None: build in this process's threads; else the Ray address (``serve --ray [ADDRESS]``, ``""`` =
        Ray's default resolution): each build is one Ray task (docs/decisions.md Q17).
    """

    enabled: bool = True
    root: Path | None = None
    workers: int = 1
    quality: QualityParams = QualityParams()
    retry_delay_s: float = 1.0
    ray: str | None = None


class PreviewWorker:
    """The queue and the builder threads of one server (module docstring).

    Raises
    ------
    StorageError
        From :meth:`start` when the preview directory cannot be created.
    """

    def __init__(self, store: ServerStore, config: PreviewConfig | None = None) -> None:
        self.store = store
        self.config = config or PreviewConfig()
        self.root = Path(self.config.root) if self.config.root is not None else store.state / "previews"
        self._queue: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._queued: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._ex: Executor[Any, PreviewJob, PreviewResult] | None = None
        self._ex_lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------------------
    def task_location(self, task: str) -> Any:
        """Where the pooled task is read from: ``<store>/<task>`` (a Path), or the ``s3://.../<task>``
        ObjectPath of a bucket store (docs/decisions.md Q1: previews stay local, the task is read in place)."""
        return self.store.task_location(task)

    _task_path = task_location

    def episode_dir(self, task: str, index: int) -> Path:
        """``<previews>/<task>/episode_NNNNNN``."""
        return self.root / task / f"episode_{index:06d}"

    def file(self, task: str, index: int, name: str) -> Path | None:
        """The preview file ``name`` of ``(task, N)`` when the last build made it, else None."""
        row = self.store.db.preview(task, index)
        if row is None or row.manifest is None or not preview_name_ok(name):
            return None
        if name not in set(row.manifest.get("files") or []):
            return None
        path = self.episode_dir(task, index) / name
        return path if path.is_file() else None

    # -- the queue ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the builder threads and queue what the last run left (a background scan)."""
        if not self.config.enabled:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            for stale in self.root.glob("*/.episode_*"):  # a killed build's leftovers
                shutil.rmtree(stale, ignore_errors=True)
        for i in range(max(1, self.config.workers)):
            t = threading.Thread(target=self._run, name=f"egopool-preview-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        threading.Thread(target=self._backfill, name="egopool-preview-scan", daemon=True).start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads (a build in progress is left ``pending``: queued again at the next start)."""
        self._stop.set()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        with self._ex_lock:
            if self._ex is not None:
                with contextlib.suppress(Exception):  # the server is stopping; a dead cluster changes nothing
                    self._ex.close()
                self._ex = None

    def enqueue(self, task: str, index: int) -> bool:
        """Queue ``(task, N)`` (state ``pending``); False when it is queued already or previews are off."""
        if not self.config.enabled:
            return False
        with self._lock:
            if (task, index) in self._queued:
                return False
            self._queued.add((task, index))
        try:
            self.store.db.set_preview(task, index, "pending", attempts=0)
        except BaseException:
            with self._lock:
                self._queued.discard((task, index))
            raise
        self._queue.put((task, index))
        return True

    def _backfill(self) -> None:
        try:
            rows = {(r.task, r.episode_index): r.state for r in self.store.db.previews()}
            for (task, n), state in rows.items():
                if state == "pending":
                    self.enqueue(task, n)
            for task in self.store.tasks():
                try:
                    groups = list_task_episodes(self._task_path(task), committed_only=True)
                except EgopoolError:
                    continue
                for g in groups:
                    if (task, g.index) not in rows:
                        self.enqueue(task, g.index)
        except Exception:  # noqa: BLE001 - a scan that fails leaves episodes to be rebuilt on demand
            log.exception("the preview scan at start-up failed")

    def _run(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # Linux: per thread; FFmpeg's threads inherit it
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _NICE)
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            with self._lock:
                self._queued.discard(item)
            try:
                self._build_with_retries(*item)
            except Exception:  # noqa: BLE001 - the worker outlives any one episode
                log.exception("preview of %s episode %d", *item)

    def _clean(self, text: str) -> str:
        """An error line without the server's paths (the answer must never name one)."""
        stores = [str(self.store.root)] if self.store.root is not None else []
        roots = [(str(self.root), "previews"), *[(r, "") for r in stores], (str(self.store.state), "")]
        for root, word in roots:
            text = text.replace(root + os.sep, word + ("/" if word else ""))
            text = text.replace(root, word or "the store")
        return text

    def _build_with_retries(self, task: str, index: int) -> None:
        error = "not built"
        for attempt in range(1, ATTEMPTS + 1):
            if self._stop.is_set():
                return
            self.store.db.set_preview(task, index, "pending", attempts=attempt)
            try:
                manifest = self.build(task, index)
            except Exception as exc:  # noqa: BLE001 - recorded, never raised into the server
                error = self._clean(exc.one_line() if isinstance(exc, EgopoolError) else f"{type(exc).__name__}: {exc}")
                log.warning("preview of %s episode %d, attempt %d: %s", task, index, attempt, error)
                if attempt < ATTEMPTS:
                    self._stop.wait(self.config.retry_delay_s * 2 ** (attempt - 1))
                continue
            failed = manifest.get("errors") or []
            self.store.db.set_preview(task, index, "failed" if failed else "ready",
                                      error="; ".join(failed) if failed else None, manifest=manifest)
            return
        self.store.db.set_preview(task, index, "failed", error=error)

    # -- one build ----------------------------------------------------------------------------------
    def _executor(self) -> Executor[Any, PreviewJob, PreviewResult]:
        """In-process, or the Ray connection (``serve --ray``), made at the first build that needs it.

        Raises
        ------
        EgopoolError
            Ray is not installed or the cluster cannot be reached (the build fails and is retried:
            the next attempt connects again).
        """
        with self._ex_lock:
            if self._ex is None:
                from ..jobs.executor import make_executor

                self._ex = make_executor(self.config.ray)
            return self._ex

    def build(self, task: str, index: int) -> dict[str, Any]:
        """Build the previews and quality facts of ``(task, N)`` now; returns the manifest.

        The build itself is :func:`egopool.curation.build.preview_unit`, run in this process or, with
        ``PreviewConfig.ray``, as one Ray task whose files come back as bytes (docs/decisions.md Q17);
        either way they land in a temporary directory beside the episode's place, renamed in whole.
        A stream that cannot be previewed is left out and its error listed in ``"errors"``
        (the build counts as failed, the other streams are kept); the quality facts are stored
        whatever the previews did.

        Raises
        ------
        EgopoolError
            The episode cannot be opened (no such committed episode, unreadable data parquet), Ray
            cannot be reached, or its task failed (:class:`~egopool.errors.OperationError`).
        OSError
            The preview directory cannot be written.
        """
        row = self.store.db.episode(task, index)
        where = self._task_path(task)
        job = PreviewJob(task=str(where) if not isinstance(where, Path) else os.path.abspath(where), index=index,
                         validation=row.validation if row else None, params=self.config.quality)
        final = self.episode_dir(task, index)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.mkdir()
        try:
            ex = self._executor()
            if self.config.ray is None:
                job = dataclasses.replace(job, out=str(tmp))
            [result] = ex.map(preview_unit, None, [job])
            for name, data in (result.files or {}).items():
                if not preview_name_ok(name):  # a worker names only files it made; never a path
                    raise EgopoolError(f"the preview build returned a file named {name!r}")
                atomic_write_bytes(tmp / name, data)
            manifest = result.manifest
            manifest["errors"] = [self._clean(e) for e in manifest.get("errors") or []]
            facts = result.facts
            facts["errors"] = [self._clean(e) for e in facts.get("errors") or []]
            self.store.db.set_quality(task, index, facts)
            manifest["built_at"] = time.time()
            atomic_write_bytes(tmp / "preview.json", json.dumps(manifest).encode())
            self._swap(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return manifest

    @staticmethod
    def _swap(tmp: Path, final: Path) -> None:
        """Put the new build in place of the old one (two renames; the old one removed after)."""
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.{uuid.uuid4().hex[:8]}.old"
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def describe(worker: PreviewWorker, task: str, index: int) -> dict[str, Any]:
    """The ``"preview"`` object of the episode API: ``{"state", "error", "streams": [{"key", "kind",
    "thumbnail", "video", "width", "height", "fps", "frames", "held_frames", "moves"}], "signals"}``, URLs absolute
    paths under ``/api/v1`` (never a path of the server's disk). No row yet (previews off, or not queued): ``pending``."""
    row = worker.store.db.preview(task, index)
    base = f"/api/v1/tasks/{urllib.parse.quote(task, safe='')}/episodes/{index}/preview/"
    if row is None:
        return {"state": "pending", "error": None, "streams": [], "signals": None, "enabled": worker.config.enabled}
    man = row.manifest or {}
    streams = [{"key": s["key"], "kind": s["kind"],
                "thumbnail": base + urllib.parse.quote(s["thumbnail"]) if s.get("thumbnail") else None,
                "video": base + urllib.parse.quote(s["video"]), "width": s["width"], "height": s["height"],
                "fps": s["fps"], "frames": s["frames"],
                "held_frames": s.get("held_frames"), "moves": s.get("moves")} for s in man.get("streams") or []]
    signals = man.get("signals")
    return {"state": row.state, "error": row.error, "streams": streams,
            "signals": base + urllib.parse.quote(signals) if signals else None, "attempts": row.attempts,
            "updated_at": row.updated_at, "enabled": worker.config.enabled}
