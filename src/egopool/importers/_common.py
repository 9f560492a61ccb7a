"""Pieces every importer shares: exact time parsing, row windows, rotations, calibration dicts,
and a task writer that leaves nothing behind when an import fails.

Time windows follow the row model of multi_device_storage.md §5.3: row ``i`` owns the
half-open interval ``[edges[i], edges[i+1])`` in integer ns, and a variable-length
column (IMU samples, trajectory points) gets every sample whose time falls in it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .._safe_read import open_regular, read_text
from ..errors import EgopoolError, FormatError, RegistryError
from ..layout import TaskLayout, list_task_episodes
from ..meta.info import info_path, read_info
from ..registry import Registry, task_key
from ..schema import ColumnSpec
from ..storage import ObjectPath
from ..write.task_writer import EpisodeResult, TaskWriter, refuse_foreign

__all__ = [
    "ImportResult",
    "ImportSource",
    "SOURCE_MEMORY",
    "SourceMemory",
    "check_not_imported",
    "remember_import",
    "source_digest",
    "Progress",
    "camera_calibration",
    "check_fps",
    "default_task_name",
    "looks_like_header",
    "read_input_lines",
    "nearest_rotation",
    "refuse_other_fps",
    "plain_number",
    "quaternion_to_rotation",
    "rotation_to_quaternion",
    "seconds_to_ns",
    "task_writer",
    "window_offsets",
    "with_feature",
]

#: ``progress(done, total)``, called after each written row.
Progress = Callable[[int, int], None]

#: ``seed(root, task)`` called before an importer opens ``root/task`` (set by :mod:`egopool.importers.bucket_out`
#: while an import runs into a local scratch task bound for a bucket: it puts the bucket task's ``meta/`` there).
TASK_SEED: contextvars.ContextVar[Callable[[Path, str], None] | None] = contextvars.ContextVar("egopool_task_seed",
                                                                                              default=None)


def _seed(root: Path, task: str) -> None:
    seed = TASK_SEED.get()
    if seed is not None:
        seed(root, task)

_NS = Decimal(1_000_000_000)


@dataclass(frozen=True)
class ImportResult:
    """What an importer wrote.

    Attributes
    ----------
    task_dir:
        The task directory (``<out>/<task>``), or its ``s3://`` location (:mod:`egopool.importers.bucket_out`).
    episodes:
        One :class:`~egopool.write.task_writer.EpisodeResult` per written episode (N, rows, paths).
    synthesised:
        Which timestamps were made up because the source has none (stated in the CLI output).
    notes:
        Other facts the user should know (samples dropped outside the rows, assumptions).
    """

    task_dir: Path | ObjectPath
    episodes: tuple[EpisodeResult, ...]
    synthesised: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (paths as strings)."""
        return {
            "task_dir": str(self.task_dir),
            "episodes": [{"episode_index": e.index, "chunk": e.chunk, "file": e.file, "length": e.length,
                          "paths": [str(p) for p in e.paths]} for e in self.episodes],
            "counts": dict(self.counts),
            "synthesised": list(self.synthesised),
            "notes": list(self.notes),
        }


_NAME_RE = re.compile(r"[A-Za-z_#][\w#\[\]()/^.:\- ]*")


def read_input_lines(path: Path, what: str) -> list[tuple[int, str]]:
    """``(1-based line number, stripped text)`` of every non-empty line of a text input file.

    A UTF-8 byte order mark is dropped (editors on Windows write one). Only regular files
    are read (a FIFO would block).

    Raises
    ------
    FormatError
        Missing (``is missing``), not a regular file (``is a FIFO``...), too large, or not UTF-8
        (the line is named).
    """
    text = read_text(path, what=what)
    return [(no, line.strip()) for no, line in enumerate(text.splitlines(), start=1) if line.strip()]


def looks_like_header(tokens: Sequence[str]) -> bool:
    """True when every token is a column name (``timestamp``, ``tx``, ``p_RS_R_x [m]``) and none is a number.

    Only such a first line is skipped as a header; any other line that does not parse is an
    error naming it, so a damaged first pose is never dropped silently.
    """
    if not tokens:
        return False
    for tok in tokens:
        try:
            float(tok)
            return False
        except ValueError:
            pass
        if not _NAME_RE.fullmatch(tok):
            return False
    return True


def check_fps(fps: float) -> float:
    """Return ``fps`` as float. Raises EgopoolError unless it is finite and > 0."""
    if not (isinstance(fps, (int, float)) and np.isfinite(fps) and fps > 0):
        raise EgopoolError(f"fps must be a finite number > 0, got {fps!r}", hint="pass e.g. --fps 30")
    return float(fps)


