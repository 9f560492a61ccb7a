"""``egopool record`` driven like an operator would, in a real terminal (tmux send-keys /
capture-pane): the live status updates, ``a`` aborts (N recycled, file_format.md §7.5), Enter starts
the next episode, which reuses that N, Enter finishes it, ``q`` quits with the summary."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from egopool import open_task
from egopool.meta import markers


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def _screen(session: str) -> str:
    return _tmux("capture-pane", "-p", "-t", session, "-S", "-60")


def _wait_for(session: str, pattern: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        screen = _screen(session)
        if re.search(pattern, screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{pattern!r} never appeared; screen:\n{_screen(session)}")


def _rows(screen: str) -> int:
    found = re.findall(r"recording episode N=\S+\s+[\d.]+ s\s+(\d+) rows", screen)
    assert found, screen
    return int(found[-1])


def test_record_in_a_terminal(tmp_path):
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (apt-get install -y tmux; .ci/run installs it)")
    task = tmp_path / "rec" / "pick_cup"
    session = f"egopool-rec-{os.getpid()}"
    env = f"COLUMNS=160 LINES=50 PYTHONPATH={os.pathsep.join(sys.path)}"
    cmd = (f"cd {tmp_path} && {env} {sys.executable} -m egopool record {task} "
           f"--device 'uvc:lavfi:testsrc2=size=320x240:rate=30' --device sim:glove --device 'sim:gripper?size=320x240'; "
           "echo EXIT=$?; sleep 60")
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd)
    try:
        first = _wait_for(session, r"(?s)recording episode N=1 .* (\d+) rows.*sim:gripper")
        assert "uvc:lavfi:testsrc2" in first and "sim:glove" in first and "head_left_rgb" in first
        time.sleep(1.5)
        later = _screen(session)
        assert _rows(later) > _rows(first)  # the status lines update
        _tmux("send-keys", "-t", session, "a")
        _wait_for(session, r"episode aborted; N=1 is recycled")
        assert markers.read_recycled(task) == 1
        _wait_for(session, r"Enter: next episode")
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"recording episode N=1 .* [1-9]\d* rows")  # the recycled N is reused
        time.sleep(1.0)
        _tmux("send-keys", "-t", session, "Enter")
        done = _wait_for(session, r"episode 1: (\d+) rows")
        rows = int(re.search(r"episode 1: (\d+) rows", done).group(1))
        _wait_for(session, r"Enter: next episode")
        _tmux("send-keys", "-t", session, "q")
        end = _wait_for(session, r"EXIT=\d+")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "EXIT=0" in end
    assert re.search(r"│\s*1\s*│\s*aborted \(N recycled\)", end) and re.search(rf"│\s*1\s*│\s*finished\s*│\s*{rows}\s", end)
    t = open_task(task)
    assert [ep.index for ep in t.episodes()] == [1]
    assert t.episode(1).table.num_rows == rows >= 25
    assert markers.read_recycled(task) is None
    assert sorted(t.info["cameras"]) == ["gripper_rgb", "head_left_rgb"]
