"""Reviewers' verdicts on pooled episodes: the request body, the browser's CSRF guard
(docs/decisions.md Q10, Q11).

A verdict is ``accept``, ``reject`` or ``flag`` (``undo`` takes the last one back); it names its
episode and the review version it answers, and a stale one is refused (P1, P2); reject and flag need a
reason (what a data team reads later to know why an episode left the training set). Verdicts are appended to
``server.db`` (:meth:`~egopool.server.db.ServerDB.add_review`), never overwritten: the
latest is the episode's state, the rest its history.

A browser posts a verdict with its sign-in cookie. The cookie is ``SameSite=Strict`` (a
cross-site request does not carry it), and a cookie-authenticated POST must also (a) come
from the same origin (``Origin`` or ``Sec-Fetch-Site``) and (b) carry ``X-Egopool-CSRF``,
a per-session value derived from the token (:func:`csrf_token`) that only a page of this
server can read. A bearer token needs neither (it is not sent by a browser on its own).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import unicodedata
from dataclasses import dataclass
from typing import Any

from ..errors import UploadRejectedError
from .db import UNDO, VERDICTS, ReviewConflict, ServerDB

__all__ = ["CSRF_HEADER", "MAX_BODY", "MAX_REASON", "cross_site", "csrf_ok", "csrf_token", "loopback_host",
           "Verdict", "other_site", "parse_review", "record_verdict"]

CSRF_HEADER = "X-Egopool-CSRF"
MAX_REASON = 2000  # characters
#: bytes of a review body: a reason of MAX_REASON characters fits even when every one is an
#: astral character escaped as a JSON surrogate pair (12 bytes, Python's json.dumps default)
MAX_BODY = 32 * 1024


def csrf_token(session: str) -> str:
    """The per-session CSRF value of a signed-in browser: derived from its token (never the token
    itself), so it needs no server state and dies with the session."""
    return hashlib.sha256(b"egopool-csrf\0" + session.encode("utf-8")).hexdigest()[:32]


def cross_site(origin: str | None, fetch_site: str | None, host: str | None) -> bool:
    """True when a browser says the request comes from another site's page: ``Sec-Fetch-Site`` other than
    ``same-origin``/``none``, or an ``Origin`` (``null`` included: a sandboxed or local page) naming another
    host. A request without either header is not a browser's cross-site one (egopool's client, curl)."""
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    return origin is not None and (origin == "null" or origin.split("://", 1)[-1] != host)


def loopback_host(host: str | None) -> bool:
    """True when a request's ``Host`` header names this machine's loopback: ``localhost`` (or a name under
    ``.localhost``, which browsers resolve to loopback themselves) or a loopback address, any port. A page
    whose own name was made to resolve to 127.0.0.1 (DNS rebinding) is same-origin to the browser, but its
    ``Host`` still names it (docs/decisions.md U27). No ``Host`` (HTTP/1.0, not a browser) counts as loopback."""
    if host is None:
        return True
    name = host.strip()
    if name.startswith("["):  # [::1]:8000
        name = name[1:name.find("]")] if "]" in name else name[1:]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def csrf_ok(session: str, sent: str | None, origin: str | None, fetch_site: str | None, host: str | None) -> bool:
    """True when a cookie-authenticated POST is same-origin and carries the session's CSRF value."""
    if not sent or not hmac.compare_digest(sent, csrf_token(session)):
        return False
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    if origin is not None and origin != "null":
        return origin.split("://", 1)[-1] == host
    return fetch_site is not None  # no Origin at all: only with a same-origin Sec-Fetch-Site


@dataclass(frozen=True)
class Verdict:
    """One review request: what it judges and which review it answers (docs/decisions.md P1).

    Attributes
    ----------
    episode:
        The server N the reviewer looked at (must equal the N of the URL).
    version:
        The episode's review version the reviewer saw (the id of its last review row, 0 = none):
        a verdict answering an older version is refused (409), never recorded.
    verdict:
        ``accept``, ``reject``, ``flag`` or ``undo`` (takes back the last verdict in force, P2).
    reason:
        Stripped text; needed for reject and flag.
    """

    episode: int
    version: int
    verdict: str
    reason: str


_SHAPE = '{"episode": N, "version": V, "verdict": "accept"|"reject"|"flag"|"undo", "reason": "..."}'


