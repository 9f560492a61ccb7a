"""A store that stalls or closes connections mid-answer gives the store's error, never a verdict on the task
(issue 24: `validate` printed "FAILED (2 episodes, 1 error)" for a mid-body close, calling it "cannot reach
the S3 endpoint"). A real SeaweedFS behind a relay that misbehaves at the K-th request (relay.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from relay import FaultyRelay

pytestmark = pytest.mark.extra("s3")


@pytest.fixture(scope="module")
def bucket_task(s3_server, tmp_path_factory):
    from egopool.cli.app import main

    root = tmp_path_factory.mktemp("faults")
    assert main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.4", "--scale", "8",
                 "--out", str(root), "--task", "t"]) == 0
    return s3_server.upload_dir(root / "t", "faults", "pooled/t")


def _validate(uri: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_MAX_ATTEMPTS="1", EGOPOOL_S3_REQUEST_TIMEOUT="2",
               EGOPOOL_S3_CONNECT_TIMEOUT="2")
    return subprocess.run([sys.executable, "-m", "egopool", "validate", uri], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("mode", ["close", "stall"])
def test_a_failing_store_is_never_a_verdict_on_the_task(s3_server, bucket_task, mode):
    port = int(s3_server.endpoint.rsplit(":", 1)[1])
    with FaultyRelay(port, mode, after=10**9) as relay:
        clean = _validate(bucket_task, relay.endpoint)
    assert clean.returncode == 0 and "ok (2 episodes" in clean.stdout, clean.stdout + clean.stderr
    total = relay.requests
    assert total > 10
    hit = 0
    for after in sorted({0, 1, 2, *range(3, total, max(1, total // 8))}):
        with FaultyRelay(port, mode, after=after) as relay:
            r = _validate(bucket_task, relay.endpoint)
        assert "FAILED" not in r.stdout, f"{mode} at request {after + 1} of {total}: {r.stdout}"
        if r.returncode == 0:  # the request hit was one a client may try again (a reconnect)
            assert "ok (2 episodes" in r.stdout
            continue
        hit += 1
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("egopool: error: s3://faults/"), r.stderr
        want = "closed the connection mid-answer" if mode == "close" else "did not answer in time"
        assert want in lines[0] and "cannot reach" not in lines[0], lines[0]
    assert hit >= 2, f"the {mode} fault never surfaced in {total} requests"
