"""``egopool simulate`` (issue 3: --rig full / d435x2 / uvc3 ...)."""

import json

from egopool import open_task
from egopool.cli.app import main


def test_simulate_json_records_n_episodes(tmp_path, capsys):
    rc = main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.2", "--scale", "16",
               "--out", str(tmp_path), "--task", "双D435", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == str(tmp_path / "双D435") and out["rig"] == "d435x2"
    assert out["devices"] == ["d435:213622075531", "d435:213622075532"]
    assert [e["episode_index"] for e in out["episodes"]] == [1, 2]
    assert [e["length"] for e in out["episodes"]] == [6, 6]
    assert all(len(e["files"]) == 6 for e in out["episodes"])  # 4 videos + data + meta row
    task = open_task(tmp_path / "双D435")
    assert [ep.index for ep in task.episodes()] == [1, 2]


def test_simulate_default_task_name_and_human_output(tmp_path, capsys):
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sim_uvc3" in out and "episode 1: 3 rows" in out
    assert sorted(open_task(tmp_path / "sim_uvc3").info["cameras"]) == ["head_left_rgb", "head_right_rgb",
                                                                       "head_right_rgb_2"]


def test_simulate_unknown_rig_is_one_line_error(tmp_path, capsys):
    assert main(["simulate", "--rig", "kinect", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("egopool: error: unknown rig 'kinect'") and "full" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "sim_kinect").exists()


def test_simulate_non_finite_seconds_is_one_line_error(tmp_path, capsys):
    for bad in ("inf", "nan"):
        assert main(["simulate", "--rig", "uvc3", "--seconds", bad, "--scale", "16", "--out", str(tmp_path)]) != 0
        err = capsys.readouterr().err
        assert "Traceback" not in err and "--seconds" in err
    assert not (tmp_path / "sim_uvc3" / "data").exists()


def test_simulate_empty_task_name_is_refused_like_the_importers(tmp_path, capsys):
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path),
                 "--task", ""]) == 1
    err = capsys.readouterr().err
    assert err.startswith("egopool: error: invalid task name ''") and len(err.splitlines()) == 1
    assert not (tmp_path / "sim_uvc3").exists()


def test_simulate_absurd_fps_is_refused_before_recording(tmp_path, capsys):
    # fps sizes the bounded queues (rows = fps / 2): --fps 1e9 grew them until the OOM killer came.
    # 5000 fps x 0.01 s is harmless if the bound ever goes (the test then fails, it does not swap).
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.01", "--scale", "16", "--out", str(tmp_path),
                 "--fps", "5000"]) != 0
    assert "--fps" in capsys.readouterr().err
    assert not (tmp_path / "sim_uvc3").exists()


def test_simulate_piped_output_has_no_progress_residue(tmp_path, capsys):
    # not a terminal: no progress bar, so no blank line ahead of the summary (as demo / import / ops)
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.1", "--scale", "16", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].startswith(str(tmp_path / "sim_uvc3") + ": 1 episode(s)")
    assert captured.err == ""


# -- faults: SIGTERM, SIGKILL, a full disk (issues 15 G, 16 E) ------------------------------------------------------

import errno  # noqa: E402
import glob  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from egopool import TaskWriter  # noqa: E402
from egopool.validate import validate_task  # noqa: E402

SIM = ["simulate", "--rig", "lite_gloves", "--scale", "8", "--seconds", "1"]


def _leftovers(task: Path) -> list[str]:
    return sorted(str(p.relative_to(task)) for p in task.rglob(".*") if p.name.endswith(".tmp")
                  or p.name.startswith(".reserved-"))


def _start_and_wait_for_temps(out: Path, sig: int) -> subprocess.CompletedProcess:
    """Run `egopool simulate` as its own process; once its first video temp exists, send ``sig``."""
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "simulate", "--rig", "full", "--scale", "4",
                             "--episodes", "3", "--seconds", "20", "--out", str(out), "--task", "t"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not glob.glob(str(out / "t/videos/chunk-000/*/.episode-000.mp4.*.tmp")):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    """The example: a simulate ended by SIGTERM left 115 MB of .tmp files and a .reserved-1, validate said ok."""
    done = _start_and_wait_for_temps(tmp_path, signal.SIGTERM)
    assert (done.returncode, done.stderr, done.stdout) == (130, "egopool: interrupted\n", "")
    assert _leftovers(tmp_path / "t") == []
    report = validate_task(tmp_path / "t")
    assert report.ok and report.findings == []
    assert TaskWriter(tmp_path, "t").next_episode_index() == 1  # the discarded N is free again


