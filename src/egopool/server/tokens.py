"""Access tokens of the pooling server: hashed at rest, with scopes.

The tokens file (``egopool serve --tokens FILE``) is JSON::

    {"tokens": [{"id": "lab-pc-3", "sha256": "<hex of the token>", "scopes": ["upload:pick_cup", "read"],
                 "created_at": 1767225600.0}]}

Only the sha256 of a token is stored: tokens are 256-bit random strings
(:func:`new_token`), so a plain hash is enough (no password stretching needed) and a
leaked file does not let anyone upload. Scopes:

* ``read`` — the read API, the HTML page and file downloads;
* ``upload:*`` — upload to any task; ``upload:<task>`` — upload to that task only;
* ``declare:*`` / ``declare:<task>`` — declare a task (docs/decisions.md U15): create it with
  its first upload (which sets its fps, features and streams) or add a declaration it lacks (a
  new column or stream). ``upload:<task>`` declares that one task too; ``upload:*`` alone
  uploads only episodes that fit what the task already declares.
* ``review`` — judge episodes (accept / reject / flag, docs/decisions.md Q10); the pages and
  the read API still need ``read``.

A request without a valid token is 401; a valid token without the scope is 403. The file
is re-read when it changes, so tokens can be added or revoked while the server runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._atomic import atomic_write_bytes
from .._safe_read import read_json
from ..errors import FormatError

__all__ = ["READ", "REVIEW", "Token", "TokenStore", "add_token", "hash_token", "new_token", "parse_scope", "revoke_token"]

READ = "read"
REVIEW = "review"
_PREFIX = "egp_"


def new_token() -> str:
    """A fresh random token: ``egp_`` + 43 URL-safe characters (256 bits)."""
    return _PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """sha256 hex of a token, as stored in the tokens file."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_scope(scope: str) -> str:
    """Check one scope string (``read``, ``review``, ``upload:*``, ``upload:<task>``, ``declare:*``, ``declare:<task>``).

    Raises
    ------
    FormatError
        Anything else.
    """
    if scope in (READ, REVIEW, "upload:*", "declare:*"):
        return scope
    for kind in ("upload:", "declare:"):
        if scope.startswith(kind) and len(scope) > len(kind):
            task = scope[len(kind):]
            if "/" not in task and not task.startswith((".", "_")):
                return scope
    raise FormatError(f"unknown token scope {scope!r}", hint="use read, review, upload:*, upload:<task name>, declare:* "
                                                             "or declare:<task name>")


@dataclass(frozen=True)
class Token:
    """One token entry (never the token itself).

    Attributes
    ----------
    id:
        A name for people and the upload log (``lab-pc-3``).
    sha256:
        Hex digest of the token.
    scopes:
        Checked scope strings.
    created_at:
        Unix s.
    """

    id: str
    sha256: str
    scopes: tuple[str, ...]
    created_at: float = 0.0

    def can_read(self) -> bool:
        """True with the ``read`` scope."""
        return READ in self.scopes

    def can_review(self) -> bool:
        """True with the ``review`` scope."""
        return REVIEW in self.scopes

    def can_upload(self, task: str) -> bool:
        """True with ``upload:*`` or ``upload:<task>``, or a scope that declares ``task`` (:meth:`can_declare`)."""
        return "upload:*" in self.scopes or f"upload:{task}" in self.scopes or self.can_declare(task)

    def can_declare(self, task: str) -> bool:
        """True when this token may set ``task``'s declarations (docs/decisions.md U15): ``declare:*``,
        ``declare:<task>``, or ``upload:<task>`` (a token the operator named for exactly that task)."""
        return any(s in self.scopes for s in ("declare:*", f"declare:{task}", f"upload:{task}"))

    def to_dict(self) -> dict[str, Any]:
        """JSON form as stored."""
        return {"id": self.id, "sha256": self.sha256, "scopes": list(self.scopes), "created_at": self.created_at}


