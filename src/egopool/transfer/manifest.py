"""The upload zip: its arcname grammar and its manifest (file_format.md §9).

An upload zip is a single-episode slice whose arcnames are exactly the pooled paths
relative to the task (§9)::

    videos/chunk-{c:03d}/<image_key>/episode-{f:03d}.{mp4|mkv}   # this episode's streams
    data/chunk-{c:03d}/episode-{f:03d}.parquet                     # its data
    meta/episodes/chunk-{c:03d}/episode-{f:03d}.parquet            # its single-row meta file
    meta/info.json, meta/stats.json, meta/tasks.jsonl              # task-level snapshot

plus one member of egopool's own, :data:`MANIFEST_NAME`, holding the size and sha256 of
every other member, the egopool version and the source host id, so a receiver can
verify what it got before it changes anything. Both the packer and the server use
:func:`parse_arcname`; nothing else is ever in a zip (no dotfiles, no §11 files).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError

__all__ = [
    "EPISODE_KINDS",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "TASK_FILES",
    "Arcname",
    "Manifest",
    "MemberRecord",
    "episode_digest",
    "parse_arcname",
    "video_arcname",
]

#: The manifest member (at the zip root: not a task path, so it can never shadow one).
MANIFEST_NAME = "egopool_manifest.json"
MANIFEST_FORMAT = "egopool_upload_v1"
#: Task-level snapshot members (§9).
TASK_FILES = {"meta/info.json": "info", "meta/stats.json": "stats", "meta/tasks.jsonl": "tasks"}
#: Members that belong to the episode itself (their sha256 make the episode digest).
EPISODE_KINDS = ("video", "data", "row")

_NUM = r"(?P<c>\d{3,})"
_FILE = r"(?P<f>\d{3,})"
# \Z, never $: "$" also matches before a final newline, and "episode-000.parquet\n" is another file
_DATA_RE = re.compile(rf"^data/chunk-{_NUM}/episode-{_FILE}\.parquet\Z")
_ROW_RE = re.compile(rf"^meta/episodes/chunk-{_NUM}/episode-{_FILE}\.parquet\Z")
# An image_key is one path segment of letters, digits, '_' and '-' (Unicode letters allowed),
# never starting with '.', '_' or '-' (dot names are temps, '_' names are §11 leftovers).
_VIDEO_RE = re.compile(rf"^videos/chunk-{_NUM}/(?P<key>[^\W_][\w-]*)/episode-{_FILE}\.(?P<ext>mp4|mkv)\Z")


@dataclass(frozen=True)
class Arcname:
    """One member name parsed against the §9 grammar.

    Attributes
    ----------
    kind:
        ``"video"``, ``"data"``, ``"row"`` (the episode's meta file), ``"info"``, ``"stats"``,
        ``"tasks"`` or ``"manifest"``.
    chunk, file:
        ``(c, f)`` of an episode member (None for task files and the manifest).
    image_key, ext:
        Of a video member.
    """

    kind: str
    chunk: int | None = None
    file: int | None = None
    image_key: str | None = None
    ext: str | None = None


def parse_arcname(name: str) -> Arcname | None:
    """Parse a zip member name; None when it is not in the §9 grammar.

    Numbers must be written as the templates write them (``{c:03d}``: ``chunk-000``, never
    ``chunk-0000`` for 0), so one episode has exactly one spelling.
    """
    if name == MANIFEST_NAME:
        return Arcname("manifest")
    if name in TASK_FILES:
        return Arcname(TASK_FILES[name])
    for kind, rx in (("data", _DATA_RE), ("row", _ROW_RE), ("video", _VIDEO_RE)):
        m = rx.match(name)
        if m is None:
            continue
        c, f = int(m["c"]), int(m["f"])
        if m["c"] != f"{c:03d}" or m["f"] != f"{f:03d}":
            return None
        if kind == "video":
            return Arcname(kind, c, f, m["key"], m["ext"])
        return Arcname(kind, c, f)
    return None


def video_arcname(chunk: int, file: int, image_key: str, ext: str) -> str:
    """``videos/chunk-{c:03d}/<image_key>/episode-{f:03d}.{ext}``."""
    return f"videos/chunk-{chunk:03d}/{image_key}/episode-{file:03d}.{ext}"


@dataclass(frozen=True)
class MemberRecord:
    """What the manifest says about one member.

    Attributes
    ----------
    name:
        The arcname.
    size:
        Bytes of the member as stored in the zip (uncompressed).
    sha256:
        Hex digest of those bytes.
    source_sha256:
        Digest of the file as recorded when the member is a re-encoded video (§9 HEVC
        pre-compression); None when the member is the recorded file itself.
    reencoded:
        ``"hevc"`` for a re-encoded RGB video, else None.
    """

    name: str
    size: int
    sha256: str
    source_sha256: str | None = None
    reencoded: str | None = None

    @property
    def recorded_sha256(self) -> str:
        """sha256 of the file as recorded on the collection PC."""
        return self.source_sha256 or self.sha256

    def to_dict(self) -> dict[str, Any]:
        """JSON form (optional keys only when set)."""
        out: dict[str, Any] = {"name": self.name, "size": self.size, "sha256": self.sha256}
        if self.source_sha256 is not None:
            out["source_sha256"] = self.source_sha256
        if self.reencoded is not None:
            out["reencoded"] = self.reencoded
        return out


def episode_digest(members: Iterable[MemberRecord]) -> str:
    """sha256 identifying an episode's recorded content (videos, data, meta row; never task files).

    Over the sorted lines ``<arcname>\\t<recorded sha256>``: the same recording gives the same
    digest whether or not its videos were re-encoded for the upload, and whatever the task
    files said at packing time. A server uses it to tell a re-upload of the same episode
    from a different episode under the same client N (docs/decisions.md U2).
    """
    lines = sorted(f"{m.name}\t{m.recorded_sha256}\n" for m in members
                   if (a := parse_arcname(m.name)) is not None and a.kind in EPISODE_KINDS)
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass
class Manifest:
    """The upload zip's manifest member (:data:`MANIFEST_NAME`).

    Attributes
    ----------
    task:
        Source task name.
    episode_index:
        The episode's global N on the source (1-based).
    chunk, file:
        Its ``(c, f)``; ``f`` is the form's ``episode_index`` (§9).
    source_host_id:
        The client's identity (32 hex, from its ``pipeline.db``, docs/decisions.md U2).
    source_hostname:
        The client's host name (display only).
    egopool_version:
        Version of the packer.
    created_at:
        Unix s of packing.
    members:
        One record per other member of the zip, in zip order.
    """

    task: str
    episode_index: int
    chunk: int
    file: int
    source_host_id: str
    source_hostname: str
    egopool_version: str
    created_at: float
    members: list[MemberRecord] = field(default_factory=list)

    @property
    def episode_digest(self) -> str:
        """:func:`episode_digest` of the members."""
        return episode_digest(self.members)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, members in order."""
        return {"format": MANIFEST_FORMAT, "egopool_version": self.egopool_version,
                "source_host_id": self.source_host_id, "source_hostname": self.source_hostname,
                "task": self.task, "episode_index": self.episode_index, "chunk": self.chunk, "file": self.file,
                "episode_digest": self.episode_digest, "created_at": self.created_at,
                "members": [m.to_dict() for m in self.members]}

    def to_bytes(self) -> bytes:
        """UTF-8 JSON, indented."""
        return (json.dumps(self.to_dict(), ensure_ascii=False, indent=1, allow_nan=False) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and check a manifest.

        Raises
        ------
        FormatError
            Not JSON, another ``format``, a missing or mistyped field, a duplicate member,
            or an ``episode_digest`` that does not match its members.
        """
        try:
            doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
        except (UnicodeDecodeError, ValueError) as exc:
            raise FormatError(f"{MANIFEST_NAME} is not JSON ({exc})") from exc
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
            raise FormatError(f"{MANIFEST_NAME}: format must be {MANIFEST_FORMAT!r}",
                              hint="pack the episode with `egopool pack` / `egopool upload`")
        try:
            members = [_member(m) for m in doc["members"]]
            out = cls(_str(doc, "task"), _int(doc, "episode_index", 1), _int(doc, "chunk", 0), _int(doc, "file", 0),
                      _str(doc, "source_host_id"), _str(doc, "source_hostname"), _str(doc, "egopool_version"),
                      float(doc["created_at"]), members)
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"{MANIFEST_NAME}: missing or malformed field ({exc})") from exc
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise FormatError(f"{MANIFEST_NAME} lists a member twice")
        if doc.get("episode_digest") != out.episode_digest:
            raise FormatError(f"{MANIFEST_NAME}: episode_digest does not match the listed members")
        return out

    def by_name(self) -> Mapping[str, MemberRecord]:
        """Members keyed by arcname."""
        return {m.name: m for m in self.members}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate key")
    return dict(pairs)


def _str(doc: Mapping[str, Any], key: str) -> str:
    v = doc[key]
    if not isinstance(v, str):
        raise TypeError(f"{key} must be a string")
    return v


def _int(doc: Mapping[str, Any], key: str, low: int) -> int:
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{key} must be an integer >= {low}")
    return v


def _member(raw: Any) -> MemberRecord:
    if not isinstance(raw, dict):
        raise TypeError("a member must be an object")
    size = _int(raw, "size", 0)
    sha = _str(raw, "sha256")
    src = raw.get("source_sha256")
    for h in (sha, src):
        if h is not None and (not isinstance(h, str) or not _HEX64.match(h)):
            raise ValueError("sha256 must be 64 lowercase hex digits")
    reenc = raw.get("reencoded")
    if reenc is not None and reenc != "hevc":
        raise ValueError("reencoded must be 'hevc'")
    return MemberRecord(_str(raw, "name"), size, sha, src, reenc)
