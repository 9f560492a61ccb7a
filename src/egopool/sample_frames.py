"""Real frames pre-rendered at any size: what the simulated cameras hand over and what the
capacity measurement encodes (issue 11, issue 20).

* :func:`video_pool`: 16 consecutive frames of the bundled hand video
  (``samples/dexretarget_hand_video``), yuv420p planes (what a camera's decoder hands over);
* :func:`depth_pool`: 16 frames of the bundled real TUM RGB-D depth frame
  (``samples/open3d_tum_frame``), uint16 mm with its holes, panned across the scene;
* :func:`force_matrix_pool`: 12 frames of a Gaussian contact patch sliding across a 250×250×3
  mN force matrix (multi_device_storage.md §4.6), representable at scale 10.
"""

from __future__ import annotations

import functools
from importlib import resources

import av
import numpy as np

__all__ = ["POOL_FRAMES", "depth_pool", "force_matrix_pool", "video_pool"]

#: Frames in each pool (cycled by the simulated cameras).
POOL_FRAMES = 16


@functools.lru_cache(maxsize=8)
def video_pool(width: int, height: int) -> tuple[np.ndarray, ...]:
    """16 consecutive real frames (the bundled hand video), pre-rendered once at ``width``×``height``:
    yuv420p planes ``(H·3/2, W)`` (what a camera's decoder hands over) for even sizes, else RGB
    ``(H, W, 3)``. Read-only: many streams share them."""
    ref = resources.files("egopool") / "samples" / "dexretarget_hand_video" / "human_hand_video.mp4"
    fmt = "yuv420p" if width % 2 == 0 and height % 4 == 0 else "rgb24"  # the planes wrap back exactly
    out: list[np.ndarray] = []
    with resources.as_file(ref) as p, av.open(str(p)) as c:
        for frame in c.decode(video=0):
            arr = frame.reformat(width=width, height=height, format=fmt).to_ndarray()
            arr.setflags(write=False)
            out.append(arr)
            if len(out) == POOL_FRAMES:
                break
    return tuple(out)


@functools.lru_cache(maxsize=8)
def depth_pool(width: int, height: int) -> tuple[np.ndarray, ...]:
    """16 depth frames (uint16 mm) pre-rendered from the bundled real TUM RGB-D depth frame
    (depth factor 5000/m -> mm, holes kept), scaled to ``width``×``height`` and panned across the
    scene, so the depth encoder sees real depth edges and holes. Read-only, shared."""
    from PIL import Image

    ref = resources.files("egopool") / "samples" / "open3d_tum_frame" / "TUM_depth.png"
    with resources.as_file(ref) as p:
        raw = np.asarray(Image.open(p)).astype(np.uint32)
    mm = np.rint(raw / 5.0).astype(np.uint16)  # TUM: 5000 units per metre
    big = np.asarray(Image.fromarray(mm).resize((width, height), Image.Resampling.NEAREST))
    step = max(1, width // 64)
    out = []
    for i in range(POOL_FRAMES):
        f = np.roll(big, i * step, axis=1)
        f.setflags(write=False)
        out.append(f)
    return tuple(out)


@functools.lru_cache(maxsize=8)
def force_matrix_pool(seed: int) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    """12 force-matrix frames (float32 mN ``(250, 250, 3)``, fx fy fz per taxel, multiples of 0.1 mN)
    of a contact patch sliding across the sensor, and each frame's ``[Σfx, Σfy, Σfz]`` (float32 mN
    ``(3,)``), deterministic for ``seed``. Read-only, shared."""
    y, x = np.mgrid[0:250, 0:250].astype(np.float32)
    rng = np.random.default_rng(seed)
    frames, sums = [], []
    for i in range(12):
        cx, cy = 80 + 7 * i, 125 + 20 * np.sin(i / 2)
        g = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * 14.0 ** 2))
        fz = 18.0 * g + rng.uniform(0, 0.05, g.shape)
        m = np.stack([0.12 * fz * np.cos(i / 3), 0.12 * fz * np.sin(i / 3), fz], axis=-1).astype(np.float32)
        f = np.round(m * 10) / 10  # representable at scale 10
        f.setflags(write=False)
        frames.append(f)
        sums.append(f.reshape(-1, 3).sum(axis=0, dtype=np.float64).astype(np.float32))
    return tuple(frames), tuple(sums)
