"""``egopool upload``: send episodes to a pooling server, resumably (file_format.md §9).

For each episode N (ascending; by default every complete episode not yet uploaded to this
server):

1. the registry (``pipeline.db``) already holds the server's confirmed answer for
   ``(task, N, server)``: skipped (a re-run after a kill resumes here);
2. packed into a temporary zip (one :class:`~egopool.transfer.pack.Packer` per run: ``info.json``
   read once; the zip hashed once and not fsynced) in a per-run directory outside the recordings
   root (:mod:`egopool.transfer.spool`: the per-user cache directory by default; removed
   afterwards, and by the next run when this one was killed);
3. ``POST <server>/api/v1/session/upload`` as multipart: ``name`` = task name,
   ``episode_index`` = the episode's 0-based file number f taken from the layout (§9: not
   N; after chunk roll-over f + 1 ≠ N), the zip streamed from disk in 1 MiB blocks with a
   progress callback, and the recordings root's client key in the
   :data:`~egopool.identity.CLIENT_KEY_HEADER` header (docs/decisions.md U11). Network errors
   and 5xx answers are retried with exponential backoff (0.5 s doubling to 8 s, jittered), a 503 with
   ``Retry-After`` (the server's queue is full) after the time it names (:mod:`~egopool.transfer.posting`); 4xx and 507 (server disk full) answers are final for the
   episode (401/403 stop the whole run);
4. the answer is **confirmed by checksum**: the server's sha256 of the received zip and
   its episode digest must equal ours. Only then is it recorded in the registry
   (``uploads`` row, the recording marked ``uploaded``) and, with ``delete_after``, the
   episode deleted through :func:`egopool.ops.delete_episodes` (the verified delete of
   ``egopool delete``).

The server de-duplicates by content (the episode digest), so an upload that reached the server
before the client was killed is answered "duplicate" with the same server N on the re-run.

Up to ``jobs`` episodes (default 4) are packed and sent at once by worker threads; the calling
thread records and reports each, and the report lists them in N order (docs/decisions.md U26).
A run keeps one HTTP connection pool (keep-alive, ``jobs`` connections), one ``pipeline.db`` connection
(:meth:`~egopool.registry.Registry.session`: still one commit per confirmed episode, before it is
reported) and, per process, one TLS context (docs/decisions.md U22, U23).
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .. import __version__
from ..errors import CodecError, EgopoolError, EpisodeNotFoundError, FormatError, LayoutError, TransferError
from ..identity import CLIENT_KEY_HEADER
from ..layout import TaskLayout, find_episode_files, list_task_episodes
from ..meta.info import read_info
from ..ops import delete_episodes
from ..registry import Registry, UploadRecord, task_key
from .pack import PackedEpisode, Packer, client_identity
from .posting import Cancelled, answer_of, post_episode
from .spool import spool_base, sweep_legacy, upload_spool

__all__ = ["UPLOAD_PATH", "UploadOutcome", "UploadReport", "upload_episodes"]

UPLOAD_PATH = "/api/v1/session/upload"
_BLOCK = 1 << 20
#: ``progress(sent_bytes, total_bytes, what)`` while zips are sent: bytes summed over the run's episodes.
UploadProgress = Callable[[int, int, str], None]


@dataclass
class UploadOutcome:
    """What happened to one episode.

    Attributes
    ----------
    index:
        Local global N.
    status:
        ``uploaded`` (imported now), ``duplicate`` (the server already had it), ``skipped``
        (the registry already holds a confirmed upload), ``failed``.
    server_episode_index:
        The server's N (None when failed).
    answer:
        The server's JSON answer (empty when skipped or failed without one).
    message:
        Why it failed, or a note.
    attempts:
        HTTP attempts made.
    seconds:
        From the first byte sent to the server's final answer, retries and their waits included
        (packing excluded).
    deleted:
        True when the local episode was deleted (``delete_after``), False when the delete
        failed, None when not asked or not confirmed.
    """

    index: int
    status: str
    server_episode_index: int | None = None
    answer: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    attempts: int = 0
    seconds: float = 0.0
    deleted: bool | None = None

    @property
    def confirmed(self) -> bool:
        """True when the server holds the episode, confirmed by checksum (now or in an earlier run)."""
        return self.status in ("uploaded", "duplicate", "skipped")

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"episode_index": self.index, "status": self.status,
                "server_episode_index": self.server_episode_index, "message": self.message,
                "attempts": self.attempts, "seconds": round(self.seconds, 4), "deleted": self.deleted,
                "answer": self.answer}


@dataclass
class UploadReport:
    """Result of :func:`upload_episodes`."""

    task_dir: Path
    server: str
    outcomes: list[UploadOutcome] = field(default_factory=list)
    #: One-line notes about the run (a copied recordings root, stale temp files removed).
    notices: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every episode is on the server and every asked-for delete happened."""
        return all(o.confirmed and o.deleted is not False for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        """JSON report (``egopool upload --json``)."""
        return {"task": str(self.task_dir), "server": self.server, "ok": self.ok, "notices": self.notices,
                "outcomes": [o.to_dict() for o in self.outcomes]}


_TOKEN_RE = re.compile(r"^[\x21-\x7e]+\Z")  # one HTTP header token: printable ASCII, no space


def _base_url(server: str) -> str:
    """``server`` without a trailing '/', checked: http(s), a host, a valid port, no query.

    Raises
    ------
    TransferError
        Anything else (before anything is packed or sent).
    """
    base = server.rstrip("/")
    hint = "pass the server's base URL, e.g. --server http://pool.lab:8000"
    if not base.startswith(("http://", "https://")):
        raise TransferError(f"server URL {server!r} must start with http:// or https://", hint=hint)
    try:
        url = httpx.URL(base)
        url.port  # noqa: B018  (parses the port)
    except (httpx.InvalidURL, ValueError) as exc:
        raise TransferError(f"server URL {server!r} is not a valid URL ({exc})", hint=hint) from None
    if not url.host or url.query or url.fragment or "?" in base or "#" in base:
        raise TransferError(f"server URL {server!r} needs a host and no query or fragment", hint=hint)
    return base


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """The certificate-verifying TLS context httpx would build, made once per process.

    Loading the CA bundle costs ~20 ms of CPU, which every ``httpx.Client`` paid again (one per
    :func:`upload_episodes` call, even for an http:// server); an ``SSLContext`` is meant to be shared.
    """
    return httpx.create_ssl_context()


def _confirm(packed: PackedEpisode, answer: dict[str, Any]) -> str | None:
    """Why the answer does not confirm the upload, or None when it does (checksums equal)."""
    if answer.get("zip_sha256") != packed.sha256:
        return (f"the server's sha256 of the received zip {str(answer.get('zip_sha256'))[:12]}... is not ours "
                f"{packed.sha256[:12]}...")
    if answer.get("episode_digest") != packed.episode_digest:
        return "the server's episode digest is not ours"
    if not isinstance(answer.get("episode_index"), int):
        return "the server's answer has no episode_index"
    return None


def upload_episodes(task_dir: str | Path, indices: Sequence[int] | None = None, *, server: str,
                    token: str | None = None, reencode_hevc: bool = False, delete_after: bool = False,
                    registry: bool | str | Path | Registry | None = True, retries: int = 8, backoff: float = 0.5,
                    timeout: float = 600.0, progress: UploadProgress | None = None,
                    on_outcome: Callable[[UploadOutcome], None] | None = None,
                    on_notice: Callable[[str], None] | None = None, temp_dir: str | Path | None = None,
                    transport: httpx.BaseTransport | None = None, jobs: int = 4) -> UploadReport:
    """Upload episodes of a task to a pooling server (module docstring).

    Parameters
    ----------
    task_dir:
        The task directory; its name is the server task name (§9 ``name``).
    indices:
        Global 1-based N; None = every complete episode without a confirmed upload to ``server``.
    server:
        Base URL, e.g. ``http://pool.lab:8000``.
    token:
        Bearer token (scope ``upload:<task>`` or ``upload:*``); None when the server needs none.
    reencode_hevc:
        Re-encode RGB MP4 to HEVC inside the zip (§9); depth never.
    delete_after:
        Delete each episode locally once its upload is confirmed by checksum (also those
        confirmed by an earlier run), through the verified delete of ``egopool delete``.
    registry:
        ``pipeline.db`` for resuming and the client identity: True = beside the task, a path /
        Registry, False = none (no resume: every episode is sent, the server de-duplicates).
    retries:
        Retries of a network error or 5xx per episode (attempts = retries + 1).
    backoff:
        First retry delay in s (doubles up to 8 s, jittered).
    timeout:
        Seconds to wait for the server's answer after the zip is sent (it verifies first).
    progress:
        ``progress(sent_bytes, total_bytes, what)`` while sending, one call at a time: bytes (B)
        summed over the episodes sent so far and in flight; ``what`` names those in flight.
    on_outcome:
        Called in the calling thread after each episode, as they finish, once its registry record
        is committed (for a live listing); :attr:`UploadReport.outcomes` is in N order.
    on_notice:
        Called with each line of :attr:`UploadReport.notices` when it arises.
    temp_dir:
        Where the zips are packed (a per-run directory inside it); None = the per-user cache
        directory (:func:`~egopool.transfer.spool.spool_base`). Never inside the recordings root.
    transport:
        An httpx transport (tests of the client against an in-process app).
    jobs:
        Episodes in flight at once (packed and sent by as many threads over one keep-alive
        connection pool; at most ``jobs`` zips exist at a time). 1 = one after the other. The first
        episode of a run that has none confirmed yet goes alone (docs/decisions.md U26).

    Returns
    -------
    UploadReport

    Raises
    ------
    LayoutError, EpisodeNotFoundError
        An N < 1 or one the task does not have (and never uploaded); checked before anything is sent.
    TransferError
        A malformed server URL or token, ``jobs`` < 1, or a ``temp_dir`` inside the recordings
        root (before anything is sent); 401/403 from the server (no further episode is started,
        those in flight finish and are reported; the message lists the episodes not sent). A
        network failure that outlasts the retries ends the run with that episode ``failed`` (no
        further episode is started; the next run resumes there); an episode that cannot be packed
        is ``failed`` and the others go on.
    """
    root = Path(task_dir)
    base = _base_url(server)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise TransferError(f"jobs={jobs!r} refused: at least one episode must be in flight",
                            hint="pass --jobs 1 (one after the other) or more, e.g. --jobs 4")
    if token is not None and not _TOKEN_RE.match(token):
        raise TransferError("the token holds spaces, line breaks or non-ASCII characters (not shown)",
                            hint="put only the token `egopool token add` printed into --token-file / EGOPOOL_TOKEN")
    info = read_info(root)
    layout = TaskLayout.from_info(root, info)
    reg = registry if isinstance(registry, Registry) else Registry.for_task(root) if registry is True \
        else Registry(registry) if registry else None
    with reg.session() if reg is not None else contextlib.nullcontext():  # one connection for the run (U22)
        return _run(root, base, token, info, layout, reg, indices, reencode_hevc, delete_after, retries, backoff,
                    timeout, progress, on_outcome, on_notice, temp_dir, transport, jobs)


class _Aggregate:
    """One coherent ``progress`` for the run: bytes summed over every episode sent so far (thread-safe).

    ``progress(sent_bytes, total_bytes, what)`` is called under a lock; ``total_bytes`` grows as
    episodes are packed, ``what`` names the episodes in flight.
    """

    def __init__(self, progress: UploadProgress | None, cancel: threading.Event) -> None:
        self.progress, self.cancel, self.lock = progress, cancel, threading.Lock()
        self.sent: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.active: set[int] = set()

    def start(self, n: int, size: int) -> None:
        with self.lock:
            self.sizes[n], self.sent[n] = size, 0
            self.active.add(n)

    def end(self, n: int) -> None:
        with self.lock:
            self.active.discard(n)

    def tick(self, n: int, done: int) -> None:
        if self.cancel.is_set():
            raise Cancelled
        if self.progress is None:
            return
        with self.lock:
            self.sent[n] = done
            what = ", ".join(str(i) for i in sorted(self.active))
            self.progress(sum(self.sent.values()), sum(self.sizes.values()),
                          f"episode{'s' if len(self.active) > 1 else ''} {what}")


@dataclass
class _Sent:
    """What a worker hands back: the outcome, and the packed episode when the server confirmed it."""

    n: int
    outcome: UploadOutcome | None = None
    packed: PackedEpisode | None = None
    error: BaseException | None = None


def _run(root: Path, base: str, token: str | None, info: dict[str, Any], layout: TaskLayout, reg: Registry | None,
         indices: Sequence[int] | None, reencode_hevc: bool, delete_after: bool, retries: int, backoff: float,
         timeout: float, progress: UploadProgress | None, on_outcome: Callable[[UploadOutcome], None] | None,
         on_notice: Callable[[str], None] | None, temp_dir: str | Path | None,
         transport: httpx.BaseTransport | None, jobs: int) -> UploadReport:
    """:func:`upload_episodes` once the arguments are checked and the registry chosen (its session open)."""
    key = task_key(root)
    if indices is None:
        groups = {g.index: g for g in list_task_episodes(root, layout)}
    else:  # N's own paths: no scan of the task (issue 12 F)
        found = (find_episode_files(root, layout, n, info.get("video_extensions"))
                 for n in dict.fromkeys(indices) if isinstance(n, int) and not isinstance(n, bool) and n >= 1)
        groups = {g.index: g for g in found if g is not None}
    done = {u.episode_index: u for u in reg.uploads(key) if u.server == base} if reg is not None else {}
    if indices is None:
        wanted = sorted(set(n for n, g in groups.items() if g.complete) | (set(done) & set(groups)))
    else:
        wanted = []
        for n in dict.fromkeys(indices):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise LayoutError(f"episode {n!r} refused: global N is 1-based (episode-000 is N=1)",
                                  hint="pass the global N shown by `egopool ls TASK`")
            if n not in groups and n not in done:
                raise EpisodeNotFoundError(root, n)
            wanted.append(n)
    rec_root = Path(os.path.abspath(root)).parent
    spool_dir = spool_base(rec_root, temp_dir)
    ident = client_identity(root, reg if reg is not None else False)
    report = UploadReport(root, base)

    def notice(line: str) -> None:
        report.notices.append(line)
        if on_notice is not None:
            on_notice(line)

    if ident.notice:
        notice(ident.notice)
    stale = sweep_legacy(rec_root)
    if stale:
        notice(f"removed {len(stale)} upload temp director{'y' if len(stale) == 1 else 'ies'} an earlier egopool "
               f"left in {rec_root} ({', '.join(p.name for p in stale)})")
    headers = {"User-Agent": f"egopool/{__version__}", CLIENT_KEY_HEADER: ident.key}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    http_timeout = httpx.Timeout(timeout, connect=15.0, write=120.0, pool=15.0)
    limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs)
    with httpx.Client(headers=headers, timeout=http_timeout, transport=transport, verify=_tls_context(),
                      limits=limits) as client, upload_spool(spool_dir) as spool:
        try:  # info.json read, templates checked and the layout built once for the run (U22)
            packer: Packer | FormatError = Packer(root, spool, reencode_hevc=reencode_hevc, host_id=ident.host_id,
                                                  hostname=ident.hostname, durable=False, info=info)
        except FormatError as exc:  # every episode fails "not packed" with this reason, as each would alone
            packer = exc
        _schedule(client, root, key, wanted, done, groups, base, reg, packer, retries, backoff, progress, delete_after,
                  jobs, report, on_outcome, notice)
    return report


