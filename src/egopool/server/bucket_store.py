"""A server store whose tasks live in a bucket (``egopool serve --store s3://bucket/prefix``; decisions O10).

::

    s3://bucket/prefix/
    ├── <task>/ ...                         pooled_episodes_v1 tasks (file_format.md §1)
    └── .egopool-server/journals/<h>/<N>.json   publish journals = N claims (a dot prefix: readers ignore it, §11)

    <state>/                                 local to the server (default: per-user state dir, one per store URI)
    ├── server.db, server.lock, owner-id     the catalog, one server per state directory, this server's journal owner
    ├── spool/, staging/, trash/, locks/     request bodies, uploads being verified, per-task import guards
    └── tasks/<task>/meta/                   scratch copies of a task's info.json / stats.json for the checks

The catalog database, spool and staging stay on the server's disk (a request body is
verified there before anything is PUT). Several servers, each with its own state directory,
may publish into one bucket: N is claimed in the bucket (:mod:`~egopool.server.bucket_publish`).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from ..errors import EgopoolError
from ..write.checks import check_task_name
from ..storage.bucket import Bucket, ObjectInfo
from .bucket_publish import new_owner_id
from .store import Store

__all__ = ["BucketStore", "default_state_dir", "hide_state"]


def default_state_dir(uri: str) -> Path:
    """``$XDG_STATE_HOME/egopool/serve/<sha1 of the URI, 16 hex>`` (``~/.local/state`` without XDG)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "egopool" / "serve" / hashlib.sha1(uri.rstrip("/").encode("utf-8")).hexdigest()[:16]


class BucketStore(Store):
    """Tasks in ``s3://bucket/prefix``, state in a local directory.

    Parameters
    ----------
    uri:
        ``s3://bucket/prefix`` (the bucket is created when missing).
    state:
        The local state directory (created); None: :func:`default_state_dir`.

    Raises
    ------
    EgopoolError
        boto3 missing, a malformed URI; ObjectStoreError: the bucket cannot be reached.
    """

    def __init__(self, uri: str, state: str | Path | None = None) -> None:
        self.bucket = Bucket(uri)
        self.bucket.ensure_bucket()
        st = Path(state) if state is not None else default_state_dir(uri)
        st.mkdir(parents=True, exist_ok=True)
        super().__init__(st, state_dir=st)
        self.uri = self.bucket.uri
        idf = self.state / "owner-id"
        if not idf.is_file():
            idf.write_text(new_owner_id() + "\n")
        self.owner = idf.read_text().strip()

    @property
    def tasks_root(self) -> Path:
        """A task's local scratch directory is ``<state>/tasks/<name>`` (its objects live in the bucket)."""
        return self.state / "tasks"

    def tasks(self) -> list[str]:
        """Task names readers see: ``<name>/`` prefixes holding ``meta/info.json`` (created after a task's first
        row, so a task exists from its first committed episode on)."""
        out = []
        for p in self.bucket.list("", delimiter="/"):
            if isinstance(p, ObjectInfo):
                continue
            name = p.rstrip("/")
            if name and not name.startswith((".", "_")) and self.bucket.exists(f"{name}/meta/info.json"):
                out.append(name)
        return sorted(out)

    def has_task(self, name: str) -> bool:
        """True when readers see task ``name``."""
        try:
            check_task_name(name)
        except EgopoolError:
            return False
        return self.bucket.exists(f"{name}/meta/info.json")

    def creating_tasks(self) -> set[str]:
        """None: a bucket task is hidden until its first commit by creating ``info.json`` after it."""
        return set()


def hide_state(text: str, state: Path) -> str:
    """``text`` with paths of the local state directory replaced (docs/decisions.md U10): a staged file by its
    task-relative path, a spool file by "the upload", anything else by "the server's state"."""
    root = re.escape(str(state))

    def repl(m: re.Match[str]) -> str:
        rel = m.group(1) or ""
        staged = re.match(r"/staging/[^/]+/[^/]+/(.*)", rel)
        if staged:
            return staged.group(1)
        return "the upload" if rel.startswith("/spool/") else "the server's state"

    return re.sub(root + r"(?![\w.-])(/[^\s'\"]*)?", repl, text)
