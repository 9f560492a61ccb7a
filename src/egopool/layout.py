"""Paths, numbering and the one authoritative episode enumerator.

Implements file_format.md §1–2 and multi_device_storage.md §1.3:

* global episode index ``N`` is 1-based; ``chunk = (N-1) // chunks_size`` and
  ``file = (N-1) % chunks_size``; ``N = chunk * chunks_size + file + 1``;
* path templates and ``chunks_size`` come from ``info.json`` (never hard-coded);
* :func:`list_task_episodes` is the only place that maps file names to ``N``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from .errors import FormatError, LayoutError
from .path_templates import (FIELD_RE, PNG_DIR_SUFFIX, SKIP_DIR_PREFIXES, TEMPLATE_FIELDS, fill_template,
                             parse_template, static_prefix, template_regex)
from .storage import ObjectEntry, ObjectPath, TaskPath, TaskPathLike, as_path
from .meta.info import (DEFAULT_CHUNKS_SIZE, DEFAULT_DATA_PATH, DEFAULT_EPISODES_PATH, DEFAULT_VIDEO_PATH,
                        read_info)

__all__ = [
    "DEFAULT_CHUNKS_SIZE",
    "DEFAULT_DATA_PATH",
    "DEFAULT_EPISODES_PATH",
    "DEFAULT_VIDEO_PATH",
    "TEMPLATE_FIELDS",
    "EpisodeFiles",
    "TaskLayout",
    "display_suffix",
    "episode_chunk_file",
    "episode_index_from",
    "find_episode_files",
    "list_task_episodes",
    "parse_template",
]



def episode_chunk_file(index: int, chunks_size: int = DEFAULT_CHUNKS_SIZE) -> tuple[int, int]:
    """Map global 1-based ``N`` to ``(chunk, file)`` (file_format.md §2).

    Raises
    ------
    LayoutError
        ``N < 1`` (there is no episode 0) or ``chunks_size < 1``.
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 1:
        raise LayoutError(f"episode index must be an integer >= 1, got {index!r}",
                          hint="global N is 1-based: episode-000 is N=1")
    if chunks_size < 1:
        raise LayoutError(f"chunks_size must be >= 1, got {chunks_size}")
    return (index - 1) // chunks_size, (index - 1) % chunks_size


def episode_index_from(chunk: int, file: int, chunks_size: int = DEFAULT_CHUNKS_SIZE) -> int:
    """Inverse of :func:`episode_chunk_file`: ``N = chunk * chunks_size + file + 1``."""
    if chunk < 0 or not 0 <= file < chunks_size:
        raise LayoutError(f"(chunk={chunk}, file={file}) is outside chunks_size={chunks_size}")
    return chunk * chunks_size + file + 1


def display_suffix(index: int, chunks_size: int = DEFAULT_CHUNKS_SIZE) -> str:
    """UI / upload name suffix ``_ep{f:06d}`` where ``f`` is the 0-based file number (§2)."""
    return f"_ep{episode_chunk_file(index, chunks_size)[1]:06d}"


