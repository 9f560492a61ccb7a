"""`meta.markers.pid_alive`, the one liveness test of a journal's, a reservation's and an export's owner
(docs/decisions.md E44): a zombie (exited, not reaped yet) is dead, a running process and another user's are alive."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from egopool.meta.markers import pid_alive


def _state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rpartition(b")")[2].split()[0]


def test_a_zombie_is_dead_a_running_process_alive() -> None:
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(600):  # until it has exited; Popen does not reap it before poll()/wait()
            if _state(child.pid) == b"Z":
                break
            time.sleep(0.05)
        assert _state(child.pid) == b"Z"
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert not pid_alive(child.pid)  # reaped: gone


def test_pid_1_is_alive() -> None:
    assert pid_alive(1)
