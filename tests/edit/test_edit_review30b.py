"""Issue 30's fourth review (/work/wt/review30b.md, docs/decisions.md E62-E66): a directory rename under a
recorder, an interrupted in-place edit as validate and info see it, a self-merge through a symlink, the refusals'
wording."""

from __future__ import annotations

import json
import os
import threading

import pytest
from backends import paused, run_cli
from edit_support import SENSOR, at, record

from egopool._atomic import task_lock
from egopool.errors import LockError
from egopool.meta import markers


def _one_line(r, *says: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count("\n") <= 2 and "Traceback" not in r.stderr, r.stderr
    for s in says:
        assert s in r.stderr, r.stderr


def test_a_directory_rename_is_refused_while_an_episode_is_being_recorded_into_the_task(tmp_path):
    task = record(tmp_path, "simt")
    markers.reserve(task, 3)  # a live recorder (this process) records N=3
    r = run_cli("edit", "rename", str(task), "simt2")
    _one_line(r, "episode(s) 3 are being recorded into this task")
    assert task.is_dir() and not (tmp_path / "simt2").exists() and not (task / "meta" / ".edit.json").exists()
    r = run_cli("edit", "remove-column", str(task), SENSOR)  # the same refusal, from the same check
    _one_line(r, "episode(s) 3 are being recorded into this task")
    markers._reservation(task, 3).unlink()
    r = run_cli("edit", "rename", str(task), "simt2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "simt2" / "meta" / "info.json").exists() and not task.exists()


def test_a_command_waiting_for_the_lock_of_a_task_renamed_meanwhile_is_refused_and_writes_nothing(tmp_path,
                                                                                                  monkeypatch):
    import egopool._atomic as atomic

    task = record(tmp_path, "pick")
    got: list[BaseException] = []
    entered, waiting = threading.Event(), threading.Event()
    monkeypatch.setattr(atomic, "say_waiting", lambda _d: waiting.set())

    def waiter() -> None:
        try:
            with task_lock(task):
                entered.set()
        except LockError as exc:
            got.append(exc)

    with task_lock(task):
        th = threading.Thread(target=waiter)
        th.start()
        assert waiting.wait(30)  # the waiter found the lock taken and waits
        os.rename(task, tmp_path / "moved")
    th.join(30)
    assert not entered.is_set() and len(got) == 1, got
    assert "renamed or removed while this command waited for its lock" in str(got[0])
    assert not (task / "meta" / "info.json").exists()


@pytest.mark.parametrize("op", [("rename-column", SENSOR, "observation.left_glove"), ("remove-slot", "cam")])
def test_validate_and_info_report_a_task_whose_in_place_edit_was_killed_midway(tmp_path, backend, request, op):
    t = at(backend, record(tmp_path / "s", episodes=3), request)
    with paused(tmp_path / "state", "edit", "episode", "edit", *op[:1], t.location, *op[1:]):
        r = run_cli("validate", t.location)  # its run alive: in progress, wait
        assert r.returncode != 0 and "the task is mid-edit" in r.stdout + r.stderr, r.stdout + r.stderr
        assert f"`egopool edit {op[0]}` is in progress on this task" in r.stdout + r.stderr
    for cmd in (("validate", t.location), ("validate", t.location, "--json"), ("info", t.location)):
        r = run_cli(*cmd)
        out = r.stdout + r.stderr
        assert r.returncode != 0, out
        assert "the task is mid-edit" in out and f"an interrupted `egopool edit {op[0]}` holds this task" in out, out
        assert f"egopool edit resume {t.location}" in out, out
    r = run_cli("info", t.location)
    _one_line(r, "the task is mid-edit")
    r = run_cli("edit", "resume", t.location)  # resume opens such a task
    assert r.returncode == 0, r.stderr
    assert run_cli("validate", t.location).returncode == 0
    r = run_cli("info", t.location)
    assert r.returncode == 0 and ("observation.left_glove" in r.stdout if op[0] == "rename-column"
                                  else "cam" not in r.stdout.split("devices")[0]), r.stdout + r.stderr


def test_a_merge_holding_its_source_is_no_mid_edit(tmp_path):
    a = record(tmp_path / "a", episodes=2)
    b = record(tmp_path / "b", episodes=1, first_value=50.0)
    (tmp_path / "out").mkdir()
    with paused(tmp_path / "state", "edit", "episode", "edit", "merge", str(a), str(b), "--into",
                str(tmp_path / "out" / "m")):
        r = run_cli("validate", str(a))
        assert r.returncode == 0, r.stdout + r.stderr
        assert run_cli("info", str(a)).returncode == 0


def test_a_self_merge_through_a_symlink_is_refused_and_writes_nothing(tmp_path):
    a = record(tmp_path, "a", episodes=2)
    (tmp_path / "alink").symlink_to("a")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    r = run_cli("edit", "merge", str(a), str(tmp_path / "alink"), "--into", str(tmp_path / "aa3"))
    _one_line(r, "a task is named twice among")
    r = run_cli("edit", "merge", str(tmp_path / "alink"), "--into", str(a))
    _one_line(r, f"cannot merge {a} into itself", "alink is the same task")
    r = run_cli("edit", "merge", str(a), "--into", str(tmp_path / "alink"))
    _one_line(r, "into itself")
    r = run_cli("edit", "split", str(tmp_path / "alink"), "--into", str(a), "--episodes", "1")
    _one_line(r, "is a task already")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no skeleton, no lock left
    assert run_cli("validate", str(a)).returncode == 0


def test_refusals_say_what_is_wrong_with_the_path_or_the_name(tmp_path):
    a = record(tmp_path, "a", episodes=1)
    (tmp_path / "afile").write_text("x")
    for into in (tmp_path / "afile" / "x", tmp_path / "afile" / "y" / "x"):
        r = run_cli("edit", "split", str(a), "--into", str(into), "--episodes", "1")
        _one_line(r, f"{tmp_path / 'afile'} is a file, not a directory")
    _one_line(run_cli("edit", "resume", str(tmp_path / "afile")), f"{tmp_path / 'afile'} is a file, not a task directory")
    _one_line(run_cli("edit", "resume", str(tmp_path / "nonexist")), f"{tmp_path / 'nonexist'} does not exist")
    assert not (tmp_path / "nonexist").exists()  # nothing made up
    _one_line(run_cli("edit", "rename", str(a), "a"), "the task is already called 'a'")
    _one_line(run_cli("edit", "rename-slot", str(a), "cam", "cam"), "slot 'cam' is already called that")
    r = run_cli("edit", "rename-slot", str(a), "cam", "cam", "--json")
    _one_line(r, "slot 'cam' is already called that")
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and "slot 'cam' is already called that" in doc["error"], r.stdout
    r = run_cli("edit", "merge", str(a), "--into", str(a), "--json")
    assert json.loads(r.stdout)["ok"] is False and "into itself" in json.loads(r.stdout)["error"]


def test_a_missing_bucket_task_is_said_as_such(tmp_path, request):
    t = at("bucket", record(tmp_path / "s", episodes=1), request)
    missing = t.location.rsplit("/", 1)[0] + "/zz"
    for cmd in (("info", missing), ("edit", "rename-slot", missing, "cam", "c2")):
        r = run_cli(*cmd)
        _one_line(r, f"no task at {missing}", "check the URI")
        assert "data/, videos/, meta/" not in r.stderr
    r = run_cli("validate", missing)
    assert r.returncode == 1 and f"no task at {missing}" in r.stdout, r.stdout + r.stderr


def test_a_rename_during_another_edit_names_that_edit_and_its_pid(tmp_path):
    a = record(tmp_path, "a", episodes=3)
    with paused(tmp_path / "state", "edit", "episode", "edit", "remove-column", str(a), SENSOR) as first:
        r = run_cli("edit", "rename", str(a), "b")
        _one_line(r, "`egopool edit remove-column` is in progress on this task", f"pid {first.proc.pid}")
        assert not (tmp_path / "b").exists()


def test_a_recorder_idle_between_episodes_of_a_renamed_task_does_not_re_create_it(tmp_path):
    """E81: the writer's next ``begin_episode`` after a directory rename is refused, and the old path stays gone
    (it used to come back as an empty ``meta/episodes/`` skeleton)."""
    import numpy as np

    from egopool import FormatError, StreamSpec, TaskWriter, vector_column

    tw = TaskWriter(tmp_path, "idle", fps=30.0, registry=False)

    def one() -> None:
        ep = tw.begin_episode(columns=[vector_column(SENSOR, [4])], streams=[StreamSpec("cam", "rgb", 32, 24)],
                              sensors=["right_glove"], sensor_dim=4)
        for i in range(4):
            ep.add_frame({SENSOR: np.full(4, float(i), np.float32)}, images={"cam": np.zeros((24, 32, 3), np.uint8)})
        ep.finish()

    one()
    r = run_cli("edit", "rename", str(tmp_path / "idle"), "idle2")
    assert r.returncode == 0, r.stderr
    with pytest.raises(FormatError, match="renamed or removed") as err:
        one()
    assert str(tmp_path / "idle") in err.value.one_line()
    assert not (tmp_path / "idle").exists()
    r = run_cli("ls", str(tmp_path / "idle2"), "--json")
    assert r.returncode == 0 and [e["episode_index"] for e in json.loads(r.stdout)] == [1], r.stdout + r.stderr
