"""The staging directories of ``export lerobot`` beside OUT, and the sweep of ones a killed export left.

An export builds the dataset in ``.<OUT name>.<8 hex>.<host tag>-<pid>.tmp`` beside OUT and renames it to OUT
when complete; ``--overwrite`` moves the previous dataset to ``.<OUT name>.old.<8 hex>.<host tag>-<pid>.tmp``
first. A SIGKILL leaves either behind. The next export of the same OUT removes such a directory when its owner
is gone: the host tag (a hash of this host's name) is this host's and the pid is not alive, or it was last
modified more than :data:`STALE_AFTER_S` ago (another host's, or one named before owners were recorded:
``.<OUT name>.<8 hex>.tmp``). Nothing else is touched: only directories (not links) whose whole name matches, and
an ``.old.`` one only while OUT exists (else it is the only copy of the previous dataset). docs/decisions.md I27.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import time
import uuid
from pathlib import Path

from ..meta.markers import pid_alive

__all__ = ["STALE_AFTER_S", "staging_name", "sweep_stale"]

#: Age (s, by mtime) after which a staging directory of another host or without an owner is taken as abandoned.
STALE_AFTER_S = 7 * 24 * 3600.0


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:6]


def staging_name(out: Path, *, old: bool = False) -> Path:
    """A fresh staging (``old``: the replaced dataset's) directory path beside ``out`` owned by this process."""
    return out.parent / f".{out.name}.{'old.' if old else ''}{uuid.uuid4().hex[:8]}.{_host_tag()}-{os.getpid()}.tmp"


def sweep_stale(out: Path, *, now: float | None = None) -> list[Path]:
    """Remove the staging directories of earlier exports of ``out`` whose owner is gone (module docstring);
    return the paths removed. Errors (a directory vanishing, no permission) are ignored: a sweep never fails
    an export."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(old\.)?[0-9a-f]{{8}}(?:\.([0-9a-f]{{6}})-(\d+))?\.tmp")
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        entries = list(os.scandir(out.parent))
    except OSError:
        return removed
    tag = _host_tag()
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if m.group(1) and not out.is_dir():
                continue
            mine = m.group(2) == tag and m.group(3) is not None
            dead = mine and int(m.group(3)) != os.getpid() and not pid_alive(int(m.group(3)))
            old = now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S
            if dead or old:
                shutil.rmtree(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed
