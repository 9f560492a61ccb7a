"""Pooling at scale: concurrent clients uploading to one `egopool serve` over loopback HTTP.

``--clients`` collection "PCs" (each its own recordings root, so its own host id and its own
N 1, 2, ...) record ``--episodes`` episodes in all, spread over ``--tasks`` task names that every
PC shares: the server renumbers constantly. Each episode: 30 rows at 30 fps, a 256-value glove
sensor (enters stats.json), 7 IMU samples per row, one 96x72 H.264 stream. Then every client
runs in its own process (``upload_episodes`` over its tasks, one after the other, ``--jobs`` episodes
in flight at once: docs/decisions.md U26) against one server process, all at the same time.

Figures: uploads/s and MB/s (episode bytes) over the wall time from the common start (every
client process has imported egopool and waits for a go signal) to the last client's end; per-episode latency p50/p99 (client side: first byte sent to the confirmed
answer, packing excluded); server peak RSS (``VmHWM``) and the largest client peak RSS; the server's CPU per
episode (user + system of the server process and its verification workers over the run: receive, verify and
publish; split into the request path and the workers) beside the baseline's, and ep/s against the baseline's
(issue 29: small episodes >= 1/3 of the bare endpoint's ep/s). ``bench_intake_cpu.py`` compares the CPU per
episode of two source trees in one run.
Afterwards it checks: every episode on the server exactly once (``server.db`` mapping unique,
the task's episodes on disk = uploads), stats.json of every task equal to a recomputation within
1e-9, ``egopool validate`` clean, no 5xx in the server's upload log.

Baseline, same run, same clients and episodes: each client packs the same zips and POSTs them
(``--jobs`` threads, each packing then POSTing one episode at a time, over one keep-alive pool) to
a minimal uvicorn app that only drains the body (no verification, no import): the cost of
moving the bytes over loopback HTTP. The ratio shows what verify-then-publish adds.

``--big-gb G`` (off by default) also uploads one episode of about G GiB (one 640x480 RGB
stream, noise encoded lossless, 3600 rows per 2 GiB: all video, as real episodes are) from a
fresh client and reports the server's and the client's peak RSS, and its MB/s (client side,
packing excluded) against the same zip POSTed to the baseline in the same run.

    python benchmarks/bench_upload.py                           # 40 episodes, 4 tasks, 8 clients (~1 min)
    python benchmarks/bench_upload.py --episodes 400            # the issue's figure (several minutes)
    python benchmarks/bench_upload.py --clients 4 --episodes 120 --jobs 1   # one upload in flight per client
    python benchmarks/bench_upload.py --episodes 8 --big-gb 2   # + a 2 GiB episode
    python benchmarks/bench_upload.py --episodes 8 --big-full 60  # + a ~100 MB full-rig episode

``--big-full S`` uploads one episode of ``egopool simulate --rig full`` S seconds long the same way: the
issue's "full-rig episode of >= 100 MB" (the force matrices' parquet and five lossy streams, whose every
frame the server decodes) rather than one lossless stream of noise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from egopool import StreamSpec, TaskWriter, imu_columns, vector_column  # noqa: E402
from egopool.layout import list_task_episodes  # noqa: E402
from egopool.meta.stats import recalc_stats  # noqa: E402
from egopool.validate import validate_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _intake_floor as fl  # noqa: E402

SENSOR = "observation.right_glove"
SRC = str(Path(__file__).resolve().parents[1] / "src")


# -- recording -------------------------------------------------------------------------------------
def record(root: Path, task: str, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    tw = TaskWriter(root, task, fps=30.0)
    imu, imu_ts = imu_columns()
    for _ in range(count):
        ep = tw.begin_episode(columns=[vector_column(SENSOR, [256]), imu, imu_ts],
                              streams=[StreamSpec("cam", "rgb", 96, 72)], sensors=["right_glove"], sensor_dim=256)
        base = rng.integers(0, 200, (72, 96, 3), dtype=np.uint8)
        for i in range(30):
            ep.add_frame({SENSOR: rng.random(256, dtype=np.float32), "observation.imu": rng.random((7, 6), np.float32),
                          "imu_ts_ns": np.arange(7) * 4_761_904 + i * 33_333_333},
                         hardware_ns=i * 33_333_333, images={"cam": base + i})
        ep.finish()


def record_big(root: Path, gib: float) -> Path:
    """One episode of ~gib GiB: recorded small, then its stream re-encoded losslessly from noise (same frames)."""
    from egopool.codecs.video import RgbEncoder

    rows = max(1, int(1800 * gib))
    tw = TaskWriter(root, "big", fps=30.0)
    ep = tw.begin_episode(columns=[vector_column(SENSOR, [256])], streams=[StreamSpec("cam", "rgb", 640, 480)],
                          sensors=["right_glove"], sensor_dim=256)
    frame = np.zeros((480, 640, 3), np.uint8)
    for i in range(rows):
        ep.add_frame({SENSOR: np.full(256, i, np.float32)}, images={"cam": frame})
    res = ep.finish()
    video = next(p for p in res.paths if p.suffix == ".mp4")
    rng = np.random.default_rng(1)
    noise = [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8) for _ in range(8)]
    tmp = video.with_name(".big.mp4")
    enc = RgbEncoder(tmp, 640, 480, 30.0, crf=0, preset="ultrafast")
    for i in range(rows):
        enc.encode(noise[i % 8])
    enc.close()
    os.replace(tmp, video)
    return root / "big"


# -- processes ------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    for _ in range(3000):
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            r = httpx.get(url, timeout=1.0)
            if r.headers.get("content-type", "").startswith("application/json") and \
                    r.json().get("workers", "ready") != "ready":  # egopool serve's verification workers (U14)
                time.sleep(0.1)
                continue
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise SystemExit("server did not start")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker_rss_mb(pid: int) -> list[float]:
    """Peak RSS of the server's child processes (its verification workers, docs/decisions.md U14)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(peak_rss_mb(int(stat.parent.name)))
        except (OSError, ValueError):
            continue
    return sorted(out, reverse=True)


