"""``egopool compress``: FFV1 depth to 12-bit log HEVC, whole task, checked, resumable after SIGKILL (issue 20).

Real data and real encoders: the bundled 7-Scenes RGB-D frames imported with ``--depth-codec ffv1``
and a simulated two-D435 rig recorded with ``--depth-codec ffv1``. The crash tests stop a real
``egopool compress`` process at a named stage (``EGOPOOL_COMPRESS_PAUSE``) and SIGKILL it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import av
import numpy as np
import pytest
from ops_helpers import snapshot
from validate_support import reseal

from egopool.cli.app import main
from egopool.codecs.depth import LogDepthCodec, hevc12_available, probe_depth, read_depth_frames
from egopool.codecs.depth_error import depth_error_report
from egopool.importers.rgbd_frames import import_rgbd_frames
from egopool.layout import find_episode_files, list_task_episodes
from egopool.meta.info import read_info
from egopool.ops import compress_task
from egopool.read import open_task
from egopool.registry import Registry, sha256_file, task_key
from egopool.validate import validate_task

pytestmark = pytest.mark.skipif(not hevc12_available(), reason="this PyAV's libx265 has no gray12le")

SEVEN = Path(__file__).resolve().parents[1] / "data" / "sevenscenes_tsdf_fusion"
STAGES_FFV1 = ("encoded", "placed")  # killed before the commit: the task is still FFV1
STAGES_HEVC = ("committed", "finishing")  # killed after it: the task is HEVC


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _sim(root: Path, capsys, episodes: int = 2) -> Path:
    code, _, err = _run(capsys, "simulate", "--rig", "d435x2", "--scale", "4", "--depth-codec", "ffv1",
                        "--episodes", episodes, "--seconds", "1", "--out", root, "--task", "sim")
    assert code == 0, err
    return root / "sim"


def _depth_files(task: Path) -> dict[tuple[int, str], Path]:
    """(N, key) -> the file a reader decodes, for every depth stream (as the reader picks it)."""
    t = open_task(task)
    cams = t.info["cameras"]
    return {(ep.index, k): ep.stream_path(k) for ep in t.episodes() for k in ep.files.videos if k not in cams}


def _originals(task: Path) -> dict[tuple[int, str], np.ndarray]:
    return {nk: np.stack(list(read_depth_frames(p))) for nk, p in _depth_files(task).items()}


def _rgb_bytes(task: Path) -> dict[str, str]:
    return {str(p.relative_to(task)): sha256_file(p) for p in task.glob("videos/*/*_rgb*/*")}


def _assert_within_bounds(orig: np.ndarray, dec: np.ndarray) -> None:
    """Holes exact and the error bound of docs/decisions.md R31, against the original clipped to the code's range."""
    assert dec.shape == orig.shape and dec.dtype == np.uint16
    np.testing.assert_array_equal(dec == 0, orig == 0)
    c = LogDepthCodec()
    clipped = np.where(orig > 0, np.clip(orig, c.d_min, c.d_max), 0).astype(np.uint16)
    r = depth_error_report(clipped, dec)
    assert r.holes_kept == r.holes and r.holes_created == 0
    assert r.p99_non_edge <= 0.015 and r.p99 <= 0.03, r
    for a, b in zip(clipped, dec):  # no single frame is broken
        fr = depth_error_report(a, b)
        assert np.isnan(fr.p99_non_edge) or fr.p99_non_edge <= 0.03


def _assert_all(task: Path, ext: str) -> None:
    """Every depth stream, as info.json declares it and as a reader picks it, has extension ``ext``."""
    info = read_info(task)
    depth_keys = [k for k in info["video_extensions"] if k not in info["cameras"]]
    assert depth_keys and all(info["video_extensions"][k] == ext for k in depth_keys)
    files = _depth_files(task)
    assert files and all(p.suffix == "." + ext for p in files.values()), files
    kind = "ffv1" if ext == "mkv" else "hevc12"
    assert all(probe_depth(p).kind == kind for p in files.values())
    # the enumerators take the declared file too, where both an .mkv and an .mp4 exist (decisions R32)
    layout = open_task(task).layout
    for g in list_task_episodes(task):
        found = find_episode_files(task, layout, g.index)
        assert found is not None
        for k in depth_keys:
            assert g.videos[k].suffix == found.videos[k].suffix == "." + ext


