"""Uploads over real HTTP on loopback to a real `egopool serve` (uvicorn started by the test).

A simulated full rig and the demo task pool unchanged; two "PCs" with the same task name and
N 1..5 each pool into 10 episodes with the (host id, client N) -> server N mapping returned
and recorded; --on-conflict reject; tokens and scopes; the request size limit; the read API.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from transfer_helpers import ServerProc, cli, clone_episode, simulate, store_files, write_task

from egopool.codecs.video import count_video_frames
from egopool.demo import run_demo
from egopool.layout import list_task_episodes
from egopool.meta.stats import recalc_stats
from egopool.registry import Registry, sha256_file
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A tokens file: pc (upload:* declare:*), reader (read), pick_only (upload:pick), both (read + upload:*
    declare:*)."""
    from egopool.server.tokens import add_token

    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    toks = {"pc": add_token(path, "pc", ["upload:*", "declare:*"]), "reader": add_token(path, "reader", ["read"]),
            "pick_only": add_token(path, "pick_only", ["upload:pick"]),
            "both": add_token(path, "both", ["read", "upload:*", "declare:*"])}
    return path, toks


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tokens: tuple[Path, dict[str, str]]):
    proc = ServerProc(tmp_path_factory.mktemp("srv") / "store", "--tokens", str(tokens[0]))
    with proc:
        yield proc


def _files(task: Path) -> dict[str, str]:
    """Every episode file of a task (relative path -> sha256)."""
    out = {}
    for g in list_task_episodes(task):
        for p in g.paths():
            out[p.relative_to(task).as_posix()] = sha256_file(p)
    return out


def _assert_stats_recomputed(task: Path) -> None:
    stored = json.loads((task / "meta/stats.json").read_text())
    fresh = recalc_stats(task)
    assert set(stored) == set(fresh)
    for col, block in fresh.items():
        assert stored[col]["count"] == block["count"], col
        for k in ("mean", "std", "min", "max"):
            np.testing.assert_allclose(stored[col][k], block[k], rtol=0, atol=1e-9, err_msg=f"{col}.{k}")


def _one_by_one(task: Path, url: str, token: str, n: int, **kw: object) -> list[dict[str, object]]:
    answers = []
    for i in range(1, n + 1):
        report = upload_episodes(task, [i], server=url, token=token, **kw)  # type: ignore[arg-type]
        assert report.ok, report.to_dict()
        answers.append(report.outcomes[0].answer)
    return answers


def test_full_rig_task_pools_unchanged(server: ServerProc, tokens, tmp_path: Path) -> None:
    src = simulate(tmp_path / "pc", "rig_full", 3, rig="full", seconds=0.4)
    answers = _one_by_one(src, server.url, tokens[1]["pc"], 3)
    assert [(a["status"], a["episode_index"], a["renumbered"]) for a in answers] == [("imported", i, False)
                                                                                        for i in (1, 2, 3)]
    dst = server.store / "rig_full"
    assert _files(dst) == _files(src)  # same files by sha256
    assert json.loads((dst / "meta/info.json").read_text()) == json.loads((src / "meta/info.json").read_text())
    assert (dst / "meta/tasks.jsonl").read_bytes() == (src / "meta/tasks.jsonl").read_bytes()
    _assert_stats_recomputed(dst)
    report = validate_task(dst)
    assert report.ok and report.episodes == 3, [f.one_line() for f in report.findings]
    assert cli(["validate", str(dst)]) == 0
    for a, n in zip(answers, (1, 2, 3)):  # the answer carries the published files' digests
        assert a["files"] == {k: v for k, v in _files(dst).items() if f"episode-{n - 1:03d}" in k}
    recs = Registry.for_task(src).uploads("rig_full")
    assert [(r.episode_index, r.server_episode_index) for r in recs] == [(1, 1), (2, 2), (3, 3)]
    assert all(r.status == "uploaded" for r in Registry.for_task(src).recordings("rig_full"))


