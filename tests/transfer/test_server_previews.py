"""Previews and quality facts of pooled episodes (issue 19), on a real `egopool serve` over loopback.

A simulated rig with depth and a gripper is uploaded: every stream gets an H.264 proxy with the
stream's frame count, at most 480 px wide, and a JPEG thumbnail of its aspect; signals.json holds
the episode's own column values; quality facts equal what is computed here from the files. A
written episode with an idle stretch and a blurred and a black range has exactly those flagged.
A preview that cannot be built leaves the import confirmed and says why; a rebuild on demand works.
`export lerobot --episodes-from` exports exactly the selected episodes.
"""

from __future__ import annotations

import http.server
import io
import json
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path

import av
import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from transfer_helpers import ServerProc, cli

from egopool.codecs.video import count_video_frames, video_info
from egopool.curation.selection import read_selection
from egopool.dataset import PooledDataset
from egopool.errors import EgopoolError
from egopool.read.reader import open_task
from egopool.schema import slam_trajectory_columns, vector_column
from egopool.write.episode_writer import StreamSpec
from egopool.write.task_writer import TaskWriter

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.server.db import _SCHEMA_VERSION, ServerDB  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    from egopool.server.tokens import add_token

    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return path, {"pc": add_token(path, "pc", ["upload:*", "declare:*", "read"]), "reader": add_token(path, "reader", ["read"])}