def _assert_registry(task: Path) -> None:
    reg = Registry.for_task(task)
    recs = {r.episode_index: r for r in reg.recordings(task_key(task))}
    assert recs
    for g in list_task_episodes(task):
        rec = recs[g.index]
        files = {f.path: f for f in rec.files}
        assert set(files) == {str(p.relative_to(task)) for p in g.paths()}
        for p in g.paths():
            f = files[str(p.relative_to(task))]
            assert (f.size, f.sha256) == (p.stat().st_size, sha256_file(p))


def _assert_finished(task: Path, originals: dict[tuple[int, str], np.ndarray], rgb: dict[str, str]) -> None:
    _assert_all(task, "mp4")
    assert not list(task.rglob("*.mkv")) and not list(task.rglob(".*.compressing"))
    assert not (task / "meta" / ".compress.json").exists()
    decoded = _originals(task)
    assert decoded.keys() == originals.keys()
    for nk, orig in originals.items():
        _assert_within_bounds(orig, decoded[nk])
    assert _rgb_bytes(task) == rgb
    _assert_registry(task)
    rep = validate_task(task)
    assert rep.ok, [f.message for f in rep.findings]
    assert not [f for f in rep.findings if "compress" in f.message or "not part of any episode" in f.message]


def test_real_rgbd_frames_round_trip(tmp_path):
    imported = import_rgbd_frames(SEVEN, tmp_path, task="seven", frame="ego_cam_optical", depth_codec="ffv1")
    task = tmp_path / "seven"
    assert imported is not None and (task / "videos/chunk-000/camera_depth/episode-000.mkv").is_file()
    originals, rgb = _originals(task), _rgb_bytes(task)
    assert len(originals) == 1 and next(iter(originals.values())).shape == (30, 480, 640)
    vc_before = open_task(task).episode(1).meta["video_codec"]["camera_depth"]

    report = compress_task(task)

    assert report.committed and report.keys == ["camera_depth"] and len(report.streams) == 1
    s = report.streams[0]
    assert s.result is not None and s.frames == 30 and s.result.frames == 30
    assert s.bytes_after == (task / s.dst).stat().st_size < s.bytes_before
    _assert_finished(task, originals, rgb)
    # the report's figures are the data's: max error against the original, holes counted
    dec = _originals(task)[(1, "camera_depth")]
    orig = originals[(1, "camera_depth")]
    assert s.result.max_error_mm == float(np.abs(dec.astype(np.int64) - orig.astype(np.int64))[orig > 0].max())
    assert s.result.holes == int((orig == 0).sum()) > 0 and s.result.clipped == 0
    row = open_task(task).episode(1).meta
    entry = row["video_codec"]["camera_depth"]
    assert (entry["codec"], entry["pix_fmt"], entry["qp"], entry["frames"]) == ("hevc12", "gray12le", 6, 30)
    assert entry["compressed_from"] == vc_before and vc_before["codec"] == "ffv1"
    assert "camera_depth_clipped_count" not in row["drop_stats"]
    # a second run has nothing to do and changes nothing
    before = snapshot(task)
    again = compress_task(task)
    assert not again.streams and not again.committed and "nothing to do" in again.notes[0]
    assert snapshot(task) == before


