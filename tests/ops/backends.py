"""A task on either backend for the tests of the commands that change a task (issue 24): a directory, or the
same task copied into the session's SeaweedFS bucket (tests/conftest.py ``s3_server``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from egopool.storage import Store, open_store
from egopool.validate import validate_task

BUCKET = "ops-tasks"


@dataclass
class TaskAt:
    """A task at ``location`` (a directory path or ``s3://...`` text), ``local`` its directory (the bucket copy's
    source), ``kind`` ``dir`` or ``bucket``."""

    kind: str
    location: str
    local: Path

    @property
    def store(self) -> Store:
        return open_store(self.location)

    def keys(self) -> set[str]:
        """Every object of the task (a directory: every non-dot file; a bucket: every key but dot prefixes)."""
        return {k for k in self.all_keys() if not any(p.startswith(".") for p in k.split("/"))}

    def all_keys(self) -> set[str]:
        """Every object, dot files and prefixes too (not the empty "directory" markers of a bucket copy)."""
        keys = {m.key.rstrip("/") for m in self.store.list()}
        return {k for k in keys if not any(o.startswith(k + "/") for o in keys)}

    def read(self, key: str) -> bytes:
        got = self.store.get(key)
        assert got is not None, key
        return got[0]

    def errors(self) -> list[str]:
        """``egopool validate`` error findings (empty: the task is valid)."""
        report = validate_task(self.location)
        return [f"{f.rule}: {f.message}" for f in report.errors]

    def warnings(self) -> list[str]:
        """``egopool validate`` warning findings."""
        report = validate_task(self.location)
        return [f"{f.rule}: {f.message}" for f in report.warnings]


def put_in_bucket(s3_server, local: Path) -> str:
    """Copy the task directory ``local`` into the session bucket under a fresh prefix; its URI."""
    return s3_server.upload_dir(local, BUCKET, f"{uuid.uuid4().hex[:10]}/{local.name}")


def make_task_at(kind: str, local: Path, s3_server) -> TaskAt:
    if kind == "dir":
        return TaskAt(kind, str(local), local)
    return TaskAt(kind, put_in_bucket(s3_server, local), local)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m egopool ARGS`` in a subprocess (the real command line)."""
    return subprocess.run([sys.executable, "-m", "egopool", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def wait_for(path: Path, proc: subprocess.Popen[str] | None = None, timeout: float = 300.0) -> None:
    """Wait until ``path`` exists (a pause seam's marker); fail when ``proc`` ended first or after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"{' '.join(map(str, proc.args))} ended ({proc.returncode}) before {path.name}: "
                                 f"{out} {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@dataclass
class Paused:
    """A command stopped at its pause seam: ``proc``, and the ``marker`` whose removal lets it go on."""

    proc: subprocess.Popen[str]
    marker: Path

    def release(self, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Let it go on and wait for it; its result."""
        self.marker.unlink()
        out, err = self.proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)


@contextmanager
def paused(state: Path, op: str, stage: str, *args: str) -> Iterator[Paused]:
    """Run ``egopool ARGS`` with ``EGOPOOL_OPS_PAUSE=op:stage`` (``egopool.ops.task_store.pause``) and yield it once
    it waits at ``stage``; on leaving, a process still running is SIGKILLed (a crash at that step)."""
    state.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "EGOPOOL_OPS_PAUSE": f"{op}:{stage}", "XDG_STATE_HOME": str(state)}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    marker = state / "egopool" / f"ops-paused-{op}-{stage}"
    try:
        wait_for(marker, proc)
        yield Paused(proc, marker)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
        marker.unlink(missing_ok=True)


def kill_at(state: Path, op: str, stage: str, *args: str) -> None:
    """Run ``egopool ARGS`` with ``EGOPOOL_OPS_PAUSE=op:stage`` and SIGKILL it when it reaches ``stage``."""
    with paused(state, op, stage, *args):
        pass
