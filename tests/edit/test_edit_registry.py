"""``pipeline.db`` in step after every edit of a directory task (issue 30's third review; docs/decisions.md
E48-E50): an in-place edit's rewritten and moved files, a merge's or split's target, a rename. After each, the
registry's file list and sha256 equal the files on disk and ``egopool repair clean --dry-run`` finds nothing to
record."""

from __future__ import annotations

import json
from pathlib import Path

from backends import kill_at, run_cli
from edit_support import SENSOR, record

from egopool.layout import TaskLayout, list_task_episodes
from egopool.meta.info import read_info
from egopool.ops import clean_task
from egopool.registry import Registry, sha256_file, task_key


def _registered(root: Path, name: str = "pick", episodes: int = 2, first_value: float = 0.0) -> Path:
    """A recorded task whose episodes are in ``root/pipeline.db`` (``repair clean`` records them)."""
    task = record(root, name, episodes, first_value=first_value)
    assert clean_task(task).registered == list(range(1, episodes + 1))
    return task


def _in_step(task: Path) -> dict[int, dict[str, str]]:
    """Assert the registry of ``task`` lists exactly each committed episode's files with their sha256 now; and
    ``repair clean --dry-run`` has nothing to record. Returns N -> {path: sha256}."""
    reg = Registry.for_task(task)
    got = {r.episode_index: {f.path: f.sha256 for f in r.files} for r in reg.recordings(task_key(task))}
    disk = {g.index: {p.relative_to(task).as_posix(): sha256_file(p) for p in g.paths()}
            for g in list_task_episodes(task, TaskLayout.from_info(task, read_info(task))) if g.meta is not None}
    assert got == disk
    r = run_cli("repair", "clean", str(task), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["registered"] == []
    return got


def test_in_place_edits_keep_the_registry_in_step(tmp_path):
    task = _registered(tmp_path / "a")
    before = _in_step(task)
    assert run_cli("edit", "remove-column", str(task), SENSOR).returncode == 0
    after = _in_step(task)
    data = "data/chunk-000/episode-000.parquet"
    assert after[1][data] != before[1][data]  # the rewritten data file's new sha256
    r = run_cli("edit", "rename-slot", str(task), "cam", "head_rgb")
    assert r.returncode == 0, r.stderr
    moved = _in_step(task)
    assert not any("/cam/" in k for k in moved[1]) and any("/head_rgb/" in k for k in moved[1])


def test_an_in_place_edit_killed_between_its_files_and_the_row_is_in_step_after_resume(tmp_path):
    task = _registered(tmp_path / "a")
    kill_at(tmp_path / "state", "edit", "row", "edit", "rename-slot", str(task), "cam", "head_rgb")
    assert run_cli("edit", "resume", str(task)).returncode == 0
    _in_step(task)


def test_merge_split_and_merge_into_targets_are_registered(tmp_path):
    a = _registered(tmp_path / "a")
    b = _registered(tmp_path / "b", episodes=1, first_value=50.0)
    (tmp_path / "out").mkdir()  # an edit creates no missing parent (E55)
    m = tmp_path / "out" / "m"
    assert run_cli("edit", "merge", str(a), str(b), "--into", str(m)).returncode == 0
    assert sorted(_in_step(m)) == [1, 2, 3]
    p = tmp_path / "out" / "p"
    r = run_cli("edit", "split", str(a), "--into", str(p), "--episodes", "2", "--move")
    assert r.returncode == 0, r.stderr
    assert sorted(_in_step(p)) == [1]
    assert sorted(_in_step(a)) == [1]  # the moved N's row is gone from the source's registry (delete's own)
    c = _registered(tmp_path / "c", episodes=1, first_value=80.0)
    r = run_cli("edit", "merge", str(c), "--into", str(b))
    assert r.returncode == 0, r.stderr
    assert sorted(_in_step(b)) == [1, 2]
    assert Registry.for_task(b).watermark(task_key(b)) == 2


def test_rename_moves_the_registry_rows_to_the_new_name(tmp_path):
    a = _registered(tmp_path / "a")
    assert run_cli("delete", str(a), "2").returncode == 0  # watermark 2, one recording left
    r = run_cli("edit", "rename", str(a), "place")
    assert r.returncode == 0, r.stderr
    new = tmp_path / "a" / "place"
    reg = Registry.for_task(new)
    assert reg.recordings("pick") == [] and reg.watermark("pick") == 0
    assert sorted(_in_step(new)) == [1] and reg.watermark("place") == 2



_ROW_NOTE = """
import sys
from egopool.edit.inplace import Change, apply_change
class RowNote(Change):
    op = "test-row-note"
    def args(self):
        return {}
    def check(self, s):
        pass
    def touches_rows(self):
        return True
    def row(self, n, row):
        return {**row, "calibration": "{ }"} if row.get("calibration") == "{}" else None
apply_change(sys.argv[1], RowNote())
"""


def test_a_row_only_change_killed_before_the_registry_refresh_is_in_step_after_resume(tmp_path):
    """E82: a change of an episode's row alone (no file of it rewritten) journals the episode as pending, so a run
    killed after the row write and before pipeline.db's refresh leaves the registry in step once run again (the
    row's sha256 was stale for good before)."""
    import os
    import signal
    import subprocess
    import sys

    from backends import wait_for

    task = _registered(tmp_path / "a")
    before = _in_step(task)
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "EGOPOOL_OPS_PAUSE": "edit:registry", "XDG_STATE_HOME": str(state)}
    proc = subprocess.Popen([sys.executable, "-c", _ROW_NOTE, str(task)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    marker = state / "egopool" / "ops-paused-edit-registry"
    wait_for(marker, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    row, row2 = "meta/episodes/chunk-000/episode-000.parquet", "meta/episodes/chunk-000/episode-001.parquet"
    assert sha256_file(task / row) != before[1][row]  # the row was rewritten, the registry not yet refreshed
    assert json.loads((task / "meta" / ".edit.json").read_text())["pending"]["n"] == 1
    r = subprocess.run([sys.executable, "-c", _ROW_NOTE, str(task)], capture_output=True, text=True,
                       env={k: v for k, v in os.environ.items() if k != "EGOPOOL_OPS_PAUSE"})
    assert r.returncode == 0, r.stderr
    after = _in_step(task)
    assert after[1][row] == sha256_file(task / row) != before[1][row]
    assert after[2][row2] == sha256_file(task / row2) != before[2][row2]
