"""``egopool import lerobot``: datasets written by lerobot's own writer, and export -> import round trips."""

from __future__ import annotations

import json
import os
import shutil
import signal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from egopool import TaskWriter, open_task
from egopool.arrowutil import list_column_to_numpy
from egopool.cli.app import main
from egopool.errors import EgopoolError, FormatError
from egopool.interop import export_lerobot
from egopool.interop.lerobot_import import import_lerobot, pooled_name
from egopool.validate import validate_task

from .lerobot_env import lerobot_dataset_class

FEATURES = {
    "observation.state": {"dtype": "float32", "shape": (4,), "names": ["j0", "j1", "j2", "grip"]},
    "action": {"dtype": "float32", "shape": (2,), "names": None},
    # a shape-(1,) feature is left out: lerobot 0.4.4's writer cannot write one under numpy >= 2.4
    # (datasets calls float() on a 1-element array); the import of scalar features is covered by the
    # export -> import round trip below
    "next.success": {"dtype": "float32", "shape": (2,), "names": ["p", "q"]},
    "observation.images.wrist": {"dtype": "video", "shape": (48, 64, 3), "names": ["height", "width", "channels"]},
}


def _frame(e: int, i: int) -> dict:
    rng = np.random.default_rng(100 * e + i)
    img = np.zeros((48, 64, 3), np.uint8)
    img[:, : 8 + 2 * i] = (40 * e + 20, 120, 200 - 5 * i)
    img += rng.integers(0, 8, img.shape, dtype=np.uint8)
    return {"observation.state": np.array([i, e, 0.5 * i, -1.0], np.float32), "action": np.array([e, i], np.float32),
            "next.success": np.array([0.1 * i, 1 - 0.1 * i], np.float32), "observation.images.wrist": img,
            "task": "stack the cups" if e == 0 else "unstack the cups"}


def _lerobot_dataset(root, vcodec: str, lengths=(12, 9, 15), fps: int = 15):
    LeRobotDataset = lerobot_dataset_class()
    ds = LeRobotDataset.create("local/own", fps=fps, features=FEATURES, root=root, vcodec=vcodec,
                               video_backend="pyav")
    for e, n in enumerate(lengths):
        for i in range(n):
            ds.add_frame(_frame(e, i))
        ds.save_episode()
    ds.finalize()
    return LeRobotDataset("local/own", root=root, video_backend="pyav")


@pytest.mark.extra("interop")
@pytest.mark.parametrize("vcodec", ["h264", "libsvtav1"])  # copied segments / AV1 (lerobot's default) re-encoded
def test_dataset_written_by_lerobot_imports_and_validates(tmp_path, vcodec):
    ds = _lerobot_dataset(tmp_path / "lr", vcodec)
    result = import_lerobot(tmp_path / "lr", tmp_path / "rec", task="own")
    assert [e.index for e in result.episodes] == [1, 2, 3] and [e.length for e in result.episodes] == [12, 9, 15]
    assert result.counts["videos_copied" if vcodec == "h264" else "videos_reencoded"] == 3
    report = validate_task(result.task_dir)
    assert not report.errors, [f.message for f in report.errors]
    task = open_task(result.task_dir)
    start = 0
    for e, ep in enumerate(task.episodes()):
        t = ep.table
        n = ep.length
        items = [ds[start + i] for i in range(n)]
        np.testing.assert_array_equal(list_column_to_numpy(t.column("observation.state")),
                                      np.stack([it["observation.state"].numpy() for it in items]))
        np.testing.assert_array_equal(list_column_to_numpy(t.column("observation.action")),
                                      np.stack([it["action"].numpy() for it in items]))
        np.testing.assert_array_equal(list_column_to_numpy(t.column("observation.next_success")),
                                      np.stack([it["next.success"].numpy() for it in items]))
        np.testing.assert_allclose(t.column("timestamp").to_numpy(), np.arange(n) / 15, atol=1e-6)
        assert t.column("hardware_ns").to_pylist() == [0] * n
        frames = list(ep.video("wrist"))
        assert len(frames) == n
        for i, it in enumerate(items):  # lerobot's decode vs ours: same bitstream (copy) or one re-encode
            diff = np.abs(it["observation.images.wrist"].numpy().transpose(1, 2, 0) * 255 - frames[i])
            assert diff.mean() < (1.0 if vcodec == "h264" else 6.0), (e, i, diff.mean())
        start += n
    assert any("next.success -> observation.next_success" in n for n in result.notes)
    # LeRobot's element names are kept (the export writes them back, decisions I25)
    assert task.info["features"]["observation.state"] == {"dtype": "float32", "shape": [4],
                                                          "names": ["j0", "j1", "j2", "grip"]}


