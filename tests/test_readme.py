"""README.md's code blocks run as written (issue 16 C), the way zarr-python's tests/test_docs.py runs its docs.

* Every ```python block runs, in README order, in one namespace, with a temporary directory as the
  working directory (so `recordings/`, `lerobot/`, `tum/` land there, never in the repository).
* A ```bash block runs when the line before its fence is ``<!-- run -->``, or
  ``<!-- run; first: CMD -->`` (a set-up command, e.g. a short ``./run demo``, run before the block):
  each line beginning with ``./run`` runs as ``python -m egopool ...`` through bash (globs and
  trailing comments as in a shell) in a temporary working directory holding a link to ``tests/``
  (the fixtures the examples name), with ``/tmp/`` pointed into that directory. Lines that pick
  another environment (``EGOPOOL_EXTRAS=... ./run``, ``EGOPOOL_VENV=...``) are left to the extras'
  own tests; any other command line in a run block fails the test (nothing is skipped silently).
* ``<!-- not run: REASON -->`` before a fence leaves a block out; the reason is required. A bash
  block without a mark is not run.

So a new ```python block must run as written, after the blocks before it, or carry a
``<!-- not run: ... -->`` mark saying why it cannot (a server, a camera, another venv).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*(not run|run)\s*(?:[:;]\s*(.*?))?\s*-->\s*$")
_ENV_PREFIX = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*\s")


@dataclass(frozen=True)
class Block:
    """One fenced code block of README.md."""

    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    mark: str | None  # "run", "not run" or None
    detail: str  # the reason of "not run", the "first: ..." of "run"


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` with the mark on the last non-blank line before each fence."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = _MARK.match(prev)
        blocks.append(Block(m.group(1), "\n".join(lines[start + 1:j]) + "\n", start + 1,
                            mark.group(1) if mark else None, (mark.group(2) or "") if mark else ""))
        i = j + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
PYTHON = [b for b in BLOCKS if b.lang == "python" and b.mark != "not run"]
BASH_RUN = [b for b in BLOCKS if b.lang == "bash" and b.mark == "run"]


def _root_entries() -> set[str]:
    return {p.name for p in REPO.iterdir()}


def test_marks_say_why_a_block_is_not_run():
    assert PYTHON and BASH_RUN, "README.md has no runnable python / bash block"
    for b in BLOCKS:
        if b.mark == "not run":
            assert len(b.detail) >= 10, f"README.md:{b.line}: `<!-- not run: REASON -->` needs its reason"
        if b.mark == "run" and b.detail:
            assert b.detail.startswith("first:"), f"README.md:{b.line}: a run mark takes only `first: CMD`"
    text = README.read_text(encoding="utf-8")
    stray = [ln for ln in text.splitlines() if ln.strip().startswith("<!--") and "run" in ln
             and not _MARK.match(ln.strip())]
    assert not stray, f"README.md: marks that do not parse: {stray}"


def _tum_points(path: Path) -> int:
    return sum(1 for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#"))


def test_python_blocks_run_as_written_in_order(tmp_path, monkeypatch):
    """Every ```python block in one namespace; then what README's comments say they give is checked."""
    from egopool import open_task
    from egopool.validate import validate_task

    before = _root_entries()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    for b in PYTHON:
        try:
            exec(compile(b.code, f"README.md:{b.line}", "exec"), namespace)  # noqa: S102 - README's own code
        except Exception as exc:  # noqa: BLE001 - named with the block
            pytest.fail(f"README.md:{b.line} (```python block) fails as written: {type(exc).__name__}: {exc}")
    assert _root_entries() == before, "running README's examples left files in the repository root"
    # the writer example: N=1 of 90 rows with real stamps; the interop example exported it and read it back
    task = open_task(tmp_path / "recordings" / "pick_cup")
    ep = task.episode(1)
    assert ep.length == 90 and min(ep.table.column("hardware_ns").to_pylist()) > 0
    info = json.loads((tmp_path / "lerobot" / "pick_cup" / "meta" / "info.json").read_text())
    assert info["features"]["observation.state"]["shape"] == [63] and info["total_frames"] == 90
    back = open_task(tmp_path / "recordings" / "pick_cup_back")
    assert [e.length for e in back.episodes()] == [90]
    tum = sorted((tmp_path / "tum").glob("*.txt"))
    assert len(tum) == 1 and _tum_points(tum[0]) == 90  # every point stamped: none skipped
    # the recorder example recorded an episode of its rig in real time (15 ticks, some may be skipped on
    # a loaded machine), the signals example a simulated one of 0.5 s at 30 fps with force matrices
    rig_task = open_task(tmp_path / "recordings" / "pick_cup_rig")
    rows = [e.length for e in rig_task.episodes()]
    assert len(rows) == 2 and 1 <= rows[0] <= 15 and rows[1] == 15
    assert namespace["fm"].shape == (15, 250, 250, 3) and len(namespace["depth"]) == 15
    for t in (task.path, back.path, rig_task.path):
        report = validate_task(t)
        assert not report.errors, [f.message for f in report.errors]


def _commands(b: Block) -> list[tuple[int, str]]:
    """``(README line, command)`` of a run block: its ``./run`` lines, continuations joined."""
    out: list[tuple[int, str]] = []
    lines = b.code.splitlines()
    i = 0
    while i < len(lines):
        line, n = lines[i], b.line + 1 + i
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if _ENV_PREFIX.match(s):
            continue  # another environment (an extra's venv): the extra's own tests run it
        assert s.startswith("./run "), f"README.md:{n}: a run block holds only ./run lines, not {s!r}"
        out.append((n, s))
    return out


def _as_module(cmd: str, tmp: Path) -> str:
    return f"{sys.executable} -m egopool " + cmd.removeprefix("./run ").replace("/tmp/", f"{tmp}/")


@pytest.mark.parametrize("block", BASH_RUN, ids=[f"README.md:{b.line}" for b in BASH_RUN])
def test_marked_bash_blocks_run_as_written(block, tmp_path):
    before = _root_entries()
    (tmp_path / "tests").symlink_to(REPO / "tests", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))
    first = [(block.line - 1, c.strip()) for c in block.detail.removeprefix("first:").split(";") if c.strip()]
    for n, cmd in [*first, *_commands(block)]:
        assert cmd.startswith("./run "), f"README.md:{n}: {cmd!r}"
        proc = subprocess.run(["bash", "-c", _as_module(cmd, tmp_path)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, f"README.md:{n}: `{cmd}` exits {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert _root_entries() == before
