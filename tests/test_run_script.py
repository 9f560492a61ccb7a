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
    # nor a PYTHON (CI exports one): the stand-in's python answers no version question
    env = {**{k: v for k, v in os.environ.items() if k not in ("EGOPOOL_EXTRAS", "PYTHON")}, "EGOPOOL_VENV": str(venv)}
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


def _fake_python(path: Path, version: str) -> Path:
    """A stand-in interpreter that answers ./run's version questions as Python ``version`` would."""
    minor = ".".join(version.split(".")[:2])
    ok = tuple(int(x) for x in version.split(".")[:2]) >= (3, 11)
    path.write_text("#!/bin/sh\n"
                    'case "$*" in\n'
                    f'  *"%d.%d.%d"*) echo {version} ;;\n'
                    f'  *"%d.%d"*) echo {minor} ;;\n'
                    f'  *sys.exit*) exit {0 if ok else 1} ;;\n'
                    '  *) echo "python cwd=$(pwd) args=$*" ;;\n'
                    "esac\n")
    path.chmod(0o755)
    return path


@pytest.fixture()
def repo_copy(tmp_path: Path) -> Path:
    """``run`` in a repository of its own whose install-extra records each extra it is asked for."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "run").write_text(RUN.read_text(encoding="utf-8"))
    (repo / "run").chmod(0o755)
    (repo / "pyproject.toml").write_text("")
    extra = repo / "scripts" / "install-extra"
    extra.write_text('#!/bin/sh\necho "$1" >> "$2/extras.log"\n')
    extra.chmod(0o755)
    return repo


def _venv(repo: Path, name: str, version: str, installed: str) -> Path:
    venv = repo / name
    (venv / "bin").mkdir(parents=True)
    _fake_python(venv / "bin" / "python", version)
    tool = venv / "bin" / "egopool"
    tool.write_text(f'#!/bin/sh\necho "{name} egopool args=$*"\n')
    tool.chmod(0o755)
    (venv / ".installed").write_text(installed)
    os.utime(venv / ".installed", (4_000_000_000, 4_000_000_000))
    return venv


def _run_in(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("EGOPOOL_EXTRAS", "EGOPOOL_VENV", "PYTHON")}
    return subprocess.run([str(repo / "run"), *args], cwd=repo, env={**base, **env}, capture_output=True, text=True,
                          timeout=60)


def test_python_is_honoured_when_a_venv_of_another_interpreter_exists(repo_copy: Path, tmp_path: Path) -> None:
    """Issue 28: ``PYTHON=python3.10 ./run`` ran on the old 3.11 venv, and ``PYTHON=python3.12 ./run tests``
    tested 3.11 silently."""
    _venv(repo_copy, ".venv", "3.11.9", "")
    _venv(repo_copy, ".venv-python3.12", "3.12.1", "")
    old = _fake_python(tmp_path / "python3.10", "3.10.14")
    done = _run_in(repo_copy, {"PYTHON": str(old)}, "--version")
    assert done.returncode == 1 and "needs Python 3.11, 3.12 or 3.13" in done.stderr and "3.10.14" in done.stderr
    new = _fake_python(tmp_path / "python3.12", "3.12.1")
    done = _run_in(repo_copy, {"PYTHON": str(new)}, "ls", "t")
    assert done.returncode == 0 and done.stdout.strip() == ".venv-python3.12 egopool args=ls t", done.stderr
    same = _fake_python(tmp_path / "python3.11", "3.11.9")
    assert _run_in(repo_copy, {"PYTHON": str(same)}, "ls").stdout.strip() == ".venv egopool args=ls"
    assert _run_in(repo_copy, {}, "ls").stdout.strip() == ".venv egopool args=ls"
    # a venv named by EGOPOOL_VENV is never swapped for another: a mismatch is one line
    done = _run_in(repo_copy, {"PYTHON": str(new), "EGOPOOL_VENV": ".venv"}, "tests")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"run: {repo_copy}/.venv holds Python 3.11, but PYTHON={new} is 3.12: remove {repo_copy}/.venv or name "
        "another EGOPOOL_VENV"]


def test_a_subset_of_the_installed_extras_installs_nothing(repo_copy: Path) -> None:
    """Issue 28: following README in order (interop, then server,s3, then server) reinstalled everything 3 times."""
    venv = _venv(repo_copy, ".venv", "3.11.9", "interop,server,s3")
    for extras in ("server", "s3,interop", "interop,server,s3", ""):
        done = _run_in(repo_copy, {"EGOPOOL_EXTRAS": extras}, "ls")
        assert done.returncode == 0 and done.stderr == "" and done.stdout.strip() == ".venv egopool args=ls"
    assert not (venv / "extras.log").exists()
    done = _run_in(repo_copy, {"EGOPOOL_EXTRAS": "server,ray"}, "ls")
    assert done.stderr.strip() == f"run: adding extras ray to {venv} ..."
    assert (venv / "extras.log").read_text().split() == ["ray"]  # only the new one; the venv was kept
    assert (venv / ".installed").read_text() == "interop,server,s3,ray"
    assert _run_in(repo_copy, {"EGOPOOL_EXTRAS": "ray"}, "ls").stderr == ""
