"""Readers of the pooling server see an episode from its commit on, never half of one, never one that vanishes
(issue 15 A, docs/decisions.md U5).

A poller thread reads the store the way every reader does — the read API, the HTML page, a download, and
``egopool.open_task`` on the store directory — again and again while several-MB full-rig episodes are imported
into a real ``egopool serve`` on loopback, and across a SIGKILL of the server at a publish stage
(``EGOPOOL_SERVER_PAUSE``) and its restart on the same port. Every observation is checked: each listed episode
whole (data, row, its 5 videos, its length and uploader), no listed episode ever gone afterwards, no task listed
before its first episode committed.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from transfer_helpers import ServerProc, cli, wait_for

from egopool import open_task
from egopool.errors import EgopoolError
from egopool.identity import token_host_id
from egopool.layout import TaskLayout, list_task_episodes
from egopool.meta.info import read_info
from egopool.transfer import PackedEpisode, pack_episode
from egopool.validate import validate_task

pytestmark = pytest.mark.extra("server")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

TASK = "pick"
STREAMS = ["gripper_2_rgb", "gripper_rgb", "stereo_depth", "stereo_left", "stereo_right"]  # --rig full


@dataclass(frozen=True)
class Recorded:
    """A simulated full-rig task (4 episodes, ~4.8 MB each) and its packed zips by N."""

    task: Path
    zips: dict[int, PackedEpisode]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    root = tmp_path_factory.mktemp("pc")
    assert cli(["simulate", "--rig", "full", "--scale", "2", "--seconds", "3", "--episodes", "4", "--out", str(root),
                "--task", TASK, "--seed", "3", "--json"]) == 0
    task = root / TASK
    zips = {n: pack_episode(task, n, root / "zips", host_id="pc-host-1", hostname="pc1") for n in (1, 2, 3, 4)}
    assert all(z.path.stat().st_size > 4_000_000 for z in zips.values())  # several MB each
    return Recorded(task, zips)


def _files_of(n: int) -> list[str]:
    f = n - 1  # chunk 0, chunks_size 1000
    return sorted([f"data/chunk-000/episode-{f:03d}.parquet", f"meta/episodes/chunk-000/episode-{f:03d}.parquet"]
                  + [f"videos/chunk-000/{k}/episode-{f:03d}.mp4" for k in STREAMS])


@dataclass
class Poller:
    """Reads the store like every reader, in a loop; records what it saw and every broken rule.

    Two threads, one on the read API (with the page and a download), one on ``open_task``, so each polls as
    often as it can. ``phase`` is set by the test; each observation is labelled with the phase read after it
    was made, so an episode first seen in phase P was listed before the test moved on from P.
    """

    url: str
    store: Path
    phase: str = "start"
    api_polls: int = 0
    disk_polls: int = 0
    first_seen: dict[int, str] = field(default_factory=dict)  # N -> phase (read API)
    first_seen_disk: dict[int, str] = field(default_factory=dict)  # N -> phase (open_task on the store)
    task_first_seen: str | None = None
    violations: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Poller:
        self._threads = [threading.Thread(target=self._run_api, daemon=True),
                         threading.Thread(target=self._run_disk, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def wait_polls(self, more: int = 3, timeout: float = 120.0) -> None:
        """Until both readers completed ``more`` further polls (a count, not a duration)."""
        api, disk = self.api_polls + more + 1, self.disk_polls + more + 1  # +1: the poll in progress
        deadline = time.monotonic() + timeout
        while self.api_polls < api or self.disk_polls < disk:
            assert time.monotonic() < deadline, f"the poller stalled ({self.api_polls}, {self.disk_polls} polls)"
            time.sleep(0.02)

    def _bad(self, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(f"[{self.phase}] {what}")

    def _run_api(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30.0) as client:
            while not self._stop.is_set():
                try:
                    self._poll_api(client)
                except httpx.TransportError:  # the server is down (killed, restarting)
                    pass
                self.api_polls += 1

    def _run_disk(self) -> None:
        while not self._stop.is_set():
            self._poll_disk()
            self.disk_polls += 1

    def _poll_api(self, client: httpx.Client) -> None:
        names = [t["name"] for t in client.get("/api/v1/tasks").raise_for_status().json()["tasks"]]
        phase = self.phase
        if TASK not in names:
            if self.task_first_seen is not None:
                self._bad(f"task {TASK!r} vanished from /api/v1/tasks")
            return
        if self.task_first_seen is None:
            self.task_first_seen = phase
        r = client.get(f"/api/v1/tasks/{TASK}/episodes")
        if r.status_code != 200:
            self._bad(f"episodes listing answered {r.status_code}: {r.text[:200]}")
            return
        eps = r.json()["episodes"]
        phase = self.phase
        listed = {ep["episode_index"]: ep for ep in eps}
        for n in self.first_seen.keys() - listed.keys():
            self._bad(f"episode {n} vanished from the read API")
        for n, ep in listed.items():
            self.first_seen.setdefault(n, phase)
            whole = (ep["complete"] is True and isinstance(ep["length"], int) and ep["length"] > 0
                     and ep["streams"] == STREAMS and sorted(ep["files"]) == _files_of(n)
                     and ep["uploaded_by"] is not None and ep["validation"] is not None)
            if not whole:
                self._bad(f"episode {n} listed half: complete={ep['complete']} length={ep['length']} "
                          f"streams={ep['streams']} files={len(ep['files'])} uploaded_by={ep['uploaded_by']}")
        page = client.get(f"/tasks/{TASK}?limit=500").text  # the task page: its search reads journals + server.db
        table = re.search(rf'<table id="episodes-{TASK}">.*?</table>', page, re.S)
        on_page = {int(v) for v in re.findall(r'/episodes/(\d+)[^"]*">\d+</a>', table.group(0))} if table else set()
        if set(self.first_seen) - on_page:  # the page is built after the listing: it holds at least as much
            self._bad(f"the page lists {sorted(on_page)}, the read API listed {sorted(self.first_seen)}")
        if listed:
            n = max(listed)
            data = _files_of(n)[0]
            d = client.get(f"/api/v1/tasks/{TASK}/episodes/{n}/files/{data}")
            if d.status_code != 200:
                self._bad(f"download of listed episode {n}'s {data} answered {d.status_code}")

    def _poll_disk(self) -> None:
        root = self.store / TASK
        if not (root / "meta" / "info.json").is_file():
            if self.first_seen_disk:
                self._bad(f"open_task: the task is gone after episodes {sorted(self.first_seen_disk)} were seen")
            return
        try:
            eps = open_task(root).episodes()
        except EgopoolError as exc:  # only the rollback of a task created by a killed import may remove it
            if self.first_seen_disk:
                self._bad(f"open_task failed after episodes were seen: {exc.one_line()}")
            return
        phase = self.phase
        listed = {ep.index: ep for ep in eps}
        for n in self.first_seen_disk.keys() - listed.keys():
            self._bad(f"episode {n} vanished from open_task")
        for n, ep in listed.items():
            self.first_seen_disk.setdefault(n, phase)
            if ep.files.data is None or ep.files.meta is None or sorted(ep.files.videos) != STREAMS:
                self._bad(f"open_task lists episode {n} half: data={ep.files.data} meta={ep.files.meta} "
                          f"videos={sorted(ep.files.videos)}")


def _post(url: str, packed: PackedEpisode) -> httpx.Response:
    return httpx.post(url + "/api/v1/session/upload", data={"name": TASK, "episode_index": str(packed.file)},
                      files={"file": (packed.path.name, packed.path.read_bytes(), "application/zip")}, timeout=300)


def _post_in_thread(url: str, packed: PackedEpisode) -> tuple[threading.Thread, list[object]]:
    result: list[object] = []

    def run() -> None:
        try:
            result.append(_post(url, packed))
        except httpx.TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def _db_episodes(store: Path) -> list[int]:
    con = sqlite3.connect(store / ".egopool-server/server.db")
    try:
        return [r[0] for r in con.execute("SELECT episode_index FROM episodes WHERE task = ? ORDER BY 1", (TASK,))]
    finally:
        con.close()


def _consistent(url: str, store: Path) -> list[int]:
    """The read API, the committed episodes on disk and server.db agree; returns the N listed."""
    root = store / TASK
    assert not list((store / ".egopool-server/journals").iterdir())
    if not root.exists():  # a task whose first import was rolled back is gone whole
        assert TASK not in [t["name"] for t in httpx.get(f"{url}/api/v1/tasks").json()["tasks"]]
        assert httpx.get(f"{url}/api/v1/tasks/{TASK}/episodes").status_code == 404
        assert _db_episodes(store) == []
        return []
    eps = httpx.get(f"{url}/api/v1/tasks/{TASK}/episodes").json()["episodes"]
    on_disk = [g.index for g in list_task_episodes(root) if g.meta is not None]  # committed: the row exists
    assert [e["episode_index"] for e in eps] == on_disk == _db_episodes(store)
    layout = TaskLayout.from_info(root, read_info(root))
    for e in eps:
        # zips posted without the client key: the host id derives from the token and the declared one (U11)
        assert e["complete"] and e["uploaded_by"]["client_host_id"] == token_host_id(None, "pc-host-1")
        assert e["length"] == pq.ParquetFile(layout.data_file(e["episode_index"])).metadata.num_rows
    summary = {t["name"]: t for t in httpx.get(f"{url}/api/v1/tasks").json()["tasks"]}
    assert summary[TASK]["episodes"] == len(eps)
    return on_disk


def test_a_poller_never_sees_an_episode_before_its_commit_nor_one_vanish(recorded: Recorded, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with ServerProc(store) as srv:
        poller = Poller(srv.url, store).start()
        try:
            poller.phase = "importing"
            first = _post(srv.url, recorded.zips[1])  # creates the task
            assert first.status_code == 200, first.text
            threads = [_post_in_thread(srv.url, recorded.zips[n]) for n in (2, 3)]  # two imports at once
            for t, _ in threads:
                t.join(300)
            for n in (4,):
                r = _post(srv.url, recorded.zips[n])
                assert r.status_code == 200, r.text
            for _, res in threads:
                assert isinstance(res[0], httpx.Response) and res[0].status_code == 200, res
            poller.phase = "done"
            poller.wait_polls()
        finally:
            poller.stop()
        assert poller.violations == []
        assert sorted(poller.first_seen) == sorted(poller.first_seen_disk) == [1, 2, 3, 4]
        assert _consistent(srv.url, store) == [1, 2, 3, 4]
    assert validate_task(store / TASK).ok


@pytest.mark.parametrize(("stage", "new_task"), [("placed", False), ("placed", True), ("committed", False)])
def test_sigkill_mid_publish_then_restart_no_reader_sees_an_episode_come_and_go(
        recorded: Recorded, tmp_path: Path, stage: str, new_task: bool) -> None:
    store = tmp_path / "store"
    target = 1 if new_task else 2
    port_srv = ServerProc(store)  # one port throughout: the poller's URL stays the same
    if not new_task:
        with ServerProc(store, port=port_srv.port) as srv:
            assert _post(srv.url, recorded.zips[1]).status_code == 200
    poller = Poller(port_srv.url, store)
    paused = ServerProc(store, env={"EGOPOOL_SERVER_PAUSE": stage}, port=port_srv.port).start()
    try:
        poller.start()
        poller.phase = "paused"
        thread, result = _post_in_thread(paused.url, recorded.zips[target])
        wait_for(store / ".egopool-server" / f"paused-{stage}")
        poller.wait_polls()
        data = _files_of(target)[0]
        assert (store / TASK / data).is_file()  # the episode's data parquet is placed
        download = httpx.get(f"{paused.url}/api/v1/tasks/{TASK}/episodes/{target}/files/{data}")
        assert download.status_code == (200 if stage == "committed" else 404)
    finally:
        paused.kill()
    thread.join(60)
    assert isinstance(result[0], httpx.TransportError)  # the client saw the connection die
    try:
        poller.phase = "restarted"
        with ServerProc(store, port=port_srv.port) as srv:
            poller.wait_polls()
            assert _consistent(srv.url, store) == ([] if new_task and stage == "placed" else
                                                   list(range(1, target + 1)) if stage == "committed" else [1])
            poller.phase = "reupload"
            again = _post(srv.url, recorded.zips[target])  # the client's retry completes
            assert again.status_code == 200, again.text
            assert (again.json()["status"], again.json()["episode_index"]) == (
                "duplicate" if stage == "committed" else "imported", target)
            poller.phase = "done"
            poller.wait_polls()
            assert _consistent(srv.url, store) == list(range(1, target + 1))
    finally:
        poller.stop()
    assert poller.violations == []
    # placed: nothing of the killed publish was ever listed; committed: listed from the commit on, never lost
    expect = {"paused"} if stage == "committed" else {"reupload", "done"}
    assert {poller.first_seen[target], poller.first_seen_disk[target]} <= expect
    if new_task:
        assert poller.task_first_seen in expect  # the task too exists from its first episode's commit on
    assert validate_task(store / TASK).ok
