"""Per-N lookups at scale: ``Task.episode(N)`` and ``plan_delete`` on a 1-episode vs a 4,000-episode task.

Builds tasks of 1, 1,000 (one full chunk) and 4,000 episodes as ``bench_ops.py`` does (one
recorded episode with a 32x24 H.264 stream, copied to N = 2..E with ``episode_index``
rewritten; chunk roll-over included). Figures (wall-clock medians, one
process, warm page cache):

* ``open_task(T).episode(N)`` (checklist §12.2: N's paths from the templates, legacy names
  looked up in N's own chunk only) for N = 1 on the 1-episode task and for N spread over
  the 4,000-episode task; and the same plus reading the episode's meta row (``.meta``);
* ``plan_delete(T, [N])`` (what ``egopool delete`` plans before touching anything): it lists
  N's chunk directories for every file of N (any extension, legacy names), so its cost
  grows with the episodes of N's chunk (at most ``chunks_size`` = 1000) and is flat beyond;
* baseline: the full enumeration (``list_task_episodes`` + pick N), which is what
  ``Task.episode(N)`` cost before (issue 12: 0.3 ms vs 440 ms).

The ratio 4,000 / 1 episodes of ``Task.episode(N)`` should be close to 1 (flat in task size).

    python benchmarks/bench_lookup.py                  # --episodes 4000 --repeat 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ops import build  # noqa: E402

from egopool import list_task_episodes, open_task  # noqa: E402
from egopool.ops import plan_delete  # noqa: E402


def per_call(fn: Callable[[int], object], ns: list[int], repeat: int) -> float:
    """Median over ``repeat`` rounds of the mean time of one call over ``ns``, in ms."""
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for n in ns:
            fn(n)
        rounds.append((time.perf_counter() - t0) / len(ns))
    return statistics.median(rounds) * 1e3


def full_scan(task: Path, n: int) -> object:
    return next(g for g in list_task_episodes(task) if g.index == n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    sizes = [1, min(1000, args.episodes), args.episodes]
    with tempfile.TemporaryDirectory() as tmp:
        tasks = {e: build(Path(tmp) / f"t{e}", e) for e in sizes}
        opened = {e: open_task(t) for e, t in tasks.items()}
        spread = {e: sorted(n for n in {1, 2, e // 2, e - 1, e, 999, 1000, 1001} if 1 <= n <= e) for e in sizes}
        rows: list[tuple[str, Callable[[int, int], object]]] = [
            ("Task.episode(N)", lambda e, n: opened[e].episode(n)),
            ("Task.episode(N).meta", lambda e, n: opened[e].episode(n).meta),
            ("plan_delete(T, [N])", lambda e, n: plan_delete(tasks[e], [n])),
            ("baseline: full scan + pick N", lambda e, n: full_scan(tasks[e], n)),
        ]
        print(f"per-N lookup, ms per call (N spread over each task: {spread[args.episodes]} for the largest)")
        print(f"{'lookup':32}" + "".join(f"{f'{e:,} ep.':>12}" for e in sizes) + f"{'ratio last/first':>18}")
        results = {}
        for name, fn in rows:
            reps = args.repeat if "baseline" not in name else max(1, args.repeat // 3)
            ms = [per_call(lambda n, e=e: fn(e, n), spread[e], reps * (5 if e == 1 else 1)) for e in sizes]
            results[name] = ms
            print(f"{name:32}" + "".join(f"{m:12.3f}" for m in ms) + f"{ms[-1] / ms[0]:17.2f}x")
        print(f"Task.episode(N) on {args.episodes:,} episodes vs the full scan: "
              f"{results['Task.episode(N)'][-1] / results['baseline: full scan + pick N'][-1]:.4f}x")


if __name__ == "__main__":
    main()
