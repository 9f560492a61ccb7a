"""Where ``egopool upload`` packs its zips: a per-run directory outside the recordings root (decisions.md U12).

The base is ``--temp-dir``, else ``$EGOPOOL_CACHE_DIR/upload``, else
``$XDG_CACHE_HOME/egopool/upload`` (``~/.cache/egopool/upload``), else
``<system temp>/egopool-<uid>/upload``; a directory inside the recordings root is never used
(an explicit one is refused). Each run packs into ``upload-<host>-<pid>-<random>/`` and holds
an exclusive ``flock`` on its ``.lock`` until it ends; the run removes its directory, and a
directory left by a killed run (its pid gone on this host and its lock free) is removed by
the next run. ``.egopool-upload-*`` directories that egopool before U12 left in the
recordings root are removed once nothing was written into them for 10 minutes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import TransferError
from ..meta.markers import pid_alive

__all__ = ["spool_base", "sweep_legacy", "sweep_stale", "upload_spool"]

_PREFIX = "upload-"
_LEGACY_PREFIX = ".egopool-upload-"
_LEGACY_IDLE_S = 600.0
_NAME_RE = re.compile(r"^upload-(?P<host>[A-Za-z0-9.]+)-(?P<pid>[0-9]+)-")


def _host() -> str:
    """This host's name in spool names: no '-', so name and pid split unambiguously."""
    return re.sub(r"[^A-Za-z0-9.]", ".", socket.gethostname()) or "host"


def _inside(path: Path, root: Path) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def spool_base(recordings_root: str | Path, temp_dir: str | Path | None = None) -> Path:
    """The directory the per-run spools go in, created (mode 0700), never inside ``recordings_root``.

    Parameters
    ----------
    recordings_root:
        The directory holding the task directories (and ``pipeline.db``).
    temp_dir:
        ``--temp-dir``; None = the per-user cache directory (module docstring).

    Raises
    ------
    TransferError
        ``temp_dir`` is inside the recordings root or cannot be created, or no default directory
        outside the root is writable.
    """
    hint = "pass --temp-dir DIR outside the recordings root"
    if temp_dir is not None:
        base = Path(temp_dir)
        if _inside(base, Path(recordings_root)):
            raise TransferError(f"--temp-dir {base} is inside the recordings root {recordings_root}: upload zips are "
                                "never written there", hint="pick a directory outside it (default: "
                                                            "~/.cache/egopool/upload)")
        with contextlib.suppress(OSError):
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not (base.is_dir() and os.access(base, os.W_OK | os.X_OK)):
            raise TransferError("the upload temp directory cannot be created or written", path=base, hint=hint)
        return base
    env = os.environ.get("EGOPOOL_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cache = Path(os.path.abspath(env)) if env else Path(xdg) / "egopool"
    for base in (cache / "upload", Path(tempfile.gettempdir()) / f"egopool-{os.getuid()}" / "upload"):
        if not base.is_absolute() or _inside(base, Path(recordings_root)):  # no home: "~" stays relative
            continue
        with contextlib.suppress(OSError):
            base.mkdir(parents=True, exist_ok=True, mode=0o700)
        if base.is_dir() and os.access(base, os.W_OK | os.X_OK):
            return base
    raise TransferError(f"no writable directory outside the recordings root {recordings_root} for the upload zips "
                        f"(tried {cache / 'upload'} and the system temp directory)", hint=hint)


def sweep_stale(base: Path) -> list[Path]:
    """Remove the spools in ``base`` left by killed runs on this host; returns what was removed.

    A spool is stale when its pid (in its name) is not a live process here and no process holds
    its ``.lock`` (the lock also covers a pid seen from another PID namespace). Spools of other
    hosts (a cache directory on a shared home) are left to their host.
    """
    removed: list[Path] = []
    host = _host()
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _NAME_RE.match(entry.name)
        if m is None or m["host"] != host or not entry.is_dir() or entry.is_symlink() or pid_alive(int(m["pid"])):
            continue
        try:
            fd = os.open(entry / ".lock", os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
            shutil.rmtree(entry, ignore_errors=True)
            if not entry.exists():
                removed.append(entry)
        finally:
            if fd >= 0:
                os.close(fd)
    return removed


def sweep_legacy(recordings_root: Path, now: float | None = None) -> list[Path]:
    """Remove ``<root>/.egopool-upload-*`` directories (egopool before U12) idle for 10 minutes; returns them."""
    removed: list[Path] = []
    now = time.time() if now is None else now
    with contextlib.suppress(OSError):
        for entry in recordings_root.iterdir():
            if not entry.name.startswith(_LEGACY_PREFIX) or entry.is_symlink() or not entry.is_dir():
                continue
            try:
                newest = max([entry.stat().st_mtime, *(p.stat().st_mtime for p in entry.iterdir())])
            except OSError:
                continue
            if now - newest >= _LEGACY_IDLE_S:
                shutil.rmtree(entry, ignore_errors=True)
                if not entry.exists():
                    removed.append(entry)
    return removed


@contextlib.contextmanager
def upload_spool(base: Path) -> Iterator[Path]:
    """A fresh spool directory in ``base`` for this run, locked while the run lasts, removed after it.

    Stale spools of killed runs are swept first (:func:`sweep_stale`).

    Raises
    ------
    TransferError
        The directory cannot be created.
    """
    sweep_stale(base)
    try:
        spool = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{_host()}-{os.getpid()}-", dir=base))
        fd = os.open(spool / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise TransferError(f"cannot create the upload temp directory ({exc.strerror or exc})", path=base,
                            hint="pass --temp-dir DIR outside the recordings root") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until this run ends or its process dies
        yield spool
    finally:
        shutil.rmtree(spool, ignore_errors=True)
        os.close(fd)
