"""The rows ``server.db`` holds, as Python values (docs/decisions.md U2, U5; curation Q-rules):
previews, pooled episodes, the upload log, reviews. :class:`~egopool.server.db.ServerDB` reads and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["UNDO", "UPLOAD_FIELDS", "VERDICTS", "EpisodeRow", "PreviewRow", "ReviewRow", "UploadRow"]

VERDICTS = {"accept": "accepted", "reject": "rejected", "flag": "flagged"}
#: the review row that takes back the last verdict in force (docs/decisions.md P2)
UNDO = "undo"


@dataclass(frozen=True)
class PreviewRow:
    """The previews of one episode (``previews`` row).

    Attributes
    ----------
    task, episode_index:
        Server task and N.
    state:
        ``"pending"`` (queued or being built), ``"ready"`` or ``"failed"``.
    error:
        One line: why the last build failed (None unless failed); no path of the server's disk.
    attempts:
        Builds tried since it was last queued.
    updated_at:
        Unix s.
    manifest:
        ``{"streams": [...], "signals": name|None}`` of the last build (None before one finished).
    """

    task: str
    episode_index: int
    state: str
    error: str | None
    attempts: int
    updated_at: float
    manifest: dict[str, Any] | None


@dataclass(frozen=True)
class EpisodeRow:
    """One pooled episode (``episodes`` row).

    Attributes
    ----------
    task, episode_index:
        Server task and server N.
    client_host_id, client_hostname, client_episode_index:
        Where it came from: the client's identity and its own N.
    episode_digest:
        sha256 over the recorded files (:func:`egopool.transfer.manifest.episode_digest`).
    upload_id, token_id:
        The upload that brought it and the token it used.
    imported_at:
        Unix s.
    length:
        Data rows.
    streams:
        image_keys of its videos.
    validation:
        ``{"ok": bool, "errors": int, "warnings": int}`` of the uploaded slice.
    """

    task: str
    episode_index: int
    client_host_id: str
    client_hostname: str
    client_episode_index: int
    episode_digest: str
    upload_id: int
    token_id: str | None
    imported_at: float
    length: int
    streams: list[str]
    validation: dict[str, Any]

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> EpisodeRow:
        """The row :meth:`to_dict` gave (a publish journal's ``episode``).

        Raises
        ------
        KeyError, TypeError
            A field is missing or not what the row holds.
        """
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"task": self.task, "episode_index": self.episode_index, "client_host_id": self.client_host_id,
                "client_hostname": self.client_hostname, "client_episode_index": self.client_episode_index,
                "episode_digest": self.episode_digest, "upload_id": self.upload_id, "token_id": self.token_id,
                "imported_at": self.imported_at, "length": self.length, "streams": self.streams,
                "validation": self.validation}


@dataclass(frozen=True)
class UploadRow:
    """One upload request (``uploads`` row); fields as in the table."""

    id: int
    received_at: float
    finished_at: float | None
    token_id: str | None
    client_addr: str | None
    task: str | None
    form_episode_index: int | None
    client_host_id: str | None
    client_hostname: str | None
    client_episode_index: int | None
    server_episode_index: int | None
    bytes: int | None
    zip_sha256: str | None
    outcome: str
    status: int | None
    reason: str | None
    message: str | None
    #: Seconds the body took to arrive and be spooled (docs/decisions.md U30).
    receive_s: float | None = None
    #: Seconds the spooled upload waited for a verification worker.
    queue_s: float | None = None
    #: Seconds of its verification (every attempt; in a worker process or a Ray task).
    verify_s: float | None = None
    #: Seconds from verified to answered: the publish, waiting for its task's group included.
    publish_s: float | None = None
    #: Verifications run (2: the first one's worker died and it was verified again).
    verify_attempts: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return dict(self.__dict__)


UPLOAD_FIELDS = tuple(UploadRow.__dataclass_fields__)


@dataclass(frozen=True)
class ReviewRow:
    """One verdict (``reviews`` row).

    Attributes
    ----------
    id:
        Ascending in time.
    task, episode_index:
        The episode (server N).
    verdict:
        ``accept``, ``reject`` or ``flag``; ``undo`` takes back the last verdict still in force (P2).
    reason:
        Free text ("" allowed for accept only).
    token_id:
        The reviewer's token id (None on a server without tokens).
    at:
        Unix s.
    """

    id: int
    task: str
    episode_index: int
    verdict: str
    reason: str
    token_id: str | None
    at: float

    @property
    def state(self) -> str:
        """``accepted``, ``rejected``, ``flagged``, or ``undone`` for an ``undo`` row (docs/decisions.md P2)."""
        return VERDICTS.get(self.verdict, "undone")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (with ``state``)."""
        return {**self.__dict__, "state": self.state}