def _table_values(table, name):
    col = table.column(name)
    if str(col.type).startswith("list"):
        return list_column_to_numpy(col)
    return col.to_numpy(zero_copy_only=False)


@pytest.mark.extra("interop")
@pytest.mark.parametrize("which", ["demo_task", "sim_task"])
def test_export_then_import_is_lossless_for_the_exported_columns(request, which, tmp_path):
    src = request.getfixturevalue(which)
    state = ["observation.gripper_state", "observation.gripper_left_force"] if which == "sim_task" else []
    export = export_lerobot(src.path, tmp_path / "lr", state=state, lerobot="0.4")
    result = import_lerobot(tmp_path / "lr", tmp_path / "rec", task="back")
    back = open_task(result.task_dir)
    assert not validate_task(back.path).errors
    exported = {s for c in export.plan.columns if c.kind in ("column", "concat") for s in c.sources}
    exported -= {"action"} if state else set()
    assert state == [] or set(state) <= exported
    for a, b in zip(src.episodes(), back.episodes(), strict=True):
        ta, tb = a.table, b.table
        for name in sorted(exported | {"wall_time", "frame_index"}):
            np.testing.assert_array_equal(_table_values(tb, name), _table_values(ta, name), err_msg=name)
            assert tb.schema.field(name).type == ta.schema.field(name).type, name
            if name in src.info["features"]:
                assert back.info["features"][name] == src.info["features"][name], name
        for s in export.plan.streams:
            for fa, fb in zip(a.video(s.key), b.video(s.key), strict=True):
                np.testing.assert_array_equal(fa, fb)
        for c in (c for c in export.plan.columns if c.kind == "depth"):
            key = c.sources[0].removeprefix("videos/")
            for da, db in zip(a.depth(key), b.depth(key), strict=True):
                np.testing.assert_array_equal(da, db)
        assert b.meta["created_at"] == a.meta["created_at"]
        assert b.meta["calibration"] == a.meta["calibration"]


def test_cli_import_of_a_missing_or_foreign_directory_is_one_line(tmp_path, capsys):
    assert main(["import", "lerobot", str(tmp_path), "--task", "x", "--out", str(tmp_path / "rec")]) == 1
    err = capsys.readouterr().err
    assert "not a LeRobot dataset" in err and err.count("\n") == 1
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"codebase_version": "v2.1", "fps": 30, "features": {}}))
    with pytest.raises(FormatError, match="only LeRobot v3.x"):
        import_lerobot(tmp_path, tmp_path / "rec", task="x")
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize(("feature", "column"), [
    ("observation.state", "observation.state"), ("action", "observation.action"),
    ("next.reward", "observation.next_reward"), ("observation.Effort-L", "observation.effort_l"),
    ("observation.gripper_slam_trajectory", "observation.gripper_slam_trajectory_lerobot"),
])
def test_generic_names_follow_the_column_grammar(feature, column):
    assert pooled_name(feature) == column


def test_an_episode_index_the_dataset_lacks_is_refused_before_writing(sim_task, tmp_path, capsys):
    """Found by qa12: ``-e 0 -e 7`` on a 2-episode dataset imported episode 0 and dropped 7 without a word."""
    export_lerobot(sim_task.path, tmp_path / "lr", lerobot="0.4")
    rec = tmp_path / "rec"
    with pytest.raises(EgopoolError) as err:
        import_lerobot(tmp_path / "lr", rec, task="back", episodes=[0, 7, 9])
    assert err.value.message == "no episode_index 7, 9 in the dataset"
    assert err.value.hint == "the dataset has episodes [0, 1]"
    assert not rec.exists()
    assert main(["import", "lerobot", str(tmp_path / "lr"), "--task", "back", "--out", str(rec), "-e", "1"]) == 0
    assert [ep.length for ep in open_task(rec / "back").episodes()] == [sim_task.episode(2).length]


def _nest(p):
    p.write_text("[" * 5000 + "]" * 5000)


def _fifo(p):
    p.unlink()
    os.mkfifo(p)


