"""Every command on both backends (issue 24): ``import * --out``, ``view``, ``compress`` and ``migrate`` take a
task directory or ``s3://bucket/prefix/task`` alike (a real SeaweedFS bucket, ``s3_server``), with the same crash
safety, and refuse a bad bucket URI in one line, writing nothing (never a local ``s3:`` directory)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from egopool.cli.app import main
from egopool.layout import list_task_episodes
from egopool.read import open_task
from egopool.storage import as_path
from egopool.validate import validate_task

pytest.importorskip("boto3")

TUM = Path(__file__).resolve().parents[1] / "data" / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt"
BUCKET = "opsb"


class Where:
    """A backend: ``root`` (a directory or ``s3://opsb/<random>``) and a way to put a local task there."""

    def __init__(self, kind: str, tmp: Path, s3: Any | None) -> None:
        self.kind, self.tmp, self.s3 = kind, tmp, s3
        self.root = str(tmp / "store") if kind == "dir" else f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"

    def task(self, name: str) -> str:
        return f"{self.root}/{name}"

    def put(self, local: Path) -> str:
        """Copy the local task ``local`` (every file, dot files too) here; returns its location."""
        if self.kind == "dir":
            import shutil

            dest = Path(self.root) / local.name
            shutil.copytree(local, dest)
            return str(dest)
        from egopool.storage import open_store

        store = open_store(self.task(local.name))  # one PUT per file, as a bucket task is written
        for f in sorted(local.rglob("*")):
            if f.is_file():
                store.put_file(f.relative_to(local).as_posix(), f)
        return self.task(local.name)


@pytest.fixture(params=["dir", "bucket"])
def where(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Where:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))  # sync's owner id and locks of this test
    monkeypatch.chdir(tmp_path)  # a stray local "s3:" directory would appear here
    if request.param == "dir":
        return Where("dir", tmp_path, None)
    s3 = request.getfixturevalue("s3_server")
    s3.create_bucket(BUCKET)
    return Where("bucket", tmp_path, s3)


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _no_local_s3(tmp_path: Path) -> None:
    assert not (tmp_path / "s3:").exists() and not Path("s3:").exists()


# -- import ----------------------------------------------------------------------------------------------
def test_import_tum_twice_gives_n_1_and_2_and_a_valid_task(where: Where, tmp_path: Path, capsys) -> None:
    for n in (1, 2):
        code, out, err = _run(capsys, "import", "tum", TUM, "--frame", "tum_fr1_world", "--out", where.root,
                              "--task", "traj", "--allow-duplicate")
        assert code == 0, err
        assert f"episode N={n} " in out and where.task("traj") in out
    task = as_path(where.task("traj"))
    assert [g.index for g in list_task_episodes(task)] == [1, 2]
    t = open_task(task)
    assert t.info["total_episodes"] == 2
    assert t.episode(1).length == t.episode(2).length > 100
    assert t.episode(1).table.column("episode_index").to_pylist()[0] == 1
    assert t.episode(2).table.column("episode_index").to_pylist()[0] == 2
    rep = validate_task(task)
    assert rep.ok, [f.message for f in rep.findings]
    _no_local_s3(tmp_path)


DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("kind", ["rgbd-frames", "euroc", "aria", "lerobot"])
def test_every_importer_writes_into_a_directory_or_a_bucket_alike(where: Where, kind: str, tmp_path: Path,
                                                                   capsys) -> None:
    """rgbd-frames, euroc, aria (--mps) and lerobot (a LeRobot export of the imported RGB-D task) into either
    backend: the same episode, N=1, a valid task; nothing local named `s3:`."""
    if kind == "aria":
        pytest.importorskip("projectaria_tools", reason="projectaria-tools (the interop extra) is not installed")
    if kind == "lerobot":
        code, _, err = _run(capsys, "import", "rgbd-frames", DATA / "sevenscenes_tsdf_fusion", "--frame",
                            "ego_cam_optical", "--out", tmp_path / "src", "--task", "seven")
        assert code == 0, err
        code, _, err = _run(capsys, "export", "lerobot", tmp_path / "src" / "seven", tmp_path / "lerobot")
        assert code == 0, err
    argv = {"rgbd-frames": [DATA / "sevenscenes_tsdf_fusion", "--frame", "ego_cam_optical"],
            "euroc": [DATA / "euroc_v101_kimera"],
            "aria": ["--mps", DATA / "aria_mps_sample", "--fps", "10"],
            "lerobot": [tmp_path / "lerobot"]}[kind]
    code, out, err = _run(capsys, "import", kind, *argv, "--out", where.root, "--task", "imp", "--json")
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert doc["task_dir"] == where.task("imp") and [e["episode_index"] for e in doc["episodes"]] == [1]
    assert all(p.startswith(where.task("imp") + "/") for p in doc["episodes"][0]["paths"])
    task = as_path(where.task("imp"))
    t = open_task(task)
    assert [ep.index for ep in t.episodes()] == [1] and t.episode(1).length == doc["episodes"][0]["length"] > 0
    rep = validate_task(task)
    assert rep.ok, [f.message for f in rep.findings]
    _no_local_s3(tmp_path)


