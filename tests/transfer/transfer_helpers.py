"""Helpers of the pack / upload / server tests: a real `egopool serve` process on loopback, zip surgery."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ops"))
from backends import wait_for  # noqa: E402  (the pause seams' wait, shared with the ops and edit tests)
from ops_helpers import clone_episode, snapshot, write_task  # noqa: E402  (shared task builders)

from egopool.cli.app import main as cli  # noqa: E402
from egopool.transfer.manifest import MANIFEST_NAME, MemberRecord, episode_digest  # noqa: E402

__all__ = ["ServerProc", "clone_episode", "cli", "previews_settled", "rebuild_zip", "server_pids", "simulate", "snapshot",
           "store_files", "verify_workers", "wait_for", "write_task"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_pids(pid: int) -> list[int]:
    """The server process and its descendants (the verification workers, docs/decisions.md U14)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return sorted(out)


def verify_workers(pid: int) -> list[int]:
    """The server's verification worker processes (``multiprocessing`` spawn children, docs/decisions.md U14;
    not its resource tracker)."""
    out = []
    for p in server_pids(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes():
                out.append(p)
        except OSError:
            continue
    return out


class ServerProc:
    """``python -m egopool serve`` in a subprocess on a free loopback port (started and stopped by the test)."""

    def __init__(self, store: Path, *args: str, env: dict[str, str] | None = None, port: int | None = None,
                 store_arg: str | None = None) -> None:
        self.store = Path(store)
        self.store_arg = store_arg or str(self.store)  # e.g. s3://bucket/prefix (then ``store`` is the state dir)
        self.args = list(args)
        self.env = {**os.environ, **(env or {})}
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.store.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 120.0) -> ServerProc:  # a loaded 2-core machine starts Python slowly
        self.store.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "egopool", "serve", "--store", self.store_arg,
                                          "--port", str(self.port), "--log-level", "warning", *self.args],
                                         stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not come up: {self.log.read_text()[-2000:]}")

    def wait_workers(self, timeout: float = 300.0) -> ServerProc:
        """Wait until the server's verification workers have started (``/healthz`` ``workers``: U14)."""
        deadline = time.monotonic() + timeout
        while httpx.get(self.url + "/healthz", timeout=10.0).json().get("workers") != "ready":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the verification workers did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)
        return self

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> ServerProc:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def previews_settled(store: Path, timeout: float = 600.0) -> None:
    """Wait until the server has no preview queued or being built (``server.db``; docs/decisions.md Q5): a test
    measuring what the server writes must not count the background builds of earlier uploads."""
    import sqlite3

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        con = sqlite3.connect(store / ".egopool-server" / "server.db", timeout=30)
        try:
            pending = con.execute("SELECT COUNT(*) FROM previews WHERE state = 'pending'").fetchone()[0]
        finally:
            con.close()
        if not pending:
            return
        time.sleep(0.2)
    raise TimeoutError("previews still pending")


def simulate(root: Path, task: str, episodes: int, rig: str = "uvc3", seconds: float = 0.3, seed: int = 0) -> Path:
    """Record a simulated rig (real writer and recorder) into ``root/task``."""
    rc = cli(["simulate", "--rig", rig, "--episodes", str(episodes), "--seconds", str(seconds), "--scale", "8",
              "--out", str(root), "--task", task, "--seed", str(seed), "--json"])
    assert rc == 0
    return root / task


def store_files(store: Path) -> dict[str, str]:
    """Every file of the store's tasks (dotfiles included) -> sha256; the server's own state dir excluded
    (not even walked: its trash/ is being emptied by the server's background thread, docs/decisions.md U13)."""
    out: dict[str, str] = {}
    for entry in sorted(store.iterdir()) if store.is_dir() else []:
        if entry.name == ".egopool-server":
            continue
        if entry.is_dir() and not entry.is_symlink():
            out[entry.name] = "dir"
            out.update({f"{entry.name}/{k}": v for k, v in snapshot(entry).items()})
        else:
            out[entry.name] = hashlib.sha256(entry.read_bytes()).hexdigest()
    return out


def rebuild_zip(src: Path, dst: Path, *, replace: dict[str, bytes | None] | None = None,
                add: list[tuple[zipfile.ZipInfo | str, bytes]] | None = None, fix_manifest: bool = True) -> Path:
    """Copy an upload zip with members replaced (None = dropped) or added; the manifest is rewritten to
    match (``fix_manifest``), so only the change under test is wrong."""
    replace = dict(replace or {})
    members: list[tuple[zipfile.ZipInfo | str, bytes]] = []
    with zipfile.ZipFile(src) as z:
        manifest = json.loads(z.read(MANIFEST_NAME))
        for info in z.infolist():
            if info.filename == MANIFEST_NAME:
                continue
            data = replace.pop(info.filename, z.read(info)) if info.filename in replace else z.read(info)
            if data is not None:
                members.append((info.filename, data))
    for name, data in replace.items():
        if data is not None:
            members.append((name, data))
    members += add or []
    if fix_manifest:
        recs = []
        for info, data in members:
            name = info if isinstance(info, str) else info.filename
            old = next((m for m in manifest["members"] if m["name"] == name), {})
            rec = {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            if "source_sha256" in old:
                rec["source_sha256"], rec["reencoded"] = old["source_sha256"], old["reencoded"]
            recs.append(rec)
        manifest["members"] = recs
        manifest["episode_digest"] = _digest(recs)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for info, data in members:
            z.writestr(info, data)
        z.writestr(MANIFEST_NAME, json.dumps(manifest))
    dst.write_bytes(buf.getvalue())
    return dst


def _digest(recs: list[dict[str, object]]) -> str:
    return episode_digest(MemberRecord(str(r["name"]), int(r["size"]), str(r["sha256"]),  # type: ignore[arg-type]
                                       r.get("source_sha256"), r.get("reencoded")) for r in recs)  # type: ignore[arg-type]
