"""The pooling server never hands out a deleted N again, on a directory store and on a bucket (issue 24 review:
a directory's server gave N=1 again after `egopool delete TASK 1 2`; a bucket's server looped forever on the
tombstone of N, the upload never answered)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from transfer_helpers import ServerProc, cli, simulate

pytestmark = pytest.mark.extra("server")


def _upload_and_check(srv_url: str, pc: Path, store_task: str) -> None:
    from egopool import open_task
    from egopool.transfer import upload_episodes

    report = upload_episodes(pc, server=srv_url, retries=0)
    assert report.ok
    assert [o.server_episode_index for o in report.outcomes] == [4, 5]  # N 1 and 2 were deleted: next free is 4
    assert [e.index for e in open_task(store_task).episodes()] == [3, 4, 5]
    assert cli(["validate", store_task]) == 0


def test_a_directory_store_skips_deleted_n(tmp_path: Path) -> None:
    first = simulate(tmp_path / "pc1", "pick", 3, seed=1)
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(first, store / "pick")
    assert cli(["delete", str(store / "pick"), "1", "2", "--yes", "--no-registry"]) == 0
    assert sorted(p.name for p in (store / "pick" / ".egopool" / "retired").iterdir()) == ["000000001",
                                                                                            "000000002"]
    second = simulate(tmp_path / "pc2", "pick", 2, seed=2)  # another PC's N=1 and 2
    with ServerProc(store) as srv:
        _upload_and_check(srv.url, second, str(store / "pick"))


@pytest.mark.extra("s3")
def test_a_bucket_store_skips_deleted_n_and_answers(s3_server: Any, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    s3_server.create_bucket("pool")
    uri = f"s3://pool/{uuid.uuid4().hex[:10]}"
    first = simulate(tmp_path / "pc1", "pick", 3, seed=1)
    assert cli(["sync", str(first), f"{uri}/pick"]) == 0
    assert cli(["delete", f"{uri}/pick", "1", "2", "--yes"]) == 0
    capsys.readouterr()
    assert cli(["sync", str(first), f"{uri}/pick"]) == 1  # the deleted N cannot come back, and it says why
    out = capsys.readouterr()
    assert "episode 1 was deleted from the destination and its number is never reused" in out.out + out.err
    second = simulate(tmp_path / "pc2", "pick", 2, seed=2)
    state = tmp_path / "state"
    with ServerProc(state, "--state", str(state), store_arg=uri) as srv:
        _upload_and_check(srv.url, second, f"{uri}/pick")