def _auth(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"} if tok else {}


def _settled(url: str, task: str, n: int, tok: str, timeout: float = 600.0) -> dict:
    """The episode's API entry once its preview left ``pending`` (a generous bound: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        ep = httpx.get(f"{url}/api/v1/tasks/{task}/episodes/{n}", headers=_auth(tok), timeout=30).json()
        if ep["preview"]["state"] != "pending" or time.monotonic() > deadline:
            return ep
        time.sleep(0.3)


def _decode(data: bytes) -> tuple[int, int, int, str, str]:
    """(frames, width, height, codec, pix_fmt) of an MP4 in memory, by decoding every frame."""
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        n = sum(1 for _ in c.decode(s))
        return n, s.codec_context.width, s.codec_context.height, s.codec_context.name, s.codec_context.pix_fmt


def test_previews_of_a_rig_with_depth(tmp_path: Path, tokens: tuple[Path, dict[str, str]]) -> None:
    tok = tokens[1]
    assert cli(["simulate", "--rig", "gripper_d405", "--episodes", "1", "--seconds", "1.0", "--scale", "2",
                "--out", str(tmp_path / "pc"), "--task", "grip", "--seed", "7", "--json"]) == 0
    local = open_task(tmp_path / "pc" / "grip").episode(1)
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens[0])) as srv:
        assert upload_episodes(tmp_path / "pc" / "grip", server=srv.url, token=tok["pc"]).ok
        ep = _settled(srv.url, "grip", 1, tok["reader"])
        text = json.dumps(ep)
        assert str(store) not in text and str(store.resolve()) not in text  # never a server path
        pv = ep["preview"]
        assert pv["state"] == "ready" and pv["error"] is None, pv
        served = open_task(store / "grip").episode(1)
        rows = served.length
        kinds = {k: served.stream_kind(k) for k in served.streams}
        assert {s["key"]: s["kind"] for s in pv["streams"]} == kinds and "depth" in kinds.values()
        for s in pv["streams"]:
            src = served.stream_path(s["key"])
            info = video_info(src)
            frames, w, h, codec, pix = _decode(httpx.get(srv.url + s["video"], headers=_auth(tok["reader"])).content)
            assert frames == count_video_frames(src) == rows == s["frames"]
            assert (w, h) == (s["width"], s["height"]) and w <= 480 and w % 2 == 0 and h % 2 == 0
            assert (codec, pix) == ("h264", "yuv420p")
            assert abs(w / h - info["width"] / info["height"]) < 0.03
            if info["width"] > 480:
                assert w == 480
            img = Image.open(io.BytesIO(httpx.get(srv.url + s["thumbnail"], headers=_auth(tok["reader"])).content))
            assert img.format == "JPEG" and abs(img.width / img.height - info["width"] / info["height"]) < 0.03
        assert any(json.loads(json.dumps(video_info(served.stream_path(k))))["width"] > 480 for k in kinds)
        # a browser seeks: Range answers 206 with the asked bytes
        r = httpx.get(srv.url + pv["streams"][0]["video"], headers={**_auth(tok["reader"]), "Range": "bytes=8-99"})
        assert r.status_code == 206 and len(r.content) == 92 and r.headers["content-type"] == "video/mp4"
        # signals.json: the episode's own values at the listed rows
        sig = httpx.get(srv.url + pv["signals"], headers=_auth(tok["reader"])).json()
        table = pq.read_table(served.files.data)
        idx = np.asarray(sig["rows"])
        assert idx.tolist() == list(range(rows)) and len(sig["t"]) == rows
        np.testing.assert_allclose(sig["t"], table.column("timestamp").to_numpy()[idx], atol=1e-6)
        series = {s["name"]: s for s in sig["series"]}
        grip = np.stack(table.column("observation.gripper_state").to_numpy(zero_copy_only=False))
        np.testing.assert_allclose(series["observation.gripper_state.open_pct"]["values"], grip[idx, 0], rtol=1e-6)
        glove = np.stack(table.column("observation.left_glove").to_numpy(zero_copy_only=False)).astype(np.float64)
        np.testing.assert_allclose(series["observation.left_glove.max"]["values"], glove[idx].max(axis=1), rtol=1e-6)
        sampled = served.force_matrix_sampled("observation.gripper_left_force_matrix")
        fz = served.force_matrices("observation.gripper_left_force_matrix")[..., 2].sum(axis=(1, 2), dtype=np.float64)
        got = series["observation.gripper_left_force_matrix.sum_fz"]["values"]
        assert [v is None for v in got] == [not s for s in sampled[idx]]
        np.testing.assert_allclose([v for v in got if v is not None], fz[sampled], rtol=1e-5)
        assert {t["column"] for t in sig["trajectories"]} == set(served.trajectories())
        # quality facts: what is computed here from the files
        q = ep["quality"]
        fps = float(served.task.info["fps"])
        assert q["rows"] == rows and q["duration_s"] == pytest.approx(rows / fps) == ep["duration_s"]
        assert q["frames"] == {k: count_video_frames(p) for k, p in served.streams.items()}
        assert q["frames_mismatch"] == [] and q["validation_errors"] == 0 and q["validation_ok"] is True
        assert q["size_bytes"] == ep["size_bytes"] == sum(p.stat().st_size for p in served.files.paths())
        assert q["drop_total"] == served.frame_drops() == local.frame_drops()
        assert q["ego_stream"] == "D405_head_rgb"
        # a read-only token sees everything and cannot rebuild
        assert httpx.post(f"{srv.url}/api/v1/tasks/grip/episodes/1/preview", headers=_auth(tok["reader"])
                          ).status_code == 403
        assert httpx.get(f"{srv.url}/api/v1/tasks/grip/episodes/1/preview/preview.json",
                         headers=_auth(tok["reader"])).status_code == 404
        assert httpx.get(f"{srv.url}/api/v1/tasks/grip/episodes/1/preview/signals.json").status_code == 401
    assert not list((store / "grip").rglob("*.jpg")) and not list((store / "grip").rglob("signals.json"))


_W, _H, _ROWS = 160, 120, 90
_IDLE = (20, 60)     # gripper and trajectory hold still: rows 21..59 do not move (row 20 moved from row 19)
_BLUR = (40, 60)     # frames flattened to a smooth gradient
_BLACK = (70, 75)    # frames all black (badly exposed; not also counted blurred, decisions P7)


def _frame(i: int, rng: np.random.Generator) -> np.ndarray:
    if _BLACK[0] <= i < _BLACK[1]:
        return np.zeros((_H, _W, 3), np.uint8)
    if _BLUR[0] <= i < _BLUR[1]:
        ramp = np.linspace(60, 180, _W, dtype=np.float32)[None, :, None] + np.zeros((_H, 1, 3), np.float32)
        return ramp.astype(np.uint8)
    blocks = rng.integers(0, 256, (_H // 8, _W // 8, 1), dtype=np.uint8)
    return np.repeat(np.repeat(np.repeat(blocks, 8, 0), 8, 1), 3, 2)


def _write_idle_task(root: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """One episode: head_rgb (sharp blocks, blurred and black ranges), head_depth, a gripper and a trajectory."""
    tw = TaskWriter(root, "idle", fps=30.0)
    traj, traj_ns = slam_trajectory_columns()
    ep = tw.begin_episode(columns=[vector_column("observation.gripper_state", [3]), traj, traj_ns],
                          streams=[StreamSpec("head_rgb", "rgb", _W, _H), StreamSpec("head_depth", "depth", 80, 60)])
    rng = np.random.default_rng(5)
    opening = np.where(np.arange(_ROWS) < _IDLE[0], np.arange(_ROWS) * 1.0, _IDLE[0] * 1.0)
    opening[_IDLE[1]:] = _IDLE[0] + (np.arange(_ROWS - _IDLE[1]) + 1) * 1.0
    steps = np.minimum(np.arange(_ROWS), _IDLE[0]) + np.maximum(np.arange(_ROWS) - _IDLE[1] + 1, 0)
    pos = np.stack([steps * 0.01, steps * 0.005, np.zeros(_ROWS)], axis=1)
    depth = (np.arange(80, dtype=np.uint16)[None, :] * 40 + 500).repeat(60, 0)
    for i in range(_ROWS):
        point = np.array([[i / 30.0, *pos[i], 0.0, 0.0, 0.0, 1.0]])
        ep.add_frame({"observation.gripper_state": np.array([opening[i], 0.0, 100.0], np.float32),
                      traj.name: point, traj_ns.name: [1_000_000_000 + i * 33_333_333]},
                     images={"head_rgb": _frame(i, rng), "head_depth": depth})
    ep.finish()
    return root / "idle", opening, pos


def _runs(mask: np.ndarray, min_len: int) -> list[list[int]]:
    out, start = [], None
    for i, v in enumerate([*mask.tolist(), False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            if i - start >= min_len:
                out.append([start, i])
            start = None
    return out


def test_quality_facts_find_idle_blur_and_exposure(tmp_path: Path, tokens: tuple[Path, dict[str, str]]) -> None:
    tok = tokens[1]
    task, opening, pos = _write_idle_task(tmp_path / "pc")
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens[0]), "--idle-frames", "30") as srv:
        assert upload_episodes(task, server=srv.url, token=tok["pc"]).ok
        ep = _settled(srv.url, "idle", 1, tok["reader"])
        assert ep["preview"]["state"] == "ready", ep["preview"]
        q = ep["quality"]
        # independently: a row moved when its opening or position differs from the previous row's
        moved = np.concatenate([[False], (np.diff(opening) != 0) | np.any(np.diff(pos, axis=0) != 0, axis=1)])
        still = ~moved
        still[0] = still[1]
        assert q["idle_ranges"] == _runs(still, 30) == [[_IDLE[0] + 1, _IDLE[1]]]
        assert q["idle_frames"] == _IDLE[1] - _IDLE[0] - 1
        assert q["idle_fraction"] == pytest.approx((_IDLE[1] - _IDLE[0] - 1) / _ROWS)
        assert q["ego_stream"] == "head_rgb" and q["frames_sampled"] == _ROWS
        # a black frame is one exposure outlier, not also a blurred one (docs/decisions.md P7)
        assert q["blur_rows"] == list(range(*_BLUR))
        # held frames: the same depth picture on every row, the same gradient on the 20 "blurred" rows
        assert q["frozen_ranges"] == {"head_depth": [[1, _ROWS]], "head_rgb": [[_BLUR[0] + 1, _BLUR[1]]]}
        assert q["exposure_rows"] == list(range(*_BLACK)) and q["exposure_outliers"] == _BLACK[1] - _BLACK[0]
        assert q["duration_s"] == pytest.approx(_ROWS / 30.0) and q["frames"] == {"head_depth": _ROWS,
                                                                                 "head_rgb": _ROWS}
        # the trajectory's top view: down_left_forward re-expressed as right_forward_up (right = -left, forward)
        sig = httpx.get(srv.url + ep["preview"]["signals"], headers=_auth(tok["reader"])).json()
        (top,) = sig["trajectories"]
        assert top["column"] == "observation.slam_trajectory" and top["frame"] == "right_forward_up"
        np.testing.assert_allclose(top["x"], -pos[:, 1], atol=1e-9)
        np.testing.assert_allclose(top["y"], pos[:, 2], atol=1e-9)
        # the catalog query curui filters with
        db = ServerDB(store / ".egopool-server" / "server.db")
        assert [(t, n) for t, n, _ in db.quality_facts("idle", {"blur_outliers": (">", 0)})] == [("idle", 1)]
        assert db.quality_facts("idle", {"idle_fraction": ("<", 0.1)}) == []
        assert [n for _, n, _ in db.quality_facts(None, {"duration_s": (">=", 2.9), "validation_errors": ("=", 0)})
                ] == [1]
        with pytest.raises(ValueError, match="cannot filter"):
            db.quality_facts("idle", {"facts; DROP TABLE quality": ("=", 1)})


def test_a_failed_preview_never_fails_an_import(tmp_path: Path, tokens: tuple[Path, dict[str, str]]) -> None:
    tok = tokens[1]
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "1", "--seconds", "0.4", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "cams", "--seed", "2", "--json"]) == 0
    previews = tmp_path / "previews"
    previews.mkdir()
    (previews / "cams").write_text("not a directory")  # where this task's previews would go
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens[0]), "--previews-dir", str(previews)) as srv:
        report = upload_episodes(tmp_path / "pc" / "cams", server=srv.url, token=tok["pc"])
        assert report.ok
        ep = _settled(srv.url, "cams", 1, tok["reader"])
        assert ep["preview"]["state"] == "failed" and ep["preview"]["attempts"] == 3
        assert "File exists" in ep["preview"]["error"] and str(previews) not in ep["preview"]["error"]
        assert ep["uploaded_by"] is not None and ep["validation"]["ok"]  # the import stands
        assert httpx.get(f"{srv.url}/api/v1/tasks/cams/episodes/1/preview/head_left_rgb.mp4",
                         headers=_auth(tok["reader"])).status_code == 404
        # fixed: a rebuild on demand succeeds
        (previews / "cams").unlink()
        r = httpx.post(f"{srv.url}/api/v1/tasks/cams/episodes/1/preview", headers=_auth(tok["pc"]))
        assert r.status_code == 200 and r.json()["queued"]
        ep = _settled(srv.url, "cams", 1, tok["reader"])
        assert ep["preview"]["state"] == "ready" and len(ep["preview"]["streams"]) == 3
        # a stream the proxy encoder cannot read: the other streams stay, the state says which one failed
        video = open_task(store / "cams").episode(1).stream_path("head_right_rgb")
        video.write_bytes(video.read_bytes()[:600])
        assert httpx.post(f"{srv.url}/api/v1/tasks/cams/episodes/1/preview", headers=_auth(tok["pc"])
                          ).status_code == 200
        time.sleep(0.5)
        ep = _settled(srv.url, "cams", 1, tok["reader"])
        assert ep["preview"]["state"] == "failed" and "'head_right_rgb'" in ep["preview"]["error"]
        assert str(store) not in json.dumps(ep)
        assert sorted(s["key"] for s in ep["preview"]["streams"]) == ["head_left_rgb", "head_right_rgb_2"]
        assert "head_right_rgb" in ep["quality"]["frames_mismatch"]
        listed = httpx.get(f"{srv.url}/api/v1/tasks/cams/episodes", headers=_auth(tok["reader"])).json()
        assert [e["episode_index"] for e in listed["episodes"]] == [1]


def test_schema_2_catalog_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "server.db"
    ServerDB(db).set_quality("t", 1, {"duration_s": 1.0})
    con = sqlite3.connect(db)
    with con:
        con.execute("INSERT INTO uploads (received_at, outcome) VALUES (1.0, 'imported')")
        con.execute("DROP TABLE previews")
        con.execute("DROP TABLE quality")
        con.execute("PRAGMA user_version = 2")
    con.close()
    again = ServerDB(db)
    assert again.quality("t", 1) is None and again.previews() == [] and len(again.uploads()) == 1
    again.set_preview("t", 1, "ready", manifest={"streams": []})
    assert again.preview("t", 1).state == "ready"
    assert sqlite3.connect(db).execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION >= 3


def test_export_only_the_selected_episodes(tmp_path: Path) -> None:
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "4", "--seconds", "0.2", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "sel", "--seed", "1", "--json"]) == 0
    task = tmp_path / "pc" / "sel"
    lines = tmp_path / "keep.txt"
    lines.write_text("# accepted\n3\n1\n\n3\n")
    assert cli(["export", "lerobot", str(task), str(tmp_path / "a"), "--episodes-from", str(lines), "--json"]) == 0
    mapping = json.loads((tmp_path / "a" / "egopool_mapping.json").read_text())
    assert [e["pooled_episode_index"] for e in mapping["episodes"]] == [1, 3]
    answer = tmp_path / "answer.json"
    answer.write_text(json.dumps({"episodes": [{"task": "sel", "index": 4}, {"task": "other", "index": 2}],
                                  "next_cursor": None}))
    assert cli(["export", "lerobot", str(task), str(tmp_path / "b"), "--episodes-from", str(answer), "--json"]) == 0
    mapping = json.loads((tmp_path / "b" / "egopool_mapping.json").read_text())
    assert [e["pooled_episode_index"] for e in mapping["episodes"]] == [4]
    answer.write_text(json.dumps({"episodes": [{"task": "other", "index": 2}]}))
    assert cli(["export", "lerobot", str(task), str(tmp_path / "c"), "--episodes-from", str(answer)]) == 1
    assert not (tmp_path / "c").exists()


class _Pages(http.server.BaseHTTPRequestHandler):
    """Two pages of a search answer in the shape the server's ``/api/v1/episodes`` gives, behind a token."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if self.headers.get("Authorization") != "Bearer sesame":
            body, status = {"error": "unauthorized"}, 401
        elif q.get("review") != ["accepted"]:
            body, status = {"error": "bad_request"}, 400
        elif "cursor" not in q:
            body, status = {"episodes": [{"task": "sel", "index": 2}], "next_cursor": "p2"}, 200
        else:
            body = {"episodes": [{"task": "sel", "index": 4}, {"task": "x", "index": 1}], "next_cursor": None}
            status = 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_selection_url_pages_and_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "4", "--seconds", "0.2", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "sel", "--seed", "3", "--json"]) == 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/api/v1/episodes?task=sel&review=accepted"
    try:
        monkeypatch.delenv("EGOPOOL_TOKEN", raising=False)
        with pytest.raises(EgopoolError, match="refused the selection"):
            read_selection(url)
        monkeypatch.setenv("EGOPOOL_TOKEN", "sesame")
        sel = read_selection(url)
        assert sel.for_task("sel") == [2, 4] and sel.by_task() == {"sel": [2, 4], "x": [1]}
        ds = PooledDataset(tmp_path / "pc" / "sel", ["timestamp"],
                           episodes=sel.by_task(only=["sel"]))
        assert sorted({int(ds[i]["episode_index"]) for i in range(len(ds))}) == [2, 4]
        assert cli(["export", "lerobot", str(tmp_path / "pc" / "sel"), str(tmp_path / "out"), "--episodes-from", url,
                    "--json"]) == 0
        mapping = json.loads((tmp_path / "out" / "egopool_mapping.json").read_text())
        assert [e["pooled_episode_index"] for e in mapping["episodes"]] == [2, 4]
    finally:
        srv.shutdown()
        srv.server_close()


