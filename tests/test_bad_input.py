"""Bad input (issue "Foundation", How it is checked): a missing or unknown ``format``, a truncated
parquet, a pretty-printed tasks.jsonl, an empty directory.

``egopool validate`` gives a one-line error naming the file and exits non-zero; every
command that needs the broken file (info / ls / show on a broken info.json) gives one line
on stderr and exit 1, never a traceback; ``ls`` / ``show`` list a broken episode with its
problem instead of failing; nothing is written anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from validate_support import DATA, META, build_task, copy_task, edit_json, snapshot

from egopool.cli.app import main


def _truncate(p: Path) -> None:
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) // 2])


def _pretty_tasks(t: Path) -> None:
    (t / "meta/tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "demo"}, indent=2) + "\n")


#: name -> (how to break the task, the file the error must name, commands that fail on that file)
CASES: dict[str, tuple[Callable[[Path], None], str, tuple[str, ...]]] = {
    "missing_format": (lambda t: edit_json(t / "meta/info.json", lambda d: d.pop("format")), "meta/info.json",
                       ("info", "ls", "show")),
    "unknown_format": (lambda t: edit_json(t / "meta/info.json", lambda d: d.update(format="lerobot_v3")),
                       "meta/info.json", ("info", "ls", "show")),
    "truncated_data_parquet": (lambda t: _truncate(t / DATA), DATA, ()),
    "truncated_meta_parquet": (lambda t: _truncate(t / META), META, ()),
    "pretty_tasks_jsonl": (_pretty_tasks, "meta/tasks.jsonl", ()),
}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("ref"))


@pytest.fixture(params=[*CASES, "empty_directory"])
def bad(request: pytest.FixtureRequest, reference: Path, tmp_path: Path) -> tuple[Path, str, tuple[str, ...]]:
    if request.param == "empty_directory":
        empty = tmp_path / "empty"
        empty.mkdir()
        return empty, "meta/info.json", ("info", "ls", "show")
    breaker, named, readers = CASES[request.param]
    t = copy_task(reference, tmp_path)
    breaker(t)
    return t, named, readers


def _args(cmd: str, task: Path) -> list[str]:
    return [cmd, str(task), "1"] if cmd == "show" else [cmd, str(task)]


def test_validate_one_line_error_naming_the_file(bad: tuple[Path, str, tuple[str, ...]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    task, named, _ = bad
    before = snapshot(task)
    assert main(["validate", str(task)]) == 1
    out, err = capsys.readouterr()
    errors = [line for line in out.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, out
    assert str(task / named) in errors[0]
    assert out.splitlines()[-1].startswith("FAILED")
    assert "Traceback" not in out + err
    assert snapshot(task) == before


def test_validate_json_names_the_file(bad: tuple[Path, str, tuple[str, ...]],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    task, named, _ = bad
    assert main(["validate", "--json", str(task)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert [f["path"] for f in errors] == [str(task / named)]
    assert "\n" not in errors[0]["message"]


@pytest.mark.parametrize("cmd", ["info", "ls", "show"])
def test_inspect_commands(bad: tuple[Path, str, tuple[str, ...]], cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A command that reads the broken file: one line on stderr, exit 1; one that does not: works."""
    task, named, readers = bad
    before = snapshot(task)
    rc = main(_args(cmd, task))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if cmd in readers:
        assert rc == 1
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("egopool: error: ")
        named_path = task if named == "meta/info.json" and not (task / "meta").exists() else task / named
        assert str(named_path) in lines[0]
    else:
        broken_episode = named in (DATA, META) and cmd == "show"  # a part that does not read: exit 1 (issue 28)
        assert rc == (1 if broken_episode else 0) and err == ""
        if named in (DATA, META) and cmd in ("ls", "show"):  # the broken episode is listed with its problem
            what = "data parquet" if named == DATA else "meta row"
            assert f"{what} unreadable" in out and ("NO: " in out or "problem: " in out), out
    assert snapshot(task) == before


def test_legacy_v1_layout_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pick_000001").mkdir()
    for cmd in ("validate", "info", "ls", "show"):
        assert main(_args(cmd, tmp_path)) == 1
        out, err = capsys.readouterr()
        text = out if cmd == "validate" else err
        assert "legacy v1.0" in text and "Traceback" not in out + err
