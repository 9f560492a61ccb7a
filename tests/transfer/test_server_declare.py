"""Who declares a task (docs/decisions.md U15), against a real ``egopool serve`` on loopback.

The first upload of a task sets its fps, columns and streams, and every later upload must match them
(409 ``declaration_conflict``). So a holder of a shared ``upload:*`` token who uploaded first (an fps of
15 where the lab records 30) made every other PC's uploads to that task 409. Now only a token that may
declare the task (``declare:<task>``, ``declare:*``, or ``upload:<task>``) creates it or adds a column or
stream it does not declare; ``upload:*`` adds episodes that fit.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from transfer_helpers import ServerProc, store_files

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.errors import TransferError
from egopool.transfer import pack_episode

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from egopool.server.tokens import add_token  # noqa: E402
from egopool.transfer import upload_episodes  # noqa: E402

GLOVE = "observation.right_glove"


def _record(root: Path, task: str, *, fps: float = 30.0, extra: bool = False, episodes: int = 1) -> Path:
    """Real episodes of a 4-value glove and a 32x24 stream; ``extra`` adds a column the lab's task lacks."""
    tw = TaskWriter(root, task, fps=fps)
    cols = [vector_column(GLOVE, [4])] + ([vector_column("observation.left_glove", [4])] if extra else [])
    for k in range(episodes):
        ep = tw.begin_episode(columns=cols, streams=[StreamSpec("cam", "rgb", 32, 24)], sensors=["right_glove"],
                              sensor_dim=4)
        for i in range(3):
            row = {GLOVE: np.arange(4, dtype=np.float32) + k + i}
            if extra:
                row["observation.left_glove"] = np.ones(4, np.float32)
            ep.add_frame(row, images={"cam": np.full((24, 32, 3), 10 * i, np.uint8)})
        ep.finish()
    return root / task


def _post(srv: ServerProc, task_dir: Path, n: int, token: str, zips: Path) -> httpx.Response:
    packed = pack_episode(task_dir, n, zips)
    return httpx.post(srv.url + "/api/v1/session/upload",
                      data={"name": task_dir.name, "episode_index": str(packed.file)},
                      files={"file": (packed.path.name, packed.path.read_bytes(), "application/zip")},
                      headers={"Authorization": f"Bearer {token}"}, timeout=120)


@pytest.fixture()
def tokens(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "tokens.json"
    return path, {"lab": add_token(path, "lab", ["upload:*"]),  # every collection PC shares it
                  "rogue": add_token(path, "rogue", ["upload:*"]),
                  "operator": add_token(path, "operator", ["declare:pick"]),
                  "pick_pc": add_token(path, "pick_pc", ["upload:pick"]),
                  "admin": add_token(path, "admin", ["declare:*", "read"])}


def test_a_shared_upload_token_cannot_pin_a_new_task_s_declarations(tmp_path: Path, tokens) -> None:
    path, tok = tokens
    wrong = _record(tmp_path / "rogue", "pick", fps=15.0)
    lab = _record(tmp_path / "lab", "pick", fps=30.0, episodes=2)
    with ServerProc(tmp_path / "store", "--tokens", str(path)) as srv:
        before = store_files(srv.store)
        resp = _post(srv, wrong, 1, tok["rogue"], tmp_path / "z1")  # first to the task name, at the wrong fps
        assert resp.status_code == 403, resp.text
        body = resp.json()
        assert body["error"] == "may_not_declare"
        assert "task 'pick' does not exist on this server" in body["message"]
        assert "declare:pick" in body["message"]
        assert store_files(srv.store) == before and not (srv.store / "pick").exists()

        # the client stops with one line naming the scope (no episode is confirmed)
        with pytest.raises(TransferError, match=r"may not create it .*declare:pick") as err:
            upload_episodes(lab, server=srv.url, token=tok["lab"], registry=False)
        assert err.value.status == 403 and "the server's operator declares it" in err.value.one_line()

        # the operator's token declares it with the lab's first episode; then the shared token fills it
        assert upload_episodes(lab, [1], server=srv.url, token=tok["operator"], registry=False).ok
        assert upload_episodes(lab, [2], server=srv.url, token=tok["lab"], registry=False).ok
        resp = _post(srv, wrong, 1, tok["rogue"], tmp_path / "z2")  # the wrong fps now blocks only itself
        assert (resp.status_code, resp.json()["error"]) == (409, "declaration_conflict"), resp.text
        eps = httpx.get(srv.url + "/api/v1/tasks/pick/episodes", headers={"Authorization": f"Bearer {tok['admin']}"})
        assert [e["episode_index"] for e in eps.json()["episodes"]] == [1, 2]


def test_adding_a_column_is_declaring_it(tmp_path: Path, tokens) -> None:
    """A column the task does not declare yet would fix its dtype and shape for every later upload: only
    a token that may declare the task adds it."""
    path, tok = tokens
    lab = _record(tmp_path / "lab", "pick")
    more = _record(tmp_path / "pc2", "pick", extra=True, episodes=2)
    with ServerProc(tmp_path / "store", "--tokens", str(path)) as srv:
        assert upload_episodes(lab, [1], server=srv.url, token=tok["pick_pc"], registry=False).ok  # upload:pick
        before = store_files(srv.store)
        resp = _post(srv, more, 1, tok["rogue"], tmp_path / "z1")
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"] == "may_not_declare"
        assert "column 'observation.left_glove'" in resp.json()["message"]
        assert store_files(srv.store) == before
        assert upload_episodes(more, [1], server=srv.url, token=tok["admin"], registry=False).ok  # declare:*
        resp = _post(srv, more, 2, tok["rogue"], tmp_path / "z2")  # declared now: upload:* fits
        assert resp.status_code == 200, resp.text
        assert resp.json()["episode_index"] == 3


def test_without_tokens_every_upload_declares(tmp_path: Path) -> None:
    """A server without a tokens file (loopback only) has no one to tell apart: the first upload declares."""
    task = _record(tmp_path / "pc", "pick", fps=15.0)
    with ServerProc(tmp_path / "store") as srv:
        assert upload_episodes(task, server=srv.url, registry=False).ok