@dataclass(frozen=True)
class TaskLayout:
    """Path templates of one task, read from ``info.json`` (file_format.md §3, checklist §12.2).

    Attributes
    ----------
    root:
        The task directory (a ``Path``, or an :class:`~egopool.storage.ObjectPath` for ``s3://``).
    chunks_size:
        Episodes per chunk (1000 in every known task, but read, never assumed).
    video_extensions:
        ``(image_key, ext)`` pairs of ``info.video_extensions``: where a stream has two files of
        one name (``episode-000.mkv`` and ``episode-000.mp4`` while ``egopool compress`` places its
        output), the declared one is the stream's file (§3 "读侧必须按此判文件"; docs/decisions.md R32).
    """

    root: TaskPath
    chunks_size: int = DEFAULT_CHUNKS_SIZE
    data_path: str = DEFAULT_DATA_PATH
    video_path: str = DEFAULT_VIDEO_PATH
    episodes_path: str = DEFAULT_EPISODES_PATH
    video_extensions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_info(cls, root: TaskPathLike, info: Mapping[str, Any]) -> TaskLayout:
        """Build from an ``info.json`` dict; missing keys fall back to the spec's templates.

        Raises
        ------
        FormatError
            ``chunks_size`` not a positive integer, or a template that :func:`parse_template`
            refuses (named with the info.json path).
        """
        task = as_path(root)
        where = task / "meta" / "info.json"
        cs = info.get("chunks_size", DEFAULT_CHUNKS_SIZE)
        if isinstance(cs, bool) or not isinstance(cs, int) or cs < 1:
            raise FormatError(f"chunks_size must be a positive integer, got {cs!r:.60}", path=where)
        defaults = {"data_path": DEFAULT_DATA_PATH, "video_path": DEFAULT_VIDEO_PATH,
                    "episodes_path": DEFAULT_EPISODES_PATH}
        tpl = {k: parse_template(k, info[k], where) if k in info else d for k, d in defaults.items()}
        ve = info.get("video_extensions")
        exts = tuple(sorted((str(k), v) for k, v in ve.items() if isinstance(v, str) and v)) \
            if isinstance(ve, Mapping) else ()
        return cls(task, cs, tpl["data_path"], tpl["video_path"], tpl["episodes_path"], exts)

    def chunk_file(self, index: int) -> tuple[int, int]:
        """``N -> (chunk, file)`` for this task's ``chunks_size``."""
        return episode_chunk_file(index, self.chunks_size)

    def index_of(self, chunk: int, file: int) -> int:
        """``(chunk, file) -> N`` for this task's ``chunks_size``."""
        return episode_index_from(chunk, file, self.chunks_size)

    def data_key(self, index: int) -> str:
        """Episode N's data parquet relative to the task (POSIX, e.g. ``data/chunk-000/episode-000.parquet``)."""
        c, f = self.chunk_file(index)
        return self.data_path.format(c=c, f=f, chunk_index=c, file_index=f)

    def episodes_key(self, index: int) -> str:
        """Episode N's one-row ``meta/episodes`` parquet relative to the task (POSIX)."""
        c, f = self.chunk_file(index)
        return self.episodes_path.format(c=c, f=f, chunk_index=c, file_index=f)

    def video_key(self, index: int, image_key: str, ext: str) -> str:
        """Episode N's video for ``image_key`` with extension ``ext`` relative to the task (POSIX)."""
        c, f = self.chunk_file(index)
        return self.video_path.format(c=c, f=f, chunk_index=c, file_index=f, image_key=image_key, ext=ext)

    def data_file(self, index: int) -> TaskPath:
        """Path of episode N's data parquet."""
        return self.root / self.data_key(index)

    def episodes_file(self, index: int) -> TaskPath:
        """Path of episode N's one-row ``meta/episodes`` parquet."""
        return self.root / self.episodes_key(index)

    def video_file(self, index: int, image_key: str, ext: str) -> TaskPath:
        """Path of episode N's video for ``image_key`` with extension ``ext`` (from ``video_extensions``)."""
        return self.root / self.video_key(index, image_key, ext)


#: What an :class:`EpisodeFiles` holds: ``EpisodeFiles[Path]`` of a local task (what
#: :func:`list_task_episodes` gives for a ``pathlib.Path``), ``EpisodeFiles[ObjectPath]`` of a task in
#: a bucket, ``EpisodeFiles[TaskPath]`` when either (covariant: both are one).
PathT_co = TypeVar("PathT_co", bound=TaskPath, covariant=True)

#: One kind of location, within one enumeration (a local task's files are ``Path``, a bucket's ``ObjectPath``).
_P = TypeVar("_P", Path, ObjectPath)


