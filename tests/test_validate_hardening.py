"""The validator sees what a user's reader will hit (issue 12 part E).

* every frame of every stream is decoded: a junk packet payload is named with its frame = data row,
  and the message says how many frames a reader gets before it fails (checked against the reader);
* ``timestamp`` strictly increasing in every app version, naming the first bad row;
* an unknown top-level column of the key-column form is a warning (a newer writer's key column).
"""

from __future__ import annotations

import re
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pytest
from validate_support import edit_json, rewrite_parquet, set_column

from egopool import CodecError, EgopoolError, StreamSpec, TaskWriter, open_task
from egopool.cli.app import main
from egopool.codecs.decode_scan import scan_stream
from egopool.codecs.depth_png import encode_png16
from egopool.validate import Report, validate_task

FRAMES = 30
DATA = "data/chunk-000/episode-000.parquet"


def _video_task(root: Path) -> Path:
    """One 30-row episode: an RGB stream (H.264), an FFV1 depth stream and a 12-bit HEVC depth stream."""
    tw = TaskWriter(root, "t", fps=30.0)
    ep = tw.begin_episode(streams=[StreamSpec("head_left_rgb", "rgb", 64, 48),
                                   StreamSpec("d435_depth", "depth", 64, 48, codec="ffv1"),
                                   StreamSpec("ego_depth", "depth", 64, 48)], created_at=1.79e9)
    rng = np.random.default_rng(0)
    for i in range(FRAMES):
        ep.add_frame({}, hardware_ns=1000 + i, images={
            "head_left_rgb": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
            "d435_depth": rng.integers(300, 5000, (48, 64), dtype=np.uint16),
            "ego_depth": rng.integers(300, 5000, (48, 64), dtype=np.uint16)})
    ep.finish()
    return root / "t"


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _video_task(tmp_path_factory.mktemp("videos"))


@pytest.fixture
def vtask(videos: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(videos, tmp_path / "t"))


def _junk_packet(path: Path, frame: int, start: int = 0) -> None:
    """Overwrite the payload of the packet presented as ``frame`` (its bytes from ``start`` on) with noise;
    every packet stays present and the container intact."""
    with av.open(str(path)) as c:
        packets = sorted(((p.pts, bytes(p)) for p in c.demux(c.streams.video[0]) if p.size), key=lambda t: t[0])
    data = bytearray(path.read_bytes())
    payload = packets[frame][1]
    at = bytes(data).find(payload)
    assert at > 0 and bytes(data).find(payload, at + 1) < 0
    noise = np.random.default_rng(frame).integers(0, 256, len(payload) - start, dtype=np.uint8).tobytes()
    data[at + start:at + len(payload)] = noise
    path.write_bytes(bytes(data))


def _only(report: Report, rule: str, severity: str = "error"):
    hits = [f for f in report.findings if f.rule == rule and f.severity == severity]
    assert len(hits) == 1, [f.one_line() for f in report.findings]
    return hits[0]


def _reader_frames(task: Path, key: str, depth: bool) -> tuple[int, bool]:
    """(frames the reader yields, whether it raised a CodecError)."""
    ep = open_task(task).episode(1)
    got = 0
    try:
        for _ in (ep.depth(key) if depth else ep.video(key)):
            got += 1
    except CodecError:
        return got, True
    return got, False


@pytest.mark.parametrize("key,depth", [("head_left_rgb", False), ("d435_depth", True)])
def test_a_junk_packet_payload_is_named_with_its_row(vtask: Path, key: str, depth: bool) -> None:
    path = open_task(vtask).episode(1).stream_path(key)
    _junk_packet(path, 8)
    assert validate_task(vtask, fast=True).ok  # every packet is there: counting alone sees nothing
    f = _only(validate_task(vtask), "file_format.md §8")
    assert f.path == str(path)
    m = re.search(rf"stream '{key}' frame 8 \(data row 8\) does not decode \(.+\): a reader gets (\d+) of 30 "
                  r"frames, then fails", f.message)
    assert m, f.message
    assert "Errno" not in f.message and "egopool delete TASK 1" in f.message
    got, raised = _reader_frames(vtask, key, depth)  # what the finding says is what the reader does
    assert raised and got == int(m[1])


def test_a_stream_that_silently_decodes_short_is_reported(vtask: Path) -> None:
    """Junk in a 12-bit HEVC packet: the decoder raises nothing but gives fewer frames than rows."""
    path = open_task(vtask).episode(1).stream_path("ego_depth")
    _junk_packet(path, 8, start=8)
    scan = scan_stream(path)
    assert scan.packets == FRAMES and scan.decoded < FRAMES and not scan.failed_frames
    got, raised = _reader_frames(vtask, "ego_depth", True)
    assert (got, raised) == (scan.decoded, False)
    f = _only(validate_task(vtask), "file_format.md §8")
    assert f"stream 'ego_depth' holds 30 frames but decodes to {got} without an error: a reader gets {got}" \
        in f.message


