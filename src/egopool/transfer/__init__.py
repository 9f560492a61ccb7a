"""Moving episodes off the collection PC (file_format.md §9): pack, upload.

Imports run one way: ``client`` -> ``pack`` -> ``manifest`` (and ``client`` -> ``spool``, where
zips are packed); the server
(:mod:`egopool.server`) shares ``manifest`` (the arcname grammar) and nothing else.
"""

from __future__ import annotations

from .client import UploadOutcome, UploadReport, upload_episodes
from .manifest import MANIFEST_NAME, Manifest, MemberRecord, episode_digest, parse_arcname
from .pack import PackedEpisode, client_identity, pack_episode, pack_episodes

__all__ = ["MANIFEST_NAME", "Manifest", "MemberRecord", "PackedEpisode", "UploadOutcome", "UploadReport",
           "client_identity", "episode_digest", "pack_episode", "pack_episodes", "parse_arcname", "upload_episodes"]