@dataclass
class EpisodeFiles(Generic[PathT_co]):
    """Every file of one episode's file group (multi_device_storage.md §1.2).

    Attributes
    ----------
    index:
        Global 1-based N.
    chunk, file:
        ``(chunk, file)`` of N.
    data:
        Data parquet, or None when missing. Every path is a :data:`~egopool.storage.TaskPath`: a
        ``pathlib.Path`` in a local task, an ``ObjectPath`` in a bucket.
    videos:
        ``image_key -> path`` for every video of this episode (enumerated on disk, so
        slot renames between episodes are seen, file_format.md §8).
    meta:
        The ``meta/episodes`` file holding N's row, or None.
    meta_is_shard:
        True when ``meta`` is a legacy multi-row ``file-NNN.parquet`` shard (§6.1).
    """

    index: int
    chunk: int
    file: int
    data: PathT_co | None = None
    videos: dict[str, PathT_co] = field(default_factory=dict)
    meta: PathT_co | None = None
    meta_is_shard: bool = False

    def paths(self) -> list[PathT_co]:
        """All paths of the group (the shard is excluded: it is shared with other episodes)."""
        out = [p for p in (self.data,) if p is not None]
        out += list(self.videos.values())
        if self.meta is not None and not self.meta_is_shard:
            out.append(self.meta)
        return out

    @property
    def complete(self) -> bool:
        """True when data parquet and meta row both exist."""
        return self.data is not None and self.meta is not None

    @property
    def committed(self) -> bool:
        """True when the episode's ``meta/episodes`` row exists: its commit record (docs/decisions.md #5).

        Every writer places the videos and the data parquet first and the row last, so a
        group without its row is an episode still being published, or what a crash left;
        readers see an episode from its commit on (:func:`list_task_episodes` with
        ``committed_only``).
        """
        return self.meta is not None


def walk_task_files(root: TaskPath, top: str, found: dict[str, ObjectPath] | None = None) -> Iterable[str]:
    """Relative POSIX paths of the non-directory entries under ``root / top``, skipping dot and ``_`` entries (§11).

    ``top`` is a relative POSIX prefix of the task (``data``, ``videos``; ``""`` for the task root).
    Symlinks are not followed into directories; a symlink, FIFO or other non-regular entry is
    listed like a file, so that it is reported when its episode is read instead of vanishing.
    In a bucket, ``top`` is listed with one recursive LIST (a request per 1000 keys, decisions O5),
    and ``found`` (when given) receives each object's path, which knows its size from the listing.
    """
    base = "/".join(part for part in top.split("/") if part not in ("", "."))
    if isinstance(root, ObjectPath):
        for rel, obj in (root / base).walk_objects():
            if not any(part.startswith(SKIP_DIR_PREFIXES) for part in rel.split("/")):
                rel = f"{base}/{rel}" if base else rel
                if found is not None:
                    found[rel] = obj
                yield rel
        return
    start = root / base
    if not start.is_dir():
        return
    stack = [start]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(SKIP_DIR_PREFIXES):
                continue
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                stack.append(Path(e.path))
            else:  # files, and also symlinks, FIFOs...: named by the template, refused when opened
                yield Path(e.path).relative_to(root).as_posix()


def _read_episode_indices(path: TaskPath) -> list[int]:
    import pyarrow as pa

    from ._safe_read import read_parquet, read_parquet_schema

    hint = "the meta/episodes file is corrupt; restore it or run `egopool validate TASK`"
    schema = read_parquet_schema(path, what="meta/episodes parquet", hint=hint)
    if "episode_index" not in schema.names or not pa.types.is_integer(schema.field("episode_index").type):
        raise FormatError("meta/episodes parquet has no integer episode_index column", path=path, hint=hint)
    table = read_parquet(path, ["episode_index"], what="meta/episodes parquet", hint=hint)
    return [int(v) for v in table.column("episode_index").to_pylist() if v is not None]