def test_a_damaged_png16_frame_is_named(tmp_path: Path) -> None:
    task = _video_task(tmp_path)
    ep = open_task(task).episode(1)
    stream = ep.stream_path("d435_depth")
    seq = stream.with_suffix("")  # legacy PNG16 layout: videos/chunk-000/d435_depth/episode-000/
    seq.mkdir()
    for i, frame in enumerate(ep.depth("d435_depth")):
        (seq / f"{i:06d}.png").write_bytes(encode_png16(frame))
    stream.unlink()
    edit_json(task / "meta/info.json", lambda d: d["video_extensions"].update(d435_depth="png"))
    (seq / "000012.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    report = validate_task(task)
    f = _only(report, "file_format.md §8")
    assert f.path == str(seq)
    assert "stream 'd435_depth' frame 12 (data row 12) does not decode" in f.message
    assert "a reader gets 12 of 30 frames, then fails" in f.message
    assert _reader_frames(task, "d435_depth", True) == (12, True)


def test_cli_fast_skips_decoding(vtask: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _junk_packet(open_task(vtask).episode(1).stream_path("head_left_rgb"), 3)
    assert main(["validate", str(vtask), "--fast"]) == 0
    capsys.readouterr()
    assert main(["validate", str(vtask)]) == 1
    assert "frame 3 (data row 3) does not decode" in capsys.readouterr().out


# -- timestamp ------------------------------------------------------------------------------------

def _rows_task(root: Path, rows: int = 100) -> Path:
    ep = TaskWriter(root, "r", fps=30.0).begin_episode(created_at=1.79e9)
    for i in range(rows):
        ep.add_frame({}, hardware_ns=1_000_000 + i * 33_333_333)
    ep.finish()
    return root / "r"


@pytest.mark.parametrize("app_version", ["0.1.0", "1.3.16", "1.2.0"])
def test_timestamp_back_to_zero_names_the_row(tmp_path: Path, app_version: str) -> None:
    """timestamp restarts at 0 at row 50 of 100: the finding names row 50, whatever the app version
    (the wall_time rule applies only from v1.3.17 and, where it does, names row 50 too)."""
    task = _rows_task(tmp_path)

    def reset(t: pa.Table) -> pa.Table:
        ts = t.column("timestamp").to_numpy().copy()
        ts[50:] -= ts[50]
        return set_column(t, "timestamp", ts)

    rewrite_parquet(task / DATA, reset)
    edit_json(task / "meta/info.json", lambda d: d.update(app_version=app_version))
    report = validate_task(task)
    f = _only(report, "file_format.md §7.1")
    assert f.path == str(task / DATA)
    assert "column 'timestamp' is not strictly increasing: row 50 (0.000000 s) <= row 49 (1.633333 s), 1 such " \
           "row(s)" in f.message
    wall = [x for x in report.findings if x.rule == "file_format.md §7.3"]
    if app_version == "0.1.0":
        assert len(wall) == 1 and "at row 50 it changes by +1.666667 s" in wall[0].message
    else:
        assert wall == []


def test_equal_timestamps_are_not_increasing(tmp_path: Path) -> None:
    """float32 that can no longer tell two rows apart stores the same timestamp twice."""
    task = _rows_task(tmp_path, rows=10)
    rewrite_parquet(task / DATA, lambda t: set_column(t, "timestamp", np.array([0, 1, 2, 3, 3, 3, 4, 5, 6, 7],
                                                                                np.float32) / 30))
    edit_json(task / "meta/info.json", lambda d: d.update(app_version="1.3.10"))
    f = _only(validate_task(task), "file_format.md §7.1")
    assert "row 4 (0.100000 s) <= row 3 (0.100000 s), 2 such row(s)" in f.message


# -- unknown top-level columns --------------------------------------------------------------------

@pytest.mark.parametrize("name,typ", [("raw_sync_ns", pa.int64()), ("robot_speed", pa.float64()),
                                      ("cam2_dup", pa.int8())])
def test_a_future_key_column_is_a_warning(tmp_path: Path, name: str, typ: pa.DataType) -> None:
    """As v1.3.11 added raw_hw_ns, a newer collector may add a key column: older egopool warns, not fails."""
    task = _rows_task(tmp_path, rows=10)
    rewrite_parquet(task / DATA, lambda t: set_column(t, name, np.zeros(10), typ))
    report = validate_task(task)
    f = _only(report, "multi_device_storage.md §2.2", "warning")
    assert report.ok and f.path == str(task / DATA)
    assert f"column {name!r} is not a frame-key column egopool knows" in f.message and "raw_hw_ns" in f.message
    assert len(report.findings) == 1


def test_validator_agrees_with_the_reader_on_randomly_damaged_streams(videos: Path, tmp_path: Path) -> None:
    """The kind, not only the example: 40 seeded damages (1-3 random spans of noise, anywhere past the
    first tenth of the file) of one of the three streams. Whenever the reader raises or yields fewer than
    30 frames, validate reports an error on that stream; whenever the reader is fine, it reports none.
    (40 damaged, the reader fails on 7: FFmpeg conceals most damage in H.264/HEVC.)"""
    import shutil

    reader_failed = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        task = Path(shutil.copytree(videos, tmp_path / str(seed)))
        key = ("head_left_rgb", "d435_depth", "ego_depth")[seed % 3]
        path = open_task(task).episode(1).stream_path(key)
        data = bytearray(path.read_bytes())
        for _ in range(int(rng.integers(1, 4))):
            at, n = int(rng.integers(len(data) // 10, len(data))), int(rng.integers(1, 200))
            data[at:at + n] = rng.integers(0, 256, len(data[at:at + n]), dtype=np.uint8).tobytes()
        path.write_bytes(bytes(data))
        got, raised = 0, False
        try:
            ep = open_task(task).episode(1)
            for _ in (ep.video(key) if key == "head_left_rgb" else ep.depth(key)):
                got += 1
        except EgopoolError:
            raised = True
        bad = raised or got != FRAMES
        reader_failed += bad
        flagged = [f for f in validate_task(task).errors if f"stream '{key}'" in f.message]
        assert bool(flagged) == bad, (seed, key, got, raised, [f.one_line() for f in flagged])
        shutil.rmtree(task)
    assert reader_failed >= 3  # the damages do reach the readers


@pytest.mark.parametrize("fps, severity", [(1e-300, "warning"), (1e23, "warning"), (-30, "error"), (0, "error")])
def test_an_implausible_fps_is_reported(tmp_path: Path, fps: float, severity: str) -> None:
    """info.json fps 1e-300 or 1e23 used to validate ok (found by qa12): float32 timestamps cannot time such rows."""
    task = _rows_task(tmp_path, rows=3)
    edit_json(task / "meta/info.json", lambda d: d.update(fps=fps))
    found = [f for f in validate_task(task).findings if "fps" in f.message and "info.json" in f.path]
    assert [f.severity for f in found] == [severity], found


META = "meta/episodes/chunk-000/episode-000.parquet"


@pytest.mark.parametrize("created_at, rule, severity, says", [
    (1e300, "file_format.md §7.3", "error", "moves in steps of 1.49e+284 s there, not finer than a row (1/30 s)"),
    (1.79e18, "file_format.md §7.3", "error", "it looks like nanoseconds since 1970 (1790000000 s): store seconds "
                                              "(divide by 1e9)"),
    (1.79e12, "file_format.md §6.2", "warning", "it looks like milliseconds since 1970 (1790000000 s): store "
                                                "seconds (divide by 1000)"),
    (-5.0, "file_format.md §6.2", "warning", "is not a Unix time in seconds between 2000-01-01 and 2100-01-01"),
    (5e9, "file_format.md §6.2", "warning", "is not a Unix time in seconds between 2000-01-01 and 2100-01-01"),
])
def test_an_implausible_episode_created_at_is_reported(tmp_path: Path, created_at: float, rule: str,
                                                       severity: str, says: str) -> None:
    """An episode row's created_at of 1e300 (or ms, ns, negative) used to validate ok (found by QA): it is
    Unix seconds (§6.2) and wall_time = created_at + timestamp (§7.3) must still tell rows apart."""
    task = _rows_task(tmp_path, rows=3)
    assert validate_task(task).findings == []
    rewrite_parquet(task / META, lambda t: set_column(t, "created_at", [created_at]))
    report = validate_task(task)
    assert [(f.rule, f.severity, f.path) for f in report.findings] == [(rule, severity, str(task / META))], \
        [f.one_line() for f in report.findings]
    message = report.findings[0].message
    assert message.startswith(f"meta column created_at = {created_at:g}") and says in message, message


def test_created_at_before_v1_3_17_is_judged_by_its_range_only(tmp_path: Path) -> None:
    """Before collector v1.3.17 wall_time was not built on created_at (decision 10): 1e300 is a warning."""
    task = _rows_task(tmp_path, rows=3)
    edit_json(task / "meta/info.json", lambda d: d.update(app_version="1.3.16"))
    rewrite_parquet(task / META, lambda t: set_column(t, "created_at", [1e300]))
    f = _only(validate_task(task), "file_format.md §6.2", "warning")
    assert f.message.startswith("meta column created_at = 1e+300 is not a Unix time in seconds")


@pytest.mark.parametrize("created_at, says", [(1.79e12, "milliseconds"), (-1.0, None)])
def test_an_implausible_task_created_at_is_a_warning(tmp_path: Path, created_at: float, says: str | None) -> None:
    task = _rows_task(tmp_path, rows=3)
    edit_json(task / "meta/info.json", lambda d: d.update(created_at=created_at))
    f = _only(validate_task(task), "file_format.md §3", "warning")
    assert f.path.endswith("info.json") and f.message.startswith(f"created_at = {created_at:g} is not a Unix time")
    assert (f"it looks like {says}" in f.message) if says else ("looks like" not in f.message)
