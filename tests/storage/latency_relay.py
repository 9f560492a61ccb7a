"""A TCP relay in front of a real S3 server that adds a fixed delay to every HTTP request (a real bucket's
latency on loopback, issue 25's benchmark) and counts the requests by method.

``LatencyRelay(target_port, delay_s=0.05)``: each request (recognised by its request line at the start of a
chunk the client sends) waits ``delay_s`` before it is forwarded; answers are relayed as they come. Clients keep
connections alive, so requests, not connections, are delayed and counted. Real sockets, a real server behind.
"""

from __future__ import annotations

import socket
import threading
import time

_METHODS = (b"GET /", b"PUT /", b"HEAD /", b"POST /", b"DELETE /")


class LatencyRelay:
    def __init__(self, target_port: int, delay_s: float = 0.05) -> None:
        self.target_port, self.delay_s = target_port, float(delay_s)
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(128)
        self.port = self.srv.getsockname()[1]
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LatencyRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.srv.close()
        self._thread.join(5)

    def requests(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def _accept(self) -> None:
        self.srv.settimeout(0.3)
        while not self._stop.is_set():
            try:
                client, _ = self.srv.accept()
            except OSError:
                continue
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def up() -> None:
            try:
                while True:
                    data = client.recv(1 << 16)
                    if not data:
                        break
                    n = 0
                    for m in _METHODS:
                        k = data.count(m)
                        if k:
                            n += k
                            with self._lock:
                                key = m.split()[0].decode()
                                self.counts[key] = self.counts.get(key, 0) + k
                    if n:
                        time.sleep(self.delay_s)
                    upstream.sendall(data)
            except OSError:
                pass
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        threading.Thread(target=up, daemon=True).start()
        try:
            while True:
                data = upstream.recv(1 << 16)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        for s in (client, upstream):
            try:
                s.close()
            except OSError:
                pass
