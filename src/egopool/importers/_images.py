"""Image files of the importers (Pillow), with errors that name the file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .._safe_read import open_regular
from ..errors import FormatError

__all__ = ["DEPTH_MODES", "image_header", "read_depth_mm", "read_gray", "read_rgb"]

#: Pillow modes a 16-bit depth PNG opens as.
DEPTH_MODES = ("I;16", "I;16B", "I;16L", "I")


@contextlib.contextmanager
def _open(path: Path) -> Iterator[Image.Image]:
    """The image, opened only when ``path`` is a regular file (a FIFO blocked Pillow forever); a missing
    file or a FIFO, directory or socket in its place is a FormatError naming it (``_safe_read``)."""
    with open_regular(path, what="image file") as fh:
        try:
            im = Image.open(fh)
        except (UnidentifiedImageError, OSError) as exc:
            raise FormatError(f"not a readable image: {exc}", path=path) from exc
        with im:
            yield im


def image_header(path: Path) -> tuple[int, int, str]:
    """``(width, height, mode)`` from the file header, without decoding pixels."""
    with _open(path) as im:
        return im.width, im.height, im.mode


def read_rgb(path: Path) -> np.ndarray:
    """Decode a colour (or gray) image to uint8 ``(H, W, 3)`` RGB."""
    try:
        with _open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot decode image: {exc}", path=path) from exc


def read_gray(path: Path) -> np.ndarray:
    """Decode an 8-bit gray image to uint8 ``(H, W)`` (colour images are converted to luma)."""
    try:
        with _open(path) as im:
            return np.asarray(im.convert("L"), dtype=np.uint8)
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot decode image: {exc}", path=path) from exc


def read_depth_mm(path: Path, units_per_mm: int = 1) -> np.ndarray:
    """Decode a 16-bit depth PNG to uint16 mm ``(H, W)``; 0 stays 0 (hole).

    Parameters
    ----------
    units_per_mm:
        Raw units per millimetre: 1 for mm PNGs (7-Scenes), 5 for TUM's factor-5000 PNGs
        (``mm = round(v / 5)``, half to even).

    Raises
    ------
    FormatError
        Not a 16-bit single-channel image, or values outside 0..65535.
    """
    try:
        with _open(path) as im:
            if im.mode not in DEPTH_MODES:
                raise FormatError(f"depth image has mode {im.mode!r}; expected a 16-bit single-channel PNG",
                                  path=path)
            raw = np.asarray(im)
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot decode depth image: {exc}", path=path) from exc
    if raw.dtype != np.uint16:
        if raw.size and (raw.min() < 0 or raw.max() > 65535):
            raise FormatError("depth values outside 0..65535", path=path)
        raw = raw.astype(np.uint16)
    if units_per_mm == 1:
        return raw
    return np.rint(raw / float(units_per_mm)).astype(np.uint16)