def _schedule(client: httpx.Client, root: Path, key: str, wanted: list[int], done: dict[int, UploadRecord],
              groups: dict[int, Any], base: str, reg: Registry | None, packer: Packer | FormatError, retries: int,
              backoff: float, progress: UploadProgress | None, delete_after: bool, jobs: int, report: UploadReport,
              on_outcome: Callable[[UploadOutcome], None] | None, notice: Callable[[str], None]) -> None:
    """Send ``wanted`` with up to ``jobs`` episodes in flight (docs/decisions.md U26).

    Workers (daemon threads) pack and POST; this thread records each confirmed episode in the
    registry (its session connection), deletes it when asked, then reports it. Until one episode
    is confirmed (now or by an earlier run) episodes go one at a time, so a refusal of the task's
    declarations is met once. An error that stops the run starts no further episode; those in
    flight finish and are reported. Ctrl-C stops every worker at its next block and re-raises.
    """
    cancel = threading.Event()
    agg = _Aggregate(progress, cancel)
    results: queue.Queue[_Sent] = queue.Queue()
    order = {n: i for i, n in enumerate(wanted)}
    outcomes: list[UploadOutcome] = []
    confirmed_any = bool(done)
    fatal: TransferError | None = None
    refused: list[int] = []  # episodes the server answered 401/403: not sent either
    stopped = False
    in_flight: set[int] = set()
    workers: list[threading.Thread] = []
    pending = list(wanted)

    def work(n: int) -> None:
        try:
            results.put(_one(client, root, n, groups.get(n), base, packer, retries, backoff, agg, cancel))
        except BaseException as exc:  # handed to the main thread, which decides
            results.put(_Sent(n, error=exc))

    def report_one(outcome: UploadOutcome) -> None:
        nonlocal confirmed_any
        confirmed_any = confirmed_any or outcome.confirmed
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)

    try:
        while pending or in_flight:
            while pending and not stopped and len(in_flight) < (jobs if confirmed_any else 1):
                n = pending.pop(0)
                rec = done.get(n)
                if rec is not None:
                    outcome = UploadOutcome(n, "skipped", rec.server_episode_index, rec.answer,
                                            f"already on the server as episode {rec.server_episode_index} of "
                                            f"{rec.server_task}")
                    if delete_after and n in groups:
                        outcome.deleted = _delete(root, n, reg, outcome)
                    report_one(outcome)
                    continue
                in_flight.add(n)
                t = threading.Thread(target=work, args=(n,), name=f"egopool-upload-{n}", daemon=True)
                workers.append(t)
                t.start()
            if not in_flight:
                break
            got = results.get()
            in_flight.discard(got.n)
            if got.error is not None:
                exc = got.error
                if not isinstance(exc, TransferError):
                    raise exc
                stopped = True
                if exc.status in (401, 403):  # the token is wrong for every episode
                    fatal = fatal or exc
                    refused.append(got.n)
                    continue
                report_one(UploadOutcome(got.n, "failed", message=exc.one_line(), attempts=retries + 1))
                continue  # the server stays unreachable: the next run resumes here
            assert got.outcome is not None
            outcome = got.outcome
            if got.packed is not None and reg is not None:  # committed before it is reported (U22)
                packed, answer = got.packed, outcome.answer
                try:
                    reg.record_upload(UploadRecord(key, got.n, base, packed.episode_digest, packed.sha256,
                                                   str(answer.get("task", key)), int(answer["episode_index"]),
                                                   answer, time.time()))
                except EgopoolError as exc:
                    outcome.message = f"uploaded, but not recorded in the registry ({exc.one_line()})"
            if delete_after and outcome.confirmed and got.n in groups:
                outcome.deleted = _delete(root, got.n, reg, outcome)
            report_one(outcome)
    except BaseException:  # Ctrl-C (or a bug): stop every worker at its next block; the spool is removed after
        cancel.set()
        deadline = time.monotonic() + 5.0
        for t in workers:
            t.join(max(0.0, deadline - time.monotonic()))
        raise
    report.outcomes.extend(sorted(outcomes, key=lambda o: order[o.index]))
    if fatal is not None:  # the refused episodes were not sent either (issue 28: episode 1 was never named)
        not_sent = sorted([*refused, *pending], key=lambda n: order[n])
        raise TransferError(f"{fatal.message}; not sent: episode{'s' if len(not_sent) > 1 else ''} "
                            f"{', '.join(str(n) for n in not_sent)}", status=fatal.status, hint=fatal.hint)
    if stopped and pending:
        unsent = ", ".join(str(n) for n in pending)
        notice(f"stopped: episode{'s' if len(pending) > 1 else ''} {unsent} not sent (run the same command again)")


