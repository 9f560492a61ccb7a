"""Server CPU per small episode, A/B between source trees in one run (issue 29: "small uploads' fixed cost").

For each ``--src`` tree (a checkout's ``src`` directory; default: this one), the episodes of
``bench_upload.py`` (30 rows, a 256-value glove, IMU, one 96x72 H.264 stream) are recorded by that tree's
writer, then each round starts that tree's ``egopool serve --no-previews`` (its verification workers
included), lets ``--clients`` client processes (that tree's ``upload_episodes``, ``--jobs`` in flight each)
upload every episode, and takes the CPU (user + system, ``/proc``) the server and its worker processes spent
from the common start to the last confirmation, divided by the episodes: the receive, verification and
publish of one small episode, in the request path and in the workers. The trees take turns round by round
(A B A B ...), so a drift of the shared machine's speed falls on both. The same clients also POST the same
zips to a bare uvicorn app that drains the body (``bench_upload.py``'s baseline): its CPU per episode and
ep/s are the yardstick of the issue's "small episodes >= 1/3 of the bare endpoint's ep/s".

    python benchmarks/bench_intake_cpu.py --src /tmp/old/src --src src --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _intake_floor as fl  # noqa: E402
import bench_upload as bu  # noqa: E402


def env_for(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(src)}


def bench_dir(src: Path) -> Path:
    """The ``benchmarks`` folder beside ``src`` (its ``bench_upload.py`` records and uploads with that tree)."""
    return src.parent / "benchmarks"


def record_set(src: Path, out: Path, episodes: int, clients: int, tasks: int) -> int:
    """Record the episode set with ``src``'s writer (in a child process); returns the episode count."""
    code = ("import sys; sys.path.insert(0, %r); import bench_upload as bu; from pathlib import Path\n"
            "n = 0\n"
            "for k in range(%d):\n"
            "    for j in range(%d):\n"
            "        c = len(range(k * %d + j, %d, %d))\n"
            "        if c:\n"
            "            bu.record(Path(%r) / f'pc{k}', f'task_{j}', c, seed=1000 * k + j); n += c\n"
            "print(n)\n") % (str(bench_dir(src)), clients, tasks, tasks, episodes, clients * tasks, str(out))
    res = subprocess.run([sys.executable, "-c", code], env=env_for(src), check=True, capture_output=True, text=True)
    return int(res.stdout.split()[-1])


