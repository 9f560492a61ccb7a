"""``egopool pack``: the §9 single-episode slice, its manifest, legacy shards, chunk roll-over, HEVC re-encoding."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import av
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transfer_helpers import cli, clone_episode, simulate, write_task

from egopool import EpisodeNotFoundError, LayoutError
from egopool.codecs.video import count_video_frames
from egopool.errors import FormatError
from egopool.layout import list_task_episodes
from egopool.meta.episodes import read_episode_row
from egopool.registry import Registry, sha256_file
from egopool.transfer import MANIFEST_NAME, Manifest, pack_episode, pack_episodes, parse_arcname


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@pytest.fixture(scope="module")
def full_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Appendix B rig: ego S80C (stereo RGB + 12-bit HEVC depth), two grippers, two gloves; 3 episodes."""
    return simulate(tmp_path_factory.mktemp("pc"), "rig", 3, rig="full", seconds=0.4)


@pytest.mark.parametrize("name,kind", [
    ("meta/info.json", "info"), ("meta/stats.json", "stats"), ("meta/tasks.jsonl", "tasks"),
    (MANIFEST_NAME, "manifest"), ("data/chunk-000/episode-004.parquet", "data"),
    ("meta/episodes/chunk-001/episode-999.parquet", "row"), ("videos/chunk-000/stereo_left/episode-000.mp4", "video"),
    ("videos/chunk-000/D435_depth/episode-000.mkv", "video"), ("videos/chunk-000/头部_rgb/episode-000.mp4", "video"),
    ("videos/chunk-1000/cam/episode-000.mp4", "video"),
])
def test_arcname_grammar_accepts_the_pooled_paths(name: str, kind: str) -> None:
    arc = parse_arcname(name)
    assert arc is not None and arc.kind == kind


@pytest.mark.parametrize("name", [
    "data/chunk-0000/episode-000.parquet",        # not how {c:03d} writes 0
    "data/chunk-000/file-000.parquet",            # legacy prefix: uploads use episode- names
    "data/chunk-000/episode-000.parquet/x",
    "videos/chunk-000/.hidden/episode-000.mp4",
    "videos/chunk-000/_aux/episode-000.mp4",
    "videos/chunk-000/../episode-000.mp4",
    "videos/chunk-000/cam/episode-000.png",
    "videos/chunk-000/cam/episode-000.mp4.tmp",
    "meta/recycled_episode.json", "meta/episodes/.lock", "meta/.stats_state.json", "meta/info.json/",
    "/meta/info.json", "META/info.json", "info.json", "",
])
def test_arcname_grammar_refuses_everything_else(name: str) -> None:
    assert parse_arcname(name) is None


def test_slice_holds_exactly_the_episode_and_task_files(full_task: Path, tmp_path: Path) -> None:
    packed = pack_episode(full_task, 2, tmp_path)
    g = {e.index: e for e in list_task_episodes(full_task)}[2]
    expected = {f"videos/chunk-000/{k}/episode-001.mp4": p for k, p in g.videos.items()}
    expected.update({"data/chunk-000/episode-001.parquet": g.data, "meta/episodes/chunk-000/episode-001.parquet": g.meta,
                     "meta/info.json": full_task / "meta/info.json", "meta/stats.json": full_task / "meta/stats.json",
                     "meta/tasks.jsonl": full_task / "meta/tasks.jsonl"})
    assert len(g.videos) == 5  # stereo_left/right, stereo_depth, gripper_rgb, gripper_2_rgb
    with zipfile.ZipFile(packed.path) as z:
        names = z.namelist()
        assert set(names) == set(expected) | {MANIFEST_NAME}
        assert names[-1] == MANIFEST_NAME
        for name, src in expected.items():
            assert _sha(z.read(name)) == sha256_file(src), name
        manifest = Manifest.from_bytes(z.read(MANIFEST_NAME))
    assert (manifest.task, manifest.episode_index, manifest.chunk, manifest.file) == ("rig", 2, 0, 1)
    assert {m.name: (m.size, m.sha256) for m in manifest.members} == {
        n: (p.stat().st_size, sha256_file(p)) for n, p in expected.items()}
    assert manifest.source_host_id == Registry.for_task(full_task).host_id()
    assert packed.path.name == "rig_chunk-000_ep000001.zip"
    assert packed.sha256 == sha256_file(packed.path) and packed.size == packed.path.stat().st_size
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp left