@overload
def list_task_episodes(task_dir: Path, layout: TaskLayout | None = None, *,
                       committed_only: bool = False) -> list[EpisodeFiles[Path]]: ...
@overload
def list_task_episodes(task_dir: TaskPathLike, layout: TaskLayout | None = None, *,
                       committed_only: bool = False) -> list[EpisodeFiles[TaskPath]]: ...
def list_task_episodes(task_dir: TaskPathLike, layout: TaskLayout | None = None, *,
                       committed_only: bool = False) -> list[EpisodeFiles[Path]] | list[EpisodeFiles[TaskPath]]:
    """Enumerate every episode file group of a task, sorted by N (file_format.md §2, §9).

    This is the one authoritative enumerator: N is ``chunk * chunks_size + file + 1``,
    right across chunk roll-over (N=1001 is ``chunk-001/episode-000``). Legacy
    ``file-NNN`` names are accepted; rows of legacy multi-row ``meta/episodes`` shards
    are found by their ``episode_index`` column, never by file name (§6.1). Dotfiles,
    ``.lock``, ``recycled_episode.json``, temp files, ``_trash/`` and
    ``_migrate_backup_*`` are ignored (§11).

    The ``meta/episodes`` rows (the commit records, decisions.md #5) are listed before
    the data and video files: an episode whose row this listing saw has all the files its
    writer placed before the row, so a committed episode is never listed with a file it
    has missing only because the listing raced its publish.

    Parameters
    ----------
    task_dir:
        The task directory.
    layout:
        Templates to use; read from ``meta/info.json`` when omitted.
    committed_only:
        Only the groups that hold their ``meta/episodes`` row (:attr:`EpisodeFiles.committed`):
        what readers list. Off for the tools that look at every file (``validate``, ``ls``,
        ``delete``, allocation).

    Returns
    -------
    list[EpisodeFiles]
        One entry per N that has at least one file (its row, with ``committed_only``), ascending N;
        ``EpisodeFiles[Path]`` for a local ``task_dir``.

    Raises
    ------
    FormatError
        ``info.json`` unreadable or a legacy shard is corrupt.
    """
    root = as_path(task_dir)
    if layout is None:
        layout = TaskLayout.from_info(root, read_info(root))
    if isinstance(root, ObjectPath):
        in_bucket: list[EpisodeFiles[TaskPath]] = list(_enumerate(root, layout, committed_only))
        return in_bucket
    return _enumerate(root, layout, committed_only)


def _at(root: _P, rel: str, listed: Mapping[str, ObjectPath]) -> _P:
    """``root / rel``; in a bucket the path the listing made, which knows its size (decisions O5)."""
    if isinstance(root, ObjectPath):
        return listed.get(rel) or root / rel
    return root / rel


