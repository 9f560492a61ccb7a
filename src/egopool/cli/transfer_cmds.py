"""``egopool pack`` / ``upload`` / ``serve`` / ``token``: moving episodes to a pooling server (file_format.md §9)."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn
from rich.table import Table

from ..errors import EgopoolError, install_hint
from ..transfer import client_identity, pack_episodes, upload_episodes
from ..transfer.client import UploadOutcome, UploadProgress
from .app import app
from .args import episode_argument
from .ops_cmds import _JSON, _REG, _TASK, _registry_hint
from .output import console, err_console, human_bytes, print_json
from .serve_checks import check_port, check_store_bucket, check_store_directory

token_app = typer.Typer(help="Access tokens of `egopool serve` (hashed at rest, with scopes).", no_args_is_help=True)
app.add_typer(token_app, name="token")

_INDICES = episode_argument("Global 1-based episode numbers (as `egopool ls` shows).", required=False)


@contextlib.contextmanager
def _byte_bar(label: str, enabled: bool) -> Iterator[UploadProgress | None]:
    """A bytes progress bar on stderr (None when stderr is not a terminal): one per ``what`` (pack), or one in
    total whose label follows ``what`` (upload: the run's bytes summed over the episodes in flight)."""
    if not (enabled and err_console.is_terminal):
        yield None
        return
    with Progress(TextColumn(f"{label} [bold]{{task.description}}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=err_console, transient=True) as bar:
        jobs: dict[str, TaskID] = {}

        def update(done: int, total: int, what: str) -> None:
            if label == "uploading":  # one bar for the run: the client sums the episodes in flight
                if "" not in jobs:
                    jobs[""] = bar.add_task(what, total=total)
                bar.update(jobs[""], completed=done, total=total, description=what)
                return
            job = jobs.get(what)
            if job is None:
                job = jobs[what] = bar.add_task(what, total=total)
            bar.update(job, completed=done, total=total)

        yield update


@app.command("pack", context_settings={"ignore_unknown_options": True})
def pack_cmd(task: Path = _TASK, indices: list[int] = episode_argument("Global 1-based episode numbers."),
             out: Path = typer.Option(..., "-o", "--out", help="Directory for the zips (created)."),
             reencode_hevc: bool = typer.Option(False, "--reencode-hevc",
                                                help="Re-encode RGB MP4 to HEVC (hvc1, CRF 30) inside the zip; depth "
                                                     "is never re-encoded."),
             json_out: bool = _JSON, registry: bool = _REG) -> None:
    """Pack episodes into upload zips, one per episode: the §9 single-episode slice plus a manifest.

    Arcnames are the pooled paths relative to the task (this episode's videos, data parquet and meta/episodes file, plus meta/info.json, stats.json, tasks.jsonl); a legacy shard is sliced to the episode's row. Streams: bounded memory for any episode size.
    """
    from ..transfer.pack import Packer

    checking = Packer(task, out, registry=False)  # every N first: a missing N must not leave a pipeline.db behind
    for n in indices:
        checking.episode(n)
    with _registry_hint(), _byte_bar("packing", not json_out) as cb:
        ident = client_identity(task, registry)
        if ident.notice:
            _note(ident.notice)
        packed = pack_episodes(task, indices, out, reencode_hevc=reencode_hevc, host_id=ident.host_id,
                               hostname=ident.hostname, progress=cb)
    if json_out:
        print_json({"task": str(task), "zips": [p.to_dict() for p in packed]})
        return
    for p in packed:
        note = f", {len(p.reencoded)} video(s) re-encoded to HEVC" if p.reencoded else ""
        console.print(f"episode {p.index} (chunk {p.chunk}, file {p.file}) -> {p.path} "
                      f"({human_bytes(p.size)}, {len(p.manifest.members)} members{note})")


def _note(line: str) -> None:
    """A one-line note on stderr (never wrapped: scripts grep it; stdout stays JSON with --json)."""
    print(f"egopool: note: {line}", file=sys.stderr, flush=True)


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise EgopoolError(f"cannot read the token file: {exc.strerror or exc}", path=token_file) from exc
        if not text:
            raise EgopoolError("the token file is empty", path=token_file)
        return text
    return os.environ.get("EGOPOOL_TOKEN") or None


@app.command("upload", context_settings={"ignore_unknown_options": True})
def upload_cmd(task: Path = _TASK, indices: list[int] | None = _INDICES,
               server: str = typer.Option(..., "--server", help="Server base URL, e.g. http://pool.lab:8000."),
               token_file: Path | None = typer.Option(None, "--token-file",
                                                      help="File holding the token (default: $EGOPOOL_TOKEN)."),
               reencode_hevc: bool = typer.Option(False, "--reencode-hevc",
                                                  help="Re-encode RGB MP4 to HEVC (hvc1, CRF 30) before sending."),
               delete_after: bool = typer.Option(False, "--delete-after",
                                                 help="Delete each episode locally once the server confirmed it by "
                                                      "checksum (the verified delete of `egopool delete`)."),
               retries: int = typer.Option(8, min=0, help="Retries of a network error or 5xx per episode."),
               timeout: float = typer.Option(600.0, min=1.0, help="Seconds to wait for the server's answer."),
               jobs: int = typer.Option(4, "--jobs", "-j",
                                        help="Episodes packed and sent at once (1 = one after the other); the "
                                             "first episode of a task not yet on the server goes alone."),
               temp_dir: Path | None = typer.Option(None, "--temp-dir",
                                                    help="Where zips are packed before sending (default: "
                                                         "~/.cache/egopool/upload, or $EGOPOOL_CACHE_DIR/upload); "
                                                         "never inside the recordings root."),
               json_out: bool = _JSON, registry: bool = _REG) -> None:
    """Upload episodes to a pooling server (`egopool serve`), resumably (file_format.md §9).

    Without N: every complete episode not yet uploaded to this server. The registry (pipeline.db) records each confirmed upload with the server's answer, so a re-run after a kill resumes where it stopped. Network errors and 5xx are retried with backoff. Up to --jobs episodes are in flight at once (one HTTP connection each); each is recorded and reported as soon as the server confirms it, and the JSON report lists them in N order. A refused token stops the run: no further episode is started, those in flight finish. Exit 1 when an episode is not confirmed. The recordings root's client key (in pipeline.db) identifies this PC to the server; a root copied to another PC says so in one line and uploads as its own client. Zips are packed outside the recordings root; a killed run's leftovers are removed by the next run.
    """
    if jobs < 1:
        raise EgopoolError(f"--jobs {jobs} refused: at least one episode must be in flight",
                           hint="pass --jobs 1 (one after the other) or more, e.g. --jobs 4")
    tok = _token(token_file)

    def show(o: UploadOutcome) -> None:
        if json_out:
            return
        colour = "green" if o.confirmed else "red"
        target = f" -> server episode {o.server_episode_index}" if o.server_episode_index is not None else ""
        deleted = {True: ", deleted locally", False: ", NOT deleted", None: ""}[o.deleted]
        console.print(f"episode {o.index}: [{colour}]{o.status}[/{colour}]{target}{deleted}"
                      f"{' (' + o.message + ')' if o.message else ''}")

    with _registry_hint(), _byte_bar("uploading", not json_out) as cb:
        report = upload_episodes(task, indices or None, server=server, token=tok, reencode_hevc=reencode_hevc,
                                 delete_after=delete_after, registry=registry, retries=retries, timeout=timeout,
                                 progress=cb, on_outcome=show, temp_dir=temp_dir,
                                 on_notice=_note, jobs=jobs)
    if json_out:
        print_json(report.to_dict())
    elif not report.outcomes:
        console.print("nothing to upload")
    if not report.ok:
        raise typer.Exit(1)


def _loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (OSError, ValueError):
        return False


@app.command("serve")
def serve_cmd(store: str = typer.Option(..., "--store", help="Store directory, or s3://bucket/prefix (endpoint and "
                                                              "credentials from the AWS_* variables): one pooled "
                                                              "task per upload name."),
              state: Path | None = typer.Option(None, "--state", help="With an s3:// store: the local directory for "
                                                                      "server.db, spool, staging and locks (default "
                                                                      "~/.local/state/egopool/serve/<hash of the URI>)."),
              host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
              port: int = typer.Option(8000, "--port", min=0, max=65535),
              tokens: Path | None = typer.Option(None, "--tokens",
                                                 help="Tokens file (`egopool token add`); required unless --host is "
                                                      "loopback."),
              on_conflict: str = typer.Option("renumber", "--on-conflict",
                                              help="An upload whose N the task already holds: renumber (next free N, "
                                                   "mapping recorded) or reject (409)."),
              max_upload_mb: float = typer.Option(8192.0, "--max-upload-mb", min=0.01,
                                                  help="Largest request body, and what one zip may unpack to in "
                                                       "staging, MiB."),
              max_ratio: float = typer.Option(100.0, "--max-ratio", min=1.0,
                                              help="Largest expansion of one zip member (above 1 MiB) and of a "
                                                   "parquet file when decoded."),
              max_zip_ratio: float = typer.Option(10.0, "--max-zip-ratio", min=1.0,
                                                  help="Largest expansion of a whole zip unpacking to more than "
                                                       "64 MiB (egopool zips store videos and parquet: ~1x)."),
              max_decode_mb: float = typer.Option(256.0, "--max-decode-mb", min=1.0,
                                                  help="What one import decodes at a time, MiB: each parquet row "
                                                       "group, its list-free columns, its footer (32x), 4 video "
                                                       "frames."),
              max_imports: int = typer.Option(2, "--max-imports", min=1,
                                              help="Uploads verified at the same time (each in its own "
                                                   "worker process), and groups of uploads published at the same "
                                                   "time (up to 4x as many uploads wait for them: the uploads "
                                                   "waiting for one task are published together)."),
              max_receiving: int = typer.Option(32, "--max-receiving", min=1,
                                                help="Upload bodies received at the same time (others wait unread)."),
              max_queue: int = typer.Option(256, "--max-queue", min=1,
                                            help="Uploads admitted at a time (received, queued for a verification "
                                                 "worker, being verified); one more is answered 503 with "
                                                 "Retry-After, which egopool upload waits."),
              max_connections: int = typer.Option(1024, "--max-connections", min=1,
                                                  help="Open connections; more are answered 503 (the client "
                                                       "retries)."),
              previews: bool = typer.Option(True, "--previews/--no-previews",
                                            help="Build browser previews (H.264 proxies, thumbnails, signals.json) "
                                                 "and quality facts of every published episode, in the background."),
              previews_dir: Path | None = typer.Option(None, "--previews-dir",
                                                       help="Where previews go (default: the store's "
                                                            ".egopool-server/previews; never inside a task)."),
              preview_workers: int = typer.Option(1, "--preview-workers", min=1,
                                                  help="Episodes whose previews are built at the same time."),
              ray: str | None = typer.Option(
                  None, "--ray", metavar="[ADDRESS]",
                  help="Verify each upload, and build each episode's previews, as one Ray task (pip install "
                       "'egopool\\[ray]'; a verification reads and writes the server's state directory by path: one "
                       "machine or a shared file system); the preview files come "
                       "back to this server's previews directory. ADDRESS: host:port of `ray start --head`, "
                       "ray://host:10001 (Ray Client), auto, or local; without it RAY_ADDRESS, else the latest local "
                       "cluster, else a private one. Workers read the store where the server does (a shared file "
                       "system, or the s3:// store with their own AWS_* variables)."),
              idle_frames: int = typer.Option(30, "--idle-frames", min=1,
                                              help="Quality facts: rows without motion of trajectories and grippers "
                                                   "that make an idle range."),
              log_level: str = typer.Option("info", "--log-level")) -> None:
    """Run the pooling importer server (FastAPI + uvicorn, from the optional extra 'server' of egopool).

    Each upload is verified completely (zip members, sizes, manifest checksums, format, episode_index, egopool's validator) before the store changes, then published atomically; info.json and stats.json are merged under the task lock. GET / is an HTML overview; /api/v1/... the JSON read API. Previews (H.264 proxies of every stream, depth colour-mapped, thumbnails, signals.json) and quality facts of each published episode are built in the background (--ray: one Ray task per episode; --no-previews: not at all); a failed preview never fails an import. Memory and scratch disk are bounded: per upload by the --max-* limits (a 413 names the option to raise), in total by --max-receiving and --max-imports. A new task, or a column or stream a task does not declare yet, needs a token that may declare it (scope declare:<task>, declare:* or upload:<task>).
    """
    if on_conflict not in ("renumber", "reject"):
        raise typer.BadParameter("use renumber or reject", param_hint="--on-conflict")
    if tokens is None and not _loopback(host):
        raise EgopoolError(f"refusing to serve {host} without --tokens: anyone on the network could upload",
                           hint="create tokens with `egopool token add --tokens FILE ...` and pass --tokens FILE")
    try:
        import uvicorn

        from ..curation.quality import QualityParams
        from ..server.app import ServerConfig, create_app
        from ..server.previews import PreviewConfig
        from ..server.zipcheck import Limits
    except ImportError as exc:
        raise EgopoolError(f"the server needs the optional packages of egopool[server] ({exc.name} is missing)",
                           hint=install_hint("server")) from exc
    limit = int(max_upload_mb * (1 << 20))
    limits = Limits(max_request_bytes=limit, max_member_bytes=limit, max_total_bytes=limit, max_ratio=max_ratio,
                    max_zip_ratio=max_zip_ratio, max_decode_bytes=int(max_decode_mb * (1 << 20)))
    check_port(host, port)  # before anything is written: a busy port left a new store behind (issue 28)
    bucket = store.startswith("s3://")
    if bucket:
        try:
            import boto3  # noqa: F401
        except ImportError as exc:
            raise EgopoolError("an s3:// store needs the optional packages of egopool[s3] (boto3 is missing)",
                               hint=install_hint("s3")) from exc
        from ..storage import as_path
        from ..storage.bucket import Bucket

        as_path(store)  # an empty / . / .. component is refused as the readers refuse it (O24)
        check_store_bucket(store)
        Bucket(store).ensure_bucket()  # name, endpoint and keys checked here, in one line, not in uvicorn's start-up
    if state is not None and not bucket:
        raise typer.BadParameter("--state is for an s3:// store (a directory store keeps its state in "
                                 "<store>/.egopool-server)", param_hint="--state")
    if not bucket:
        check_store_directory(Path(store))
    config = ServerConfig(store=store if bucket else Path(store), tokens=tokens, on_conflict=on_conflict,
                          limits=limits, max_imports=max_imports, max_receiving=max_receiving, state=state,
                          max_queue=max_queue, verify_ray=ray,
                          previews=PreviewConfig(enabled=previews, root=previews_dir, workers=preview_workers,
                                                 quality=QualityParams(idle_min_frames=idle_frames), ray=ray))
    web = create_app(config)
    where = store if bucket else Path(store).resolve()
    on_ray = "" if ray is None else f", {'verification and previews' if previews else 'verification'} on Ray at " \
                                    f"{ray or 'the default address'}"
    err_console.print(f"egopool serve: store {where}, http://{host}:{port}/, on conflict: {on_conflict}, "
                      f"{'tokens from ' + str(tokens) if tokens else 'no tokens (loopback only)'}{on_ray}")
    uvicorn.run(web, host=host, port=port, log_level=log_level, timeout_keep_alive=30,
                limit_concurrency=max_connections)


@token_app.command("add")
def token_add_cmd(tokens: Path = typer.Option(..., "--tokens", help="Tokens file (created)."),
                  token_id: str = typer.Option(..., "--id", help="A name for the token, e.g. lab-pc-3."),
                  scopes: list[str] = typer.Option(..., "--scope",
                                                   help="read, review, upload:*, upload:<task>, declare:* or "
                                                        "declare:<task> (may create the task and set its fps, "
                                                        "columns and streams); repeat for several."),
                  json_out: bool = _JSON) -> None:
    """Create a token; it is printed once, only its sha256 is stored."""
    from ..server.tokens import add_token

    token = add_token(tokens, token_id, scopes)
    if json_out:
        print_json({"id": token_id, "token": token, "scopes": scopes, "tokens_file": str(tokens)})
    else:
        console.print(token, markup=False, highlight=False)
        err_console.print(f"token {token_id!r} ({', '.join(scopes)}) added to {tokens}; it is shown only now")


@token_app.command("list")
def token_list_cmd(tokens: Path = typer.Option(..., "--tokens", help="Tokens file."), json_out: bool = _JSON) -> None:
    """List token ids and scopes (never the tokens)."""
    from ..server.tokens import TokenStore

    entries = TokenStore(tokens).tokens()
    if json_out:
        print_json({"tokens": [{"id": t.id, "scopes": list(t.scopes), "created_at": t.created_at} for t in entries]})
        return
    table = Table("id", "scopes")
    for t in entries:
        table.add_row(t.id, ", ".join(t.scopes))
    console.print(table)


@token_app.command("revoke")
def token_revoke_cmd(tokens: Path = typer.Option(..., "--tokens", help="Tokens file."),
                     token_id: str = typer.Option(..., "--id", help="The token's id.")) -> None:
    """Remove a token; a running server stops accepting it at once."""
    from ..server.tokens import revoke_token

    if not revoke_token(tokens, token_id):
        raise EgopoolError(f"no token with id {token_id!r}", path=tokens)
    console.print(f"revoked {token_id}")
