"""Who a collection PC is to a pooling server: a key its recordings root holds (docs/decisions.md U11).

A recordings root's **client key** is a 256-bit secret (64 hex) kept in its ``pipeline.db``.
``egopool upload`` sends it in the :data:`CLIENT_KEY_HEADER` header of each upload (never in
the zip; the server stores and shows only what it derives from it). The **host id** is
derived from the key (:func:`host_id_of_key`), so the server computes it itself: a host id read
from the server's read API names a PC but cannot be presented as one.

The key a root gets is :func:`derive_client_key` of this machine, its name and the root's real
path (an HMAC keyed by ``/etc/machine-id``, never the machine id itself), so ``--no-registry`` on the
same root sends the same key, and a root whose stored key is not the one derived here was
copied or moved from another machine or path (:class:`ClientIdentity.notice`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import FormatError

__all__ = ["CLIENT_KEY_HEADER", "ClientIdentity", "check_client_key", "derive_client_key", "host_id_of_key",
           "token_host_id"]

#: The HTTP header of an upload that carries the client key.
CLIENT_KEY_HEADER = "X-Egopool-Client-Key"
_KEY_RE = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class ClientIdentity:
    """A recordings root as a pooling server knows it.

    Attributes
    ----------
    key:
        The client key: 64 lowercase hex (256 bits), secret.
    host_id:
        :func:`host_id_of_key` of ``key``: 32 hex, public (manifests, server answers).
    hostname:
        This machine's name (display only, never an identity).
    notice:
        One line when the root's registry was made on another machine or at another path (a
        copied or moved recordings root) and the root was given its own identity now; else None.
    """

    key: str
    host_id: str
    hostname: str
    notice: str | None = None


def _machine_secret() -> bytes:
    """Bytes that tell this machine apart: ``/etc/machine-id`` (systemd, D-Bus), else the MAC, else the host name."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(path).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text:
            return text.encode("ascii")
    node = uuid.getnode()
    if not node & (1 << 40):  # the multicast bit marks a random stand-in, different in every process
        return f"mac:{node:012x}".encode("ascii")
    return f"host:{socket.gethostname()}".encode()


def derive_client_key(root: str | Path) -> str:
    """The client key a recordings root gets on this machine: 64 hex.

    HMAC-SHA256 keyed by the machine's id over the host name and the root's real path (symlinks
    resolved): the machine id never leaves the machine (systemd's advice for application ids), two
    roots on one PC are two clients, and containers of one image (one baked-in machine id, each
    its own host name) are told apart.
    """
    text = f"egopool client key v1\n{socket.gethostname()}\n{os.path.realpath(root)}"
    return hmac.new(_machine_secret(), text.encode(), hashlib.sha256).hexdigest()


def host_id_of_key(key: str) -> str:
    """The public host id of a client key: 32 hex of sha256 (the key cannot be recovered from it)."""
    return hashlib.sha256(f"egopool host id v1\n{key}".encode("ascii")).hexdigest()[:32]


def token_host_id(token_id: str | None, declared: str) -> str:
    """The host id the server gives an upload sent without a client key (an egopool before U11).

    32 hex over the token's id and the host id the manifest declares: a host id copied from
    the read API into a manifest sent with another token names another client.
    """
    return hashlib.sha256(f"egopool token host id v1\n{token_id or ''}\n{declared}".encode()).hexdigest()[:32]


def check_client_key(text: str) -> str:
    """``text`` when it is a client key (64 lowercase hex).

    Raises
    ------
    FormatError
        Anything else (the message never repeats the value: it is a secret).
    """
    if not _KEY_RE.match(text):
        raise FormatError(f"the {CLIENT_KEY_HEADER} header is not a client key (64 lowercase hex characters)",
                          hint="send the key egopool keeps in the recordings root's pipeline.db")
    return text
