"""Checks every interop command makes before it writes anything (docs/decisions.md I7).

* :func:`episode_streams`: an episode's streams with their kind and size. A stream the
  episode's meta row describes (``video_codec``, multi_device_storage.md §1.2) whose file is
  missing is refused, never taken for "no such stream": a LeRobot export would otherwise drop
  the stream for every episode, and a plot would say "no depth stream".
* :func:`check_output_file` / :func:`check_output_dir`: where an output goes. It may not be in
  the task being read (nor hold it), a file is not written where a directory stands (or the
  other way round), and ``--overwrite`` replaces only what the command itself writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ..errors import EgopoolError, FormatError, StorageError
from ..storage import ObjectPath, as_path
from ..read.reader import Episode

__all__ = ["check_output_dir", "check_output_file", "episode_streams"]


def episode_streams(ep: Episode) -> dict[str, tuple[str, int, int]]:
    """``image_key -> (kind, width, height)`` of every stream of episode ``ep``, sorted by key.

    ``kind`` is ``"rgb"`` or ``"depth"`` (the reader's rule, file_format.md §8: a gray pixel
    format or several video streams in the file, or a PNG16 directory, is depth); sizes in pixels.

    Raises
    ------
    FormatError
        The meta row's ``video_codec`` describes a stream whose file is missing (named in the
        message: the file that should be there).
    CodecError
        A stream file that cannot be probed.
    """
    from ..codecs.depth import read_depth_frames
    from ..codecs.video import video_info

    have = ep.streams
    vc = ep.meta.get("video_codec") if ep.files.meta is not None else None
    if isinstance(vc, Mapping):
        for key in sorted(k for k in vc if isinstance(k, str) and k not in have):
            exts = ep.task.info.get("video_extensions")
            ext = exts.get(key) if isinstance(exts, Mapping) else None
            expected = ep.task.layout.video_file(ep.index, key, ext if isinstance(ext, str) and ext else "mp4")
            raise FormatError(f"episode {ep.index}'s video_codec describes stream {key!r} but its video file is "
                              "missing", path=expected,
                              hint=f"restore it, or leave episode {ep.index} out; `egopool validate TASK` lists "
                                   "the damage")
    out: dict[str, tuple[str, int, int]] = {}
    for key in sorted(have):
        path = ep.stream_path(key)
        if path.is_dir():
            first = next(iter(read_depth_frames(path)), None)
            if first is None:
                raise FormatError(f"depth stream {key!r} has no frame", path=path,
                                  hint=f"restore it, or leave episode {ep.index} out")
            out[key] = ("depth", int(first.shape[1]), int(first.shape[0]))
            continue
        probe = video_info(path)
        depth = str(probe.get("pix_fmt") or "").startswith("gray") or probe.get("video_streams", 1) > 1
        out[key] = ("depth" if depth else "rgb", int(probe["width"]), int(probe["height"]))
    return out


def _overlap(out: Path, task_dir: Path | ObjectPath, *, replaced: bool = False) -> str | None:
    """Why ``out`` may not be written for ``task_dir`` (``replaced``: ``out`` may be deleted as a whole).
    A task in a bucket never overlaps a local output."""
    if isinstance(task_dir, ObjectPath):
        return None
    o, t = out.resolve(), task_dir.resolve()
    if o == t:
        return "is the task being read"
    if t in o.parents:
        return "is inside the task being read"
    if replaced and o in t.parents:
        return "holds the task being read"
    return None


def _file_on_the_way(path: Path) -> Path | None:
    """The first existing ancestor of ``path`` that is not a directory (no directory can be made there)."""
    return next((p for p in path.parents if p.exists() and not p.is_dir()), None)


def check_output_file(out: str | Path, task_dir: str | Path | ObjectPath, *, what: str, example: str) -> Path:
    """Check that the file ``out`` (``what``: e.g. "the plot") can be written for task ``task_dir``.

    ``example`` is a file name suggested when ``out`` is a directory.

    An existing file is replaced (atomically, by the caller); nothing is touched here.

    Raises
    ------
    EgopoolError
        ``out`` is in the task directory.
    StorageError
        ``out`` is a directory, or an ancestor of it is a file.
    """
    out = Path(out)
    why = _overlap(out, as_path(task_dir))
    if why is not None:
        raise EgopoolError(f"the output {why}", path=out, hint=f"write {what} outside the task directory")
    if out.is_dir():
        raise StorageError(f"cannot write {what}: this is a directory, where a file is needed", path=out,
                           hint=f"name a file, e.g. {out / example}")
    blocker = _file_on_the_way(out)
    if blocker is not None:
        raise StorageError(f"cannot write {what}: this is a file, where a directory is needed", path=blocker,
                           hint="choose a directory or a path that does not exist yet")
    return out


def check_output_dir(out: str | Path, task_dir: str | Path | ObjectPath, *, what: str, overwrite: bool = False,
                     marker: str | None = None, empty_ok: bool = False) -> Path:
    """Check that the directory ``out`` can be (re)created for ``what`` from task ``task_dir``.

    Parameters
    ----------
    overwrite:
        An existing ``out`` may be replaced; it must then hold ``marker`` (a relative path the
        command itself writes, e.g. ``meta/info.json``) or be empty, so that ``--overwrite``
        never deletes a directory the command did not make.
    marker:
        See ``overwrite``; None: an existing directory is written into (files are added).
    empty_ok:
        With a ``marker``: an existing empty directory is accepted without ``overwrite``.

    Raises
    ------
    EgopoolError
        ``out`` is or is inside the task (or, with a ``marker``, holds it); it exists without ``overwrite``; with
        ``overwrite`` it is not what the command writes.
    StorageError
        ``out`` (or an ancestor) is a file.
    """
    out = Path(out)
    why = _overlap(out, as_path(task_dir), replaced=marker is not None)
    if why is not None:
        raise EgopoolError(f"the output {why}", path=out, hint=f"write {what} outside the task directory")
    blocker = out if out.exists() and not out.is_dir() else _file_on_the_way(out)
    if blocker is not None:
        raise StorageError(f"cannot write {what}: this is a file, where a directory is needed", path=blocker,
                           hint="choose a directory or a path that does not exist yet")
    if marker is not None and out.exists():
        if empty_ok and out.is_dir() and not any(out.iterdir()):
            return out  # an empty directory made for the output (the publish replaces it)
        if not overwrite:
            raise EgopoolError("the output exists", path=out, hint="choose a new directory or pass --overwrite")
        if not (out / marker).exists() and any(out.iterdir()):
            raise EgopoolError(f"the output exists and is not {what} (no {marker}): --overwrite would delete it",
                               path=out, hint="choose a new directory; --overwrite replaces only an earlier export")
    return out
