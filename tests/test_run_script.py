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
    # the stand-in venv has no extras: an EGOPOOL_EXTRAS of the calling run (CI) must not ask for them
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


def test_an_old_python_is_refused_in_one_line_before_anything_installs(tmp_path: Path) -> None:
    """Python 3.9's pip backtracked for 13 minutes before saying egopool needs a newer Python (issue 16 A):
    ``./run`` asks the interpreter first and names the versions and how to pick one."""
    old = tmp_path / "python3.9"
    old.write_text("#!/bin/sh\necho 3.9.18\nexit 1\n")  # `python -c ...`: prints its version, is too old
    old.chmod(0o755)
    venv = tmp_path / "venv"
    env = {**os.environ, "EGOPOOL_VENV": str(venv), "PYTHON": str(old)}
    done = subprocess.run([str(RUN), "tests"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"run: egopool needs Python 3.11, 3.12 or 3.13, but {old} is Python 3.9.18; pick one with PYTHON, "
        "e.g. PYTHON=python3.12 ./run tests"]
    assert not venv.exists()  # nothing was created or installed


def test_pip_is_told_the_python_versions() -> None:
    """pyproject.toml's requires-python is what ./run checks, and README names the same versions."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert meta["requires-python"] == ">=3.11"
    assert any(d.replace(" ", "") == "av>=18" for d in meta["dependencies"])
    assert "Python 3.11, 3.12 or 3.13" in (REPO / "README.md").read_text(encoding="utf-8")
    assert "sys.version_info < (3, 11)" in RUN.read_text(encoding="utf-8")
