"""Start-up time of the ``egopool`` command, whole processes, against ``python -c pass`` (issue 16 B).

Run from the repository root::

    python benchmarks/bench_cli_startup.py [--repeat 7]

Each figure is the median wall-clock time of ``--repeat`` fresh processes of this interpreter
(``python -m egopool ...`` with ``src/`` on ``PYTHONPATH``): ``--help``, ``ls`` / ``info`` /
``show`` of a small task (one episode of 30 rows, written first), ``validate --fast`` of it and
``import egopool``. Baseline, measured in the same run and interleaved with the others:
``python -c pass`` (the interpreter's own start-up). Printed: the median, its excess over the
baseline, the median CPU time (user + system: what the process itself costs, steadier than wall
time on a loaded machine) and the goal of issue 16 B (``--help`` within 0.3 s, ``ls`` / ``info`` within 0.5 s of
the baseline on a quiet machine). ``--other-src DIR`` times another checkout's ``src/`` in the
same run too (e.g. the commit before the lazy command loading), interleaved with this one.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

GOALS = {"--help": 0.3, "ls": 0.5, "info": 0.5}


def small_task(root: Path) -> Path:
    import numpy as np

    from egopool import StreamSpec, TaskWriter, vector_column

    tw = TaskWriter(root, "small", registry=False)
    ep = tw.begin_episode([vector_column("observation.glove", [4])], [StreamSpec("cam", "rgb", 64, 48)],
                          sensors=["glove"])
    for i in range(30):
        ep.add_frame({"observation.glove": np.full(4, i, np.float32)}, images={"cam": np.full((48, 64, 3), i, np.uint8)})
    ep.finish()
    return root / "small"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s = user + system of the child) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--other-src", type=Path, help="another checkout's src/ to time in the same run")
    args = ap.parse_args()
    trees = {"this": ROOT / "src", **({"other": args.other_src.resolve()} if args.other_src else {})}
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        task = str(small_task(Path(tmp)))
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "import egopool": [py, "-c", "import egopool"],
            "--help": [py, "-m", "egopool", "--help"],
            "ls": [py, "-m", "egopool", "ls", task],
            "info": [py, "-m", "egopool", "info", task],
            "show": [py, "-m", "egopool", "show", task, "1"],
            "validate --fast": [py, "-m", "egopool", "validate", "--fast", task],
        }
        cases = [(tree, name, argv, {**os.environ, "PYTHONPATH": str(src)})
                 for name, argv in commands.items() for tree, src in trees.items()
                 if tree == "this" or name != "python -c pass"]
        for _, _, argv, env in cases:  # warm the file cache and the bytecode
            timed(argv, env)
        times: dict[tuple[str, str], list[tuple[float, float]]] = {(tree, name): [] for tree, name, _, _ in cases}
        for _ in range(args.repeat):  # interleaved: a load spike hits every case alike
            for tree, name, argv, env in cases:
                times[tree, name].append(timed(argv, env))
    def med(tree: str, name: str, i: int) -> float:
        return statistics.median(t[i] for t in times[tree, name])

    base, base_cpu = med("this", "python -c pass", 0), med("this", "python -c pass", 1)
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; medians of {args.repeat} processes"
          + (f"; other = {args.other_src}" if args.other_src else ""))
    print(f"{'command':<18}{'wall s':>8}{'over base':>11}{'CPU s':>8}{'over base':>11}{'goal':>6}"
          + (f"{'other wall':>12}{'other CPU':>11}" if args.other_src else ""))
    for name in commands:
        wall, cpu = med("this", name, 0), med("this", name, 1)
        goal = GOALS.get(name)
        line = (f"{name:<18}{wall:>8.3f}{wall - base:>11.3f}{cpu:>8.3f}{cpu - base_cpu:>11.3f}"
                f"{(f'{goal:.1f}' if goal else '-'):>6}")
        if args.other_src and ("other", name) in times:
            line += f"{med('other', name, 0):>12.3f}{med('other', name, 1):>11.3f}"
        print(line)

if __name__ == "__main__":
    main()