def _enumerate(root: _P, layout: TaskLayout, committed_only: bool) -> list[EpisodeFiles[_P]]:
    """:func:`list_task_episodes` of a task whose files are all of ``root``'s kind."""
    groups: dict[int, EpisodeFiles[_P]] = {}
    listed: dict[str, ObjectPath] = {}  # in a bucket: the listed objects, which know their size

    def group(c: int, f: int) -> EpisodeFiles[_P]:
        n = layout.index_of(c, f)
        g = groups.get(n)
        if g is None:
            g = groups[n] = EpisodeFiles(n, c, f)
        return g

    ep_re = template_regex(layout.episodes_path, legacy_prefix=True)
    for rel in sorted(walk_task_files(root, static_prefix(layout.episodes_path), listed)):
        m = ep_re.match(rel)
        if not m:
            continue
        path = _at(root, rel, listed)
        c, f = int(m["c"]), int(m["f"])
        if path.name.startswith("episode-"):
            if f < layout.chunks_size:
                g = group(c, f)
                g.meta, g.meta_is_shard = path, False
            continue
        # legacy "file-" name: a per-episode file (pre-v1.1.2) or a multi-row shard.
        indices = _read_episode_indices(path)
        expected = layout.index_of(c, f) if f < layout.chunks_size else None
        shard = not (len(indices) == 1 and indices[0] == expected)
        for n in indices:
            if n < 1:
                continue
            gc, gf = layout.chunk_file(n)
            g = group(gc, gf)
            if g.meta is None:
                g.meta, g.meta_is_shard = path, shard

    data_re = template_regex(layout.data_path, legacy_prefix=True)
    for rel in walk_task_files(root, static_prefix(layout.data_path), listed):
        m = data_re.match(rel)
        if m and int(m["f"]) < layout.chunks_size:
            g = group(int(m["c"]), int(m["f"]))
            if g.data is None or Path(rel).name.startswith("episode-"):
                g.data = _at(root, rel, listed)

    declared = dict(layout.video_extensions)
    video_re = template_regex(layout.video_path, legacy_prefix=True)
    png_dir_re = template_regex(PNG_DIR_SUFFIX.sub("", layout.video_path), legacy_prefix=True)
    for rel in walk_task_files(root, static_prefix(layout.video_path), listed):
        m = video_re.match(rel)
        target = _at(root, rel, listed)
        if m is None and rel.lower().endswith(".png") and "/" in rel:
            # legacy PNG16 depth: a directory of frames at the stream's place (docs/decisions.md)
            parent = rel.rsplit("/", 1)[0]
            m = video_re.match(parent) or png_dir_re.match(parent)
            target = root / parent
        if m and int(m["f"]) < layout.chunks_size:
            videos = group(int(m["c"]), int(m["f"])).videos
            key = m["image_key"]
            ext = m.groupdict().get("ext")
            if key not in videos or (ext is not None and ext == declared.get(key) and videos[key].suffix != "." + ext):
                videos[key] = target  # the declared extension wins over a sibling (§3, decisions R32)
    return [groups[n] for n in sorted(groups) if groups[n].meta is not None or not committed_only]


# -- one episode's files, by N (checklist §12.2) -----------------------------------------------------
def _entries(d: TaskPath) -> list[os.DirEntry[str] | ObjectEntry]:
    """The non-dot, non-``_`` entries of ``d`` (``os.DirEntry``, or :class:`~egopool.storage.ObjectEntry`
    from one LIST in a bucket); [] when ``d`` cannot be listed locally."""
    if isinstance(d, ObjectPath):
        return [e for e in d.scandir() if not e.name.startswith(SKIP_DIR_PREFIXES)]
    try:
        with os.scandir(d) as it:
            return [e for e in it if not e.name.startswith(SKIP_DIR_PREFIXES)]
    except OSError:
        return []


def _file_like(e: os.DirEntry[str] | ObjectEntry | TaskPath) -> bool:
    """An entry that is not a directory (not following symlinks): files, and also symlinks and FIFOs,
    which :func:`walk_task_files` lists the same way so that a damaged entry is reported when read
    (decisions.md H1). Never raises (a symlink loop is an entry like any other)."""
    try:
        if isinstance(e, ObjectPath):
            return e.is_file()  # a HEAD; an object store has no symlinks or FIFOs
        if isinstance(e, Path):
            return not stat.S_ISDIR(e.lstat().st_mode)
        return not e.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _head_at_once(paths: list[Any]) -> list[bool]:
    """:func:`_file_like` of each of ``paths`` (objects in a bucket: a HEAD each), on threads at once: the
    latency once, not once per path (docs/decisions.md B14)."""
    with ThreadPoolExecutor(min(8, len(paths))) as pool:
        return list(pool.map(_file_like, paths))


def _has_png(d: TaskPathLike) -> bool:
    """A legacy PNG16 depth directory: it directly holds a (non-dot) ``.png`` file (decisions C4)."""
    return any(e.name.lower().endswith(".png") and _file_like(e) for e in _entries(as_path(d)))