def test_episodes_without_previews_are_built_at_start(tmp_path: Path) -> None:
    """A store pooled with --no-previews (or before schema 3): the next server with previews builds them."""
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "2", "--seconds", "0.2", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "late", "--seed", "4", "--json"]) == 0
    store = tmp_path / "store"
    with ServerProc(store, "--no-previews") as srv:
        assert upload_episodes(tmp_path / "pc" / "late", server=srv.url).ok
        ep = httpx.get(f"{srv.url}/api/v1/tasks/late/episodes/2").json()
        assert ep["preview"] == {"state": "pending", "error": None, "streams": [], "signals": None, "enabled": False}
        assert ep["quality"] is None and ep["duration_s"] == pytest.approx(ep["length"] / 30.0)
        assert httpx.post(f"{srv.url}/api/v1/tasks/late/episodes/2/preview").status_code == 409
        # a server without tokens answers its own page and egopool's clients, not another site's page (U24)
        uploads = len(httpx.get(f"{srv.url}/api/v1/uploads").json()["uploads"])
        for hdr in ({"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"}):
            r = httpx.post(f"{srv.url}/api/v1/tasks/late/episodes/2/preview", headers=hdr)
            assert r.status_code == 403 and "another site" in r.json()["message"]
            r = httpx.post(f"{srv.url}/api/v1/session/upload", headers=hdr,
                           files={"name": (None, "late"), "file": ("e.zip", b"PK\x05\x06" + bytes(18))})
            assert r.status_code == 403 and "another site" in r.json()["message"]
        assert len(httpx.get(f"{srv.url}/api/v1/uploads").json()["uploads"]) == uploads  # no log row, no spool
        same = {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}
        assert httpx.post(f"{srv.url}/api/v1/tasks/late/episodes/2/preview", headers=same).status_code == 409
    assert not (store / ".egopool-server" / "previews").exists()
    with ServerProc(store) as srv:
        for n in (1, 2):
            ep = _settled(srv.url, "late", n, "")
            assert ep["preview"]["state"] == "ready" and len(ep["preview"]["streams"]) == 3
            assert ep["quality"]["frames"] == {k: ep["length"] for k in ep["streams"]}
