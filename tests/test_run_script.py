"""``./run``: the venv lives in the repository, commands run in the caller's directory (README "Two commands").

A stand-in venv (``EGOPOOL_VENV``) whose ``egopool`` / ``python`` print their working
directory and arguments shows where and how ``./run`` starts them, without installing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "run"


@pytest.fixture()
def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in ("egopool", "python"):
        script = venv / "bin" / tool
        script.write_text(f'#!/bin/sh\necho "{tool} cwd=$(pwd) args=$*"\n')
        script.chmod(0o755)
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (4_000_000_000, 4_000_000_000))  # newer than pyproject.toml
    return venv


def _run(args: list[str], cwd: Path, venv: Path) -> str:
    # the stand-in venv has no extras: an EGOPOOL_EXTRAS of the caller (CI sets one) would reinstall
    env = {**{k: v for k, v in os.environ.items() if k != "EGOPOOL_EXTRAS"}, "EGOPOOL_VENV": str(venv)}
    done = subprocess.run([str(RUN), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # nothing was installed
    return done.stdout.strip()


def test_demo_without_arguments_writes_demo_out_in_the_callers_directory(tmp_path: Path, fake_venv: Path) -> None:
    cwd = tmp_path / "work dir"
    cwd.mkdir()
    assert _run(["demo"], cwd, fake_venv) == f"egopool cwd={cwd} args=demo demo_out --overwrite"


def test_commands_resolve_relative_paths_against_the_callers_directory(tmp_path: Path, fake_venv: Path) -> None:
    assert _run(["ls", "rec/task"], tmp_path, fake_venv) == f"egopool cwd={tmp_path} args=ls rec/task"
    assert _run(["demo", "out", "--episodes", "2"], tmp_path, fake_venv) == \
        f"egopool cwd={tmp_path} args=demo out --episodes 2"


def test_tests_run_from_the_repository_root(tmp_path: Path, fake_venv: Path) -> None:
    assert _run(["tests", "-q"], tmp_path, fake_venv) == f"python cwd={REPO} args=-m pytest -q"