def test_episode_digest_is_the_recorded_content_only(full_task: Path, tmp_path: Path) -> None:
    a = pack_episode(full_task, 1, tmp_path / "a")
    info = json.loads((full_task / "meta/info.json").read_text())
    (full_task / "meta/info.json").write_text(json.dumps({**info, "app_version": "9.9.9"}, indent=2))
    try:
        b = pack_episode(full_task, 1, tmp_path / "b")
    finally:
        (full_task / "meta/info.json").write_text(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    assert a.sha256 != b.sha256  # the task snapshot changed ...
    assert a.episode_digest == b.episode_digest  # ... the episode did not
    assert a.episode_digest != pack_episode(full_task, 2, tmp_path / "c").episode_digest


def test_legacy_shard_is_sliced_to_the_episode_row_under_the_new_name(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=3, video=False)
    ep_dir = task / "meta/episodes/chunk-000"
    rows = [pq.read_table(ep_dir / f"episode-{f:03d}.parquet") for f in range(3)]
    for f in range(3):
        (ep_dir / f"episode-{f:03d}.parquet").unlink()
    buf = io.BytesIO()
    pq.write_table(pa.concat_tables(rows), buf)
    (ep_dir / "file-000.parquet").write_bytes(buf.getvalue())

    packed = pack_episode(task, 2, tmp_path / "out")

    with zipfile.ZipFile(packed.path) as z:
        assert "meta/episodes/chunk-000/episode-001.parquet" in z.namelist()
        assert not [n for n in z.namelist() if "file-" in n]
        row = pq.read_table(io.BytesIO(z.read("meta/episodes/chunk-000/episode-001.parquet")))
    assert row.num_rows == 1 and row.column_names == rows[1].column_names
    assert row.to_pylist() == rows[1].to_pylist()
    assert read_episode_row(ep_dir / "file-000.parquet", 2)["length"] == 3


def test_after_chunk_roll_over_the_file_number_is_not_n_minus_one(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=1)
    clone_episode(task, 1, 1001)
    packed = pack_episode(task, 1001, tmp_path / "out")
    assert (packed.index, packed.chunk, packed.file) == (1001, 1, 0)
    with zipfile.ZipFile(packed.path) as z:
        names = set(z.namelist())
        assert {"data/chunk-001/episode-000.parquet", "meta/episodes/chunk-001/episode-000.parquet",
                "videos/chunk-001/cam/episode-000.mp4"} <= names
        data = pq.read_table(io.BytesIO(z.read("data/chunk-001/episode-000.parquet")))
    assert set(data.column("episode_index").to_pylist()) == {1001}


def test_reencode_hevc_touches_rgb_only_and_keeps_the_row(full_task: Path, tmp_path: Path) -> None:
    packed = pack_episode(full_task, 1, tmp_path, reencode_hevc=True)
    g = {e.index: e for e in list_task_episodes(full_task)}[1]
    rgb = {"stereo_left", "stereo_right", "gripper_rgb", "gripper_2_rgb"}
    assert sorted(packed.reencoded) == sorted(f"videos/chunk-000/{k}/episode-000.mp4" for k in rgb)
    by_name = packed.manifest.by_name()
    out = tmp_path / "x"
    with zipfile.ZipFile(packed.path) as z:
        for key, src in g.videos.items():
            name = f"videos/chunk-000/{key}/episode-000.mp4"
            (out / key).mkdir(parents=True)
            (out / key / "v.mp4").write_bytes(z.read(name))
            with av.open(str(out / key / "v.mp4")) as c:
                s = c.streams.video[0]
                codec, tag = s.codec_context.name, s.codec_tag
            assert count_video_frames(out / key / "v.mp4") == count_video_frames(src)
            if key in rgb:
                assert (codec, tag) == ("hevc", "hvc1")
                assert by_name[name].source_sha256 == sha256_file(src) and by_name[name].reencoded == "hevc"
            else:  # depth is never re-encoded
                assert _sha(z.read(name)) == sha256_file(src) and by_name[name].source_sha256 is None
        assert _sha(z.read("meta/episodes/chunk-000/episode-000.parquet")) == sha256_file(g.meta)
    assert packed.episode_digest == pack_episode(full_task, 1, tmp_path / "plain").episode_digest


def test_refusals_name_the_episode(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=2)
    with pytest.raises(LayoutError, match="1-based"):
        pack_episodes(task, [0], tmp_path / "o")
    with pytest.raises(EpisodeNotFoundError, match="no episode 7"):
        pack_episodes(task, [1, 7], tmp_path / "o")
    assert not (tmp_path / "o").exists()  # every N is checked before anything is packed
    (task / "meta/episodes/chunk-000/episode-001.parquet").unlink()
    with pytest.raises(FormatError, match="episode 2 is not complete"):
        pack_episodes(task, [2], tmp_path / "o")


def test_an_episode_whose_video_is_missing_is_not_packed(tmp_path: Path) -> None:
    """Found by qa12: a missing (or directory) video gave a zip without the stream and exit 0."""
    task = write_task(tmp_path, episodes=2)
    (video,) = list_task_episodes(task)[0].videos.values()
    video.unlink()
    video.mkdir()  # a directory in place of the file is missing too
    with pytest.raises(FormatError) as err:
        pack_episodes(task, [2, 1], tmp_path / "o")
    assert err.value.message == "episode 1: video_codec lists stream(s) ['cam'] but their video file is missing"
    assert not (tmp_path / "o").exists()


def test_cli_pack_json_and_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = write_task(tmp_path, episodes=2)
    assert cli(["pack", str(task), "1", "2", "-o", str(tmp_path / "z"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [z["episode_index"] for z in doc["zips"]] == [1, 2]
    assert [Path(z["zip"]).name for z in doc["zips"]] == ["pick_chunk-000_ep000000.zip", "pick_chunk-000_ep000001.zip"]
    assert cli(["pack", str(task), "0", "-o", str(tmp_path / "z")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1-based" in err


def test_per_n_commands_do_not_scan_the_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by qa12 (issue 12 F): pack / upload / keypoints with N enumerated the whole task first
    (pack N on 3,000 episodes: +215 ms of scan; now 16 ms, the same as on a 1-episode task)."""
    import egopool.keypoints.extract as kx
    import egopool.transfer.client as tc
    import egopool.transfer.pack as tp
    from egopool.meta.info import read_info
    from egopool.transfer import upload_episodes

    task = write_task(tmp_path, episodes=3)

    def scan(*a: object, **k: object) -> None:
        raise AssertionError("a per-N command enumerated the task")

    monkeypatch.setattr(kx, "list_task_episodes", scan)
    monkeypatch.setattr(tc, "list_task_episodes", scan)
    assert not hasattr(tp, "list_task_episodes")
    assert [g.index for g in kx.select_episodes(task, read_info(task), [3, 2])] == [2, 3]
    assert pack_episodes(task, [2], tmp_path / "o", registry=False)[0].path.name == "pick_chunk-000_ep000001.zip"
    report = upload_episodes(task, [3], server="http://127.0.0.1:9", registry=False, retries=0, timeout=1)
    assert [(o.index, o.status) for o in report.outcomes] == [(3, "failed")]  # packed, then nothing listens
    with pytest.raises(EpisodeNotFoundError):
        kx.select_episodes(task, read_info(task), [4])


@pytest.mark.parametrize("name", ["data/chunk-000/episode-000.parquet\n", "meta/episodes/chunk-000/episode-000.parquet\n",
                                  "videos/chunk-000/cam/episode-000.mp4\n"])
def test_an_arcname_or_digest_ending_in_a_line_break_is_not_the_file(tmp_path: Path, name: str) -> None:
    """``$`` of a regex also matches before a final newline: ``episode-000.parquet\\n`` is another file."""
    assert parse_arcname(name.rstrip("\n")) is not None
    assert parse_arcname(name) is None
    packed = pack_episode(write_task(tmp_path / "pc", episodes=1), 1, tmp_path / "zips")
    with zipfile.ZipFile(packed.path) as z:
        doc = json.loads(z.read(MANIFEST_NAME))
    doc["members"][0]["sha256"] += "\n"
    with pytest.raises(FormatError, match="sha256"):
        Manifest.from_bytes(json.dumps(doc).encode())
