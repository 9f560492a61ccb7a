"""`egopool serve --store s3://... --ray ADDRESS`: a Ray worker reads the episode from the bucket (decisions Q17).

The files (proxies of every stream, signals.json, quality facts) equal what the same build gives in
this process from the bucket, land in the server's local state, and nothing of them in the bucket.

Its own module: the ``ray_cluster`` fixture (one per module) must start after the session's
``s3_server`` set the AWS variables, so the cluster's workers reach the real SeaweedFS with their
own environment, as a lab's nodes would (O17: credentials are not shipped by the driver).
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import av
import httpx
import pytest
from transfer_helpers import ServerProc, cli

pytestmark = [pytest.mark.extra("server"), pytest.mark.extra("ray"), pytest.mark.extra("s3")]
pytest.importorskip("fastapi")
pytest.importorskip("boto3")
pytest.importorskip("ray")

from egopool.curation.build import PreviewJob, preview_unit  # noqa: E402
from egopool.read.reader import open_task  # noqa: E402
from egopool.storage.bucket import Bucket  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402


def _frames(data: bytes) -> int:
    with av.open(io.BytesIO(data)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


def _below_this_process() -> set[int]:
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


def test_previews_of_a_bucket_store_built_on_ray(s3_server: Any, ray_cluster, tmp_path: Path) -> None:
    s3_server.create_bucket("pool")
    uri = f"s3://pool/{uuid.uuid4().hex[:10]}"
    assert cli(["simulate", "--rig", "uvc3", "--episodes", "1", "--seconds", "0.4", "--scale", "8",
                "--out", str(tmp_path / "pc"), "--task", "cams", "--seed", "4", "--json"]) == 0
    state = tmp_path / "state"
    with ServerProc(state, "--state", str(state), "--ray", ray_cluster.address, store_arg=uri,
                    env={"RAY_ADDRESS": ""}) as srv:
        assert upload_episodes(tmp_path / "pc" / "cams", server=srv.url).ok
        deadline = time.monotonic() + 600
        while True:
            ep = httpx.get(f"{srv.url}/api/v1/tasks/cams/episodes/1", timeout=30).json()
            assert "preview" in ep, ep  # the episode API of a bucket store reads the task in place
            if ep["preview"]["state"] != "pending" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        pv = ep["preview"]
        assert pv["state"] == "ready" and pv["attempts"] == 1, pv
        built = json.loads((state / "previews/cams/episode_000001/preview.json").read_text())
        assert built["built_by"]["pid"] != srv.proc.pid and built["built_by"]["pid"] in _below_this_process()
        local = tmp_path / "local"
        local.mkdir()
        res = preview_unit(None, PreviewJob(task=f"{uri}/cams", index=1, validation=ep["validation"], out=str(local)))
        served = open_task(f"{uri}/cams").episode(1)
        mine = {s["key"]: s for s in res.manifest["streams"]}
        assert sorted(mine) == sorted(s["key"] for s in pv["streams"]) == sorted(served.streams)
        for s in pv["streams"]:
            got = _frames(httpx.get(srv.url + s["video"]).content)
            assert got == _frames((local / mine[s["key"]]["video"]).read_bytes()) == served.length == s["frames"]
        assert httpx.get(srv.url + pv["signals"]).json() == json.loads((local / "signals.json").read_text())
        assert {k: ep["quality"][k] for k in res.facts} == json.loads(json.dumps(res.facts))
        # the episode API and the task page of a bucket store read the task where it is
        assert ep["size_bytes"] == res.facts["size_bytes"] > 0
        assert ep["duration_s"] == pytest.approx(res.facts["duration_s"])
        page = httpx.get(f"{srv.url}/tasks/cams")
        assert page.status_code == 200 and "cams" in page.text
    keys = [o.key for o in Bucket(uri).list_objects("")]
    assert keys and not [k for k in keys if k.endswith((".jpg", "signals.json", "preview.json"))]
