"""The CLI under bad conditions (QA of issue 2): one line on stderr, exit 1, never a traceback.

Disk full, a file where a directory belongs, an OSError nobody translated, a corrupt
``stats.json`` under an import, malformed episode rows for ``ls`` / ``show``, odd
option values. ``ls`` / ``show`` list a broken episode with its problems instead of failing.
"""

from __future__ import annotations

import errno
import json
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import egopool.ops
from egopool import StreamSpec, TaskWriter, vector_column
from egopool.cli.app import main

DATA_DIR = Path(__file__).parent / "data"
TUM = DATA_DIR / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt"
FRAMES = DATA_DIR / "sevenscenes_tsdf_fusion"
W, H = 32, 24


def _one_error(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    """Assert exit 1 and exactly one ``egopool: error:`` line on stderr; return it."""
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("egopool: error: "), err
    return lines[0]


def _task(root: Path, episodes: int = 2) -> Path:
    tw = TaskWriter(root, "t", registry=False)
    for e in range(episodes):
        ep = tw.begin_episode([vector_column("observation.glove", [4])], [StreamSpec("cam", "rgb", W, H)],
                              sensors=["glove"])
        for i in range(3):
            ep.add_frame({"observation.glove": np.full(4, i, np.float32)},
                         images={"cam": np.full((H, W, 3), 40 * e, np.uint8)})
        ep.finish()
    return root / "t"


def _meta(task: Path, n: int) -> Path:
    return task / f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet"


def _rewrite_meta(task: Path, n: int, fn) -> None:
    path = _meta(task, n)
    pq.write_table(fn(pq.read_table(path)), path)


def _ls(capsys: pytest.CaptureFixture[str], task: Path) -> list[dict]:
    assert main(["ls", "--json", str(task)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# -- writing ------------------------------------------------------------------------------------------------------

@contextmanager
def _file_size_limit(nbytes: int) -> Iterator[None]:
    """Writes past ``nbytes`` fail with EFBIG (like a full disk) instead of killing the process."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_import_hitting_the_file_size_limit_in_the_video_encoder(tmp_path: Path, capsys) -> None:
    """A real OS refusal inside PyAV's muxer (EFBIG, as ENOSPC on a full disk) -> one line naming the video."""
    with _file_size_limit(20_000):
        rc = main(["import", "rgbd-frames", str(FRAMES), "--frame", "ego_cam_optical", "--out", str(tmp_path / "rec")])
    line = _one_error(capsys, rc)
    assert line.startswith(f"egopool: error: {tmp_path}/rec/sevenscenes_tsdf_fusion/videos/chunk-000/camera_")
    assert ".tmp" not in line and "cannot write video: File too large" in line
    assert _files(tmp_path / "rec") == []  # the failed import left nothing behind


def test_disk_full_while_publishing_an_import(tmp_path: Path, capsys, monkeypatch) -> None:
    import os

    real = os.replace

    def full(src, dst, *a, **k):
        if str(dst).endswith("data/chunk-000/episode-000.parquet"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    rc = main(["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", str(tmp_path), "--task", "t"])
    line = _one_error(capsys, rc)
    assert line == (f"egopool: error: {tmp_path}/t/data/chunk-000/episode-000.parquet: cannot publish: No space "
                    "left on device (free disk space or choose another location, then run it again)")
    assert _files(tmp_path) == []


def test_out_pointing_to_a_file(tmp_path: Path, capsys) -> None:
    (tmp_path / "afile").write_text("not a directory")
    rc = main(["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", str(tmp_path / "afile" / "sub")])
    line = _one_error(capsys, rc)
    assert line == (f"egopool: error: {tmp_path}/afile: cannot write the task: this is a file, where a directory is "
                    "needed (choose a directory or a path that does not exist yet)")


def test_an_untranslated_os_error_is_still_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "t/meta/stats.json"))

    monkeypatch.setattr(egopool.ops, "recalc_task_stats", full)
    line = _one_error(capsys, main(["stats", "recalc", str(tmp_path / "t")]))
    assert line == (f"egopool: error: {tmp_path}/t/meta/stats.json: failed: No space left on device (free disk "
                    "space or choose another location, then run it again)")


def test_import_into_a_task_with_corrupt_stats_publishes_nothing(tmp_path: Path, capsys) -> None:
    args = ["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", str(tmp_path), "--task", "t",
            "--allow-duplicate"]  # the same file again: this test is about the task's stats.json
    assert main(args) == 0
    capsys.readouterr()
    stats = tmp_path / "t/meta/stats.json"
    stats.write_text('{"action": {"count": 0, "mean": [0')
    before = {p: p.read_bytes() for p in (tmp_path / "t").rglob("*") if p.is_file()}
    line = _one_error(capsys, main(args))
    assert line.startswith(f"egopool: error: {stats}: cannot parse JSON")
    assert line.endswith("(run `egopool stats recalc TASK` to rebuild it from data/)")
    assert {p: p.read_bytes() for p in (tmp_path / "t").rglob("*") if p.is_file()} == before
    assert main(["stats", "recalc", str(tmp_path / "t")]) == 0  # the hint works
    capsys.readouterr()
    assert main(args) == 0
    capsys.readouterr()
    assert [r["episode_index"] for r in _ls(capsys, tmp_path / "t")] == [1, 2]


def test_import_output_is_not_wrapped_and_stderr_stays_empty(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / ("a_rather_long_recordings_directory_name_" * 2)
    assert main(["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", str(out_dir), "--task", "t"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no blank line from a progress bar that was never shown
    assert f"episode N=1 (chunk-000/episode-000): 903 rows -> {out_dir / 't'}" in out.splitlines()


def test_empty_task_name_is_refused(tmp_path: Path, capsys) -> None:
    rc = main(["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", str(tmp_path / "rec"), "--task", ""])
    line = _one_error(capsys, rc)
    assert line.startswith("egopool: error: invalid task name ''")
    assert _files(tmp_path / "rec") == []


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0"])
def test_demo_max_seconds_must_be_finite_and_positive(tmp_path: Path, capsys, value: str) -> None:
    line = _one_error(capsys, main(["demo", str(tmp_path), "--max-seconds", value, "--dry-run"]))
    assert line.startswith(f"egopool: error: --max-seconds must be a finite number of seconds > 0, got {float(value)}")


# -- ls / show on broken episodes ---------------------------------------------------------------------------------

def test_ls_marks_incomplete_episodes_with_their_problems(tmp_path: Path, capsys) -> None:
    task = _task(tmp_path, episodes=3)
    data2 = task / "data/chunk-000/episode-001.parquet"
    data2.write_bytes(data2.read_bytes()[:200])  # truncated: the footer is gone
    (task / "videos/chunk-000/cam/episode-002.mp4").unlink()
    rows = _ls(capsys, task)
    assert [(r["episode_index"], r["complete"]) for r in rows] == [(1, True), (2, False), (3, False)]
    assert rows[0]["problems"] == [] and rows[0]["length"] == 3
    assert len(rows[1]["problems"]) == 1 and rows[1]["problems"][0].startswith("data parquet unreadable: ")
    assert rows[2]["problems"] == ["video_codec lists stream(s) ['cam'] but their video file is missing"]
    assert rows[2]["streams"] == []
    assert main(["ls", str(task)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "3 episode(s), 2 incomplete" in out and "NO: video_codec lists stream(s)" in out


def test_one_bad_meta_row_does_not_stop_ls(tmp_path: Path, capsys) -> None:
    task = _task(tmp_path)
    _rewrite_meta(task, 1, lambda t: t.set_column(t.column_names.index("video_codec"), "video_codec",
                                                   pa.array(['{"cam": '])))
    rows = _ls(capsys, task)
    assert [r["episode_index"] for r in rows] == [1, 2]
    assert rows[0]["complete"] is False and rows[1]["complete"] is True
    assert rows[0]["problems"] == ["meta row unreadable: episodes column 'video_codec' is not valid JSON: "
                                   "Expecting value"]
    assert rows[0]["length"] == 3  # from the data parquet


def test_ls_and_show_with_a_meta_row_without_length(tmp_path: Path, capsys) -> None:
    task = _task(tmp_path)
    _rewrite_meta(task, 2, lambda t: t.drop(["length"]))
    rows = _ls(capsys, task)
    assert rows[1]["length"] == 3 and rows[1]["complete"] is False
    assert rows[1]["problems"] == ["meta row 'length' is missing, not an integer"]
    assert main(["show", str(task), "2"]) == 1  # a damaged row is shown, and fails (issue 28)
    out, err = capsys.readouterr()
    assert err == "" and "rows=3" in out and "problem: meta row 'length' is missing, not an integer" in out


def test_show_with_created_at_stored_as_a_string(tmp_path: Path, capsys) -> None:
    task = _task(tmp_path)
    _rewrite_meta(task, 1, lambda t: t.set_column(t.column_names.index("created_at"), "created_at",
                                                   pa.array(["yesterday"])))
    assert [(r["complete"], r["problems"]) for r in _ls(capsys, task)] == [
        (False, ["meta row 'created_at' is 'yesterday', not a number"]), (True, [])]
    assert main(["show", str(task), "1"]) == 1  # a damaged row is shown, and fails (issue 28)
    out, err = capsys.readouterr()
    assert err == "" and "created_at='yesterday' (not a number)" in out and "observation.glove" in out
    assert "problem: meta row 'created_at' is 'yesterday', not a number" in out
    assert main(["show", "--json", str(task), "1"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["meta"]["created_at"] == "yesterday" and doc["columns"]["observation.glove"] == "list<element: float>"


@pytest.mark.parametrize("cmd", ["info", "ls", "show"])
def test_a_file_instead_of_a_task_directory(tmp_path: Path, capsys, cmd: str) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    line = _one_error(capsys, main([cmd, str(f), *(["1"] if cmd == "show" else [])]))
    assert line == f"egopool: error: {f}: not a directory (pass the task directory holding data/, videos/, meta/)"


def test_usage_names_the_arguments(capsys) -> None:
    assert main(["show", "--help"]) == 0
    out = capsys.readouterr().out
    assert "show [OPTIONS] TASK N\n" in out or "show [OPTIONS] TASK N " in out
    assert "{TASK}" not in out and "{task}" not in out


def test_version_and_unknown_option(capsys) -> None:
    from egopool import __version__
    from egopool.cli.app import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"egopool {__version__}"
    assert main(["--no-such-option"]) == 2
    err = capsys.readouterr().err
    assert "No such option" in err and "Traceback" not in err


def test_import_errors_name_the_input(tmp_path, capsys) -> None:
    from pathlib import Path

    from egopool.cli.app import main

    tum = Path(__file__).parent / "data" / "evo_trajectories" / "V102.txt"
    assert main(["import", "tum", str(tum), "--out", str(tmp_path / "rec")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tum) in err[0] and "--frame" in err[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["import", "rgbd-frames", str(empty), "--frame", "ego_cam_optical", "--out", str(tmp_path / "rec")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(empty) in err[0] and "camera-intrinsics.txt" in err[0]
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("point", ["start", "commands"])
def test_ctrl_c_while_the_cli_loads_is_one_line_not_a_traceback(tmp_path: Path, point: str) -> None:
    """Ctrl-C while ``egopool`` loads (pyarrow, numpy and the commands) is ``egopool: interrupted`` and
    exit 130, as during a command, and the command does not run. The child stops at a known point of
    its start-up (``EGOPOOL_LOADING_SEAM``: it writes a byte and waits for one) and is signalled there,
    so the outcome does not depend on how fast a loaded machine starts it."""
    import os
    import select
    import subprocess
    import sys

    from egopool._sigint import SEAM_ENV

    task = _task(tmp_path)
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    env = {**os.environ, SEAM_ENV: f"{point}:{ready_w}:{go_r}"}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "validate", str(task)], env=env,
                            pass_fds=(ready_w, go_r), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(ready_w)
    os.close(go_r)
    try:
        assert select.select([ready_r], [], [], 120)[0], "the child never reached the seam"
        assert os.read(ready_r, 1) == b"!"
        proc.send_signal(signal.SIGINT)  # the child waits at the seam: it cannot have gone further
        os.write(go_w, b"!")
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(ready_r)
        os.close(go_w)
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    assert (proc.returncode, err.splitlines(), out) == (130, ["egopool: interrupted"], "")


def test_with_json_stdout_carries_only_the_json_whatever_writes_to_file_descriptor_1() -> None:
    """Issue 15 E, for every command: with --json, bytes a library writes on fd 1 from C (below sys.stdout)
    and Python-level prints go to stderr; stdout is print_json's document alone."""
    import subprocess
    import sys

    code = ("import os, sys\n"
            "from egopool.cli.output import print_json, stdout_only_json\n"
            "with stdout_only_json(True):\n"
            "    os.write(1, b'Loaded #EyeGazes: 123\\n')\n"
            "    print('a stray print')\n"
            "    print_json({'ok': 1})\n"
            "print('after the command')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{\n  "ok": 1\n}\nafter the command\n'
    assert done.stderr == "Loaded #EyeGazes: 123\na stray print\n"


def test_every_public_name_resolves() -> None:
    """``egopool`` imports its public names on first use (PEP 562); each one in ``__all__`` exists
    and ``from egopool import *`` binds them all."""
    import egopool

    space: dict[str, object] = {}
    exec("from egopool import *", space)
    assert set(egopool.__all__) <= set(space) and "Episode" in dir(egopool)
    assert space["open_task"].__module__ == "egopool.read.reader"
    with pytest.raises(AttributeError, match="no_such_name"):
        egopool.no_such_name  # noqa: B018
