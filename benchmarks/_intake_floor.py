"""The decode floor of the intake's verification, and the verification's CPU against it (issue 29).

Used by ``bench_upload.py --floor``: for one episode set (upload zips), in one process, alternately:

* **floor**: every video member of every zip decoded with PyAV alone, every frame (what the
  validator's decode check must do at the least; the same thread settings: frames up to 320x240 in
  the calling thread, larger ones with FFmpeg's slice threads);
* **verify**: :func:`egopool.server.verify.verify_upload` on the same zips, in this process, into a
  fresh staging directory each (every check of the intake but the publish: zip checks, extraction
  with sha256, the footer and frame-size bounds, the validator, the stats blocks).

CPU is ``time.process_time()`` (every thread of the process, user + system), in seconds per MB of
zip. The ratio verify / floor is what issue 29 bounds (<= 1.3 for large episodes); the small
episodes' fixed cost shows as ms of CPU per episode.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import av

from egopool.codecs.decode_scan import SINGLE_THREAD_PIXELS
from egopool.server.verify import verify_upload
from egopool.server.zipcheck import Limits


@dataclass
class FloorResult:
    """CPU seconds of one pass over the set: ``floor`` (decode only), ``verify`` (the intake's checks)."""

    zips: int
    mb: float
    floor_s: float
    verify_s: float

    @property
    def ratio(self) -> float:
        return self.verify_s / self.floor_s if self.floor_s > 0 else float("inf")


def decode_floor(zips: list[Path], scratch: Path) -> float:
    """CPU seconds to decode every frame of every video member of ``zips`` with PyAV alone."""
    videos: list[Path] = []
    for k, z in enumerate(zips):  # extracted once, outside the measurement (the verification extracts too)
        with zipfile.ZipFile(z) as zf:
            for name in zf.namelist():
                if name.startswith("videos/"):
                    dst = scratch / f"{k}" / name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(name) as src, open(dst, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                    videos.append(dst)
    gc.collect()
    t = time.process_time()
    for v in videos:
        with av.open(str(v)) as c:
            s = c.streams.video[0]
            if s.codec_context.width * s.codec_context.height <= SINGLE_THREAD_PIXELS:
                s.thread_count = 1
            for _ in c.decode(s):
                pass
    return time.process_time() - t


def verify_cpu(zips: list[Path], scratch: Path) -> float:
    """CPU seconds of :func:`verify_upload` on every zip (each into its own staging directory)."""
    limits = Limits()
    gc.collect()
    t = time.process_time()
    for k, z in enumerate(zips):
        staging = scratch / f"v{k}" / "task"
        staging.mkdir(parents=True)
        verify_upload(z, staging, limits, form_index=None, client_key=None, token_id=None)
    return time.process_time() - t


def measure(zips: list[Path], rounds: int = 2) -> FloorResult:
    """The least CPU of ``rounds`` alternating passes of each (the machine is shared: the least is the cost)."""
    floor, ver = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="egopool-floor-") as tmp:
            floor.append(decode_floor(zips, Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="egopool-verify-") as tmp:
            ver.append(verify_cpu(zips, Path(tmp)))
    mb = sum(z.stat().st_size for z in zips) / 1e6
    return FloorResult(len(zips), mb, min(floor), min(ver))


def report(name: str, r: FloorResult) -> str:
    """One line: CPU s/MB of each, the ratio, ms per episode."""
    return (f"{name:34}{r.zips:5d} zips {r.mb:8.1f} MB  floor {r.floor_s / r.mb * 1e3:7.1f} ms/MB "
            f"({r.floor_s / r.zips * 1e3:7.1f} ms/ep)  verify {r.verify_s / r.mb * 1e3:7.1f} ms/MB "
            f"({r.verify_s / r.zips * 1e3:7.1f} ms/ep)  ratio {r.ratio:5.2f}x")
