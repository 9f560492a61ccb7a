"""A collection PC's identity and its episode numbers, over real HTTP to a real `egopool serve` (issue 15 B).

* a host id read from the read API and written into another token's zip neither blocks the real PC's
  episode N nor is pooled as that PC's episode;
* a recordings root copied (with its pipeline.db) to a second PC: both PCs record N=4 and both
  episodes are pooled, with distinct server N; the copy says once that it was copied; the same
  content sent again is a duplicate, never a second episode;
* two machines with one host id (one machine id, one path: a cloned image) pool every episode;
* a server catalog of the previous schema (server.db version 1) keeps working.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import httpx
import pytest
from transfer_helpers import ServerProc, cli, simulate, store_files

from egopool.identity import CLIENT_KEY_HEADER, host_id_of_key
from egopool.layout import list_task_episodes
from egopool.registry import Registry
from egopool.transfer import pack_episode
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.transfer import upload_episodes  # noqa: E402
from egopool.server.db import _SCHEMA_VERSION  # noqa: E402


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """pc_a (upload:* declare:*: it creates the tasks), mallory (upload:* and read: she can read every host id),
    reader (read)."""
    from egopool.server.tokens import add_token

    path = tmp_path_factory.mktemp("tokens") / "tokens.json"
    return path, {"pc_a": add_token(path, "pc_a", ["upload:*", "declare:*"]),
                  "mallory": add_token(path, "mallory", ["upload:*", "read"]),
                  "reader": add_token(path, "reader", ["read"])}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tokens: tuple[Path, dict[str, str]]):
    with ServerProc(tmp_path_factory.mktemp("srv") / "store", "--tokens", str(tokens[0])) as proc:
        yield proc


def _episodes(srv: ServerProc, token: str, task: str) -> list[dict[str, object]]:
    resp = httpx.get(f"{srv.url}/api/v1/tasks/{task}/episodes", headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 200, resp.text
    return resp.json()["episodes"]  # type: ignore[no-any-return]


def _post(srv: ServerProc, zip_path: Path, token: str, key: str | None, f: int) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers[CLIENT_KEY_HEADER] = key
    return httpx.post(srv.url + "/api/v1/session/upload", data={"name": "forge", "episode_index": str(f)},
                      files={"file": ("e.zip", zip_path.read_bytes(), "application/zip")}, headers=headers, timeout=120)


def _pairs(report: object) -> list[tuple[int, str, int | None]]:
    return [(o.index, o.status, o.server_episode_index) for o in report.outcomes]  # type: ignore[attr-defined]


def test_forged_host_id_neither_blocks_nor_is_pooled_as_that_pc(server: ServerProc, tokens, tmp_path: Path) -> None:
    toks = tokens[1]
    pc_a = simulate(tmp_path / "pc_a", "forge", 2, seed=1)
    assert _pairs(upload_episodes(pc_a, server=server.url, token=toks["pc_a"])) == [(1, "uploaded", 1),
                                                                                    (2, "uploaded", 2)]
    host_a = Registry.for_task(pc_a).host_id()
    # mallory reads A's host id from the read API and packs her own episode 3 claiming it: A's next N
    assert {e["uploaded_by"]["client_host_id"] for e in _episodes(server, toks["mallory"], "forge")} == {host_a}
    mine = simulate(tmp_path / "mallory", "forge", 3, seed=7)
    forged = pack_episode(mine, 3, tmp_path / "zips", host_id=host_a, hostname="pc-a")
    before = store_files(server.store)
    # with her own client key: the manifest's host id is not the key's -> refused, nothing stored
    resp = _post(server, forged.path, toks["mallory"], Registry.for_task(mine).identity().key, forged.file)
    assert resp.status_code == 400 and resp.json()["error"] == "host_id_mismatch", resp.text
    assert host_a in resp.json()["message"]
    # with a made-up key: the same
    resp = _post(server, forged.path, toks["mallory"], "ab" * 32, forged.file)
    assert resp.status_code == 400 and resp.json()["error"] == "host_id_mismatch"
    assert store_files(server.store) == before
    # with no key at all (as an egopool before the key would send it): pooled, but as mallory's token's client
    resp = _post(server, forged.path, toks["mallory"], None, forged.file)
    assert resp.status_code == 200, resp.text
    taken = resp.json()
    assert taken["episode_index"] == 3 and taken["client_host_id"] != host_a
    # the real PC records its episode 3 and uploads it: pooled (the next free N), never 409
    simulate(tmp_path / "pc_a", "forge", 1, seed=2)
    report = upload_episodes(pc_a, server=server.url, token=toks["pc_a"])
    assert report.ok and _pairs(report) == [(1, "skipped", 1), (2, "skipped", 2), (3, "uploaded", 4)]
    eps = {e["episode_index"]: e["uploaded_by"] for e in _episodes(server, toks["reader"], "forge")}
    assert {n: (u["client_host_id"] == host_a, u["client_episode_index"], u["token_id"])  # type: ignore[index]
            for n, u in eps.items()} == {1: (True, 1, "pc_a"), 2: (True, 2, "pc_a"), 3: (False, 3, "mallory"),
                                         4: (True, 3, "pc_a")}
    assert [g.index for g in list_task_episodes(server.store / "forge")] == [1, 2, 3, 4]
    # the upload log shows the refusals under mallory's token, with the host id the server derived
    log = httpx.get(f"{server.url}/api/v1/uploads?task=forge",
                    headers={"Authorization": f"Bearer {toks['reader']}"}).json()["uploads"]
    assert [(u["token_id"], u["status"], u["reason"]) for u in log[1:4]] == [
        ("mallory", 200, None), ("mallory", 400, "host_id_mismatch"), ("mallory", 400, "host_id_mismatch")]
    page = httpx.get(f"{server.url}/tasks/forge", headers={"Authorization": f"Bearer {toks['reader']}"}).text
    assert f'pc-a <span class="dim">({taken["client_host_id"][:8]})</span>' in page  # the label, and who it is


def test_copied_root_pools_the_episodes_of_both_pcs(server: ServerProc, tokens, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    tok = tokens[1]["pc_a"]
    pc1 = simulate(tmp_path / "pc1", "copied", 3, seed=1)
    assert upload_episodes(pc1, server=server.url, token=tok).ok
    shutil.copytree(tmp_path / "pc1", tmp_path / "pc2")  # the recordings root, pipeline.db included
    pc2 = tmp_path / "pc2" / "copied"
    simulate(tmp_path / "pc1", "copied", 2, seed=11)  # N = 4, 5 on each PC, different recordings
    simulate(tmp_path / "pc2", "copied", 2, seed=22)
    first = upload_episodes(pc1, server=server.url, token=tok)
    assert first.ok and first.notices == [] and _pairs(first)[3:] == [(4, "uploaded", 4), (5, "uploaded", 5)]
    token_file = tmp_path / "token"
    token_file.write_text(tok)
    capsys.readouterr()
    assert cli(["upload", str(pc2), "--server", server.url, "--token-file", str(token_file), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    pairs = [(o["episode_index"], o["status"], o["server_episode_index"]) for o in doc["outcomes"]]
    assert pairs[:3] == [(1, "skipped", 1), (2, "skipped", 2), (3, "skipped", 3)]
    # 4 and 5 are renumbered to 6 and 7, in the order they arrive (--jobs, U26)
    assert [p[:2] for p in pairs[3:]] == [(4, "uploaded"), (5, "uploaded")]
    assert sorted(p[2] for p in pairs[3:]) == [6, 7]
    assert len(doc["notices"]) == 1 and "copied or moved" in doc["notices"][0]
    assert err.count("\n") == 1 and "copied or moved" in err and str(tmp_path / "pc2") in err
    ids = [Registry.for_task(p).host_id() for p in (pc1, pc2)]
    assert ids[0] != ids[1] and doc["outcomes"][3]["answer"]["client_host_id"] == ids[1]
    # said once: the copy keeps its new identity
    again = upload_episodes(pc2, server=server.url, token=tok)
    assert again.ok and again.notices == [] and {o.status for o in again.outcomes} == {"skipped"}
    dst = server.store / "copied"
    assert [g.index for g in list_task_episodes(dst)] == [1, 2, 3, 4, 5, 6, 7]
    assert validate_task(dst).ok
    # the copy sending the episodes both PCs share (no registry to skip them): duplicates, nothing new
    before = store_files(server.store)
    resent = upload_episodes(pc2, [1, 2, 3, 4], server=server.url, token=tok, registry=False)
    assert _pairs(resent) == [(1, "duplicate", 1), (2, "duplicate", 2), (3, "duplicate", 3),
                              (4, "duplicate", pairs[3][2])]  # where the copy's episode 4 was pooled
    assert store_files(server.store) == before


def test_two_machines_with_one_host_id_pool_every_episode(server: ServerProc, tokens, tmp_path: Path) -> None:
    """A root cloned onto a second machine with the same machine id at the same path (a cloned disk
    image): nothing tells the two apart, both have one host id and key, and still every episode is pooled."""
    tok = tokens[1]["pc_a"]
    root = tmp_path / "lab" / "recordings"
    task = simulate(root, "cloned", 2, seed=1)
    assert upload_episodes(task, server=server.url, token=tok).ok
    shutil.copytree(root, tmp_path / "image")
    simulate(root, "cloned", 1, seed=11)  # machine A's N=3
    a = upload_episodes(task, server=server.url, token=tok)
    assert a.ok and _pairs(a)[2:] == [(3, "uploaded", 3)]
    host = Registry.for_task(task).host_id()
    (root).rename(tmp_path / "lab" / "machine_a")
    (tmp_path / "image").rename(root)  # machine B: the same machine id, the same path
    simulate(root, "cloned", 1, seed=22)  # machine B's N=3, another recording
    b = upload_episodes(task, server=server.url, token=tok)
    assert b.notices == [] and Registry.for_task(task).host_id() == host
    assert b.ok and _pairs(b) == [(1, "skipped", 1), (2, "skipped", 2), (3, "uploaded", 4)]
    assert b.outcomes[2].answer["renumbered"] is True and b.outcomes[2].answer["client_host_id"] == host
    # the same content again, from either machine: idempotent
    before = store_files(server.store)
    assert _pairs(upload_episodes(task, [3], server=server.url, token=tok, registry=False)) == [(3, "duplicate", 4)]
    moved_a = tmp_path / "lab" / "machine_a" / "cloned"
    assert _pairs(upload_episodes(moved_a, [3], server=server.url, token=tok, registry=False)) == [
        (3, "duplicate", 3)]
    assert store_files(server.store) == before
    eps = _episodes(server, tokens[1]["reader"], "cloned")
    assert [(e["episode_index"], e["uploaded_by"]["client_host_id"] == host, e["uploaded_by"]["client_episode_index"])
            for e in eps] == [(1, True, 1), (2, True, 2), (3, True, 3), (4, True, 3)]


_V1_EPISODES = """CREATE TABLE episodes (
    task TEXT NOT NULL, episode_index INTEGER NOT NULL, client_host_id TEXT NOT NULL, client_hostname TEXT NOT NULL,
    client_episode_index INTEGER NOT NULL, episode_digest TEXT NOT NULL, upload_id INTEGER NOT NULL, token_id TEXT,
    imported_at REAL NOT NULL, length INTEGER NOT NULL, streams TEXT NOT NULL, validation TEXT NOT NULL,
    PRIMARY KEY (task, episode_index), UNIQUE (task, client_host_id, client_episode_index))"""


def _as_version_1(db: Path, declared: str) -> None:
    """Turn a server.db into the schema of version 1 (the unique (task, host id, client N)), with the
    host ids an egopool before the client key recorded: the manifest's declared ones."""
    con = sqlite3.connect(db)
    with con:
        con.execute("ALTER TABLE episodes RENAME TO e2")
        con.execute(_V1_EPISODES)
        con.execute("INSERT INTO episodes SELECT * FROM e2")
        con.execute("DROP TABLE e2")
        con.execute("UPDATE episodes SET client_host_id = ?", (declared,))
        con.execute("PRAGMA user_version = 1")
    con.close()