def test_demo_task_with_hevc_reencoding(server: ServerProc, tokens, tmp_path: Path) -> None:
    run_demo(tmp_path / "pc", episodes=2, max_seconds=1.0, video_width=96)
    src = tmp_path / "pc" / "real_recordings_demo"
    _one_by_one(src, server.url, tokens[1]["pc"], 2, reencode_hevc=True)
    dst = server.store / "real_recordings_demo"
    a, b = _files(src), _files(dst)
    assert set(a) == set(b)
    info = json.loads((src / "meta/info.json").read_text())
    rgb = set(info["cameras"])
    assert rgb and set(info["video_extensions"]) - rgb  # the demo has RGB and a depth slot
    for path in a:
        key = path.split("/")[2] if path.startswith("videos/") else None
        if key in rgb:  # re-encoded: other bytes, same frames, HEVC
            assert a[path] != b[path]
            assert count_video_frames(dst / path) == count_video_frames(src / path)
        elif path.startswith("meta/episodes/"):  # the row records the bytes the server holds (X4)
            ta, tb = pq.read_table(src / path), pq.read_table(dst / path)
            assert ta.drop_columns(["file_digests"]).equals(tb.drop_columns(["file_digests"])), path
            got = json.loads(tb.column("file_digests")[0].as_py())["files"]
            assert {k: sha256_file(dst / k) for k in got} == got, path
        else:
            assert a[path] == b[path], path
    _assert_stats_recomputed(dst)
    assert validate_task(dst).ok


def test_two_pcs_pool_into_ten_episodes(server: ServerProc, tokens, tmp_path: Path) -> None:
    pcs = [simulate(tmp_path / f"pc{k}", "pick", 5, seed=k) for k in (1, 2)]
    ids = [Registry.for_task(p).host_id() for p in pcs]
    assert ids[0] != ids[1]
    mapping: dict[tuple[str, int], int] = {}
    for k, pc in enumerate(pcs):
        report = upload_episodes(pc, server=server.url, token=tokens[1]["pc"])
        assert report.ok
        for o in report.outcomes:
            assert o.answer["client_host_id"] == ids[k] and o.answer["client_episode_index"] == o.index
            mapping[(ids[k], o.index)] = o.server_episode_index  # type: ignore[assignment]
    assert sorted(mapping.values()) == list(range(1, 11))
    assert [mapping[(ids[0], n)] for n in range(1, 6)] == [1, 2, 3, 4, 5]
    assert sorted(mapping[(ids[1], n)] for n in range(1, 6)) == [6, 7, 8, 9, 10]  # renumbered as they arrive (U26)
    dst = server.store / "pick"
    assert [g.index for g in list_task_episodes(dst)] == list(range(1, 11))
    # recorded on the server: its database and the read API
    con = sqlite3.connect(server.store / ".egopool-server/server.db")
    rows = con.execute("SELECT client_host_id, client_episode_index, episode_index FROM episodes WHERE task = 'pick'"
                       ).fetchall()
    assert {(h, c): s for h, c, s in rows} == mapping
    eps = httpx.get(f"{server.url}/api/v1/tasks/pick/episodes",
                    headers={"Authorization": f"Bearer {tokens[1]['reader']}"}).json()["episodes"]
    assert {(e["uploaded_by"]["client_host_id"], e["uploaded_by"]["client_episode_index"]): e["episode_index"]
            for e in eps} == mapping
    # renumbered: only episode_index changed; videos renamed byte for byte
    for n in range(1, 6):
        s, d, m = pcs[1], dst, mapping[(ids[1], n)]  # client N n pooled as server N m (6..10, as they arrived)
        src_data = pq.read_table(s / f"data/chunk-000/episode-{n - 1:03d}.parquet")
        dst_data = pq.read_table(d / f"data/chunk-000/episode-{m - 1:03d}.parquet")
        assert set(dst_data.column("episode_index").to_pylist()) == {m}
        assert dst_data.drop(["episode_index"]).equals(src_data.drop(["episode_index"]))
        assert dst_data.schema.equals(src_data.schema)
        src_row = pq.read_table(s / f"meta/episodes/chunk-000/episode-{n - 1:03d}.parquet").to_pylist()[0]
        dst_row = pq.read_table(d / f"meta/episodes/chunk-000/episode-{m - 1:03d}.parquet").to_pylist()[0]
        digests = json.loads(dst_row.pop("file_digests"))["files"]  # the renumbered files' own (X3)
        src_row.pop("file_digests")
        assert dst_row == {**src_row, "episode_index": m}
        assert {k: sha256_file(d / k) for k in digests} == digests
        assert f"data/chunk-000/episode-{m - 1:03d}.parquet" in digests
        keys = sorted(p.name for p in (s / "videos/chunk-000").iterdir())
        assert len(keys) == 3  # three UVC cameras
        for key in keys:
            assert sha256_file(d / f"videos/chunk-000/{key}/episode-{m - 1:03d}.mp4") == \
                sha256_file(s / f"videos/chunk-000/{key}/episode-{n - 1:03d}.mp4")
    assert json.loads((dst / "meta/info.json").read_text())["total_episodes"] == 10
    _assert_stats_recomputed(dst)
    assert validate_task(dst).ok
    # the same PC sending the same episode again (no registry to skip it): a 200 no-op, same N
    before = store_files(server.store)
    again = upload_episodes(pcs[1], [3], server=server.url, token=tokens[1]["pc"], registry=False)
    assert again.ok and again.outcomes[0].status == "duplicate"
    assert again.outcomes[0].server_episode_index == mapping[(ids[1], 3)]
    assert store_files(server.store) == before


