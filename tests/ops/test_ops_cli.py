"""The maintenance CLI: --json reports, --dry-run, one-line errors, exit codes."""

from __future__ import annotations

import json

from ops_helpers import files_of, snapshot, write_task

from egopool.cli.app import main
from egopool.meta.stats import read_stats, stats_path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_delete_json_and_dry_run(tmp_path, capsys):
    task = write_task(tmp_path, episodes=2)
    before = snapshot(task)
    code, out, err = run(capsys, "delete", task, 2, "--dry-run", "--json")
    assert code == 0 and snapshot(task) == before
    plan = json.loads(out)["plans"][0]
    assert plan["episode_index"] == 2 and sorted(plan["files"]) == [
        "data/chunk-000/episode-001.parquet", "meta/episodes/chunk-000/episode-001.parquet",
        "videos/chunk-000/cam/episode-001.mp4"]
    code, out, err = run(capsys, "delete", task, 2, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["ok"] is True and doc["outcomes"][0]["registry"] == "removed"
    assert "data/chunk-000/episode-001.parquet" not in files_of(task)


def test_delete_bad_input_is_one_line(tmp_path, capsys):
    task = write_task(tmp_path, episodes=1)
    before = snapshot(task)
    for argv, msg in ((("delete", task, 0), "N must be a plain positive decimal integer (1, 2, 3, ...), got '0'"),
                      (("delete", task, 7), "no episode 7 in task"),
                      (("delete", tmp_path / "nope", 1), "task directory does not exist")):
        code, out, err = run(capsys, *argv)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and err.startswith("egopool: error: ") and msg in err
    assert snapshot(task) == before


def test_stats_check_exit_codes_and_recalc(tmp_path, capsys):
    task = write_task(tmp_path, episodes=2, video=False)
    assert run(capsys, "stats", "check", task)[0] == 0
    run(capsys, "delete", task, 1)
    code, out, _ = run(capsys, "stats", "check", task, "--json")
    assert code == 1 and json.loads(out)["differing_blocks"] == ["observation.right_glove"]
    code, out, _ = run(capsys, "stats", "check", task)
    assert code == 1 and "observation.right_glove" in out and "count 6 stored, 3 in data/" in out
    before = stats_path(task).read_bytes()
    assert run(capsys, "stats", "recalc", task, "--dry-run")[0] == 0
    assert stats_path(task).read_bytes() == before
    code, out, _ = run(capsys, "stats", "recalc", task, "--json")
    assert code == 0 and json.loads(out)["written"] is True
    assert read_stats(task)["observation.right_glove"]["count"] == 3
    assert run(capsys, "stats", "check", task)[0] == 0


def test_migrate_and_repair_on_a_current_task_are_no_ops(tmp_path, capsys):
    task = write_task(tmp_path, episodes=1)
    before = snapshot(task)
    code, out, _ = run(capsys, "migrate", task, "--split-episodes")
    assert code == 0 and "nothing to migrate" in out
    code, out, _ = run(capsys, "repair", "force-scale", task, "--json")
    assert code == 0 and json.loads(out)["episodes"] == []
    assert snapshot(task) == before


def test_every_command_gives_one_line_for_a_directory_that_is_not_a_task(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for argv in (("stats", "check"), ("stats", "recalc"), ("migrate",), ("repair", "force-scale"), ("delete",)):
        extra = ("1",) if argv == ("delete",) else ()
        code, out, err = run(capsys, *argv, tmp_path / "empty", *extra)
        assert code == 1 and out == "", argv
        assert err.count("\n") == 1 and "meta/info.json is missing" in err, (argv, err)
    assert list((tmp_path / "empty").iterdir()) == []


def test_an_empty_task_argument_is_refused_not_taken_as_the_current_directory(tmp_path, capsys, monkeypatch):
    """`egopool delete "$TASK" 1` with TASK unset must not delete from wherever the shell happens to be."""
    task = write_task(tmp_path, episodes=1)
    monkeypatch.chdir(task)
    before = snapshot(task)
    for argv in (("delete", "", 1), ("migrate", ""), ("stats", "recalc", ""), ("repair", "force-scale", " ")):
        code, _, err = run(capsys, *argv)
        assert code == 2, argv
        assert "TASK is empty" in err
    assert snapshot(task) == before
    assert run(capsys, "delete", ".", 1, "--dry-run")[0] == 0  # "." is how to mean the current directory


def test_a_corrupt_registry_error_says_how_to_proceed_without_it(tmp_path, capsys):
    task = write_task(tmp_path, episodes=2)
    (tmp_path / "pipeline.db").write_bytes(b"not a database" * 100)
    before = snapshot(task)
    code, out, err = run(capsys, "delete", task, 1)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "pipeline.db" in err and "file is not a database" in err and "--no-registry" in err
    assert snapshot(task) == before
    assert run(capsys, "delete", task, 1, "--no-registry")[0] == 0


def test_a_read_only_registry_error_says_how_to_proceed_without_it(tmp_path, capsys, monkeypatch):
    from egopool.errors import RegistryError
    from egopool.registry import Registry

    task = write_task(tmp_path, episodes=1)
    before = snapshot(task)

    def read_only(self, *a, **kw):
        raise RegistryError("registry operation failed: attempt to write a readonly database", path=self.path)

    monkeypatch.setattr(Registry, "bump_watermark", read_only)
    code, _, err = run(capsys, "delete", task, 1)
    assert code == 1 and "nothing was removed" in err and "--no-registry" in err
    assert snapshot(task) == before


# -- a dry run needs no write access (issue 16 E) --------------------------------------------------------------------

DRY_RUNS = {"delete": ("delete", "{task}", "1", "--dry-run"),
            "stats recalc": ("stats", "recalc", "{task}", "--dry-run"),
            "migrate": ("migrate", "{task}", "--dry-run"),
            "repair force-scale": ("repair", "force-scale", "{task}", "--dry-run"),
            "compress": ("compress", "{task}", "--dry-run")}


def test_every_dry_run_works_on_a_read_only_task(tmp_path, capsys):
    """`--dry-run` failed with `meta/episodes/.lock: failed: Permission denied (permission denied; ...)`."""
    from mounts import read_only_view

    write_task(tmp_path / "rw", episodes=2)
    with read_only_view(tmp_path / "rw", tmp_path / "ro") as ro:
        task = ro / "pick"
        before = snapshot(task)
        for name, argv in DRY_RUNS.items():
            code, out, err = run(capsys, *(a.format(task=task) for a in argv))
            assert (name, code, err) == (name, 0, ""), out
            if name == "delete":
                assert out.startswith("episode 1: would remove 3 file(s)")
        assert snapshot(task) == before
        code, out, err = run(capsys, "delete", task, "1", "--yes")  # the real thing needs write access: one line
    assert code == 1
    assert err == (f"egopool: error: {task}/meta/episodes/.lock: failed: Read-only file system (choose a location "
                   "on a writable file system)\n")