def test_a_version_1_catalog_keeps_working(tmp_path: Path) -> None:
    pc = simulate(tmp_path / "pc", "old", 2, seed=3)
    store = tmp_path / "store"
    with ServerProc(store) as srv:
        assert upload_episodes(pc, server=srv.url).ok
    db = store / ".egopool-server/server.db"
    _as_version_1(db, "0123456789abcdef0123456789abcdef")
    shutil.copytree(tmp_path / "pc", tmp_path / "copy")  # with its pipeline.db: same N from now on
    simulate(tmp_path / "pc", "old", 1, seed=4)
    simulate(tmp_path / "copy", "old", 1, seed=5)
    with ServerProc(store) as srv:
        eps = httpx.get(f"{srv.url}/api/v1/tasks/old/episodes").json()["episodes"]
        assert [(e["episode_index"], e["uploaded_by"]["client_host_id"]) for e in eps] == [
            (1, "0123456789abcdef0123456789abcdef"), (2, "0123456789abcdef0123456789abcdef")]
        con = sqlite3.connect(db)
        version = con.execute("PRAGMA user_version").fetchone()[0]
        table = con.execute("SELECT sql FROM sqlite_master WHERE name = 'episodes'").fetchone()[0]
        con.close()
        assert version == _SCHEMA_VERSION and "UNIQUE" not in table
        before = store_files(store)
        assert _pairs(upload_episodes(pc, [1, 2], server=srv.url, registry=False)) == [(1, "duplicate", 1),
                                                                                       (2, "duplicate", 2)]
        assert store_files(store) == before
        assert _pairs(upload_episodes(pc, server=srv.url))[2:] == [(3, "uploaded", 3)]
        assert _pairs(upload_episodes(tmp_path / "copy" / "old", server=srv.url))[2:] == [(3, "uploaded", 4)]
    assert validate_task(store / "old").ok


def test_host_id_is_the_keys(tmp_path: Path) -> None:
    (tmp_path / "root" / "task").mkdir(parents=True)
    reg = Registry.for_task(tmp_path / "root" / "task")
    ident = reg.identity()
    assert len(ident.key) == 64 and ident.host_id == host_id_of_key(ident.key) == reg.host_id()
    assert ident.key not in ident.host_id and ident.notice is None
    assert reg.identity() == ident  # kept


@pytest.mark.parametrize("text", ["a" * 64 + "\n", "A" * 64, "a" * 63, "a" * 65, " " + "a" * 63])
def test_a_client_key_is_exactly_64_lowercase_hex(text: str) -> None:
    """"$" of a regex matches before a final newline: a key with one is refused like any other non-key."""
    from egopool.errors import FormatError
    from egopool.identity import check_client_key

    assert check_client_key("0123456789abcdef" * 4) == "0123456789abcdef" * 4
    with pytest.raises(FormatError, match="not a client key"):
        check_client_key(text)