def _load(path: Path) -> list[Token]:
    if not path.exists() and not path.is_symlink():
        return []
    # regular files only (a FIFO blocked `token list`), nesting bounded (RecursionError): one line
    doc = read_json(path, what="tokens file", hint="create it with `egopool token add --tokens FILE ...`")
    try:
        entries = doc["tokens"]
        if any(isinstance(e, dict) and isinstance(e.get("scopes"), str) for e in entries):
            raise TypeError("scopes must be a list")
        out = [Token(str(e["id"]), str(e["sha256"]), tuple(parse_scope(str(s)) for s in e["scopes"]),
                     float(e.get("created_at", 0.0))) for e in entries]
    except FormatError as exc:
        raise FormatError(exc.message, path=path, hint=exc.hint) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"tokens file entries need id, sha256 and scopes ({exc})", path=path,
                          hint="create it with `egopool token add --tokens FILE ...`") from exc
    if len({t.id for t in out}) != len(out):
        raise FormatError("two tokens share an id", path=path)
    return out


def _save(path: Path, tokens: Iterable[Token]) -> None:
    body = json.dumps({"tokens": [t.to_dict() for t in tokens]}, indent=1, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, body.encode("utf-8"))
    os.chmod(path, 0o600)


def add_token(path: str | Path, token_id: str, scopes: Sequence[str]) -> str:
    """Create a token with ``scopes``, store its hash in ``path`` (created), return the token.

    The token is shown once; only its hash is kept.

    Raises
    ------
    FormatError
        A bad scope, no scope, an id already in the file, or an unreadable file.
    """
    path = Path(path)
    checked = tuple(parse_scope(s) for s in scopes)
    if not checked:
        raise FormatError("a token needs at least one scope", hint="--scope read, --scope upload:* ...")
    if not token_id or any(ch.isspace() for ch in token_id):
        raise FormatError(f"invalid token id {token_id!r}", hint="a short name without spaces, e.g. lab-pc-3")
    tokens = _load(path)
    if any(t.id == token_id for t in tokens):
        raise FormatError(f"token id {token_id!r} already exists", path=path, hint="revoke it first or pick another id")
    token = new_token()
    _save(path, [*tokens, Token(token_id, hash_token(token), checked, time.time())])
    return token


def revoke_token(path: str | Path, token_id: str) -> bool:
    """Remove a token from the file; False when there was none with that id."""
    path = Path(path)
    tokens = _load(path)
    kept = [t for t in tokens if t.id != token_id]
    if len(kept) == len(tokens):
        return False
    _save(path, kept)
    return True


class TokenStore:
    """The tokens of a running server, re-read when the file changes.

    Parameters
    ----------
    path:
        The tokens file; None = no authentication (only for a server on loopback).
    """

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._stamp: tuple[float, int] | None = None
        self._by_hash: dict[str, Token] = {}
        if self.path is not None:
            if not self.path.exists() and not self.path.is_symlink():  # a FIFO or directory: _load names it
                raise FormatError("tokens file not found", path=self.path,
                                  hint="create it with `egopool token add --tokens FILE --id NAME --scope ...`")
            self._reload()

    @property
    def enabled(self) -> bool:
        """True when requests need a token."""
        return self.path is not None

    def _reload(self) -> None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except OSError:
            return  # keep the last good set while the file is being replaced
        stamp = (st.st_mtime, st.st_size)
        if stamp == self._stamp:
            return
        self._by_hash = {t.sha256: t for t in _load(self.path)}
        self._stamp = stamp

    def tokens(self) -> list[Token]:
        """Every token entry."""
        with self._lock:
            if self.path is not None:
                self._reload()
            return list(self._by_hash.values())

    def authenticate(self, token: str | None) -> Token | None:
        """The entry of ``token``, or None (unknown, empty, or authentication disabled)."""
        if not token or self.path is None:
            return None
        with self._lock:
            self._reload()
            return self._by_hash.get(hash_token(token))