def test_simulated_rig_cli_dry_run_json_and_run(tmp_path, capsys):
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    assert len(originals) == 4  # 2 episodes x 2 depth streams
    before = snapshot(task)
    code, out, err = _run(capsys, "compress", task, "--dry-run", "--json")
    assert code == 0 and snapshot(task) == before
    plan = json.loads(out)
    assert (plan["streams"], plan["frames"], plan["committed"]) == (4, 120, False)
    assert plan["bytes_before"] == sum(p.stat().st_size for p in _depth_files(task).values())
    assert sorted(d["dst"] for d in plan["details"]) == sorted(
        str(p.relative_to(task).with_suffix(".mp4")) for p in _depth_files(task).values())

    code, out, err = _run(capsys, "compress", task, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["streams"], doc["frames"], doc["committed"]) == (4, 120, True)
    assert 0 < doc["bytes_after"] < doc["bytes_before"] == plan["bytes_before"]
    assert doc["max_error_mm"] > 0 and doc["cpu_seconds"] > 0
    _assert_finished(task, originals, rgb)
    code, out, err = _run(capsys, "compress", task)
    assert (code, err) == (0, "") and out.startswith("nothing to do")


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the paused process has written its marker (or died: then fail with its stderr)."""
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"compress exited with {proc.returncode} before pausing: "
                                 f"{proc.stderr.read().decode() if proc.stderr else ''}")
        threading.Event().wait(0.05)


@pytest.mark.parametrize("stage", [*STAGES_FFV1, *STAGES_HEVC])
def test_sigkill_mid_compress_leaves_one_codec_and_a_second_run_finishes(stage, tmp_path, capsys):
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    env = {**os.environ, "EGOPOOL_COMPRESS_PAUSE": stage}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "compress", str(task), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = task / "meta" / f".compress-paused-{stage}"
    try:
        _wait_for(marker, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    marker.unlink()

    # what any reader or validate sees now: one codec for the whole task, and valid
    rep = validate_task(task)
    assert rep.ok, [f.message for f in rep.findings]
    assert any("interrupted" in f.message and "egopool compress" in f.message for f in rep.findings)
    assert not [f for f in rep.findings if "not part of any episode" in f.message]  # the other half is no stray
    if stage in STAGES_FFV1:
        _assert_all(task, "mkv")
        decoded = _originals(task)
        assert decoded.keys() == originals.keys()
        for nk, orig in originals.items():  # still the lossless originals
            np.testing.assert_array_equal(decoded[nk], orig)
    else:
        _assert_all(task, "mp4")
        decoded = _originals(task)
        for nk, orig in originals.items():
            _assert_within_bounds(orig, decoded[nk])
    assert _rgb_bytes(task) == rgb

    report = compress_task(task)  # the second run finishes it
    assert report.committed and report.resumed
    if stage == "encoded":  # the stream finished before the kill is taken over, not encoded again
        assert [s.reused for s in report.streams].count(True) == 1
    _assert_finished(task, originals, rgb)


def test_refusals_are_one_line_and_change_nothing(tmp_path, capsys):
    from egopool._atomic import task_lock

    task = _sim(tmp_path, capsys)
    before = snapshot(task)
    # a locked task (a recorder or another command holds the lock)
    with task_lock(task):
        code, out, err = _run(capsys, "compress", task)
    assert (code, out) == (1, "") and err.count("\n") == 1 and "locked" in err
    assert snapshot(task) == before

    # a non-depth FFV1 stream where a depth stream belongs
    bad = task / "videos/chunk-000/d435_depth_2/episode-001.mkv"
    saved = bad.read_bytes()
    with av.open(str(bad), "w", format="matroska") as out_c:
        s = out_c.add_stream("ffv1", rate=30)
        s.width, s.height, s.pix_fmt = 32, 24, "bgr0"
        for i in range(3):
            frame = av.VideoFrame.from_ndarray(np.full((24, 32, 3), 40 * i, np.uint8), format="rgb24")
            for p in s.encode(frame):
                out_c.mux(p)
        for p in s.encode():
            out_c.mux(p)
    changed = snapshot(task)
    code, out, err = _run(capsys, "compress", task)
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert str(bad) in err and "not a depth stream" in err and "nothing was changed" in err
    assert snapshot(task) == changed

    # a damaged depth stream: the header reads, the frames do not; found while encoding, named, undone
    bad.write_bytes(saved[: len(saved) // 2])
    changed = snapshot(task)
    code, out, err = _run(capsys, "compress", task)
    assert (code, out) == (1, "") and err.count("\n") == 1, err
    assert str(bad) in err and "nothing was changed" in err
    assert snapshot(task) == changed


def test_nice_lowers_the_worker_thread_only(tmp_path, capsys):
    task = _sim(tmp_path, capsys, episodes=1)
    me = threading.get_native_id()
    mine = os.getpriority(os.PRIO_PROCESS, me)
    seen: set[int] = set()

    def progress(done: int, total: int, what: str) -> None:
        seen.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    report = compress_task(task, nice=True, progress=progress)
    assert report.committed and seen == {19}
    assert os.getpriority(os.PRIO_PROCESS, me) == mine


def test_ctrl_c_keeps_the_finished_streams_for_the_next_run(tmp_path, capsys):
    task = _sim(tmp_path, capsys, episodes=1)  # two depth streams
    originals, rgb = _originals(task), _rgb_bytes(task)
    streams: list[str] = []

    def progress(done: int, total: int, what: str) -> None:
        if what not in streams:
            streams.append(what)
        if len(streams) == 2:
            raise KeyboardInterrupt

    before = {k: v for k, v in snapshot(task).items() if k != "meta/.compress.json"}
    with pytest.raises(KeyboardInterrupt):
        compress_task(task, progress=progress)
    journal = json.loads((task / "meta" / ".compress.json").read_text())
    assert [s["result"] is not None for s in journal["streams"]] == [True, False]
    _assert_all(task, "mkv")
    hidden = list(task.rglob(".*.compressing"))
    assert len(hidden) == 1  # the finished one; the interrupted one's partial output is gone
    after = {k: v for k, v in snapshot(task).items() if k != "meta/.compress.json"}
    assert {k: v for k, v in after.items() if not k.endswith(".compressing")} == before
    assert validate_task(task).ok

    report = compress_task(task)
    assert report.committed and [s.reused for s in report.streams] == [True, False]
    _assert_finished(task, originals, rgb)


def test_depth_outside_the_log_code_range_is_clipped_and_counted(tmp_path):
    """A value the 12-bit code cannot hold is changed with a trace: drop_stats `<key>_clipped_count` (decision 22)."""
    import shutil

    from PIL import Image

    frames_dir = tmp_path / "frames"
    shutil.copytree(SEVEN, frames_dir)
    first = sorted(frames_dir.glob("*.depth.png"))[0]
    depth = np.asarray(Image.open(first)).copy()
    depth[10:20, 10:30] = 30000  # beyond d_max (20000 mm)
    depth[40:45, 10:20] = 50  # below d_min (100 mm)
    Image.fromarray(depth).save(first)
    import_rgbd_frames(frames_dir, tmp_path / "rec", task="t", frame="ego_cam_optical", depth_codec="ffv1")
    task = tmp_path / "rec" / "t"
    originals = _originals(task)
    assert np.count_nonzero(originals[(1, "camera_depth")] == 30000) == 200  # ffv1 kept them as they were

    report = compress_task(task)

    assert report.streams[0].result is not None and report.streams[0].result.clipped == 250
    row = open_task(task).episode(1).meta
    assert row["drop_stats"]["camera_depth_clipped_count"] == 250
    dec = _originals(task)[(1, "camera_depth")]
    assert abs(float(np.median(dec[0, 10:20, 10:30])) - 20000) <= 20000 * 0.015
    assert abs(float(np.median(dec[0, 40:45, 10:20])) - 100) <= 2
    _assert_within_bounds(originals[(1, "camera_depth")], dec)
    rep = validate_task(task)
    assert rep.ok and any("camera_depth_clipped_count" in f.message for f in rep.findings)


def test_a_task_already_mixed_by_hand_ends_all_hevc(tmp_path, capsys):
    """An episode whose depth is already 12-bit HEVC (.mp4) under a key declared mkv is taken as done."""
    from egopool.codecs.depth_transcode import transcode_depth

    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    mkv = task / "videos/chunk-000/d435_depth/episode-000.mkv"
    transcode_depth(mkv, mkv.with_suffix(".mp4"), fps=30.0)
    mkv.unlink()
    from egopool.registry import file_record

    reg = Registry.for_task(task)  # as the tool that mixed it would have
    rec = reg.get(task_key(task), 1)
    assert rec is not None
    files = [f for f in rec.files if not f.path.endswith(".mkv") or "d435_depth/" not in f.path]
    reg.replace_files(task_key(task), 1, [*files, file_record(task, mkv.with_suffix(".mp4"))])
    reseal(task)  # and the row's checksums
    assert not validate_task(task).ok  # .mp4 where video_extensions says mkv

    report = compress_task(task)
    assert report.committed and len(report.streams) == 3
    _assert_finished(task, originals, rgb)


def test_recording_ffv1_into_a_compressed_task_is_refused_naming_info_json_and_the_fix(tmp_path, capsys):
    """After `compress` the task is HEVC: an FFV1 episode is refused before a tick, naming the file and the flag."""
    task = _sim(tmp_path, capsys, episodes=1)
    assert compress_task(task).committed
    before = snapshot(task)
    code, out, err = _run(capsys, "simulate", "--rig", "d435x2", "--scale", "4", "--depth-codec", "ffv1",
                          "--seconds", "0.2", "--out", tmp_path, "--task", "sim")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert str(task / "meta" / "info.json") in err and "--depth-codec hevc12 or auto" in err
    assert snapshot(task) == before
    code, out, err = _run(capsys, "simulate", "--rig", "d435x2", "--scale", "4", "--seconds", "0.2",
                          "--out", tmp_path, "--task", "sim", "--json")  # auto follows the task: HEVC
    assert code == 0, err
    assert [p.suffix for p in _depth_files(task).values()] == [".mp4"] * 4


def test_cli_says_how_many_pixels_the_log_code_clipped(tmp_path, capsys):
    """The human output names the clipped pixels (a value changed is never silent), --json counts them."""
    task = _sim(tmp_path, capsys, episodes=1)
    tmp = tmp_path / "far.mkv"
    src = _depth_files(task)[(1, "d435_depth")]
    frames = np.stack(list(read_depth_frames(src)))
    frames[:, :4, :10] = 30000  # beyond d_max (20000 mm): 40 pixels a frame
    from egopool.codecs.depth import DepthEncoder

    enc = DepthEncoder(tmp, frames.shape[2], frames.shape[1], 30.0, codec="ffv1")
    for f in frames:
        enc.encode(f)
    enc.close()
    os.replace(tmp, src)
    code, out, err = _run(capsys, "compress", task)
    assert code == 0, err
    n = 40 * len(frames)
    assert f"{n} depth pixel(s)" in err and "d435_depth_clipped_count" in err
    assert open_task(task).episode(1).meta["drop_stats"]["d435_depth_clipped_count"] == n


def _kill_at(task: Path, stage: str) -> None:
    """Run a real `egopool compress` and SIGKILL it at ``stage`` (EGOPOOL_COMPRESS_PAUSE)."""
    env = {**os.environ, "EGOPOOL_COMPRESS_PAUSE": stage}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "compress", str(task), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = task / "meta" / f".compress-paused-{stage}"
    try:
        _wait_for(marker, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    marker.unlink()


def test_an_episode_deleted_after_the_commit_does_not_block_the_roll_forward(tmp_path, capsys):
    """Killed after info.json switched, then `egopool delete 2`: the next run finishes the others (it looped)."""
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    _kill_at(task, "committed")
    code, _, err = _run(capsys, "delete", task, "2")
    assert code == 0, err
    code, out, err = _run(capsys, "compress", task)
    assert code == 0, err
    assert [g.index for g in list_task_episodes(task)] == [1]
    _assert_finished(task, {nk: a for nk, a in originals.items() if nk[0] == 1},
                     {k: v for k, v in rgb.items() if k.endswith("episode-000.mp4")})


def test_a_placed_output_lost_after_the_commit_is_encoded_again_from_its_mkv(tmp_path, capsys):
    """Killed after the commit, episode 1's .mp4 removed by hand: the next run re-encodes it from the .mkv."""
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    _kill_at(task, "committed")
    lost = next(task.glob("videos/chunk-000/d435_depth/episode-000.mp4"))
    assert (task / "videos/chunk-000/d435_depth/episode-000.mkv").is_file()
    lost.unlink()
    report = compress_task(task)
    assert report.committed and report.resumed and not report.notes
    _assert_finished(task, originals, rgb)