#: A number as text files of this field write it: ASCII digits, optional sign, fraction and exponent;
#: ``nan`` / ``inf`` so that a non-finite value is named as such rather than as "not a number".
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)",
                           re.IGNORECASE)


def plain_number(token: str) -> float:
    """A text value of a TUM / EuRoC file as float64.

    Stricter than ``float()``: ``1_305`` and non-ASCII digits (``١٢``) are refused, since no
    tool of this field writes them and accepting them would guess at damaged text.

    Raises
    ------
    ValueError
        ``token`` is not such a number (callers name the file and line).
    """
    if not _PLAIN_NUMBER.fullmatch(token):
        raise ValueError(f"not a number: {token!r}")
    return float(token)


def seconds_to_ns(token: str, *, path: Path, line: int) -> int:
    """Decimal seconds text (``1305031098.6659``, ``1.403715529112143517e+09``) -> exact int ns.

    Parsed as a decimal, not a float, so the ns value is exact (a float64 near 1.3e9 s
    is only good to ~0.2 µs). Ties round half to even.

    Raises
    ------
    FormatError
        Not a finite number, or beyond the int64 ns range; names the file and 1-based line.
    """
    try:
        if not _PLAIN_NUMBER.fullmatch(token):
            raise InvalidOperation
        d = Decimal(token)
    except InvalidOperation:
        raise FormatError(f"line {line}: timestamp {token!r} is not a number", path=path) from None
    if not d.is_finite():
        raise FormatError(f"line {line}: timestamp {token!r} is not finite", path=path)
    ns = int((d * _NS).to_integral_value(rounding=ROUND_HALF_EVEN))
    if not -(2**63) <= ns < 2**63:  # an OverflowError traceback further on (found by qa12)
        raise FormatError(f"line {line}: timestamp {token} s is beyond what int64 nanoseconds hold "
                          "(|t| < 9.22e9 s, the year 2262)", path=path)
    return ns


def window_offsets(sample_ns: np.ndarray, edges_ns: np.ndarray) -> np.ndarray:
    """Split time-sorted samples into row windows.

    Parameters
    ----------
    sample_ns:
        ``(K,)`` int64 sample times, non-decreasing.
    edges_ns:
        ``(R+1,)`` int64 strictly increasing; row ``i`` owns ``[edges[i], edges[i+1])``.

    Returns
    -------
    np.ndarray
        ``(R+1,)`` int64 offsets: row ``i`` gets samples ``offsets[i]:offsets[i+1]``.
        Samples before ``edges[0]`` or at/after ``edges[-1]`` belong to no row.
    """
    s = np.asarray(sample_ns, dtype=np.int64)
    e = np.asarray(edges_ns, dtype=np.int64)
    if s.size > 1 and np.any(np.diff(s) < 0):
        raise ValueError("sample times must be non-decreasing")
    return np.searchsorted(s, e, side="left").astype(np.int64)


def nearest_rotation(m: np.ndarray) -> tuple[np.ndarray, float]:
    """Project ``(..., 3, 3)`` matrices onto SO(3) (polar decomposition via SVD).

    Returns
    -------
    (R, defect):
        The nearest proper rotations (Frobenius norm) and the largest ``|Mᵀ M − I|``
        entry of the input, i.e. how far the input was from orthonormal.

    Raises
    ------
    ValueError
        A matrix with ``det <= 0`` (a reflection or degenerate), or non-finite entries.
    """
    m = np.asarray(m, dtype=np.float64)
    if not np.all(np.isfinite(m)):
        raise ValueError("rotation matrix has non-finite entries")
    det = np.linalg.det(m)
    if np.any(det <= 0):
        raise ValueError(f"rotation matrix has determinant {float(np.min(det)):.6g} <= 0")
    defect = float(np.max(np.abs(np.swapaxes(m, -1, -2) @ m - np.eye(3)))) if m.size else 0.0
    u, _, vt = np.linalg.svd(m)
    return u @ vt, defect