def test_an_import_into_a_bucket_killed_before_its_row_leaves_no_episode_and_a_rerun_publishes_it(
        s3_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """SIGKILL with every object of the episode PUT but its row (sync's seam EGOPOOL_SYNC_PAUSE=placed): the bucket
    task holds no episode and validates; the same import again rolls the dead publish back and commits N=1."""
    import signal
    import subprocess
    import sys
    import threading

    s3_server.create_bucket(BUCKET)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    root = f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"
    argv = ["import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", root, "--task", "k"]
    (tmp_path / "xdg" / "egopool").mkdir(parents=True)
    marker = tmp_path / "xdg" / "egopool" / "sync-paused-placed"
    proc = subprocess.Popen([sys.executable, "-m", "egopool", *argv], env={**os.environ, "EGOPOOL_SYNC_PAUSE": "placed"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while not marker.exists():
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode() if proc.stderr else "")
            threading.Event().wait(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    marker.unlink()
    task = as_path(f"{root}/k")
    assert [k for k, _ in task.walk_files() if k.startswith("data/")]  # the episode's objects are there
    rep = validate_task(task)  # but no row, so no info.json either: no task for readers yet
    assert not rep.ok and "meta/info.json is missing" in rep.findings[0].message
    code, _, err = _run(capsys, "import", *argv[1:])
    assert code == 0, err
    assert [g.index for g in list_task_episodes(task)] == [1]
    rep = validate_task(task)
    assert rep.ok and not [f for f in rep.findings if "not part of any episode" in f.message], \
        [f.message for f in rep.findings]
    _no_local_s3(tmp_path)


def test_import_at_another_fps_into_an_existing_bucket_task_is_refused_before_anything(where: Where, tmp_path: Path,
                                                                                      capsys) -> None:
    code, _, err = _run(capsys, "import", "tum", TUM, "--frame", "tum_fr1_world", "--out", where.root, "--task", "t")
    assert code == 0, err
    code, _, err = _run(capsys, "import", "tum", TUM, "--frame", "tum_fr1_world", "--out", where.root, "--task", "t",
                        "--fps", "10", "--allow-duplicate")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "fps" in err, err
    assert [g.index for g in list_task_episodes(as_path(where.task("t")))] == [1]
    _no_local_s3(tmp_path)


# -- view ------------------------------------------------------------------------------------------------
def test_view_writes_an_rrd_of_a_task_on_either_backend(where: Where, tmp_path: Path, capsys) -> None:
    code, _, err = _run(capsys, "import", "tum", TUM, "--frame", "tum_fr1_world", "--out", where.root, "--task", "v")
    assert code == 0, err
    rrd = tmp_path / "v.rrd"
    code, out, err = _run(capsys, "view", where.task("v"), "1", "--no-spawn", "--out", rrd)
    try:
        import rerun  # noqa: F401
    except ImportError:  # the task was opened and episode 1 found: only the SDK that writes the .rrd is missing
        assert code == 1 and "rerun-sdk" in err and "does not exist" not in err, err
    else:
        assert code == 0, err
        assert rrd.is_file() and rrd.stat().st_size > 1000 and str(rrd) in out
    code, _, err = _run(capsys, "view", where.task("v"), "7", "--no-spawn", "--out", rrd)
    assert code == 1 and "7" in err and "rerun-sdk" not in err, err
    _no_local_s3(tmp_path)


# -- bad bucket input: one line naming the URI, nothing written ----------------------------------------------
@pytest.mark.parametrize("argv", [
    ("import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", "{nobucket}"),
    ("view", "{nobucket}/t", "1", "--no-spawn"),
    ("compress", "{nobucket}/t"),
    ("migrate", "{nobucket}/t"),
])
def test_a_bucket_that_does_not_exist_is_one_line_naming_it(argv, s3_server, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    nobucket = f"s3://nosuch{uuid.uuid4().hex[:8]}"
    code, out, err = _run(capsys, *(a.format(nobucket=nobucket) for a in argv))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and nobucket[5:] in lines[0] and "does not exist" in lines[0], err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("cmd", [("view", "{t}", "1", "--no-spawn"), ("compress", "{t}"), ("migrate", "{t}")])
def test_a_prefix_that_is_not_a_task_is_one_line(cmd, s3_server, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    s3_server.create_bucket(BUCKET)
    t = f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}/nothing"
    code, _, err = _run(capsys, *(a.format(t=t) for a in cmd))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and t in lines[0], err
    assert "info.json" in lines[0] or "does not exist" in lines[0] or f"no task at {t}" in lines[0]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("cmd", [
    ("import", "tum", str(TUM), "--frame", "tum_fr1_world", "--out", "{root}"),
    ("view", "{root}/t", "1", "--no-spawn"),
    ("compress", "{root}/t"),
    ("migrate", "{root}/t"),
])
def test_a_wrong_key_is_one_line(cmd, s3_server, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    s3_server.create_bucket(BUCKET)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-key")
    root = f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"
    code, _, err = _run(capsys, *(a.format(root=root) for a in cmd))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and root in lines[0], err
    assert not list(tmp_path.iterdir())
    os.environ.pop("EGOPOOL_UNUSED", None)


# -- compress --------------------------------------------------------------------------------------------
STAGES_FFV1 = ("encoded", "placed")
STAGES_HEVC = ("committed", "finishing")


def _sim_ffv1(where: Where, capsys, episodes: int = 2) -> str:
    """A simulated rig's task with FFV1 depth, put on the backend (a bucket: by `egopool sync`)."""
    local = where.tmp / "local"
    code, _, err = _run(capsys, "simulate", "--rig", "d435x2", "--scale", "4", "--depth-codec", "ffv1",
                        "--episodes", episodes, "--seconds", "1", "--out", local, "--task", "sim")
    assert code == 0, err
    if where.kind == "dir":
        return where.put(local / "sim")
    code, _, err = _run(capsys, "sync", local / "sim", where.task("sim"))
    assert code == 0, err
    return where.task("sim")


def _depth(task: str) -> dict[tuple[int, str], Any]:
    import numpy as np

    from egopool.codecs.depth import read_depth_frames

    t = open_task(as_path(task))
    cams = t.info["cameras"]
    return {(ep.index, k): np.stack(list(read_depth_frames(ep.stream_path(k))))
            for ep in t.episodes() for k in ep.files.videos if k not in cams}


def _exts(task: str) -> set[str]:
    t = open_task(as_path(task))
    cams = t.info["cameras"]
    declared = {e for k, e in t.info["video_extensions"].items() if k not in cams}
    found = {ep.stream_path(k).suffix for ep in t.episodes() for k in ep.files.videos if k not in cams}
    assert {"." + e for e in declared} == found
    return declared


def _keys(task: str) -> set[str]:
    p = as_path(task)
    return {rel for rel, _ in p.walk_files()} if not isinstance(p, Path) else \
        {str(f.relative_to(p)) for f in p.rglob("*") if f.is_file()}


def _close(orig: Any, dec: Any) -> None:
    import numpy as np

    from egopool.codecs.depth import LogDepthCodec
    from egopool.codecs.depth_error import depth_error_report

    c = LogDepthCodec()
    clipped = np.where(orig > 0, np.clip(orig, c.d_min, c.d_max), 0).astype(np.uint16)
    r = depth_error_report(clipped, dec)
    assert r.holes_kept == r.holes and r.holes_created == 0 and r.p99 <= 0.03, r


def _assert_hevc_done(task: str, originals: dict[tuple[int, str], Any]) -> None:
    assert _exts(task) == {"mp4"}
    keys = _keys(task)
    assert not [k for k in keys if k.endswith(".mkv") or k.endswith(".compressing") or ".compress" in k], keys
    decoded = _depth(task)
    assert decoded.keys() == originals.keys()
    for nk, orig in originals.items():
        _close(orig, decoded[nk])
    rep = validate_task(as_path(task))
    assert rep.ok, [f.message for f in rep.findings]
    for ep in open_task(as_path(task)).episodes():
        for key in ("d435_depth", "d435_depth_2"):
            assert ep.meta["video_codec"][key]["codec"] == "hevc12"
            assert ep.meta["video_codec"][key]["compressed_from"]["codec"] == "ffv1"


needs_hevc12 = pytest.mark.skipif("not __import__('egopool.codecs.depth', fromlist=['x']).hevc12_available()",
                                  reason="this PyAV's libx265 has no gray12le")


@needs_hevc12
def test_compress_switches_every_depth_stream_on_either_backend(where: Where, tmp_path: Path, capsys) -> None:
    task = _sim_ffv1(where, capsys)
    originals = _depth(task)
    assert len(originals) == 4 and _exts(task) == {"mkv"}  # 2 episodes x 2 depth cameras
    code, out, err = _run(capsys, "compress", task, "--dry-run")
    assert code == 0 and "would compress 4 depth stream(s)" in out, err
    assert _exts(task) == {"mkv"}
    code, out, err = _run(capsys, "compress", task)
    assert code == 0, err
    assert "compressed 4 depth stream(s)" in out
    _assert_hevc_done(task, originals)
    code, out, err = _run(capsys, "compress", task)  # a second run: nothing to do
    assert code == 0 and "nothing to do" in out, err
    _no_local_s3(tmp_path)


def _marker(task: str, stage: str) -> Any:
    return as_path(task) / "meta" / f".compress-paused-{stage}"


def _start_paused(task: str, stage: str) -> Any:
    import subprocess
    import sys
    import threading

    env = {**os.environ, "EGOPOOL_COMPRESS_PAUSE": stage}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "compress", task, "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = _marker(task, stage)
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"compress exited with {proc.returncode} before pausing: "
                                 f"{proc.stderr.read().decode() if proc.stderr else ''}")
        threading.Event().wait(0.1)
    return proc


def _kill(proc: Any, task: str, stage: str) -> None:
    import signal

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    marker = _marker(task, stage)
    marker.unlink()


@needs_hevc12
@pytest.mark.parametrize("stage", [*STAGES_FFV1, *STAGES_HEVC])
def test_sigkill_at_each_compress_step_leaves_a_valid_task_and_a_rerun_finishes(where: Where, stage: str,
                                                                              tmp_path: Path, capsys) -> None:
    import numpy as np

    task = _sim_ffv1(where, capsys)
    originals = _depth(task)
    proc = _start_paused(task, stage)
    try:
        if stage == "encoded":  # the job is owned: a second run is refused in one line, changing nothing
            code, _, err = _run(capsys, "compress", task)
            assert code == 1 and len(err.strip().splitlines()) == 1, err
            assert "lock" in err or "owns this task's job" in err, err
    finally:
        _kill(proc, task, stage)
    rep = validate_task(as_path(task))
    assert rep.ok, [f.message for f in rep.findings]
    assert any("interrupted" in f.message and "egopool compress" in f.message for f in rep.findings)
    assert not [f for f in rep.findings if "not part of any episode" in f.message]
    if stage in STAGES_FFV1:
        assert _exts(task) == {"mkv"}
        decoded = _depth(task)
        for nk, orig in originals.items():  # still the lossless originals
            np.testing.assert_array_equal(decoded[nk], orig)
    else:
        assert _exts(task) == {"mp4"}
    code, out, err = _run(capsys, "compress", task, "--json")  # the re-run takes the dead run's job over
    assert code == 0, err
    import json

    report = json.loads(out)
    assert report["committed"] and report["resumed"]
    if stage == "encoded":
        assert [d["reused"] for d in report["details"]].count(True) == 1
    _assert_hevc_done(task, originals)


# -- migrate ---------------------------------------------------------------------------------------------
def _legacy(where: Where, pristine: Path | None = None) -> str:
    """The legacy task of test_ops_migrate (shards, file- names, .stats_state.json, _trash/) on the backend."""
    from test_ops_migrate import make_legacy_task

    if pristine is None:
        local = where.tmp / "legacy_src"
        pristine = make_legacy_task(local)
        (local / "pipeline.db").unlink(missing_ok=True)  # the registry stays with a directory
    return where.put(pristine)


def _content(task: str) -> dict[str, str]:
    """Every object's sha256, the backup's timestamp and the journal left out (names change, bytes must not)."""
    import hashlib
    import re

    p = as_path(task)
    out = {}
    for k in sorted(_keys(task)):
        if k.endswith("migrate.json") or k.startswith(".") or "/." in k and not k.endswith(".stats_state.json"):
            continue
        out[re.sub(r"^_migrate_backup_[^/]+", "_migrate_backup_T", k)] = hashlib.sha256((p / k).read_bytes()).hexdigest()
    return out


def test_migrate_a_legacy_task_on_either_backend_then_a_second_run_is_a_no_op(where: Where, tmp_path: Path,
                                                                              capsys) -> None:
    from test_ops_migrate import ALL_N

    task = _legacy(where)
    code, out, err = _run(capsys, "migrate", task, "--split-episodes", "--dry-run")
    assert code == 0 and "would run" in out, err
    code, out, err = _run(capsys, "migrate", task, "--split-episodes", "--json")
    assert code == 0, err
    import json

    report = json.loads(out)
    assert report["backup"].startswith("_migrate_backup_") and report["done"] == len(report["steps"]) == 20
    groups = list_task_episodes(as_path(task))
    assert [g.index for g in groups] == ALL_N
    for g in groups:
        assert not g.meta_is_shard and all(str(p).rsplit("/", 1)[-1].startswith("episode-") for p in g.paths())
    keys = _keys(task)
    assert not [k for k in keys if k.startswith(("data/", "videos/", "meta/")) and "/file-" in k]
    assert not [k for k in keys if k.startswith("_trash/") or k == "meta/.stats_state.json"]
    assert any(k.endswith("_trash/chunk-000/episode-009.parquet") for k in keys)  # stashed in the backup
    rep = validate_task(as_path(task))
    assert rep.ok and rep.findings == [], [f.message for f in rep.findings]
    code, out, err = _run(capsys, "migrate", task, "--split-episodes")
    assert code == 0 and "nothing to migrate" in out, err
    _no_local_s3(tmp_path)


def _migrate_killed_after(task: str, k: int) -> None:
    """A real `egopool migrate` SIGKILLed right after step k (EGOPOOL_MIGRATE_PAUSE=k, after its checkpoint)."""
    import signal
    import subprocess
    import sys
    import threading

    env = {**os.environ, "EGOPOOL_MIGRATE_PAUSE": str(k)}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "migrate", task, "--split-episodes",
                             "--no-registry"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = as_path(task) / f".migrate-paused-{k}"
    try:
        while not marker.exists():
            if proc.poll() is not None:
                raise AssertionError(f"migrate exited with {proc.returncode} before pausing: "
                                     f"{proc.stderr.read().decode() if proc.stderr else ''}")
            threading.Event().wait(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    marker.unlink()


def test_migrate_sigkilled_after_each_journal_step_is_valid_and_a_rerun_reaches_the_uninterrupted_result(
        where: Where, tmp_path: Path) -> None:
    from test_ops_migrate import make_legacy_task

    from egopool.ops import migrate_task

    pristine = make_legacy_task(tmp_path / "pristine")
    (tmp_path / "pristine" / "pipeline.db").unlink(missing_ok=True)
    reference = _legacy(where, pristine)
    assert migrate_task(reference, checkpoint_every=3).done == 20
    expected = _content(reference)
    for k in (1, 3, 9, 11, 17, 19):  # a backup, a split row (checkpoint), a shard removal, renames, stashes
        sub = Where(where.kind, where.tmp / f"k{k}", where.s3)
        if where.kind == "bucket":
            sub.root = f"{where.root}-k{k}"
        task = _legacy(sub, pristine)
        _migrate_killed_after(task, k)
        rep = validate_task(as_path(task))
        assert rep.ok, (k, [f.message for f in rep.findings])
        report = migrate_task(task, checkpoint_every=3)  # the re-run takes the dead run's journal over
        assert report.resumed and report.done == 20, k  # the CLI checkpoints every 50: each step re-run, idempotently
        assert _content(task) == expected, k
        assert migrate_task(task).steps == []


def test_a_source_imported_before_is_refused_on_either_backend_until_its_n_is_deleted(where: Where, tmp_path: Path,
                                                                                      capsys) -> None:
    """A bucket task remembers its imported sources as a directory's registry does (issue 24's leftover)."""
    args = ("import", "tum", TUM, "--frame", "tum_fr1_world", "--out", where.root, "--task", "dup")
    task = as_path(where.task("dup"))
    assert _run(capsys, *args)[0] == 0
    code, out, err = _run(capsys, *args)
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"egopool: error: {where.task('dup')}: {TUM} is already in this task as episode N=1 ")
    assert "--allow-duplicate" in err and "`egopool delete TASK 1`" in err
    assert [g.index for g in list_task_episodes(task)] == [1]  # nothing written
    code, out, err = _run(capsys, *args, "--allow-duplicate")
    assert code == 0 and "episode N=2 " in out, err
    assert _run(capsys, "delete", where.task("dup"), "1", "2", "--yes")[0] == 0
    code, out, err = _run(capsys, *args)  # its episodes are gone: the source may come back, as a new N
    assert code == 0 and "episode N=3 " in out, err
    code, _, err = _run(capsys, *args)
    assert code == 1 and "as episode N=3 " in err, err
    assert [g.index for g in list_task_episodes(task)] == [3]
    assert validate_task(task).ok
    _no_local_s3(tmp_path)
