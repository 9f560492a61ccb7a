"""The settings of one ``egopool serve`` (:class:`ServerConfig`) and what its answers may name: never a path of
the server's disk (docs/decisions.md U10: :func:`hide_paths` for a directory store, :func:`hide_state` for a
bucket store's local state).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .previews import PreviewConfig
from .zipcheck import Limits

__all__ = ["ServerConfig", "hide_paths", "hide_state"]


@dataclass
class ServerConfig:
    """Settings of one server.

    Attributes
    ----------
    store:
        The store directory (tasks + ``.egopool-server/``), or ``s3://bucket/prefix`` (docs/decisions.md O10).
    state:
        A bucket store's local state directory (None: the per-user default).
    tokens:
        Tokens file, or None for no authentication (loopback only).
    on_conflict:
        ``"renumber"`` or ``"reject"`` (docs/decisions.md U2).
    limits:
        Request and zip limits.
    max_imports:
        Imports verified and published at the same time (the rest wait).
    max_receiving:
        Upload bodies received at the same time (the rest wait before their body is read).
    max_queue:
        Uploads admitted at a time: received, waiting for a verification worker or being verified; one more is
        answered 503 with ``Retry-After`` (docs/decisions.md U29).
    verify_processes:
        Verify uploads in ``max_imports`` worker processes (docs/decisions.md U14); False verifies in
        the server process's threads.
    verify_ray:
        Verify uploads as Ray tasks at this address (``serve --ray``, U28; ``""``: Ray's own resolution); None:
        worker processes (``verify_processes``).
    previews:
        The preview worker's settings (``enabled=False``: ``--no-previews``).
    """

    store: Path | str
    tokens: Path | None = None
    state: Path | None = None
    on_conflict: str = "renumber"
    limits: Limits = field(default_factory=Limits)
    max_imports: int = 2
    max_receiving: int = 32
    max_queue: int = 256
    verify_processes: bool = True
    verify_ray: str | None = None
    previews: PreviewConfig = field(default_factory=PreviewConfig)


def hide_paths(text: str, store: Path, tokens: Path | None = None) -> str:
    """``text`` with every path of the server's disk replaced: a staged file by its task-relative
    path, another file of the store by its store-relative path, the server's state directory,
    the store itself and the tokens file by a word."""
    roots = sorted({str(store.resolve()), os.path.abspath(store)}, key=len, reverse=True)

    def repl(m: re.Match[str]) -> str:
        rel = m.group(1) or ""
        staged = re.match(r"/\.egopool-server/staging/[^/]+/[^/]+/(.*)", rel)
        if staged:
            return staged.group(1)
        if rel.startswith("/.egopool-server"):
            return "the upload" if rel.startswith("/.egopool-server/spool/") else "the server's state"
        return rel.lstrip("/") or "the store"

    for root in roots:
        text = re.sub(re.escape(root) + r"(?![\w.-])(/[^\s'\"]*)?", repl, text)
    if tokens is not None:
        for t in {str(tokens.resolve()), os.path.abspath(tokens)}:
            text = text.replace(t, "the tokens file")
    return text


def hide_state(text: str, state: Path) -> str:
    """``text`` with paths of a bucket store's local state directory replaced (docs/decisions.md U10): a staged
    file by its task-relative path, a spool file by "the upload", anything else by "the server's state"."""
    root = re.escape(str(state))

    def repl(m: re.Match[str]) -> str:
        rel = m.group(1) or ""
        staged = re.match(r"/staging/[^/]+/[^/]+/(.*)", rel)
        if staged:
            return staged.group(1)
        return "the upload" if rel.startswith("/spool/") else "the server's state"

    return re.sub(root + r"(?![\w.-])(/[^\s'\"]*)?", repl, text)
