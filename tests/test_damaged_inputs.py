"""Issue 12 D, each example as a test: a damaged input gives an EgopoolError naming the file (one
line from the CLI), in bounded time and memory, and nothing is written.

The task is the validator's reference task (tests/validate_support.py): every column kind,
an RGB MP4 and an FFV1 depth MKV. tests/test_fuzz_damage.py throws random damage of every
file kind at the same readers.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from validate_support import DATA, META, TRAJ, build_task, copy_task, edit_json, rewrite_parquet, set_column

from egopool import CodecError, EgopoolError, FormatError, SchemaError, open_task
from egopool.cli.app import main
from egopool.cli.args import parse_episode_n
from egopool.frames import resolve_axes
from egopool.validate import validate_task

NEST = "[" * 1000 + "]" * 1000
DEPTH = "videos/chunk-000/d435_depth/episode-000.mkv"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("ref"))


@pytest.fixture
def task(reference: Path, tmp_path: Path) -> Path:
    return copy_task(reference, tmp_path)


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""
    def boom(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def one_error(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    out, err = capsys.readouterr()
    assert rc == 1, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("egopool: error: "), err
    return lines[0]


# -- deeply nested JSON: info.json, a meta row's JSON column, stats.json, tasks.jsonl -------------------------
def _nest_info(t: Path) -> None:
    text = (t / "meta/info.json").read_text()
    (t / "meta/info.json").write_text(text.rstrip()[:-1] + f', "x": {NEST}}}')


@pytest.mark.parametrize("cmd", ["ls", "info", "show", "stats check", "audit-gaps"])
def test_nested_info_json(task: Path, capsys, cmd: str) -> None:
    _nest_info(task)
    line = one_error(capsys, main([*cmd.split(), str(task), *(["1"] if cmd == "show" else [])]))
    assert line == (f"egopool: error: {task}/meta/info.json: JSON nests deeper than 64 levels, more than egopool "
                    "reads: the file is damaged (restore info.json from a backup)")
    with pytest.raises(FormatError, match="nests deeper than 64 levels"):
        open_task(task)


def test_nested_json_in_a_meta_row(task: Path, capsys) -> None:
    rewrite_parquet(task / META, lambda t: set_column(t, "drop_stats", [NEST]))
    assert main(["ls", "--json", str(task)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["problems"] == ["meta row unreadable: JSON of episodes column 'drop_stats' nests deeper than 64 "
                                   "levels, more than egopool reads: the file is damaged"]
    assert main(["show", str(task), "1"]) == 1  # shown, and the unreadable row fails it (issue 28)
    assert "problem: meta row unreadable: JSON of episodes column 'drop_stats' nests deeper" in capsys.readouterr().out
    report = validate_task(task)
    assert [f.message for f in report.errors] == [
        "JSON of meta column 'drop_stats' nests deeper than 64 levels, more than egopool reads: the file is "
        "damaged: it is a JSON object string, write it with json.dumps"]


def test_nested_stats_json(task: Path, capsys) -> None:
    (task / "meta/stats.json").write_text(NEST)
    line = one_error(capsys, main(["stats", "check", str(task)]))
    assert line.startswith(f"egopool: error: {task}/meta/stats.json: JSON nests deeper than 64 levels")
    assert any("nests deeper than 64 levels" in f.message for f in validate_task(task).errors)


def test_nested_tasks_jsonl(task: Path) -> None:
    (task / "meta/tasks.jsonl").write_text(NEST + "\n")
    with pytest.raises(FormatError) as err:
        open_task(task).tasks
    assert err.value.one_line() == (f"{task}/meta/tasks.jsonl: line 1: JSON nests deeper than 64 levels, more "
                                    "than egopool reads: the file is damaged (tasks.jsonl must hold "
                                    "one complete JSON object per line; re-write it on one line)")



@pytest.mark.parametrize("where", ["tokens file", "LeRobot info.json", "egopool mapping"])
def test_deep_json_outside_a_task_names_its_file_and_no_pooled_format(tmp_path: Path, capsys, where: str) -> None:
    """Found by QA: a deep LeRobot info.json or tokens file was called a "pooled_episodes_v1 document"."""
    lerobot = tmp_path / "lr"
    (lerobot / "meta").mkdir(parents=True)
    (lerobot / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v3.0", "fps": 10, "features": {}}))
    files = {"tokens file": tmp_path / "tokens.json", "LeRobot info.json": lerobot / "meta" / "info.json",
             "egopool mapping": lerobot / "egopool_mapping.json"}
    path = files[where]
    path.write_text(NEST)
    if where == "egopool mapping":  # read after the episodes list
        episodes = lerobot / "meta" / "episodes" / "chunk-000"
        episodes.mkdir(parents=True)
        pq.write_table(pa.table({"episode_index": [0], "length": [1], "data/chunk_index": [0], "data/file_index": [0]}),
                       episodes / "file-000.parquet")
    argv = (["token", "list", "--tokens", str(path)] if where == "tokens file"
            else ["import", "lerobot", str(lerobot), "--task", "x", "--out", str(tmp_path / "rec")])
    line = one_error(capsys, main(argv))
    assert line.startswith(f"egopool: error: {path}: JSON nests deeper than 64 levels, more than egopool reads: "
                           "the file is damaged"), line
    assert "pooled_episodes_v1" not in line
    assert not (tmp_path / "rec").exists()

# -- tasks.jsonl: invalid UTF-8, a directory, a FIFO ----------------------------------------------------------
def test_tasks_jsonl_invalid_utf8(task: Path) -> None:
    (task / "meta/tasks.jsonl").write_bytes(b'{"task_index": 0, "task": "demo"}\n{"task": "\xff"}\n')
    with pytest.raises(FormatError, match=r"tasks\.jsonl: line 2 is not UTF-8 text \(byte 0xff at offset 44\)"):
        open_task(task).tasks


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_tasks_jsonl_not_a_regular_file(task: Path, kind: str, capsys) -> None:
    p = task / "meta/tasks.jsonl"
    p.unlink()
    p.mkdir() if kind == "directory" else os.mkfifo(p)
    what = "a directory" if kind == "directory" else "a FIFO"
    with deadline(20):
        with pytest.raises(FormatError) as err:
            open_task(task).tasks
        assert err.value.message == f"meta/tasks.jsonl is {what}, not a regular file; egopool does not open it"
        assert main(["validate", "--json", str(task)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {f["message"] for f in doc["findings"] if f["path"] == str(p)} == {
        f"cannot read as UTF-8 text: meta/tasks.jsonl is {what}, not a regular file; egopool does not open it"}


# -- a data parquet that is a symlink to itself ---------------------------------------------------------------
def test_data_parquet_symlink_loop(task: Path, capsys) -> None:
    p = task / DATA
    p.unlink()
    p.symlink_to(p.name)
    episodes = open_task(task).episodes()
    assert [e.index for e in episodes] == [1] and episodes[0].files.data == p
    assert open_task(task).episode(1).files.data == p  # the per-N lookup sees it too
    with pytest.raises(FormatError) as err:
        episodes[0].table
    assert err.value.path == p and "Too many levels of symbolic links" in err.value.message
    assert main(["ls", "--json", str(task)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["problems"] == ["data parquet unreadable: cannot open data parquet: Too many levels of symbolic links"]
    assert any(f.path == str(p) for f in validate_task(task).errors)


# -- data_path with an unknown template field, or not a string ------------------------------------------------
@pytest.mark.parametrize("value,message", [
    ("data/chunk-{c:03d}/{camera}/episode-{f:03d}.parquet",
     "template data_path='data/chunk-{c:03d}/{camera}/episode-{f:03d}.parquet' cannot be formatted ('camera'); "
     "it must use exactly the fields ['c', 'f']"),
    ("data/chunk-{c:03d}/episode.parquet",
     "template data_path='data/chunk-{c:03d}/episode.parquet' uses fields ['c'], it must use exactly ['c', 'f']"),
    (5, "template data_path is 5, not a path template string"),
    (None, "template data_path is None, not a path template string"),
])
def test_data_path_template_checked_when_info_is_read(task: Path, capsys, value: object, message: str) -> None:
    edit_json(task / "meta/info.json", lambda d: d.update(data_path=value))
    with pytest.raises(FormatError) as err:
        open_task(task)
    assert err.value.message == message and err.value.path == task / "meta/info.json"
    line = one_error(capsys, main(["ls", str(task)]))
    assert message in line


# -- columns of the wrong physical type: SchemaError naming column and file ------------------------------------
@pytest.mark.parametrize("column,values,type_,call", [
    ("hardware_ns", [[1.0]] * 12, pa.list_(pa.float32()), lambda ep: ep.hardware_ns()),
    ("hardware_ns", [None] * 12, pa.null(), lambda ep: ep.hardware_ns()),
    (TRAJ + "_ns", [1] * 12, pa.int32(), lambda ep: ep.trajectory(TRAJ)),
    (TRAJ + "_ns", [None] * 12, pa.null(), lambda ep: ep.trajectory(TRAJ)),
    (TRAJ, [[[0.0] * 8]] * 12, pa.list_(pa.list_(pa.float64())), lambda ep: ep.trajectory(TRAJ)),
    ("observation.imu", [[0.0] * 6] * 12, pa.list_(pa.float32()), lambda ep: ep.imu()),
    ("imu_ts_ns", [[1]] * 12, pa.list_(pa.int32()), lambda ep: ep.imu_samples()),
    ("hardware_ns", [1] * 12, pa.int32(), lambda ep: ep.pair_trajectory(TRAJ)),
])
def test_wrong_physical_type_is_a_schema_error(task: Path, column: str, values: list, type_: pa.DataType,
                                               call) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, column, values, type_))
    with pytest.raises(SchemaError) as err:
        call(open_task(task).episode(1))
    want = {0: "int64", 1: "list<int64>"}[1 if column in (TRAJ + "_ns", "imu_ts_ns") else 0]
    want = {TRAJ: "list<float64>", "observation.imu": "list<list<float32, 6>>"}.get(column, want)
    assert err.value.column == column and err.value.path == task / DATA
    stored = pq.read_schema(task / DATA).field(column).type
    assert err.value.message == f"column {column!r}: is stored as {stored}, egopool reads it as {want}"


def test_ragged_imu_samples_are_a_schema_error(task: Path) -> None:
    rewrite_parquet(task / DATA, lambda t: set_column(t, "observation.imu", [[[0.0] * 6, [0.0] * 5]] * 12))
    with pytest.raises(SchemaError) as err:
        open_task(task).episode(1).imu()
    assert err.value.column == "observation.imu" and "ragged list column" in err.value.message


# -- a damaged FFV1 MKV whose stream has no codec context ------------------------------------------------------
def test_ffv1_mkv_without_codec_context(task: Path, capsys) -> None:
    p = task / DEPTH
    raw = p.read_bytes()
    i = raw.index(b"V_FFV1")
    p.write_bytes(raw[:i] + b"V_QQQQ" + raw[i + 6:])
    with pytest.raises(CodecError) as err:
        list(open_task(task).episode(1).depth("d435_depth"))
    assert err.value.path == p
    assert err.value.message == ("no depth stream (FFV1 gray16le, HEVC gray12le or PNG gray16) among video streams "
                                 "[(None, None)]")
    messages = [f.message for f in validate_task(task).errors]
    assert any("has no codec FFmpeg can decode" in m for m in messages), messages
    assert not any("stopped early" in m or "could not be fully checked" in m for m in messages)


# -- a list as a frame_axes value ------------------------------------------------------------------------------
def test_list_as_frame_axes_value_does_not_stop_the_validator(task: Path) -> None:
    edit_json(task / "meta/info.json",
              lambda d: d["features"][TRAJ].update(frame_axes={"+X": ["right"], "+Y": "down", "+Z": "forward"}))
    report = validate_task(task)
    messages = [f.message for f in report.errors]
    assert messages == [f"features column {TRAJ!r}: frame_axes words must be among "
                        "['backward', 'down', 'forward', 'left', 'right', 'up'], got [['right'], 'down', 'forward']"]
    with pytest.raises(SchemaError, match=r"frame_axes words must be among"):
        resolve_axes({"+X": ["right"], "+Y": "down", "+Z": "forward"})  # what Trajectory.to_frame uses


# -- an 8 GiB sparse file named like a data parquet, whose footer claims 4 GiB ---------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform != "darwin" else 1024 ** 2)


def test_huge_footer_is_refused_before_reading(task: Path, capsys) -> None:
    p = task / DATA
    with open(p, "wb") as fh:
        fh.write(b"PAR1")
        fh.truncate(8 << 30)
        fh.seek((8 << 30) - 8)
        fh.write((0xFFFFFFFF).to_bytes(4, "little") + b"PAR1")
    assert p.stat().st_blocks * 512 < 1 << 20  # sparse: the test itself uses no disk
    before = _peak_rss_mb()
    with deadline(60):
        assert main(["ls", "--json", str(task)]) == 0
        (row,) = json.loads(capsys.readouterr().out)
        assert main(["validate", "--json", str(task)]) == 1
        doc = json.loads(capsys.readouterr().out)
    msg = "data parquet claims a 4294967295-byte footer, more than the 67108864 egopool reads (corrupt)"
    assert row["problems"] == [f"data parquet unreadable: {msg}"]
    assert any(f["path"] == str(p) and msg in f["message"] for f in doc["findings"])
    assert _peak_rss_mb() - before < 300


def test_footer_longer_than_the_file(task: Path) -> None:
    p = task / DATA
    raw = p.read_bytes()
    p.write_bytes(raw[:-8] + (len(raw)).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(FormatError) as err:
        open_task(task).episode(1).length
    assert err.value.message == f"data parquet claims a {len(raw)}-byte footer in a {len(raw)}-byte file (corrupt)"


# -- every N on the command line is a plain positive decimal integer -------------------------------------------
@pytest.mark.parametrize("text", ["1.0", "0", "-1", "+1", "01", "1e0", " 1", "1 ", "1_0", "١", "0x1", "",
                                  str(2**63)])
@pytest.mark.parametrize("cmd", ["delete", "delete --dry-run", "show", "audit-gaps -e", "pack", "upload"])
def test_n_must_be_a_plain_positive_decimal(task: Path, capsys, cmd: str, text: str) -> None:
    before = sorted(p.name for p in task.rglob("*"))
    words = cmd.split()
    argv = [words[0], str(task), *words[1:], text] if words[0] != "audit-gaps" else [*words[:1], str(task),
                                                                                      *words[1:], text]
    extra = {"delete": ["--yes"], "pack": ["-o", str(task.parent / "zips")],
             "upload": ["--server", "http://127.0.0.1:9", "--retries", "0"]}.get(words[0], [])
    line = one_error(capsys, main([*argv, *extra]))
    assert line == (f"egopool: error: episode number N must be a plain positive decimal integer (1, 2, 3, ...), "
                    f"got {text!r} (global N is 1-based: episode-000 is N=1; `egopool ls TASK` lists them)")
    assert sorted(p.name for p in task.rglob("*")) == before
    assert (task / DATA).exists() and not (task.parent / "zips").exists()


_N_ERROR = ("egopool: error: episode number N must be a plain positive decimal integer (1, 2, 3, ...), got {!r} "
            "(global N is 1-based: episode-000 is N=1; `egopool ls TASK` lists them)")


@pytest.mark.parametrize("text", ["1.0", "-1", "01", "+1", "1e0", str(2**63), "99999999999999999999"])
@pytest.mark.parametrize("cmd", ["export tum {t} {n}", "export rerun {t} {n} -o {o}/x.rrd", "view {t} {n} -o {o}/x.rrd",
                                 "plot {t} {n} -o {o}/x.png", "keypoints extract {t} {n}",
                                 "keypoints backfill {t} {n}", "export lerobot {t} {o}/lr -e {n}",
                                 "export lerobot {t} {o}/lr --dry-run --episodes {n}"])
def test_n_is_parsed_the_same_on_the_newer_commands(task: Path, capsys, cmd: str, text: str) -> None:
    """Found by qa12: these took N as a Typer int (``export tum T 1.0`` wrote episode 1's files,
    ``keypoints backfill T 01`` rewrote episode 1's parquet)."""
    out = task.parent / "out"
    before = sorted(p.name for p in task.rglob("*"))
    argv = [w.format(t=task, n=text, o=out) for w in cmd.split()]
    assert one_error(capsys, main(argv)) == _N_ERROR.format(text)
    assert sorted(p.name for p in task.rglob("*")) == before and not out.exists()


@pytest.mark.parametrize("text", ["1.0", "-1", "01", "+1", str(2**63)])
def test_lerobot_episode_index_is_a_plain_integer(tmp_path: Path, capsys, text: str) -> None:
    argv = ["import", "lerobot", str(tmp_path), "--task", "x", "--out", str(tmp_path / "rec"), "-e", text]
    assert one_error(capsys, main(argv)) == (f"egopool: error: LeRobot episode_index E must be a plain non-negative "
                                             f"decimal integer (0, 1, 2, ...), got {text!r} (E is 0-based as in the "
                                             f"dataset's meta/episodes)")


def test_parse_episode_n_accepts_plain_integers() -> None:
    assert [parse_episode_n(t) for t in ("1", "42", "1001", str(2**63 - 1))] == [1, 42, 1001, 2**63 - 1]
    assert parse_episode_n(7) == 7
    with pytest.raises(EgopoolError):
        parse_episode_n(True)  # type: ignore[arg-type]


def test_delete_with_a_valid_n_still_works(task: Path, capsys) -> None:
    assert main(["delete", str(task), "1", "--yes", "--no-registry", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert not (task / DATA).exists()


# -- Python warnings become the CLI's own one-line messages -----------------------------------------------------
def test_warnings_are_one_line(tmp_path: Path, capsys) -> None:
    root = tmp_path / "rec"
    root.mkdir()
    (root / "pipeline.db").write_text("not a database")
    tum = Path(__file__).parent / "data" / "evo_trajectories" / "freiburg1_xyz-rgbdslam.txt"
    assert main(["import", "tum", str(tum), "--out", str(root), "--frame", "ego_cam_optical"]) == 0
    err = capsys.readouterr().err.splitlines()
    bad = (f"{root}/pipeline.db: registry operation failed: file is not a database (check that the recordings root "
           "is writable and pipeline.db is not corrupt)")
    assert err == [
        f"egopool: warning: cannot check whether {tum} was imported before: {bad}",
        f"egopool: warning: registry watermark unavailable: {bad}",
        f"egopool: warning: episode 1 is published but not in the registry: {bad} (run `egopool repair clean TASK` "
        "once it can be written)",
        "egopool: warning: episode 1 is imported, but the registry does not remember its source, so a second import "
        f"of {tum} would not be refused: {bad}"]
    assert pq.read_table(root / "freiburg1_xyz-rgbdslam" / DATA).num_rows > 0


# -- the tokens file of `egopool serve` / `token list` (found by qa12) -------------------------------------------
@pytest.mark.parametrize("damage,message", [
    (lambda p: os.mkfifo(p), "tokens file is a FIFO, not a regular file"),       # `token list` blocked forever
    (lambda p: p.mkdir(), "tokens file is a directory, not a regular file"),     # said "not found"
    (lambda p: p.write_text(NEST), "JSON nests deeper than 64 levels"),           # RecursionError
    (lambda p: p.write_bytes(b'{"tokens": ["\xff"]}'), "line 1 is not UTF-8 text"),
    (lambda p: p.write_text('{"tokens": [{"id": "a", "sha256": "x", "scopes": "read"}]}'),
     "tokens file entries need id, sha256 and scopes (scopes must be a list)"),  # said "unknown token scope 'r'"
])
def test_a_damaged_tokens_file_is_one_line(tmp_path: Path, capsys, damage, message: str) -> None:
    p = tmp_path / "tokens.json"
    damage(p)
    with deadline(30):
        line = one_error(capsys, main(["token", "list", "--tokens", str(p)]))
    assert line.startswith(f"egopool: error: {p}: {message}")


@pytest.mark.parametrize("cmd", ["simulate", "record"])
@pytest.mark.parametrize("fps, says", [("nan", "nan rows per second: give a finite rate from 1 to 1000"),
                                       ("inf", "inf rows per second"), ("0.5", "0.5 rows per second"),
                                       ("1e9", "1e9 rows per second"), ("x", "'x' is not a number")])
def test_record_fps_must_be_a_finite_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str], cmd: str, fps: str,
                                          says: str) -> None:
    """`--fps nan` used to be told "should be <= 1000" (found by qa12); nothing is created."""
    argv = ["simulate", "--out", str(tmp_path / "o")] if cmd == "simulate" else ["record", str(tmp_path / "o" / "t"),
                                                                                  "--device", "sim:glove"]
    rc = main([*argv, "--fps", fps, "--seconds", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and says in err and not (tmp_path / "o").exists()
