"""``delta_timestamps`` windows with LeRobot's meaning (lerobot 0.4.4 ``LeRobotDataset``).

A window ``{key: [seconds, ...]}`` asks, for the item at row ``r`` of an episode, the rows
``r + round(d * fps)`` for each offset ``d``. Each offset must be a whole number of frame
intervals within ``tolerance_s`` (else :class:`ValueError`, as lerobot's
``check_delta_timestamps``). A row before the episode's first or after its last is clamped to
that edge row and flagged in ``<key>_is_pad`` (True = padded), so a window always has the
asked length. Rows are frames: a pooled stream holds one frame per data row (file_format.md §8),
so the frame of row ``j`` is the stream's ``j``-th frame, whatever its stamp.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["WindowSpec", "delta_indices", "window_rows"]

#: lerobot's default tolerance (s) between an offset and a whole number of frame intervals.
DEFAULT_TOLERANCE_S = 1e-4


def delta_indices(delta_timestamps: Mapping[str, Sequence[float]], fps: float,
                  tolerance_s: float = DEFAULT_TOLERANCE_S) -> dict[str, np.ndarray]:
    """Offsets in s -> offsets in rows (``round(d * fps)``), per key.

    Returns
    -------
    dict
        key -> ``(T,)`` int64 row offsets, in the order given.

    Raises
    ------
    ValueError
        An offset that is not a finite number, an empty list, or an offset farther than
        ``tolerance_s`` from a multiple of ``1 / fps`` (named with the key and the fix).
    """
    out: dict[str, np.ndarray] = {}
    for key, deltas in delta_timestamps.items():
        values = list(deltas) if not isinstance(deltas, (str, bytes)) else None
        if not values:
            raise ValueError(f"delta_timestamps[{key!r}] must be a non-empty list of seconds, got {deltas!r}")
        rows = []
        for d in values:
            if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or not math.isfinite(d):
                raise ValueError(f"delta_timestamps[{key!r}] holds {d!r}, not a finite number of seconds")
            k = round(float(d) * fps)
            if abs(float(d) * fps - k) / fps > tolerance_s:
                raise ValueError(f"delta_timestamps[{key!r}] offset {d} s is not a multiple of 1/{fps:g} s "
                                 f"(±{tolerance_s} s): use e.g. {k / fps:.6f}")
            rows.append(k)
        out[key] = np.asarray(rows, dtype=np.int64)
    return out


def window_rows(row: int, length: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of one window and its pad flags.

    Parameters
    ----------
    row:
        The item's row (``frame_index``) in its episode.
    length:
        Rows of the episode.
    offsets:
        ``(T,)`` int64 from :func:`delta_indices`.

    Returns
    -------
    (rows, is_pad):
        ``(T,)`` int64 rows clamped into ``[0, length)`` and ``(T,)`` bool, True where the
        asked row lies outside the episode.
    """
    want = row + offsets
    return np.clip(want, 0, length - 1), (want < 0) | (want >= length)


class WindowSpec:
    """Per-key row offsets of a dataset (empty: one row per key, no ``_is_pad``)."""

    def __init__(self, delta_timestamps: Mapping[str, Sequence[float]] | None, fps: float,
                 tolerance_s: float = DEFAULT_TOLERANCE_S) -> None:
        self.offsets = delta_indices(delta_timestamps or {}, fps, tolerance_s)

    def rows(self, key: str, row: int, length: int) -> tuple[np.ndarray, np.ndarray | None]:
        """``(rows, is_pad)`` of ``key`` for the item at ``row``; ``is_pad`` None for a key without a window."""
        offs = self.offsets.get(key)
        if offs is None:
            return np.asarray([row], dtype=np.int64), None
        return window_rows(row, length, offs)