def _edit_json(name, edit):
    def do(p):
        doc = json.loads(p.read_text())
        edit(doc)
        p.write_text(json.dumps(doc))
    return do


def _drop_data_column(p):
    t = pq.read_table(p)
    pq.write_table(t.drop([c for c in t.column_names if c.startswith("observation.gripper_state")]), p)


def _same_episode_index(p):
    t = pq.read_table(p)
    i = t.column_names.index("episode_index")
    pq.write_table(t.set_column(i, "episode_index", pa.array([0] * t.num_rows, pa.int64())), p)


_FIRST_DATA = "data/chunk-000/file-000.parquet"
_EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DAMAGED_LEROBOT = {  # found by qa12: each was a traceback (RecursionError, TypeError, ...) or a hang (FIFO)
    "info nested": ("meta/info.json", _nest, "meta/info.json: JSON nests deeper than 64 levels"),
    "info FIFO": ("meta/info.json", _fifo, "meta/info.json: LeRobot info.json is a FIFO, not a regular file"),
    "fps text": ("meta/info.json", _edit_json("info", lambda d: d.update(fps="30")),
                 "meta/info.json: info.json fps is '30', not a number > 0"),
    "features list": ("meta/info.json", _edit_json("info", lambda d: d.update(features=[1])),
                      "meta/info.json: info.json features is a list, not an object"),
    "data_path field": ("meta/info.json", _edit_json("info", lambda d: d.update(data_path="data/{x}.parquet")),
                        "meta/info.json: info.json data_path 'data/{x}.parquet' is not a path template"),
    "mapping nested": ("egopool_mapping.json", _nest, "egopool_mapping.json: JSON nests deeper than 64 levels"),
    "mapping FIFO": ("egopool_mapping.json", _fifo, "egopool_mapping.json: the egopool mapping is a FIFO"),
    "mapping list": ("egopool_mapping.json", lambda p: p.write_text("[1]"),
                     "egopool_mapping.json: not an egopool mapping (not a JSON object)"),
    "mapping devices": ("egopool_mapping.json", _edit_json("m", lambda d: d.update(declarations={"devices": "x"})),
                        "egopool_mapping.json: cannot use the egopool mapping: devices must be a list of objects"),
    "pandas metadata": ("meta/tasks.parquet", lambda p: pq.write_table(
        pq.read_table(p).replace_schema_metadata({"pandas": "[" * 5000}), p), "meta/tasks.parquet: "),
    "episodes FIFO": (_EPISODES, _fifo, "LeRobot episodes parquet is a FIFO"),
    "episode twice": (_EPISODES, _same_episode_index, "meta/episodes: episode_index 0 has more than one row"),
    "data FIFO": (_FIRST_DATA, _fifo, "LeRobot data parquet of episode 0 is a FIFO"),
    "data column": (_FIRST_DATA, _drop_data_column,
                    "LeRobot data parquet of episode 0 lacks column(s) ['observation.gripper_state']"),
    "video FIFO": ("videos/observation.images.gripper_rgb/chunk-000/file-000.mp4", _fifo, "video is a FIFO"),
}


@pytest.mark.parametrize("case", list(DAMAGED_LEROBOT))
def test_a_damaged_lerobot_dataset_is_one_line_and_writes_nothing(sim_task, tmp_path_factory, tmp_path, capsys, case):
    src = tmp_path_factory.getbasetemp() / "lerobot_clean"
    if not src.exists():
        export_lerobot(sim_task.path, src, lerobot="0.4")
    lr = tmp_path / "lr"
    shutil.copytree(src, lr)
    rel, damage, message = DAMAGED_LEROBOT[case]
    damage(lr / rel)
    signal.alarm(60)  # a FIFO opened for reading would block forever
    try:
        rc = main(["import", "lerobot", str(lr), "--task", "x", "--out", str(tmp_path / "rec")])
    finally:
        signal.alarm(0)
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and err.startswith("egopool: error: "), err
    assert message in err
    assert not (tmp_path / "rec" / "x").exists()


# -- all or nothing: an episode whose video demuxes but does not decode ------------------------------------------
@pytest.fixture(scope="module", params=["h264", "libsvtav1"])  # copied segments / re-encoded AV1
def small_lerobot(request, tmp_path_factory):
    """A dataset written by lerobot: 3 episodes of 4, 5, 6 rows at 15 fps in one 64x48 MP4."""
    root = tmp_path_factory.mktemp(f"small_{request.param}") / "lr"
    _lerobot_dataset(root, request.param, lengths=(4, 5, 6))
    return root