def _resolve(root: _P, template: str, c: int, f: int | None, *, png_dirs: bool = False,
             prefer: Mapping[str, str] | None = None) -> list[tuple[_P, dict[str, str]]]:
    """Files of ``template`` with N's chunk (and file, unless None) filled in, found component by component.

    Only directories whose name still holds a field are listed (for videos: N's chunk
    directory and, unless ``prefer`` finds the file first, each ``image_key`` directory);
    everything else is a ``stat``. So the cost is bounded by ``chunks_size`` and the number
    of streams, not by the task. Names follow :func:`list_task_episodes`: ``episode-`` or the
    legacy ``file-`` prefix, dot and ``_`` entries skipped, directories below the template's
    static prefix not followed through symlinks. ``png_dirs`` also accepts a directory of
    PNG frames at the last component's place, with or without its ``.{ext}`` tail.
    ``prefer`` (``image_key -> ext``) tries the declared file name before listing.
    """
    static = len(static_prefix(template).split("/")) if static_prefix(template) else 0
    parts = fill_template(template, c, f).split("/")
    found: list[tuple[_P, dict[str, str]]] = [(root, {})]
    in_bucket = isinstance(root, ObjectPath)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        fields = set(FIELD_RE.findall(part))
        out: list[tuple[_P, dict[str, str]]] = []
        declared: dict[int, _P] = {}  # the declared file of each stream directory, HEADed at once in a bucket
        held: dict[int, bool] = {}
        if last and prefer and fields == {"ext"}:
            declared = {j: d / part.format(ext=prefer[caps["image_key"]])
                        for j, (d, caps) in enumerate(found) if caps.get("image_key") in prefer}
            if in_bucket and len(declared) > 1:
                held = dict(zip(declared, _head_at_once(list(declared.values())), strict=True))
        for j, (d, caps) in enumerate(found):
            if not fields:
                names = [part] + ([part.replace("episode-", "file-")] if "episode-" in part else [])
                for name in names:
                    p = d / name
                    if in_bucket and not last:  # a prefix is no object: the file's own HEAD or LIST decides
                        out.append((p, caps))
                        break
                    if _file_like(p) if last else p.is_dir() and (i < static or not p.is_symlink()):
                        out.append((p, caps))
                        if last:
                            break  # the episode- name wins over a legacy file- one
                continue
            if j in declared:
                p = declared[j]
                if held[j] if j in held else _file_like(p):
                    out.append((p, caps))
                    continue
            rx = template_regex(part, legacy_prefix=True)
            rx_dir = template_regex(PNG_DIR_SUFFIX.sub("", part), legacy_prefix=True) if png_dirs and last else None
            for e in sorted(_entries(d), key=lambda e: e.name):
                m = rx.match(e.name)
                if last and m and _file_like(e):
                    out.append((d / e.name, {**caps, **m.groupdict()}))
                elif last and rx_dir is not None and e.is_dir(follow_symlinks=False) and _has_png(d / e.name):
                    m = m or rx_dir.match(e.name)
                    if m:
                        out.append((d / e.name, {**caps, **m.groupdict()}))
                elif not last and m and e.is_dir(follow_symlinks=False):
                    out.append((d / e.name, {**caps, **m.groupdict()}))
        found = out
    return found


@overload
def find_episode_files(task_dir: Path, layout: TaskLayout, index: int,
                       video_extensions: Mapping[str, Any] | None = None) -> EpisodeFiles[Path] | None: ...
@overload
def find_episode_files(task_dir: TaskPathLike, layout: TaskLayout, index: int,
                       video_extensions: Mapping[str, Any] | None = None) -> EpisodeFiles[TaskPath] | None: ...
