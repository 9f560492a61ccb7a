"""One episode's previews and quality facts, as one unit of work (issue 19; docs/decisions.md Q1–Q5, Q17).

:func:`preview_unit` is what the pooling server's :class:`~egopool.server.previews.PreviewWorker`
runs through an :class:`~egopool.jobs.executor.Executor`: in its own process (``LocalExecutor``,
the files are written straight into the server's temporary build directory) or as one Ray task
(``serve --ray``, ``RayExecutor``: the worker builds into its own temporary directory and returns
the files' bytes, which the server writes into its local previews directory and renames in whole).
Nothing here touches the server's catalog: the unit returns the manifest and the quality facts,
the server stores them.

The episode is read from :attr:`PreviewJob.task`, the location the server reads it from: a task
directory (an absolute path a Ray node must see under the same name) or the task's ``s3://`` URI
(every node reads the bucket with its own ``AWS_*`` variables, docs/decisions.md O17).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_bytes
from ..errors import EgopoolError
from ..read.reader import open_task
from ..storage import as_path
from .proxy import StreamPreview, depth_proxy, rgb_proxy
from .quality import QualityParams, ego_stream, episode_quality
from .signals import episode_signals

__all__ = ["PreviewJob", "PreviewResult", "build_preview", "preview_unit"]


@dataclass(frozen=True)
class PreviewJob:
    """What one build needs (picklable: it travels to a Ray worker).

    Attributes
    ----------
    task:
        The pooled task's location: an absolute directory path or an ``s3://`` URI.
    index:
        The episode's N.
    validation:
        The import's validation verdict from the server catalog (None: the server did not import it).
    params:
        Thresholds of the quality facts.
    out:
        Build into this existing directory (in-process); None: build into a temporary directory
        of the worker and return the files' bytes.
    """

    task: str
    index: int
    validation: dict[str, Any] | None = None
    params: QualityParams = field(default_factory=QualityParams)
    out: str | None = None


@dataclass
class PreviewResult:
    """What one build returns.

    Attributes
    ----------
    manifest:
        ``{"streams": [StreamPreview.to_dict()], "signals": "signals.json" | None, "files": [names],
        "errors": [one line per stream or signal that failed], "built_by": {"host", "pid"}}`` (the
        process that built it: the server's, or a Ray worker's); ``preview.json`` without ``built_at``.
    facts:
        The quality facts (:func:`~egopool.curation.quality.episode_quality`).
    files:
        ``{name: bytes}`` of every listed file when :attr:`PreviewJob.out` was None, else None.
    """

    manifest: dict[str, Any]
    facts: dict[str, Any]
    files: dict[str, bytes] | None = None


def build_preview(job: PreviewJob, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Build the proxies, thumbnails and ``signals.json`` of ``job`` into ``out``; return (manifest, facts).

    A stream that cannot be previewed is left out and its error listed in ``manifest["errors"]``
    (the other streams are kept); the quality facts are computed whatever the previews did.

    Raises
    ------
    EgopoolError
        The episode cannot be opened (no such committed episode, unreadable data parquet).
    OSError
        ``out`` cannot be written.
    """
    ep = open_task(as_path(job.task)).episode(job.index)
    fps = float(ep.task.info.get("fps") or 30.0)
    rows = ep.length
    streams: list[StreamPreview] = []
    errors: list[str] = []
    kinds: dict[str, str] = {}
    for key in sorted(ep.streams):
        try:
            kinds[key] = ep.stream_kind(key)
            if kinds[key] == "depth":
                streams.append(depth_proxy(ep.stream_path(key), out, key, fps, params=ep.depth_params(key),
                                           ext=ep.declared_ext(key), rows=rows))
            else:
                streams.append(rgb_proxy(ep.stream_path(key), out, key, fps, rows=rows))
        except EgopoolError as exc:
            errors.append(f"stream {key!r}: {exc.one_line()}")
    signals: str | None = "signals.json"
    try:
        atomic_write_bytes(out / "signals.json", json.dumps(episode_signals(ep), allow_nan=False).encode())
    except EgopoolError as exc:
        errors.append(f"signals: {exc.one_line()}")
        signals = None
    # the ego stream, the master clock and the thumbnail are chosen among the streams that move (P7)
    rgb = [s for s in streams if s.kind == "rgb"]
    ego = ego_stream(ep, [s.key for s in rgb if s.moves] or [s.key for s in rgb])
    ego_stats = next((s.stats for s in streams if s.key == ego), None)
    facts = episode_quality(ep, ego=ego, ego_stats=ego_stats, validation=job.validation, params=job.params,
                            streams=streams)
    files = [n for s in streams for n in (s.video, s.thumbnail) if n] + ([signals] if signals else [])
    manifest = {"streams": [s.to_dict() for s in streams], "signals": signals, "files": files, "errors": errors,
                "built_by": {"host": socket.gethostname(), "pid": os.getpid()}}
    return manifest, facts


def preview_unit(shared: object, job: PreviewJob) -> PreviewResult:
    """Executor unit (``fn(shared, unit)``, ``shared`` unused): :func:`build_preview` into ``job.out``, or,
    without one, into a temporary directory whose files come back as bytes (Q17).

    Raises
    ------
    EgopoolError, OSError
        As :func:`build_preview`. In the manifest's errors the worker's temporary directory reads ``previews``.
    """
    if job.out is not None:
        manifest, facts = build_preview(job, Path(job.out))
        return PreviewResult(manifest, facts)
    with tempfile.TemporaryDirectory(prefix="egopool-preview-") as tmp:
        manifest, facts = build_preview(job, Path(tmp))
        manifest["errors"] = [e.replace(tmp, "previews") for e in manifest["errors"]]
        files = {name: (Path(tmp) / name).read_bytes() for name in manifest["files"]}
    return PreviewResult(manifest, facts, files)
