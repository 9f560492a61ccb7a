"""``egopool export lerobot TASK s3://bucket/prefix/OUT``: the LeRobot dataset written into a bucket (decision O18).

The same units and the same files as :func:`egopool.interop.lerobot_export.export_lerobot`
(docs/decisions.md K8): each episode is exported by
:func:`~egopool.interop.lerobot_export.export_episode` into a temporary directory of the
process that runs it (this one, or a Ray worker: no shared file system), and its files are
PUT under their final keys (sha256 in the object's metadata). The driver then writes ``meta/``
from the parts (it fetches the first video of each stream, whose header ``meta/info.json``
describes) and PUTs ``meta/info.json`` **last**: it is the dataset's commit object (LeRobot
opens a dataset from it, and ``check_output_dir`` knows an export by it). OUT must be empty
(no ``--overwrite`` in a bucket: there is no rename to replace a dataset atomically); a failed
export deletes every key it wrote.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EgopoolError
from ..jobs.executor import Executor, LocalExecutor
from ..read.reader import open_task
from ..registry import sha256_file
from ..storage.bucket import Bucket
from . import lerobot_format as fmt
from .lerobot_export import LeRobotExport, export_episode
from .lerobot_meta import EpisodePart, write_meta
from .lerobot_plan import EpisodeJob, LeRobotPlan, plan_export

__all__ = ["export_lerobot_to_bucket"]


@dataclass(frozen=True)
class _BucketExportInput:
    """What every unit shares: the plan and the dataset's URI."""

    plan: LeRobotPlan
    out: str


def _upload_tree(bucket: Bucket, root: Path, skip: str | None = None) -> list[str]:
    keys = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel != skip:
            bucket.upload(p, rel, sha256=sha256_file(p))
            keys.append(rel)
    return keys


def export_episode_to_bucket(shared: _BucketExportInput, job: EpisodeJob) -> EpisodePart:
    """One unit (in-process or a Ray task): export one episode into a temporary directory, PUT its files.

    Raises
    ------
    EgopoolError
        As :func:`~egopool.interop.lerobot_export.export_episode`; ObjectStoreError: a PUT failed.
    """
    with tempfile.TemporaryDirectory(prefix="egopool-lerobot-") as tmp:
        part = export_episode(job, shared.plan, Path(tmp))
        _upload_tree(Bucket(shared.out), Path(tmp))
    return part


def export_lerobot_to_bucket(task: Any, out: str, *, episodes: Sequence[int] | None = None,
                             state: Sequence[str] = (), action: Sequence[str] = (), depth: bool = True,
                             repo_id: str | None = None, dry_run: bool = False, progress: Any = None,
                             executor: Executor[Any, Any, Any] | None = None, lerobot: str = "0.6",
                             gop: int | None = None) -> LeRobotExport:
    """Export a task (a directory or ``s3://``) as a LeRobot v3.0 dataset at ``out`` = ``s3://...`` (module docstring).

    Parameters are those of :func:`~egopool.interop.lerobot_export.export_lerobot` (no ``overwrite``).

    Raises
    ------
    EgopoolError
        ``out`` already holds objects; the task cannot be exported.
    ObjectStoreError
        The bucket cannot be written (every key written is deleted again).
    """
    plan = plan_export(open_task(task), episodes=episodes, state=state, action=action, depth=depth,
                       repo_id=repo_id, target=lerobot, gop=gop)
    if dry_run:
        return LeRobotExport(None, plan)
    bucket = Bucket(out)
    bucket.ensure_bucket()
    if next(iter(bucket.list("")), None) is not None:
        raise EgopoolError(f"{out} already holds objects", hint="export into a new prefix; a bucket has no rename "
                                                                 "to replace a dataset atomically (no --overwrite)")
    try:
        parts = (executor or LocalExecutor()).map(export_episode_to_bucket, _BucketExportInput(plan, out),
                                                  plan.jobs, progress=progress)
        with tempfile.TemporaryDirectory(prefix="egopool-lerobot-meta-") as tmp:
            root = Path(tmp)
            for s in plan.streams:  # meta/info.json describes each stream from its first file's header
                rel = fmt.VIDEO_PATH.format(video_key=s.name, chunk_index=0, file_index=0)
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                bucket.download(rel, root / rel)
            write_meta(plan, parts, root)
            for s in plan.streams:
                (root / fmt.VIDEO_PATH.format(video_key=s.name, chunk_index=0, file_index=0)).unlink()
            _upload_tree(bucket, root, skip="meta/info.json")
            bucket.upload(root / "meta" / "info.json", "meta/info.json",
                          sha256=sha256_file(root / "meta" / "info.json"))  # the commit, last
    except BaseException:
        try:
            bucket.delete([o.key for o in bucket.list_objects("")])
        except EgopoolError:
            pass
        raise
    return LeRobotExport(out, plan, tuple(parts))