def find_episode_files(task_dir: TaskPathLike, layout: TaskLayout, index: int,
                       video_extensions: Mapping[str, Any] | None = None) -> EpisodeFiles[TaskPath] | None:
    """Episode N's file group, from N's own paths (file_format.md checklist §12.2).

    The paths are computed from the templates (``N -> (chunk, file)``); only what the
    template leaves open is looked up on disk: the ``image_key`` directories of N's video
    chunk and, when N has no ``episode-`` named ``meta/episodes`` file, the legacy
    ``file-`` files of N's chunk directory (a pre-v1.1.2 per-episode row, or the chunk's
    multi-row shard, whose rows are found by ``episode_index``, §6.1). So the cost does not
    grow with the number of episodes in the task. The result equals N's entry of
    :func:`list_task_episodes`, except that a legacy shard holding N's row in another
    chunk's directory (outside §2's "one shard per chunk") is found only by the full
    enumeration (docs/decisions.md L1). The row is looked up first, as in
    :func:`list_task_episodes`.

    Parameters
    ----------
    task_dir:
        The task directory.
    layout:
        Its templates.
    index:
        Global 1-based N.
    video_extensions:
        ``info.video_extensions``: the declared file of a stream is tried before its
        directory is listed.

    Returns
    -------
    EpisodeFiles or None
        None when no file of N exists.

    Raises
    ------
    LayoutError
        ``index`` is not an integer >= 1.
    FormatError
        A legacy ``file-`` row file of N's chunk is corrupt.
    """
    root = as_path(task_dir)
    if isinstance(root, ObjectPath):
        return _find(root, layout, index, video_extensions)
    return _find(root, layout, index, video_extensions)


def _find(root: _P, layout: TaskLayout, index: int,
          video_extensions: Mapping[str, Any] | None) -> EpisodeFiles[_P] | None:
    """:func:`find_episode_files` in a task whose files are all of ``root``'s kind."""
    c, f = layout.chunk_file(index)
    g: EpisodeFiles[_P] = EpisodeFiles(index, c, f)
    if video_extensions is None:
        video_extensions = dict(layout.video_extensions)
    exts = {k: v for k, v in (video_extensions if isinstance(video_extensions, Mapping) else {}).items()
            if isinstance(v, str) and v and "/" not in v and "{" not in v}
    with ThreadPoolExecutor(2) if isinstance(root, ObjectPath) else nullcontext() as pool:
        # a bucket: the data parquet's and the videos' HEADs and LIST overlap the row's (docs/decisions.md B14)
        def resolve(template: str, **kw: Any) -> Callable[[], list[tuple[_P, dict[str, str]]]]:
            def run() -> list[tuple[_P, dict[str, str]]]:
                return _resolve(root, template, c, f, **kw)
            return run if pool is None else pool.submit(run).result
        data_of, videos_of = resolve(layout.data_path), resolve(layout.video_path, png_dirs=True, prefer=exts)
        _find_meta(root, layout, index, g)
        data, videos = data_of(), videos_of()
    g.data = data[0][0] if data else None
    for path, caps in videos:
        g.videos.setdefault(caps.get("image_key", ""), path)
    if g.data is None and g.meta is None and not g.videos:
        return None
    return g


def _find_meta(root: _P, layout: TaskLayout, index: int, g: EpisodeFiles[_P]) -> None:
    """N's ``meta/episodes`` row file into ``g``: its own ``episode-`` file, else the legacy shard holding N."""
    c, f = g.chunk, g.file
    own = [path for path, _ in _resolve(root, layout.episodes_path, c, f) if path.name.startswith("episode-")]
    if own:
        g.meta = own[0]
    else:
        for path, caps in sorted(_resolve(root, layout.episodes_path, c, None), key=lambda t: t[0]):
            if path.name.startswith("episode-"):
                continue
            indices = _read_episode_indices(path)
            if index in indices:
                own_f = int(caps["f"]) if caps.get("f", "").isdigit() else layout.chunks_size
                expected = layout.index_of(c, own_f) if own_f < layout.chunks_size else None
                g.meta, g.meta_is_shard = path, not (len(indices) == 1 and indices[0] == expected)
                break
