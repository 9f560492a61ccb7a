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

Beside it, for reading only (docs/decisions.md U47): **parquet**, pyarrow alone reading every column of every
data parquet member the way the row checks do (``iter_batches``, the same batch rows, one thread), and the
verification against floor + parquet: how far the checks are from the decoding of both kinds of member.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
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
    parquet_s: float = 0.0

    @property
    def ratio_with_parquet(self) -> float:
        """verify / (floor + parquet): against PyAV and pyarrow decoding every member (docs/decisions.md U47)."""
        whole = self.floor_s + self.parquet_s
        return self.verify_s / whole if whole > 0 else float("inf")

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


def parquet_floor(zips: list[Path], scratch: Path) -> float:
    """CPU seconds of pyarrow alone reading every column of every data parquet member of ``zips``, in the row
    checks' batches (:func:`egopool.validate.data.batch_rows`, one thread): the decoding those checks require."""
    import pyarrow.parquet as pq

    from egopool.validate.data import batch_rows

    files: list[Path] = []
    for k, z in enumerate(zips):
        with zipfile.ZipFile(z) as zf:
            for name in zf.namelist():
                if name.startswith("data/") and name.endswith(".parquet"):
                    dst = scratch / f"p{k}" / name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(zf.read(name))
                    files.append(dst)
    gc.collect()
    t = time.process_time()
    for f in files:
        with pq.ParquetFile(f) as pf:
            names = pf.schema_arrow.names
            for _ in pf.iter_batches(batch_size=batch_rows(pf, names), columns=names, use_threads=False):
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
    floor, ver, par = [], [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="egopool-floor-") as tmp:
            floor.append(decode_floor(zips, Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="egopool-verify-") as tmp:
            ver.append(verify_cpu(zips, Path(tmp)))
        with tempfile.TemporaryDirectory(prefix="egopool-parquet-") as tmp:
            par.append(parquet_floor(zips, Path(tmp)))
    mb = sum(z.stat().st_size for z in zips) / 1e6
    return FloorResult(len(zips), mb, min(floor), min(ver), min(par))


def report(name: str, r: FloorResult) -> str:
    """One line: CPU s/MB of each, the ratio, ms per episode."""
    return (f"{name:34}{r.zips:5d} zips {r.mb:8.1f} MB  floor {r.floor_s / r.mb * 1e3:7.1f} ms/MB "
            f"({r.floor_s / r.zips * 1e3:7.1f} ms/ep)  verify {r.verify_s / r.mb * 1e3:7.1f} ms/MB "
            f"({r.verify_s / r.zips * 1e3:7.1f} ms/ep)  ratio {r.ratio:5.2f}x  (parquet "
            f"{r.parquet_s / r.mb * 1e3:6.1f} ms/MB; verify / (floor + parquet) {r.ratio_with_parquet:4.2f}x)")


# -- the intake in several configurations (bench_upload.py --floor) --------------------------------
def pack_all(roots: list[Path], out: Path) -> list[Path]:
    """Every episode of every task of ``roots`` packed into upload zips under ``out`` (the floor's episode set)."""
    from egopool.layout import list_task_episodes
    from egopool.transfer import pack_episode

    zips = []
    for k, root in enumerate(roots):
        for task in sorted(t for t in root.iterdir() if t.is_dir() and not t.name.startswith(".")):
            for g in list_task_episodes(task):
                zips.append(pack_episode(task, g.index, out / f"{k}-{task.name}").path)
    return zips


def own_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` alone (the server's request path, without its workers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its live children (the server and its workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(stat.parent.name) == pid or int(fields[1]) == pid:
                total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return total


def _wait_cpus(address: str, cpus: int, timeout: float = 180.0) -> None:
    """Until the cluster at ``address`` counts ``cpus`` CPUs (every node joined)."""
    import ray

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        deadline = time.monotonic() + timeout
        while ray.cluster_resources().get("CPU", 0) < cpus:
            if time.monotonic() > deadline:
                raise SystemExit(f"the Ray cluster has {ray.cluster_resources().get('CPU', 0)} CPUs, not {cpus}")
            time.sleep(0.5)
    finally:
        ray.shutdown()


@contextlib.contextmanager
def ray_cluster(work: Path, src: str, nodes: int = 2) -> Iterator[str]:
    """A local Ray cluster of ``nodes`` nodes with one CPU each, on loopback (``ray start --block`` per node, each
    in its own session: only what this started is stopped, never another user's Ray); yields the head address."""
    ray = str(Path(sys.executable).with_name("ray"))
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "RAY_USAGE_STATS_ENABLED": "0"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    common = ["--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--block", "--disable-usage-stats"]
    try:
        with open(work / "ray.log", "ab") as log:
            procs.append(subprocess.Popen([ray, "start", "--head", "--port", str(port), "--include-dashboard", "false",
                                           *common], stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
            for _ in range(600):  # the head answers
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
                time.sleep(0.2)
            time.sleep(3)
            for _ in range(nodes - 1):
                procs.append(subprocess.Popen([ray, "start", "--address", address, *common], stdout=log,
                                              stderr=subprocess.STDOUT, env=env, start_new_session=True))
        _wait_cpus(address, nodes)
        yield address
    finally:
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
