"""``DirectoryStore``: the :class:`~egopool.storage.store.Store` interface on a local directory.

The file system gives the bucket's guarantees (docs/decisions.md O32):

- every write goes to a dot-named temporary in the key's directory, is ``fsync``-ed, then placed with
  ``rename`` (``OVERWRITE``) or ``link`` (``CREATE``: fails when the name exists, atomically, across
  processes); the directory is ``fsync``-ed after;
- ``UPDATE`` holds ``flock`` on the key's directory (no lock file is left behind), compares the version
  and renames the new file over the old one;
- a version is ``<inode>-<mtime ns>-<size>``: every write makes a new inode (rename of a new file).

Dot-named temporaries (``.egopool-stage-*``, ``.egopool-put-*``) are skipped by :meth:`list`; a killed
writer leaves one behind at most, which ``egopool repair clean`` removes (§11: readers ignore dot files).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import os
import shutil
import stat as _stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import FormatError, StorageError
from .store import MAX_GET_BYTES, ObjectMeta, PreconditionFailed, PutMode, Store, check_key, join_key

__all__ = ["DirectoryStore"]

_TEMP_PREFIXES = (".egopool-stage-", ".egopool-put-")


def _version(st: os.stat_result) -> str:
    return f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}"


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """``flock`` on the directory itself: the compare-and-swap of one of its files, across processes."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _open_regular(p: Path) -> BinaryIO:
    """``open(p, "rb")`` that never blocks on a FIFO or reads a device forever: opened non-blocking, refused unless
    ``fstat`` says it is a regular file (a damaged task may hold anything at a file's name).

    Raises
    ------
    FileNotFoundError, IsADirectoryError, OSError
        As ``open``; FormatError: not a regular file.
    """
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if _stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(p))
        if not _stat.S_ISREG(st.st_mode):
            raise FormatError(f"{p} is not a regular file", path=str(p), hint="restore the file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class DirectoryStore(Store):
    """Objects as files under a local directory ``root`` (created on the first write).

    Parameters
    ----------
    root:
        The directory (made absolute; it need not exist yet).

    Raises
    ------
    StorageError
        ``root`` exists and is not a directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        if self.root.exists() and not self.root.is_dir():
            raise StorageError(f"{self.root} is not a directory", path=str(self.root),
                               hint="give the directory that holds the task, or a new path")
        self.uri = str(self.root)

    def child(self, prefix: str) -> DirectoryStore:
        return DirectoryStore(self.root / check_key(prefix))

    def local_path(self, key: str) -> Path:
        """The file of ``key`` (it may not exist)."""
        return self.root / check_key(key)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    # -- reads -------------------------------------------------------------------------------------
    def get(self, key: str, *, limit: int = MAX_GET_BYTES) -> tuple[bytes, str] | None:
        p = self._path(key)
        try:
            with _open_regular(p) as f:
                st = os.fstat(f.fileno())
                if not _stat.S_ISREG(st.st_mode):
                    raise FormatError(f"{p} is not a regular file", path=str(p), hint="restore the file")
                if st.st_size > limit:
                    raise FormatError(f"the file is {st.st_size} bytes, more than the {limit} egopool reads",
                                      path=str(p), hint="this is not the file the format expects; restore it")
                return f.read(limit + 1), _version(st)
        except FileNotFoundError:
            return None
        except IsADirectoryError as exc:
            raise FormatError(f"{p} is a directory where a file belongs", path=str(p),
                              hint="remove or rename the directory") from exc

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with _open_regular(self._path(key)) as f:
            f.seek(start)
            return f.read(length)

    def open_input(self, key: str) -> BinaryIO:
        return _open_regular(self._path(key))

    def head(self, key: str) -> ObjectMeta | None:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _stat.S_ISREG(st.st_mode):
            return None
        return ObjectMeta(key, st.st_size, _version(st))

    # -- listing -----------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        base = prefix.rpartition("/")[0]
        start = self.root / check_key(base) if base else self.root
        found: builtins.list[ObjectMeta] = []
        for dirpath, _dirnames, filenames in os.walk(start):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
            for name in filenames:
                key = join_key(rel_dir, name)
                if name.startswith(_TEMP_PREFIXES) or not key.startswith(prefix):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:  # deleted between the listing and the stat
                    continue
                if _stat.S_ISREG(st.st_mode):
                    found.append(ObjectMeta(key, st.st_size, _version(st)))
        found.sort(key=lambda m: m.key)
        return iter(found)

    def list_dir(self, prefix: str = "") -> tuple[builtins.list[str], builtins.list[ObjectMeta]]:
        if prefix and not prefix.endswith("/"):
            raise FormatError(f"list_dir takes a prefix ending in '/', not {prefix!r}")
        d = self.root / check_key(prefix.rstrip("/")) if prefix else self.root
        dirs: builtins.list[str] = []
        objs: builtins.list[ObjectMeta] = []
        try:
            entries = list(os.scandir(d))
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        for e in entries:
            if e.name.startswith(_TEMP_PREFIXES):
                continue
            if e.is_dir(follow_symlinks=False):
                dirs.append(f"{prefix}{e.name}/")
            elif e.is_file(follow_symlinks=False):
                try:
                    objs.append(ObjectMeta(prefix + e.name, *_size_version(e.stat())))
                except FileNotFoundError:
                    continue
        return sorted(dirs), sorted(objs, key=lambda m: m.key)

    # -- writes ------------------------------------------------------------------------------------
    def _temp(self, directory: Path) -> tuple[int, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".egopool-put-", dir=directory)
        return fd, Path(name)

    def put(self, key: str, data: bytes, *, mode: PutMode = PutMode.OVERWRITE, version: str | None = None,
            sha256: str | None = None) -> str:
        final = self._path(key)
        fd, tmp = self._temp(final.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            return self._place(tmp, final, key, mode, version)
        finally:
            tmp.unlink(missing_ok=True)

    def put_file(self, key: str, path: Path, *, mode: PutMode = PutMode.OVERWRITE, sha256: str | None = None,
                 move: bool = False, synced: bool = False) -> str:
        if mode is PutMode.UPDATE:
            raise ValueError("put_file takes CREATE or OVERWRITE; UPDATE is for put()")
        final = self._path(key)
        final.parent.mkdir(parents=True, exist_ok=True)
        src = Path(path)
        if move and os.stat(src).st_dev == os.stat(final.parent).st_dev:
            if not synced:
                with open(src, "rb") as f:
                    os.fsync(f.fileno())
            return self._place(src, final, key, mode, None)
        fd, tmp = self._temp(final.parent)
        try:
            with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
            return self._place(tmp, final, key, mode, None)
        finally:
            tmp.unlink(missing_ok=True)

    def _place(self, tmp: Path, final: Path, key: str, mode: PutMode, version: str | None) -> str:
        os.chmod(tmp, _FILE_MODE)  # what open() would give (temp files are 0600; a task is shared: 0644 at umask 022)
        if mode is PutMode.CREATE:
            try:
                os.link(tmp, final)
            except FileExistsError as exc:
                raise PreconditionFailed(f"{final} exists already", path=str(final)) from exc
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                # a file system without hard links: exclusive create of the name, then rename over it
                try:
                    os.close(os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                except FileExistsError as exc2:
                    raise PreconditionFailed(f"{final} exists already", path=str(final)) from exc2
                os.replace(tmp, final)
            tmp.unlink(missing_ok=True)
        elif mode is PutMode.UPDATE:
            if version is None:
                raise ValueError("PutMode.UPDATE needs the version read")
            with _dir_lock(final.parent):
                try:
                    now = _version(os.stat(final))
                except FileNotFoundError:
                    now = None
                if now != version:
                    raise PreconditionFailed(f"{final} changed since it was read", path=str(final))
                os.replace(tmp, final)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
        return _version(os.stat(final))

    def delete(self, keys: Iterable[str]) -> None:
        parents: set[Path] = set()
        for key in keys:
            p = self._path(key)
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                parents.add(p.parent)
        for d in parents:
            with contextlib.suppress(FileNotFoundError):
                _fsync_dir(d)

    def _staging_dir(self, key: str) -> str:
        d = self._path(key).parent
        d.mkdir(parents=True, exist_ok=True)
        return str(d)


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # elsewhere: set and restore (at import, before any thread of egopool's)
    os.umask(old)
    return old


#: The mode of every object a directory store writes: a new file's under the umask (0644 at umask 022), as
#: ``open()`` gives and ``cp`` keeps; ``tempfile.mkstemp`` makes 0600, which would hide a shared task from its
#: other users and a server (docs/decisions.md O45).
_FILE_MODE = 0o666 & ~_umask()


def _size_version(st: os.stat_result) -> tuple[int, str]:
    return st.st_size, _version(st)