def rotation_to_quaternion(r: np.ndarray) -> np.ndarray:
    """Proper rotation matrices ``(..., 3, 3)`` -> unit quaternions ``(..., 4)`` ``[qx, qy, qz, qw]``.

    Shepperd's method: each matrix uses the largest of ``trace, r00, r11, r22`` as pivot,
    so no branch divides by a small number (robust near 180° rotations). The sign is
    canonical, ``qw >= 0``. Pass matrices through :func:`nearest_rotation` first when
    they are not orthonormal to machine precision.
    """
    r = np.asarray(r, dtype=np.float64)
    shape = r.shape[:-2]
    m = r.reshape(-1, 3, 3)
    q = np.empty((m.shape[0], 4), dtype=np.float64)
    tr = m[:, 0, 0] + m[:, 1, 1] + m[:, 2, 2]
    diag = np.stack([m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], axis=1)
    pivot = np.where(tr >= diag.max(axis=1), 3, diag.argmax(axis=1))
    for k in range(4):
        sel = pivot == k
        if not np.any(sel):
            continue
        a = m[sel]
        if k == 3:
            s = 2.0 * np.sqrt(1.0 + tr[sel])
            q[sel] = np.stack([(a[:, 2, 1] - a[:, 1, 2]) / s, (a[:, 0, 2] - a[:, 2, 0]) / s,
                               (a[:, 1, 0] - a[:, 0, 1]) / s, 0.25 * s], axis=1)
            continue
        i, j, h = k, (k + 1) % 3, (k + 2) % 3
        s = 2.0 * np.sqrt(np.maximum(1.0 + a[:, i, i] - a[:, j, j] - a[:, h, h], 0.0))
        out = np.empty((a.shape[0], 4))
        out[:, i] = 0.25 * s
        out[:, j] = (a[:, j, i] + a[:, i, j]) / s
        out[:, h] = (a[:, h, i] + a[:, i, h]) / s
        out[:, 3] = (a[:, h, j] - a[:, j, h]) / s
        q[sel] = out
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1.0
    return q.reshape(*shape, 4)


