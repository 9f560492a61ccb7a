"""``egopool compress``: CPU-seconds per recorded second of depth, and the bytes it saves (issue 20).

Run from the repository root::

    python benchmarks/bench_compress.py [--seconds 5] [--scale 1] [--preset veryfast]

Two tasks recorded losslessly (``--depth-codec ffv1``) in a temp directory: the 30 real 7-Scenes
Kinect frames (640x480, ``import rgbd-frames``) and a simulated two-D435 rig (``simulate --rig d435x2``,
``--seconds`` per episode, one episode, frame size divided by ``--scale``). For each, ``compress_task``
is timed (process CPU seconds from ``getrusage``, every thread: x265's pool, the decoders, the
check) and divided by the recorded seconds of depth (frames / fps, summed over streams); bytes
before (FFV1) and after (HEVC) give the ratio. Baselines measured in the same run on the same frames:
the plain 12-bit HEVC encode without the check (what the recorder would have paid in real time) and
the FFV1 encode (what it paid instead). The load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from egopool.cli.app import main as cli  # noqa: E402
from egopool.codecs.depth import DepthEncoder, read_depth_frames  # noqa: E402
from egopool.importers.rgbd_frames import import_rgbd_frames  # noqa: E402
from egopool.meta.info import read_info  # noqa: E402
from egopool.ops import compress_task  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def encode_cost(files: list[Path], fps: float, codec: str, preset: str, tmp: Path) -> float:
    """CPU seconds to encode the frames of ``files`` with ``codec`` (frames decoded beforehand, not counted)."""
    total = 0.0
    for i, f in enumerate(files):
        frames = np.stack(list(read_depth_frames(f)))
        c0 = cpu()
        enc = DepthEncoder(tmp / f"base{i}.{DepthEncoder.ext_for(codec)}", frames.shape[2], frames.shape[1], fps,
                           codec=codec, preset=preset)
        for fr in frames:
            enc.encode(fr)
        enc.close()
        total += cpu() - c0
    return total


def measure(name: str, task: Path, preset: str, tmp: Path) -> None:
    fps = float(read_info(task)["fps"])
    files = sorted(task.glob("videos/*/*/*.mkv"))
    frames = sum(len(list(read_depth_frames(f))) for f in files)
    h, w = next(read_depth_frames(files[0])).shape
    seconds = frames / fps
    hevc = encode_cost(files, fps, "hevc12", preset, tmp)
    ffv1 = encode_cost(files, fps, "ffv1", preset, tmp)
    c0, t0 = cpu(), time.perf_counter()
    report = compress_task(task, preset=preset)
    c, t = cpu() - c0, time.perf_counter() - t0
    assert report.committed
    print(f"\n{name}: {len(files)} depth stream(s) {w}x{h}, {frames} frames = {seconds:.1f} recorded s at {fps:g} fps")
    print(f"  compress          {c / seconds:6.2f} CPU-s per recorded s  (wall {t:.1f} s)")
    print(f"  hevc12 encode     {hevc / seconds:6.2f} CPU-s per recorded s  (compress / encode = {c / hevc:.2f}x)")
    print(f"  ffv1 encode       {ffv1 / seconds:6.2f} CPU-s per recorded s  (compress / ffv1 = {c / ffv1:.2f}x)")
    print(f"  bytes             {report.bytes_before:,d} FFV1 -> {report.bytes_after:,d} HEVC "
          f"({report.bytes_before / report.bytes_after:.1f}x smaller); max error {report.max_error_mm:.0f} mm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of the simulated episode (s)")
    ap.add_argument("--scale", type=int, default=1, help="divide the simulated frame size by this")
    ap.add_argument("--preset", default="veryfast", help="x265 preset (docs/decisions.md #11)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="egopool-bench-compress-"))
    try:
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
        import_rgbd_frames(ROOT / "tests/data/sevenscenes_tsdf_fusion", tmp / "rec", task="seven",
                           frame="ego_cam_optical", depth_codec="ffv1")
        measure("7-Scenes (real Kinect depth)", tmp / "rec" / "seven", args.preset, tmp)
        code = cli(["simulate", "--rig", "d435x2", "--scale", str(args.scale), "--depth-codec", "ffv1",
                    "--episodes", "1", "--seconds", str(args.seconds), "--out", str(tmp / "rec"), "--task", "sim"])
        if code:
            return code
        measure("simulated d435x2", tmp / "rec" / "sim", args.preset, tmp)
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
