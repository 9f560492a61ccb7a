"""A map-style training dataset over pooled tasks, read in place (issue 18).

::

    from egopool.dataset import PooledDataset
    ds = PooledDataset(["recordings/pick_cup"], keys=["head_left_rgb", "observation.right_hand_pose"],
                       delta_timestamps={"head_left_rgb": [-0.1, 0.0]})
    item = ds[0]   # {"head_left_rgb": (2, H, W, 3) uint8, "head_left_rgb_is_pad": (2,) bool, ...}

With PyTorch installed (extra ``train``) the class is a ``torch.utils.data.Dataset`` and returns
tensors (``output="numpy"`` keeps numpy); without it, the same class returns numpy.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import install_hint
from ..keypoints.mirror import episode_mirror_dir
from ..read.reader import open_task
from ..storage import ObjectPath, TaskPath, TaskPathLike, as_path, is_object_uri, require_bucket
from .decode import PngSequence, StreamDecoder
from .episode_view import EpisodeView, check_keys, key_kind_by_name
from .keypoint_keys import is_keypoint_key, missing_mirror_error
from .index import FrameIndex, TaskEntry, task_entry
from .object_cache import BlockCache
from .read_ahead import next_batch
from .torchcodec_decode import TorchcodecStream, open_stream, torchcodec_available
from .worker import Ask, Worker
from .windows import DEFAULT_TOLERANCE_S, WindowSpec

if TYPE_CHECKING:  # checked as the torch Dataset it is with the extra `train` installed
    import torch
    from torch.utils.data import Dataset as _Base
else:
    try:  # the extra `train`
        import torch
        from torch.utils.data import Dataset as _Base
    except ImportError:  # pragma: no cover - exercised in a venv without torch
        torch = None
        _Base = object

__all__ = ["PooledDataset", "find_tasks"]

#: Worker states a forked process inherited: never used, never freed (see ``PooledDataset._worker``).
_INHERITED: list[Worker] = []


def find_tasks(paths: TaskPathLike | Iterable[TaskPathLike]) -> list[TaskPath]:
    """Tasks of ``paths``, each a directory or an ``s3://bucket/prefix`` (mixed freely): a location with
    ``meta/info.json`` is a task, any other a collection whose children holding one are its tasks
    (sorted by name); a task reached twice counts once.

    A bucket location costs one HEAD (its ``meta/info.json``); a collection in a bucket one LIST with
    delimiter ``/`` (its sub-prefixes) and one HEAD per sub-prefix. Nothing is downloaded.

    Returns
    -------
    list
        ``pathlib.Path`` for a directory, :class:`~egopool.storage.ObjectPath` for a bucket location.

    Raises
    ------
    FileNotFoundError
        A location that is neither (one line naming it and the fix).
    ObjectStoreError
        ``s3://``: the bucket does not exist, access denied, the endpoint did not answer.
    FormatError
        A malformed ``s3://`` URI (no bucket, an empty / ``.`` / ``..`` component).
    """
    many = [paths] if isinstance(paths, (str, os.PathLike, ObjectPath)) else paths
    out: list[TaskPath] = []
    for p in map(as_path, many):
        if (p / "meta" / "info.json").is_file():
            out.append(p)
            continue
        found = sorted(_task_children(p), key=str)
        if not found:
            if isinstance(p, ObjectPath):
                require_bucket(p)  # a missing bucket is named as such, not as an empty prefix
                raise FileNotFoundError(f"{p}: neither a task (no meta/info.json) nor a prefix of tasks; pass a "
                                        f"task such as s3://{p.bucket}/PREFIX/pick_cup (`egopool ls` it first)")
            raise FileNotFoundError(f"{p}: neither a task (no meta/info.json) nor a directory of tasks; "
                                    "pass a task directory such as recordings/pick_cup")
        out.extend(found)
    seen: set[TaskPath] = set()  # a task named twice (or through a symlink) counts once
    unique: list[TaskPath] = []
    for q in out:
        if q.resolve() not in seen:
            seen.add(q.resolve())
            unique.append(q)
    return unique


def _task_children(p: TaskPath) -> list[TaskPath]:
    """Children of ``p`` holding ``meta/info.json`` (a bucket: one LIST with delimiter, a HEAD per sub-prefix)."""
    if isinstance(p, ObjectPath):
        subs = [e.path for e in p.scandir() if e.is_dir()]
        if len(subs) < 2:
            return [d for d in subs if (d / "meta" / "info.json").is_file()]
        with ThreadPoolExecutor(min(8, len(subs))) as pool:  # HEADs are latency-bound
            held = list(pool.map(lambda d: (d / "meta" / "info.json").is_file(), subs))
        return [d for d, ok in zip(subs, held, strict=True) if ok]
    if not p.is_dir():
        return []
    return [d for d in p.iterdir() if (d / "meta" / "info.json").is_file()]


def _same_location(key: Any, path: TaskPath) -> bool:
    """True when ``key`` (an ``episodes`` mapping key) names the task at ``path``: the same directory, or
    the same ``s3://`` location (a URI is compared as written, a directory resolved)."""
    if isinstance(path, ObjectPath):
        return is_object_uri(key) and str(key).rstrip("/") == path.uri
    if is_object_uri(key) or not isinstance(key, (str, Path)):
        return False
    return Path(key).resolve() == path


