"""The upload client without a server: refusals before sending, an unreachable server, an unpackable episode."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from pathlib import Path

import pytest
from transfer_helpers import write_task

from egopool import EpisodeNotFoundError, LayoutError
from egopool.errors import TransferError
from egopool.layout import list_task_episodes
from egopool.registry import Registry
from egopool.transfer import upload_episodes


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused at once
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_refusals_before_anything_is_sent(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=1)
    with pytest.raises(TransferError, match="http"):
        upload_episodes(task, server="pool.lab:8000")
    with pytest.raises(LayoutError, match="1-based"):
        upload_episodes(task, [0], server="http://127.0.0.1:9")
    with pytest.raises(EpisodeNotFoundError, match="no episode 4"):
        upload_episodes(task, [4], server="http://127.0.0.1:9")


def test_unreachable_server_fails_the_episode_and_stops(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=3)
    (task / "meta/episodes/chunk-000/episode-001.parquet").unlink()  # episode 2: incomplete, cannot be packed
    url = f"http://127.0.0.1:{_closed_port()}"
    report = upload_episodes(task, [2, 1, 3], server=url, retries=1, backoff=0.01, delete_after=True)
    assert [(o.index, o.status) for o in report.outcomes] == [(2, "failed"), (1, "failed")]  # 3 never tried
    assert "not packed" in report.outcomes[0].message and "episode 2 is not complete" in report.outcomes[0].message
    assert "giving up after 2 attempts" in report.outcomes[1].message and "ConnectError" in report.outcomes[1].message
    assert not report.ok
    assert [g.index for g in list_task_episodes(task)] == [1, 2, 3]  # nothing deleted
    assert Registry.for_task(task).uploads("pick") == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".egopool-upload")]  # spool removed


def test_serve_refuses_a_network_address_without_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transfer_helpers import cli

    assert cli(["serve", "--store", str(tmp_path / "store"), "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert "without --tokens" in err and err.count("\n") == 1
    assert not (tmp_path / "store").exists()


def test_token_cli_stores_only_hashes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import hashlib
    import json

    from transfer_helpers import cli

    tokens = tmp_path / "tokens.json"
    assert cli(["token", "add", "--tokens", str(tokens), "--id", "pc-1", "--scope", "upload:pick", "--scope", "read",
                "--json"]) == 0
    token = json.loads(capsys.readouterr().out)["token"]
    assert token.startswith("egp_") and len(token) == 47
    stored = json.loads(tokens.read_text())["tokens"]
    assert stored[0]["sha256"] == hashlib.sha256(token.encode()).hexdigest() and token not in tokens.read_text()
    assert tokens.stat().st_mode & 0o777 == 0o600
    assert cli(["token", "add", "--tokens", str(tokens), "--id", "pc-1", "--scope", "read"]) == 1  # id taken
    assert cli(["token", "add", "--tokens", str(tokens), "--id", "pc-2", "--scope", "write"]) == 1  # no such scope
    capsys.readouterr()
    assert cli(["token", "list", "--tokens", str(tokens), "--json"]) == 0
    assert [(t["id"], t["scopes"]) for t in json.loads(capsys.readouterr().out)["tokens"]] == [
        ("pc-1", ["upload:pick", "read"])]
    assert cli(["token", "revoke", "--tokens", str(tokens), "--id", "pc-1"]) == 0
    assert cli(["token", "revoke", "--tokens", str(tokens), "--id", "pc-1"]) == 1
    assert json.loads(tokens.read_text())["tokens"] == []


@pytest.mark.parametrize("server", ["http://[::1", "http://", "http://pool.lab:8000/?next=1", "http://:8000"])
def test_a_malformed_server_url_is_one_error(tmp_path: Path, server: str) -> None:
    task = write_task(tmp_path, episodes=1)
    with pytest.raises(TransferError, match="server URL"):
        upload_episodes(task, server=server)


@pytest.mark.parametrize("token", ["egp_abc\ndef", "egp_\u00e4bc", "egp_abc def", "egp_abcdef\n"])
def test_a_malformed_token_is_refused_unshown_before_anything_is_sent(tmp_path: Path, token: str) -> None:
    task = write_task(tmp_path, episodes=1)
    with pytest.raises(TransferError, match="token") as err:
        upload_episodes(task, server=f"http://127.0.0.1:{_closed_port()}", token=token, retries=3, backoff=5.0)
    assert "bc" not in str(err.value) and "def" not in str(err.value)  # a secret is never echoed


class _Answer(http.server.BaseHTTPRequestHandler):
    """Reads the request body, answers ``status`` with ``body`` (a server that is not egopool's)."""

    status, body, ctype = 404, b"<html>Not Found</html>", "text/html"
    posts: list[str] = []

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Type", self.ctype)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[_Answer]) -> tuple[http.server.ThreadingHTTPServer, str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def test_a_server_that_is_not_egopool_stops_the_run_and_nothing_is_deleted(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=3)

    class NotFound(_Answer):
        posts: list[str] = []

    srv, url = _serve(NotFound)
    try:
        report = upload_episodes(task, server=url + "/pool", delete_after=True, retries=0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert [(o.index, o.status) for o in report.outcomes] == [(1, "failed")]  # 2 and 3 never packed nor sent
    assert NotFound.posts == ["/pool/api/v1/session/upload"]
    assert "not an egopool server" in report.outcomes[0].message and "--server" in report.outcomes[0].message
    assert [g.index for g in list_task_episodes(task)] == [1, 2, 3]


def test_a_server_answering_garbage_confirms_nothing_and_nothing_is_deleted(tmp_path: Path) -> None:
    task = write_task(tmp_path, episodes=2)

    class Garbage(_Answer):
        status, ctype, posts = 200, "application/json", []
        body = json.dumps({"status": "imported", "episode_index": 1, "zip_sha256": "0" * 64}).encode()

    srv, url = _serve(Garbage)
    try:
        report = upload_episodes(task, server=url, delete_after=True, retries=0)
    finally:
        srv.shutdown()
        srv.server_close()
    assert [(o.index, o.status, o.deleted) for o in report.outcomes] == [(1, "failed", None), (2, "failed", None)]
    assert all("not confirmed" in o.message for o in report.outcomes)
    assert not report.ok
    assert [g.index for g in list_task_episodes(task)] == [1, 2]
    assert Registry.for_task(task).uploads("pick") == []


def test_templates_the_zip_cannot_carry_fail_every_episode_before_sending(tmp_path: Path) -> None:
    """The run's one Packer (docs/decisions.md U22) checks the templates once; each episode still fails
    "not packed" with the reason, as when each was packed on its own, and nothing is sent or recorded."""
    task = write_task(tmp_path, episodes=2)
    info = json.loads((task / "meta/info.json").read_text())
    info["data_path"] = "data/chunk-{c:03d}/file-{f:03d}.parquet"  # a legacy name: §9 arcnames are episode-
    (task / "meta/info.json").write_text(json.dumps(info))
    report = upload_episodes(task, [1, 2], server=f"http://127.0.0.1:{_closed_port()}", retries=0)
    assert [(o.index, o.status, o.attempts) for o in report.outcomes] == [(1, "failed", 0), (2, "failed", 0)]
    assert all("not packed" in o.message and "upload arcnames follow" in o.message for o in report.outcomes)
    assert Registry.for_task(task).uploads("pick") == []
