"""The task writer: creates a task, allocates N, opens episode writers (DESIGN §1, §5).

::

    tw = TaskWriter(root, "pick_cup", fps=30.0)
    ep = tw.begin_episode(columns=[*imu_columns(), hand_pose_column("right")],
                          streams=[StreamSpec("head_left_rgb", "rgb", 640, 480)])
    for i in range(n):
        ep.add_frame({"observation.imu": samples, "imu_ts_ns": ts, ...},
                     hardware_ns=hw, images={"head_left_rgb": rgb})
    ep.finish()          # or ep.abort(): N is freed for the next recording (§7.5)

The episode side (rows, streams, publish) lives in :mod:`egopool.write.episode_writer`;
its public names are re-exported here.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import __version__
from . import checks
from .._atomic import task_lock
from .episode_writer import EpisodeResult, EpisodeWriter, StreamSpec
from ..errors import FormatError, LegacyLayoutError, LockError, RegistryError, SchemaError, StorageError
from ..layout import TaskLayout, list_task_episodes
from ..meta import markers
from ..meta.info import info_path, new_info, read_info, write_info
from ..meta.tasks import write_tasks_if_missing
from .local_paths import local_file
from .recovery import reclaim_stale, remove_episode_temps, sweep_stale_temps
from ..registry import Registry, record_episode, task_key
from ..ops._store_task import refuse_edited
from ..schema import ColumnSpec
from ..storage.directory_store import DirectoryStore

__all__ = ["EpisodeResult", "EpisodeWriter", "StreamSpec", "TaskWriter", "refuse_foreign", "refuse_while_compressing"]


def refuse_foreign(task_dir: Path, fps: float, fps_hint: str | None) -> None:
    """Refuse, before anything is written, a directory that is not (or not yet) a pooled task,
    or a task recorded at another fps.

    An existing ``info.json`` must parse and say ``pooled_episodes_v1``; a directory
    without one must not be the legacy v1.0 per-session layout (file_format.md §1,
    DESIGN §7), which would otherwise silently get a pooled ``info.json`` beside its sessions.

    Raises
    ------
    FormatError
        ``info.json`` unreadable or another ``format``.
    LegacyLayoutError
        ``<task>_NNNNNN`` session directories and no ``info.json``.
    SchemaError
        The task's ``fps`` is another one: a task has one fps (file_format.md §3), its rows are
        ``1/fps`` apart and the pooling server refuses a slice at another fps. ``fps_hint`` is
        the way out the caller offers (None: ``use --fps <task fps>, or record into a new task``).
    """
    if info_path(task_dir).exists():
        old = read_info(task_dir).get("fps")
        if isinstance(old, (int, float)) and not isinstance(old, bool):
            try:
                same, shown = math.isclose(float(old), fps, rel_tol=1e-9), f"{old:g}"
            except OverflowError:  # an integer beyond float64 (docs/decisions.md V7)
                same, shown = False, f"{str(old)[:12]}... ({len(str(abs(old)))} digits)"
            if not same:
                raise SchemaError(f"the task records at {shown} fps, not {fps:g} (a task has one fps, file_format.md "
                                  "§3)", path=task_dir, hint=fps_hint or f"use --fps {shown}, or record into a new "
                                                                         "task")
    elif task_dir.is_dir():
        try:
            read_info(task_dir)
        except LegacyLayoutError:
            raise
        except FormatError:
            pass  # no info.json yet: a new task in an existing directory


#: ``egopool compress``'s journal (egopool.ops.compress.JOURNAL; write/ does not import ops/).
COMPRESS_JOURNAL = "meta/.compress.json"


def refuse_while_compressing(task_dir: Path) -> None:
    """Refuse at once, rather than wait hours for the task lock, while ``egopool compress`` holds it (R38).

    A compress holds the exclusive task lock for its whole run (file_format.md §3: the switch is
    task-wide); every writer would block on it silently. When its journal exists and the lock is
    busy, this raises; otherwise (the lock free, or busy without a journal: a short maintenance
    command) the caller takes the lock as usual.

    Raises
    ------
    LockError
        Naming the journal and the fix; nothing was written.
    """
    journal = Path(task_dir) / COMPRESS_JOURNAL
    if not journal.is_file():
        return
    try:
        with task_lock(task_dir, wait=False):
            return
    except LockError:
        raise LockError("`egopool compress` is converting this task's depth to HEVC and holds the task lock",
                        path=journal, hint="record after it has finished, or into another task; nothing was "
                                           "written") from None


class TaskWriter:
    """Writes episodes into ``<root>/<task_name>`` (file_format.md §1).

    Creates the task (``info.json`` with every MUST key, ``tasks.jsonl``) if absent;
    refuses a directory whose ``info.json`` has another ``format``.

    Parameters
    ----------
    root:
        Recordings root (``data/recordings``); the task directory is ``root / task_name``.
    task_name:
        Task name (= directory name; Chinese allowed).
    fps:
        Task frame rate (rows per second).
    app_version:
        Written into ``info.json`` (defaults to egopool's version).
    registry:
        Record finished episodes in the local registry ``<root>/pipeline.db`` and take its
        watermark into account when numbering (DESIGN §1). True (default): the registry
        beside the task; a path or :class:`~egopool.registry.Registry`: that one; False: none.
    fps_hint:
        What the refusal of an existing task at another fps tells the user to do (default:
        ``use --fps <task fps>, or record into a new task``; an import, whose rate comes from
        its source, says to import into a new task).

    Raises
    ------
    FormatError
        The existing task is not ``pooled_episodes_v1`` (nothing is written).
    SchemaError
        The existing task records at another ``fps`` (nothing is written).
    LegacyLayoutError
        The directory is the legacy v1.0 per-session layout (nothing is written).
    LockError
        ``egopool compress`` is running on the task (:func:`refuse_while_compressing`; nothing is written).
    """

    def __init__(self, root: str | Path, task_name: str, fps: float = 30.0, *, app_version: str | None = None,
                 registry: bool | str | Path | Registry = True, fps_hint: str | None = None) -> None:
        self.fps = checks.check_positive_number(fps, "fps")
        self.task_name = checks.check_task_name(task_name)
        self.task_dir = Path(root) / task_name
        self.app_version = app_version or __version__
        refuse_foreign(self.task_dir, self.fps, fps_hint)
        self.registry: Registry | None = (
            registry if isinstance(registry, Registry) else Registry.for_task(self.task_dir) if registry is True
            else Registry(registry) if registry else None)
        self._created_here = not self.task_dir.exists()
        #: N committed by this writer's episodes, in order.
        self.committed: list[int] = []
        with StorageError.guard(self.task_dir, action="cannot write the task"):
            self._create()

    def _create(self) -> None:
        task_name = self.task_name
        refuse_while_compressing(self.task_dir)
        (self.task_dir / "meta" / "episodes").mkdir(parents=True, exist_ok=True)
        with task_lock(self.task_dir):
            if (self.task_dir / "meta" / "info.json").exists():
                info = read_info(self.task_dir)
            else:
                info = new_info(task_name, fps=self.fps, app_version=self.app_version)
                write_info(self.task_dir, info)
            write_tasks_if_missing(self.task_dir, task_name)
            self.layout = TaskLayout.from_info(self.task_dir, info)
            reclaim_stale(self.task_dir, self.layout)  # recorders of this task that were killed
            sweep_stale_temps(self.task_dir, self.layout)  # and the temps they left (16 E: 115 MB after SIGTERM)
            # One full scan per writer; later allocations probe paths only (O(1) in task size).
            groups = list_task_episodes(self.task_dir, self.layout)
            self._scanned_max = groups[-1].index if groups else 0

    def remove_if_unused(self) -> bool:
        """Remove the task directory again when this writer created it and nothing else was ever
        written into it: exactly the files a new task starts with (``meta/info.json``,
        ``meta/tasks.jsonl``, the lock anchor), so a recording session that ended before its first
        episode leaves no empty task behind. Returns True when it was removed.

        A task that existed before, or holds any other file (an episode, a recycled N, another
        recorder's reservation), is left as it is.
        """
        if not self._created_here or not self.task_dir.is_dir():
            return False
        skeleton = {"meta/info.json", "meta/tasks.jsonl", "meta/episodes/.lock"}
        with task_lock(self.task_dir):
            files = {p.relative_to(self.task_dir).as_posix() for p in self.task_dir.rglob("*") if not p.is_dir()}
            if not files <= skeleton:
                return False
            shutil.rmtree(self.task_dir)
        return True

    @property
    def info(self) -> dict[str, Any]:
        """The task's current ``info.json``."""
        return read_info(self.task_dir)

    def _check_begin(self, info: Mapping[str, Any], columns: Sequence[ColumnSpec], streams: Sequence[StreamSpec],
                     sensors: Sequence[str] | None, device_names: Mapping[str, str] | None,
                     devices: Sequence[Mapping[str, Any]]) -> None:
        """Refuse, before anything is recorded, an episode its own task could not take (writer_checks)."""
        checks.check_column_declarations(info, columns)
        checks.check_stream_declarations(info, [(st.image_key, st.kind, st.codec_ext()[1]) for st in streams],
                                         path=self.task_dir / "meta" / "info.json")
        stats_cols = {f"observation.{s}" for s in sensors or []} | {"observation.imu"}
        dims = {c.name: c.length or 0 for c in columns if c.name in stats_cols}
        preview = {"features": {c.name: dict(c.feature) for c in columns if c.feature is not None},
                   "sensors": list(sensors or []), "device_names": dict(device_names or {}),
                   "devices": [dict(d) for d in devices]}
        checks.check_task_meta_mergeable(self.task_dir, info, preview, dims)

    def _occupied(self, index: int) -> bool:
        if self.layout.data_file(index).exists() or self.layout.episodes_file(index).exists():
            return True
        c, f = self.layout.chunk_file(index)
        vdir = self.task_dir / "videos" / f"chunk-{c:03d}"
        return vdir.is_dir() and any(vdir.glob(f"*/episode-{f:03d}.*"))

    def _allocate(self, info: Mapping[str, Any]) -> int:
        """Next N (DESIGN §1): a free recycled N first, else past every watermark. Caller holds the lock."""
        reclaim_stale(self.task_dir, self.layout)  # a killed recorder's N is free again (recovery.py)
        reserved = markers.live_reservations(self.task_dir)
        recycled = markers.read_recycled(self.task_dir)
        if recycled is not None:
            if not self._occupied(recycled) and recycled not in reserved:
                return recycled
            if self._occupied(recycled):
                markers.clear_recycled(self.task_dir)
        n = max([self._scanned_max, int(info.get("total_episodes") or 0), self._registry_watermark(), *reserved]) + 1
        while self._occupied(n) or n in reserved:
            n += 1
        return n

    def _take(self, n: int) -> None:
        """Reserve N for this process, without temps an earlier writer of N left (caller holds the lock)."""
        remove_episode_temps(self.layout, n)
        markers.reserve(self.task_dir, n)

    def _registry_watermark(self) -> int:
        if self.registry is None:
            return 0
        try:
            return self.registry.watermark(task_key(self.task_dir))
        except RegistryError as exc:  # numbering still has the scan and total_episodes
            warnings.warn(f"registry watermark unavailable: {exc.one_line()}", RuntimeWarning, stacklevel=3)
            return 0

    def note_taken(self, index: int) -> None:
        """N is committed by one of this writer's episodes (called under the task lock)."""
        self._scanned_max = max(self._scanned_max, index)
        self.committed.append(index)

    def register(self, index: int, paths: Sequence[Path], *, warn: bool = True) -> str | None:
        """Record a published episode in the registry; a failure is returned (and warned when ``warn``; the
        episode writer folds it into its one message when more is still to do), never raised."""
        if self.registry is None:
            return None
        try:
            record_episode(self.task_dir, index, paths, registry=self.registry)
        except RegistryError as exc:
            if warn:
                warnings.warn(f"episode {index} is published but not in the registry: {exc.one_line()} (run "
                              "`egopool repair clean TASK` once it can be written)", RuntimeWarning, stacklevel=3)
            return exc.one_line()
        return None

    def next_episode_index(self) -> int:
        """The N the next :meth:`begin_episode` would take (without reserving it)."""
        with task_lock(self.task_dir):
            return self._allocate(read_info(self.task_dir))

    def begin_episode(self, columns: Sequence[ColumnSpec] = (), streams: Sequence[StreamSpec] = (), *,
                      devices: Sequence[Mapping[str, Any]] = (), device_names: Mapping[str, str] | None = None,
                      calibration: Mapping[str, Any] | None = None, sensors: Sequence[str] | None = None,
                      sensor_dim: int | None = None, info_extra: Mapping[str, Any] | None = None,
                      created_at: float | None = None) -> EpisodeWriter:
        """Reserve the next N and open an episode writer.

        Parameters
        ----------
        columns:
            Column specs (schema.py factories). Key columns of §7.1 and ``action`` are added.
        streams:
            Video streams; every stream gets exactly one frame per data row.
        devices, device_names, calibration, sensors, sensor_dim, info_extra:
            Declarations merged into ``info.json`` on finish (§6.4, §6.5); ``calibration``
            is also the episode row's ``calibration``.
        created_at:
            Episode start, Unix s (default: now). ``wall_time = created_at + timestamp`` (§7.3).

        Raises
        ------
        SchemaError
            Duplicate columns, a lockstep column without its partner, duplicate image_keys;
            a column or stream the task declares differently (multi_device_storage.md §6.7);
            NaN / Infinity in ``created_at`` or a declaration, a declaration of the wrong JSON type
            (:func:`~egopool.write.checks.check_declaration_types`); a ``created_at`` <= 0 or one on
            which float64 ``wall_time`` cannot tell rows apart (:func:`~egopool.write.checks.check_created_at`).
        FormatError
            ``info.json`` / ``stats.json`` could not take the episode at finish (run
            ``egopool stats recalc TASK``); nothing is recorded.
        StorageError
            The task directory cannot be written (read-only, disk full).
        LockError
            ``egopool compress`` is running on the task (:func:`refuse_while_compressing`; nothing is written);
            an interrupted ``egopool edit`` holds it (its journal ``meta/.edit.json``: ``egopool edit resume
            TASK`` first, docs/decisions.md E30; a live edit holds the task lock, so this waits for it).
        """
        if created_at is not None:
            checks.check_created_at(created_at, self.fps)
        # a generator is read once: list it (a str or a mapping stays as given, for the type check to refuse)
        devices = list(devices) if isinstance(devices, Iterable) and not isinstance(devices, (str, bytes, Mapping)) \
            else devices
        sensors = list(sensors) if isinstance(sensors, Iterable) and not isinstance(sensors, (str, bytes, Mapping)) \
            else sensors
        checks.check_declaration_types(devices, device_names, calibration, sensors, sensor_dim, info_extra)
        for what, value in (("devices", list(devices)), ("device_names", dict(device_names or {})),
                            ("calibration", dict(calibration or {})), ("info_extra", dict(info_extra or {}))):
            checks.check_json_value(value, what)
        refuse_while_compressing(self.task_dir)
        with StorageError.guard(self.task_dir, action="cannot start an episode"), task_lock(self.task_dir):
            refuse_edited(DirectoryStore(self.task_dir), str(self.task_dir), "nothing was recorded")
            info = read_info(self.task_dir)
            self._check_begin(info, columns, streams, sensors, device_names, devices)
            n = self._allocate(info)
            self._take(n)
        try:
            with StorageError.guard(local_file(self.layout.data_file(n)), action="cannot start episode files"):
                return EpisodeWriter(self, n, columns, streams, devices=devices, device_names=device_names,
                                     calibration=calibration, sensors=sensors, sensor_dim=sensor_dim,
                                     info_extra=info_extra, created_at=created_at)
        except BaseException:
            with contextlib.suppress(Exception), task_lock(self.task_dir):  # nothing of N stays (§7.5)
                remove_episode_temps(self.layout, n)
                recycled = markers.read_recycled(self.task_dir)
                if recycled is None or recycled >= n:  # the marker holds one N: the lowest free one
                    markers.write_recycled(self.task_dir, n)
            markers.release(self.task_dir, n)
            raise