class PooledDataset(_Base):
    """Map-style dataset: item ``i`` = row ``frame_index`` of episode N of a pooled task.

    Parameters
    ----------
    tasks:
        Task directories, or directories of tasks (:func:`find_tasks`); each may also be an
        ``s3://bucket/prefix/task`` (or a prefix of tasks), read in place exactly as a directory: the
        same items, windows, filters and errors (docs/decisions.md O41). The connection comes
        from the AWS environment of each process (README "Tasks in object storage").
    keys:
        What an item holds. A stream key (``head_left_rgb``) gives its frame: RGB uint8
        ``(H, W, 3)`` (``(3, H, W)`` with ``channels_first``), depth uint16 mm ``(H, W)`` (holes 0,
        decoded as :meth:`egopool.Episode.depth` does: 12-bit HEVC log code, FFV1, PNG16). A
        data column gives the row's value as stored (``action`` ``(D,)`` float32, ``hardware_ns``
        int64, a hand pose ``(63,)`` float32, strings as ``str``). ``*_force_matrix`` gives
        ``(250, 250, 3)`` float32 mN decoded with the episode's own scale (§7.2.1).
        ``observation.imu`` / ``imu_ts_ns`` give the row's samples ``(k, 6)`` float32 /
        ``(k,)`` int64 ordered by ``imu_ts_ns``; ``observation.*slam_trajectory`` (``_ns``) the
        row's points ``(k, 8)`` float64 (``(k,)`` int64 host ns). ``k`` varies by row unless
        ``samples`` fixes it. ``keypoints.<side>_<field>`` gives the row's hand keypoints from
        the mirror ``egopool keypoints extract`` writes (file_format.md §10;
        :mod:`egopool.dataset.keypoint_keys`): ``_hand_2d`` ``(21, 2)`` float32 pixels,
        ``_hand_z`` ``(21,)`` float32, ``_hand_pose`` ``(21, 3)`` float32 m, ``_score`` float32,
        ``_present`` bool; a hand not found is zeros with ``_present`` false, as the mirror stores it.
    delta_timestamps:
        ``{key: [s, ...]}``: LeRobot's windows (:mod:`egopool.dataset.windows`): the value of
        each key becomes ``(T, ...)`` over rows ``frame_index + round(s * fps)``, rows outside the
        episode clamped to its edge and flagged in ``<key>_is_pad`` ``(T,)`` bool. Keys named here
        and not in ``keys`` are added. Not for the IMU / trajectory keys (use ``samples``).
    samples:
        ``{imu or trajectory key: K}``: the K samples ending with the row's last one (earlier
        rows of the episode fill in; before the episode's first sample zeros, flagged in
        ``<key>_is_pad`` ``(K,)``), so items batch.
    episodes:
        Keep only these N: a list (every task) or ``{task directory or task_name: [N, ...]}``
        (tasks not named keep all).
    task_names:
        Keep only tasks whose ``task_name`` (or directory name) is listed.
    channels_first:
        RGB as ``(3, H, W)`` (a view, no copy).
    output:
        ``"auto"`` (torch tensors when torch is installed), ``"torch"`` or ``"numpy"``.
    tolerance_s:
        How far (s) an offset may be from a whole number of frame intervals.
    cache_dir:
        Where the frame index is cached (:mod:`egopool.dataset.index`); ``""`` disables.
    max_open_streams, max_episodes, cache_frames, decode_threads:
        Per-worker bounds (see Memory).
    cache_bytes, block_size, read_ahead:
        Videos in a bucket are read through a per-worker block cache
        (:class:`~egopool.dataset.object_cache.BlockCache`): at most ``cache_bytes`` (default 64 MiB) of
        ``block_size`` blocks (256 KiB), a miss fetching the blocks it needs and ``read_ahead`` (8) more in
        one ranged GET. GETs per process: :meth:`io_stats`.
    io_threads:
        Threads per process reading a batch of a task in a bucket (default 8; directories use
        ``decode_threads``): the batch's episodes, then its streams, are opened and read at once, so a
        batch costs a few round trips of the store's latency rather than one per object (a forked worker
        reads through a boto3 client of its own, docs/decisions.md B8, B9). With a
        :class:`~egopool.dataset.BucketSampler` as many threads more open the next batch's objects while this one
        decodes (B12, B15; bounds below unchanged).
    decoder:
        The RGB streams' decoder: ``"pyav"`` (default: as fast in the loader benchmark, less memory, scales with
        ``decode_threads``; benchmarks/README.md) or ``"torchcodec"`` (LeRobot 0.6's; the extra ``train``). Both give the
        reader's frames bit for bit; depth streams always use egopool's own decoder (12-bit HEVC log code, FFV1:
        :mod:`egopool.dataset.torchcodec_decode`).
    mirror_root:
        The ``keypoints_output`` directory of the ``keypoints.*`` keys; default as
        ``egopool keypoints extract`` (``$EGOPOOL_KEYPOINTS_ROOT``, else beside the recordings root).

    Every item also holds ``index``, ``task_index`` (position among the dataset's tasks),
    ``episode_index`` (N) and ``frame_index`` as int64 scalars.

    Memory per worker (each DataLoader worker builds its own state on its first item; nothing
    open is pickled): at most ``max_open_streams`` open containers, each with FFmpeg's decoder
    state (a few frames, up to 16 reference frames for H.264) and ``cache_frames`` converted
    frames (``H × W × 3`` bytes RGB, ``H × W × 2`` depth); at most ``max_episodes`` episodes'
    chosen columns (rows × row size; force matrices are never kept, 375 kB per row decoded on
    demand). With the defaults (16 streams, ``cache_frames`` = the largest of 4, 2 × the longest window and
    its span in rows + 1, at most 64) and
    640×480 cameras and windows of 2 frames: 16 streams × 4 frames × 0.9 MB ≈ 59 MB of frames plus the
    decoders, and for tasks in a bucket ``cache_bytes`` of video blocks (64 MiB by default). ``decode_threads`` threads decode a batch's streams in parallel (PyAV releases the GIL);
    use 1 when DataLoader workers already fill the cores (a bucket's batch uses ``io_threads``). A batch
    (``__getitems__``) also holds its own frames while it is assembled: what it returns; over a bucket at most
    ``io_threads`` GETs are in flight, each at most the blocks one read needs plus ``read_ahead`` blocks.

    Raises
    ------
    FileNotFoundError
        A path that holds no task.
    ObjectStoreError
        ``s3://``: no such bucket, access denied, the endpoint did not answer (one line naming the URI).
    SchemaError
        ``keypoints.*`` keys and a task without a mirror (one line naming the key and
        ``egopool keypoints extract TASK``).
    FormatError
        A task that cannot be opened or indexed.
    ValueError
        A bad ``delta_timestamps`` / ``samples`` / ``output`` / ``keypoints.*`` key, or tasks of different fps with windows;
        ``keys`` given as one string or naming a key no task has (:func:`~egopool.dataset.episode_view.check_keys`);
        an ``episodes`` N, an ``episodes`` task or ``task_names`` that matches nothing.

    ``__getitem__`` raises :class:`~egopool.errors.SchemaError` for a key the item's episode does
    not have (naming the episode and its file; filter such episodes out with ``episodes``) and
    :class:`~egopool.errors.CodecError` for a stream that cannot be decoded (naming the file).
    """

    def __init__(self, tasks: TaskPathLike | Sequence[TaskPathLike],
                 keys: Sequence[str], *,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 samples: Mapping[str, int] | None = None,
                 episodes: Iterable[int] | Mapping[str, Iterable[int]] | None = None,
                 task_names: Iterable[str] | None = None, channels_first: bool = False,
                 output: str = "auto", tolerance_s: float = DEFAULT_TOLERANCE_S,
                 cache_dir: str | Path | None = None, max_open_streams: int = 16, max_episodes: int = 8,
                 cache_frames: int | None = None, decode_threads: int = 4,
                 mirror_root: str | Path | None = None, cache_bytes: int = 64 << 20, block_size: int = 256 << 10,
                 read_ahead: int = 8, io_threads: int = 8, decoder: str = "pyav") -> None:
        if output not in ("auto", "torch", "numpy"):
            raise ValueError(f"output must be 'auto', 'torch' or 'numpy', got {output!r}")
        if output == "torch" and torch is None:
            raise ValueError(f"output='torch' needs PyTorch: {install_hint('train')}")
        self.as_torch = torch is not None and output != "numpy"
        if decoder not in ("pyav", "torchcodec"):
            raise ValueError(f"decoder must be 'pyav' or 'torchcodec', got {decoder!r}")
        if decoder == "torchcodec" and not torchcodec_available():
            raise ValueError(f"decoder='torchcodec' needs torchcodec (and FFmpeg's libraries): {install_hint('train')}")
        #: ``"pyav"`` or ``"torchcodec"``: the RGB streams' decoder.
        self.decoder = decoder
        delta = dict(delta_timestamps or {})
        if isinstance(keys, (str, bytes)):
            raise ValueError(f"keys must be a list of names, got the string {keys!r}: use keys=[{keys!r}]")
        self.keys = list(dict.fromkeys([*keys, *delta]))
        if not self.keys:
            raise ValueError("keys is empty: name at least one stream or column")
        for key in delta:
            if key_kind_by_name(key):
                raise ValueError(f"delta_timestamps[{key!r}]: IMU and trajectory rows hold a variable number of "
                                 f"samples; use samples={{{key!r}: K}} for a fixed window")
        self.samples = {k: int(v) for k, v in (samples or {}).items()}
        for key, k in self.samples.items():
            if not key_kind_by_name(key) or k < 1:
                raise ValueError(f"samples[{key!r}] = {k}: only IMU / trajectory keys, K >= 1")
            if key not in self.keys:
                self.keys.append(key)
        entries = self._entries(find_tasks(tasks), task_names, cache_dir)
        fps = {e.fps for e in entries}
        if delta and len(fps) > 1:
            raise ValueError(f"delta_timestamps need one fps; the tasks have {sorted(fps)}: make one dataset per fps")
        self.fps = next(iter(fps)) if fps else 30.0
        self.windows = WindowSpec(delta, self.fps, tolerance_s)
        self.mirror_root = Path(mirror_root) if mirror_root is not None else None
        kp_keys = [k for k in self.keys if is_keypoint_key(k)]
        for e in entries if kp_keys else ():
            where = episode_mirror_dir(e.path, 1, self.mirror_root).parent
            if not where.is_dir():
                raise missing_mirror_error(kp_keys[0], e.path, where)
        self.index = FrameIndex(entries, self._keep(entries, episodes))
        check_keys(self.keys, entries, {t: n for t, n, _ in reversed(self.index.episodes)})  # a key no task has
        self.channels_first = bool(channels_first)
        offs = self.windows.offsets.values()
        longest = max((len(v) for v in offs), default=1)
        span = max((int(v.max() - v.min()) + 1 for v in offs), default=1)
        self.cache_frames = int(cache_frames) if cache_frames is not None else min(64, max(4, 2 * longest, span + 1))
        self.max_open_streams, self.max_episodes = int(max_open_streams), int(max_episodes)
        self.decode_threads, self.io_threads = max(1, int(decode_threads)), max(1, int(io_threads))
        try:
            BlockCache(cache_bytes, block_size, read_ahead)  # refuse bad bounds here, not in a worker
        except ValueError:
            raise ValueError(f"cache_bytes={cache_bytes}, block_size={block_size}, read_ahead={read_ahead}: the "
                             "bucket read cache needs block_size >= 4096, cache_bytes >= block_size and "
                             "read_ahead >= 1 (defaults: 64 MiB, 256 KiB, 8)") from None
        self.cache_bytes, self.block_size, self.read_ahead = int(cache_bytes), int(block_size), int(read_ahead)
        self._w: Worker | None = None
        self._order: Any = None  # the BucketSampler whose order the workers read ahead in (follow_order)

    @staticmethod
    def _entries(paths: list[TaskPath], names: Iterable[str] | None,
                 cache_dir: str | Path | None) -> list[TaskEntry]:
        keep = set(names) if names is not None else None
        out = []
        for p in paths:
            if keep is not None and p.name not in keep and open_task(p).name not in keep:
                continue
            out.append(task_entry(p, cache_dir))
        if keep is not None and not out:
            raise ValueError(f"task_names {sorted(keep)} match none of the tasks "
                             f"{sorted(p.name for p in paths)}: pass one of those names")
        return out

    @staticmethod
    def _keep(entries: list[TaskEntry], episodes: Any) -> list[tuple[int, int]] | None:
        if episodes is None:
            return None
        if isinstance(episodes, Mapping):
            names: dict[int, str] = {}  # task_name of info.json, read once per task (a GET in a bucket)

            def names_task(k: Any, t: int, e: TaskEntry) -> bool:
                if k == e.path.name or _same_location(k, e.path):
                    return True
                if t not in names:
                    names[t] = open_task(e.path).name
                return bool(k == names[t])

            keep: list[tuple[int, int]] = []
            matched = set()
            for t, e in enumerate(entries):
                named = []
                for k, v in episodes.items():
                    if names_task(k, t, e):
                        matched.add(k)
                        named.append(v)
                chosen = set(int(n) for v in named for n in v) if named else set(e.episodes.tolist())
                PooledDataset._no_missing(chosen, set(e.episodes.tolist()), f"{e.path}")
                keep += [(t, n) for n in e.episodes.tolist() if n in chosen]
            if set(episodes) - matched:
                raise ValueError(f"episodes names task(s) {sorted(map(str, set(episodes) - matched))} that are not "
                                 f"among the dataset's tasks {sorted(e.path.name for e in entries)}")
            return keep
        wanted = {int(n) for n in episodes}
        PooledDataset._no_missing(wanted, {n for e in entries for n in e.episodes.tolist()},
                                  ", ".join(str(e.path) for e in entries))
        return [(t, n) for t, e in enumerate(entries) for n in e.episodes.tolist() if n in wanted]

    @staticmethod
    def _no_missing(wanted: set[int], have: set[int], where: str) -> None:
        """ValueError naming the episodes of ``wanted`` that ``where`` does not hold."""
        if wanted - have:
            raise ValueError(f"{where}: no episode {', '.join(map(str, sorted(wanted - have)))} "
                             f"(episodes: {', '.join(map(str, sorted(have))) or 'none'}); "
                             f"run `egopool ls TASK` to list them")

    # -- pickling: DataLoader workers get the index, never open containers ------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_w"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _worker(self) -> Worker:
        w = self._w
        if w is None or w.pid != os.getpid():  # first item here, or a forked copy of the parent's
            if w is not None:
                # a fork's copy of the parent's containers: freeing them here would join FFmpeg decoder
                # threads that do not exist in this process (a deadlock); they stay untouched instead
                _INHERITED.append(w)
            w = self._w = Worker(self.index.tasks, max_open_streams=self.max_open_streams,
                                 cache_bytes=self.cache_bytes, block_size=self.block_size,
                                 read_ahead=self.read_ahead, threads=self.threads(), max_episodes=self.max_episodes)
        return w

    def close(self) -> None:
        """Close this process's open containers (they reopen on the next item)."""
        if self._w is not None and self._w.pid == os.getpid():
            self._w.close()
        self._w = None

    def __len__(self) -> int:
        return len(self.index)

    def io_stats(self) -> dict[str, int]:
        """This process's object reads: ``GET`` requests and ``bytes`` received so far (every read of a bucket
        by this process, :func:`egopool.storage._object_read.request_counts`), ``cache_held`` / ``cache_peak``
        bytes of this dataset's block cache here. A DataLoader worker has its own: ask it in the worker
        (e.g. from ``worker_init_fn`` or an item)."""
        from ..storage._object_read import request_counts

        w = self._w if self._w is not None and self._w.pid == os.getpid() else None
        return {**request_counts(), "cache_held": w.blocks.held if w else 0, "cache_peak": w.blocks.peak if w else 0}

    def episode_ranges(self) -> list[range]:
        """Items of each episode, in index order (what :class:`EpisodeSampler` shuffles)."""
        return [self.index.episode_items(e) for e in range(len(self.index.episodes))]

    def threads(self) -> int:
        """Threads per process reading a batch: ``decode_threads``, or ``io_threads`` when larger and a task is in
        a bucket (there a thread mostly waits on its GET)."""
        remote = any(isinstance(e.path, ObjectPath) for e in self.index.tasks)
        return max(self.decode_threads, self.io_threads) if remote else self.decode_threads

    def follow_order(self, sampler: Any) -> None:
        """Read ahead in ``sampler``'s order (a :class:`~egopool.dataset.BucketSampler` calls this when made over this
        dataset): over a bucket, after each batch a worker opens the episodes and streams of its next batch in the
        background (:mod:`egopool.dataset.read_ahead`). It changes no item."""
        self._order = sampler

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._read([int(i)])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Items ``indices`` (what a ``DataLoader`` asks for a batch), in that order (see :meth:`_read`)."""
        return self._read([int(i) for i in indices])

    def _read(self, indices: list[int]) -> list[dict[str, Any]]:
        """Items ``indices`` read as one plan: the batch's episodes (at most ``max_episodes`` at a time) are opened
        and their columns read by the worker's threads at once; then each stream the batch touches (at most
        ``max_open_streams`` at a time) is opened and decoded once for all the batch's windows on it, sorted by
        row (one forward decode per stream, not a seek per item), the streams on the threads at once. Over a
        bucket every object's GETs then overlap with the others' instead of following them one by one
        (docs/decisions.md B9). Memory: the batch's frames (what it returns) plus the per-worker bounds."""
        w = self._worker()
        w.settle()
        where = [self.index.locate(i) for i in indices]
        ahead = (next_batch(self._order, indices, w.position)  # a bucket: open the next batch's objects meanwhile
                 if self._order is not None and w.pool is not None and self.threads() > self.decode_threads else None)
        order = sorted(range(len(indices)), key=lambda k: (where[k][3], where[k][2]))
        by_ep: OrderedDict[int, list[int]] = OrderedDict()
        for k in order:
            by_ep.setdefault(where[k][3], []).append(k)
        plain: list[dict[str, Any]] = [{} for _ in indices]
        frames: list[dict[str, tuple[np.ndarray, np.ndarray | None]]] = [{} for _ in indices]
        eps = list(by_ep)
        for c in range(0, len(eps), self.max_episodes):
            chunk = eps[c:c + self.max_episodes]
            for t in dict.fromkeys(where[by_ep[e][0]][0] for e in chunk):
                w.task(t)  # one open per task, before its episodes' threads

            def columns(e: int) -> list[tuple[tuple[int, str], Ask]]:
                t, n, _row, _e = where[by_ep[e][0]]
                view = w.view(t, n, self.index.episodes[e][2])
                todo = []
                for k in by_ep[e]:
                    plain[k], streams = self._plain(view, indices[k], where[k])
                    todo += [((e, key), Ask(k, kind, rows, pad, view)) for key, kind, rows, pad in streams]
                return todo

            groups: OrderedDict[tuple[int, str], list[Ask]] = OrderedDict()
            for todo in w.map(columns, chunk):
                for g, ask in todo:
                    groups.setdefault(g, []).append(ask)

            def decode(job: tuple[str, list[Ask]]) -> None:
                key, asks = job
                dec = self._decoder(w, asks[0].view, key, asks[0].kind)
                got = dec.frames(sorted({int(j) for a in asks for j in a.rows.tolist()}))
                rgb_cf = self.channels_first and getattr(dec, "kind", "depth") == "rgb"
                for a in asks:
                    arr = np.stack([got[j] for j in a.rows.tolist()])  # a copy: the decoder's cache stays private
                    if rgb_cf:
                        arr = np.moveaxis(arr, -1, -3)
                    frames[a.k][key] = (arr if a.pad is not None else arr[0], a.pad)

            jobs = [(g[1], asks) for g, asks in groups.items()]
            for d in range(0, len(jobs), self.max_open_streams):
                part = jobs[d:d + self.max_open_streams]
                if ahead and c + self.max_episodes >= len(eps) and d + len(part) == len(jobs):
                    # the batch's last streams are about to open: the next batch's opens overlap their decoding, with
                    # room for the decoders in use (never one closed under them: DecoderCache's rule; B15)
                    w.read_ahead(partial(self._open_ahead, w, ahead, self.max_open_streams - len(part)))
                    ahead = None
                w.map(decode, part)
        if ahead:  # a batch without streams: the next one opens while this one is consumed
            w.read_ahead(partial(self._open_ahead, w, ahead, self.max_open_streams))
        out = []
        for k in range(len(indices)):
            item = plain[k]
            for key, (value, pad) in frames[k].items():
                item[key] = value
                if pad is not None:
                    item[key + "_is_pad"] = pad
            out.append(self._to_output(item))
        return out

    def _open_ahead(self, w: Worker, indices: list[int], room: int) -> None:
        """Open what a batch of ``indices`` will read (its first ``max_episodes`` episodes, their columns, its
        first ``room`` streams) and decode nothing, on the worker's read-ahead threads: :mod:`egopool.dataset.read_ahead`."""
        first: OrderedDict[int, tuple[int, tuple[int, int, int, int]]] = OrderedDict()
        for i in indices:
            where = self.index.locate(i)
            first.setdefault(where[3], (i, where))
        eps = list(first.values())[:self.max_episodes]

        def episode(x: tuple[int, tuple[int, int, int, int]]) -> list[tuple[EpisodeView, str, str]]:
            i, (t, n, _row, e) = x
            view = w.view(t, n, self.index.episodes[e][2])
            return [(view, key, kind) for key, kind, _r, _p in self._plain(view, i, x[1])[1]]

        streams = [s for got in w.map_ahead(episode, eps) for s in got][:max(0, room)]
        w.map_ahead(lambda s: self._decoder(w, *s), streams)

    def _plain(self, view: EpisodeView, i: int, where: tuple[int, int, int, int]
               ) -> tuple[dict[str, Any], list[tuple[str, str, np.ndarray, np.ndarray | None]]]:
        """Item ``i``'s values that are not video frames, and its streams' ``(key, kind, rows, pad)``."""
        t, n, row, _e = where
        item: dict[str, Any] = {"index": np.int64(i if i >= 0 else i + len(self)), "task_index": np.int64(t),
                                "episode_index": np.int64(n), "frame_index": np.int64(row)}
        streams = []
        for key in self.keys:
            kind = "keypoints" if key.startswith("keypoints.") else view.kind(key)
            rows: np.ndarray | None
            rows, pad = self.windows.rows(key, row, view.length)
            if kind in ("rgb", "depth", "stream"):
                streams.append((key, kind, rows, pad))
                continue
            if kind == "force_matrix":
                value: Any = view.force_matrices(key, rows)
            elif kind == "column":
                value = view.column(key)[rows]
            elif kind == "keypoints":
                value = view.keypoints(key, self.mirror_root)[rows]
            else:
                value, pad = self._ragged(view, kind, key, row)
                rows = None
            if pad is not None:
                item[key + "_is_pad"] = pad
            item[key] = value if rows is None or pad is not None else value[0]
        return item, streams

    def _decoder(self, w: Worker, view: EpisodeView, key: str, kind: str
                 ) -> PngSequence | StreamDecoder | TorchcodecStream:
        path = view.stream_path(key)

        def make() -> PngSequence | StreamDecoder | TorchcodecStream:  # only for a stream not open yet: no stat (HEAD) per item
            if not path.suffix and path.is_dir():  # a legacy PNG16 directory (a video always has a suffix)
                return PngSequence(path)
            params = (lambda: view.depth_params(key)) if kind in ("depth", "stream") else None  # read if depth
            if self.decoder == "torchcodec":  # RGB by torchcodec, depth by egopool's decoder
                return open_stream(path, kind, params, w.blocks, self.cache_frames)
            return StreamDecoder(path, "auto" if kind == "stream" else kind, params, max_frames=self.cache_frames,
                                 cache=w.blocks)

        dec: PngSequence | StreamDecoder | TorchcodecStream = w.decoders.open(path, make)
        return dec

    def _ragged(self, view: EpisodeView, kind: str, key: str, row: int) -> tuple[np.ndarray, np.ndarray | None]:
        if kind == "imu":
            ts, values, offs = view.imu()
            data = ts if key == "imu_ts_ns" else values
        else:
            points, host, offs = view.trajectory(key)
            data = host if key.endswith("_ns") else points
        end = int(offs[row + 1])
        k = self.samples.get(key)
        if k is None:
            return data[int(offs[row]):end].copy(), None
        idx = np.arange(end - k, end)
        pad = idx < 0
        out = data[np.maximum(idx, 0)] if data.shape[0] else np.zeros((k, *data.shape[1:]), data.dtype)
        out[pad] = 0
        return out, pad

    def _to_output(self, item: dict[str, Any]) -> dict[str, Any]:
        if not self.as_torch:
            return item
        out: dict[str, Any] = {}
        for k, v in item.items():
            if isinstance(v, np.ndarray) and v.dtype != object:
                out[k] = torch.from_numpy(v)
            elif isinstance(v, np.generic) and not isinstance(v, np.str_):
                out[k] = torch.tensor(v.item())
            elif isinstance(v, np.ndarray):
                out[k] = v.tolist()
            else:
                out[k] = v
        return out
