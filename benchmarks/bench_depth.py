"""Depth video on real Kinect frames: 12-bit HEVC log code vs FFV1 lossless vs raw (DESIGN §3).

Run from the repository root::

    python benchmarks/bench_depth.py [--repeat 3] [--frames DIR]

Input: the 30 uint16-mm depth PNGs of tests/data/sevenscenes_tsdf_fusion (640x480,
Microsoft 7-Scenes via Open3D; holes are 0). For each codec it prints encode and
decode frames/s (median of ``--repeat`` runs, single process), file size against the
raw uint16 bytes and against FFV1, relative error median/p99 on all valid pixels,
away from depth edges and on them (edge = within 2 px of a hole or of a >5 % jump
between neighbours), and holes kept / holes created. Baselines, measured in the same
run: FFV1 gray16le (lossless) for size and speed, raw bytes for size, and the log code
alone (numpy encode + decode, no video codec) for speed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from egopool.codecs.depth import DepthEncoder, LogDepthCodec, hevc12_available, read_depth_frames  # noqa: E402
from egopool.codecs.depth_error import depth_error_report  # noqa: E402


def load(folder: Path) -> np.ndarray:
    files = sorted(folder.glob("*.depth.png"))
    if not files:
        raise SystemExit(f"no *.depth.png in {folder}")
    return np.stack([np.asarray(Image.open(f)) for f in files])


def run_codec(frames: np.ndarray, codec: str, out: Path) -> tuple[float, float, np.ndarray]:
    t0 = time.perf_counter()
    enc = DepthEncoder(out, frames.shape[2], frames.shape[1], 30.0, codec=codec)
    for f in frames:
        enc.encode(f)
    enc.close()
    t_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    dec = np.stack(list(read_depth_frames(out)))
    t_dec = time.perf_counter() - t0
    return t_enc, t_dec, dec


def compare_presets(frames: np.ndarray) -> int:
    """x265 presets of the 12-bit log depth: process CPU ms per frame (load-independent), size and error."""
    import resource

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    n, h, w = frames.shape
    tmp = Path(tempfile.mkdtemp(prefix="egopool-bench-depth-"))
    print(f"{'x265 preset':12}{'CPU ms/frame':>14}{'kB/frame':>10}{'non-edge p99':>14}{'p99':>9}{'holes kept':>12}"
          f"{'created':>9}")
    try:
        for preset in ("veryfast", "superfast", "ultrafast"):
            out = tmp / f"{preset}.mp4"
            c0 = cpu()
            enc = DepthEncoder(out, w, h, 30.0, preset=preset)
            for f in frames:
                enc.encode(f)
            enc.close()
            ms = (cpu() - c0) / n * 1000
            r = depth_error_report(frames, np.stack(list(read_depth_frames(out))))
            print(f"{preset:12}{ms:14.1f}{out.stat().st_size / n / 1000:10.1f}{r.p99_non_edge:14.2%}{r.p99:9.2%}"
                  f"{r.holes_kept:12,d}{r.holes_created:9,d}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--frames", type=Path, default=ROOT / "tests" / "data" / "sevenscenes_tsdf_fusion")
    ap.add_argument("--presets", action="store_true", help="only compare x265 presets (CPU ms/frame, size, error)")
    args = ap.parse_args(argv)
    if args.presets:
        return compare_presets(load(args.frames))

    frames = load(args.frames)
    n, h, w = frames.shape
    raw = frames.nbytes
    print(f"{n} depth frames {w}x{h} uint16 mm from {args.frames.relative_to(ROOT) if args.frames.is_relative_to(ROOT) else args.frames}; "
          f"raw {raw / 1e6:.2f} MB; holes {(frames == 0).mean():.1%} of pixels")
    codecs = ["hevc12", "ffv1"] if hevc12_available() else ["ffv1"]
    if "hevc12" not in codecs:
        print("libx265 without gray12le in this PyAV: only FFV1 measured")
    tmp = Path(tempfile.mkdtemp(prefix="egopool-bench-depth-"))
    results = {}
    try:
        for codec in codecs:
            out = tmp / f"depth.{DepthEncoder.ext_for(codec)}"
            encs, decs = [], []
            for _ in range(args.repeat):
                t_enc, t_dec, dec = run_codec(frames, codec, out)
                encs.append(t_enc)
                decs.append(t_dec)
            results[codec] = (statistics.median(encs), statistics.median(decs), out.stat().st_size, dec)

        lc = LogDepthCodec()
        t_lc_enc, t_lc_dec = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            codes = [lc.encode(f) for f in frames]
            t_lc_enc.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for c in codes:
                lc.decode(c)
            t_lc_dec.append(time.perf_counter() - t0)

        ffv1_size = results["ffv1"][2]
        print(f"\nmedian of {args.repeat} runs")
        print(f"{'codec':28}{'enc fps':>9}{'dec fps':>9}{'bytes':>11}{'vs raw':>8}{'vs FFV1':>9}")
        for codec, (te, td, size, _) in results.items():
            name = "hevc12 (log code, qp=6)" if codec == "hevc12" else "ffv1 gray16le (lossless)"
            print(f"{name:28}{n / te:9.1f}{n / td:9.1f}{size:11,d}{raw / size:7.1f}x{ffv1_size / size:8.2f}x")
        print(f"{'raw uint16':28}{'':9}{'':9}{raw:11,d}{1.0:7.1f}x{ffv1_size / raw:8.2f}x")
        print(f"{'log code only (numpy)':28}{n / statistics.median(t_lc_enc):9.1f}{n / statistics.median(t_lc_dec):9.1f}")

        print("\nrelative error |decoded - orig| / orig over valid pixels; edges = within 2 px of a hole "
              "or a >5 % jump")
        print(f"{'codec':10}{'median':>9}{'p99':>9}{'max':>9}{'non-edge med':>14}{'non-edge p99':>14}"
              f"{'edge med':>10}{'edge p99':>10}{'holes':>10}{'kept':>10}{'created':>9}")
        for codec, (_, _, _, dec) in results.items():
            r = depth_error_report(frames, dec)
            print(f"{codec:10}{r.median:9.4%}{r.p99:9.4%}{r.max:9.3%}{r.median_non_edge:14.4%}{r.p99_non_edge:14.4%}"
                  f"{r.median_edge:10.4%}{r.p99_edge:10.4%}{r.holes:10,d}{r.holes_kept:10,d}{r.holes_created:9,d}")
            if codec == "ffv1":
                print(f"ffv1 bit-exact: {bool(np.array_equal(dec, frames))}")
        if "hevc12" in results:
            te, td, size, _ = results["hevc12"]
            fe, fd, _, _ = results["ffv1"]
            print(f"\nratio hevc12 / ffv1: size {size / ffv1_size:.2f}, encode time {te / fe:.1f}x, "
                  f"decode time {td / fd:.1f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
