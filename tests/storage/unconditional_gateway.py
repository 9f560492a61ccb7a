"""An S3 gateway in front of a real SeaweedFS that ignores conditional writes, as ``rclone serve s3`` does.

Like such a gateway it terminates the client's request and makes its own: the ``If-None-Match`` /
``If-Match`` headers are dropped, and the request is signed anew (SigV4, botocore) with the same keys, so
the server behind sees an unconditional, correctly signed request. Everything else is relayed as is.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_DROPPED = {"if-none-match", "if-match", "authorization", "x-amz-date", "x-amz-content-sha256",
            "x-amz-security-token", "host", "content-length", "connection", "transfer-encoding"}


class UnconditionalGateway:
    """``with UnconditionalGateway(endpoint, access_key, secret_key, region) as g: g.endpoint`` is the gateway's URL;
    ``g.requests`` counts the requests it relayed."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str, region: str) -> None:
        self.target = urlsplit(endpoint)
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.requests = 0
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _relay(self) -> None:
                gateway.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, headers, data = gateway.forward(self.command, self.path, dict(self.headers.items()), body)
                self.send_response(status)
                length_of = dict((k.lower(), v) for k, v in headers).get("content-length", "0")
                for k, v in headers:
                    if k.lower() not in ("content-length", "connection", "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", length_of if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def forward(self, method: str, path: str, headers: dict[str, str],
                body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        kept = {k: v for k, v in headers.items() if k.lower() not in _DROPPED}
        url = f"{self.target.scheme}://{self.target.netloc}{path}"
        request = AWSRequest(method=method, url=url, data=body, headers=kept)
        S3SigV4Auth(Credentials(self.access_key, self.secret_key), "s3", self.region).add_auth(request)
        conn = http.client.HTTPConnection(self.target.hostname or "127.0.0.1", self.target.port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=dict(request.headers.items()))
            answer = conn.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            conn.close()

    def __enter__(self) -> UnconditionalGateway:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
