"""A TCP relay in front of a real S3 server that misbehaves on purpose (issue 24's bad-input cases).

``FaultyRelay(target_port, mode, after=K)``: the first ``K`` HTTP requests are relayed faithfully (clients keep
connections alive, so requests are counted, not connections); at the (K+1)-th, ``mode="stall"`` stops
answering on that connection (and answers no new connection), ``mode="close"`` relays the request and closes
the connection after the first 200 bytes of its answer (a mid-body close). Real sockets, a real server behind.
"""

from __future__ import annotations

import socket
import threading


class FaultyRelay:
    def __init__(self, target_port: int, mode: str, after: int = 0) -> None:
        assert mode in ("stall", "close")
        self.target_port, self.mode, self.after = target_port, mode, after
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.connections = 0
        self.requests = 0
        self.faulted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FaultyRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.srv.close()
        self._thread.join(5)
        for s in self._held:
            try:
                s.close()
            except OSError:
                pass

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self.srv.settimeout(0.3)
        while not self._stop.is_set():
            try:
                client, _ = self.srv.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(client)
            if self.mode == "stall" and self.faulted:
                continue  # stalled already: hold the socket, read nothing, answer nothing
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        self._held.append(upstream)

        cut = threading.Event()  # the answer now relayed is to be cut after 200 bytes

        def requests_in(data: bytes) -> None:
            n = sum(data.count(m) for m in (b"GET /", b"PUT /", b"HEAD /", b"POST /", b"DELETE /"))
            for _ in range(n):
                with self._lock:
                    self.requests += 1
                    fault = self.requests > self.after and not self.faulted
                    if fault:
                        self.faulted += 1
                if fault:
                    if self.mode == "stall":
                        raise _Stall
                    cut.set()

        def pump(a: socket.socket, b: socket.socket, upstream_side: bool) -> None:
            sent = 0
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    if not upstream_side:
                        requests_in(data)
                        b.sendall(data)
                        continue
                    if cut.is_set():
                        b.sendall(data[:max(0, 200 - sent)])
                        sent += len(data)
                        if sent >= 200:
                            break
                        continue
                    b.sendall(data)
            except _Stall:
                return  # hold both sockets open: the client waits for an answer that never comes
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

        threading.Thread(target=pump, args=(client, upstream, False), daemon=True).start()
        pump(upstream, client, True)


class _Stall(Exception):
    """Raised inside the relay to stop answering."""
