"""One SLAM trajectory column of an episode, decoded (multi_device_storage.md §4.6, §6.6, §8.3).

:meth:`egopool.read.episode.Episode.trajectory` gives a :class:`Trajectory`; frames and the relative
convention are switched here, pairing points with data rows is :meth:`Trajectory.pair_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codecs import slam as _slam
from ..codecs.timebase import pair_nearest
from ..errors import SchemaError
from ..frames import frame_id_of, resolve_axes

__all__ = ["Trajectory"]


@dataclass(frozen=True)
class Trajectory:
    """One SLAM trajectory column of one episode (multi_device_storage.md §4.6, §6.6, §8.3).

    Attributes
    ----------
    column:
        ``observation.*slam_trajectory``.
    points:
        ``(K, 8)`` float64 ``[t, x, y, z, qx, qy, qz, qw]``; ``t`` in s of the SLAM sensor
        clock (NOT host time), xyz in m, quaternion xyzw.
    host_ns:
        ``(K,)`` int64 host-monotonic ns of each point from the ``_ns`` column; 0 = no
        stamp; all zeros when the episode has no ``_ns`` column.
    rows:
        ``(K,)`` int64 data row (``frame_index``) each point was attached to.
    frame, frame_axes:
        Coordinate frame; a missing ``frame`` means ``right_forward_up`` (§3.1 rule 1).
    spec:
        The full declaration used (episode ``slam_specs`` first, then ``info.features``).
    """

    column: str
    points: np.ndarray
    host_ns: np.ndarray
    rows: np.ndarray
    frame: str
    frame_axes: dict[str, str]
    spec: dict[str, Any]

    @property
    def has_host_ns(self) -> bool:
        """True when the episode stored a ``_ns`` column for this trajectory."""
        return bool(self.spec.get("_has_ns", False))

    @property
    def sensor_t(self) -> np.ndarray:
        """``(K,)`` float64 ``t`` in s of the SLAM sensor clock: only for intervals inside the
        trajectory, never host time (multi_device_storage.md §3.1)."""
        return self.points[:, 0]

    @property
    def positions(self) -> np.ndarray:
        """``(K, 3)`` float64 xyz in m, in :attr:`frame`."""
        return self.points[:, 1:4]

    @property
    def quaternions(self) -> np.ndarray:
        """``(K, 4)`` float64 orientations ``[qx, qy, qz, qw]``, in :attr:`frame`."""
        return self.points[:, 4:8]

    def to_frame(self, frame: str | Mapping[str, str]) -> Trajectory:
        """The same trajectory re-expressed in another frame (file_format.md §3.1, DESIGN §9).

        The rotation comes from the two ``frame_axes`` direction words only; ``t``,
        ``host_ns`` and ``rows`` are unchanged; distances and angles are kept exactly.

        Parameters
        ----------
        frame:
            A registered frame id (``down_left_forward``, ``right_forward_up``,
            ``ego_cam_optical``...) or an explicit ``frame_axes`` mapping.

        Raises
        ------
        SchemaError
            Unknown frame id or malformed ``frame_axes``.
        """
        if not self.frame_axes:
            raise SchemaError(f"frame {self.frame!r} is not registered and the column declares no frame_axes",
                              column=self.column, hint="register it with egopool.frames.register_frame")
        dst = resolve_axes(frame)
        fid = frame if isinstance(frame, str) else (frame_id_of(dst) or "custom")
        try:
            src = resolve_axes(self.frame_axes)
        except SchemaError as exc:
            raise SchemaError(f"declared frame {self.frame!r}: {exc.message}", column=self.column,
                              hint="fix frame_axes in the episode's slam_specs or info.json features") from exc
        pts = _slam.convert_points(self.points, src, dst)
        spec = {**self.spec, "frame": fid, "frame_axes": dict(dst)}
        return Trajectory(self.column, pts, self.host_ns.copy(), self.rows.copy(), fid, dict(dst), spec)

    def switch_relative_convention(self, anchor: np.ndarray, src: str, dst: str) -> Trajectory:
        """Re-express orientations between ``R0ᵀ·R`` (``"left"``, apps ≤ 1.3.13) and ``R·R0ᵀ``
        (``"right"``, 1.3.14+) given the anchor orientation ``R0`` (xyzw); positions stay
        (file_format.md §3.1 rule 3). The stored data cannot tell which one it holds."""
        pts = self.points.copy()
        pts[:, 4:8] = _slam.switch_relative_convention(self.points[:, 4:8], anchor, src, dst)
        return Trajectory(self.column, pts, self.host_ns.copy(), self.rows.copy(), self.frame,
                          dict(self.frame_axes), dict(self.spec))

    def pair_rows(self, hardware_ns: np.ndarray, max_dt_ns: int | None = None) -> np.ndarray:
        """Data row of each point: nearest ``hardware_ns`` to the point's ``_ns`` stamp.

        ``searchsorted`` nearest neighbour on the host-monotonic clock; a 0 stamp on
        either side never pairs; no offset is fitted and ``t`` is never used
        (multi_device_storage.md §3.1, §5.3, §8.2.4).

        Parameters
        ----------
        hardware_ns:
            ``(R,)`` int64 per data row (see :meth:`Episode.hardware_ns`).
        max_dt_ns:
            Leave points farther than this from every row unpaired.

        Returns
        -------
        numpy.ndarray
            ``(K,)`` int64 row index, -1 for unpaired points.
        """
        return pair_nearest(self.host_ns, hardware_ns, max_dt_ns)

