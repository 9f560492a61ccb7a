"""What reading a full-rig episode's force matrices costs the intake, per writer option (issue 29; U43-U47).

The verification reads the data parquet's four ``list<int16>`` force-matrix columns (187,500 values a row) for
their row lengths and the saturated-cell count (``validate/data.py``, ``validate/changes.py``). This rewrites
one episode's data parquet with each writer option (the same row groups, every other setting as
``EpisodeWriter``'s) and measures, alternately round by round in one process:

* **size** of the file (MB: what an upload carries) and the CPU to write it;
* **read**: CPU of what the row checks do with those columns (``iter_batches`` in ``batch_rows`` batches, one
  thread; offsets, values, ``may_saturate``), and the ratio to the file as written today.

``--read-options`` also times pyarrow's reading options on today's file (batch sizes, ``read_row_group``,
``pre_buffer``, ``buffer_size``, memory map) and ``ParquetReader.scan_contents`` (pages and levels decoded,
nothing assembled: pyarrow's own floor, which yields no values). CPU is ``time.process_time()``.

    python benchmarks/bench_matrix_read.py --seconds 4 --rounds 5 [--read-options] [--uncompressed]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

from egopool.arrowutil import list_offsets  # noqa: E402
from egopool.codecs.force_matrix import may_saturate  # noqa: E402
from egopool.validate.data import batch_rows  # noqa: E402


def matrix_columns(pf: pq.ParquetFile) -> list[str]:
    return [f.name for f in pf.schema_arrow if f.name.endswith("force_matrix")]


def variants(src: Path, uncompressed: bool) -> dict[str, dict[str, Any]]:
    """Name -> ``ParquetWriter`` options over the writer's (zstd, no dictionary, no statistics)."""
    md = pq.ParquetFile(src).metadata
    paths = [md.schema.column(i).path for i in range(md.num_columns)]
    leaf = {p for p in paths if p.split(".list.")[0].endswith("force_matrix")}

    def codec(c: str) -> dict[str, str]:
        return {p: (c if p in leaf else "zstd") for p in paths}

    def level(n: int) -> dict[str, int]:
        return {p: (n if p in leaf else 1) for p in paths}

    out: dict[str, dict[str, Any]] = {
        "as written": {}, "zstd 6": {"compression_level": level(6)}, "zstd 9": {"compression_level": level(9)},
        "lz4": {"compression": codec("lz4")}, "snappy": {"compression": codec("snappy")},
        "page v2": {"data_page_version": "2.0"}, "page v2 + lz4": {"data_page_version": "2.0", "compression": codec("lz4")},
        "pages 64 KiB": {"data_page_size": 64 << 10}, "pages 8 MiB": {"data_page_size": 8 << 20},
        "byte_stream_split": {"column_encoding": {p: "BYTE_STREAM_SPLIT" for p in leaf}},
        "delta_binary_packed": {"column_encoding": {p: "DELTA_BINARY_PACKED" for p in leaf}},
        "dictionary": {"use_dictionary": sorted(leaf)}, "one row group": {"one_row_group": True},
    }
    if uncompressed:
        out["uncompressed"] = {"compression": codec("none")}
    return out


def rewrite(src: Path, dst: Path, options: dict[str, Any]) -> float:
    """``src`` written again to ``dst`` with ``options``; returns the CPU seconds of the write."""
    opts = dict(options)
    one = opts.pop("one_row_group", False)
    kw: dict[str, Any] = {"compression": "zstd", "use_dictionary": False, "write_statistics": False, **opts}
    pf = pq.ParquetFile(src)
    tables = [pf.read()] if one else [pf.read_row_group(i) for i in range(pf.num_row_groups)]
    t = time.process_time()
    with pq.ParquetWriter(dst, pf.schema_arrow, **kw) as w:
        for tb in tables:
            w.write_table(tb, row_group_size=tb.num_rows)
    return time.process_time() - t


