"""State shared by the checks of one validation run (internal)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..storage import TaskPath
from ..layout import TaskLayout
from .report import Report


def json_float(value: Any) -> float | None:
    """A JSON number as float64, or None when it is not a number (bool, str, null, object...).

    An integer beyond float64 (JSON allows ``-1`` followed by 400 zeros; Python's ``float()``
    raises ``OverflowError`` on it) is ±Infinity, so every comparison and check treats it as the
    non-finite value other JSON readers turn it into (docs/decisions.md V7).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf

__all__ = ["Context", "json_float", "wall_time_rule_applies"]

_COLLECTOR_VERSION_RE = re.compile(r"^v?1\.(\d+)(?:\.(\d+))?")


def wall_time_rule_applies(app_version: Any) -> bool:
    """Whether ``wall_time − timestamp`` must be constant and ``wall_time`` strictly increasing.

    The collector made ``wall_time = episode start + timestamp`` in v1.3.17
    (file_format.md §7.3); before that it was the write moment (``time.time()``),
    which carries queue backlog and dropped ticks. So the rule applies to collector
    versions ``1.x.y >= 1.3.17``. Any ``app_version`` that is not of the collector's
    ``1.x`` form (egopool writes its own ``0.x`` version, decisions.md §6 computes
    ``wall_time = created_at + float32(timestamp)``) or is missing/unparseable is
    treated as subject to the rule.

    Note that ``app_version`` is task-level and the latest episode wins (§6.7): a task
    that spans the v1.3.17 update is judged by the newer version.
    """
    m = _COLLECTOR_VERSION_RE.match(str(app_version)) if isinstance(app_version, str) else None
    if m is None:
        return True
    return (int(m[1]), int(m[2] or 0)) >= (3, 17)


@dataclass
class Context:
    """What the checks of one task share.

    Attributes
    ----------
    root:
        The task directory as given (finding paths are built on it, so several
        tasks in one report stay distinguishable).
    report:
        Where findings go.
    info:
        ``meta/info.json`` as loaded.
    layout:
        Path templates, or None when the templates are unusable.
    depth_keys, rgb_keys:
        image_keys whose files probed as depth (gray) / colour streams.
    shards_seen:
        Legacy multi-row ``meta/episodes`` shards already reported.
    shard_tables:
        Those shards as read once (pyarrow Tables; up to 1000 episodes share one).
    decode:
        Decode every frame of every stream (False: ``--fast``, frames are only counted).
    media:
        Containers the caller already opened for video files of the task (absolute path -> container,
        nothing demuxed): the video check takes its file's instead of opening it (docs/decisions.md U20).
    undigested:
        Episodes whose row records no file digests (docs/decisions.md X5: one note for the task).
    known_digests:
        Absolute local file path -> sha256 hex the caller computed as it wrote the file (the server's
        extraction, docs/decisions.md U33): the digest check takes it instead of hashing the file again.
    raw_rows:
        N -> its ``meta/episodes`` row as stored, kept by the row check for the digest check (which pops it):
        the row is read once (a GET per episode in a bucket, O33).
    """

    root: TaskPath
    report: Report
    info: dict[str, Any]
    layout: TaskLayout | None = None
    depth_keys: set[str] = field(default_factory=set)
    rgb_keys: set[str] = field(default_factory=set)
    shards_seen: set[TaskPath] = field(default_factory=set)
    shard_tables: dict[TaskPath, Any] = field(default_factory=dict)
    decode: bool = True
    media: dict[Path, Any] = field(default_factory=dict)
    undigested: int = 0
    raw_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    known_digests: Mapping[Path, str] = field(default_factory=dict)

    @property
    def features(self) -> dict[str, Any]:
        """``info.features`` (empty when missing or malformed)."""
        f = self.info.get("features")
        return f if isinstance(f, dict) else {}

    @property
    def video_extensions(self) -> dict[str, Any]:
        """``info.video_extensions`` (empty when missing or malformed)."""
        v = self.info.get("video_extensions")
        return v if isinstance(v, dict) else {}

    @property
    def fps(self) -> float | None:
        """``info.fps`` (Hz) when it is a finite number > 0, else None (reported by the info checks)."""
        f = json_float(self.info.get("fps"))
        return f if f is not None and math.isfinite(f) and f > 0 else None

    @property
    def wall_time_rule(self) -> bool:
        """See :func:`wall_time_rule_applies`."""
        return wall_time_rule_applies(self.info.get("app_version"))

    def rel(self, *parts: str) -> TaskPath:
        """``root / parts`` for finding paths."""
        return self.root.joinpath(*parts)