def _garble_packets(mp4, start_s: float, end_s: float) -> int:
    """Overwrite the payload of every packet with pts in [start_s, end_s) with random bytes; the container
    (sample tables, offsets, sizes) stays intact, so the file demuxes as before. Returns the packets hit."""
    import av

    spans = []
    with av.open(str(mp4)) as c:
        s = c.streams.video[0]
        spans = [(p.pos, p.size) for p in c.demux(s) if p.size and start_s <= float(p.pts * s.time_base) < end_s]
    raw = bytearray(mp4.read_bytes())
    rng = np.random.default_rng(7)
    for pos, size in spans:
        raw[pos:pos + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    mp4.write_bytes(bytes(raw))
    return len(spans)


def _files(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.extra("interop")
@pytest.mark.parametrize("target", ["new task", "task with episodes"])
def test_an_episode_whose_video_does_not_decode_imports_nothing(small_lerobot, tmp_path, capsys, target):
    """Found by QA: the 3rd episode's video demuxed but did not decode, and episodes 1-2 were already in the task."""
    lr = tmp_path / "lr"
    shutil.copytree(small_lerobot, lr)
    mp4 = lr / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    # the 3rd episode's frames from its 4th on (earlier ones would already stop the 2nd episode's decode
    # in a decoder that reads ahead; this damage stopped the import only after two episodes were written)
    start = pq.read_table(lr / "meta/episodes/chunk-000/file-000.parquet").column(
        "videos/observation.images.wrist/from_timestamp")[2].as_py()
    assert _garble_packets(mp4, start + 3 / 15 - 1e-3, 10.0) == 3
    rec = tmp_path / "rec"
    if target == "task with episodes":  # an earlier import of the first episode, then a recycled N
        assert main(["import", "lerobot", str(small_lerobot), "--task", "t", "--out", str(rec), "-e", "0"]) == 0
        TaskWriter(rec, "t", fps=15.0).begin_episode().abort()
        assert json.loads((rec / "t/meta/recycled_episode.json").read_text())["episode_index"] == 2
    before = _files(rec) if rec.exists() else None
    capsys.readouterr()
    rc = main(["import", "lerobot", str(lr), "--task", "t", "--out", str(rec)])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert err == (f"egopool: error: {mp4}: episode 2's video 'observation.images.wrist' does not decode (Invalid "
                   "data found when processing input) (restore it, or import the other episodes (--episode E))\n")
    if before is None:
        assert not rec.exists()
    else:
        assert _files(rec) == before  # byte for byte: no episode, no recycled N, info.json and stats.json as they were
    # the undamaged episodes still import on their own
    assert main(["import", "lerobot", str(lr), "--task", "t", "--out", str(rec), "-e", "0", "-e", "1"]) == 0
    assert [e.length for e in open_task(rec / "t").episodes()] == ([4] if before else []) + [4, 5]


@pytest.mark.extra("interop")
def test_image_features_import_and_a_damaged_png_imports_nothing(tmp_path, capsys):
    """PNG image features (lerobot ``use_videos=False``) become RGB streams; one PNG that does not decode in
    the 2nd episode stops the import before the 1st is written, naming the file, episode, row and column."""
    LeRobotDataset = lerobot_dataset_class()
    feats = {"observation.state": {"dtype": "float32", "shape": (2,), "names": None},
             "observation.images.top": {"dtype": "image", "shape": (24, 32, 3), "names": ["height", "width", "channels"]}}
    lr = tmp_path / "lr"
    ds = LeRobotDataset.create("local/img", fps=10, features=feats, root=lr, use_videos=False, video_backend="pyav")
    for e in range(2):
        for i in range(5):
            ds.add_frame({"observation.state": np.array([i, e], np.float32), "task": "look",
                          "observation.images.top": np.full((24, 32, 3), 40 * i + 20 * e, np.uint8)})
        ds.save_episode()
    ds.finalize()
    result = import_lerobot(lr, tmp_path / "rec", task="img")
    for e, ep in enumerate(open_task(result.task_dir).episodes()):
        frames = np.stack(list(ep.video("top")))
        assert frames.shape == (5, 24, 32, 3)
        np.testing.assert_allclose(frames.mean(axis=(1, 2, 3)), [40 * i + 20 * e for i in range(5)], atol=3)
    data = lr / "data/chunk-000/file-000.parquet"
    t = pq.read_table(data)
    cells = t.column("observation.images.top").to_pylist()
    cells[5 + 2] = {"bytes": b"\x89PNG\r\n\x1a\n" + bytes(40), "path": None}  # episode 1, row 2
    col = t.schema.get_field_index("observation.images.top")
    pq.write_table(t.set_column(col, "observation.images.top", pa.array(cells, t.schema.field(col).type)), data)
    rec = tmp_path / "rec2"
    capsys.readouterr()
    assert main(["import", "lerobot", str(lr), "--task", "img", "--out", str(rec)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"egopool: error: {data}: episode 1 row 2: column 'observation.images.top': the image does "
                          "not decode (") and err.count("\n") == 1, err
    assert err.endswith("(restore it, or import the other episodes (--episode E))\n")
    assert not rec.exists()


def _reencode_at(mp4, fps: int) -> int:
    """Re-encode ``mp4`` (H.264) at ``fps``, keeping every frame whose time falls on the new grid (the
    duration stays); returns the frames written."""
    import av

    with av.open(str(mp4)) as c:
        frames = [(float(f.pts * f.time_base), f.to_ndarray(format="rgb24")) for f in c.decode(video=0)]
    out = mp4.with_suffix(".tmp.mp4")
    kept = 0
    with av.open(str(out), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = frames[0][1].shape[1], frames[0][1].shape[0], "yuv420p"
        for t, img in frames:
            if abs(t * fps - round(t * fps)) < 1e-6:
                vf = av.VideoFrame.from_ndarray(img, format="rgb24")
                vf.pts = kept
                c.mux(s.encode(vf))
                kept += 1
        c.mux(s.encode())
    out.replace(mp4)
    return kept


@pytest.mark.extra("interop")
def test_a_video_at_half_the_dataset_rate_is_named_as_a_rate_mismatch(tmp_path, capsys):
    """Issue 15 E: a 30 fps dataset whose video was re-encoded at 15 fps is not "truncated or damaged"."""
    lr = tmp_path / "lr"
    _lerobot_dataset(lr, "h264", lengths=(12, 8), fps=30)
    mp4 = lr / "videos/observation.images.wrist/chunk-000/file-000.mp4"
    assert _reencode_at(mp4, 15) == 10
    capsys.readouterr()
    rc = main(["import", "lerobot", str(lr), "--task", "t", "--out", str(tmp_path / "rec")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert err == (f"egopool: error: {mp4}: episode 0's video 'observation.images.wrist' is 15 fps in a 30 fps dataset "
                   "(meta/info.json fps): it holds 6 frames in [0, 0.4) s for 12 rows (re-encode the video at the "
                   "dataset's rate (e.g. ffmpeg -i file-000.mp4 -r 30 OUT.mp4), or import the other episodes "
                   "(--episode E))\n")
    assert not (tmp_path / "rec").exists()


def test_importing_a_dataset_twice_is_refused_per_episode(sim_task, tmp_path, capsys):
    """The example: `import lerobot` twice gave 10 episodes (5 + 5 identical copies) without a word."""
    export_lerobot(sim_task.path, tmp_path / "lr", lerobot="0.4")
    rec = tmp_path / "rec"
    base = ["import", "lerobot", str(tmp_path / "lr"), "--task", "back", "--out", str(rec)]
    assert main([*base, "-e", "1"]) == 0
    capsys.readouterr()
    assert main(base) == 1  # episode 1 of the dataset is N=1 already: nothing of the import is written
    err = capsys.readouterr().err
    assert err.startswith(f"egopool: error: {rec}/back: {tmp_path}/lr episode 1 is already in this task as episode "
                          "N=1 (imported before, same content sha256:") and err.count("\n") == 1
    assert "--allow-duplicate" in err
    assert [ep.index for ep in open_task(rec / "back").episodes()] == [1]
    assert main([*base, "-e", "0"]) == 0  # a dataset episode not imported yet is welcome
    assert main([*base, "--allow-duplicate"]) == 0
    assert [ep.index for ep in open_task(rec / "back").episodes()] == [1, 2, 3, 4]