def test_reject_policy_answers_409_and_changes_nothing(tmp_path: Path) -> None:
    pcs = [write_task(tmp_path / f"pc{k}", episodes=2, first_value=10.0 * k) for k in (1, 2)]
    with ServerProc(tmp_path / "store", "--on-conflict", "reject") as srv:
        assert upload_episodes(pcs[0], server=srv.url).ok
        before = store_files(srv.store)
        report = upload_episodes(pcs[1], server=srv.url)
        assert [o.status for o in report.outcomes] == ["failed", "failed"]
        assert all("409" in o.message and "episode_taken" in o.message for o in report.outcomes)
        assert store_files(srv.store) == before
        assert Registry.for_task(pcs[1]).uploads("pick") == []
        log = httpx.get(f"{srv.url}/api/v1/uploads").json()["uploads"]
        assert [(u["outcome"], u["status"], u["reason"]) for u in log[:2]] == [("rejected", 409, "episode_taken")] * 2


def test_tokens_and_scopes(server: ServerProc, tokens, tmp_path: Path) -> None:
    path, toks = tokens
    text = path.read_text()
    assert not any(t in text for t in toks.values())  # hashed at rest
    task = write_task(tmp_path / "pc", "other", episodes=1)

    def up(token: str | None) -> int:
        try:
            report = upload_episodes(task, server=server.url, token=token, registry=False, retries=0)
        except Exception as exc:  # TransferError for 401/403
            return int(getattr(exc, "status", 0) or 0)
        return 200 if report.ok else 0

    assert up(None) == 401
    assert up("egp_not-a-token") == 401
    assert up(toks["reader"]) == 403
    assert up(toks["pick_only"]) == 403  # task "other" is outside upload:pick
    assert not (server.store / "other").exists()

    def get(path: str, token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(server.url + path, headers=headers).status_code

    assert get("/api/v1/tasks", None) == 401
    assert get("/api/v1/tasks", toks["pc"]) == 403
    assert get("/api/v1/tasks", toks["reader"]) == 200
    assert get("/", None) == 401  # the HTML sign-in form
    assert up(toks["both"]) == 200
    log = httpx.get(f"{server.url}/api/v1/uploads?task=other",
                    headers={"Authorization": f"Bearer {toks['reader']}"}).json()["uploads"]
    assert [(u["token_id"], u["status"]) for u in log] == [("both", 200), ("pick_only", 403), ("reader", 403)]
    # a token revoked while the server runs stops working at once (the file is re-read when it changes)
    from egopool.server.tokens import add_token, revoke_token

    extra = add_token(path, "temporary", ["read"])
    assert get("/api/v1/tasks", extra) == 200
    assert revoke_token(path, "temporary")
    assert get("/api/v1/tasks", extra) == 401


def test_task_names_in_chinese(server: ServerProc, tokens, tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "抓取杯子_双手", episodes=2)
    assert upload_episodes(task, server=server.url, token=tokens[1]["pc"]).ok
    dst = server.store / "抓取杯子_双手"
    assert [g.index for g in list_task_episodes(dst)] == [1, 2] and validate_task(dst).ok
    assert (dst / "meta/tasks.jsonl").read_bytes() == (task / "meta/tasks.jsonl").read_bytes()
    h = {"Authorization": f"Bearer {tokens[1]['reader']}"}
    eps = httpx.get(f"{server.url}/api/v1/tasks/抓取杯子_双手/episodes", headers=h).json()["episodes"]
    assert [e["episode_index"] for e in eps] == [1, 2]
    page = httpx.get(f"{server.url}/", headers=h).text
    assert "抓取杯子_双手" in page and 'href="/tasks/%E6%8A%93' in page
    page = httpx.get(f"{server.url}/tasks/抓取杯子_双手", headers=h).text
    assert 'id="episodes-抓取杯子_双手"' in page and "/tasks/%E6%8A%93%E5%8F%96%E6%9D%AF%E5%AD%90_%E5%8F%8C%E6%89%8B/episodes/2" in page


def test_request_size_limit(tmp_path: Path) -> None:
    task = simulate(tmp_path / "pc", "big", 1, rig="full", seconds=0.4)  # ~0.8 MB zip
    with ServerProc(tmp_path / "store", "--max-upload-mb", "0.5") as srv:  # 512 KiB
        report = upload_episodes(task, server=srv.url, retries=0)
        assert report.outcomes[0].status == "failed" and "413" in report.outcomes[0].message
        assert store_files(srv.store) == {}
        assert not list((srv.store / ".egopool-server/spool").iterdir())


def test_form_episode_index_is_the_file_number_after_roll_over(server: ServerProc, tokens, tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "rolled", episodes=1)
    clone_episode(task, 1, 1001)
    report = upload_episodes(task, [1001], server=server.url, token=tokens[1]["pc"])
    assert report.ok and report.outcomes[0].server_episode_index == 1001
    log = httpx.get(f"{server.url}/api/v1/uploads?task=rolled",
                    headers={"Authorization": f"Bearer {tokens[1]['reader']}"}).json()["uploads"]
    assert (log[0]["form_episode_index"], log[0]["client_episode_index"]) == (0, 1001)
    assert (server.store / "rolled/data/chunk-001/episode-000.parquet").is_file()


def test_read_api_lists_and_serves_episode_files(server: ServerProc, tokens, tmp_path: Path) -> None:
    task = write_task(tmp_path / "pc", "readme", episodes=2)
    assert upload_episodes(task, server=server.url, token=tokens[1]["pc"]).ok
    h = {"Authorization": f"Bearer {tokens[1]['reader']}"}
    tasks = {t["name"]: t for t in httpx.get(f"{server.url}/api/v1/tasks", headers=h).json()["tasks"]}
    assert tasks["readme"]["episodes"] == 2 and tasks["readme"]["streams"] == ["cam"]
    detail = httpx.get(f"{server.url}/api/v1/tasks/readme", headers=h).json()
    assert detail["info"]["format"] == "pooled_episodes_v1" and detail["episodes"] == 2
    ep = httpx.get(f"{server.url}/api/v1/tasks/readme/episodes/2", headers=h).json()
    assert (ep["length"], ep["streams"], ep["validation"]["ok"]) == (3, ["cam"], True)
    assert sorted(ep["files"]) == ["data/chunk-000/episode-001.parquet", "meta/episodes/chunk-000/episode-001.parquet",
                                   "videos/chunk-000/cam/episode-001.mp4"]
    got = httpx.get(f"{server.url}/api/v1/tasks/readme/episodes/2/files/videos/chunk-000/cam/episode-001.mp4",
                    headers=h)
    assert got.status_code == 200 and got.content == (task / "videos/chunk-000/cam/episode-001.mp4").read_bytes()
    assert httpx.get(f"{server.url}/api/v1/tasks/readme/episodes/2/files/../tokens.json", headers=h).status_code == 404
    for bad in ("meta/info.json", "data/chunk-000/episode-000.parquet", "..%2Ftokens.json"):
        miss = httpx.get(f"{server.url}/api/v1/tasks/readme/episodes/2/files/{bad}", headers=h)
        assert (miss.status_code, miss.json()["error"]) == (404, "not_found")
        # episode 2 exists: the answer says the file is not one of its files (not "no episode 2", nor a CLI hint)
        assert miss.json()["message"] == f"episode 2 of task 'readme' has no file {bad.replace('%2F', '/')!r}; the " \
                                         "episode's entry in the read API lists its files", miss.text
    miss = httpx.get(f"{server.url}/api/v1/tasks/readme/episodes/9/files/meta/info.json", headers=h)
    assert (miss.status_code, miss.json()["message"]) == (404, "no episode 9 in task 'readme'")
    assert httpx.get(f"{server.url}/api/v1/tasks/nope/episodes", headers=h).status_code == 404


def test_cli_upload(server: ServerProc, tokens, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task = write_task(tmp_path / "pc", "viacli", episodes=2)
    tok = tmp_path / "token"
    tok.write_text(tokens[1]["pc"] + "\n")
    assert cli(["upload", str(task), "--server", server.url, "--token-file", str(tok), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and [o["server_episode_index"] for o in doc["outcomes"]] == [1, 2]
    assert cli(["upload", str(task), "--server", server.url, "--token-file", str(tok)]) == 0
    assert "already on the server as episode 1" in capsys.readouterr().out
    assert cli(["upload", str(task), "--server", server.url, "--no-registry"]) == 1  # no token: 401, one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "401" in err
