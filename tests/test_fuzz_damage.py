"""Fuzz test of issue 12 ("How it is checked"): damage tasks of every file kind with Hypothesis.

For every file kind of tests/fuzz_support.py (info.json, stats.json, tasks.jsonl, the
meta/episodes parquet, the data parquet, the RGB MP4, the FFV1 depth MKV, a PNG16 depth
frame and its directory, the abort marker, a reservation) a deterministic run damages one
file (truncation, flipped or spliced bytes, garbage, a directory / FIFO / symlink loop /
dangling symlink in its place, a JSON value replaced by a random or hostile one, a parquet
column of another physical type, a dropped column, a lying footer length, a renamed codec)
and runs the whole reader API on every episode, ``validate_task`` and every CLI command
that reads a task (:data:`fuzz_support.COMMANDS`, 23 invocations). It asserts: no exception outside
``egopool.EgopoolError``, exit code 0/1 with only one-line ``egopool:`` messages on stderr,
no file changed, each input within a time bound (SIGALRM) and the peak RSS of the whole
run bounded.

Figures (CI, derandomized): 11 kinds × 6 inputs = 66 damaged tasks; with the interop extra about
2.5 CPU-minutes (50 s before the export, view and plot commands joined).
The bigger run is ``python benchmarks/bench_fuzz_damage.py --examples 2000``; its figures
are in benchmarks/README.md.
"""

from __future__ import annotations

import resource
from pathlib import Path

import fuzz_support as fz
import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egopool.cli.app import app, register_commands

EXAMPLES_PER_KIND = 6
#: Largest growth of the process's peak RSS over one kind's inputs (MB): a 4 GiB footer or a
#: decompression bomb read into memory would exceed it by far.
MAX_RSS_GROWTH_MB = 500
#: Time bound of one damaged task (readers + validator + 23 commands; a few s normally).
SECONDS_PER_INPUT = 180


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fz.build_reference(tmp_path_factory.mktemp("fuzzref"))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_every_task_command_is_fuzzed() -> None:
    """A new CLI command must be added to fuzz_support.COMMANDS (or NOT_TASK_COMMANDS with a reason)."""
    register_commands()
    group = typer.main.get_command(app)
    names = set(group.commands)  # type: ignore[attr-defined]
    covered = {argv[0] for argv in fz.COMMANDS.values()} | fz.NOT_TASK_COMMANDS
    assert names - covered == set(), f"add these commands to tests/fuzz_support.py COMMANDS: {names - covered}"


@pytest.mark.parametrize("kind", sorted(fz.KINDS))
def test_damaged_task(reference: Path, tmp_path: Path, kind: str) -> None:
    seen: list[str] = []
    rss_before = _peak_rss_mb()

    @settings(max_examples=EXAMPLES_PER_KIND, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.data())
    def one(data: st.DataObject) -> None:
        dmg, out = fz.check_one(reference, tmp_path / "work", data.draw, st, fz.commands_for(len(seen)),
                                seconds=SECONDS_PER_INPUT, kind=kind)
        seen.append(dmg.op)
        assert out.failures == [], f"{dmg}: {out.failures}"

    one()
    assert len(seen) >= EXAMPLES_PER_KIND // 2
    assert _peak_rss_mb() - rss_before < MAX_RSS_GROWTH_MB