def rss_text(pid: int) -> str:
    workers = worker_rss_mb(pid)
    return f"server peak RSS {peak_rss_mb(pid):.0f} MiB" + \
        (f" (+ {len(workers)} child processes, peak {', '.join(f'{w:.0f}' for w in workers)} MiB)" if workers else "")


_SERVERS: list[subprocess.Popen[bytes]] = []  # stopped on the way out, whatever happens


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log, "ab") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    _SERVERS.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_clients(roots: list[Path], url: str, mode: str, out: Path, jobs: int = 4
                ) -> tuple[float, list[list[dict]], float, float]:
    """One client process per root; all start sending together once every one has imported egopool.

    Returns (wall s from the common start to the last client's end, each client's items, the largest
    client peak RSS in MiB, the clients' CPU s from the start on: user + system, summed).
    """
    procs = []
    go = out / f"go-{mode}"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for k, root in enumerate(roots):
        report = out / f"{mode}-{k}.json"
        procs.append((subprocess.Popen([sys.executable, __file__, "--client", str(root), "--server", url,
                                        "--mode", mode, "--report", str(report), "--go", str(go),
                                        "--jobs", str(jobs)], env=env), report))
    while not all(Path(f"{r}.ready").exists() for _, r in procs):
        time.sleep(0.05)
    t0 = time.time()
    go.touch()
    rss = 0.0
    for p, _ in procs:
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss = max(rss, usage.ru_maxrss / 1024)
        if p.returncode != 0:
            raise SystemExit(f"a client failed ({p.returncode})")
    docs = [json.loads(r.read_text()) for _, r in procs]
    wall = max(d["end"] for d in docs) - t0
    return wall, [d["items"] for d in docs], rss, sum(d["cpu"] for d in docs)


