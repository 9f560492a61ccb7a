"""The CLI's way out past native threads (docs/decisions.md A1, A2).

``egopool edit add-column`` on a directory task, refused after it read the episode's parquet, ended now
and then with ``terminate called without an active exception`` (exit -6) after its one line: an Arrow
pool thread dropped the scan's last Python buffer while the interpreter finalized. Whole processes.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, vector_column
from egopool._parquet_memory import read_parquet_bytes

#: Runs of the refused edit. Before the fix each aborted with a probability of about 2-10% on a loaded
#: 2-core machine (measured 8/150, 2/60, 5/50); the runs go two at a time (contention makes it likelier).
RUNS = 16

#: ``egopool ARGS`` with an exit handler that says when the interpreter ran its normal finalization.
_MARKED = ("import atexit, sys; atexit.register(lambda: sys.stderr.write('FINALIZED\\n')); "
           "sys.argv = ['egopool', *sys.argv[1:]]; from egopool.cli.entry import entry; entry()")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exit")
    tw = TaskWriter(root, "pick", registry=False)
    for k in range(2):
        ep = tw.begin_episode([vector_column("observation.glove", [4])], [StreamSpec("cam", "rgb", 32, 24)],
                              sensors=["glove"], sensor_dim=4, created_at=1_700_000_000.0 + k)
        for i in range(4):
            ep.add_frame({"observation.glove": np.full(4, i, np.float32)},
                         images={"cam": np.full((24, 32, 3), 40, np.uint8)})
        ep.finish()
    (root / "three.txt").write_text("1\n2\n3\n")
    return root / "pick"


def _egopool(*args: str, marked: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["-c", _MARKED, *args] if marked else ["-m", "egopool", *args]
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=dict(os.environ), timeout=300)


def test_a_refused_edit_ends_with_its_line_never_an_abort(task: Path) -> None:
    copy = shutil.copytree(task, task.parent / "lane2" / task.name)  # an edit takes its task's lock: one per lane
    want = f"egopool: error: {task.parent / 'three.txt'}: 3 value(s) for episode 1, which has 4 rows"

    def lane(t: Path) -> list[subprocess.CompletedProcess[str]]:
        return [_egopool("edit", "add-column", str(t), "1", "observation.x", "--from", str(task.parent / "three.txt"))
                for _ in range(RUNS // 2)]

    with ThreadPoolExecutor(2) as pool:
        runs = [r for rs in pool.map(lane, (task, copy)) for r in rs]
    codes = [r.returncode for r in runs]
    assert codes == [1] * RUNS, (codes, [r.stderr for r in runs if r.returncode != 1][:1])
    for r in runs:
        assert r.stderr.startswith(want) and r.stderr.count("\n") == 1 and r.stdout == "", r.stderr


def test_a_command_that_loaded_arrow_ends_before_python_finalizes(task: Path) -> None:
    """Success and failure alike: the output complete, the code kept, no finalization for the threads to race."""
    ok = _egopool("info", str(task), "--json", marked=True)
    assert ok.returncode == 0 and "FINALIZED" not in ok.stderr, ok.stderr
    assert '"total_episodes": 2' in ok.stdout and ok.stdout.rstrip().endswith("}")
    bad = _egopool("edit", "add-column", str(task), "7", "observation.x", "--from", str(task.parent / "three.txt"),
                   marked=True)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no episode 7" in bad.stderr, bad.stderr


def test_a_command_without_native_threads_ends_as_python_does() -> None:
    r = _egopool("--help", marked=True)
    assert r.returncode == 0 and "Usage" in r.stdout
    assert r.stderr == "FINALIZED\n"


def test_a_live_non_daemon_thread_keeps_the_normal_exit() -> None:
    """In a fresh interpreter (this test process may hold other tests' non-daemon threads, e.g. a server's kept
    fsync pool): no thread -> the exit may skip finalization; a live non-daemon thread -> it may not; joined -> it
    may again."""
    code = ("import threading; from egopool.cli.entry import _still_running as s; r = [s()]; e = threading.Event(); "
            "t = threading.Thread(target=e.wait, daemon=False); t.start(); r.append(s()); e.set(); t.join(); "
            "r.append(s()); print(r)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[False, True, False]", out.stdout + out.stderr


def test_parquet_bytes_read_as_read_table_reads_them() -> None:
    table = pa.table({"frame_index": pa.array([0, 1, 2], pa.int64()),
                      "observation.glove": pa.array([[0.5, 1.0], [2.0, 3.0], None], pa.list_(pa.float32()))},
                     metadata={b"egopool": b"x"})
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    body = buf.getvalue()
    got = read_parquet_bytes(body)
    assert got.equals(pq.read_table(io.BytesIO(body)), check_metadata=True)
    assert got.column("observation.glove").to_pylist() == [[0.5, 1.0], [2.0, 3.0], None]
    assert got.schema.metadata[b"egopool"] == b"x"
    for damaged in (b"", body[:-9], body[:-4] + b"PAR0"):  # empty, truncated, no footer magic
        with pytest.raises(pa.ArrowInvalid):
            read_parquet_bytes(damaged)