def one_round(src: Path, recorded: Path, work: Path, mode: str, jobs: int) -> tuple[float, float, int, float]:
    """Upload a fresh copy of ``recorded`` with ``src``'s server (or the sink); returns (server and workers' CPU s,
    wall s, episodes, the server process's own CPU s)."""
    roots_dir = work / "roots"
    shutil.rmtree(roots_dir, ignore_errors=True)
    shutil.copytree(recorded, roots_dir)
    roots = sorted(p for p in roots_dir.iterdir() if p.is_dir())
    port = bu.free_port()
    env = env_for(src)
    log = work / f"{mode}.log"
    if mode == "egopool":
        cmd = [sys.executable, "-m", "egopool", "serve", "--store", str(work / "store"), "--port", str(port),
               "--log-level", "warning", "--no-previews"]
        health = f"http://127.0.0.1:{port}/healthz"
    else:
        cmd = [sys.executable, str(HERE / "bench_upload.py"), "--sink", str(port)]
        health = f"http://127.0.0.1:{port}/"
    with open(log, "ab") as fh:
        server = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    bu._SERVERS.append(server)
    try:
        bu.wait_up(health, server)
        time.sleep(0.5)  # the workers' start-up CPU settles
        out = work / f"clients-{mode}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        url = f"http://127.0.0.1:{port}" + ("/" if mode != "egopool" else "")
        old_path = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(src)  # run_clients adds bench_upload's own src first: put ours first
        bu_src, bu_file = bu.SRC, bu.__file__
        bu.SRC, bu.__file__ = str(src), str(bench_dir(src) / "bench_upload.py")  # that tree's client
        try:
            if mode == "egopool":  # warm-up: the workers' first verification imports the decoders
                warm = work / "warm"
                shutil.rmtree(warm, ignore_errors=True)
                shutil.copytree(recorded.with_name(recorded.name + "-warm"), warm)
                (out / "warm").mkdir()
                bu.run_clients([warm / "pc0"], url, mode, out / "warm", jobs)
            cpu0, own0 = fl.tree_cpu_s(server.pid), fl.own_cpu_s(server.pid)
            wall, reports, _, _ = bu.run_clients(roots, url, mode, out, jobs)
            cpu, own = fl.tree_cpu_s(server.pid) - cpu0, fl.own_cpu_s(server.pid) - own0
        finally:
            bu.SRC, bu.__file__ = bu_src, bu_file
            if old_path is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old_path
        items = [i for r in reports for i in r]
        if not all(i["ok"] for i in items):
            raise SystemExit(f"{mode} with {src}: {sum(not i['ok'] for i in items)} upload(s) not confirmed")
        return cpu, wall, len(items), own
    finally:
        bu.stop(server)
        shutil.rmtree(work / "store", ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=Path, action="append", help="a source tree (repeat; default: this checkout's)")
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-sink", action="store_true", help="leave out the bare endpoint")
    args = ap.parse_args()
    srcs = [p.resolve() for p in (args.src or [Path(bu.SRC)])]
    work = Path(tempfile.mkdtemp(prefix="bench_intake_cpu_"))
    try:
        recorded = {}
        for k, src in enumerate(srcs):
            recorded[src] = work / f"rec{k}"
            n = record_set(src, recorded[src], args.episodes, args.clients, args.tasks)
            record_set(src, work / f"rec{k}-warm", 4, 1, 1)
        runs: dict[str, list[tuple[float, float, int, float]]] = {}
        loads = []
        for r in range(args.rounds):
            order = [(str(s), s, "egopool") for s in srcs] + ([] if args.no_sink else [("bare endpoint", srcs[-1],
                                                                                         "baseline")])
            if r % 2:
                order.reverse()
            for name, src, mode in order:
                loads.append(os.getloadavg()[0])
                res = one_round(src, recorded[src], work / f"w-{mode}", mode, args.jobs)
                runs.setdefault(name, []).append(res)
                print(f"round {r + 1} {name}: {res[0] / res[2] * 1e3:.1f} ms CPU/episode (server process "
                      f"{res[3] / res[2] * 1e3:.1f}), {res[2] / res[1]:.1f} ep/s", flush=True)
        print(f"\n{n} small episodes x {args.rounds} rounds, {args.clients} clients x --jobs {args.jobs}; "
              f"1-min load during the runs {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f})")
        print(f"{'server':48}{'CPU ms/ep median':>17}{'(min-max)':>12}{'of it request path':>19}"
              f"{'ep/s median':>12}{'(min-max)':>12}")
        med = {}
        for name, rs in runs.items():
            per = [c / k * 1e3 for c, _, k, _ in rs]
            own = statistics.median([o / k * 1e3 for _, _, k, o in rs])
            eps = [k / w for _, w, k, _ in rs]
            med[name] = (statistics.median(per), statistics.median(eps))
            print(f"{name[-48:]:48}{med[name][0]:17.1f}{f'{min(per):.1f}-{max(per):.1f}':>12}{own:19.1f}"
                  f"{med[name][1]:12.1f}{f'{min(eps):.1f}-{max(eps):.1f}':>12}")
        if "bare endpoint" in med:
            for name, (_cpu, eps) in med.items():
                if name != "bare endpoint":
                    print(f"{name[-48:]}: ep/s / bare endpoint's = 1/{med['bare endpoint'][1] / eps:.2f}")
        if len(srcs) > 1:
            a, b = (med[str(s)][0] for s in srcs[:2])
            print(f"CPU per episode, {srcs[1]} / {srcs[0]}: {b / a:.2f}")
        print(json.dumps({k: v for k, v in runs.items()}))
    finally:
        for proc in bu._SERVERS:
            if proc.poll() is None:
                bu.stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
