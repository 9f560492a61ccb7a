"""Collection-wide `--ray` jobs over an `s3://` task (docs/scale.md, decisions O17): every worker of a real local
two-node Ray cluster reads its episode from a real SeaweedFS bucket (no shared file system holds the task), and
the results equal the in-process run on a local copy, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "ops"))
from ops_helpers import write_task  # noqa: E402

from egopool.ops import compute_stats  # noqa: E402
from egopool.validate import validate_task  # noqa: E402

pytestmark = [pytest.mark.extra("ray"), pytest.mark.extra("s3")]
EPISODES = 12
GLOVE = "observation.right_glove"


@pytest.fixture()
def bucket_task(s3_server: Any, ray_cluster: Any, tmp_path: Path) -> tuple[Path, str]:
    """A writer-made task (12 episodes, one RGB stream) and its copy in the bucket (``egopool sync``)."""
    local = write_task(tmp_path / "pc", episodes=EPISODES, rows=5)
    s3_server.create_bucket("jobs")
    uri = f"s3://jobs/{uuid.uuid4().hex[:10]}/pick"
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(local), uri, "--json"], capture_output=True,
                       text=True, env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 0, r.stderr
    return local, uri


def test_validate_and_stats_on_ray_read_the_bucket(bucket_task: tuple[Path, str], ray_cluster: Any) -> None:
    from egopool.jobs import RayExecutor

    local, uri = bucket_task
    ref = validate_task(local)
    ref_doc, ref_n = compute_stats(local)
    with RayExecutor(ray_cluster.address) as ex:
        report = validate_task(uri, executor=ex)
        doc, n = compute_stats(uri, executor=ex)
    assert report.ok and ref.ok and report.episodes == ref.episodes == EPISODES
    assert [f.message for f in report.findings] == [f.message for f in ref.findings]
    assert n == ref_n == EPISODES and doc == ref_doc


def test_cli_jobs_with_ray_on_s3(bucket_task: tuple[Path, str], ray_cluster: Any) -> None:
    local, uri = bucket_task
    env = {**os.environ, "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-m", "egopool"]
    remote = subprocess.run([*cmd, "validate", "--ray", ray_cluster.address, uri, "--json"], capture_output=True,
                            text=True, env=env)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout)["tasks"][0]["episodes"] == EPISODES
    check = subprocess.run([*cmd, "stats", "check", uri, "--ray", ray_cluster.address, "--json"],
                           capture_output=True, text=True, env=env)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["episodes"] == EPISODES


def test_stats_recalc_on_ray_writes_the_bucket(bucket_task: tuple[Path, str], ray_cluster: Any) -> None:
    from egopool.storage.bucket import Bucket

    local, uri = bucket_task
    store, _, task = uri.rpartition("/")
    b = Bucket(store)
    merged = json.loads(b.get(f"{task}/meta/stats.json")[0])  # sync merged every episode's blocks, one by one
    good = compute_stats(local)[0]  # the recalc's tree merge: equal up to the last bits of std
    assert merged.keys() == good.keys() and merged[GLOVE]["count"] == good[GLOVE]["count"] == EPISODES * 5
    broken = {**good, GLOVE: {**good[GLOVE], "count": 1}}
    b.put(f"{task}/meta/stats.json", json.dumps(broken).encode())
    env = {**os.environ, "RAY_ADDRESS": ""}
    r = subprocess.run([sys.executable, "-m", "egopool", "stats", "recalc", uri, "--ray", ray_cluster.address,
                        "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["written"] and out["episodes"] == EPISODES and out["changed_blocks"] == [GLOVE]
    assert json.loads(b.get(f"{task}/meta/stats.json")[0]) == good
    backups = [o.key for o in b.list_objects(f"{task}/.egopool_backup/")]
    assert len(backups) == 1 and json.loads(b.get(backups[0])[0]) == broken


def test_export_lerobot_on_ray_from_bucket_into_bucket(bucket_task: tuple[Path, str], ray_cluster: Any,
                                                       tmp_path: Path) -> None:
    """No shared file system at all: the workers read the task from the bucket and PUT their episode's files into
    the OUT prefix; the dataset equals the in-process export of the local task, file for file."""
    from egopool.interop import export_lerobot
    from egopool.storage.bucket import Bucket

    local, uri = bucket_task
    ref = tmp_path / "ref"
    export_lerobot(local, ref)
    out = f"s3://jobs/{uuid.uuid4().hex[:10]}-lerobot"
    env = {**os.environ, "RAY_ADDRESS": ""}
    r = subprocess.run([sys.executable, "-m", "egopool", "export", "lerobot", uri, out, "--ray", ray_cluster.address,
                        "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["episodes"] == EPISODES
    b = Bucket(out)
    held = {o.key: b.get(o.key)[0] for o in b.list_objects("")}
    want = {p.relative_to(ref).as_posix(): p.read_bytes() for p in ref.rglob("*") if p.is_file()}
    assert held.keys() == want.keys()
    differing = sorted(k for k in want if held[k] != want[k])
    assert differing in ([], ["egopool_mapping.json"])  # the mapping names its source task
    again = subprocess.run([sys.executable, "-m", "egopool", "export", "lerobot", uri, out, "--json"],
                           capture_output=True, text=True, env=env)
    assert again.returncode != 0 and "already holds objects" in again.stderr  # never written over
