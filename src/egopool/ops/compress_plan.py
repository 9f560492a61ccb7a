"""The plan of an ``egopool compress`` (file_format.md §3, §8; docs/decisions.md R30-R35): which depth streams
switch from FFV1 ``.mkv`` to 12-bit log HEVC ``.mp4``, what became of each, and the report.

Planning reads only (through the task's path: a directory or ``s3://``) and refuses, in one line naming the
file, a task whose depth cannot switch at once (R35).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..codecs.depth import probe_depth
from ..codecs.depth_transcode import TranscodeResult
from ..codecs.video import video_info
from ..errors import CodecError, OperationError
from ..layout import TaskLayout, list_task_episodes
from ..meta.episodes import read_episode_row
from ..storage import ObjectPath
from ._store_task import StoreTask

__all__ = ["CompressReport", "StreamJob", "plan", "refuse"]

#: suffix of an output before it is placed beside its source (a directory; not a `.tmp`: writers would sweep it)
HIDDEN = ".compressing"


@dataclass
class StreamJob:
    """One depth stream of the plan, and what became of it.

    Attributes
    ----------
    index, key:
        Global N and image_key.
    src, dst:
        Task-relative paths of the FFV1 ``.mkv`` and of the HEVC ``.mp4`` that replaces it.
    frames:
        Frames (the episode row's ``length``; the encoded count once done).
    bytes_before, bytes_after:
        Sizes of the ``.mkv`` and of the ``.mp4`` (0 until encoded).
    result:
        The check of the encoded stream (None until encoded; R31).
    reused:
        True when a finished output of an interrupted run was taken over.
    src_version:
        The store's version of the ``.mkv`` when planned (a directory: inode-mtime-size; a bucket: its ETag):
        a finished output is re-used only for an unchanged source.
    """

    index: int
    key: str
    src: str
    dst: str
    frames: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    result: TranscodeResult | None = None
    reused: bool = False
    src_version: str = ""

    @property
    def hidden(self) -> str:
        """Where the output is written before it is placed: ``.episode-NNN.mp4.compressing``."""
        head, _, name = self.dst.rpartition("/")
        return f"{head}/.{name}{HIDDEN}" if head else f".{name}{HIDDEN}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (journal and ``--json``)."""
        return {"episode_index": self.index, "key": self.key, "src": self.src, "dst": self.dst,
                "frames": self.frames, "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "src_version": self.src_version, "reused": self.reused,
                "result": self.result.to_dict() if self.result is not None else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StreamJob:
        """Inverse of :meth:`to_dict`."""
        res = d.get("result")
        return cls(int(d["episode_index"]), str(d["key"]), str(d["src"]), str(d["dst"]), int(d.get("frames", 0)),
                   int(d.get("bytes_before", 0)), int(d.get("bytes_after", 0)),
                   TranscodeResult.from_dict(res) if isinstance(res, dict) else None, bool(d.get("reused")),
                   str(d.get("src_version", "")))


@dataclass
class CompressReport:
    """Result of :func:`compress_task`.

    Attributes
    ----------
    task_dir:
        The task (a directory or an ``s3://`` location).
    keys:
        Depth image_keys switched (or to switch) from ``mkv`` to ``mp4``.
    streams:
        One :class:`StreamJob` per depth stream.
    committed:
        True when ``info.json`` now declares ``mp4`` for ``keys`` (the switch happened, by this run or
        one it resumed).
    resumed:
        What an interrupted earlier run left and this one took over (empty when nothing).
    notes:
        Things to know (nothing to do, why).
    wall_seconds, cpu_seconds:
        Elapsed and process CPU time of this call (s); CPU counts every thread of the process.
    """

    task_dir: Path | ObjectPath
    dry_run: bool
    keys: list[str] = field(default_factory=list)
    streams: list[StreamJob] = field(default_factory=list)
    committed: bool = False
    resumed: str = ""
    notes: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def frames(self) -> int:
        """Depth frames in the plan."""
        return sum(s.frames for s in self.streams)

    @property
    def bytes_before(self) -> int:
        """Bytes of the FFV1 streams."""
        return sum(s.bytes_before for s in self.streams)

    @property
    def bytes_after(self) -> int:
        """Bytes of the HEVC streams (0 on a dry run)."""
        return sum(s.bytes_after for s in self.streams)

    @property
    def max_error_mm(self) -> float:
        """Largest error of any depth pixel against its (range-clipped) FFV1 original, mm."""
        return max((s.result.max_error_mm for s in self.streams if s.result is not None), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool compress --json``)."""
        return {"task": str(self.task_dir), "dry_run": self.dry_run, "committed": self.committed,
                "resumed": self.resumed, "keys": self.keys, "streams": len(self.streams), "frames": self.frames,
                "bytes_before": self.bytes_before, "bytes_after": self.bytes_after,
                "max_error_mm": self.max_error_mm,
                "max_rel_error": max((s.result.max_rel_error for s in self.streams if s.result), default=0.0),
                "clipped": sum(s.result.clipped for s in self.streams if s.result),
                "wall_seconds": round(self.wall_seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
                "notes": self.notes, "details": [s.to_dict() for s in self.streams]}


# -- planning ----------------------------------------------------------------------------------------
def refuse(message: str, path: Path | ObjectPath | str, hint: str | None = None) -> OperationError:
    """A one-line refusal naming ``path``; nothing was changed."""
    return OperationError(message, path=str(path) if isinstance(path, ObjectPath) else path,
                          hint=hint or "nothing was changed")


def plan(t: StoreTask, info: dict[str, Any], layout: TaskLayout) -> tuple[list[str], list[StreamJob]]:
    """Depth keys declared ``mkv`` and their streams; refuses (one line, naming the file) what cannot go.

    Raises
    ------
    OperationError
        An RGB key declared ``mkv``, an episode without its row or in a legacy shard, a stream that is not FFV1
        depth (or not the log code already): one line naming the file; nothing was changed.
    """
    root = t.root
    exts = info.get("video_extensions")
    exts = exts if isinstance(exts, dict) else {}
    cameras = info.get("cameras")
    cameras = cameras if isinstance(cameras, dict) else {}
    keys = sorted(k for k, e in exts.items() if e == "mkv")
    for k in keys:
        if k in cameras:
            raise refuse(f"stream {k!r} is an RGB camera stored as .mkv (non-depth FFV1): compress converts depth "
                         "only", root / "meta" / "info.json")
    jobs: list[StreamJob] = []
    for g in list_task_episodes(root, layout):
        if g.meta is None:
            raise refuse(f"episode {g.index} has no meta/episodes row (unfinished or being written)",
                         g.data or next(iter(g.videos.values()), root),
                         "run `egopool repair clean TASK` or finish the recording first; nothing was changed")
        if g.meta_is_shard:
            raise refuse(f"episode {g.index}'s row is in a legacy multi-row shard", g.meta,
                         "run `egopool migrate --split-episodes TASK` first; nothing was changed")
        rows = None
        for key, path in sorted(g.videos.items()):
            if key not in keys:
                if path.suffix == ".mkv":
                    raise refuse(f"stream {key!r} is a .mkv that video_extensions does not declare mkv",
                                 path, "run `egopool validate TASK`; nothing was changed")
                continue
            if path.suffix == ".mp4" and path.is_file() and _is_hevc12(path):
                continue  # already the log code (a task mixed by hand): the switch makes it declared right
            if path.suffix != ".mkv" or path.is_dir():
                raise refuse(f"episode {g.index}'s {key!r} is not an FFV1 .mkv, and video_extensions is task-level: "
                             f"every episode's {key!r} must switch at once", path,
                             "convert or delete that episode first; nothing was changed")
            _check_ffv1_depth(path)
            if rows is None:
                rows = int(read_episode_row(g.meta, g.index).get("length") or 0)
            src = t.key(path)
            meta = t.store.head(src)
            if meta is None:
                raise refuse(f"episode {g.index}'s {key!r} vanished while planning", path, "run it again")
            jobs.append(StreamJob(g.index, key, src, t.key(path.with_suffix(".mp4")), rows, meta.size,
                                  src_version=meta.version))
    return keys, jobs


def _is_hevc12(path: Path | ObjectPath) -> bool:
    try:
        return probe_depth(path).kind == "hevc12"
    except CodecError:
        return False


def _check_ffv1_depth(path: Path | ObjectPath) -> None:
    """Refuse a ``.mkv`` that is not lossless depth (an FFV1 colour stream, a damaged file), naming it."""
    try:
        kind = probe_depth(path).kind
    except CodecError as exc:
        try:
            probe = video_info(path)
        except CodecError:
            raise refuse(f"damaged depth stream ({exc.message})", path,
                         "restore it from a backup or delete the episode; nothing was changed") from exc
        raise refuse(f"not a depth stream: {probe.get('codec')} {probe.get('pix_fmt')} (non-depth FFV1 or another "
                     "codec); compress converts FFV1 gray16le depth only", path) from exc
    if kind != "ffv1":
        raise refuse(f"declared mkv but holds {kind} depth, not FFV1", path,
                     "run `egopool validate TASK`; nothing was changed")