def _whole(doc: dict[str, Any], name: str) -> int:
    v = doc.get(name)
    low = 0 if name == "version" else 1  # version 0: no review yet; episodes are numbered from 1
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 2**63:
        raise UploadRejectedError(400, "bad_request", f"a review names the {name} it answers: {name!r} must be a "
                                                      f"whole number from {low} to {2**63 - 1}, not {v!r}",
                                  hint=f"send {_SHAPE}; the episode's entry in the read API gives review_version")
    return v


def parse_review(body: bytes) -> Verdict:
    """The :class:`Verdict` of a review request body (:data:`_SHAPE`).

    Raises
    ------
    UploadRejectedError
        400: not a JSON object, an unknown verdict (or one that is not a string), reject / flag
        without a reason, a reason over :data:`MAX_REASON` characters or holding a control
        character (other than tab and line break) or a lone surrogate (docs/decisions.md Q20),
        no whole ``episode`` or ``version`` (P1).
    """
    try:
        doc: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise UploadRejectedError(400, "bad_request", "the review body is not JSON",
                                  hint=f"send {_SHAPE}") from None
    if not isinstance(doc, dict):
        raise UploadRejectedError(400, "bad_request", "the review body is not a JSON object",
                                  hint=f"send {_SHAPE}")
    verdict, reason = doc.get("verdict"), doc.get("reason", "")
    if not isinstance(verdict, str) or (verdict not in VERDICTS and verdict != UNDO):
        raise UploadRejectedError(400, "bad_request", f"unknown verdict {verdict!r}",
                                  hint="verdict is accept, reject, flag or undo")
    if not isinstance(reason, str):
        raise UploadRejectedError(400, "bad_request", "reason must be a string")
    reason = reason.strip()
    if verdict in ("reject", "flag") and not reason:
        raise UploadRejectedError(400, "bad_request", f"a {verdict} needs a reason",
                                  hint="say what is wrong, e.g. \"gripper occluded\"")
    if len(reason) > MAX_REASON:
        raise UploadRejectedError(400, "bad_request", f"the reason has {len(reason)} characters, more than "
                                                      f"{MAX_REASON}")
    bad = next((c for c in reason if c not in "\t\n" and unicodedata.category(c) in ("Cc", "Cs")), None)
    if bad is not None:  # a lone surrogate cannot be stored as UTF-8; a control character only hides text
        raise UploadRejectedError(400, "bad_request", f"the reason holds the character U+{ord(bad):04X} "
                                                      "(a control character or a lone surrogate)",
                                  hint="send plain text (tabs and line breaks are fine)")
    return Verdict(_whole(doc, "episode"), _whole(doc, "version"), verdict, reason)


def record_verdict(db: ServerDB, task: str, index: int, v: Verdict, token_id: str | None) -> dict[str, Any]:
    """Record ``v`` on pooled episode ``index`` of ``task``: the answer of ``POST .../review`` (the row, its
    ``version`` and the verdict now in force, ``current``; docs/decisions.md P1, P2).

    Raises
    ------
    UploadRejectedError
        409: ``v`` names another episode than the URL, answers an outdated review version, or undoes
        nothing (nothing recorded); 404: no pooled episode ``index``.
    """
    if v.episode != index:  # the page that sent it shows another episode: never judge the wrong one
        raise UploadRejectedError(409, "conflict", f"this verdict names episode {v.episode} but was sent to "
                                                   f"episode {index} of task {task!r}; nothing was recorded")
    if db.episode(task, index) is None:
        raise UploadRejectedError(404, "not_found", f"no pooled episode {index} in task {task!r}")
    try:
        row, current = db.add_review(task, index, v.verdict, v.reason, token_id, version=v.version)
    except ReviewConflict as exc:
        raise UploadRejectedError(409, "conflict", str(exc), hint="reload the episode to see its current review"
                                  ) from None
    return {**row.to_dict(), "version": row.id, "current": current.to_dict() if current else None}


def other_site(fetch_site: str | None) -> bool:
    """A browser says another site's page sent this (``Sec-Fetch-Site``; not ``Origin``, which a proxy
    rewriting ``Host`` would make look foreign): it may not sign the browser in or out (docs/decisions.md U24, U27)."""
    return fetch_site in ("cross-site", "same-site")
