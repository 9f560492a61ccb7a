"""`egopool serve --ray ADDRESS`: each episode's previews built as one Ray task (issue 19, docs/decisions.md Q17).

A real `egopool serve` subprocess joins the real local two-node cluster of tests/conftest.py
(``ray_cluster``); a simulated rig with depth is uploaded. The build runs in a Ray worker of that
cluster (its pid is one of the cluster's processes, not the server's), its files land in the
server's previews directory and equal what the in-process build gives (frame counts, sizes,
signals.json, quality facts). A stream the worker cannot read and an episode it cannot open end
``failed`` with the error; a cluster nobody answers at fails every attempt in one line. The import
stays confirmed every time.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

import av
import httpx
import pytest
from transfer_helpers import ServerProc, cli

from egopool.read.reader import open_task

pytestmark = [pytest.mark.extra("server"), pytest.mark.extra("ray")]
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("ray")

from egopool.curation.build import PreviewJob, preview_unit  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

LOOPBACK = "127.0.0.2"  # conftest.RAY_LOOPBACK


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    from egopool.server.tokens import add_token

    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return path, {"pc": add_token(path, "pc", ["upload:*", "declare:*", "read"]),
                  "reader": add_token(path, "reader", ["read"])}


def _auth(tok: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"}


def _settled(url: str, task: str, n: int, tok: str, timeout: float = 600.0) -> dict:
    """The episode's API entry once its preview left ``pending`` (a generous bound: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while True:
        ep = httpx.get(f"{url}/api/v1/tasks/{task}/episodes/{n}", headers=_auth(tok), timeout=30).json()
        if ep["preview"]["state"] != "pending" or time.monotonic() > deadline:
            return ep
        time.sleep(0.3)


def _frames(data: bytes) -> tuple[int, int, int, str]:
    """(decoded frames, width, height, codec) of an MP4 in memory."""
    with av.open(io.BytesIO(data)) as c:
        s = c.streams.video[0]
        return sum(1 for _ in c.decode(s)), s.codec_context.width, s.codec_context.height, s.codec_context.name


