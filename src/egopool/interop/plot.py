"""``egopool plot TASK N -o episode.png``: one overview sheet per episode (matplotlib, the ``interop`` extra).

The sheet (1600 x 1200 px) holds: every trajectory from the top and in 3-D (re-expressed in
``right_forward_up`` by its ``frame_axes`` words, so up is up whatever frame it was stored in),
the first and last RGB frame, IMU gyro and accel over their device clock, forces and gripper
state over the episode's ``timestamp``, the glove pressure heat maps (mean over the episode,
16 x 16) and the first and last depth frame (mm). Red lines mark ``hardware_ns`` gaps beyond
the frame interval (``egopool audit-gaps``), orange ticks rows flagged as duplicated frames
(``rgb_dup``/``depth_dup``); the title carries the ``drop_stats`` counters. A panel without
data says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import atomic_write_bytes
from ..arrowutil import list_column_to_numpy
from ..errors import EgopoolError, StorageError, install_hint
from ..gaps import audit_episode_gaps
from ..read.reader import Episode, open_task
from ..schema import signal_kind
from ._checks import check_output_file, episode_streams

__all__ = ["SHEET_PX", "plot_episode", "plot_episodes"]

#: Size of a sheet in pixels (width, height).
SHEET_PX = (1600, 1200)
_DPI = 100


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - installed with the extra
        raise EgopoolError("plots need matplotlib", hint=install_hint("interop")) from exc
    return plt


def _empty(ax: Any, text: str) -> None:
    if hasattr(ax, "text2D"):  # a 3-D axes
        ax.text2D(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    else:
        ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _vector(ep: Episode, name: str) -> np.ndarray | None:
    try:
        return list_column_to_numpy(ep.columns([name]).column(name)).astype(np.float64)
    except (ValueError, EgopoolError):
        return None


def _markers(ax: Any, t: np.ndarray, gap_rows: np.ndarray, dup_rows: np.ndarray) -> None:
    for r in gap_rows:
        ax.axvline(t[r], color="red", lw=0.8, alpha=0.7)
    if len(dup_rows):
        ax.plot(t[dup_rows], np.full(len(dup_rows), ax.get_ylim()[0]), "|", color="orange", ms=8)


def _frames(ep: Episode, key: str, depth: bool) -> tuple[np.ndarray, np.ndarray] | None:
    first = last = None
    for frame in (ep.depth(key) if depth else ep.video(key)):
        if first is None:
            first = frame
        last = frame
    return None if first is None or last is None else (first, last)


def _stream_kinds(ep: Episode) -> tuple[list[str], list[str]]:
    streams = episode_streams(ep)
    return ([k for k, v in streams.items() if v[0] == "rgb"], [k for k, v in streams.items() if v[0] == "depth"])


def plot_episode(ep: Episode) -> bytes:
    """Render episode ``ep``'s overview sheet; returns PNG bytes (:data:`SHEET_PX`)."""
    plt = _plt()
    fig = plt.figure(figsize=(SHEET_PX[0] / _DPI, SHEET_PX[1] / _DPI), dpi=_DPI)
    gs = fig.add_gridspec(4, 4, hspace=0.45, wspace=0.3)
    table = ep.columns([c for c in ("timestamp", "rgb_dup", "depth_dup") if c in ep.column_names])
    t = table.column("timestamp").to_numpy().astype(np.float64)
    dup = np.zeros(len(t), bool)
    for c in ("rgb_dup", "depth_dup"):
        if c in table.column_names:
            dup |= table.column(c).to_numpy(zero_copy_only=False) != 0
    dup_rows = np.flatnonzero(dup)
    gap_rows = np.zeros(0, np.int64)
    try:
        for series in audit_episode_gaps(ep).series:
            if series.column == "hardware_ns":
                gap_rows = np.asarray(series.rows, np.int64)
    except EgopoolError:
        pass
    meta = ep.meta if ep.files.meta is not None else {}
    raw_drops = meta.get("drop_stats")
    drops: dict[str, Any] = dict(raw_drops) if isinstance(raw_drops, Mapping) else {}
    seconds = t[-1] - t[0] + 1 / float(ep.task.info.get("fps") or 30)
    fig.suptitle(f"{ep.task.name}  episode N={ep.index}  {ep.length} rows ({seconds:.2f} s)"
                 f"  hardware_ns gaps: {len(gap_rows)}  drop_stats: {dict(drops) or '{}'}", fontsize=11)

    # trajectories: top view and 3-D, in right_forward_up
    ax_top = fig.add_subplot(gs[0, 0])
    ax_3d = fig.add_subplot(gs[0, 1], projection="3d")
    trajs = ep.trajectories()
    for col in trajs:
        tr = ep.trajectory(col)
        if not len(tr.points):
            continue
        p = tr.to_frame("right_forward_up").positions if tr.frame_axes else tr.positions
        label = col.removeprefix("observation.")
        ax_top.plot(p[:, 0], p[:, 1], lw=1, label=label)
        ax_top.plot(p[:1, 0], p[:1, 1], "o", ms=3, color="k")
        ax_3d.plot(p[:, 0], p[:, 1], p[:, 2], lw=1)
    if trajs:
        ax_top.set_title("trajectories, top view (m)", fontsize=9)
        ax_top.set_xlabel("right")
        ax_top.set_ylabel("forward")
        ax_top.axis("equal")
        ax_top.legend(fontsize=7)
        ax_3d.set_title("3-D (right, forward, up)", fontsize=9)
    else:
        _empty(ax_top, "no trajectory")
        _empty(ax_3d, "no trajectory")

    rgb, depth = _stream_kinds(ep)
    # first / last RGB frame of the first RGB stream
    for ax, which in ((fig.add_subplot(gs[0, 2]), 0), (fig.add_subplot(gs[0, 3]), 1)):
        if rgb:
            frames = _frames(ep, rgb[0], depth=False)
            if frames is not None:
                ax.imshow(frames[which])
                ax.set_title(f"{rgb[0]} {'first' if which == 0 else 'last'} frame", fontsize=9)
                ax.axis("off")
                continue
        _empty(ax, "no RGB stream")

    # IMU on its device clock
    ax_g = fig.add_subplot(gs[1, :2])
    ax_a = fig.add_subplot(gs[1, 2:])
    if "observation.imu" in ep.column_names and "imu_ts_ns" in ep.column_names and len(imu := ep.imu_samples()):
        s = imu.sorted()
        ti = (s.ts_ns - s.ts_ns[0]) / 1e9
        for ax, sl, unit, title in ((ax_g, slice(0, 3), "rad/s", "gyro"), (ax_a, slice(3, 6), "m/s²", "accel")):
            for j, axis in enumerate("xyz"):
                ax.plot(ti, s.values[:, sl][:, j], lw=0.8, label=axis)
            ax.set_title(f"IMU {title} ({len(s)} samples, device clock)", fontsize=9)
            ax.set_ylabel(unit)
            ax.set_xlabel("s since first sample")
            ax.legend(fontsize=7, loc="upper right")
    else:
        _empty(ax_g, "no IMU")
        _empty(ax_a, "no IMU")

    # forces and gripper state over the episode's timestamp
    ax_f = fig.add_subplot(gs[2, :2])
    ax_s = fig.add_subplot(gs[2, 2:])
    forces = [c for c in ep.column_names if signal_kind(c) == "force"]
    states = [c for c in ep.column_names if signal_kind(c) == "state"]
    for ax, cols, title, unit, comp in ((ax_f, forces, "force fz", "mN", 2),
                                        (ax_s, states, "gripper state: open %", "%", 0)):
        drawn = False
        for c in cols:
            v = _vector(ep, c)
            if v is None or v.shape[1] <= comp:
                continue
            ax.plot(t, v[:, comp], lw=0.9, label=c.removeprefix("observation."))
            drawn = True
        if drawn:
            ax.set_title(title, fontsize=9)
            ax.set_ylabel(unit)
            ax.set_xlabel("timestamp (s)")
            ax.legend(fontsize=7, loc="upper right")
            _markers(ax, t, gap_rows, dup_rows)
        else:
            _empty(ax, f"no {title.split(':')[0]}")

    # glove pressure heat maps (mean over the episode)
    for k, side in enumerate(("left_glove", "right_glove")):
        ax = fig.add_subplot(gs[3, k])
        v = _vector(ep, f"observation.{side}") if f"observation.{side}" in ep.column_names else None
        if v is None or v.shape[1] != 256:
            _empty(ax, f"no {side}")
            continue
        im = ax.imshow(v.mean(axis=0).reshape(16, 16), cmap="inferno")
        fig.colorbar(im, ax=ax, fraction=0.046)
        ax.set_title(f"{side} pressure, episode mean", fontsize=9)
        ax.axis("off")

    # first / last depth frame (mm)
    frames = _frames(ep, depth[0], depth=True) if depth else None
    for k, which in enumerate((0, 1)):
        ax = fig.add_subplot(gs[3, 2 + k])
        if frames is None:
            _empty(ax, "no depth stream")
            continue
        im = ax.imshow(frames[which], cmap="turbo", vmin=0)
        fig.colorbar(im, ax=ax, fraction=0.046, label="mm")
        ax.set_title(f"{depth[0]} {'first' if which == 0 else 'last'} depth (0 = none)", fontsize=9)
        ax.axis("off")

    from io import BytesIO

    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    plt.close(fig)
    return buf.getvalue()


