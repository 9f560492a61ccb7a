"""Fuzz every file kind of a task with Hypothesis, many more inputs than CI runs (issue 12).

    python benchmarks/bench_fuzz_damage.py --examples 2000 [--seed 1] [--commands 4]

Each input: copy the reference task (tests/fuzz_support.py), damage one file of one kind,
run the reader API on every episode, validate_task and ``--commands`` CLI commands drawn
at random; count inputs by kind and operation, list every failure (an exception outside
EgopoolError, a non-one-line stderr, a modified file, a time bound hit) and the peak RSS.
Nothing is asserted: failures are printed and the exit code is 1 when there are any.
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import UnsatisfiedAssumption  # noqa: E402

import fuzz_support as fz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commands", type=int, default=3, help="CLI commands run per input (of %d)" % len(fz.COMMANDS))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="egopool-fuzz-"))
    reference = fz.build_reference(tmp / "ref")
    by_kind: collections.Counter[str] = collections.Counter()
    by_op: collections.Counter[str] = collections.Counter()
    failures: dict[str, list[str]] = collections.defaultdict(list)
    slowest = [0.0, ""]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @seed(args.seed)
    @settings(max_examples=args.examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: st.DataObject) -> None:
        cmds = data.draw(st.lists(st.sampled_from(sorted(fz.COMMANDS)), min_size=args.commands,
                                  max_size=args.commands, unique=True))
        t0 = time.perf_counter()
        try:
            dmg, out = fz.check_one(reference, tmp / "work", data.draw, st, cmds)
        except fz.Hang as exc:
            failures["hang"].append(str(exc))
            return
        except UnsatisfiedAssumption:
            raise  # Hypothesis discards this input (e.g. a parquet with no column to replace)
        except Exception as exc:  # noqa: BLE001 - the harness itself; keep going
            failures["harness"].append(f"{type(exc).__name__}: {exc}"[:300])
            return
        dt = time.perf_counter() - t0
        if dt > slowest[0]:
            slowest[:] = [dt, f"{dmg.kind} {dmg.op} {dmg.detail}"]
        by_kind[dmg.kind] += 1
        by_op[f"{dmg.kind}: {dmg.op}"] += 1
        for f in out.failures:
            failures[f"{dmg.kind} / {dmg.op} {dmg.detail}"].append(f)

    t0 = time.perf_counter()
    one()
    total = time.perf_counter() - t0
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    print(f"{sum(by_kind.values())} damaged tasks in {total:.0f} s ({total / max(sum(by_kind.values()), 1):.2f} s "
          f"each), slowest {slowest[0]:.1f} s ({slowest[1]}), peak RSS growth {rss:.0f} MB")
    print("inputs by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    print("inputs by operation: " + ", ".join(f"{k} {v}" for k, v in sorted(by_op.items())))
    print(f"{sum(map(len, failures.values()))} failure(s)")
    for where, items in sorted(failures.items()):
        for f in sorted(set(items)):
            print(f"  [{where}] {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