def read_like_checks(path: Path, batch: int | None = None, **open_kw: Any) -> float:
    """CPU seconds of the row checks' work on the matrix columns of ``path``."""
    pf = pq.ParquetFile(path, **open_kw)
    cols = matrix_columns(pf)
    gc.collect()
    t = time.process_time()
    for rb in pf.iter_batches(batch_size=batch or batch_rows(pf, cols), columns=cols, use_threads=False):
        for c in cols:
            a = rb.column(c)
            np.diff(list_offsets(a))
            may_saturate(a.flatten().to_numpy(zero_copy_only=False))
    dt = time.process_time() - t
    pf.close()
    return dt


def _reader(path: Path) -> Callable[[], float]:
    return lambda: read_like_checks(path)


def read_options(path: Path) -> dict[str, Callable[[], float]]:
    def by_row_group() -> float:
        pf = pq.ParquetFile(path)
        cols = matrix_columns(pf)
        t = time.process_time()
        for i in range(pf.num_row_groups):
            pf.read_row_group(i, columns=cols, use_threads=False)
        return time.process_time() - t

    def scan() -> float:
        pf = pq.ParquetFile(path)
        cols = set(matrix_columns(pf))
        idx = [i for i in range(pf.metadata.num_columns)
               if pf.metadata.schema.column(i).path.split(".list.")[0] in cols]
        t = time.process_time()
        pf.reader.scan_contents(idx, 65536)
        return time.process_time() - t

    return {"batch_rows (today)": lambda: read_like_checks(path), "1 row": lambda: read_like_checks(path, 1),
            "4 rows": lambda: read_like_checks(path, 4), "64 rows": lambda: read_like_checks(path, 64),
            "pre_buffer": lambda: read_like_checks(path, pre_buffer=True),
            "buffer_size 1 MiB": lambda: read_like_checks(path, buffer_size=1 << 20),
            "memory_map": lambda: read_like_checks(path, memory_map=True),
            "read_row_group (no checks)": by_row_group, "scan_contents (no values)": scan}


def alternate(fns: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            res[k].append(f())
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="a full-rig data parquet (default: record one with simulate)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of the recorded episode (default 4)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--read-options", action="store_true", help="also pyarrow's reading options on today's file")
    ap.add_argument("--uncompressed", action="store_true", help="also the matrices without compression (~90x larger)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="egopool-matrix-") as tmp:
        work = Path(tmp)
        data = args.data
        if data is None:
            subprocess.run([sys.executable, "-m", "egopool", "simulate", "--rig", "full", "--seconds",
                            str(args.seconds), "--out", str(work / "rec"), "--task", "full", "--depth-codec", "hevc12"],
                           check=True, stdout=subprocess.DEVNULL,
                           env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")})
            data = next((work / "rec" / "full" / "data").rglob("*.parquet"))
        files: dict[str, Path] = {}
        wcpu: dict[str, float] = {}
        for name, opts in variants(data, args.uncompressed).items():
            files[name] = work / f"{len(files)}.parquet"
            wcpu[name] = rewrite(data, files[name], opts)
        print(f"{data}: load {os.getloadavg()[0]:.1f}, {args.rounds} rounds alternated")
        res = alternate({k: _reader(p) for k, p in files.items()}, args.rounds)
        base = res["as written"]
        print(f"{'writer option':22}{'MB':>8}{'write CPU s':>13}{'read CPU s (min, median)':>27}{'/ as written':>14}")
        for k, v in res.items():
            rel = statistics.median(x / y for x, y in zip(v, base, strict=True))
            print(f"{k:22}{files[k].stat().st_size / 1e6:8.2f}{wcpu[k]:13.2f}{min(v):14.3f}{statistics.median(v):13.3f}"
                  f"{rel:14.2f}")
        if args.read_options:
            opt = alternate(read_options(files["as written"]), args.rounds)
            base = opt["batch_rows (today)"]
            print(f"\n{'read option (today file)':28}{'CPU s (min, median)':>22}{'/ today':>10}")
            for k, v in opt.items():
                rel = statistics.median(x / y for x, y in zip(v, base, strict=True))
                print(f"{k:28}{min(v):11.3f}{statistics.median(v):11.3f}{rel:10.2f}")


if __name__ == "__main__":
    main()