def test_a_hidden_output_of_a_deleted_episode_is_swept_by_the_next_run(tmp_path, capsys):
    """Killed before the commit, episode 1 deleted: its `.compressing` file does not stay behind forever."""
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    _kill_at(task, "encoded")
    assert len(list(task.rglob(".*.compressing"))) == 1
    code, _, err = _run(capsys, "delete", task, "1")
    assert code == 0, err
    assert compress_task(task).committed
    _assert_finished(task, {nk: a for nk, a in originals.items() if nk[0] == 2},
                     {k: v for k, v in rgb.items() if k.endswith("episode-001.mp4")})


def test_a_writer_is_refused_at_once_while_compress_holds_the_task_lock(tmp_path, capsys):
    """Recording into a task being compressed fails in one line instead of waiting hours for the lock (R38)."""
    from egopool import TaskWriter
    from egopool.errors import LockError
    from egopool.ops.compress import JOURNAL
    from egopool.write.episode_writer import StreamSpec
    from egopool.write.task_writer import COMPRESS_JOURNAL

    assert COMPRESS_JOURNAL == JOURNAL
    task = _sim(tmp_path, capsys)
    early = TaskWriter(tmp_path, "sim")  # opened before the compress started (a recorder between episodes)
    env = {**os.environ, "EGOPOOL_COMPRESS_PAUSE": "encoded"}
    proc = subprocess.Popen([sys.executable, "-m", "egopool", "compress", str(task)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = task / "meta" / ".compress-paused-encoded"
    try:
        _wait_for(marker, proc)
        before = snapshot(task)
        # a CLI recorder: one line, exit 1 (before the fix it blocked on the lock; the timeout turns that into a failure)
        done = subprocess.run([sys.executable, "-m", "egopool", "simulate", "--rig", "d435x2", "--scale", "8",
                               "--seconds", "0.2", "--out", str(tmp_path), "--task", "sim"],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "egopool compress" in done.stderr
        assert str(task / JOURNAL) in done.stderr
        with pytest.raises(LockError, match="egopool compress"):
            early.begin_episode(streams=[StreamSpec("d435_depth", "depth", 8, 8, codec="ffv1")])
        assert snapshot(task) == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    marker.unlink()
    # a compress killed (journal left, lock free) does not block recording
    ep = early.begin_episode(streams=[StreamSpec("d435_depth", "depth", 8, 8, codec="ffv1")])
    ep.add_frame(images={"d435_depth": np.full((8, 8), 900, np.uint16)})
    assert ep.finish().index == 3


def _no_file_growth() -> None:  # preexec_fn: any write past byte 0 fails with EFBIG (a real OS limit)
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_a_write_failure_after_the_commit_is_one_line_saying_the_task_is_hevc(tmp_path, capsys):
    """The roll-forward cannot write (a file-size limit of 0): one line naming the task and where it stands (R39)."""
    task = _sim(tmp_path, capsys)
    originals, rgb = _originals(task), _rgb_bytes(task)
    _kill_at(task, "committed")
    done = subprocess.run([sys.executable, "-m", "egopool", "compress", str(task)], capture_output=True, text=True,
                          preexec_fn=_no_file_growth)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"egopool: error: {task}") and "cannot finish the switch to HEVC" in done.stderr
    assert "already HEVC" in done.stderr and "egopool compress TASK" in done.stderr
    _assert_all(task, "mp4")
    assert validate_task(task).ok
    report = compress_task(task)  # without the limit it finishes
    assert report.committed and not report.notes
    _assert_finished(task, originals, rgb)