def _one(client: httpx.Client, root: Path, n: int, g: Any, base: str, packer: Packer | FormatError, retries: int,
         backoff: float, agg: _Aggregate, cancel: threading.Event) -> _Sent:
    """Pack and send N (a worker thread); the registry is left to the caller."""
    if g is None:
        raise EpisodeNotFoundError(root, n)
    try:
        if isinstance(packer, FormatError):
            raise packer
        packed = packer.pack(n, lambda done, total, what: agg.tick(n, 0) if cancel.is_set() else None)
    except (FormatError, CodecError) as exc:  # this episode cannot be packed (incomplete, PNG16...): the others can
        return _Sent(n, UploadOutcome(n, "failed", message=f"not packed: {exc.one_line()}"))
    start = time.monotonic()
    agg.start(n, packed.size)
    try:
        resp, attempts = post_episode(client, base + UPLOAD_PATH, packed, retries, backoff, lambda d: agg.tick(n, d),
                                      cancel)
    finally:
        agg.end(n)
        with contextlib.suppress(FileNotFoundError):
            packed.path.unlink()
    seconds = time.monotonic() - start
    answer = answer_of(resp)
    if resp.status_code == 403 and answer.get("error") == "may_not_declare":  # docs/decisions.md U15
        raise TransferError(f"the server refused to let this token declare the task: {answer.get('message', '')}",
                            status=403, hint="the server's operator declares it (a token of scope declare:<task>); "
                                             "then run the upload again")
    if resp.status_code in (401, 403):
        raise TransferError(f"the server refused the token ({resp.status_code}: {answer.get('message', '')})",
                            status=resp.status_code, hint="pass a token with scope upload:<task> or upload:* "
                                                          "(--token-file or EGOPOOL_TOKEN)")
    if resp.status_code in (404, 405) and "error" not in answer:  # no egopool route there: a wrong --server
        raise TransferError(f"{base}{UPLOAD_PATH} answered HTTP {resp.status_code}: not an egopool server",
                            status=resp.status_code, hint="check --server: the base URL of `egopool serve`, "
                                                          "e.g. http://pool.lab:8000")
    if resp.status_code != 200:
        return _Sent(n, UploadOutcome(n, "failed", None, answer, f"HTTP {resp.status_code} {answer.get('error', '')}: "
                                                                 f"{answer.get('message', '')}", attempts, seconds))
    problem = _confirm(packed, answer)
    if problem is not None:
        return _Sent(n, UploadOutcome(n, "failed", None, answer, f"not confirmed: {problem}", attempts, seconds))
    status = "duplicate" if answer.get("status") == "duplicate" else "uploaded"
    return _Sent(n, UploadOutcome(n, status, int(answer["episode_index"]), answer, "", attempts, seconds), packed)


def _delete(root: Path, n: int, reg: Registry | None, outcome: UploadOutcome) -> bool:
    try:
        report = delete_episodes(root, [n], registry=reg if reg is not None else False)
    except EgopoolError as exc:
        outcome.message = (outcome.message + "; " if outcome.message else "") + f"not deleted: {exc.one_line()}"
        return False
    if not report.ok:
        outcome.message = (outcome.message + "; " if outcome.message else "") + "not fully deleted"
    return report.ok