def client_main(root: Path, url: str, mode: str, report: Path, go: Path, jobs: int) -> None:
    """One client: upload (or, for the baseline, pack + POST to the sink) every task of its root, ``jobs`` at once."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from egopool.transfer import pack_episodes, upload_episodes
    from egopool.transfer.posting import multipart_form as _multipart

    Path(f"{report}.ready").touch()
    while not go.exists():
        time.sleep(0.01)
    cpu = time.process_time()
    items = []
    for task in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if mode == "egopool":
            rep = upload_episodes(task, server=url, retries=3, jobs=jobs)
            items += [{"ok": o.confirmed, "seconds": o.seconds} for o in rep.outcomes]
        else:
            limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs)
            with httpx.Client(timeout=600, limits=limits) as http, tempfile.TemporaryDirectory(dir=root) as spool, \
                    ThreadPoolExecutor(jobs) as pool:

                def one(n: int, task: Path = task, http: httpx.Client = http, spool: str = spool) -> dict:
                    packed = pack_episodes(task, [n], spool, registry=False)[0]
                    ctype, length, body = _multipart(task.name, packed.file, packed.path, lambda n: None)
                    t = time.perf_counter()
                    r = http.post(url, content=body(), headers={"Content-Type": ctype, "Content-Length": str(length)})
                    packed.path.unlink()
                    return {"ok": r.status_code == 200, "seconds": time.perf_counter() - t}

                items += list(pool.map(one, [g.index for g in list_task_episodes(task)]))
    report.write_text(json.dumps({"end": time.time(), "items": items, "cpu": time.process_time() - cpu}))


def sink_main(port: int) -> None:
    """The baseline server: uvicorn + an ASGI app that drains the request body and answers 200."""
    import uvicorn

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        n, more = 0, True
        while more:
            msg = await receive()
            n += len(msg.get("body", b""))
            more = msg.get("more_body", False)
        body = json.dumps({"bytes": n}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def proxy_main(port: int, upstream: int, delay: float) -> None:
    """A TCP relay on ``port`` to ``upstream`` that delivers every chunk ``delay`` s late in each direction
    (a network's round trip of 2 x delay, bandwidth unchanged): ``--rtt-ms``."""
    import asyncio

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                if not data:
                    break
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.create_task(deliver())
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay, data))
        queue.put_nowait((loop.time() + delay, b""))
        await task

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream)
        await asyncio.gather(pump(reader, up_w), pump(up_r, writer), return_exceptions=True)

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


def delayed(url_port: int, rtt_ms: float, work: Path) -> int:
    """The port to use for ``url_port``: itself, or a relay adding ``rtt_ms`` of round trip."""
    if rtt_ms <= 0:
        return url_port
    port = free_port()
    start([sys.executable, __file__, "--proxy", str(port), str(url_port), str(rtt_ms / 2000)], work / "proxy.log")
    for _ in range(600):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return port
        time.sleep(0.05)
    raise SystemExit("the delay relay did not start")


