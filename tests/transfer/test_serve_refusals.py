"""``egopool serve`` refuses a file, a task, a busy port and an unwritable store in one line each, before it
writes anything (issue 28: a 20-line traceback; `.egopool-server/` written inside a task; a busy port
answered "Application startup complete" and left a new store behind)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.extra("server")


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "egopool", "serve", *args], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "COLUMNS": "200"})


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and r.stdout == "" and len(lines) == 1, r.stderr
    assert lines[0].startswith("egopool: error: ")
    return lines[0]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def task_root(tmp_path_factory):
    from egopool.cli.app import main

    root = tmp_path_factory.mktemp("serve_refusals")
    assert main(["simulate", "--rig", "d435x2", "--episodes", "1", "--seconds", "0.3", "--scale", "8",
                 "--out", str(root), "--task", "t"]) == 0
    return root


def test_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "store.txt"
    f.write_text("x")
    line = _one_line(_serve("--store", str(f)))
    assert f"{f}: --store is a file, not a directory" in line
    assert _tree(tmp_path) == ["store.txt"]


def test_a_task_or_a_folder_inside_one_is_refused(task_root: Path) -> None:
    before = _tree(task_root)
    line = _one_line(_serve("--store", str(task_root / "t")))
    assert f"{task_root / 't'} is a task" in line and f"--store {task_root} serves t" in line
    line = _one_line(_serve("--store", str(task_root / "t" / "meta")))
    assert f"is inside the task {task_root / 't'}" in line
    assert _tree(task_root) == before  # no .egopool-server/ inside the task


def test_a_busy_port_is_refused_before_the_store_is_made(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line(_serve("--store", str(tmp_path / "new"), "--port", str(port)))
    assert f"port {port} on 127.0.0.1 is in use" in line and "--port" in line
    assert not (tmp_path / "new").exists()


def test_an_unwritable_store_is_refused() -> None:
    line = _one_line(_serve("--store", "/proc/egopool-store"))  # /proc refuses new files even to root
    assert "/proc/egopool-store: cannot write the store in /proc" in line


@pytest.mark.extra("s3")
def test_a_bucket_task_prefix_is_refused(s3_server, task_root: Path, tmp_path: Path) -> None:
    """Issue 24 review: `serve --store s3://.../TASK` started, where a task directory is refused."""
    uri = s3_server.upload_dir(task_root / "t", "serve-refusals", "pooled/t")
    env = {**os.environ, **s3_server.env(), "COLUMNS": "200"}
    for store, want in ((uri, f"{uri} is a task"), (uri + "/meta", f"is inside the task {uri}")):
        r = subprocess.run([sys.executable, "-m", "egopool", "serve", "--store", store, "--state",
                            str(tmp_path / "state")], capture_output=True, text=True, timeout=120, check=False, env=env)
        line = _one_line(r)
        assert want in line and "--store s3://serve-refusals/pooled serves t" in line, line
    assert not (tmp_path / "state").exists()