def _cluster_pids() -> set[int]:
    """Every process below this test process (the ``ray_cluster`` raylets and their workers, the server)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = set(), [os.getpid()]
    while stack:
        for c in children.get(stack.pop(), []):
            out.add(c)
            stack.append(c)
    return out


def test_previews_built_on_ray_equal_the_in_process_build(ray_cluster, tmp_path: Path,
                                                          tokens: tuple[Path, dict[str, str]]) -> None:
    tok = tokens[1]
    assert cli(["simulate", "--rig", "gripper_d405", "--episodes", "1", "--seconds", "1.0", "--scale", "2",
                "--out", str(tmp_path / "pc"), "--task", "grip", "--seed", "7", "--json"]) == 0
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens[0]), "--ray", ray_cluster.address, env={"RAY_ADDRESS": ""}) as srv:
        assert upload_episodes(tmp_path / "pc" / "grip", server=srv.url, token=tok["pc"]).ok
        ep = _settled(srv.url, "grip", 1, tok["reader"])
        pv = ep["preview"]
        assert pv["state"] == "ready" and pv["error"] is None and pv["attempts"] == 1, pv
        assert str(store) not in json.dumps(ep)
        # built by a worker of the cluster: a process below the raylets this test started, not the server
        built = json.loads((store / ".egopool-server/previews/grip/episode_000001/preview.json").read_text())
        assert built["built_by"]["pid"] != srv.proc.pid and built["built_by"]["pid"] in _cluster_pids()

        # the same unit in this process, from the same files
        local = tmp_path / "local"
        local.mkdir()
        res = preview_unit(None, PreviewJob(task=str(store / "grip"), index=1, validation=ep["validation"],
                                            out=str(local)))
        assert res.files is None and res.manifest["errors"] == [] and sorted(res.manifest["files"]) == sorted(
            built["files"])
        served = open_task(store / "grip").episode(1)
        kinds = {k: served.stream_kind(k) for k in served.streams}
        assert {s["key"]: s["kind"] for s in pv["streams"]} == kinds and "depth" in kinds.values()
        mine = {s["key"]: s for s in res.manifest["streams"]}
        for s in pv["streams"]:
            got = _frames(httpx.get(srv.url + s["video"], headers=_auth(tok["reader"])).content)
            want = _frames((local / mine[s["key"]]["video"]).read_bytes())
            assert got == want and got[0] == served.length == s["frames"] == mine[s["key"]]["frames"]
            assert (s["width"], s["height"], s["fps"]) == (mine[s["key"]]["width"], mine[s["key"]]["height"],
                                                           mine[s["key"]]["fps"])
            thumb = httpx.get(srv.url + s["thumbnail"], headers=_auth(tok["reader"]))
            assert thumb.status_code == 200 and thumb.content[:2] == b"\xff\xd8"
        sig = httpx.get(srv.url + pv["signals"], headers=_auth(tok["reader"])).json()
        assert sig == json.loads((local / "signals.json").read_text()) and len(sig["rows"]) == served.length
        facts = json.loads(json.dumps(res.facts))
        assert {k: ep["quality"][k] for k in facts} == facts and facts["rows"] == served.length

        # a stream the worker cannot read: the other streams come back, the state names the broken one
        broken = sorted(k for k, v in kinds.items() if v == "rgb")[0]
        video = served.stream_path(broken)
        video.write_bytes(video.read_bytes()[:600])
        assert httpx.post(f"{srv.url}/api/v1/tasks/grip/episodes/1/preview", headers=_auth(tok["pc"])
                          ).status_code == 200
        ep = _settled(srv.url, "grip", 1, tok["reader"])
        assert ep["preview"]["state"] == "failed" and f"stream {broken!r}" in ep["preview"]["error"], ep["preview"]
        assert sorted(s["key"] for s in ep["preview"]["streams"]) == sorted(k for k in kinds if k != broken)
        assert str(store) not in json.dumps(ep)

        # an episode the worker cannot open: Ray's task fails, every attempt, and the error is the reader's
        served.files.data.write_bytes(b"truncated")
        assert httpx.post(f"{srv.url}/api/v1/tasks/grip/episodes/1/preview", headers=_auth(tok["pc"])
                          ).status_code == 200
        ep = _settled(srv.url, "grip", 1, tok["reader"])
        pv = ep["preview"]
        assert pv["state"] == "failed" and pv["attempts"] == 3, pv
        assert "episode-000.parquet" in pv["error"] and "\n" not in pv["error"] and str(store) not in pv["error"]
        # the import stands: listed, validated, uploaded by the token
        assert ep["uploaded_by"] is not None and ep["validation"]["ok"]
        listed = httpx.get(f"{srv.url}/api/v1/tasks/grip/episodes", headers=_auth(tok["reader"])).json()
        assert [e["episode_index"] for e in listed["episodes"]] == [1]


def test_an_unreachable_cluster_fails_the_preview_not_the_import(tmp_path: Path,
                                                                 tokens: tuple[Path, dict[str, str]]) -> None:
    tok = tokens[1]
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "1", "--seconds", "0.4", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "cams", "--seed", "2", "--json"]) == 0
    nobody = f"{LOOPBACK}:1"
    with ServerProc(tmp_path / "store", "--tokens", str(tokens[0]), "--ray", nobody, env={"RAY_ADDRESS": ""}) as srv:
        report = upload_episodes(tmp_path / "pc" / "cams", server=srv.url, token=tok["pc"])
        assert report.ok and [o.status for o in report.outcomes] == ["uploaded"]
        ep = _settled(srv.url, "cams", 1, tok["reader"])
        pv = ep["preview"]
        assert pv["state"] == "failed" and pv["attempts"] == 3 and pv["streams"] == [], pv
        assert pv["error"].startswith(f"cannot reach the Ray cluster at {nobody}: ") and "\n" not in pv["error"]
        assert ep["uploaded_by"] is not None and ep["validation"]["ok"]
        assert httpx.get(f"{srv.url}/api/v1/tasks/cams/episodes/1/preview/head_left_rgb.mp4",
                         headers=_auth(tok["reader"])).status_code == 404


def test_previews_through_a_ray_client_address(ray_cluster, tmp_path: Path,
                                               tokens: tuple[Path, dict[str, str]]) -> None:
    """``serve --ray ray://HEAD:PORT``: the server is a Ray Client of the cluster; the files come back over gRPC."""
    tok = tokens[1]
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "1", "--seconds", "0.4", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "cams", "--seed", "3", "--json"]) == 0
    store = tmp_path / "store"
    with ServerProc(store, "--tokens", str(tokens[0]), "--ray", ray_cluster.client_address,
                    env={"RAY_ADDRESS": ""}) as srv:
        assert upload_episodes(tmp_path / "pc" / "cams", server=srv.url, token=tok["pc"]).ok
        ep = _settled(srv.url, "cams", 1, tok["reader"])
        pv = ep["preview"]
        assert pv["state"] == "ready" and pv["attempts"] == 1, pv
        built = json.loads((store / ".egopool-server/previews/cams/episode_000001/preview.json").read_text())
        assert built["built_by"]["pid"] != srv.proc.pid and built["built_by"]["pid"] in _cluster_pids()
        served = open_task(store / "cams").episode(1)
        assert sorted(s["key"] for s in pv["streams"]) == sorted(served.streams)
        for s in pv["streams"]:
            got = _frames(httpx.get(srv.url + s["video"], headers=_auth(tok["reader"])).content)
            assert got[0] == served.length == s["frames"] and got[3] == "h264"