def plot_episodes(task: str | Path, indices: Sequence[int], out: str | Path) -> list[Path]:
    """Write one PNG sheet per episode N; several N get ``_N<n>`` before the suffix of ``out``
    (an N given twice is drawn once).

    Every sheet is drawn before the first is written, so a damaged episode among good ones
    leaves no PNG at all (each file is written atomically).

    Raises
    ------
    EpisodeNotFoundError
        An N that is not in the task.
    EgopoolError
        ``out`` is in the task directory.
    FormatError, CodecError
        A file of an episode cannot be read (a stream its meta row describes is missing, a
        damaged video or parquet).
    StorageError
        A PNG cannot be written (``out`` is a directory, under a file, no permission).
    """
    t = open_task(task)
    out = Path(out)
    eps = [t.episode(n) for n in dict.fromkeys(indices)]  # an N given twice is drawn once
    paths = [out if len(eps) == 1 else out.with_name(f"{out.stem}_N{ep.index}{out.suffix or '.png'}") for ep in eps]
    for path in paths:
        check_output_file(path, t.path, what="the plot", example="episode.png")
    sheets = [plot_episode(ep) for ep in eps]
    for path, data in zip(paths, sheets, strict=True):
        with StorageError.guard(path, action="cannot write the plot"):
            atomic_write_bytes(path, data)
    return paths
