"""Requests a command costs on a bucket task of many episodes stay within the documented bound (issue 24,
docs/decisions.md O33), counted by the real server (SeaweedFS's ``SeaweedFS_s3_request_total``; its GET
includes HEAD). Counts only, never seconds.

The bound, for a task of E committed episodes with S streams each (chunks_size 1000):

* every command: one LIST per 1000 keys of each template prefix it enumerates (``meta/episodes/``, ``data/``,
  ``videos/``), plus a constant (``info.json``, the publish journals' prefix, ...);
* ``ls``: 2 GETs per episode (its row object whole, its data parquet's end: the footer), no HEAD;
* ``validate --fast``: 2 + S GETs per episode (row, data parquet, each video once), no HEAD;
* ``open_task`` + one episode read: a constant, whatever E (never a listing of the task).
"""

from __future__ import annotations

import json
import math
import time

import pytest

from copies_task_support import ROWS, STREAM, build_copies_task
from egopool import open_task
from egopool.cli.app import main

pytestmark = pytest.mark.extra("s3")

EPISODES = 300
STREAMS = 1
BUCKET = "enumeration-requests"


@pytest.fixture(scope="module")
def task_uri(s3_server, tmp_path_factory):
    local = build_copies_task(tmp_path_factory.mktemp("enum"), "many", EPISODES)
    return s3_server.upload_dir(local, BUCKET, "pooled/many")


def _settled(server) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """weed's request counts once they stop moving (a request is counted just after its answer is sent)."""
    last = server.request_counts()
    for _ in range(50):
        time.sleep(0.1)
        now = server.request_counts()
        if now == last:
            return now
        last = now
    return last


def _counted(server, fn):  # type: ignore[no-untyped-def]
    """``(fn(), {kind: requests})`` of the requests weed served while ``fn`` ran."""
    before = _settled(server)
    out = fn()
    after = _settled(server)
    return out, {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}


def _lists(episodes: int) -> int:
    """LIST requests of one enumeration: each template prefix, 1 per 1000 keys."""
    return math.ceil(episodes / 1000) * 2 + math.ceil(episodes * STREAMS / 1000)


def test_ls_costs_two_gets_per_episode_and_one_listing(task_uri, s3_server, capsys):
    capsys.readouterr()
    code, req = _counted(s3_server, lambda: main(["ls", task_uri, "--json"]))
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and len(rows) == EPISODES
    assert all(r["complete"] and r["length"] == ROWS and r["streams"] == [STREAM] for r in rows)
    assert [r["episode_index"] for r in rows] == list(range(1, EPISODES + 1))
    assert req.get("GET", 0) <= 2 * EPISODES + 4, req
    assert req.get("LIST", 0) <= _lists(EPISODES) + 2, req


def test_validate_fast_reads_each_file_once(task_uri, s3_server, capsys):
    capsys.readouterr()
    code, req = _counted(s3_server, lambda: main(["validate", task_uri, "--fast", "--json"]))
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["findings"] == [], report
    assert [(t["episodes"], t["errors"], t["warnings"]) for t in report["tasks"]] == [(EPISODES, 0, 0)], report
    assert req.get("GET", 0) <= (2 + STREAMS) * EPISODES + 30, req
    assert req.get("LIST", 0) <= 2 * _lists(EPISODES) + 10, req  # the episodes, then the strays' check


@pytest.mark.parametrize("n", [1, EPISODES // 2, EPISODES])
def test_open_task_and_one_episode_cost_the_same_whatever_n(task_uri, s3_server, n):
    def read() -> int:
        ep = open_task(task_uri).episode(n)
        assert ep.meta["episode_index"] == n and ep.table.num_rows == ROWS
        return sum(1 for _ in ep.video(STREAM))

    frames, req = _counted(s3_server, read)
    assert frames == ROWS
    # info.json (2 HEADs, a GET), N's row and data parquet (a HEAD each for the lookup, a GET each to read),
    # its video (a HEAD, a GET to probe its kind, a GET to decode) and one LIST of N's video chunk for its
    # image_key directories: never the task's listing
    assert req.get("GET", 0) <= 10 and req.get("LIST", 0) <= 1, req