def quaternion_to_rotation(q: np.ndarray) -> np.ndarray:
    """Quaternions ``(..., 4)`` ``[qx, qy, qz, qw]`` (normalised here) -> rotation matrices ``(..., 3, 3)``."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    r = np.empty(q.shape[:-1] + (3, 3))
    r[..., 0, 0] = 1 - 2 * (y * y + z * z)
    r[..., 0, 1] = 2 * (x * y - z * w)
    r[..., 0, 2] = 2 * (x * z + y * w)
    r[..., 1, 0] = 2 * (x * y + z * w)
    r[..., 1, 1] = 1 - 2 * (x * x + z * z)
    r[..., 1, 2] = 2 * (y * z - x * w)
    r[..., 2, 0] = 2 * (x * z - y * w)
    r[..., 2, 1] = 2 * (y * z + x * w)
    r[..., 2, 2] = 1 - 2 * (x * x + y * y)
    return r


def camera_calibration(name: str, resolution: Sequence[int], fps: float, intrinsic: Sequence[float],
                       distortion: Sequence[float], *, type_: str = "mono_camera",
                       depth_scale: float | None = None, **extra: Any) -> dict[str, Any]:
    """One ``calibration`` entry in the ``StereoCalibration.to_dict()`` structure (file_format.md §3,
    multi_device_storage.md §6.5), for a single camera (stored as ``left_camera``).

    Parameters
    ----------
    name:
        The calibration key (``head_stereo`` for the first device with a calibration).
    resolution:
        ``[width, height]`` in pixels.
    intrinsic:
        ``[fx, fy, cx, cy]`` in pixels.
    distortion:
        Distortion coefficients in the source's model order.
    depth_scale:
        Metres per depth unit (0.001 for uint16 mm), when the camera has depth.
    extra:
        Further source facts (``distortion_model``, ``T_BS``...), added as keys.
    """
    cal: dict[str, Any] = {
        "type": type_, "name": name, "resolution": [int(resolution[0]), int(resolution[1])], "fps": float(fps),
        "left_camera": {"intrinsic": [float(v) for v in intrinsic], "distortion": [float(v) for v in distortion]},
    }
    if depth_scale is not None:
        cal["depth_scale"] = float(depth_scale)
    cal.update(extra)
    return cal


def with_feature(spec: ColumnSpec, **extra: Any) -> ColumnSpec:
    """A copy of ``spec`` whose ``features`` declaration has ``extra`` keys added (e.g. ``source``)."""
    return dataclasses.replace(spec, feature={**dict(spec.feature or {}), **extra})


_BAD_TASK_CHARS = re.compile(r"[/\\\x00]")


def default_task_name(source: Path) -> str:
    """A task name from a source path: its name without extension, leading ``.``/``_`` stripped."""
    stem = source.resolve().name
    if source.is_file() and "." in stem:
        stem = stem.rsplit(".", 1)[0]
    stem = _BAD_TASK_CHARS.sub("_", stem).lstrip("._")
    return stem or "imported"


#: an import's rate comes from its source, so its way out is a new task, not another --fps (qa9)
IMPORT_FPS_HINT = "import into a new task (--task NEW_NAME)"


def refuse_other_fps(root: str | Path, task: str, fps: float) -> None:
    """Refuse, reading only, an import at ``fps`` into an existing task recorded at another fps:
    TaskWriter's own check (one check, R18), for importers that check their input at length
    first, so the refusal does not come after the long check.

    Raises
    ------
    SchemaError
        The task's ``info.json`` says another fps (naming it and the way out: a new task).
    """
    _seed(Path(root), task)
    task_dir = Path(root) / task
    if task_dir.is_dir():
        refuse_foreign(task_dir, fps, IMPORT_FPS_HINT)


@dataclass(frozen=True)
class ImportSource:
    """What an import reads, identified by content (docs/decisions.md D6).

    Attributes
    ----------
    paths:
        The files / folders the import reads (their content is the source).
    what:
        How a message names it (the file or folder as given).
    part:
        One episode of a multi-episode source (a LeRobot dataset's ``episode_index``), else None.
    base:
        Names inside the digest are relative to it (default: each path's own folder).
    """

    paths: tuple[Path, ...]
    what: str
    part: str | None = None
    base: Path | None = None
    #: The content digest once computed; ``dataclasses.replace`` shares it (the episodes of one dataset).
    cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of the content (:func:`source_digest`, computed on first use), ``#<part>`` appended.

        Raises
        ------
        EgopoolError
            A file cannot be read.
        """
        if "sha256" not in self.cache:
            self.cache["sha256"] = source_digest(*self.paths, base=self.base)
        d = self.cache["sha256"]
        return f"{d}#{self.part}" if self.part is not None else d


def _files_of(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out += [Path(dirpath) / f for f in sorted(filenames) if not f.startswith(".")]
    return out


def source_digest(*paths: str | Path, base: str | Path | None = None) -> str:
    """``sha256:<hex>`` over the content of ``paths`` (a directory: every file under it, dot entries left out).

    Each file enters as its path relative to ``base`` (default: its own argument's parent, so a folder
    moved elsewhere keeps its digest), its size and its bytes, in sorted order: the same content under
    another name of the given file or folder is the same source.

    Raises
    ------
    EgopoolError
        A file cannot be read (missing, a FIFO...; :func:`egopool._safe_read.open_regular`).
    """
    h = hashlib.sha256()
    for arg in paths:
        top = Path(arg)
        anchor = Path(base) if base is not None else top if top.is_dir() else top.parent
        for f in _files_of(top):
            name = f.relative_to(anchor).as_posix() if top.is_dir() or base is not None else ""
            with open_regular(f, what="import source") as fh:
                size = os.fstat(fh.fileno()).st_size
                h.update(f"{name}\0{size}\0".encode("utf-8", "surrogateescape"))
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
    return f"sha256:{h.hexdigest()}"


class SourceMemory(Protocol):
    """Where a task bound for a bucket remembers its imported sources (:class:`~.bucket_sources.BucketSources`)."""

    def held(self, task: str, sources: Sequence[ImportSource]) -> list[tuple[ImportSource, int]]:
        """``(source, N)`` for every source still held by the task as episode N."""
        ...

    def remember(self, task: str, source: ImportSource, index: int) -> None:
        """Note that episode ``index`` of ``task`` came from ``source``."""
        ...

    def location(self, task: str) -> str:
        """The task as a message names it (``s3://BUCKET/PREFIX/TASK``)."""
        ...


#: The bucket's memory of imported sources, set by :mod:`egopool.importers.bucket_out` while an import runs
#: into a local scratch task bound for a bucket (the scratch task has no registry of its own to ask).
SOURCE_MEMORY: contextvars.ContextVar[SourceMemory | None] = contextvars.ContextVar("egopool_source_memory",
                                                                                   default=None)


def _registry_held(task_dir: Path, sources: Sequence[ImportSource]) -> list[tuple[ImportSource, int]]:
    """``(source, N)`` from the registry beside a directory task (none when there is no registry)."""
    if not info_path(task_dir).is_file():
        return []
    reg = Registry.for_task(task_dir)
    if not reg.path.exists():
        return []
    try:
        key = task_key(task_dir)
        if not reg.has_imports(key):
            return []  # nothing was ever imported into this task: the source is not even read for a digest
        layout = TaskLayout.from_info(task_dir, read_info(task_dir))
        return [(src, n) for src in sources for n in reg.imported(key, src.digest)
                if layout.episodes_file(n).exists()]
    except RegistryError as exc:
        warnings.warn(f"cannot check whether {sources[0].what} was imported before: {exc.one_line()}",
                      RuntimeWarning, stacklevel=4)
        return []
    except EgopoolError:  # a source file that cannot be read: the importer's own check names it
        return []


def check_not_imported(task_dir: str | Path, sources: Sequence[ImportSource], allow_duplicate: bool) -> None:
    """Refuse, before anything is written, a source an earlier import already put into the task.

    Reads only. The registry beside the task (``pipeline.db``) remembers which episode each source
    digest became (:func:`remember_import`); for an import into a bucket the bucket task's own records
    do (:data:`SOURCE_MEMORY`). A source whose episode still exists is refused unless
    ``allow_duplicate`` (a deleted episode's source may be imported again). A task or registry that
    does not exist yet holds nothing; a registry that cannot be read is a warning (the import goes on).

    Raises
    ------
    EgopoolError
        Naming the source, the N that holds it, ``--allow-duplicate`` and the delete that frees it.
    ObjectStoreError
        For a bucket: its records cannot be read.
    """
    task_dir = Path(task_dir)
    if allow_duplicate or not sources:
        return
    memory = SOURCE_MEMORY.get()
    where: str | Path = task_dir
    if memory is None:
        held = _registry_held(task_dir, sources)
    else:
        held, where = memory.held(task_dir.name, sources), memory.location(task_dir.name)
    if held:
        src, n = held[0]
        also = f" (and {len(held) - 1} more)" if len(held) > 1 else ""
        raise EgopoolError(f"{src.what} is already in this task as episode N={n}{also} (imported before, same "
                           f"content {src.digest.split('#')[0][:19]}...); importing it again would hold it twice",
                           path=where, hint="pass --allow-duplicate to import it again anyway, or "
                                               f"`egopool delete TASK {n}` first")


def remember_import(tw: TaskWriter, source: ImportSource, index: int) -> None:
    """Record in the registry (or, bound for a bucket, :data:`SOURCE_MEMORY`) that episode ``index`` came from
    ``source`` (a registry failure is a warning)."""
    memory = SOURCE_MEMORY.get()
    if memory is not None:
        memory.remember(tw.task_dir.name, source, index)
        return
    if tw.registry is None:
        return
    try:
        tw.registry.record_import(task_key(tw.task_dir), source.digest, index, source.what)
    except EgopoolError as exc:  # the registry, or (unlikely after the import read it) a source file
        warnings.warn(f"episode {index} is imported, but the registry does not remember its source, so a second "
                      f"import of {source.what} would not be refused: {exc.one_line()}", RuntimeWarning, stacklevel=3)


@contextlib.contextmanager
def task_writer(root: str | Path, task: str, fps: float, *, source: ImportSource | None = None,
                allow_duplicate: bool = False) -> Iterator[TaskWriter]:
    """A :class:`TaskWriter` whose task skeleton is removed again if the import fails.

    When the task directory did not exist before and the import raises before any
    episode was finished, the fresh directory (``info.json``, ``tasks.jsonl``, the
    abort marker) is deleted, so a failed import leaves nothing behind. Episodes must
    be written with ``with tw.begin_episode(...) as ep:`` so an exception aborts them.

    ``source`` (one source, one or more episodes): refused when already imported into the task
    (:func:`check_not_imported`), remembered for every episode the import committed.

    Raises
    ------
    SchemaError
        The task exists at another fps than ``fps`` (nothing is written: its ``info.json``
        fps would otherwise be rewritten under its earlier episodes; TaskWriter's check).
    EgopoolError
        ``source`` is already in the task (nothing is written).
    """
    root = Path(root)
    _seed(root, task)
    root_fresh = not root.exists()
    task_dir = root / task
    fresh = not task_dir.exists()
    # an import's rate comes from its source, so its way out is a new task, not another --fps (qa9)
    tw = TaskWriter(root, task, fps=fps, fps_hint=IMPORT_FPS_HINT)
    try:
        if source is not None:
            check_not_imported(tw.task_dir, [source], allow_duplicate)
        yield tw
        if source is not None:
            for n in tw.committed:
                remember_import(tw, source, n)
    except BaseException:
        try:
            empty = not list_task_episodes(task_dir)
        except Exception:  # noqa: BLE001 - never mask the import's own error
            empty = False
        if fresh and empty:
            shutil.rmtree(task_dir, ignore_errors=True)
            if root_fresh:
                with contextlib.suppress(OSError):
                    root.rmdir()
        raise
