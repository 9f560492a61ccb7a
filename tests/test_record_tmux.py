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
from recorder_support import camera_fifo


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


def _record_in_tmux(name: str, cwd, args: str) -> str:
    """Start ``egopool record ARGS`` in a detached 160x50 tmux session; returns the session name. The
    shell prints ``EXIT=<code>`` when the command ends."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed for this test (apt-get install -y tmux; .ci/run installs it)")
    session = f"egopool-{name}-{os.getpid()}"
    env = f"COLUMNS=160 LINES=50 PYTHONPATH={os.pathsep.join(sys.path)}"
    cmd = f"cd {cwd} && {env} {sys.executable} -m egopool record {args}; echo EXIT=$?; sleep 60"
    _tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", cmd)
    return session


def _rows(screen: str) -> int:
    found = re.findall(r"recording episode N=\S+\s+[\d.]+ s\s+(\d+) rows", screen)
    assert found, screen
    return int(found[-1])


def test_record_in_a_terminal(tmp_path):
    task = tmp_path / "rec" / "pick_cup"
    session = _record_in_tmux("rec", tmp_path, f"{task} --device 'uvc:lavfi:testsrc2=size=320x240:rate=30' "
                              "--device sim:glove --device 'sim:gripper?size=320x240'")
    try:
        first = _wait_for(session, r"(?s)recording episode N=1 .* (\d+) rows.*sim:gripper")
        assert "uvc:lavfi:testsrc2" in first and "sim:glove" in first and "head_left_rgb" in first
        # the verdict measured before the first episode stays on the live status, beside the skipped ticks
        assert re.search(r"capacity: the rig needs [\d.]+ cores per recorded second of \d+", first), first
        assert re.search(r"\d+ rows\s+\d+ ticks skipped", first), first
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


def test_enter_before_the_first_row_discards_the_episode(tmp_path, mpegts_stream):
    """A camera that has not delivered its first frame yet (here: a FIFO camera that stalls): Enter
    ends the episode before its first row. It is discarded with one clear line, no N is taken or
    recycled, the summary says so, the next episode gets the next N and the command exits 0."""
    import threading

    fifo = tmp_path / "cam.fifo"
    os.mkfifo(fifo)
    data = mpegts_stream(tmp_path / "cam.ts", 120)
    half = len(data) // 2 // 188 * 188  # whole TS packets
    more, release = threading.Event(), threading.Event()

    # 2 s of frames, a stall until `more`, 2 s more, then open and silent until `release`
    feeder = camera_fifo(fifo, [data[:half], data[half:]], [more], release)
    task = tmp_path / "rec" / "slow_cam"
    session = _record_in_tmux("rec0", tmp_path, f"{task} --device 'uvc:file:{fifo}' --device sim:glove")
    try:
        _wait_for(session, r"recording episode N=1 .* [1-9]\d* rows")
        time.sleep(2.5)  # the camera stalls (its read blocks): rows repeat its last frame
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"episode 1: \d+ rows")
        _wait_for(session, r"Enter: next episode")
        _tmux("send-keys", "-t", session, "Enter")  # the camera is still silent: no row can be built
        _wait_for(session, r"(?s)Enter: next episode.*recording episode N=…")
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"no rows recorded, episode discarded")
        assert markers.read_recycled(task) is None  # no N was taken, none is recycled
        _wait_for(session, r"(?s)discarded.*Enter: next episode")
        more.set()
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"recording episode N=2 .* [1-9]\d* rows")
        time.sleep(0.5)
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"episode 2: \d+ rows")
        release.set()  # the camera's FIFO closes: its capture thread ends
        _wait_for(session, r"(?s)episode 2: .*Enter: next episode")
        _tmux("send-keys", "-t", session, "q")
        end = _wait_for(session, r"EXIT=\d+")
    finally:
        more.set()
        release.set()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        feeder.join(10)
    assert "EXIT=0" in end and "Traceback" not in end and "None" not in end
    assert re.search(r"│\s*-\s*│\s*discarded \(no rows\)\s*│\s*0\s*│", end)
    assert re.search(r"│\s*1\s*│\s*finished", end) and re.search(r"│\s*2\s*│\s*finished", end)
    t = open_task(task)
    assert [ep.index for ep in t.episodes()] == [1, 2]
    assert markers.read_recycled(task) is None


def test_ctrl_c_between_episodes_quits_with_the_summary(tmp_path):
    """Ctrl-C during an episode finishes it; Ctrl-C while waiting for the next one quits with the summary
    of what was recorded (exit 0), never a silent exit 130."""
    task = tmp_path / "rec" / "ctrl_c"
    session = _record_in_tmux("recc", tmp_path, f"{task} --device 'uvc:lavfi:testsrc2=size=160x120:rate=30' "
                              "--device sim:glove")
    try:
        _wait_for(session, r"recording episode N=1 .* [1-9]\d* rows")
        _tmux("send-keys", "-t", session, "Enter")
        _wait_for(session, r"(?s)episode 1: \d+ rows.*Enter: next episode")
        _tmux("send-keys", "-t", session, "C-c")
        end = _wait_for(session, r"EXIT=\d+")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "EXIT=0" in end and "Traceback" not in end
    assert re.search(r"1\s+episode\(s\) recorded", end) and re.search(r"│\s*1\s*│\s*finished", end)
    assert [ep.index for ep in open_task(task).episodes()] == [1]


def test_ctrl_c_while_a_camera_opens(tmp_path):
    """Ctrl-C while a camera is opening (here it opened and sends nothing: FFmpeg retries its interrupted
    read) ends the command at once: 'egopool: interrupted', exit 130, no task folder."""
    import errno
    import signal

    fifo = tmp_path / "silent.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "record", str(tmp_path / "rec" / "t"), "--device",
                             f"uvc:file:{fifo}", "--device", "sim:glove", "--seconds", "1"],
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, cwd=tmp_path,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    fd = None
    try:
        deadline = time.monotonic() + 60
        while fd is None:  # the camera is being opened once the FIFO has its reader
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO and time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        if fd is not None:
            os.close(fd)
    # Ctrl-C ended the open, not its 10 s timeout: that would end with the camera's DeviceError, not this
    assert proc.returncode == 130 and err.strip() == "egopool: interrupted", err
    assert not (tmp_path / "rec").exists()
