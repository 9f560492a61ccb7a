"""What the local registry ``pipeline.db`` stores (:mod:`egopool.registry`): an episode's files
(:class:`FileRecord`, hashed by :func:`file_record`), a ``recordings`` row (:class:`Recording`) and a
pooling server's answer for an uploaded episode (:class:`UploadRecord`)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RegistryError

__all__ = ["FileRecord", "Recording", "UploadRecord", "file_record", "sha256_file"]


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 hex digest of a file, read in 1 MiB chunks (never whole in memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """One file of a recording.

    Attributes
    ----------
    path:
        POSIX path relative to the task directory (``data/chunk-000/episode-000.parquet``).
    size:
        Bytes.
    sha256:
        Hex digest of the file's bytes.
    """

    path: str
    size: int
    sha256: str


def file_record(task_dir: str | Path, path: str | Path) -> FileRecord:
    """Size and sha256 of ``path`` (a file inside ``task_dir``).

    Raises
    ------
    RegistryError
        The file cannot be read.
    """
    task_dir, path = Path(task_dir), Path(path)
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(task_dir)).as_posix()
        return FileRecord(rel, path.stat().st_size, sha256_file(path))
    except (OSError, ValueError) as exc:
        raise RegistryError(f"cannot hash file for the registry: {exc}", path=path) from exc


@dataclass(frozen=True)
class Recording:
    """One ``recordings`` row with its files.

    Attributes
    ----------
    task:
        Task directory name.
    episode_index:
        Global 1-based N.
    status:
        ``recorded``, ``uploaded`` or ``deleted`` (a delete in progress, see ``egopool delete``).
    total_bytes:
        Sum of the files' sizes.
    recorded_at, updated_at:
        Unix seconds.
    files:
        Every file of the group, sorted by path.
    """

    task: str
    episode_index: int
    status: str
    total_bytes: int
    recorded_at: float
    updated_at: float
    files: tuple[FileRecord, ...]


@dataclass(frozen=True)
class UploadRecord:
    """A server's confirmed answer for one uploaded episode (``uploads`` row).

    Attributes
    ----------
    task:
        Local task directory name.
    episode_index:
        Local global N.
    server:
        The server's base URL as given to ``egopool upload``.
    episode_digest:
        sha256 over the episode's own files as recorded (the upload manifest's ``episode_digest``).
    zip_sha256:
        sha256 of the zip the server confirmed having received.
    server_task, server_episode_index:
        Where the server holds it (its N may differ: docs/decisions.md U2).
    answer:
        The server's JSON answer.
    uploaded_at:
        Unix s.
    """

    task: str
    episode_index: int
    server: str
    episode_digest: str
    zip_sha256: str
    server_task: str
    server_episode_index: int
    answer: dict[str, Any]
    uploaded_at: float
