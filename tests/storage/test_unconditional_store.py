"""A store without conditional writes is refused by every command that writes into a bucket, in one line,
before anything is written (issue 24). The store is a real SeaweedFS behind a gateway that drops the
``If-None-Match`` / ``If-Match`` headers and signs the request anew, as ``rclone serve s3`` does
(unconditional_gateway.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from unconditional_gateway import UnconditionalGateway

pytestmark = pytest.mark.extra("s3")


@pytest.fixture(scope="module")
def local_task(tmp_path_factory):
    from egopool.cli.app import main

    root = tmp_path_factory.mktemp("uncond")
    assert main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.4", "--scale", "8",
                 "--out", str(root), "--task", "t"]) == 0
    return root / "t"


@pytest.fixture()
def relay(s3_server):
    with UnconditionalGateway(s3_server.endpoint, s3_server.access_key, s3_server.secret_key,
                              s3_server.region) as g:
        yield g


def _keys(s3_server, bucket: str) -> list[str]:
    from egopool.storage import S3Settings
    from egopool.storage.s3_store import S3Store

    return sorted(m.key for m in S3Store(f"s3://{bucket}", settings=S3Settings.from_env(s3_server.env())).list(""))


def _run(args: list[str], endpoint: str, s3_server) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **s3_server.env())
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_MAX_ATTEMPTS="1")
    return subprocess.run([sys.executable, "-m", "egopool", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_probe_tells_a_gateway_that_ignores_conditions(s3_server, relay):
    from egopool.storage import S3Settings
    from egopool.storage.s3_store import S3Store

    s3_server.create_bucket("uncond-probe")
    direct = S3Store("s3://uncond-probe/p", settings=S3Settings.from_env(s3_server.env()))
    assert direct.conditional_writes is True
    via = S3Store("s3://uncond-probe/p", settings=S3Settings.from_env({**s3_server.env(),
                                                                          "AWS_ENDPOINT_URL": relay.endpoint}))
    assert via.conditional_writes is False
    assert relay.requests == 3  # CREATE, CREATE (which wins: the gateway's fault), DELETE of the probe
    assert via.conditional_writes is False and relay.requests == 3  # asked once per endpoint and bucket
    assert _keys(s3_server, "uncond-probe") == []  # the probe objects are gone


def test_sync_into_it_is_refused_before_anything_is_written(s3_server, relay, local_task):
    s3_server.create_bucket("uncond-sync")
    r = _run(["sync", str(local_task), "s3://uncond-sync/pooled/t"], relay.endpoint, s3_server)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stdout + r.stderr
    assert "ignores conditional writes" in lines[0] and "s3://uncond-sync" in lines[0], lines[0]
    assert "rclone serve s3" in lines[0]  # the hint names what such a store is
    assert _keys(s3_server, "uncond-sync") == []


def test_delete_and_the_server_refuse_it_and_leave_the_task_alone(s3_server, relay, local_task):
    from egopool.errors import OperationError
    from egopool.server.store import ServerStore

    uri = s3_server.upload_dir(local_task, "uncond-task", "pooled/t")
    before = _keys(s3_server, "uncond-task")
    r = _run(["delete", uri, "1", "--yes"], relay.endpoint, s3_server)
    assert r.returncode == 1 and "ignores conditional writes" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert _keys(s3_server, "uncond-task") == before
    old = os.environ.get("AWS_ENDPOINT_URL")
    os.environ["AWS_ENDPOINT_URL"] = relay.endpoint
    try:
        with pytest.raises(OperationError, match="ignores conditional writes"):
            ServerStore("s3://uncond-task/pooled", state=os.fspath(local_task.parent / "state"))
    finally:
        if old is None:
            os.environ.pop("AWS_ENDPOINT_URL")
        else:
            os.environ["AWS_ENDPOINT_URL"] = old
    assert _keys(s3_server, "uncond-task") == before


def test_wrong_keys_or_no_endpoint_on_a_writing_command_are_one_line(s3_server, local_task):
    """Issue 24 review: `sync` with a wrong secret printed botocore's SignatureDoesNotMatch paragraph about a
    "create bucket" of the prefix; a dead endpoint botocore's text."""
    s3_server.create_bucket("lab-keys")
    env = {**os.environ, **s3_server.env(), "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_MAX_ATTEMPTS": "1"}
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(local_task), "s3://lab-keys/pooled/t"], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "s3://lab-keys: HEAD bucket failed: access denied by" in r.stderr and "AWS_SECRET_ACCESS_KEY" in r.stderr
    assert "SignatureDoesNotMatch" not in r.stderr and "create bucket" not in r.stderr
    assert _keys(s3_server, "lab-keys") == []
    env.update(AWS_SECRET_ACCESS_KEY=s3_server.env()["AWS_SECRET_ACCESS_KEY"], AWS_ENDPOINT_URL="http://127.0.0.1:1")
    r = subprocess.run([sys.executable, "-m", "egopool", "sync", str(local_task), "s3://lab-keys/pooled/t"], env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot reach the S3 endpoint http://127.0.0.1:1" in r.stderr and "AWS_ENDPOINT_URL" in r.stderr