# -- the run --------------------------------------------------------------------------------------
def zip_bytes(roots: list[Path]) -> int:
    """Total bytes of the episodes' files (the zips are these plus a few KiB of task files each)."""
    return sum(p.stat().st_size for r in roots for t in r.iterdir() if t.is_dir() and not t.name.startswith(".")
               for g in list_task_episodes(t) for p in g.paths())


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def verify(store: Path, expected: dict[str, int]) -> list[str]:
    import sqlite3

    problems = []
    con = sqlite3.connect(store / ".egopool-server/server.db")
    statuses = [s for (s,) in con.execute("SELECT status FROM uploads")]
    if any(s is not None and s >= 500 for s in statuses):
        problems.append(f"5xx in the upload log: {sorted(set(statuses))}")
    for task, count in expected.items():
        rows = con.execute("SELECT client_host_id, client_episode_index, episode_index FROM episodes WHERE task = ?",
                           (task,)).fetchall()
        on_disk = [g.index for g in list_task_episodes(store / task)]
        if len(rows) != count or len({(h, c) for h, c, _ in rows}) != count or len(on_disk) != count \
                or sorted(n for _, _, n in rows) != on_disk:
            problems.append(f"{task}: {count} uploaded, {len(rows)} mapped, {len(on_disk)} on disk")
        stored = json.loads((store / task / "meta/stats.json").read_text())
        fresh = recalc_stats(store / task)
        for col, block in fresh.items():
            for k in ("mean", "std", "min", "max"):
                if stored[col]["count"] != block["count"] or \
                        np.max(np.abs(np.asarray(stored[col][k]) - np.asarray(block[k]))) > 1e-9:
                    problems.append(f"{task}: stats {col}.{k} differs from a recomputation")
        rep = validate_task(store / task)
        if not rep.ok:
            problems.append(f"{task}: validate: {rep.findings[0].one_line()}")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=4, help="episodes in flight per client (upload --jobs), baseline too")
    ap.add_argument("--big-gb", type=float, default=0.0)
    ap.add_argument("--big-full", type=float, default=0.0, metavar="SECONDS",
                    help="also upload one full-rig episode this long (simulate --rig full; 60 s is ~100 MB)")
    ap.add_argument("--rtt-ms", type=float, default=0.0,
                    help="send through a local relay adding this round trip (a network's latency; default: none)")
    ap.add_argument("--proxy", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--big-episodes", type=int, default=1, help="episodes of --big-full (several: 2 workers can "
                                                                 "verify two at once)")
    ap.add_argument("--floor", action="store_true",
                    help="also: the decode-only PyAV floor of the episode set, the verification's CPU against it, and "
                         "the intake with 1 and 2 worker processes and on a local two-node Ray cluster (issue 29)")
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep it (default: a temp dir)")
    ap.add_argument("--client", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--sink", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--go", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sink:
        return sink_main(args.sink)
    if args.proxy:
        return proxy_main(int(args.proxy[0]), int(args.proxy[1]), float(args.proxy[2]))
    if args.client:
        return client_main(args.client, args.server, args.mode, args.report, args.go, args.jobs)

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_upload_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run(work, args)
    finally:
        for proc in _SERVERS:
            if proc.poll() is None:
                stop(proc)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def run(work: Path, args: argparse.Namespace) -> None:
    tasks = [f"task_{t}" for t in range(args.tasks)]
    roots = [work / f"pc{k}" for k in range(args.clients)]
    expected = dict.fromkeys(tasks, 0)
    t = time.perf_counter()
    for k, root in enumerate(roots):
        for j, task in enumerate(tasks):
            count = len(range(k * args.tasks + j, args.episodes, args.clients * args.tasks))
            if count:
                record(root, task, count, seed=1000 * k + j)
                expected[task] += count
    roots = [r for r in roots if r.exists()]  # fewer episodes than clients x tasks: some PCs recorded nothing
    total = sum(expected.values())
    payload = zip_bytes(roots)
    print(f"recorded {total} episodes ({payload / 1e6:.1f} MB) for {args.clients} clients x {args.tasks} tasks "
          f"in {time.perf_counter() - t:.1f} s")

    # baseline: the same clients pack and POST the same episodes to a body-draining uvicorn app
    port = free_port()
    sink = start([sys.executable, __file__, "--sink", str(port)], work / "sink.log")
    wait_up(f"http://127.0.0.1:{port}/", sink)
    base_url = f"http://127.0.0.1:{delayed(port, args.rtt_ms, work)}/"
    sink_cpu0 = fl.tree_cpu_s(sink.pid)
    base_wall, base_reports, _, base_cpu = run_clients(roots, base_url, "baseline", work, args.jobs)
    sink_cpu = fl.tree_cpu_s(sink.pid) - sink_cpu0
    stop(sink)
    base_lat = [i["seconds"] for r in base_reports for i in r]

    # egopool: the same clients upload to `egopool serve`
    port = free_port()
    store = work / "store"
    server = start([sys.executable, "-m", "egopool", "serve", "--store", str(store), "--port", str(port),
                    "--log-level", "warning", "--no-previews"], work / "server.log")  # previews: bench_previews.py
    url = f"http://127.0.0.1:{port}"
    wait_up(url + "/healthz", server)
    server_cpu0, own_cpu0 = fl.tree_cpu_s(server.pid), fl.own_cpu_s(server.pid)
    wall, reports, client_rss, cpu = run_clients(roots, f"http://127.0.0.1:{delayed(port, args.rtt_ms, work)}",
                                                 "egopool", work, args.jobs)
    server_cpu, own_cpu = fl.tree_cpu_s(server.pid) - server_cpu0, fl.own_cpu_s(server.pid) - own_cpu0
    server_rss = rss_text(server.pid)
    items = [i for r in reports for i in r]
    lat = [i["seconds"] for i in items]
    failed = [i for i in items if not i["ok"]]

    print(f"\n{args.clients} clients, {total} episodes, {args.tasks} tasks, loopback HTTP"
          f"{f' + {args.rtt_ms:g} ms round trip' if args.rtt_ms > 0 else ''}; --jobs {args.jobs}: up to "
          f"{len(roots) * args.jobs} concurrent uploads ({len(roots)} clients x {args.jobs}); load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'':28}{'seconds':>9}{'uploads/s':>11}{'MB/s':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for name, w, la in (("egopool serve (verify+import)", wall, lat), ("baseline: drain the body", base_wall, base_lat)):
        print(f"{name:28}{w:9.2f}{total / w:11.1f}{payload / 1e6 / w:8.1f}{pct(la, 50) * 1e3:9.0f}"
              f"{pct(la, 99) * 1e3:9.0f}")
    print(f"ratio egopool / baseline wall time: {wall / base_wall:.2f}x; ep/s egopool / baseline = 1/"
          f"{wall / base_wall:.2f} (issue 29: small episodes >= 1/3)")
    print(f"server CPU per episode (user + system, the server and its worker processes, from the start): egopool "
          f"{server_cpu / total * 1e3:.1f} ms (request path and publish {own_cpu / total * 1e3:.1f} ms, verification "
          f"workers {(server_cpu - own_cpu) / total * 1e3:.1f} ms), baseline {sink_cpu / total * 1e3:.1f} ms")
    print(f"client CPU per episode (user + system, from the start): egopool {cpu / total * 1e3:.1f} ms, "
          f"baseline {base_cpu / total * 1e3:.1f} ms")
    print(f"{server_rss}; largest client peak RSS {client_rss:.0f} MiB")
    problems = verify(store, expected) + [f"{len(failed)} upload(s) not confirmed"] * bool(failed)
    print("checks: every episode once, stats = recomputation (1e-9), validate clean, no 5xx: "
          + ("OK" if not problems else "FAILED: " + "; ".join(problems)))

    bigs = []
    if args.big_gb > 0:
        t = time.perf_counter()
        bigs.append((record_big(work / "bigpc", args.big_gb), time.perf_counter() - t))
    if args.big_full > 0:
        t = time.perf_counter()
        bigs.append((record_full(work / "fullpc", args.big_full, args.big_episodes), time.perf_counter() - t))
    for big, took in bigs:
        server = measure_big(big, took, server, store, url, port, work)
    stop(server)
    if args.floor:
        intake_matrix(work, roots, expected, [b for b, _ in bigs], args.jobs)


def intake_matrix(work: Path, roots: list[Path], expected: dict[str, int], bigs: list[Path], jobs: int) -> None:
    """Issue 29's table, in one run: the floor, the verification against it, then the same clients uploading to a
    fresh server with 1 and 2 worker processes and with its verification on a local two-node Ray cluster."""
    sets = [("small episodes", roots, expected)] + [(f"big episodes ({b.name})", [b.parent],
                                                     {b.name: len(list_task_episodes(b))}) for b in bigs]
    print("\nverification CPU against the floor (PyAV decoding every frame of the same zips), least of 2 rounds:")
    floors = {}
    for name, rts, _ in sets:
        zips = fl.pack_all(rts, work / "floor-zips" / name.split()[0])
        r = fl.measure(zips)
        floors[name] = r
        print(fl.report(name, r))
    configs: list[tuple[str, list[str]]] = [("1 worker process", ["--max-imports", "1"]),
                                            ("2 worker processes", ["--max-imports", "2"]), ("ray: 2 nodes x 1 CPU", [])]
    print(f"\n{'intake':22}{'set':28}{'s':>8}{'ep/s':>8}{'MB/s':>8}{'server CPU ms/MB':>18}{'/ floor':>9}  checks")
    for k, (cname, extra) in enumerate(configs):
        with contextlib.ExitStack() as stack:
            if not extra:
                extra = ["--max-imports", "2", "--ray", stack.enter_context(fl.ray_cluster(work, SRC))]
            for name, rts, exp in sets:
                store, port = work / f"store-m{k}-{name.split()[0]}", free_port()
                server = start([sys.executable, "-m", "egopool", "serve", "--store", str(store), "--port", str(port),
                                "--log-level", "warning", "--no-previews", *extra], work / f"server-m{k}.log")
                wait_up(f"http://127.0.0.1:{port}/healthz", server)
                out = work / f"m{k}-{name.split()[0]}"
                out.mkdir()
                cpu0 = fl.tree_cpu_s(server.pid)
                wall, reports, _, _ = run_clients(rts, f"http://127.0.0.1:{port}", "egopool", out, jobs)
                cpu = fl.tree_cpu_s(server.pid) - cpu0
                stop(server)
                f = floors[name]
                n = sum(exp.values())
                ok = all(i["ok"] for r in reports for i in r) and not verify(store, exp)
                per_mb = "" if "ray" in cname else f"{cpu / f.mb * 1e3:18.1f}{cpu / f.floor_s:9.2f}"
                print(f"{cname:22}{name:28}{wall:8.2f}{n / wall:8.1f}{f.mb / wall:8.1f}{per_mb or ' ' * 27}  "
                      f"{'OK' if ok else 'FAILED'}")
    print("(server CPU: the server process and its worker processes, HTTP and publish included; on Ray the "
          "verification's CPU is in the cluster's workers and not counted)")


def record_full(root: Path, seconds: float, episodes: int = 1) -> Path:
    """One episode of the issue's full rig (`egopool simulate --rig full`, Appendix B): ~1.8 MB/s, most of it
    the force matrices' parquet, the rest five H.264/HEVC streams."""
    subprocess.run([sys.executable, "-m", "egopool", "simulate", "--rig", "full", "--seconds", str(seconds),
                    "--episodes", str(episodes),
                    "--out", str(root), "--task", "full", "--depth-codec", "hevc12", "--json"], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": SRC})
    return root / "full"


def measure_big(big: Path, took: float, server: subprocess.Popen[bytes], store: Path, url: str, port: int,
                work: Path) -> subprocess.Popen[bytes]:
    """Upload the one episode of ``big`` to a freshly started server and to the baseline sink; print both."""
    size = sum(p.stat().st_size for g in list_task_episodes(big) for p in g.paths())
    print(f"\nbig episode ({big.name}): {size / 1e9:.2f} GB ({size / 2**30:.2f} GiB) recorded in {took:.0f} s")
    stop(server)
    server = start([sys.executable, "-m", "egopool", "serve", "--store", str(store), "--port", str(port),
                    "--log-level", "warning", "--no-previews"], work / "server.log")
    wait_up(url + "/healthz", server)
    wall, reports, client_rss, _ = run_clients([big.parent], url, "egopool", work)
    server_rss = rss_text(server.pid)
    ok = all(i["ok"] for r in reports for i in r)
    big_lat = [i["seconds"] for r in reports for i in r]
    sink_port = free_port()
    sink = start([sys.executable, __file__, "--sink", str(sink_port)], work / "sink.log")
    wait_up(f"http://127.0.0.1:{sink_port}/", sink)
    _, base_reports, _, _ = run_clients([big.parent], f"http://127.0.0.1:{sink_port}/", "baseline", work)
    stop(sink)
    base_big = [i["seconds"] for r in base_reports for i in r]
    print(f"uploaded in {wall:.1f} s ({size / 1e6 / wall:.0f} MB/s incl. packing and verification), "
          f"confirmed: {ok}; {server_rss}, client peak RSS {client_rss:.0f} MiB")
    print(f"sending (packing excluded): egopool serve {size / 1e6 / sum(big_lat):.0f} MB/s, baseline "
          f"{size / 1e6 / sum(base_big):.0f} MB/s: ratio {sum(base_big) / sum(big_lat):.2f}")
    problems = verify(store, {big.name: len(list_task_episodes(big))})
    print("checks: " + ("OK" if not problems else "FAILED: " + "; ".join(problems)))
    return server


if __name__ == "__main__":
    main()
