"""Tasks read in place from a real S3 server (SeaweedFS's ``weed``, the ``s3_server`` fixture), compared
with the same task read from disk: the library value by value, the validator finding by finding, and
every reading command of the CLI (issue 17, docs/decisions.md O1–O9).

The tasks are written locally (a simulated Appendix B rig: RGB, 12-bit HEVC depth, IMU, trajectories,
force matrices, gloves; an FFV1 depth task; a legacy PNG16 depth directory), copied object by object
into a bucket, and then read from ``s3://`` only.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from egopool import StreamSpec, TaskWriter, list_task_episodes, open_task
from egopool.codecs.depth_png import encode_png16
from egopool.errors import FormatError, ObjectStoreError
from egopool.storage import ObjectPath
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("s3")

BUCKET = "s3read-tasks"
DEPTH_KEY = "d435_depth"


def _simulate(root: Path) -> Path:
    from egopool.cli.app import main

    assert main(["simulate", "--rig", "full", "--episodes", "2", "--seconds", "0.4", "--scale", "8",
                 "--out", str(root), "--task", "full"]) == 0
    return root / "full"


def _depth_frames() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    frames = []
    for i in range(3):
        d = rng.integers(300, 9000, size=(24, 40), dtype=np.uint16)
        d[i, :5] = 0  # holes stay holes
        frames.append(d)
    return frames


def _ffv1_task(root: Path, frames: list[np.ndarray]) -> Path:
    tw = TaskWriter(root, "ffv1", fps=30.0)
    h, w = frames[0].shape
    ep = tw.begin_episode(streams=[StreamSpec(DEPTH_KEY, "depth", w, h, codec="ffv1")])
    for d in frames:
        ep.add_frame({}, images={DEPTH_KEY: d})
    ep.finish()
    return root / "ffv1"


def _png16_task(root: Path, frames: list[np.ndarray]) -> Path:
    """The FFV1 task with its stream replaced by a legacy PNG16 directory (file_format.md §8, decisions C4)."""
    task = root / "png16"
    shutil.copytree(_ffv1_task(root / "png16_src", frames), task)
    vdir = task / "videos" / "chunk-000" / DEPTH_KEY
    (vdir / "episode-000.mkv").unlink()
    (vdir / "episode-000").mkdir()
    for i, d in enumerate(frames):
        (vdir / "episode-000" / f"{i:06d}.png").write_bytes(encode_png16(d))
    info = json.loads((task / "meta" / "info.json").read_text())
    info["video_extensions"][DEPTH_KEY] = "png"
    (task / "meta" / "info.json").write_text(json.dumps(info))
    return task


@pytest.fixture(scope="module")
def tasks(s3_server, tmp_path_factory):
    """``name -> (local task, s3:// URI of its copy)`` for the full rig, FFV1 depth and PNG16 depth."""
    root = tmp_path_factory.mktemp("s3read")
    frames = _depth_frames()
    local = {"full": _simulate(root / "sim"), "ffv1": _ffv1_task(root / "w", frames),
             "png16": _png16_task(root / "p", frames)}
    out = {name: (path, s3_server.upload_dir(path, BUCKET, f"pooled/{name}")) for name, path in local.items()}
    out["frames"] = frames  # type: ignore[assignment]
    return out


def _rel(path: object, root: object) -> str:
    return str(path)[len(str(root)):]


def _same_episode(a, b) -> None:  # type: ignore[no-untyped-def]
    """Episode ``a`` (disk) and ``b`` (bucket) hold the same values, every column and stream kind."""
    assert b.meta == a.meta
    assert b.schema.equals(a.schema, check_metadata=True) and b.length == a.length
    assert b.table.equals(a.table)  # every column: scalars, lists, ns stamps, force matrices, gloves
    assert b.trajectories() == a.trajectories()
    for c in a.trajectories():
        ta, tb = a.trajectory(c), b.trajectory(c)
        for field in ("points", "host_ns", "rows"):
            np.testing.assert_array_equal(getattr(tb, field), getattr(ta, field))
        assert (tb.frame, tb.frame_axes) == (ta.frame, ta.frame_axes)
    if "observation.imu" in a.column_names:
        for x, y in zip(a.imu(), b.imu(), strict=True):  # (K,) int64 ns, (K, 6) float32
            np.testing.assert_array_equal(y, x)
    for c in (n for n in a.column_names if n.endswith("_force_matrix")):
        np.testing.assert_array_equal(b.force_matrices(c), a.force_matrices(c))
    assert {k: _rel(v, b.task.path) for k, v in b.streams.items()} == {k: _rel(v, a.task.path)
                                                                       for k, v in a.streams.items()}
    for key in a.streams:
        kind = a.stream_kind(key)
        assert b.stream_kind(key) == kind
        fa = list(a.video(key) if kind == "rgb" else a.depth(key))
        fb = list(b.video(key) if kind == "rgb" else b.depth(key))
        assert len(fb) == len(fa) == a.length
        for x, y in zip(fa, fb):
            np.testing.assert_array_equal(y, x)


def test_open_task_on_s3_equals_the_local_read_value_by_value(tasks):
    local, uri = tasks["full"]
    a, b = open_task(local), open_task(uri)
    assert isinstance(b.path, ObjectPath) and str(b.path) == uri
    assert b.info == a.info and b.tasks == a.tasks and b.name == a.name
    ea, eb = a.episodes(), b.episodes()
    assert [e.index for e in eb] == [e.index for e in ea] == [1, 2]
    kinds = set()
    for x, y in zip(ea, eb):
        _same_episode(x, y)
        kinds |= {x.stream_kind(k) for k in x.streams}
    assert kinds == {"rgb", "depth"}
    _same_episode(a.episode(2), b.episode(2))  # found from N's own paths too (checklist §12.2)


@pytest.mark.parametrize("name, codec", [("full", "hevc12"), ("ffv1", "ffv1"), ("png16", "png16")])
def test_every_depth_layout_reads_the_same_from_s3(tasks, name, codec):
    from egopool.codecs.depth import probe_depth

    local, uri = tasks[name]
    a, b = open_task(local).episode(1), open_task(uri).episode(1)
    key = next(k for k in a.streams if a.stream_kind(k) == "depth")
    assert probe_depth(b.stream_path(key)).kind == codec
    got = list(b.depth(key))
    assert len(got) == a.length and all(np.array_equal(x, y) for x, y in zip(got, a.depth(key)))
    if name != "full":  # written from known frames: lossless FFV1 and PNG16 give them back exactly
        assert all(np.array_equal(x, y) for x, y in zip(got, tasks["frames"]))


def test_enumeration_matches_including_the_png16_directory(tasks):
    for name in ("full", "ffv1", "png16"):
        local, uri = tasks[name]
        ga, gb = list_task_episodes(local), list_task_episodes(uri)
        assert [(g.index, _rel(g.data, uri), _rel(g.meta, uri), {k: _rel(v, uri) for k, v in g.videos.items()})
                for g in gb] == [(g.index, _rel(g.data, local), _rel(g.meta, local),
                                  {k: _rel(v, local) for k, v in g.videos.items()}) for g in ga]


def _findings(report, root) -> list[tuple[str, str, str, str]]:  # type: ignore[no-untyped-def]
    return sorted((f.rule, f.severity, _rel(f.path, root), f.message.replace(str(root), "TASK")) for f in report.findings)


@pytest.mark.parametrize("fast", [False, True])
def test_validate_on_s3_passes_as_on_disk(tasks, fast):
    for name in ("full", "ffv1", "png16"):
        local, uri = tasks[name]
        ra, rb = validate_task(local, fast=fast), validate_task(uri, fast=fast)
        assert rb.task == uri and rb.episodes == ra.episodes
        assert _findings(rb, uri) == _findings(ra, local)
        assert rb.ok == ra.ok and (name == "png16" or rb.findings == [])


def test_a_damaged_copy_gets_the_same_findings_on_s3(tasks, s3_server, tmp_path):
    local, _ = tasks["full"]
    bad = tmp_path / "full"  # the task's own name: no "task_name differs from the directory" warning
    shutil.copytree(local, bad)
    data = bad / "data" / "chunk-000" / "episode-000.parquet"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated parquet
    (bad / "videos" / "chunk-000" / "gripper_rgb" / "episode-001.mp4").unlink()  # missing video
    uri = s3_server.upload_dir(bad, BUCKET, "damaged/full")
    ra, rb = validate_task(bad), validate_task(uri)
    assert not ra.ok and not rb.ok
    assert _findings(rb, uri) == _findings(ra, bad)
    paths = {_rel(f.path, uri) for f in rb.errors}
    assert "/data/chunk-000/episode-000.parquet" in paths
    assert any("gripper_rgb" in f.message or "gripper_rgb" in f.path for f in rb.errors)
    # the library reader names the object and fails cleanly, as on disk
    with pytest.raises(FormatError) as err:
        open_task(uri).episode(1).table
    assert str(err.value).startswith(f"{uri}/data/chunk-000/episode-000.parquet: ")


def _egopool(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "egopool", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def _json(*args: str) -> object:
    r = _egopool(*args, "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def _strip(obj: object, root: str) -> object:
    return json.loads(json.dumps(obj).replace(root, "TASK"))


@pytest.mark.parametrize("argv", [["ls"], ["info"], ["show", "{T}", "1"], ["validate"], ["validate", "--fast"],
                                  ["stats", "check"], ["audit-gaps"]], ids=lambda a: " ".join(a))
def test_reading_commands_print_the_same_for_s3(tasks, argv):
    local, uri = tasks["full"]

    def run(task: str) -> object:
        args = [a.replace("{T}", task) for a in argv] if "{T}" in argv else [*argv, task]
        return _strip(_json(*args), task)

    assert run(uri) == run(str(local))


def test_exports_and_plot_read_from_s3_and_write_locally(tasks, tmp_path):
    local, uri = tasks["full"]
    for src, out in ((uri, tmp_path / "s3"), (str(local), tmp_path / "disk")):
        for argv in (["export", "lerobot", src, str(out / "lerobot")], ["export", "tum", src, "1", "-o", str(out / "tum")],
                     ["export", "rerun", src, "1", "-o", str(out / "ep.rrd")], ["plot", src, "1", "-o", str(out / "p.png")]):
            r = _egopool(*argv)
            assert r.returncode == 0, (argv, r.stderr)
    for rel in ("tum", "lerobot/data", "lerobot/videos", "lerobot/meta/episodes", "lerobot/meta/stats.json"):
        a, b = tmp_path / "disk" / rel, tmp_path / "s3" / rel
        if a.is_file():
            assert b.read_bytes() == a.read_bytes(), rel
            continue
        files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
        for f in files:  # byte-identical: the same frames, copied or encoded the same way
            assert (b / f).read_bytes() == (a / f).read_bytes(), f
    assert (tmp_path / "s3" / "ep.rrd").stat().st_size > 10_000 and (tmp_path / "s3" / "p.png").stat().st_size > 10_000


def test_commands_that_change_a_task_locally_only_refuse_s3_in_one_line(tasks):
    """`pack` and `upload` send a local task; every command that changes a task takes s3:// (delete, repair,
    keypoints backfill, stats recalc, compress, migrate: decisions O17, O34, O40; tests/ops/test_ops_*_backends.py,
    tests/ops/test_ops_on_bucket.py), and the refusal names them."""
    _, uri = tasks["full"]
    for argv in (["pack", uri, "1", "-o", "out"], ["upload", uri, "1", "--server", "http://127.0.0.1:9"]):
        r = _egopool(*argv)
        assert r.returncode == 2 and "works on a local directory only" in r.stderr, (argv, r.stderr)
        assert "compress, migrate" in r.stderr and "`egopool sync`" in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["no-bucket", "no-task", "bad-credentials", "no-endpoint"])
def test_store_problems_are_one_line_naming_the_uri_and_the_fix(tasks, case):
    _, uri = tasks["full"]
    target, env, fix = {
        "no-bucket": ("s3://no-such-bucket-here/pooled/full", {}, "check the bucket name"),
        "no-task": (f"s3://{BUCKET}/pooled/nothing", {}, "check the URI"),
        "bad-credentials": (uri, {"AWS_SECRET_ACCESS_KEY": "wrong-secret"}, "AWS_SECRET_ACCESS_KEY"),
        "no-endpoint": (uri, {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}", "AWS_MAX_ATTEMPTS": "1"},
                        "AWS_ENDPOINT_URL"),
    }[case]
    for argv in (["ls", target], ["validate", target]):
        r = _egopool(*argv, env=env)
        if argv[0] == "validate" and case == "no-task":  # a verdict on the task, as for a missing directory
            assert r.returncode == 1 and f"no task at {target} (check the URI" in r.stdout, r.stdout  # E65
            continue
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, r.stderr
        start = f"egopool: error: no task at {target}" if case == "no-task" else f"egopool: error: {target}"
        assert lines[0].startswith(start) and fix in lines[0], lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stalled_endpoint_cannot_hang_a_reader(tasks):
    """An endpoint that accepts connections and never answers: the request timeout ends the read."""
    _, uri = tasks["full"]
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.5)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])  # read nothing, answer nothing
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        r = _egopool("ls", uri, env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{srv.getsockname()[1]}",
                                     "EGOPOOL_S3_REQUEST_TIMEOUT": "2", "EGOPOOL_S3_CONNECT_TIMEOUT": "2",
                                     "AWS_MAX_ATTEMPTS": "1"}, timeout=300)
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    assert held, "egopool never connected"
    assert r.returncode == 1 and r.stderr.startswith(f"egopool: error: {uri}/meta/info.json"), r.stderr
    assert "did not answer in time" in r.stderr and "EGOPOOL_S3_REQUEST_TIMEOUT" in r.stderr


def test_library_errors_are_egopool_errors(tasks, monkeypatch):
    _, uri = tasks["full"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    with pytest.raises(ObjectStoreError) as err:
        open_task(uri)
    assert err.value.cause == "denied" and err.value.uri.startswith(uri)


@pytest.mark.parametrize("name", ["full", "png16"])
def test_the_dataset_decoders_read_a_stream_in_a_bucket(tasks, name):
    """egopool.dataset's seeking decoders take a stream's ObjectPath (was a TypeError: Path(ObjectPath))."""
    from egopool.dataset.decode import PngSequence, StreamDecoder

    local, uri = tasks[name]
    a, b = open_task(local).episode(1), open_task(uri).episode(1)
    for key in a.streams:
        kind = a.stream_kind(key)
        path = b.stream_path(key)
        assert isinstance(path, ObjectPath)
        dec = PngSequence(path) if path.is_dir() else StreamDecoder(path, kind, b.depth_params(key))
        try:
            want = list(a.video(key) if kind == "rgb" else a.depth(key))
            got = dec.frames([len(want) - 1, 0])
            assert sorted(got) == [0, len(want) - 1] and dec.frame_count == len(want) == a.length
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[len(want) - 1], want[-1])
        finally:
            dec.close()
