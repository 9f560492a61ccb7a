"""Real file-system faults for tests: a read-only view of a directory and a small tmpfs (disk full).

Both need mount(2) (root, as CI runs); elsewhere the test is skipped with the reason. No mock: the
kernel refuses the writes (EROFS, ENOSPC), as on a user's read-only mount or full disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root and mount(8) for a real read-only / full file system")
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {done.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def read_only_view(src: Path, at: Path) -> Iterator[Path]:
    """``src`` bind-mounted read-only at ``at`` (created); every write under it fails with EROFS."""
    at.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(src), str(at))
    try:
        _mount("-o", "remount,bind,ro", str(at))
        yield at
    finally:
        _umount(at)


@contextlib.contextmanager
def small_fs(at: Path, size_kb: int) -> Iterator[Path]:
    """A ``size_kb`` KiB tmpfs mounted at ``at`` (created)."""
    at.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(at))
    try:
        yield at
    finally:
        _umount(at)


def fill_leaving(fs: Path, free_kb: int) -> None:
    """Fill the file system of ``fs`` with one file so that ``free_kb`` KiB stay free."""
    st = os.statvfs(fs)
    free = st.f_bavail * st.f_frsize
    filler = fs / "filler"
    with open(filler, "ab") as fh:
        fh.truncate(0)
        want = max(0, free - free_kb * 1024)
        block = b"\0" * (1 << 16)
        while want > 0:
            n = fh.write(block[: min(len(block), want)])
            want -= n
        fh.flush()
        os.fsync(fh.fileno())