def test_a_killed_writers_leftovers_are_reported_and_cleaned(tmp_path, capsys):
    """SIGKILL cannot be handled: validate names what is left and the command that clears it, which works;
    a later writer sweeps them too."""
    done = _start_and_wait_for_temps(tmp_path, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    task = tmp_path / "t"
    left = _leftovers(task)
    temps = [p for p in left if p.endswith(".tmp")]
    assert len(temps) >= 2 and "meta/.reserved-1" in left
    warnings = [(f.severity, f.message) for f in validate_task(task).findings]
    assert [s for s, _ in warnings] == ["warning", "warning"]
    assert warnings[0][1].startswith(f"{len(temps)} temp file(s) of writers that are no longer running (")
    assert warnings[0][1].endswith("they only hold disk space; run `egopool repair clean TASK` to remove them")
    assert warnings[1][1].startswith("reservation(s) of episode(s) 1 by processes that are no longer running")
    before = {p: (task / p).stat().st_size for p in left}
    assert main(["repair", "clean", str(task), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["temps"] == temps and plan["reservations"] == [1] and plan["rolled_back"] == [1]
    assert plan["temp_bytes"] == sum(before[p] for p in temps)
    assert _leftovers(task) == left  # a dry run removes nothing
    assert main(["repair", "clean", str(task)]) == 0
    assert capsys.readouterr().out.startswith(f"removed {len(temps)} stale temp file(s)")
    assert _leftovers(task) == []
    assert validate_task(task).findings == []


def test_a_new_writer_sweeps_temps_of_dead_writers(tmp_path):
    done = _start_and_wait_for_temps(tmp_path, signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL and _leftovers(tmp_path / "t")
    TaskWriter(tmp_path, "t")  # opening the task is enough: under the lock, every temp of a dead writer goes
    assert _leftovers(tmp_path / "t") == []


def test_disk_full_before_the_first_byte_leaves_no_temp(tmp_path, capsys):
    """The example: with 4 KB free simulate failed cleanly but left a 0-byte .episode-002.parquet.<hex>.tmp."""
    from mounts import fill_leaving, small_fs

    with small_fs(tmp_path / "fs", 3072) as fs:
        assert main([*SIM, "--episodes", "2", "--out", str(fs), "--task", "t"]) == 0
        capsys.readouterr()
        fill_leaving(fs, 4)
        rc = main([*SIM, "--out", str(fs), "--task", "t"])
        err = capsys.readouterr().err
        assert rc == 1 and len(err.splitlines()) == 1 and "No space left on device" in err, err
        assert _leftovers(fs / "t") == []
        (fs / "filler").unlink()
        assert main([*SIM, "--out", str(fs), "--task", "t", "--json"]) == 0
        assert [e["episode_index"] for e in json.loads(capsys.readouterr().out)["episodes"]] == [3]
        assert _leftovers(fs / "t") == [] and validate_task(fs / "t").ok


def test_saved_but_meta_and_registry_not_updated_is_one_warning_and_exit_0(tmp_path, capsys, monkeypatch):
    """The example (170 KB free): episode 3 was published, yet the command exited 1 with two lines ("published but
    not in the registry", "saved, but meta/info.json was not updated"). One line says what was saved and what is
    still to do; the exit code says the episode is safe."""
    import egopool.write.task_meta as task_meta
    from egopool.errors import RegistryError
    from egopool.registry import Registry

    assert main([*SIM, "--episodes", "2", "--out", str(tmp_path), "--task", "t"]) == 0
    capsys.readouterr()
    db = tmp_path / "pipeline.db"

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    def db_full(self, *_a, **_k):  # SQLite's own words on a full disk
        raise RegistryError("registry operation failed: database or disk is full", path=self.path,
                            hint="check that the recordings root is writable and pipeline.db is not corrupt")

    monkeypatch.setattr(task_meta, "write_info", full)
    monkeypatch.setattr(Registry, "record", db_full)
    rc = main([*SIM, "--out", str(tmp_path), "--task", "t"])
    out, err = capsys.readouterr()
    assert rc == 0 and "episode 3: " in out
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"egopool: warning: {tmp_path}/t/meta/info.json: episode 3 was saved, but "
                               "meta/info.json was not updated (No space left on device); it is not in the registry "
                               f"either ({db}: registry operation failed: database or disk is full) ")
    assert lines[0].endswith("(once the cause is fixed (a full disk: free space), run `egopool repair clean "
                             "TASK`: it finishes the merge and records the episode; the next recording into the task "
                             "does it too)")
    monkeypatch.undo()
    assert main(["repair", "clean", str(tmp_path / "t"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["replayed"], report["registered"]) == ([3], [3])
    assert json.loads((tmp_path / "t/meta/info.json").read_text())["total_episodes"] == 3
    assert validate_task(tmp_path / "t").findings == []


def test_a_really_full_disk_after_the_commit_is_one_line_and_the_exit_code_says_whether_it_is_safe(tmp_path, capsys):
    """On a real full tmpfs (no mock): whatever free space is left, the command says one line; exit 0 exactly
    when the episode was saved, and then validate names the unfinished merge and repair clean finishes it."""
    from mounts import fill_leaving, small_fs

    saved = 0
    for free_kb in (100, 120, 150):
        with small_fs(tmp_path / f"fs{free_kb}", 3072) as fs:
            assert main([*SIM, "--episodes", "2", "--out", str(fs), "--task", "t"]) == 0
            capsys.readouterr()
            fill_leaving(fs, free_kb)
            rc = main([*SIM, "--out", str(fs), "--task", "t"])
            err = capsys.readouterr().err.splitlines()
            (fs / "filler").unlink()
            assert len(err) <= 1 and "Traceback" not in "".join(err), err
            assert _leftovers(fs / "t") == []
            n = [g.index for g in open_task(fs / "t").episodes()]
            assert (rc == 0) == (n == [1, 2, 3]), (rc, n, err)
            if rc == 0 and err:
                saved += 1
                assert err[0].startswith("egopool: warning: ") and "episode 3 was saved, but" in err[0]
                found = [f.message for f in validate_task(fs / "t").findings]
                assert any("merge did not finish" in m for m in found), found
                assert main(["repair", "clean", str(fs / "t")]) == 0
                capsys.readouterr()
            assert validate_task(fs / "t").findings == []
    assert saved >= 1  # at least one size lands between the commit and the meta merge
